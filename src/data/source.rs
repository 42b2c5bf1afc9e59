//! Where a data set's files come from: a folder on disk, or the copy built into the binary.
//!
//! The data sets that ship with fedsim (`datasets/` in the source tree) are compiled into the
//! binary, so an experiment that names one without a `dir` runs from any folder, and a
//! `cargo install`ed `fedsim` needs nothing beside it. Both sources check each file against a
//! `SHA256SUMS` list when there is one (the built-in copies always have one).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};

use super::{DataError, DataFile};

/// A data set's files built into the binary: each file's name (as in `datasets/<folder>/`)
/// and its bytes.
#[derive(Debug)]
pub struct Embedded {
    /// The folder under `datasets/` the files come from.
    pub folder: &'static str,
    /// The files, `SHA256SUMS` among them.
    pub files: &'static [(&'static str, &'static [u8])],
}

/// Includes `datasets/<folder>/<name>` for each name given.
macro_rules! embedded {
    ($folder:literal, [$($name:literal),+ $(,)?]) => {
        $crate::data::source::Embedded {
            folder: $folder,
            files: &[$((
                $name,
                include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/datasets/", $folder, "/", $name)),
            )),+],
        }
    };
}
pub(crate) use embedded;

impl Embedded {
    /// The total size of the files, as they add to the binary.
    pub fn bytes(&self) -> usize {
        self.files.iter().map(|(_, bytes)| bytes.len()).sum()
    }

    fn file(&self, name: &str) -> Option<&'static [u8]> {
        self.files
            .iter()
            .find(|(file, _)| *file == name)
            .map(|&(_, bytes)| bytes)
    }
}

/// A file's bytes as stored: borrowed from the binary, or read from disk.
type Stored = std::borrow::Cow<'static, [u8]>;

/// The place a data set's files are read from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A folder on disk; a `SHA256SUMS` in it is optional.
    Folder(PathBuf),
    /// The copy built into the binary.
    Embedded(&'static Embedded),
}

/// Reads a data set's files from a [`Source`], checks them, and records what was read.
pub struct Reader {
    source: Source,
    /// File name (without `.gz`) to expected SHA-256 of its uncompressed bytes.
    checksums: HashMap<String, String>,
    /// The files read so far, for the run's manifest.
    files: Vec<DataFile>,
}

impl Reader {
    /// A reader of `source`, with its `SHA256SUMS` loaded if it has one.
    pub fn new(source: Source) -> Result<Self, DataError> {
        let checksums = match source.bytes("SHA256SUMS")? {
            Some((path, bytes)) => parse_checksums(&path, &bytes)?,
            None => HashMap::new(),
        };
        Ok(Self {
            source,
            checksums,
            files: Vec::new(),
        })
    }

    /// Reads `name.gz` if present, else `name`, gunzipped, and checks it against `SHA256SUMS`.
    /// Gives the path to name in messages with the bytes.
    pub fn read(&mut self, name: &str) -> Result<(PathBuf, Vec<u8>), DataError> {
        let gzipped = self.source.bytes(&format!("{name}.gz"))?;
        let plain = self.source.bytes(name)?;
        let (path, bytes) = match (gzipped, plain) {
            (Some((path, gzipped)), None) => {
                let bytes = unpack(&path, gzipped, true)?;
                (path, bytes)
            }
            (None, Some((path, plain))) => {
                let bytes = unpack(&path, plain, false)?;
                (path, bytes)
            }
            (Some((gz_path, gzipped)), Some((path, plain))) => {
                let gzipped = unpack(&gz_path, gzipped, true)?;
                if gzipped != unpack(&path, plain, false)? {
                    return Err(DataError::Corrupt {
                        path,
                        reason: format!(
                            "and {} both exist and hold different data; keep one of them",
                            gz_path.display()
                        ),
                    });
                }
                (gz_path, gzipped)
            }
            (None, None) => {
                return Err(DataError::Io {
                    path: self.source.path_of(name),
                    source: std::io::ErrorKind::NotFound.into(),
                });
            }
        };
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
        self.files.push(DataFile {
            path: path.clone(),
            sha256: actual,
        });
        Ok((path, bytes))
    }

