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
mod component;
mod compressor;
mod data;
mod model;
mod params;
mod partition;

pub use algorithm::{AlgorithmChoice, AlgorithmInfo};
pub use component::{Choice, ComponentInfo};
pub use compressor::{ChosenCompressor, CompressorChoice, UplinkCompression};
pub use data::DataChoice;
pub use model::ModelChoice;
pub use params::ParamInfo;
pub use partition::PartitionChoice;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::compression::Compressor;
use crate::config::check::Problems;
use crate::config::{
    Catalogue, ConfigError, DataConfig, ExperimentConfig, FieldError, ModelConfig, NamedSection,
    PartitionConfig, SchedulerMode, StrategyConfig, TopologyConfig,
};
use crate::data::{DataContext, DataSource, Partitioner, SampleKind, SplitContext};
use crate::model::Architecture;
use crate::strategy::{Algorithm, EdgeAggregation, PrivateServer, SecureServer, Setting};
use algorithm::AlgorithmEntry;
use component::Listing;
use compressor::CompressorEntry;
use data::DataEntry;
use model::ModelEntry;
use partition::PartitionerEntry;

pub use crate::output::manifest::Origin;

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
        "the {kind} name {name:?} must be lowercase letters, digits, _ and - (starting with a \
         letter)"
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
    data_sets: Vec<Registered<dyn DataEntry>>,
    partitioners: Vec<Registered<dyn PartitionerEntry>>,
    compressors: Vec<Registered<dyn CompressorEntry>>,
}

/// A component, what the registry lists of it, and the crate that registered it.
struct Registered<T: ?Sized> {
    component: Arc<T>,
    listing: Listing,
    origin: Origin,
}

impl<T: ?Sized> Clone for Registered<T> {
    fn clone(&self) -> Self {
        Self {
            component: self.component.clone(),
            listing: self.listing.clone(),
            origin: self.origin.clone(),
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn names<T: ?Sized>(list: &[Registered<T>]) -> Vec<&str> {
            list.iter().map(|r| r.listing.name).collect()
        }
        f.debug_struct("Registry")
            .field("algorithms", &names(&self.algorithms))
            .field("models", &names(&self.models))
            .field("data_sets", &names(&self.data_sets))
            .field("schemes", &names(&self.partitioners))
            .field("compressors", &names(&self.compressors))
            .finish()
    }
}

/// The component registered in `list` as `name`.
fn find<'a, T: ?Sized>(list: &'a [Registered<T>], name: &str) -> Option<&'a Registered<T>> {
    list.iter().find(|r| r.listing.name == name)
}

/// A section of the experiment file that names a registered component.
struct Section {
    /// Its name in the file (`strategy`).
    name: &'static str,
    /// The field that names the component (`name`).
    key: &'static str,
    /// The command that lists the components it can name (`fedsim strategies`).
    listing: &'static str,
}

const STRATEGY: Section = Section {
    name: "strategy",
    key: "name",
    listing: "strategies",
};
const MODEL: Section = Section {
    name: "model",
    key: "name",
    listing: "models",
};
const DATA: Section = Section {
    name: "data",
    key: "dataset",
    listing: "datasets",
};
const PARTITION: Section = Section {
    name: "partition",
    key: "scheme",
    listing: "schemes",
};
const UPLINK_COMPRESSOR: Section = Section {
    name: "compression.uplink",
    key: "name",
    listing: "compressors",
};

/// The component of `list` that `name`, given in `section`, names, with its parameters read
/// by `read`; or the problem, with its whole path, of a name nothing registered or of a
/// parameter that does not parse.
fn read_choice<T: ?Sized, C: ?Sized>(
    list: &[Registered<T>],
    section: &Section,
    name: &str,
    read: impl FnOnce(&T) -> params::Read<C>,
) -> Result<Choice<C>, Vec<(String, String)>> {
    let Some(registered) = find(list, name) else {
        let names = list.iter().map(|r| r.listing.name);
        return Err(unknown(section, name, names));
    };
    let (chosen, params) =
        read(&registered.component).map_err(|error| unreadable(section, error))?;
    Ok(Choice::new(chosen, params, registered))
}

