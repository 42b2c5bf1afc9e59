//! The experiment's data as the federation holds it: each client's training samples, the test
//! samples the global model is scored on, and each scored client's own test samples. A data
//! set is loaded whole and split among the clients, or, where its clients are made one at a
//! time and the partition is `natural`, only its roster is held and each client's samples are
//! made when it is sampled.

use std::sync::Arc;

use rayon::prelude::*;
use serde::Serialize;

use crate::config::ExperimentConfig;
use crate::data::clients::{Gathered, HoldOut, Part};
use crate::data::partition::{Partition, PartitionError, PartitionStats};
use crate::data::partitioner::NaturalSplit;
use crate::data::{
    ClientData, ClientSource, ClientSplit, DataContext, DataError, DataFile, DataShape, Dataset,
    Partitioner, Roster, SplitInput, TrainTest,
};
use crate::error::Error;
use crate::network::ClientId;
use crate::registry::{DataChoice, PartitionChoice};
use crate::seed::{Purpose, stream};

/// The draw of the clients scored on their own test samples (`eval.clients_sampled`).
const EVAL_CLIENTS: Purpose = Purpose::new("eval-clients");

/// The experiment's data as its parts read it.
pub(super) struct HeldData {
    /// What a sample is, and the number of classes.
    pub shape: DataShape,
    /// The samples each client trains on (less any held out).
    pub clients: ClientData,
    /// Which client holds which samples: the split of a data set held whole, or the roster
    /// of one whose clients are made on demand.
    pub allocation: Allocation,
    /// The samples the global model is scored on.
    pub test: Arc<Dataset>,
    /// Each scored client's test samples (held out of its training samples, or its own), if
    /// clients are scored.
    pub client_tests: Option<Arc<Gathered>>,
    /// The clients `eval.clients_sampled` draws, if it does.
    pub eval_clients: Option<Vec<ClientId>>,
    /// The data files read, for the manifest.
    pub files: Vec<DataFile>,
}

/// Which client holds which samples, as `partition.json` records it.
pub(super) enum Allocation {
    /// A training set held whole and its split among the clients (before any hold-out).
    Split {
        /// The training set.
        train: Arc<Dataset>,
        /// Each client's indices into it.
        partition: Arc<Partition>,
    },
    /// Clients made on demand, and how many samples each holds.
    OnDemand(Arc<dyn ClientSource>, Arc<Roster>),
}

/// `partition.json` of a run whose clients are made on demand.
#[derive(Serialize)]
struct RosterFile {
    clients_on_demand: RosterCounts,
}

/// Each client's training and test samples, by client id.
#[derive(Serialize)]
struct RosterCounts {
    train: Vec<usize>,
    test: Vec<usize>,
}

impl Allocation {
    /// The text of `partition.json`.
    pub fn to_json(&self) -> String {
        match self {
            Allocation::Split { partition, .. } => partition.to_json(),
            Allocation::OnDemand(_, roster) => {
                let clients = 0..roster.len();
                let file = RosterFile {
                    clients_on_demand: RosterCounts {
                        train: clients.clone().map(|c| roster.train(c)).collect(),
                        test: clients.map(|c| roster.test(c)).collect(),
                    },
                };
                serde_json::to_string(&file).expect("counts always serialise")
            }
        }
    }

    /// Per-client label counts of the training samples and their spread. Clients made on
    /// demand are each made (in parallel) to count their labels.
    pub fn stats(&self) -> Result<PartitionStats, DataError> {
        let counts = match self {
            Allocation::Split { train, partition } => partition
                .clients
                .iter()
                .map(|indices| train.label_counts(indices))
                .collect(),
            Allocation::OnDemand(source, roster) => (0..roster.len())
                .into_par_iter()
                .map(|client| {
                    let train = source.client(client)?.train;
                    Ok(train.label_counts(&Vec::from_iter(0..train.len())))
                })
                .collect::<Result<_, DataError>>()?,
        };
        Ok(PartitionStats::of(counts))
    }

    /// What a run records of the split as it starts: [`stats`](Self::stats) where the
    /// samples are held, the sample counts alone where clients are made on demand (making
    /// every client to count its labels would cost as long as generating the whole set).
    pub fn stats_at_start(&self) -> Result<PartitionStats, DataError> {
        match self {
            Allocation::Split { .. } => self.stats(),
            Allocation::OnDemand(_, roster) => Ok(PartitionStats::of_sizes(
                (0..roster.len()).map(|c| roster.train(c)).collect(),
            )),
        }
    }
}

impl HeldData {
    /// Loads or rosters the data `data_set` names and splits it as `scheme` says.
    pub fn prepare(
        config: &ExperimentConfig,
        data_set: &DataChoice,
        scheme: &PartitionChoice,
        context: &DataContext,
    ) -> Result<Self, Error> {
        let on_demand = match scheme.name() == NaturalSplit.name() {
            true => data_set.clients_on_demand(context)?,
            false => None,
        };
        match on_demand {
            Some(source) => Self::on_demand(config, source, context.split_seed),
            None => Self::pooled(config, scheme, data_set.load(context)?, context.split_seed),
        }
    }

