//! Random streams derived from the experiment seed.
//!
//! Every random choice in a run draws from its own generator, keyed by the experiment seed, the
//! purpose of the draw, the round and the client id. The key is a SHA-256 digest of those four
//! values, so streams are independent of each other and of the order in which threads ask for
//! them: a run is a pure function of its config, whatever the thread count or scheduling.

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use sha2::{Digest, Sha256};

/// What a random stream is used for: a tag, and the edge round for draws repeated in each
/// edge round. Part of the stream's key, so two purposes never share draws.
///
/// The list is open: code that needs a new kind of draw declares its own purpose next to it
/// (`const ATTACKERS: Purpose = Purpose::new("attackers")`) with a tag no other purpose uses.
/// Every tag in the crate is checked to be unique by a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purpose {
    tag: &'static str,
    edge_round: u32,
}

impl Purpose {
    /// Splitting the training set among clients.
    pub const PARTITION: Purpose = Purpose::new("partition");
    /// Initial values of the global model's parameters.
    pub const MODEL_INIT: Purpose = Purpose::new("model-init");
    /// The server's choice of clients in a round.
    pub const CLIENT_SAMPLING: Purpose = Purpose::new("client-sampling");
    /// A client's shuffle of its samples during local training (per edge round).
    pub const LOCAL_SHUFFLE: Purpose = Purpose::new("local-shuffle");
    /// A client's shuffle of its samples when its model is fine-tuned to be scored on its own
    /// test samples (per round of evaluation).
    pub const FINE_TUNE: Purpose = Purpose::new("fine-tune");
    /// A client's shuffle of its samples in the passes that update its personal model after
    /// it trained (per round).
    pub const PERSONAL_PASS: Purpose = Purpose::new("personal-pass");
    /// Whether a client is unavailable (per edge round).
    pub const DROPOUT: Purpose = Purpose::new("dropout");
    /// A client's simulated compute speed, drawn once per run.
    pub const COMPUTE_SPEED: Purpose = Purpose::new("compute-speed");

    /// The purpose tagged `tag`, in edge round 0.
    pub const fn new(tag: &'static str) -> Self {
        Self { tag, edge_round: 0 }
    }

    /// The same purpose in edge round `edge_round` of a round.
    pub const fn at_edge_round(self, edge_round: u32) -> Self {
        Self {
            tag: self.tag,
            edge_round,
        }
    }

    /// The tag.
    pub const fn tag(self) -> &'static str {
        self.tag
    }

    fn hash_into(self, hasher: &mut Sha256) {
        hasher.update(self.tag.as_bytes());
        // Edge round 0 adds nothing, so a flat run's streams do not depend on this field.
        if self.edge_round > 0 {
            hasher.update(self.edge_round.to_le_bytes());
        }
    }
}

/// The generator for one (seed, purpose, round, client) key; `client` is a client's id (or, for
/// draws that are not a client's, any index the purpose gives meaning to). Use round 0 and
/// client 0 for draws that happen once per run (partition, initialisation) or once per round
/// (sampling).
pub fn stream(seed: u64, purpose: Purpose, round: u32, client: usize) -> ChaCha12Rng {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    purpose.hash_into(&mut hasher);
    hasher.update(round.to_le_bytes());
    // Ids below 2^32 (every federation so far) hash as four bytes, so streams keep their values;
    // a larger id, as eight, is still a key of its own: the client is the key's last field.
    match u32::try_from(client) {
        Ok(client) => hasher.update(client.to_le_bytes()),
        Err(_) => hasher.update((client as u64).to_le_bytes()),
    }
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
        let a = first_draws(stream(7, Purpose::LOCAL_SHUFFLE, 3, 11));
        let b = first_draws(stream(7, Purpose::LOCAL_SHUFFLE, 3, 11));
        assert_eq!(a, b);
    }

    #[test]
    fn each_key_component_changes_the_stream() {
        let base = first_draws(stream(7, Purpose::LOCAL_SHUFFLE, 3, 11));
        assert_ne!(base, first_draws(stream(8, Purpose::LOCAL_SHUFFLE, 3, 11)));
        assert_ne!(
            base,
            first_draws(stream(7, Purpose::CLIENT_SAMPLING, 3, 11))
        );
        assert_ne!(base, first_draws(stream(7, Purpose::LOCAL_SHUFFLE, 4, 11)));
        assert_ne!(base, first_draws(stream(7, Purpose::LOCAL_SHUFFLE, 3, 12)));
        let edge = Purpose::LOCAL_SHUFFLE.at_edge_round(1);
        assert_ne!(base, first_draws(stream(7, edge, 3, 11)));
    }

    #[test]
    fn every_purpose_tag_in_the_crate_is_unique() {
        fn collect(dir: &std::path::Path, tags: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    collect(&path, tags);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let marker = concat!("Purpose::new", "(\"");
                    let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
                    for line in code {
                        for (at, _) in line.match_indices(marker) {
                            let rest = &line[at + marker.len()..];
                            tags.push(rest[..rest.find('"').unwrap()].to_string());
                        }
                    }
                }
            }
        }
        let mut tags = Vec::new();
        collect(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut tags,
        );
        assert!(tags.len() >= 6, "found {tags:?}");
        let mut unique = tags.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), tags.len(), "a tag is used twice: {tags:?}");
    }
}
