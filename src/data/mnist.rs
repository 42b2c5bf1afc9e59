//! MNIST and Fashion-MNIST: 28x28 grey images of ten classes in four IDX files of the same
//! names, raw or gzipped, read from a folder or from the copy built into the binary.

use std::path::Path;

use super::idx::{IdxArray, parse_idx_file};
use super::source::{Embedded, Reader, Source, embedded};
use super::{
    DataContext, DataError, DataShape, DataSource, Dataset, ImageFiles, Normalization, SampleKind,
    SampleShape, TrainTest, check_dir, resolve_dir,
};
use crate::config::check::Problems;

const SIDE: usize = 28;
const NUM_CLASSES: usize = 10;

/// One of the data sets in MNIST's format, with what differs between them.
#[derive(Debug)]
pub struct MnistLike {
    /// The `dataset` an experiment file gives.
    pub name: &'static str,
    /// What it is, for `fedsim datasets`.
    pub about: &'static str,
    /// The data set's name as its authors write it, for messages.
    pub title: &'static str,
    /// Mean and standard deviation of the training pixels scaled to `[0, 1]`, for
    /// [`Normalization::Standard`].
    pub pixel_mean_std: (f32, f32),
    /// The copy built into the binary, from `datasets/`.
    pub embedded: &'static Embedded,
}

/// The four IDX files, as every copy of these data sets names them.
macro_rules! idx_files {
    ($folder:literal) => {
        embedded!(
            $folder,
            [
                "SHA256SUMS",
                "train-images-idx3-ubyte.gz",
                "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz",
                "t10k-labels-idx1-ubyte.gz",
            ]
        )
    };
}

/// LeCun et al.'s handwritten digits.
pub static MNIST: MnistLike = MnistLike {
    name: "mnist",
    about: "LeCun et al.'s handwritten digits: 60,000 training and 10,000 test images, built in",
    title: "MNIST",
    pixel_mean_std: (0.1307, 0.3081),
    embedded: &idx_files!("mnist"),
};

/// Zalando's clothing images (Xiao et al., 2017), a drop-in replacement for MNIST.
pub static FASHION_MNIST: MnistLike = MnistLike {
    name: "fashion-mnist",
    about: "Zalando's clothing images (Xiao et al. 2017), in MNIST's format and sizes, built in",
    title: "Fashion-MNIST",
    pixel_mean_std: (0.2860, 0.3530),
    embedded: &idx_files!("fashion-mnist"),
};

impl MnistLike {
    /// Loads the train and test splits from the folder `dir` (the built-in copy if `None`), pixels
    /// scaled as `normalization` says.
    pub fn load(
        &'static self,
        dir: Option<&std::path::Path>,
        normalization: Normalization,
    ) -> Result<TrainTest, DataError> {
        let source = match dir {
            Some(dir) => Source::Folder(dir.to_path_buf()),
            None => Source::Embedded(self.embedded),
        };
        let mut reader = Reader::new(source)?;
        let train = self.split(&mut reader, normalization, "train")?;
        let test = self.split(&mut reader, normalization, "t10k")?;
        Ok(TrainTest {
            train,
            test,
            natural: None,
            files: reader.into_files(),
        })
    }

    /// Reads the images and labels of the split whose files start with `prefix`.
    fn split(
        &self,
        reader: &mut Reader,
        normalization: Normalization,
        prefix: &str,
    ) -> Result<Dataset, DataError> {
        let (images_path, images) = read_idx(reader, &format!("{prefix}-images-idx3-ubyte"))?;
        let (labels_path, labels) = read_idx(reader, &format!("{prefix}-labels-idx1-ubyte"))?;
        if images.dims != [images.dims[0], SIDE, SIDE] {
            return Err(DataError::Corrupt {
                path: images_path,
                reason: format!(
                    "has dimensions {:?}; {} images are [count, 28, 28]",
                    images.dims, self.title
                ),
            });
        }
        if labels.dims != [images.dims[0]] {
            return Err(DataError::Corrupt {
                path: labels_path,
                reason: format!(
                    "has dimensions {:?}; expected [{}] to match {}",
                    labels.dims,
                    images.dims[0],
                    images_path.display()
                ),
            });
        }
        if let Some(bad) = labels.data.iter().find(|&&l| usize::from(l) >= NUM_CLASSES) {
            return Err(DataError::Corrupt {
                path: labels_path,
                reason: format!("holds label {bad}; {} labels are 0 to 9", self.title),
            });
        }
        let (mean, std) = match normalization {
            Normalization::Unit => (0.0, 1.0),
            Normalization::Standard => self.pixel_mean_std,
        };
        let shape = DataShape {
            sample: SampleShape::Image([1, SIDE, SIDE]),
            num_classes: NUM_CLASSES,
        };
        Ok(Dataset::from_bytes(
            images.data,
            |p| (f32::from(p) / 255.0 - mean) / std,
            labels.data,
            shape,
        ))
    }
}

/// MNIST and Fashion-MNIST as an experiment file names them: registered as `&MNIST`.
impl DataSource for &'static MnistLike {
    type Params = ImageFiles;

    fn name(&self) -> &'static str {
        self.name
    }

    fn about(&self) -> &'static str {
        self.about
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        super::IMAGE_FILE_DOCS
    }

    fn sample_kind(&self, _: &ImageFiles) -> Option<SampleKind> {
        Some(SampleKind::Image([1, SIDE, SIDE]))
    }

    fn resolve_paths(&self, params: &mut ImageFiles, folder: &Path) {
        resolve_dir(&mut params.dir, folder);
    }

    fn check(&self, params: &ImageFiles, _: &DataContext, problems: &mut Problems) {
        check_dir(params.dir.as_deref(), problems);
    }

    fn load(&self, params: &ImageFiles, _: &DataContext) -> Result<TrainTest, DataError> {
        let data = MnistLike::load(self, params.dir.as_deref(), params.normalize)?;
        Ok(params.augmented(data))
    }
}

fn read_idx(reader: &mut Reader, name: &str) -> Result<(std::path::PathBuf, IdxArray), DataError> {
    let (path, bytes) = reader.read(name)?;
    let array = parse_idx_file(&path, bytes)?;
    Ok((path, array))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_copies_load_and_match_their_checksums() {
        // MNIST twice: its pages, handed back to the kernel after the first load, read the
        // same the second time.
        for set in [&MNIST, &FASHION_MNIST, &MNIST] {
            let data = set.load(None, Normalization::Unit).unwrap();
            assert_eq!((data.train.len(), data.test.len()), (60_000, 10_000));
            assert_eq!(data.files.len(), 4);
            assert!(
                data.files[0].path.starts_with("built-in"),
                "{:?}",
                data.files[0]
            );
        }
    }
}
