//! The federation tree's protocol, without burn: real threads, links and collectors, with
//! clients that answer at once (the echo trainer). Every case checks the same properties: the
//! run ends; it ends for the reason the faults predict, naming the right place; every sampled
//! client of every finished round is accounted for exactly once (an update that counts, or
//! dropped with the right reason); and each tier's traffic counters equal the wire sizes of
//! the messages the protocol sent. Named cases cover each topology and failure place; a
//! property test draws hundreds of random trees.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedsim::availability::Availability;
use fedsim::config::{
    FailurePolicy, FaultConfig, FaultKind, NetworkConfig, SchedulerMode, TopologyConfig,
};
use fedsim::history::ClientHistory;
use fedsim::network::ClientInfo;
use fedsim::network::{ClientId, DropReason, LinkProfile, Message, NodeId, Tensors, Update};
use fedsim::output::RoundRecord;
use fedsim::seed::{Purpose, stream};
use fedsim::states::ClientStates;
use fedsim::stop::StopSignal;
use fedsim::strategy::{
    Aggregate, Arrival, AsyncStrategy, Candidates, Collected, EdgeAggregation, FedAvgServer, Reads,
    Round, Selector, Strategy as Aggregation, Uniform,
};
use fedsim::topology::client_group::drops_out;
use fedsim::topology::{
    self, ClientConditions, FederationError, GroupSetup, Plan, ServerMode, ServerSetup, Start,
};
use fedsim::training::{
    Answer, ClientFailure, ClientTrainer, Done, EchoTrainer, InjectedFaults, Job, Probe, ProbeDone,
};
use proptest::prelude::*;
use rand_chacha::ChaCha12Rng;

/// How long a case may take before it counts as hung: each takes milliseconds.
const WATCHDOG: Duration = Duration::from_secs(5);

/// Parameters in the echoed model: the protocol does not care how many.
const PARAMS: usize = 3;

/// A federation to simulate.
#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    num_clients: usize,
    clients_per_round: usize,
    rounds: u32,
    /// `None`: flat; else (schedulers, mode, edge rounds).
    hierarchy: Option<(usize, SchedulerMode, u32)>,
    dropout: f64,
    deadline_s: Option<f64>,
    /// Samples per second, by client; infinite means instant.
    speeds: Vec<f64>,
    client_latency_ms: f64,
    server_latency_ms: f64,
    client_faults: Vec<FaultConfig>,
    /// (round, scheduler) pairs in which a scheduler's thread panics.
    scheduler_panics: Vec<(u32, usize)>,
    policy: FailurePolicy,
    /// The (round, client) whose job makes the trainer request a stop, as Ctrl-C would while
    /// that client trains.
    stop_at: Option<(u32, ClientId)>,
}

impl Case {
    fn flat(num_clients: usize, clients_per_round: usize, rounds: u32) -> Self {
        Case {
            seed: 7,
            num_clients,
            clients_per_round,
            rounds,
            hierarchy: None,
            dropout: 0.0,
            deadline_s: None,
            speeds: vec![f64::INFINITY; num_clients],
            client_latency_ms: 0.0,
            server_latency_ms: 0.0,
            client_faults: Vec::new(),
            scheduler_panics: Vec::new(),
            policy: FailurePolicy::Abort,
            stop_at: None,
        }
    }

    fn topology(&self) -> TopologyConfig {
        match self.hierarchy {
            None => TopologyConfig::Flat {},
            Some((schedulers, mode, edge_rounds)) => TopologyConfig::Hierarchical {
                schedulers,
                mode,
                edge_rounds,
                assignment: None,
            },
        }
    }

    /// The client ids under each group.
    fn parts(&self) -> Vec<Vec<ClientId>> {
        self.topology().groups(self.num_clients)
    }

    fn group_of(&self, client: ClientId) -> usize {
        self.parts()
            .iter()
            .position(|p| p.contains(&client))
            .unwrap()
    }

    /// Sample counts by client: unequal, so that weighting matters.
    fn num_samples(&self) -> Vec<usize> {
        (0..self.num_clients).map(|c| 10 + c % 7).collect()
    }

    fn edge_rounds(&self) -> u32 {
        match self.hierarchy {
            Some((_, SchedulerMode::Aggregate, edge_rounds)) => edge_rounds,
            _ => 1,
        }
    }

