//! The server's asynchronous mode: no rounds, `concurrency` clients in flight, and each answer
//! applied at its arrival on the simulated clock.
//!
//! **Order.** Each dispatched client's answer arrives at a simulated time that follows from the
//! experiment file alone: when the downlink reaches the client, how long its work takes at its
//! speed, whether it drops out or goes offline first, and how long the answer takes back up.
//! The server handles answers in the order of (that time, client id, dispatch), never in the
//! order the trainer pool finishes them in real time. To know which answer comes next without
//! waiting for every client in flight, it computes at dispatch a lower bound on each answer's
//! arrival ([`Clock::earliest_answer`]: exact but for the extra tensors an update carries,
//! which it leaves out) and treats an answer as arriving at the later of its stamp and its
//! bound. The answer to handle next is the earliest among those arrived, once no client still
//! training has a bound before it; the bound only decides how long the server waits, never
//! what it computes.
//!
//! **The pool stays busy** because every client in flight trains at once: the server waits in
//! real time only for the client whose answer is earliest on the simulated clock, and holds the
//! answers that finish before it. That window costs at most `concurrency` held updates and as
//! many distinct global models (each client in flight holds the one it was sent), besides the
//! pool's own working memory.
//!
//! **Dispatch.** After each answer the server refills the free places at the current simulated
//! time, each with a client the algorithm's selector chooses (by default uniformly) from the
//! seed's dispatch stream (keyed by the dispatch's number) among those online and not in
//! flight; when none is online it waits on the clock for the first to come online. A
//! dispatch's number is its `round` on the wire, so each (dispatch, client) trains with its own
//! shuffle and dropout draw.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::availability::OnlineClients;
use crate::checkpoint::InFlightState;
use crate::config::FailurePolicy;
use crate::history::Seen;
use crate::network::Traffic;
use crate::network::{ClientId, DropReason, Dropped, Message, Update};
use crate::output::{RoundRecord, StalenessRecord, TierTraffic};
use crate::seed::{Purpose, stream};
use crate::strategy::selection::{Online, misfit};
use crate::strategy::{Aggregate, Arrival, AsyncStrategy, Candidates, Sent};

use super::FederationError;
use super::clock::Clock;
use super::collector::Failure;
use super::server::{Roster, RoundEnd, Server, ServerMode, lost, protocol, state_lost, wall_ms};

/// The draw of the client each dispatch sends the model to, per dispatch.
const DISPATCH: Purpose = Purpose::new("async-dispatch");

/// What a client in flight answered.
enum Answer {
    Update(Update),
    Dropped(Dropped),
    Failed(Failure),
}

/// A client in flight, with its answer once it has arrived.
struct Flight {
    state: InFlightState,
    /// The earliest its answer can arrive.
    bound: f64,
    /// Its answer, when it counts as arriving, and its size on the wire.
    answer: Option<(f64, Answer, u64)>,
}

impl Flight {
    /// The order answers are handled in: (arrival, client, dispatch), with the bound standing
    /// for an answer not yet here.
    fn key(&self) -> (f64, ClientId, u32) {
        let at = self.answer.as_ref().map_or(self.bound, |(at, ..)| *at);
        (at, self.state.client, self.state.dispatch)
    }
}

/// What the updates applied since the last server step add up to, for its record.
#[derive(Default)]
struct StepSoFar {
    clients: Vec<ClientId>,
    staleness: Vec<u32>,
    dropped: Vec<Dropped>,
    /// Σ samples × loss and Σ samples, for the mean training loss.
    loss: (f64, f64),
    /// The traffic of the step's dispatches and answers, per tier: counted as the simulated
    /// clock orders them, since the links count what the pool sends in real time.
    traffic: Vec<TierTraffic>,
}

impl StepSoFar {
    /// Nothing yet, over the tiers named in `tiers`.
    fn over(tiers: &[TierTraffic]) -> Self {
        Self {
            traffic: tiers
                .iter()
                .map(|t| TierTraffic::new(&t.tier, Traffic::default(), Traffic::default()))
                .collect(),
            ..Self::default()
        }
    }

    /// Counts a message of `bytes` on every tier it crosses, down or up.
    fn count(&mut self, bytes: u64, down: bool) {
        for tier in &mut self.traffic {
            let (messages, total) = match down {
                true => (&mut tier.messages_down, &mut tier.bytes_down),
                false => (&mut tier.messages_up, &mut tier.bytes_up),
            };
            *messages += 1;
            *total += bytes;
        }
    }

    fn train_loss(&self) -> Option<f64> {
        (self.loss.1 > 0.0).then(|| self.loss.0 / self.loss.1)
    }

