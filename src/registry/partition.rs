//! Partition schemes as the registry holds them ([`Partitioner`]s, their parameter types
//! erased), and a scheme with its parameters read from an experiment file
//! ([`PartitionChoice`]).

use std::path::Path;
use std::sync::Arc;

use rand_chacha::ChaCha12Rng;
use serde_json::{Map, Value};

use super::component::Choice;
use super::params::{Plugged, Read, WithParams, params_as_map, read_params};
use crate::config::check::Problems;
use crate::data::partition::PartitionError;
use crate::data::{ClientSplit, Partitioner, SplitContext, SplitInput};

/// A partition scheme with its parameters read: what an experiment splits its data with.
/// Cheap to clone.
pub type PartitionChoice = Choice<dyn ChosenPartition>;

impl PartitionChoice {
    /// Its parameters as a report shows them in brackets after the name.
    pub fn label(&self) -> Vec<String> {
        self.chosen.label()
    }

    /// Splits the training set, drawing from `rng`.
    pub fn split(
        &self,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        self.chosen.split(input, rng)
    }

    pub(super) fn draws(&self) -> bool {
        self.chosen.draws()
    }

    pub(super) fn check(&self, context: &SplitContext<'_>, problems: &mut Problems) {
        self.chosen.check(context, problems);
    }
}

/// A registered scheme, its parameter type erased.
pub(super) trait PartitionerEntry: Send + Sync {
    /// The scheme with the parameters in `params` (the section without its scheme and seed),
    /// paths made relative to `folder` where one is given, and those parameters written back;
    /// one that does not parse is (its field, the message).
    fn choose(
        &self,
        params: Map<String, Value>,
        folder: Option<&Path>,
    ) -> Read<dyn ChosenPartition>;
}

/// A scheme with its parameters, their type erased: what [`PartitionChoice`] calls.
pub trait ChosenPartition: Send + Sync {
    /// See [`Partitioner::label`].
    fn label(&self) -> Vec<String>;
    /// See [`Partitioner::draws`].
    fn draws(&self) -> bool;
    /// See [`Partitioner::check`].
    fn check(&self, context: &SplitContext<'_>, problems: &mut Problems);
    /// See [`Partitioner::split`].
    fn split(
        &self,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError>;
}

impl<P: Partitioner> PartitionerEntry for Plugged<P> {
    fn choose(
        &self,
        params: Map<String, Value>,
        folder: Option<&Path>,
    ) -> Read<dyn ChosenPartition> {
        let mut params = read_params::<P::Params>(params)?;
        if let Some(folder) = folder {
            self.0.resolve_paths(&mut params, folder);
        }
        let written = params_as_map(self.0.name(), &params);
        Ok((Arc::new(self.with(params)), written))
    }
}

impl<P: Partitioner> ChosenPartition for WithParams<P, P::Params> {
    fn label(&self) -> Vec<String> {
        self.component.label(&self.params)
    }

    fn draws(&self) -> bool {
        self.component.draws()
    }

    fn check(&self, context: &SplitContext<'_>, problems: &mut Problems) {
        self.component.check(&self.params, context, problems);
    }

    fn split(
        &self,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        self.component.split(&self.params, input, rng)
    }
}
