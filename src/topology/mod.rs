//! The tiers of a federation as threads, and the links between them.
//!
//! The flat topology is the [`server`] thread over one [`client_group`] thread. The
//! hierarchical topology puts a [`scheduler`] between the server and each group: its server
//! connector and client connector are two more threads with queues between them. Each tier
//! owns its ends of its links and reacts to messages. The shutdown protocol (`Exit` down,
//! `ExitAck` up) lets every thread finish its work in flight and be joined, so a run never
//! ends by killing or sleeping; a closed channel tells a tier at once that a neighbour died.

pub mod asynchronous;
pub mod client_group;
mod clock;
pub mod collector;
pub mod scheduler;
pub mod server;

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;

pub use client_group::{ClientConditions, ClientGroup, GroupSetup};
pub use clock::Clock;
pub use collector::Foresight;
pub use scheduler::{ClientConnector, SchedulerSetup, ServerConnector};
pub use server::{
    Child, EvaluationPlan, RoundEnd, Server, ServerLinks, ServerMode, ServerSetup, Start,
};

use crate::config::{NetworkConfig, Placement, SchedulerMode, TopologyConfig};
use crate::connect::{Connector, InProcess};
use crate::network::{ClientId, Link, LinkProfiles, NodeId};
use crate::output::TierTraffic;
use crate::stop::StopSignal;
use crate::strategy::{EdgeAggregation, EndRun};
use crate::training::{ClientTrainer, panic_message};

/// Why a federation stopped before its last round.
#[derive(Debug, thiserror::Error)]
pub enum FederationError {
    /// A client's local training failed.
    #[error("client {client} failed in round {round} ({}): {error}", place(path))]
    ClientFailed {
        /// The round.
        round: u32,
        /// The client.
        client: ClientId,
        /// Where in the tree it ran, from the top down.
        path: Vec<NodeId>,
        /// The error or panic message.
        error: String,
    },
    /// A tier's code ended the run on purpose ([`EndRun`]): a plug-in's server half that
    /// cannot go on (a strategy written in Python raised), with its reason.
    #[error("the {tier} ended the run: {reason}")]
    Ended {
        /// Which tier, as a place in the tree.
        tier: String,
        /// Why, as the code that ended it says.
        reason: String,
    },
    /// A tier's thread ended without the shutdown protocol, usually because it panicked.
    #[error("the {tier} stopped unexpectedly{}", detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    TierLost {
        /// Which tier, as a place in the tree (`server`, `scheduler 1`, `client group 0`).
        tier: String,
        /// What is known of why.
        detail: Option<String>,
    },
    /// A tier received a message the protocol does not allow at that point.
    #[error("protocol error at the {tier}: {detail}")]
    Protocol {
        /// Which tier.
        tier: String,
        /// What arrived.
        detail: String,
    },
    /// The consumer of round results stopped (e.g. the metrics file could not be written).
    #[error("round results are no longer being received")]
    ObserverGone,
    /// A stop was requested (Ctrl-C, SIGTERM); the tree shut down after the work in flight.
    #[error("the run was stopped before its last round")]
    Stopped,
    /// The algorithm's selection chose clients the round cannot take.
    #[error("the selection of round {round} cannot be used: it {detail}")]
    Selection {
        /// The round (in an asynchronous federation, the dispatch, which the detail names).
        round: u32,
        /// What is wrong with it.
        detail: String,
    },
    /// No client is online at or after this simulated time: the availability trace ran out
    /// before the run's rounds did.
    #[error(
        "no client is online at or after simulated time {at} s: the availability trace ends before the run's rounds do (give it a period_s, or fewer rounds)"
    )]
    NoneOnline {
        /// The simulated time.
        at: f64,
    },
}

fn place(path: &[NodeId]) -> String {
    let names: Vec<String> = path.iter().map(NodeId::to_string).collect();
    names.join(" > ")
}

impl FederationError {
    /// How much the error says about the cause: a lost tier without detail is the echo of a
    /// failure reported better elsewhere.
    fn informativeness(&self) -> u8 {
        match self {
            FederationError::TierLost { detail: None, .. } => 0,
            FederationError::ObserverGone => 1,
            FederationError::TierLost { .. } => 2,
            FederationError::ClientFailed { .. }
            | FederationError::Protocol { .. }
            | FederationError::Selection { .. }
            | FederationError::NoneOnline { .. }
            | FederationError::Ended { .. } => 3,
            FederationError::Stopped => 4,
        }
    }
}

/// Reads the traffic of every link, tier by tier.
#[derive(Debug, Clone, Default)]
pub struct TrafficMeter {
    tiers: Vec<(&'static str, Vec<Link>)>,
}

impl TrafficMeter {
    fn add(&mut self, tier: &'static str, link: Link) {
        match self.tiers.iter_mut().find(|(name, _)| *name == tier) {
            Some((_, links)) => links.push(link),
            None => self.tiers.push((tier, vec![link])),
        }
    }

