//! CIFAR-10 from its binary distribution (`cifar-10-batches-bin/`): five training files
//! `data_batch_1.bin` to `data_batch_5.bin` and `test_batch.bin`, each a run of 3,073-byte
//! records: the label (0 to 9), then the 32x32 image's red, green and blue planes.

use std::path::Path;

use super::source::{Reader, Source};
use super::{
    DataContext, DataError, DataShape, DataSource, Dataset, ImageFiles, Normalization, SampleKind,
    SampleShape, TrainTest, check_dir, resolve_dir,
};
use crate::config::check::Problems;

const SIDE: usize = 32;
const CHANNELS: usize = 3;
const NUM_CLASSES: usize = 10;
const IMAGE_BYTES: usize = CHANNELS * SIDE * SIDE;
const RECORD_BYTES: usize = 1 + IMAGE_BYTES;

/// The training files, in the order their records are numbered.
const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
const TEST_FILE: &str = "test_batch.bin";

/// Per-channel mean and standard deviation of the training pixels scaled to `[0, 1]`, for
/// [`Normalization::Standard`].
const CHANNEL_MEAN: [f32; CHANNELS] = [0.4914, 0.4822, 0.4465];
const CHANNEL_STD: [f32; CHANNELS] = [0.2470, 0.2435, 0.2616];

/// CIFAR-10 as an experiment file names it; not built in, so `dir` is required.
#[derive(Debug, Clone, Copy)]
pub struct Cifar10Data;

impl DataSource for Cifar10Data {
    type Params = ImageFiles;

    fn name(&self) -> &'static str {
        "cifar10"
    }

    fn about(&self) -> &'static str {
        "Krizhevsky's 32x32 colour images of ten classes, from the binary version; give its folder"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        super::IMAGE_FILE_DOCS
    }

    fn sample_kind(&self, _: &ImageFiles) -> Option<SampleKind> {
        Some(SampleKind::Image([CHANNELS, SIDE, SIDE]))
    }

    fn resolve_paths(&self, params: &mut ImageFiles, folder: &Path) {
        resolve_dir(&mut params.dir, folder);
    }

    fn check(&self, params: &ImageFiles, _: &DataContext, problems: &mut Problems) {
        match params.dir.as_deref() {
            None => problems.add(
                "dir",
                "CIFAR-10 is not built into fedsim: give the folder holding data_batch_1.bin to data_batch_5.bin and test_batch.bin (CIFAR-10's binary version)",
            ),
            dir => check_dir(dir, problems),
        }
    }

    fn load(&self, params: &ImageFiles, _: &DataContext) -> Result<TrainTest, DataError> {
        let dir = params
            .dir
            .as_deref()
            .expect("check requires a CIFAR-10 dir");
        Ok(params.augmented(load(dir, params.normalize)?))
    }
}

/// Loads CIFAR-10 from `dir`, pixels scaled as `normalization` says.
pub fn load(dir: &Path, normalization: Normalization) -> Result<TrainTest, DataError> {
    let mut reader = Reader::new(Source::Folder(dir.to_path_buf()))?;
    let mut train = Records::default();
    for name in TRAIN_FILES {
        train.read(&mut reader, name)?;
    }
    let mut test = Records::default();
    test.read(&mut reader, TEST_FILE)?;
    Ok(TrainTest {
        train: train.into_dataset(normalization),
        test: test.into_dataset(normalization),
        natural: None,
        files: reader.into_files(),
    })
}

/// Images and labels gathered from one or more files.
#[derive(Default)]
struct Records {
    pixels: Vec<u8>,
    labels: Vec<u8>,
}

impl Records {
    /// Appends the records of file `name`.
    fn read(&mut self, reader: &mut Reader, name: &str) -> Result<(), DataError> {
        let (path, bytes) = reader.read(name)?;
        let corrupt = |reason: String| DataError::Corrupt {
            path: path.clone(),
            reason,
        };
        if bytes.is_empty() || bytes.len() % RECORD_BYTES != 0 {
            return Err(corrupt(format!(
                "is {} bytes long, not a whole number of {RECORD_BYTES}-byte records (a label byte and a 32x32x3 image); it may be truncated",
                bytes.len()
            )));
        }
        for (i, record) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
            let label = record[0];
            if usize::from(label) >= NUM_CLASSES {
                return Err(corrupt(format!(
                    "record {i} (byte {}) holds label {label}; CIFAR-10 labels are 0 to 9",
                    i * RECORD_BYTES
                )));
            }
            self.labels.push(label);
            self.pixels.extend_from_slice(&record[1..]);
        }
        Ok(())
    }

    fn into_dataset(self, normalization: Normalization) -> Dataset {
        let shape = DataShape {
            sample: SampleShape::Image([CHANNELS, SIDE, SIDE]),
            num_classes: NUM_CLASSES,
        };
        let normalize = |c: usize, p: u8| {
            let (mean, std) = match normalization {
                Normalization::Unit => (0.0, 1.0),
                Normalization::Standard => (CHANNEL_MEAN[c], CHANNEL_STD[c]),
            };
            (f32::from(p) / 255.0 - mean) / std
        };
        Dataset::from_channel_bytes(self.pixels, normalize, CHANNELS, self.labels, shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The six files with `per_file` records of label `i % 10` and pixel bytes `p % 256`.
    fn write_files(dir: &Path, per_file: usize) {
        for name in TRAIN_FILES.iter().chain([&TEST_FILE]) {
            let records = (0..per_file).flat_map(|i| {
                std::iter::once((i % NUM_CLASSES) as u8).chain((0..IMAGE_BYTES).map(|p| p as u8))
            });
            std::fs::write(dir.join(name), records.collect::<Vec<u8>>()).unwrap();
        }
    }

    #[test]
    fn the_six_files_load_with_channels_normalised_apart() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), 20);
        let data = load(dir.path(), Normalization::Standard).unwrap();
        assert_eq!((data.train.len(), data.test.len()), (100, 20));
        assert_eq!(data.train.shape().sample, SampleShape::Image([3, 32, 32]));
        // A zero byte of the red and the blue channel stand for different features.
        assert_ne!(data.train.zero_feature(0), data.train.zero_feature(2));
        assert_eq!(data.files.len(), 6);
    }

    #[test]
    fn a_cut_file_or_a_bad_label_is_named_with_where() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), 3);
        let path = dir.path().join("data_batch_3.bin");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
        let error = load(dir.path(), Normalization::Unit)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("data_batch_3.bin is 9119 bytes long"),
            "{error}"
        );
        let mut bad = bytes;
        bad[RECORD_BYTES] = 10;
        std::fs::write(&path, bad).unwrap();
        let error = load(dir.path(), Normalization::Unit)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("record 1 (byte 3073) holds label 10"),
            "{error}"
        );
    }
}
