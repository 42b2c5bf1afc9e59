//! The wire between the ranks of a run over MPI: frames that carry a link's envelopes from
//! one process to another, sent from any thread, and one thread per process that receives
//! them and hands each to its link's relay.
//!
//! A link's frames travel under the link's number as their MPI tag. The receiving thread
//! takes a link's next frame only once its relay has taken the previous one, so a frame waits
//! in the sender's `MPI_Send` meanwhile: a process that is slow to take updates slows their
//! senders, as a bounded channel does in one process, instead of piling them up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use serde::{Deserialize, Serialize};

use crate::network::{ClientId, Envelope, Tensors, Traffic};

/// The tiers whose real traffic is counted: links from the server, links from schedulers.
pub(super) const TIERS: [&str; 2] = ["server", "scheduler"];

/// The highest link number: MPI guarantees tags up to 32767.
pub(super) const MAX_LINKS: u32 = 32_767;

/// Which way a link's frames from this end travel, for sending and counting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Route {
    /// The link's number, its frames' tag.
    pub link: u32,
    /// The rank at the other end of the link.
    pub peer: usize,
    /// Index in [`TIERS`] of the link's tier.
    pub tier: usize,
    /// Whether frames from this end travel up (towards the server).
    pub upward: bool,
}

/// What crosses between two ranks on one link.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Frame {
    /// An envelope, with what the sending process records beside it.
    Envelope {
        /// What the tier sent (boxed: most frames are envelopes, and the enum stays small).
        envelope: Box<Envelope>,
        /// Where the sender runs the lower end's tier and that tier is a scheduler: the
        /// traffic (down, up) of the scheduler's own link below it at the time of sending, from
        /// which the server's process records that tier's traffic.
        below: Option<(Traffic, Traffic)>,
        /// The states of the clients the message concerns, as the sending process holds them:
        /// going up, those of an update's or a drop notice's clients; going down, those of a
        /// model's clients that the receiving process has not been sent yet (after a resume,
        /// the checkpoint's).
        states: Vec<(ClientId, Tensors)>,
    },
    /// The sender's end of the link has closed: its tier has ended.
    Closed,
}

/// Real MPI traffic a process sent, per tier and direction: messages and bytes.
#[derive(Debug, Default)]
pub(super) struct WireCounts([[(AtomicU64, AtomicU64); 2]; TIERS.len()]);

impl WireCounts {
    fn add(&self, route: Route, bytes: usize) {
        let (messages, sent) = &self.0[route.tier][usize::from(route.upward)];
        messages.fetch_add(1, Ordering::Relaxed);
        sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The counts, per tier in [`TIERS`] order: messages down, bytes down, messages up, bytes
    /// up.
    pub fn to_array(&self) -> [u64; 4 * TIERS.len()] {
        let mut out = [0; 4 * TIERS.len()];
        for (i, (messages, bytes)) in self.0.iter().flatten().enumerate() {
            out[2 * i] = messages.load(Ordering::Relaxed);
            out[2 * i + 1] = bytes.load(Ordering::Relaxed);
        }
        out
    }
}

/// A link this process receives on: the rank it hears from, and where its frames go.
struct Inbox {
    peer: usize,
    frames: flume::Sender<Frame>,
}

/// One process's side of the wire, for one tree.
pub(super) struct Wire {
    inboxes: Mutex<HashMap<u32, Inbox>>,
    counts: WireCounts,
    stopping: AtomicBool,
}

impl Wire {
    /// A wire with no links yet.
    pub fn new() -> Arc<Wire> {
        Arc::new(Wire {
            inboxes: Mutex::new(HashMap::new()),
            counts: WireCounts::default(),
            stopping: AtomicBool::new(false),
        })
    }

    /// What this process has sent so far.
    pub fn counts(&self) -> &WireCounts {
        &self.counts
    }

    /// The frames that `peer` sends on `link`, one at a time.
    pub fn inbox(&self, link: u32, peer: usize) -> flume::Receiver<Frame> {
        let (frames, receiver) = flume::bounded(1);
        let inbox = Inbox { peer, frames };
        let mut inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(inboxes.insert(link, inbox).is_none(), "one inbox per link");
        receiver
    }

