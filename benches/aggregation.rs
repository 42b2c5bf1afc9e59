//! FedAvg aggregation of 100 client models the size of the CNN (1,663,370 parameters).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fedsim::network::Tensors;
use fedsim::network::Update;
use fedsim::strategy::{FedAvgServer, Round, Strategy};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CNN_PARAMS: usize = 1_663_370;
const CLIENTS: usize = 100;

fn fedavg(c: &mut Criterion) {
    fedsim::cli::disable_huge_pages();
    let updates: Vec<Update> = (0..CLIENTS)
        .map(|client| Update {
            round: 1,
            clients: vec![client],
            num_samples: 500 + client,
            train_loss: 0.0,
            steps: 1,
            params: (0..CNN_PARAMS)
                .map(|i| ((i + client) % 97) as f32 * 1e-3)
                .collect(),
            extras: Tensors::new(),
            encoded: Vec::new(),
        })
        .collect();
    let round = Round::new(1, &[], &[]);
    let global = vec![0.0f32; CNN_PARAMS];
    let mut group = c.benchmark_group("aggregation");
    group.throughput(Throughput::Bytes((CLIENTS * CNN_PARAMS * 4) as u64));
    group.sample_size(20);
    group.bench_function("fedavg_100_clients_cnn_size", |b| {
        b.iter(|| FedAvgServer.aggregate_updates(&round, &global, &updates))
    });
    group.finish();
}

criterion_group!(benches, fedavg);
criterion_main!(benches);
