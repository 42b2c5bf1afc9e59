//! Model architectures as the registry holds them ([`Architecture`]s, their hyperparameter
//! types erased), and an architecture with its hyperparameters read from an experiment file
//! ([`ModelChoice`]).

use std::sync::Arc;

use burn::tensor::Device;
use serde_json::{Map, Value};

use super::params::{ParamInfo, Plugged, WithParams, params_as_map, read_params};
use super::{Origin, Registered};
use crate::config::check::Problems;
use crate::data::{DataShape, SampleKind};
use crate::model::flat::{Layout, UnknownParam};
use crate::model::{Architecture, Net, ParamKind, ParamSite};

/// A model architecture as the registry describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// The `name` to give in the experiment file.
    pub name: &'static str,
    /// What it is.
    pub about: &'static str,
    /// Its hyperparameters with their defaults.
    pub params: Vec<ParamInfo>,
    /// The crate that registered it.
    pub origin: Origin,
}

impl ModelInfo {
    pub(super) fn of(registered: &Registered<dyn ModelEntry>) -> Self {
        let entry = &registered.component;
        Self {
            name: entry.name(),
            about: entry.about(),
            params: ParamInfo::list(entry.defaults().params(), entry.param_docs()),
            origin: registered.origin.clone(),
        }
    }
}

/// An architecture with its hyperparameters read: what an experiment trains. Cheap to clone.
#[derive(Clone)]
pub struct ModelChoice {
    chosen: Arc<dyn ChosenModel>,
    origin: Origin,
}

impl std::fmt::Debug for ModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelChoice")
            .field("name", &self.name())
            .field("params", &self.params())
            .finish()
    }
}

impl ModelChoice {
    /// The architecture's name.
    pub fn name(&self) -> &'static str {
        self.chosen.name()
    }

    /// The crate that registered it.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The hyperparameters, every default filled in, as the experiment file's `model` section
    /// holds them beside the name.
    pub fn params(&self) -> Map<String, Value> {
        self.chosen.params()
    }

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
}

/// A registered architecture, its hyperparameter type erased.
pub(super) trait ModelEntry: Send + Sync {
    fn name(&self) -> &'static str;
    fn about(&self) -> &'static str;
    fn param_docs(&self) -> &'static [(&'static str, &'static str)];
    fn takes(&self, sample: SampleKind) -> bool;
    /// The architecture with the hyperparameters in `params` (the section without its name);
    /// one that does not parse is (its field, the message).
    fn choose(&self, params: Map<String, Value>) -> Result<Arc<dyn ChosenModel>, (String, String)>;
    fn defaults(&self) -> Arc<dyn ChosenModel>;
}

/// An architecture with its hyperparameters, their type erased.
pub(super) trait ChosenModel: Send + Sync {
    fn name(&self) -> &'static str;
    fn params(&self) -> Map<String, Value>;
    fn takes(&self, sample: SampleKind) -> bool;
    fn check(&self, sample: Option<SampleKind>, problems: &mut Problems);
    fn build(&self, shape: DataShape, device: &Device) -> Net;
    fn param_kind(&self, site: &ParamSite<'_>) -> Option<(ParamKind, usize)>;
    fn multiply_adds(&self, shape: DataShape) -> Option<Vec<u64>>;
}

impl<A: Architecture> ModelEntry for Plugged<A> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn about(&self) -> &'static str {
        self.0.about()
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        self.0.param_docs()
    }

    fn takes(&self, sample: SampleKind) -> bool {
        self.0.takes(sample)
    }

    fn choose(&self, params: Map<String, Value>) -> Result<Arc<dyn ChosenModel>, (String, String)> {
        Ok(Arc::new(self.with(read_params::<A::Params>(params)?)))
    }

    fn defaults(&self) -> Arc<dyn ChosenModel> {
        Arc::new(self.with(A::Params::default()))
    }
}

impl<A: Architecture> ChosenModel for WithParams<A, A::Params> {
    fn name(&self) -> &'static str {
        self.component.name()
    }

    fn params(&self) -> Map<String, Value> {
        params_as_map(self.name(), &self.params)
    }

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

impl ModelChoice {
    pub(super) fn new(chosen: Arc<dyn ChosenModel>, origin: Origin) -> Self {
        Self { chosen, origin }
    }

    /// Every rule the hyperparameters break for samples of `sample` (when known), and whether the
    /// architecture takes such samples at all (`fitting` names those that do), as (field under
    /// `model`, message).
    pub(super) fn problems(
        &self,
        sample: Option<SampleKind>,
        fitting: &[&str],
    ) -> Vec<(String, String)> {
        let mut problems = Problems::new();
        self.chosen.check(sample, &mut problems);
        if let Some(sample) = sample
            && !self.chosen.takes(sample)
        {
            let names: Vec<String> = fitting.iter().map(|name| format!("{name:?}")).collect();
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
        problems.into_vec()
    }
}
