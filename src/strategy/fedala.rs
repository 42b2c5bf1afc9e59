//! FedALA: Zhang et al. (2023), "FedALA: Adaptive Local Aggregation for Personalized Federated
//! Learning". A client does not overwrite its local model with the global one it is sent: it
//! aggregates the two, value by value, with weights `W` in `[0, 1]` it learns on its own data,
//! and trains from that. For the top `layers` layers (the lower ones take the global model's
//! values, as in the paper)
//!
//! ```text
//! θ̂ = θ + (θ_global - θ) ⊙ W,     W ← clip(W - η ∇_θ̂ f(θ̂) ⊙ (θ_global - θ), 0, 1)
//! ```
//!
//! where `θ` is the client's local model from the last round it trained in and `f` the loss
//! on a random `sample_fraction` of its samples. The first time a client aggregates, `W`
//! starts at one and trains until the standard deviation of its last `window` losses falls
//! below `threshold` (at most 100 passes over the sample); after that, one pass a round (the
//! paper's Algorithm 1 and the authors' code). The server averages the trained models as
//! FedAvg does; each client keeps its trained model and `W`, and is scored with its local
//! model aggregated with the model it is sent by the `W` it learnt last (`personal_accuracy`).
//!
//! The passes over the sample are not counted in the client's steps. With `layers` 0 nothing
//! is aggregated or kept: FedALA is FedAvg to the bit.

use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, FineTuning, Objective,
    Reduction, Setting, Strategy, Trained,
};
use crate::config::check::Problems;
use crate::local::{LocalTraining, TrainError, TrainedNet, train_on_objective};
use crate::model::Net;
use crate::network::Tensors;

/// The name of a client's local model in its state.
const LOCAL_MODEL: &str = "local_model";
/// The name of a client's aggregation weights in its state (those of the flat vector's tail,
/// the top layers).
const WEIGHTS: &str = "aggregation_weights";
/// The most passes over the sample the first training of the weights takes.
const MOST_FIRST_PASSES: usize = 100;

/// FedALA: FedAvg's server, and [`FedAlaClient`]'s adaptive local aggregation.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAla;

impl Algorithm for FedAla {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedala"
    }

    fn paper(&self) -> &'static str {
        "Zhang et al. 2023, FedALA: Adaptive Local Aggregation for Personalized Federated Learning"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "layers",
                "top layers the client aggregates with learnt weights (the lower ones take the global model's values); 0 gives FedAvg",
            ),
            ("eta", "the weights' learning rate η (> 0)"),
            (
                "sample_fraction",
                "fraction of a client's samples the weights learn on, in (0, 1]",
            ),
            (
                "threshold",
                "the first training of the weights stops once its last losses' standard deviation is below this (> 0)",
            ),
            (
                "window",
                "how many last losses that deviation is over (≥ 2)",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("eta", params.eta);
        problems.require(
            params.sample_fraction > 0.0 && params.sample_fraction <= 1.0,
            "sample_fraction",
            || format!("must lie in (0, 1], not {}", params.sample_fraction),
        );
        problems.positive("threshold", params.threshold);
        problems.require(params.window >= 2, "window", || {
            format!("must be at least 2, not {}", params.window)
        });
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(FedAlaClient { params: *params })
    }

    /// Aggregating no layer, FedAvg.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to(
            "fedavg",
            Params {
                layers: 0,
                ..Params::default()
            },
        )]
    }
}

/// FedALA's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Top layers aggregated with learnt weights.
    pub layers: usize,
    /// `η`.
    pub eta: f64,
    /// Fraction of the client's samples the weights learn on.
    pub sample_fraction: f64,
    /// The first training's stopping deviation.
    pub threshold: f64,
    /// Losses that deviation is over.
    pub window: usize,
}

impl Default for Params {
    /// The authors' defaults: the head, `η` 1, 80% of the samples, 0.1 over 10 losses.
    fn default() -> Self {
        Self {
            layers: 1,
            eta: 1.0,
            sample_fraction: 0.8,
            threshold: 0.1,
            window: 10,
        }
    }
}

/// FedALA's client half.
#[derive(Debug, Clone, Copy)]
pub struct FedAlaClient {
    /// Its parameters.
    pub params: Params,
}

