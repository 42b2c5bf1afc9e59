//! A data set made in code: Gaussian blobs, one per class, seen by sites that each read them
//! through their own offset (a miscalibrated sensor, a hospital's own scanner). Each site is a
//! natural client with its own training and test samples, so the split is feature skew, as in
//! the FedProx paper's synthetic data, with nothing to read from disk.
//!
//! For each site `k`: an offset `o_k ~ N(0, shift²)` per feature; each sample draws a class
//! `y` uniformly and its features `x = c_y + o_k + N(0, spread²)`, the class centres `c_y ~
//! N(0, 4)` shared by all sites. Every draw comes from fedsim's seeded streams (experiment
//! seed, purpose, client), so the data is a pure function of the experiment file.

use fedsim::config::check::Problems;
use fedsim::data::{
    DataContext, DataError, DataShape, DataSource, Dataset, NaturalClients, SampleKind,
    SampleShape, TrainTest,
};
use fedsim::seed::{Purpose, stream};
use rand::RngExt;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};

/// The draws of the class centres, and of each site's offset and samples.
const CENTRES: Purpose = Purpose::new("blobs-centres");
const SITE: Purpose = Purpose::new("blobs-site");

/// The data set, registered with `registry.data_set(Blobs)`.
pub struct Blobs;

/// Its parameters: every field has a default, and unknown ones are refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BlobsParams {
    /// Features per sample.
    pub features: usize,
    /// Number of classes.
    pub classes: usize,
    /// Training samples per site.
    pub train_per_site: usize,
    /// Test samples per site.
    pub test_per_site: usize,
    /// Standard deviation of each site's offset.
    pub shift: f64,
    /// Standard deviation of a sample around its class centre.
    pub spread: f64,
}

impl Default for BlobsParams {
    fn default() -> Self {
        Self {
            features: 10,
            classes: 4,
            train_per_site: 200,
            test_per_site: 50,
            shift: 1.0,
            spread: 1.0,
        }
    }
}

impl DataSource for Blobs {
    type Params = BlobsParams;

    fn name(&self) -> &'static str {
        "blobs"
    }

    fn about(&self) -> &'static str {
        "Gaussian blobs, one per class, each site seeing them through its own offset"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("features", "features per sample"),
            ("classes", "number of classes, 2 to 256"),
            ("train_per_site", "training samples per site"),
            ("test_per_site", "test samples per site"),
            ("shift", "standard deviation of each site's offset"),
            (
                "spread",
                "standard deviation of a sample around its class centre",
            ),
        ]
    }

    fn sample_kind(&self, _: &BlobsParams) -> Option<SampleKind> {
        Some(SampleKind::Row)
    }

    fn has_natural_clients(&self, _: &BlobsParams) -> bool {
        true
    }

    fn check(&self, params: &BlobsParams, _: &DataContext, problems: &mut Problems) {
        if params.features == 0 {
            problems.add("features", "must be at least 1");
        }
        if !(2..=256).contains(&params.classes) {
            let classes = params.classes;
            problems.add(
                "classes",
                format!("is {classes}; must be between 2 and 256"),
            );
        }
        if params.train_per_site == 0 {
            problems.add("train_per_site", "must be at least 1");
        }
        problems.non_negative("shift", params.shift);
        problems.non_negative("spread", params.spread);
    }

    fn load(&self, params: &BlobsParams, context: &DataContext) -> Result<TrainTest, DataError> {
        let standard = |sd: f64| Normal::new(0.0, sd).expect("check allows no negative deviation");
        let (shift, noise) = (standard(params.shift), standard(params.spread));
        let centres: Vec<f64> = standard(2.0)
            .sample_iter(stream(context.seed, CENTRES, 0, 0))
            .take(params.classes * params.features)
            .collect();
        let (mut train, mut test) = (Split::default(), Split::default());
        let mut natural = NaturalClients {
            train: Vec::new(),
            test: Vec::new(),
        };
        for site in 0..context.num_clients {
            let rng = &mut stream(context.seed, SITE, 0, site);
            let offset: Vec<f64> = (0..params.features).map(|_| shift.sample(rng)).collect();
            let mut draw = |split: &mut Split, count: usize| -> Vec<usize> {
                (0..count)
                    .map(|_| {
                        let class = rng.random_range(0..params.classes);
                        let centre = &centres[class * params.features..][..params.features];
                        let features = centre
                            .iter()
                            .zip(&offset)
                            .map(|(c, o)| (c + o + noise.sample(rng)) as f32);
                        split.push(features, class as u8)
                    })
                    .collect()
            };
            natural.train.push(draw(&mut train, params.train_per_site));
            natural.test.push(draw(&mut test, params.test_per_site));
        }
        let shape = DataShape {
            sample: SampleShape::Row(params.features),
            num_classes: params.classes,
        };
        Ok(TrainTest {
            train: Dataset::from_floats(train.features, train.labels, shape),
            test: Dataset::from_floats(test.features, test.labels, shape),
            natural: Some(natural),
            // Nothing was read from disk: the manifest lists no data file.
            files: Vec::new(),
        })
    }
}

/// The samples of one split as they are drawn.
#[derive(Default)]
struct Split {
    features: Vec<f32>,
    labels: Vec<u8>,
}

impl Split {
    /// Adds a sample and returns its index.
    fn push(&mut self, features: impl Iterator<Item = f32>, label: u8) -> usize {
        self.features.extend(features);
        self.labels.push(label);
        self.labels.len() - 1
    }
}
