//! A two-way link between two tiers: a pair of flume channels that count what they carry and
//! stamp each message with its simulated arrival time.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::message::HEADER_BYTES;
use super::{ClientId, Envelope, Message, NodeId};

/// Latency and bandwidth of a simulated connection. Transfers do not slow each other down:
/// each message costs `latency + size / bandwidth`, as if every connection were its own.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkProfile {
    /// One-way latency in milliseconds.
    #[serde(default)]
    pub latency_ms: f64,
    /// Bandwidth in megabits per second; absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
}

impl LinkProfile {
    /// Simulated seconds to move `bytes` across the link.
    pub fn transfer_seconds(&self, bytes: u64) -> f64 {
        let serialisation = self
            .bandwidth_mbps
            .map_or(0.0, |mbps| bytes as f64 * 8.0 / (mbps * 1e6));
        self.latency_ms / 1000.0 + serialisation
    }
}

/// Messages on their way up that a channel holds before its sender waits. Updates are large,
/// and a tier that produces them faster than its parent folds them (clients that answer at
/// once, many groups under one server) would otherwise pile them up in memory; a tier that
/// waits for its parent stops taking results from below, and its trainer's workers then wait
/// in turn. Every tier keeps receiving from below for as long as a round can send it
/// anything, so waiting never deadlocks. Downward messages share one model and never wait.
pub const UPWARD_BACKLOG: usize = 1;

/// The profiles of a link: one for the link, and per-client ones where the link stands for
/// many client connections (between a client group and its parent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkProfiles {
    /// Applies to every message without a client-specific profile.
    pub default: LinkProfile,
    /// Applies to messages that concern exactly this client.
    pub per_client: HashMap<ClientId, LinkProfile>,
}

impl LinkProfiles {
    /// The profile a message crosses the link with.
    pub fn for_message(&self, message: &Message) -> &LinkProfile {
        match message.single_client() {
            Some(client) => self.for_client(client),
            None => &self.default,
        }
    }

    /// The profile of messages that concern `client` alone.
    pub fn for_client(&self, client: ClientId) -> &LinkProfile {
        self.per_client.get(&client).unwrap_or(&self.default)
    }
}

/// Messages and bytes sent in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Messages sent.
    pub messages: u64,
    /// Bytes sent, as [`Message::wire_bytes`] counts them.
    pub bytes: u64,
}

impl std::ops::Sub for Traffic {
    type Output = Traffic;

    fn sub(self, earlier: Traffic) -> Traffic {
        Traffic {
            messages: self.messages - earlier.messages,
            bytes: self.bytes - earlier.bytes,
        }
    }
}

impl std::ops::Add for Traffic {
    type Output = Traffic;

    fn add(self, other: Traffic) -> Traffic {
        Traffic {
            messages: self.messages + other.messages,
            bytes: self.bytes + other.bytes,
        }
    }
}

#[derive(Debug, Default)]
struct Counter {
    messages: AtomicU64,
    bytes: AtomicU64,
}

