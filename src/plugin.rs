//! Everything a plug-in author needs, in one module: the stable surface of fedsim.
//!
//! A plug-in (an algorithm, a model, a data set, a partition scheme or a compressor in a crate
//! of its own)
//! says `use fedsim::plugin::*;` and implements one of the traits here, registers it with a
//! [`RegistryBuilder`], and checks it with the [`conformance`] kit. What this module names is
//! what fedsim keeps working across its versions: the traits and their methods, the views a
//! plug-in is handed (structs of their own, `#[non_exhaustive]` where they may grow), the
//! parameter checks ([`Problems`]) and the seeded streams ([`stream`], [`Purpose`]). The rest of
//! the crate is fedsim's own: the modules these items live in, documented but free to change,
//! and machinery its binary, benchmarks and tests use, left out of these docs.
//!
//! - **Algorithms** ([`crate::strategy`]): [`Algorithm`] puts together a server half
//!   ([`Strategy`], [`AsyncStrategy`]), a client half ([`ClientAlgorithm`]) and a choice of who
//!   trains ([`Selector`], handed [`Candidates`] with what the server has seen of each client:
//!   [`ClientHistory`]). A client half that trains itself is handed a [`LocalTraining`]
//!   session ([`crate::local`]).
//! - **Models** ([`crate::model`]): an [`Architecture`] builds a [`Network`], of burn's layers
//!   or of the fast ones the built-ins are made of ([`crate::model::layers`]).
//! - **Data** ([`crate::data`]): a [`DataSource`] loads a data set; a [`Partitioner`] splits it
//!   among clients.
//! - **Compression** ([`crate::compression`]): a [`Compressor`] encodes a client's change to the
//!   model it was sent into the bytes its upload carries, and decodes them ([`Malformed`] where
//!   they are not an encoding).
//!
//! The crates the traits are written in are here too, at the versions fedsim is built with:
//! `burn` (a client half's tensors), `rand` and `rand_distr` (draws from a seeded
//! stream: `use fedsim::plugin::rand::RngExt;`, `rand_distr::Normal`), `serde_json` (the
//! parameters the conformance kit's `check_with` takes). Naming them through this module, rather
//! than as dependencies of one's own, keeps their types fedsim's.

pub use crate::compression::{Compressor, Malformed};
pub use crate::config::check::Problems;
pub use crate::conformance;
pub use crate::data::{
    ClientSource, ClientSplit, DataContext, DataShape, DataSource, Dataset, OwnSamples,
    Partitioner, Roster, SampleKind, SampleShape, SplitContext, SplitInput, TrainTest,
};
pub use crate::history::{ClientHistory, Seen};
pub use crate::local::burn;
pub use crate::local::{Batch, LocalTraining, Objective, TrainError, TrainedNet};
pub use crate::model::{Architecture, Input, Net, Network, Outputs, ParamKind, ParamSite};
pub use crate::network::{ClientId, ClientInfo, StateError, Tensors, Update};
pub use crate::registry::{Origin, Registry, RegistryBuilder};
pub use crate::seed::{Purpose, stream};
pub use crate::strategy::vector;
pub use crate::strategy::{
    Aggregate, Algorithm, Arrival, AsyncStrategy, Candidates, ClientAlgorithm, ClientView,
    Collected, EdgeAggregation, FedAvgServer, FineTuning, Fold, Folded, FreshModels, NoParams,
    Online, Pass, Reads, Reduction, Round, Selector, Sent, Setting, Start, Strategy, Sum, Totals,
    Trained, Weighting,
};
pub use rand;
pub use rand_chacha::ChaCha12Rng;
pub use rand_distr;
pub use serde_json;
