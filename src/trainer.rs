//! Trains a client group's sampled clients in parallel.
//!
//! A rayon pool of `num_parallels` threads runs one client per task, each single-threaded.
//! Every pool thread owns one model instance, kept between clients and rounds: a client loads
//! the downlink's flat parameters into it instead of building a model. Since each client's
//! shuffle comes from its own (seed, round, client) stream and loaded parameters are fresh
//! autodiff leaves, a client's result does not depend on which thread ran it or when.

mod echo;

pub use echo::{Answer, EchoTrainer};

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};

use crate::backend::BackendKind;
use crate::byzantine::Attack;
use crate::config::{ClientConfig, FaultConfig, FaultKind};
use crate::data::Dataset;
use crate::data::partition::Partition;
use crate::model::{ModelConfig, Net, flat};
use crate::network::{ClientId, Tensors, Update};
use crate::seed::{Purpose, stream};
use crate::states::ClientStates;
use crate::stop::StopSignal;
use crate::strategy::{ClientAlgorithm, ClientView, Trained};
use crate::train::{LocalData, TrainError, local_train, mean_loss};

/// Everything a client needs to train that does not change between rounds.
#[derive(Clone)]
pub struct TrainerSetup {
    /// The experiment seed.
    pub seed: u64,
    /// The training set that the partition indexes.
    pub data: Arc<Dataset>,
    /// Which samples each client owns.
    pub partition: Arc<Partition>,
    /// The architecture.
    pub model: ModelConfig,
    /// Local training settings.
    pub client: ClientConfig,
    /// The client half of the FL algorithm.
    pub algorithm: Arc<dyn ClientAlgorithm>,
    /// Every client's state between rounds.
    pub states: Arc<ClientStates>,
    /// The attack the Byzantine clients make, and whether each client (by id) is one.
    pub byzantine: Option<(Attack, Arc<Vec<bool>>)>,
    /// Backend that trains.
    pub backend: BackendKind,
    /// Injected failures.
    pub faults: InjectedFaults,
    /// Stops training early; queued clients then fail at once, training ones within a step.
    pub stop: StopSignal,
}

/// One client's work in one round (or one edge round of it).
#[derive(Debug, Clone)]
pub struct Job {
    /// The round.
    pub round: u32,
    /// The edge round within the round (0 unless a scheduler runs several).
    pub edge_round: u32,
    /// The client to train.
    pub client: ClientId,
    /// SGD steps it takes (set by its client group from the experiment's local work).
    pub steps: u32,
    /// The global model to start from.
    pub model: Arc<[f32]>,
    /// The tensors the algorithm sent down beside it.
    pub extras: Tensors,
}

/// A client's training that failed, with what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("client {client} failed in round {round}: {error}")]
pub struct ClientFailure {
    /// The round.
    pub round: u32,
    /// The client.
    pub client: ClientId,
    /// The error or panic message.
    pub error: String,
}

/// What a client group hands its clients' work to. [`Trainer`] trains them on burn;
/// [`EchoTrainer`] answers at once, to time or test the tree alone.
pub trait ClientTrainer: Send + Sync {
    /// Queues a job; its result must be sent to `done` when the client has trained or failed,
    /// from another thread than the caller's: `done` holds few results (see
    /// [`crate::network::UPWARD_BACKLOG`]) and the caller drains it. Jobs should start lowest
    /// (round, edge round, client) first, as [`Trainer`] starts them.
    fn spawn(&self, job: Job, done: Done);
}

/// Where a job's result goes.
pub type Done = flume::Sender<Result<Update, ClientFailure>>;

/// What a worker does with a job: train the client (or fail), on the worker's thread.
type Work = dyn Fn(Job) -> Result<Update, ClientFailure> + Send + Sync;

/// Jobs waiting for a worker of a pool, taken lowest (round, edge round, client) first,
/// whichever group queued them: results then arrive nearly in the client-id order in which
/// the server folds them, so few wait their turn in its reorder buffer.
pub(crate) struct JobQueue {
    pool: rayon::ThreadPool,
    waiting: Arc<Mutex<BinaryHeap<Reverse<Queued>>>>,
    work: Arc<Work>,
}

struct Queued {
    job: Job,
    done: Done,
}

impl Queued {
    fn key(&self) -> (u32, u32, ClientId) {
        (self.job.round, self.job.edge_round, self.job.client)
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl JobQueue {
    /// A queue whose `threads` threads, named `fedsim-<role>-<index>`, do `work` on each job.
    pub(crate) fn new(
        threads: usize,
        role: &'static str,
        work: Arc<Work>,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("fedsim-{role}-{i}"))
            .build()?;
        Ok(Self {
            pool,
            waiting: Arc::default(),
            work,
        })
    }

    /// Queues `job`; when a worker is free it works on the lowest queued job and sends the
    /// result to that job's `done`. The pool gets one task per job, and each task takes
    /// whichever job is lowest at the time.
    pub(crate) fn push(&self, job: Job, done: Done) {
        let (waiting, work) = (self.waiting.clone(), self.work.clone());
        waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Reverse(Queued { job, done }));
        self.pool.spawn(move || {
            let lowest = waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop()
                .expect("every task has a job queued");
            let Reverse(Queued { job, done }) = lowest;
            // The receiver is gone only when the group is shutting down after a failure;
            // this result is then no longer wanted.
            let _ = done.send(work(job));
        });
    }
}

