//! A lower client group: trains the clients its parent sends it on the shared trainer, and
//! sends each update back up as soon as it is ready.
//!
//! On the simulated clock a client starts when its downlink arrives, trains for
//! `samples processed / speed` seconds (its work in the round, see [`WorkPlan`]), after one
//! pass over its samples for each loss its algorithm measures first (IFCA's cluster models,
//! q-FFL's global model), then uploads. A client that draws a dropout for the round answers at once with `Dropped`
//! instead of training, and so does one that is offline when its downlink arrives or goes
//! offline before its training would end (at that moment, reason `offline`).
//!
//! A probe (the server asking clients for their loss before it selects who trains) takes a
//! client one pass over its samples at its speed, and is answered whatever the client's dropout
//! draw: a client online when asked answers.

use std::collections::HashMap;
use std::sync::Arc;

use rand::RngExt;

use crate::availability::Availability;
use crate::config::WorkPlan;
use crate::network::{
    ClientId, ClientInfo, DropReason, Dropped, Envelope, LinkEnd, Message, NodeId, UPWARD_BACKLOG,
    Update,
};
use crate::seed::{Purpose, stream};
use crate::training::{ClientFailure, ClientTrainer, Done, Job, Probe, ProbeDone, Probed};

use super::FederationError;

/// What decides, for every client alike, whether it answers a downlink and when: the same
/// under every group, and what the asynchronous server's [`super::Clock`] computes with.
#[derive(Debug, Clone)]
pub struct ClientConditions {
    /// The experiment seed, for dropout draws.
    pub seed: u64,
    /// Probability that a client is unavailable in a round.
    pub dropout: f64,
    /// How much each client trains, which sets its steps and simulated compute time.
    pub work: WorkPlan,
    /// Every client's training speed in samples per second (infinite: no simulated time).
    pub speeds: Arc<Vec<f64>>,
    /// When each client is online.
    pub availability: Arc<Availability>,
    /// Passes over its samples each client makes before training, measuring losses
    /// ([`crate::strategy::ClientAlgorithm::measuring_passes`]).
    pub measuring_passes: u32,
}

impl ClientConditions {
    /// `num_clients` clients that never drop out, train one epoch in batches of 32 in no
    /// simulated time, and are always online.
    pub fn instant(num_clients: usize) -> Self {
        Self {
            seed: 0,
            dropout: 0.0,
            work: WorkPlan::fixed(1, 32),
            speeds: Arc::new(vec![f64::INFINITY; num_clients]),
            availability: Arc::new(Availability::always()),
            measuring_passes: 0,
        }
    }
}

/// What a client does with a model that reached it, as its [`ClientConditions`] decide.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Response {
    /// It sits the round out (its dropout draw) and says so at once.
    DropsOut,
    /// It goes offline at this simulated time, before its training would end (or is offline
    /// already when the model arrives), and is dropped then.
    GoesOffline(f64),
    /// It trains for `steps` SGD steps, which end at simulated time `finishes`.
    Trains {
        /// SGD steps.
        steps: u32,
        /// When training ends.
        finishes: f64,
    },
}

impl ClientConditions {
    /// What `client` does with the model of (round, edge round) `rounds` that reached it at
    /// simulated time `arrived`: what its group acts on, and what an asynchronous server
    /// foresees of when its answer leaves it.
    pub fn response(&self, rounds: (u32, u32), client: ClientInfo, arrived: f64) -> Response {
        let (round, edge_round) = rounds;
        if drops_out(self.seed, self.dropout, round, edge_round, client.id) {
            return Response::DropsOut;
        }
        let (steps, seconds) = self.training(rounds, client);
        let finishes = arrived + seconds;
        match self
            .availability
            .first_offline(client.id, arrived, finishes)
        {
            Some(offline) => Response::GoesOffline(offline),
            None => Response::Trains { steps, finishes },
        }
    }

    /// The simulated seconds `client` takes to measure a model's loss over its samples: one
    /// pass at its speed.
    pub fn probe_seconds(&self, client: ClientInfo) -> f64 {
        client.num_samples as f64 / self.speeds[client.id]
    }

    /// The SGD steps `client` takes on the model of (round, edge round) `rounds`, and the
    /// simulated seconds its local work takes at its speed: the steps, after its measuring
    /// passes (each as long as a probe).
    pub fn training(&self, rounds: (u32, u32), client: ClientInfo) -> (u32, f64) {
        let speed = self.speeds[client.id];
        let work = self.work.work(rounds, client.id, client.num_samples, speed);
        let measured = self.measuring_passes as usize * client.num_samples;
        (work.steps, (work.samples + measured) as f64 / speed)
    }
}

