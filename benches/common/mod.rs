//! What the benchmarks share: the embedded MNIST data set, a trainer over clients of
//! consecutive samples, a round of them, and the plan of a tree. Each benchmark uses a part.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fedsim::availability::Availability;
use fedsim::backend::BackendKind;
use fedsim::config::ModelConfig;
use fedsim::config::{ClientConfig, FailurePolicy, NetworkConfig, TopologyConfig};
use fedsim::data::mnist::MNIST;
use fedsim::data::partition::Partition;
use fedsim::data::{ClientData, Dataset, Normalization, TrainTest};
use fedsim::history::ClientHistory;
use fedsim::model::flat::initial_params;
use fedsim::registry::{ModelChoice, Registry};
use fedsim::seed::{Purpose, stream};
use fedsim::states::ClientStates;
use fedsim::stop::StopSignal;
use fedsim::strategy::{EdgeAggregation, FedAvgServer, PlainClient, Uniform};
use fedsim::topology::{self, ClientConditions, GroupSetup, Plan, ServerMode, ServerSetup, Start};
use fedsim::training::{ClientTrainer, InjectedFaults, Job, Trainer, TrainerSetup, evaluate};

/// Samples each benchmark client holds: one epoch is 19 steps of batch 32.
pub const SAMPLES_PER_CLIENT: usize = 600;
/// Clients in a benchmark round.
pub const CLIENTS_PER_ROUND: usize = 8;

/// The embedded MNIST data set.
pub fn mnist() -> TrainTest {
    MNIST
        .load(None, Normalization::Unit)
        .expect("embedded MNIST loads")
}

/// The built-in architecture `name` with its default hyperparameters.
pub fn model(name: &str) -> ModelChoice {
    Registry::builtin()
        .choose_model(&ModelConfig::named(name), None)
        .expect("a built-in model")
}

/// The MNIST benchmarks' SGD, as (batch size, learning rate).
pub const MNIST_SGD: (usize, f64) = (32, 0.05);

/// How long each throughput is measured for, after a warm-up.
pub const MEASURE: Duration = Duration::from_millis(1500);

/// A trainer over `clients` clients of `samples` consecutive samples each, training one epoch
/// of SGD at `(batch_size, lr)`.
pub fn trainer(
    data: &Arc<Dataset>,
    model: &ModelChoice,
    backend: BackendKind,
    workers: usize,
    (count, samples): (usize, usize),
    (batch_size, lr): (usize, f64),
) -> Trainer {
    let clients = (0..count)
        .map(|c| (c * samples..(c + 1) * samples).collect())
        .collect();
    let setup = TrainerSetup {
        seed: 0,
        clients: ClientData::Pooled {
            data: data.clone(),
            clients: Arc::new(Partition { clients }),
        },
        model: model.clone(),
        client: ClientConfig {
            epochs: 1,
            batch_size,
            lr,
            momentum: 0.0,
            weight_decay: 0.0,
            optimizer: Default::default(),
            work: Default::default(),
        },
        algorithm: Arc::new(PlainClient),
        states: Arc::new(ClientStates::in_memory()),
        byzantine: None,
        backend,
        faults: InjectedFaults::default(),
        stop: StopSignal::new(),
        personal: None,
        privacy: None,
        compression: None,
        secure: None,
    };
    Trainer::new(setup, workers).expect("the pool starts")
}

/// The seeded initial model of `model` for `data`.
pub fn initial_model(data: &Dataset, model: &ModelChoice) -> Arc<[f32]> {
    let layout = model
        .layout(data.shape())
        .expect("a built-in model's layout");
    initial_params(&layout, &mut stream(0, Purpose::MODEL_INIT, 0, 0)).into()
}

