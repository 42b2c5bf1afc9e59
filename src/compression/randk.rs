//! Random-k sparsification: `k` values at indices drawn at random travel, the indices as the
//! 8-byte seed they are drawn from, which the server draws them from again (Stich, Cordonnier
//! and Jaggi 2018, "Sparsified SGD with Memory"; Konečný et al. 2016, "Federated Learning:
//! Strategies for Improving Communication Efficiency", for random masks sent as a seed).
//! Encoding: the seed (`u64`) and the `k` values (`f32`), little-endian: `8 + 4k` bytes.
//! Decoded as sent, or scaled by `n / k` to be unbiased.

use rand::seq::index;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::topk::{check_count, count};
use super::{Compressor, Malformed, expect_length, f32_at};
use crate::config::check::Problems;

/// Random-k sparsification.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomK;

/// Random-k's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The share of the values sent, rounded to a count of at least one.
    pub fraction: f64,
    /// The count sent, in place of `fraction`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
    /// Scale the values by `n / k` on decoding, so that the decoded vector's expectation is
    /// the input.
    pub unbiased: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            fraction: 0.01,
            k: None,
            unbiased: false,
        }
    }
}

const DOCS: &[(&str, &str)] = &[
    (
        "fraction",
        "share of the values sent, at indices drawn at random",
    ),
    (
        "k",
        "number of values sent, in place of fraction (at most the model's)",
    ),
    (
        "unbiased",
        "scale the values by n / k when decoding (an unbiased estimate; no error feedback)",
    ),
];

/// The `k` indices of `len` that `seed` draws, in increasing order.
fn indices(seed: u64, len: usize, k: usize) -> Vec<usize> {
    let mut drawn = index::sample(&mut ChaCha12Rng::seed_from_u64(seed), len, k).into_vec();
    drawn.sort_unstable();
    drawn
}

impl Compressor for RandomK {
    type Params = Params;

    fn name(&self) -> &'static str {
        "randk"
    }

    fn about(&self) -> &'static str {
        "k values at random indices, sent with the seed they are drawn from (Stich et al. 2018)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        DOCS
    }

    fn check(&self, params: &Params, values: usize, problems: &mut Problems) {
        check_count(params.fraction, params.k, values, problems);
    }

    fn refuses_error_feedback(&self, params: &Params) -> Option<&'static str> {
        params.unbiased.then_some(
            "unbiased random-k scales its values up by n / k, which error feedback cannot \
             correct: give unbiased false",
        )
    }

    fn encode(&self, params: &Params, values: &[f32], rng: &mut ChaCha12Rng) -> Vec<u8> {
        let k = count(params.fraction, params.k, values.len());
        let seed: u64 = rng.random();
        let mut bytes = Vec::with_capacity(8 + 4 * k);
        bytes.extend(seed.to_le_bytes());
        for i in indices(seed, values.len(), k) {
            bytes.extend(values[i].to_le_bytes());
        }
        bytes
    }

    fn decode(&self, params: &Params, bytes: &[u8], len: usize) -> Result<Vec<f32>, Malformed> {
        let k = count(params.fraction, params.k, len);
        expect_length(bytes, 8 + 4 * k)?;
        let seed = u64::from_le_bytes(bytes[..8].try_into().expect("eight bytes"));
        let scale = if params.unbiased {
            len as f64 / k as f64
        } else {
            1.0
        };
        let mut values = vec![0.0; len];
        for (n, i) in indices(seed, len, k).into_iter().enumerate() {
            values[i] = (f64::from(f32_at(bytes, 8 + 4 * n)?) * scale) as f32;
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rng, values};
    use super::*;

    #[test]
    fn sends_k_values_and_a_seed_the_server_draws_the_same_indices_from() {
        let params = Params {
            fraction: 0.1,
            ..Params::default()
        };
        let input = values(100);
        let bytes = RandomK.encode(&params, &input, &mut rng(3));
        assert_eq!(bytes.len(), 8 + 4 * 10);
        let decoded = RandomK.decode(&params, &bytes, 100).unwrap();
        let kept: Vec<usize> = (0..100).filter(|&i| decoded[i] != 0.0).collect();
        assert_eq!(kept.len(), 10);
        for i in kept {
            assert_eq!(decoded[i], input[i]);
        }
        assert_eq!(bytes, RandomK.encode(&params, &input, &mut rng(3)));
        assert_ne!(bytes, RandomK.encode(&params, &input, &mut rng(4)));
    }

    #[test]
    fn unbiased_values_average_to_the_input_over_draws() {
        let params = Params {
            fraction: 0.25,
            k: None,
            unbiased: true,
        };
        let input = values(8);
        let mut mean = [0.0f64; 8];
        let draws = 4000;
        let mut stream = rng(1);
        for _ in 0..draws {
            let bytes = RandomK.encode(&params, &input, &mut stream);
            let decoded = RandomK.decode(&params, &bytes, 8).unwrap();
            for (m, d) in mean.iter_mut().zip(decoded) {
                *m += f64::from(d) / f64::from(draws);
            }
        }
        for (m, x) in mean.iter().zip(input) {
            assert!((m - f64::from(x)).abs() < 0.05, "{m} against {x}");
        }
        assert!(RandomK.refuses_error_feedback(&params).is_some());
    }
}
