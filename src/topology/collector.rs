//! Waiting for one round's answers, the same way at every tier that waits.
//!
//! The server collects its sampled clients' answers, and an aggregating scheduler collects its
//! group's answers for each edge round, through [`RoundCollector`]. Every client the round was
//! sent to ends in exactly one of three states: its update arrived (and counts, or missed the
//! cutoff and is dropped), it was dropped (dropout), or it failed. The round is over when no
//! client is left waiting; an answer for a client that was not sent the round, or that has
//! answered already, is a protocol error rather than something to count twice or ignore. So
//! nothing that arrived is lost, and a tier can never wait for an answer that will not come
//! without another tier having broken the protocol (which ends the run with an error).

use std::collections::BTreeSet;

use crate::network::{ClientId, DropReason, Dropped, Envelope, Message, NodeId, Update};

use super::FederationError;

/// Slack when comparing simulated arrival times with a cutoff, so that an update scheduled to
/// arrive exactly at the deadline is not lost to floating-point rounding.
const CUTOFF_SLACK_S: f64 = 1e-9;

/// A client whose training failed in the round.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The client.
    pub client: ClientId,
    /// Where it ran, from the top of the tree down, as far as the collecting tier knows.
    pub path: Vec<NodeId>,
    /// The error or panic message.
    pub error: String,
}

/// Everything one round (or edge round) brought back, each list sorted by client id.
#[derive(Debug, Clone, Default)]
pub struct RoundOutcome {
    /// Updates that count, sorted by their first client.
    pub updates: Vec<Update>,
    /// Clients left out: dropped out, or their update missed the cutoff.
    pub dropped: Vec<Dropped>,
    /// Clients whose training failed.
    pub failures: Vec<Failure>,
    /// Simulated time the round is over for the collecting tier: when the last update that
    /// counts arrived, or the cutoff if an update missed it (the tier waited until then).
    pub finished: f64,
}

impl RoundOutcome {
    /// The failures as dropped clients, merged into `dropped`: the run goes on without them.
    pub fn drop_failures(&mut self) {
        let failed = self.failures.drain(..).map(|f| Dropped {
            client: f.client,
            reason: DropReason::Failed,
            error: Some(f.error),
        });
        self.dropped.extend(failed);
        self.dropped.sort_by_key(|d| d.client);
    }
}

/// Accounts for every client a round was sent to; see the module documentation.
#[derive(Debug)]
pub struct RoundCollector {
    /// The collecting tier, for protocol errors.
    tier: NodeId,
    round: u32,
    /// Clients that have not answered yet.
    waiting: BTreeSet<ClientId>,
    /// Simulated time the round was sent.
    started: f64,
    /// Simulated time after which updates no longer count.
    cutoff: Option<f64>,
    outcome: RoundOutcome,
}

impl RoundCollector {
    /// A collector at `tier` for `round`, sent at simulated time `started` to `clients`; updates
    /// arriving after `cutoff` are dropped for the deadline.
    pub fn new(
        tier: NodeId,
        round: u32,
        clients: &[ClientId],
        started: f64,
        cutoff: Option<f64>,
    ) -> Self {
        Self {
            tier,
            round,
            waiting: clients.iter().copied().collect(),
            started,
            cutoff,
            outcome: RoundOutcome {
                finished: started,
                ..RoundOutcome::default()
            },
        }
    }

