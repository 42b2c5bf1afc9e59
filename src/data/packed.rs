//! A data set's own clients packed into one file, each client's samples in a block of its own,
//! so that a federation reads a client's samples from disk when the client is sampled: the
//! `packed` data set. `fedsim data pack` writes the file once from an experiment whose data set
//! defines its clients (LEAF's FEMNIST and Shakespeare, say); a run then holds an index of
//! sixteen bytes a client and the samples of the clients in flight, however large the data set.
//!
//! The file, little-endian: the magic `FEDSIMPK`, a `u32` version (1), a `u32` length and that
//! many bytes of JSON (the header: the data set packed, the samples' shape, how features
//! are stored, the number of clients), then one index entry per client (a `u64` offset from the
//! start of the file and `u32` counts of its training and test samples), then each client's
//! block: its training features, its training labels (a byte each), its test features, its
//! test labels. Features are stored as the data set holds them: a byte each (pixels, tokens)
//! with the header's table of what each byte stands for, or an `f32` each.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::clients::{ClientSource, OwnSamples, Roster};
use super::loader::{DataContext, DataSource};
use super::{
    DataError, DataFile, DataShape, Dataset, Features, NaturalClients, SampleKind, SampleShape,
    TrainTest,
};
use crate::config::check::Problems;
use crate::network::ClientId;

const MAGIC: &[u8; 8] = b"FEDSIMPK";
const VERSION: u32 = 1;
/// Bytes of one index entry: an offset and two counts.
const ENTRY_BYTES: usize = 16;

/// What the file's JSON header says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    /// The data set packed, as its experiment named it (`"femnist"`).
    dataset: String,
    /// `"image"`, `"row"` or `"tokens"`.
    sample: String,
    /// The sample's dimensions: `[channels, height, width]`, `[features]` or `[length]`.
    dims: Vec<usize>,
    num_classes: usize,
    /// Per channel, the feature each byte value stands for; `None` where features are `f32`.
    byte_features: Option<Vec<Vec<f32>>>,
    clients: usize,
}

impl Header {
    fn shape(&self) -> Option<DataShape> {
        let sample = match (self.sample.as_str(), self.dims.as_slice()) {
            ("image", &[channels, height, width]) => SampleShape::Image([channels, height, width]),
            ("row", &[features]) => SampleShape::Row(features),
            ("tokens", &[length]) => SampleShape::Tokens(length),
            _ => return None,
        };
        Some(DataShape {
            sample,
            num_classes: self.num_classes,
        })
    }

    /// Bytes of one sample's features.
    fn feature_bytes(&self, shape: DataShape) -> usize {
        let width = if self.byte_features.is_some() { 1 } else { 4 };
        shape.sample.len() * width
    }
}

/// What [`pack`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The clients packed.
    pub clients: usize,
    /// The file's length in bytes.
    pub bytes: u64,
    /// The file's digest.
    pub sha256: String,
}

/// Packs the clients `data` defines, its training and test samples as `data` holds them, into
/// a new file at `path` (one that exists is never overwritten), for the data set `dataset`.
pub fn pack(dataset: &str, data: &TrainTest, path: &Path) -> Result<Packed, DataError> {
    let natural = data.natural.as_ref().ok_or_else(|| DataError::Corrupt {
        path: dataset.into(),
        reason: "defines no clients of its own, so there is nothing to pack".into(),
    })?;
    let shape = data.train.shape();
    let (sample, dims) = match shape.sample {
        SampleShape::Image(dims) => ("image", dims.to_vec()),
        SampleShape::Row(features) => ("row", vec![features]),
        SampleShape::Tokens(length) => ("tokens", vec![length]),
    };
    let byte_features = match &data.train.features {
        Features::Bytes {
            feature_of_value, ..
        } => Some(
            feature_of_value
                .iter()
                .map(|table| table.to_vec())
                .collect(),
        ),
        Features::Floats(_) => None,
    };
    let header = Header {
        dataset: dataset.into(),
        sample: sample.into(),
        dims,
        num_classes: shape.num_classes,
        byte_features,
        clients: natural.train.len(),
    };
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::create_new(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => DataError::Corrupt {
            path: path.to_path_buf(),
            reason: "exists; packing writes a new file and never overwrites one".into(),
        },
        _ => io(source),
    })?;
    let written = write_packed(&header, data, natural, BufWriter::new(file)).map_err(io);
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written?;
    let (sha256, bytes) = digest(path)?;
    Ok(Packed {
        clients: header.clients,
        bytes,
        sha256,
    })
}

