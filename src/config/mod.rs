//! The experiment file: serde types with defaults, `--set` overrides, and validation.
//!
//! These types are the documentation of the file format: every field says what it does, what
//! it defaults to and what values are accepted. Errors name the file, the field's path (e.g.
//! `federation.clients_per_round`) and what was expected.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod asynchronous;
mod availability;
mod byzantine;
pub mod check;
mod compression;
mod hints;
mod network;
mod optimizer;
mod overrides;
mod partition;
mod placement;
mod privacy;
mod secure;
pub mod strict_json;
mod topology;
mod work;

use check::{Problems, Validate};
pub(crate) use hints::explain;
pub use overrides::Override;
use strict_json::StrictJsonError;

pub use asynchronous::AsynchronousConfig;
pub use availability::{AvailabilityConfig, FailurePolicy, OnlineConfig};
pub use network::{ClientLinkOverride, ComputeConfig, NetworkConfig};
pub use optimizer::OptimizerConfig;
pub use partition::PartitionConfig;
pub use placement::{Placement, PlacementConfig};
pub use privacy::{ClientSampling, ClipConfig, NoiseSite, PrivacyConfig};
pub use secure::SecureAggregationConfig;
pub use topology::{SchedulerMode, TopologyConfig};
pub use work::{LocalWork, Work, WorkPlan};

use crate::backend::BackendKind;
pub use byzantine::{Attack, ByzantineConfig};
pub use compression::CompressionConfig;

/// A whole experiment: data, model, federation, local training and evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExperimentConfig {
    /// Short name; the run folder is `runs/<name>-<timestamp>`. Letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// What reports call this run's configuration in their tables and legends; a sweep sets it
    /// to its variant's name. Absent, a report names a configuration by the settings that set it
    /// apart from the others compared. It changes no result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The experiment seed; every random choice derives from it.
    #[serde(default)]
    pub seed: u64,
    /// The data set, any name `fedsim datasets` lists, with its parameters beside it
    /// (`{"dataset": "mnist"}`, `{"dataset": "csv", "file": "t.csv", "label": "y"}`).
    pub data: DataConfig,
    /// How the training set is split among clients, any scheme `fedsim schemes` lists.
    #[serde(default)]
    pub partition: PartitionConfig,
    /// The architecture, any name `fedsim models` lists: the name alone (`"cnn"`) for its
    /// defaults, or an object with its hyperparameters beside the name (`{"name": "mlp",
    /// "hidden": [200, 200]}`).
    pub model: ModelConfig,
    /// Clients, sampling and rounds.
    pub federation: FederationConfig,
    /// Local training on each sampled client.
    pub client: ClientConfig,
    /// The FL algorithm and its parameters: `{"name": "fedavg"}` (the default), or any name
    /// `fedsim strategies` lists, with its parameters beside it (`{"name": "fedprox", "mu":
    /// 0.01}`).
    #[serde(default = "fedavg")]
    pub strategy: StrategyConfig,
    /// The shape of the federation tree.
    #[serde(default)]
    pub topology: TopologyConfig,
    /// Simulated links and compute speeds, for the virtual clock.
    #[serde(default)]
    pub network: NetworkConfig,
    /// An asynchronous federation, without rounds; absent, the server runs synchronous rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asynchronous: Option<AsynchronousConfig>,
    /// When clients are online, and sampled clients that drop out or miss the round's
    /// deadline.
    #[serde(default)]
    pub availability: AvailabilityConfig,
    /// Evaluation of the global model on the test set.
    #[serde(default)]
    pub eval: EvalConfig,
    /// How often the run folder's checkpoint is brought up to date.
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// The burn backend that trains; `--backend` overrides it.
    #[serde(default)]
    pub backend: BackendKind,
    /// Byzantine clients and their attack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byzantine: Option<ByzantineConfig>,
    /// Compressed uploads: the compressor each client's change is encoded with on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<CompressionConfig>,
    /// Client-level differential privacy: clipping, noise and the epsilon spent (DP-FedAvg).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy: Option<PrivacyConfig>,
    /// Secure aggregation: the server reads only the masked sum of the round's updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_aggregation: Option<SecureAggregationConfig>,
    /// Failures to inject into clients or schedulers, to exercise error handling.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultConfig>,
    /// Which MPI rank runs each scheduler and client group, in a run over MPI; where a tier
    /// runs never changes results. Without it, a fixed rule places them ([`PlacementConfig`]
    /// gives it).
    #[serde(default, skip_serializing_if = "PlacementConfig::is_default")]
    pub placement: PlacementConfig,
}

