//! FedAvg with local fine-tuning: Wang et al. (2019), "Federated Evaluation of On-device
//! Personalization". The federation trains FedAvg's global model; each client then
//! personalises it by a few steps of local training on its own data before using it, and is
//! scored with that fine-tuned model on its own test samples.
//!
//! It is the baseline every personalised method is compared with: a method that keeps personal
//! state is worth its cost only where it beats the global model fine-tuned with the same
//! data. The fine-tuning takes `steps` steps of the clients' own optimiser settings
//! (`client.lr`, `client.momentum`, `client.batch_size`), from the model the client would be
//! sent, its batches in an order of their own drawn from the seed, each time the clients are
//! scored. Training is FedAvg's to the bit: only the scores differ.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, FineTuning, Reduction,
    Setting, Strategy,
};
use crate::config::check::Problems;
use crate::local::TrainError;
use crate::network::Tensors;

/// FedAvg with fine-tuning: FedAvg's server and clients, with [`FineTunedClient`]'s personal
/// models.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAvgFt;

impl Algorithm for FedAvgFt {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedavg_ft"
    }

    fn paper(&self) -> &'static str {
        "Wang et al. 2019, Federated Evaluation of On-device Personalization"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "steps",
            "local steps that fine-tune the global model before each client is scored (≥ 1)",
        )]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.at_least_one("steps", params.steps.into());
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(FineTunedClient {
            steps: params.steps,
        })
    }

    /// Its global model is FedAvg's.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to("fedavg", Params::default())]
    }
}

/// FedAvg with fine-tuning's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Fine-tuning steps.
    pub steps: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self { steps: 10 }
    }
}

/// A client that trains as FedAvg's and uses the model it is sent after `steps` steps on its
/// own data.
#[derive(Debug, Clone, Copy)]
pub struct FineTunedClient {
    /// Fine-tuning steps.
    pub steps: u32,
}

impl ClientAlgorithm for FineTunedClient {
    fn personalises(&self) -> bool {
        true
    }

    fn personal_model(
        &self,
        view: &ClientView<'_>,
        _state: Option<&Tensors>,
        tuning: &mut dyn FineTuning,
    ) -> Result<Vec<f32>, TrainError> {
        tuning.fine_tune(view.global, self.steps)
    }
}
