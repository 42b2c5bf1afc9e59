//! Per-FedAvg: Fallah, Mokhtari and Ozdaglar (2020), "Personalized Federated Learning with
//! Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach". The federation learns a
//! model that is good after one step of gradient descent on each client's own data (MAML's
//! objective `f(w - α∇f(w))`), and each client uses the model it is sent after that one step
//! (`personal_accuracy`). A local step takes two batches `D` and `D'` (three for the
//! Hessian-free variant, `D''` too):
//!
//! ```text
//! w' = w - α ∇f(w; D)
//! first order:   w ← w - β ∇f(w'; D')
//! Hessian-free:  w ← w - β (g - α d),   g = ∇f(w'; D'),   d = (∇f(w + δg; D'') - ∇f(w - δg; D'')) / 2δ
//! ```
//!
//! where `d` approximates the Hessian-vector product `∇²f(w; D'') g` by central differences
//! (the paper's Algorithm 1 and section 5). As in the authors' code of the pFedMe comparison
//! and FL-bench, `α` is the local learning rate (`client.lr`) and `β` a parameter; the outer
//! step is the configured optimiser's at `β`, the inner one plain gradient descent. Each batch
//! counts as one of the client's steps, so its local work of `S` steps makes `S / 2` updates
//! (`S / 3` Hessian-free) over the same samples as FedAvg's `S`; a step left over at the end
//! is not taken. The server averages as FedAvg does.

use std::sync::Arc;

use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, FineTuning, Setting,
    Strategy,
};
use crate::config::check::Problems;
use crate::local::{Batch, GradientsParams, LocalTraining, TrainError, TrainedNet};
use crate::model::Net;
use crate::network::Tensors;

/// Per-FedAvg: FedAvg's server, and [`PerFedAvgClient`]'s meta-learning steps.
#[derive(Debug, Clone, Copy, Default)]
pub struct PerFedAvg;

impl Algorithm for PerFedAvg {
    type Params = Params;

    fn name(&self) -> &'static str {
        "perfedavg"
    }

    fn paper(&self) -> &'static str {
        "Fallah, Mokhtari and Ozdaglar 2020, Personalized Federated Learning with Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "beta",
                "the outer step size β (> 0); the inner step α is client.lr",
            ),
            (
                "variant",
                "\"first_order\" (FO) or \"hessian_free\" (HF, a Hessian-vector product by central differences)",
            ),
            (
                "delta",
                "the central differences' step δ (> 0), Hessian-free only",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("beta", params.beta);
        problems.positive("delta", params.delta);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(PerFedAvgClient {
            beta: params.beta,
            hessian_free: (params.variant == Variant::HessianFree).then_some(params.delta as f32),
        })
    }
}

/// Per-FedAvg's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// `β`, the outer step.
    pub beta: f64,
    /// First-order or Hessian-free.
    pub variant: Variant,
    /// `δ` of the central differences.
    pub delta: f64,
}

impl Default for Params {
    /// FL-bench's defaults: first order, `β` 0.001, `δ` 0.001.
    fn default() -> Self {
        Self {
            beta: 0.001,
            variant: Variant::FirstOrder,
            delta: 0.001,
        }
    }
}

/// Per-FedAvg's two ways to step the meta-objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// The gradient at the adapted model alone (FO).
    FirstOrder,
    /// With the Hessian-vector product by central differences (HF).
    HessianFree,
}

/// Per-FedAvg's client half.
#[derive(Debug, Clone, Copy)]
pub struct PerFedAvgClient {
    /// `β`.
    pub beta: f64,
    /// `δ`, for the Hessian-free variant; `None` for the first-order one.
    pub hessian_free: Option<f32>,
}

impl ClientAlgorithm for PerFedAvgClient {
    fn train(
        &self,
        mut local: LocalTraining<'_>,
        net: Net,
        _view: &ClientView<'_>,
        _state: Option<&Tensors>,
    ) -> Result<TrainedNet, TrainError> {
        let alpha = local.lr() as f32;
        let mut optimizer = local.optimizer();
        let mut net = net;
        while let Some(inner) = local.next_batch()? {
            let inner_grads = gradient(&mut local, &net, inner)?;
            let adapted = stepped(&net, &net.gradient_values(&inner_grads), alpha);
            let Some(outer) = local.next_batch()? else {
                break;
            };
            let mut grads = gradient(&mut local, &adapted, outer)?;
            if let Some(delta) = self.hessian_free {
                let Some(probe) = local.next_batch()? else {
                    break;
                };
                let g = adapted.gradient_values(&grads);
                let d = hessian_times(&net, &g, probe, &local, delta);
                net.correct_gradients(&mut grads, &mut |index, grad, _| match &d[index] {
                    Some(d) => grad - d.clone().mul_scalar(alpha),
                    None => grad,
                });
            }
            net = net.step(&mut optimizer, self.beta, grads);
        }
        Ok(local.finish(net))
    }