    fn staleness(&self) -> Option<StalenessRecord> {
        let max = *self.staleness.iter().max()?;
        let sum: f64 = self.staleness.iter().map(|&s| f64::from(s)).sum();
        Some(StalenessRecord {
            mean: sum / self.staleness.len() as f64,
            max,
        })
    }
}

/// The asynchronous loop's state besides the server's.
struct Steps<'a> {
    roster: &'a Roster,
    clock: &'a Clock,
    concurrency: usize,
    /// The clients in flight, by client: a client is never in flight twice.
    in_flight: BTreeMap<ClientId, Flight>,
    /// Who is online, the clients in flight marked busy.
    online: OnlineClients,
    /// Dispatches so far.
    dispatches: u32,
    /// Server steps so far.
    steps: u32,
    global: Arc<[f32]>,
}

impl Server {
    /// Runs server steps until `federation.rounds` of them are done; returns the final model.
    pub(super) fn run_steps(&mut self, roster: &Roster) -> Result<Vec<f32>, FederationError> {
        let ServerMode::Asynchronous {
            concurrency,
            resume,
            ..
        } = &mut self.setup.mode
        else {
            unreachable!("asynchronous steps run in the asynchronous mode")
        };
        let (concurrency, resume) = (*concurrency, resume.take());
        let clock = self
            .clock
            .clone()
            .expect("an asynchronous server has a clock");
        let mut loop_state = Steps {
            roster,
            clock: &clock,
            concurrency,
            in_flight: BTreeMap::new(),
            online: OnlineClients::new(&self.setup.availability, &roster.ids, self.now),
            dispatches: 0,
            steps: self.setup.start.round,
            global: std::mem::take(&mut self.setup.initial_model).into(),
        };
        let tiers = self.traffic.read();
        // Flights resumed were counted in the step that dispatched them.
        let mut uncounted = StepSoFar::over(&tiers);
        if let Some((dispatches, flights)) = resume {
            loop_state.dispatches = dispatches;
            for flight in flights {
                self.send_flight(&mut loop_state, flight, &mut uncounted)?;
            }
        }
        let mut step_started = Instant::now();
        let mut step_began = self.now;
        let mut so_far = StepSoFar::over(&tiers);
        self.refill(&mut loop_state, &mut so_far)?;
        while loop_state.steps < self.setup.rounds {
            if self.stop.is_requested() {
                return Err(FederationError::Stopped);
            }
            let next = loop_state
                .in_flight
                .values()
                .map(Flight::key)
                .min_by(|a, b| total_order(*a, *b))
                .map(|(at, client, _)| {
                    (client, at, loop_state.in_flight[&client].answer.is_some())
                });
            let wake = self.next_online(&mut loop_state);
            match (next, wake) {
                (next, Some(wake)) if next.is_none_or(|(_, at, _)| wake < at) => {
                    self.now = wake;
                    self.refill(&mut loop_state, &mut so_far)?;
                    continue;
                }
                (None, _) => return Err(FederationError::NoneOnline { at: self.now }),
                (Some((_, _, false)), _) => self.take_answer(&mut loop_state)?,
                (Some((client, at, true)), _) => {
                    let flight = loop_state.land(client);
                    self.now = at;
                    let stepped = self.apply(&mut loop_state, flight, &mut so_far)?;
                    if let Some(Aggregate {
                        metrics, clusters, ..
                    }) = stepped
                    {
                        let record = RoundRecord {
                            round: loop_state.steps,
                            clients: std::mem::take(&mut so_far.clients),
                            dropped: std::mem::take(&mut so_far.dropped),
                            train_loss: so_far.train_loss(),
                            probed: Vec::new(),
                            test_accuracy: None,
                            test_loss: None,
                            test_class_accuracy: Vec::new(),
                            client_accuracy: None,
                            personal_accuracy: None,
                            strategy: metrics,
                            clusters,
                            traffic: std::mem::take(&mut so_far.traffic),
                            sim_round_s: self.now - step_began,
                            sim_time_s: self.now,
                            staleness: so_far.staleness(),
                            wall_ms: 0.0,
                        };
                        let record = self.evaluated(record, &loop_state.global, step_began)?;
                        so_far = StepSoFar::over(&tiers);
                        self.finish_step(&loop_state, record, step_started)?;
                        step_started = Instant::now();
                        step_began = self.now;
                    }
                    self.refill(&mut loop_state, &mut so_far)?;
                }
            }
        }
        Ok(loop_state.global.to_vec())
    }

