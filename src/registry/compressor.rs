//! Compressors as the registry holds them ([`Compressor`]s, their parameter types erased),
//! and a compressor with its parameters read from an experiment file ([`CompressorChoice`]).

use std::sync::Arc;

use rand_chacha::ChaCha12Rng;
use serde_json::{Map, Value};

use super::component::Choice;
use super::params::{Plugged, Read, WithParams, params_as_map, read_params};
use crate::compression::{Compressor, Malformed};
use crate::config::check::Problems;

/// A compressor with its parameters read: what a run encodes its uploads with. Cheap to clone.
pub type CompressorChoice = Choice<dyn ChosenCompressor>;

impl CompressorChoice {
    /// The bytes `values` encode to, drawing from `rng`.
    pub fn encode(&self, values: &[f32], rng: &mut ChaCha12Rng) -> Vec<u8> {
        self.chosen.encode(values, rng)
    }

    /// The `len` values that `bytes` encode.
    pub fn decode(&self, bytes: &[u8], len: usize) -> Result<Vec<f32>, Malformed> {
        self.chosen.decode(bytes, len)
    }

    /// Adds the rules its parameters break for vectors of `values` values.
    pub fn check(&self, values: usize, problems: &mut Problems) {
        self.chosen.check(values, problems);
    }

    /// Why its loss may not be fed back, if it may not.
    pub fn refuses_error_feedback(&self) -> Option<&'static str> {
        self.chosen.refuses_error_feedback()
    }
}

/// How a run compresses its uploads: the compressor, and whether each client feeds its loss
/// back into its next change.
#[derive(Debug, Clone)]
pub struct UplinkCompression {
    /// The compressor.
    pub compressor: CompressorChoice,
    /// Whether each client keeps what its encoding lost and adds it to its next change.
    pub error_feedback: bool,
}

/// A registered compressor, its parameter type erased.
pub(super) trait CompressorEntry: Send + Sync {
    /// The compressor with the parameters in `params`, and those parameters written back.
    fn choose(&self, params: Map<String, Value>) -> Read<dyn ChosenCompressor>;
}

/// A compressor with its parameters, their type erased: what [`CompressorChoice`] calls.
pub trait ChosenCompressor: Send + Sync {
    /// See [`Compressor::check`].
    fn check(&self, values: usize, problems: &mut Problems);
    /// See [`Compressor::refuses_error_feedback`].
    fn refuses_error_feedback(&self) -> Option<&'static str>;
    /// See [`Compressor::encode`].
    fn encode(&self, values: &[f32], rng: &mut ChaCha12Rng) -> Vec<u8>;
    /// See [`Compressor::decode`].
    fn decode(&self, bytes: &[u8], len: usize) -> Result<Vec<f32>, Malformed>;
}

impl<C: Compressor> CompressorEntry for Plugged<C> {
    fn choose(&self, params: Map<String, Value>) -> Read<dyn ChosenCompressor> {
        let params = read_params::<C::Params>(params)?;
        let written = params_as_map(self.0.name(), &params);
        Ok((Arc::new(self.with(params)), written))
    }
}

impl<C: Compressor> ChosenCompressor for WithParams<C, C::Params> {
    fn check(&self, values: usize, problems: &mut Problems) {
        self.component.check(&self.params, values, problems);
    }

    fn refuses_error_feedback(&self) -> Option<&'static str> {
        self.component.refuses_error_feedback(&self.params)
    }

    fn encode(&self, values: &[f32], rng: &mut ChaCha12Rng) -> Vec<u8> {
        self.component.encode(&self.params, values, rng)
    }

    fn decode(&self, bytes: &[u8], len: usize) -> Result<Vec<f32>, Malformed> {
        self.component.decode(&self.params, bytes, len)
    }
}