    /// The clients of `round`, as the default selection draws them: every client is online.
    fn sampled(&self, round: u32) -> Vec<ClientId> {
        let roster: Vec<ClientInfo> = (0..self.num_clients)
            .zip(self.num_samples())
            .map(|(id, num_samples)| ClientInfo { id, num_samples })
            .collect();
        let history = ClientHistory::new();
        let candidates = Candidates::new(round, &roster, self.clients_per_round, &history, 0.0);
        let mut rng = stream(self.seed, Purpose::CLIENT_SAMPLING, round, 0);
        let mut sampled = Uniform.select(&candidates, &mut rng);
        sampled.sort_unstable();
        sampled
    }

    fn fault(&self, round: u32, client: ClientId) -> Option<FaultKind> {
        self.client_faults
            .iter()
            .find(|f| f.round == round && f.client == Some(client))
            .map(|f| f.kind)
    }

    fn drops_out(&self, round: u32, edge_round: u32, client: ClientId) -> bool {
        drops_out(self.seed, self.dropout, round, edge_round, client)
    }

    /// The edge round in which a faulty client fails: the first in which it does not drop out.
    fn failing_edge_round(&self, round: u32, client: ClientId) -> Option<u32> {
        self.fault(round, client)?;
        (0..self.edge_rounds()).find(|&e| !self.drops_out(round, e, client))
    }

    /// The clients of `group` that fail in `round`. Under the abort policy an aggregating
    /// scheduler runs no edge round after the first that saw a failure.
    fn failing(&self, round: u32, group: &[ClientId]) -> Vec<ClientId> {
        let sampled = self.sampled(round);
        let mine: Vec<(ClientId, u32)> = group
            .iter()
            .filter(|c| sampled.contains(c))
            .filter_map(|&c| self.failing_edge_round(round, c).map(|e| (c, e)))
            .collect();
        let last = match self.policy {
            FailurePolicy::Abort => mine.iter().map(|&(_, e)| e).min().unwrap_or(0),
            FailurePolicy::Drop => u32::MAX,
        };
        mine.into_iter()
            .filter(|&(_, e)| e <= last)
            .map(|(c, _)| c)
            .collect()
    }

    /// How the run should end: `Ok(())` after every round, or the error it should stop with.
    fn expected_end(&self) -> Result<(), Expected> {
        for round in 1..=self.rounds {
            let sampled = self.sampled(round);
            if self
                .stop_at
                .is_some_and(|(r, c)| r == round && sampled.contains(&c))
            {
                return Err(Expected::Stopped { round });
            }
            let parts = self.parts();
            let panicking = self.scheduler_panics.iter().filter(|&&(r, _)| r == round);
            let busy_panicking = panicking
                .map(|&(_, s)| s)
                .filter(|&s| parts[s].iter().any(|c| sampled.contains(c)))
                .min();
            if let Some(scheduler) = busy_panicking {
                return Err(Expected::SchedulerLost { round, scheduler });
            }
            if self.policy == FailurePolicy::Abort {
                let first = parts.iter().flat_map(|p| self.failing(round, p)).min();
                if let Some(client) = first {
                    return Err(Expected::ClientFailed { round, client });
                }
            }
        }
        Ok(())
    }

    fn plan(&self, strategy: Box<dyn Aggregation>, stop: StopSignal) -> Plan {
        let conditions = ClientConditions {
            seed: self.seed,
            dropout: self.dropout,
            speeds: Arc::new(self.speeds.clone()),
            ..ClientConditions::instant(self.num_clients)
        };
        let groups = GroupSetup::for_parts(self.parts(), &self.num_samples(), &conditions);
        let mut scheduler_panics = HashMap::<usize, Vec<u32>>::new();
        for &(round, scheduler) in &self.scheduler_panics {
            scheduler_panics.entry(scheduler).or_default().push(round);
        }
        let link = |latency_ms| LinkProfile {
            latency_ms,
            bandwidth_mbps: None,
        };
        Plan {
            server: ServerSetup {
                seed: self.seed,
                rounds: self.rounds,
                on_client_failure: self.policy,
                start: Start::default(),
                initial_model: vec![0.25; PARAMS],
                mode: ServerMode::Rounds {
                    strategy,
                    clients_per_round: self.clients_per_round,
                    poisson_rate: None,
                    deadline_s: self.deadline_s,
                },
                selector: Box::new(Uniform),
                history: ClientHistory::new(),
                availability: Arc::new(Availability::always()),
                client_states: Arc::new(ClientStates::in_memory()),
                evaluation: None,
                sharing: None,
                compression: None,
                secure_aggregation: None,
            },
            topology: self.topology(),
            network: NetworkConfig {
                server_link: link(self.server_latency_ms),
                client_link: link(self.client_latency_ms),
                ..NetworkConfig::default()
            },
            groups,
            scheduler_panics,
            edge_aggregation: EdgeAggregation::MODELS,
            stop,
        }
    }
}