    /// The names of the `.json` files (raw or gzipped, named without `.gz`) in `folder`,
    /// as `folder/<name>`, sorted.
    pub fn list(&self, folder: &str) -> Result<Vec<String>, DataError> {
        let mut names: Vec<String> = match &self.source {
            Source::Embedded(embedded) => embedded
                .files
                .iter()
                .map(|(name, _)| name.to_string())
                .filter(|name| name.starts_with(&format!("{folder}/")))
                .collect(),
            Source::Folder(dir) => {
                let path = dir.join(folder);
                let io = |source| DataError::Io {
                    path: path.clone(),
                    source,
                };
                let mut names = Vec::new();
                for entry in std::fs::read_dir(&path).map_err(io)? {
                    let name = entry.map_err(io)?.file_name();
                    names.push(format!("{folder}/{}", name.to_string_lossy()));
                }
                names
            }
        };
        names.retain(|name| name.ends_with(".json") || name.ends_with(".json.gz"));
        for name in &mut names {
            if let Some(raw) = name.strip_suffix(".gz") {
                *name = raw.to_string();
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// How file `name` is named in messages.
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.source.path_of(name)
    }

    /// The files read, for the manifest.
    pub fn into_files(self) -> Vec<DataFile> {
        self.files
    }
}

/// The bytes of a file as stored, gunzipped if `compressed`; a built-in file's pages are
/// released once copied out.
fn unpack(path: &Path, stored: Stored, compressed: bool) -> Result<Vec<u8>, DataError> {
    match stored {
        Stored::Borrowed(built_in) => {
            let bytes = if compressed {
                gunzip(path, built_in)
            } else {
                Ok(built_in.to_vec())
            };
            release(built_in);
            bytes
        }
        Stored::Owned(on_disk) if compressed => gunzip(path, &on_disk),
        Stored::Owned(on_disk) => Ok(on_disk),
    }
}

impl Source {
    /// How a file of this source is named in messages and the manifest: its path, or
    /// `built-in/<folder>/<name>` for the embedded copy.
    fn path_of(&self, name: &str) -> PathBuf {
        match self {
            Source::Folder(dir) => dir.join(name),
            Source::Embedded(embedded) => Path::new("built-in").join(embedded.folder).join(name),
        }
    }

    /// The bytes of file `name` as stored, if the source has it.
    fn bytes(&self, name: &str) -> Result<Option<(PathBuf, Stored)>, DataError> {
        let path = self.path_of(name);
        match self {
            Source::Embedded(embedded) => Ok(embedded.file(name).map(|b| (path, b.into()))),
            Source::Folder(_) if !path.exists() => Ok(None),
            Source::Folder(_) => read_file(&path).map(|b| Some((path, b.into()))),
        }
    }
}

/// Hands the memory pages wholly inside a built-in file back to the kernel once it has been
/// read, so that a run's resident memory holds the data once (as the
/// [`super::Dataset`]), not also the compressed copy inside the binary. Elsewhere than on Linux
/// the pages stay until the kernel reclaims them.
fn release(bytes: &'static [u8]) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf only reads a system constant.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) });
        let Some(page) = page.ok().filter(|&page| page > 0) else {
            return;
        };
        let start = bytes.as_ptr() as usize;
        let (first, end) = (
            start.next_multiple_of(page),
            (start + bytes.len()) / page * page,
        );
        if end > first {
            // SAFETY: the pages lie wholly inside the bytes of an `include_bytes!` array, which
            // the linker puts in the executable's read-only data: a private file mapping that
            // is never written (the array holds no pointers to relocate). MADV_DONTNEED drops
            // the cached pages only; the next read of them faults the same bytes back in from
            // the file. It cannot fail in a way that matters: on an error the pages stay.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED);
            }
        }
    }
}

/// The whole content of a file on disk.
fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let mut bytes = Vec::with_capacity(file_size(&file));
    BufReader::new(file).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

fn file_size(mut file: &File) -> usize {
    let size = file.seek(SeekFrom::End(0)).unwrap_or(0) as usize;
    match file.rewind() {
        Ok(()) => size,
        Err(_) => 0,
    }
}

/// The most a gzip trailer's size is trusted for when reserving memory.
const MAX_SIZE_HINT: usize = 1 << 30;

/// Decompresses a gzip file's bytes, naming `path` in any error.
fn gunzip(path: &Path, compressed: &[u8]) -> Result<Vec<u8>, DataError> {
    // The gzip trailer's last four bytes give the uncompressed size (modulo 2^32): room for it
    // up front spares a copy of the data at each doubling of the buffer.
    let hint = compressed
        .last_chunk::<4>()
        .map_or(0, |trailer| u32::from_le_bytes(*trailer) as usize);
    let mut bytes = Vec::with_capacity(hint.min(MAX_SIZE_HINT));
    GzDecoder::new(compressed)
        .read_to_end(&mut bytes)
        .map_err(|source| DataError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("cannot be decompressed: {source}"),
        })?;
    Ok(bytes)
}

/// Reads a `SHA256SUMS` list (`<hex>  <name>` lines).
fn parse_checksums(path: &Path, bytes: &[u8]) -> Result<HashMap<String, String>, DataError> {
    let corrupt = |reason: String| DataError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| corrupt(format!("is not text: {e}")))?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [hash, name] => Ok((
                    name.trim_start_matches('*').to_string(),
                    hash.to_lowercase(),
                )),
                _ => Err(corrupt(format!(
                    "has a line that is not `<sha256>  <file name>`: {line:?}"
                ))),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzipped(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn a_folder_is_read_gzipped_or_raw_and_checked_against_its_sums() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.gz"), gzipped(b"alpha")).unwrap();
        std::fs::write(dir.path().join("b"), b"beta").unwrap();
        let sum = hex::encode(Sha256::digest(b"beta"));
        std::fs::write(dir.path().join("SHA256SUMS"), format!("{sum}  b\n")).unwrap();
        let mut reader = Reader::new(Source::Folder(dir.path().to_path_buf())).unwrap();
        assert_eq!(reader.read("a").unwrap().1, b"alpha");
        assert_eq!(reader.read("b").unwrap().1, b"beta");
        std::fs::write(dir.path().join("SHA256SUMS"), format!("{sum}  a\n")).unwrap();
        let mut reader = Reader::new(Source::Folder(dir.path().to_path_buf())).unwrap();
        let error = reader.read("a").unwrap_err().to_string();
        assert!(error.contains("a.gz does not match SHA256SUMS"), "{error}");
        let missing = reader.read("c").unwrap_err().to_string();
        assert!(
            missing.contains("cannot read") && missing.contains("c"),
            "{missing}"
        );
    }

    #[test]
    fn a_cut_gzip_file_is_reported_with_its_name() {
        let cut = &gzipped(&[7; 1000])[..20];
        let error = gunzip(Path::new("x.gz"), cut).unwrap_err().to_string();
        assert!(error.starts_with("x.gz cannot be decompressed"), "{error}");
    }
}
