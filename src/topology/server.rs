//! The upper server: samples clients, sends them the global model, aggregates their updates
//! and evaluates the result, round after round.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::availability::{Availability, OnlineClients};
use crate::checkpoint::InFlightState;
use crate::config::FailurePolicy;
use crate::history::{ClientHistory, Seen};
use crate::network::{
    ClientId, ClientInfo, Dropped, Envelope, LinkEnd, Message, NodeId, Tensors, Update,
};
use crate::registry::CompressorChoice;
use crate::output::{ProbedLoss, RoundRecord};
use crate::secure::{Exchange, PARTICIPANTS};
use crate::seed::{Purpose, stream};
use crate::model::Sharing;
use crate::states::{ClientStates, SpillError, StatesSnapshot};
use crate::stop::StopSignal;
use crate::strategy::selection::{Online, misfit};
use crate::strategy::{
    Aggregate, AsyncStrategy, Candidates, Collected, Reads, Round, Selector, Sent, Strategy,
};
use crate::training::ModelEvaluator;

use rand_distr::{Binomial, Distribution};

use super::clock::Clock;
use super::collector::{Foresight, Gathered, Heard, RoundCollector, RoundOutcome};
use super::{FederationError, TrafficMeter};

/// The size of a round under Poisson sampling.
const POISSON_SAMPLING: Purpose = Purpose::new("poisson-sampling");

/// How the server plays the run, with the server half that way of playing runs.
pub enum ServerMode {
    /// Synchronous rounds.
    Rounds {
        /// The server half, with its state where the run starts.
        strategy: Box<dyn Strategy>,
        /// Clients sampled per round.
        clients_per_round: usize,
        /// Where each online client is in a round independently with this probability
        /// instead (a private run's Poisson sampling): the round's size is drawn first.
        poisson_rate: Option<f64>,
        /// Simulated seconds a round may last, if limited.
        deadline_s: Option<f64>,
    },
    /// Asynchronous server steps.
    Asynchronous {
        /// The server half, with its state where the run starts.
        strategy: Box<dyn AsyncStrategy>,
        /// Clients in flight at once.
        concurrency: usize,
        /// Where a resumed run left off: the dispatches counted and the clients in flight, as
        /// the checkpoint holds them; `None` for a new run.
        resume: Option<(u32, Vec<InFlightState>)>,
    },
}

impl ServerMode {
    /// What every client is sent with the global model `global`, unless the server half sends
    /// it its own: the model and the half's broadcast tensors.
    pub(super) fn broadcast(&self, global: &Arc<[f32]>) -> Sent {
        let extras = match self {
            ServerMode::Rounds { strategy, .. } => strategy.downlink(),
            ServerMode::Asynchronous { strategy, .. } => strategy.downlink(),
        };
        Sent {
            model: global.clone(),
            extras,
        }
    }

    /// The model and tensors the server half sends `client` of its own with the global model
    /// `global`, if it does (only a synchronous half may).
    fn own_downlink(&self, client: ClientId, global: &Arc<[f32]>) -> Option<Sent> {
        match self {
            ServerMode::Rounds { strategy, .. } => strategy.downlink_to(client, global),
            ServerMode::Asynchronous { .. } => None,
        }
    }

    /// What `client` would be sent with the global model `global`: its own model and tensors
    /// where the server half sends it its own, else the broadcast.
    pub(super) fn sent_to(&self, client: ClientId, global: &Arc<[f32]>) -> Sent {
        self.own_downlink(client, global)
            .unwrap_or_else(|| self.broadcast(global))
    }

    /// What the server half remembers, for checkpoints.
    pub(super) fn strategy_state(&self) -> Tensors {
        match self {
            ServerMode::Rounds { strategy, .. } => strategy.state(),
            ServerMode::Asynchronous { strategy, .. } => strategy.state(),
        }
    }
}

/// What the server needs besides its links.
pub struct ServerSetup {
    /// The experiment seed, for client sampling.
    pub seed: u64,
    /// Number of rounds (or server steps).
    pub rounds: u32,
    /// What a client's failure does to the run.
    pub on_client_failure: FailurePolicy,
    /// Where the run starts: after round 0 at time 0, or where a checkpoint left it.
    pub start: Start,
    /// The global model to start from: the initial model, or a checkpoint's.
    pub initial_model: Vec<f32>,
    /// Rounds or asynchronous steps, with the algorithm's server half.
    pub mode: ServerMode,
    /// How the algorithm chooses who trains, with its state where the run starts.
    pub selector: Box<dyn Selector>,
    /// What the server has seen of each client where the run starts.
    pub history: ClientHistory,
    /// When each client is online: the server samples (or dispatches) only online clients.
    pub availability: Arc<Availability>,
    /// The clients' states, which the server reads between rounds for checkpoints.
    pub client_states: Arc<ClientStates>,
    /// How the global model is evaluated; `None` never evaluates (to time the tree alone).
    pub evaluation: Option<EvaluationPlan>,
    /// The model's personal layers, where the algorithm keeps some with each client: only the
    /// other values go down and come up, and the global model's personal values never change.
    pub sharing: Option<Arc<Sharing>>,
    /// The compressor the clients encode their changes with, where uploads are compressed:
    /// the server decodes each against the model it sent.
    pub compression: Option<CompressorChoice>,
    /// The threshold of secure aggregation, where rounds run it: the downlink lists the
    /// round's participants, and the key exchange before the round and the unmasking after it
    /// (where at least the threshold survived) are charged on the client links and the clock.
    pub secure_aggregation: Option<usize>,
}