    /// Totals so far, one entry per tier, server tier first.
    pub fn read(&self) -> Vec<TierTraffic> {
        self.tiers
            .iter()
            .map(|(tier, links)| {
                let down = links
                    .iter()
                    .map(Link::down)
                    .fold(Default::default(), |a, b| a + b);
                let up = links
                    .iter()
                    .map(Link::up)
                    .fold(Default::default(), |a, b| a + b);
                TierTraffic::new(tier, down, up)
            })
            .collect()
    }

    /// Traffic per tier since `earlier`, an earlier [`TrafficMeter::read`].
    pub fn since(&self, earlier: &[TierTraffic]) -> Vec<TierTraffic> {
        self.read()
            .iter()
            .zip(earlier)
            .map(|(now, before)| now.since(before))
            .collect()
    }
}

/// Everything needed to build a federation tree.
pub struct Plan {
    /// The server's settings.
    pub server: ServerSetup,
    /// The shape of the tree.
    pub topology: TopologyConfig,
    /// Link profiles.
    pub network: NetworkConfig,
    /// Each group's settings, in group order (one group in the flat topology).
    pub groups: Vec<GroupSetup>,
    /// Rounds in which each scheduler panics (fault injection), by scheduler index.
    pub scheduler_panics: HashMap<usize, Vec<u32>>,
    /// How aggregating schedulers combine their groups' updates, as the strategy allows.
    pub edge_aggregation: EdgeAggregation,
    /// Asks the federation to stop early.
    pub stop: StopSignal,
}

/// What a finished federation leaves behind.
#[derive(Debug)]
pub struct FederationResult {
    /// The final global model.
    pub model: Vec<f32>,
}

/// A tier's thread, with its place in the tree for reports; `T` is what it returns on success
/// (the server returns the final model, the other tiers nothing).
type Tier<'scope, T = ()> = (
    String,
    thread::ScopedJoinHandle<'scope, Result<T, FederationError>>,
);

/// Where a run's tiers are: the rank of each, and the connector that links them.
pub struct Spread<'a> {
    /// The rank of each scheduler and client group.
    pub placement: Placement,
    /// Makes the links and says which tiers this process runs.
    pub connector: &'a mut dyn Connector,
}

/// Builds the tree `plan` describes over the shared `trainer`, all in this process, runs it,
/// and joins every thread. `on_round` sees each finished round on the calling thread, in round
/// order, as soon as the round ends; an error from it stops the federation cleanly and is
/// returned.
pub fn run<E>(
    plan: Plan,
    trainer: Arc<dyn ClientTrainer>,
    on_round: impl FnMut(RoundEnd) -> Result<(), E>,
) -> Result<Result<FederationResult, FederationError>, E> {
    let outcome = run_over(plan, trainer, &mut InProcess, on_round)?;
    Ok(outcome.map(|result| result.expect("this process runs the server")))
}

