//! The message path alone: rounds per second of a federation whose clients answer at once
//! with the model they were sent, so only the tree works (downlinks, forwarding, partial and
//! global aggregation, traffic accounting). 1,000 clients, all sampled each round, in 10
//! groups; a model of 1,663,370 parameters (the CNN's size). Flat (one group of 1,000) against
//! 10 schedulers in relay and in aggregate mode.
//!
//! Every round moves 1,000 uplinks of 6.7 MB: a relay round holds about 6.7 GB of updates at
//! the server before it aggregates, so this needs a machine with some 16 GB of memory.

use std::collections::HashMap;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fedsim::config::{NetworkConfig, SchedulerMode, TopologyConfig};
use fedsim::network::{ClientInfo, Update};
use fedsim::strategy::FedAvg;
use fedsim::topology::{self, GroupSetup, Plan, ServerSetup};
use fedsim::trainer::{ClientFailure, ClientTrainer, Job};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CLIENTS: usize = 1_000;
const GROUPS: usize = 10;
const PARAMS: usize = 1_663_370;
const SAMPLES: usize = 600;
const ROUNDS: u32 = 3;

/// A client that "trains" by returning the model it got.
struct Echo;

impl ClientTrainer for Echo {
    fn spawn(&self, job: Job, done: flume::Sender<Result<Update, ClientFailure>>) {
        let update = Update {
            round: job.round,
            clients: vec![job.client],
            num_samples: SAMPLES,
            train_loss: 0.0,
            params: job.model.to_vec(),
        };
        let _ = done.send(Ok(update));
    }
}

fn plan(topology: TopologyConfig) -> Plan {
    let groups = topology
        .groups(CLIENTS)
        .into_iter()
        .enumerate()
        .map(|(index, ids)| GroupSetup {
            index,
            clients: ids
                .into_iter()
                .map(|id| ClientInfo {
                    id,
                    num_samples: SAMPLES,
                })
                .collect(),
            seed: 0,
            dropout: 0.0,
            epochs: 1,
            speeds: Arc::new(vec![f64::INFINITY; CLIENTS]),
        })
        .collect();
    Plan {
        server: ServerSetup {
            seed: 0,
            rounds: ROUNDS,
            clients_per_round: CLIENTS,
            deadline_s: None,
            initial_model: vec![0.5; PARAMS],
            strategy: Box::new(FedAvg),
            evaluator: None,
        },
        topology,
        network: NetworkConfig::default(),
        groups,
        scheduler_panics: HashMap::new(),
    }
}

fn run(topology: &TopologyConfig) {
    let trainer: Arc<dyn ClientTrainer> = Arc::new(Echo);
    let result = topology::run(plan(topology.clone()), trainer, |_| Ok::<_, ()>(()));
    result.unwrap().expect("the federation runs");
}

fn message_path(c: &mut Criterion) {
    let hierarchical = |mode| TopologyConfig::Hierarchical {
        schedulers: GROUPS,
        mode,
        edge_rounds: 1,
        assignment: None,
    };
    let cases = [
        ("flat", TopologyConfig::Flat {}),
        ("relay", hierarchical(SchedulerMode::Relay)),
        ("aggregate", hierarchical(SchedulerMode::Aggregate)),
    ];
    let mut group = c.benchmark_group("message_path_1000_clients");
    group.throughput(Throughput::Elements(u64::from(ROUNDS)));
    group.sample_size(10);
    for (name, topology) in cases {
        group.bench_function(name, |b| b.iter(|| run(&topology)));
    }
    group.finish();
}

criterion_group!(benches, message_path);
criterion_main!(benches);