fn write_packed(
    header: &Header,
    data: &TrainTest,
    natural: &NaturalClients,
    mut out: impl Write,
) -> std::io::Result<()> {
    let json = serde_json::to_vec(header).expect("a header serialises");
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(
        &u32::try_from(json.len())
            .expect("a short header")
            .to_le_bytes(),
    )?;
    out.write_all(&json)?;
    let shape = data.train.shape();
    let sample_bytes = (header.feature_bytes(shape) + 1) as u64;
    let mut offset = (MAGIC.len() + 8 + json.len() + header.clients * ENTRY_BYTES) as u64;
    let pairs = natural.train.iter().zip(&natural.test);
    for (train, test) in pairs.clone() {
        let counts = [train.len(), test.len()].map(|n| u32::try_from(n).expect("a client's count"));
        out.write_all(&offset.to_le_bytes())?;
        out.write_all(&counts[0].to_le_bytes())?;
        out.write_all(&counts[1].to_le_bytes())?;
        offset += sample_bytes * (train.len() + test.len()) as u64;
    }
    for (train, test) in pairs {
        for (split, indices) in [(&data.train, train), (&data.test, test)] {
            let samples = Dataset::gathered(&[(split, indices)], shape);
            match &samples.features {
                Features::Bytes { values, .. } => out.write_all(values)?,
                Features::Floats(values) => {
                    for value in values {
                        out.write_all(&value.to_le_bytes())?;
                    }
                }
            }
            out.write_all(&samples.labels)?;
        }
    }
    out.flush()
}

/// The SHA-256 of the file at `path` and its length, read in chunks.
fn digest(path: &Path) -> Result<(String, u64), DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 1 << 20];
    let mut length = 0;
    loop {
        let read = file.read(&mut buffer).map_err(io)?;
        if read == 0 {
            return Ok((hex::encode(hasher.finalize()), length));
        }
        hasher.update(&buffer[..read]);
        length += read as u64;
    }
}

/// `len` bytes of `file` (at `path`) from `at`; a file that ends before is not whole.
fn read_at(file: &File, path: &Path, len: usize, at: u64) -> Result<Vec<u8>, DataError> {
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, at)
        .map_err(|_| DataError::Corrupt {
            path: path.to_path_buf(),
            reason: "ends within its header or index; `fedsim data pack` writes these files whole"
                .into(),
        })?;
    Ok(bytes)
}

/// The file's header, the samples' shape, and where its index starts.
fn read_header(file: &File, path: &Path) -> Result<(Header, DataShape, u64), DataError> {
    let corrupt = |reason: String| DataError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let start = read_at(file, path, MAGIC.len() + 8, 0)?;
    if &start[..8] != MAGIC {
        return Err(corrupt(
            "is not a packed data set: `fedsim data pack` writes these files".into(),
        ));
    }
    let word = |at: usize| u32::from_le_bytes(start[at..at + 4].try_into().expect("4 bytes"));
    if word(8) != VERSION {
        return Err(corrupt(format!(
            "is a packed data set of version {}; this fedsim reads version {VERSION}",
            word(8)
        )));
    }
    let header_len = word(12) as usize;
    let header_at = (MAGIC.len() + 8) as u64;
    let header: Header = serde_json::from_slice(&read_at(file, path, header_len, header_at)?)
        .map_err(|e| corrupt(format!("has a header that does not parse: {e}")))?;
    let shape = header.shape().ok_or_else(|| {
        corrupt(format!(
            "has a header with a sample of {:?} {:?}",
            header.sample, header.dims
        ))
    })?;
    if let Some(tables) = &header.byte_features
        && (tables.is_empty() || tables.iter().any(|table| table.len() != 256))
    {
        return Err(corrupt(
            "has a header whose byte tables do not hold 256 values each".into(),
        ));
    }
    Ok((header, shape, header_at + header_len as u64))
}

/// The clients of a packed file, read when asked for.
#[derive(Debug)]
pub struct PackedClients {
    path: PathBuf,
    file: File,
    header: Header,
    shape: DataShape,
    /// Per client, the offset of its block and its training and test counts.
    index: Vec<(u64, [u32; 2])>,
    digest: DataFile,
}

