//! The spill file: clients' states that do not fit the memory budget, appended to one file of
//! the run folder, `client-states.G.log`, where `G` is the file's generation.
//!
//! One append-only file rather than a file per client: a state is written once where it
//! changes, with one positioned write and no file to create, and a checkpoint names the states
//! it holds by their place in the file (offset and length) plus the file's length then. Whatever
//! a run appends after its last checkpoint (the next round's states, or the torn end of a
//! record a killed process was writing) lies past that length, so a resumed run cuts the file
//! back to it and reads the checkpoint's states as they were. Superseded records stay until
//! the file is compacted into the next generation, which is written whole beside the current
//! one; the older generation is removed once a checkpoint names the newer one.
//!
//! ```text
//! record   client u64, payload length u64, payload (Tensors::to_bytes), SHA-256 of the three
//! ```
//!
//! All integers little-endian. Reading a record checks its digest and its client.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::network::{ClientId, Tensors};
use crate::stop::crash_point;

/// Bytes of a record around its payload: the client and the payload's length before it, the
/// digest after it.
const FRAME_BYTES: u64 = 8 + 8 + 32;

/// The spill file of generation `generation` in `dir`.
pub fn file_name(generation: u32) -> String {
    format!("client-states.{generation}.log")
}

/// The generation a file of a run folder holds, if it is a spill file.
fn generation_of(name: &str) -> Option<u32> {
    name.strip_prefix("client-states.")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// A spill file that cannot be written or read back, with the file.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    /// The file system refused.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A record's bytes are not what was written.
    #[error("{}: the state of client {client} at byte {offset} is damaged ({why})", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// The client whose state it should be.
        client: ClientId,
        /// Where its record starts.
        offset: u64,
        /// What does not match.
        why: &'static str,
    },
}

/// One open generation of the spill file, shared by the records that lie in it, so a record
/// read while the file is compacted into the next generation still reads from this one.
#[derive(Debug)]
struct Generation {
    number: u32,
    path: PathBuf,
    file: File,
}

/// Where one client's state lies in the spill file.
#[derive(Debug, Clone)]
pub struct Record {
    generation: Arc<Generation>,
    offset: u64,
    len: u64,
}

impl Record {
    /// Bytes the record takes in the file.
    pub fn size(&self) -> u64 {
        self.len
    }

    /// Where it starts in its file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the state of `client` that the record holds, checking its digest.
    pub fn read(&self, client: ClientId) -> Result<Tensors, SpillError> {
        let generation = &self.generation;
        let len = usize::try_from(self.len).expect("a record was written from memory");
        let mut bytes = vec![0; len];
        generation
            .file
            .read_exact_at(&mut bytes, self.offset)
            .map_err(|source| SpillError::Io {
                action: "read",
                path: generation.path.clone(),
                source,
            })?;
        let damaged = |why| SpillError::Damaged {
            path: generation.path.clone(),
            client,
            offset: self.offset,
            why,
        };
        let (body, digest) = bytes.split_at(len - 32);
        if Sha256::digest(body).as_slice() != digest {
            return Err(damaged("its SHA-256 digest does not match"));
        }
        let written_for = u64::from_le_bytes(body[..8].try_into().expect("eight bytes"));
        if written_for != client as u64 {
            return Err(damaged("it holds another client's state"));
        }
        Tensors::from_bytes(&body[16..]).ok_or_else(|| damaged("its tensors are malformed"))
    }
}

/// The spill file a run appends to.
#[derive(Debug)]
pub struct SpillFile {
    dir: PathBuf,
    current: Arc<Generation>,
    length: u64,
    /// Records this process has appended, for the crash tests' crash point.
    appended: u64,
}

impl SpillFile {
    /// A new, empty spill file of generation 0 in `dir`, replacing any left there.
    pub fn create(dir: &Path) -> Result<Self, SpillError> {
        Self::new_generation(dir, 0)
    }