    /// Handles one answer at `self.now`: an update goes to the strategy (and may make a step,
    /// whose aggregate is returned, its model taken as the global one), a drop or failure is noted.
    fn apply(
        &mut self,
        steps: &mut Steps<'_>,
        flight: Flight,
        so_far: &mut StepSoFar,
    ) -> Result<Option<Aggregate>, FederationError> {
        let (_, answer, bytes) = flight.answer.expect("an answered flight");
        so_far.count(bytes, false);
        let update = match answer {
            Answer::Dropped(dropped) => {
                so_far.dropped.push(dropped);
                return Ok(None);
            }
            Answer::Failed(failure) => match self.setup.on_client_failure {
                FailurePolicy::Abort => {
                    return Err(FederationError::ClientFailed {
                        round: flight.state.dispatch,
                        client: failure.client,
                        path: failure.path,
                        error: failure.error,
                    });
                }
                FailurePolicy::Drop => {
                    so_far.dropped.push(Dropped {
                        client: failure.client,
                        reason: DropReason::Failed,
                        error: Some(failure.error),
                    });
                    return Ok(None);
                }
            },
            Answer::Update(update) => update,
        };
        let staleness = steps.steps - flight.state.version;
        let info = steps.roster.info(flight.state.client);
        let (train_s, upload_s) = steps.clock.timings((flight.state.dispatch, 0), info, bytes);
        let seen = Seen::reported(
            flight.state.dispatch,
            update.train_loss,
            Some(train_s),
            Some(upload_s),
        );
        self.setup.history.record(flight.state.client, seen);
        so_far.clients.push(flight.state.client);
        so_far.staleness.push(staleness);
        let samples = update.num_samples as f64;
        so_far.loss.0 += samples * update.train_loss;
        so_far.loss.1 += samples;
        let arrival = Arrival {
            update: &update,
            sent: &flight.state.model,
            staleness,
        };
        let stepped = self.async_strategy().receive(&steps.global, arrival);
        Ok(stepped.map(|mut aggregate| {
            steps.steps += 1;
            steps.global = std::mem::take(&mut aggregate.model).into();
            aggregate
        }))
    }

    /// Hands a finished step to the caller, with what a checkpoint needs.
    fn finish_step(
        &self,
        steps: &Steps<'_>,
        mut record: RoundRecord,
        started: Instant,
    ) -> Result<(), FederationError> {
        record.wall_ms = wall_ms(started);
        let flying: Vec<InFlightState> =
            steps.in_flight.values().map(|f| f.state.clone()).collect();
        // A client in flight may have finished in real time and kept a new state: the
        // checkpoint takes the one it was dispatched with, as its answer is still to come.
        let mut client_states = self.setup.client_states.snapshot().map_err(state_lost)?;
        for flight in &flying {
            client_states.set(flight.client, flight.state.clone());
        }
        let end = RoundEnd {
            record,
            model: steps.global.clone(),
            strategy_state: self.setup.mode.strategy_state(),
            selector_state: self.setup.selector.state(),
            history: self.setup.history.clone(),
            client_states,
            in_flight: Some((steps.dispatches, flying)),
        };
        self.outcomes
            .send(end)
            .map_err(|_| FederationError::ObserverGone)
    }

    /// Fills the free places with clients online now, drawn from the seed.
    fn refill(
        &mut self,
        steps: &mut Steps<'_>,
        so_far: &mut StepSoFar,
    ) -> Result<(), FederationError> {
        if steps.in_flight.len() >= steps.concurrency {
            return Ok(());
        }
        steps.online.advance(self.now);
        while steps.in_flight.len() < steps.concurrency && steps.online.free_count() > 0 {
            steps.dispatches += 1;
            let idle = Online::among(&steps.roster.clients, &steps.online);
            let client = self.dispatch(steps.dispatches, idle)?;
            let flight = InFlightState {
                dispatch: steps.dispatches,
                client,
                version: steps.steps,
                sent_at: self.now,
                model: steps.global.clone(),
                state: self.setup.client_states.get(client).map_err(state_lost)?,
            };
            self.send_flight(steps, flight, so_far)?;
        }
        Ok(())
    }

    /// The client dispatch `dispatch` goes to, as the algorithm's selector chooses it from the
    /// dispatch's stream among the `idle` ones (online and not in flight, in id order).
    fn dispatch(&mut self, dispatch: u32, idle: Online<'_>) -> Result<ClientId, FederationError> {
        let mut rng = stream(self.setup.seed, DISPATCH, dispatch, 0);
        let history = &self.setup.history;
        let candidates = Candidates::new(dispatch, idle, 1, history, self.now);
        let client = self.setup.selector.dispatch(&candidates, &mut rng);
        if let Some(detail) = misfit(&[client], idle, 1) {
            return Err(FederationError::Selection {
                round: dispatch,
                detail: format!("dispatched {detail}"),
            });
        }
        Ok(client)
    }

