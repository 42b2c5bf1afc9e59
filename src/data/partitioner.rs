//! What an experiment file's `partition` section names: a [`Partitioner`], registered as
//! fedsim's own schemes are ([`crate::registry::RegistryBuilder::partitioner`]), and the
//! built-in schemes, each a thin declaration over its split in [`super::partition`].

use std::path::{Path, PathBuf};

use rand_chacha::ChaCha12Rng;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::NaturalClients;
use super::partition::{Partition, PartitionError};
use crate::config::NoParams;
use crate::config::check::Problems;

/// A way to split the training set among clients that an experiment file can name, with its
/// parameters beside the scheme: `{"scheme": "dirichlet", "alpha": 0.5}`.
pub trait Partitioner: Send + Sync + 'static {
    /// The parameters, unknown fields rejected (`#[serde(deny_unknown_fields)]`); a field
    /// without a default is required. `seed` is the section's own, for every scheme that
    /// draws.
    type Params: Serialize + DeserializeOwned + Clone + Send + Sync + 'static;

    /// The `scheme` an experiment file gives: lowercase letters, digits, `_` and `-`.
    fn name(&self) -> &'static str;

    /// What it does and where it comes from, in a line, for `fedsim schemes`.
    fn about(&self) -> &'static str;

    /// What each parameter means, by field name.
    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// Whether the split draws at random, so that the section's `seed` applies to it.
    fn draws(&self) -> bool {
        true
    }

    /// Makes the relative paths among the parameters relative to `folder`, the experiment
    /// file's.
    fn resolve_paths(&self, _params: &mut Self::Params, _folder: &Path) {}

    /// Adds to `problems` every rule the parameters break (fields relative to the `partition`
    /// section) for the experiment `context` describes.
    fn check(&self, _params: &Self::Params, _context: &SplitContext<'_>, _problems: &mut Problems) {
    }

    /// Splits the training set, each random choice drawn from `rng` (the partition's stream).
    fn split(
        &self,
        params: &Self::Params,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError>;

    /// The parameters as a report labels the partition, in the brackets after the scheme's
    /// name: `["0.5"]` makes `dirichlet(0.5)`. By default every parameter as `name=value`.
    fn label(&self, params: &Self::Params) -> Vec<String> {
        match serde_json::to_value(params) {
            Ok(serde_json::Value::Object(fields)) => named_label(&fields),
            _ => Vec::new(),
        }
    }
}

/// Parameters as a label shows them by default: every one as `name=value`, strings without
/// their quotes.
pub(crate) fn named_label(fields: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    let plain = |value: &serde_json::Value| match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    fields
        .iter()
        .map(|(name, value)| format!("{name}={}", plain(value)))
        .collect()
}

/// What a partition's rules may depend on besides its own parameters.
#[derive(Debug, Clone, Copy)]
pub struct SplitContext<'a> {
    /// `federation.num_clients`.
    pub num_clients: usize,
    /// The data set's name.
    pub data_set: &'a str,
    /// Whether the data set defines its own clients.
    pub natural_clients: bool,
}

/// What a split is drawn from.
#[derive(Debug, Clone, Copy)]
pub struct SplitInput<'a> {
    /// The training set's labels, in sample order.
    pub labels: &'a [u8],
    /// The number of classes; every label is below it.
    pub num_classes: usize,
    /// `federation.num_clients`: the split has one entry per client.
    pub num_clients: usize,
    /// The clients the data set defines, if it defines clients.
    pub natural: Option<&'a NaturalClients>,
}

/// A split of the training set, and the clients' own test samples where the split gives
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSplit {
    /// Each client's indices into the training set.
    pub train: Partition,
    /// Each client's indices into the test set, on which it is evaluated: the natural
    /// clients' own test samples. `None` for a split of the training set alone.
    pub test: Option<Vec<Vec<usize>>>,
}

impl From<Partition> for ClientSplit {
    fn from(train: Partition) -> Self {
        Self { train, test: None }
    }
}

/// Balanced IID: shuffle, then deal out equal parts.
#[derive(Debug, Clone, Copy)]
pub struct IidSplit;

impl Partitioner for IidSplit {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        "iid"
    }

    fn about(&self) -> &'static str {
        "shuffle and deal out equal parts (the default)"
    }

    fn split(
        &self,
        _: &NoParams,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        Ok(Partition::iid(input.labels.len(), input.num_clients, rng).into())
    }
}

