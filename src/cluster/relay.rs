//! The connector of a run over MPI: it makes every link of the tree in every process, in the
//! same order, so that the links are numbered alike everywhere; keeps the ends of the tiers
//! this process runs; and relays a link whose other end runs in another process over the
//! wire, with one thread per direction.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use super::wire::{Frame, MAX_LINKS, Route, TIERS, Wire};
use crate::config::Placement;
use crate::connect::{Connection, Connector};
use crate::network::{ClientId, Inlet, Link, LinkEnd, LinkProfiles, Message, NodeId, Tensors};
use crate::states::ClientStates;

/// Makes the links of the tree for the process of rank `rank`.
pub struct MpiConnector {
    rank: usize,
    placement: Placement,
    wire: Arc<Wire>,
    /// The thread that receives the wire's frames.
    receiver: JoinHandle<()>,
    /// Links made so far: the next link's number.
    links: u32,
    /// Each scheduler's link to its group, where this process runs the scheduler: its traffic
    /// travels up with the scheduler's frames.
    below: HashMap<NodeId, Link>,
    /// Each scheduler's link to its group, where neither runs here: this process's copy,
    /// which the scheduler's frames keep up to date.
    mirrors: HashMap<NodeId, Link>,
    /// The clients' states in this process, which frames carry between processes.
    states: Arc<ClientStates>,
    /// The schedulers whose link to their group has been made.
    schedulers_linked: HashSet<NodeId>,
    relays: Vec<JoinHandle<()>>,
}

impl MpiConnector {
    pub(super) fn new(
        rank: usize,
        placement: Placement,
        (wire, receiver): (Arc<Wire>, JoinHandle<()>),
    ) -> Self {
        Self {
            rank,
            placement,
            wire,
            receiver,
            links: 0,
            below: HashMap::new(),
            mirrors: HashMap::new(),
            states: Arc::new(ClientStates::in_memory()),
            schedulers_linked: HashSet::new(),
            relays: Vec::new(),
        }
    }

    /// The rank that runs `node`.
    fn rank_of(&self, node: NodeId) -> usize {
        match node {
            NodeId::Server => 0,
            NodeId::Scheduler(i) => self.placement.schedulers[i],
            NodeId::Group(i) => self.placement.groups[i],
        }
    }

    /// Where each tier runs.
    pub(super) fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Whether the tree has been made here: until it is, the other ranks' tiers wait for
    /// links this process has not opened, and a process that fails before must end them all
    /// ([`super::Cluster::abort`]).
    pub fn made_tree(&self) -> bool {
        self.links > 0
    }

    /// Waits for every relay, which ends once both ends of its link have closed, then stops
    /// the wire; returns what this process sent over it
    /// ([`super::wire::WireCounts::to_array`]).
    pub(super) fn join(self) -> [u64; 4 * TIERS.len()] {
        for relay in self.relays {
            relay.join().expect("relays do not panic");
        }
        self.wire.stop();
        self.receiver.join().expect("the receiver does not panic");
        self.wire.counts().to_array()
    }

    /// Relays `end`, this process's end of a link, along `route`; `tallies` are the links
    /// whose traffic its frames report or record.
    fn relay(&mut self, end: LinkEnd, route: Route, tallies: Tallies) {
        let link = route.link;
        let (inlet, outgoing) = end.into_halves();
        let inbox = self.wire.inbox(link, route.peer);
        let wire = self.wire.clone();
        let Tallies { below, mirror } = tallies;
        let (states, received) = (self.states.clone(), self.states.clone());
        let out = move || {
            let mut carried = StatesCarried::new(states, route.upward);
            for envelope in outgoing.iter() {
                let below = below.as_ref().map(|l| (l.down(), l.up()));
                let states = carried.for_message(&envelope.message);
                let frame = Frame::Envelope {
                    envelope: Box::new(envelope),
                    below,
                    states,
                };
                wire.send(route, &frame);
            }
            wire.send(route, &Frame::Closed);
        };
        let into = move || pass_in(&inbox, &inlet, (mirror.as_ref(), &received));
        self.relays
            .push(spawn(format!("fedsim relay {link} out"), out));
        self.relays
            .push(spawn(format!("fedsim relay {link} in"), into));
    }
}

/// Which clients' states go with the messages one relay sends: up, those of every update's
/// clients, just trained, and of clients left out of a round; down, those of a model's clients that this relay has not sent
/// before. Past that, the receiving process's copy is the one the clients' training changes.
struct StatesCarried {
    states: Arc<ClientStates>,
    upward: bool,
    sent: HashSet<ClientId>,
}

