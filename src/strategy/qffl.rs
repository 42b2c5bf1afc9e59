//! q-FFL, trained with q-FedAvg: Li, Sanjabi, Beirami and Smith (2020), "Fair Resource
//! Allocation in Federated Learning", Algorithm 2. Clients with a higher loss get more say, so
//! the accuracy spreads less across clients. Each client reports its loss `F_k` at the global
//! model `w` before training, and its trained model `w̄_k`; the server computes, as the
//! algorithm's lines 7 to 9 do,
//!
//! ```text
//! Δw_k = L (w - w̄_k)
//! Δ_k  = F_k^q Δw_k
//! h_k  = q F_k^(q-1) |Δw_k|² + L F_k^q
//! w    ← w - Σ_k Δ_k / Σ_k h_k
//! ```
//!
//! `L` is the Lipschitz estimate; the paper uses `1 / η` (the local learning rate), the
//! default here for plain SGD. The paper samples clients in proportion to their sample counts and then
//! counts them equally; fedsim's server samples uniformly (every strategy sees the same
//! clients), so here `q = 0` is the plain mean of the client models, which is FedAvg only when
//! clients hold equal numbers of samples. The update is computed as the combination
//! `Σ_k (L F_k^q / H) w̄_k + (Σ_k q F_k^(q-1) |Δw_k|² / H) w` with `H = Σ_k h_k`, so with
//! `q = 0` the second weight is exactly zero and the result is the plain mean of the models.
//!
//! **Momentum and weight decay.** q-FFL adds nothing to local training, so no term of its
//! passes through the momentum buffer. What momentum changes is the meaning of `L`: `L (w -
//! w̄_k)` stands for the client's gradient because a step of plain SGD moves the model by `η`
//! times it. With `client.momentum` β the steps are `1 / (1 - β)` times longer once the buffer
//! has filled, so the default is `L = (1 - β) / η`, the paper's `1 / η` at SGD's effective step
//! size. Keeping `1 / η` with β = 0.9 would read every gradient ten times too large and inflate
//! the curvature part of `h_k` a hundredfold, shrinking the server's steps. A `lipschitz` given
//! in the file is used as it is. Weight decay is part of the local loss; `F_k` is the loss
//! alone, as clients report it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::vector::{combination, squared_distance};
use super::{
    Aggregate, Algorithm, ClientAlgorithm, ClientView, Collected, EdgeAggregation, Reduction,
    Round, Setting, Strategy, Trained,
};
use crate::config::check::Problems;
use crate::network::Tensors;

/// The uplink tensor holding a client's loss at the global model, `F_k(w)`.
pub const LOSS_AT_GLOBAL: &str = "loss_at_global";

/// q-FFL's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Fairness `q` (0 gives the plain mean of the models).
    pub q: f64,
    /// Lipschitz estimate `L`; `null` (the default) uses `(1 - client.momentum) / client.lr`.
    pub lipschitz: Option<f64>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            q: 1.0,
            lipschitz: None,
        }
    }
}

/// q-FFL: the server half [`QFflServer`] and the client half [`QFflClient`].
#[derive(Debug, Clone, Copy, Default)]
pub struct QFfl;

impl Algorithm for QFfl {
    type Params = Params;

    fn name(&self) -> &'static str {
        "qffl"
    }

    fn paper(&self) -> &'static str {
        "Li, Sanjabi, Beirami and Smith 2020, Fair Resource Allocation in Federated Learning"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "q",
                "fairness q (≥ 0); 0 gives the plain mean of the client models",
            ),
            (
                "lipschitz",
                "Lipschitz estimate L (> 0); null uses (1 - client.momentum) / client.lr, the paper's 1 / client.lr at momentum SGD's effective step",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.non_negative("q", params.q);
        if let Some(lipschitz) = params.lipschitz {
            problems.positive("lipschitz", lipschitz);
        }
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported("q-FFL weighs each client by its own loss")
    }

    fn server(&self, params: &Params, setting: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(QFflServer::new(*params, setting.lr, setting.momentum))
    }

    fn client(&self, _params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(QFflClient)
    }

    /// With `q` 0, the plain mean of the models, which is FedAvg's on equal clients.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        let fair_to_none = Params {
            q: 0.0,
            lipschitz: None,
        };
        vec![Reduction::to("fedavg", fair_to_none).on_equal_clients()]
    }
}

/// The server half.
#[derive(Debug, Clone, Copy)]
pub struct QFflServer {
    q: f64,
    lipschitz: f64,
}

