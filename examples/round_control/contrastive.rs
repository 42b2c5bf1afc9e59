//! MOON as a user writes it (Li, He and Song 2021, "Model-Contrastive Federated Learning",
//! CVPR): a client half that trains itself, adding to the cross-entropy loss `μ` times a
//! contrastive term that pulls each sample's representation `z` towards the global model's
//! `z_glob` and away from the client's previous model's `z_prev`:
//!
//! ```text
//! ℓ_con = -log( e^{cos(z, z_glob)/τ} / (e^{cos(z, z_glob)/τ} + e^{cos(z, z_prev)/τ}) )
//! ```
//!
//! The representation is what the network's `outputs` exposes (LeNet's, in `lenet.rs`, is the
//! input of its last layer). fedsim's built-in `moon` is the same algorithm; this one is what
//! the book's "Training the client yourself" leads to, written outside fedsim.

use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::activation::log_softmax;
use fedsim::plugin::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, Input, LocalTraining,
    Net, Problems, Setting, Strategy, Tensors, TrainError, Trained, TrainedNet,
};
use serde::{Deserialize, Serialize};

/// The client's previous model, kept as its state.
const PREVIOUS: &str = "previous";

/// The parameters: `{"name": "contrastive", "mu": 1.0, "temperature": 0.5}`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
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

/// The model-contrastive client with FedAvg's server.
pub struct Contrastive;

impl Algorithm for Contrastive {
    type Params = Params;

    fn name(&self) -> &'static str {
        "contrastive"
    }

    fn paper(&self) -> &'static str {
        "Li, He and Song 2021, Model-Contrastive Federated Learning (written as a plug-in)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("mu", "weight μ of the contrastive term (≥ 0)"),
            ("temperature", "temperature τ (> 0)"),
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
        Arc::new(ContrastiveClient(*params))
    }
}

/// The client half.
struct ContrastiveClient(Params);

/// What `net` makes of `input`, as a model read and not trained.
fn representation(net: &Net, input: Input) -> Result<Tensor<2>, TrainError> {
    let z = net.outputs(input).representation;
    Ok(z.ok_or_else(no_representation)?.detach())
}

fn no_representation() -> TrainError {
    TrainError::Unsupported("the contrastive term needs the network's representation".into())
}

/// Each row's cosine similarity, its norms kept away from 0.
fn cosine(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let dot = (a.clone() * b.clone()).sum_dim(1);
    let norms = (a.powi_scalar(2).sum_dim(1) * b.powi_scalar(2).sum_dim(1)).clamp_min(1e-16);
    dot / norms.sqrt()
}

impl ClientAlgorithm for ContrastiveClient {
    fn train(
        &self,
        mut local: LocalTraining<'_>,
        net: Net,
        view: &ClientView<'_>,
        state: Option<&Tensors>,
    ) -> Result<TrainedNet, TrainError> {
        let Params { mu, temperature } = self.0;
        let global = local.network(view.global);
        let previous = local.network(state.map_or(view.global, |s| s.expect(PREVIOUS)));
        let mut optimizer = local.optimizer();
        let mut net = net;
        while let Some(batch) = local.next_batch()? {
            let outputs = net.outputs(batch.input.clone());
            let z = outputs.representation.ok_or_else(no_representation)?;
            let towards = cosine(z.clone(), representation(&global, batch.input.clone())?);
            let away = cosine(z, representation(&previous, batch.input)?);
            // -log softmax of the first of the two similarities, over the batch.
            let logits = Tensor::cat(vec![towards, away], 1).div_scalar(temperature);
            let contrastive = -log_softmax(logits, 1).narrow(1, 0, 1).mean();
            let loss =
                local.cross_entropy(outputs.logits, batch.labels) + contrastive.mul_scalar(mu);
            local.record_loss(&loss)?;
            let grads = net.gradients(loss);
            net = local.step(net, &mut optimizer, grads);
        }
        Ok(local.finish(net))
    }

    fn finish(
        &self,
        _: &ClientView<'_>,
        state: &mut Option<Tensors>,
        trained: &Trained<'_>,
    ) -> Tensors {
        *state = Some(Tensors::new().with(PREVIOUS, trained.params.to_vec()));
        Tensors::new()
    }
}
