//! DP-FedAvg's steps on flat vectors (McMahan, Ramage, Talwar and Zhang 2018, "Learning
//! Differentially Private Recurrent Language Models"): each client's change to the model it
//! was sent clipped in L2, Gaussian noise on the sum, and the clip itself adapted towards a
//! quantile of the clients' norms (Andrew, Thakkar, McMahan and Ramaswamy 2021,
//! "Differentially Private Learning with Adaptive Clipping").
//!
//! Every draw comes from a stream the caller derives from (seed, purpose, round, client), so a
//! private run is as reproducible as any other, stopped and resumed or not.

use std::ops::Range;

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::network::{ClientId, Tensors};
use crate::seed::{Purpose, stream};

/// The noise a client adds to its own change, under local noise.
const LOCAL_NOISE: Purpose = Purpose::new("dp-local-noise");

/// The downlink tensor holding the round's clip norm, where the clip adapts.
pub const CLIP_TENSOR: &str = "dp_clip";

/// The uplink tensor holding 1 where the client's change needed no clipping, else 0, where
/// the clip adapts.
pub const UNCLIPPED_TENSOR: &str = "dp_unclipped";

/// Which values of the model a client clips, and how they group: one group (the whole
/// change clipped to `S`) or one per layer (each clipped to `S / sqrt(layers)`, so that the
/// whole change's norm is still at most `S`). Values in no group (a personal layer, which
/// never leaves the client) are neither clipped nor noised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClipGroups(Vec<Vec<Range<usize>>>);

impl ClipGroups {
    /// The shared values, `(length, shared)` layer by layer in the flat vector's order: as one
    /// group, or each layer a group of its own.
    pub fn of_layers(layers: impl IntoIterator<Item = (usize, bool)>, per_layer: bool) -> Self {
        let mut start = 0;
        let mut ranges = Vec::new();
        for (length, shared) in layers {
            if shared && length > 0 {
                ranges.push(start..start + length);
            }
            start += length;
        }
        if per_layer {
            Self(ranges.into_iter().map(|range| vec![range]).collect())
        } else {
            Self(vec![ranges])
        }
    }

    /// Every value of the groups, in order.
    fn values(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().flatten().flat_map(Clone::clone)
    }
}

/// Clips the change from `sent` to `update` in place, each of `groups` to its share of `clip`.
/// Values of a group within its bound are left as they were, to the bit. Returns whether no
/// group needed clipping.
pub fn clip_change(sent: &[f32], update: &mut [f32], groups: &ClipGroups, clip: f64) -> bool {
    let bound = clip / (groups.0.len() as f64).sqrt();
    let mut unclipped = true;
    for group in &groups.0 {
        let norm = group
            .iter()
            .map(|range| change_norm(&sent[range.clone()], &update[range.clone()]).powi(2))
            .sum::<f64>()
            .sqrt();
        if norm <= bound {
            continue;
        }
        unclipped = false;
        let factor = bound / norm;
        for range in group {
            for (value, &start) in update[range.clone()].iter_mut().zip(&sent[range.clone()]) {
                let change = f64::from(*value) - f64::from(start);
                *value = (f64::from(start) + factor * change) as f32;
            }
        }
    }
    unclipped
}

/// What a client does to its trained model before it sends it up: clips its change, says
/// whether it needed clipping where the clip adapts, and adds its own noise under local noise.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientClipping {
    /// The experiment seed, for the local noise's streams.
    pub seed: u64,
    /// The values clipped, and how they group.
    pub groups: ClipGroups,
    /// The clip norm, or `None` where each round's comes down with the model
    /// ([`CLIP_TENSOR`]) and the client reports whether it clipped ([`UNCLIPPED_TENSOR`]).
    pub fixed_clip: Option<f64>,
    /// The noise multiplier of the client's own noise; `None` where the server adds it.
    pub local_noise: Option<f64>,
}

impl ClientClipping {
    /// Clips (and noises) `client`'s trained `update` of round `round` against the model it
    /// was `sent` with `downlink` beside it; returns the tensors to send up beside it.
    pub fn apply(
        &self,
        round: u32,
        client: ClientId,
        sent: &[f32],
        update: &mut [f32],
        downlink: &Tensors,
    ) -> Tensors {
        let clip = self
            .fixed_clip
            .unwrap_or_else(|| f64::from(downlink.expect(CLIP_TENSOR)[0]));
        let unclipped = clip_change(sent, update, &self.groups, clip);
        if let Some(multiplier) = self.local_noise {
            let mut rng = stream(self.seed, LOCAL_NOISE, round, client);
            let std = multiplier * clip;
            for index in self.groups.values() {
                let draw: f64 = StandardNormal.sample(&mut rng);
                update[index] = (f64::from(update[index]) + std * draw) as f32;
            }
        }
        match self.fixed_clip {
            Some(_) => Tensors::new(),
            None => Tensors::new().with(UNCLIPPED_TENSOR, vec![f32::from(u8::from(unclipped))]),
        }
    }
}

/// The L2 norm of `update − sent`, summed in order in `f64`.
pub fn change_norm(sent: &[f32], update: &[f32]) -> f64 {
    update
        .iter()
        .zip(sent)
        .map(|(&value, &start)| (f64::from(value) - f64::from(start)).powi(2))
        .sum::<f64>()
        .sqrt()
}

/// Adds Gaussian noise of standard deviation `std` to each value, drawing from `rng` in the
/// values' order.
pub fn add_gaussian_noise(values: &mut [f64], std: f64, rng: &mut impl Rng) {
    for value in values {
        let draw: f64 = StandardNormal.sample(rng);
        *value += std * draw;
    }
}