impl ClientAlgorithm for FedAlaClient {
    fn train(
        &self,
        mut local: LocalTraining<'_>,
        net: Net,
        _view: &ClientView<'_>,
        state: Option<&Tensors>,
    ) -> Result<TrainedNet, TrainError> {
        let own = state.and_then(|s| s.get(LOCAL_MODEL));
        let (net, kept) = match own {
            Some(own) if self.params.layers > 0 => {
                let weights = state.and_then(|s| s.get(WEIGHTS));
                let (net, weights) = self.aggregate_locally(&mut local, net, own, weights);
                (net, Tensors::new().with(WEIGHTS, weights))
            }
            _ => (net, Tensors::new()),
        };
        Ok(train_on_objective(local, net, &Objective::default())?.keeping(kept))
    }

    fn finish(
        &self,
        _view: &ClientView<'_>,
        state: &mut Option<Tensors>,
        trained: &Trained<'_>,
    ) -> Tensors {
        if self.params.layers > 0 {
            let mut next = trained.kept.clone();
            next.insert(LOCAL_MODEL, trained.params.to_vec());
            *state = Some(next);
        }
        Tensors::new()
    }

    fn personalises(&self) -> bool {
        true
    }

    /// The local model aggregated with the model sent by the weights learnt last; the model
    /// sent before a client has trained or learnt weights.
    fn personal_model(
        &self,
        view: &ClientView<'_>,
        state: Option<&Tensors>,
        _tuning: &mut dyn FineTuning,
    ) -> Result<Vec<f32>, TrainError> {
        let (Some(own), Some(weights)) = (
            state.and_then(|s| s.get(LOCAL_MODEL)),
            state.and_then(|s| s.get(WEIGHTS)),
        ) else {
            return Ok(view.global.to_vec());
        };
        Ok(aggregated(view.global, own, weights))
    }
}

impl FedAlaClient {
    /// `net` (loaded with the model sent) with its top layers aggregated with the client's
    /// local model `own` by weights learnt from `weights` (all ones the first time), and those
    /// weights, flat.
    fn aggregate_locally(
        &self,
        local: &mut LocalTraining<'_>,
        net: Net,
        own: &[f32],
        weights: Option<&[f32]>,
    ) -> (Net, Vec<f32>) {
        let top = top_params(&net, self.params.layers);
        let global = net.values();
        let own = local.network(own).values();
        let first = weights.is_none();
        let mut weights = initial_weights(&global, &top, weights, &local.device().clone().inner());
        let batches = local.sample_batches(self.params.sample_fraction);
        let eta = self.params.eta as f32;
        let mut losses = Vec::new();
        for pass in 1.. {
            for batch in &batches {
                let mixed = mix(&net, &global, &own, &weights);
                let outputs = mixed.forward(batch.input.clone());
                let loss = local.cross_entropy(outputs, batch.labels.clone());
                losses.push(f64::from(loss.clone().into_scalar::<f32>()));
                let grads = mixed.gradients(loss);
                for ((w, g), (global, own)) in weights
                    .iter_mut()
                    .zip(mixed.gradient_values(&grads))
                    .zip(global.iter().zip(&own))
                {
                    if let (Some(weight), Some(g)) = (w.as_mut(), g) {
                        let step = g * (global.clone() - own.clone());
                        *weight = (weight.clone() - step.mul_scalar(eta)).clamp(0.0, 1.0);
                    }
                }
            }
            if !first || pass >= MOST_FIRST_PASSES || self.settled(&losses) {
                break;
            }
        }
        let flat: Vec<f32> = weights
            .iter()
            .flatten()
            .flat_map(|w| w.to_data().try_to_vec::<f32>().expect("f32 weights"))
            .collect();
        (mix(&net, &global, &own, &weights), flat)
    }

    /// Whether the last `window` losses deviate less than `threshold` (population deviation).
    fn settled(&self, losses: &[f64]) -> bool {
        let window = self.params.window;
        if losses.len() <= window {
            return false;
        }
        let last = &losses[losses.len() - window..];
        let mean = last.iter().sum::<f64>() / window as f64;
        let variance = last.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / window as f64;
        variance.sqrt() < self.params.threshold
    }
}

/// Whether each parameter of `net` is in its top `layers` layers (a layer: the parameters
/// whose paths differ in the last part only); they are the tail of the flat vector.
fn top_params(net: &Net, layers: usize) -> Vec<bool> {
    let mut layer_of = Vec::new();
    net.walk(&mut |site| {
        let path: Vec<&str> = site.path.iter().map(|(name, _)| name.as_str()).collect();
        layer_of.push(path[..path.len().saturating_sub(1)].join("."));
    });
    // The first parameter of the top layers: walking back, the start of the `layers`-th run
    // of one layer's parameters.
    let mut first_top = layer_of.len();
    let mut seen = 0;
    while seen < layers && first_top > 0 {
        let layer = &layer_of[first_top - 1];
        while first_top > 0 && &layer_of[first_top - 1] == layer {
            first_top -= 1;
        }
        seen += 1;
    }
    (0..layer_of.len())
        .map(|index| index >= first_top)
        .collect()
}

