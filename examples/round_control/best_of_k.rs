//! A clustered rule as a user writes it, after IFCA (Ghosh, Chung, Yin and Ramchandran 2020,
//! "An Efficient Framework for Clustered Federated Learning", NeurIPS): the server keeps `k`
//! models and sends every client all of them; each client measures them on its own data,
//! trains the one of lowest loss and says which; the server averages each model over the
//! clients that chose it, weighted by their samples, and keeps a model nobody chose.
//!
//! The first model travels as the global one (the records evaluate it); the others go beside
//! it as tensors. The `k` models start from `k` draws of the model's initialisation
//! (`Setting::fresh_models`), as the paper starts them at random.

use std::sync::Arc;

use fedsim::plugin::vector::weighted_sum;
use fedsim::plugin::{
    Aggregate, Algorithm, ClientAlgorithm, ClientView, Collected, EdgeAggregation, Problems, Round,
    Setting, Start, StateError, Strategy, Tensors, Update,
};
use serde::{Deserialize, Serialize};

/// The tensor in which a client says which model it trained.
const CHOSEN: &str = "chosen";

/// The parameter: `{"name": "best_of_k", "k": 4}`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Cluster models.
    pub k: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self { k: 2 }
    }
}

/// `k` models; each client trains the one that fits it best.
pub struct BestOfK;

impl Algorithm for BestOfK {
    type Params = Params;

    fn name(&self) -> &'static str {
        "best_of_k"
    }

    fn paper(&self) -> &'static str {
        "Ghosh et al. 2020, An Efficient Framework for Clustered Federated Learning (written as a plug-in)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("k", "cluster models (≥ 1)")]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.at_least_one("k", params.k as u64);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported("each model averages the clients that chose it: use relay")
    }

    fn server(&self, params: &Params, setting: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        let fresh = setting.fresh_models.expect("a run hands its fresh models");
        let models = (0..params.k as u32).map(|draw| fresh.fresh(draw)).collect();
        Box::new(BestOfKServer { models })
    }

    fn client(&self, _: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(BestOfKClient)
    }
}

/// The name the `j`-th model (from 1) travels under.
fn name(j: usize) -> String {
    format!("model_{j}")
}

/// The server half: the `k` models, the first being the global model.
struct BestOfKServer {
    models: Vec<Vec<f32>>,
}

/// The model `update`'s client trained.
fn chosen(update: &Update) -> usize {
    update.extras.get(CHOSEN).map_or(0, |c| c[0] as usize)
}

impl Strategy for BestOfKServer {
    fn downlink(&self) -> Tensors {
        let mut tensors = Tensors::new();
        for (j, model) in self.models.iter().enumerate().skip(1) {
            tensors.insert(&name(j), model.clone());
        }
        tensors
    }

    fn aggregate(&mut self, _: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        self.models[0] = global.to_vec();
        let updates = input.updates();
        for (j, model) in self.models.iter_mut().enumerate() {
            let chose: Vec<&Update> = updates.iter().filter(|u| chosen(u) == j).collect();
            let samples: usize = chose.iter().map(|u| u.num_samples).sum();
            if samples > 0 {
                let terms: Vec<(&[f32], f32)> = chose
                    .iter()
                    .map(|u| {
                        (
                            &u.params[..],
                            (u.num_samples as f64 / samples as f64) as f32,
                        )
                    })
                    .collect();
                *model = weighted_sum(&terms);
            }
        }
        Aggregate::model(self.models[0].clone())
    }

    fn state(&self) -> Tensors {
        self.downlink()
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        for j in 1..self.models.len() {
            self.models[j] = state.require(&name(j))?.to_vec();
        }
        Ok(())
    }
}

/// The client half: trains the model of lowest loss on its data.
struct BestOfKClient;

impl ClientAlgorithm for BestOfKClient {
    fn start_from(
        &self,
        view: &ClientView<'_>,
        loss_of: &mut dyn FnMut(&[f32]) -> f64,
    ) -> Option<Start> {
        let mut models = vec![view.global];
        models.extend((1..).map_while(|j| view.downlink.get(&name(j))));
        let losses: Vec<f64> = models.iter().map(|m| loss_of(m)).collect();
        let best = (0..models.len()).min_by(|&a, &b| losses[a].total_cmp(&losses[b]))?;
        Some(Start {
            model: models[best].to_vec(),
            extras: Tensors::new().with(CHOSEN, vec![best as f32]),
        })
    }
}