impl Counter {
    fn add(&self, bytes: u64) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn read(&self) -> Traffic {
        Traffic {
            messages: self.messages.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    fn set(&self, traffic: Traffic) {
        self.messages.store(traffic.messages, Ordering::Relaxed);
        self.bytes.store(traffic.bytes, Ordering::Relaxed);
    }
}

/// The traffic counters of a link, readable from anywhere while the link is in use.
#[derive(Debug, Clone, Default)]
pub struct Link {
    down: Arc<Counter>,
    up: Arc<Counter>,
}

impl Link {
    /// A new link between `upper` (nearer the server) and `lower`, returned with the ends each
    /// of them holds.
    pub fn new(upper: NodeId, lower: NodeId, profiles: LinkProfiles) -> (Link, LinkEnd, LinkEnd) {
        let link = Link::default();
        let profiles = Arc::new(profiles);
        let (down_tx, down_rx) = flume::unbounded();
        let (up_tx, up_rx) = flume::bounded(UPWARD_BACKLOG);
        let upper_end = LinkEnd {
            owner: upper,
            tx: down_tx,
            rx: up_rx,
            sent: link.down.clone(),
            received: link.up.clone(),
            profiles: profiles.clone(),
        };
        let lower_end = LinkEnd {
            owner: lower,
            tx: up_tx,
            rx: down_rx,
            sent: link.up.clone(),
            received: link.down.clone(),
            profiles,
        };
        (link, upper_end, lower_end)
    }

    /// Everything sent downward (towards the clients) so far.
    pub fn down(&self) -> Traffic {
        self.down.read()
    }

    /// Everything sent upward (towards the server) so far.
    pub fn up(&self) -> Traffic {
        self.up.read()
    }

    /// Sets the counts to those of a link whose two ends run in another process, as that
    /// process last reported them, so that this process's [`Link::down`] and [`Link::up`]
    /// read what it cannot count itself.
    pub fn mirror(&self, down: Traffic, up: Traffic) {
        self.down.set(down);
        self.up.set(up);
    }
}

/// One end of a [`Link`]: sends to and receives from the other end.
#[derive(Debug)]
pub struct LinkEnd {
    owner: NodeId,
    tx: flume::Sender<Envelope>,
    rx: flume::Receiver<Envelope>,
    sent: Arc<Counter>,
    /// What the other end sends, for exchanges played out at this end.
    received: Arc<Counter>,
    profiles: Arc<LinkProfiles>,
}

/// The other end of a link has gone: its thread ended or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the other end of the link has closed")]
pub struct Disconnected;

impl LinkEnd {
    /// Sends `message` at simulated time `now`, counting it; it arrives after the link's
    /// transfer time.
    pub fn send(&self, message: Message, now: f64) -> Result<(), Disconnected> {
        let bytes = message.wire_bytes();
        let at = now + self.profiles.for_message(&message).transfer_seconds(bytes);
        self.sent.add(bytes);
        let envelope = Envelope {
            from: self.owner,
            at,
            message,
        };
        self.tx.send(envelope).map_err(|_| Disconnected)
    }

    /// Counts a message of `sent` payload bytes from this end to `client` and one of
    /// `received` bytes back, each with its header: an exchange the simulation plays out here
    /// rather than sends (secure aggregation's key exchange and unmasking). Returns the
    /// simulated seconds each takes across the link.
    pub fn count_played_out(&self, client: ClientId, sent: u64, received: u64) -> (f64, f64) {
        let profile = self.profiles.for_client(client);
        let (sent, received) = (HEADER_BYTES + sent, HEADER_BYTES + received);
        self.sent.add(sent);
        self.received.add(received);
        (
            profile.transfer_seconds(sent),
            profile.transfer_seconds(received),
        )
    }

    /// Waits for the next message.
    pub fn recv(&self) -> Result<Envelope, Disconnected> {
        self.rx.recv().map_err(|_| Disconnected)
    }

    /// The receiving side, for waiting on several channels at once.
    pub fn receiver(&self) -> &flume::Receiver<Envelope> {
        &self.rx
    }

    /// Splits the end into what it passes messages on with and what it receives them on, for
    /// a relay that carries each direction on its own thread to the other end's process.
    pub fn into_halves(self) -> (Inlet, flume::Receiver<Envelope>) {
        let inlet = Inlet {
            tx: self.tx,
            sent: self.sent,
        };
        (inlet, self.rx)
    }
}

/// The sending half of a [`LinkEnd`] whose tier runs in another process: it passes on
/// envelopes that tier sent (already stamped with their sender and arrival time) and counts
/// them as sent on this link. Dropping it closes the link, as the tier's end would.
#[derive(Debug)]
pub struct Inlet {
    tx: flume::Sender<Envelope>,
    sent: Arc<Counter>,
}

impl Inlet {
    /// Passes `envelope` on to the tier at this end of the link.
    pub fn pass(&self, envelope: Envelope) -> Result<(), Disconnected> {
        self.sent.add(envelope.message.wire_bytes());
        self.tx.send(envelope).map_err(|_| Disconnected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain_link() -> (Link, LinkEnd, LinkEnd) {
        Link::new(NodeId::Server, NodeId::Group(0), LinkProfiles::default())
    }

    #[test]
    fn each_direction_counts_its_own_messages_and_bytes() {
        let (link, upper, lower) = plain_link();
        upper.send(Message::Exit, 0.0).unwrap();
        upper.send(Message::Exit, 0.0).unwrap();
        lower.send(Message::ExitAck, 0.0).unwrap();
        assert_eq!(upper.recv().unwrap().from, NodeId::Group(0));
        let received = lower.recv().unwrap();
        assert!(matches!(received.message, Message::Exit));
        assert_eq!(received.from, NodeId::Server);
        assert_eq!(link.down().messages, 2);
        assert_eq!(link.down().bytes, 2 * Message::Exit.wire_bytes());
        assert_eq!(link.up().messages, 1);
    }

    #[test]
    fn halves_pass_stamped_envelopes_on_and_count_them() {
        let (link, upper, lower) = plain_link();
        let (inlet, outgoing) = lower.into_halves();
        upper.send(Message::Exit, 1.5).unwrap();
        assert!(matches!(outgoing.recv().unwrap().message, Message::Exit));
        let stamped = Envelope {
            from: NodeId::Group(0),
            at: 7.25,
            message: Message::ExitAck,
        };
        inlet.pass(stamped).unwrap();
        let received = upper.recv().unwrap();
        assert_eq!((received.from, received.at), (NodeId::Group(0), 7.25));
        assert_eq!(link.up().messages, 1);
        drop(inlet);
        assert_eq!(upper.recv().unwrap_err(), Disconnected);
        let counted = Traffic {
            messages: 3,
            bytes: 48,
        };
        link.mirror(counted, Traffic::default());
        assert_eq!((link.down(), link.up()), (counted, Traffic::default()));
    }

    #[test]
    fn a_dropped_end_is_reported_not_waited_for() {
        let (_link, upper, lower) = plain_link();
        drop(lower);
        assert_eq!(upper.recv().unwrap_err(), Disconnected);
    }

    #[test]
    fn arrival_time_adds_latency_and_serialisation() {
        let slow = LinkProfile {
            latency_ms: 20.0,
            bandwidth_mbps: Some(8.0),
        };
        let profiles = LinkProfiles {
            default: LinkProfile::default(),
            per_client: HashMap::from([(7, slow)]),
        };
        let (_link, upper, lower) = Link::new(NodeId::Server, NodeId::Group(0), profiles);
        let downlink = |client| Message::Downlink {
            round: 1,
            edge_round: 0,
            clients: vec![client],
            model: Arc::from(vec![0.0f32; 249_993]),
            extras: Default::default(),
            deadline: None,
        };
        // 16 + 8 + 4 + 4 * 249,993 = 1,000,000 bytes: one second at 8 Mbit/s, plus 20 ms.
        upper.send(downlink(7), 10.0).unwrap();
        upper.send(downlink(8), 10.0).unwrap();
        assert!((lower.recv().unwrap().at - 11.02).abs() < 1e-9);
        assert_eq!(lower.recv().unwrap().at, 10.0);
    }
}