    /// A data set held whole, split among the clients.
    fn pooled(
        config: &ExperimentConfig,
        scheme: &PartitionChoice,
        data: TrainTest,
        split_seed: u64,
    ) -> Result<Self, Error> {
        let split = split_data(config, scheme, &data, split_seed)?;
        let fraction = config.eval.client_test_fraction;
        let (training, held_out) = split.train.hold_out(fraction, split_seed);
        let (train, test) = (Arc::new(data.train), Arc::new(data.test));
        let clients = ClientData::Pooled {
            data: train.clone(),
            clients: Arc::new(training),
        };
        let pooled = |data: &Arc<Dataset>, clients| ClientData::Pooled {
            data: data.clone(),
            clients: Arc::new(Partition { clients }),
        };
        let own_tests = split.test.map(|own| pooled(&test, own));
        let tested = match &own_tests {
            _ if fraction > 0.0 => Some(pooled(&train, held_out)),
            own => own.clone(),
        };
        let eval_clients = sample_of_clients(config);
        let scored = scored(config, eval_clients.as_deref());
        let client_tests = tested
            .map(|tested| tested.gather(&scored))
            .transpose()?
            .map(Arc::new);
        // The global model is scored on the sampled clients' own test samples where those make
        // the test set; on the whole test set otherwise.
        let test = match (own_tests, &eval_clients) {
            (Some(own), Some(_)) => Arc::new(joined(&own.gather(&scored)?, test.shape())),
            _ => test,
        };
        Ok(Self {
            shape: train.shape(),
            clients,
            allocation: Allocation::Split {
                train,
                partition: Arc::new(split.train),
            },
            test,
            client_tests,
            eval_clients,
            files: data.files,
        })
    }

    /// A data set whose clients are made when sampled: only the roster is held, with the test
    /// samples of the clients scored.
    fn on_demand(
        config: &ExperimentConfig,
        source: Arc<dyn ClientSource>,
        split_seed: u64,
    ) -> Result<Self, Error> {
        let roster = Arc::new(source.roster());
        let num_clients = config.federation.num_clients;
        if roster.len() != num_clients {
            return Err(PartitionError(format!(
                "federation.num_clients is {num_clients}, and the data set defines {} clients; \
                 the natural partition needs them to agree",
                roster.len()
            ))
            .into());
        }
        let fraction = config.eval.client_test_fraction;
        let part = |part| ClientData::OnDemand {
            source: source.clone(),
            roster: roster.clone(),
            part,
            hold_out: HoldOut {
                fraction,
                seed: split_seed,
            },
        };
        let eval_clients = sample_of_clients(config);
        let scored = scored(config, eval_clients.as_deref());
        let own_tests = part(Part::Test).gather(&scored)?;
        let test = own_tests.data.clone();
        let client_tests = if fraction > 0.0 {
            Some(part(Part::HeldOut).gather(&scored)?)
        } else {
            (!own_tests.clients.is_empty()).then_some(own_tests)
        };
        Ok(Self {
            shape: source.shape(),
            clients: part(Part::Training),
            allocation: Allocation::OnDemand(source.clone(), roster),
            test,
            client_tests: client_tests.map(Arc::new),
            eval_clients,
            files: source.files(),
        })
    }
}

/// The clients `eval.clients_sampled` draws, in id order, if it draws any.
fn sample_of_clients(config: &ExperimentConfig) -> Option<Vec<ClientId>> {
    let sampled = config.eval.clients_sampled?;
    let rng = &mut stream(config.seed, EVAL_CLIENTS, 0, 0);
    let mut clients =
        rand::seq::index::sample(rng, config.federation.num_clients, sampled).into_vec();
    clients.sort_unstable();
    Some(clients)
}

/// The clients scored on their own test samples: the sample drawn, else every client.
fn scored(config: &ExperimentConfig, sample: Option<&[ClientId]>) -> Vec<ClientId> {
    sample.map_or_else(
        || (0..config.federation.num_clients).collect(),
        <[_]>::to_vec,
    )
}

/// The samples of every client of `gathered`, one client after another, as one data set.
fn joined(gathered: &Gathered, shape: DataShape) -> Dataset {
    let parts: Vec<(&Dataset, &[usize])> = gathered
        .clients
        .iter()
        .map(|(_, indices)| (&*gathered.data, indices.as_slice()))
        .collect();
    Dataset::gathered(&parts, shape)
}

/// Splits the training set among the clients as `scheme` says.
fn split_data(
    config: &ExperimentConfig,
    scheme: &PartitionChoice,
    data: &TrainTest,
    split_seed: u64,
) -> Result<ClientSplit, Error> {
    let num_clients = config.federation.num_clients;
    let labels = data.train.labels();
    if num_clients > labels.len() {
        return Err(PartitionError(format!(
            "federation.num_clients {num_clients} exceeds the {} training samples; every client needs one",
            labels.len()
        ))
        .into());
    }
    let input = SplitInput {
        labels,
        num_classes: data.train.num_classes(),
        num_clients,
        natural: data.natural.as_ref(),
    };
    let split = scheme.split(&input, &mut stream(split_seed, Purpose::PARTITION, 0, 0))?;
    if split.train.num_clients() != num_clients {
        return Err(PartitionError(format!(
            "the {:?} scheme split the data among {} clients; federation.num_clients is {num_clients}",
            scheme.name(),
            split.train.num_clients()
        ))
        .into());
    }
    Ok(split)
}
