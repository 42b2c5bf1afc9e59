//! Random streams derived from the experiment seed.
//!
//! Every random choice in a run draws from its own generator, keyed by the experiment seed, the
//! purpose of the draw, the round and the client id. The key is a SHA-256 digest of those four
//! values, so streams are independent of each other and of the order in which threads ask for
//! them: a run is a pure function of its config, whatever the thread count or scheduling.

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use sha2::{Digest, Sha256};

/// What a random stream is used for; part of the stream's key, so two purposes never share draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Splitting the training set among clients.
    Partition,
    /// Initial values of the global model's parameters.
    ModelInit,
    /// The server's choice of clients in a round.
    ClientSampling,
    /// A client's shuffle of its samples during local training, in one edge round of a round
    /// (edge round 0 when schedulers do not run several).
    LocalShuffle {
        /// The edge round.
        edge_round: u32,
    },
    /// Whether a client is unavailable in one edge round of a round.
    Dropout {
        /// The edge round.
        edge_round: u32,
    },
    /// A client's simulated compute speed, drawn once per run.
    ComputeSpeed,
}

impl Purpose {
    fn hash_into(self, hasher: &mut Sha256) {
        let (tag, edge_round): (&[u8], Option<u32>) = match self {
            Purpose::Partition => (b"partition", None),
            Purpose::ModelInit => (b"model-init", None),
            Purpose::ClientSampling => (b"client-sampling", None),
            Purpose::LocalShuffle { edge_round } => (b"local-shuffle", Some(edge_round)),
            Purpose::Dropout { edge_round } => (b"dropout", Some(edge_round)),
            Purpose::ComputeSpeed => (b"compute-speed", None),
        };
        hasher.update(tag);
        // Edge round 0 adds nothing, so a flat run's streams do not depend on this field.
        if let Some(edge_round) = edge_round.filter(|&e| e > 0) {
            hasher.update(edge_round.to_le_bytes());
        }
    }
}

/// The generator for one (seed, purpose, round, client) key. Use round 0 and client 0 for draws
/// that happen once per run (partition, initialisation) or once per round (sampling).
pub fn stream(seed: u64, purpose: Purpose, round: u32, client: u32) -> ChaCha12Rng {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    purpose.hash_into(&mut hasher);
    hasher.update(round.to_le_bytes());
    hasher.update(client.to_le_bytes());
    ChaCha12Rng::from_seed(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    fn first_draws(mut rng: ChaCha12Rng) -> [u64; 4] {
        std::array::from_fn(|_| rng.random())
    }

    #[test]
    fn same_key_gives_same_stream() {
        let a = first_draws(stream(7, Purpose::LocalShuffle { edge_round: 0 }, 3, 11));
        let b = first_draws(stream(7, Purpose::LocalShuffle { edge_round: 0 }, 3, 11));
        assert_eq!(a, b);
    }

    #[test]
    fn each_key_component_changes_the_stream() {
        let base = first_draws(stream(7, Purpose::LocalShuffle { edge_round: 0 }, 3, 11));
        assert_ne!(
            base,
            first_draws(stream(8, Purpose::LocalShuffle { edge_round: 0 }, 3, 11))
        );
        assert_ne!(base, first_draws(stream(7, Purpose::ClientSampling, 3, 11)));
        assert_ne!(
            base,
            first_draws(stream(7, Purpose::LocalShuffle { edge_round: 0 }, 4, 11))
        );
        assert_ne!(
            base,
            first_draws(stream(7, Purpose::LocalShuffle { edge_round: 0 }, 3, 12))
        );
        let edge = Purpose::LocalShuffle { edge_round: 1 };
        assert_ne!(base, first_draws(stream(7, edge, 3, 11)));
    }
}
