//! The upper server: samples clients, sends them the global model, aggregates their updates
//! and evaluates the result, round after round.

use std::sync::Arc;
use std::time::Instant;

use rand::seq::index;

use crate::backend::BackendKind;
use crate::config::EvalConfig;
use crate::data::Dataset;
use crate::model::ModelKind;
use crate::network::{ClientId, ClientInfo, Link, LinkEnd, Message, Update};
use crate::report::RoundRecord;
use crate::seed::{Purpose, stream};
use crate::strategy::Strategy;
use crate::train::evaluate;
use crate::trainer::ClientFailure;

use super::FederationError;

const TIER: &str = "server";

/// What the server needs besides its links.
pub struct ServerSetup {
    /// The experiment seed, for client sampling.
    pub seed: u64,
    /// Number of rounds.
    pub rounds: u32,
    /// Clients sampled per round.
    pub clients_per_round: usize,
    /// The initial global model.
    pub initial_model: Vec<f32>,
    /// The aggregation rule.
    pub strategy: Box<dyn Strategy>,
    /// The test set the global model is evaluated on.
    pub test_data: Arc<Dataset>,
    /// When and how to evaluate.
    pub eval: EvalConfig,
    /// The architecture, to build the evaluation model.
    pub model: ModelKind,
    /// The backend that evaluates.
    pub backend: BackendKind,
}

/// The server tier: one thread, one link down to the clients.
pub struct Server {
    setup: ServerSetup,
    link: LinkEnd,
    traffic: Link,
    outcomes: flume::Sender<RoundRecord>,
}

impl Server {
    /// A server that talks on `link` (whose counters are `traffic`) and reports each round on
    /// `outcomes`.
    pub fn new(
        setup: ServerSetup,
        link: LinkEnd,
        traffic: Link,
        outcomes: flume::Sender<RoundRecord>,
    ) -> Self {
        Self {
            setup,
            link,
            traffic,
            outcomes,
        }
    }

    /// Runs every round, then shuts the tree down; returns the final global model.
    pub fn run(mut self) -> Result<Vec<f32>, FederationError> {
        let clients = self.await_set_up()?;
        let result = self.run_rounds(&clients);
        self.shut_down()?;
        result
    }

    fn await_set_up(&self) -> Result<Vec<ClientInfo>, FederationError> {
        match self.link.recv().map_err(|_| lost("client group 0"))? {
            Message::SetUp { clients } => Ok(clients),
            other => Err(protocol(format!("expected SetUp, got {}", other.code()))),
        }
    }

    fn run_rounds(&mut self, clients: &[ClientInfo]) -> Result<Vec<f32>, FederationError> {
        let device = self.setup.backend.device();
        let mut global: Arc<[f32]> = std::mem::take(&mut self.setup.initial_model).into();
        for round in 1..=self.setup.rounds {
            let started = Instant::now();
            let (down_before, up_before) = (self.traffic.down(), self.traffic.up());
            let sampled = self.sample(round, clients);
            for &client in &sampled {
                let model = global.clone();
                self.link
                    .send(Message::Downlink {
                        round,
                        client,
                        model,
                    })
                    .map_err(|_| lost("client group 0"))?;
            }
            let updates = self.collect(round, sampled.len())?;
            global = self.setup.strategy.aggregate(&global, &updates).into();
            let evaluation = self.is_eval_round(round).then(|| {
                let setup = &self.setup;
                evaluate(
                    setup.model,
                    &global,
                    &setup.test_data,
                    setup.eval.batch_size,
                    &device,
                )
            });
            let record = RoundRecord::new(
                round,
                &updates,
                evaluation,
                self.traffic.down() - down_before,
                self.traffic.up() - up_before,
                started.elapsed(),
            );
            self.outcomes
                .send(record)
                .map_err(|_| FederationError::ObserverGone)?;
        }
        Ok(global.to_vec())
    }

    /// `clients_per_round` clients drawn without replacement from the round's stream, in id
    /// order.
    fn sample(&self, round: u32, clients: &[ClientInfo]) -> Vec<ClientId> {
        let mut rng = stream(self.setup.seed, Purpose::ClientSampling, round, 0);
        let mut sampled: Vec<ClientId> =
            index::sample(&mut rng, clients.len(), self.setup.clients_per_round)
                .into_iter()
                .map(|i| clients[i].id)
                .collect();
        sampled.sort_unstable();
        sampled
    }

    /// Receives `expected` updates for `round`, sorted by client id; the first failure ends
    /// the round.
    fn collect(&self, round: u32, expected: usize) -> Result<Vec<Update>, FederationError> {
        let mut updates = Vec::with_capacity(expected);
        while updates.len() < expected {
            match self.link.recv().map_err(|_| lost("client group 0"))? {
                Message::Uplink(update) if update.round == round => updates.push(update),
                Message::ClientFailed {
                    round,
                    client,
                    error,
                } => {
                    return Err(ClientFailure {
                        round,
                        client,
                        error,
                    }
                    .into());
                }
                other => {
                    return Err(protocol(format!(
                        "unexpected {} in round {round}",
                        other.code()
                    )));
                }
            }
        }
        updates.sort_by_key(|u| u.client);
        Ok(updates)
    }

    fn is_eval_round(&self, round: u32) -> bool {
        round.is_multiple_of(self.setup.eval.every) || round == self.setup.rounds
    }

    /// Sends `Exit` and waits for `ExitAck`, dropping results still in flight. A group that is
    /// already gone has nothing left to stop.
    fn shut_down(&self) -> Result<(), FederationError> {
        if self.link.send(Message::Exit).is_err() {
            return Ok(());
        }
        loop {
            match self.link.recv() {
                Ok(Message::ExitAck) | Err(_) => return Ok(()),
                Ok(Message::Uplink(_) | Message::ClientFailed { .. }) => {}
                Ok(other) => {
                    return Err(protocol(format!("expected ExitAck, got {}", other.code())));
                }
            }
        }
    }
}

fn lost(tier: &str) -> FederationError {
    FederationError::TierLost {
        tier: tier.to_string(),
        detail: None,
    }
}

fn protocol(detail: String) -> FederationError {
    FederationError::Protocol {
        tier: TIER.to_string(),
        detail,
    }
}
