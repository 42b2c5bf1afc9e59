//! APFL: Deng, Kamani and Mahdavi (2020), "Adaptive Personalized Federated Learning". Each
//! client keeps a personal model `v` and a mixing weight `α`, and uses the mix
//! `v̄ = α v + (1 - α) w` of it with the global model. On each batch its local copy `w` of the
//! global model takes FedAvg's step, and its personal model a step against the gradient of the
//! loss at the mix (the paper's Algorithm 1, the two steps from the same iterate and batch):
//!
//! ```text
//! w ← w - η ∇f(w)        v ← v - η α ∇f(v̄)        with adaptive α:  α ← α - η ⟨v - w, ∇f(v̄)⟩
//! ```
//!
//! clipped to `[0, 1]` (the paper's equation 9). The server averages the `w`s as FedAvg does;
//! `v` and `α` stay in the client's state (the first `v` is the first model it is sent), and a
//! client is scored with the mix of its `v` and the model it is sent (`personal_accuracy`). With
//! `α` 0 and not adaptive, the mix is the global model, `v` never moves and nothing of it is
//! computed: APFL is FedAvg to the bit.

use std::sync::Arc;

use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, FineTuning,
    PERSONAL_MODEL, Reduction, Setting, Strategy, Trained, kept_personal_model,
};
use crate::config::check::Problems;
use crate::local::{LocalTraining, TrainError, TrainedNet};
use crate::model::{Net, flat};
use crate::network::Tensors;

/// The name of a client's mixing weight in its state.
const MIXING_WEIGHT: &str = "alpha";

/// APFL: FedAvg's server, and [`ApflClient`]'s personal models.
#[derive(Debug, Clone, Copy, Default)]
pub struct Apfl;

impl Algorithm for Apfl {
    type Params = Params;

    fn name(&self) -> &'static str {
        "apfl"
    }

    fn paper(&self) -> &'static str {
        "Deng, Kamani and Mahdavi 2020, Adaptive Personalized Federated Learning"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "alpha",
                "the mixing weight α in [0, 1] of the personal model (0: the global model alone)",
            ),
            (
                "adaptive",
                "whether each client learns its α by gradient steps at the local learning rate",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.require((0.0..=1.0).contains(&params.alpha), "alpha", || {
            format!("must lie in [0, 1], not {}", params.alpha)
        });
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(ApflClient {
            alpha: params.alpha as f32,
            adaptive: params.adaptive,
        })
    }

    /// Its global model is FedAvg's, whatever `α`; at `α` 0 its personal models are too.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![
            Reduction::to("fedavg", Params::default()),
            Reduction::to(
                "fedavg",
                Params {
                    alpha: 0.0,
                    adaptive: false,
                },
            ),
        ]
    }
}

/// APFL's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// `α`, each client's mixing weight as it starts.
    pub alpha: f64,
    /// Whether `α` is learnt.
    pub adaptive: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            alpha: 0.5,
            adaptive: false,
        }
    }
}

/// APFL's client half: the global model's steps and the personal model's beside them.
#[derive(Debug, Clone, Copy)]
pub struct ApflClient {
    /// `α` as each client starts.
    pub alpha: f32,
    /// Whether `α` is learnt.
    pub adaptive: bool,
}

