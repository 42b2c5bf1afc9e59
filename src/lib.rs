//! fedsim: a federated-learning simulator that runs a whole federation on one machine.
//!
//! An upper server samples clients and aggregates their updates; optional middle schedulers
//! relay or pre-aggregate their group's updates; client groups train the sampled clients in
//! parallel on burn. The tiers are threads joined by flume links that count their traffic and
//! charge it to a simulated clock. A run is a pure function of its experiment config.
//!
//! As a library: read an experiment with the components a [`registry::Registry`] holds (the
//! built-ins, and a user's plug-ins), prepare it (the data loaded and split), and run it into a
//! run folder. Ten clients of the built-in breast-cancer table, under FedProx:
//!
//! ```
//! use fedsim::output::{Progress, RunFolder};
//! use fedsim::registry::Registry;
//! use fedsim::stop::StopSignal;
//! use fedsim::{Experiment, ExperimentConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Registry::builtin();
//! let file = serde_json::json!({
//!     "name": "breast-cancer",
//!     "seed": 0,
//!     "data": {"dataset": "breast-cancer"},
//!     "partition": {"scheme": "dirichlet", "alpha": 0.5},
//!     "model": "logistic",
//!     "federation": {"num_clients": 10, "clients_per_round": 5, "rounds": 10},
//!     "client": {"epochs": 2, "batch_size": 16, "lr": 0.05},
//!     "strategy": {"name": "fedprox", "mu": 0.01}
//! });
//! let config = ExperimentConfig::from_value(file, "breast-cancer.json".as_ref(), &registry)?;
//! let experiment = Experiment::prepare(config, &registry)?;
//! let dir = tempfile::tempdir()?;
//! let mut folder = RunFolder::create(&dir.path().join("run"))?;
//! let result = experiment.run(&mut folder, &Progress::Silent, &StopSignal::new())?;
//! assert_eq!(result.rounds.len(), 10);
//! assert!(result.summary.final_accuracy > 0.9);
//! # Ok(())
//! # }
//! ```
//!
//! [`cli::main`] is the whole command line, with a registry's components; the book in `docs/`
//! (the tutorial, the guides and the reference: `mdbook serve docs`) says what each command and
//! field does, and `ARCHITECTURE.md` maps the modules.

#![warn(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod availability;
pub mod backend;
pub mod byzantine;
pub mod checkpoint;
pub mod cli;
#[cfg(feature = "mpi")]
pub mod cluster;
pub mod config;
pub mod conformance;
pub mod connect;
pub mod data;
pub mod experiment;
pub mod history;
pub mod model;
pub mod network;
pub mod output;
pub mod registry;
pub mod report;
pub mod seed;
pub mod states;
pub mod stop;
pub mod strategy;
pub mod sweep;
pub mod topology;
pub mod training;

pub use config::ExperimentConfig;
pub use experiment::{Experiment, Resumable, Run, RunResult};

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
    Sweep(#[from] sweep::SweepError),
    /// A comparison report cannot be made from the folders given, or written.
    #[error(transparent)]
    Report(#[from] report::ReportError),
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
