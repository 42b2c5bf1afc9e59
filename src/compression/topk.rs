//! Top-k sparsification: only the `k` values of largest magnitude travel, each with its index
//! (Aji and Heafield 2017, "Sparse Communication for Distributed Gradient Descent"; with error
//! feedback, Stich, Cordonnier and Jaggi 2018, "Sparsified SGD with Memory"). Ties go to the
//! lower index. Encoding: `k` indices (`u32`) then their `k` values (`f32`), little-endian:
//! `8k` bytes.

use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::{Compressor, Malformed, expect_length, f32_at, kept};
use crate::config::check::Problems;

/// Top-k sparsification.
#[derive(Debug, Clone, Copy, Default)]
pub struct TopK;

/// Top-k's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The share of the values kept, rounded to a count of at least one.
    pub fraction: f64,
    /// The count kept, in place of `fraction`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            fraction: 0.01,
            k: None,
        }
    }
}

/// The count of `len` values that `params` keep.
pub(super) fn count(fraction: f64, k: Option<usize>, len: usize) -> usize {
    k.unwrap_or_else(|| kept(fraction, len))
}

/// Checks a sparsifier's `fraction` and `k` for vectors of `values` values.
pub(super) fn check_count(fraction: f64, k: Option<usize>, values: usize, problems: &mut Problems) {
    problems.require(fraction > 0.0 && fraction <= 1.0, "fraction", || {
        format!("is {fraction}; must be in (0, 1]")
    });
    if let Some(k) = k {
        problems.require((1..=values).contains(&k), "k", || {
            format!("is {k}; must be between 1 and the {values} values the model sends")
        });
    }
}

const DOCS: &[(&str, &str)] = &[
    (
        "fraction",
        "share of the values sent, those of largest magnitude",
    ),
    (
        "k",
        "number of values sent, in place of fraction (at most the model's)",
    ),
];

impl Compressor for TopK {
    type Params = Params;

    fn name(&self) -> &'static str {
        "topk"
    }

    fn about(&self) -> &'static str {
        "the k values of largest magnitude with their indices (Aji and Heafield 2017)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        DOCS
    }

    fn check(&self, params: &Params, values: usize, problems: &mut Problems) {
        check_count(params.fraction, params.k, values, problems);
    }

    fn encode(&self, params: &Params, values: &[f32], _rng: &mut ChaCha12Rng) -> Vec<u8> {
        let k = count(params.fraction, params.k, values.len());
        let mut order: Vec<u32> = (0..values.len() as u32).collect();
        let larger = |a: &u32, b: &u32| {
            let (x, y) = (values[*a as usize].abs(), values[*b as usize].abs());
            y.total_cmp(&x).then(a.cmp(b))
        };
        if k < order.len() {
            order.select_nth_unstable_by(k, larger);
            order.truncate(k);
        }
        order.sort_unstable();
        let mut bytes = Vec::with_capacity(8 * k);
        bytes.extend(order.iter().flat_map(|i| i.to_le_bytes()));
        bytes.extend(order.iter().flat_map(|&i| values[i as usize].to_le_bytes()));
        bytes
    }

    fn decode(&self, params: &Params, bytes: &[u8], len: usize) -> Result<Vec<f32>, Malformed> {
        let k = count(params.fraction, params.k, len);
        expect_length(bytes, 8 * k)?;
        let mut values = vec![0.0; len];
        for n in 0..k {
            let index = u32::from_le_bytes(bytes[4 * n..4 * n + 4].try_into().expect("4 bytes"));
            let slot = values
                .get_mut(index as usize)
                .ok_or_else(|| Malformed(format!("index {index} of {len} values")))?;
            *slot = f32_at(bytes, 4 * (k + n))?;
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rng, values};
    use super::*;

    #[test]
    fn keeps_the_largest_values_in_eight_bytes_each() {
        let params = Params {
            fraction: 0.5,
            k: None,
        };
        let input = [0.1, -3.0, 0.0, 2.0, -0.5, 0.4];
        let bytes = TopK.encode(&params, &input, &mut rng(0));
        assert_eq!(bytes.len(), 8 * 3);
        let decoded = TopK.decode(&params, &bytes, 6).unwrap();
        assert_eq!(decoded, [0.0, -3.0, 0.0, 2.0, -0.5, 0.0]);
    }

    #[test]
    fn ties_go_to_the_lower_index_and_k_overrides_the_fraction() {
        let params = Params {
            fraction: 0.9,
            k: Some(2),
        };
        let bytes = TopK.encode(&params, &[1.0, -1.0, 1.0, 0.5], &mut rng(0));
        let decoded = TopK.decode(&params, &bytes, 4).unwrap();
        assert_eq!(decoded, [1.0, -1.0, 0.0, 0.0]);
    }

    #[test]
    fn all_values_kept_decode_to_the_input_exactly() {
        let params = Params {
            fraction: 1.0,
            k: None,
        };
        let input = values(50);
        let bytes = TopK.encode(&params, &input, &mut rng(0));
        assert_eq!(TopK.decode(&params, &bytes, 50).unwrap(), input);
    }

    #[test]
    fn k_beyond_the_model_and_truncated_bytes_are_refused() {
        let mut problems = Problems::new();
        let params = Params {
            fraction: 0.01,
            k: Some(11),
        };
        TopK.check(&params, 10, &mut problems);
        assert_eq!(problems.into_vec()[0].0, "k");
        let bytes = TopK.encode(&Params::default(), &values(100), &mut rng(0));
        assert!(TopK.decode(&Params::default(), &bytes[1..], 100).is_err());
    }
}
