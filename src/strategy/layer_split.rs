//! Algorithms that split the model into layers the federation shares and layers each client
//! keeps ([`Algorithm::personal_layers`]), and otherwise run FedAvg: FedPer keeps the head,
//! LG-FedAvg the body. Each names its split and paper ([`SplitMethod`]); this file holds what
//! they share: their parameters and halves.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    Algorithm, ClientAlgorithm, EdgeAggregation, FedAvgServer, PersonalLayers, Reduction, Setting,
    Strategy,
};

/// What sets one split algorithm apart: its name, paper and the layers its clients keep
/// unless the experiment names others.
pub trait SplitMethod: Send + Sync + 'static {
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
            "the layers each client keeps: layer names of the model, \"head\" (the last) or \"body\" (the others)",
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
pub struct SplitParams<M> {
    /// The layers: layer names, `head` or `body`.
    pub personal: Vec<String>,
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

impl<M> Clone for SplitParams<M> {
    fn clone(&self) -> Self {
        Self::keeping(self.personal.clone())
    }
}

impl<M> fmt::Debug for SplitParams<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitParams")
            .field("personal", &self.personal)
            .finish()
    }
}

impl<M> PartialEq for SplitParams<M> {
    fn eq(&self, other: &Self) -> bool {
        self.personal == other.personal
    }
}

/// The parameters as the file writes them.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    #[serde(default)]
    personal: Option<Vec<String>>,
}

impl<M> Serialize for SplitParams<M> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Written {
            personal: Some(self.personal.clone()),
        }
        .serialize(serializer)
    }
}

impl<'de, M: SplitMethod> Deserialize<'de> for SplitParams<M> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let written = Written::deserialize(deserializer)?;
        Ok(written.personal.map_or_else(Self::default, Self::keeping))
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