/// A section that names a registered component, with its parameters beside the name, as the
/// registry ([`crate::registry::Registry`]) reads them: `{"name": "fedprox", "mu": 0.01}`, or
/// the name alone (`"fedprox"`) for the defaults. Once an experiment is loaded, `params` holds
/// every parameter of the component, defaults filled in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamedSection {
    /// The component's registered name.
    pub name: String,
    /// Its parameters, by field name.
    #[serde(flatten)]
    pub params: serde_json::Map<String, Value>,
}

/// The parameters of a component that takes none (`{"name": "fedavg"}`, `{"scheme": "iid"}`)
/// and refuses any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// The `strategy` section: an algorithm and its parameters.
pub type StrategyConfig = NamedSection;

/// The `model` section: an architecture and its hyperparameters.
pub type ModelConfig = NamedSection;

impl NamedSection {
    /// The component `name` with no parameter given: each takes its default.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            params: serde_json::Map::new(),
        }
    }
}

impl JsonSchema for NamedSection {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NamedSection".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        registered_section("name")
    }
}

/// The schema of a section that names a registered component under `key`: the name alone, or
/// an object with the name and the component's parameters (which the registry, not the
/// schema, knows). `x-registered` tells the reference pages which key names it.
pub(crate) fn registered_section(key: &str) -> schemars::Schema {
    schemars::json_schema!({
        "anyOf": [
            { "type": "string" },
            { "type": "object", "properties": { key: { "type": "string" } }, "required": [key] }
        ],
        "x-registered": key
    })
}

/// The default `strategy` section.
fn fedavg() -> StrategyConfig {
    StrategyConfig::named("fedavg")
}

impl<'de> Deserialize<'de> for NamedSection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (name, params) = named_fields(Value::deserialize(deserializer)?, "name")
            .map_err(serde::de::Error::custom)?;
        Ok(Self { name, params })
    }
}

/// A section that names a registered component under `key`, split into the name and the
/// fields beside it: the name alone (`"fedprox"`), or an object holding it.
pub(crate) fn named_fields(
    value: Value,
    key: &str,
) -> Result<(String, serde_json::Map<String, Value>), String> {
    match value {
        Value::String(name) => Ok((name, serde_json::Map::new())),
        Value::Object(mut fields) => match fields.remove(key) {
            Some(Value::String(name)) => Ok((name, fields)),
            Some(other) => Err(format!("`{key}` must be a string, not {other}")),
            None => Err(format!("missing field `{key}`")),
        },
        other => Err(format!(
            "expected a name, or an object with a {key} and parameters, not {other}"
        )),
    }
}

/// What reads the sections of an experiment file that name registered components (the
/// `data`, `partition`, `model` and `strategy` sections): the registry ([`crate::registry::Registry`]). It fills in their
/// defaults and gives each rule they break as (field path, message).
pub trait Catalogue {
    /// Reads `config`'s registered sections in place, defaults filled in and relative paths
    /// made relative to `folder` (the experiment file's), and returns the rules they break,
    /// alone or with the rest of the experiment, as (whole field path, message).
    fn resolve(&self, config: &mut ExperimentConfig, folder: &Path) -> Vec<(String, String)>;
}

