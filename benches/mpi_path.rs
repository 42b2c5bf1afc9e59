//! The message path over MPI against in-process channels: messages and bytes per second
//! through a federation whose clients answer at once (the echo trainer), so that only the
//! tree and its links work. 100 clients, all sampled in each of 3 rounds, a model of 1,663,370
//! parameters (the CNN's), in the flat topology and under 2 relaying schedulers; first in one
//! process, then over 3 ranks on this machine (`mpirun -n 3`: the server on rank 0, each
//! group, or each scheduler with its group, on ranks 1 and 2).
//!
//! `cargo bench --features mpi --bench mpi_path` measures the process case, then starts itself
//! under `mpirun` for the MPI case, whose rank 0 prints the figures. Each figure is the median
//! of three runs of the whole tree, set-up and shutdown included.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use fedsim::cluster::{self, Cluster};
use fedsim::config::{Placement, PlacementConfig, SchedulerMode, TopologyConfig};
use fedsim::connect::{Connector, InProcess};
use fedsim::topology;
use fedsim::training::{ClientTrainer, EchoTrainer, InjectedFaults};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CLIENTS: usize = 100;
const PARAMS: usize = 1_663_370;
const SAMPLES: usize = 600;
const ROUNDS: u32 = 3;
const REPEATS: usize = 3;
const RANKS: usize = 3;

/// The cases: a name and a topology.
fn cases() -> [(&'static str, TopologyConfig); 2] {
    let relay = TopologyConfig::Hierarchical {
        schedulers: 2,
        mode: SchedulerMode::Relay,
        edge_rounds: 1,
        assignment: None,
    };
    [("flat", TopologyConfig::Flat {}), ("relay", relay)]
}

/// Where the tiers run over `ranks` processes, by the placement rule.
fn rule(topology: &TopologyConfig, ranks: usize) -> Placement {
    PlacementConfig::default()
        .resolve(topology, CLIENTS, ranks)
        .expect("the rule places every tier")
}

/// Messages and bytes the rounds moved over every link (as `metrics.jsonl` counts them), and
/// the seconds the whole tree took.
#[derive(Debug, Default, Clone, Copy)]
struct Measured {
    seconds: f64,
    messages: u64,
    bytes: u64,
}

/// One run of the tree over `connector`, with the tiers placed as `placement` says; what the
/// server's process measured (`None` elsewhere).
fn run_tree(
    (topology, placement): (&TopologyConfig, &Placement),
    connector: &mut dyn Connector,
) -> Option<Measured> {
    let parts = placement.client_groups(topology, CLIENTS);
    let echo = EchoTrainer::new(vec![SAMPLES; CLIENTS], InjectedFaults::default(), 1);
    let trainer: Arc<dyn ClientTrainer> = Arc::new(echo.expect("the echo pool starts"));
    let plan = common::plan(
        (topology.clone(), parts),
        &[SAMPLES; CLIENTS],
        (CLIENTS, ROUNDS),
        vec![0.5; PARAMS],
    );
    let mut measured = Measured::default();
    let started = Instant::now();
    let result = topology::run_over(plan, trainer, connector, |end| {
        for tier in &end.record.traffic {
            measured.messages += tier.messages_down + tier.messages_up;
            measured.bytes += tier.bytes_down + tier.bytes_up;
        }
        Ok::<_, ()>(())
    });
    let ran = result
        .expect("no observer error")
        .expect("the federation runs");
    measured.seconds = started.elapsed().as_secs_f64();
    ran.map(|_| measured)
}

fn median(mut runs: Vec<Measured>) -> Measured {
    runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    runs[runs.len() / 2]
}

fn print(case: &str, transport: &str, m: Measured) {
    println!(
        "{case:>5} {transport:<10} {:6.2} s  {:8.0} messages/s  {:7.1} MB/s  ({} messages, {:.0} MB)",
        m.seconds,
        m.messages as f64 / m.seconds,
        m.bytes as f64 / 1e6 / m.seconds,
        m.messages,
        m.bytes as f64 / 1e6
    );
}

fn main() {
    fedsim::cli::disable_huge_pages();
    if cluster::launched() {
        over_mpi();
        return;
    }
    println!(
        "{CLIENTS} echoing clients, {ROUNDS} rounds, {PARAMS} parameters; median of {REPEATS} runs"
    );
    for (name, topology) in cases() {
        let placement = rule(&topology, 1);
        let runs = (0..REPEATS)
            .map(|_| {
                run_tree((&topology, &placement), &mut InProcess).expect("one process runs all")
            })
            .collect();
        print(name, "in-process", median(runs));
    }
    let status = Command::new("mpirun")
        .args(["--oversubscribe", "-n", &RANKS.to_string()])
        .arg(std::env::current_exe().expect("the bench knows its own path"))
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .status()
        .expect("mpirun starts (is Open MPI installed?)");
    assert!(status.success(), "the MPI case failed");
}

/// The MPI case, on every rank; rank 0 prints.
fn over_mpi() {
    let cluster = Cluster::start().expect("MPI starts");
    for (name, topology) in cases() {
        let mut runs = Vec::new();
        let mut real = (0, 0);
        let placement = rule(&topology, cluster.size());
        for _ in 0..REPEATS {
            let mut connector = cluster.connector(placement.clone());
            let measured = run_tree((&topology, &placement), &mut connector);
            let record = cluster.finish(connector);
            if let (Some(measured), Some(record)) = (measured, record) {
                runs.push(measured);
                let frames = record.traffic.iter();
                real = frames.fold((0, 0), |(m, b), t| {
                    (
                        m + t.messages_down + t.messages_up,
                        b + t.bytes_down + t.bytes_up,
                    )
                });
            }
        }
        if cluster.rank() == 0 {
            let measured = median(runs);
            print(name, "over MPI", measured);
            println!(
                "{:>16} {} frames, {:.0} MB crossed MPI",
                "",
                real.0,
                real.1 as f64 / 1e6
            );
        }
    }
}
