//! FedExP as a plug-in: the whole algorithm, in one file (`main.rs` registers it).
//!
//! FedExP (Jhunjhunwala, Wang and Joshi 2023, "FedExP: Speeding Up Federated Averaging via
//! Extrapolation", ICLR) keeps FedAvg's clients and changes only the server's step: each
//! round it extrapolates past the clients' mean by a step size it computes from their changes,
//!
//! ```text
//! Δ_i = x - y_i                  (client i's change; M clients this round)
//! Δ̄   = (1/M) Σ_i Δ_i
//! η_g = max(1, Σ_i |Δ_i|² / (2 M (|Δ̄|² + ε)))
//! x  ← x - η_g Δ̄
//! ```
//!
//! When the clients' changes agree, `Σ |Δ_i|² ≈ M |Δ̄|²` and `η_g` stays 1 (FedAvg with equal
//! client weights); when they pull apart, the mean is short and the server steps further.

use fedsim::config::check::Problems;
use fedsim::strategy::vector::{combination, squared_distance, weighted_sum};
use fedsim::strategy::{
    Aggregate, Algorithm, Collected, EdgeAggregation, Round, Setting, Strategy,
};
use serde::{Deserialize, Serialize};

/// FedExP's parameter, as the experiment file gives it: `{"name": "fedexp", "epsilon": 0.001}`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// `ε`, which keeps the step finite when the clients' mean change is tiny.
    pub epsilon: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { epsilon: 1e-3 }
    }
}

/// The algorithm as the registry knows it: its name, paper, parameters and halves.
pub struct FedExP;

impl Algorithm for FedExP {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedexp"
    }

    fn paper(&self) -> &'static str {
        "Jhunjhunwala, Wang and Joshi 2023, FedExP: Speeding Up Federated Averaging via Extrapolation"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("epsilon", "ε (> 0) in the step size's denominator")]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("epsilon", params.epsilon);
    }

    /// The step size needs every client's own change.
    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported("FedExP's step size needs every client's own change")
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedExPServer {
            epsilon: params.epsilon,
        })
    }
    // The client half is FedAvg's, the default: plain local SGD.
}

/// The server half: the extrapolated step.
struct FedExPServer {
    epsilon: f64,
}

impl Strategy for FedExPServer {
    fn aggregate(&mut self, _round: &Round<'_>, x: &[f32], input: Collected<'_>) -> Aggregate {
        let updates = input.updates();
        let m = updates.len() as f64;
        let share = (1.0 / m) as f32;
        let models: Vec<(&[f32], f32)> = updates.iter().map(|u| (&u.params[..], share)).collect();
        // ȳ = x - Δ̄; Σ |Δ_i|² and |Δ̄|² are distances to x.
        let mean = weighted_sum(&models);
        let spread: f64 = updates.iter().map(|u| squared_distance(x, &u.params)).sum();
        let step = squared_distance(x, &mean);
        let eta = (spread / (2.0 * m * (step + self.epsilon))).max(1.0);
        // x - η_g Δ̄ = η_g ȳ + (1 - η_g) x: exactly ȳ when η_g is 1.
        let next = combination(&[(&mean, eta as f32), (x, (1.0 - eta) as f32)]);
        Aggregate::model(next).with("server_lr", eta)
    }
}