#[derive(Debug, PartialEq)]
enum Expected {
    SchedulerLost { round: u32, scheduler: usize },
    ClientFailed { round: u32, client: ClientId },
    Stopped { round: u32 },
}

/// The echo trainer, but the job of one (round, client) requests a stop, and jobs after a
/// stop fail at once, as the burn trainer's do.
struct StoppingAt {
    echo: Arc<EchoTrainer>,
    stop: StopSignal,
    at: (u32, ClientId),
}

impl ClientTrainer for StoppingAt {
    fn spawn(&self, job: Job, done: Done) {
        if (job.round, job.client) == self.at {
            self.stop.request();
        }
        if self.stop.is_requested() {
            let (round, client) = (job.round, job.client);
            let error = "stopped with the run".to_string();
            // Off the group's thread, which drains `done` and must never wait on it.
            std::thread::spawn(move || {
                let _ = done.send(Err(ClientFailure {
                    round,
                    client,
                    error,
                }));
            });
        } else {
            self.echo.spawn(job, done);
        }
    }

    fn probe(&self, probe: Probe, done: ProbeDone) {
        self.echo.probe(probe, done);
    }
}

/// The round of each update the server aggregated, and the clients it stands for.
type Aggregated = Arc<Mutex<Vec<(u32, Vec<ClientId>)>>>;

/// FedAvg that notes which clients each update it aggregates stands for. Reading sums, as
/// FedAvg does, it lets the server fold single clients' updates as they arrive (and sees each
/// client as one update); reading updates, it sees a scheduler's partial aggregate whole.
struct Recording {
    seen: Aggregated,
    reads_sums: bool,
}

impl Aggregation for Recording {
    fn reads(&self) -> Reads {
        if self.reads_sums {
            FedAvgServer.reads()
        } else {
            Reads::Updates
        }
    }

    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let mut seen = self.seen.lock().unwrap();
        match input {
            Collected::Sums { ref clients, .. } => {
                seen.extend(clients.iter().map(|&c| (round.number, vec![c])));
                FedAvgServer.aggregate(round, global, input)
            }
            Collected::Updates(updates) => {
                seen.extend(updates.iter().map(|u| (u.round, u.clients.clone())));
                FedAvgServer.aggregate_updates(round, global, updates)
            }
        }
    }
}

/// What a simulated run left behind.
struct Outcome {
    result: Result<(), FederationError>,
    records: Vec<RoundRecord>,
    /// Per round, the client lists of the updates the server aggregated.
    aggregated: BTreeMap<u32, Vec<Vec<ClientId>>>,
    answers: Vec<Answer>,
}

/// Runs `case` on real threads, failing the test if it does not end within the watchdog.
fn simulate(case: &Case) -> Outcome {
    let seen = Aggregated::default();
    let stop = StopSignal::new();
    let recording = Recording {
        seen: seen.clone(),
        reads_sums: !matches!(case.hierarchy, Some((_, SchedulerMode::Aggregate, _))),
    };
    let plan = case.plan(Box::new(recording), stop.clone());
    let faults = InjectedFaults::new(&case.client_faults);
    let echo = Arc::new(EchoTrainer::new(case.num_samples(), faults, 2).unwrap());
    let (done_tx, done_rx) = flume::bounded(1);
    let trainer: Arc<dyn ClientTrainer> = match case.stop_at {
        None => echo.clone(),
        Some(at) => Arc::new(StoppingAt {
            echo: echo.clone(),
            stop,
            at,
        }),
    };
    std::thread::spawn(move || {
        let mut records = Vec::new();
        let result = topology::run(plan, trainer, |end| {
            records.push(end.record);
            Ok::<_, ()>(())
        });
        let _ = done_tx.send((result.unwrap().map(|_| ()), records));
    });
    let (result, records) = done_rx
        .recv_timeout(WATCHDOG)
        .unwrap_or_else(|_| panic!("the federation did not end within {WATCHDOG:?}: {case:#?}"));
    let mut aggregated: BTreeMap<u32, Vec<Vec<ClientId>>> = BTreeMap::new();
    for (round, clients) in seen.lock().unwrap().drain(..) {
        aggregated.entry(round).or_default().push(clients);
    }
    Outcome {
        result,
        records,
        aggregated,
        answers: echo.answers(),
    }
}

