//! Model architectures as the registry holds them ([`Architecture`]s, their hyperparameter
//! types erased), and an architecture with its hyperparameters read from an experiment file
//! ([`ModelChoice`]).

use std::sync::Arc;

use burn::tensor::Device;
use serde_json::{Map, Value};

use super::component::Choice;
use super::params::{Plugged, Read, WithParams, params_as_map, read_params};
use crate::config::check::Problems;
use crate::data::{DataShape, SampleKind};
use crate::model::flat::{Layout, UnknownParam};
use crate::model::{Architecture, Net, ParamKind, ParamSite};

/// An architecture with its hyperparameters read: what an experiment trains. Cheap to clone.
pub type ModelChoice = Choice<dyn ChosenModel>;

impl ModelChoice {
    /// A network for data of `shape` on `device`; its parameter values are to be loaded.
    pub fn build(&self, shape: DataShape, device: &Device) -> Net {
        self.chosen.build(shape, device)
    }

    /// The parameter layout of its networks for data of `shape`.
    pub fn layout(&self, shape: DataShape) -> Result<Layout, UnknownParam> {
        let net = self.build(shape, &Device::flex());
        Layout::of(&net, &|site| self.chosen.param_kind(site))
    }

    /// Multiply-adds of one sample's forward pass through each dense and convolution layer,
    /// if the architecture says.
    pub fn multiply_adds(&self, shape: DataShape) -> Option<Vec<u64>> {
        self.chosen.multiply_adds(shape)
    }

    /// Adds to `problems` every rule the hyperparameters break for samples of `sample` (when
    /// known), and whether the architecture takes such samples at all (`fitting` names those
    /// that do).
    pub(super) fn check<'a>(
        &self,
        sample: Option<SampleKind>,
        fitting: impl Fn(SampleKind) -> Vec<&'a str>,
        problems: &mut Problems,
    ) {
        self.chosen.check(sample, problems);
        if let Some(sample) = sample
            && !self.chosen.takes(sample)
        {
            let names: Vec<String> = fitting(sample)
                .iter()
                .map(|name| format!("{name:?}"))
                .collect();
            let fitting = match names.split_last() {
                None => "none of the registered models takes them".to_string(),
                Some((last, [])) => format!("use {last}"),
                Some((last, rest)) => format!("use {} or {last}", rest.join(", ")),
            };
            problems.add(
                "name",
                format!(
                    "{:?} cannot take {}; {fitting}",
                    self.name(),
                    sample.describe()
                ),
            );
        }
    }
}

/// A registered architecture, its hyperparameter type erased.
pub(super) trait ModelEntry: Send + Sync {
    fn takes(&self, sample: SampleKind) -> bool;
    /// The architecture with the hyperparameters in `params` (the section without its name),
    /// and those hyperparameters written back; one that does not parse is (its field, the
    /// message).
    fn choose(&self, params: Map<String, Value>) -> Read<dyn ChosenModel>;
}

/// An architecture with its hyperparameters, their type erased: what [`ModelChoice`] calls.
pub trait ChosenModel: Send + Sync {
    /// See [`Architecture::takes`].
    fn takes(&self, sample: SampleKind) -> bool;
    /// See [`Architecture::check`].
    fn check(&self, sample: Option<SampleKind>, problems: &mut Problems);
    /// See [`Architecture::build`].
    fn build(&self, shape: DataShape, device: &Device) -> Net;
    /// See [`Architecture::param_kind`].
    fn param_kind(&self, site: &ParamSite<'_>) -> Option<(ParamKind, usize)>;
    /// See [`Architecture::multiply_adds`].
    fn multiply_adds(&self, shape: DataShape) -> Option<Vec<u64>>;
}

impl<A: Architecture> ModelEntry for Plugged<A> {
    fn takes(&self, sample: SampleKind) -> bool {
        self.0.takes(sample)
    }

    fn choose(&self, params: Map<String, Value>) -> Read<dyn ChosenModel> {
        let params = read_params::<A::Params>(params)?;
        let written = params_as_map(self.0.name(), &params);
        Ok((Arc::new(self.with(params)), written))
    }
}

impl<A: Architecture> ChosenModel for WithParams<A, A::Params> {
    fn takes(&self, sample: SampleKind) -> bool {
        self.component.takes(sample)
    }

    fn check(&self, sample: Option<SampleKind>, problems: &mut Problems) {
        self.component.check(&self.params, sample, problems);
    }

    fn build(&self, shape: DataShape, device: &Device) -> Net {
        self.component.build(&self.params, shape, device)
    }

    fn param_kind(&self, site: &ParamSite<'_>) -> Option<(ParamKind, usize)> {
        self.component.param_kind(site)
    }

    fn multiply_adds(&self, shape: DataShape) -> Option<Vec<u64>> {
        self.component.multiply_adds(&self.params, shape)
    }
}
