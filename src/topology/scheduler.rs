//! A middle scheduler (an edge server), built the way FedLab builds one: a
//! [`ServerConnector`] faces the server as a client would, a [`ClientConnector`] faces the
//! client group as a server would, and two queues join them. Each connector is a thread that
//! runs three stages: set-up (the group's `SetUp` travels up), communication, and shutdown
//! (`Exit` travels down, `ExitAck` up).
//!
//! In relay mode the client connector hands each client its own downlink and forwards every
//! update up as it arrives. In aggregate mode it runs `edge_rounds` rounds over its group,
//! each ending in the mean the strategy allows (HierFAVG's edge aggregation: the
//! sample-weighted mean of the models, plus the strategy's extra tensors), and sends the last
//! one up as a partial aggregate, weighted by its total sample count.
//!
//! A probe (the server asking clients for their loss before it selects who trains) is relayed
//! in either mode: each client is sent its own, and each answer goes up as it arrives.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{FailurePolicy, SchedulerMode};
use crate::network::{
    ClientId, ClientInfo, Envelope, LinkEnd, LinkProfile, Message, NodeId, Tensors, UPWARD_BACKLOG,
    Update,
};
use crate::strategy::{self, EdgeAggregation};

use super::FederationError;
use super::collector::{Failure, Foresight, RoundCollector, RoundOutcome};

/// How a scheduler behaves.
#[derive(Debug, Clone)]
pub struct SchedulerSetup {
    /// The scheduler's index; it is `NodeId::Scheduler(index)` and its group is
    /// `NodeId::Group(index)`.
    pub index: usize,
    /// Relay or aggregate.
    pub mode: SchedulerMode,
    /// Edge rounds per round, in aggregate mode.
    pub edge_rounds: u32,
    /// How the strategy lets this scheduler combine its group's updates, in aggregate mode
    /// (validation has ruled out strategies that do not allow it).
    pub edge: EdgeAggregation,
    /// The link to the server, to know how early a partial aggregate must leave to meet a
    /// deadline.
    pub server_link: LinkProfile,
    /// Rounds in which the client connector panics (fault injection).
    pub panic_rounds: Vec<u32>,
    /// What a client's failure does to the run; an aggregating scheduler stops its edge
    /// rounds at the first failure under the abort policy.
    pub on_client_failure: FailurePolicy,
    /// The dropout draws, to fold the group's updates as they arrive in edge rounds where
    /// nothing else can leave one out.
    pub foresight: Option<Foresight>,
}

/// Builds a scheduler's two connectors around its links to the server (`parent`) and to its
/// client group (`child`).
pub fn scheduler(
    setup: SchedulerSetup,
    parent: LinkEnd,
    child: LinkEnd,
) -> (ServerConnector, ClientConnector) {
    let (down_tx, down_rx) = flume::unbounded();
    let (up_tx, up_rx) = flume::bounded(UPWARD_BACKLOG);
    let node = NodeId::Scheduler(setup.index);
    (
        ServerConnector {
            node,
            parent,
            down: down_tx,
            up: up_rx,
        },
        ClientConnector {
            node,
            setup,
            child,
            down: down_rx,
            up: up_tx,
            group: HashMap::new(),
            aggregated: None,
        },
    )
}

/// The scheduler's upper half: relays between the server and the queues.
pub struct ServerConnector {
    node: NodeId,
    parent: LinkEnd,
    down: flume::Sender<Envelope>,
    up: flume::Receiver<Envelope>,
}

enum ServerSide {
    FromServer(Option<Envelope>),
    FromQueue(Option<Envelope>),
}