/// `choice` if `check`, run at `section`, finds no problem, else the problems with their whole
/// paths.
fn checked<T>(
    choice: T,
    section: &Section,
    check: impl FnOnce(&T, &mut Problems),
) -> Result<T, Vec<(String, String)>> {
    let mut problems = Problems::new();
    problems.at(section.name, |p| check(&choice, p));
    if problems.is_empty() {
        Ok(choice)
    } else {
        Err(problems.into_vec())
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
        find(&self.algorithms, name).map(AlgorithmInfo::of)
    }

    /// Every algorithm, in registration order.
    pub fn algorithms(&self) -> Vec<AlgorithmInfo> {
        self.algorithms.iter().map(AlgorithmInfo::of).collect()
    }

    /// The algorithm `section` names, with its parameters read, defaults filled in and
    /// checked against `setting`. Errors are (field path, as `strategy.mu`, message).
    pub fn choose_algorithm(
        &self,
        section: &StrategyConfig,
        setting: &Setting<'_>,
    ) -> Result<AlgorithmChoice, Vec<(String, String)>> {
        let choice = read_choice(&self.algorithms, &STRATEGY, &section.name, |entry| {
            entry.choose(section.params.clone())
        })?;
        checked(choice, &STRATEGY, |choice, p| choice.check(setting, p))
    }

    /// The architecture registered as `name`.
    pub fn model(&self, name: &str) -> Option<ComponentInfo> {
        find(&self.models, name).map(ComponentInfo::of)
    }

    /// Every architecture, in registration order.
    pub fn models(&self) -> Vec<ComponentInfo> {
        self.models.iter().map(ComponentInfo::of).collect()
    }

    /// The architecture `section` names, with its hyperparameters read, defaults filled in and
    /// checked, for samples of `sample` where they are known. Errors are (field path, as
    /// `model.hidden`, message).
    pub fn choose_model(
        &self,
        section: &ModelConfig,
        sample: Option<SampleKind>,
    ) -> Result<ModelChoice, Vec<(String, String)>> {
        let choice = read_choice(&self.models, &MODEL, &section.name, |entry| {
            entry.choose(section.params.clone())
        })?;
        let fitting = |sample| -> Vec<&str> {
            let takes = self.models.iter().filter(|m| m.component.takes(sample));
            takes.map(|m| m.listing.name).collect()
        };
        checked(choice, &MODEL, |choice, p| choice.check(sample, fitting, p))
    }

    /// The data set registered as `name`.
    pub fn data_set(&self, name: &str) -> Option<ComponentInfo> {
        find(&self.data_sets, name).map(ComponentInfo::of)
    }

    /// Every data set, in registration order.
    pub fn data_sets(&self) -> Vec<ComponentInfo> {
        self.data_sets.iter().map(ComponentInfo::of).collect()
    }

    /// The data set `section` names, with its parameters read, defaults filled in, paths made
    /// relative to `folder` where one is given, and checked for the federation `context`
    /// describes. Errors are (field path, as `data.dir`, message).
    pub fn choose_data(
        &self,
        section: &DataConfig,
        folder: Option<&Path>,
        context: &DataContext,
    ) -> Result<DataChoice, Vec<(String, String)>> {
        let choice = read_choice(&self.data_sets, &DATA, &section.dataset, |entry| {
            entry.choose(section.params.clone(), folder)
        })?;
        checked(choice, &DATA, |choice, p| choice.check(context, p))
    }

    /// The partition scheme registered as `name`.
    pub fn scheme(&self, name: &str) -> Option<ComponentInfo> {
        find(&self.partitioners, name).map(ComponentInfo::of)
    }

    /// Every partition scheme, in registration order.
    pub fn schemes(&self) -> Vec<ComponentInfo> {
        self.partitioners.iter().map(ComponentInfo::of).collect()
    }

    /// Every compressor, in registration order.
    pub fn compressors(&self) -> Vec<ComponentInfo> {
        self.compressors.iter().map(ComponentInfo::of).collect()
    }

    /// The uplink compressor `section` names, with its parameters read and defaults filled
    /// in, checked for vectors of `values` values (`usize::MAX` while the model's size is not
    /// known, which leaves the rules that depend on it to the run). Errors are (field path, as
    /// `compression.uplink.k`, message).
    pub fn choose_compressor(
        &self,
        section: &NamedSection,
        values: usize,
    ) -> Result<CompressorChoice, Vec<(String, String)>> {
        let choice = read_choice(
            &self.compressors,
            &UPLINK_COMPRESSOR,
            &section.name,
            |entry| entry.choose(section.params.clone()),
        )?;
        checked(choice, &UPLINK_COMPRESSOR, |choice, p| {
            choice.check(values, p)
        })
    }

    /// The scheme `section` names, with its parameters read, defaults filled in, paths made
    /// relative to `folder` where one is given, and checked for the experiment `context`
    /// describes. Errors are (field path, as `partition.alpha`, message).
    pub fn choose_partition(
        &self,
        section: &PartitionConfig,
        folder: Option<&Path>,
        context: &SplitContext<'_>,
    ) -> Result<PartitionChoice, Vec<(String, String)>> {
        let name = &section.scheme;
        let choice = read_choice(&self.partitioners, &PARTITION, name, |entry| {
            entry.choose(section.params.clone(), folder)
        })?;
        checked(choice, &PARTITION, |choice, p| {
            p.require(section.seed.is_none() || choice.draws(), "seed", || {
                format!("does not apply to scheme {name:?}, which draws nothing")
            });
            choice.check(context, p);
        })
    }

    /// The partition as one short value, as reports label it: `dirichlet(0.5)`, `labels(2)`,
    /// `iid`; each scheme says how its parameters show, and the seed follows where set. A
    /// scheme this registry does not know shows every parameter by name.
    pub fn partition_label(&self, section: &PartitionConfig) -> String {
        let shown = find(&self.partitioners, &section.scheme).and_then(|registered| {
            let (chosen, _) = registered
                .component
                .choose(section.params.clone(), None)
                .ok()?;
            Some(chosen.label())
        });
        section
            .label(shown.unwrap_or_else(|| crate::data::partitioner::named_label(&section.params)))
    }
}

