//! FL algorithms as the registry holds them ([`Algorithm`]s, their parameter types erased), and
//! an algorithm with its parameters read from an experiment file ([`AlgorithmChoice`]).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::params::{ParamInfo, Plugged, WithParams, params_as_map, read_params};
use super::{Origin, Registered};
use crate::config::check::Problems;
use crate::strategy::{Algorithm, ClientAlgorithm, EdgeAggregation, Reduction, Setting, Strategy};

/// An algorithm as the registry describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct AlgorithmInfo {
    /// The `name` to give in the experiment file.
    pub name: &'static str,
    /// The paper it follows.
    pub paper: &'static str,
    /// Its parameters with their defaults, in the order its docs list them (any undocumented
    /// one last).
    pub params: Vec<ParamInfo>,
    /// How an aggregating scheduler may pre-combine its group, with the default parameters.
    pub edge: EdgeAggregation,
    /// The settings in which it gives another algorithm's results to the bit, its parameters
    /// as the experiment file's `strategy` section holds them.
    pub reductions: Vec<Reduction<Map<String, Value>>>,
    /// The crate that registered it.
    pub origin: Origin,
}

impl AlgorithmInfo {
    pub(super) fn of(registered: &Registered<dyn AlgorithmEntry>) -> Self {
        let entry = &registered.component;
        let defaults = entry.defaults();
        let params = ParamInfo::list(defaults.params(), entry.param_docs());
        Self {
            name: entry.name(),
            paper: entry.paper(),
            params,
            edge: defaults.edge_rule(),
            reductions: entry.reductions(),
            origin: registered.origin.clone(),
        }
    }
}

/// An algorithm with its parameters read: what an experiment runs. Cheap to clone.
#[derive(Clone)]
pub struct AlgorithmChoice {
    chosen: Arc<dyn ChosenAlgorithm>,
    origin: Origin,
}

impl std::fmt::Debug for AlgorithmChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlgorithmChoice")
            .field("name", &self.name())
            .field("params", &self.chosen.params())
            .finish()
    }
}

impl AlgorithmChoice {
    pub(super) fn new(chosen: Arc<dyn ChosenAlgorithm>, origin: Origin) -> Self {
        Self { chosen, origin }
    }

    /// The algorithm's name.
    pub fn name(&self) -> &'static str {
        self.chosen.name()
    }

    /// The crate that registered it.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The parameters, every default filled in, as the experiment file's `strategy` section
    /// holds them beside the name.
    pub fn params(&self) -> Map<String, Value> {
        self.chosen.params()
    }

    /// How an aggregating scheduler may pre-combine its group's updates.
    pub fn edge_rule(&self) -> EdgeAggregation {
        self.chosen.edge_rule()
    }

    /// The server half, as it starts, for a model of `num_params` values.
    pub fn server(&self, setting: &Setting<'_>, num_params: usize) -> Box<dyn Strategy> {
        self.chosen.server(setting, num_params)
    }

    /// The client half.
    pub fn client(&self, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        self.chosen.client(setting)
    }
}

/// A registered algorithm, its parameter type erased.
pub(super) trait AlgorithmEntry: Send + Sync {
    fn name(&self) -> &'static str;
    fn paper(&self) -> &'static str;
    fn param_docs(&self) -> &'static [(&'static str, &'static str)];
    /// The algorithm with the parameters in `params` (the section without its name); a
    /// parameter that does not parse is (its field, the message).
    fn choose(
        &self,
        params: Map<String, Value>,
    ) -> Result<Arc<dyn ChosenAlgorithm>, (String, String)>;
    /// The algorithm with its default parameters.
    fn defaults(&self) -> Arc<dyn ChosenAlgorithm>;
    /// Its reductions, their parameters as JSON.
    fn reductions(&self) -> Vec<Reduction<Map<String, Value>>>;
}

/// An algorithm with its parameters, their type erased.
pub(super) trait ChosenAlgorithm: Send + Sync {
    fn name(&self) -> &'static str;
    fn params(&self) -> Map<String, Value>;
    fn check(&self, setting: &Setting<'_>, problems: &mut Problems);
    fn edge_rule(&self) -> EdgeAggregation;
    fn server(&self, setting: &Setting<'_>, num_params: usize) -> Box<dyn Strategy>;
    fn client(&self, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm>;
}

impl<A: Algorithm> AlgorithmEntry for Plugged<A> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn paper(&self) -> &'static str {
        self.0.paper()
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        self.0.param_docs()
    }

    fn choose(
        &self,
        params: Map<String, Value>,
    ) -> Result<Arc<dyn ChosenAlgorithm>, (String, String)> {
        Ok(Arc::new(self.with(read_params::<A::Params>(params)?)))
    }

    fn defaults(&self) -> Arc<dyn ChosenAlgorithm> {
        Arc::new(self.with(A::Params::default()))
    }

    fn reductions(&self) -> Vec<Reduction<Map<String, Value>>> {
        self.0
            .reductions()
            .into_iter()
            .map(|reduction| Reduction {
                params: self.with(reduction.params).params(),
                equals: reduction.equals,
                equal_clients: reduction.equal_clients,
                first_round_only: reduction.first_round_only,
            })
            .collect()
    }
}

impl<A: Algorithm> ChosenAlgorithm for WithParams<A, A::Params> {
    fn name(&self) -> &'static str {
        self.component.name()
    }

    fn params(&self) -> Map<String, Value> {
        params_as_map(self.name(), &self.params)
    }

    fn check(&self, setting: &Setting<'_>, problems: &mut Problems) {
        self.component.check(&self.params, setting, problems);
    }

    fn edge_rule(&self) -> EdgeAggregation {
        self.component.edge_rule(&self.params)
    }

    fn server(&self, setting: &Setting<'_>, num_params: usize) -> Box<dyn Strategy> {
        self.component.server(&self.params, setting, num_params)
    }

    fn client(&self, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        self.component.client(&self.params, setting)
    }
}

#[cfg(test)]
mod tests {
    use crate::registry::Registry;

    #[test]
    fn every_documented_parameter_exists() {
        for registered in &Registry::builtin().algorithms {
            let entry = &registered.component;
            let params = entry.defaults().params();
            for (name, _) in entry.param_docs() {
                assert!(params.contains_key(*name), "{}.{name}", entry.name());
            }
        }
    }
}
