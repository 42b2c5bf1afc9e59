//! Data sets and their split among clients.
//!
//! [`Dataset`] holds a whole split (train or test) in memory as the data arrives (pixel bytes,
//! real-valued rows), so clients share it and keep only index lists ([`partition`]), and
//! resident memory tracks the data's size; samples become `f32` features one batch at a time.
//! Each source has its own file: [`mnist`] for MNIST and Fashion-MNIST (built into the binary,
//! or read from a folder through [`source`]), [`synthetic`] for the FedProx paper's generated
//! data, [`numpy`] for `.npy`/`.npz` arrays, [`tabular`] for CSV tables (one, Breast Cancer Wisconsin, built in).

pub mod augment;
pub mod cifar;
pub mod clients;
pub mod fetch;
pub mod idx;
pub mod leaf;
pub mod loader;
pub mod mnist;
pub mod numpy;
pub mod packed;
pub mod partition;
pub mod partitioner;
pub mod rotated;
pub mod source;
pub mod synthetic;
pub mod tabular;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::check::Problems;

pub use clients::{ClientData, ClientSamples, ClientSource, OwnSamples, Roster};
pub use loader::{DataContext, DataSource};
pub use partitioner::{ClientSplit, Partitioner, SplitContext, SplitInput};

/// How pixel values become features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Normalization {
    /// Scale to `[0, 1]`, as PyTorch's `ToTensor` does.
    #[default]
    Unit,
    /// Scale to `[0, 1]`, then subtract the training set's mean and divide by its standard
    /// deviation (`Normalize((0.1307,), (0.3081,))` for MNIST).
    Standard,
}

/// Where the image files of MNIST, Fashion-MNIST or CIFAR-10 are, how pixels become features,
/// and whether training images are augmented: the parameters of those data sets.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageFiles {
    /// Folder holding the data set's files; relative paths are resolved against the
    /// experiment file's folder. Default: the copy built into fedsim (MNIST and
    /// Fashion-MNIST; CIFAR-10 needs a folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Pixel scaling: `"unit"` (to `[0, 1]`, the default) or `"standard"` (then zero mean,
    /// unit variance over the training set, per channel).
    #[serde(default)]
    pub normalize: Normalization,
    /// Whether local training sees random crops (padding 4) and horizontal flips of its
    /// images, drawn from each client's stream. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub augment: bool,
}

/// What the parameters of an image data set mean, for `fedsim datasets`.
pub(crate) const IMAGE_FILE_DOCS: &[(&str, &str)] = &[
    (
        "dir",
        "folder holding the files; default: the copy built into fedsim, where there is one",
    ),
    (
        "normalize",
        "\"unit\" scales pixels to [0, 1]; \"standard\" then gives each channel zero mean and unit variance",
    ),
    (
        "augment",
        "random crops (padding 4) and horizontal flips in local training",
    ),
];

impl ImageFiles {
    /// `data` with the augmentation `augment` asks for (the usual CIFAR recipe) applied to
    /// its training split.
    pub fn augmented(&self, mut data: TrainTest) -> TrainTest {
        if self.augment {
            data.train = data.train.with_augmentation(Augmentation {
                crop_padding: 4,
                flip: true,
            });
        }
        data
    }
}

/// Makes a data set's folder relative to `folder`, the experiment file's.
pub(crate) fn resolve_dir(dir: &mut Option<PathBuf>, folder: &Path) {
    if let Some(dir) = dir {
        *dir = folder.join(&*dir);
    }
}

/// Checks that a data set's folder, if one is given, exists.
pub(crate) fn check_dir(dir: Option<&Path>, problems: &mut Problems) {
    if let Some(dir) = dir.filter(|dir| !dir.is_dir()) {
        problems.add("dir", format!("folder {} does not exist", dir.display()));
    }
}

/// A data file that cannot be used, with the file named.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file is missing or cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why the operating system refused.
        source: std::io::Error,
    },
    /// The file was read but its content is not what the format requires.
    #[error("{path} {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, phrased to follow the file name.
        reason: String,
    },
}

/// What one sample is, as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleShape {
    /// An image of `[channels, height, width]`.
    Image([usize; 3]),
    /// A row of this many numeric features.
    Row(usize),
    /// A sequence of this many token ids (characters), each below the number of classes.
    Tokens(usize),
}

impl SampleShape {
    /// Number of features (pixels, values or tokens) in one sample.
    pub fn len(self) -> usize {
        match self {
            SampleShape::Image(shape) => shape.iter().product(),
            SampleShape::Row(width) | SampleShape::Tokens(width) => width,
        }
    }