impl ServerConnector {
    /// Forwards downlinks and `Exit` to the client connector and everything it queues to the
    /// server, until the client connector's `ExitAck` has gone up.
    pub fn run(self) -> Result<(), FederationError> {
        let mut server_open = true;
        loop {
            let event = if server_open {
                flume::Selector::new()
                    .recv(self.parent.receiver(), |m| ServerSide::FromServer(m.ok()))
                    .recv(&self.up, |m| ServerSide::FromQueue(m.ok()))
                    .wait()
            } else {
                ServerSide::FromQueue(self.up.recv().ok())
            };
            match event {
                ServerSide::FromServer(Some(envelope)) => match envelope.message {
                    Message::Downlink { .. } | Message::Probe { .. } | Message::Exit => {
                        if self.down.send(envelope).is_err() {
                            return Err(self.connector_lost());
                        }
                    }
                    other => {
                        return Err(FederationError::Protocol {
                            tier: self.node.to_string(),
                            detail: format!("unexpected {} from the server", other.code()),
                        });
                    }
                },
                ServerSide::FromServer(None) => {
                    server_open = false;
                    self.stop_client_connector();
                }
                ServerSide::FromQueue(Some(envelope)) => {
                    let done = matches!(envelope.message, Message::ExitAck);
                    if server_open && self.parent.send(envelope.message, envelope.at).is_err() {
                        server_open = false;
                        self.stop_client_connector();
                    }
                    if done {
                        return Ok(());
                    }
                }
                ServerSide::FromQueue(None) => return Err(self.connector_lost()),
            }
        }
    }

    /// The server is gone: tells the client connector to stop; the loop then waits for its
    /// `ExitAck`.
    fn stop_client_connector(&self) {
        let _ = self.down.send(Envelope {
            from: self.node,
            at: 0.0,
            message: Message::Exit,
        });
    }

    fn connector_lost(&self) -> FederationError {
        FederationError::TierLost {
            tier: format!("{} (client connector)", self.node),
            detail: None,
        }
    }
}

/// What came down for a round: the model (replaced by each edge round's mean), the extra
/// tensors and the deadline.
struct Down {
    round: u32,
    model: Arc<[f32]>,
    extras: Tensors,
    deadline: Option<f64>,
}

/// The scheduler's lower half: serves its client group as the server would.
pub struct ClientConnector {
    node: NodeId,
    setup: SchedulerSetup,
    child: LinkEnd,
    down: flume::Receiver<Envelope>,
    up: flume::Sender<Envelope>,
    /// The group's clients with the samples each announced at set-up.
    group: HashMap<ClientId, usize>,
    /// The last round aggregated, in aggregate mode.
    aggregated: Option<u32>,
}

enum ClientSide {
    FromQueue(Option<Envelope>),
    FromGroup(Option<Envelope>),
}

impl ClientConnector {
    /// Passes the group's `SetUp` up, serves rounds until `Exit`, then stops the group and
    /// acknowledges.
    pub fn run(mut self) -> Result<(), FederationError> {
        let set_up = self.child.recv().map_err(|_| self.group_lost())?;
        if let Message::SetUp { clients } = &set_up.message {
            self.group = clients.iter().map(|c| (c.id, c.num_samples)).collect();
        }
        self.queue_up(set_up.message, set_up.at);
        loop {
            let event = flume::Selector::new()
                .recv(&self.down, |m| ClientSide::FromQueue(m.ok()))
                .recv(self.child.receiver(), |m| ClientSide::FromGroup(m.ok()))
                .wait();
            match event {
                ClientSide::FromQueue(Some(Envelope {
                    at,
                    message:
                        Message::Downlink {
                            round,
                            clients,
                            model,
                            extras,
                            deadline,
                            ..
                        },
                    ..
                })) => {
                    if self.setup.panic_rounds.contains(&round) {
                        panic!("injected panic");
                    }
                    let down = Down {
                        round,
                        model,
                        extras,
                        deadline,
                    };
                    match self.setup.mode {
                        SchedulerMode::Relay => self.relay_down(&down, clients, at)?,
                        SchedulerMode::Aggregate => {
                            if self.aggregated.is_some_and(|last| last >= round) {
                                return Err(FederationError::Protocol {
                                    tier: self.node.to_string(),
                                    detail: format!(
                                        "a second downlink for round {round}: an aggregating \
                                         scheduler averages one model, so an algorithm that \
                                         sends clients models of their own cannot run under it"
                                    ),
                                });
                            }
                            self.aggregated = Some(round);
                            if !self.aggregate_round(down, &clients, at)? {
                                return self.shut_down();
                            }
                        }
                    }
                }
                ClientSide::FromQueue(Some(Envelope {
                    at,
                    message:
                        Message::Probe {
                            round,
                            clients,
                            model,
                        },
                    ..
                })) => {
                    for client in clients {
                        let probe = Message::Probe {
                            round,
                            clients: vec![client],
                            model: model.clone(),
                        };
                        self.child.send(probe, at).map_err(|_| self.group_lost())?;
                    }
                }
                ClientSide::FromQueue(Some(_)) | ClientSide::FromQueue(None) => {
                    return self.shut_down();
                }
                ClientSide::FromGroup(Some(envelope)) => self.forward_up(envelope),
                ClientSide::FromGroup(None) => return Err(self.group_lost()),
            }
        }
    }

