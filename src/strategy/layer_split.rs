//! Algorithms that split the model into layers the federation shares and layers each client
//! keeps ([`Algorithm::personal_layers`]), and otherwise run FedAvg: FedPer keeps the head,
//! LG-FedAvg the body. Each names its split and paper ([`SplitMethod`]); this file holds what
//! they share: their parameters and halves.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, EdgeAggregation, FedAvgServer, PersonalLayers, Reduction, Setting,
    Strategy,
};

/// What sets one split algorithm apart: its name, paper and the layers its clients keep
/// unless the experiment names others.
pub trait SplitMethod: fmt::Debug + Clone + PartialEq + Send + Sync + 'static {
    /// The name an experiment file gives.
    const NAME: &'static str;
    /// The paper it follows.
    const PAPER: &'static str;
    /// The layers each client keeps by default.
    const KEPT: &'static [&'static str];
}

/// A split algorithm: FedAvg over the shared layers, with [`KeepsLayers`]' clients.
pub struct LayerSplit<M>(PhantomData<M>);

impl<M> Default for LayerSplit<M> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<M> fmt::Debug for LayerSplit<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LayerSplit")
    }
}

impl<M: SplitMethod> Algorithm for LayerSplit<M> {
    type Params = SplitParams<M>;

    fn name(&self) -> &'static str {
        M::NAME
    }

    fn paper(&self) -> &'static str {
        M::PAPER
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "personal",
            "the layers each client keeps: layer names of the model, \"head\" (the last), \"body\" (the others) or \"norm\" (the normalisation layers)",
        )]
    }

    fn edge_rule(&self, _params: &SplitParams<M>) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &SplitParams<M>, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, _: &SplitParams<M>, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(KeepsLayers)
    }

    fn personal_layers(&self, params: &SplitParams<M>) -> PersonalLayers {
        PersonalLayers {
            field: "personal",
            names: params.personal.clone(),
        }
    }

    /// With no layer kept, FedAvg.
    fn reductions(&self) -> Vec<Reduction<SplitParams<M>>> {
        vec![Reduction::to("fedavg", SplitParams::keeping(Vec::new()))]
    }
}

/// A split algorithm's parameters: the layers each client keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, bound = "M: SplitMethod")]
pub struct SplitParams<M> {
    /// The layers: layer names, `head` or `body`.
    pub personal: Vec<String>,
    #[serde(skip)]
    method: PhantomData<M>,
}

impl<M> SplitParams<M> {
    fn keeping(personal: Vec<String>) -> Self {
        Self {
            personal,
            method: PhantomData,
        }
    }
}

impl<M: SplitMethod> Default for SplitParams<M> {
    fn default() -> Self {
        Self::keeping(M::KEPT.iter().map(|layer| layer.to_string()).collect())
    }
}

/// A client that trains the whole model on the loss alone and keeps its personal layers
/// (which fedsim stores with its state).
#[derive(Debug, Clone, Copy, Default)]
pub struct KeepsLayers;

impl ClientAlgorithm for KeepsLayers {
    fn personalises(&self) -> bool {
        true
    }
}
