//! The message path alone: rounds per second of a federation whose clients answer at once
//! with the model they were sent (the echo trainer), so only the tree works (downlinks, forwarding, partial and
//! global aggregation, traffic accounting). 1,000 clients, all sampled each round, in 10
//! groups; a model of 1,663,370 parameters (the CNN's size). Flat (one group of 1,000) against
//! 10 schedulers in relay and in aggregate mode.
//!
//! Every round moves 1,000 uplinks of 6.7 MB: a relay round holds about 6.7 GB of updates at
//! the server before it aggregates, so this needs a machine with some 16 GB of memory.

use std::collections::HashMap;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fedsim::config::{FailurePolicy, NetworkConfig, SchedulerMode, TopologyConfig, WorkPlan};
use fedsim::stop::StopSignal;
use fedsim::strategy::{FedAvg, StrategyConfig};
use fedsim::topology::{self, GroupSetup, Plan, ServerSetup, Start};
use fedsim::trainer::{ClientStates, ClientTrainer, EchoTrainer, InjectedFaults};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CLIENTS: usize = 1_000;
const GROUPS: usize = 10;
const PARAMS: usize = 1_663_370;
const SAMPLES: usize = 600;
const ROUNDS: u32 = 3;
/// Threads that answer for the clients: the machine's two cores.
const ECHO_THREADS: usize = 2;

fn plan(topology: TopologyConfig) -> Plan {
    let groups = GroupSetup::for_parts(
        topology.groups(CLIENTS),
        &[SAMPLES; CLIENTS],
        0,
        0.0,
        WorkPlan::fixed(1, 32),
        Arc::new(vec![f64::INFINITY; CLIENTS]),
    );
    Plan {
        server: ServerSetup {
            seed: 0,
            rounds: ROUNDS,
            clients_per_round: CLIENTS,
            deadline_s: None,
            on_client_failure: FailurePolicy::Abort,
            start: Start::default(),
            initial_model: vec![0.5; PARAMS],
            strategy: Box::new(FedAvg),
            client_states: Arc::new(ClientStates::new(CLIENTS)),
            evaluator: None,
        },
        topology,
        network: NetworkConfig::default(),
        groups,
        scheduler_panics: HashMap::new(),
        edge_aggregation: StrategyConfig::default().edge_aggregation(),
        stop: StopSignal::new(),
    }
}

fn run(topology: &TopologyConfig) {
    let echo = EchoTrainer::new(
        vec![SAMPLES; CLIENTS],
        InjectedFaults::default(),
        ECHO_THREADS,
    );
    let trainer: Arc<dyn ClientTrainer> = Arc::new(echo.expect("the echo pool starts"));
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
