//! The errors that stop a command: [`Error`], everything that can stop an experiment, and the
//! records of what is wrong with a sweep file ([`SweepError`]) or a report's inputs
//! ([`ReportError`]). They sit below the experiment, the sweep and the report that raise them,
//! and name only what lies below those.

use std::path::{Path, PathBuf};

#[cfg(feature = "mpi")]
use crate::cluster;
use crate::output::atomic::WriteError;
use crate::output::claim::ClaimError;
use crate::{config, data, output, topology};

/// Everything that can stop an experiment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The experiment file or a `--set` is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A data or partition file is missing or malformed.
    #[error(transparent)]
    Data(#[from] data::DataError),
    /// The model cannot take the samples the data files hold (known only once they are read).
    #[error("{0}")]
    ModelDoesNotFit(String),
    /// The partition cannot be drawn with the configured parameters.
    #[error("cannot partition the data: {0}")]
    Partition(#[from] data::partition::PartitionError),
    /// The run folder cannot be used: it holds a run already, or cannot be resumed.
    #[error(transparent)]
    Folder(#[from] output::run_folder::FolderError),
    /// The run folder cannot be written.
    #[error(transparent)]
    Write(#[from] output::atomic::WriteError),
    /// The federation stopped: a client failed, or a tier was lost.
    #[error(transparent)]
    Federation(#[from] topology::FederationError),
    /// The sweep file is invalid, or its folder holds runs of other settings.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// A comparison report cannot be made from the folders given, or written.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// A data set could not be downloaded, checked or unpacked.
    #[error(transparent)]
    Fetch(#[from] data::fetch::FetchError),
    /// The tiers cannot be placed on the run's processes, or the experiment cannot be spread
    /// over them.
    #[error("{0}")]
    Placement(String),
    /// A run over MPI could not start.
    #[cfg(feature = "mpi")]
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterError),
    /// The clients' states cannot be kept: no folder to spill them to.
    #[error(transparent)]
    States(#[from] crate::states::SpillError),
    /// Worker threads could not be started.
    #[error("cannot start worker threads: {0}")]
    Threads(String),
    /// A stop was requested (Ctrl-C, SIGTERM); the run folder holds a checkpoint to continue.
    #[error("stopped after round {round}")]
    Stopped {
        /// The last finished round, which the checkpoint holds.
        round: u32,
    },
}

impl Error {
    /// Whether the user's input (config, flags, data files) is at fault, rather than the run.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::Config(_)
            | Error::Data(_)
            | Error::ModelDoesNotFit(_)
            | Error::Partition(_)
            | Error::Placement(_)
            | Error::Sweep(_) => true,
            Error::Folder(error) => error.is_bad_input(),
            Error::Report(error) => error.is_bad_input(),
            _ => false,
        }
    }
}

/// Why a sweep file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The file cannot be read or is not a sweep.
    #[error("sweep file {}: {reason}", path.display())]
    File {
        /// The sweep file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A run folder holds a run of another experiment than the sweep now gives it.
    #[error("the run folder {} holds a run with other settings than the sweep now gives it ({}); move it away or restore the sweep file (and its --set)", folder.display(), fields.join("; "))]
    Changed {
        /// The run folder.
        folder: PathBuf,
        /// The fields that differ, with their values now and before.
        fields: Vec<String>,
    },
    /// A `--set` given with the sweep cannot be read.
    #[error(transparent)]
    Override(#[from] crate::config::ConfigError),
    /// Some runs' experiments are invalid.
    #[error("sweep file {}: {} of its runs are invalid:\n{}", path.display(), problems.len(), problems.join("\n"))]
    InvalidRuns {
        /// The sweep file.
        path: PathBuf,
        /// One entry per invalid run: its name and what is wrong.
        problems: Vec<String>,
    },
}

/// What a report cannot be made from, or written to.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// No finished run in the folders given.
    #[error(
        "no finished run (a folder with config.json and a metrics.jsonl of every round) in {}{}",
        inputs.join(", "),
        failed.iter().map(|line| format!("\n  failed: {line}")).collect::<String>()
    )]
    NoRuns {
        /// The folders given.
        inputs: Vec<String>,
        /// The runs among them that failed, with their errors.
        failed: Vec<String>,
    },
    /// A file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A run's `config.json` is not what a run writes.
    #[error("{}: not a run's config: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A line of a run's `metrics.jsonl` is not a round record, or not the round expected, or
    /// holds a value out of its range.
    #[error("{} line {line}: {message}", path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Two runs of one configuration and seed hold different models.
    #[error(
        "{} and {} are runs of the same configuration with the same seed, yet their models differ; a rerun gives the same model to the bit, so one folder is not what its config.json says: report them apart",
        first.display(),
        second.display()
    )]
    Conflicting {
        /// The run kept so far.
        first: PathBuf,
        /// The run that differs from it.
        second: PathBuf,
    },
    /// A chart could not be drawn.
    #[error("cannot draw {name}: {message}")]
    Draw {
        /// The chart's file name.
        name: String,
        /// Why.
        message: String,
    },
    /// The report folder is not fedsim's to write.
    #[error(transparent)]
    Folder(#[from] ClaimError),
    /// The report folder cannot be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl ReportError {
    /// Whether the folders given or the report folder are at fault, rather than the disk.
    pub fn is_bad_input(&self) -> bool {
        match self {
            ReportError::Folder(error) => error.is_bad_input(),
            ReportError::Write(_) => false,
            _ => true,
        }
    }

    /// Wraps an I/O error reading `path`.
    pub(crate) fn read(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| ReportError::Read {
            path: path.to_path_buf(),
            source,
        }
    }
}