/// The `data` section: a data set, any name `fedsim datasets` lists, with its parameters beside
/// the name: `{"dataset": "mnist"}` uses the copy built into fedsim, `{"dataset": "mnist",
/// "dir": "data/mnist"}` reads the files from a folder. Once an experiment is loaded, `params`
/// holds every parameter, defaults filled in and paths made absolute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataConfig {
    /// The data set's registered name.
    pub dataset: String,
    /// Its parameters, by field name.
    #[serde(flatten)]
    pub params: serde_json::Map<String, Value>,
}

impl DataConfig {
    /// The data set `name` with no parameter given: each takes its default.
    pub fn named(name: &str) -> Self {
        Self {
            dataset: name.to_string(),
            params: serde_json::Map::new(),
        }
    }
}

impl JsonSchema for DataConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DataConfig".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        registered_section("dataset")
    }
}

impl<'de> Deserialize<'de> for DataConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (dataset, params) = named_fields(Value::deserialize(deserializer)?, "dataset")
            .map_err(serde::de::Error::custom)?;
        Ok(Self { dataset, params })
    }
}

/// Who takes part, and for how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FederationConfig {
    /// Number of clients the training set is split among.
    pub num_clients: usize,
    /// Clients the server samples (without replacement) each round, 1 to `num_clients`; required
    /// in rounds, left out in an asynchronous federation (`asynchronous.concurrency` instead).
    /// Only online clients are sampled: fewer when fewer are online.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients_per_round: Option<usize>,
    /// Number of communication rounds (server steps, in an asynchronous federation).
    pub rounds: u32,
    /// Worker threads that train clients in parallel, 1 to 1024. Results do not depend on it.
    #[serde(default = "default_parallels")]
    #[schemars(extend("x-default" = "the number of cores"))]
    pub num_parallels: usize,
    /// Memory for the states clients keep between rounds (SCAFFOLD's control variates,
    /// personal models), in MiB: states past it are spilled to the run folder's
    /// `client-states.G.log` and read back when their client trains. Results do not depend on
    /// it; `summary.json` says what was spilled (`client_states`).
    #[serde(
        default = "default_state_memory",
        skip_serializing_if = "is_default_state_memory"
    )]
    #[schemars(extend("default" = DEFAULT_STATE_MEMORY_MB))]
    pub client_state_memory_mb: f64,
}

fn default_parallels() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The default of `federation.client_state_memory_mb`.
const DEFAULT_STATE_MEMORY_MB: f64 = 1024.0;

fn default_state_memory() -> f64 {
    DEFAULT_STATE_MEMORY_MB
}

fn is_default_state_memory(mb: &f64) -> bool {
    *mb == DEFAULT_STATE_MEMORY_MB
}

impl FederationConfig {
    /// The clients a round samples: `clients_per_round`, or every client where it is left out
    /// (an asynchronous federation, which validation checks apart).
    pub fn round_size(&self) -> usize {
        self.clients_per_round.unwrap_or(self.num_clients)
    }

    /// Bytes of memory the clients' states may take (`client_state_memory_mb`).
    pub fn client_state_budget(&self) -> u64 {
        (self.client_state_memory_mb * 1024.0 * 1024.0) as u64
    }
}