    fn personalises(&self) -> bool {
        true
    }

    /// The model sent after one step on the client's data at `α`.
    fn personal_model(
        &self,
        view: &ClientView<'_>,
        _state: Option<&Tensors>,
        tuning: &mut dyn FineTuning,
    ) -> Result<Vec<f32>, TrainError> {
        tuning.fine_tune(view.global, 1)
    }
}

/// The gradients of the loss of `net` on `batch`, the loss recorded.
fn gradient(
    local: &mut LocalTraining<'_>,
    net: &Net,
    batch: Batch,
) -> Result<GradientsParams, TrainError> {
    let loss = local.cross_entropy(net.forward(batch.input), batch.labels);
    local.record_loss(&loss)?;
    Ok(net.gradients(loss))
}

/// `net` moved by `scale` times `direction` against it (`w - scale d`), as a network whose
/// parameters have `net`'s ids; a parameter without a direction stays.
fn stepped(net: &Net, direction: &[Option<Tensor<1>>], scale: f32) -> Net {
    net.duplicate()
        .map_values(&mut |index, value| match &direction[index] {
            Some(d) => value - d.clone().mul_scalar(scale),
            None => value,
        })
}

/// `(∇f(w + δg) - ∇f(w - δg)) / 2δ` on `batch`: the Hessian of the loss at `w` (`net`) times
/// `g`, by central differences; `None` for a parameter without a gradient.
fn hessian_times(
    net: &Net,
    g: &[Option<Tensor<1>>],
    batch: Batch,
    local: &LocalTraining<'_>,
    delta: f32,
) -> Vec<Option<Tensor<1>>> {
    let gradient_at = |scale: f32| {
        let moved = stepped(net, g, scale);
        let loss = local.cross_entropy(moved.forward(batch.input.clone()), batch.labels.clone());
        moved.gradient_values(&moved.gradients(loss))
    };
    let (plus, minus) = (gradient_at(-delta), gradient_at(delta));
    plus.into_iter()
        .zip(minus)
        .map(|(plus, minus)| Some((plus? - minus?).div_scalar(2.0 * delta)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testing::{close, logistic_gradient, train_toy};

    fn f64s(values: &[f32]) -> Vec<f64> {
        values.iter().map(|&v| f64::from(v)).collect()
    }

    /// `a - scale b`.
    fn minus(a: &[f64], scale: f64, b: &[f64]) -> Vec<f64> {
        a.iter().zip(b).map(|(a, b)| a - scale * b).collect()
    }

    const START: [f32; 6] = [0.5, -0.25, 0.0, 0.75, 0.1, -0.1];

    #[test]
    fn a_first_order_step_takes_the_gradient_at_the_adapted_model_as_worked_by_hand() {
        let (alpha, beta) = (0.5, 0.2);
        let client = PerFedAvgClient {
            beta,
            hessian_free: None,
        };
        // Five batches: two updates, the fifth batch left over.
        let run = train_toy(&client, &[], &[], (&START, 5, alpha), None);
        let mut w = f64s(&START);
        for _ in 0..2 {
            let adapted = minus(&w, alpha, &logistic_gradient(&w));
            w = minus(&w, beta, &logistic_gradient(&adapted));
        }
        assert!(
            close(&run.params, &w, 1e-6),
            "{:?} against {w:?}",
            run.params
        );
    }

    #[test]
    fn a_hessian_free_step_corrects_by_the_hessian_times_the_outer_gradient() {
        let (alpha, beta) = (0.5, 0.2);
        let client = PerFedAvgClient {
            beta,
            hessian_free: Some(0.001),
        };
        let run = train_toy(&client, &[], &[], (&START, 3, alpha), None);
        let w = f64s(&START);
        let g = logistic_gradient(&minus(&w, alpha, &logistic_gradient(&w)));
        // The Hessian at w times g, by central differences of the exact gradient in f64.
        let h = 1e-6;
        let (plus, less) = (
            logistic_gradient(&minus(&w, -h, &g)),
            logistic_gradient(&minus(&w, h, &g)),
        );
        let hg: Vec<f64> = plus
            .iter()
            .zip(&less)
            .map(|(p, l)| (p - l) / (2.0 * h))
            .collect();
        let step = minus(&g, alpha, &hg);
        let w1 = minus(&w, beta, &step);
        // f32 central differences at δ 0.001 carry errors near 1e-4 into the product.
        assert!(
            close(&run.params, &w1, 1e-4),
            "{:?} against {w1:?}",
            run.params
        );
        let first_order = minus(&w, beta, &g);
        assert!(
            !close(&run.params, &first_order, 1e-6),
            "the correction counts"
        );
    }
}