/// Simulates `case` and checks every property; returns the outcome for further checks.
fn check(case: &Case) -> Outcome {
    let outcome = simulate(case);
    let expected = case.expected_end();
    check_end(case, &outcome, &expected);
    let finished = match expected {
        Ok(()) => case.rounds,
        Err(
            Expected::SchedulerLost { round, .. }
            | Expected::ClientFailed { round, .. }
            | Expected::Stopped { round },
        ) => round - 1,
    };
    assert_eq!(outcome.records.len(), finished as usize, "{case:#?}");
    for record in &outcome.records {
        check_accounting(case, &outcome, record);
        check_traffic(case, &outcome, record);
    }
    outcome
}

fn check_end(case: &Case, outcome: &Outcome, expected: &Result<(), Expected>) {
    match (expected, &outcome.result) {
        (Ok(()), Ok(())) => {}
        (Err(Expected::Stopped { .. }), Err(FederationError::Stopped)) => {}
        (Err(Expected::SchedulerLost { scheduler, .. }), Err(error)) => {
            let message = format!(
                "the scheduler {scheduler} (client connector) stopped unexpectedly: panicked: injected panic"
            );
            assert_eq!(error.to_string(), message, "{case:#?}");
        }
        (Err(Expected::ClientFailed { round, client }), Err(error)) => {
            let path = match case.hierarchy {
                None => "client group 0".to_string(),
                Some(_) => {
                    let group = case.group_of(*client);
                    format!("scheduler {group} > client group {group}")
                }
            };
            let reason = error_text(case.fault(*round, *client).unwrap());
            let message = format!("client {client} failed in round {round} ({path}): {reason}");
            assert_eq!(error.to_string(), message, "{case:#?}");
        }
        (expected, actual) => panic!("expected {expected:?}, got {actual:?}: {case:#?}"),
    }
}

fn error_text(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Error => "injected failure",
        FaultKind::Panic => "panicked: injected panic",
    }
}

/// Every sampled client is in exactly one update that counts or in `dropped`, for the reason
/// the case predicts.
fn check_accounting(case: &Case, outcome: &Outcome, record: &RoundRecord) {
    let round = record.round;
    let sampled = case.sampled(round);
    assert_eq!(record.clients, sampled, "round {round}: {case:#?}");
    let contributed: Vec<ClientId> = outcome
        .aggregated
        .get(&round)
        .into_iter()
        .flatten()
        .flatten()
        .copied()
        .collect();
    let dropped: Vec<ClientId> = record.dropped.iter().map(|d| d.client).collect();
    let mut all: Vec<ClientId> = contributed.iter().chain(&dropped).copied().collect();
    all.sort_unstable();
    assert_eq!(all, sampled, "round {round}: accounted {all:?}: {case:#?}");
    let last_edge_round = case.edge_rounds() - 1;
    for d in &record.dropped {
        let client = d.client;
        let failing = case.failing(round, &case.parts()[case.group_of(client)]);
        let expected = if failing.contains(&client) {
            DropReason::Failed
        } else if case.drops_out(round, last_edge_round, client) {
            DropReason::Dropout
        } else {
            DropReason::Deadline
        };
        assert_eq!(
            d.reason, expected,
            "round {round}, client {client}: {case:#?}"
        );
        let error = case.fault(round, client).map(error_text);
        assert_eq!(
            d.error.as_deref(),
            error.filter(|_| expected == DropReason::Failed),
            "round {round}, client {client}"
        );
        assert!(
            expected != DropReason::Deadline || case.deadline_s.is_some(),
            "round {round}: client {client} missed a deadline that does not exist: {case:#?}"
        );
    }
    for client in contributed {
        assert!(
            case.failing(round, &case.parts()[case.group_of(client)])
                .iter()
                .all(|&c| c != client),
            "round {round}: failed client {client} contributed: {case:#?}"
        );
    }
}

