//! Synthetic(alpha, beta), the data set of Li et al. (2020), "Federated Optimization in
//! Heterogeneous Networks" (FedProx), generated from the seed instead of read from a file.
//!
//! Each user `k` has its own softmax-linear labelling `y = argmax(x W_k + b_k)` and its own
//! feature distribution `x ~ N(v_k, Σ)`, `Σ = diag(j^-1.2)`. `alpha` sets how much the users'
//! models differ (`W_k, b_k ~ N(u_k, 1)`, `u_k ~ N(0, alpha)`), `beta` how much their features
//! do (`v_k ~ N(B_k, 1)`, `B_k ~ N(0, beta)`); as in the paper's code, the second argument of
//! each normal is a standard deviation. The IID variant gives every user one model drawn from
//! `N(0, 1)` and features from `N(0, Σ)`. Users hold `floor(LogNormal(4, 2)) + 50` samples;
//! each user's first 90% (after a shuffle) are training samples, the rest test samples. The
//! users are the data set's natural clients.

use std::sync::Arc;

use rand::seq::SliceRandom;
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, LogNormal, Normal, StandardNormal};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::clients::{ClientSource, OwnSamples, Roster};
use super::{
    DataContext, DataError, DataShape, DataSource, Dataset, NaturalClients, SampleKind,
    SampleShape, TrainTest,
};
use crate::config::check::Problems;
use crate::network::ClientId;
use crate::seed::{Purpose, stream};

/// The draws that generate the data set; per user, so a user's samples depend only on the
/// seed and its id.
const GENERATION: Purpose = Purpose::new("synthetic-data");
/// The draws of the IID variant's one labelling model.
const SHARED_MODEL: Purpose = Purpose::new("synthetic-shared-model");

/// The most users the generator makes (each holds at least 50 samples).
pub const MAX_USERS: usize = 1_000_000;

/// The fraction of each user's samples that are training samples.
const TRAIN_FRACTION: f64 = 0.9;

/// Synthetic(alpha, beta) as an experiment file names it; its users are the natural clients
/// (`"partition": {"scheme": "natural"}`), one per `federation.num_clients`.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticData;

impl DataSource for SyntheticData {
    type Params = SyntheticConfig;

    fn name(&self) -> &'static str {
        "synthetic"
    }

    fn about(&self) -> &'static str {
        "the FedProx paper's Synthetic(alpha, beta) (Li et al. 2020), generated from the seed; its users are natural clients"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "alpha",
                "how much the users' labelling models differ; at least 0",
            ),
            (
                "beta",
                "how much the users' feature distributions differ; at least 0",
            ),
            (
                "iid",
                "one model and one feature distribution for all users; alpha and beta must then be 0",
            ),
            ("features", "features per sample"),
            ("classes", "number of classes, 2 to 256"),
        ]
    }

    fn sample_kind(&self, _: &SyntheticConfig) -> Option<SampleKind> {
        Some(SampleKind::Row)
    }

    fn has_natural_clients(&self, _: &SyntheticConfig) -> bool {
        true
    }

    fn check(&self, params: &SyntheticConfig, context: &DataContext, problems: &mut Problems) {
        params.check(problems);
        if context.num_clients > MAX_USERS {
            problems.add_elsewhere(
                "federation.num_clients",
                format!(
                    "is {}; the synthetic data set makes at most {MAX_USERS} users",
                    context.num_clients
                ),
            );
        }
    }

    fn load(
        &self,
        params: &SyntheticConfig,
        context: &DataContext,
    ) -> Result<TrainTest, DataError> {
        Ok(params.generate(context.num_clients, context.seed))
    }

    fn clients_on_demand(
        &self,
        params: &SyntheticConfig,
        context: &DataContext,
    ) -> Result<Option<Arc<dyn ClientSource>>, DataError> {
        Ok(Some(Arc::new(
            params.users(context.num_clients, context.seed),
        )))
    }
}

/// Synthetic(alpha, beta)'s parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticConfig {
    /// How much the users' labelling models differ; at least 0.
    #[serde(default)]
    pub alpha: f64,
    /// How much the users' feature distributions differ; at least 0.
    #[serde(default)]
    pub beta: f64,
    /// One model and one feature distribution for all users (the paper's Synthetic IID);
    /// `alpha` and `beta` must then be 0. Default false.
    #[serde(default)]
    pub iid: bool,
    /// Features per sample. Default 60.
    #[serde(default = "default_features")]
    pub features: usize,
    /// Number of classes, at most 256. Default 10.
    #[serde(default = "default_classes")]
    pub classes: usize,
}

fn default_features() -> usize {
    60
}

fn default_classes() -> usize {
    10
}