/// Local training: plain SGD, as in the FedAvg paper, with optional momentum and weight decay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Passes over the client's data per round.
    #[serde(default = "one")]
    pub epochs: u32,
    /// Samples per SGD step; a client's last batch may be smaller.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Learning rate; greater than 0.
    pub lr: f64,
    /// Momentum factor in `[0, 1)` (PyTorch's convention, no dampening).
    #[serde(default)]
    pub momentum: f64,
    /// L2 penalty added to the gradient; at least 0.
    #[serde(default)]
    pub weight_decay: f64,
    /// The optimiser: `{"name": "sgd"}` (the default) or `{"name": "adam", "beta_1": 0.9,
    /// "beta_2": 0.999, "epsilon": 1e-8}` (each field optional).
    #[serde(default, skip_serializing_if = "OptimizerConfig::is_sgd")]
    #[schemars(extend("default" = {"name": "sgd"}))]
    pub optimizer: OptimizerConfig,
    /// How much each client trains per round: `{"kind": "fixed"}` (`epochs` epochs, the
    /// default), `{"kind": "uniform", "min_epochs": 1, "max_epochs": 5}` (drawn per client and
    /// round), `{"kind": "fit_deadline"}` (as many steps as fit the client's speed within
    /// the round deadline, at most `epochs` epochs), or `{"kind": "steps", "steps": 20}` (that
    /// many steps for every client, whatever its size).
    #[serde(default, skip_serializing_if = "LocalWork::is_fixed")]
    #[schemars(extend("default" = {"kind": "fixed"}))]
    pub work: LocalWork,
}

fn one() -> u32 {
    1
}

fn default_batch_size() -> usize {
    32
}

/// Evaluation of the global model on the test set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    /// Evaluate after every `every` rounds (server steps, in an asynchronous federation), and
    /// always after the last.
    #[serde(default = "one")]
    pub every: u32,
    /// Evaluate instead after the first round (or server step) that ends at or after each
    /// multiple of `every_s` simulated seconds, and after the last: to compare runs whose
    /// rounds take different times on one clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_s: Option<f64>,
    /// Test samples per forward pass.
    #[serde(default = "default_eval_batch")]
    pub batch_size: usize,
    /// Fraction of each client's samples held out (drawn from the seed) to evaluate the global
    /// model on every client, in `[0, 1)`. 0 (the default) evaluates on the test set only;
    /// above 0 the round records also give the mean, standard deviation, worst 10% and best
    /// 10% of the clients' accuracies. Held-out samples are not trained on. At 0, a `natural`
    /// partition of a data set whose clients have their own test samples (the synthetic set's
    /// users, FEMNIST's writers, Shakespeare's roles) records the clients' accuracies on those.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(extend("default" = 0.0))]
    pub client_test_fraction: f64,
    /// Score this many clients on their own test samples, a seeded sample drawn once for the
    /// run (its ids in the run folder's `eval_clients.json`), rather than every client: what a
    /// federation of a million clients needs. Where a `natural` partition's test samples are
    /// the clients' own (the synthetic set's users, FEMNIST's writers, Shakespeare's roles),
    /// the global model's test accuracy is measured on the sampled clients' test samples too.
    /// Default: every client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients_sampled: Option<usize>,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

fn default_eval_batch() -> usize {
    1000
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            every: one(),
            every_s: None,
            batch_size: default_eval_batch(),
            client_test_fraction: 0.0,
            clients_sampled: None,
        }
    }
}

/// Checkpoints, from which a killed or stopped run continues (`fedsim run --resume`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Write the checkpoint after every `every` rounds (and after the last, and when the run
    /// is stopped). It holds the global model, so writing it costs about as much as one
    /// downlink: little against a round.
    #[serde(default = "one")]
    pub every: u32,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self { every: one() }
    }
}

/// One injected failure: a client's training, or a scheduler's thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Round in which the failure happens (from 1); in an asynchronous federation, the number
    /// of the dispatch whose client fails (from 1).
    pub round: u32,
    /// The client whose training fails; give this or `scheduler`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<usize>,
    /// The scheduler whose thread panics when the round reaches it; give this or `client`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<usize>,
    /// `"panic"` or `"error"` (clients only: training returns an error).
    pub kind: FaultKind,
}

/// How an injected failure shows itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// The code panics.
    Panic,
    /// The client's training returns an error.
    Error,
}

/// One problem with an experiment file: where, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field (`client.lr`), or `.` for the whole file.
    pub path: String,
    /// What is wrong and what is accepted.
    pub message: String,
    /// The `--set` that gave the field its value, if one did.
    pub set_by: Option<String>,
}