/// When the server evaluates the global model, and what evaluates it.
pub struct EvaluationPlan {
    /// Every `every` rounds (or server steps), and after the last.
    pub every: u32,
    /// Instead, after the first round that ends at or after each multiple of `every_s`
    /// simulated seconds, and after the last.
    pub every_s: Option<f64>,
    /// What scores the model.
    pub evaluator: Box<dyn ModelEvaluator>,
}

impl EvaluationPlan {
    /// Whether `round` of `rounds`, which ran on the simulated clock from `started` to
    /// `ended`, is evaluated.
    pub(super) fn evaluates(&self, round: u32, rounds: u32, started: f64, ended: f64) -> bool {
        let due = match self.every_s {
            Some(period) => (ended / period).floor() > (started / period).floor(),
            None => round.is_multiple_of(self.every),
        };
        due || round == rounds
    }
}

/// The point a federation starts from.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Start {
    /// The last round already played (0 for a new run).
    pub round: u32,
    /// The simulated clock at the end of that round.
    pub sim_time_s: f64,
}

/// A finished round, as the server hands it to the caller.
#[derive(Debug, Clone)]
pub struct RoundEnd {
    /// What `metrics.jsonl` records of the round.
    pub record: RoundRecord,
    /// The global model after the round, for checkpoints.
    pub model: Arc<[f32]>,
    /// The strategy's state after the round, for checkpoints.
    pub strategy_state: Tensors,
    /// The selector's state after the round, for checkpoints.
    pub selector_state: Tensors,
    /// What the server has seen of each client after the round, for checkpoints.
    pub history: ClientHistory,
    /// The state of every client that has one after the round, for checkpoints (in an
    /// asynchronous federation, a client in flight with its state as it was dispatched).
    pub client_states: StatesSnapshot,
    /// In an asynchronous federation, the dispatches counted so far and the clients in flight
    /// after the step, for checkpoints; `None` in rounds.
    pub in_flight: Option<(u32, Vec<InFlightState>)>,
}

/// A child of the server: a client group (which gets one downlink per client) or a
/// scheduler (which gets one downlink listing its sampled clients).
pub struct Child {
    /// Who the child is.
    pub(super) node: NodeId,
    /// The server's end of the link to the child.
    pub(super) link: LinkEnd,
    /// Whether the server expects nothing more from the child.
    closed: bool,
}

impl Child {
    /// The child `node` on `link`.
    pub fn new(node: NodeId, link: LinkEnd) -> Self {
        Self {
            node,
            link,
            closed: false,
        }
    }

    fn is_group(&self) -> bool {
        matches!(self.node, NodeId::Group(_))
    }
}

/// The server tier: one thread, one link to each child.
pub struct Server {
    pub(super) setup: ServerSetup,
    pub(super) children: Vec<Child>,
    pub(super) traffic: TrafficMeter,
    pub(super) outcomes: flume::Sender<RoundEnd>,
    /// What tells which updates will count, where the children send single clients' updates.
    foresight: Option<Foresight>,
    pub(super) stop: StopSignal,
    /// The simulated clock: seconds since the run started.
    pub(super) now: f64,
    /// What decides when answers arrive, for an asynchronous federation's order.
    pub(super) clock: Option<Clock>,
}

/// Every client the children announced at set-up, and under which child each one sits.
pub(super) struct Roster {
    /// All clients, in id order.
    pub(super) ids: Vec<ClientId>,
    /// All clients with their sample counts, in id order.
    pub(super) clients: Vec<ClientInfo>,
    /// Index in `children` of the child each client sits under, in id order: four bytes a
    /// client where a map by id took about forty.
    children: Vec<u32>,
}

impl Roster {
    /// `client` with its sample count: found at once where the ids run from 0 without a gap,
    /// as a run's do, so that a round's look-ups do not grow with the federation.
    pub(super) fn info(&self, client: ClientId) -> ClientInfo {
        self.clients[self.position(client)]
    }

    /// Index in `children` of the child `client` sits under.
    pub(super) fn child_of(&self, client: ClientId) -> usize {
        self.children[self.position(client)] as usize
    }