fn downlink_bytes(clients: usize) -> u64 {
    wire_bytes(Message::Downlink {
        round: 1,
        edge_round: 0,
        clients: vec![0; clients],
        model: Arc::from(vec![0.0f32; PARAMS]),
        extras: Tensors::new(),
        deadline: None,
    })
}

fn uplink_bytes(clients: usize) -> u64 {
    wire_bytes(Message::Uplink(Update {
        round: 1,
        clients: vec![0; clients],
        num_samples: 1,
        train_loss: 0.0,
        steps: 0,
        params: vec![0.0; PARAMS],
        extras: Tensors::new(),
        encoded: Vec::new(),
    }))
}

fn dropped_bytes(clients: usize) -> u64 {
    let dropped = fedsim::network::Dropped::new(0, DropReason::Dropout);
    wire_bytes(Message::Dropped {
        round: 1,
        clients: vec![dropped; clients],
    })
}

fn failed_bytes(path_len: usize, error: &str) -> u64 {
    wire_bytes(Message::ClientFailed {
        round: 1,
        client: 0,
        path: vec![NodeId::Server; path_len],
        error: error.to_string(),
    })
}

fn wire_bytes(message: Message) -> u64 {
    message.wire_bytes()
}

/// Each tier's counters equal the sizes of the messages the protocol sent in the round.
fn check_traffic(case: &Case, outcome: &Outcome, record: &RoundRecord) {
    let round = record.round;
    let answers: Vec<&Answer> = outcome
        .answers
        .iter()
        .filter(|a| a.round == round)
        .collect();
    let updated = answers.iter().filter(|a| a.updated).count() as u64;
    let failures: Vec<&str> = answers
        .iter()
        .filter(|a| !a.updated)
        .map(|a| error_text(case.fault(round, a.client).unwrap()))
        .collect();
    let tier = |name: &str| {
        record
            .traffic
            .iter()
            .find(|t| t.tier == name)
            .unwrap_or_else(|| panic!("no {name} tier in round {round}"))
    };
    let client_tier = tier(if case.hierarchy.is_some() {
        "scheduler"
    } else {
        "server"
    });
    // Each downlink to a client is answered by one message: update, dropout or failure.
    let context = format!("round {round}: {:?}: {case:#?}", record.traffic);
    assert_eq!(
        client_tier.messages_up, client_tier.messages_down,
        "{context}"
    );
    assert_eq!(
        client_tier.bytes_down,
        client_tier.messages_down * downlink_bytes(1),
        "{context}"
    );
    let dropouts = client_tier.messages_up - updated - failures.len() as u64;
    let failure_bytes: u64 = failures.iter().map(|e| failed_bytes(1, e)).sum();
    assert_eq!(
        client_tier.bytes_up,
        updated * uplink_bytes(1) + failure_bytes + dropouts * dropped_bytes(1),
        "{context}"
    );
    let Some((_, mode, _)) = case.hierarchy else {
        assert_eq!(client_tier.messages_down, record.clients.len() as u64);
        let reported = record.dropped.iter();
        let reported = reported.filter(|d| d.reason == DropReason::Dropout);
        assert_eq!(dropouts, reported.count() as u64, "{context}");
        return;
    };
    let server_tier = tier("server");
    let per_scheduler: Vec<Vec<ClientId>> = case
        .parts()
        .into_iter()
        .map(|p| {
            p.into_iter()
                .filter(|c| record.clients.contains(c))
                .collect()
        })
        .filter(|p: &Vec<ClientId>| !p.is_empty())
        .collect();
    assert_eq!(
        server_tier.messages_down,
        per_scheduler.len() as u64,
        "{context}"
    );
    let down: u64 = per_scheduler.iter().map(|p| downlink_bytes(p.len())).sum();
    assert_eq!(server_tier.bytes_down, down, "{context}");
    match mode {
        SchedulerMode::Relay => {
            // Relayed unchanged, but for the scheduler added to each failure's path.
            assert_eq!(
                server_tier.messages_up, client_tier.messages_up,
                "{context}"
            );
            let added = 4 * failures.len() as u64;
            assert_eq!(
                server_tier.bytes_up,
                client_tier.bytes_up + added,
                "{context}"
            );
        }
        SchedulerMode::Aggregate => {
            let mut messages = 0;
            let mut bytes = 0;
            for part in &per_scheduler {
                let mine = |c: &ClientId| part.contains(c);
                let dropped = record.dropped.iter().filter(|d| mine(&d.client));
                let (failed, left_out): (Vec<_>, Vec<_>) =
                    dropped.partition(|d| d.reason == DropReason::Failed);
                let mut partials = outcome.aggregated.get(&round).into_iter().flatten();
                let partial = partials.find(|u| mine(&u[0]));
                for failure in &failed {
                    messages += 1;
                    bytes += failed_bytes(2, failure.error.as_deref().unwrap());
                }
                if !left_out.is_empty() {
                    messages += 1;
                    bytes += dropped_bytes(left_out.len());
                }
                if let Some(partial) = partial {
                    messages += 1;
                    bytes += uplink_bytes(partial.len());
                }
            }
            assert_eq!(server_tier.messages_up, messages, "{context}");
            assert_eq!(server_tier.bytes_up, bytes, "{context}");
        }
    }
}