impl SyntheticConfig {
    /// Adds every problem with the values to `problems` (fields under `data`).
    pub fn check(&self, problems: &mut Problems) {
        for (field, value) in [("alpha", self.alpha), ("beta", self.beta)] {
            if !(value >= 0.0 && value.is_finite()) {
                problems.add(field, format!("is {value}; must be a number of at least 0"));
            } else if self.iid && value != 0.0 {
                problems.add(field, format!("is {value}; the IID variant takes none"));
            }
        }
        problems.at_least_one("features", self.features as u64);
        problems.require((2..=256).contains(&self.classes), "classes", || {
            format!("is {}; must be between 2 and 256", self.classes)
        });
    }

    /// The shape of the samples.
    pub fn shape(&self) -> DataShape {
        DataShape {
            sample: SampleShape::Row(self.features),
            num_classes: self.classes,
        }
    }

    /// Generates `users` users' samples from `seed` (at most [`MAX_USERS`] users): the
    /// pooled training and test sets, and each user's samples in them.
    pub fn generate(&self, users: usize, seed: u64) -> TrainTest {
        let generator = self.users(users, seed);
        let (mut train, mut test) = (Samples::default(), Samples::default());
        let mut natural = NaturalClients {
            train: Vec::with_capacity(users),
            test: Vec::with_capacity(users),
        };
        for user in 0..users {
            let (own_train, own_test) = generator.user(user);
            natural.train.push(train.append(own_train));
            natural.test.push(test.append(own_test));
        }
        let shape = self.shape();
        TrainTest {
            train: train.into_dataset(shape),
            test: test.into_dataset(shape),
            natural: Some(natural),
            files: Vec::new(),
        }
    }

    /// The `users` users of `seed`, made one at a time: each with the samples
    /// [`generate`](Self::generate) gives it.
    pub fn users(&self, users: usize, seed: u64) -> SyntheticUsers {
        let shared = self.iid.then(|| {
            let rng = &mut stream(seed, SHARED_MODEL, 0, 0);
            Labelling::draw(self, 0.0, rng)
        });
        SyntheticUsers {
            config: self.clone(),
            seed,
            users,
            shared,
        }
    }
}

/// Synthetic(alpha, beta)'s users made one at a time, each from its own stream: the source of a
/// federation too large to generate whole.
pub struct SyntheticUsers {
    config: SyntheticConfig,
    seed: u64,
    users: usize,
    /// The IID variant's one labelling model.
    shared: Option<Labelling>,
}

impl SyntheticUsers {
    /// The stream user `user`'s samples are drawn from.
    fn stream_of(&self, user: usize) -> ChaCha12Rng {
        stream(self.seed, GENERATION, 0, user)
    }

    /// How many samples `user` holds, training and test together: its stream's first draw.
    fn sample_count(rng: &mut ChaCha12Rng) -> usize {
        LogNormal::new(4.0, 2.0)
            .expect("constant parameters")
            .sample(rng) as usize
            + 50
    }

    /// The number of `count` samples that are training samples.
    fn train_len(count: usize) -> usize {
        (TRAIN_FRACTION * count as f64) as usize
    }

    /// User `user`'s training and test samples: all its samples, shuffled, then cut.
    fn user(&self, user: usize) -> (Samples, Samples) {
        let rng = &mut self.stream_of(user);
        let mut samples = self.samples(rng);
        samples.shuffle(rng);
        let train_len = Self::train_len(samples.len());
        let (mut train, mut test) = (Samples::default(), Samples::default());
        for (i, (features, label)) in samples.into_iter().enumerate() {
            let split = if i < train_len { &mut train } else { &mut test };
            split.features.extend(features);
            split.labels.push(label);
        }
        (train, test)
    }

    /// One user's samples, each its features and label, drawn from its own model and
    /// feature distribution unless the IID variant's shared one gives them.
    fn samples(&self, rng: &mut ChaCha12Rng) -> Vec<(Vec<f32>, u8)> {
        let config = &self.config;
        let count = Self::sample_count(rng);
        let (own, feature_mean) = match &self.shared {
            Some(_) => (None, vec![0.0; config.features]),
            None => {
                let model_mean = normal(0.0, config.alpha, rng);
                let feature_center = normal(0.0, config.beta, rng);
                let feature_mean = (0..config.features)
                    .map(|_| normal(feature_center, 1.0, rng))
                    .collect();
                (Some(Labelling::draw(config, model_mean, rng)), feature_mean)
            }
        };
        let labelling = self
            .shared
            .as_ref()
            .or(own.as_ref())
            .expect("one of the two is set");
        (0..count)
            .map(|_| {
                let x: Vec<f64> = feature_mean
                    .iter()
                    .enumerate()
                    .map(|(j, mean)| {
                        let std = ((j + 1) as f64).powf(-0.6); // variance j^-1.2
                        let z: f64 = StandardNormal.sample(rng);
                        mean + std * z
                    })
                    .collect();
                let label = labelling.label(&x);
                (x.into_iter().map(|v| v as f32).collect(), label)
            })
            .collect()
    }
}

