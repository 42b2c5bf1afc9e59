//! LG-FedAvg: Liang et al. (2020), "Think Locally, Act Globally: Federated Learning with Local
//! and Global Representations". The opposite split to FedPer's: each client keeps its own
//! local representation (by default the body, every layer but the last) and the federation
//! averages the global layers (the head) as FedAvg averages a model ([`LayerSplit`] runs it).
//!
//! Only the global layers travel, so a round moves a small part of the model. The global model
//! holds the initial body, so its test-set accuracy says little; each client is scored with its
//! own body under the shared head (`personal_accuracy`). The paper initialises the local
//! representations by local training before federating; here every client starts from the
//! initial model's body and trains its own from its first round.

use super::{LayerSplit, SplitMethod};

/// LG-FedAvg's split: the body stays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepBody;

impl SplitMethod for KeepBody {
    const NAME: &'static str = "lg_fedavg";
    const PAPER: &'static str = "Liang et al. 2020, Think Locally, Act Globally: Federated Learning with Local and Global Representations";
    const KEPT: &'static [&'static str] = &["body"];
}

/// LG-FedAvg.
pub type LgFedAvg = LayerSplit<KeepBody>;
