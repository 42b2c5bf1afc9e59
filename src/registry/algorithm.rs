//! FL algorithms as the registry holds them ([`Algorithm`]s, their parameter types erased), and
//! an algorithm with its parameters read from an experiment file ([`AlgorithmChoice`]).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Origin, Registered};
use crate::config::check::Problems;
use crate::strategy::{Algorithm, ClientAlgorithm, EdgeAggregation, Reduction, Setting, Strategy};

/// One parameter as `fedsim strategies` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    /// Its field name.
    pub name: String,
    /// Its default, as JSON.
    pub default: Value,
    /// What it means.
    pub doc: &'static str,
}

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
    pub(super) fn of(registered: &Registered<dyn Entry>) -> Self {
        let entry = &registered.component;
        let defaults = entry.defaults();
        let mut values = defaults.params();
        let mut params: Vec<ParamInfo> = entry
            .param_docs()
            .iter()
            .filter_map(|&(name, doc)| {
                let default = values.remove(name)?;
                Some(ParamInfo {
                    name: name.to_string(),
                    default,
                    doc,
                })
            })
            .collect();
        params.extend(values.into_iter().map(|(name, default)| ParamInfo {
            name,
            default,
            doc: "",
        }));
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
    chosen: Arc<dyn Chosen>,
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
    pub(super) fn new(chosen: Arc<dyn Chosen>, origin: Origin) -> Self {
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
pub(super) trait Entry: Send + Sync {
    fn name(&self) -> &'static str;
    fn paper(&self) -> &'static str;
    fn param_docs(&self) -> &'static [(&'static str, &'static str)];
    /// The algorithm with the parameters in `params` (the section without its name); a
    /// parameter that does not parse is (its field, the message).
    fn choose(&self, params: Map<String, Value>) -> Result<Arc<dyn Chosen>, (String, String)>;
    /// The algorithm with its default parameters.
    fn defaults(&self) -> Arc<dyn Chosen>;
    /// Its reductions, their parameters as JSON.
    fn reductions(&self) -> Vec<Reduction<Map<String, Value>>>;
}

/// An algorithm with its parameters, their type erased.
pub(super) trait Chosen: Send + Sync {
    fn name(&self) -> &'static str;
    fn params(&self) -> Map<String, Value>;
    fn check(&self, setting: &Setting<'_>, problems: &mut Problems);
    fn edge_rule(&self) -> EdgeAggregation;
    fn server(&self, setting: &Setting<'_>, num_params: usize) -> Box<dyn Strategy>;
    fn client(&self, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm>;
}

/// A plug-in as the registry holds it.
pub(super) struct Plugged<A>(pub Arc<A>);

/// A plug-in and parameters of its type.
struct WithParams<A: Algorithm> {
    algorithm: Arc<A>,
    params: A::Params,
}

impl<A: Algorithm> Plugged<A> {
    fn with(&self, params: A::Params) -> Arc<dyn Chosen> {
        Arc::new(WithParams {
            algorithm: self.0.clone(),
            params,
        })
    }
}

impl<A: Algorithm> Entry for Plugged<A> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn paper(&self) -> &'static str {
        self.0.paper()
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        self.0.param_docs()
    }

    fn choose(&self, params: Map<String, Value>) -> Result<Arc<dyn Chosen>, (String, String)> {
        let params: A::Params =
            serde_path_to_error::deserialize(Value::Object(params)).map_err(|error| {
                let field = error.path().to_string();
                let field = if field == "." { String::new() } else { field };
                let message = crate::config::explain(&error.into_inner().to_string());
                (field, message)
            })?;
        Ok(self.with(params))
    }

    fn defaults(&self) -> Arc<dyn Chosen> {
        self.with(A::Params::default())
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

impl<A: Algorithm> Chosen for WithParams<A> {
    fn name(&self) -> &'static str {
        self.algorithm.name()
    }

    fn params(&self) -> Map<String, Value> {
        match serde_json::to_value(&self.params) {
            Ok(Value::Object(fields)) => fields,
            Ok(Value::Null) => Map::new(),
            Ok(other) => panic!(
                "the parameters of {:?} must serialise as a JSON object, not {other}",
                self.name()
            ),
            Err(error) => panic!(
                "the parameters of {:?} do not serialise: {error}",
                self.name()
            ),
        }
    }

    fn check(&self, setting: &Setting<'_>, problems: &mut Problems) {
        self.algorithm.check(&self.params, setting, problems);
    }

    fn edge_rule(&self) -> EdgeAggregation {
        self.algorithm.edge_rule(&self.params)
    }

    fn server(&self, setting: &Setting<'_>, num_params: usize) -> Box<dyn Strategy> {
        self.algorithm.server(&self.params, setting, num_params)
    }

    fn client(&self, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        self.algorithm.client(&self.params, setting)
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
