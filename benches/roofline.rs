//! How near this machine's limit local training and evaluation run on flex: the rate of the
//! matrix-product library that burn-flex uses (`gemm`, with the kernels it picks for this CPU)
//! on 2048x2048 f32 matrices, then each model's training and evaluation throughput in FLOP/s
//! (from its layers' multiply-adds, [`ModelKind::training_flops`]) as a fraction of that rate,
//! on 1 and on 2 workers. Two workers are compared with two single-threaded products running
//! at once, as two workers each train one client single-threaded.
//!
//! `cargo bench --bench roofline` prints one table; everything in it is measured in the same
//! run. Training is rounds of 8 clients of 600 samples (batch 32, one epoch); evaluation is
//! the 10,000 test images in batches of 1,000, the experiments' default.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    CLIENTS_PER_ROUND, EPOCH_STEPS, SAMPLES_PER_CLIENT, initial_model, train_round, trainer,
};
use fedsim::backend::BackendKind;
use fedsim::data::Dataset;
use fedsim::model::ModelKind;
use fedsim::report::manifest::matmul_kernels;
use fedsim::train::evaluate;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Side of the square matrices whose product measures the machine's rate.
const GEMM_SIDE: usize = 2048;
/// How long each throughput is measured for, after a warm-up.
const MEASURE: Duration = Duration::from_secs(4);
/// Test images per forward pass in evaluation.
const EVAL_BATCH: usize = 1000;

fn main() {
    let kernels = matmul_kernels();
    println!("matrix products: gemm 0.19, {kernels} kernels");
    let gemm = [gemm_rate(1), gemm_rate(2)];
    for (threads, rate) in [1, 2].iter().zip(gemm) {
        println!("  {GEMM_SIDE}x{GEMM_SIDE} f32 product, {threads} thread(s): {rate:.1} GFLOP/s");
    }
    let mnist = common::mnist();
    let (train, test) = (Arc::new(mnist.train), mnist.test);
    let mut rows = Vec::new();
    for model in [ModelKind::Mlp, ModelKind::Cnn] {
        let shape = (train.sample_shape(), train.num_classes());
        let training_flops = model.training_flops(shape.0, shape.1) as f64;
        let forward_flops = 2.0 * model.multiply_adds(shape.0, shape.1).iter().sum::<u64>() as f64;
        for workers in [1, 2] {
            let samples = training_throughput(&train, model, workers);
            rows.push((model, "training", workers, samples * training_flops / 1e9));
        }
        for workers in [1, 2] {
            let samples = evaluation_throughput(&test, model, workers);
            rows.push((model, "evaluation", workers, samples * forward_flops / 1e9));
        }
    }
    // The machine is shared: the products run again at the end, and the better rate counts.
    let gemm = [gemm[0].max(gemm_rate(1)), gemm[1].max(gemm_rate(2))];
    println!(
        "  best of the runs before and after the models: {:.1} and {:.1} GFLOP/s",
        gemm[0], gemm[1]
    );
    println!();
    println!("| model | work | workers | GFLOP/s | fraction of the product rate |");
    println!("| --- | --- | --- | --- | --- |");
    for (model, work, workers, gflops) in rows {
        let fraction = gflops / gemm[workers - 1];
        println!(
            "| {} | {work} | {workers} | {gflops:.1} | {fraction:.2} |",
            model.name()
        );
    }
}

/// Runs `work` once to warm up, then repeatedly for about [`MEASURE`]; returns how many
/// times per second it ran.
fn per_second(mut work: impl FnMut()) -> f64 {
    work();
    let start = Instant::now();
    let mut runs = 0;
    while start.elapsed() < MEASURE {
        work();
        runs += 1;
    }
    f64::from(runs) / start.elapsed().as_secs_f64()
}

/// Training samples per second: rounds of 8 clients on `workers` workers.
fn training_throughput(data: &Arc<Dataset>, model: ModelKind, workers: usize) -> f64 {
    let trainer = trainer(
        data,
        model,
        BackendKind::Flex,
        workers,
        (CLIENTS_PER_ROUND, SAMPLES_PER_CLIENT),
    );
    let params = initial_model(data, model);
    let rounds = per_second(|| train_round(&trainer, &params, CLIENTS_PER_ROUND, EPOCH_STEPS));
    rounds * (CLIENTS_PER_ROUND * SAMPLES_PER_CLIENT) as f64
}

/// Evaluated samples per second over the whole test set on `threads` threads.
fn evaluation_throughput(data: &Dataset, model: ModelKind, threads: usize) -> f64 {
    let params = initial_model(data, model);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("the pool starts");
    let device = BackendKind::Flex.device();
    let passes = pool.install(|| {
        per_second(|| {
            evaluate(model, &params, data, EVAL_BATCH, &device);
        })
    });
    passes * data.len() as f64
}

/// The best rate, in GFLOP/s, of `threads` single-threaded 2048x2048 f32 products running at
/// once, over a few repetitions.
fn gemm_rate(threads: usize) -> f64 {
    let n = GEMM_SIDE;
    let lhs: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.25).collect();
    let rhs: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let mut outputs = vec![vec![0.0f32; n * n]; threads];
    let mut best = Duration::MAX;
    for _ in 0..8 {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for dst in &mut outputs {
                let (lhs, rhs) = (&lhs, &rhs);
                scope.spawn(move || product(n, lhs, rhs, dst));
            }
        });
        best = best.min(start.elapsed());
    }
    threads as f64 * 2.0 * (n as f64).powi(3) / best.as_secs_f64() / 1e9
}

/// `dst = lhs * rhs` for row-major `n`x`n` matrices, on the calling thread.
fn product(n: usize, lhs: &[f32], rhs: &[f32], dst: &mut [f32]) {
    assert!(lhs.len() == n * n && rhs.len() == n * n && dst.len() == n * n);
    let stride = n as isize;
    // SAFETY: the three buffers hold n*n values each, laid out row-major with these strides,
    // and `dst` does not alias the inputs.
    unsafe {
        gemm::gemm(
            n,
            n,
            n,
            dst.as_mut_ptr(),
            1,
            stride,
            false,
            lhs.as_ptr(),
            1,
            stride,
            rhs.as_ptr(),
            1,
            stride,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