    fn relay_down(
        &self,
        down: &Down,
        clients: Vec<ClientId>,
        at: f64,
    ) -> Result<(), FederationError> {
        for client in clients {
            self.send_down(down, 0, client, at)?;
        }
        Ok(())
    }

    /// Runs the round's edge rounds over `clients` and queues its report for the server: one
    /// partial aggregate of the last edge round's updates, the clients that last edge round
    /// dropped, and every client that failed. A client that fails sits out the rest of the
    /// round; under the abort policy the first failure ends the round's edge rounds, since the
    /// run is over. Returns false if the server is stopping the run (`Exit` arrived).
    fn aggregate_round(
        &self,
        mut down: Down,
        clients: &[ClientId],
        arrived: f64,
    ) -> Result<bool, FederationError> {
        let round = down.round;
        // The partial aggregate must leave early enough to cross the server link in time. Its
        // extra tensors are taken to be as large as those that came down (as SCAFFOLD's are).
        let cutoff = down.deadline.map(|d| {
            let aggregate_bytes = Message::Uplink(Update {
                round,
                clients: clients.to_vec(),
                num_samples: 0,
                train_loss: 0.0,
                steps: 0,
                params: vec![0.0; down.model.len()],
                extras: down.extras.clone(),
                encoded: Vec::new(),
            })
            .wire_bytes();
            d - self.setup.server_link.transfer_seconds(aggregate_bytes)
        });
        let sums = match &self.setup.edge {
            EdgeAggregation::Mean { sums, .. } => *sums,
            EdgeAggregation::Unsupported(reason) => {
                unreachable!("validation rejects edge aggregation here: {reason}")
            }
        };
        let edge_sums = || strategy::edge_sums(sums);
        let foresight = self
            .setup
            .foresight
            .filter(|_| cutoff.is_none() && self.setup.on_client_failure == FailurePolicy::Abort);
        let mut now = arrived;
        let mut taking_part = clients.to_vec();
        let mut failures = Vec::new();
        let mut last = RoundOutcome::default();
        let mut partial = None;
        for edge_round in 0..self.setup.edge_rounds {
            // Only `Exit` can come down during a round: the server is stopping, so start no
            // more work.
            if !self.down.is_empty() {
                return Ok(false);
            }
            if taking_part.is_empty() {
                break;
            }
            for &client in &taking_part {
                self.send_down(&down, edge_round, client, now)?;
            }
            let mut collector = RoundCollector::new(self.node, round, &taking_part, now, cutoff);
            if let Some(foresight) = foresight {
                let sent: Vec<ClientInfo> = taking_part
                    .iter()
                    .map(|&id| ClientInfo {
                        id,
                        num_samples: self.group[&id],
                    })
                    .collect();
                let contributors = foresight.contributors(round, edge_round, &sent);
                collector = collector.folding(edge_sums(), contributors);
            }
            let Some(mut outcome) = collector.collect(|| self.next_from_group())? else {
                return Ok(false);
            };
            now = outcome.finished;
            let updates = std::mem::take(&mut outcome.updates);
            // The partial aggregate stands for the last edge round's clients only.
            partial = (!updates.is_empty()).then(|| {
                let folded = updates.into_folded(edge_sums());
                let combined = strategy::partial_aggregate(round, folded, sums);
                down.model = combined.params.as_slice().into();
                combined
            });
            taking_part.retain(|c| outcome.failures.iter().all(|f| f.client != *c));
            failures.append(&mut outcome.failures);
            last = outcome;
            if !failures.is_empty() && self.setup.on_client_failure == FailurePolicy::Abort {
                break;
            }
        }
        self.report_up(round, last, failures, partial, now);
        Ok(true)
    }