/// The topologies every named case runs on.
fn topologies() -> Vec<Option<(usize, SchedulerMode, u32)>> {
    vec![
        None,
        Some((3, SchedulerMode::Relay, 1)),
        Some((3, SchedulerMode::Aggregate, 1)),
        Some((3, SchedulerMode::Aggregate, 2)),
        Some((3, SchedulerMode::Aggregate, 3)),
    ]
}

/// Runs `case` on every topology, under both failure policies.
fn check_everywhere(case: &Case) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for hierarchy in topologies() {
        for policy in [FailurePolicy::Abort, FailurePolicy::Drop] {
            let case = Case {
                hierarchy,
                policy,
                ..case.clone()
            };
            outcomes.push(check(&case));
        }
    }
    outcomes
}

fn client_fault(round: u32, client: ClientId, kind: FaultKind) -> FaultConfig {
    FaultConfig {
        round,
        client: Some(client),
        scheduler: None,
        kind,
    }
}

/// A federation of 30 clients, 12 per round, 3 rounds.
fn base() -> Case {
    Case::flat(30, 12, 3)
}

#[test]
fn every_topology_runs_all_rounds_without_faults() {
    for outcome in check_everywhere(&base()) {
        assert!(outcome.result.is_ok());
    }
}

#[test]
fn a_failing_client_first_among_or_last_of_the_sampled_is_handled_everywhere() {
    let case = base();
    let sampled = case.sampled(2);
    for client in [sampled[0], sampled[5], sampled[sampled.len() - 1]] {
        for kind in [FaultKind::Error, FaultKind::Panic] {
            let case = Case {
                client_faults: vec![client_fault(2, client, kind)],
                ..case.clone()
            };
            check_everywhere(&case);
        }
    }
}

#[test]
fn several_failing_clients_in_one_round_report_the_lowest_id() {
    let case = base();
    let sampled = case.sampled(1);
    let case = Case {
        client_faults: [sampled[9], sampled[2], sampled[6]]
            .into_iter()
            .map(|c| client_fault(1, c, FaultKind::Panic))
            .collect(),
        ..case
    };
    check_everywhere(&case);
}

#[test]
fn a_panicking_scheduler_ends_the_run_naming_it() {
    let case = base();
    let busy = case.group_of(case.sampled(2)[0]);
    for hierarchy in topologies().into_iter().flatten() {
        let case = Case {
            hierarchy: Some(hierarchy),
            scheduler_panics: vec![(2, busy)],
            ..case.clone()
        };
        let outcome = check(&case);
        assert!(outcome.result.is_err());
    }
}