impl ClientSource for SyntheticUsers {
    fn shape(&self) -> DataShape {
        self.config.shape()
    }

    fn roster(&self) -> Roster {
        let counts = (0..self.users)
            .into_par_iter()
            .map(|user| {
                let count = Self::sample_count(&mut self.stream_of(user));
                let train = Self::train_len(count);
                [train, count - train].map(|n| u32::try_from(n).unwrap_or(u32::MAX))
            })
            .collect();
        Roster::new(counts)
    }

    fn client(&self, client: ClientId) -> Result<OwnSamples, DataError> {
        let shape = self.shape();
        let (train, test) = self.user(client);
        Ok(OwnSamples {
            train: train.into_dataset(shape),
            test: test.into_dataset(shape),
        })
    }
}

/// `N(mean, std)`; a zero `std` gives `mean`.
fn normal(mean: f64, std: f64, rng: &mut ChaCha12Rng) -> f64 {
    Normal::new(mean, std)
        .expect("validated: std is finite and at least 0")
        .sample(rng)
}

/// A user's labelling model: weights `[features, classes]` and biases, each `N(mean, 1)`.
struct Labelling {
    weights: Vec<f64>,
    biases: Vec<f64>,
    classes: usize,
}

impl Labelling {
    fn draw(config: &SyntheticConfig, mean: f64, rng: &mut ChaCha12Rng) -> Self {
        let mut draw = |n: usize| (0..n).map(|_| normal(mean, 1.0, rng)).collect();
        Self {
            weights: draw(config.features * config.classes),
            biases: draw(config.classes),
            classes: config.classes,
        }
    }

    /// The class of highest score `x W + b` (softmax keeps the order); the first on a tie.
    fn label(&self, x: &[f64]) -> u8 {
        let mut scores = self.biases.clone();
        for (row, &value) in self.weights.chunks_exact(self.classes).zip(x) {
            scores
                .iter_mut()
                .zip(row)
                .for_each(|(s, w)| *s += w * value);
        }
        let best = scores
            .iter()
            .enumerate()
            .fold(0, |best, (c, &s)| if s > scores[best] { c } else { best });
        u8::try_from(best).expect("at most 256 classes")
    }
}

/// Samples gathered for one split.
#[derive(Default)]
struct Samples {
    features: Vec<f32>,
    labels: Vec<u8>,
}

impl Samples {
    /// Appends `more`, giving the indices its samples take here.
    fn append(&mut self, more: Samples) -> Vec<usize> {
        let start = self.labels.len();
        self.features.extend(more.features);
        self.labels.extend(more.labels);
        (start..self.labels.len()).collect()
    }

    fn into_dataset(self, shape: DataShape) -> Dataset {
        Dataset::from_floats(self.features, self.labels, shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(alpha: f64, beta: f64, iid: bool) -> SyntheticConfig {
        SyntheticConfig {
            alpha,
            beta,
            iid,
            features: 60,
            classes: 10,
        }
    }

    #[test]
    fn users_keep_their_samples_whatever_the_number_of_users() {
        let five = config(1.0, 1.0, false).generate(5, 7);
        let three = config(1.0, 1.0, false).generate(3, 7);
        let (train5, test5, owned5) = (
            &five.train,
            &five.test,
            &five.natural.as_ref().unwrap().train,
        );
        let (train3, owned3) = (&three.train, &three.natural.as_ref().unwrap().train);
        assert_eq!(owned5[..3], owned3[..]);
        let last = owned3[2].last().copied().unwrap();
        assert_eq!(train5.labels()[..=last], train3.labels()[..=last]);
        let total: usize = owned5.iter().map(Vec::len).sum();
        assert_eq!(total, train5.len());
        assert!(owned5.iter().all(|user| user.len() >= 45), "{owned5:?}");
        // About a tenth of each user's samples are test samples.
        let ratio = test5.len() as f64 / (train5.len() + test5.len()) as f64;
        assert!((0.05..0.15).contains(&ratio), "{ratio}");
    }

    #[test]
    fn heterogeneous_users_have_different_label_mixes_and_iid_users_alike() {
        let spread = |config: SyntheticConfig| {
            let data = config.generate(10, 3);
            let (train, owned) = (&data.train, &data.natural.unwrap().train);
            let top_share = |indices: &Vec<usize>| {
                let counts = train.label_counts(indices);
                *counts.iter().max().unwrap() as f64 / indices.len() as f64
            };
            owned.iter().map(top_share).sum::<f64>() / owned.len() as f64
        };
        let skewed = spread(config(1.0, 1.0, false));
        let iid = spread(config(0.0, 0.0, true));
        assert!(skewed > iid + 0.1, "skewed {skewed}, iid {iid}");
    }

    #[test]
    fn the_iid_variant_takes_no_alpha() {
        let mut problems = Problems::new();
        config(0.5, 0.0, true).check(&mut problems);
        let problems = problems.into_vec();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0, "alpha");
    }
}
