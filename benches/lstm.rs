//! The Shakespeare LSTM's throughput on flex, to set beside a plain PyTorch loop's on the same
//! machine (`benches/peers/pytorch_lstm.py`, run separately): training samples per second
//! (rounds of 8 clients of 300 consecutive training sequences, one epoch of SGD at batch 10 and
//! lr 0.8, `experiments/shakespeare-lstm.json`'s settings) and evaluated samples per second
//! over the 16,538 test sequences (batches of 1,000), for the experiment's model (one layer of
//! 128 units) and LEAF's (two of 256), on 1 and 2 workers. Each is also given as a fraction of
//! the matrix-product library's rate on the step's own recurrent product,
//! `[batch, units] x [units, 4 · units]` (batch 10 in training, 100 per forward pass in
//! evaluation), one product per worker at once: the rate the layer could reach if it were
//! nothing but its products. Each figure is the median of three alternating measurements of
//! the throughput and of that rate.
//!
//! `cargo bench --bench lstm` prints one table; everything in it is measured in the same run.

mod common;

use std::sync::Arc;

use common::{evaluation_throughput, gemm_rate, median, training_throughput};
use fedsim::config::ModelConfig;
use fedsim::data::leaf::{self, LeafTask};
use fedsim::model::training_flops;
use fedsim::registry::{ModelChoice, Registry};
use serde_json::json;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Clients in a benchmark round, and the consecutive training sequences each holds.
const CLIENTS: usize = 8;
const SEQUENCES: usize = 300;
/// The experiment's SGD, as (batch size, learning rate).
const SGD: (usize, f64) = (10, 0.8);
/// Test sequences per evaluation batch (the experiments' default), and per forward pass.
const EVAL_BATCH: usize = 1000;
const FORWARD_CHUNK: usize = 100;
/// Alternating measurements of a throughput and of the product rate, per table row.
const PAIRS: usize = 3;

fn main() {
    fedsim::cli::disable_huge_pages();
    let shakespeare = leaf::load(LeafTask::Shakespeare, None).expect("the built-in set loads");
    let (train, test) = (Arc::new(shakespeare.train), shakespeare.test);
    println!(
        "| model | work | workers | samples/s | GFLOP/s | step's product rate, GFLOP/s | fraction |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (label, hidden) in [
        ("lstm, 1 x 128", vec![128]),
        ("lstm, 2 x 256", vec![256, 256]),
    ] {
        let units = hidden[0];
        let model = lstm(hidden);
        let layers = model
            .multiply_adds(train.shape())
            .expect("the built-ins count their work");
        let training_flops = training_flops(&layers) as f64;
        let forward_flops = 2.0 * layers.iter().sum::<u64>() as f64;
        for workers in [1, 2] {
            let step = [SGD.0, units, 4 * units];
            let samples = training_throughput(&train, &model, workers, (CLIENTS, SEQUENCES), SGD);
            print_row(label, "training", (workers, step), training_flops, samples);
        }
        for workers in [1, 2] {
            let step = [FORWARD_CHUNK, units, 4 * units];
            let samples = evaluation_throughput(&test, &model, workers, EVAL_BATCH);
            print_row(label, "evaluation", (workers, step), forward_flops, samples);
        }
    }
}

/// The built-in LSTM with an embedding of 8 and layers of `hidden` units.
fn lstm(hidden: Vec<usize>) -> ModelChoice {
    let mut config = ModelConfig::named("lstm");
    config.params.insert("embedding".into(), json!(8));
    config.params.insert("hidden".into(), json!(hidden));
    Registry::builtin()
        .choose_model(&config, None)
        .expect("a built-in model")
}

/// Measures `samples_per_second` and the rate of `workers` concurrent products of the step's
/// shape in [`PAIRS`] alternating pairs, and prints the medians.
fn print_row(
    label: &str,
    work: &str,
    (workers, step): (usize, [usize; 3]),
    flops_per_sample: f64,
    mut samples_per_second: impl FnMut() -> f64,
) {
    let pairs: Vec<(f64, f64)> = (0..PAIRS)
        .map(|_| (samples_per_second(), gemm_rate(workers, step)))
        .collect();
    let gflops = |samples: f64| samples * flops_per_sample / 1e9;
    let fraction = median(pairs.iter().map(|&(samples, rate)| gflops(samples) / rate));
    let samples = median(pairs.iter().map(|p| p.0));
    let rate = median(pairs.iter().map(|p| p.1));
    println!(
        "| {label} | {work} | {workers} | {samples:.0} | {:.1} | {rate:.1} | {fraction:.2} |",
        gflops(samples)
    );
}
