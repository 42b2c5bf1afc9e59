//! FL algorithms as the registry holds them ([`Algorithm`]s, their parameter types erased), and
//! an algorithm with its parameters read from an experiment file ([`AlgorithmChoice`]).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::component::Choice;
use super::params::{ParamInfo, Plugged, Read, WithParams, params_as_map, read_params};
use super::{Origin, Registered};
use crate::config::check::Problems;
use crate::strategy::{
    Algorithm, AsyncStrategy, ClientAlgorithm, EdgeAggregation, PersonalLayers, Reduction,
    Selector, ServerHalf, Setting, Strategy,
};

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
    /// Whether it runs in an asynchronous federation (it has an asynchronous server half).
    pub asynchronous: bool,
    /// The settings in which it gives another algorithm's results to the bit, its parameters
    /// as the experiment file's `strategy` section holds them.
    pub reductions: Vec<Reduction<Map<String, Value>>>,
    /// The crate that registered it.
    pub origin: Origin,
}

impl AlgorithmInfo {
    /// Whether it runs in an asynchronous federation, as `fedsim strategies` and the reference
    /// pages say it.
    pub fn asynchrony_described(&self) -> &'static str {
        match self.asynchronous {
            true => "yes, flat or under relaying schedulers",
            false => "no (synchronous rounds only)",
        }
    }

    pub(super) fn of(registered: &Registered<dyn AlgorithmEntry>) -> Self {
        let listing = &registered.listing;
        Self {
            name: listing.name,
            paper: listing.about,
            params: ParamInfo::list(listing.defaults.clone(), listing.param_docs),
            edge: registered.component.default_edge_rule(),
            asynchronous: registered.component.has_asynchronous(),
            reductions: registered.component.reductions(),
            origin: registered.origin.clone(),
        }
    }
}

/// An algorithm with its parameters read: what an experiment runs. Cheap to clone.
pub type AlgorithmChoice = Choice<dyn ChosenAlgorithm>;

impl AlgorithmChoice {
    /// How an aggregating scheduler may pre-combine its group's updates.
    pub fn edge_rule(&self) -> EdgeAggregation {
        self.chosen.edge_rule()
    }

    /// The server half, as it starts, for a model of `num_params` values.
    pub fn server(&self, setting: &Setting<'_>, num_params: usize) -> Box<dyn Strategy> {
        self.chosen.server(setting, num_params)
    }

    /// The asynchronous server half, as it starts, if the algorithm has one.
    pub fn asynchronous(
        &self,
        setting: &Setting<'_>,
        num_params: usize,
    ) -> Option<Box<dyn AsyncStrategy>> {
        self.chosen.asynchronous(setting, num_params)
    }

    /// The server half the experiment runs: the asynchronous one in an asynchronous federation
    /// (which validation let through only for an algorithm that has one).
    pub fn server_half(&self, setting: &Setting<'_>, num_params: usize) -> ServerHalf {
        match setting.concurrency {
            None => ServerHalf::Rounds(self.server(setting, num_params)),
            Some(_) => ServerHalf::Asynchronous(
                self.asynchronous(setting, num_params)
                    .expect("validation refuses an asynchronous federation without this half"),
            ),
        }
    }

    /// How the server chooses who trains, as it starts.
    pub fn selector(&self, setting: &Setting<'_>) -> Box<dyn Selector> {
        self.chosen.selector(setting)
    }

    /// The client half.
    pub fn client(&self, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        self.chosen.client(setting)
    }

    /// The layers that stay with each client.
    pub fn personal_layers(&self) -> PersonalLayers {
        self.chosen.personal_layers()
    }

    pub(super) fn check(&self, setting: &Setting<'_>, problems: &mut Problems) {
        self.chosen.check(setting, problems);
    }
}

