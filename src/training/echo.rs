//! A trainer whose clients answer at once: the tree alone, without burn.

use std::sync::{Arc, Mutex, PoisonError};

use super::{
    ClientFailure, ClientTrainer, Done, InjectedFaults, Job, JobQueue, Probe, ProbeDone, Probed,
    answer,
};
use crate::network::{ClientId, Update};

/// Clients that "train" by sending back the model they were sent, at once. The message-path
/// benchmark times the tree with it, and the protocol tests run hundreds of federations with
/// it in milliseconds. Faults are injected as in the real trainer, and answers come from a
/// small thread pool, so they reach the groups in varying order, as real clients' do.
pub struct EchoTrainer {
    queue: JobQueue,
    shared: Arc<Shared>,
}

struct Shared {
    /// Every client's sample count, by id: the weight its update carries.
    num_samples: Vec<usize>,
    faults: InjectedFaults,
    answers: Mutex<Vec<Answer>>,
}

/// One job the echo trainer answered, for tests that check what the tree did with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The round.
    pub round: u32,
    /// The edge round within it.
    pub edge_round: u32,
    /// The client.
    pub client: ClientId,
    /// Whether the client answered with an update (rather than a failure).
    pub updated: bool,
}

impl EchoTrainer {
    /// Echoing clients with these sample counts (indexed by client id), failing as `faults`
    /// say, answered by `threads` threads.
    pub fn new(
        num_samples: Vec<usize>,
        faults: InjectedFaults,
        threads: usize,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let shared = Arc::new(Shared {
            num_samples,
            faults,
            answers: Mutex::new(Vec::new()),
        });
        let answering = shared.clone();
        let queue = JobQueue::new(threads, "echo", Arc::new(move |job| answering.answer(job)))?;
        Ok(Self { queue, shared })
    }

    /// Every job answered so far, in the order they were answered.
    pub fn answers(&self) -> Vec<Answer> {
        self.shared
            .answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ClientTrainer for EchoTrainer {
    fn spawn(&self, job: Job, done: Done) {
        self.queue.push(job, done);
    }

    /// Answers at once, with the client's sample count for its loss: the largest clients look
    /// the worst fitted.
    fn probe(&self, probe: Probe, done: ProbeDone) {
        let loss = self.shared.num_samples[probe.client] as f64;
        self.queue.run_aside(move || {
            let _ = done.send(Ok(Probed {
                round: probe.round,
                client: probe.client,
                loss,
            }));
        });
    }
}

impl Shared {
    /// Answers `job` with the model it brought, or with its injected fault, and notes it.
    fn answer(&self, job: Job) -> Result<Update, ClientFailure> {
        let (round, edge_round, client) = (job.round, job.edge_round, job.client);
        let result = answer(round, client, || {
            self.faults.strike(round, client)?;
            Ok(Update {
                round,
                clients: vec![client],
                num_samples: self.num_samples[client],
                train_loss: 0.0,
                steps: 1,
                params: job.model.to_vec(),
                extras: Default::default(),
                encoded: Vec::new(),
            })
        });
        self.answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Answer {
                round,
                edge_round,
                client,
                updated: result.is_ok(),
            });
        result
    }
}
