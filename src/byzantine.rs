//! Byzantine clients: a simulation feature independent of the strategy. A seeded fraction (or
//! a list) of the clients are attackers; after training, each attacker's upload is transformed
//! (or it trains on flipped labels). Every strategy in a comparison then faces the same
//! attackers, and the set is written to the run folder (`attackers.json`) and `summary.json`.
//!
//! The attacks, with `x` the model the client was sent and `y` what it trained:
//!
//! - `sign_flip`: sends `x - s (y - x)`, its change reversed and scaled by `s` (default 1);
//! - `scale`: sends `x + s (y - x)`, its change boosted by `s` (model replacement, Bagdasaryan
//!   et al. 2020, "How To Backdoor Federated Learning");
//! - `gaussian`: sends `y + N(0, σ²)` per parameter, from the client's own stream;
//! - `label_flip`: trains on labels `C - 1 - l` (`C` classes) and sends what it trained.
//!
//! Only the model is transformed; extra tensors (SCAFFOLD's control variate) go up as
//! computed.

use rand::seq::index;
use rand_distr::{Distribution, Normal};

use crate::config::{Attack, ByzantineConfig};
use crate::network::ClientId;
use crate::seed::{Purpose, stream};

/// The draw of the attacker set, once per run.
const ATTACKERS: Purpose = Purpose::new("attackers");
/// An attacker's Gaussian noise, per (round, edge round, client).
const ATTACK_NOISE: Purpose = Purpose::new("attack-noise");

impl ByzantineConfig {
    /// The attacking clients, in id order: the list, or `round(fraction * num_clients)`
    /// clients drawn from the seed.
    pub fn attackers(&self, seed: u64, num_clients: usize) -> Vec<ClientId> {
        let mut attackers = match (&self.clients, self.fraction) {
            (Some(clients), _) => clients.clone(),
            (None, Some(fraction)) => {
                let count = ((fraction * num_clients as f64).round() as usize).min(num_clients);
                let mut rng = stream(seed, ATTACKERS, 0, 0);
                index::sample(&mut rng, num_clients, count).into_vec()
            }
            (None, None) => Vec::new(),
        };
        attackers.sort_unstable();
        attackers.dedup();
        attackers
    }
}

impl Attack {
    /// Whether the attacker trains on flipped labels.
    pub fn flips_labels(self) -> bool {
        self == Attack::LabelFlip
    }

    /// Transforms an attacker's trained model `trained` (sent `global`) in place.
    pub fn corrupt(
        self,
        (seed, round, edge_round): (u64, u32, u32),
        client: ClientId,
        global: &[f32],
        trained: &mut [f32],
    ) {
        match self {
            Attack::SignFlip { scale } => move_along_change(global, trained, -scale as f32),
            Attack::Scale { scale } => move_along_change(global, trained, scale as f32),
            Attack::Gaussian { std } => {
                let purpose = ATTACK_NOISE.at_edge_round(edge_round);
                let mut rng = stream(seed, purpose, round, client);
                let noise = Normal::new(0.0, std as f32).expect("validated: std ≥ 0");
                for y in trained.iter_mut() {
                    *y += noise.sample(&mut rng);
                }
            }
            Attack::LabelFlip => {}
        }
    }
}

/// Sets `y = x + factor (y - x)`.
fn move_along_change(global: &[f32], trained: &mut [f32], factor: f32) {
    for (y, &x) in trained.iter_mut().zip(global) {
        *y = x + factor * (*y - x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attacks_transform_the_change_as_documented() {
        let global = [1.0, 1.0];
        let mut flipped = [2.0, 0.5];
        Attack::SignFlip { scale: 2.0 }.corrupt((0, 1, 0), 0, &global, &mut flipped);
        assert_eq!(flipped, [-1.0, 2.0]);
        let mut boosted = [2.0, 0.5];
        Attack::Scale { scale: 10.0 }.corrupt((0, 1, 0), 0, &global, &mut boosted);
        assert_eq!(boosted, [11.0, -4.0]);
        let mut noisy = [2.0, 0.5];
        Attack::Gaussian { std: 1.0 }.corrupt((0, 1, 0), 0, &global, &mut noisy);
        assert_ne!(noisy, [2.0, 0.5]);
        let mut again = [2.0, 0.5];
        Attack::Gaussian { std: 1.0 }.corrupt((0, 1, 0), 0, &global, &mut again);
        assert_eq!(noisy, again);
    }

    #[test]
    fn a_fraction_draws_that_many_attackers_from_the_seed() {
        let config = ByzantineConfig {
            fraction: Some(0.2),
            clients: None,
            attack: Attack::LabelFlip,
        };
        let attackers = config.attackers(3, 100);
        assert_eq!(attackers.len(), 20);
        assert_eq!(attackers, config.attackers(3, 100));
        assert_ne!(attackers, config.attackers(4, 100));
        assert!(attackers.windows(2).all(|w| w[0] < w[1]));
    }
}
