//! What an experiment file's `data` section names: a [`DataSource`], registered as fedsim's own
//! data sets are ([`crate::registry::RegistryBuilder::data_set`]), so that a user's data set,
//! read from their files or made in their code, runs with every part of fedsim.

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{ClientSource, DataError, SampleKind, TrainTest};
use crate::config::check::Problems;

/// A data set an experiment file can name, with its parameters beside the name:
/// `{"dataset": "mnist", "normalize": "standard"}`.
pub trait DataSource: Send + Sync + 'static {
    /// The parameters, unknown fields rejected (`#[serde(deny_unknown_fields)]`); a field
    /// without a default is required.
    type Params: Serialize + DeserializeOwned + Clone + Send + Sync + 'static;

    /// The `dataset` an experiment file gives: lowercase letters, digits, `_` and `-`.
    fn name(&self) -> &'static str;

    /// What it is and where it comes from, in a line, for `fedsim datasets`.
    fn about(&self) -> &'static str;

    /// What each parameter means, by field name.
    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// What its samples are, if that is known before anything is read (arrays may hold images
    /// or rows): the model is checked against it when the experiment is loaded, and otherwise
    /// once the data is.
    fn sample_kind(&self, params: &Self::Params) -> Option<SampleKind>;

    /// Whether it defines its own clients ([`TrainTest::natural`]), for the `natural`
    /// partition.
    fn has_natural_clients(&self, _params: &Self::Params) -> bool {
        false
    }

    /// Makes the relative paths among the parameters relative to `folder`, the experiment
    /// file's, so that the resolved experiment works from anywhere.
    fn resolve_paths(&self, _params: &mut Self::Params, _folder: &Path) {}

    /// Adds to `problems` every rule the parameters break (fields relative to the `data`
    /// section), with the federation `context` describes.
    fn check(&self, _params: &Self::Params, _context: &DataContext, _problems: &mut Problems) {}

    /// Reads or makes the training and test splits, with the clients it defines if it does
    /// and the files it read (for the manifest).
    fn load(&self, params: &Self::Params, context: &DataContext) -> Result<TrainTest, DataError>;

    /// Its clients made one at a time, each when it is sampled, rather than the whole data set
    /// loaded up front: what lets a federation of a million clients run in a few hundred MB.
    /// `None` (the default) loads it whole with [`load`](Self::load). Where a source gives
    /// them, a `natural` partition reads its clients from here; each client must hold exactly
    /// the samples `load` gives it, in the same order, so that both ways train to the same
    /// bits. An error is one in the files it opens to list its clients.
    fn clients_on_demand(
        &self,
        _params: &Self::Params,
        _context: &DataContext,
    ) -> Result<Option<Arc<dyn ClientSource>>, DataError> {
        Ok(None)
    }

    /// Where the samples come from, as messages name it: "the mnist data set" by default.
    fn describe(&self, _params: &Self::Params) -> String {
        format!("the {} data set", self.name())
    }
}

/// What a data set may depend on besides its own parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataContext {
    /// `federation.num_clients`: how many clients a data set that makes its own makes.
    pub num_clients: usize,
    /// The experiment seed, for data generated from it.
    pub seed: u64,
    /// The seed of the data's splits (the partition's own seed, else the experiment's): test
    /// rows drawn from a single table.
    pub split_seed: u64,
}