impl PackedClients {
    /// Opens the file at `path`, checks its header and index against its length, and digests
    /// it for the run's manifest.
    pub fn open(path: &Path) -> Result<Self, DataError> {
        let corrupt = |reason: String| DataError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        let io = |source| DataError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let length = file.metadata().map_err(io)?.len();
        let (header, shape, index_at) = read_header(&file, path)?;
        let index_len = header.clients.saturating_mul(ENTRY_BYTES);
        if index_at.saturating_add(index_len as u64) > length {
            return Err(corrupt(format!(
                "is {length} bytes long, too short for the index of {} clients its header names",
                header.clients
            )));
        }
        let raw = read_at(&file, path, index_len, index_at)?;
        let index: Vec<(u64, [u32; 2])> = raw
            .chunks_exact(ENTRY_BYTES)
            .map(|entry| {
                let offset = u64::from_le_bytes(entry[..8].try_into().expect("8 bytes"));
                let count =
                    |at: usize| u32::from_le_bytes(entry[at..at + 4].try_into().expect("4 bytes"));
                (offset, [count(8), count(12)])
            })
            .collect();
        let sample_bytes = (header.feature_bytes(shape) + 1) as u64;
        let mut expected = index_at + raw.len() as u64;
        for (client, &(offset, [train, test])) in index.iter().enumerate() {
            if offset != expected {
                return Err(corrupt(format!(
                    "has client {client}'s samples at byte {offset}, where the ones before end at {expected}"
                )));
            }
            expected += sample_bytes * (u64::from(train) + u64::from(test));
        }
        if expected != length {
            return Err(corrupt(format!(
                "is {length} bytes long, and its index accounts for {expected}"
            )));
        }
        let (sha256, _) = digest(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            header,
            shape,
            index,
            digest: DataFile {
                path: path.to_path_buf(),
                sha256,
            },
        })
    }

    /// The shape of the samples of the file at `path`, read off its header alone.
    pub fn shape_of(path: &Path) -> Result<DataShape, DataError> {
        let file = File::open(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(read_header(&file, path)?.1)
    }

    /// The name of the data set packed.
    pub fn dataset(&self) -> &str {
        &self.header.dataset
    }

    /// Every client's samples, one after another, as one data set with its clients.
    pub fn whole(&self) -> Result<TrainTest, DataError> {
        let clients = (0..self.index.len())
            .map(|client| self.read_client(client))
            .collect::<Result<Vec<_>, _>>()?;
        let join = |part: fn(&OwnSamples) -> &Dataset| {
            let parts: Vec<(&Dataset, Vec<usize>)> = clients
                .iter()
                .map(|own| (part(own), (0..part(own).len()).collect()))
                .collect();
            let parts: Vec<(&Dataset, &[usize])> =
                parts.iter().map(|(d, i)| (*d, i.as_slice())).collect();
            Dataset::gathered(&parts, self.shape)
        };
        let ranges = |count: fn(&[u32; 2]) -> u32| {
            let mut next = 0;
            self.index
                .iter()
                .map(|(_, counts)| {
                    let n = count(counts) as usize;
                    next += n;
                    (next - n..next).collect()
                })
                .collect()
        };
        Ok(TrainTest {
            train: join(|own| &own.train),
            test: join(|own| &own.test),
            natural: Some(NaturalClients {
                train: ranges(|c| c[0]),
                test: ranges(|c| c[1]),
            }),
            files: vec![self.digest.clone()],
        })
    }

    fn read_client(&self, client: ClientId) -> Result<OwnSamples, DataError> {
        let (offset, [train, test]) = self.index[client];
        let feature_bytes = self.header.feature_bytes(self.shape);
        let (train, test) = (train as usize, test as usize);
        let mut block = vec![0; (feature_bytes + 1) * (train + test)];
        self.file
            .read_exact_at(&mut block, offset)
            .map_err(|source| DataError::Io {
                path: self.path.clone(),
                source,
            })?;
        let (train_block, test_block) = block.split_at((feature_bytes + 1) * train);
        Ok(OwnSamples {
            train: self.samples(train_block, train, client)?,
            test: self.samples(test_block, test, client)?,
        })
    }

    /// `count` samples of `client` from their block: features, then labels, each checked as
    /// the readers of the data sets check theirs.
    fn samples(&self, block: &[u8], count: usize, client: ClientId) -> Result<Dataset, DataError> {
        let (features, labels) = block.split_at(block.len() - count);
        let classes = self.shape.num_classes;
        let corrupt = |what: String| DataError::Corrupt {
            path: self.path.clone(),
            reason: format!("holds {what} among client {client}'s samples"),
        };
        if let Some(label) = labels.iter().find(|&&l| usize::from(l) >= classes) {
            return Err(corrupt(format!("the label {label}, of {classes} classes")));
        }
        let tokens = matches!(self.shape.sample, SampleShape::Tokens(_));
        if let Some(token) = features
            .iter()
            .find(|&&t| tokens && usize::from(t) >= classes)
        {
            return Err(corrupt(format!("the token {token}, of {classes}")));
        }
        let features = match &self.header.byte_features {
            Some(tables) => Features::Bytes {
                values: features.to_vec(),
                feature_of_value: tables
                    .iter()
                    .map(|table| table.as_slice().try_into().expect("checked at open"))
                    .collect(),
            },
            None => {
                let values: Vec<f32> = features
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .collect();
                if let Some(value) = values.iter().find(|v| !v.is_finite()) {
                    return Err(corrupt(format!("the feature {value}")));
                }
                Features::Floats(values)
            }
        };
        Ok(Dataset::new(features, labels.to_vec(), self.shape))
    }
}

