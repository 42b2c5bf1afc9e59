//! One round of secure aggregation (Bonawitz et al. 2017, the semi-honest protocol) among the
//! clients a round sampled: what each client masks its input with, what the survivors reveal,
//! and how the server takes the masks off the sum.
//!
//! Each client `u` holds a key-agreement secret `sk_u` and a self-mask seed `b_u`, drawn from
//! the run's (seed, round, client) stream, and shares both among the round's clients with
//! threshold `t`. Its masked input is `y_u = x_u + PRG(b_u) + Σ_{v≠u} ±PRG(s_uv)` in `Z_2^32`,
//! with `s_uv` the key `u` and `v` agree on, added by the lower id and subtracted by the
//! higher. In the server's sum of the survivors' inputs the pairwise masks between survivors
//! cancel; for the rest it asks the survivors for their shares: of `b_u` for each survivor, of
//! `sk_v` for each client that dropped out (whose masks it then recomputes from `sk_v` and the
//! survivors' public keys). With fewer than `t` clients answering it learns nothing and the
//! round ends without a model.

use rand::RngExt;

use crate::network::ClientId;
use crate::seed::{Purpose, stream};

use super::field;
use super::ring::apply_mask;
use super::shamir::{Polynomial, Share, reconstruct};

/// Each client's key-agreement secret and self-mask seed.
const SECRETS: Purpose = Purpose::new("secagg-secrets");
/// The random coefficients of each client's sharing polynomials.
const SHARING: Purpose = Purpose::new("secagg-sharing");

/// Bytes of a public key: an element of the 61-bit group, in eight bytes.
const KEY_BYTES: u64 = 8;
/// Bytes of a Shamir share: an element of the field, in eight bytes.
const SHARE_BYTES: u64 = 8;
/// Bytes of a client id in the protocol's messages.
const ID_BYTES: u64 = 4;
/// An authenticated encryption's nonce and tag, around each pair of shares a client sends
/// another through the server.
const SEAL_BYTES: u64 = 28;

/// The unmasking found fewer clients answering than the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall {
    /// Clients that answered.
    pub answered: usize,
    /// Clients the threshold asks for.
    pub threshold: usize,
}

/// A client's two secrets.
#[derive(Debug, Clone, Copy)]
struct Secrets {
    key: u64,
    self_mask: u64,
}

/// Secure aggregation among one round's clients.
#[derive(Debug, Clone)]
pub struct SecureRound {
    seed: u64,
    round: u32,
    /// The clients the round was sent to (`U1`), in id order.
    participants: Vec<ClientId>,
    threshold: usize,
}

impl SecureRound {
    /// The protocol for round `round` of a run seeded `seed` among `participants` (in id
    /// order), any `threshold` of whom can unmask.
    pub fn new(seed: u64, round: u32, participants: Vec<ClientId>, threshold: usize) -> Self {
        debug_assert!(participants.is_sorted(), "participants in id order");
        Self {
            seed,
            round,
            participants,
            threshold,
        }
    }

    fn secrets(&self, client: ClientId) -> Secrets {
        let mut rng = stream(self.seed, SECRETS, self.round, client);
        Secrets {
            key: rng.random_range(1..field::MODULUS - 1),
            self_mask: rng.random_range(0..field::MODULUS),
        }
    }

    /// What `client` advertised as its public key.
    fn public_key(&self, client: ClientId) -> u64 {
        field::public_key(self.secrets(client).key)
    }

    /// `client`'s polynomials sharing its key secret and its self-mask seed.
    fn polynomials(&self, client: ClientId) -> [Polynomial; 2] {
        let secrets = self.secrets(client);
        let mut rng = stream(self.seed, SHARING, self.round, client);
        [secrets.key, secrets.self_mask].map(|s| Polynomial::new(s, self.threshold, &mut rng))
    }

