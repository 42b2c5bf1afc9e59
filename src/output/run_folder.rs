//! The run folder: resolved config, partition, metrics as they are produced, summary, model.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RoundRecord;
use super::atomic::{WriteError, remove_partials, write_atomically, write_error};
use super::claim::{self, Claim, ClaimError, FolderKind, Found, Hold};
use crate::checkpoint::{CHECKPOINT, RunState};

/// Where a run writes its results. `metrics.jsonl` gets one line per round, flushed as the
/// round ends, so a killed run keeps its finished rounds; whole-file outputs are written to a
/// temporary name and renamed, so they are either complete or absent.
#[derive(Debug)]
pub struct RunFolder {
    dir: PathBuf,
    metrics: BufWriter<File>,
    /// Held while the folder is written: no other process writes it meanwhile.
    _claim: Claim,
}

/// The per-round results.
const METRICS: &str = "metrics.jsonl";

/// A folder that cannot serve the run asked for: the user's choice of folder is at fault.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// A new run was pointed at a folder that holds one.
    #[error(
        "{} already holds a run; choose another --out, or continue that run with: fedsim run --resume {}",
        path.display(),
        path.display()
    )]
    HoldsRun {
        /// The folder.
        path: PathBuf,
    },
    /// A folder to resume lacks what resuming needs.
    #[error("cannot resume {}: {reason}", path.display())]
    NotResumable {
        /// The folder.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// The folder is not fedsim's to write, or another process is writing it.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The folder cannot be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl FolderError {
    /// Whether the user's choice of folder is at fault, rather than the disk.
    pub fn is_bad_input(&self) -> bool {
        match self {
            FolderError::Claim(error) => error.is_bad_input(),
            FolderError::Write(_) => false,
            FolderError::HoldsRun { .. } | FolderError::NotResumable { .. } => true,
        }
    }

    /// `dir` cannot be resumed, for `reason`.
    pub fn not_resumable(dir: &Path, reason: String) -> Self {
        FolderError::NotResumable {
            path: dir.to_path_buf(),
            reason,
        }
    }
}

impl RunFolder {
    /// Claims `dir` for a new run and opens its `metrics.jsonl`. The folder may be new, empty,
    /// or a run folder that holds no checkpoint (a run stopped before its first one, which
    /// finished no round: it starts again); a folder holding a run to continue, or anything
    /// that is not fedsim's, is refused.
    pub fn create(dir: &Path) -> Result<Self, FolderError> {
        let claim = Claim::take(dir, FolderKind::Run, &[], Hold::Alone)?;
        if dir.join(CHECKPOINT).exists() {
            return Err(FolderError::HoldsRun {
                path: dir.to_path_buf(),
            });
        }
        remove_partials(dir)?;
        let metrics_path = dir.join(METRICS);
        let metrics = File::create(&metrics_path).map_err(write_error(&metrics_path))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            metrics: BufWriter::new(metrics),
            _claim: claim,
        })
    }

    /// Writes the run's checkpoint, atomically.
    pub fn checkpoint(&self, state: &RunState) -> Result<(), WriteError> {
        self.write_atomically(CHECKPOINT, &state.to_bytes())
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
            .map_err(write_error(&self.dir.join(METRICS)))
    }

    /// Writes `value` as pretty JSON to `name`, atomically.
    pub fn write_json(&self, name: &str, value: &impl Serialize) -> Result<(), WriteError> {
        let text = serde_json::to_string_pretty(value).expect("fedsim's outputs always serialise");
        self.write_atomically(name, text.as_bytes())
    }

    /// Writes raw bytes to `name`, atomically.
    pub fn write_atomically(&self, name: &str, bytes: &[u8]) -> Result<(), WriteError> {
        write_atomically(&self.dir.join(name), bytes)
    }
}

/// Why a sweep's run failed, kept in its folder (`failure.json`) so that the sweep's report,
/// and any later `fedsim report` of the folder, lists it with its error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The error the run ended with.
    pub error: String,
}

impl Failure {
    /// The file a failed run's folder keeps its failure in.
    pub const FILE: &str = "failure.json";

