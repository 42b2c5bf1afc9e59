//! The server half of a private run: DP-FedAvg's aggregation (McMahan et al. 2018) around any
//! algorithm whose server reads the mean of the clients' models. The round's clipped models
//! are summed as they arrive; the server takes the sum of their changes, adds Gaussian noise
//! of standard deviation `z · S` once (central noise), divides by the clients a round samples
//! (a fixed denominator: dropped clients still count, so one client's presence moves the mean
//! by at most `S / m`), and hands the algorithm that noisy mean as if it were the clients'
//! mean. With an adaptive clip it also counts, with noise, the clients whose change needed no
//! clipping, and moves the clip towards the target quantile (Andrew et al. 2021).

use super::fold::Source;
use super::{Aggregate, Collected, Reads, Round, Strategy, Sum, Weighting};
use crate::config::{ClipConfig, NoiseSite, PrivacyConfig};
use crate::network::{StateError, Tensors};
use crate::privacy::Repeated;
use crate::privacy::mechanism::{CLIP_TENSOR, UNCLIPPED_TENSOR, adapted_clip, add_gaussian_noise};
use crate::seed::{Purpose, stream};

/// The server's noise on the sum of a round's changes (client 0 of the stream) and on its
/// count of unclipped clients (client 1).
const CENTRAL_NOISE: Purpose = Purpose::new("dp-central-noise");

/// The metrics a private round adds to its line of `metrics.jsonl`.
const EPSILON: &str = "epsilon";
const CLIP: &str = "dp_clip";
const UNCLIPPED_FRACTION: &str = "dp_unclipped_fraction";

/// How the clip follows the clients' norms.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AdaptiveClip {
    target_quantile: f64,
    learning_rate: f64,
    count_std: f64,
}

/// DP-FedAvg's aggregation around an algorithm's server half.
pub struct PrivateServer {
    inner: Box<dyn Strategy>,
    seed: u64,
    /// The fixed denominator: the clients sampled each round.
    clients_per_round: usize,
    /// The standard deviation of the sum's noise over the clip; `None` under local noise.
    update_noise: Option<f64>,
    clip: f64,
    adaptive: Option<AdaptiveClip>,
    accounting: Repeated,
}

impl PrivateServer {
    /// `inner` made private as `privacy` says, in a federation of `num_clients` sampling
    /// `clients_per_round`; an error where `inner` does not read the mean of the models alone.
    pub fn new(
        inner: Box<dyn Strategy>,
        privacy: &PrivacyConfig,
        seed: u64,
        num_clients: usize,
        clients_per_round: usize,
    ) -> Result<Self, String> {
        if !Self::can_wrap(inner.as_ref()) {
            return Err(
                "its server half reads more than the mean of the clients' models, \
                        which is all that differential privacy's noise covers"
                    .to_string(),
            );
        }
        let adaptive = match privacy.clip {
            ClipConfig::Fixed { .. } => None,
            ClipConfig::Adaptive {
                target_quantile,
                learning_rate,
                ..
            } => Some(AdaptiveClip {
                target_quantile,
                learning_rate,
                count_std: privacy.count_std(clients_per_round).unwrap_or_default(),
            }),
        };
        let update_noise = match privacy.noise {
            NoiseSite::Central => privacy.update_noise_multiplier(clients_per_round),
            NoiseSite::Local => None,
        };
        Ok(Self {
            inner,
            seed,
            clients_per_round,
            update_noise,
            clip: privacy.clip.initial(),
            adaptive,
            accounting: privacy.accounting(num_clients, clients_per_round),
        })
    }

    /// Whether `inner` reads the round's mean model alone, which the noisy mean can stand in
    /// for.
    pub fn can_wrap(inner: &dyn Strategy) -> bool {
        let Reads::Sums(sums) = inner.reads() else {
            return false;
        };
        matches!(
            sums[..],
            [Sum {
                of: Source::Params,
                weighting: Weighting::Samples | Weighting::PerUpdate,
            }]
        )
    }

    /// The noisy mean of the round's clipped models: `global + (Σ_k (w_k − global) + noise) / m`.
    fn noisy_mean(
        &self,
        round: u32,
        global: &[f32],
        model_sum: &[f32],
        updates: usize,
    ) -> Vec<f32> {
        let arrived = updates as f64;
        // A round nobody answered has an empty sum: its change is the noise alone.
        let mut change: Vec<f64> = match model_sum.is_empty() {
            true => vec![0.0; global.len()],
            false => model_sum
                .iter()
                .zip(global)
                .map(|(&sum, &start)| f64::from(sum) - arrived * f64::from(start))
                .collect(),
        };
        if let Some(multiplier) = self.update_noise {
            let mut rng = stream(self.seed, CENTRAL_NOISE, round, 0);
            add_gaussian_noise(&mut change, multiplier * self.clip, &mut rng);
        }
        let denominator = self.clients_per_round as f64;
        change
            .iter()
            .zip(global)
            .map(|(&change, &start)| (f64::from(start) + change / denominator) as f32)
            .collect()
    }

