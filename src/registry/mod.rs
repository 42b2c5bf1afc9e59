//! What an experiment file can name, and who provides it.
//!
//! A [`Registry`] is built once, by an explicit [`RegistryBuilder`], in a fixed order: nothing
//! registers itself at link time. fedsim's built-ins go through the same public calls as a
//! user's plug-ins ([`RegistryBuilder::with_builtins`] is an ordinary list of them), so a
//! plug-in has exactly the power of a built-in. A name can be registered once; a second
//! registration of it, a user's or a built-in's, is an error at registration.
//!
//! ```
//! use fedsim::registry::Registry;
//!
//! let registry = Registry::builtin();
//! assert!(registry.algorithm("scaffold").is_some());
//! ```

mod algorithm;
mod builtins;
mod model;
mod params;

pub use algorithm::{AlgorithmChoice, AlgorithmInfo};
pub use model::{ModelChoice, ModelInfo};
pub use params::ParamInfo;

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::check::Problems;
use crate::config::{
    Catalogue, ConfigError, ExperimentConfig, FieldError, ModelConfig, SchedulerMode,
    StrategyConfig, TopologyConfig,
};
use crate::data::SampleKind;
use crate::model::Architecture;
use crate::strategy::{Algorithm, EdgeAggregation, Setting};
use algorithm::AlgorithmEntry;
use model::ModelEntry;

/// The crate that registers a component, and its version: recorded in a run's manifest, so
/// that a run says which plug-ins made it. [`origin!`](crate::origin) gives the calling
/// crate's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The crate's name (`CARGO_PKG_NAME`).
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// Its version (`CARGO_PKG_VERSION`).
    pub version: String,
}

impl Origin {
    /// The crate `name` at `version`.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            crate_name: name.to_string(),
            version: version.to_string(),
        }
    }

    /// fedsim itself, for its built-ins.
    pub fn fedsim() -> Self {
        crate::origin!()
    }
}

/// The calling crate as an [`Origin`]: its name and version, read where the macro is written.
#[macro_export]
macro_rules! origin {
    () => {
        $crate::registry::Origin::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
    };
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The name is taken.
    #[error(
        "the {kind} {name:?} is registered already (by {by} {version}); give yours another name"
    )]
    Duplicate {
        /// What kind of component (`algorithm`).
        kind: &'static str,
        /// The name.
        name: String,
        /// The crate that registered it first.
        by: String,
        /// That crate's version.
        version: String,
    },
    /// The name cannot be written in an experiment file as the other names are.
    #[error(
        "the {kind} name {name:?} must be lowercase letters, digits, _ and - (starting with a letter)"
    )]
    BadName {
        /// What kind of component.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// Nothing says which crate registers the component.
    #[error(
        "say which crate registers the {kind} {name:?} first: builder.origin(fedsim::origin!())"
    )]
    NoOrigin {
        /// What kind of component.
        kind: &'static str,
        /// The name.
        name: String,
    },
}

/// The catalogue an experiment file's names are looked up in. Cheap to clone.
#[derive(Clone, Default)]
pub struct Registry {
    algorithms: Vec<Registered<dyn AlgorithmEntry>>,
    models: Vec<Registered<dyn ModelEntry>>,
}

/// A component and the crate that registered it.
struct Registered<T: ?Sized> {
    component: Arc<T>,
    origin: Origin,
}

impl<T: ?Sized> Clone for Registered<T> {
    fn clone(&self) -> Self {
        Self {
            component: self.component.clone(),
            origin: self.origin.clone(),
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let algorithms: Vec<&str> = self.algorithms.iter().map(|a| a.component.name()).collect();
        let models: Vec<&str> = self.models.iter().map(|m| m.component.name()).collect();
        f.debug_struct("Registry")
            .field("algorithms", &algorithms)
            .field("models", &models)
            .finish()
    }
}

impl Registry {
    /// An empty builder.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// fedsim's built-ins and nothing else: what the `fedsim` binary runs with.
    pub fn builtin() -> Registry {
        Self::builder().with_builtins().build()
    }

