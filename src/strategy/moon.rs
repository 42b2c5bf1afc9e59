//! MOON: Li, He and Song (2021), "Model-Contrastive Federated Learning". Each client adds to
//! its loss a contrastive term on the network's representation `z` of each sample (the input
//! of its last layer): `z` is pulled towards the global model's representation `z_glob` and
//! pushed from that of the client's own previous local model, `z_prev`:
//!
//! ```text
//! ℓ = ℓ_sup(w) + μ ℓ_con,   ℓ_con = -log( e^{sim(z, z_glob)/τ} / (e^{sim(z, z_glob)/τ} + e^{sim(z, z_prev)/τ}) )
//! ```
//!
//! with `sim` the cosine similarity and `τ` a temperature; `ℓ_con` is averaged over the batch.
//! The global and previous models are read, not trained (their representations carry no
//! gradient). The previous model is the one the client sent up when it last trained, kept as
//! its state; before that, the global model stands in for it (the paper's code starts every
//! client's previous model as the initial global model), which makes the term constant. The
//! server averages as FedAvg does; with `μ = 0` the term is not computed and MOON is FedAvg to
//! the bit, through its own loop over the session rather than fedsim's.
//!
//! The paper's defaults: `τ = 0.5`; `μ = 5` on CIFAR-10 and 1 on CIFAR-100 and Tiny-ImageNet.
//! Its networks end in a projection head whose output is `z`; fedsim's built-in networks have
//! none, so `z` is the input of their last layer.

use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::activation::softplus;
use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, Reduction, Setting,
    Strategy, Trained,
};
use crate::config::check::Problems;
use crate::local::{LocalTraining, TrainError, TrainedNet};
use crate::model::{Input, Net};
use crate::network::Tensors;

/// The state name of a client's previous local model.
const PREVIOUS: &str = "previous_model";

/// MOON: the model-contrastive client [`MoonClient`], and FedAvg's server.
#[derive(Debug, Clone, Copy, Default)]
pub struct Moon;

impl Algorithm for Moon {
    type Params = Params;

    fn name(&self) -> &'static str {
        "moon"
    }

    fn paper(&self) -> &'static str {
        "Li, He and Song 2021, Model-Contrastive Federated Learning"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "mu",
                "weight μ of the contrastive term (≥ 0); 0 gives FedAvg",
            ),
            ("temperature", "temperature τ of the similarities (> 0)"),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.non_negative("mu", params.mu);
        problems.positive("temperature", params.temperature);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(MoonClient {
            mu: params.mu,
            temperature: params.temperature,
        })
    }

    /// Without the contrastive term, FedAvg.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to(
            "fedavg",
            Params {
                mu: 0.0,
                ..Params::default()
            },
        )]
    }
}

/// MOON's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Weight `μ` of the contrastive term.
    pub mu: f64,
    /// Temperature `τ`.
    pub temperature: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            mu: 1.0,
            temperature: 0.5,
        }
    }
}

/// The client half: its own loop, the cross-entropy loss plus `μ` times the contrastive term.
#[derive(Debug, Clone, Copy)]
pub struct MoonClient {
    /// `μ`.
    pub mu: f64,
    /// `τ`.
    pub temperature: f64,
}

impl ClientAlgorithm for MoonClient {
    fn train(
        &self,
        mut local: LocalTraining<'_>,
        net: Net,
        view: &ClientView<'_>,
        state: Option<&Tensors>,
    ) -> Result<TrainedNet, TrainError> {
        // The models read by the term; without the term (`μ = 0`) nothing is built for it.
        let read = (self.mu > 0.0).then(|| {
            let previous = state.map(|s| local.network(s.expect(PREVIOUS)));
            (local.network(view.global), previous)
        });
        let mut optimizer = local.optimizer();
        let mut net = net;
        while let Some(batch) = local.next_batch()? {
            let outputs = net.outputs(batch.input.clone());
            let mut loss = local.cross_entropy(outputs.logits, batch.labels);
            if let Some((global, previous)) = &read {
                let z = outputs.representation.ok_or_else(no_representation)?;
                let z_global = representation(global, batch.input.clone())?;
                let z_previous = match previous {
                    Some(previous) => representation(previous, batch.input)?,
                    None => z_global.clone(),
                };
                let contrastive = self.contrastive(z, z_global, z_previous);
                loss = loss + contrastive.mul_scalar(self.mu);
            }
            local.record_loss(&loss)?;
            let grads = net.gradients(loss);
            net = local.step(net, &mut optimizer, grads);
        }
        Ok(local.finish(net))
    }

    fn finish(
        &self,
        _view: &ClientView<'_>,
        state: &mut Option<Tensors>,
        trained: &Trained<'_>,
    ) -> Tensors {
        *state = Some(Tensors::new().with(PREVIOUS, trained.params.to_vec()));
        Tensors::new()
    }
}

impl MoonClient {
    /// `ℓ_con` averaged over the batch: `-log(e^a / (e^a + e^b)) = softplus(b - a)` with
    /// `a = sim(z, z_glob)/τ` and `b = sim(z, z_prev)/τ`.
    fn contrastive(&self, z: Tensor<2>, z_global: Tensor<2>, z_previous: Tensor<2>) -> Tensor<1> {
        let towards = cosine(z.clone(), z_global);
        let away = cosine(z, z_previous);
        softplus((away - towards).div_scalar(self.temperature), 1.0).mean()
    }
}

/// The representation `net` computes for `input`, detached: a model read, not trained.
fn representation(net: &Net, input: Input) -> Result<Tensor<2>, TrainError> {
    let z = net
        .outputs(input)
        .representation
        .ok_or_else(no_representation)?;
    Ok(z.detach())
}

/// The cosine similarity of each row of `a` with the same row of `b`, as PyTorch's
/// `cosine_similarity`: `a·b / max(|a| |b|, ε)` with `ε = 1e-8`. The product of the squared
/// norms is clamped before its root, so that a zero row (a representation all of whose
/// activations are off) has similarity 0 and a finite gradient.
fn cosine(a: Tensor<2>, b: Tensor<2>) -> Tensor<1> {
    const EPSILON: f64 = 1e-8;
    let dot = (a.clone() * b.clone()).sum_dim(1);
    let squared_norms = a.powi_scalar(2).sum_dim(1) * b.powi_scalar(2).sum_dim(1);
    let norms = squared_norms.clamp_min(EPSILON * EPSILON).sqrt();
    (dot / norms).squeeze_dim(1)
}

/// The error of a network that exposes no representation.
fn no_representation() -> TrainError {
    TrainError::Unsupported(
        "MOON needs the network's representation (the input of its last layer), and this \
         model's network does not expose it (Network::outputs)"
            .to_string(),
    )
}