    /// Where `client` is in id order.
    pub(super) fn position(&self, client: ClientId) -> usize {
        ClientInfo::position_in(&self.clients, client).expect("sampled clients are on the roster")
    }
}

/// What connects the server to the rest of the run.
pub struct ServerLinks {
    /// Its children.
    pub children: Vec<Child>,
    /// The traffic of every link in the tree.
    pub traffic: TrafficMeter,
    /// Where each finished round goes.
    pub outcomes: flume::Sender<RoundEnd>,
}

impl Server {
    /// A server over `links` that stops early when `stop` is requested. With `foresight`, it
    /// folds updates as they arrive in the rounds where that tells which will count (see
    /// [`Foresight`]); without, it holds them until the round is collected.
    pub fn new(
        setup: ServerSetup,
        links: ServerLinks,
        foresight: Option<Foresight>,
        stop: StopSignal,
    ) -> Self {
        let now = setup.start.sim_time_s;
        Self {
            setup,
            children: links.children,
            traffic: links.traffic,
            outcomes: links.outcomes,
            foresight,
            stop,
            now,
            clock: None,
        }
    }

    /// This server, knowing when its children's answers arrive: what an asynchronous
    /// federation needs to apply them in order (see [`super::asynchronous`]).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// What tells in advance which of this round's updates will count: the dropout draws,
    /// unless a deadline can cut an update off, a failure can be dropped or a client can go
    /// offline.
    fn foresight(&self, deadline: Option<f64>) -> Option<Foresight> {
        let certain = deadline.is_none()
            && self.setup.on_client_failure == FailurePolicy::Abort
            && self.setup.availability.is_always();
        self.foresight.filter(|_| certain)
    }

    /// Runs every round (or server step), then shuts the tree down; returns the final global
    /// model.
    pub fn run(mut self) -> Result<Vec<f32>, FederationError> {
        let result = self
            .await_set_up()
            .and_then(|roster| match self.setup.mode {
                ServerMode::Rounds { .. } => self.run_rounds(&roster),
                ServerMode::Asynchronous { .. } => self.run_steps(&roster),
            });
        // Why the rounds stopped says more than anything shutting down adds.
        let shutdown = self.shut_down();
        let model = result?;
        shutdown?;
        Ok(model)
    }

    /// The synchronous server half.
    fn rounds_strategy(&mut self) -> &mut dyn Strategy {
        match &mut self.setup.mode {
            ServerMode::Rounds { strategy, .. } => strategy.as_mut(),
            ServerMode::Asynchronous { .. } => unreachable!("rounds run the synchronous half"),
        }
    }

    /// How many of `online` clients round `round` samples, and its deadline, of a server in
    /// rounds: `clients_per_round`, or under Poisson sampling a binomial draw from the round's
    /// own stream (a uniform sample of that size is a Poisson sample).
    fn round_shape(&self, round: u32, online: usize) -> (usize, Option<f64>) {
        match self.setup.mode {
            ServerMode::Rounds {
                clients_per_round,
                poisson_rate,
                deadline_s,
                ..
            } => {
                let wanted = match poisson_rate {
                    Some(rate) => {
                        let mut rng = stream(self.setup.seed, POISSON_SAMPLING, round, 0);
                        let size = Binomial::new(online as u64, rate)
                            .expect("validation keeps the rate in (0, 1]")
                            .sample(&mut rng);
                        usize::try_from(size).expect("at most the online clients")
                    }
                    None => clients_per_round.min(online),
                };
                (wanted, deadline_s)
            }
            ServerMode::Asynchronous { .. } => unreachable!("only rounds have a shape"),
        }
    }

    /// Waits for every child's `SetUp`.
    fn await_set_up(&mut self) -> Result<Roster, FederationError> {
        let mut announced = Vec::new();
        for _ in 0..self.children.len() {
            let (child, envelope) = self.recv_any()?;
            match envelope.message {
                Message::SetUp { clients } => {
                    let child = u32::try_from(child).expect("fewer than 2^32 children");
                    announced.extend(clients.into_iter().map(|c| (c, child)));
                }
                other => return Err(protocol(format!("expected SetUp, got {}", other.code()))),
            }
        }
        announced.sort_unstable_by_key(|(c, _)| c.id);
        let (clients, children): (Vec<ClientInfo>, Vec<u32>) = announced.into_iter().unzip();
        Ok(Roster {
            ids: clients.iter().map(|c| c.id).collect(),
            clients,
            children,
        })
    }

