//! LG-FedAvg: Liang et al. (2020), "Think Locally, Act Globally: Federated Learning with Local
//! and Global Representations". The opposite split to FedPer's: each client keeps its own
//! local representation (by default the body, every layer but the last) and the federation
//! averages the global layers (the head) as FedAvg averages a model.
//!
//! Only the global layers travel, so a round moves a small part of the model. The global model
//! holds the initial body, so its test-set accuracy says little; each client is scored with its
//! own body under the shared head (`personal_accuracy`). The paper initialises the local
//! representations by local training before federating; here every client starts from the
//! initial model's body and trains its own from its first round.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, EdgeAggregation, FedAvgServer, KeepsLayers, PersonalLayers,
    Reduction, Setting, Strategy,
};

/// LG-FedAvg: FedAvg over the global layers, with [`KeepsLayers`]' clients.
#[derive(Debug, Clone, Copy, Default)]
pub struct LgFedAvg;

impl Algorithm for LgFedAvg {
    type Params = Params;

    fn name(&self) -> &'static str {
        "lg_fedavg"
    }

    fn paper(&self) -> &'static str {
        "Liang et al. 2020, Think Locally, Act Globally: Federated Learning with Local and Global Representations"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "local",
            "the layers of each client's local representation: layer names of the model, \"body\" (every layer but the last) or \"head\"",
        )]
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, _: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(KeepsLayers)
    }

    fn personal_layers(&self, params: &Params) -> PersonalLayers {
        PersonalLayers {
            field: "local",
            names: params.local.clone(),
        }
    }

    /// With no local layer, FedAvg.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to("fedavg", Params { local: vec![] })]
    }
}

/// LG-FedAvg's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The local representation's layers.
    pub local: Vec<String>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            local: vec!["body".to_string()],
        }
    }
}
