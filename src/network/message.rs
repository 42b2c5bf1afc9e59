//! The typed messages of the federation protocol, and the envelope they travel in.

use std::fmt;
use std::sync::Arc;

use super::Tensors;

/// A client's id: its index in the partition.
pub type ClientId = usize;

/// Bytes every message is charged for its header: code, sender, round and a count or id,
/// four bytes each, as a compact wire format would carry them.
pub const HEADER_BYTES: u64 = 16;

/// A place in the federation tree: who sent a message, where a failure happened.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum NodeId {
    /// The upper server.
    Server,
    /// Middle scheduler `i` (an edge server).
    Scheduler(usize),
    /// Lower client group `i`; in a hierarchy, group `i` sits under scheduler `i`.
    Group(usize),
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeId::Server => write!(f, "server"),
            NodeId::Scheduler(i) => write!(f, "scheduler {i}"),
            NodeId::Group(i) => write!(f, "client group {i}"),
        }
    }
}

/// A client that a client group hosts, as announced at set-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClientInfo {
    /// The client's id.
    pub id: ClientId,
    /// Number of training samples the client holds.
    pub num_samples: usize,
}

impl ClientInfo {
    /// Where `client` is in `clients` (sorted by id): found at once where the ids run from 0
    /// without a gap, as a run's do, so that a round's look-ups do not grow with the
    /// federation; by binary search otherwise.
    pub fn position_in(clients: &[ClientInfo], client: ClientId) -> Option<usize> {
        match clients.get(client) {
            Some(info) if info.id == client => Some(client),
            _ => clients.binary_search_by_key(&client, |c| c.id).ok(),
        }
    }
}

/// A trained model on its way up: one client's, or a scheduler's partial aggregate of several.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Update {
    /// Round the update belongs to.
    pub round: u32,
    /// The clients whose training it holds, in id order (one, unless pre-aggregated).
    pub clients: Vec<ClientId>,
    /// Samples behind the update, FedAvg's weight.
    pub num_samples: usize,
    /// Mean local training loss over those samples.
    pub train_loss: f64,
    /// Local SGD steps taken (summed over the clients of a partial aggregate).
    pub steps: u32,
    /// Model parameters, laid out like the global model; empty while the update travels
    /// compressed.
    pub params: Vec<f32>,
    /// Tensors the algorithm sends up beside the model (SCAFFOLD's control variate change).
    pub extras: Tensors,
    /// The client's change to the model it was sent, as the run's compressor encoded it, in
    /// place of `params` (`compression` in the experiment file): what crosses the links, and
    /// what they count. Empty for an update sent whole; the server decodes it into `params`.
    #[serde(default)]
    pub encoded: Vec<u8>,
}

/// Why a sampled client's work is missing from a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The client was unavailable this round (the per-round dropout draw).
    Dropout,
    /// The client's update would have arrived after the round's deadline.
    Deadline,
    /// The client's training failed, and the run is set to go on without it.
    Failed,
    /// The client went offline (as `availability.online` says) before its training ended.
    Offline,
}

/// A sampled client left out of a round, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dropped {
    /// The client.
    pub client: ClientId,
    /// Why.
    pub reason: DropReason,
    /// What went wrong, for a client that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Dropped {
    /// `client`, left out for `reason` (not a failure: failures carry their error).
    pub fn new(client: ClientId, reason: DropReason) -> Self {
        Self {
            client,
            reason,
            error: None,
        }
    }
}

/// One message on a link. Downward: `Downlink`, `Probe`, `Exit`. Upward: `SetUp`, `Uplink`,
/// `Probed`, `Dropped`, `ClientFailed`, `ExitAck`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Message {
    /// A subtree announces the clients it hosts; sent once, before any round.
    SetUp {
        /// The hosted clients, in id order.
        clients: Vec<ClientInfo>,
    },
    /// The model for the listed clients to train. To a client group it lists one client (each
    /// client downloads its own copy); to a scheduler, all of its sampled clients (one copy).
    /// The model is shared between the round's downlinks, not copied.
    Downlink {
        /// The round.
        round: u32,
        /// The edge round within it (0 unless a scheduler runs several per round).
        edge_round: u32,
        /// The clients that are to train.
        clients: Vec<ClientId>,
        /// The model's parameters.
        model: Arc<[f32]>,
        /// Tensors the algorithm sends down beside the model (SCAFFOLD's control variate).
        extras: Tensors,
        /// Simulated time by which the round's updates must reach the server, if any.
        deadline: Option<f64>,
    },
    /// A trained model.
    Uplink(Update),
    /// Sampled clients that will not contribute to this round.
    Dropped {
        /// The round.
        round: u32,
        /// Who, and why.
        #[serde(with = "every_field")]
        clients: Vec<Dropped>,
    },
    /// A client's training failed.
    ClientFailed {
        /// The round in which it failed.
        round: u32,
        /// The client.
        client: ClientId,
        /// Where it ran, from the top of the tree down (each tier that forwards the message
        /// adds itself in front).
        path: Vec<NodeId>,
        /// What went wrong (an error or a panic message).
        error: String,
    },
    /// The model for the listed clients to measure their training loss on, before the server
    /// selects who trains (Power-of-Choice's probe). Addressed as a `Downlink` is.
    Probe {
        /// The round.
        round: u32,
        /// The clients to measure.
        clients: Vec<ClientId>,
        /// The model's parameters.
        model: Arc<[f32]>,
    },
    /// A probed client's mean training loss on the model it was sent.
    Probed {
        /// The round.
        round: u32,
        /// The client.
        client: ClientId,
        /// Its mean loss.
        loss: f64,
    },
    /// Stop after the work in flight; answer with `ExitAck`.
    Exit,
    /// The receiver of `Exit` and everything below it have stopped.
    ExitAck,
}