impl FieldError {
    /// The field the problem is about: for an unknown field, that field itself (`client.lrr`,
    /// or `lrr` at the top), whether the problem is reported at it or, as a registered
    /// section's parameters report it, at the object that holds it.
    pub fn field(&self) -> String {
        let unknown = self
            .message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next());
        let at_it = |name: &str| self.path.rsplit('.').next() == Some(name);
        match (unknown, self.path.as_str()) {
            (Some(name), ".") => name.to_string(),
            (Some(name), path) if !at_it(name) => format!("{path}.{name}"),
            (_, path) => path.to_string(),
        }
    }
}

/// Why an experiment file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read experiment file {} (looked for in folder {}): {source}", path.display(), folder.display())]
    Io {
        /// The experiment file, as given.
        path: PathBuf,
        /// The folder a relative path was looked up in.
        folder: PathBuf,
        /// Why the operating system refused.
        source: std::io::Error,
    },
    /// A `--set` argument cannot be read or applied.
    #[error("--set {text:?}: {reason}")]
    BadOverride {
        /// The argument.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file (after overrides) has problems with the listed fields; an empty `path` is an
    /// experiment built in code.
    #[error("{}", Invalid { path, errors })]
    Invalid {
        /// The experiment file.
        path: PathBuf,
        /// Every problem found.
        errors: Vec<FieldError>,
    },
}

/// The most problems a message lists: a file with a million bad entries gets the first ones
/// and a count, not a million lines.
const SHOWN_PROBLEMS: usize = 50;

/// Display helper listing each field error on its own line.
struct Invalid<'a> {
    path: &'a Path,
    errors: &'a [FieldError],
}

impl fmt::Display for Invalid<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.errors.first().and_then(|e| e.set_by.as_deref());
        let one_override =
            first.filter(|&set| self.errors.iter().all(|e| e.set_by.as_deref() == Some(set)));
        match one_override {
            Some(set) => write!(f, "invalid --set {set}:")?,
            // An experiment built in code, not read from a file.
            None if self.path.as_os_str().is_empty() => write!(f, "invalid experiment:")?,
            None => write!(f, "invalid experiment file {}:", self.path.display())?,
        }
        for error in self.errors.iter().take(SHOWN_PROBLEMS) {
            write!(f, "\n  {}: {}", error.path, error.message)?;
            if let Some(set) = error.set_by.as_deref().filter(|_| one_override.is_none()) {
                write!(f, " (from --set {set})")?;
            }
        }
        if let Some(more) = self
            .errors
            .len()
            .checked_sub(SHOWN_PROBLEMS)
            .filter(|&n| n > 0)
        {
            write!(f, "\n  … and {more} more problems of the same file")?;
        }
        Ok(())
    }
}

/// Most worker threads, and most schedulers (three threads each), a run may ask for: far above
/// what one machine runs well, far below where the operating system refuses threads.
pub const MAX_THREADS: usize = 1024;