/// Like [`run`], but runs only the tiers `connector` hosts, over the links it makes. Returns
/// the final model where this process runs the server, and `None` where it does not (then
/// `on_round` is never called).
pub fn run_over<E>(
    plan: Plan,
    trainer: Arc<dyn ClientTrainer>,
    connector: &mut dyn Connector,
    mut on_round: impl FnMut(RoundEnd) -> Result<(), E>,
) -> Result<Result<Option<FederationResult>, FederationError>, E> {
    let (outcomes_tx, outcomes_rx) = flume::unbounded();
    let client_profiles = client_link_profiles(&plan.network);
    // Clients that can go offline make the dropout draws no longer enough to tell who answers.
    let conditions = plan.groups.first().map(|g| g.conditions.clone());
    let foresight = conditions
        .as_ref()
        .filter(|c| c.availability.is_always())
        .map(|c| Foresight {
            seed: c.seed,
            dropout: c.dropout,
        });
    // The server folds single clients' updates; aggregating schedulers send it partial
    // aggregates, whose samples depend on their edge rounds, so it holds those (one each).
    let server_foresight = foresight.filter(|_| {
        !matches!(
            plan.topology,
            TopologyConfig::Hierarchical {
                mode: SchedulerMode::Aggregate,
                ..
            }
        )
    });
    // Where no group runs here, the server's clock is never read.
    let clock = conditions.map(|conditions| Clock {
        client_links: client_profiles.clone(),
        server_link: matches!(plan.topology, TopologyConfig::Hierarchical { .. })
            .then_some(plan.network.server_link),
        conditions,
    });
    let mut meter = TrafficMeter::default();
    let mut children = Vec::new();
    connector.carry_states(&plan.server.client_states);
    thread::scope(|scope| {
        let mut tiers: Vec<Tier<'_>> = Vec::new();
        for group in plan.groups {
            let index = group.index;
            let group_node = NodeId::Group(index);
            let group_end = match &plan.topology {
                TopologyConfig::Flat {} => {
                    let to_server =
                        connector.connect(NodeId::Server, group_node, client_profiles.clone());
                    meter.add("server", to_server.link);
                    if let Some(server_end) = to_server.upper {
                        children.push(Child::new(group_node, server_end));
                    }
                    to_server.lower
                }
                TopologyConfig::Hierarchical {
                    mode, edge_rounds, ..
                } => {
                    let node = NodeId::Scheduler(index);
                    let server_profiles = LinkProfiles {
                        default: plan.network.server_link,
                        per_client: HashMap::new(),
                    };
                    let to_group = connector.connect(node, group_node, client_profiles.clone());
                    let to_server = connector.connect(NodeId::Server, node, server_profiles);
                    meter.add("server", to_server.link);
                    meter.add("scheduler", to_group.link);
                    if let Some(server_end) = to_server.upper {
                        children.push(Child::new(node, server_end));
                    }
                    if let (Some(parent), Some(child)) = (to_server.lower, to_group.upper) {
                        let setup = SchedulerSetup {
                            index,
                            mode: *mode,
                            edge_rounds: *edge_rounds,
                            edge: plan.edge_aggregation,
                            server_link: plan.network.server_link,
                            panic_rounds: plan
                                .scheduler_panics
                                .get(&index)
                                .cloned()
                                .unwrap_or_default(),
                            on_client_failure: plan.server.on_client_failure,
                            foresight,
                        };
                        let (upper_half, lower_half) = scheduler::scheduler(setup, parent, child);
                        tiers.push(spawn(
                            scope,
                            format!("{node} (server connector)"),
                            move || upper_half.run(),
                        ));
                        tiers.push(spawn(
                            scope,
                            format!("{node} (client connector)"),
                            move || lower_half.run(),
                        ));
                    }
                    to_group.lower
                }
            };
            if let Some(end) = group_end {
                let body = ClientGroup::new(group, trainer.clone(), end);
                tiers.push(spawn(scope, group_node.to_string(), move || body.run()));
            }
        }
        let server = connector.hosts(NodeId::Server).then(|| {
            let links = ServerLinks {
                children,
                traffic: meter,
                outcomes: outcomes_tx,
            };
            let mut server = Server::new(plan.server, links, server_foresight, plan.stop);
            if let Some(clock) = clock {
                server = server.with_clock(clock);
            }
            spawn(scope, "server".to_string(), move || server.run()).1
        });
        let mut observer_error = None;
        if server.is_some() {
            for outcome in outcomes_rx.iter() {
                if let Err(e) = on_round(outcome) {
                    observer_error = Some(e);
                    break;
                }
            }
        }
        // Dropping the receiver tells a server that is still running to shut down.
        drop(outcomes_rx);
        let server_result = server.map(|server| join(server, "server")).transpose();
        let mut errors: Vec<FederationError> = tiers
            .into_iter()
            .filter_map(|(place, handle)| join(handle, &place).err())
            .collect();
        if let Some(e) = observer_error {
            return Err(e);
        }
        Ok(match server_result {
            Ok(model) if errors.is_empty() => Ok(model.map(|model| FederationResult { model })),
            Ok(_) => Err(most_informative(errors)),
            Err(server_error) => {
                errors.insert(0, server_error);
                Err(most_informative(errors))
            }
        })
    })
}

/// The first of the errors that says the most.
fn most_informative(errors: Vec<FederationError>) -> FederationError {
    let best = errors.iter().map(FederationError::informativeness).max();
    errors
        .into_iter()
        .find(|e| Some(e.informativeness()) == best)
        .expect("there is at least one error")
}

/// The profiles of links that stand for client connections.
fn client_link_profiles(network: &NetworkConfig) -> LinkProfiles {
    let per_client = network
        .client_overrides
        .iter()
        .flat_map(|o| o.clients.iter().map(move |&c| (c, o.link())))
        .collect();
    LinkProfiles {
        default: network.client_link,
        per_client,
    }
}

fn spawn<'scope, T: Send + 'scope>(
    scope: &'scope thread::Scope<'scope, '_>,
    place: String,
    body: impl FnOnce() -> Result<T, FederationError> + Send + 'scope,
) -> Tier<'scope, T> {
    let handle = thread::Builder::new()
        .name(format!("fedsim {place}"))
        .spawn_scoped(scope, body)
        .expect("the operating system refused to start a thread");
    (place, handle)
}

fn join<T>(
    handle: thread::ScopedJoinHandle<'_, Result<T, FederationError>>,
    place: &str,
) -> Result<T, FederationError> {
    handle.join().unwrap_or_else(|panic| match panic.downcast::<EndRun>() {
        Ok(ended) => Err(FederationError::Ended {
            tier: place.to_string(),
            reason: ended.0,
        }),
        Err(panic) => Err(FederationError::TierLost {
            tier: place.to_string(),
            detail: Some(format!("panicked: {}", panic_message(panic.as_ref()))),
        }),
    })
}
