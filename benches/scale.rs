//! Federations of 10^3 to 10^6 clients on one machine, at 100 and 1,000 clients a round, with
//! the logistic model and the MLP of Synthetic(1, 1) (60 features, 10 classes):
//!
//! - the tree alone: the server, a client group and clients that answer at once (the echo
//!   trainer), so that a round's time is all the federation's own overhead (sampling, the
//!   roster, downlinks, uplinks, folding): the median time from one round's end to the next's,
//!   with every client always online and under the diurnal model (each client online for half
//!   of every day, from its own phase), whose round samples among the clients online;
//! - whole runs: one `fedsim run` of `experiments/synthetic-million.json` (whose users are made
//!   when sampled) per setting, one local epoch of batch 10 a client. A user holds
//!   `floor(LogNormal(4, 2)) + 50` samples, so a round's work swings by a fifth between rounds
//!   even at 1,000 clients; each round's time is divided by its local steps (read from the
//!   run's roster). Each setting runs twice, the populations in rising and then in falling
//!   order, so that the machine's drift does not fall on one population; the table gives the
//!   median over both runs' rounds between the first and the last (which evaluates), with the
//!   set-up (the process's wall time less its rounds') and the peak resident memory that
//!   `summary.json` records, the larger of the two.
//!
//! `cargo bench --bench scale` (about 25 minutes on 2 cores); `cargo bench --bench scale -- tree`
//! for the tree alone (about a minute).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use fedsim::availability::Availability;
use fedsim::config::TopologyConfig;
use fedsim::topology;
use fedsim::training::{EchoTrainer, InjectedFaults};
use serde_json::Value;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The populations, the smallest first: each row compares with it.
const POPULATIONS: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];

/// The models, with their parameter counts for Synthetic(1, 1)'s 60 features and 10 classes.
const MODELS: [(&str, usize); 2] = [
    ("logistic", 60 * 10 + 10),
    ("mlp", 60 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10),
];

/// Clients a round, and the rounds a whole run plays.
const ROUND_SIZES: [(usize, u32); 2] = [(100, 42), (1000, 12)];

/// Rounds of the tree alone.
const ROUNDS: u32 = 21;

/// Local samples per step, as the experiment file has it.
const BATCH: usize = 10;

/// A simulated day, the diurnal model's period.
const DAY_S: f64 = 86_400.0;

/// Median seconds per round of the tree alone over `population` clients, `per_round` a round,
/// with a model of `params` values, every client always online or (`diurnal`) online half of
/// each day: the time between one round's end and the next's, the first round (which follows
/// the set-up) left out.
fn tree_alone(population: usize, per_round: usize, params: usize, diurnal: bool) -> f64 {
    let num_samples = vec![100; population];
    let mut plan = common::plan(
        (TopologyConfig::Flat {}, vec![(0..population).collect()]),
        &num_samples,
        (per_round, ROUNDS),
        vec![0.0; params],
    );
    if diurnal {
        plan.server.availability = Arc::new(Availability::diurnal(1, population, DAY_S, 0.5));
    }
    let echo = EchoTrainer::new(num_samples.clone(), InjectedFaults::default(), 2)
        .expect("the echo pool starts");
    let mut ends = Vec::new();
    topology::run(plan, Arc::new(echo), |_| {
        ends.push(Instant::now());
        Ok::<_, ()>(())
    })
    .expect("no round is refused")
    .expect("the federation runs");
    common::median(ends.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()))
}

/// What one whole run measured.
struct Measured {
    /// Each round's seconds and milliseconds per 1,000 local steps, of the rounds that neither
    /// start the run nor evaluate.
    rounds: Vec<(f64, f64)>,
    /// Seconds before the first round and after the last: the roster, the scored clients'
    /// test samples, the run folder.
    set_up_s: f64,
    peak_mb: f64,
}

