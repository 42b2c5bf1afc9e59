//! Data sets on disk and their split among clients.
//!
//! [`Dataset`] holds a whole split (train or test) in memory as the bytes the file stores,
//! so clients share it and keep only index lists ([`partition`]), and resident memory tracks
//! the data's size on disk; samples become normalised `f32` features one batch at a time. Readers for each on-disk format
//! live in their own file; [`mnist`] is the one shipped in `datasets/`.

pub mod idx;
pub mod mnist;
pub mod partition;

use std::path::PathBuf;

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

/// One split of a labelled data set, held in memory.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Raw feature values (pixel bytes), `len() * feature_len()` of them, one sample after
    /// another: a quarter of the memory normalised `f32` features would take.
    values: Vec<u8>,
    /// The normalised feature each byte value stands for.
    features_of_value: Box<[f32; 256]>,
    /// One class label per sample.
    labels: Vec<u8>,
    /// Shape of one sample as `[channels, height, width]`.
    sample_shape: [usize; 3],
    /// Number of classes; every label is below it.
    num_classes: usize,
}

impl Dataset {
    /// Builds a data set of byte-valued features, each byte `v` standing for the feature
    /// `normalize(v)`; `values` must hold `labels.len()` samples of `sample_shape`.
    pub fn new(
        values: Vec<u8>,
        normalize: impl Fn(u8) -> f32,
        labels: Vec<u8>,
        sample_shape: [usize; 3],
        num_classes: usize,
    ) -> Self {
        assert_eq!(
            values.len(),
            labels.len() * sample_shape.iter().product::<usize>(),
            "features and labels disagree on the number of samples"
        );
        Self {
            values,
            features_of_value: Box::new(std::array::from_fn(|v| normalize(v as u8))),
            labels,
            sample_shape,
            num_classes,
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

    /// Number of `f32` values in one sample.
    pub fn feature_len(&self) -> usize {
        self.sample_shape.iter().product()
    }

    /// Shape of one sample as `[channels, height, width]`.
    pub fn sample_shape(&self) -> [usize; 3] {
        self.sample_shape
    }

    /// Number of classes.
    pub fn num_classes(&self) -> usize {
        self.num_classes
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
        let len = self.feature_len();
        for &i in indices {
            let values = &self.values[i * len..(i + 1) * len];
            features.extend(
                values
                    .iter()
                    .map(|&v| self.features_of_value[usize::from(v)]),
            );
            labels.push(i64::from(self.labels[i]));
        }
    }

    /// Counts the samples of each class among `indices`.
    pub fn label_counts(&self, indices: &[usize]) -> Vec<usize> {
        let mut counts = vec![0; self.num_classes];
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
    /// The files they were read from, with their digests.
    pub files: Vec<DataFile>,
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
        let data = Dataset::new(
            vec![0, 255, 10, 20, 30, 40],
            |v| f32::from(v) / 10.0,
            vec![2, 0, 1],
            [1, 1, 2],
            3,
        );
        let (mut features, mut labels) = (vec![9.0], vec![9]);
        data.gather(&[2, 0], &mut features, &mut labels);
        assert_eq!(features, [3.0, 4.0, 0.0, 25.5]);
        assert_eq!(labels, [1, 2]);
    }
}