/// A pool of workers that train clients.
pub struct Trainer {
    queue: JobQueue,
}

struct Shared {
    setup: TrainerSetup,
    /// One model slot per pool thread, indexed by the thread's pool index. A slot is empty
    /// until its thread trains its first client, or after a client panicked with the model.
    workers: Vec<Mutex<Option<Net>>>,
}

impl Trainer {
    /// A trainer with `num_parallels` worker threads.
    pub fn new(
        setup: TrainerSetup,
        num_parallels: usize,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let workers = (0..num_parallels).map(|_| Mutex::new(None)).collect();
        let shared = Shared { setup, workers };
        let queue = JobQueue::new(
            num_parallels,
            "worker",
            Arc::new(move |job| shared.train(job)),
        )?;
        Ok(Self { queue })
    }
}

impl ClientTrainer for Trainer {
    fn spawn(&self, job: Job, done: Done) {
        self.queue.push(job, done);
    }
}

impl Shared {
    fn train(&self, job: Job) -> Result<Update, ClientFailure> {
        let (round, client) = (job.round, job.client);
        answer(round, client, || self.train_on_this_worker(job))
    }

    fn train_on_this_worker(&self, job: Job) -> Result<Update, TrainError> {
        let setup = &self.setup;
        if setup.stop.is_requested() {
            return Err(TrainError::Stopped);
        }
        let worker = rayon::current_thread_index().expect("jobs run on the trainer's pool");
        let mut slot = self.workers[worker]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let device = setup.backend.training_device();
        let net = slot.take().unwrap_or_else(|| self.new_net(&device));
        let net = flat::load(net, &job.model);
        setup.faults.strike(job.round, job.client)?;
        let indices = &setup.partition.clients[job.client];
        let purpose = Purpose::LOCAL_SHUFFLE.at_edge_round(job.edge_round);
        let mut rng = stream(setup.seed, purpose, job.round, job.client as u32);
        let view = ClientView {
            round: job.round,
            client: job.client,
            global: &job.model,
            downlink: &job.extras,
            lr: setup.client.lr,
        };
        let mut state = setup.states.get(job.client);
        let objective = setup.algorithm.objective(&view, state.as_ref());
        let attack = self.attack_of(job.client);
        let local = LocalData {
            data: &setup.data,
            indices,
            flip_labels: attack.is_some_and(Attack::flips_labels),
        };
        let loss_at_global = setup
            .algorithm
            .needs_loss_at_global()
            .then(|| mean_loss(&net, local, setup.client.batch_size, &device));
        let result = local_train(
            net,
            local,
            (&setup.client, job.steps),
            (&objective, &job.model),
            &mut rng,
            &device,
            &setup.stop,
        )?;
        let mut params = flat::flatten(&result.net);
        *slot = Some(result.net);
        let trained = Trained {
            params: &params,
            steps: result.steps,
            loss_at_global,
        };
        let extras = setup.algorithm.finish(&view, &mut state, &trained);
        setup.states.put(job.client, state);
        if let Some(attack) = attack {
            let key = (setup.seed, job.round, job.edge_round);
            attack.corrupt(key, job.client, &job.model, &mut params);
        }
        Ok(Update {
            round: job.round,
            clients: vec![job.client],
            num_samples: indices.len(),
            train_loss: result.mean_loss,
            steps: result.steps,
            params,
            extras,
        })
    }

    /// A model for a worker that has none yet.
    fn new_net(&self, device: &burn::tensor::Device) -> Net {
        let data = &self.setup.data;
        Net::new(&self.setup.model, data.shape(), device)
    }

    /// The attack `client` makes, if it is a Byzantine client.
    fn attack_of(&self, client: ClientId) -> Option<Attack> {
        let (attack, attackers) = self.setup.byzantine.as_ref()?;
        attackers[client].then_some(*attack)
    }
}

/// Runs one client's `work`, turning an error or a panic into a [`ClientFailure`].
fn answer(
    round: u32,
    client: ClientId,
    work: impl FnOnce() -> Result<Update, TrainError>,
) -> Result<Update, ClientFailure> {
    let error = match catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(update)) => return Ok(update),
        Ok(Err(error)) => error.to_string(),
        Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
    };
    Err(ClientFailure {
        round,
        client,
        error,
    })
}

/// The client failures an experiment injects (its `faults` that name a client).
#[derive(Debug, Clone, Default)]
pub struct InjectedFaults(Vec<FaultConfig>);

impl InjectedFaults {
    /// The client faults among `faults`.
    pub fn new(faults: &[FaultConfig]) -> Self {
        Self(
            faults
                .iter()
                .filter(|f| f.client.is_some())
                .copied()
                .collect(),
        )
    }

    /// Fails the way the experiment asks for `client` in `round`, if it does: panics, or
    /// returns an error.
    pub fn strike(&self, round: u32, client: ClientId) -> Result<(), TrainError> {
        let fault = self
            .0
            .iter()
            .find(|f| f.round == round && f.client == Some(client));
        match fault.map(|f| f.kind) {
            Some(FaultKind::Panic) => panic!("injected panic"),
            Some(FaultKind::Error) => Err(TrainError::Injected),
            None => Ok(()),
        }
    }
}

/// The message a panic was raised with, if it had one.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}