/// Trains clients `0..clients` for `steps` steps each on `trainer` and waits for all of them.
pub fn train_round(trainer: &Trainer, model: &Arc<[f32]>, clients: usize, steps: u32) {
    let (done_tx, done_rx) = flume::unbounded();
    for client in 0..clients {
        let job = Job {
            round: 1,
            edge_round: 0,
            client,
            steps,
            model: model.clone(),
            extras: Default::default(),
        };
        trainer.spawn(job, done_tx.clone());
    }
    for _ in 0..clients {
        done_rx.recv().unwrap().expect("training succeeds");
    }
}

/// Steps of one epoch over a benchmark client's 600 samples.
pub const EPOCH_STEPS: u32 = SAMPLES_PER_CLIENT.div_ceil(32) as u32;

/// The plan of a tree of `num_samples.len()` clients (each holding that many samples) over
/// `topology` (its groups of clients: `parts`), sampling `per_round` of them for `rounds`
/// rounds of FedAvg from `model`, with one epoch of batch 32, no evaluation and instant links.
pub fn plan(
    (topology, parts): (TopologyConfig, Vec<Vec<usize>>),
    num_samples: &[usize],
    (per_round, rounds): (usize, u32),
    model: Vec<f32>,
) -> Plan {
    let clients = num_samples.len();
    let groups = GroupSetup::for_parts(parts, num_samples, &ClientConditions::instant(clients));
    Plan {
        server: ServerSetup {
            seed: 0,
            rounds,
            on_client_failure: FailurePolicy::Abort,
            start: Start::default(),
            initial_model: model,
            mode: ServerMode::Rounds {
                strategy: Box::new(FedAvgServer),
                clients_per_round: per_round,
                poisson_rate: None,
                deadline_s: None,
            },
            selector: Box::new(Uniform),
            history: ClientHistory::new(),
            availability: Arc::new(Availability::always()),
            client_states: Arc::new(ClientStates::in_memory()),
            evaluation: None,
            sharing: None,
            compression: None,
            secure_aggregation: None,
        },
        topology,
        network: NetworkConfig::default(),
        groups,
        scheduler_panics: HashMap::new(),
        edge_aggregation: EdgeAggregation::MODELS,
        stop: StopSignal::new(),
    }
}

/// Runs `plan` over `trainer` to its end.
pub fn run(plan: Plan, trainer: Arc<dyn ClientTrainer>) {
    let result = topology::run(plan, trainer, |_| Ok::<_, ()>(()));
    result.unwrap().expect("the federation runs");
}

/// The median of `values`.
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `work` once to warm up, then repeatedly for about [`MEASURE`]; returns how many
/// times per second it ran.
pub fn per_second(mut work: impl FnMut()) -> f64 {
    work();
    let start = Instant::now();
    let mut runs = 0;
    while start.elapsed() < MEASURE {
        work();
        runs += 1;
    }
    f64::from(runs) / start.elapsed().as_secs_f64()
}

/// One f32 matrix product `[m, k] · [k, n]` into a row-major `[m, n]`, each operand stored
/// row-major either as it is read or as its transpose (read through swapped strides, as
/// burn-flex and fedsim's own operations read a transposed view, without moving it).
#[derive(Debug, Clone, Copy)]
pub struct Product {
    /// `[m, k, n]`.
    pub shape: [usize; 3],
    /// The left operand is stored as `[k, m]`.
    pub lhs_transposed: bool,
    /// The right operand is stored as `[n, k]`.
    pub rhs_transposed: bool,
}

impl Product {
    /// `[m, k] · [k, n]` of operands stored as they are read.
    pub fn plain(shape: [usize; 3]) -> Self {
        Self {
            shape,
            lhs_transposed: false,
            rhs_transposed: false,
        }
    }

    fn flops(&self) -> f64 {
        let [m, k, n] = self.shape;
        2.0 * (m * k * n) as f64
    }
}

/// The best rate, in GFLOP/s, of `threads` single-threaded `[m, k] · [k, n]` f32 products
/// running at once, over three repetitions.
pub fn gemm_rate(threads: usize, shape: [usize; 3]) -> f64 {
    products_rate(threads, &[Product::plain(shape)])
}