impl ClientAlgorithm for ApflClient {
    fn train(
        &self,
        mut local: LocalTraining<'_>,
        net: Net,
        view: &ClientView<'_>,
        state: Option<&Tensors>,
    ) -> Result<TrainedNet, TrainError> {
        let (personal, mut alpha) = self.personal(view, state);
        let mut personal = (alpha != 0.0 || self.adaptive).then(|| local.network(personal));
        let (mut optimizer, mut personal_optimizer) = (local.optimizer(), local.optimizer());
        let mut net = net;
        while let Some(batch) = local.next_batch()? {
            let before = personal.is_some().then(|| net.values());
            let loss = local.cross_entropy(net.forward(batch.input.clone()), batch.labels.clone());
            local.record_loss(&loss)?;
            let grads = net.gradients(loss);
            net = local.step(net, &mut optimizer, grads);
            let (Some(v), Some(before)) = (personal.take(), before) else {
                continue;
            };
            let mixed = mix(&v, &before, alpha);
            let mixed_loss = local.cross_entropy(mixed.forward(batch.input), batch.labels);
            let mut grads = mixed.gradients(mixed_loss);
            // v and α step from the same iterate: v's step at the α before α's.
            let slope = self
                .adaptive
                .then(|| alpha_slope(&v, &before, &mixed.gradient_values(&grads)));
            v.correct_gradients(&mut grads, &mut |_, grad, _| grad.mul_scalar(alpha));
            personal = Some(local.step(v, &mut personal_optimizer, grads));
            if let Some(slope) = slope {
                alpha = (alpha - local.lr() as f32 * slope).clamp(0.0, 1.0);
            }
        }
        let mut kept = Tensors::new().with(MIXING_WEIGHT, vec![alpha]);
        if let Some(v) = personal {
            kept.insert(PERSONAL_MODEL, flat::flatten(&v));
        }
        Ok(local.finish(net).keeping(kept))
    }

    fn finish(
        &self,
        view: &ClientView<'_>,
        state: &mut Option<Tensors>,
        trained: &Trained<'_>,
    ) -> Tensors {
        // At α 0 and not adaptive nothing of the personal model moves: nothing to keep.
        if self.alpha != 0.0 || self.adaptive {
            let (personal, _) = self.personal(view, state.as_ref());
            let mut next = trained.kept.clone();
            if next.get(PERSONAL_MODEL).is_none() {
                next.insert(PERSONAL_MODEL, personal.to_vec());
            }
            *state = Some(next);
        }
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
        let (personal, alpha) = self.personal(view, state);
        Ok(mixed_values(personal, view.global, alpha))
    }
}

impl ApflClient {
    /// A client's personal model and `α` from its state; before its first round, the model
    /// sent and the configured `α`.
    fn personal<'a>(&self, view: &ClientView<'a>, state: Option<&'a Tensors>) -> (&'a [f32], f32) {
        let personal = kept_personal_model(view, state);
        let alpha = state
            .and_then(|s| s.get(MIXING_WEIGHT))
            .map_or(self.alpha, |a| a[0]);
        (personal, alpha)
    }
}

/// `α v + (1 - α) w`, value by value.
fn mixed_values(v: &[f32], w: &[f32], alpha: f32) -> Vec<f32> {
    v.iter()
        .zip(w)
        .map(|(v, w)| alpha * v + (1.0 - alpha) * w)
        .collect()
}

/// The network `α v + (1 - α) w` for the values `w`, whose parameters have `v`'s ids, so that
/// its gradients step `v`.
fn mix(v: &Net, w: &[Tensor<1>], alpha: f32) -> Net {
    v.duplicate().map_values(&mut |index, value| {
        value.mul_scalar(alpha) + w[index].clone().mul_scalar(1.0 - alpha)
    })
}