#[test]
fn dropouts_are_accounted_for_in_every_topology() {
    let case = Case {
        dropout: 0.3,
        ..base()
    };
    let outcomes = check_everywhere(&case);
    let dropped: usize = outcomes[0].records.iter().map(|r| r.dropped.len()).sum();
    assert!(dropped > 0, "a dropout of 0.3 drops someone in 36 draws");
}

#[test]
fn deadlines_drop_slow_clients_in_every_topology_that_allows_them() {
    let mut case = base();
    // Every third client is a hundred times slower than the rest.
    case.speeds = (0..case.num_clients)
        .map(|c| if c % 3 == 0 { 10.0 } else { 1000.0 })
        .collect();
    case.deadline_s = Some(0.5);
    case.client_latency_ms = 20.0;
    case.server_latency_ms = 5.0;
    for hierarchy in topologies()
        .into_iter()
        .filter(|h| h.is_none_or(|h| h.2 == 1))
    {
        let case = Case {
            hierarchy,
            ..case.clone()
        };
        let outcome = check(&case);
        let late: usize = outcome
            .records
            .iter()
            .flat_map(|r| &r.dropped)
            .filter(|d| d.reason == DropReason::Deadline)
            .count();
        assert!(late > 0, "{hierarchy:?}");
        for record in &outcome.records {
            assert!((record.sim_round_s - 0.5).abs() < 1e-9, "{record:?}");
        }
    }
}

#[test]
fn under_the_drop_policy_a_failed_client_is_listed_and_the_run_goes_on() {
    let case = base();
    let client = case.sampled(1)[3];
    let case = Case {
        client_faults: vec![client_fault(1, client, FaultKind::Error)],
        policy: FailurePolicy::Drop,
        hierarchy: Some((3, SchedulerMode::Aggregate, 2)),
        ..case
    };
    let outcome = check(&case);
    assert!(outcome.result.is_ok());
    let failed = &outcome.records[0].dropped;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].client, client);
    assert_eq!(failed[0].reason, DropReason::Failed);
    assert_eq!(failed[0].error.as_deref(), Some("injected failure"));
}