    /// `client`'s input `quantised` with its masks added.
    pub fn masked_input(&self, client: ClientId, quantised: &[u32]) -> Vec<u32> {
        let secrets = self.secrets(client);
        let mut masked = quantised.to_vec();
        apply_mask(&mut masked, secrets.self_mask, false);
        for &other in self.participants.iter().filter(|&&v| v != client) {
            let pair = field::agree(secrets.key, self.public_key(other));
            apply_mask(&mut masked, pair, other < client);
        }
        masked
    }

    /// The ring sum of the `survivors`' inputs (in id order), from the sum of their masked
    /// inputs and the shares that `responders` (survivors, in id order) reveal.
    pub fn unmask(
        &self,
        mut masked_sum: Vec<u32>,
        survivors: &[ClientId],
        responders: &[ClientId],
    ) -> Result<Vec<u32>, Shortfall> {
        debug_assert!(survivors.is_sorted(), "survivors in id order");
        if responders.len() < self.threshold {
            return Err(Shortfall {
                answered: responders.len(),
                threshold: self.threshold,
            });
        }
        // Any `threshold` answers will do: the server reads the first.
        let answering = &responders[..self.threshold];
        // The survivors' public keys, which each dropped client's pair masks are agreed with.
        let survivor_keys: Vec<(ClientId, u64)> =
            survivors.iter().map(|&s| (s, self.public_key(s))).collect();
        for &client in &self.participants {
            let survived = survivors.binary_search(&client).is_ok();
            // A survivor's self-mask comes off; a dropped client's key gives its pair masks.
            let polynomial = &self.polynomials(client)[usize::from(survived)];
            let shares: Vec<Share> = answering
                .iter()
                .map(|&holder| polynomial.share(share_point(holder)))
                .collect();
            let secret = reconstruct(&shares);
            if survived {
                apply_mask(&mut masked_sum, secret, true);
            } else {
                for &(survivor, public) in &survivor_keys {
                    let pair = field::agree(secret, public);
                    apply_mask(&mut masked_sum, pair, survivor < client);
                }
            }
        }
        Ok(masked_sum)
    }
}

/// Where a client's share of another's secret sits on the sharing polynomial.
fn share_point(client: ClientId) -> u64 {
    client as u64 + 1
}

/// The payload bytes of the messages secure aggregation adds to a round, per client, beyond the
/// masked input that takes the place of its update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    /// Up, each participant: its id and two public keys (one to agree masks, one to seal
    /// shares).
    pub advertise_up: u64,
    /// Down, each participant: every participant's two keys (their ids come with the model).
    pub advertise_down: u64,
    /// Up, each participant: a sealed pair of shares for every other participant.
    pub shares_up: u64,
    /// Down, each participant: the sealed pairs of shares the others sent it.
    pub shares_down: u64,
    /// Down, each survivor: the survivors' ids.
    pub unmask_down: u64,
    /// Up, each survivor: for every participant, its id and one share.
    pub unmask_up: u64,
}

