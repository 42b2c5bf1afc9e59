//! One client's local training on burn: the session a client half trains in
//! ([`LocalTraining`]: the client's batches in their seeded order, the learning rate, the
//! configured optimiser, the loss, its seeded stream), fedsim's own loop over it
//! ([`train_on_objective`]: the cross-entropy loss plus an algorithm's [`Objective`]), and the
//! optimisers an experiment may choose.
//!
//! This is the code that runs burn's autodiff and optimisers for a client: it takes a network
//! and the client's data and gives back a network and numbers; threads, messages and which
//! client trains are the training tier's. A client half that trains itself
//! ([`crate::strategy::ClientAlgorithm::train`]) is handed a [`LocalTraining`] and writes its
//! own loop with the same parts as [`train_on_objective`], so it gets the same batches, steps
//! and checks.

pub(crate) mod batch;
mod objective;
mod optimizer;
pub(crate) mod session;
mod standard;

/// burn, at the version and with the features fedsim is built with, for a client half that
/// computes on tensors: a plug-in that names `fedsim::plugin::burn` cannot pull in another.
pub use burn;
/// The gradients of a loss by parameter, as a step takes them: what a client half's own loop
/// passes from `Net::gradients` to `LocalTraining::step`.
pub use burn::optim::GradientsParams;
pub use objective::Objective;
pub use session::{Batch, LocalTraining, TrainedNet};
pub use standard::train_on_objective;

use crate::data::Dataset;

/// Local training that cannot go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The loss became NaN or infinite; the steps are usually too long.
    #[error("training diverged: loss is {loss} at epoch {epoch}, step {step} ({hint})")]
    Diverged {
        /// The non-finite loss.
        loss: f64,
        /// Epoch, from 1.
        epoch: u32,
        /// Step within the epoch, from 1.
        step: usize,
        /// What to change, from the local settings.
        hint: String,
    },
    /// The client half's own training cannot run on this network or data, and why: MOON on a
    /// network that exposes no representation.
    #[error("{0}")]
    Unsupported(String),
    /// The client's state between rounds cannot be kept: its spill file cannot be written or
    /// read back (a full disk, say).
    #[error("its state cannot be kept: {0}")]
    StateLost(String),
    /// The client's samples cannot be made (a data file read in place that cannot be read).
    #[error("its samples cannot be made: {0}")]
    SamplesLost(String),
    /// A failure injected by the experiment's `faults`.
    #[error("injected failure")]
    Injected,
    /// The run is being stopped (Ctrl-C, SIGTERM); the client gave up between two steps.
    #[error("stopped with the run")]
    Stopped,
}

/// A client's training data.
#[derive(Debug, Clone, Copy)]
pub struct LocalData<'a> {
    /// The data set.
    pub data: &'a Dataset,
    /// The client's samples in it.
    pub indices: &'a [usize],
    /// Whether the client sees every label `l` as `C - 1 - l` (a label-flipping attacker).
    pub flip_labels: bool,
}