/// Random trees: 1 to 8 schedulers (or flat), 1 to 200 clients, any number per round, random
/// dropout, deadlines, link latencies, client speeds, client faults and scheduler panics.
fn any_case() -> impl Strategy<Value = Case> {
    let shape = (1usize..=200, 0usize..=8, 0u32..3, 1u32..=3, 1u32..=4).prop_flat_map(
        |(num_clients, schedulers, mode, edge_rounds, rounds)| {
            let schedulers = schedulers.min(num_clients);
            let hierarchy = match (schedulers, mode) {
                (0, _) => None,
                (s, 0) => Some((s, SchedulerMode::Relay, 1)),
                (s, _) => Some((s, SchedulerMode::Aggregate, edge_rounds)),
            };
            let fault =
                (1..=rounds, 0..num_clients, any::<bool>()).prop_map(|(round, client, panics)| {
                    let kind = if panics {
                        FaultKind::Panic
                    } else {
                        FaultKind::Error
                    };
                    client_fault(round, client, kind)
                });
            let panic = (1..=rounds, 0..schedulers.max(1));
            (
                Just((num_clients, hierarchy, rounds)),
                1..=num_clients,
                prop::collection::vec(fault, 0..4),
                prop::collection::vec(panic, 0..=usize::from(schedulers > 0)),
                prop::collection::vec(1.0f64..1000.0, num_clients),
            )
        },
    );
    let conditions = (
        any::<u64>(),
        prop_oneof![Just(0.0), 0.0f64..0.6],
        any::<bool>(),
        prop_oneof![Just(None), (0.05f64..2.0).prop_map(Some)],
        0.0f64..50.0,
        0.0f64..50.0,
    );
    (shape, conditions).prop_map(
        |(
            ((num_clients, hierarchy, rounds), per_round, faults, panics, speeds),
            (seed, dropout, drop, deadline, client_latency, server_latency),
        )| {
            let edge_rounds = hierarchy.map_or(1, |(_, _, e)| e);
            Case {
                seed,
                num_clients,
                clients_per_round: per_round,
                rounds,
                hierarchy,
                dropout,
                // As validation requires, no deadline with several edge rounds.
                deadline_s: deadline.filter(|_| edge_rounds == 1),
                speeds,
                client_latency_ms: client_latency,
                server_latency_ms: server_latency,
                client_faults: faults,
                scheduler_panics: panics,
                policy: if drop {
                    FailurePolicy::Drop
                } else {
                    FailurePolicy::Abort
                },
                stop_at: None,
            }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        // A hung case costs a watchdog period; shrinking stops after a few dozen tries.
        max_shrink_iters: 40,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_trees_end_for_the_right_reason_and_account_for_every_client(case in any_case()) {
        check(&case);
    }
}

#[test]
fn a_stop_during_a_round_ends_the_run_without_recording_that_round() {
    let case = base();
    let sampled = case.sampled(2);
    for client in [sampled[0], sampled[sampled.len() - 1]] {
        let case = Case {
            stop_at: Some((2, client)),
            ..case.clone()
        };
        for outcome in check_everywhere(&case) {
            assert!(matches!(outcome.result, Err(FederationError::Stopped)));
            assert_eq!(outcome.records.len(), 1);
        }
    }
}

#[test]
fn the_same_case_gives_the_same_records_whatever_the_arrival_order() {
    let case = Case {
        dropout: 0.2,
        hierarchy: Some((4, SchedulerMode::Aggregate, 2)),
        policy: FailurePolicy::Drop,
        client_faults: vec![client_fault(2, 5, FaultKind::Panic)],
        ..Case::flat(60, 30, 4)
    };
    let without_wall_time = |outcome: Outcome| -> Vec<RoundRecord> {
        let records = outcome.records.into_iter();
        records.map(|r| RoundRecord { wall_ms: 0.0, ..r }).collect()
    };
    let first = without_wall_time(check(&case));
    assert_eq!(first.len(), 4);
    for _ in 0..5 {
        assert_eq!(without_wall_time(check(&case)), first);
    }
}

/// A selection that always takes the lowest ids on offer, or, misbehaving, a client that is
/// already in flight.
struct LowestFirst {
    misbehave: bool,
}

impl Selector for LowestFirst {
    fn select(&mut self, candidates: &Candidates<'_>, _rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        match self.misbehave {
            true => vec![0; candidates.wanted],
            false => candidates
                .online
                .iter()
                .take(candidates.wanted)
                .map(|c| c.id)
                .collect(),
        }
    }
}

/// An asynchronous server half that takes every update as the next model.
struct TakeEach;

impl AsyncStrategy for TakeEach {
    fn receive(&mut self, _global: &[f32], arrival: Arrival<'_>) -> Option<Aggregate> {
        Some(Aggregate::model(arrival.update.params.clone()))
    }
}

/// Five echoing clients, two in flight, dispatched by `selector` for six server steps.
fn asynchronous_run(selector: LowestFirst) -> Result<Vec<RoundRecord>, FederationError> {
    let case = Case::flat(5, 2, 6);
    let mut plan = case.plan(Box::new(FedAvgServer), StopSignal::new());
    plan.server.mode = ServerMode::Asynchronous {
        strategy: Box::new(TakeEach),
        concurrency: 2,
        resume: None,
    };
    plan.server.selector = Box::new(selector);
    let echo = EchoTrainer::new(case.num_samples(), InjectedFaults::default(), 2).unwrap();
    let mut records = Vec::new();
    let result = topology::run(plan, Arc::new(echo), |end| {
        records.push(end.record);
        Ok::<_, ()>(())
    })
    .unwrap();
    result.map(|_| records)
}

#[test]
fn the_asynchronous_server_asks_the_selection_which_idle_client_goes_next() {
    // The lowest idle client each time: clients 0 and 1 first, then client 0 again as soon as
    // its answer is applied. Every client answers at once, and at equal times the lower id
    // goes first, so client 0's answers keep coming before client 1's.
    let records = asynchronous_run(LowestFirst { misbehave: false }).unwrap();
    let applied: Vec<Vec<ClientId>> = records.iter().map(|r| r.clients.clone()).collect();
    assert_eq!(applied, vec![vec![0]; 6]);
    // A client already in flight is refused, naming the dispatch.
    match asynchronous_run(LowestFirst { misbehave: true }) {
        Err(FederationError::Selection { round: 2, detail }) => {
            assert!(
                detail.contains("dispatched client 0, which is not among the candidates"),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    }
}
