//! Uniform 8- or 16-bit quantisation: each value rounded to the nearest of `2^b` evenly
//! spaced levels between the vector's least and greatest value (as QSGD's and signSGD's
//! papers compare against, and as TensorFlow Federated's uniform quantisation encodes).
//! Encoding: the least and greatest value (`f32`), then one `u8` or `u16` a value,
//! little-endian: `8 + d b / 8` bytes.

use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::{Compressor, Malformed, expect_length, f32_at};
use crate::config::check::Problems;

/// Uniform quantisation to 8 or 16 bits.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quantize;

/// Quantisation's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Bits a value: 8 or 16.
    pub bits: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self { bits: 8 }
    }
}

const DOCS: &[(&str, &str)] = &[("bits", "bits a value: 8 or 16")];

/// The highest level of `bits` bits.
fn top(bits: u32) -> f64 {
    f64::from((1u32 << bits) - 1)
}

impl Compressor for Quantize {
    type Params = Params;

    fn name(&self) -> &'static str {
        "quantize"
    }

    fn about(&self) -> &'static str {
        "each value rounded to one of 2^bits levels between the least and the greatest (8 or 16 bits)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        DOCS
    }

    fn check(&self, params: &Params, _values: usize, problems: &mut Problems) {
        problems.require(matches!(params.bits, 8 | 16), "bits", || {
            format!("is {}; must be 8 or 16", params.bits)
        });
    }

    fn encode(&self, params: &Params, values: &[f32], _rng: &mut ChaCha12Rng) -> Vec<u8> {
        let low = values.iter().copied().fold(f32::INFINITY, f32::min);
        let high = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let (low, high) = if values.is_empty() {
            (0.0, 0.0)
        } else {
            (low, high)
        };
        let span = f64::from(high) - f64::from(low);
        let step = if span > 0.0 {
            top(params.bits) / span
        } else {
            0.0
        };
        let mut bytes = low.to_le_bytes().to_vec();
        bytes.extend(high.to_le_bytes());
        for &value in values {
            let level = ((f64::from(value) - f64::from(low)) * step).round() as u32;
            match params.bits {
                8 => bytes.push(level as u8),
                _ => bytes.extend((level as u16).to_le_bytes()),
            }
        }
        bytes
    }

    fn decode(&self, params: &Params, bytes: &[u8], len: usize) -> Result<Vec<f32>, Malformed> {
        let width = params.bits as usize / 8;
        expect_length(bytes, 8 + width * len)?;
        let low = f64::from(f32_at(bytes, 0)?);
        let high = f64::from(f32_at(bytes, 4)?);
        let step = (high - low) / top(params.bits);
        Ok(bytes[8..]
            .chunks_exact(width)
            .map(|level| {
                let level = match width {
                    1 => f64::from(level[0]),
                    _ => f64::from(u16::from_le_bytes([level[0], level[1]])),
                };
                (low + level * step) as f32
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rng, values};
    use super::*;

    #[test]
    fn a_value_a_byte_or_two_within_half_a_level() {
        let input = values(300);
        let (low, high) = (-0.65f64, 0.68f64);
        for bits in [8, 16] {
            let params = Params { bits };
            let bytes = Quantize.encode(&params, &input, &mut rng(0));
            assert_eq!(bytes.len(), 8 + 300 * bits as usize / 8);
            let decoded = Quantize.decode(&params, &bytes, 300).unwrap();
            let half_level = (high - low) / top(bits) / 2.0 + 1e-6;
            for (d, x) in decoded.iter().zip(&input) {
                assert!(
                    f64::from((d - x).abs()) <= half_level,
                    "{bits} bits: {d} for {x}"
                );
            }
        }
    }

    #[test]
    fn the_extremes_and_a_constant_vector_come_back_exactly() {
        let params = Params::default();
        let bytes = Quantize.encode(&params, &[-2.0, 0.3, 5.0], &mut rng(0));
        let decoded = Quantize.decode(&params, &bytes, 3).unwrap();
        assert_eq!((decoded[0], decoded[2]), (-2.0, 5.0));
        let bytes = Quantize.encode(&params, &[0.25; 4], &mut rng(0));
        assert_eq!(Quantize.decode(&params, &bytes, 4).unwrap(), [0.25; 4]);
        let mut problems = Problems::new();
        Quantize.check(&Params { bits: 4 }, 3, &mut problems);
        assert_eq!(problems.into_vec()[0].0, "bits");
    }
}
