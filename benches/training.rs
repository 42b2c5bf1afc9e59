//! Local training throughput on real MNIST: one epoch of one client (600 samples, batch 32),
//! and a round of 8 such clients on the trainer's pool with 1 and 2 workers, for each model
//! and CPU backend. Criterion reports samples per second.
//!
//! The CNN on ndarray trains at a few dozen samples per second: its one-epoch case takes
//! minutes, and it is left out of the round cases (which would take most of an hour). Select
//! cases with a filter, e.g. `cargo bench --bench training -- flex`.

mod common;

use std::sync::Arc;

use common::{
    CLIENTS_PER_ROUND, EPOCH_STEPS, MNIST_SGD, SAMPLES_PER_CLIENT, initial_model, train_round,
    trainer,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fedsim::backend::BackendKind;
use fedsim::registry::ModelChoice;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn cases() -> Vec<(ModelChoice, BackendKind)> {
    let mut cases = Vec::new();
    for backend in [BackendKind::Flex, BackendKind::Ndarray] {
        for name in ["mlp", "cnn"] {
            cases.push((common::model(name), backend));
        }
    }
    cases
}

fn name(model: &ModelChoice, backend: BackendKind) -> String {
    format!("{}/{backend:?}", model.name()).to_lowercase()
}

fn local_epoch(c: &mut Criterion) {
    fedsim::cli::disable_huge_pages();
    let data = Arc::new(common::mnist().train);
    let mut group = c.benchmark_group("local_epoch");
    group.throughput(Throughput::Elements(SAMPLES_PER_CLIENT as u64));
    group.sample_size(10);
    for (model, backend) in cases() {
        let trainer = trainer(
            &data,
            &model,
            backend,
            1,
            (CLIENTS_PER_ROUND, SAMPLES_PER_CLIENT),
            MNIST_SGD,
        );
        let params = initial_model(&data, &model);
        group.bench_function(name(&model, backend), |b| {
            b.iter(|| train_round(&trainer, &params, 1, EPOCH_STEPS))
        });
    }
    group.finish();
}

fn parallel_round(c: &mut Criterion) {
    fedsim::cli::disable_huge_pages();
    let data = Arc::new(common::mnist().train);
    let mut group = c.benchmark_group("round_of_8_clients");
    group.throughput(Throughput::Elements(
        (CLIENTS_PER_ROUND * SAMPLES_PER_CLIENT) as u64,
    ));
    group.sample_size(10);
    let fast_enough = |(model, backend): &(ModelChoice, BackendKind)| {
        !(model.name() == "cnn" && *backend == BackendKind::Ndarray)
    };
    for (model, backend) in cases().into_iter().filter(fast_enough) {
        let params = initial_model(&data, &model);
        for workers in [1, 2] {
            let trainer = trainer(
                &data,
                &model,
                backend,
                workers,
                (CLIENTS_PER_ROUND, SAMPLES_PER_CLIENT),
                MNIST_SGD,
            );
            let id = BenchmarkId::new(name(&model, backend), format!("num_parallels={workers}"));
            group.bench_function(id, |b| {
                b.iter(|| train_round(&trainer, &params, CLIENTS_PER_ROUND, EPOCH_STEPS))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, local_epoch, parallel_round);
criterion_main!(benches);