/// The problem of a `name`, given in `section`, that nothing registered among `names`,
/// worded as serde words an unknown variant, so that the nearest name is suggested alike.
fn unknown<'a>(
    section: &Section,
    name: &str,
    names: impl Iterator<Item = &'a str>,
) -> Vec<(String, String)> {
    let names: Vec<String> = names.map(|name| format!("`{name}`")).collect();
    let message = format!(
        "unknown variant `{name}`, expected one of {} (`fedsim {}` lists them)",
        names.join(", "),
        section.listing
    );
    let path = format!("{}.{}", section.name, section.key);
    vec![(path, crate::config::explain(&message))]
}

/// The problem of a section's parameter that does not parse, given as (field, message).
fn unreadable(section: &Section, (field, message): (String, String)) -> Vec<(String, String)> {
    let mut problems = Problems::new();
    problems.at(section.name, |p| p.add(field, message));
    problems.into_vec()
}

impl Catalogue for Registry {
    /// Reads the `data` section (its data set's parameters, checked with the federation), the
    /// `partition` section (its scheme's, checked against the data set), the `model` section
    /// (its architecture's, checked against the data set's samples where they are known
    /// before its files are read) and the `strategy` section (its algorithm's, checked alone,
    /// with the rest of the experiment and against the topology).
    fn resolve(&self, config: &mut ExperimentConfig, folder: &Path) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let context = data_context(config);
        let data = match self.choose_data(&config.data, Some(folder), &context) {
            Ok(choice) => {
                config.data.params = choice.params().clone();
                Some(choice)
            }
            Err(found) => {
                problems.extend(found);
                None
            }
        };
        // A partition is checked against the data set only once the data set is known.
        if let Some(data) = &data {
            let split = split_context(config, data);
            match self.choose_partition(&config.partition, Some(folder), &split) {
                Ok(choice) => config.partition.params = choice.params().clone(),
                Err(found) => problems.extend(found),
            }
        }
        let sample = data.as_ref().and_then(DataChoice::sample_kind);
        match self.choose_model(&config.model, sample) {
            Ok(choice) => config.model.params = choice.params().clone(),
            Err(found) => problems.extend(found),
        }
        if let Some(compression) = &mut config.compression {
            match self.choose_compressor(&compression.uplink, usize::MAX) {
                Ok(choice) => {
                    compression.uplink.params = choice.params().clone();
                    if let Some(reason) = choice.refuses_error_feedback()
                        && compression.error_feedback
                    {
                        problems.push((
                            "compression.error_feedback".to_string(),
                            format!("is true; {reason}"),
                        ));
                    }
                }
                Err(found) => problems.extend(found),
            }
        }
        let setting = Setting::of(config);
        match self.choose_algorithm(&config.strategy, &setting) {
            Ok(choice) => {
                config.strategy.params = choice.params().clone();
                problems.extend(edge_problem(&choice, &config.topology));
                problems.extend(self.asynchronous_problems(&choice, config));
                problems.extend(privacy_problems(&choice, config));
                problems.extend(compression_problems(config));
                problems.extend(secure_problems(&choice, config));
                let natural = data.as_ref().is_some_and(DataChoice::has_natural_clients)
                    && config.partition.scheme == "natural";
                problems.extend(unscored_personal_models(&choice, config, natural));
            }
            Err(found) => problems.extend(found),
        }
        problems
    }
}