impl ExperimentConfig {
    /// Reads, overrides, parses, resolves and validates an experiment file.
    ///
    /// `overrides` are `path.to.field=value` strings; the value is read as JSON when it parses
    /// (`5`, `true`, `{"scheme": "iid"}`) and as a string otherwise (`flex`). Relative paths are
    /// resolved against the file's folder. `catalogue` reads the sections that name registered
    /// components.
    pub fn load(
        path: &Path,
        overrides: &[String],
        catalogue: &dyn Catalogue,
    ) -> Result<Self, ConfigError> {
        let overrides = overrides
            .iter()
            .map(|text| Override::parse(text))
            .collect::<Result<Vec<_>, _>>()?;
        let bytes = fs::read(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            folder: std::path::absolute(path)
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .unwrap_or_default(),
            source,
        })?;
        let text = strict_json::text(bytes).map_err(|reason| invalid(path, ".", reason))?;
        let value = strict_json::parse(&text).map_err(|error| match error {
            StrictJsonError::Duplicate { path: field, line } => invalid(
                path,
                &field,
                format!("given twice (line {line}); {}", strict_json::ONCE),
            ),
            syntax => invalid(path, ".", syntax.to_string()),
        })?;
        Self::with_overrides(value, path, &overrides, catalogue)
    }

    /// Applies `overrides` to an experiment held as JSON, read from `path`, then parses,
    /// resolves and validates it; a problem an override caused names that override.
    pub fn with_overrides(
        mut value: Value,
        path: &Path,
        overrides: &[Override],
        catalogue: &dyn Catalogue,
    ) -> Result<Self, ConfigError> {
        for assignment in overrides {
            assignment.apply(&mut value)?;
        }
        Self::from_value(value, path, catalogue).map_err(|error| match error {
            ConfigError::Invalid { path, mut errors } => {
                for error in &mut errors {
                    let field = error.field();
                    error.set_by = overrides
                        .iter()
                        .rev()
                        .find(|o| o.concerns(&field))
                        .map(|o| o.text().to_string());
                }
                ConfigError::Invalid { path, errors }
            }
            other => other,
        })
    }

    /// Parses, resolves and validates an experiment held as JSON, read from `path` (for
    /// messages; relative paths are resolved against its folder), its registered sections
    /// read by `catalogue`.
    pub fn from_value(
        value: Value,
        path: &Path,
        catalogue: &dyn Catalogue,
    ) -> Result<Self, ConfigError> {
        let kind = match &value {
            Value::Object(_) => None,
            Value::Array(_) => Some("an array"),
            Value::String(_) => Some("a string"),
            Value::Number(_) => Some("a number"),
            Value::Bool(_) => Some("a boolean"),
            Value::Null => Some("null"),
        };
        if let Some(kind) = kind {
            return Err(invalid(
                path,
                ".",
                format!(
                    "is {kind}; an experiment is one JSON object, {{\"name\": …, \"data\": …}}"
                ),
            ));
        }
        let mut config: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let field = e.path().to_string();
            invalid(path, &field, hints::explain(&e.into_inner().to_string()))
        })?;
        let folder = path.parent().unwrap_or(Path::new("."));
        // Absolute, so the resolved config written to the run folder works from anywhere.
        let folder = std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf());
        config.availability.online.resolve_paths(&folder);
        let mut problems = config.problems();
        problems.extend(catalogue.resolve(&mut config, &folder));
        let errors: Vec<FieldError> = problems
            .into_vec()
            .into_iter()
            .map(|(path, message)| FieldError {
                path,
                message,
                set_by: None,
            })
            .collect();
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                errors,
            })
        }
    }

    /// Every rule the parsed values break, with the field's path, but those of the sections
    /// that name registered components (which their [`Catalogue`] checks).
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        self.validate((), &mut problems);
        problems
    }
}

impl Validate for ExperimentConfig {
    type Context<'a> = ();

    fn validate(&self, (): (), problems: &mut Problems) {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        problems.require(name_ok, "name", || {
            format!(
                "{:?} must be non-empty and use only letters, digits, '-', '_' and '.'",
                self.name
            )
        });
        let num_clients = self.federation.num_clients;
        problems.at("federation", |p| {
            self.federation.validate(self.asynchronous.is_some(), p)
        });
        if let Some(asynchronous) = &self.asynchronous {
            problems.at("asynchronous", |p| asynchronous.validate(num_clients, p));
        }
        problems.at("client", |p| {
            self.client.validate(self.availability.deadline_s, p)
        });
        problems.at("eval", |p| self.eval.validate(num_clients, p));
        problems.at("checkpoint", |p| self.checkpoint.validate((), p));
        problems.at("topology", |p| self.topology.validate(num_clients, p));
        problems.at("network", |p| self.network.validate(num_clients, p));
        problems.at("availability", |p| {
            self.availability.validate((&self.topology, num_clients), p)
        });
        problems.at("placement", |p| {
            self.placement.validate((&self.topology, num_clients), p)
        });
        if let Some(byzantine) = &self.byzantine {
            problems.at("byzantine", |p| byzantine.validate(num_clients, p));
        }
        if let Some(privacy) = &self.privacy {
            problems.at("privacy", |p| privacy.validate(&self.federation, p));
        }
        if let Some(secure) = &self.secure_aggregation {
            problems.at("secure_aggregation", |p| {
                secure.validate(&self.federation, p)
            });
        }
        for (i, fault) in self.faults.iter().enumerate() {
            problems.at(&format!("faults[{i}]"), |p| fault.validate(self, p));
        }
        if let Err(reason) = self.backend.check_available() {
            problems.add("backend", reason);
        }
    }
}

