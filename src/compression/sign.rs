//! Sign compression: one bit a value, its sign. Scaled (the default), every value decodes to
//! the mean magnitude `‖x‖₁ / d` with its sign (Karimireddy, Rebjock, Stich and Jaggi 2019,
//! "Error Feedback Fixes SignSGD and other Gradient Compression Schemes", whose error feedback
//! this compressor is meant for); unscaled, to ±1, the vote of signSGD (Bernstein, Wang,
//! Azizzadenesheli and Anandkumar 2018, "signSGD: Compressed Optimisation for Non-Convex
//! Problems"), which the `signsgd` algorithm turns into its majority vote. Zero counts as
//! positive. Encoding: the scale (`f32`), then one bit a value (1 for negative): `4 + d/8`
//! bytes.

use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::bits::{pack, packed_len, unpack};
use super::{Compressor, Malformed, expect_length, f32_at};

/// Sign compression, scaled or not.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScaledSign;

/// Sign compression's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Decode to the mean magnitude with each sign, rather than to ±1.
    pub scaled: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self { scaled: true }
    }
}

const DOCS: &[(&str, &str)] = &[(
    "scaled",
    "decode to the mean magnitude ‖x‖₁/d with each sign (false: to ±1, signSGD's vote)",
)];

impl Compressor for ScaledSign {
    type Params = Params;

    fn name(&self) -> &'static str {
        "sign"
    }

    fn about(&self) -> &'static str {
        "one bit a value, scaled by the mean magnitude (Karimireddy et al. 2019) or not (signSGD)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        DOCS
    }

    fn refuses_error_feedback(&self, params: &Params) -> Option<&'static str> {
        (!params.scaled).then_some(
            "unscaled signs are votes of magnitude 1, not estimates of the change: give scaled \
             true for error feedback",
        )
    }

    fn encode(&self, params: &Params, values: &[f32], _rng: &mut ChaCha12Rng) -> Vec<u8> {
        let scale = match params.scaled && !values.is_empty() {
            true => values.iter().map(|&v| f64::from(v.abs())).sum::<f64>() / values.len() as f64,
            false => 1.0,
        } as f32;
        let mut bytes = scale.to_le_bytes().to_vec();
        bytes.extend(pack(
            values.iter().map(|&v| u32::from(v < 0.0)),
            1,
            values.len(),
        ));
        bytes
    }

    fn decode(&self, _params: &Params, bytes: &[u8], len: usize) -> Result<Vec<f32>, Malformed> {
        expect_length(bytes, 4 + packed_len(len, 1))?;
        let scale = f32_at(bytes, 0)?;
        Ok(unpack(&bytes[4..], 1, len)
            .into_iter()
            .map(|negative| if negative == 1 { -scale } else { scale })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::rng;
    use super::*;

    #[test]
    fn one_bit_a_value_decoding_to_the_mean_magnitude_with_its_sign() {
        let input = [0.5, -1.5, 0.0, 2.0, -1.0];
        let params = Params::default();
        let bytes = ScaledSign.encode(&params, &input, &mut rng(0));
        assert_eq!(bytes.len(), 4 + 1);
        let decoded = ScaledSign.decode(&params, &bytes, 5).unwrap();
        assert_eq!(decoded, [1.0, -1.0, 1.0, 1.0, -1.0]);
        let votes = Params { scaled: false };
        let bytes = ScaledSign.encode(&votes, &[0.5, -0.25], &mut rng(0));
        assert_eq!(ScaledSign.decode(&votes, &bytes, 2).unwrap(), [1.0, -1.0]);
        assert!(ScaledSign.refuses_error_feedback(&votes).is_some());
    }
}
