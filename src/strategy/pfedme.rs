//! pFedMe: Dinh, Tran and Nguyen (2020), "Personalized Federated Learning with Moreau
//! Envelopes". Each client's personal model `θ` solves, on each batch `D`, the Moreau
//! envelope's inner problem around its local copy `w` of the global model, approximately by
//! `K` steps of gradient descent at the personal learning rate; then `w` moves towards it:
//!
//! ```text
//! θ ← θ - lr_p (∇f(θ; D) + λ (θ - w) + μ θ)      K times
//! w ← w - η λ (w - θ)
//! ```
//!
//! with `η` the local learning rate (`client.lr`; the paper's Algorithm 1, and the authors'
//! code's `μ`, a small L2 term on `θ`). `θ` starts each round as the model sent and carries
//! over from batch to batch. The server moves the global model part of the way to the clients'
//! sample-weighted mean: `w ← (1 - β) w + β mean` (`β` 1: the mean). A client is scored with
//! the `θ` of the last round it trained in (the model sent before that), kept in its state.
//! Both steps are plain gradient steps, as in the paper: `client.momentum`, `client.weight_decay`
//! and `client.optimizer` do not apply to them.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Aggregate, Algorithm, ClientAlgorithm, ClientView, Collected, EdgeAggregation, FineTuning,
    PERSONAL_MODEL, Reads, Round, Setting, Strategy, Sum, Trained, Weighting, kept_personal_model,
};
use crate::config::check::Problems;
use crate::local::{LocalTraining, TrainError, TrainedNet};
use crate::model::{Net, flat};
use crate::network::Tensors;

/// pFedMe: [`PFedMeServer`]'s partial steps and [`PFedMeClient`]'s personal models.
#[derive(Debug, Clone, Copy, Default)]
pub struct PFedMe;

impl Algorithm for PFedMe {
    type Params = Params;

    fn name(&self) -> &'static str {
        "pfedme"
    }

    fn paper(&self) -> &'static str {
        "Dinh, Tran and Nguyen 2020, Personalized Federated Learning with Moreau Envelopes"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("lambda", "λ (> 0), the pull between θ and the local model"),
            ("personal_lr", "the inner steps' learning rate (> 0)"),
            ("k", "inner steps K on each batch (≥ 1)"),
            ("mu", "μ (≥ 0), the L2 term on θ in the inner steps"),
            (
                "beta",
                "the server's step β (> 0) towards the clients' mean; 1 takes the mean",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("lambda", params.lambda);
        problems.positive("personal_lr", params.personal_lr);
        problems.at_least_one("k", u64::from(params.k));
        problems.non_negative("mu", params.mu);
        problems.positive("beta", params.beta);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(PFedMeServer {
            beta: params.beta as f32,
        })
    }

    fn client(&self, params: &Params, setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(PFedMeClient {
            lambda: params.lambda as f32,
            personal_lr: params.personal_lr as f32,
            k: params.k,
            mu: params.mu as f32,
            outer_step: (setting.lr * params.lambda) as f32,
        })
    }
}

/// pFedMe's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// `λ`.
    pub lambda: f64,
    /// The inner steps' learning rate.
    pub personal_lr: f64,
    /// `K`.
    pub k: u32,
    /// `μ`.
    pub mu: f64,
    /// `β`.
    pub beta: f64,
}

impl Default for Params {
    /// FL-bench's defaults.
    fn default() -> Self {
        Self {
            lambda: 15.0,
            personal_lr: 0.01,
            k: 5,
            mu: 0.001,
            beta: 1.0,
        }
    }
}

/// pFedMe's server half: a step of `β` from the global model to the clients' mean.
#[derive(Debug, Clone, Copy)]
pub struct PFedMeServer {
    /// `β`.
    pub beta: f32,
}

impl Strategy for PFedMeServer {
    fn reads(&self) -> Reads {
        Reads::Sums(vec![Sum::params(Weighting::Samples)])
    }

    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let [mut mean] = input.into_sums();
        if self.beta != 1.0 {
            for (m, w) in mean.iter_mut().zip(global) {
                *m = (1.0 - self.beta) * w + self.beta * *m;
            }
        }
        Aggregate::model(mean)
    }
}