/// What a group needs besides its link and the trainer.
#[derive(Debug, Clone)]
pub struct GroupSetup {
    /// The group's index; it is `NodeId::Group(index)`.
    pub index: usize,
    /// The clients it hosts, in id order.
    pub clients: Vec<ClientInfo>,
    /// How its clients answer.
    pub conditions: ClientConditions,
}

impl GroupSetup {
    /// The groups of a tree, one per part of `parts` (the client ids under each scheduler, or
    /// all clients in the flat topology), with each client's sample count from `num_samples`
    /// (indexed by id), all under `conditions`.
    pub fn for_parts(
        parts: Vec<Vec<ClientId>>,
        num_samples: &[usize],
        conditions: &ClientConditions,
    ) -> Vec<GroupSetup> {
        parts
            .into_iter()
            .enumerate()
            .map(|(index, ids)| GroupSetup {
                index,
                clients: ids
                    .into_iter()
                    .map(|id| ClientInfo {
                        id,
                        num_samples: num_samples[id],
                    })
                    .collect(),
                conditions: conditions.clone(),
            })
            .collect()
    }
}

/// The client-group tier: one thread that feeds the trainer and forwards its results.
pub struct ClientGroup {
    setup: GroupSetup,
    trainer: Arc<dyn ClientTrainer>,
    link: LinkEnd,
    /// Simulated time each in-flight client finishes training.
    in_flight: HashMap<ClientId, f64>,
    /// Simulated time each client being probed finishes measuring its loss.
    probing: HashMap<ClientId, f64>,
}

/// What the group's thread waits for.
enum Event {
    FromParent(Option<Envelope>),
    Trained(Result<Update, ClientFailure>),
    Probed(Result<Probed, ClientFailure>),
}

impl ClientGroup {
    /// A group that trains on `trainer` and talks to its parent on `link`.
    pub fn new(mut setup: GroupSetup, trainer: Arc<dyn ClientTrainer>, link: LinkEnd) -> Self {
        // In id order, so that a job finds its client's sample count without a map beside it.
        setup.clients.sort_unstable_by_key(|c| c.id);
        Self {
            setup,
            trainer,
            link,
            in_flight: HashMap::new(),
            probing: HashMap::new(),
        }
    }

    fn node(&self) -> NodeId {
        NodeId::Group(self.setup.index)
    }

    /// The sample count of `client`, which the group hosts.
    fn num_samples(&self, client: ClientId) -> usize {
        let clients = &self.setup.clients;
        let at = ClientInfo::position_in(clients, client).expect("a job is for a client of the group");
        clients[at].num_samples
    }

    /// Announces the group's clients, then serves downlinks until `Exit`; returns once every
    /// client in flight has finished and `ExitAck` is sent.
    pub fn run(mut self) -> Result<(), FederationError> {
        let set_up = Message::SetUp {
            clients: self.setup.clients.clone(),
        };
        // A parent that is already gone reports its own error; nothing to add here.
        let _ = self.link.send(set_up, 0.0);
        let (done_tx, done_rx) = flume::bounded(UPWARD_BACKLOG);
        let (probed_tx, probed_rx) = flume::bounded(UPWARD_BACKLOG);
        let mut parent_open = true;
        let mut exiting = false;
        while !(exiting && self.in_flight.is_empty() && self.probing.is_empty()) {
            let held = "the group holds a sender";
            let answers = flume::Selector::new()
                .recv(&done_rx, |r| Event::Trained(r.expect(held)))
                .recv(&probed_rx, |r| Event::Probed(r.expect(held)));
            let event = if exiting {
                answers.wait()
            } else {
                answers
                    .recv(self.link.receiver(), |m| Event::FromParent(m.ok()))
                    .wait()
            };
            match event {
                Event::FromParent(Some(envelope)) => match envelope.message {
                    Message::Downlink {
                        round,
                        edge_round,
                        clients,
                        model,
                        extras,
                        ..
                    } => {
                        for client in clients {
                            let job = Job {
                                round,
                                edge_round,
                                client,
                                steps: 0,
                                model: model.clone(),
                                extras: extras.clone(),
                            };
                            parent_open &= self.start(job, envelope.at, &done_tx);
                        }
                    }
                    Message::Probe {
                        round,
                        clients,
                        model,
                    } => {
                        for client in clients {
                            let probe = Probe {
                                round,
                                client,
                                model: model.clone(),
                            };
                            self.start_probe(probe, envelope.at, &probed_tx);
                        }
                    }
                    Message::Exit => exiting = true,
                    other => {
                        return Err(FederationError::Protocol {
                            tier: self.node().to_string(),
                            detail: format!("unexpected {} from its parent", other.code()),
                        });
                    }
                },
                Event::FromParent(None) => {
                    parent_open = false;
                    exiting = true;
                }
                Event::Trained(result) => parent_open &= self.finish(result),
                Event::Probed(result) => parent_open &= self.finish_probe(result),
            }
        }
        if parent_open {
            let _ = self.link.send(Message::ExitAck, 0.0);
        }
        Ok(())
    }

