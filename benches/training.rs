//! Local training throughput on real MNIST: one epoch of one client (600 samples, batch 32),
//! and a round of 8 such clients on the trainer's pool with 1 and 2 workers, for each model
//! and CPU backend. Criterion reports samples per second.
//!
//! The CNN on ndarray trains at a few dozen samples per second: its one-epoch case takes
//! minutes, and it is left out of the round cases (which would take most of an hour). Select
//! cases with a filter, e.g. `cargo bench --bench training -- flex`.

use std::path::Path;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fedsim::backend::BackendKind;
use fedsim::config::ClientConfig;
use fedsim::data::partition::Partition;
use fedsim::data::{Dataset, Normalization, mnist};
use fedsim::model::flat::{Layout, initial_params};
use fedsim::model::{ModelKind, Net};
use fedsim::seed::{Purpose, stream};
use fedsim::stop::StopSignal;
use fedsim::strategy::PlainClient;
use fedsim::trainer::{ClientStates, ClientTrainer, InjectedFaults, Job, Trainer, TrainerSetup};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SAMPLES_PER_CLIENT: usize = 600;
const CLIENTS_PER_ROUND: usize = 8;

fn train_set() -> Arc<Dataset> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/mnist");
    Arc::new(
        mnist::load(&dir, Normalization::Unit)
            .expect("embedded MNIST loads")
            .train,
    )
}

/// A trainer over `CLIENTS_PER_ROUND` clients of 600 consecutive samples each.
fn trainer(data: &Arc<Dataset>, model: ModelKind, backend: BackendKind, workers: usize) -> Trainer {
    let clients = (0..CLIENTS_PER_ROUND)
        .map(|c| (c * SAMPLES_PER_CLIENT..(c + 1) * SAMPLES_PER_CLIENT).collect())
        .collect();
    let setup = TrainerSetup {
        seed: 0,
        data: data.clone(),
        partition: Arc::new(Partition { clients }),
        model,
        client: ClientConfig {
            epochs: 1,
            batch_size: 32,
            lr: 0.05,
            momentum: 0.0,
            weight_decay: 0.0,
            work: Default::default(),
        },
        algorithm: Arc::new(PlainClient),
        states: Arc::new(ClientStates::new(CLIENTS_PER_ROUND)),
        byzantine: None,
        backend,
        faults: InjectedFaults::default(),
        stop: StopSignal::new(),
    };
    Trainer::new(setup, workers).expect("the pool starts")
}

fn initial_model(data: &Dataset, model: ModelKind) -> Arc<[f32]> {
    let net = Net::new(
        model,
        data.sample_shape(),
        data.num_classes(),
        &BackendKind::Flex.device(),
    );
    initial_params(&Layout::of(&net), &mut stream(0, Purpose::MODEL_INIT, 0, 0)).into()
}

/// Trains `clients` clients on `trainer` and waits for all of them.
fn train_round(trainer: &Trainer, model: &Arc<[f32]>, clients: usize) {
    let (done_tx, done_rx) = flume::unbounded();
    for client in 0..clients {
        let job = Job {
            round: 1,
            edge_round: 0,
            client,
            steps: SAMPLES_PER_CLIENT.div_ceil(32) as u32,
            model: model.clone(),
            extras: Default::default(),
        };
        trainer.spawn(job, done_tx.clone());
    }
    for _ in 0..clients {
        done_rx.recv().unwrap().expect("training succeeds");
    }
}

fn cases() -> Vec<(ModelKind, BackendKind)> {
    let mut cases = Vec::new();
    for backend in [BackendKind::Flex, BackendKind::Ndarray] {
        for model in [ModelKind::Mlp, ModelKind::Cnn] {
            cases.push((model, backend));
        }
    }
    cases
}

fn name(model: ModelKind, backend: BackendKind) -> String {
    format!("{model:?}/{backend:?}").to_lowercase()
}

fn local_epoch(c: &mut Criterion) {
    let data = train_set();
    let mut group = c.benchmark_group("local_epoch");
    group.throughput(Throughput::Elements(SAMPLES_PER_CLIENT as u64));
    group.sample_size(10);
    for (model, backend) in cases() {
        let trainer = trainer(&data, model, backend, 1);
        let params = initial_model(&data, model);
        group.bench_function(name(model, backend), |b| {
            b.iter(|| train_round(&trainer, &params, 1))
        });
    }
    group.finish();
}

fn parallel_round(c: &mut Criterion) {
    let data = train_set();
    let mut group = c.benchmark_group("round_of_8_clients");
    group.throughput(Throughput::Elements(
        (CLIENTS_PER_ROUND * SAMPLES_PER_CLIENT) as u64,
    ));
    group.sample_size(10);
    let fast_enough = |&(model, backend): &(ModelKind, BackendKind)| {
        !(model == ModelKind::Cnn && backend == BackendKind::Ndarray)
    };
    for (model, backend) in cases().into_iter().filter(fast_enough) {
        let params = initial_model(&data, model);
        for workers in [1, 2] {
            let trainer = trainer(&data, model, backend, workers);
            let id = BenchmarkId::new(name(model, backend), format!("num_parallels={workers}"));
            group.bench_function(id, |b| {
                b.iter(|| train_round(&trainer, &params, CLIENTS_PER_ROUND))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, local_epoch, parallel_round);
criterion_main!(benches);