    fn run_rounds(&mut self, roster: &Roster) -> Result<Vec<f32>, FederationError> {
        let mut global: Arc<[f32]> = std::mem::take(&mut self.setup.initial_model).into();
        let availability = &self.setup.availability;
        let mut online = (!availability.is_always())
            .then(|| OnlineClients::new(availability, &roster.ids, self.now));
        for round in self.setup.start.round + 1..=self.setup.rounds {
            if self.stop.is_requested() {
                return Err(FederationError::Stopped);
            }
            let (next, record) = self.play_round(round, roster, online.as_mut(), global)?;
            global = next;
            let end = RoundEnd {
                record,
                model: global.clone(),
                strategy_state: self.setup.mode.strategy_state(),
                selector_state: self.setup.selector.state(),
                history: self.setup.history.clone(),
                // Every job of the round has finished and none of the next has started.
                client_states: self.setup.client_states.snapshot().map_err(state_lost)?,
                in_flight: None,
            };
            self.outcomes
                .send(end)
                .map_err(|_| FederationError::ObserverGone)?;
        }
        Ok(global.to_vec())
    }

    /// One round: sample, send the model down, collect, advance the simulated clock,
    /// aggregate, evaluate. Returns the next global model and the round's record. `online`
    /// follows who is online, where not every client always is.
    fn play_round(
        &mut self,
        round: u32,
        roster: &Roster,
        online: Option<&mut OnlineClients>,
        global: Arc<[f32]>,
    ) -> Result<(Arc<[f32]>, RoundRecord), FederationError> {
        let started = Instant::now();
        let traffic_before = self.traffic.read();
        let round_start = self.now;
        let online = self.await_online(roster, online)?;
        let (wanted, deadline_s) = self.round_shape(round, online.len());
        let (sampled, probed) = self.select(round, roster, online, wanted, &global)?;
        if self.setup.secure_aggregation.is_some() {
            self.exchange_keys(&sampled, roster);
        }
        let deadline = deadline_s.map(|d| self.now + d);
        let sent = self.send_downlinks(round, &sampled, roster, &global, deadline)?;
        let collected = self.collect(round, &sampled, roster, deadline, &global, &sent)?;
        self.now = collected.finished;
        if let Some(threshold) = self.setup.secure_aggregation {
            self.unmask(&sampled, &collected.dropped, roster, threshold);
        }
        self.remember(round, roster, &collected.heard);
        let train_loss = collected.updates.train_loss();
        let skip = collected.updates.is_empty() && !self.rounds_strategy().aggregates_no_updates();
        let (global, metrics, clusters): (Arc<[f32]>, _, _) = if skip {
            (global, Default::default(), Default::default())
        } else {
            let context = Round {
                number: round,
                roster: &roster.clients,
                sampled: &sampled,
            };
            let aggregate = self.aggregate(&context, &global, collected.updates);
            (
                aggregate.model.into(),
                aggregate.metrics,
                aggregate.clusters,
            )
        };
        let record = RoundRecord {
            round,
            clients: sampled,
            dropped: collected.dropped,
            train_loss,
            probed,
            test_accuracy: None,
            test_loss: None,
            test_class_accuracy: Vec::new(),
            client_accuracy: None,
            personal_accuracy: None,
            strategy: metrics,
            clusters,
            traffic: self.traffic.since(&traffic_before),
            sim_round_s: self.now - round_start,
            sim_time_s: self.now,
            staleness: None,
            wall_ms: 0.0,
        };
        let mut record = self.evaluated(record, &global, round_start)?;
        record.wall_ms = wall_ms(started);
        Ok((global, record))
    }

    /// The clients of `round`, in id order: as many of the `online` ones (in id order) as the
    /// round takes, as the algorithm's selector chooses them from the round's stream, with the
    /// losses of the clients it probed first on `global` (in id order).
    fn select(
        &mut self,
        round: u32,
        roster: &Roster,
        online: Online<'_>,
        wanted: usize,
        global: &Arc<[f32]>,
    ) -> Result<(Vec<ClientId>, Vec<ProbedLoss>), FederationError> {
        let mut rng = stream(self.setup.seed, Purpose::CLIENT_SAMPLING, round, 0);
        let history = &self.setup.history;
        let candidates = Candidates::new(round, online, wanted, history, self.now);
        let mut asked = self.setup.selector.probe(&candidates, &mut rng);
        let probed = if asked.is_empty() {
            Vec::new()
        } else {
            if let Some(detail) = misfit(&asked, online, asked.len()) {
                let detail = format!("named to probe {detail}");
                return Err(FederationError::Selection { round, detail });
            }
            asked.sort_unstable();
            self.probe(round, &asked, roster, global)?
        };
        let history = &self.setup.history;
        let candidates =
            Candidates::new(round, online, wanted, history, self.now).with_probed(&probed);
        let mut chosen = self.setup.selector.select(&candidates, &mut rng);
        if let Some(detail) = misfit(&chosen, online, wanted) {
            let detail = format!("chose {detail}");
            return Err(FederationError::Selection { round, detail });
        }
        chosen.sort_unstable();
        let probed = probed
            .into_iter()
            .map(|(client, loss)| ProbedLoss {
                client,
                loss: Some(loss).filter(|l| l.is_finite()),
            })
            .collect();
        Ok((chosen, probed))
    }

