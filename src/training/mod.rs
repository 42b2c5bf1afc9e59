//! Training clients: the interface a client group hands its clients' work to
//! ([`ClientTrainer`]), the burn trainer's worker pool ([`pool`]), which runs each client's
//! local training ([`crate::local`]) on a worker's thread, evaluation on burn
//! ([`evaluate`](mod@evaluate)), and clients that answer at once ([`echo`]).

pub mod echo;
pub mod evaluate;
mod passes;
pub mod personal;
mod pool;

pub use echo::{Answer, EchoTrainer};
pub use evaluate::{
    ClientStarts, TestEvaluator, client_accuracies, evaluate, mean_loss,
};
pub use pool::{Trainer, TrainerSetup};

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::{FaultConfig, FaultKind};
use crate::local::TrainError;
use crate::network::{ClientId, Tensors, Update};
use crate::output::{ClientAccuracy, Evaluation};
use crate::strategy::Sent;

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

/// What scores the global model for the server, as a [`ClientTrainer`] trains its clients for
/// the client groups: the tree knows no model, data set or backend. [`TestEvaluator`] scores
/// it on burn.
pub trait ModelEvaluator: Send {
    /// The model's accuracy and loss on the test set.
    fn test(&self, params: &[f32]) -> Evaluation;

    /// The spread of accuracy over the clients' own test samples, if they hold any: each
    /// client scored with the model it would train from in `round` if it were sent
    /// `sent(client)` (the global model, its cluster's, or the one it picks from several), and
    /// for a personalised algorithm with its personal model too. An error says why a personal
    /// model could not be made (its fine-tuning diverged, its state cannot be read).
    fn clients(
        &self,
        round: u32,
        sent: &dyn Fn(ClientId) -> Sent,
    ) -> Result<Option<ClientScores>, String>;
}

/// The clients' accuracies on their own test samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientScores {
    /// With the model each would train from.
    pub accuracy: ClientAccuracy,
    /// With each one's personal model, for a personalised algorithm.
    pub personal: Option<ClientAccuracy>,
}

/// What a client group hands its clients' work to. [`Trainer`] trains them on burn;
/// [`EchoTrainer`] answers at once, to time or test the tree alone.
pub trait ClientTrainer: Send + Sync {
    /// Queues a job; its result must be sent to `done` when the client has trained or failed,
    /// from another thread than the caller's: `done` holds few results (see
    /// [`crate::network::UPWARD_BACKLOG`]) and the caller drains it. Jobs should start lowest
    /// (round, edge round, client) first, as [`Trainer`] starts them.
    fn spawn(&self, job: Job, done: Done);

    /// Queues a probe: the client's mean loss on the model, over its training data. As with
    /// [`ClientTrainer::spawn`], the answer goes to `done` from another thread.
    fn probe(&self, probe: Probe, done: ProbeDone);
}

/// Where a job's result goes.
pub type Done = flume::Sender<Result<Update, ClientFailure>>;

/// A client asked for its loss on a model before the server selects who trains.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The round.
    pub round: u32,
    /// The client.
    pub client: ClientId,
    /// The model to measure.
    pub model: Arc<[f32]>,
}

/// A probe's answer: the client's mean loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probed {
    /// The round.
    pub round: u32,
    /// The client.
    pub client: ClientId,
    /// Its mean loss on the model over its training data.
    pub loss: f64,
}

/// Where a probe's answer goes.
pub type ProbeDone = flume::Sender<Result<Probed, ClientFailure>>;

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

    /// Runs `task` on a worker of the pool, besides the queued jobs (a probe, which comes
    /// before any training of its round).
    pub(crate) fn run_aside(&self, task: impl FnOnce() + Send + 'static) {
        self.pool.spawn(task);
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

/// Runs one client's `work`, turning an error or a panic into a [`ClientFailure`].
fn answer<T>(
    round: u32,
    client: ClientId,
    work: impl FnOnce() -> Result<T, TrainError>,
) -> Result<T, ClientFailure> {
    let error = match catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(answer)) => return Ok(answer),
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