impl Exchange {
    /// The messages of a round among `participants` clients of which `survivors` sent their
    /// masked inputs.
    pub fn of(participants: usize, survivors: usize) -> Self {
        let (n, s) = (participants as u64, survivors as u64);
        let sealed_pair = 2 * ID_BYTES + 2 * SHARE_BYTES + SEAL_BYTES;
        Self {
            advertise_up: ID_BYTES + 2 * KEY_BYTES,
            advertise_down: n * 2 * KEY_BYTES,
            shares_up: n.saturating_sub(1) * sealed_pair,
            shares_down: n.saturating_sub(1) * sealed_pair,
            unmask_down: s * ID_BYTES,
            unmask_up: n * (ID_BYTES + SHARE_BYTES),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ring::{Quantiser, add_into};
    use super::*;

    const SEED: u64 = 9;

    /// Each participant's quantised input of eight values.
    fn inputs(participants: &[ClientId]) -> Vec<Vec<u32>> {
        let quantiser = Quantiser::new(1.0, participants.len());
        participants
            .iter()
            .map(|&c| {
                (0..8)
                    .map(|i| quantiser.quantise(((c * 8 + i) as f64).sin()))
                    .collect()
            })
            .collect()
    }

    /// Each participant's input masked, in participant order.
    fn masked_inputs(protocol: &SecureRound, participants: &[ClientId]) -> Vec<Vec<u32>> {
        participants
            .iter()
            .zip(inputs(participants))
            .map(|(&c, x)| protocol.masked_input(c, &x))
            .collect()
    }

    fn ring_sum<'a>(vectors: impl Iterator<Item = &'a Vec<u32>>) -> Vec<u32> {
        let mut sum = vec![0; 8];
        vectors.for_each(|v| add_into(&mut sum, v));
        sum
    }

    #[test]
    fn the_unmasked_sum_is_the_plain_quantised_sum_exactly() {
        let participants = vec![2, 3, 5, 8, 13];
        let protocol = SecureRound::new(SEED, 4, participants.clone(), 3);
        let plain = inputs(&participants);
        let masked = masked_inputs(&protocol, &participants);
        let unmasked = protocol.unmask(ring_sum(masked.iter()), &participants, &participants);
        assert_eq!(unmasked, Ok(ring_sum(plain.iter())));
    }

    #[test]
    fn a_masked_input_differs_from_the_plain_one_everywhere() {
        let participants = vec![0, 1, 2, 3];
        let protocol = SecureRound::new(SEED, 1, participants.clone(), 2);
        let plain = inputs(&participants);
        for (&client, x) in participants.iter().zip(&plain) {
            let masked = protocol.masked_input(client, x);
            assert!(masked.iter().zip(x).all(|(m, p)| m != p), "client {client}");
        }
    }

    #[test]
    fn every_dropout_set_that_leaves_the_threshold_is_recovered() {
        let participants: Vec<ClientId> = vec![1, 4, 6, 7, 10, 12];
        let threshold = 3;
        let protocol = SecureRound::new(SEED, 2, participants.clone(), threshold);
        let plain = inputs(&participants);
        let masked = masked_inputs(&protocol, &participants);
        let mut recovered = 0;
        for kept in 0u32..1 << participants.len() {
            let survives = |i: usize| kept & (1 << i) != 0;
            let survivors: Vec<ClientId> = (0..participants.len())
                .filter(|&i| survives(i))
                .map(|i| participants[i])
                .collect();
            let picked = |vectors: &[Vec<u32>]| {
                ring_sum(
                    (0..participants.len())
                        .filter(|&i| survives(i))
                        .map(|i| &vectors[i]),
                )
            };
            let unmasked = protocol.unmask(picked(&masked), &survivors, &survivors);
            if survivors.len() >= threshold {
                assert_eq!(unmasked, Ok(picked(&plain)), "survivors {survivors:?}");
                // Any threshold of the survivors answering will do, the last ones too.
                let late = &survivors[survivors.len() - threshold..];
                assert_eq!(
                    protocol.unmask(picked(&masked), &survivors, late),
                    Ok(picked(&plain))
                );
                recovered += 1;
            } else {
                assert_eq!(
                    unmasked,
                    Err(Shortfall {
                        answered: survivors.len(),
                        threshold
                    })
                );
            }
        }
        // Every set of at least three of six: 20 + 15 + 6 + 1.
        assert_eq!(recovered, 42);
    }

    #[test]
    fn the_exchange_counts_each_message_of_the_protocol() {
        let exchange = Exchange::of(10, 7);
        assert_eq!(exchange.advertise_up, 20);
        assert_eq!(exchange.advertise_down, 160);
        assert_eq!(exchange.shares_up, 9 * 52);
        assert_eq!(exchange.unmask_down, 28);
        assert_eq!(exchange.unmask_up, 120);
    }
}