    /// The algorithm registered as `name`.
    pub fn algorithm(&self, name: &str) -> Option<AlgorithmInfo> {
        self.find_algorithm(name).map(AlgorithmInfo::of)
    }

    /// Every algorithm, in registration order.
    pub fn algorithms(&self) -> Vec<AlgorithmInfo> {
        self.algorithms.iter().map(AlgorithmInfo::of).collect()
    }

    /// The algorithm `section` names, with its parameters read, defaults filled in and
    /// checked against `setting`. Errors are (field under `strategy`, message).
    pub fn choose_algorithm(
        &self,
        section: &StrategyConfig,
        setting: &Setting<'_>,
    ) -> Result<AlgorithmChoice, Vec<(String, String)>> {
        let Some(registered) = self.find_algorithm(&section.name) else {
            let names = self.algorithms.iter().map(|a| a.component.name());
            return Err(vec![unknown(&section.name, names, "strategies")]);
        };
        let choice = registered
            .component
            .choose(section.params.clone())
            .map_err(|error| vec![error])?;
        let mut problems = Problems::new();
        choice.check(setting, &mut problems);
        if problems.is_empty() {
            Ok(AlgorithmChoice::new(choice, registered.origin.clone()))
        } else {
            Err(problems.into_vec())
        }
    }

    fn find_algorithm(&self, name: &str) -> Option<&Registered<dyn AlgorithmEntry>> {
        self.algorithms.iter().find(|a| a.component.name() == name)
    }

    /// The architecture registered as `name`.
    pub fn model(&self, name: &str) -> Option<ModelInfo> {
        self.find_model(name).map(ModelInfo::of)
    }

    /// Every architecture, in registration order.
    pub fn models(&self) -> Vec<ModelInfo> {
        self.models.iter().map(ModelInfo::of).collect()
    }

    /// The architecture `section` names, with its hyperparameters read, defaults filled in and
    /// checked, for samples of `sample` where they are known. Errors are (field under `model`,
    /// message).
    pub fn choose_model(
        &self,
        section: &ModelConfig,
        sample: Option<SampleKind>,
    ) -> Result<ModelChoice, Vec<(String, String)>> {
        let Some(registered) = self.find_model(&section.name) else {
            let names = self.models.iter().map(|m| m.component.name());
            return Err(vec![unknown(&section.name, names, "models")]);
        };
        let chosen = registered
            .component
            .choose(section.params.clone())
            .map_err(|error| vec![error])?;
        let choice = ModelChoice::new(chosen, registered.origin.clone());
        let fitting: Vec<&str> = match sample {
            Some(sample) => self
                .models
                .iter()
                .filter(|m| m.component.takes(sample))
                .map(|m| m.component.name())
                .collect(),
            None => Vec::new(),
        };
        let problems = choice.problems(sample, &fitting);
        if problems.is_empty() {
            Ok(choice)
        } else {
            Err(problems)
        }
    }

    fn find_model(&self, name: &str) -> Option<&Registered<dyn ModelEntry>> {
        self.models.iter().find(|m| m.component.name() == name)
    }
}

/// The message for a `name` nothing registered among `names`, worded as serde words an
/// unknown variant, so that the nearest name is suggested alike; `listing` is the command
/// that lists them (`fedsim strategies`).
fn unknown<'a>(
    name: &str,
    names: impl Iterator<Item = &'a str>,
    listing: &str,
) -> (String, String) {
    let names: Vec<String> = names.map(|name| format!("`{name}`")).collect();
    let message = format!(
        "unknown variant `{name}`, expected one of {} (`fedsim {listing}` lists them)",
        names.join(", ")
    );
    ("name".to_string(), crate::config::explain(&message))
}

impl Catalogue for Registry {
    /// Reads the `strategy` section (its algorithm's parameters, defaults filled in, checked
    /// alone, with the rest of the experiment, and against the topology) and the `model`
    /// section (its architecture's hyperparameters, checked against the data set's samples
    /// where they are known before its files are read).
    fn resolve(&self, config: &mut ExperimentConfig) -> Vec<(String, String)> {
        let setting = Setting {
            client: &config.client,
            federation: &config.federation,
        };
        let mut problems = match self.choose_algorithm(&config.strategy, &setting) {
            Ok(choice) => {
                config.strategy.params = choice.params();
                edge_problem(&choice, &config.topology)
                    .into_iter()
                    .collect()
            }
            Err(problems) => within_section("strategy", problems),
        };
        match self.choose_model(&config.model, config.data.sample_kind()) {
            Ok(choice) => config.model.params = choice.params(),
            Err(found) => problems.extend(within_section("model", found)),
        }
        problems
    }
}

