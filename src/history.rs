//! What the server has seen of each client: the record a selection reads to choose who trains
//! (Oort's utility, a client's last loss), kept in the checkpoint so that a resumed run chooses
//! as the uninterrupted one does.

use std::collections::BTreeMap;

use crate::network::ClientId;

/// What the server has seen of one client so far; all `None` (the default) for a client whose
/// update it has not yet taken. An update that missed its round's deadline leaves the record
/// as it was: the round ends at the cutoff, before that update arrives on the simulated clock,
/// so its loss and timings are not known when the next round chooses.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct Seen {
    /// The last round (in an asynchronous federation, the last dispatch) whose update from the
    /// client the server took.
    pub last_round: Option<u32>,
    /// The mean training loss the client reported then; `None` where its update reached the
    /// server only inside a scheduler's partial aggregate.
    pub last_loss: Option<f64>,
    /// Simulated seconds from the model reaching the client to its update leaving it: its
    /// local work at its speed. `None` where the server saw only a partial aggregate.
    pub last_train_s: Option<f64>,
    /// Simulated seconds the update then took to reach the server. `None` where the server saw
    /// only a partial aggregate.
    pub last_upload_s: Option<f64>,
}

impl Seen {
    /// A client whose update for `round` the server took inside a partial aggregate: only that
    /// it took part is known.
    pub fn took_part(round: u32) -> Self {
        Self {
            last_round: Some(round),
            ..Self::default()
        }
    }

    /// A client whose own update for `round` the server took, reporting `loss`, after
    /// `train_s` simulated seconds of local work and `upload_s` on the way up (each known where
    /// the server knows the client's links).
    pub fn reported(round: u32, loss: f64, train_s: Option<f64>, upload_s: Option<f64>) -> Self {
        Self {
            last_round: Some(round),
            last_loss: Some(loss),
            last_train_s: train_s,
            last_upload_s: upload_s,
        }
    }
}

/// What the server has seen of every client whose update it has taken, by client.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientHistory {
    seen: BTreeMap<ClientId, Seen>,
}

/// Bytes of one client's entry in [`ClientHistory::to_bytes`]: the id, a byte of flags, the
/// round and three `f64`s.
const ENTRY_BYTES: usize = 8 + 1 + 4 + 3 * 8;

impl ClientHistory {
    /// No client seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the server has seen of `client` (nothing, for a client it has never taken an
    /// update from).
    pub fn get(&self, client: ClientId) -> Seen {
        self.seen.get(&client).copied().unwrap_or_default()
    }

    /// Records what the server has now seen of `client`.
    pub fn record(&mut self, client: ClientId, seen: Seen) {
        self.seen.insert(client, seen);
    }

    /// The clients seen, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (ClientId, &Seen)> {
        self.seen.iter().map(|(&client, seen)| (client, seen))
    }

    /// The history as a checkpoint section keeps it, every number to the bit.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.seen.len() * ENTRY_BYTES);
        for (&client, seen) in &self.seen {
            let flags = [
                seen.last_round.is_some(),
                seen.last_loss.is_some(),
                seen.last_train_s.is_some(),
                seen.last_upload_s.is_some(),
            ]
            .iter()
            .enumerate()
            .fold(0u8, |flags, (bit, &set)| flags | (u8::from(set) << bit));
            out.extend_from_slice(&(client as u64).to_le_bytes());
            out.push(flags);
            out.extend_from_slice(&seen.last_round.unwrap_or(0).to_le_bytes());
            for value in [seen.last_loss, seen.last_train_s, seen.last_upload_s] {
                out.extend_from_slice(&value.unwrap_or(0.0).to_le_bytes());
            }
        }
        out
    }

    /// Reads what [`ClientHistory::to_bytes`] wrote; `None` if the bytes are not such a
    /// history.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if !bytes.len().is_multiple_of(ENTRY_BYTES) {
            return None;
        }
        let mut history = Self::new();
        for entry in bytes.chunks_exact(ENTRY_BYTES) {
            let client = usize::try_from(u64::from_le_bytes(entry[..8].try_into().ok()?)).ok()?;
            let flags = entry[8];
            let set = |bit: u8| flags & (1 << bit) != 0;
            let number = |at: usize| f64::from_le_bytes(entry[at..at + 8].try_into().unwrap());
            let seen = Seen {
                last_round: set(0).then(|| u32::from_le_bytes(entry[9..13].try_into().unwrap())),
                last_loss: set(1).then(|| number(13)),
                last_train_s: set(2).then(|| number(21)),
                last_upload_s: set(3).then(|| number(29)),
            };
            if flags >> 4 != 0 || history.seen.insert(client, seen).is_some() {
                return None;
            }
        }
        Some(history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_comes_back_from_its_bytes_to_the_bit() {
        let mut history = ClientHistory::new();
        history.record(3, Seen::reported(7, 0.1 + 0.2, Some(1.0 / 3.0), None));
        history.record(1, Seen::took_part(2));
        let back = ClientHistory::from_bytes(&history.to_bytes()).unwrap();
        assert_eq!(back, history);
        assert_eq!(
            back.get(3).last_loss.unwrap().to_bits(),
            (0.1f64 + 0.2).to_bits()
        );
        assert_eq!(back.get(5), Seen::default());
    }

    #[test]
    fn bytes_that_are_not_a_history_are_refused() {
        let mut history = ClientHistory::new();
        history.record(0, Seen::took_part(1));
        let bytes = history.to_bytes();
        assert!(ClientHistory::from_bytes(&bytes[1..]).is_none());
        let mut doubled = bytes.clone();
        doubled.extend_from_slice(&bytes);
        assert!(ClientHistory::from_bytes(&doubled).is_none());
        let mut flagged = bytes;
        flagged[8] |= 0x80;
        assert!(ClientHistory::from_bytes(&flagged).is_none());
    }
}