/// What the data set of `config` may depend on besides its parameters.
pub(crate) fn data_context(config: &ExperimentConfig) -> DataContext {
    DataContext {
        num_clients: config.federation.num_clients,
        seed: config.seed,
        split_seed: config.partition.seed_or(config.seed),
    }
}

/// What the partition of `config` is checked against, its data set `data`.
pub(crate) fn split_context<'a>(
    config: &ExperimentConfig,
    data: &'a DataChoice,
) -> SplitContext<'a> {
    SplitContext {
        num_clients: config.federation.num_clients,
        data_set: data.name(),
        natural_clients: data.has_natural_clients(),
    }
}

impl Registry {
    /// The algorithm `config` names, with its parameters: what an experiment built in code
    /// (not loaded through [`ExperimentConfig::load`]) is checked with.
    pub fn algorithm_for(&self, config: &ExperimentConfig) -> Result<AlgorithmChoice, ConfigError> {
        let setting = Setting::of(config);
        self.choose_algorithm(&config.strategy, &setting)
            .map_err(invalid_in_code)
    }
}

/// The problems of an experiment built in code, as the error of one read from a file.
pub(crate) fn invalid_in_code(problems: Vec<(String, String)>) -> ConfigError {
    ConfigError::Invalid {
        path: PathBuf::new(),
        errors: problems
            .into_iter()
            .map(|(path, message)| FieldError {
                path,
                message,
                set_by: None,
            })
            .collect(),
    }
}

impl Registry {
    /// Why `config` cannot run asynchronously with `choice`, if it asks to: the algorithm has
    /// no asynchronous half, schedulers aggregate, or a setting needs rounds.
    fn asynchronous_problems(
        &self,
        choice: &AlgorithmChoice,
        config: &ExperimentConfig,
    ) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if config.asynchronous.is_none() {
            return problems;
        }
        let name = choice.name();
        if self.algorithm(name).is_some_and(|info| !info.asynchronous) {
            let asynchronous: Vec<&str> = self
                .algorithms()
                .into_iter()
                .filter(|info| info.asynchronous)
                .map(|info| info.name)
                .collect();
            problems.push((
                "strategy.name".to_string(),
                format!(
                    "{name:?} runs in synchronous rounds only; an asynchronous federation runs {}",
                    asynchronous.join(", ")
                ),
            ));
        }
        if let TopologyConfig::Hierarchical {
            mode: SchedulerMode::Aggregate,
            ..
        } = config.topology
        {
            problems.push((
                "topology.mode".to_string(),
                "is \"aggregate\"; an asynchronous federation runs flat or under relaying \
                 schedulers (an edge server's partial aggregate has no asynchronous rule)"
                    .to_string(),
            ));
        }
        if config.availability.deadline_s.is_some() {
            problems.push((
                "availability.deadline_s".to_string(),
                "a deadline ends a round; an asynchronous federation has none (a slow client \
                 is simply stale)"
                    .to_string(),
            ));
        }
        problems
    }
}

/// Why a personalised algorithm's personal models could not be scored, if they could not:
/// its clients hold no test samples of their own, neither held out (`eval.client_test_fraction`)
/// nor their own in a data set's `natural` split (`natural`).
pub(crate) fn unscored_personal_models(
    choice: &AlgorithmChoice,
    config: &ExperimentConfig,
    natural: bool,
) -> Option<(String, String)> {
    let personalised = choice.client(&Setting::of(config)).personalises();
    (personalised && config.eval.client_test_fraction == 0.0 && !natural).then(|| {
        (
            "eval.client_test_fraction".to_string(),
            format!(
                "is 0, but {:?} is personalised: its clients' personal models are scored on test \
                 samples of their own; hold some out (0.2, say), or split a data set that has \
                 its clients' own test samples with the \"natural\" scheme",
                choice.name()
            ),
        )
    })
}