/// The weights of the top parameters, from the client's flat `kept` weights or all ones.
fn initial_weights(
    global: &[Tensor<1>],
    top: &[bool],
    kept: Option<&[f32]>,
    device: &Device,
) -> Vec<Option<Tensor<1>>> {
    let mut offset = 0;
    global
        .iter()
        .zip(top)
        .map(|(values, &top)| {
            top.then(|| match kept {
                Some(kept) => {
                    let len = values.dims()[0];
                    let part = kept[offset..offset + len].to_vec();
                    offset += len;
                    Tensor::from_data(TensorData::new(part, [len]), device)
                }
                None => values.ones_like(),
            })
        })
        .collect()
}

/// `net`'s duplicate with each weighted parameter `own + (global - own) ⊙ w` and the others
/// the global model's (which `net` holds).
fn mix(net: &Net, global: &[Tensor<1>], own: &[Tensor<1>], weights: &[Option<Tensor<1>>]) -> Net {
    net.duplicate()
        .map_values(&mut |index, value| match &weights[index] {
            Some(w) => {
                own[index].clone() + (global[index].clone() - own[index].clone()) * w.clone()
            }
            None => value,
        })
}

/// The flat model `own + (global - own) ⊙ w` over the tail `weights` cover, `global` before it.
fn aggregated(global: &[f32], own: &[f32], weights: &[f32]) -> Vec<f32> {
    let start = global.len() - weights.len();
    let mut model = global.to_vec();
    for (((m, g), o), w) in model[start..]
        .iter_mut()
        .zip(&global[start..])
        .zip(&own[start..])
        .zip(weights)
    {
        *m = o + (g - o) * w;
    }
    model
}

#[cfg(test)]
mod tests {
    use super::super::testing::{close, logistic_gradient, train_toy};
    use super::*;

    #[test]
    fn the_personal_model_aggregates_the_top_layers_by_the_learnt_weights() {
        // The tail of 2 values is weighted: 1 + (3 - 1) * 0.25 and 2 + (4 - 2) * 1.
        let model = aggregated(&[9.0, 3.0, 4.0], &[0.0, 1.0, 2.0], &[0.25, 1.0]);
        assert_eq!(model, [9.0, 1.5, 4.0]);
    }

    #[test]
    fn one_pass_of_the_weights_then_sgd_as_worked_by_hand() {
        // Logistic regression: one layer, the head, all of it weighted. A later round (weights
        // kept): one pass over the whole sample (one batch of all four samples).
        let global = [0.5f32, -0.25, 0.0, 0.75, 0.1, -0.1];
        let own = [-0.5f32, 0.25, 1.0, 0.0, 0.3, 0.2];
        let weights = [0.5f32, 0.5, 0.25, 1.0, 0.0, 0.5];
        let state = Tensors::new()
            .with(LOCAL_MODEL, own.to_vec())
            .with(WEIGHTS, weights.to_vec());
        let params = Params {
            eta: 0.5,
            sample_fraction: 1.0,
            ..Params::default()
        };
        let run = train_toy(
            &FedAlaClient { params },
            &[],
            &[],
            (&global, 1, 0.1),
            Some(&state),
        );
        let f64s = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        let (g, o, w) = (f64s(&global), f64s(&own), f64s(&weights));
        let mixed: Vec<f64> = (0..6).map(|i| o[i] + (g[i] - o[i]) * w[i]).collect();
        let grad = logistic_gradient(&mixed);
        let learnt: Vec<f64> = (0..6)
            .map(|i| (w[i] - 0.5 * grad[i] * (g[i] - o[i])).clamp(0.0, 1.0))
            .collect();
        assert!(close(run.kept.expect(WEIGHTS), &learnt, 1e-6));
        let start: Vec<f64> = (0..6).map(|i| o[i] + (g[i] - o[i]) * learnt[i]).collect();
        let step = logistic_gradient(&start);
        let trained: Vec<f64> = (0..6).map(|i| start[i] - 0.1 * step[i]).collect();
        assert!(
            close(&run.params, &trained, 1e-6),
            "{:?} against {trained:?}",
            run.params
        );
    }
}
