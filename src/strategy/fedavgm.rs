//! FedAvgM: Hsu, Qi and Brown (2019), "Measuring the Effects of Non-Identical Data
//! Distribution for Federated Visual Classification". The server keeps a momentum buffer on
//! FedAvg's pseudo-gradient:
//!
//! ```text
//! Δ = x - Σ_k (n_k / n) y_k        (y_k: client k's model)
//! v ← β v + Δ
//! x ← x - η v
//! ```
//!
//! The step is computed as the combination `η ȳ + (1 - η) x - η β v_old`, with terms of
//! weight zero left out, so that with `β = 0` and `η = 1` it is FedAvg to the bit.

use serde::{Deserialize, Serialize};

use super::vector::{combination, difference, squared_norm, weighted_sum};
use super::{
    Aggregate, Algorithm, Collected, EdgeAggregation, Reads, Reduction, Round, Setting, Strategy,
    Sum, Weighting,
};
use crate::config::check::Problems;
use crate::network::{StateError, Tensors};

/// FedAvgM: plain local SGD, and the server half [`FedAvgMServer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAvgM;

impl Algorithm for FedAvgM {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedavgm"
    }

    fn paper(&self) -> &'static str {
        "Hsu, Qi and Brown 2019, Measuring the Effects of Non-Identical Data Distribution for Federated Visual Classification"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("server_lr", "server learning rate η (> 0)"),
            ("momentum", "server momentum β, in [0, 1)"),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("server_lr", params.server_lr);
        problems.fraction_below("momentum", params.momentum, 1.0);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgMServer::new(*params))
    }

    /// Without momentum and with a unit step, FedAvg.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        let plain = Params {
            server_lr: 1.0,
            momentum: 0.0,
        };
        vec![Reduction::to("fedavg", plain)]
    }
}

/// FedAvgM's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Server learning rate `η`.
    pub server_lr: f64,
    /// Server momentum `β`, in `[0, 1)`.
    pub momentum: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            server_lr: 1.0,
            momentum: 0.9,
        }
    }
}

/// The server half: FedAvg's mean, then a momentum step.
#[derive(Debug, Clone)]
pub struct FedAvgMServer {
    params: Params,
    /// The momentum buffer `v` (empty until the first round).
    velocity: Vec<f32>,
}

impl FedAvgMServer {
    /// A server with an empty momentum buffer.
    pub fn new(params: Params) -> Self {
        Self {
            params,
            velocity: Vec::new(),
        }
    }
}

impl Strategy for FedAvgMServer {
    fn reads(&self) -> Reads {
        Reads::Sums(vec![Sum::params(Weighting::Samples)])
    }

    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let [mean] = input.into_sums();
        let pseudo_gradient = difference(global, &mean);
        let (lr, beta) = (self.params.server_lr as f32, self.params.momentum as f32);
        if self.velocity.is_empty() {
            self.velocity = vec![0.0; global.len()];
        }
        let terms = [
            (mean.as_slice(), lr),
            (global, 1.0 - lr),
            (self.velocity.as_slice(), -lr * beta),
        ];
        let model = combination(&terms);
        self.velocity = weighted_sum(&[(&pseudo_gradient, 1.0), (&self.velocity, beta)]);
        Aggregate::model(model).with(
            "pseudo_gradient_norm",
            squared_norm(&pseudo_gradient).sqrt(),
        )
    }

    fn state(&self) -> Tensors {
        Tensors::new().with("velocity", self.velocity.clone())
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        self.velocity = state.require("velocity")?.to_vec();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::FedAvgServer;
    use super::super::testing::{round, update};
    use super::*;

    #[test]
    fn without_momentum_and_with_server_lr_one_it_is_fedavg_to_the_bit() {
        let updates = [
            update(0, 70, vec![0.3, -1.7, 2.9]),
            update(4, 130, vec![0.11, 0.2, -0.9]),
        ];
        let global = [0.5, 0.25, 1.0];
        let params = Params {
            server_lr: 1.0,
            momentum: 0.0,
        };
        let mut server = FedAvgMServer::new(params);
        for _ in 0..2 {
            let fedavgm = server.aggregate_updates(&round(), &global, &updates).model;
            let fedavg = FedAvgServer
                .aggregate_updates(&round(), &global, &updates)
                .model;
            assert_eq!(fedavgm, fedavg);
        }
    }

    #[test]
    fn momentum_accumulates_the_pseudo_gradient() {
        // Worked by hand: x = 1, the clients' mean is 0 (Δ = 1), β = 0.5, η = 0.1.
        // Round 1: v = 1,            x = 1 - 0.1 * 1   = 0.9.
        // Round 2 from x = 0.9, mean 0 (Δ = 0.9): v = 0.5 + 0.9 = 1.4, x = 0.9 - 0.14 = 0.76.
        let mut server = FedAvgMServer::new(Params {
            server_lr: 0.1,
            momentum: 0.5,
        });
        let zero = [update(0, 10, vec![0.0])];
        let x1 = server.aggregate_updates(&round(), &[1.0], &zero).model;
        assert!((x1[0] - 0.9).abs() < 1e-6);
        let x2 = server.aggregate_updates(&round(), &x1, &zero).model;
        assert!((x2[0] - 0.76).abs() < 1e-6);
    }
}