/// A registered algorithm, its parameter type erased.
pub(super) trait AlgorithmEntry: Send + Sync {
    /// The algorithm with the parameters in `params` (the section without its name), and
    /// those parameters written back; a parameter that does not parse is (its field, the
    /// message).
    fn choose(&self, params: Map<String, Value>) -> Read<dyn ChosenAlgorithm>;
    /// Its edge rule with its default parameters.
    fn default_edge_rule(&self) -> EdgeAggregation;
    /// Whether it has an asynchronous server half, with its default parameters.
    fn has_asynchronous(&self) -> bool;
    /// Its reductions, their parameters as JSON.
    fn reductions(&self) -> Vec<Reduction<Map<String, Value>>>;
}

/// An algorithm with its parameters, their type erased: what [`AlgorithmChoice`] calls.
pub trait ChosenAlgorithm: Send + Sync {
    /// See [`Algorithm::check`].
    fn check(&self, setting: &Setting<'_>, problems: &mut Problems);
    /// See [`Algorithm::edge_rule`].
    fn edge_rule(&self) -> EdgeAggregation;
    /// See [`Algorithm::server`].
    fn server(&self, setting: &Setting<'_>, num_params: usize) -> Box<dyn Strategy>;
    /// See [`Algorithm::asynchronous`].
    fn asynchronous(
        &self,
        setting: &Setting<'_>,
        num_params: usize,
    ) -> Option<Box<dyn AsyncStrategy>>;
    /// See [`Algorithm::selector`].
    fn selector(&self, setting: &Setting<'_>) -> Box<dyn Selector>;
    /// See [`Algorithm::client`].
    fn client(&self, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm>;
    /// See [`Algorithm::personal_layers`].
    fn personal_layers(&self) -> PersonalLayers;
}

impl<A: Algorithm> AlgorithmEntry for Plugged<A> {
    fn choose(&self, params: Map<String, Value>) -> Read<dyn ChosenAlgorithm> {
        let params = read_params::<A::Params>(params)?;
        let written = params_as_map(self.0.name(), &params);
        Ok((Arc::new(self.with(params)), written))
    }

    fn default_edge_rule(&self) -> EdgeAggregation {
        self.0.edge_rule(&A::Params::default())
    }

    fn has_asynchronous(&self) -> bool {
        // A one-client federation: what the half is built for does not decide whether it exists.
        let setting = Setting::new(1, 0.1).with_concurrency(1);
        self.0
            .asynchronous(&A::Params::default(), &setting, 1)
            .is_some()
    }

    fn reductions(&self) -> Vec<Reduction<Map<String, Value>>> {
        self.0
            .reductions()
            .into_iter()
            .map(|reduction| Reduction {
                params: params_as_map(self.0.name(), &reduction.params),
                equals: reduction.equals,
                equal_clients: reduction.equal_clients,
                first_round_only: reduction.first_round_only,
                settings: reduction.settings,
            })
            .collect()
    }
}

impl<A: Algorithm> ChosenAlgorithm for WithParams<A, A::Params> {
    fn check(&self, setting: &Setting<'_>, problems: &mut Problems) {
        self.component.check(&self.params, setting, problems);
    }

    fn edge_rule(&self) -> EdgeAggregation {
        self.component.edge_rule(&self.params)
    }

    fn server(&self, setting: &Setting<'_>, num_params: usize) -> Box<dyn Strategy> {
        self.component.server(&self.params, setting, num_params)
    }

    fn asynchronous(
        &self,
        setting: &Setting<'_>,
        num_params: usize,
    ) -> Option<Box<dyn AsyncStrategy>> {
        self.component
            .asynchronous(&self.params, setting, num_params)
    }

    fn selector(&self, setting: &Setting<'_>) -> Box<dyn Selector> {
        self.component.selector(&self.params, setting)
    }

    fn client(&self, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        self.component.client(&self.params, setting)
    }

    fn personal_layers(&self) -> PersonalLayers {
        self.component.personal_layers(&self.params)
    }
}

#[cfg(test)]
mod tests {
    use crate::registry::Registry;

    #[test]
    fn every_documented_parameter_exists() {
        for registered in &Registry::builtin().algorithms {
            let listing = &registered.listing;
            let params = listing.defaults.clone().unwrap_or_default();
            for (name, _) in listing.param_docs {
                assert!(params.contains_key(*name), "{}.{name}", listing.name);
            }
        }
    }
}
