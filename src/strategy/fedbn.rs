//! FedBN: Li et al. (2021), "FedBN: Federated Learning on Non-IID Features via Local Batch
//! Normalization". Every layer but the normalisation layers is shared and averaged as FedAvg
//! averages it; each client keeps its BatchNorm layers (their scales, shifts and running
//! statistics), so each normalises with its own features' statistics ([`LayerSplit`] runs it).
//! It needs a model with BatchNorm: the CNN with `"batch_norm": true` or the ResNet with
//! `"norm": "batch"`. With GroupNorm (the ResNet's default) the norms' scales and shifts stay
//! instead; a model without normalisation layers keeps nothing, and FedBN is FedAvg to the bit.
//!
//! Only the shared layers travel. The global model's normalisation layers keep their initial
//! values (scale 1, shift 0, running mean 0 and variance 1), so the test set's accuracy,
//! evaluated with them, says little; each client is scored with the shared layers and its own
//! normalisation (`personal_accuracy`), as the paper evaluates it.

use super::{LayerSplit, SplitMethod};

/// FedBN's split: the normalisation layers stay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepNorms;

impl SplitMethod for KeepNorms {
    const NAME: &'static str = "fedbn";
    const PAPER: &'static str = "Li et al. 2021, FedBN: Federated Learning on Non-IID Features via Local Batch Normalization";
    const KEPT: &'static [&'static str] = &["norm"];
}

/// FedBN.
pub type FedBn = LayerSplit<KeepNorms>;