/// Why `config` cannot compress its uploads, if it asks to: the server decodes each client's
/// change against the model it sent that round, which neither an aggregating scheduler's
/// partial aggregate nor an asynchronous server's stale models give it.
fn compression_problems(config: &ExperimentConfig) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if config.compression.is_none() {
        return problems;
    }
    if config.asynchronous.is_some() {
        problems.push((
            "asynchronous".to_string(),
            "is set; compressed uploads are decoded against the round's model, and an \
             asynchronous federation's clients train from models of other steps: leave \
             compression or asynchronous out"
                .to_string(),
        ));
    }
    if let TopologyConfig::Hierarchical {
        mode: SchedulerMode::Aggregate,
        ..
    } = config.topology
    {
        problems.push((
            "topology.mode".to_string(),
            "is \"aggregate\"; an aggregating scheduler would have to decode its clients' \
             compressed uploads and send its partial aggregate whole: use \"relay\" or the \
             flat topology"
                .to_string(),
        ));
    }
    problems
}

/// Why `config` cannot aggregate securely with `choice`, if it asks to: the server reads the
/// sum of the round's changes from the clients it sent the round, directly below it, and
/// nothing else of them.
fn secure_problems(choice: &AlgorithmChoice, config: &ExperimentConfig) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if config.secure_aggregation.is_none() {
        return problems;
    }
    let mut refuse = |field: &str, message: String| problems.push((field.to_string(), message));
    let name = choice.name();
    let setting = Setting::of(config);
    let reads_mean = matches!(choice.edge_rule(), EdgeAggregation::MODELS)
        && SecureServer::can_wrap(choice.server(&setting, 0).as_ref());
    if !reads_mean {
        refuse(
            "strategy.name",
            format!(
                "{name:?} reads more of its clients than the mean of their models, and secure \
                 aggregation shows the server only the sum: use an algorithm that averages \
                 models (fedavg, fedavgm, fedadam, fedprox, …)"
            ),
        );
    }
    if !choice.personal_layers().names.is_empty() {
        refuse(
            "strategy.name",
            format!(
                "{name:?} keeps personal layers with each client; secure aggregation of the \
                 shared layers alone is not built: use an algorithm without personal layers"
            ),
        );
    }
    if config.asynchronous.is_some() {
        refuse(
            "asynchronous",
            "is set; secure aggregation unmasks the sum of a round's clients, and an \
             asynchronous federation has no rounds: leave secure_aggregation or asynchronous out"
                .to_string(),
        );
    }
    if matches!(config.topology, TopologyConfig::Hierarchical { .. }) {
        refuse(
            "topology",
            "is hierarchical; secure aggregation's key exchange runs between the server and \
             the clients directly below it: use the flat topology"
                .to_string(),
        );
    }
    for (field, set) in [
        ("compression", config.compression.is_some()),
        ("privacy", config.privacy.is_some()),
    ] {
        if set {
            refuse(
                field,
                format!(
                    "is set; secure aggregation encodes each update itself, and combining it \
                     with {field} is not built: leave one of them out"
                ),
            );
        }
    }
    problems
}

