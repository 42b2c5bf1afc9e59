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

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::network::{
    ClientId, ClientInfo, DropReason, Dropped, Envelope, Message, NodeId, Update,
};
use crate::strategy::{Fold, Folded, Sum, Totals};

use super::FederationError;
use super::client_group::drops_out;

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

/// What a tier knows before a round's answers arrive of which updates will count, when no
/// deadline can cut one off and no failure can be dropped: every client sent the round
/// answers with an update except those whose dropout draw says they sit it out. The tier can
/// then weigh each update on arrival and fold it into the round's sums in client-id order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Foresight {
    /// The experiment seed, for the dropout draws.
    pub seed: u64,
    /// The probability that a client sits out a round.
    pub dropout: f64,
}

impl Foresight {
    /// The clients among `sent` (in id order) whose updates will count in edge round
    /// `edge_round` of `round`.
    pub fn contributors(
        &self,
        round: u32,
        edge_round: u32,
        sent: &[ClientInfo],
    ) -> Vec<ClientInfo> {
        sent.iter()
            .copied()
            .filter(|c| !drops_out(self.seed, self.dropout, round, edge_round, c.id))
            .collect()
    }
}

/// The updates of a round that count.
#[derive(Debug, Clone)]
pub enum Gathered {
    /// Every update, sorted by its first client.
    Held(Vec<Update>),
    /// Folded into sums as they arrived.
    Folded(Folded),
}

impl Default for Gathered {
    fn default() -> Self {
        Gathered::Held(Vec::new())
    }
}

impl Gathered {
    /// Whether no update counts.
    pub fn is_empty(&self) -> bool {
        match self {
            Gathered::Held(updates) => updates.is_empty(),
            Gathered::Folded(folded) => folded.updates == 0,
        }
    }

    /// The sample-weighted mean training loss of the updates, if there are any.
    pub fn train_loss(&self) -> Option<f64> {
        match self {
            _ if self.is_empty() => None,
            Gathered::Held(updates) => Some(Fold::all(Vec::new(), updates).train_loss()),
            Gathered::Folded(folded) => Some(folded.train_loss()),
        }
    }

    /// The updates folded into `sums`: those already folded (into the same sums), or the held
    /// ones now.
    pub fn into_folded(self, sums: Vec<Sum>) -> Folded {
        match self {
            Gathered::Held(updates) => Fold::all(sums, &updates),
            Gathered::Folded(folded) => folded,
        }
    }
}

/// Folds updates in client-id order as they become foldable: an update waits here until every
/// contributor before it has been folded.
#[derive(Debug)]
struct ReorderBuffer {
    fold: Fold,
    /// Contributors not yet folded, in id order.
    expected: VecDeque<ClientId>,
    /// The samples each contributor not yet folded announced.
    announced: HashMap<ClientId, usize>,
    /// Updates that arrived before their turn.
    waiting: BTreeMap<ClientId, Update>,
}

impl ReorderBuffer {
    /// Takes `update` and folds every update whose turn has come.
    fn accept(&mut self, update: Update) -> Result<(), String> {
        let [client] = update.clients[..] else {
            return Err(format!(
                "a partial aggregate of clients {:?} where single clients' updates are folded",
                update.clients
            ));
        };
        match self.announced.get(&client) {
            None => {
                return Err(format!(
                    "an update from client {client}, which should not send one"
                ));
            }
            Some(&samples) if samples != update.num_samples => {
                return Err(format!(
                    "client {client}'s update counts {} samples; it announced {samples}",
                    update.num_samples
                ));
            }
            Some(_) => {}
        }
        self.waiting.insert(client, update);
        while let Some(next) = self.expected.front()
            && let Some(update) = self.waiting.remove(next)
        {
            self.fold.add(&update);
            self.announced.remove(next);
            self.expected.pop_front();
        }
        Ok(())
    }

    /// Whether `client` is one whose update is expected.
    fn expects(&self, client: ClientId) -> bool {
        self.announced.contains_key(&client)
    }

    /// The fold, with any updates still waiting folded after it (a round cut short by a
    /// failure under the abort policy, whose aggregate is not used).
    fn finish(mut self) -> Folded {
        for update in std::mem::take(&mut self.waiting).into_values() {
            self.fold.add(&update);
        }
        self.fold.finish()
    }
}

/// What an update that counts tells the collecting tier of the clients behind it, besides its
/// model: what the server's record of its clients ([`crate::history`]) is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Heard {
    /// The clients behind the update: one, or a scheduler's group for a partial aggregate.
    pub clients: Vec<ClientId>,
    /// Their mean training loss.
    pub loss: f64,
    /// Its size on the wire.
    pub bytes: u64,
}

