//! The tiers of a federation as threads, and the links between them.
//!
//! The flat topology is an upper [`server`] thread and one [`client_group`] thread joined by
//! one counted [`Link`]. Each tier owns its end of each link and reacts to messages; the
//! shutdown protocol (`Exit` down, `ExitAck` up) lets every thread finish its work in flight
//! and be joined, so a run never ends by killing or sleeping.

pub mod client_group;
pub mod server;

use std::thread;

pub use client_group::ClientGroup;
pub use server::{Server, ServerSetup};

use crate::network::Link;
use crate::report::RoundRecord;
use crate::trainer::{ClientFailure, Trainer, panic_message};

/// Why a federation stopped before its last round.
#[derive(Debug, thiserror::Error)]
pub enum FederationError {
    /// A client's local training failed.
    #[error(transparent)]
    Client(#[from] ClientFailure),
    /// A tier's thread ended without the shutdown protocol, usually because it panicked.
    #[error("the {tier} stopped unexpectedly{}", detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    TierLost {
        /// Which tier, as a place in the tree (`server`, `client group 0`).
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
}

/// What a finished federation leaves behind.
#[derive(Debug)]
pub struct FederationResult {
    /// The final global model.
    pub model: Vec<f32>,
}

/// Runs a flat federation: `server` and a client group over `trainer`, one thread each.
/// `on_round` sees each round's outcome on the calling thread, in round order, as soon as the
/// round ends; an error from it stops the federation cleanly and is returned.
pub fn run_flat<E>(
    server: ServerSetup,
    trainer: Trainer,
    mut on_round: impl FnMut(RoundRecord) -> Result<(), E>,
) -> Result<Result<FederationResult, FederationError>, E> {
    let (link, upper, lower) = Link::new();
    let (outcomes_tx, outcomes_rx) = flume::unbounded();
    thread::scope(|scope| {
        let server = Server::new(server, upper, link, outcomes_tx);
        let server = spawn(scope, "fedsim-server", move || server.run());
        let group = ClientGroup::new(trainer, lower);
        let group = spawn(scope, "fedsim-client-group-0", move || group.run());
        let mut observer_error = None;
        for outcome in outcomes_rx.iter() {
            if let Err(e) = on_round(outcome) {
                observer_error = Some(e);
                break;
            }
        }
        // Dropping the receiver tells a server that is still running to shut down.
        drop(outcomes_rx);
        let server_result = join(server, "server");
        let group_result = join(group, "client group 0");
        if let Some(e) = observer_error {
            return Err(e);
        }
        Ok(match (server_result, group_result) {
            (Ok(model), Ok(())) => Ok(FederationResult { model }),
            // A server that lost its group knows less of why than the group's own error.
            (Err(FederationError::TierLost { .. }), Err(group)) => Err(group),
            (Err(server), _) => Err(server),
            (Ok(_), Err(group)) => Err(group),
        })
    })
}

fn spawn<'scope, T: Send + 'scope>(
    scope: &'scope thread::Scope<'scope, '_>,
    name: &str,
    body: impl FnOnce() -> Result<T, FederationError> + Send + 'scope,
) -> thread::ScopedJoinHandle<'scope, Result<T, FederationError>> {
    thread::Builder::new()
        .name(name.to_string())
        .spawn_scoped(scope, body)
        .expect("the operating system refused to start a thread")
}

fn join<T>(
    handle: thread::ScopedJoinHandle<'_, Result<T, FederationError>>,
    tier: &str,
) -> Result<T, FederationError> {
    handle.join().unwrap_or_else(|panic| {
        Err(FederationError::TierLost {
            tier: tier.to_string(),
            detail: Some(format!("panicked: {}", panic_message(panic.as_ref()))),
        })
    })
}