    /// Writes this failure into the run folder `dir`, creating (and marking) the folder if
    /// the run failed before it did.
    pub fn record(&self, dir: &Path) -> Result<(), ClaimError> {
        claim::mark(dir, FolderKind::Run, &[])?;
        let text = serde_json::to_string_pretty(self).expect("a failure always serialises");
        Ok(write_atomically(&dir.join(Self::FILE), text.as_bytes())?)
    }

    /// Removes the failure an earlier attempt left in `dir`, if any, before the run is played
    /// again.
    pub fn clear(dir: &Path) -> Result<(), WriteError> {
        match fs::remove_file(dir.join(Self::FILE)) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => {
                Err(write_error(&dir.join(Self::FILE))(error))
            }
            _ => Ok(()),
        }
    }
}

/// What a run folder holds of a run to continue, read without changing anything: its
/// checkpoint and the records of the rounds the checkpoint covers.
#[derive(Debug)]
pub struct Saved {
    dir: PathBuf,
    /// The checkpoint.
    pub state: RunState,
    /// The records of rounds 1 to `state.round`, from `metrics.jsonl`.
    pub records: Vec<RoundRecord>,
    /// Those records' lines, as written.
    lines: String,
}

impl Saved {
    /// Reads the checkpoint in `dir` and the `metrics.jsonl` lines of the rounds it covers (a
    /// killed run may have written a line, or part of one, past it).
    pub fn read(dir: &Path) -> Result<Self, FolderError> {
        let not_resumable = |reason: String| FolderError::not_resumable(dir, reason);
        if !dir.is_dir() {
            return Err(not_resumable("no such folder".to_string()));
        }
        let checkpoint_path = dir.join(CHECKPOINT);
        let bytes = fs::read(&checkpoint_path)
            .map_err(|e| not_resumable(format!("cannot read its checkpoint {CHECKPOINT}: {e}")))?;
        let state = RunState::from_bytes(&bytes)
            .map_err(|e| not_resumable(format!("{}: {e}", checkpoint_path.display())))?;
        let text = fs::read_to_string(dir.join(METRICS))
            .map_err(|e| not_resumable(format!("cannot read {METRICS}: {e}")))?;
        let finished = state.round as usize;
        let (mut records, mut lines) = (Vec::new(), String::new());
        for (index, line) in text.lines().take(finished).enumerate() {
            let record: RoundRecord = serde_json::from_str(line)
                .map_err(|e| not_resumable(format!("{METRICS} line {}: {e}", index + 1)))?;
            if record.round as usize != index + 1 {
                return Err(not_resumable(format!(
                    "{METRICS} line {} is round {}",
                    index + 1,
                    record.round
                )));
            }
            records.push(record);
            lines.push_str(line);
            lines.push('\n');
        }
        if records.len() < finished {
            return Err(not_resumable(format!(
                "{METRICS} holds {} rounds, but the checkpoint is at round {finished}",
                records.len()
            )));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            state,
            records,
            lines,
        })
    }

    /// Cuts `metrics.jsonl` back to the rounds the checkpoint covers (atomically), removes what
    /// a killed process left half-written, and opens the folder, which `claim` holds, to go on
    /// from there.
    pub fn reopen(&self, claim: Claim) -> Result<RunFolder, WriteError> {
        remove_partials(&self.dir)?;
        write_atomically(&self.dir.join(METRICS), self.lines.as_bytes())?;
        let metrics_path = self.dir.join(METRICS);
        let metrics = OpenOptions::new()
            .append(true)
            .open(&metrics_path)
            .map_err(write_error(&metrics_path))?;
        Ok(RunFolder {
            dir: self.dir.clone(),
            metrics: BufWriter::new(metrics),
            _claim: claim,
        })
    }
}

/// Claims the run folder `dir`, which must exist, to continue the run in it.
pub fn claim_to_continue(dir: &Path) -> Result<Claim, FolderError> {
    let nothing_to_continue =
        |reason: &str| Err(FolderError::not_resumable(dir, reason.to_string()));
    match claim::check(dir, FolderKind::Run, &[])? {
        Found::Absent => nothing_to_continue("no such folder"),
        Found::Empty => Err(FolderError::not_resumable(
            dir,
            format!(
                "the folder is empty (a run killed as it began finished no round); start the run with: fedsim run EXPERIMENT --out {}",
                dir.display()
            ),
        )),
        _ => Ok(Claim::take(dir, FolderKind::Run, &[], Hold::Alone)?),
    }
}