/// `⟨v - w, g⟩`, the loss's slope in `α` at the mix whose gradients are `g`.
fn alpha_slope(v: &Net, w: &[Tensor<1>], g: &[Option<Tensor<1>>]) -> f32 {
    v.values()
        .into_iter()
        .zip(w)
        .zip(g)
        .filter_map(|((v, w), g)| g.as_ref().map(|g| ((v - w.clone()) * g.clone()).sum()))
        .map(|dot| dot.into_scalar::<f32>())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_personal_model_mixes_the_clients_own_with_the_model_sent() {
        let client = ApflClient {
            alpha: 0.25,
            adaptive: false,
        };
        let nothing = Tensors::new();
        let view = ClientView {
            round: 2,
            client: 1,
            global: &[4.0, 8.0],
            downlink: &nothing,
            lr: 0.1,
            personal: None,
        };
        struct NoTuning;
        impl FineTuning for NoTuning {
            fn train(
                &mut self,
                _: &[f32],
                _: &super::super::Pass<'_>,
            ) -> Result<Vec<f32>, TrainError> {
                unreachable!("APFL fine-tunes nothing")
            }
        }
        // Before its first round a client mixes the model sent with itself.
        let fresh = client.personal_model(&view, None, &mut NoTuning).unwrap();
        assert_eq!(fresh, [4.0, 8.0]);
        // Then its own v and α: 0.5 * [0, 2] + 0.5 * [4, 8].
        let state = Tensors::new()
            .with(PERSONAL_MODEL, vec![0.0, 2.0])
            .with(MIXING_WEIGHT, vec![0.5]);
        let mixed = client
            .personal_model(&view, Some(&state), &mut NoTuning)
            .unwrap();
        assert_eq!(mixed, [2.0, 5.0]);
    }

    #[test]
    fn one_step_moves_the_global_copy_and_the_personal_model_as_worked_by_hand() {
        use super::super::testing::{close, logistic_gradient, train_toy};
        let (w0, v0): ([f32; 6], [f32; 6]) = (
            [0.5, -0.25, 0.0, 0.75, 0.1, -0.1],
            [-0.5, 0.25, 1.0, 0.0, 0.3, 0.2],
        );
        let state = Tensors::new()
            .with(PERSONAL_MODEL, v0.to_vec())
            .with(MIXING_WEIGHT, vec![0.25]);
        let (lr, alpha) = (0.5, 0.25);
        let f64s = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        let (w, v) = (f64s(&w0), f64s(&v0));
        let g_w = logistic_gradient(&w);
        let mixed: Vec<f64> = v
            .iter()
            .zip(&w)
            .map(|(v, w)| alpha * v + (1.0 - alpha) * w)
            .collect();
        let g_mixed = logistic_gradient(&mixed);
        let w1: Vec<f64> = w.iter().zip(&g_w).map(|(w, g)| w - lr * g).collect();
        let v1: Vec<f64> = v
            .iter()
            .zip(&g_mixed)
            .map(|(v, g)| v - lr * alpha * g)
            .collect();
        for adaptive in [false, true] {
            let client = ApflClient {
                alpha: 0.9,
                adaptive,
            };
            let run = train_toy(&client, &[], &[], (&w0, 1, lr), Some(&state));
            assert!(close(&run.params, &w1, 1e-6), "{:?}", run.params);
            let kept_v = run.kept.expect(PERSONAL_MODEL);
            assert!(close(kept_v, &v1, 1e-6), "{kept_v:?} against {v1:?}");
            let slope: f64 = v
                .iter()
                .zip(&w)
                .zip(&g_mixed)
                .map(|((v, w), g)| (v - w) * g)
                .sum();
            let alpha1 = if adaptive {
                (alpha - lr * slope).clamp(0.0, 1.0)
            } else {
                alpha
            };
            assert!(!adaptive || (0.0..1.0).contains(&alpha1) && alpha1 != alpha);
            assert!(close(run.kept.expect(MIXING_WEIGHT), &[alpha1], 1e-6));
        }
    }

    #[test]
    fn at_alpha_zero_nothing_of_the_personal_model_is_trained() {
        use super::super::testing::train_toy;
        let w0 = [0.5, -0.25, 0.0, 0.75, 0.1, -0.1];
        let plain = train_toy(&crate::strategy::PlainClient, &[], &[], (&w0, 3, 0.5), None);
        let client = ApflClient {
            alpha: 0.0,
            adaptive: false,
        };
        let run = train_toy(&client, &[], &[], (&w0, 3, 0.5), None);
        assert_eq!(run.params, plain.params);
        assert!(run.kept.get(PERSONAL_MODEL).is_none());
    }
}
