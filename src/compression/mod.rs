//! Compressed updates: what a client's upload becomes on the wire when the experiment has a
//! `compression` section.
//!
//! A client encodes its change to the model it was sent (`Δ = w_k − w`) with the run's
//! [`Compressor`] into real bytes, which travel in the update's place
//! ([`crate::network::Update::encoded`]) and which the links count, so the simulated clock
//! charges what was really sent; the server decodes them and adds the decoded change to the
//! model it sent, so every algorithm that reads the clients' models reads them as usual. With
//! error feedback, the client keeps what the encoding lost (`e ← Δ + e − decode(encode(Δ +
//! e))`, Seide et al. 2014; Stich, Cordonnier and Jaggi 2018) in its state and adds it to its
//! next change.
//!
//! Each compressor is one file registered as a plug-in's would be: top-k and random-k
//! sparsification, QSGD, scaled sign, and 8- or 16-bit quantisation. Stochastic ones draw
//! from the client's stream for the round, so the bytes are the same on every rerun.

mod bits;
mod qsgd;
mod quantize;
mod randk;
mod sign;
mod topk;

use rand_chacha::ChaCha12Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::check::Problems;
use crate::seed::Purpose;

pub use qsgd::Qsgd;
pub use quantize::Quantize;
pub use randk::RandomK;
pub use sign::ScaledSign;
pub use topk::TopK;

/// The draws of a client's stochastic encoding (per round and edge round).
pub const ENCODING: Purpose = Purpose::new("compression");

/// The name under which a client with error feedback keeps what its encodings lost.
pub const RESIDUAL: &str = "compression_residual";

/// A way of encoding a vector of `f32` into fewer bytes: a compressor, with the parameters an
/// experiment file gives it beside its name (`{"name": "topk", "fraction": 0.01}`).
///
/// Encoding and decoding are real: [`Compressor::encode`]'s bytes are all the server gets,
/// and [`Compressor::decode`] must rebuild the vector from them alone (and the length).
pub trait Compressor: Send + Sync + 'static {
    /// The parameters: every field with a default and unknown fields rejected, as an
    /// algorithm's.
    type Params: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static;

    /// The `name` an experiment file gives.
    fn name(&self) -> &'static str;

    /// What it is, with the paper it follows, for `fedsim compressors`.
    fn about(&self) -> &'static str;

    /// What each parameter means, by field name.
    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// Adds to `problems` every rule the parameters break (fields relative to the section),
    /// for vectors of `values` values (the model's shared values).
    fn check(&self, _params: &Self::Params, _values: usize, _problems: &mut Problems) {}

    /// Why its loss may not be fed back, if it may not: error feedback needs a compressor
    /// whose output is a contraction of its input, which an unbiased random-k's scaled-up
    /// values are not.
    fn refuses_error_feedback(&self, _params: &Self::Params) -> Option<&'static str> {
        None
    }

    /// The bytes `values` encode to, drawing any randomness from `rng`.
    fn encode(&self, params: &Self::Params, values: &[f32], rng: &mut ChaCha12Rng) -> Vec<u8>;

    /// The vector of `len` values that `bytes` encode.
    fn decode(
        &self,
        params: &Self::Params,
        bytes: &[u8],
        len: usize,
    ) -> Result<Vec<f32>, Malformed>;
}

/// Bytes that are not an encoding of the length asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// Reads the little-endian `f32` at `at` of `bytes`.
fn f32_at(bytes: &[u8], at: usize) -> Result<f32, Malformed> {
    bytes
        .get(at..at + 4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("four bytes")))
        .ok_or_else(|| {
            Malformed(format!(
                "{} bytes end before the value at {at}",
                bytes.len()
            ))
        })
}

/// Checks that `bytes` hold exactly `expected` bytes.
fn expect_length(bytes: &[u8], expected: usize) -> Result<(), Malformed> {
    match bytes.len() == expected {
        true => Ok(()),
        false => Err(Malformed(format!(
            "{} bytes where the encoding takes {expected}",
            bytes.len()
        ))),
    }
}

/// How many of `len` values a `fraction` keeps: at least one.
fn kept(fraction: f64, len: usize) -> usize {
    ((fraction * len as f64).round() as usize).clamp(1, len.max(1))
}

#[cfg(test)]
pub(crate) mod testing {
    use rand::SeedableRng;
    use rand_chacha::ChaCha12Rng;

    /// A vector of `len` values of varied size and sign, none equal.
    pub fn values(len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013 + i as f32 * 1e-4)
            .collect()
    }

    /// The stream a test encodes with.
    pub fn rng(seed: u64) -> ChaCha12Rng {
        ChaCha12Rng::seed_from_u64(seed)
    }
}
