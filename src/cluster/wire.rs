//! The wire between the ranks of a run over MPI: frames that carry a link's envelopes from
//! one process to another, sent from any thread, and one thread per process that receives
//! them and hands each to its link's relay.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use mpi::point_to_point::{Destination, MatchedReceiveVec, Message as Probed, Source, Status};
use mpi::topology::{Communicator, SimpleCommunicator};
use serde::{Deserialize, Serialize};

use crate::network::{ClientId, Envelope, Tensors, Traffic};

/// The MPI tag of every frame: a frame names its own link.
const FRAME_TAG: i32 = 17;

/// Which way a frame travels, and the tier of its link, for counting real traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Route {
    /// The rank at the other end of the link.
    pub peer: usize,
    /// Index of the link's tier: 0 for links from the server, 1 for links from schedulers.
    pub tier: usize,
    /// Whether frames from this end travel up (towards the server).
    pub upward: bool,
}

/// What crosses between two ranks.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Frame {
    /// An envelope on link `link`, with, where the sender runs the lower end's tier and that
    /// tier is a scheduler, the traffic of the scheduler's own link below it (down, up) at
    /// the time of sending: the server's process records that tier's traffic from it.
    Envelope {
        /// The link, numbered in the order every process makes the tree's links.
        link: u32,
        /// What the tier sent.
        envelope: Envelope,
        /// The traffic below the sending scheduler, if any.
        below: Option<(Traffic, Traffic)>,
        /// The states of the clients the message concerns, as the sending process holds them:
        /// with an update, those its training left; with a model going down, those the
        /// receiving process has not been sent yet (after a resume, the checkpoint's).
        states: Vec<(ClientId, Tensors)>,
    },
    /// The sender's end of `link` has closed: its tier has ended.
    Closed {
        /// The link.
        link: u32,
    },
}

/// Real MPI traffic a process sent, by tier (server, scheduler) and direction (down, up).
#[derive(Debug, Default)]
pub(super) struct WireCounts([[(AtomicU64, AtomicU64); 2]; 2]);

impl WireCounts {
    fn add(&self, route: Route, bytes: usize) {
        let (messages, sent) = &self.0[route.tier][usize::from(route.upward)];
        messages.fetch_add(1, Ordering::Relaxed);
        sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The counts as eight numbers: per tier, per direction, messages then bytes.
    pub fn to_array(&self) -> [u64; 8] {
        let mut out = [0; 8];
        for (i, (messages, bytes)) in self.0.iter().flatten().enumerate() {
            out[2 * i] = messages.load(Ordering::Relaxed);
            out[2 * i + 1] = bytes.load(Ordering::Relaxed);
        }
        out
    }
}

/// The frames of each link that have arrived, waiting for the link's relay. A link's channel
/// is made by whichever comes first: its relay, or its first frame (a faster process may send
/// before this one has made the link).
type Inboxes = HashMap<u32, (flume::Sender<Frame>, Option<flume::Receiver<Frame>>)>;

/// One process's side of the wire.
pub(super) struct Wire {
    inboxes: Mutex<Inboxes>,
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

    /// The frames that arrive for `link`.
    pub fn inbox(&self, link: u32) -> flume::Receiver<Frame> {
        let mut inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let (_, receiver) = inboxes.entry(link).or_insert_with(channel);
        receiver
            .take()
            .expect("each link's relay takes its inbox once")
    }

    /// Sends `frame` along `route`, blocking until MPI has taken it.
    pub fn send(&self, route: Route, frame: &Frame) {
        let bytes = postcard::to_stdvec(frame).expect("frames always serialise");
        self.counts.add(route, bytes.len());
        let rank = i32::try_from(route.peer).expect("ranks fit in an i32");
        SimpleCommunicator::world()
            .process_at_rank(rank)
            .send_with_tag(&bytes[..], FRAME_TAG);
    }

    /// Receives frames and hands each to its link until [`Wire::stop`]. Polls, sleeping a
    /// little while nothing arrives, rather than blocking in MPI: a blocking receive spins a
    /// core in most MPI libraries, which the trainers need.
    pub fn receive(&self) {
        let world = SimpleCommunicator::world();
        let mut idle = 0u32;
        while !self.stopping.load(Ordering::Acquire) {
            match world
                .any_process()
                .immediate_matched_probe_with_tag(FRAME_TAG)
            {
                Some(probed) => {
                    idle = 0;
                    self.deliver(probed);
                }
                None if idle < 64 => {
                    idle += 1;
                    thread::yield_now();
                }
                None => thread::sleep(Duration::from_micros(200)),
            }
        }
    }

    fn deliver(&self, probed: (Probed, Status)) {
        let (bytes, status) = probed.matched_receive_vec::<u8>();
        let frame: Frame = postcard::from_bytes(&bytes).unwrap_or_else(|e| {
            panic!(
                "a frame from rank {} is not one fedsim sends ({e}): are all ranks the same fedsim?",
                status.source_rank()
            )
        });
        let link = match &frame {
            Frame::Envelope { link, .. } | Frame::Closed { link } => *link,
        };
        let mut inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let (sender, _) = inboxes.entry(link).or_insert_with(channel);
        // A relay that has ended no longer reads its inbox; what still arrives is dropped.
        let _ = sender.send(frame);
    }

    /// Ends [`Wire::receive`]: every link has closed at both ends.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }
}

fn channel() -> (flume::Sender<Frame>, Option<flume::Receiver<Frame>>) {
    let (sender, receiver) = flume::unbounded();
    (sender, Some(receiver))
}
