//! How much local training a client does in a round: the same for everyone, drawn per client
//! and round, or as much as fits the client's speed and the round's deadline. FedNova exists
//! for the second and third cases: when clients do unequal work, FedAvg drifts towards the
//! busiest ones.

use rand::RngExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::check::{Problems, Validate};
use crate::seed::{Purpose, stream};

/// The draw of a client's number of local epochs, per (round, edge round, client).
const LOCAL_EPOCHS: Purpose = Purpose::new("local-epochs");

/// The `client.work` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LocalWork {
    /// `client.epochs` epochs for every client (the default).
    #[default]
    Fixed,
    /// A number of epochs drawn uniformly from `min_epochs..=max_epochs` for each client in
    /// each round (as in the FedNova paper's experiments).
    Uniform {
        /// The fewest epochs.
        min_epochs: u32,
        /// The most epochs.
        max_epochs: u32,
    },
    /// As many SGD steps as the client's compute speed allows within
    /// `availability.deadline_s` (link time not counted), at least one and at most
    /// `client.epochs` epochs' worth.
    FitDeadline,
    /// The same number of SGD steps for every client, whatever its size (pFedMe's and
    /// FedProx's local rounds `R`): a client's batches go on into its next epoch, reshuffled,
    /// and `client.epochs` is not read.
    Steps {
        /// Steps each round.
        steps: u32,
    },
}

impl LocalWork {
    /// Whether this is the default, which the resolved config leaves out.
    pub fn is_fixed(&self) -> bool {
        *self == LocalWork::Fixed
    }
}

impl Validate for LocalWork {
    /// The round deadline, which `fit_deadline` needs.
    type Context<'a> = Option<f64>;

    fn validate(&self, deadline_s: Option<f64>, problems: &mut Problems) {
        match *self {
            LocalWork::Fixed => {}
            LocalWork::Uniform {
                min_epochs,
                max_epochs,
            } => problems.require(
                min_epochs >= 1 && min_epochs <= max_epochs,
                "min_epochs",
                || {
                    format!(
                        "is {min_epochs}; must be at least 1 and at most max_epochs ({max_epochs})"
                    )
                },
            ),
            LocalWork::FitDeadline => problems.require(deadline_s.is_some(), "kind", || {
                "\"fit_deadline\" needs availability.deadline_s".to_string()
            }),
            LocalWork::Steps { steps } => problems.at_least_one("steps", u64::from(steps)),
        }
    }
}

/// One client's local work in one (edge) round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// SGD steps to take.
    pub steps: u32,
    /// Samples those steps process, which set the simulated compute time.
    pub samples: usize,
}

/// Everything that decides a client's work besides the client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkPlan {
    /// The `client.work` setting.
    pub work: LocalWork,
    /// `client.epochs`.
    pub epochs: u32,
    /// `client.batch_size`.
    pub batch_size: usize,
    /// `availability.deadline_s`.
    pub deadline_s: Option<f64>,
    /// The experiment seed.
    pub seed: u64,
}

impl WorkPlan {
    /// `epochs` epochs in batches of `batch_size` for every client.
    pub fn fixed(epochs: u32, batch_size: usize) -> Self {
        Self {
            work: LocalWork::Fixed,
            epochs,
            batch_size,
            deadline_s: None,
            seed: 0,
        }
    }

    /// The work of `client`, holding `num_samples` samples and computing `speed` samples a
    /// second, in an edge round of `round`.
    pub fn work(
        &self,
        (round, edge_round): (u32, u32),
        client: usize,
        num_samples: usize,
        speed: f64,
    ) -> Work {
        let per_epoch = num_samples.div_ceil(self.batch_size) as u64;
        let steps = match self.work {
            LocalWork::Fixed => u64::from(self.epochs) * per_epoch,
            LocalWork::Uniform {
                min_epochs,
                max_epochs,
            } => {
                let purpose = LOCAL_EPOCHS.at_edge_round(edge_round);
                let mut rng = stream(self.seed, purpose, round, client);
                u64::from(rng.random_range(min_epochs..=max_epochs)) * per_epoch
            }
            LocalWork::FitDeadline => {
                let budget = self.deadline_s.unwrap_or(f64::INFINITY) * speed;
                let fits = (budget / self.batch_size as f64).floor();
                let most = u64::from(self.epochs) * per_epoch;
                if fits.is_finite() {
                    (fits as u64).clamp(1, most)
                } else {
                    most
                }
            }
            LocalWork::Steps { steps } => u64::from(steps),
        };
        let steps = u32::try_from(steps).unwrap_or(u32::MAX);
        Work {
            steps,
            samples: samples_in(u64::from(steps), per_epoch, num_samples, self.batch_size),
        }
    }
}

/// Samples processed by `steps` steps over epochs of `per_epoch` steps (the last step of an
/// epoch taking what is left of the client's `num_samples`).
fn samples_in(steps: u64, per_epoch: u64, num_samples: usize, batch_size: usize) -> usize {
    let (epochs, rest) = (steps / per_epoch, steps % per_epoch);
    epochs as usize * num_samples + rest as usize * batch_size
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(work: LocalWork) -> WorkPlan {
        WorkPlan {
            work,
            epochs: 2,
            batch_size: 10,
            deadline_s: Some(1.0),
            seed: 5,
        }
    }

    #[test]
    fn fixed_work_is_whole_epochs() {
        // 25 samples in batches of 10: 3 steps an epoch, the last of 5 samples.
        let work = plan(LocalWork::Fixed).work((1, 0), 0, 25, 1.0);
        assert_eq!(
            work,
            Work {
                steps: 6,
                samples: 50
            }
        );
    }

    #[test]
    fn fit_deadline_takes_what_the_speed_allows() {
        // 45 samples a second for 1 s: 4 steps of 10; at most 2 epochs (6 steps); at least 1.
        let fit = plan(LocalWork::FitDeadline);
        assert_eq!(
            fit.work((1, 0), 0, 25, 45.0),
            Work {
                steps: 4,
                samples: 35
            }
        );
        assert_eq!(fit.work((1, 0), 0, 25, 1e9).steps, 6);
        assert_eq!(fit.work((1, 0), 0, 25, 0.1).steps, 1);
        // 20 steps over 25 samples in batches of 10 (3 steps an epoch): six epochs and two
        // steps, 170 samples.
        let steps = plan(LocalWork::Steps { steps: 20 }).work((1, 0), 0, 25, 1.0);
        assert_eq!(
            steps,
            Work {
                steps: 20,
                samples: 6 * 25 + 2 * 10
            }
        );
    }

    #[test]
    fn uniform_epochs_vary_by_client_and_stay_in_range() {
        let uniform = plan(LocalWork::Uniform {
            min_epochs: 1,
            max_epochs: 4,
        });
        let steps: Vec<u32> = (0..50)
            .map(|c| uniform.work((3, 0), c, 30, 1.0).steps)
            .collect();
        assert!(steps.iter().all(|s| [3, 6, 9, 12].contains(s)), "{steps:?}");
        assert!(steps.iter().any(|&s| s != steps[0]));
        assert_eq!(steps[7], uniform.work((3, 0), 7, 30, 1.0).steps);
    }
}
