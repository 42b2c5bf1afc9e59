//! A client's change as the masked ring vector it uploads, and the mean change the server reads
//! from the unmasked sum.

use crate::network::ClientId;

use super::protocol::SecureRound;
use super::ring::{Quantiser, to_bytes};

/// The extra tensor of the downlink that lists the round's participants (`U1`), whose public
/// keys each client agrees its pair masks with.
pub const PARTICIPANTS: &str = "secagg_participants";

/// What every client and the server of a securely aggregated run agree on.
#[derive(Debug, Clone, PartialEq)]
pub struct Masking {
    /// The run's seed, which the clients' secrets derive from.
    seed: u64,
    /// Clients whose shares unmask a round.
    threshold: usize,
    /// Each value of a weighted change is clamped to `[−range, range]`.
    range: f64,
    /// The samples of a client whose change counts fully; `None` where every update weighs
    /// the same.
    full_weight_samples: Option<usize>,
}

impl Masking {
    /// The masking of a run seeded `seed`, unmasked by any `threshold` clients of a round, of
    /// changes within `range` weighted by their samples over `full_weight_samples` (or all
    /// alike).
    pub fn new(
        seed: u64,
        threshold: usize,
        range: f64,
        full_weight_samples: Option<usize>,
    ) -> Self {
        Self {
            seed,
            threshold,
            range,
            full_weight_samples,
        }
    }

    /// The protocol of `round` among `participants`.
    pub fn round(&self, round: u32, participants: Vec<ClientId>) -> SecureRound {
        SecureRound::new(self.seed, round, participants, self.threshold)
    }

    /// The ring of a round among `participants` clients: as fine as it can be while the sum
    /// of all their inputs still reads back without wrapping.
    fn quantiser(&self, participants: usize) -> Quantiser {
        Quantiser::new(self.range, participants)
    }

    /// The bytes `client` uploads in `round`: its change from `sent` to `trained`, weighted by
    /// its `samples`, followed by that weight (times `range`, so both quantise alike), in the
    /// ring and masked among `participants` (as the downlink listed them). Values beyond the
    /// range are clamped, and a value that is not a number becomes 0.
    pub fn masked_change(
        &self,
        round: u32,
        client: ClientId,
        participants: &[f32],
        (sent, trained): (&[f32], &[f32]),
        samples: usize,
    ) -> Vec<u8> {
        let weight = self
            .full_weight_samples
            .map_or(1.0, |full| samples as f64 / full as f64);
        let quantiser = self.quantiser(participants.len());
        let quantised: Vec<u32> = trained
            .iter()
            .zip(sent)
            .map(|(&t, &s)| weight * (f64::from(t) - f64::from(s)))
            .chain([weight * self.range])
            .map(|value| quantiser.quantise(value))
            .collect();
        let participants: Vec<ClientId> = participants.iter().map(|&id| id as ClientId).collect();
        debug_assert!(
            participants.contains(&client),
            "the downlink lists its client"
        );
        to_bytes(
            &self
                .round(round, participants)
                .masked_input(client, &quantised),
        )
    }

    /// The weighted mean change that the unmasked ring sum of the survivors' inputs holds, in
    /// a round among `participants` clients.
    pub fn mean_change(&self, sum: &[u32], participants: usize) -> Vec<f64> {
        let quantiser = self.quantiser(participants);
        let (weight, changes) = sum.split_last().expect("the weight comes last");
        let weight = quantiser.value_of_sum(*weight) / self.range;
        changes
            .iter()
            .map(|&s| quantiser.value_of_sum(s) / weight)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::ring::{add_into, from_bytes};
    use super::*;

    #[test]
    fn the_mean_change_is_the_sample_weighted_mean_up_to_the_rings_resolution() {
        let masking = Masking::new(3, 2, 1.0, Some(40));
        let sent = [0.5f32, -0.25];
        let clients = [
            (0, [0.6f32, -0.45], 10),
            (4, [0.4, 0.05], 40),
            (7, [0.5, 0.0], 30),
        ];
        let participants = [0.0, 4.0, 7.0];
        let mut sum = vec![0u32; 3];
        for (client, trained, samples) in clients {
            let bytes = masking.masked_change(9, client, &participants, (&sent, &trained), samples);
            assert_eq!(bytes.len(), 12);
            add_into(&mut sum, &from_bytes(&bytes).unwrap());
        }
        let plain = masking
            .round(9, vec![0, 4, 7])
            .unmask(sum, &[0, 4, 7], &[0, 4, 7]);
        let mean = masking.mean_change(&plain.unwrap(), 3);
        let expected = [
            (10.0 * 0.1 + 40.0 * -0.1 + 30.0 * 0.0) / 80.0,
            (10.0 * -0.2 + 40.0 * 0.3 + 30.0 * 0.25) / 80.0,
        ];
        for (got, want) in mean.iter().zip(expected) {
            assert!((got - want).abs() < 1e-7, "{got} vs {want}");
        }
    }
}