/// The best rate, in GFLOP/s, of `threads` threads at once each making `products` one after
/// another, over three repetitions.
pub fn products_rate(threads: usize, products: &[Product]) -> f64 {
    let operands: Vec<(Vec<f32>, Vec<f32>)> = products
        .iter()
        .map(|p| {
            let [m, k, n] = p.shape;
            let lhs = (0..m * k).map(|i| (i % 7) as f32 * 0.25).collect();
            let rhs = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
            (lhs, rhs)
        })
        .collect();
    let empty_outputs = || -> Vec<Vec<f32>> {
        products
            .iter()
            .map(|p| vec![0.0; p.shape[0] * p.shape[2]])
            .collect()
    };
    let mut outputs: Vec<Vec<Vec<f32>>> = (0..threads).map(|_| empty_outputs()).collect();
    let flops: f64 = products.iter().map(Product::flops).sum();
    let repeats = (1e9 / flops).ceil() as usize;
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for dsts in &mut outputs {
                let operands = &operands;
                scope.spawn(move || {
                    for _ in 0..repeats {
                        for ((p, (lhs, rhs)), dst) in products.iter().zip(operands).zip(&mut *dsts)
                        {
                            product(p, lhs, rhs, dst);
                        }
                    }
                });
            }
        });
        best = best.min(start.elapsed());
    }
    threads as f64 * repeats as f64 * flops / best.as_secs_f64() / 1e9
}

/// `dst = lhs · rhs` for the product `p`, on the calling thread.
fn product(p: &Product, lhs: &[f32], rhs: &[f32], dst: &mut [f32]) {
    let [m, k, n] = p.shape;
    assert!(lhs.len() == m * k && rhs.len() == k * n && dst.len() == m * n);
    // (column stride, row stride) of an `[rows, columns]` operand stored row-major, or stored
    // as its row-major transpose.
    let strides = |transposed, rows: usize, columns: usize| {
        if transposed {
            (rows as isize, 1)
        } else {
            (1, columns as isize)
        }
    };
    let (lhs_cs, lhs_rs) = strides(p.lhs_transposed, m, k);
    let (rhs_cs, rhs_rs) = strides(p.rhs_transposed, k, n);
    // SAFETY: the three buffers hold exactly these shapes, read with these strides, and `dst`
    // does not alias the inputs.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.as_ptr(),
            lhs_cs,
            lhs_rs,
            rhs.as_ptr(),
            rhs_cs,
            rhs_rs,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// A measurement of training samples per second on flex: rounds of `clients` clients of
/// `samples` consecutive samples each, one epoch of SGD at `sgd`, on `workers` workers.
pub fn training_throughput(
    data: &Arc<Dataset>,
    model: &ModelChoice,
    workers: usize,
    (clients, samples): (usize, usize),
    sgd: (usize, f64),
) -> impl FnMut() -> f64 + use<> {
    let trainer = trainer(
        data,
        model,
        BackendKind::Flex,
        workers,
        (clients, samples),
        sgd,
    );
    let params = initial_model(data, model);
    let steps = samples.div_ceil(sgd.0) as u32;
    move || {
        let rounds = per_second(|| train_round(&trainer, &params, clients, steps));
        rounds * (clients * samples) as f64
    }
}

/// A measurement of evaluated samples per second on flex over the whole of `data`, in
/// batches of `batch_size`, on `threads` threads.
pub fn evaluation_throughput<'a>(
    data: &'a Dataset,
    model: &ModelChoice,
    threads: usize,
    batch_size: usize,
) -> impl FnMut() -> f64 + use<'a> {
    let model = model.clone();
    let params = initial_model(data, &model);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("the pool starts");
    let device = BackendKind::Flex.device();
    move || {
        let passes = pool.install(|| {
            per_second(|| {
                evaluate(&model, &params, data, batch_size, &device);
            })
        });
        passes * data.len() as f64
    }
}