    /// Asks `clients` (in id order) for their mean training loss on `model`, and waits on the
    /// simulated clock for the last answer. Returns the losses in id order: under the drop
    /// policy a client whose probe failed is left out of them, and so out of the candidates.
    fn probe(
        &mut self,
        round: u32,
        clients: &[ClientId],
        roster: &Roster,
        model: &Arc<[f32]>,
    ) -> Result<Vec<(ClientId, f64)>, FederationError> {
        let model = self.travelling(model);
        for (child, clients) in self.addressed(clients, roster) {
            let probe = Message::Probe {
                round,
                clients,
                model: model.clone(),
            };
            let child = &self.children[child];
            child
                .link
                .send(probe, self.now)
                .map_err(|_| lost(child.node))?;
        }
        let mut waiting: BTreeSet<ClientId> = clients.iter().copied().collect();
        let (mut losses, mut failures) = (Vec::new(), Vec::new());
        let mut finished = self.now;
        while !waiting.is_empty() {
            let (_, Envelope { at, message, .. }) = self.recv_any()?;
            match message {
                Message::Probed {
                    round: r,
                    client,
                    loss,
                } if r == round && waiting.remove(&client) => losses.push((client, loss)),
                Message::ClientFailed {
                    round: r,
                    client,
                    path,
                    error,
                } if r == round && waiting.remove(&client) => {
                    failures.push((client, path, error));
                }
                other => {
                    return Err(protocol(format!(
                        "unexpected {} while probing round {round}",
                        other.code()
                    )));
                }
            }
            finished = finished.max(at);
        }
        if self.stop.is_requested() {
            return Err(FederationError::Stopped);
        }
        failures.sort_by_key(|(client, ..)| *client);
        if let (FailurePolicy::Abort, Some((client, path, error))) =
            (self.setup.on_client_failure, failures.into_iter().next())
        {
            return Err(FederationError::ClientFailed {
                round,
                client,
                path,
                error,
            });
        }
        self.now = finished;
        losses.sort_by_key(|(client, _)| *client);
        Ok(losses)
    }

    /// `clients` (in id order) by the child that reaches them, as the child takes them: a
    /// client group one message per client (each client downloads its own copy), a scheduler
    /// one message listing its clients.
    fn addressed(&self, clients: &[ClientId], roster: &Roster) -> Vec<(usize, Vec<ClientId>)> {
        let mut per_child = vec![Vec::new(); self.children.len()];
        for &client in clients {
            per_child[roster.child_of(client)].push(client);
        }
        let mut addressed = Vec::new();
        for (index, (child, mine)) in self.children.iter().zip(per_child).enumerate() {
            if child.is_group() {
                addressed.extend(mine.into_iter().map(|c| (index, vec![c])));
            } else if !mine.is_empty() {
                addressed.push((index, mine));
            }
        }
        addressed
    }

    /// Records what the updates of `round` that counted told of their clients: a client's own
    /// update its loss and timings, a partial aggregate only that its clients took part.
    pub(super) fn remember(&mut self, round: u32, roster: &Roster, heard: &[Heard]) {
        for heard in heard {
            match heard.clients[..] {
                [client] => {
                    let timings = self
                        .clock
                        .as_ref()
                        .map(|clock| clock.timings((round, 0), roster.info(client), heard.bytes));
                    let (train_s, upload_s) = timings.unzip();
                    let seen = Seen::reported(round, heard.loss, train_s, upload_s);
                    self.setup.history.record(client, seen);
                }
                ref clients => {
                    for &client in clients {
                        self.setup.history.record(client, Seen::took_part(round));
                    }
                }
            }
        }
    }

    /// `record`, of a round (or server step) that began at simulated time `began` and ends
    /// now with `global`, with the global model's scores when it is due for an evaluation (and
    /// the clients' personal models' scores, for a personalised algorithm).
    pub(super) fn evaluated(
        &self,
        mut record: RoundRecord,
        global: &Arc<[f32]>,
        began: f64,
    ) -> Result<RoundRecord, FederationError> {
        let rounds = self.setup.rounds;
        let Some(plan) = self
            .setup
            .evaluation
            .as_ref()
            .filter(|plan| plan.evaluates(record.round, rounds, began, self.now))
        else {
            return Ok(record);
        };
        let evaluation = plan.evaluator.test(global);
        let sent = |client| self.setup.mode.sent_to(client, global);
        let scores = plan
            .evaluator
            .clients(record.round + 1, &sent)
            .map_err(|reason| FederationError::Ended {
                tier: NodeId::Server.to_string(),
                reason,
            })?;
        record.client_accuracy = scores.map(|s| s.accuracy);
        record.personal_accuracy = scores.and_then(|s| s.personal);
        record.test_accuracy = Some(evaluation.accuracy);
        record.test_loss = Some(evaluation.loss);
        record.test_class_accuracy = evaluation.class_accuracy;
        Ok(record)
    }

