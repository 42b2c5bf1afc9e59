//! The typed messages of the federation protocol.

use std::sync::Arc;

/// A client's id: its index in the partition.
pub type ClientId = usize;

/// Bytes every message is charged for its header: code, sender, round and client id,
/// four bytes each, as a compact wire format would carry them.
pub const HEADER_BYTES: u64 = 16;

/// A client that a client group hosts, as it announces it at set-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientInfo {
    /// The client's id.
    pub id: ClientId,
    /// Number of training samples the client holds.
    pub num_samples: usize,
}

/// A client's result of one round of local training.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// Round the update belongs to.
    pub round: u32,
    /// The client that trained.
    pub client: ClientId,
    /// Samples the client trained on, FedAvg's weight.
    pub num_samples: usize,
    /// Mean training loss over the client's local steps.
    pub train_loss: f64,
    /// The client's model after local training, laid out like the global model.
    pub params: Vec<f32>,
}

/// One message on a link. Downward: `Downlink`, `Exit`. Upward: `SetUp`, `Uplink`,
/// `ClientFailed`, `ExitAck`.
#[derive(Debug, Clone)]
pub enum Message {
    /// A client group announces the clients it hosts; sent once, before any round.
    SetUp {
        /// The hosted clients, in id order.
        clients: Vec<ClientInfo>,
    },
    /// The global model for one sampled client. The model is shared, not copied, between the
    /// downlinks of a round.
    Downlink {
        /// The round that starts.
        round: u32,
        /// The client that is to train.
        client: ClientId,
        /// The global model's parameters.
        model: Arc<[f32]>,
    },
    /// A client's trained model.
    Uplink(Update),
    /// A client's training failed; the message says how.
    ClientFailed {
        /// The round in which it failed.
        round: u32,
        /// The client.
        client: ClientId,
        /// What went wrong (an error or a panic message).
        error: String,
    },
    /// Stop after the work in flight; answer with `ExitAck`.
    Exit,
    /// The receiver of `Exit` has stopped and holds no more work.
    ExitAck,
}

impl Message {
    /// The message's code, as protocol errors name it.
    pub fn code(&self) -> &'static str {
        match self {
            Message::SetUp { .. } => "SetUp",
            Message::Downlink { .. } => "Downlink",
            Message::Uplink(_) => "Uplink",
            Message::ClientFailed { .. } => "ClientFailed",
            Message::Exit => "Exit",
            Message::ExitAck => "ExitAck",
        }
    }

    /// Bytes this message would take on a network: the header plus its payload
    /// (four bytes per parameter, eight per sample count or loss).
    pub fn wire_bytes(&self) -> u64 {
        let payload = match self {
            Message::SetUp { clients } => 16 * clients.len(),
            Message::Downlink { model, .. } => 4 * model.len(),
            Message::Uplink(update) => 16 + 4 * update.params.len(),
            Message::ClientFailed { error, .. } => error.len(),
            Message::Exit | Message::ExitAck => 0,
        };
        HEADER_BYTES + payload as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_downlink_is_charged_four_bytes_per_parameter_plus_the_header() {
        let message = Message::Downlink {
            round: 1,
            client: 3,
            model: Arc::from(vec![0.0f32; 1000]),
        };
        assert_eq!(message.wire_bytes(), 4000 + HEADER_BYTES);
    }
}
