//! FedPer: Arivazhagan et al. (2019), "Federated Learning with Personalization Layers". The
//! base layers are shared and averaged as FedAvg averages them; the personalization layers (by
//! default the head, the last layer) stay with each client, which trains them with the rest on
//! its own data and keeps them between rounds.
//!
//! Only the base layers travel: the downlink and the update carry their values alone, so the
//! traffic records count only them. The global model's personal layers keep their initial
//! values, so its accuracy on the test set says little; each client is scored with the shared
//! layers and its own (`personal_accuracy`). With no personal layer, FedPer is FedAvg.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, EdgeAggregation, FedAvgServer, PersonalLayers, Reduction, Setting,
    Strategy,
};

/// FedPer: FedAvg over the shared layers, with [`KeepsLayers`]' clients.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedPer;

impl Algorithm for FedPer {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedper"
    }

    fn paper(&self) -> &'static str {
        "Arivazhagan et al. 2019, Federated Learning with Personalization Layers"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "personal",
            "the layers each client keeps: layer names of the model, \"head\" (the last) or \"body\" (the others)",
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
            field: "personal",
            names: params.personal.clone(),
        }
    }

    /// With no personal layer, FedAvg.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to("fedavg", Params { personal: vec![] })]
    }
}

/// FedPer's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The personalization layers.
    pub personal: Vec<String>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            personal: vec!["head".to_string()],
        }
    }
}

/// A client that trains the whole model on the loss alone and keeps its personal layers
/// (which fedsim stores with its state): FedPer's and LG-FedAvg's.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeepsLayers;

impl ClientAlgorithm for KeepsLayers {
    fn personalises(&self) -> bool {
        true
    }
}