/// pFedMe's client half.
#[derive(Debug, Clone, Copy)]
pub struct PFedMeClient {
    /// `λ`.
    pub lambda: f32,
    /// The inner steps' learning rate.
    pub personal_lr: f32,
    /// `K`.
    pub k: u32,
    /// `μ`.
    pub mu: f32,
    /// `η λ`, the local model's step towards `θ`.
    pub outer_step: f32,
}

impl ClientAlgorithm for PFedMeClient {
    fn train(
        &self,
        mut local: LocalTraining<'_>,
        net: Net,
        view: &ClientView<'_>,
        _state: Option<&Tensors>,
    ) -> Result<TrainedNet, TrainError> {
        let mut theta = local.network(view.global);
        let mut net = net;
        while let Some(batch) = local.next_batch()? {
            let w = net.values();
            for step in 1..=self.k {
                let loss =
                    local.cross_entropy(theta.forward(batch.input.clone()), batch.labels.clone());
                if step == self.k {
                    local.record_loss(&loss)?;
                }
                let mut grads = theta.gradients(loss);
                theta.correct_gradients(&mut grads, &mut |index, grad, value| {
                    let value = value();
                    grad + (value.clone() - w[index].clone()).mul_scalar(self.lambda)
                        + value.mul_scalar(self.mu)
                });
                let grads = theta.gradient_values(&grads);
                theta = theta.map_values(&mut |index, value| match &grads[index] {
                    Some(grad) => value - grad.clone().mul_scalar(self.personal_lr),
                    None => value,
                });
            }
            let theta_values = theta.values();
            net = net.map_values(&mut |index, value| {
                let towards = value.clone() - theta_values[index].clone();
                value - towards.mul_scalar(self.outer_step)
            });
        }
        let kept = Tensors::new().with(PERSONAL_MODEL, flat::flatten(&theta));
        Ok(local.finish(net).keeping(kept))
    }

    fn finish(
        &self,
        _view: &ClientView<'_>,
        state: &mut Option<Tensors>,
        trained: &Trained<'_>,
    ) -> Tensors {
        *state = Some(trained.kept.clone());
        Tensors::new()
    }

    fn personalises(&self) -> bool {
        true
    }

    fn personal_model(
        &self,
        view: &ClientView<'_>,
        state: Option<&Tensors>,
        _tuning: &mut dyn FineTuning,
    ) -> Result<Vec<f32>, TrainError> {
        Ok(kept_personal_model(view, state).to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    #[test]
    fn the_server_steps_beta_of_the_way_to_the_mean() {
        let updates = [update(0, 100, vec![2.0]), update(1, 300, vec![6.0])];
        let mut half = PFedMeServer { beta: 0.5 };
        // The mean is 5; half-way from 1 is 3.
        assert_eq!(
            half.aggregate_updates(&round(), &[1.0], &updates).model,
            [3.0]
        );
        let mut whole = PFedMeServer { beta: 1.0 };
        assert_eq!(
            whole.aggregate_updates(&round(), &[1.0], &updates).model,
            [5.0]
        );
    }

    #[test]
    fn a_batch_takes_k_inner_steps_of_theta_then_moves_w_towards_it_as_worked_by_hand() {
        use super::super::testing::{close, logistic_gradient, train_toy};
        let w0 = [0.5f32, -0.25, 0.0, 0.75, 0.1, -0.1];
        let (lambda, personal_lr, mu, lr) = (2.0, 0.1, 0.01, 0.05);
        let client = PFedMeClient {
            lambda: lambda as f32,
            personal_lr: personal_lr as f32,
            k: 2,
            mu: mu as f32,
            outer_step: (lr * lambda) as f32,
        };
        let run = train_toy(&client, &[], &[], (&w0, 1, lr), None);
        let w: Vec<f64> = w0.iter().map(|&v| f64::from(v)).collect();
        let mut theta = w.clone();
        for _ in 0..2 {
            let g = logistic_gradient(&theta);
            theta = theta
                .iter()
                .zip(&g)
                .zip(&w)
                .map(|((t, g), w)| t - personal_lr * (g + lambda * (t - w) + mu * t))
                .collect();
        }
        let w1: Vec<f64> = w
            .iter()
            .zip(&theta)
            .map(|(w, t)| w - lr * lambda * (w - t))
            .collect();
        assert!(
            close(&run.params, &w1, 1e-6),
            "{:?} against {w1:?}",
            run.params
        );
        assert!(close(run.kept.expect(PERSONAL_MODEL), &theta, 1e-6));
    }
}
