//! One experiment end to end: data, partition, initial model, federation, results.

use std::collections::HashMap;
use std::sync::Arc;

use crate::Error;
use crate::config::{DatasetKind, ExperimentConfig, PartitionConfig};
use crate::data::partition::{Partition, PartitionError};
use crate::data::{Dataset, mnist};
use crate::model::Net;
use crate::model::flat::{Layout, initial_params};
use crate::report::{Progress, RoundRecord, RunFolder, Summary};
use crate::seed::{Purpose, stream};
use crate::strategy;
use crate::topology::{self, Evaluator, GroupSetup, Plan, ServerSetup};
use crate::trainer::{Trainer, TrainerSetup};

/// An experiment with its data loaded and partitioned, ready to run.
pub struct Experiment {
    config: ExperimentConfig,
    train: Arc<Dataset>,
    test: Arc<Dataset>,
    partition: Arc<Partition>,
}

/// What a finished run returns besides its files.
#[derive(Debug)]
pub struct RunResult {
    /// The contents of `summary.json`.
    pub summary: Summary,
    /// Every round's record, as in `metrics.jsonl`.
    pub rounds: Vec<RoundRecord>,
    /// The final global model's flat parameters.
    pub model: Vec<f32>,
}

impl Experiment {
    /// Loads the data set and splits it as the config says.
    pub fn prepare(config: ExperimentConfig) -> Result<Self, Error> {
        let data = match config.data.dataset {
            DatasetKind::Mnist => mnist::load(&config.data.dir, config.data.normalize)?,
        };
        let partition = partition(&config, &data.train)?;
        Ok(Self {
            config,
            train: Arc::new(data.train),
            test: Arc::new(data.test),
            partition: Arc::new(partition),
        })
    }

    /// The resolved config.
    pub fn config(&self) -> &ExperimentConfig {
        &self.config
    }

    /// The split of the training set among clients.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// Per-client label counts: `counts[client][label]`.
    pub fn label_counts(&self) -> Vec<Vec<usize>> {
        self.partition
            .clients
            .iter()
            .map(|indices| self.train.label_counts(indices))
            .collect()
    }

    /// Runs the federation, writing results into `folder` as they are produced and showing
    /// each round on `progress`.
    pub fn run(&self, folder: &mut RunFolder, progress: &Progress) -> Result<RunResult, Error> {
        let config = &self.config;
        folder.write_json("config.json", config)?;
        folder.write_atomically("partition.json", self.partition.to_json().as_bytes())?;
        let (train, test) = (&self.train, &self.test);
        let layout = Layout::of(&Net::new(
            config.model,
            train.sample_shape(),
            train.num_classes(),
            &config.backend.device(),
        ));
        let initial_model =
            initial_params(&layout, &mut stream(config.seed, Purpose::ModelInit, 0, 0));
        let trainer = Trainer::new(
            TrainerSetup {
                seed: config.seed,
                data: train.clone(),
                partition: self.partition.clone(),
                model: config.model,
                client: config.client.clone(),
                backend: config.backend,
                faults: config.faults.clone(),
            },
            config.federation.num_parallels,
        )
        .map_err(|e| Error::Threads(e.to_string()))?;
        let server = ServerSetup {
            seed: config.seed,
            rounds: config.federation.rounds,
            clients_per_round: config.federation.clients_per_round,
            deadline_s: config.availability.deadline_s,
            initial_model,
            strategy: strategy::from_kind(config.strategy.name),
            evaluator: Some(Evaluator {
                test_data: test.clone(),
                eval: config.eval,
                model: config.model,
                backend: config.backend,
            }),
        };
        let speeds = Arc::new(
            config
                .network
                .compute
                .speeds(config.seed, config.federation.num_clients),
        );
        let groups = config
            .topology
            .groups(config.federation.num_clients)
            .iter()
            .enumerate()
            .map(|(index, ids)| GroupSetup {
                index,
                clients: trainer.clients(ids),
                seed: config.seed,
                dropout: config.availability.dropout,
                epochs: config.client.epochs,
                speeds: speeds.clone(),
            })
            .collect();
        let mut scheduler_panics: HashMap<usize, Vec<u32>> = HashMap::new();
        for fault in &config.faults {
            if let Some(scheduler) = fault.scheduler {
                scheduler_panics
                    .entry(scheduler)
                    .or_default()
                    .push(fault.round);
            }
        }
        let plan = Plan {
            server,
            topology: config.topology.clone(),
            network: config.network.clone(),
            groups,
            scheduler_panics,
        };
        let mut rounds = Vec::new();
        let federation = topology::run(plan, Arc::new(trainer), |record| {
            folder.append_round(&record)?;
            progress.round(&record);
            rounds.push(record);
            Ok::<_, Error>(())
        })??;
        let model = federation.model;
        let bytes: Vec<u8> = model.iter().flat_map(|v| v.to_le_bytes()).collect();
        folder.write_atomically("model.f32", &bytes)?;
        folder.write_json("model-layout.json", &layout)?;
        let summary = Summary::new(&config.name, &rounds, &model);
        folder.write_json("summary.json", &summary)?;
        Ok(RunResult {
            summary,
            rounds,
            model,
        })
    }
}

fn partition(config: &ExperimentConfig, train: &Dataset) -> Result<Partition, Error> {
    let num_clients = config.federation.num_clients;
    let labels = train.labels();
    if num_clients > labels.len() {
        return Err(PartitionError(format!(
            "federation.num_clients {num_clients} exceeds the {} training samples; every client needs one",
            labels.len()
        ))
        .into());
    }
    let rng = &mut stream(config.seed, Purpose::Partition, 0, 0);
    Ok(match &config.partition {
        PartitionConfig::Iid => Partition::iid(labels.len(), num_clients, rng),
        PartitionConfig::Dirichlet { alpha, min_size } => Partition::dirichlet(
            labels,
            train.num_classes(),
            num_clients,
            *alpha,
            *min_size,
            rng,
        )?,
        PartitionConfig::Shards { num_shards } => {
            Partition::shards(labels, num_clients, *num_shards, rng)?
        }
        PartitionConfig::File { file } => Partition::load(file, num_clients, labels.len())?,
    })
}