    /// Whether a sample has no features.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// What kind of sample this is.
    pub fn kind(self) -> SampleKind {
        match self {
            SampleShape::Image(shape) => SampleKind::Image(shape),
            SampleShape::Row(_) => SampleKind::Row,
            SampleShape::Tokens(_) => SampleKind::Tokens,
        }
    }
}

impl std::fmt::Display for SampleShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SampleShape::Image([c, h, w]) => write!(f, "{h}x{w} images with {c} channels"),
            SampleShape::Row(width) => write!(f, "rows of {width} features"),
            SampleShape::Tokens(steps) => write!(f, "sequences of {steps} characters"),
        }
    }
}

/// What is known of a data set's samples before its files are read: enough to tell whether a
/// model can take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleKind {
    /// Images of `[channels, height, width]`.
    Image([usize; 3]),
    /// Rows of numeric features.
    Row,
    /// Sequences of characters.
    Tokens,
}

impl SampleKind {
    /// What the samples are, for messages: "28x28 images with 1 channels".
    pub fn describe(self) -> String {
        match self {
            SampleKind::Image([c, h, w]) => format!("{h}x{w} images with {c} channels"),
            SampleKind::Row => "rows of numeric features".into(),
            SampleKind::Tokens => "sequences of characters".into(),
        }
    }
}

/// The shape of a classification data set: what a sample is and how many classes there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataShape {
    /// One sample.
    pub sample: SampleShape,
    /// Number of classes; every label is below it.
    pub num_classes: usize,
}

/// Feature values as the data set stores them.
#[derive(Debug, Clone, PartialEq)]
enum Features {
    /// One byte per feature (pixels), with the normalised feature each byte value stands for
    /// in each channel (one table for all when there is one): a quarter of the memory `f32`
    /// features would take.
    Bytes {
        values: Vec<u8>,
        feature_of_value: Vec<[f32; 256]>,
    },
    /// Real-valued features, as they came.
    Floats(Vec<f32>),
}

/// One split of a labelled data set, held in memory.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// `len() * shape.sample.len()` feature values, one sample after another.
    features: Features,
    /// One class label per sample.
    labels: Vec<u8>,
    shape: DataShape,
    /// The random crops and flips local training applies to this split's images, if any.
    augmentation: Option<Augmentation>,
}

/// Random crops and horizontal flips of training images, drawn per sample from the client's
/// training stream: the usual CIFAR recipe (pad by 4, crop back, flip half the images). See
/// [`augment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Augmentation {
    /// Pixels of padding around each image before a crop of its own size is drawn.
    pub crop_padding: usize,
    /// Whether half the images, drawn at random, are mirrored left to right.
    pub flip: bool,
}

impl Dataset {
    /// Builds a data set of byte-valued features, each byte `v` standing for the feature
    /// `normalize(v)`; `values` must hold `labels.len()` samples of `shape`.
    pub fn from_bytes(
        values: Vec<u8>,
        normalize: impl Fn(u8) -> f32,
        labels: Vec<u8>,
        shape: DataShape,
    ) -> Self {
        Self::from_channel_bytes(values, |_, v| normalize(v), 1, labels, shape)
    }

    /// Builds a data set of byte-valued images whose channels are normalised apart: a byte
    /// `v` of channel `c` stands for `normalize(c, v)`.
    pub fn from_channel_bytes(
        values: Vec<u8>,
        normalize: impl Fn(usize, u8) -> f32,
        channels: usize,
        labels: Vec<u8>,
        shape: DataShape,
    ) -> Self {
        let features = Features::Bytes {
            values,
            feature_of_value: (0..channels)
                .map(|c| std::array::from_fn(|v| normalize(c, v as u8)))
                .collect(),
        };
        Self::new(features, labels, shape)
    }

    /// The same data, with `augmentation` applied to its images in local training.
    pub fn with_augmentation(mut self, augmentation: Augmentation) -> Self {
        self.augmentation = Some(augmentation);
        self
    }

    /// Applies the split's random crops and flips, if it has any, to `features` gathered by
    /// [`Dataset::gather`], with draws from `rng`; padding takes each channel's zero-byte
    /// feature.
    pub fn augment(&self, features: &mut [f32], rng: &mut rand_chacha::ChaCha12Rng) {
        if let (Some(augmentation), SampleShape::Image(image)) =
            (&self.augmentation, self.shape.sample)
        {
            let fill: Vec<f32> = (0..image[0]).map(|c| self.zero_feature(c)).collect();
            augmentation.apply(features, image, &fill, rng);
        }
    }

    /// The feature a zero byte of channel `c` stands for (0 for real-valued features).
    fn zero_feature(&self, c: usize) -> f32 {
        match &self.features {
            Features::Bytes {
                feature_of_value, ..
            } => feature_of_value[c.min(feature_of_value.len() - 1)][0],
            Features::Floats(_) => 0.0,
        }
    }

