//! FedPer: Arivazhagan et al. (2019), "Federated Learning with Personalization Layers". The
//! base layers are shared and averaged as FedAvg averages them; the personalization layers (by
//! default the head, the last layer) stay with each client, which trains them with the rest on
//! its own data and keeps them between rounds ([`LayerSplit`] runs it).
//!
//! Only the base layers travel: the downlink and the update carry their values alone, so the
//! traffic records count only them. The global model's personal layers keep their initial
//! values, so its accuracy on the test set says little; each client is scored with the shared
//! layers and its own (`personal_accuracy`). With no personal layer, FedPer is FedAvg.

use super::{LayerSplit, SplitMethod};

/// FedPer's split: the head stays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepHead;

impl SplitMethod for KeepHead {
    const NAME: &'static str = "fedper";
    const PAPER: &'static str =
        "Arivazhagan et al. 2019, Federated Learning with Personalization Layers";
    const KEPT: &'static [&'static str] = &["head"];
}

/// FedPer.
pub type FedPer = LayerSplit<KeepHead>;