impl Registry {
    /// The algorithm `config` names, with its parameters: what an experiment built in code
    /// (not loaded through [`ExperimentConfig::load`]) is checked with.
    pub fn algorithm_for(&self, config: &ExperimentConfig) -> Result<AlgorithmChoice, ConfigError> {
        let setting = Setting {
            client: &config.client,
            federation: &config.federation,
        };
        self.choose_algorithm(&config.strategy, &setting)
            .map_err(|problems| ConfigError::Invalid {
                path: PathBuf::new(),
                errors: within_section("strategy", problems)
                    .into_iter()
                    .map(|(path, message)| FieldError {
                        path,
                        message,
                        set_by: None,
                    })
                    .collect(),
            })
    }
}

/// Problems of a section's fields, their paths made whole (`mu` in `strategy`).
fn within_section(section: &str, problems: Vec<(String, String)>) -> Vec<(String, String)> {
    problems
        .into_iter()
        .map(|(field, message)| (within(section, &field), message))
        .collect()
}

/// `section.field`, or `section` for the section as a whole.
fn within(section: &str, field: &str) -> String {
    if field.is_empty() {
        section.to_string()
    } else {
        format!("{section}.{field}")
    }
}

/// Why the algorithm cannot run under aggregating schedulers as the topology asks, if it
/// cannot.
fn edge_problem(choice: &AlgorithmChoice, topology: &TopologyConfig) -> Option<(String, String)> {
    let TopologyConfig::Hierarchical {
        mode: SchedulerMode::Aggregate,
        edge_rounds,
        ..
    } = *topology
    else {
        return None;
    };
    let name = choice.name();
    match choice.edge_rule() {
        EdgeAggregation::Unsupported(reason) => Some((
            "strategy.name".to_string(),
            format!(
                "{name:?} cannot run under aggregating schedulers ({reason}); use topology.mode \"relay\" or the flat topology"
            ),
        )),
        EdgeAggregation::Mean {
            several_edge_rounds: false,
            ..
        } if edge_rounds > 1 => Some((
            "topology.edge_rounds".to_string(),
            format!(
                "is {edge_rounds}; {name:?} sends more than a model up, so an aggregating scheduler can run only 1 edge round"
            ),
        )),
        EdgeAggregation::Mean { .. } => None,
    }
}

/// Builds a [`Registry`]: components are registered one by one, each under the crate set by
/// the last [`RegistryBuilder::origin`].
#[derive(Default)]
pub struct RegistryBuilder {
    registry: Registry,
    origin: Option<Origin>,
}

impl RegistryBuilder {
    /// Registers fedsim's built-ins, in the order `fedsim strategies` lists them, through the
    /// same calls a plug-in uses.
    pub fn with_builtins(mut self) -> Self {
        self.origin(Origin::fedsim());
        builtins::register(&mut self).expect("the built-ins' names are distinct");
        self.origin = None;
        self
    }

    /// Says which crate registers the components that follow: [`origin!`](crate::origin).
    pub fn origin(&mut self, origin: Origin) -> &mut Self {
        self.origin = Some(origin);
        self
    }

    /// Registers an algorithm under its [`Algorithm::name`].
    pub fn algorithm(&mut self, algorithm: impl Algorithm) -> Result<&mut Self, RegistryError> {
        let name = algorithm.name();
        let taken = self.registry.find_algorithm(name).map(|a| &a.origin);
        let origin = self.check_name("algorithm", name, taken)?;
        self.registry.algorithms.push(Registered {
            component: Arc::new(params::Plugged(Arc::new(algorithm))),
            origin,
        });
        Ok(self)
    }