    /// The clients online now with their sample counts, in id order, after waiting on the
    /// simulated clock for the first to come online if none is: the roster itself where every
    /// client is always online, else the roster read through `online` brought up to now, so
    /// that a round neither copies the federation nor asks each of its clients.
    pub(super) fn await_online<'r>(
        &mut self,
        roster: &'r Roster,
        online: Option<&'r mut OnlineClients>,
    ) -> Result<Online<'r>, FederationError> {
        let Some(online) = online else {
            return Ok((&roster.clients).into());
        };
        online.advance(self.now);
        if online.free_count() == 0 {
            // Nobody online: each client says when it next comes, a pass over the roster
            // only in a round that would otherwise have nobody to sample.
            let next = self
                .setup
                .availability
                .next_online_among(roster.ids.iter().copied(), self.now)
                .ok_or(FederationError::NoneOnline { at: self.now })?;
            self.now = next;
            online.advance(next);
        }
        Ok(Online::among(&roster.clients, online))
    }


    /// Sends the round's model and extra tensors down: to a client group one downlink per
    /// sampled client (each client downloads its own copy), to a scheduler one listing its
    /// sampled clients, unless the strategy sends some client its own model or tensors (then
    /// every client gets a downlink of its own, through the schedulers too).
    fn send_downlinks(
        &mut self,
        round: u32,
        sampled: &[ClientId],
        roster: &Roster,
        global: &Arc<[f32]>,
        deadline: Option<f64>,
    ) -> Result<SentModels, FederationError> {
        let mode = &self.setup.mode;
        let own: Vec<Option<Sent>> = sampled
            .iter()
            .map(|&client| mode.own_downlink(client, global))
            .collect();
        // Under secure aggregation every client learns whose keys to agree masks with.
        let participants: Option<Vec<f32>> = self
            .setup
            .secure_aggregation
            .map(|_| sampled.iter().map(|&c| c as f32).collect());
        // What travels is made once per model sent, not once per message.
        let travelling = |mut sent: Sent| {
            if let Some(participants) = &participants {
                sent.extras.insert(PARTICIPANTS, participants.clone());
            }
            Sent {
                model: self.travelling(&sent.model),
                extras: sent.extras,
            }
        };
        let mut models = SentModels::default();
        let addressed = if own.iter().all(Option::is_none) {
            let sent = travelling(mode.broadcast(global));
            models.broadcast = Some(sent.model.clone());
            self.addressed(sampled, roster)
                .into_iter()
                .map(|(child, clients)| (child, clients, sent.clone()))
                .collect()
        } else {
            let sent: Vec<Sent> = own
                .into_iter()
                .map(|own| travelling(own.unwrap_or_else(|| mode.broadcast(global))))
                .collect();
            models.own = sampled
                .iter()
                .zip(&sent)
                .map(|(&client, sent)| (client, sent.model.clone()))
                .collect();
            sampled
                .iter()
                .zip(sent)
                .map(|(&client, sent)| (roster.child_of(client), vec![client], sent))
                .collect::<Vec<_>>()
        };
        for (child, clients, sent) in addressed {
            let downlink = Message::Downlink {
                round,
                edge_round: 0,
                clients,
                model: sent.model,
                extras: sent.extras,
                deadline,
            };
            let child = &self.children[child];
            child
                .link
                .send(downlink, self.now)
                .map_err(|_| lost(child.node))?;
        }
        Ok(models)
    }

    /// Secure aggregation's key exchange among `sampled`, before the round: each client
    /// advertises its public keys and the server sends every client all of them; then each
    /// sends the others' sealed shares through the server, which forwards them. Each step waits
    /// for the slowest client.
    fn exchange_keys(&mut self, sampled: &[ClientId], roster: &Roster) {
        let exchange = Exchange::of(sampled.len(), sampled.len());
        let steps = [
            (exchange.advertise_down, exchange.advertise_up),
            (exchange.shares_down, exchange.shares_up),
        ];
        for (down, up) in steps {
            self.now += self.played_out(sampled, roster, down, up);
        }
    }

    /// Secure aggregation's unmasking, after the round's masked inputs: the server sends the
    /// survivors their list and each answers with its shares. With fewer survivors than the
    /// threshold the server ends the round instead, and nothing is sent.
    fn unmask(
        &mut self,
        sampled: &[ClientId],
        dropped: &[Dropped],
        roster: &Roster,
        threshold: usize,
    ) {
        let gone: BTreeSet<ClientId> = dropped.iter().map(|d| d.client).collect();
        let survivors: Vec<ClientId> = sampled
            .iter()
            .copied()
            .filter(|c| !gone.contains(c))
            .collect();
        if survivors.len() < threshold {
            return;
        }
        let exchange = Exchange::of(sampled.len(), survivors.len());
        self.now += self.played_out(&survivors, roster, exchange.unmask_down, exchange.unmask_up);
    }

    /// Counts a message of `down` payload bytes to each of `clients` and one of `up` bytes
    /// back on their links, and returns the simulated seconds of the slowest each way.
    fn played_out(&self, clients: &[ClientId], roster: &Roster, down: u64, up: u64) -> f64 {
        let (slowest_down, slowest_up) = clients
            .iter()
            .map(|client| {
                let child = &self.children[roster.child_of(*client)];
                child.link.count_played_out(*client, down, up)
            })
            .fold((0.0, 0.0), |(d, u): (f64, f64), (down, up)| (d.max(down), u.max(up)));
        slowest_down + slowest_up
    }

    /// What of `model` goes over the links: its shared values where the algorithm keeps
    /// personal layers, else the whole model.
    fn travelling(&self, model: &Arc<[f32]>) -> Arc<[f32]> {
        match &self.setup.sharing {
            Some(sharing) => sharing.shared_of(model).into(),
            None => model.clone(),
        }
    }

    /// The strategy's aggregate of the round's updates, read as it asks. With personal layers
    /// the updates bring the shared values alone: each is read as a whole model with the
    /// global model's personal values, which the aggregate keeps.
    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], updates: Gathered) -> Aggregate {
        let mut aggregate = self.aggregate_whole(round, global, updates);
        if let Some(sharing) = &self.setup.sharing {
            sharing.keep_personal(global, &mut aggregate.model);
        }
        aggregate
    }

    fn aggregate_whole(&mut self, round: &Round<'_>, global: &[f32], updates: Gathered) -> Aggregate {
        let strategy = self.rounds_strategy();
        match (strategy.reads(), updates) {
            (Reads::Sums(sums), updates) => {
                strategy.aggregate(round, global, updates.into_folded(sums).into())
            }
            (Reads::Updates, Gathered::Held(updates)) => {
                strategy.aggregate(round, global, Collected::Updates(&updates))
            }
            (Reads::Updates, Gathered::Folded(_)) => {
                unreachable!("the server folds only for strategies that read sums")
            }
        }
    }

    /// Collects the round's answers until every sampled client is accounted for, folding the
    /// updates as they come where the strategy reads sums and the updates that will count are
    /// known in advance. Under the abort policy a failure then ends the run: the round is
    /// waited out first, so that when several clients fail the one reported (the lowest id)
    /// does not depend on which failed first in real time. Under the drop policy failed
    /// clients are dropped.
    fn collect(
        &mut self,
        round: u32,
        sampled: &[ClientId],
        roster: &Roster,
        deadline: Option<f64>,
        global: &[f32],
        sent: &SentModels,
    ) -> Result<RoundOutcome, FederationError> {
        let mut collector = RoundCollector::new(NodeId::Server, round, sampled, self.now, deadline);
        // With personal layers an update brings the shared values: it is read whole, with the
        // global model's personal values.
        let whole = self
            .setup
            .sharing
            .clone()
            .map(|sharing| (sharing.personal_of(global), sharing));
        // A compressed update brings its change to the values the server sent, encoded.
        let decoding = self.setup.compression.clone().map(|c| (c, sent.clone()));
        let read_whole = move |mut envelope: Envelope| {
            if let (Some((compressor, sent)), Message::Uplink(update)) =
                (&decoding, &mut envelope.message)
            {
                update.params = decoded(compressor, sent, update)?;
            }
            if let (Some((personal, sharing)), Message::Uplink(update)) =
                (&whole, &mut envelope.message)
            {
                update.params = sharing.compose(&update.params, personal);
            }
            Ok(envelope)
        };
        if let (Some(foresight), Reads::Sums(sums)) =
            (self.foresight(deadline), self.rounds_strategy().reads())
        {
            let sent: Vec<ClientInfo> = sampled.iter().map(|&c| roster.info(c)).collect();
            collector = collector.folding(sums, foresight.contributors(round, 0, &sent));
        }
        let mut outcome = collector
            .collect(|| {
                self.recv_any()
                    .and_then(|(_, envelope)| read_whole(envelope).map(Some))
            })?
            .expect("the server's own collection is never stopped");
        // Clients stopped with the run answer as failures; a round that overlapped a stop is
        // not a round the experiment played, so it is neither recorded nor reported.
        if self.stop.is_requested() {
            return Err(FederationError::Stopped);
        }
        match self.setup.on_client_failure {
            FailurePolicy::Drop => outcome.drop_failures(),
            FailurePolicy::Abort => {
                if let Some(failure) = outcome.failures.drain(..).next() {
                    return Err(FederationError::ClientFailed {
                        round,
                        client: failure.client,
                        path: failure.path,
                        error: failure.error,
                    });
                }
            }
        }
        Ok(outcome)
    }

    /// Waits for a message from any child still open. A child whose link closed is marked
    /// closed and reported lost.
    pub(super) fn recv_any(&mut self) -> Result<(usize, Envelope), FederationError> {
        if self.children.iter().all(|c| c.closed) {
            return Err(FederationError::TierLost {
                tier: "every child of the server".to_string(),
                detail: None,
            });
        }
        // The stop comes first: flume's selector serves ready channels in the order added.
        let stop = self.stop.clone();
        let mut selector = flume::Selector::new().recv(stop.receiver(), |_| None);
        for (index, child) in self.children.iter().enumerate().filter(|(_, c)| !c.closed) {
            selector = selector.recv(child.link.receiver(), move |r| Some((index, r.ok())));
        }
        match selector.wait() {
            None => Err(FederationError::Stopped),
            Some((index, Some(envelope))) => Ok((index, envelope)),
            Some((index, None)) => {
                self.children[index].closed = true;
                Err(lost(self.children[index].node))
            }
        }
    }

    /// Sends `Exit` to every child still open and waits for each one's `ExitAck`, dropping
    /// results still in flight. A child that is gone has nothing left to stop.
    fn shut_down(&mut self) -> Result<(), FederationError> {
        for child in &mut self.children {
            child.closed |= child.link.send(Message::Exit, self.now).is_err();
        }
        while self.children.iter().any(|c| !c.closed) {
            // A child that closes without acknowledging has stopped all the same.
            let Ok((index, envelope)) = self.recv_any() else {
                continue;
            };

            match envelope.message {
                Message::ExitAck => self.children[index].closed = true,
                // Answers still in flight, or a set-up that a stop during set-up overtook.
                Message::SetUp { .. }
                | Message::Uplink(_)
                | Message::Probed { .. }
                | Message::Dropped { .. }
                | Message::ClientFailed { .. } => {}
                other => {
                    return Err(protocol(format!("expected ExitAck, got {}", other.code())));
                }
            }
        }
        Ok(())
    }
}