impl Validate for FederationConfig {
    /// Whether the federation is asynchronous (and samples no rounds).
    type Context<'a> = bool;

    fn validate(&self, asynchronous: bool, problems: &mut Problems) {
        let clients = self.num_clients;
        problems.at_least_one("num_clients", clients as u64);
        match (self.clients_per_round, asynchronous) {
            (Some(_), true) => problems.add(
                "clients_per_round",
                "an asynchronous federation samples no rounds: leave clients_per_round out \
                 (asynchronous.concurrency sets the clients training at once)",
            ),
            (None, true) => {}
            (None, false) => problems.add(
                "clients_per_round",
                format!(
                    "is missing; give the clients sampled each round, 1 to federation.num_clients ({clients})"
                ),
            ),
            (Some(per_round), false) => problems.require(
                (1..=clients).contains(&per_round),
                "clients_per_round",
                || {
                    format!(
                        "is {per_round}; must be between 1 and federation.num_clients ({clients})"
                    )
                },
            ),
        }
        problems.at_least_one("rounds", self.rounds.into());
        problems.positive("client_state_memory_mb", self.client_state_memory_mb);
        problems.require(
            (1..=MAX_THREADS).contains(&self.num_parallels),
            "num_parallels",
            || {
                format!(
                    "is {}; must be between 1 and {MAX_THREADS}",
                    self.num_parallels
                )
            },
        );
    }
}

impl Validate for ClientConfig {
    /// The round deadline, which some local work needs.
    type Context<'a> = Option<f64>;

    fn validate(&self, deadline_s: Option<f64>, problems: &mut Problems) {
        let lr = self.lr;
        problems.require(lr > 0.0 && lr.is_finite(), "lr", || {
            format!("is {lr}; must be a number greater than 0")
        });
        problems.fraction_below("momentum", self.momentum, 1.0);
        problems.non_negative("weight_decay", self.weight_decay);
        problems.at_least_one("epochs", self.epochs.into());
        problems.at_least_one("batch_size", self.batch_size as u64);
        problems.at("work", |p| self.work.validate(deadline_s, p));
        problems.at("optimizer", |p| self.optimizer.validate(self.momentum, p));
    }
}

impl Validate for EvalConfig {
    /// `federation.num_clients`.
    type Context<'a> = usize;

    fn validate(&self, num_clients: usize, problems: &mut Problems) {
        problems.at_least_one("every", self.every.into());
        if let Some(every_s) = self.every_s {
            problems.positive("every_s", every_s);
        }
        problems.at_least_one("batch_size", self.batch_size as u64);
        problems.fraction_below("client_test_fraction", self.client_test_fraction, 1.0);
        if let Some(sampled) = self.clients_sampled {
            problems.require(
                (1..=num_clients).contains(&sampled),
                "clients_sampled",
                || {
                    format!(
                        "is {sampled}; must be between 1 and federation.num_clients ({num_clients})"
                    )
                },
            );
        }
    }
}

impl Validate for CheckpointConfig {
    type Context<'a> = ();

    fn validate(&self, (): (), problems: &mut Problems) {
        problems.at_least_one("every", self.every.into());
    }
}