impl StatesCarried {
    fn new(states: Arc<ClientStates>, upward: bool) -> Self {
        Self {
            states,
            upward,
            sent: HashSet::new(),
        }
    }

    fn for_message(&mut self, message: &Message) -> Vec<(ClientId, Tensors)> {
        let clients = match message {
            Message::Uplink(update) if self.upward => update.clients.clone(),
            // A client left out for its deadline trained all the same.
            Message::Dropped { clients, .. } if self.upward => {
                clients.iter().map(|dropped| dropped.client).collect()
            }
            Message::Downlink { clients, .. } if !self.upward => clients
                .iter()
                .copied()
                .filter(|&client| self.sent.insert(client))
                .collect(),
            _ => Vec::new(),
        };
        clients
            .into_iter()
            .filter_map(|client| {
                let state = self.states.get(client).unwrap_or_else(|error| {
                    panic!("the state of client {client} cannot be carried: {error}")
                });
                state.map(|state| (client, state))
            })
            .collect()
    }
}

/// The links whose traffic a relay reports or records.
struct Tallies {
    below: Option<Link>,
    mirror: Option<Link>,
}

/// Hands the envelopes that arrive for a link to the tier at this end, until the other end
/// closes, after recording what they carry: the traffic of a link in `mirror`, and clients'
/// states in `states`. Dropping `inlet` then closes the link for that tier.
fn pass_in(
    inbox: &flume::Receiver<Frame>,
    inlet: &Inlet,
    (mirror, states): (Option<&Link>, &ClientStates),
) {
    for frame in inbox.iter() {
        match frame {
            Frame::Envelope {
                envelope,
                below,
                states: carried,
                ..
            } => {
                if let (Some(mirror), Some((down, up))) = (mirror, below) {
                    mirror.mirror(down, up);
                }
                for (client, state) in carried {
                    states.put(client, Some(state)).unwrap_or_else(|error| {
                        panic!("the state of client {client} cannot be kept: {error}")
                    });
                }
                // A tier that has ended takes nothing more: keep reading until the close.
                let _ = inlet.pass(*envelope);
            }
            Frame::Closed => return,
        }
    }
}

fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    thread::Builder::new()
        .name(name)
        .spawn(body)
        .expect("the operating system refused to start a thread")
}

impl Connector for MpiConnector {
    fn hosts(&self, node: NodeId) -> bool {
        self.rank_of(node) == self.rank
    }

    fn carry_states(&mut self, states: &Arc<ClientStates>) {
        self.states = states.clone();
    }

    fn connect(&mut self, upper: NodeId, lower: NodeId, profiles: LinkProfiles) -> Connection {
        let link_number = self.links;
        assert!(
            link_number <= MAX_LINKS,
            "a tree has at most {MAX_LINKS} links over MPI"
        );
        self.links += 1;
        if let NodeId::Scheduler(_) = upper {
            self.schedulers_linked.insert(upper);
        }
        if let NodeId::Scheduler(_) = lower {
            // Its link below must be known: its traffic travels with this link's frames.
            assert!(
                self.schedulers_linked.contains(&lower),
                "a scheduler's link to its group is made before its link to the server"
            );
        }
        let (upper_rank, lower_rank) = (self.rank_of(upper), self.rank_of(lower));
        let here = self.rank;
        if upper_rank != here && lower_rank != here {
            let link = Link::default();
            if let NodeId::Scheduler(_) = upper {
                self.mirrors.insert(upper, link.clone());
            }
            return Connection {
                link,
                upper: None,
                lower: None,
            };
        }
        let (link, upper_end, lower_end) = Link::new(upper, lower, profiles);
        if upper_rank == here && matches!(upper, NodeId::Scheduler(_)) {
            self.below.insert(upper, link.clone());
        }
        let tier = usize::from(upper != NodeId::Server);
        let route = |peer, upward| Route {
            link: link_number,
            peer,
            tier,
            upward,
        };
        match (upper_rank == here, lower_rank == here) {
            (true, true) => Connection {
                link,
                upper: Some(upper_end),
                lower: Some(lower_end),
            },
            (true, false) => {
                let tallies = Tallies {
                    below: None,
                    mirror: self.mirrors.get(&lower).cloned(),
                };
                self.relay(lower_end, route(lower_rank, false), tallies);
                Connection {
                    link,
                    upper: Some(upper_end),
                    lower: None,
                }
            }
            (false, _) => {
                let tallies = Tallies {
                    below: self.below.get(&lower).cloned(),
                    mirror: None,
                };
                self.relay(upper_end, route(upper_rank, true), tallies);
                Connection {
                    link,
                    upper: None,
                    lower: Some(lower_end),
                }
            }
        }
    }
}
