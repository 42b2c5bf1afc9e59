//! Time per client beyond its SGD steps, in a federation of 1,000 MNIST clients of 60
//! samples (two steps of batch 32 each) with 100 sampled a round, the MLP, on 2 workers:
//!
//! - the tree with the echo trainer, whose clients answer at once with the model: all of its
//!   time is per-client overhead (downlink, job, uplink, folding, sampling);
//! - the tree with real training, less the same clients trained directly on the same trainer
//!   without the tree.
//!
//! `cargo bench --bench client_overhead` prints both in milliseconds per client.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{MNIST_SGD, initial_model, plan, run, train_round, trainer};
use fedsim::backend::BackendKind;
use fedsim::config::TopologyConfig;
use fedsim::training::{ClientTrainer, EchoTrainer, InjectedFaults};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CLIENTS: usize = 1_000;
const PER_ROUND: usize = 100;
const SAMPLES: usize = 60;
const ROUNDS: u32 = 20;
const WORKERS: usize = 2;

fn main() {
    fedsim::cli::disable_huge_pages();
    let data = Arc::new(common::mnist().train);
    let model = initial_model(&data, &common::model("mlp"));
    let num_samples = [SAMPLES; CLIENTS];
    let client_rounds = (PER_ROUND * ROUNDS as usize) as f64;
    let tree = |trainer: Arc<dyn ClientTrainer>| {
        let plan = plan(
            (TopologyConfig::Flat {}, vec![(0..CLIENTS).collect()]),
            &num_samples,
            (PER_ROUND, ROUNDS),
            model.to_vec(),
        );
        let start = Instant::now();
        run(plan, trainer);
        start.elapsed().as_secs_f64()
    };

    let echo = EchoTrainer::new(num_samples.to_vec(), InjectedFaults::default(), WORKERS);
    let echo_seconds = tree(Arc::new(echo.expect("the echo pool starts")));

    let training = Arc::new(trainer(
        &data,
        &common::model("mlp"),
        BackendKind::Flex,
        WORKERS,
        (CLIENTS, SAMPLES),
        MNIST_SGD,
    ));
    let steps = SAMPLES.div_ceil(32) as u32;
    train_round(&training, &model, PER_ROUND, steps);
    let start = Instant::now();
    for _ in 0..ROUNDS {
        train_round(&training, &model, PER_ROUND, steps);
    }
    let bare_seconds = start.elapsed().as_secs_f64();
    let tree_seconds = tree(training);

    let ms = |seconds: f64| 1e3 * seconds / client_rounds;
    println!("{CLIENTS} clients, {PER_ROUND} a round, {ROUNDS} rounds, {WORKERS} workers, MLP");
    println!("| measurement | ms per client |");
    println!("| --- | --- |");
    println!(
        "| tree, echo trainer (all overhead) | {:.3} |",
        ms(echo_seconds)
    );
    println!("| training alone, 2 steps | {:.3} |", ms(bare_seconds));
    println!("| tree with training, 2 steps | {:.3} |", ms(tree_seconds));
    println!(
        "| tree with training, beyond the steps | {:.3} |",
        ms(tree_seconds - bare_seconds)
    );
}