/// Milliseconds since `started`, to a tenth.
pub(super) fn wall_ms(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1e4).round() / 10.0
}

pub(super) fn lost(node: NodeId) -> FederationError {
    FederationError::TierLost {
        tier: node.to_string(),
        detail: None,
    }
}

pub(super) fn protocol(detail: String) -> FederationError {
    FederationError::Protocol {
        tier: NodeId::Server.to_string(),
        detail,
    }
}

/// The run's end when the clients' states cannot be kept (a full disk, a spill file that
/// cannot be read back): the server's thread cannot go on.
pub(super) fn state_lost(error: SpillError) -> FederationError {
    FederationError::TierLost {
        tier: NodeId::Server.to_string(),
        detail: Some(format!("the clients' states cannot be kept: {error}")),
    }
}

/// The values the server sent the round's clients: one model to all, or each its own (a
/// clustered algorithm's), as they travelled (the shared values, under personal layers).
#[derive(Debug, Clone, Default)]
struct SentModels {
    broadcast: Option<Arc<[f32]>>,
    own: HashMap<ClientId, Arc<[f32]>>,
}

impl SentModels {
    /// What `client` was sent.
    fn to(&self, client: ClientId) -> Option<&[f32]> {
        self.own.get(&client).or(self.broadcast.as_ref()).map(|m| &m[..])
    }
}

/// The model `update` stands for: the values its client was sent plus the change its bytes
/// encode, which the bytes give up to it.
fn decoded(
    compressor: &CompressorChoice,
    sent: &SentModels,
    update: &mut Update,
) -> Result<Vec<f32>, FederationError> {
    let protocol = |detail| FederationError::Protocol {
        tier: "server".to_string(),
        detail,
    };
    let client = match update.clients[..] {
        [client] => Some(client),
        _ => None,
    };
    let sent = match client.and_then(|client| sent.to(client)) {
        Some(sent) => sent,
        None => {
            let clients = &update.clients;
            return Err(protocol(format!(
                "a compressed update of clients {clients:?}, sent no model of their own"
            )));
        }
    };
    let bytes = std::mem::take(&mut update.encoded);
    let change = compressor
        .decode(&bytes, sent.len())
        .map_err(|malformed| {
            let clients = &update.clients;
            protocol(format!(
                "the compressed update of clients {clients:?} does not decode: {malformed}"
            ))
        })?;
    Ok(sent.iter().zip(change).map(|(s, c)| s + c).collect())
}