    /// Whether every client has answered.
    pub fn is_complete(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Collects answers from `next` until every client has answered; `next` returns `None`
    /// when the run is being stopped, and then so does this.
    pub fn collect(
        mut self,
        mut next: impl FnMut() -> Result<Option<Envelope>, FederationError>,
    ) -> Result<Option<RoundOutcome>, FederationError> {
        while !self.is_complete() {
            match next()? {
                Some(envelope) => self.accept(envelope)?,
                None => return Ok(None),
            }
        }
        Ok(Some(self.finish()))
    }

    /// Accounts for the clients one message answers for.
    pub fn accept(&mut self, envelope: Envelope) -> Result<(), FederationError> {
        let Envelope { at, message, .. } = envelope;
        match message {
            Message::Uplink(update) if update.round == self.round => {
                self.account(&update.clients)?;
                if self.cutoff.is_some_and(|c| at > c + CUTOFF_SLACK_S) {
                    let late = update
                        .clients
                        .iter()
                        .map(|&c| Dropped::new(c, DropReason::Deadline));
                    self.outcome.dropped.extend(late);
                } else {
                    self.outcome.finished = self.outcome.finished.max(at);
                    self.outcome.updates.push(update);
                }
            }
            Message::Dropped { round, clients } if round == self.round => {
                let ids: Vec<ClientId> = clients.iter().map(|d| d.client).collect();
                self.account(&ids)?;
                self.outcome.dropped.extend(clients);
            }
            Message::ClientFailed {
                round,
                client,
                path,
                error,
            } if round == self.round => {
                self.account(&[client])?;
                self.outcome.failures.push(Failure {
                    client,
                    path,
                    error,
                });
            }
            other => {
                return Err(self.protocol(format!(
                    "unexpected {} while collecting round {}",
                    other.code(),
                    self.round
                )));
            }
        }
        Ok(())
    }

    /// Marks `clients` as answered; each must have been waiting.
    fn account(&mut self, clients: &[ClientId]) -> Result<(), FederationError> {
        for &client in clients {
            if !self.waiting.remove(&client) {
                return Err(self.protocol(format!(
                    "an answer for client {client} in round {}, which is not waiting for one",
                    self.round
                )));
            }
        }
        Ok(())
    }

    /// The outcome, each list sorted by client id so that nothing depends on arrival order.
    fn finish(mut self) -> RoundOutcome {
        let missed_cutoff = self
            .outcome
            .dropped
            .iter()
            .any(|d| d.reason == DropReason::Deadline);
        if let Some(cutoff) = self.cutoff.filter(|_| missed_cutoff) {
            self.outcome.finished = self.started.max(cutoff);
        }
        self.outcome.updates.sort_by_key(|u| u.clients[0]);
        self.outcome.dropped.sort_by_key(|d| d.client);
        self.outcome.failures.sort_by_key(|f| f.client);
        self.outcome
    }

    fn protocol(&self, detail: String) -> FederationError {
        FederationError::Protocol {
            tier: self.tier.to_string(),
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(at: f64, message: Message) -> Envelope {
        Envelope {
            from: NodeId::Group(0),
            at,
            message,
        }
    }

    fn uplink(clients: Vec<ClientId>) -> Message {
        Message::Uplink(Update {
            round: 1,
            clients,
            num_samples: 10,
            train_loss: 0.5,
            steps: 1,
            params: vec![1.0],
            extras: Default::default(),
        })
    }

    fn failed(client: ClientId) -> Message {
        Message::ClientFailed {
            round: 1,
            client,
            path: vec![NodeId::Group(0)],
            error: "boom".into(),
        }
    }

    #[test]
    fn every_client_ends_in_exactly_one_state_sorted_by_id() {
        let mut collector = RoundCollector::new(NodeId::Server, 1, &[2, 5, 7, 9], 0.0, None);
        collector.accept(envelope(1.0, failed(7))).unwrap();
        collector.accept(envelope(2.0, uplink(vec![9]))).unwrap();
        let dropout = vec![Dropped::new(2, DropReason::Dropout)];
        let dropped = Message::Dropped {
            round: 1,
            clients: dropout,
        };
        collector.accept(envelope(0.5, dropped)).unwrap();
        assert!(!collector.is_complete());
        collector.accept(envelope(3.0, uplink(vec![5]))).unwrap();
        assert!(collector.is_complete());
        let outcome = collector.finish();
        let firsts: Vec<_> = outcome.updates.iter().map(|u| u.clients[0]).collect();
        assert_eq!(firsts, [5, 9]);
        assert_eq!(outcome.dropped, [Dropped::new(2, DropReason::Dropout)]);
        assert_eq!(outcome.failures.len(), 1);
        assert_eq!(outcome.finished, 3.0);
    }

    #[test]
    fn a_second_answer_for_a_client_is_a_protocol_error() {
        let mut collector = RoundCollector::new(NodeId::Scheduler(1), 1, &[3, 4], 0.0, None);
        collector.accept(envelope(0.0, uplink(vec![3]))).unwrap();
        let error = collector.accept(envelope(0.0, failed(3))).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("scheduler 1: an answer for client 3"),
            "{error}"
        );
        let error = collector
            .accept(envelope(0.0, uplink(vec![8])))
            .unwrap_err();
        assert!(error.to_string().contains("client 8"), "{error}");
    }

    #[test]
    fn an_update_after_the_cutoff_is_dropped_and_the_round_lasts_until_the_cutoff() {
        let mut collector = RoundCollector::new(NodeId::Server, 1, &[0, 1], 10.0, Some(12.0));
        collector.accept(envelope(11.0, uplink(vec![0]))).unwrap();
        collector.accept(envelope(12.5, uplink(vec![1]))).unwrap();
        let outcome = collector.finish();
        assert_eq!(outcome.updates.len(), 1);
        assert_eq!(outcome.dropped, [Dropped::new(1, DropReason::Deadline)]);
        assert_eq!(outcome.finished, 12.0);
    }

    #[test]
    fn a_partial_aggregate_answers_for_all_its_clients() {
        let mut collector = RoundCollector::new(NodeId::Server, 1, &[1, 2, 3], 0.0, None);
        collector.accept(envelope(1.0, uplink(vec![1, 3]))).unwrap();
        assert!(!collector.is_complete());
        collector.accept(envelope(1.0, failed(2))).unwrap();
        let mut outcome = collector.finish();
        outcome.drop_failures();
        assert_eq!(outcome.dropped[0].reason, DropReason::Failed);
        assert_eq!(outcome.dropped[0].error.as_deref(), Some("boom"));
    }

    #[test]
    fn collection_stops_when_the_source_says_the_run_is_stopping() {
        let collector = RoundCollector::new(NodeId::Server, 1, &[1], 0.0, None);
        assert!(collector.collect(|| Ok(None)).unwrap().is_none());
    }

    #[test]
    fn an_answer_for_another_round_is_a_protocol_error() {
        let mut collector = RoundCollector::new(NodeId::Server, 2, &[1], 0.0, None);
        assert!(collector.accept(envelope(0.0, uplink(vec![1]))).is_err());
    }
}
