//! FedDyn: Acar et al. (2021), "Federated Learning Based on Dynamic Regularization",
//! Algorithm 1. Each client adds a linear and a quadratic term to its loss so that, at a
//! fixed point, its local optimum is the global one; the server keeps the running mean `h`
//! of the clients' changes:
//!
//! ```text
//! client k, from θ:   θ_k = argmin L_k(θ') - <∇L_k(θ_k^{prev}), θ'> + α/2 |θ' - θ|²
//!                     so each step uses   ∇L_k(θ') - ∇L_k(θ_k^{prev}) + α (θ' - θ)
//!                     ∇L_k(θ_k) ← ∇L_k(θ_k^{prev}) - α (θ_k - θ)       (kept by the client)
//! server:             h ← h - α/m Σ_{k∈P} (θ_k - θ)                      (m: all clients)
//!                     θ ← (1/|P|) Σ_{k∈P} θ_k - h / α
//! ```
//!
//! The client's gradient memory starts at zero. Clients count equally, as in the paper.
//!
//! **Momentum and weight decay.** Both terms belong to the local objective, so their gradients
//! join the loss's before the optimiser step and pass through `client.momentum`'s buffer as
//! the loss's does (the paper's code and FL-bench's add them to the loss, and step with the
//! experiment's optimiser). The gradient memory is
//! updated from the model's change alone, `α (θ_k - θ)`, which is the first-order condition of
//! the local problem whatever optimiser reached it, so momentum does not bias it as it would
//! an estimate divided by the learning rate. Weight decay is part of `L_k`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::vector::{add_scaled, squared_norm, weighted_sum};
use super::{
    Aggregate, Algorithm, ClientAlgorithm, ClientView, Collected, EdgeAggregation, Objective,
    Reads, Round, Setting, Strategy, Sum, Trained, Weighting,
};
use crate::config::check::Problems;
use crate::network::{StateError, Tensors};

/// The client state: its last gradient `∇L_k(θ_k)`.
const GRADIENT: &str = "gradient";
/// The server state `h`.
const H: &str = "h";

/// FedDyn's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Regularisation weight `α`.
    pub alpha: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { alpha: 0.01 }
    }
}

/// FedDyn: the server half [`FedDynServer`] and the client half [`FedDynClient`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FedDyn;

impl Algorithm for FedDyn {
    type Params = Params;

    fn name(&self) -> &'static str {
        "feddyn"
    }

    fn paper(&self) -> &'static str {
        "Acar et al. 2021, Federated Learning Based on Dynamic Regularization"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("alpha", "dynamic regularisation weight α (> 0)")]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("alpha", params.alpha);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported(
            "FedDyn averages client models with equal weights and counts every client's change",
        )
    }

    fn server(&self, params: &Params, _: &Setting<'_>, num_params: usize) -> Box<dyn Strategy> {
        Box::new(FedDynServer::new(*params, num_params))
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(FedDynClient {
            alpha: params.alpha as f32,
        })
    }
}

/// The server half.
#[derive(Debug, Clone)]
pub struct FedDynServer {
    alpha: f32,
    /// `h`, the mean of the clients' changes (zero at the start).
    h: Vec<f32>,
}

impl FedDynServer {
    /// A server with `h = 0` for a model of `num_params` values.
    pub fn new(params: Params, num_params: usize) -> Self {
        Self {
            alpha: params.alpha as f32,
            h: vec![0.0; num_params],
        }
    }
}

impl Strategy for FedDynServer {
    fn reads(&self) -> Reads {
        Reads::Sums(vec![
            Sum::params(Weighting::One),
            Sum::params(Weighting::PerUpdate),
        ])
    }

    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let taking_part = input.len() as f32;
        let [mut change_sum, mut model] = input.into_sums();
        add_scaled(&mut change_sum, global, -taking_part);
        let step = -self.alpha / round.roster.len() as f32;
        self.h = weighted_sum(&[(&self.h, 1.0), (&change_sum, step)]);
        add_scaled(&mut model, &self.h, -1.0 / self.alpha);
        Aggregate::model(model).with("h_norm", squared_norm(&self.h).sqrt())
    }

    fn state(&self) -> Tensors {
        Tensors::new().with(H, self.h.clone())
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        self.h = state.require(H)?.to_vec();
        Ok(())
    }
}

/// The client half: the dynamic regulariser and the client's gradient memory.
#[derive(Debug, Clone, Copy)]
pub struct FedDynClient {
    /// `α`.
    pub alpha: f32,
}

impl ClientAlgorithm for FedDynClient {
    fn objective(&self, _view: &ClientView<'_>, state: Option<&Tensors>) -> Objective {
        Objective {
            proximal: Some(self.alpha),
            linear: state.map(|s| s.expect(GRADIENT).iter().map(|g| -g).collect()),
            correction: None,
        }
    }

    fn finish(
        &self,
        view: &ClientView<'_>,
        state: &mut Option<Tensors>,
        trained: &Trained<'_>,
    ) -> Tensors {
        let old = state.as_ref().map(|s| s.expect(GRADIENT));
        let gradient: Vec<f32> = view
            .global
            .iter()
            .zip(trained.params)
            .enumerate()
            .map(|(i, (&x, &y))| old.map_or(0.0, |g| g[i]) - self.alpha * (y - x))
            .collect();
        *state = Some(Tensors::new().with(GRADIENT, gradient));
        Tensors::new()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    #[test]
    fn server_step_matches_the_hand_computation() {
        // α = 0.5, ten clients, θ = 1; two clients return 2 and 4 (changes 1 and 3).
        // h = 0 - 0.5/10 * 4 = -0.2;  θ = 3 - (-0.2) / 0.5 = 3.4.
        let mut server = FedDynServer::new(Params { alpha: 0.5 }, 1);
        let updates = [update(0, 10, vec![2.0]), update(1, 99, vec![4.0])];
        let next = server.aggregate_updates(&round(), &[1.0], &updates);
        assert!((server.h[0] + 0.2).abs() < 1e-7);
        assert!((next.model[0] - 3.4).abs() < 1e-6);
    }

    #[test]
    fn the_client_remembers_its_gradient() {
        // α = 0.5, θ = 1, trained to 3: ∇ = 0 - 0.5 * 2 = -1, then the linear term is +1.
        let client = FedDynClient { alpha: 0.5 };
        let downlink = Tensors::new();
        let view = ClientView {
            round: 1,
            client: 0,
            global: &[1.0],
            downlink: &downlink,
            lr: 0.1,
            personal: None,
        };
        let mut state = None;
        let trained = Trained {
            params: &[3.0],
            steps: 4,
            loss_at_global: None,
            kept: &Tensors::new(),
        };
        client.finish(&view, &mut state, &trained);
        let objective = client.objective(&view, state.as_ref());
        assert_eq!(objective.linear, Some(vec![1.0]));
        assert_eq!(objective.proximal, Some(0.5));
    }
}