impl Validate for FaultConfig {
    /// The experiment: its rounds, clients and schedulers.
    type Context<'a> = &'a ExperimentConfig;

    fn validate(&self, experiment: &ExperimentConfig, problems: &mut Problems) {
        let fed = &experiment.federation;
        let last = match experiment.asynchronous {
            Some(_) => u32::MAX,
            None => fed.rounds,
        };
        problems.require((1..=last).contains(&self.round), "round", || {
            format!(
                "is {}; must be between 1 and federation.rounds ({})",
                self.round, fed.rounds
            )
        });
        let schedulers = match experiment.topology {
            TopologyConfig::Flat {} => 0,
            TopologyConfig::Hierarchical { schedulers, .. } => schedulers,
        };
        match (self.client, self.scheduler) {
            (Some(client), None) => problems.require(client < fed.num_clients, "client", || {
                format!(
                    "is {client}; client ids run from 0 to federation.num_clients - 1 ({})",
                    fed.num_clients.saturating_sub(1)
                )
            }),
            (None, Some(scheduler)) => {
                problems.require(scheduler < schedulers, "scheduler", || {
                    format!("is {scheduler}; the topology has {schedulers} schedulers")
                });
                problems.require(self.kind == FaultKind::Panic, "kind", || {
                    "a scheduler fault can only be \"panic\"".into()
                });
            }
            _ => problems.add("", "give exactly one of `client` and `scheduler`"),
        }
    }
}

impl ExperimentConfig {
    /// What decides each client's local work.
    pub fn work_plan(&self) -> WorkPlan {
        WorkPlan {
            work: self.client.work,
            epochs: self.client.epochs,
            batch_size: self.client.batch_size,
            deadline_s: self.availability.deadline_s,
            seed: self.seed,
        }
    }
}

/// One problem with the field at `field` of the experiment file at `path`.
fn invalid(path: &Path, field: &str, message: String) -> ConfigError {
    ConfigError::Invalid {
        path: path.to_path_buf(),
        errors: vec![FieldError {
            path: field.to_string(),
            message,
            set_by: None,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_field_is_named_once_wherever_it_is_reported() {
        let unknown = |path: &str| FieldError {
            path: path.to_string(),
            message: "unknown field `lrr`, expected one of `lr`".to_string(),
            set_by: None,
        };
        // At the field itself, as serde reports a typed section's field.
        assert_eq!(unknown("client.lrr").field(), "client.lrr");
        assert_eq!(unknown("lrr").field(), "lrr");
        // At the object that holds it, as a registered section's parameters report it.
        assert_eq!(unknown("strategy").field(), "strategy.lrr");
        assert_eq!(unknown(".").field(), "lrr");
        let other = FieldError {
            message: "must be positive".to_string(),
            ..unknown("client.lr")
        };
        assert_eq!(other.field(), "client.lr");
    }

    #[test]
    fn a_named_section_is_a_name_alone_or_an_object_with_one() {
        let named: NamedSection = serde_json::from_str(r#""cnn""#).unwrap();
        assert_eq!(named, NamedSection::named("cnn"));
        let full: NamedSection =
            serde_json::from_str(r#"{"name": "mlp", "hidden": [10]}"#).unwrap();
        assert_eq!(full.name, "mlp");
        assert_eq!(full.params["hidden"], serde_json::json!([10]));
        assert_eq!(
            serde_json::to_string(&full).unwrap(),
            r#"{"name":"mlp","hidden":[10]}"#
        );
        for (text, expected) in [
            (r#"{"hidden": [10]}"#, "missing field `name`"),
            (r#"{"name": 3}"#, "`name` must be a string, not 3"),
            (
                "7",
                "expected a name, or an object with a name and parameters, not 7",
            ),
        ] {
            let error = serde_json::from_str::<NamedSection>(text).unwrap_err();
            assert!(error.to_string().contains(expected), "{text}: {error}");
        }
    }
}
