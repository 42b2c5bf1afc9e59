//! fedsim: a federated-learning simulator that runs a whole federation on one machine.
//!
//! An upper server samples clients and aggregates their updates; optional middle schedulers
//! relay or pre-aggregate their group's updates; client groups train the sampled clients in
//! parallel on burn. The tiers are threads joined by flume links that count their traffic and
//! charge it to a simulated clock. A run is a pure function of its experiment config.
//!
//! As a library: read an experiment with the components a [`registry::Registry`] holds (the
//! built-ins, and a user's plug-ins), prepare it (the data loaded and split), and play it as a
//! [`Run`] in a run folder (the folder of a stopped run is continued with [`Run::resume`]).
//! Ten clients of the built-in breast-cancer table, under FedProx:
//!
//! ```
//! use fedsim::output::Progress;
//! use fedsim::registry::Registry;
//! use fedsim::stop::StopSignal;
//! use fedsim::{Experiment, ExperimentConfig, Run};
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
//! let run = Run::new(experiment, &dir.path().join("run"))?;
//! let result = run.play(&Progress::Silent, &StopSignal::new(), None)?.expect("a new run");
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
#![deny(rustdoc::broken_intra_doc_links, rustdoc::private_intra_doc_links)]

/// Declares fedsim's machinery: modules public to its binary, benchmarks and tests, but outside
/// the documented surface. In the API docs they are private, so a documented item that links
/// into one is an error (`rustdoc::private_intra_doc_links`, denied by CI) rather than the
/// unlinked text `#[doc(hidden)]` would leave.
macro_rules! machinery {
    ($($(#[$attr:meta])* $name:ident;)*) => {$(
        $(#[$attr])* #[cfg(not(doc))] pub mod $name;
        $(#[$attr])* #[cfg(doc)] pub(crate) mod $name;
    )*};
}

machinery! {
    availability;
    checkpoint;
    report;
    #[cfg(feature = "mpi")]
    cluster;
    states;
    sweep;
    topology;
    training;
}

pub mod backend;
pub(crate) mod byzantine;
pub mod cli;
pub mod compression;
pub mod config;
pub mod conformance;
pub mod connect;
pub mod data;
pub(crate) mod error;
pub(crate) mod experiment;
pub mod history;
pub mod local;
pub mod model;
pub mod network;
pub mod output;
pub mod plugin;
pub mod privacy;
pub mod registry;
pub mod secure;
pub mod seed;
pub mod stop;
pub mod strategy;

pub use config::ExperimentConfig;
pub use error::Error;
pub use experiment::{Experiment, Run, RunResult};
pub use topology::Spread;
