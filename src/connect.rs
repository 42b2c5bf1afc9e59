//! How the links between a federation's tiers are made: [`InProcess`] joins every tier of this
//! process by channels; a transport between processes (`cluster::MpiConnector`, in a run over
//! MPI) implements [`Connector`] too. The tree is built over either without knowing which.

use std::sync::Arc;

use crate::network::{Link, LinkEnd, LinkProfiles, NodeId};
use crate::states::ClientStates;

/// Makes the links between the tiers of a tree, and says which tiers run in this process: all
/// of them, or, in a run over MPI, those of this process's rank, whose links to tiers on other
/// ranks it relays. The tiers see the same [`LinkEnd`]s either way.
pub trait Connector {
    /// Whether this process runs `node`.
    fn hosts(&self, node: NodeId) -> bool;

    /// The link from `upper` (nearer the server) to `lower`, with the ends of the two that run
    /// here. A scheduler's child link is made before its link to the server.
    fn connect(&mut self, upper: NodeId, lower: NodeId, profiles: LinkProfiles) -> Connection;

    /// Hands over the clients' states (SCAFFOLD's and FedDyn's) before the first link is made,
    /// for a transport between processes to carry with the messages that concern their
    /// clients. In one process the trainer and the server share them, and this does nothing.
    fn carry_states(&mut self, _states: &Arc<ClientStates>) {}
}

/// A link as [`Connector::connect`] makes it.
#[derive(Debug)]
pub struct Connection {
    /// Its traffic counters (in a run over MPI, for a link between two other processes, what
    /// they report).
    pub link: Link,
    /// The upper tier's end, if that tier runs here.
    pub upper: Option<LinkEnd>,
    /// The lower tier's end, if that tier runs here.
    pub lower: Option<LinkEnd>,
}

/// Every tier in this process, joined by in-process channels.
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcess;

impl Connector for InProcess {
    fn hosts(&self, _node: NodeId) -> bool {
        true
    }

    fn connect(&mut self, upper: NodeId, lower: NodeId, profiles: LinkProfiles) -> Connection {
        let (link, upper, lower) = Link::new(upper, lower, profiles);
        Connection {
            link,
            upper: Some(upper),
            lower: Some(lower),
        }
    }
}