    /// Builds a data set of token sequences: `ids` holds `labels.len()` sequences of
    /// `shape`, each id below `shape.num_classes`.
    pub fn from_tokens(ids: Vec<u8>, labels: Vec<u8>, shape: DataShape) -> Self {
        Self::from_bytes(ids, f32::from, labels, shape)
    }

    /// Builds a data set of real-valued features; `values` must hold `labels.len()` samples
    /// of `shape`.
    pub fn from_floats(values: Vec<f32>, labels: Vec<u8>, shape: DataShape) -> Self {
        Self::new(Features::Floats(values), labels, shape)
    }

    /// The first feature that is not a finite number (NaN or infinite, which train to NaN),
    /// as its sample, its place in the sample (both from 0) and its value; byte-valued
    /// features are checked through what each byte stands for.
    pub fn first_non_finite(&self) -> Option<(usize, usize, f32)> {
        let width = self.shape.sample.len().max(1);
        let place = |index: usize, value| (index / width, index % width, value);
        match &self.features {
            Features::Floats(values) => values
                .iter()
                .position(|v| !v.is_finite())
                .map(|index| place(index, values[index])),
            Features::Bytes {
                values,
                feature_of_value,
            } => {
                // Every byte of a data set stands for a value from these tables.
                if feature_of_value.iter().flatten().all(|v| v.is_finite()) {
                    return None;
                }
                let channel_len = match self.shape.sample {
                    SampleShape::Image([_, h, w]) => h * w,
                    _ => width,
                };
                let feature = |index: usize| {
                    let channel = (index % width) / channel_len.max(1);
                    feature_of_value[channel.min(feature_of_value.len() - 1)]
                        [usize::from(values[index])]
                };
                (0..values.len())
                    .find(|&index| !feature(index).is_finite())
                    .map(|index| place(index, feature(index)))
            }
        }
    }

