//! MNIST from its four IDX files, raw or gzipped, checked against `SHA256SUMS` when the folder
//! has one (the embedded copy in `datasets/mnist/` does).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::idx::{IdxArray, parse_idx_file, read_maybe_gzipped};
use super::{DataError, DataFile, Dataset, Normalization, TrainTest};

/// Mean and standard deviation of MNIST's training pixels scaled to `[0, 1]`, for
/// [`Normalization::Standard`].
const PIXEL_MEAN: f32 = 0.1307;
const PIXEL_STD: f32 = 0.3081;
const SIDE: usize = 28;
const NUM_CLASSES: usize = 10;

/// Loads MNIST's train and test splits from `dir`, pixels scaled as `normalization` says.
pub fn load(dir: &Path, normalization: Normalization) -> Result<TrainTest, DataError> {
    let checksums = read_checksums(dir)?;
    let mut reader = Reader {
        dir,
        checksums,
        normalization,
        files: Vec::new(),
    };
    let train = reader.split("train-images-idx3-ubyte", "train-labels-idx1-ubyte")?;
    let test = reader.split("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")?;
    Ok(TrainTest {
        train,
        test,
        files: reader.files,
    })
}

struct Reader<'a> {
    dir: &'a Path,
    /// File name (without `.gz`) to expected SHA-256 of its uncompressed bytes.
    checksums: HashMap<String, String>,
    normalization: Normalization,
    /// The files read so far.
    files: Vec<DataFile>,
}

impl Reader<'_> {
    fn split(&mut self, images_name: &str, labels_name: &str) -> Result<Dataset, DataError> {
        let (images_path, images) = self.read(images_name)?;
        let (labels_path, labels) = self.read(labels_name)?;
        if images.dims != [images.dims[0], SIDE, SIDE] {
            return Err(DataError::Corrupt {
                path: images_path,
                reason: format!(
                    "has dimensions {:?}; MNIST images are [count, 28, 28]",
                    images.dims
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
                reason: format!("holds label {bad}; MNIST labels are 0 to 9"),
            });
        }
        let (mean, std) = match self.normalization {
            Normalization::Unit => (0.0, 1.0),
            Normalization::Standard => (PIXEL_MEAN, PIXEL_STD),
        };
        Ok(Dataset::new(
            images.data,
            |p| (f32::from(p) / 255.0 - mean) / std,
            labels.data,
            [1, SIDE, SIDE],
            NUM_CLASSES,
        ))
    }

    /// Reads `name.gz` if present, else `name`, and checks it against `SHA256SUMS`.
    fn read(&mut self, name: &str) -> Result<(PathBuf, IdxArray), DataError> {
        let gz = self.dir.join(format!("{name}.gz"));
        let path = if gz.exists() { gz } else { self.dir.join(name) };
        let bytes = read_maybe_gzipped(&path)?;
        let actual = hex::encode(Sha256::digest(&bytes));
        if let Some(expected) = self.checksums.get(name)
            && &actual != expected
        {
            return Err(DataError::Corrupt {
                path,
                reason: format!(
                    "does not match SHA256SUMS: its content hashes to {actual}, expected {expected}"
                ),
            });
        }
        let array = parse_idx_file(&path, bytes)?;
        self.files.push(DataFile {
            path: path.clone(),
            sha256: actual,
        });
        Ok((path, array))
    }
}

/// Reads `dir/SHA256SUMS` (`<hex>  <name>` lines) if it exists.
fn read_checksums(dir: &Path) -> Result<HashMap<String, String>, DataError> {
    let path = dir.join("SHA256SUMS");
    if !path.exists() {
        return Ok(HashMap::new());
    }
    let text = fs::read_to_string(&path).map_err(|source| DataError::Io {
        path: path.clone(),
        source,
    })?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [hash, name] => Ok((
                    name.trim_start_matches('*').to_string(),
                    hash.to_lowercase(),
                )),
                _ => Err(DataError::Corrupt {
                    path: path.clone(),
                    reason: format!("has a line that is not `<sha256>  <file name>`: {line:?}"),
                }),
            },
        )
        .collect()
}