/// Runs `model` over `population` clients, `per_round` a round for `rounds` rounds, into `out`.
fn whole_run(
    model: &str,
    population: usize,
    (per_round, rounds): (usize, u32),
    out: &Path,
) -> Measured {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sets = [
        format!("federation.num_clients={population}"),
        format!("federation.clients_per_round={per_round}"),
        format!("federation.rounds={rounds}"),
        format!("model=\"{model}\""),
        format!("eval.every={rounds}"),
    ];
    let mut command = Command::new(env!("CARGO_BIN_EXE_fedsim"));
    command
        .arg("run")
        .arg(root.join("experiments/synthetic-million.json"))
        .arg("--out")
        .arg(out)
        .arg("--quiet");
    for set in &sets {
        command.args(["--set", set]);
    }
    let start = Instant::now();
    let status = command
        .stdout(std::process::Stdio::null())
        .status()
        .expect("fedsim starts");
    let process_s = start.elapsed().as_secs_f64();
    assert!(status.success(), "{}: {status}", sets.join(" "));
    let read = |name: &str| -> String { std::fs::read_to_string(out.join(name)).expect("written") };
    let json = |text: &str| -> Value { serde_json::from_str(text).expect("JSON") };
    let roster = json(&read("partition.json"));
    let train = roster["clients_on_demand"]["train"]
        .as_array()
        .expect("a roster");
    let steps = |record: &Value| -> usize {
        let clients = record["clients"].as_array().expect("clients");
        clients
            .iter()
            .map(|c| {
                train[c.as_u64().expect("an id") as usize]
                    .as_u64()
                    .expect("a count")
            })
            .map(|samples| (samples as usize).div_ceil(BATCH))
            .sum()
    };
    let records: Vec<Value> = read("metrics.jsonl").lines().map(json).collect();
    let wall_s = |record: &Value| record["wall_ms"].as_f64().expect("wall_ms") / 1e3;
    let summary = json(&read("summary.json"));
    Measured {
        rounds: records[1..records.len() - 1]
            .iter()
            .map(|record| (wall_s(record), 1e6 * wall_s(record) / steps(record) as f64))
            .collect(),
        set_up_s: process_s - records.iter().map(wall_s).sum::<f64>(),
        peak_mb: summary["peak_resident_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6,
    }
}

/// `value` against `base`, in percent.
fn change(value: f64, base: f64) -> String {
    format!("{:+.1}%", (value / base - 1.0) * 100.0)
}

fn main() {
    fedsim::cli::disable_huge_pages();
    let tree_only = std::env::args().skip(1).any(|arg| arg == "tree");
    println!("The tree alone: clients that answer at once, {ROUNDS} rounds, 2 answering threads");
    println!();
    println!("| model | clients a round | online | clients | ms per round | against 10^3 |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (model, params) in MODELS {
        for (per_round, _) in ROUND_SIZES {
            for diurnal in [false, true] {
                let online = if diurnal {
                    "half of each day"
                } else {
                    "always"
                };
                let mut base = None;
                for population in POPULATIONS {
                    let round_s = tree_alone(population, per_round, params, diurnal);
                    let base = *base.get_or_insert(round_s);
                    println!(
                        "| {model} | {per_round} | {online} | {population} | {:.2} | {} |",
                        1e3 * round_s,
                        change(round_s, base)
                    );
                }
            }
        }
    }
    if tree_only {
        return;
    }
    println!();
    println!(
        "Whole runs: `fedsim run experiments/synthetic-million.json` with the population, \
         clients a round, model and rounds set; 1,000 clients scored at the last round"
    );
    println!();
    println!(
        "| model | clients a round | clients | s per round | ms per 1,000 steps | against 10^3 | set-up s | peak memory MB |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let scratch = tempfile::tempdir().expect("a scratch folder");
    for (model, _) in MODELS {
        for size in ROUND_SIZES {
            let mut runs: Vec<Vec<Measured>> = POPULATIONS.iter().map(|_| Vec::new()).collect();
            let order = (0..POPULATIONS.len()).chain((0..POPULATIONS.len()).rev());
            for (pass, at) in order.enumerate() {
                let population = POPULATIONS[at];
                let out = scratch
                    .path()
                    .join(format!("{model}-{}-{population}-{pass}", size.0));
                runs[at].push(whole_run(model, population, size, &out));
            }
            let mut base = None;
            for (population, measured) in POPULATIONS.iter().zip(&runs) {
                let rounds = || measured.iter().flat_map(|m| m.rounds.iter());
                let round_s = common::median(rounds().map(|r| r.0));
                let ms_per_kstep = common::median(rounds().map(|r| r.1));
                let base = *base.get_or_insert(ms_per_kstep);
                let most = |of: fn(&Measured) -> f64| measured.iter().map(of).fold(0.0, f64::max);
                println!(
                    "| {model} | {} | {population} | {round_s:.3} | {ms_per_kstep:.1} | {} | {:.1} | {:.0} |",
                    size.0,
                    change(ms_per_kstep, base),
                    most(|m| m.set_up_s),
                    most(|m| m.peak_mb)
                );
            }
        }
    }
}