    /// The first moment from now at which a client not in flight is online, when a place is
    /// free: now if one is; else each idle client says when it next comes, a pass over the
    /// roster only while nobody idle is online.
    fn next_online(&self, steps: &mut Steps<'_>) -> Option<f64> {
        if steps.in_flight.len() >= steps.concurrency {
            return None;
        }
        steps.online.advance(self.now);
        if steps.online.free_count() > 0 {
            return Some(self.now);
        }
        let idle = steps.online.idle().map(|position| steps.roster.ids[position]);
        self.setup.availability.next_online_among(idle, self.now)
    }

    /// Sends `flight`'s model down at its dispatch time, counted in `so_far`, and puts it in
    /// flight.
    fn send_flight(
        &mut self,
        steps: &mut Steps<'_>,
        flight: InFlightState,
        so_far: &mut StepSoFar,
    ) -> Result<(), FederationError> {
        let Sent { model, extras } = self.setup.mode.broadcast(&flight.model);
        let downlink = Message::Downlink {
            round: flight.dispatch,
            edge_round: 0,
            clients: vec![flight.client],
            model,
            extras,
            deadline: None,
        };
        let info = steps.roster.info(flight.client);
        let bound = steps.clock.earliest_answer(
            flight.dispatch,
            info,
            flight.sent_at,
            &downlink,
            flight.model.len(),
        );
        so_far.count(downlink.wire_bytes(), true);
        let child = &self.children[steps.roster.child_of(flight.client)];
        child
            .link
            .send(downlink, flight.sent_at)
            .map_err(|_| lost(child.node))?;
        let client = flight.client;
        let flight = Flight {
            state: flight,
            bound,
            answer: None,
        };
        steps.take_off(client, flight);
        Ok(())
    }

    /// Waits for the next message from below and files it with the flight it answers.
    fn take_answer(&mut self, steps: &mut Steps<'_>) -> Result<(), FederationError> {
        let (_, envelope) = self.recv_any()?;
        let at = envelope.at;
        let bytes = envelope.message.wire_bytes();
        let (dispatch, client, answer) = match envelope.message {
            Message::Uplink(update) => match update.clients[..] {
                [client] => (update.round, client, Answer::Update(update)),
                _ => {
                    return Err(protocol(format!(
                        "a partial aggregate of clients {:?} in an asynchronous federation",
                        update.clients
                    )));
                }
            },
            Message::Dropped { round, clients } => match <[Dropped; 1]>::try_from(clients) {
                Ok([dropped]) => (round, dropped.client, Answer::Dropped(dropped)),
                Err(clients) => {
                    return Err(protocol(format!(
                        "{} clients dropped in one message in an asynchronous federation",
                        clients.len()
                    )));
                }
            },
            Message::ClientFailed {
                round,
                client,
                path,
                error,
            } => (
                round,
                client,
                Answer::Failed(Failure {
                    client,
                    path,
                    error,
                }),
            ),
            other => {
                return Err(protocol(format!(
                    "unexpected {} in an asynchronous federation",
                    other.code()
                )));
            }
        };
        let flight = steps
            .in_flight
            .get_mut(&client)
            .filter(|f| f.state.dispatch == dispatch && f.answer.is_none())
            .ok_or_else(|| {
                protocol(format!(
                    "an answer from client {client} to dispatch {dispatch}, which awaits none"
                ))
            })?;
        flight.answer = Some((at.max(flight.bound), answer, bytes));
        Ok(())
    }

    /// The asynchronous server half.
    fn async_strategy(&mut self) -> &mut dyn AsyncStrategy {
        match &mut self.setup.mode {
            ServerMode::Asynchronous { strategy, .. } => strategy.as_mut(),
            ServerMode::Rounds { .. } => {
                unreachable!("asynchronous steps run the asynchronous half")
            }
        }
    }
}

impl Steps<'_> {
    /// Puts `client` in flight.
    fn take_off(&mut self, client: ClientId, flight: Flight) {
        self.online.set_busy(self.roster.position(client), true);
        self.in_flight.insert(client, flight);
    }

    /// Takes `client`'s flight out of the air.
    fn land(&mut self, client: ClientId) -> Flight {
        self.online.set_busy(self.roster.position(client), false);
        self.in_flight.remove(&client).expect("in flight")
    }
}

/// `(time, client, dispatch)` keys in order, times compared as totally ordered floats.
fn total_order(a: (f64, ClientId, u32), b: (f64, ClientId, u32)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2))
}