/// The noise multiplier left for the updates' sum once the noisy count of unclipped clients
/// (standard deviation `count_std`) has taken its share of a total noise multiplier `total`:
/// `(total^-2 − (2 count_std)^-2)^(-1/2)` (Andrew et al. 2021, theorem 1); `None` where the
/// count would take it all (`2 count_std ≤ total`).
pub fn update_noise_multiplier(total: f64, count_std: f64) -> Option<f64> {
    let left = total.powi(-2) - (2.0 * count_std).powi(-2);
    (left > 0.0).then(|| left.powf(-0.5))
}

/// The next clip norm after a round whose noisy fraction of unclipped clients was
/// `unclipped`: `clip · exp(−learning_rate · (unclipped − target_quantile))`, the geometric
/// update of Andrew et al. 2021, which moves the clip towards the norm below which that
/// quantile of the clients' changes fall.
pub fn adapted_clip(clip: f64, unclipped: f64, target_quantile: f64, learning_rate: f64) -> f64 {
    clip * (-learning_rate * (unclipped - target_quantile)).exp()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha12Rng;

    use super::*;

    fn whole(length: usize) -> ClipGroups {
        ClipGroups::of_layers([(length, true)], false)
    }

    #[test]
    fn personal_layers_are_neither_clipped_nor_noised() {
        let groups = ClipGroups::of_layers([(1, true), (2, false), (1, true)], false);
        let clipping = ClientClipping {
            seed: 3,
            groups,
            fixed_clip: Some(1.0),
            local_noise: Some(1.0),
        };
        let sent = [0.0; 4];
        let mut update = [3.0, 50.0, 60.0, 4.0];
        let extras = clipping.apply(1, 0, &sent, &mut update, &Tensors::new());
        assert!(extras.is_empty());
        assert_eq!(update[1..3], [50.0, 60.0]);
        assert_ne!(update[0], 0.6);
        let mut again = [3.0, 50.0, 60.0, 4.0];
        clipping.apply(1, 0, &sent, &mut again, &Tensors::new());
        assert_eq!(update, again);
    }

    #[test]
    fn an_adaptive_clip_comes_down_and_the_client_says_whether_it_clipped() {
        let clipping = ClientClipping {
            seed: 0,
            groups: whole(2),
            fixed_clip: None,
            local_noise: None,
        };
        let downlink = Tensors::new().with(CLIP_TENSOR, vec![10.0]);
        let mut update = [3.0, 4.0];
        let extras = clipping.apply(1, 0, &[0.0; 2], &mut update, &downlink);
        assert_eq!(extras.expect(UNCLIPPED_TENSOR), [1.0]);
        let downlink = Tensors::new().with(CLIP_TENSOR, vec![1.0]);
        let extras = clipping.apply(1, 0, &[0.0; 2], &mut update, &downlink);
        assert_eq!(extras.expect(UNCLIPPED_TENSOR), [0.0]);
    }

    #[test]
    fn a_change_beyond_the_clip_is_scaled_to_it() {
        let sent = [1.0, 1.0];
        let mut update = [4.0, 5.0]; // change (3, 4), norm 5
        assert!(!clip_change(&sent, &mut update, &whole(2), 1.0));
        assert_eq!(update, [1.6, 1.8]);
        assert!((change_norm(&sent, &update) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn a_change_within_the_clip_is_left_to_the_bit() {
        let sent = [0.1, 0.2, 0.3];
        let mut update = [0.11, 0.19, 0.333];
        let before = update;
        assert!(clip_change(&sent, &mut update, &whole(3), 1.0));
        assert_eq!(update, before);
    }

    #[test]
    fn layers_are_clipped_apart_to_shares_of_the_clip() {
        let sent = [0.0; 3];
        // Layer one's change has norm 2, layer two's 0.5; each may have 1 / sqrt(2).
        let mut update = [2.0, 0.0, 0.5];
        let groups = ClipGroups::of_layers([(2, true), (1, true)], true);
        assert!(!clip_change(&sent, &mut update, &groups, 1.0));
        let bound = 1.0 / 2f64.sqrt();
        assert!((f64::from(update[0]) - bound).abs() < 1e-6);
        assert_eq!(update[2], 0.5);
        assert!(change_norm(&sent, &update) <= 1.0 + 1e-6);
    }

    #[test]
    fn noise_comes_from_the_stream_alone() {
        let noisy = |seed| {
            let mut values = vec![0.0; 4];
            add_gaussian_noise(&mut values, 2.0, &mut ChaCha12Rng::seed_from_u64(seed));
            values
        };
        assert_eq!(noisy(7), noisy(7));
        assert_ne!(noisy(7), noisy(8));
        let many = {
            let mut values = vec![0.0; 20_000];
            add_gaussian_noise(&mut values, 2.0, &mut ChaCha12Rng::seed_from_u64(1));
            values
        };
        let variance = many.iter().map(|v| v * v).sum::<f64>() / many.len() as f64;
        assert!((variance.sqrt() - 2.0).abs() < 0.05, "{}", variance.sqrt());
    }

    #[test]
    fn the_count_takes_its_share_of_the_noise() {
        // Andrew et al.'s setting: z = 1, count std m / 20 with m = 100 (5): z_Δ ≈ 1.005.
        let left = update_noise_multiplier(1.0, 5.0).unwrap();
        assert!((left - (1.0f64 - 0.01).powf(-0.5)).abs() < 1e-12);
        assert_eq!(update_noise_multiplier(1.0, 0.5), None);
    }

    #[test]
    fn the_clip_moves_towards_the_target_quantile() {
        assert!(adapted_clip(1.0, 0.9, 0.5, 0.2) < 1.0);
        assert!(adapted_clip(1.0, 0.1, 0.5, 0.2) > 1.0);
        assert_eq!(adapted_clip(1.0, 0.5, 0.5, 0.2), 1.0);
    }
}