    /// The spill file of generation `generation` in `dir` as a checkpoint left it, `length`
    /// bytes long: anything after that (appended after the checkpoint) is cut off, and every
    /// other generation's file removed.
    pub fn reopen(dir: &Path, generation: u32, length: u64) -> Result<Self, SpillError> {
        let path = dir.join(file_name(generation));
        let io = |action| {
            let path = path.clone();
            move |source| SpillError::Io {
                action,
                path,
                source,
            }
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io("open"))?;
        let found = file.metadata().map_err(io("read"))?.len();
        if found < length {
            return Err(SpillError::Io {
                action: "resume from",
                path,
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("it holds {found} bytes, but the checkpoint names {length}"),
                ),
            });
        }
        file.set_len(length).map_err(io("truncate"))?;
        let spill = Self {
            dir: dir.to_path_buf(),
            current: Arc::new(Generation {
                number: generation,
                path,
                file,
            }),
            length,
            appended: 0,
        };
        spill.remove_generations(|other| other != generation);
        Ok(spill)
    }

    fn new_generation(dir: &Path, number: u32) -> Result<Self, SpillError> {
        let path = dir.join(file_name(number));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|source| SpillError::Io {
                action: "create",
                path: path.clone(),
                source,
            })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            current: Arc::new(Generation { number, path, file }),
            length: 0,
            appended: 0,
        })
    }

    /// The current generation.
    pub fn generation(&self) -> u32 {
        self.current.number
    }

    /// The file's length: where the next record goes.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The record of `client` at `offset`, `len` bytes, as a checkpoint names it in the current
    /// generation; read back to check it.
    pub fn record_at(
        &self,
        client: ClientId,
        offset: u64,
        len: u64,
    ) -> Result<(Record, Tensors), SpillError> {
        let record = Record {
            generation: self.current.clone(),
            offset,
            len,
        };
        let outside = offset.checked_add(len).is_none_or(|end| end > self.length);
        if outside || len < FRAME_BYTES {
            return Err(SpillError::Damaged {
                path: self.current.path.clone(),
                client,
                offset,
                why: "the checkpoint names bytes outside the file",
            });
        }
        let state = record.read(client)?;
        Ok((record, state))
    }

    /// Appends the state of `client`; returns where it lies.
    pub fn append(&mut self, client: ClientId, state: &Tensors) -> Result<Record, SpillError> {
        let payload = state.to_bytes();
        let mut bytes = Vec::with_capacity(payload.len() + FRAME_BYTES as usize);
        bytes.extend_from_slice(&(client as u64).to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let digest = Sha256::digest(&bytes);
        bytes.extend_from_slice(&digest);
        let generation = &self.current;
        generation
            .file
            .write_all_at(&bytes, self.length)
            .map_err(|source| SpillError::Io {
                action: "write",
                path: generation.path.clone(),
                source,
            })?;
        let record = Record {
            generation: generation.clone(),
            offset: self.length,
            len: bytes.len() as u64,
        };
        self.length += record.len;
        self.appended += 1;
        crash_point(&generation.path, self.appended);
        Ok(record)
    }

    /// The next generation, holding only `live` (each client's current record, in client
    /// order), written beside this one; returns it with the records' new places, in the same
    /// order. This generation's file stays until [`SpillFile::remove_generations`] removes it.
    pub fn compact(
        &self,
        live: &[(ClientId, &Record)],
    ) -> Result<(SpillFile, Vec<Record>), SpillError> {
        let mut next = Self::new_generation(&self.dir, self.current.number + 1)?;
        let mut moved = Vec::with_capacity(live.len());
        for &(client, record) in live {
            let state = record.read(client)?;
            moved.push(next.append(client, &state)?);
        }
        Ok((next, moved))
    }

    /// Removes the spill files in this file's folder whose generation `remove` picks (never the
    /// current one).
    pub fn remove_generations(&self, remove: impl Fn(u32) -> bool) {
        let current = self.current.number;
        remove_files(&self.dir, |generation| generation != current && remove(generation));
    }
}

/// Removes every spill file in `dir`: a resumed run whose checkpoint names none.
pub fn remove_all(dir: &Path) {
    remove_files(dir, |_| true);
}

/// Removes the spill files in `dir` whose generation `remove` picks. A file that cannot be
/// removed is left: it wastes space, nothing more.
fn remove_files(dir: &Path, remove: impl Fn(u32) -> bool) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let generation = entry.file_name().to_str().and_then(generation_of);
        if generation.is_some_and(&remove) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(value: f32, len: usize) -> Tensors {
        Tensors::new()
            .with("head", vec![value; len])
            .with("b", vec![-value])
    }

    #[test]
    fn records_read_back_and_a_checkpoint_cuts_off_what_came_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = SpillFile::create(dir.path()).unwrap();
        let a = spill.append(3, &state(1.5, 10)).unwrap();
        let b = spill.append(7, &state(f32::MIN_POSITIVE, 3)).unwrap();
        assert_eq!(a.read(3).unwrap(), state(1.5, 10));
        assert_eq!(b.read(7).unwrap(), state(f32::MIN_POSITIVE, 3));
        assert_eq!((a.offset(), b.offset()), (0, a.size()));
        let checkpointed = spill.length();
        // After the checkpoint: a whole record, then the first half of one (a killed write).
        spill.append(3, &state(9.0, 10)).unwrap();
        let torn = spill.append(7, &state(8.0, 3)).unwrap();
        spill
            .current
            .file
            .set_len(torn.offset() + torn.size() / 2)
            .unwrap();
        drop(spill);

        let resumed = SpillFile::reopen(dir.path(), 0, checkpointed).unwrap();
        assert_eq!(resumed.length(), checkpointed);
        let (_, read) = resumed.record_at(7, b.offset(), b.size()).unwrap();
        assert_eq!(read, state(f32::MIN_POSITIVE, 3));
        let outside = resumed.record_at(3, checkpointed, a.size());
        assert!(matches!(outside, Err(SpillError::Damaged { .. })));
    }

    #[test]
    fn a_damaged_or_misplaced_record_is_named_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = SpillFile::create(dir.path()).unwrap();
        let record = spill.append(2, &state(4.0, 5)).unwrap();
        let wrong = record.read(5).unwrap_err().to_string();
        assert!(wrong.contains("client 5") && wrong.contains("another client's"), "{wrong}");
        spill.current.file.write_all_at(&[0xff], 20).unwrap();
        let damaged = record.read(2).unwrap_err().to_string();
        assert!(damaged.contains("client-states.0.log"), "{damaged}");
        assert!(damaged.contains("SHA-256"), "{damaged}");
    }

    #[test]
    fn compaction_keeps_the_live_records_in_the_next_generation() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = SpillFile::create(dir.path()).unwrap();
        spill.append(1, &state(1.0, 4)).unwrap();
        let two = spill.append(2, &state(2.0, 4)).unwrap();
        let one = spill.append(1, &state(3.0, 4)).unwrap();
        let (next, moved) = spill.compact(&[(1, &one), (2, &two)]).unwrap();
        assert_eq!(next.generation(), 1);
        assert_eq!(next.length(), one.size() + two.size());
        assert_eq!(moved[0].read(1).unwrap(), state(3.0, 4));
        assert_eq!(moved[1].read(2).unwrap(), state(2.0, 4));
        // The old generation stays readable until removed, then only the new one is left.
        assert_eq!(one.read(1).unwrap(), state(3.0, 4));
        next.remove_generations(|generation| generation < 1);
        let left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, [file_name(1)]);
        remove_all(dir.path());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