    /// Registers a model architecture under its [`Architecture::name`].
    pub fn model(&mut self, architecture: impl Architecture) -> Result<&mut Self, RegistryError> {
        let name = architecture.name();
        let taken = self.registry.find_model(name).map(|m| &m.origin);
        let origin = self.check_name("model", name, taken)?;
        self.registry.models.push(Registered {
            component: Arc::new(params::Plugged(Arc::new(architecture))),
            origin,
        });
        Ok(self)
    }

    /// The finished catalogue.
    pub fn build(self) -> Registry {
        self.registry
    }

    /// The origin to register `name` under, if the name is well formed and not `taken` (by
    /// the crate of that origin).
    fn check_name(
        &self,
        kind: &'static str,
        name: &str,
        taken: Option<&Origin>,
    ) -> Result<Origin, RegistryError> {
        let well_formed = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c));
        if !well_formed {
            return Err(RegistryError::BadName {
                kind,
                name: name.to_string(),
            });
        }
        if let Some(taken) = taken {
            return Err(RegistryError::Duplicate {
                kind,
                name: name.to_string(),
                by: taken.crate_name.clone(),
                version: taken.version.clone(),
            });
        }
        self.origin.clone().ok_or_else(|| RegistryError::NoOrigin {
            kind,
            name: name.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::{EdgeAggregation, PlainClient, Strategy};

    /// A plug-in that is FedAvg under another name.
    struct Renamed(&'static str);

    impl Algorithm for Renamed {
        type Params = crate::strategy::NoParams;

        fn name(&self) -> &'static str {
            self.0
        }

        fn paper(&self) -> &'static str {
            "none"
        }

        fn edge_rule(&self, _params: &Self::Params) -> EdgeAggregation {
            EdgeAggregation::Unsupported("a test plug-in")
        }

        fn server(&self, _: &Self::Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
            Box::new(crate::strategy::FedAvgServer)
        }

        fn client(
            &self,
            _: &Self::Params,
            _: &Setting<'_>,
        ) -> Arc<dyn crate::strategy::ClientAlgorithm> {
            Arc::new(PlainClient)
        }
    }

    #[test]
    fn a_taken_name_a_bad_name_or_no_origin_is_refused_at_registration() {
        let mut builder = Registry::builder().with_builtins();
        let error = builder.algorithm(Renamed("mine")).err().unwrap();
        assert_eq!(
            error.to_string(),
            "say which crate registers the algorithm \"mine\" first: builder.origin(fedsim::origin!())"
        );
        builder.origin(Origin::new("mine", "0.1.0"));
        let error = builder.algorithm(Renamed("scaffold")).err().unwrap();
        assert!(
            error
                .to_string()
                .starts_with("the algorithm \"scaffold\" is registered already (by fedsim "),
            "{error}"
        );
        assert!(matches!(
            builder.algorithm(Renamed("My-Rule")),
            Err(RegistryError::BadName { .. })
        ));
        builder.algorithm(Renamed("mine")).unwrap();
        let error = builder.algorithm(Renamed("mine")).err().unwrap();
        assert_eq!(
            error.to_string(),
            "the algorithm \"mine\" is registered already (by mine 0.1.0); give yours another name"
        );
        let registry = builder.build();
        let names: Vec<&str> = registry.algorithms().iter().map(|a| a.name).collect();
        assert_eq!(names.len(), 14);
        assert_eq!((names[0], names[13]), ("fedavg", "mine"));
        assert_eq!(
            registry.algorithm("mine").unwrap().origin.crate_name,
            "mine"
        );
    }

    /// The parts of an experiment the algorithms see, for the tests.
    fn setting_parts() -> (crate::config::ClientConfig, crate::config::FederationConfig) {
        let client = serde_json::from_str(r#"{"lr": 0.1}"#).unwrap();
        let federation =
            serde_json::from_str(r#"{"num_clients": 10, "clients_per_round": 5, "rounds": 1}"#)
                .unwrap();
        (client, federation)
    }

    #[test]
    fn every_builtin_parameter_is_documented() {
        for algorithm in Registry::builtin().algorithms() {
            for param in &algorithm.params {
                assert!(!param.doc.is_empty(), "{}.{}", algorithm.name, param.name);
            }
        }
    }

    #[test]
    fn parameters_take_defaults_and_unknown_ones_are_rejected() {
        let registry = Registry::builtin();
        let (client, federation) = setting_parts();
        let setting = Setting {
            client: &client,
            federation: &federation,
        };
        let section: StrategyConfig =
            serde_json::from_str(r#"{"name": "fedadam", "beta1": 0.5}"#).unwrap();
        let choice = registry.choose_algorithm(&section, &setting).unwrap();
        let params = choice.params();
        assert_eq!(
            (params["beta1"].as_f64(), params["beta2"].as_f64()),
            (Some(0.5), Some(0.99))
        );
        for (text, field, expected) in [
            (
                r#"{"name": "fedadam", "beta3": 1}"#,
                "beta3",
                "unknown field `beta3`",
            ),
            (r#"{"name": "fedavg", "mu": 1}"#, "mu", "unknown field `mu`"),
            (
                r#"{"name": "fedprox", "mu": "a"}"#,
                "mu",
                "invalid type: string",
            ),
        ] {
            let section: StrategyConfig = serde_json::from_str(text).unwrap();
            let errors = registry.choose_algorithm(&section, &setting).err().unwrap();
            assert_eq!(errors[0].0, field, "{text}");
            assert!(errors[0].1.contains(expected), "{text}: {}", errors[0].1);
        }
    }

    #[test]
    fn models_are_registered_and_chosen_as_algorithms_are() {
        let mut builder = Registry::builder().with_builtins();
        builder.origin(Origin::new("mine", "0.1.0"));
        let error = builder.model(crate::model::CnnModel).err().unwrap();
        assert!(
            error
                .to_string()
                .starts_with("the model \"cnn\" is registered already (by fedsim "),
            "{error}"
        );
        let registry = builder.build();
        let names: Vec<&str> = registry.models().iter().map(|m| m.name).collect();
        assert_eq!(
            names,
            ["mlp", "logistic", "cnn", "cifar-cnn", "resnet", "lstm"]
        );
        let section: ModelConfig = serde_json::from_str(r#""resnet""#).unwrap();
        let choice = registry.choose_model(&section, None).unwrap();
        assert_eq!(
            serde_json::Value::Object(choice.params()),
            serde_json::json!({"depth": 20, "groups": 2})
        );
        let errors = registry
            .choose_model(&ModelConfig::named("cnnn"), None)
            .err()
            .unwrap();
        assert_eq!(errors[0].0, "name");
        assert!(
            errors[0].1.contains("(`fedsim models` lists them)")
                && errors[0].1.ends_with("did you mean \"cnn\"?"),
            "{}",
            errors[0].1
        );
        let tokens = Some(SampleKind::Tokens);
        let errors = registry
            .choose_model(&ModelConfig::named("cnn"), tokens)
            .err()
            .unwrap();
        assert_eq!(
            errors,
            [(
                "name".to_string(),
                "\"cnn\" cannot take sequences of characters; use \"lstm\"".to_string()
            )]
        );
        let section: ModelConfig =
            serde_json::from_str(r#"{"name": "mlp", "hidden": [10, 0], "depth": 3}"#).unwrap();
        let errors = registry.choose_model(&section, None).err().unwrap();
        assert_eq!(errors[0].0, "depth");
        let section: ModelConfig =
            serde_json::from_str(r#"{"name": "mlp", "hidden": [10, 0]}"#).unwrap();
        let errors = registry.choose_model(&section, None).err().unwrap();
        assert_eq!(errors[0].0, "hidden[1]");
    }

    #[test]
    fn an_unknown_algorithm_gets_the_nearest_name() {
        let registry = Registry::builtin();
        let section = StrategyConfig::named("fedprx");
        let (client, federation) = setting_parts();
        let setting = Setting {
            client: &client,
            federation: &federation,
        };
        let errors = registry.choose_algorithm(&section, &setting).err().unwrap();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, "name");
        assert!(
            errors[0].1.ends_with("did you mean \"fedprox\"?"),
            "{}",
            errors[0].1
        );
    }
}
