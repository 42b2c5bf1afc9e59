//! The `privacy` section: DP-FedAvg's clipping and noise around the algorithm, and the
//! epsilon the run may spend. What the clip and the noise do is [`crate::privacy`]'s; where
//! they are applied, the trainer's (clients) and the server half's.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::FederationConfig;
use super::check::{Problems, Validate};
use crate::privacy::mechanism::update_noise_multiplier;
use crate::privacy::{Conversion, Repeated, Sampling, Series, SubsampledGaussian};

/// Client-level differential privacy (DP-FedAvg, McMahan et al. 2018): each sampled client's
/// change to the model it was sent is clipped to an L2 norm `S`, the server sums the clipped
/// changes, adds Gaussian noise of standard deviation `noise_multiplier · S` (or each client
/// adds its own, `"noise": "local"`), and divides by `federation.clients_per_round` whoever
/// answered: every client counts alike, whatever its samples. The epsilon spent after each
/// round is in `metrics.jsonl` (`epsilon`), the total in `summary.json`.
///
/// The accountant follows the run's sampling (`sampling`): Poisson sampling with the RDP of
/// the Poisson-subsampled Gaussian at `noise_multiplier`, or fixed-size sampling with that of
/// sampling without replacement (Wang et al. 2019) at `noise_multiplier / 2`, since replacing
/// a client's data moves the sum by up to `2S`. With local noise, each client's upload is
/// accounted as the Gaussian mechanism (sensitivity `2S`) in every round: the server sees who
/// took part, so sampling amplifies nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrivacyConfig {
    /// `z`: the noise's standard deviation over the clip norm. With an adaptive clip, the
    /// total of the sum's and the count's noise (Andrew et al. 2021).
    pub noise_multiplier: f64,
    /// How each client's change is clipped.
    pub clip: ClipConfig,
    /// Clip each layer of the model apart, to `S / sqrt(layers)` each (McMahan et al.'s
    /// per-layer clipping), rather than the whole change to `S`.
    #[serde(default)]
    pub per_layer: bool,
    /// Where the noise is added: `central` (the server, once, on the sum) or `local` (each
    /// client, on its own clipped change).
    #[serde(default)]
    pub noise: NoiseSite,
    /// How each round's clients are drawn: `poisson` (each client independently, with
    /// probability clients_per_round / num_clients, so the round's size varies) or `fixed`
    /// (clients_per_round of them, as a run without privacy draws).
    #[serde(default)]
    pub sampling: ClientSampling,
    /// Delta of the (epsilon, delta) guarantee, in (0, 1): commonly below 1 /
    /// `federation.num_clients`.
    pub delta: f64,
    /// The epsilon the run may spend: a run that would spend more before its last round is
    /// refused, with the round where the budget runs out. Absent: no budget, epsilon reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_epsilon: Option<f64>,
}

/// Where the noise is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NoiseSite {
    /// The server adds it once to the sum of the clipped changes.
    #[default]
    Central,
    /// Each client adds it to its own clipped change before it sends it.
    Local,
}

/// How a private run draws each round's clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClientSampling {
    /// Each client independently with probability `q = clients_per_round / num_clients`:
    /// neighbouring federations add or remove a client, whose clipped change moves the sum by
    /// at most `S` (McMahan et al. 2018's sampling).
    #[default]
    Poisson,
    /// `clients_per_round` clients without replacement: neighbouring federations replace a
    /// client's data, which moves the sum by up to `2S`, so the same noise buys a larger
    /// epsilon (about 3 times the noise for the same epsilon, at 10% sampling).
    Fixed,
}

/// How each client's change is clipped.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClipConfig {
    /// To one norm throughout.
    Fixed {
        /// The L2 norm `S`.
        norm: f64,
    },
    /// To a norm that follows a quantile of the clients' change norms (Andrew et al. 2021):
    /// each client says whether its change was within the clip, the server counts them with
    /// Gaussian noise and moves the clip geometrically towards the target quantile.
    Adaptive {
        /// The clip of round 1.
        #[serde(default = "initial_clip")]
        initial: f64,
        /// The fraction of clients whose change should fall within the clip, in [0, 1].
        #[serde(default = "half")]
        target_quantile: f64,
        /// The step of the clip's geometric update.
        #[serde(default = "clip_learning_rate")]
        learning_rate: f64,
        /// The standard deviation of the noise on the count of unclipped clients; absent,
        /// `federation.clients_per_round / 20`, as the paper sets it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count_std: Option<f64>,
    },
}