    /// The noisy fraction of the round's clients whose change needed no clipping, and the clip
    /// it moves to.
    fn adapt(&mut self, round: u32, adaptive: AdaptiveClip, unclipped: f32) -> f64 {
        let mut count = [f64::from(unclipped)];
        let mut rng = stream(self.seed, CENTRAL_NOISE, round, 1);
        add_gaussian_noise(&mut count, adaptive.count_std, &mut rng);
        let fraction = count[0] / self.clients_per_round as f64;
        let next = adapted_clip(
            self.clip,
            fraction,
            adaptive.target_quantile,
            adaptive.learning_rate,
        );
        // Held as the f32 that goes down and into checkpoints, so a resumed run goes on from
        // the very clip.
        self.clip = f64::from(next as f32);
        fraction
    }
}

impl Strategy for PrivateServer {
    fn downlink(&self) -> Tensors {
        let mut tensors = self.inner.downlink();
        if self.adaptive.is_some() {
            tensors.insert(CLIP_TENSOR, vec![self.clip as f32]);
        }
        tensors
    }

    fn reads(&self) -> Reads {
        let mut sums = vec![Sum::params(Weighting::One)];
        if self.adaptive.is_some() {
            sums.push(Sum::extra(UNCLIPPED_TENSOR));
        }
        Reads::Sums(sums)
    }

    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let Collected::Sums {
            sums,
            updates,
            clients,
        } = input
        else {
            unreachable!("a private server reads sums");
        };
        let mut sums = sums.into_iter();
        let model_sum = sums.next().expect("the models' sum comes first");
        let clip = self.clip;
        let mean = self.noisy_mean(round.number, global, &model_sum, updates);
        let unclipped = self.adaptive.map(|adaptive| {
            let count = sums.next().and_then(|sum| sum.first().copied());
            self.adapt(round.number, adaptive, count.unwrap_or(0.0))
        });
        let input = Collected::Sums {
            sums: vec![mean],
            updates,
            clients,
        };
        let spent = self.accounting.epsilon_after(round.number.into()).epsilon;
        let mut aggregate = self
            .inner
            .aggregate(round, global, input)
            .with(EPSILON, spent)
            .with(CLIP, clip);
        if let Some(fraction) = unclipped {
            aggregate = aggregate.with(UNCLIPPED_FRACTION, fraction);
        }
        aggregate
    }

    fn state(&self) -> Tensors {
        let mut state = self.inner.state();
        if self.adaptive.is_some() {
            state.insert(CLIP, vec![self.clip as f32]);
        }
        state
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        let mut inner = Tensors::new();
        for (name, values) in state.iter() {
            if name == CLIP && self.adaptive.is_some() {
                let [clip] = values else {
                    return Err(StateError::Invalid(format!(
                        "{CLIP} holds {} values, not 1",
                        values.len()
                    )));
                };
                self.clip = f64::from(*clip);
            } else {
                inner.insert(name, values.to_vec());
            }
        }
        self.inner.restore(&inner)
    }

    fn aggregates_no_updates(&self) -> bool {
        true
    }

    fn selector(&mut self) -> Option<Box<dyn super::Selector>> {
        self.inner.selector()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::super::{Algorithm, FedAvgM, FedAvgServer, Setting};
    use super::*;
    use crate::config::ClientSampling;

    fn privacy(clip: ClipConfig) -> PrivacyConfig {
        PrivacyConfig {
            noise_multiplier: 1.0,
            clip,
            per_layer: false,
            noise: NoiseSite::Central,
            sampling: ClientSampling::Poisson,
            delta: 1e-5,
            target_epsilon: None,
        }
    }

    fn fixed(norm: f64) -> ClipConfig {
        ClipConfig::Fixed { norm }
    }

    fn server(privacy: &PrivacyConfig) -> PrivateServer {
        PrivateServer::new(Box::new(FedAvgServer), privacy, 5, 10, 4).unwrap()
    }

    /// The noise the server draws for round 1's sum, standard deviation `std`.
    fn noise(values: usize, std: f64) -> Vec<f64> {
        let mut noise = vec![0.0; values];
        add_gaussian_noise(&mut noise, std, &mut stream(5, CENTRAL_NOISE, 1, 0));
        noise
    }

    #[test]
    fn the_mean_is_the_noisy_sum_of_changes_over_the_clients_a_round_samples() {
        let privacy = privacy(fixed(2.0));
        let global = [1.0f32, -1.0];
        // Three of the four clients a round samples answered, each weighted alike whatever
        // its samples.
        let updates = [
            update(0, 10, vec![1.5, -1.0]),
            update(3, 500, vec![1.0, 0.0]),
            update(7, 40, vec![0.5, -2.0]),
        ];
        let next = server(&privacy).aggregate_updates(&round(), &global, &updates);
        let noise = noise(2, 1.0 * 2.0);
        let want = [
            (1.0 + (0.5 + 0.0 - 0.5 + noise[0]) / 4.0) as f32,
            (-1.0 + (0.0 + 1.0 - 1.0 + noise[1]) / 4.0) as f32,
        ];
        assert_eq!(next.model, want);
        assert_eq!(next.metrics[CLIP], 2.0);
        let spent = privacy.accounting(10, 4).epsilon_after(1).epsilon;
        assert_eq!(next.metrics[EPSILON], spent);
    }

    #[test]
    fn a_round_nobody_answered_is_the_noise_alone() {
        let privacy = privacy(fixed(1.0));
        let mut server = server(&privacy);
        assert!(server.aggregates_no_updates());
        let next = server.aggregate_updates(&round(), &[0.5, 0.5], &[]);
        let noise = noise(2, 1.0);
        assert_eq!(
            next.model,
            [(0.5 + noise[0] / 4.0) as f32, (0.5 + noise[1] / 4.0) as f32]
        );
    }

    #[test]
    fn local_noise_leaves_the_server_only_the_fixed_denominator() {
        let mut privacy = privacy(fixed(1.0));
        privacy.noise = NoiseSite::Local;
        let updates = [update(0, 10, vec![2.0]), update(1, 10, vec![4.0])];
        let next = server(&privacy).aggregate_updates(&round(), &[0.0], &updates);
        assert_eq!(next.model, [1.5]);
    }

    #[test]
    fn the_adaptive_clip_goes_down_with_the_model_and_follows_the_noisy_count() {
        let privacy = privacy(ClipConfig::Adaptive {
            initial: 0.5,
            target_quantile: 0.5,
            learning_rate: 0.2,
            count_std: Some(1.0),
        });
        let mut server = server(&privacy);
        assert_eq!(server.downlink().expect(CLIP_TENSOR), [0.5]);
        let unclipped = |client, bit: f32| {
            let mut u = update(client, 10, vec![0.0]);
            u.extras = Tensors::new().with(UNCLIPPED_TENSOR, vec![bit]);
            u
        };
        let updates = [
            unclipped(0, 1.0),
            unclipped(1, 1.0),
            unclipped(2, 1.0),
            unclipped(3, 0.0),
        ];
        let next = server.aggregate_updates(&round(), &[0.0], &updates);
        let mut count = [3.0];
        add_gaussian_noise(&mut count, 1.0, &mut stream(5, CENTRAL_NOISE, 1, 1));
        let fraction = count[0] / 4.0;
        assert_eq!(next.metrics[UNCLIPPED_FRACTION], fraction);
        let clip = adapted_clip(0.5, fraction, 0.5, 0.2) as f32;
        assert_eq!(server.downlink().expect(CLIP_TENSOR), [clip]);
        // The clip is kept in the checkpoint and taken back to the bit.
        let state = server.state();
        let mut resumed = PrivateServer::new(Box::new(FedAvgServer), &privacy, 5, 10, 4).unwrap();
        resumed.restore(&state).unwrap();
        assert_eq!(resumed.downlink().expect(CLIP_TENSOR), [clip]);
    }

    #[test]
    fn the_inner_server_keeps_its_own_state() {
        let privacy = privacy(fixed(1.0));
        let setting = Setting::new(10, 0.1);
        let params = Default::default();
        let inner = FedAvgM.server(&params, &setting, 1);
        let mut server = PrivateServer::new(inner, &privacy, 5, 10, 4).unwrap();
        server.aggregate_updates(&round(), &[0.0], &[update(0, 1, vec![1.0])]);
        let state = server.state();
        assert!(state.iter().next().is_some(), "FedAvgM's momentum is kept");
        let inner = FedAvgM.server(&params, &setting, 1);
        let mut resumed = PrivateServer::new(inner, &privacy, 5, 10, 4).unwrap();
        resumed.restore(&state).unwrap();
        assert_eq!(resumed.state(), state);
    }

    #[test]
    fn only_a_server_that_reads_the_mean_model_can_be_made_private() {
        let params = Default::default();
        let krum = super::super::Krum.server(&params, &Setting::new(10, 0.1), 1);
        assert!(!PrivateServer::can_wrap(krum.as_ref()));
        assert!(PrivateServer::new(krum, &privacy(fixed(1.0)), 5, 10, 4).is_err());
        assert!(PrivateServer::can_wrap(&FedAvgServer));
    }
}