impl Message {
    /// The message's code, as protocol errors name it.
    pub fn code(&self) -> &'static str {
        match self {
            Message::SetUp { .. } => "SetUp",
            Message::Downlink { .. } => "Downlink",
            Message::Uplink(_) => "Uplink",
            Message::Dropped { .. } => "Dropped",
            Message::ClientFailed { .. } => "ClientFailed",
            Message::Probe { .. } => "Probe",
            Message::Probed { .. } => "Probed",
            Message::Exit => "Exit",
            Message::ExitAck => "ExitAck",
        }
    }

    /// Bytes this message would take on a network: the header plus its payload (four bytes
    /// per parameter or client id, eight per time or id-and-reason pair, sixteen per sample
    /// count, step count and loss, one per byte of text, and four per extra tensor's name plus
    /// four per value). A `Dropped` never carries error texts: failed
    /// clients travel as `ClientFailed`, and only the server turns them into dropped ones.
    pub fn wire_bytes(&self) -> u64 {
        let payload = match self {
            Message::SetUp { clients } => 16 * clients.len(),
            Message::Downlink {
                clients,
                model,
                extras,
                ..
            } => 8 + 4 * clients.len() + 4 * model.len() + extras.wire_bytes(),
            Message::Uplink(update) => {
                16 + 4 * update.clients.len()
                    + 4 * update.params.len()
                    + update.encoded.len()
                    + update.extras.wire_bytes()
            }
            Message::Dropped { clients, .. } => 8 * clients.len(),
            Message::ClientFailed { path, error, .. } => 4 + 4 * path.len() + error.len(),
            Message::Probe { clients, model, .. } => 4 + 4 * clients.len() + 4 * model.len(),
            Message::Probed { .. } => 4 + 4 + 8,
            Message::Exit | Message::ExitAck => 0,
        };
        HEADER_BYTES + payload as u64
    }

    /// The one client this message concerns, if it concerns exactly one: which client link
    /// it crosses.
    pub fn single_client(&self) -> Option<ClientId> {
        match self {
            Message::Downlink { clients, .. }
            | Message::Probe { clients, .. }
            | Message::Uplink(Update { clients, .. })
                if clients.len() == 1 =>
            {
                Some(clients[0])
            }
            Message::Dropped { clients, .. } if clients.len() == 1 => Some(clients[0].client),
            Message::ClientFailed { client, .. } | Message::Probed { client, .. } => Some(*client),
            _ => None,
        }
    }
}

/// `Dropped` entries with every field written, even an absent error: `Dropped` leaves that out
/// of the records' JSON, and formats that are not self-describing (the wire between the
/// processes of a run over MPI) cannot read a field that may be missing.
mod every_field {
    use super::{ClientId, DropReason, Dropped};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    type Fields = (ClientId, DropReason, Option<String>);

    pub fn serialize<S: Serializer>(dropped: &[Dropped], to: S) -> Result<S::Ok, S::Error> {
        let fields: Vec<Fields> = dropped
            .iter()
            .map(|d| (d.client, d.reason, d.error.clone()))
            .collect();
        fields.serialize(to)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Vec<Dropped>, D::Error> {
        let fields = Vec::<Fields>::deserialize(from)?;
        Ok(fields
            .into_iter()
            .map(|(client, reason, error)| Dropped {
                client,
                reason,
                error,
            })
            .collect())
    }
}

/// A message as it arrives: who sent it and when, on the simulated clock. (Serialisable, to
/// cross between the processes of a run over MPI.)
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Envelope {
    /// The sender.
    pub from: NodeId,
    /// Simulated arrival time, in seconds since the run started.
    pub at: f64,
    /// The message.
    pub message: Message,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_downlink_is_charged_for_its_model_and_client_ids() {
        let message = Message::Downlink {
            round: 1,
            edge_round: 0,
            clients: vec![3, 4],
            model: Arc::from(vec![0.0f32; 1000]),
            extras: Tensors::new().with("control", vec![0.0; 1000]),
            deadline: None,
        };
        assert_eq!(message.wire_bytes(), HEADER_BYTES + 8 + 8 + 4000 + 4004);
    }

    #[test]
    fn node_ids_name_their_place() {
        assert_eq!(NodeId::Scheduler(2).to_string(), "scheduler 2");
        assert_eq!(NodeId::Group(0).to_string(), "client group 0");
    }
}