fn initial_clip() -> f64 {
    0.1
}

fn half() -> f64 {
    0.5
}

fn clip_learning_rate() -> f64 {
    0.2
}

impl ClipConfig {
    /// The clip of round 1.
    pub fn initial(&self) -> f64 {
        match *self {
            ClipConfig::Fixed { norm } => norm,
            ClipConfig::Adaptive { initial, .. } => initial,
        }
    }
}

impl PrivacyConfig {
    /// The probability that each client is in a round, where clients are Poisson-sampled.
    pub fn poisson_rate(&self, num_clients: usize, clients_per_round: usize) -> Option<f64> {
        (self.sampling == ClientSampling::Poisson)
            .then(|| clients_per_round as f64 / num_clients as f64)
    }

    /// The standard deviation of the noise on the count of unclipped clients, for an
    /// adaptive clip in a federation of `clients_per_round` clients a round.
    pub fn count_std(&self, clients_per_round: usize) -> Option<f64> {
        match self.clip {
            ClipConfig::Fixed { .. } => None,
            ClipConfig::Adaptive { count_std, .. } => {
                Some(count_std.unwrap_or(clients_per_round as f64 / 20.0))
            }
        }
    }

    /// The noise multiplier of the clipped changes' noise: the whole `noise_multiplier` with a
    /// fixed clip, what the count leaves of it with an adaptive one (`None` where it leaves
    /// nothing).
    pub fn update_noise_multiplier(&self, clients_per_round: usize) -> Option<f64> {
        match self.count_std(clients_per_round) {
            None => Some(self.noise_multiplier),
            Some(count_std) => update_noise_multiplier(self.noise_multiplier, count_std),
        }
    }

    /// What each round spends, in a federation of `num_clients` sampling `clients_per_round`.
    pub fn accounting(&self, num_clients: usize, clients_per_round: usize) -> Repeated {
        let rate = clients_per_round as f64 / num_clients as f64;
        let (sampling, noise_multiplier) = match (self.noise, self.sampling) {
            (NoiseSite::Central, ClientSampling::Poisson) => {
                (Sampling::Poisson { rate }, self.noise_multiplier)
            }
            // Replacing one client's data moves the sum of clipped changes by up to 2S.
            (NoiseSite::Central, ClientSampling::Fixed) => {
                (Sampling::FixedSize { rate }, self.noise_multiplier / 2.0)
            }
            (NoiseSite::Local, _) => (
                Sampling::FixedSize { rate: 1.0 },
                self.noise_multiplier / 2.0,
            ),
        };
        let step = SubsampledGaussian {
            noise_multiplier,
            sampling,
            series: Series::Absolute,
        };
        Repeated::new(&step, self.delta, Conversion::Balle2020)
    }
}

impl Validate for PrivacyConfig {
    /// The federation, whose sampling and rounds the budget depends on.
    type Context<'a> = &'a FederationConfig;

    fn validate(&self, federation: &FederationConfig, problems: &mut Problems) {
        let before = problems.count();
        problems.positive("noise_multiplier", self.noise_multiplier);
        problems.require(self.delta > 0.0 && self.delta < 1.0, "delta", || {
            format!("is {}; must be in (0, 1), e.g. 1e-5", self.delta)
        });
        if let Some(target) = self.target_epsilon {
            problems.positive("target_epsilon", target);
        }
        problems.at("clip", |p| self.clip.validate((), p));
        let per_round = federation.round_size();
        if let Some(count_std) = self.count_std(per_round) {
            if self.noise == NoiseSite::Local {
                problems.add(
                    "clip.kind",
                    "is \"adaptive\"; the count of unclipped clients is noised at the server, \
                     so local noise takes a \"fixed\" clip",
                );
            }
            if self.per_layer {
                problems.add(
                    "per_layer",
                    "is true; an adaptive clip follows one norm, the whole change's: give \
                     per_layer false or a \"fixed\" clip",
                );
            }
            if count_std > 0.0 && self.update_noise_multiplier(per_round).is_none() {
                let given = matches!(
                    self.clip,
                    ClipConfig::Adaptive {
                        count_std: Some(_),
                        ..
                    }
                );
                let default = if given {
                    ""
                } else {
                    " (by default, clients_per_round / 20)"
                };
                problems.add(
                    "clip.count_std",
                    format!(
                        "is {count_std}{default}; the count's noise would take all of \
                         noise_multiplier {}: twice count_std must exceed it",
                        self.noise_multiplier
                    ),
                );
            }
        }
        let holds = problems.count() == before;
        if holds && (1..=federation.num_clients).contains(&per_round) && federation.rounds > 0 {
            self.check_budget(
                federation.num_clients,
                per_round,
                federation.rounds,
                problems,
            );
        }
    }
}

