//! The message path alone: rounds per second of a federation whose clients answer at once
//! with the model they were sent (the echo trainer), so only the tree works (downlinks, forwarding, partial and
//! global aggregation, traffic accounting). 1,000 clients, all sampled each round, in 10
//! groups; a model of 1,663,370 parameters (the CNN's size). Flat (one group of 1,000) against
//! 10 schedulers in relay and in aggregate mode.
//!
//! Every round moves 1,000 uplinks of 6.7 MB. The server folds each into the round's mean as
//! its turn comes, and uplinks hold one message before their sender waits, so a round holds a
//! few updates per group rather than all 1,000 (6.7 GB).

mod common;

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fedsim::config::{SchedulerMode, TopologyConfig};
use fedsim::training::{ClientTrainer, EchoTrainer, InjectedFaults};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CLIENTS: usize = 1_000;
const GROUPS: usize = 10;
const PARAMS: usize = 1_663_370;
const SAMPLES: usize = 600;
const ROUNDS: u32 = 3;
/// Threads that answer for the clients: the machine's two cores.
const ECHO_THREADS: usize = 2;

fn run(topology: &TopologyConfig) {
    let echo = EchoTrainer::new(
        vec![SAMPLES; CLIENTS],
        InjectedFaults::default(),
        ECHO_THREADS,
    );
    let trainer: Arc<dyn ClientTrainer> = Arc::new(echo.expect("the echo pool starts"));
    let plan = common::plan(
        (topology.clone(), topology.groups(CLIENTS)),
        &[SAMPLES; CLIENTS],
        (CLIENTS, ROUNDS),
        vec![0.5; PARAMS],
    );
    common::run(plan, trainer);
}

fn message_path(c: &mut Criterion) {
    fedsim::cli::disable_huge_pages();
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
