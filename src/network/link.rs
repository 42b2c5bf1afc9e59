//! A two-way link between two tiers: a pair of flume channels that count what they carry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Message;

/// Messages and bytes sent in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
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

#[derive(Debug, Default)]
struct Counter {
    messages: AtomicU64,
    bytes: AtomicU64,
}

impl Counter {
    fn add(&self, message: &Message) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes
            .fetch_add(message.wire_bytes(), Ordering::Relaxed);
    }

    fn read(&self) -> Traffic {
        Traffic {
            messages: self.messages.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// The traffic counters of a link, readable from anywhere while the link is in use.
#[derive(Debug, Clone, Default)]
pub struct Link {
    down: Arc<Counter>,
    up: Arc<Counter>,
}

impl Link {
    /// A new link, returned with its upper end (the side nearer the server) and its lower end.
    pub fn new() -> (Link, LinkEnd, LinkEnd) {
        let link = Link::default();
        let (down_tx, down_rx) = flume::unbounded();
        let (up_tx, up_rx) = flume::unbounded();
        let upper = LinkEnd {
            tx: down_tx,
            rx: up_rx,
            sent: link.down.clone(),
        };
        let lower = LinkEnd {
            tx: up_tx,
            rx: down_rx,
            sent: link.up.clone(),
        };
        (link, upper, lower)
    }

    /// Everything sent downward (towards the clients) so far.
    pub fn down(&self) -> Traffic {
        self.down.read()
    }

    /// Everything sent upward (towards the server) so far.
    pub fn up(&self) -> Traffic {
        self.up.read()
    }
}

/// One end of a [`Link`]: sends to and receives from the other end.
#[derive(Debug)]
pub struct LinkEnd {
    tx: flume::Sender<Message>,
    rx: flume::Receiver<Message>,
    sent: Arc<Counter>,
}

/// The other end of a link has gone: its thread ended or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the other end of the link has closed")]
pub struct Disconnected;

impl LinkEnd {
    /// Sends a message, counting it.
    pub fn send(&self, message: Message) -> Result<(), Disconnected> {
        self.sent.add(&message);
        self.tx.send(message).map_err(|_| Disconnected)
    }

    /// Waits for the next message.
    pub fn recv(&self) -> Result<Message, Disconnected> {
        self.rx.recv().map_err(|_| Disconnected)
    }

    /// The receiving side, for waiting on several channels at once.
    pub fn receiver(&self) -> &flume::Receiver<Message> {
        &self.rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_direction_counts_its_own_messages_and_bytes() {
        let (link, upper, lower) = Link::new();
        upper.send(Message::Exit).unwrap();
        upper.send(Message::Exit).unwrap();
        lower.send(Message::ExitAck).unwrap();
        assert!(matches!(lower.recv(), Ok(Message::Exit)));
        assert_eq!(link.down().messages, 2);
        assert_eq!(link.down().bytes, 2 * Message::Exit.wire_bytes());
        assert_eq!(link.up().messages, 1);
    }

    #[test]
    fn a_dropped_end_is_reported_not_waited_for() {
        let (_link, upper, lower) = Link::new();
        drop(lower);
        assert_eq!(upper.recv().unwrap_err(), Disconnected);
    }
}