    /// Sends `frame` along `route`, blocking until the other process takes it.
    pub fn send(&self, route: Route, frame: &Frame) {
        let bytes = postcard::to_stdvec(frame).expect("frames always serialise");
        self.counts.add(route, bytes.len());
        let rank = i32::try_from(route.peer).expect("ranks fit in an i32");
        let tag = i32::try_from(route.link).expect("link numbers fit in a tag");
        SimpleCommunicator::world()
            .process_at_rank(rank)
            .send_with_tag(&bytes[..], tag);
    }

    /// Receives frames and hands each to its link until [`Wire::stop`]. Polls, sleeping a
    /// little while nothing arrives, rather than blocking in MPI: a blocking receive spins a
    /// core in most MPI libraries, which the trainers need.
    pub fn receive(&self) {
        let mut idle = 0u32;
        while !self.stopping.load(Ordering::Acquire) {
            if self.receive_ready() {
                idle = 0;
            } else if idle < 64 {
                idle += 1;
                thread::yield_now();
            } else {
                thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Takes the next frame of every link whose relay has taken the previous one; whether any
    /// arrived. A link's inbox is dropped with its last frame, `Closed`.
    fn receive_ready(&self) -> bool {
        let world = SimpleCommunicator::world();
        let mut inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut received = false;
        inboxes.retain(|&link, inbox| {
            if inbox.frames.is_full() {
                return true;
            }
            let rank = i32::try_from(inbox.peer).expect("ranks fit in an i32");
            let tag = i32::try_from(link).expect("link numbers fit in a tag");
            let Some(probed) = world
                .process_at_rank(rank)
                .immediate_matched_probe_with_tag(tag)
            else {
                return true;
            };
            received = true;
            let (bytes, _) = probed.matched_receive_vec::<u8>();
            let frame: Frame = postcard::from_bytes(&bytes).unwrap_or_else(|e| {
                panic!("a frame from rank {rank} is not one this fedsim sends ({e}): do all ranks run the same fedsim?")
            });
            let closed = matches!(frame, Frame::Closed);
            // A relay takes every frame up to `Closed`, and there is room for this one.
            let _ = inbox.frames.try_send(frame);
            !closed
        });
        received
    }

    /// Ends [`Wire::receive`]: every link has closed at both ends.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::network::{DropReason, Dropped, Message, NodeId, Update};

    /// Every message the protocol has, as a frame, decodes to what was encoded.
    #[test]
    fn every_message_crosses_the_wire_whole() {
        let tensors = Tensors::new().with("control", vec![0.5, -1.0]);
        let mut failed = Dropped::new(4, DropReason::Failed);
        failed.error = Some("out of memory".to_string());
        let messages = [
            Message::SetUp {
                clients: vec![crate::network::ClientInfo {
                    id: 3,
                    num_samples: 600,
                }],
            },
            Message::Downlink {
                round: 2,
                edge_round: 1,
                clients: vec![3, 5],
                model: Arc::from(vec![1.0f32, 2.0]),
                extras: tensors.clone(),
                deadline: Some(4.5),
            },
            Message::Uplink(Update {
                round: 2,
                clients: vec![3],
                num_samples: 600,
                train_loss: 0.25,
                steps: 19,
                params: vec![3.0, 4.0],
                extras: tensors.clone(),
                encoded: Vec::new(),
            }),
            Message::Dropped {
                round: 2,
                clients: vec![Dropped::new(7, DropReason::Dropout), failed],
            },
            Message::ClientFailed {
                round: 2,
                client: 4,
                path: vec![NodeId::Scheduler(1), NodeId::Group(1)],
                error: "panicked".to_string(),
            },
            Message::Probe {
                round: 2,
                clients: vec![3],
                model: Arc::from(vec![1.0f32, 2.0]),
            },
            Message::Probed {
                round: 2,
                client: 3,
                loss: 0.1 + 0.2,
            },
            Message::Exit,
            Message::ExitAck,
        ];
        for message in messages {
            let frame = Frame::Envelope {
                envelope: Box::new(Envelope {
                    from: NodeId::Group(1),
                    at: 1.5,
                    message: message.clone(),
                }),
                below: Some((Traffic::default(), Traffic::default())),
                states: vec![(3, tensors.clone())],
            };
            let bytes = postcard::to_stdvec(&frame).unwrap();
            let Frame::Envelope {
                envelope, states, ..
            } = postcard::from_bytes(&bytes).unwrap()
            else {
                panic!("an envelope decodes as an envelope");
            };
            assert_eq!(format!("{:?}", envelope.message), format!("{message:?}"));
            assert_eq!(states, [(3, tensors.clone())]);
        }
    }
}