impl PrivacyConfig {
    /// Refuses a budget that runs out before the last round, naming the round.
    fn check_budget(&self, clients: usize, per_round: usize, rounds: u32, problems: &mut Problems) {
        let Some(target) = self.target_epsilon else {
            return;
        };
        let accounting = self.accounting(clients, per_round);
        let within = accounting.steps_within(target, rounds.into());
        if within >= u64::from(rounds) {
            return;
        }
        let total = accounting.epsilon_after(rounds.into()).epsilon;
        let spent = accounting.epsilon_after(within).epsilon;
        let detail = if within == 0 {
            format!(
                "round 1 alone spends {:.4}",
                accounting.epsilon_after(1).epsilon
            )
        } else {
            format!("the budget runs out after round {within} (epsilon {spent:.4} then)")
        };
        problems.add(
            "target_epsilon",
            format!(
                "is {target}; the run's {rounds} rounds spend epsilon {total:.4}: {detail}; \
                 lower federation.rounds, or raise noise_multiplier (fedsim privacy finds the \
                 noise a target needs)"
            ),
        );
    }
}

impl Validate for ClipConfig {
    type Context<'a> = ();

    fn validate(&self, _: (), problems: &mut Problems) {
        match *self {
            ClipConfig::Fixed { norm } => problems.positive("norm", norm),
            ClipConfig::Adaptive {
                initial,
                target_quantile,
                learning_rate,
                count_std,
            } => {
                problems.positive("initial", initial);
                problems.require(
                    (0.0..=1.0).contains(&target_quantile),
                    "target_quantile",
                    || format!("is {target_quantile}; must be in [0, 1]"),
                );
                problems.positive("learning_rate", learning_rate);
                if let Some(count_std) = count_std {
                    problems.positive("count_std", count_std);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn federation(rounds: u32) -> FederationConfig {
        serde_json::from_value(serde_json::json!({
            "num_clients": 100, "clients_per_round": 10, "rounds": rounds
        }))
        .unwrap()
    }

    fn section(fields: serde_json::Value) -> PrivacyConfig {
        let mut section = serde_json::json!({
            "noise_multiplier": 1.0, "clip": {"kind": "fixed", "norm": 1.0}, "delta": 1e-5
        });
        for (field, value) in fields.as_object().unwrap() {
            section[field] = value.clone();
        }
        serde_json::from_value(section).unwrap()
    }

    fn problems(privacy: &PrivacyConfig, rounds: u32) -> Vec<(String, String)> {
        let mut problems = Problems::new();
        privacy.validate(&federation(rounds), &mut problems);
        problems.into_vec()
    }

    #[test]
    fn a_budget_names_the_round_it_runs_out_after() {
        let privacy = section(serde_json::json!({"target_epsilon": 3.0}));
        let accounting = privacy.accounting(100, 10);
        let within = accounting.steps_within(3.0, 100);
        let found = problems(&privacy, 100);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "target_epsilon");
        let said = format!("the budget runs out after round {within} (");
        assert!(found[0].1.contains(&said), "{found:?}");
        assert!(problems(&privacy, within as u32).is_empty());
    }

    #[test]
    fn a_budget_that_round_one_exceeds_says_so() {
        let privacy = section(serde_json::json!({"target_epsilon": 0.1}));
        let found = problems(&privacy, 5);
        assert!(found[0].1.contains("round 1 alone spends"), "{found:?}");
    }

    #[test]
    fn sampling_and_noise_site_choose_the_accountants_mechanism() {
        let spent = |fields| {
            section(fields)
                .accounting(100, 10)
                .epsilon_after(10)
                .epsilon
        };
        let poisson = spent(serde_json::json!({}));
        let fixed = spent(serde_json::json!({"sampling": "fixed"}));
        let local = spent(serde_json::json!({"noise": "local"}));
        assert!(
            poisson < fixed && fixed < local,
            "{poisson} {fixed} {local}"
        );
    }
}