/// The parameters of [`DirichletSplit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirichletParams {
    /// Concentration of the label shares.
    pub alpha: f64,
    /// The smallest client it accepts.
    #[serde(default = "default_min_size")]
    pub min_size: usize,
}

/// The default smallest client for the Dirichlet scheme.
const DEFAULT_MIN_SIZE: usize = 10;

fn default_min_size() -> usize {
    DEFAULT_MIN_SIZE
}

/// Label skew by shares drawn from Dir(alpha): [`Partition::dirichlet`].
#[derive(Debug, Clone, Copy)]
pub struct DirichletSplit;

impl Partitioner for DirichletSplit {
    type Params = DirichletParams;

    fn name(&self) -> &'static str {
        "dirichlet"
    }

    fn about(&self) -> &'static str {
        "label skew: each class split among clients by shares drawn from Dir(alpha) (Hsu et al. 2019)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "alpha",
                "concentration, required; small values (0.1) give a few classes per client, large (100) near IID",
            ),
            (
                "min_size",
                "the smallest client: the draw is repeated until every client has this many samples",
            ),
        ]
    }

    fn check(&self, params: &DirichletParams, _: &SplitContext<'_>, problems: &mut Problems) {
        problems.positive("alpha", params.alpha);
        // A client without samples would train on nothing and weigh nothing.
        if params.min_size < 1 {
            problems.add("min_size", "must be at least 1");
        }
    }

    fn split(
        &self,
        params: &DirichletParams,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        let DirichletParams { alpha, min_size } = *params;
        let (labels, classes, clients) = (input.labels, input.num_classes, input.num_clients);
        Ok(Partition::dirichlet(labels, classes, clients, alpha, min_size, rng)?.into())
    }

    fn label(&self, params: &DirichletParams) -> Vec<String> {
        let mut parts = vec![number(params.alpha)];
        if params.min_size != DEFAULT_MIN_SIZE {
            parts.push(format!("min_size={}", params.min_size));
        }
        parts
    }
}

/// A number as JSON writes it (`1.0`), as every other value of a report's labels reads.
fn number(value: f64) -> String {
    serde_json::Value::from(value).to_string()
}

/// The parameters of [`ShardsSplit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardsParams {
    /// Number of shards.
    pub num_shards: usize,
}

/// The FedAvg paper's split by sorted shards: [`Partition::shards`].
#[derive(Debug, Clone, Copy)]
pub struct ShardsSplit;

impl Partitioner for ShardsSplit {
    type Params = ShardsParams;

    fn name(&self) -> &'static str {
        "shards"
    }

    fn about(&self) -> &'static str {
        "the FedAvg paper's split: sort by label, cut into shards, deal each client an equal number (McMahan et al. 2017)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "num_shards",
            "number of shards, required; a multiple of federation.num_clients",
        )]
    }

    fn check(&self, params: &ShardsParams, context: &SplitContext<'_>, problems: &mut Problems) {
        let (shards, clients) = (params.num_shards, context.num_clients);
        if !(shards >= clients && clients > 0 && shards % clients == 0) {
            problems.add(
                "num_shards",
                format!("is {shards}; must be a multiple of federation.num_clients ({clients})"),
            );
        }
    }

    fn split(
        &self,
        params: &ShardsParams,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        let shards = params.num_shards;
        Ok(Partition::shards(input.labels, input.num_clients, shards, rng)?.into())
    }

    fn label(&self, params: &ShardsParams) -> Vec<String> {
        vec![params.num_shards.to_string()]
    }
}

/// The parameters of [`LabelsSplit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelsParams {
    /// Distinct labels per client.
    pub labels_per_client: usize,
}

/// Label-quantity skew, NIID-Bench's `#C=k`: [`Partition::label_quantity`].
#[derive(Debug, Clone, Copy)]
pub struct LabelsSplit;

impl Partitioner for LabelsSplit {
    type Params = LabelsParams;

    fn name(&self) -> &'static str {
        "labels"
    }

    fn about(&self) -> &'static str {
        "label-quantity skew: each client holds k distinct labels (NIID-Bench's #C=k, Li et al. 2022)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "labels_per_client",
            "distinct labels per client, required; at least 1, at most the number of labels",
        )]
    }

    fn check(&self, params: &LabelsParams, _: &SplitContext<'_>, problems: &mut Problems) {
        if params.labels_per_client < 1 {
            problems.add("labels_per_client", "must be at least 1");
        }
    }

    fn split(
        &self,
        params: &LabelsParams,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        let (labels, classes, clients) = (input.labels, input.num_classes, input.num_clients);
        let per_client = params.labels_per_client;
        Ok(Partition::label_quantity(labels, classes, clients, per_client, rng)?.into())
    }

    fn label(&self, params: &LabelsParams) -> Vec<String> {
        vec![params.labels_per_client.to_string()]
    }
}

