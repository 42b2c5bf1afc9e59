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

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, Objective, Reduction,
    Setting, Strategy,
};
use crate::config::check::Problems;
use crate::network::Tensors;

/// FedProx: the proximal client [`ProximalClient`], and FedAvg's server.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedProx;

impl Algorithm for FedProx {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedprox"
    }

    fn paper(&self) -> &'static str {
        "Li et al. 2020, Federated Optimization in Heterogeneous Networks"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("mu", "proximal weight μ (≥ 0); 0 gives FedAvg")]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.non_negative("mu", params.mu);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(ProximalClient {
            mu: params.mu as f32,
        })
    }

    /// Without the proximal term, FedAvg.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to("fedavg", Params { mu: 0.0 })]
    }
}

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