/// Why `config` cannot run privately with `choice`, if it asks to: DP-FedAvg's noise covers
/// the mean of the clients' clipped models, drawn uniformly each round of a federation whose
/// clients are all online, and summed by the server itself.
fn privacy_problems(choice: &AlgorithmChoice, config: &ExperimentConfig) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if config.privacy.is_none() {
        return problems;
    }
    let mut refuse = |field: &str, message: String| problems.push((field.to_string(), message));
    let name = choice.name();
    let setting = Setting::of(config);
    match choice.edge_rule() {
        EdgeAggregation::ROBUST => refuse(
            "strategy.name",
            format!(
                "{name:?} is a robust rule: it reads every update whole, which differential \
                 privacy's noise on the sum of clipped changes does not cover; with privacy, use \
                 an algorithm that averages models (fedavg, fedavgm, fedadam, fedprox, …)"
            ),
        ),
        EdgeAggregation::MODELS => {
            if !PrivateServer::can_wrap(choice.server(&setting, 0).as_ref()) {
                refuse(
                    "strategy.name",
                    format!(
                        "{name:?} reads more than the mean of the clients' models, which is all \
                         that differential privacy's noise covers"
                    ),
                );
            }
        }
        _ => refuse(
            "strategy.name",
            format!(
                "{name:?} reads more of its clients than the mean of their models (each update, \
                 or tensors beside them), which differential privacy's noise does not cover; with \
                 privacy, use an algorithm that averages models (fedavg, fedavgm, fedadam, \
                 fedprox, …)"
            ),
        ),
    }
    if !choice.selector(&setting).samples_uniformly() {
        refuse(
            "strategy.name",
            format!(
                "{name:?} chooses its clients by what it has seen of them; the accountant's \
                 amplification by sampling needs each round's clients drawn uniformly"
            ),
        );
    }
    if config.asynchronous.is_some() {
        refuse(
            "asynchronous",
            "is set; the accountant counts rounds, and an asynchronous federation has none: leave \
             privacy or asynchronous out"
                .to_string(),
        );
    }
    if let TopologyConfig::Hierarchical {
        mode: SchedulerMode::Aggregate,
        ..
    } = config.topology
    {
        refuse(
            "topology.mode",
            "is \"aggregate\"; a private run's server sums the clients' clipped changes itself: \
             use \"relay\" or the flat topology"
                .to_string(),
        );
    }
    if !config.availability.online.is_always() {
        refuse(
            "availability.online",
            "is not \"always\"; the accountant's sampling rate is clients_per_round / \
             num_clients, which holds only while every client is online"
                .to_string(),
        );
    }
    problems
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
                "{name:?} cannot run under aggregating schedulers ({reason}); use topology.mode \
                 \"relay\" or the flat topology"
            ),
        )),
        EdgeAggregation::Mean {
            several_edge_rounds: false,
            ..
        } if edge_rounds > 1 => Some((
            "topology.edge_rounds".to_string(),
            format!(
                "is {edge_rounds}; {name:?} sends more than a model up, so an aggregating \
                 scheduler can run only 1 edge round"
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
    pub fn algorithm<A: Algorithm>(&mut self, algorithm: A) -> Result<&mut Self, RegistryError> {
        let listing = Listing {
            name: algorithm.name(),
            about: algorithm.paper(),
            param_docs: algorithm.param_docs(),
            defaults: Some(params::params_as_map(
                algorithm.name(),
                &A::Params::default(),
            )),
        };
        let component: Arc<dyn AlgorithmEntry> = Arc::new(params::Plugged(Arc::new(algorithm)));
        self.add("algorithm", component, listing, |r| &mut r.algorithms)
    }

    /// Registers a model architecture under its [`Architecture::name`].
    pub fn model<A: Architecture>(&mut self, architecture: A) -> Result<&mut Self, RegistryError> {
        let listing = Listing {
            name: architecture.name(),
            about: architecture.about(),
            param_docs: architecture.param_docs(),
            defaults: Some(params::params_as_map(
                architecture.name(),
                &A::Params::default(),
            )),
        };
        let component: Arc<dyn ModelEntry> = Arc::new(params::Plugged(Arc::new(architecture)));
        self.add("model", component, listing, |r| &mut r.models)
    }

    /// Registers a data set under its [`DataSource::name`].
    pub fn data_set<D: DataSource>(&mut self, data_set: D) -> Result<&mut Self, RegistryError> {
        let listing = Listing {
            name: data_set.name(),
            about: data_set.about(),
            param_docs: data_set.param_docs(),
            defaults: params::defaults_of::<D::Params>(data_set.name()),
        };
        let component: Arc<dyn DataEntry> = Arc::new(params::Plugged(Arc::new(data_set)));
        self.add("data set", component, listing, |r| &mut r.data_sets)
    }

    /// Registers a compressor under its [`Compressor::name`], for `compression.uplink` to
    /// name.
    pub fn compressor<C: Compressor>(&mut self, compressor: C) -> Result<&mut Self, RegistryError> {
        let listing = Listing {
            name: compressor.name(),
            about: compressor.about(),
            param_docs: compressor.param_docs(),
            defaults: params::defaults_of::<C::Params>(compressor.name()),
        };
        let component: Arc<dyn CompressorEntry> = Arc::new(params::Plugged(Arc::new(compressor)));
        self.add("compressor", component, listing, |r| &mut r.compressors)
    }

    /// Registers a partition scheme under its [`Partitioner::name`].
    pub fn partitioner<P: Partitioner>(
        &mut self,
        partitioner: P,
    ) -> Result<&mut Self, RegistryError> {
        let listing = Listing {
            name: partitioner.name(),
            about: partitioner.about(),
            param_docs: partitioner.param_docs(),
            defaults: params::defaults_of::<P::Params>(partitioner.name()),
        };
        let component: Arc<dyn PartitionerEntry> = Arc::new(params::Plugged(Arc::new(partitioner)));
        self.add("partition scheme", component, listing, |r| {
            &mut r.partitioners
        })
    }

    /// Adds `component`, a `kind` of component listed as `listing`, to the list `list` picks
    /// out, if its name is well formed and not taken there.
    fn add<T: ?Sized>(
        &mut self,
        kind: &'static str,
        component: Arc<T>,
        listing: Listing,
        list: impl FnOnce(&mut Registry) -> &mut Vec<Registered<T>>,
    ) -> Result<&mut Self, RegistryError> {
        let name = listing.name;
        let origin = self.origin.clone();
        let list = list(&mut self.registry);
        let taken = find(list, name).map(|r| &r.origin);
        let origin = check_name(origin, kind, name, taken)?;
        list.push(Registered {
            component,
            listing,
            origin,
        });
        Ok(self)
    }

    /// The finished catalogue.
    pub fn build(self) -> Registry {
        self.registry
    }
}

/// The origin to register `name` under (the builder's, `origin`), if the name is well formed
/// and not `taken` (by the crate of that origin).
fn check_name(
    origin: Option<Origin>,
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
    origin.ok_or_else(|| RegistryError::NoOrigin {
        kind,
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::{EdgeAggregation, PlainClient, Strategy};

    /// A plug-in that is FedAvg under another name.
    struct Renamed(&'static str);

    impl Algorithm for Renamed {
        type Params = crate::config::NoParams;

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
            "say which crate registers the algorithm \"mine\" first: \
             builder.origin(fedsim::origin!())"
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
        let builtins = Registry::builtin().algorithms().len();
        assert_eq!(names.len(), builtins + 1);
        assert_eq!((names[0], names[builtins]), ("fedavg", "mine"));
        assert_eq!(
            registry.algorithm("mine").unwrap().origin.crate_name,
            "mine"
        );
    }

    /// The parts of an experiment the algorithms see, for the tests.
    /// A private run wraps the server half of any algorithm whose edge rule says it averages
    /// models, so validation refuses none of the built-ins that say so.
    #[test]
    fn every_builtin_that_averages_models_can_run_privately() {
        let registry = Registry::builtin();
        let setting = Setting {
            clients_per_round: Some(5),
            ..Setting::new(10, 0.1)
        };
        let mut private = Vec::new();
        for info in registry.algorithms() {
            let section: StrategyConfig =
                serde_json::from_value(serde_json::json!({ "name": info.name })).unwrap();
            let choice = registry.choose_algorithm(&section, &setting).unwrap();
            if choice.edge_rule() == EdgeAggregation::MODELS && !info.asynchronous {
                let server = choice.server(&setting, 3);
                assert!(PrivateServer::can_wrap(server.as_ref()), "{}", info.name);
                private.push(info.name);
            }
        }
        assert!(private.len() >= 15, "{private:?}");
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
        let setting = Setting {
            clients_per_round: Some(5),
            ..Setting::new(10, 0.1)
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
                "strategy.beta3",
                "unknown field `beta3`",
            ),
            (
                r#"{"name": "fedavg", "mu": 1}"#,
                "strategy.mu",
                "unknown field `mu`",
            ),
            (
                r#"{"name": "fedprox", "mu": "a"}"#,
                "strategy.mu",
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
            serde_json::Value::Object(choice.params().clone()),
            serde_json::json!({"depth": 20, "groups": 2})
        );
        let errors = registry
            .choose_model(&ModelConfig::named("cnnn"), None)
            .err()
            .unwrap();
        assert_eq!(errors[0].0, "model.name");
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
                "model.name".to_string(),
                "\"cnn\" cannot take sequences of characters; use \"lstm\"".to_string()
            )]
        );
        let section: ModelConfig =
            serde_json::from_str(r#"{"name": "mlp", "hidden": [10, 0], "depth": 3}"#).unwrap();
        let errors = registry.choose_model(&section, None).err().unwrap();
        assert_eq!(errors[0].0, "model.depth");
        let section: ModelConfig =
            serde_json::from_str(r#"{"name": "mlp", "hidden": [10, 0]}"#).unwrap();
        let errors = registry.choose_model(&section, None).err().unwrap();
        assert_eq!(errors[0].0, "model.hidden[1]");
    }

    /// A plug-in scheme: sample `i` to client `i mod n`.
    struct RoundRobin;

    impl Partitioner for RoundRobin {
        type Params = crate::config::NoParams;

        fn name(&self) -> &'static str {
            "round-robin"
        }

        fn about(&self) -> &'static str {
            "sample i to client i mod n"
        }

        fn draws(&self) -> bool {
            false
        }

        fn split(
            &self,
            _: &Self::Params,
            input: &crate::data::SplitInput<'_>,
            _: &mut rand_chacha::ChaCha12Rng,
        ) -> Result<crate::data::ClientSplit, crate::data::partition::PartitionError> {
            let mut clients = vec![Vec::new(); input.num_clients];
            for i in 0..input.labels.len() {
                clients[i % input.num_clients].push(i);
            }
            Ok(crate::data::partition::Partition { clients }.into())
        }
    }

    #[test]
    fn data_sets_and_schemes_are_registered_chosen_and_used_as_the_builtins_are() {
        let mut builder = Registry::builder().with_builtins();
        builder.origin(Origin::new("mine", "0.1.0"));
        let error = builder
            .data_set(crate::data::tabular::CsvData)
            .err()
            .unwrap();
        assert!(
            error
                .to_string()
                .starts_with("the data set \"csv\" is registered already (by fedsim "),
            "{error}"
        );
        let error = builder
            .partitioner(crate::data::partitioner::IidSplit)
            .err();
        assert!(matches!(error, Some(RegistryError::Duplicate { .. })));
        builder.partitioner(RoundRobin).unwrap();
        let registry = builder.build();
        let schemes: Vec<&str> = registry.schemes().iter().map(|s| s.name).collect();
        assert_eq!(
            schemes,
            [
                "iid",
                "dirichlet",
                "shards",
                "labels",
                "quantity",
                "natural",
                "file",
                "round-robin"
            ]
        );
        let data_sets: Vec<&str> = registry.data_sets().iter().map(|d| d.name).collect();
        assert_eq!(data_sets[..2], ["mnist", "fashion-mnist"]);
        let experiment = |partition: serde_json::Value| {
            let value = serde_json::json!({
                "name": "t", "data": {"dataset": "breast-cancer"}, "partition": partition,
                "model": "logistic",
                "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1},
                "client": {"lr": 0.1}
            });
            ExperimentConfig::from_value(value, Path::new("t.json"), &registry)
        };
        let config = experiment(serde_json::json!({"scheme": "round-robin"})).unwrap();
        let prepared = crate::experiment::Experiment::prepare(config, &registry).unwrap();
        let clients = &prepared.partition().unwrap().clients;
        assert_eq!((clients[0][..2].to_vec(), clients[2][0]), (vec![0, 3], 2));
        assert_eq!(
            registry.partition_label(&prepared.config().partition),
            "round-robin"
        );
        // Its rules are the registry's: it draws nothing, so it takes no seed, and it has no
        // parameters.
        for (partition, expected) in [
            (
                serde_json::json!({"scheme": "round-robin", "seed": 3}),
                "partition.seed: does not apply to scheme \"round-robin\"",
            ),
            (
                serde_json::json!({"scheme": "round-robin", "k": 3}),
                "partition.k: unknown field `k`",
            ),
            (
                serde_json::json!({"scheme": "round-robn"}),
                "did you mean \"round-robin\"?",
            ),
        ] {
            let error = experiment(partition).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn a_partition_reads_as_its_scheme_with_its_parameters() {
        let registry = Registry::builtin();
        let shown = |value| {
            let section: PartitionConfig = serde_json::from_value(value).unwrap();
            registry.partition_label(&section)
        };
        use serde_json::json;
        assert_eq!(shown(json!({"scheme": "iid"})), "iid");
        assert_eq!(
            shown(json!({"scheme": "dirichlet", "alpha": 0.5, "min_size": 10})),
            "dirichlet(0.5)"
        );
        assert_eq!(
            shown(json!({"scheme": "dirichlet", "alpha": 1, "min_size": 20, "seed": 7})),
            "dirichlet(1.0, min_size=20, seed=7)"
        );
        assert_eq!(
            shown(json!({"scheme": "labels", "labels_per_client": 1})),
            "labels(1)"
        );
        assert_eq!(
            shown(json!({"scheme": "shards", "num_shards": 200})),
            "shards(200)"
        );
        assert_eq!(
            shown(json!({"scheme": "quantity", "sigma": 0.5})),
            "quantity(0.5)"
        );
        assert_eq!(shown(json!({"scheme": "natural"})), "natural");
        assert_eq!(shown(json!({"file": "p.json"})), "file(p.json)");
        assert_eq!(shown(json!({"scheme": "theirs", "k": 2})), "theirs(k=2)");
    }

    #[test]
    fn an_unknown_algorithm_gets_the_nearest_name() {
        let registry = Registry::builtin();
        let section = StrategyConfig::named("fedprx");
        let setting = Setting {
            clients_per_round: Some(5),
            ..Setting::new(10, 0.1)
        };
        let errors = registry.choose_algorithm(&section, &setting).err().unwrap();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, "strategy.name");
        assert!(
            errors[0].1.ends_with("did you mean \"fedprox\"?"),
            "{}",
            errors[0].1
        );
    }
}
