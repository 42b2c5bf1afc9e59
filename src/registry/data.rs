//! Data sets as the registry holds them ([`DataSource`]s, their parameter types erased), and a
//! data set with its parameters read from an experiment file ([`DataChoice`]).

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::component::Choice;
use super::params::{Plugged, Read, WithParams, params_as_map, read_params};
use crate::config::check::Problems;
use crate::data::{ClientSource, DataContext, DataError, DataSource, SampleKind, TrainTest};

/// A data set with its parameters read: what an experiment loads. Cheap to clone.
pub type DataChoice = Choice<dyn ChosenData>;

impl DataChoice {
    /// What its samples are, if known before anything is read.
    pub fn sample_kind(&self) -> Option<SampleKind> {
        self.chosen.sample_kind()
    }

    /// Whether it defines its own clients.
    pub fn has_natural_clients(&self) -> bool {
        self.chosen.has_natural_clients()
    }

    /// Where the samples come from, as messages name it.
    pub fn describe(&self) -> String {
        self.chosen.describe()
    }

    /// Its clients made one at a time, if it makes them so.
    pub fn clients_on_demand(
        &self,
        context: &DataContext,
    ) -> Result<Option<Arc<dyn ClientSource>>, DataError> {
        self.chosen.clients_on_demand(context)
    }

    /// Reads or makes its training and test splits, and checks that every feature is a finite
    /// number (a NaN or infinite one trains to NaN), whichever reader gave them.
    pub fn load(&self, context: &DataContext) -> Result<TrainTest, DataError> {
        let data = self.chosen.load(context)?;
        for (split, dataset) in [("training", &data.train), ("test", &data.test)] {
            if let Some((sample, feature, value)) = dataset.first_non_finite() {
                return Err(DataError::Corrupt {
                    path: self.describe().into(),
                    reason: format!(
                        "holds {value} in {split} sample {sample}, feature {feature} (both counted from 0); features must be finite numbers"
                    ),
                });
            }
        }
        Ok(data)
    }

    pub(super) fn check(&self, context: &DataContext, problems: &mut Problems) {
        self.chosen.check(context, problems);
    }
}

/// A registered data set, its parameter type erased.
pub(super) trait DataEntry: Send + Sync {
    /// The data set with the parameters in `params` (the section without its name), paths
    /// made relative to `folder` where one is given, and those parameters written back; one
    /// that does not parse is (its field, the message).
    fn choose(&self, params: Map<String, Value>, folder: Option<&Path>) -> Read<dyn ChosenData>;
}

/// A data set with its parameters, their type erased: what [`DataChoice`] calls.
pub trait ChosenData: Send + Sync {
    /// See [`DataSource::sample_kind`].
    fn sample_kind(&self) -> Option<SampleKind>;
    /// See [`DataSource::has_natural_clients`].
    fn has_natural_clients(&self) -> bool;
    /// See [`DataSource::describe`].
    fn describe(&self) -> String;
    /// See [`DataSource::check`].
    fn check(&self, context: &DataContext, problems: &mut Problems);
    /// See [`DataSource::load`].
    fn load(&self, context: &DataContext) -> Result<TrainTest, DataError>;
    /// See [`DataSource::clients_on_demand`].
    fn clients_on_demand(
        &self,
        context: &DataContext,
    ) -> Result<Option<Arc<dyn ClientSource>>, DataError>;
}

impl<D: DataSource> DataEntry for Plugged<D> {
    fn choose(&self, params: Map<String, Value>, folder: Option<&Path>) -> Read<dyn ChosenData> {
        let mut params = read_params::<D::Params>(params)?;
        if let Some(folder) = folder {
            self.0.resolve_paths(&mut params, folder);
        }
        let written = params_as_map(self.0.name(), &params);
        Ok((Arc::new(self.with(params)), written))
    }
}

impl<D: DataSource> ChosenData for WithParams<D, D::Params> {
    fn sample_kind(&self) -> Option<SampleKind> {
        self.component.sample_kind(&self.params)
    }

    fn has_natural_clients(&self) -> bool {
        self.component.has_natural_clients(&self.params)
    }

    fn describe(&self) -> String {
        self.component.describe(&self.params)
    }

    fn check(&self, context: &DataContext, problems: &mut Problems) {
        self.component.check(&self.params, context, problems);
    }

    fn load(&self, context: &DataContext) -> Result<TrainTest, DataError> {
        self.component.load(&self.params, context)
    }

    fn clients_on_demand(
        &self,
        context: &DataContext,
    ) -> Result<Option<Arc<dyn ClientSource>>, DataError> {
        self.component.clients_on_demand(&self.params, context)
    }
}