impl QFflServer {
    /// A server for clients whose local SGD has learning rate `client_lr` and momentum
    /// `client_momentum`.
    pub fn new(params: Params, client_lr: f64, client_momentum: f64) -> Self {
        Self {
            q: params.q,
            lipschitz: params
                .lipschitz
                .unwrap_or((1.0 - client_momentum) / client_lr),
        }
    }
}

impl Strategy for QFflServer {
    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let updates = input.updates();
        let (q, l) = (self.q, self.lipschitz);
        // Per client: (L F^q, q F^(q-1) |Δw|²), the two parts of h_k.
        let parts: Vec<(f64, f64)> = updates
            .iter()
            .map(|u| {
                let loss = f64::from(u.extras.expect(LOSS_AT_GLOBAL)[0]);
                let step = l * loss.powf(q);
                let curvature = if q == 0.0 {
                    0.0
                } else {
                    q * loss.powf(q - 1.0) * l * l * squared_distance(global, &u.params)
                };
                (step, curvature)
            })
            .collect();
        let h: f64 = parts.iter().map(|(s, c)| s + c).sum();
        let mut terms: Vec<(&[f32], f32)> = updates
            .iter()
            .zip(&parts)
            .map(|(u, (step, _))| (u.params.as_slice(), (step / h) as f32))
            .collect();
        let global_weight: f64 = parts.iter().map(|(_, c)| c).sum::<f64>() / h;
        terms.push((global, global_weight as f32));
        Aggregate::model(combination(&terms)).with("h_sum", h)
    }
}

/// The client half: reports its loss at the global model.
#[derive(Debug, Clone, Copy, Default)]
pub struct QFflClient;

impl ClientAlgorithm for QFflClient {
    fn needs_loss_at_global(&self) -> bool {
        true
    }

    fn finish(
        &self,
        _view: &ClientView<'_>,
        _state: &mut Option<Tensors>,
        trained: &Trained<'_>,
    ) -> Tensors {
        let loss = trained
            .loss_at_global
            .expect("asked for the loss at the global model");
        Tensors::new().with(LOSS_AT_GLOBAL, vec![loss as f32])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::super::vector::reference::{Weight, mean_params};
    use super::*;
    use crate::network::Update;

    fn with_loss(mut update: Update, loss: f32) -> Update {
        update.extras = Tensors::new().with(LOSS_AT_GLOBAL, vec![loss]);
        update
    }

    #[test]
    fn q_zero_is_the_plain_mean_to_the_bit() {
        let updates = [
            with_loss(update(0, 10, vec![0.1, -0.7]), 2.3),
            with_loss(update(3, 500, vec![1.3, 0.4]), 0.2),
            with_loss(update(5, 40, vec![-2.0, 0.9]), 1.1),
        ];
        let params = Params {
            q: 0.0,
            lipschitz: None,
        };
        let next =
            QFflServer::new(params, 0.05, 0.0).aggregate_updates(&round(), &[0.5, 0.5], &updates);
        assert_eq!(next.model, mean_params(&updates, Weight::Clients));
    }

    #[test]
    fn q_one_matches_the_hand_computation() {
        // L = 1, q = 1, w = 0. Client A: w̄ = 1, F = 1: Δw = -1, Δ = -1, h = 1 + 1 = 2.
        // Client B: w̄ = 2, F = 3: Δw = -2, Δ = -6, h = 4 + 3 = 7. w = 0 + 7/9.
        let updates = [
            with_loss(update(0, 10, vec![1.0]), 1.0),
            with_loss(update(1, 10, vec![2.0]), 3.0),
        ];
        let params = Params {
            q: 1.0,
            lipschitz: Some(1.0),
        };
        let next = QFflServer::new(params, 0.1, 0.9).aggregate_updates(&round(), &[0.0], &updates);
        assert!((next.model[0] - 7.0 / 9.0).abs() < 1e-6);
        assert_eq!(next.metrics["h_sum"], 9.0);
    }

    #[test]
    fn the_default_lipschitz_estimate_is_the_inverse_effective_step() {
        let default = Params::default();
        assert_eq!(QFflServer::new(default, 0.05, 0.0).lipschitz, 1.0 / 0.05);
        // Momentum 0.9 takes steps ten times η: L = 0.1 / 0.01 = 10, not 100.
        assert!((QFflServer::new(default, 0.01, 0.9).lipschitz - 10.0).abs() < 1e-9);
    }
}