    fn new(features: Features, labels: Vec<u8>, shape: DataShape) -> Self {
        let values = match &features {
            Features::Bytes { values, .. } => values.len(),
            Features::Floats(values) => values.len(),
        };
        assert_eq!(
            values,
            labels.len() * shape.sample.len(),
            "features and labels disagree on the number of samples"
        );
        assert!(
            labels.iter().all(|&l| usize::from(l) < shape.num_classes),
            "a label is out of range; readers check labels"
        );
        Self {
            features,
            labels,
            shape,
            augmentation: None,
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the set holds no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// What a sample is, and the number of classes.
    pub fn shape(&self) -> DataShape {
        self.shape
    }

    /// The same samples as a data set of `num_classes` classes (at least as many as it has
    /// labels for), so that a training and a test split agree on the number.
    pub fn with_classes(mut self, num_classes: usize) -> Self {
        assert!(
            num_classes >= self.shape.num_classes,
            "a label would be out of range"
        );
        self.shape.num_classes = num_classes;
        self
    }

    /// Number of classes.
    pub fn num_classes(&self) -> usize {
        self.shape.num_classes
    }

    /// All labels, in sample order.
    pub fn labels(&self) -> &[u8] {
        &self.labels
    }

    /// Writes the normalised features of the samples at `indices` into `features` and their
    /// labels into `labels` (both cleared first), ready to become one batch tensor.
    pub fn gather(&self, indices: &[usize], features: &mut Vec<f32>, labels: &mut Vec<i64>) {
        features.clear();
        labels.clear();
        let len = self.shape.sample.len();
        for &i in indices {
            let sample = i * len..(i + 1) * len;
            match &self.features {
                Features::Bytes {
                    values,
                    feature_of_value,
                } => {
                    let per_table = len / feature_of_value.len();
                    for (part, table) in values[sample].chunks(per_table).zip(feature_of_value) {
                        features.extend(part.iter().map(|&v| table[usize::from(v)]));
                    }
                }
                Features::Floats(values) => features.extend_from_slice(&values[sample]),
            }
            labels.push(i64::from(self.labels[i]));
        }
    }

    /// The samples at `indices` of each of `parts`, one part after another, as one data set of
    /// `shape` (without augmentation): the parts must agree on the shape and, for byte-valued
    /// features, on what each byte stands for.
    pub fn gathered(parts: &[(&Dataset, &[usize])], shape: DataShape) -> Dataset {
        let len = shape.sample.len();
        // The values of every part's samples, each part's values as `of` reads them.
        fn pick<T: Copy>(
            parts: &[(&Dataset, &[usize])],
            len: usize,
            of: impl Fn(&Features) -> &[T],
        ) -> Vec<T> {
            parts
                .iter()
                .flat_map(|(data, indices)| {
                    let values = of(&data.features);
                    indices
                        .iter()
                        .flat_map(move |&i| &values[i * len..(i + 1) * len])
                })
                .copied()
                .collect()
        }
        let labels = parts
            .iter()
            .flat_map(|(data, indices)| indices.iter().map(|&i| data.labels[i]))
            .collect();
        let features = match parts.first().map(|(data, _)| &data.features) {
            Some(Features::Bytes {
                feature_of_value, ..
            }) => Features::Bytes {
                values: pick(parts, len, |features| match features {
                    Features::Bytes { values, .. } => values,
                    Features::Floats(_) => panic!("parts to gather mix bytes and floats"),
                }),
                feature_of_value: feature_of_value.clone(),
            },
            _ => Features::Floats(pick(parts, len, |features| match features {
                Features::Floats(values) => values,
                Features::Bytes { .. } => panic!("parts to gather mix bytes and floats"),
            })),
        };
        Self::new(features, labels, shape)
    }

    /// Turns each square byte image `i` by `quarter_turns(i)` quarter turns counterclockwise,
    /// every channel alike (rotated MNIST's groups).
    ///
    /// # Panics
    /// If the samples are not square images of bytes.
    pub fn rotate_images(&mut self, quarter_turns: impl Fn(usize) -> usize) {
        let (Features::Bytes { values, .. }, SampleShape::Image([_, side, width])) =
            (&mut self.features, self.shape.sample)
        else {
            panic!("only images of bytes turn");
        };
        assert_eq!(side, width, "only square images turn");
        let plane = side * side;
        let mut turned = vec![0_u8; plane];
        let len = self.shape.sample.len();
        for (i, sample) in values.chunks_mut(len).enumerate() {
            for _ in 0..quarter_turns(i) % 4 {
                for channel in sample.chunks_mut(plane) {
                    for (at, pixel) in turned.iter_mut().enumerate() {
                        let (row, col) = (at / side, at % side);
                        *pixel = channel[col * side + (side - 1 - row)];
                    }
                    channel.copy_from_slice(&turned);
                }
            }
        }
    }

    /// Counts the samples of each class among `indices`.
    pub fn label_counts(&self, indices: &[usize]) -> Vec<usize> {
        let mut counts = vec![0; self.shape.num_classes];
        for &i in indices {
            counts[usize::from(self.labels[i])] += 1;
        }
        counts
    }
}

/// The train and test splits of one data set.
#[derive(Debug, Clone)]
pub struct TrainTest {
    /// Split among the clients.
    pub train: Dataset,
    /// Held by the server to evaluate the global model.
    pub test: Dataset,
    /// The clients the data set itself defines, if it defines clients (for the `natural`
    /// partition).
    pub natural: Option<NaturalClients>,
    /// The files they were read from, with their digests.
    pub files: Vec<DataFile>,
}

/// The clients a data set defines, each with its own training and test samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NaturalClients {
    /// Each client's indices into the training split.
    pub train: Vec<Vec<usize>>,
    /// Each client's indices into the test split.
    pub test: Vec<Vec<usize>>,
}

/// A data file a run read, for the run's manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DataFile {
    /// Its path.
    pub path: std::path::PathBuf,
    /// SHA-256 of its content, uncompressed if it was gzipped, in hex.
    pub sha256: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_holds_the_normalised_features_of_the_samples_asked_for() {
        // Three samples of two values each.
        let shape = DataShape {
            sample: SampleShape::Image([1, 1, 2]),
            num_classes: 3,
        };
        let data = Dataset::from_bytes(
            vec![0, 255, 10, 20, 30, 40],
            |v| f32::from(v) / 10.0,
            vec![2, 0, 1],
            shape,
        );
        let (mut features, mut labels) = (vec![9.0], vec![9]);
        data.gather(&[2, 0], &mut features, &mut labels);
        assert_eq!(features, [3.0, 4.0, 0.0, 25.5]);
        assert_eq!(labels, [1, 2]);
    }

    #[test]
    fn gathered_parts_hold_the_samples_asked_for_in_order_bytes_and_floats_alike() {
        let shape = DataShape {
            sample: SampleShape::Row(2),
            num_classes: 3,
        };
        let bytes = Dataset::from_bytes(vec![1, 2, 3, 4, 5, 6], f32::from, vec![0, 1, 2], shape);
        let floats = Dataset::from_floats(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], vec![0, 1, 2], shape);
        for data in [&bytes, &floats] {
            let joined = Dataset::gathered(&[(data, &[2, 0]), (data, &[1])], shape);
            let (mut features, mut labels) = (Vec::new(), Vec::new());
            joined.gather(&[0, 1, 2], &mut features, &mut labels);
            assert_eq!(features, [5.0, 6.0, 1.0, 2.0, 3.0, 4.0]);
            assert_eq!(labels, [2, 0, 1]);
        }
    }
}