/// The parameters of [`QuantitySplit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantityParams {
    /// Spread of the sizes.
    pub sigma: f64,
}

/// Quantity skew by log-normal sizes: [`Partition::quantity`].
#[derive(Debug, Clone, Copy)]
pub struct QuantitySplit;

impl Partitioner for QuantitySplit {
    type Params = QuantityParams;

    fn name(&self) -> &'static str {
        "quantity"
    }

    fn about(&self) -> &'static str {
        "quantity skew: client sizes proportional to LogNormal(0, sigma) draws, labels IID"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "sigma",
            "spread of the sizes, required; 0 gives equal clients, 1 and more a few large ones",
        )]
    }

    fn check(&self, params: &QuantityParams, _: &SplitContext<'_>, problems: &mut Problems) {
        problems.non_negative("sigma", params.sigma);
    }

    fn split(
        &self,
        params: &QuantityParams,
        input: &SplitInput<'_>,
        rng: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        let samples = input.labels.len();
        Ok(Partition::quantity(samples, input.num_clients, params.sigma, rng)?.into())
    }

    fn label(&self, params: &QuantityParams) -> Vec<String> {
        vec![number(params.sigma)]
    }
}

/// The clients the data set defines, each evaluated on its own test samples.
#[derive(Debug, Clone, Copy)]
pub struct NaturalSplit;

impl Partitioner for NaturalSplit {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        "natural"
    }

    fn about(&self) -> &'static str {
        "the clients the data set defines (FEMNIST's writers, Shakespeare's roles, the synthetic set's users)"
    }

    fn draws(&self) -> bool {
        false
    }

    fn check(&self, _: &NoParams, context: &SplitContext<'_>, problems: &mut Problems) {
        if !context.natural_clients {
            problems.add(
                "scheme",
                format!(
                    "\"natural\" needs a data set that defines its clients; {:?} does not",
                    context.data_set
                ),
            );
        }
    }

    fn split(
        &self,
        _: &NoParams,
        input: &SplitInput<'_>,
        _: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        let natural = input.natural.ok_or_else(|| {
            PartitionError("the data set defines no clients for the natural partition".into())
        })?;
        if natural.train.len() != input.num_clients {
            return Err(PartitionError(format!(
                "federation.num_clients is {}, and the data set defines {} clients; the natural partition needs them to agree",
                input.num_clients,
                natural.train.len()
            )));
        }
        Ok(ClientSplit {
            train: Partition {
                clients: natural.train.clone(),
            },
            test: Some(natural.test.clone()),
        })
    }
}

/// The parameters of [`FileSplit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileParams {
    /// The partition file.
    pub file: PathBuf,
}

/// A partition file an earlier run wrote (`partition.json`), written `{"file": "p.json"}`.
#[derive(Debug, Clone, Copy)]
pub struct FileSplit;

impl Partitioner for FileSplit {
    type Params = FileParams;

    fn name(&self) -> &'static str {
        "file"
    }

    fn about(&self) -> &'static str {
        "a partition file an earlier run wrote (partition.json), written {\"file\": \"p.json\"}"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "file",
            "the file, required; relative paths are resolved against the experiment file's folder",
        )]
    }

    fn draws(&self) -> bool {
        false
    }

    fn resolve_paths(&self, params: &mut FileParams, folder: &Path) {
        params.file = folder.join(&params.file);
    }

    fn check(&self, params: &FileParams, _: &SplitContext<'_>, problems: &mut Problems) {
        if !params.file.is_file() {
            let file = params.file.display();
            problems.add("file", format!("file {file} does not exist"));
        }
    }

    fn split(
        &self,
        params: &FileParams,
        input: &SplitInput<'_>,
        _: &mut ChaCha12Rng,
    ) -> Result<ClientSplit, PartitionError> {
        let samples = input.labels.len();
        let partition = Partition::load(&params.file, input.num_clients, samples)
            .map_err(|error| PartitionError(error.to_string()))?;
        Ok(partition.into())
    }

    fn label(&self, params: &FileParams) -> Vec<String> {
        vec![params.file.display().to_string()]
    }
}