    /// Starts a client's training, or reports it dropped; false if the parent is gone.
    fn start(&mut self, mut job: Job, arrived: f64, done: &Done) -> bool {
        let client = ClientInfo {
            id: job.client,
            num_samples: self.num_samples(job.client),
        };
        let rounds = (job.round, job.edge_round);
        let (reason, at) = match self.setup.conditions.response(rounds, client, arrived) {
            Response::DropsOut => (DropReason::Dropout, arrived),
            Response::GoesOffline(at) => (DropReason::Offline, at),
            Response::Trains { steps, finishes } => {
                job.steps = steps;
                self.in_flight.insert(job.client, finishes);
                self.trainer.spawn(job, done.clone());
                return true;
            }
        };
        let dropped = Message::Dropped {
            round: job.round,
            clients: vec![Dropped::new(job.client, reason)],
        };
        self.link.send(dropped, at).is_ok()
    }

    /// Starts measuring a client's loss for a probe that reached it at `arrived`: one pass
    /// over its samples at its speed.
    fn start_probe(&mut self, probe: Probe, arrived: f64, done: &ProbeDone) {
        let client = ClientInfo {
            id: probe.client,
            num_samples: self.num_samples(probe.client),
        };
        let seconds = self.setup.conditions.probe_seconds(client);
        self.probing.insert(probe.client, arrived + seconds);
        self.trainer.probe(probe, done.clone());
    }

    /// Sends a probed client's loss up; false if the parent is gone.
    fn finish_probe(&mut self, result: Result<Probed, ClientFailure>) -> bool {
        let (client, message) = match result {
            Ok(probed) => (
                probed.client,
                Message::Probed {
                    round: probed.round,
                    client: probed.client,
                    loss: probed.loss,
                },
            ),
            Err(failure) => (failure.client, self.failed(failure)),
        };
        let finished = self
            .probing
            .remove(&client)
            .expect("every answer belongs to a probed client");
        self.link.send(message, finished).is_ok()
    }

    /// A client's failure, as the message that reports it up.
    fn failed(&self, failure: ClientFailure) -> Message {
        Message::ClientFailed {
            round: failure.round,
            client: failure.client,
            path: vec![self.node()],
            error: failure.error,
        }
    }

    /// Sends a finished client's result up; false if the parent is gone.
    fn finish(&mut self, result: Result<Update, ClientFailure>) -> bool {
        let (client, message) = match result {
            Ok(update) => (update.clients[0], Message::Uplink(update)),
            Err(failure) => (failure.client, self.failed(failure)),
        };
        let finished = self
            .in_flight
            .remove(&client)
            .expect("every result belongs to a started client");
        self.link.send(message, finished).is_ok()
    }
}

/// Whether `client` is unavailable in an edge round of `round`: a draw with probability
/// `dropout` from the client's own stream for that (round, edge round).
pub fn drops_out(seed: u64, dropout: f64, round: u32, edge_round: u32, client: ClientId) -> bool {
    if dropout <= 0.0 {
        return false;
    }
    let purpose = Purpose::DROPOUT.at_edge_round(edge_round);
    let mut rng = stream(seed, purpose, round, client);
    rng.random::<f64>() < dropout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_that_measures_losses_first_takes_a_probes_time_for_each() {
        let mut conditions = ClientConditions {
            speeds: Arc::new(vec![100.0; 2]),
            ..ClientConditions::instant(2)
        };
        let client = ClientInfo {
            id: 1,
            num_samples: 50,
        };
        let (steps, plain) = conditions.training((1, 0), client);
        assert_eq!((steps, plain), (2, 0.5));
        conditions.measuring_passes = 3;
        let (measuring_steps, measuring) = conditions.training((1, 0), client);
        assert_eq!(measuring_steps, steps);
        assert_eq!(measuring - plain, 3.0 * conditions.probe_seconds(client));
    }
}
