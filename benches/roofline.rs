//! How near this machine's limit local training and evaluation run on flex: each model's
//! training and evaluation throughput in FLOP/s (from its layers' multiply-adds,
//! [`fedsim::model::training_flops`]) as a fraction of the rate of the matrix-product library that
//! burn-flex uses (`gemm`, with the kernels it picks for this CPU) on 2048x2048 f32 matrices,
//! on 1 and on 2 workers. Two workers are compared with two single-threaded products running
//! at once, as two workers each train one client single-threaded. Each fraction is the median
//! of five alternating measurements of the throughput and of the product rate, so that the
//! shared machine's drifts, which move both, cancel. The product rates at the MLP's own two
//! largest shapes are printed too, as what the library itself reaches at a batch's sizes.
//!
//! `cargo bench --bench roofline` prints one table; everything in it is measured in the same
//! run. Training is rounds of 8 clients of 600 samples (batch 32, one epoch); evaluation is
//! the 10,000 test images in batches of 1,000, the experiments' default.

mod common;

use std::sync::Arc;

use common::{
    CLIENTS_PER_ROUND, MNIST_SGD, Product, SAMPLES_PER_CLIENT, evaluation_throughput, gemm_rate,
    median, products_rate, training_throughput,
};
use fedsim::model::training_flops;
use fedsim::output::manifest::matmul_kernels;
use fedsim::registry::ModelChoice;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Side of the square matrices whose product measures the machine's rate.
const GEMM_SIDE: usize = 2048;
/// The MLP's two largest products in training, as `[m, k, n]` for `[m, k] · [k, n]`: a batch of
/// 32 through its first layer, and that layer's weight gradient (an inner dimension of 32).
/// Measured beside the square product, they show the library's own rate at a batch's sizes.
const MLP_PRODUCTS: [([usize; 3], &str); 2] = [
    ([32, 784, 200], "the MLP's first layer"),
    ([784, 32, 200], "its weight gradient"),
];
/// The widths of the MLP's layers on MNIST: the inputs, two hidden layers, the classes.
const MLP_WIDTHS: [usize; 4] = [784, 200, 200, 10];
/// Alternating measurements of a throughput and of the product rate, per table row.
const PAIRS: usize = 5;
/// Test images per forward pass in evaluation.
const EVAL_BATCH: usize = 1000;

fn main() {
    fedsim::cli::disable_huge_pages();
    let kernels = matmul_kernels();
    println!("matrix products: gemm 0.19, {kernels} kernels, single-threaded, 1 or 2 at once");
    let square = ([GEMM_SIDE; 3], "square");
    for ([m, k, n], what) in [square].into_iter().chain(MLP_PRODUCTS) {
        let rates = [gemm_rate(1, [m, k, n]), gemm_rate(2, [m, k, n])];
        println!(
            "  [{m}, {k}] x [{k}, {n}] ({what}): {:.1} GFLOP/s on 1 thread, {:.1} on 2",
            rates[0], rates[1]
        );
    }
    let mnist = common::mnist();
    let (train, test) = (Arc::new(mnist.train), mnist.test);
    println!();
    println!(
        "| model | work | workers | GFLOP/s | product rate, GFLOP/s | fraction of the product rate |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for name in ["mlp", "cnn"] {
        let model = &common::model(name);
        let layers = model
            .multiply_adds(train.shape())
            .expect("the built-ins count their work");
        let training_flops = training_flops(&layers) as f64;
        let forward_flops = 2.0 * layers.iter().sum::<u64>() as f64;
        for workers in [1, 2] {
            let samples = training_throughput(
                &train,
                model,
                workers,
                (CLIENTS_PER_ROUND, SAMPLES_PER_CLIENT),
                MNIST_SGD,
            );
            print_row(
                model,
                "training",
                workers,
                per_sample(training_flops, samples),
            );
        }
        if name == "mlp" {
            let step = mlp_step_products(MNIST_SGD.0);
            for workers in [1, 2] {
                let alone = || products_rate(workers, &step);
                print_row(model, "a training step's products alone", workers, alone);
            }
        }
        for workers in [1, 2] {
            let samples = evaluation_throughput(&test, model, workers, EVAL_BATCH);
            print_row(
                model,
                "evaluation",
                workers,
                per_sample(forward_flops, samples),
            );
        }
    }
}

/// The matrix products of one MLP training step on a batch of `batch`, as its dense layers
/// make them: each layer's forward product and weight gradient (`inputᵀ · output gradient`),
/// and the input gradient (`output gradient · weightᵀ`) of every layer but the first. Timed
/// alone, they are what the step would reach if nothing but its products took time.
fn mlp_step_products(batch: usize) -> Vec<Product> {
    MLP_WIDTHS
        .windows(2)
        .enumerate()
        .flat_map(|(layer, pair)| {
            let [inputs, outputs] = [pair[0], pair[1]];
            let forward = Product::plain([batch, inputs, outputs]);
            let weight_grad = Product {
                lhs_transposed: true,
                ..Product::plain([inputs, batch, outputs])
            };
            let input_grad = Product {
                rhs_transposed: true,
                ..Product::plain([batch, outputs, inputs])
            };
            [forward, weight_grad]
                .into_iter()
                .chain((layer > 0).then_some(input_grad))
        })
        .collect()
}

/// GFLOP/s from a measurement of samples per second, at `flops_per_sample`.
fn per_sample(
    flops_per_sample: f64,
    mut samples_per_second: impl FnMut() -> f64,
) -> impl FnMut() -> f64 {
    move || samples_per_second() * flops_per_sample / 1e9
}

/// Measures `gflops` and the square product's rate on `workers` threads in [`PAIRS`]
/// alternating pairs, and prints the medians of the throughput, of the rate and of each pair's
/// fraction. Pairing cancels this shared machine's drifts, which move both.
fn print_row(model: &ModelChoice, work: &str, workers: usize, mut gflops: impl FnMut() -> f64) {
    let pairs: Vec<(f64, f64)> = (0..PAIRS)
        .map(|_| {
            let rate = gemm_rate(workers, [GEMM_SIDE; 3]);
            (gflops(), rate)
        })
        .collect();
    let fraction = median(pairs.iter().map(|(gflops, rate)| gflops / rate));
    let (gflops, rate) = (
        median(pairs.iter().map(|p| p.0)),
        median(pairs.iter().map(|p| p.1)),
    );
    println!(
        "| {} | {work} | {workers} | {gflops:.1} | {rate:.1} | {fraction:.2} |",
        model.name()
    );
}
