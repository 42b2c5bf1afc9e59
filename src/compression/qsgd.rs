//! QSGD (Alistarh, Grubic, Li, Tomioka and Vojnovic 2017, "QSGD: Communication-Efficient SGD
//! via Gradient Quantization and Encoding"): each value becomes its sign and one of `s + 1`
//! levels of the vector's L2 norm, rounded up or down at random so that the decoded vector's
//! expectation is the input. Encoding: the norm (`f32`), then per value a sign bit and the
//! level in `ceil(log2(s + 1))` bits, packed: fixed-width, not the paper's Elias code.

use rand::RngExt;
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::bits::{pack, packed_len, unpack};
use super::{Compressor, Malformed, expect_length, f32_at};
use crate::config::check::Problems;

/// QSGD.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qsgd;

/// QSGD's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Quantisation levels `s` (at least 1).
    pub levels: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self { levels: 16 }
    }
}

const DOCS: &[(&str, &str)] = &[("levels", "quantisation levels s of the norm, at least 1")];

/// Bits per value: a sign and a level of `0..=levels`.
fn width(levels: u32) -> u32 {
    1 + (u32::BITS - levels.leading_zeros())
}

impl Compressor for Qsgd {
    type Params = Params;

    fn name(&self) -> &'static str {
        "qsgd"
    }

    fn about(&self) -> &'static str {
        "signs and s stochastic levels of the L2 norm, unbiased (Alistarh et al. 2017)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        DOCS
    }

    fn check(&self, params: &Params, _values: usize, problems: &mut Problems) {
        problems.require((1..=1 << 20).contains(&params.levels), "levels", || {
            format!("is {}; must be between 1 and 1048576", params.levels)
        });
    }

    fn encode(&self, params: &Params, values: &[f32], rng: &mut ChaCha12Rng) -> Vec<u8> {
        let norm = values
            .iter()
            .map(|&v| f64::from(v).powi(2))
            .sum::<f64>()
            .sqrt() as f32;
        let s = f64::from(params.levels);
        // Levels of the norm as it travels, so that the decoded value's expectation is exact.
        let scale = if norm > 0.0 { s / f64::from(norm) } else { 0.0 };
        let codes = values.iter().map(|&value| {
            let level = (f64::from(value.abs()) * scale).min(s);
            let below = level.floor();
            let up = rng.random::<f64>() < level - below;
            let level = below as u32 + u32::from(up);
            level << 1 | u32::from(value < 0.0)
        });
        let mut bytes = norm.to_le_bytes().to_vec();
        bytes.extend(pack(codes, width(params.levels), values.len()));
        bytes
    }

    fn decode(&self, params: &Params, bytes: &[u8], len: usize) -> Result<Vec<f32>, Malformed> {
        let width = width(params.levels);
        expect_length(bytes, 4 + packed_len(len, width))?;
        let norm = f64::from(f32_at(bytes, 0)?);
        let s = f64::from(params.levels);
        unpack(&bytes[4..], width, len)
            .into_iter()
            .map(|code| {
                let level = code >> 1;
                if level > params.levels {
                    return Err(Malformed(format!("level {level} above {}", params.levels)));
                }
                let sign = if code & 1 == 1 { -1.0 } else { 1.0 };
                Ok((sign * norm * f64::from(level) / s) as f32)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rng, values};
    use super::*;

    #[test]
    fn four_levels_take_four_bits_a_value_and_the_norm() {
        let params = Params { levels: 4 };
        let bytes = Qsgd.encode(&params, &values(100), &mut rng(0));
        assert_eq!(bytes.len(), 4 + 100 * 4 / 8);
        let params = Params { levels: 16 };
        let bytes = Qsgd.encode(&params, &values(100), &mut rng(0));
        assert_eq!(bytes.len(), 4 + (100 * 6usize).div_ceil(8));
    }

    #[test]
    fn decoded_values_are_levels_of_the_norm_averaging_to_the_input() {
        let params = Params { levels: 4 };
        let input = values(10);
        let norm = input.iter().map(|v| v * v).sum::<f32>().sqrt();
        let mut mean = [0.0f64; 10];
        let mut stream = rng(5);
        let draws = 4000;
        for _ in 0..draws {
            let bytes = Qsgd.encode(&params, &input, &mut stream);
            let decoded = Qsgd.decode(&params, &bytes, 10).unwrap();
            for ((m, d), x) in mean.iter_mut().zip(&decoded).zip(&input) {
                let level = (d / norm * 4.0).abs();
                assert!((level - level.round()).abs() < 1e-4, "{d} is a level");
                assert!(d.signum() == x.signum() || *d == 0.0);
                *m += f64::from(*d) / f64::from(draws);
            }
        }
        for (m, x) in mean.iter().zip(input) {
            assert!((m - f64::from(x)).abs() < 0.01, "{m} against {x}");
        }
    }

    #[test]
    fn zero_is_zero_and_fewer_than_one_level_is_refused() {
        let params = Params { levels: 2 };
        let bytes = Qsgd.encode(&params, &[0.0; 5], &mut rng(0));
        assert_eq!(Qsgd.decode(&params, &bytes, 5).unwrap(), [0.0; 5]);
        let mut problems = Problems::new();
        Qsgd.check(&Params { levels: 0 }, 5, &mut problems);
        assert_eq!(problems.into_vec()[0].0, "levels");
    }
}
