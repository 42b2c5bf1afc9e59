//! FedProx: Li et al. (2020), "Federated Optimization in Heterogeneous Networks". Each client
//! minimises its loss plus a proximal term that keeps it near the global model `x`:
//!
//! ```text
//! h_k(w) = F_k(w) + μ/2 |w - x|²      so each step uses   ∇F_k(w) + μ (w - x)
//! ```
//!
//! The server averages as FedAvg does. With `μ = 0` the term adds nothing, and FedProx is
//! FedAvg to the bit (the correction is still computed, so a test of it checks the hook).
//!
//! **Momentum and weight decay.** The proximal term is a term of the local objective, so its
//! gradient joins the loss's before the optimiser step and passes through `client.momentum`'s
//! buffer and beside `client.weight_decay` as the loss's does: NIID-Bench's
//! `train_net_fedprox` and Flower's FedProx baseline add it to the loss and step with momentum
//! SGD likewise. The term pulls towards `x`, so momentum speeds that pull up as it speeds up
//! the loss's descent, and nothing accumulates between rounds.

use serde::{Deserialize, Serialize};

use super::config::non_negative;
use super::{ClientAlgorithm, ClientView, Objective};
use crate::network::Tensors;

/// FedProx's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Proximal weight `μ`.
    pub mu: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { mu: 0.01 }
    }
}

/// What each parameter means, for `fedsim strategies`.
pub const DOCS: &[(&str, &str)] = &[("mu", "proximal weight μ (≥ 0); 0 gives FedAvg")];

impl Params {
    /// The rules these values break, as (field, message).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        non_negative("mu", self.mu).into_iter().collect()
    }
}

/// The client half: SGD on the loss plus the proximal term.
#[derive(Debug, Clone, Copy)]
pub struct ProximalClient {
    /// `μ`.
    pub mu: f32,
}

impl ClientAlgorithm for ProximalClient {
    fn objective(&self, _view: &ClientView<'_>, _state: Option<&Tensors>) -> Objective {
        Objective {
            proximal: Some(self.mu),
            ..Objective::default()
        }
    }
}
