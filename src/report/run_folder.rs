//! The run folder: resolved config, partition, metrics as they are produced, summary, model.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::RoundRecord;

/// Where a run writes its results. `metrics.jsonl` gets one line per round, flushed as the
/// round ends, so a killed run keeps its finished rounds; whole-file outputs are written to a
/// temporary name and renamed, so they are either complete or absent.
#[derive(Debug)]
pub struct RunFolder {
    dir: PathBuf,
    metrics: BufWriter<File>,
}

/// A run folder that cannot be written, with the path.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    /// The file or folder.
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

impl RunFolder {
    /// Creates `dir` (which must not hold a run already) and opens its `metrics.jsonl`.
    pub fn create(dir: &Path) -> Result<Self, WriteError> {
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| WriteError { path, source }
        };
        fs::create_dir_all(dir).map_err(failed(dir))?;
        let metrics_path = dir.join("metrics.jsonl");
        let metrics = File::create_new(&metrics_path).map_err(|source| {
            if source.kind() == io::ErrorKind::AlreadyExists {
                WriteError {
                    path: metrics_path.clone(),
                    source: io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "the folder already holds a run; choose another --out",
                    ),
                }
            } else {
                failed(&metrics_path)(source)
            }
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            metrics: BufWriter::new(metrics),
        })
    }

    /// The default folder for an experiment: `runs/<name>-<UTC timestamp>`, with `-2`, `-3`, …
    /// appended when runs start within the same second.
    pub fn default_dir(name: &str) -> PathBuf {
        let stamp = jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S");
        let base = format!("{name}-{stamp}");
        let runs = PathBuf::from("runs");
        std::iter::once(base.clone())
            .chain((2..).map(|n| format!("{base}-{n}")))
            .map(|folder| runs.join(folder))
            .find(|dir| !dir.exists())
            .expect("some suffix is free")
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one round to `metrics.jsonl` and flushes it.
    pub fn append_round(&mut self, record: &RoundRecord) -> Result<(), WriteError> {
        let line = serde_json::to_string(record).expect("a round record always serialises");
        writeln!(self.metrics, "{line}")
            .and_then(|()| self.metrics.flush())
            .map_err(|source| WriteError {
                path: self.dir.join("metrics.jsonl"),
                source,
            })
    }

    /// Writes `value` as pretty JSON to `name`, atomically.
    pub fn write_json(&self, name: &str, value: &impl Serialize) -> Result<(), WriteError> {
        let text = serde_json::to_string_pretty(value).expect("fedsim's outputs always serialise");
        self.write_atomically(name, text.as_bytes())
    }

    /// Writes raw bytes to `name`, atomically.
    pub fn write_atomically(&self, name: &str, bytes: &[u8]) -> Result<(), WriteError> {
        let path = self.dir.join(name);
        let partial = self.dir.join(format!(".{name}.partial"));
        fs::write(&partial, bytes)
            .and_then(|()| fs::rename(&partial, &path))
            .map_err(|source| WriteError { path, source })
    }
}