/// Everything one round (or edge round) brought back, each list sorted by client id.
#[derive(Debug, Clone, Default)]
pub struct RoundOutcome {
    /// Updates that count.
    pub updates: Gathered,
    /// What each update that counts told of its clients, sorted by its first client.
    pub heard: Vec<Heard>,
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
    /// Where updates are folded as they come, if they are.
    folding: Option<ReorderBuffer>,
    /// Updates held whole, when they are not folded.
    held: Vec<Update>,
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
            folding: None,
            held: Vec::new(),
            outcome: RoundOutcome {
                finished: started,
                ..RoundOutcome::default()
            },
        }
    }

    /// This collector, folding the updates into `sums` as they arrive instead of holding
    /// them: `contributors` (in id order, each with its samples) are the clients whose
    /// updates will count, as [`Foresight`] tells; the round must have no cutoff.
    pub fn folding(mut self, sums: Vec<Sum>, contributors: Vec<ClientInfo>) -> Self {
        assert!(self.cutoff.is_none(), "a cutoff can leave out an update");
        let totals = Totals::of(contributors.iter().map(|c| c.num_samples));
        self.folding = Some(ReorderBuffer {
            fold: Fold::new(sums, totals),
            expected: contributors.iter().map(|c| c.id).collect(),
            announced: contributors.iter().map(|c| (c.id, c.num_samples)).collect(),
            waiting: BTreeMap::new(),
        });
        self
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
        let bytes = message.wire_bytes();
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
                    self.outcome.heard.push(Heard {
                        clients: update.clients.clone(),
                        loss: update.train_loss,
                        bytes,
                    });
                    match &mut self.folding {
                        Some(buffer) => buffer.accept(update).map_err(|e| self.protocol(e))?,
                        None => self.held.push(update),
                    }
                }
            }
            Message::Dropped { round, clients } if round == self.round => {
                let ids: Vec<ClientId> = clients.iter().map(|d| d.client).collect();
                self.account(&ids)?;
                if let Some(&client) = ids.iter().find(|&&c| self.expects_update(c)) {
                    return Err(self.protocol(format!(
                        "client {client} was dropped, though its dropout draw keeps it in"
                    )));
                }
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

    /// Whether the fold counts on an update from `client`.
    fn expects_update(&self, client: ClientId) -> bool {
        self.folding.as_ref().is_some_and(|b| b.expects(client))
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
        self.outcome.updates = match self.folding.take() {
            Some(buffer) => Gathered::Folded(buffer.finish()),
            None => {
                let mut held = std::mem::take(&mut self.held);
                held.sort_by_key(|u| u.clients[0]);
                Gathered::Held(held)
            }
        };
        self.outcome.heard.sort_by_key(|h| h.clients[0]);
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
            encoded: Vec::new(),
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
        let Gathered::Held(updates) = &outcome.updates else {
            panic!("a collector without foresight holds the updates");
        };
        let firsts: Vec<_> = updates.iter().map(|u| u.clients[0]).collect();
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
        assert_eq!(outcome.updates.train_loss(), Some(0.5));
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

    fn update_of(client: ClientId, num_samples: usize, value: f32) -> Message {
        Message::Uplink(Update {
            round: 1,
            clients: vec![client],
            num_samples,
            train_loss: f64::from(value),
            steps: 1,
            params: vec![value, value * 0.3, -value],
            extras: Default::default(),
            encoded: Vec::new(),
        })
    }

    fn info(id: ClientId, num_samples: usize) -> ClientInfo {
        ClientInfo { id, num_samples }
    }

    #[test]
    fn updates_folded_in_any_arrival_order_give_the_held_result_to_the_bit() {
        let sums = || vec![Sum::params(crate::strategy::Weighting::Samples)];
        let sent = [2, 4, 7, 8];
        let samples = [13, 7, 29, 3];
        let values = [0.1f32, 1.7, -3.3, 0.77];
        let arrivals: [[usize; 4]; 3] = [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]];
        let contributors: Vec<ClientInfo> =
            sent.iter().zip(samples).map(|(&c, n)| info(c, n)).collect();
        let mut results = Vec::new();
        for order in arrivals {
            let collector = RoundCollector::new(NodeId::Server, 1, &sent, 0.0, None);
            let mut collector = collector.folding(sums(), contributors.clone());
            for i in order {
                collector
                    .accept(envelope(1.0, update_of(sent[i], samples[i], values[i])))
                    .unwrap();
            }
            let Gathered::Folded(folded) = collector.finish().updates else {
                panic!("the collector folds");
            };
            results.push(folded);
        }
        let mut held = RoundCollector::new(NodeId::Server, 1, &sent, 0.0, None);
        for i in [2, 0, 3, 1] {
            held.accept(envelope(1.0, update_of(sent[i], samples[i], values[i])))
                .unwrap();
        }
        let reference = held.finish().updates.into_folded(sums());
        assert!(results.iter().all(|r| *r == reference), "{results:?}");
        assert_eq!(reference.clients, sent);
    }

    #[test]
    fn a_folding_collector_refuses_what_its_foresight_ruled_out() {
        let sums = || vec![Sum::params(crate::strategy::Weighting::Samples)];
        let folding = || {
            RoundCollector::new(NodeId::Server, 1, &[1, 2, 3], 0.0, None)
                .folding(sums(), vec![info(1, 10), info(3, 10)])
        };
        let error = folding()
            .accept(envelope(0.0, update_of(2, 10, 1.0)))
            .unwrap_err();
        assert!(
            error.to_string().contains("client 2, which should not"),
            "{error}"
        );
        let error = folding()
            .accept(envelope(0.0, update_of(1, 11, 1.0)))
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("counts 11 samples; it announced 10"),
            "{error}"
        );
        let dropped = Message::Dropped {
            round: 1,
            clients: vec![Dropped::new(3, DropReason::Dropout)],
        };
        let error = folding().accept(envelope(0.0, dropped)).unwrap_err();
        assert!(
            error.to_string().contains("client 3 was dropped"),
            "{error}"
        );
    }

    #[test]
    fn foresight_leaves_out_the_clients_whose_dropout_draw_says_so() {
        let sent: Vec<ClientInfo> = (0..200).map(|c| info(c, 5)).collect();
        let foresight = Foresight {
            seed: 3,
            dropout: 0.3,
        };
        let kept = foresight.contributors(4, 1, &sent);
        let expected: Vec<ClientInfo> = sent
            .iter()
            .copied()
            .filter(|c| !drops_out(3, 0.3, 4, 1, c.id))
            .collect();
        assert_eq!(kept, expected);
        assert!((100..180).contains(&kept.len()), "{}", kept.len());
    }
}
