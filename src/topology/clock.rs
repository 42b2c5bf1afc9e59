//! What the server knows of the simulated clock, to tell when a dispatched client's answer
//! arrives before it does (see the asynchronous mode).

use crate::network::message::HEADER_BYTES;
use crate::network::{
    ClientId, ClientInfo, DropReason, Dropped, LinkProfile, LinkProfiles, Message,
};

use super::client_group::{ClientConditions, Response};

/// What the server knows of the simulated clock: everything that decides when a dispatched
/// client's answer arrives, as the client group and the links compute it.
#[derive(Debug, Clone)]
pub struct Clock {
    /// The clients' links.
    pub client_links: LinkProfiles,
    /// The link between the server and a relaying scheduler, where there is one.
    pub server_link: Option<LinkProfile>,
    /// How the clients answer.
    pub conditions: ClientConditions,
}

impl Clock {
    /// The earliest simulated time the answer to `downlink`, sent to `client` at `sent_at` as
    /// dispatch `dispatch` with a model of `params` values, can reach the server: exactly when
    /// it does, unless the update carries extra tensors (which make it later).
    pub fn earliest_answer(
        &self,
        dispatch: u32,
        client: ClientInfo,
        sent_at: f64,
        downlink: &Message,
        params: usize,
    ) -> f64 {
        let profile = self.client_links.for_message(downlink);
        let down = downlink.wire_bytes();
        let arrived = sent_at + self.relay_seconds(down) + profile.transfer_seconds(down);
        let answer_at = |left: f64, bytes: u64| {
            left + profile.transfer_seconds(bytes) + self.relay_seconds(bytes)
        };
        let dropped = Message::Dropped {
            round: dispatch,
            clients: vec![Dropped::new(client.id, DropReason::Dropout)],
        }
        .wire_bytes();
        // An uplink of one client's model without extra tensors.
        let uplink = HEADER_BYTES + 16 + 4 + 4 * params as u64;
        match self.conditions.response((dispatch, 0), client, arrived) {
            Response::DropsOut => answer_at(arrived, dropped),
            Response::GoesOffline(at) => answer_at(at, dropped),
            Response::Trains { finishes, .. } => answer_at(finishes, uplink),
        }
    }

    /// What the server learns of `client` from its update of `bytes` for (round, edge round)
    /// `rounds`: the simulated seconds its local work took at its speed, and those the update
    /// took from the client to the server.
    pub fn timings(&self, rounds: (u32, u32), client: ClientInfo, bytes: u64) -> (f64, f64) {
        let (_, train_s) = self.conditions.training(rounds, client);
        (train_s, self.upload_seconds(client.id, bytes))
    }

    /// Simulated seconds `bytes` take from `client` up to the server.
    fn upload_seconds(&self, client: ClientId, bytes: u64) -> f64 {
        let profile = self.client_links.for_client(client);
        profile.transfer_seconds(bytes) + self.relay_seconds(bytes)
    }

    /// Simulated seconds `bytes` take across the link between the server and a relaying
    /// scheduler, where there is one.
    fn relay_seconds(&self, bytes: u64) -> f64 {
        self.server_link.map_or(0.0, |l| l.transfer_seconds(bytes))
    }
}