impl ClientSource for PackedClients {
    fn shape(&self) -> DataShape {
        self.shape
    }

    fn roster(&self) -> Roster {
        Roster::new(self.index.iter().map(|&(_, counts)| counts).collect())
    }

    fn client(&self, client: ClientId) -> Result<OwnSamples, DataError> {
        self.read_client(client)
    }

    fn files(&self) -> Vec<DataFile> {
        vec![self.digest.clone()]
    }
}

/// The `packed` data set: a file `fedsim data pack` wrote.
#[derive(Debug, Clone, Copy)]
pub struct PackedData;

/// Its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackedFile {
    /// The file, relative to the experiment file.
    pub path: PathBuf,
}

impl DataSource for PackedData {
    type Params = PackedFile;

    fn name(&self) -> &'static str {
        "packed"
    }

    fn about(&self) -> &'static str {
        "a data set's own clients packed into one file by `fedsim data pack`, each read when it is sampled"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("path", "the file `fedsim data pack` wrote")]
    }

    /// Read off the file's header where it can be: a file that cannot is reported when the
    /// run reads it.
    fn sample_kind(&self, params: &PackedFile) -> Option<SampleKind> {
        let shape = PackedClients::shape_of(&params.path).ok()?;
        Some(shape.sample.kind())
    }

    fn has_natural_clients(&self, _: &PackedFile) -> bool {
        true
    }

    fn resolve_paths(&self, params: &mut PackedFile, folder: &Path) {
        params.path = folder.join(&params.path);
    }

    fn check(&self, params: &PackedFile, _: &DataContext, problems: &mut Problems) {
        if !params.path.is_file() {
            problems.add(
                "path",
                format!("file {} does not exist", params.path.display()),
            );
        }
    }

    fn load(&self, params: &PackedFile, _: &DataContext) -> Result<TrainTest, DataError> {
        PackedClients::open(&params.path)?.whole()
    }

    fn clients_on_demand(
        &self,
        params: &PackedFile,
        _: &DataContext,
    ) -> Result<Option<Arc<dyn ClientSource>>, DataError> {
        Ok(Some(Arc::new(PackedClients::open(&params.path)?)))
    }

    fn describe(&self, params: &PackedFile) -> String {
        format!("the packed data set {}", params.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::synthetic::SyntheticConfig;

    fn synthetic() -> SyntheticConfig {
        serde_json::from_value(serde_json::json!({"alpha": 1.0, "beta": 1.0})).unwrap()
    }

    /// Every client of a data set of `f32` features reads back as the whole load holds it, and
    /// the whole file reads back as the data set with its clients.
    #[test]
    fn float_features_read_back_exactly_client_by_client() {
        let data = synthetic().generate(12, 5);
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("synthetic.pack");
        let packed = pack("synthetic", &data, &path).unwrap();
        assert_eq!(packed.clients, 12);
        let clients = PackedClients::open(&path).unwrap();
        assert_eq!(clients.dataset(), "synthetic");
        assert_eq!(clients.files()[0].sha256, packed.sha256);
        let natural = data.natural.as_ref().unwrap();
        let shape = data.train.shape();
        for client in 0..12 {
            let own = clients.client(client).unwrap();
            for (split, indices, read) in [
                (&data.train, &natural.train[client], &own.train),
                (&data.test, &natural.test[client], &own.test),
            ] {
                let want = Dataset::gathered(&[(split, indices)], shape);
                assert!(matches!(read.features, Features::Floats(_)));
                assert_eq!(read.features, want.features, "client {client}");
                assert_eq!(read.labels, want.labels, "client {client}");
            }
        }
        let whole = clients.whole().unwrap();
        let counts = |lists: &Vec<Vec<usize>>| lists.iter().map(Vec::len).collect::<Vec<_>>();
        let read = whole.natural.as_ref().unwrap();
        assert_eq!(counts(&read.train), counts(&natural.train));
        assert_eq!(whole.train.len(), data.train.len());
    }
}