    /// Queues a round's report for the server: failures (with this scheduler added to their
    /// path), dropped clients, and the partial aggregate.
    fn report_up(
        &self,
        round: u32,
        last: RoundOutcome,
        failures: Vec<Failure>,
        partial: Option<Update>,
        now: f64,
    ) {
        for failure in failures {
            let failed = Message::ClientFailed {
                round,
                client: failure.client,
                path: std::iter::once(self.node).chain(failure.path).collect(),
                error: failure.error,
            };
            self.queue_up(failed, now);
        }
        if !last.dropped.is_empty() {
            let dropped = Message::Dropped {
                round,
                clients: last.dropped,
            };
            self.queue_up(dropped, now);
        }
        if let Some(partial) = partial {
            self.queue_up(Message::Uplink(partial), now);
        }
    }

    /// The group's next message during a round, or `None` if the server is stopping the run
    /// (only `Exit` can come down while a round is under way).
    fn next_from_group(&self) -> Result<Option<Envelope>, FederationError> {
        let event = flume::Selector::new()
            .recv(&self.down, |m| ClientSide::FromQueue(m.ok()))
            .recv(self.child.receiver(), |m| ClientSide::FromGroup(m.ok()))
            .wait();
        match event {
            ClientSide::FromGroup(Some(envelope)) => Ok(Some(envelope)),
            ClientSide::FromGroup(None) => Err(self.group_lost()),
            ClientSide::FromQueue(_) => Ok(None),
        }
    }

    fn send_down(
        &self,
        down: &Down,
        edge_round: u32,
        client: ClientId,
        at: f64,
    ) -> Result<(), FederationError> {
        let downlink = Message::Downlink {
            round: down.round,
            edge_round,
            clients: vec![client],
            model: down.model.clone(),
            extras: down.extras.clone(),
            deadline: down.deadline,
        };
        self.child.send(downlink, at).map_err(|_| self.group_lost())
    }

    /// Passes a message from the group up, adding this scheduler to a failure's path.
    fn forward_up(&self, envelope: Envelope) {
        let message = match envelope.message {
            Message::ClientFailed {
                round,
                client,
                mut path,
                error,
            } => {
                path.insert(0, self.node);
                Message::ClientFailed {
                    round,
                    client,
                    path,
                    error,
                }
            }
            other => other,
        };
        self.queue_up(message, envelope.at);
    }

    /// Hands a message to the server connector; if it is gone, the shutdown path reports it.
    fn queue_up(&self, message: Message, at: f64) {
        let _ = self.up.send(Envelope {
            from: self.node,
            at,
            message,
        });
    }

    /// Stops the group, waits for its `ExitAck` (dropping results still in flight), and
    /// acknowledges up.
    fn shut_down(self) -> Result<(), FederationError> {
        if self.child.send(Message::Exit, 0.0).is_ok() {
            while let Ok(envelope) = self.child.recv() {
                if matches!(envelope.message, Message::ExitAck) {
                    break;
                }
            }
        }
        self.queue_up(Message::ExitAck, 0.0);
        Ok(())
    }

    fn group_lost(&self) -> FederationError {
        FederationError::TierLost {
            tier: NodeId::Group(self.setup.index).to_string(),
            detail: None,
        }
    }
}
