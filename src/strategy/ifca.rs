//! IFCA: Ghosh, Chung, Yin and Ramchandran (2020), "An Efficient Framework for Clustered
//! Federated Learning", NeurIPS. The server keeps `k` cluster models and sends every client all
//! of them. Each client measures each model's loss on its own training data, trains the one of
//! lowest loss and says which; the server averages each cluster's model over the clients that
//! chose it (sample-weighted, as FedAvg averages), and leaves a model no client chose as it was
//! (the paper's model-averaging variant, Algorithm 2).
//!
//! **From the paper to the simulator.** The cluster models start from `k` draws of the model's
//! own initialisation (the first is the run's initial global model), as the paper starts them
//! at random. The model the records evaluate on the test set is the first cluster's; each
//! client is scored on its own test samples with the model it picks as it would to train (the
//! one of lowest loss on its training samples). Each round's `strategy` metrics count the
//! clients that chose each cluster (`cluster_0`, ...) and its `clusters` say which each chose.
//! A client's `k` measurements are charged to the simulated clock, a pass over its samples
//! each, as a probe is. With one cluster nothing is measured or sent beside the model, and
//! IFCA is FedAvg to the bit.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Aggregate, Algorithm, ClientAlgorithm, ClientView, Collected, EdgeAggregation, Fold, Reduction,
    Round, Setting, Start, Strategy, Sum, Totals, Weighting,
};
use crate::config::check::Problems;
use crate::network::{StateError, Tensors, Update};

/// The extra tensor in which a client says which cluster it trained.
const CHOSEN: &str = "cluster";

/// IFCA: `k` cluster models, each client training the one that fits it best.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ifca;

impl Algorithm for Ifca {
    type Params = Params;

    fn name(&self) -> &'static str {
        "ifca"
    }

    fn paper(&self) -> &'static str {
        "Ghosh et al. 2020, An Efficient Framework for Clustered Federated Learning (NeurIPS)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("clusters", "cluster models k (≥ 1); 1 gives FedAvg")]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.at_least_one("clusters", params.clusters as u64);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported(
            "IFCA averages each cluster's model over the clients that chose it: use topology.mode \"relay\"",
        )
    }

    fn server(&self, params: &Params, setting: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        let fresh = setting
            .fresh_models
            .expect("an experiment builds its server half with its fresh models");
        let models = (0..params.clusters as u32)
            .map(|draw| fresh.fresh(draw).into())
            .collect();
        Box::new(IfcaServer { models })
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(IfcaClient {
            clusters: params.clusters,
        })
    }

    /// One cluster is FedAvg's one model.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to("fedavg", Params { clusters: 1 })]
    }
}

/// IFCA's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The number of cluster models `k`.
    pub clusters: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self { clusters: 2 }
    }
}

/// The server half: the cluster models, the first of which is the global model.
#[derive(Debug, Clone)]
pub struct IfcaServer {
    models: Vec<Arc<[f32]>>,
}

/// The name the `cluster`-th model (from 1) travels under beside the global model, which is
/// the first cluster's.
fn model_name(cluster: usize) -> String {
    format!("cluster_{cluster}")
}

impl IfcaServer {
    /// The cluster `update`'s client trained.
    fn chosen(&self, update: &Update) -> usize {
        update
            .extras
            .get(CHOSEN)
            .and_then(|chosen| chosen.first())
            .map_or(0, |&c| c as usize)
            .min(self.models.len() - 1)
    }
}

impl Strategy for IfcaServer {
    /// Every cluster model but the first, which goes as the global model.
    fn downlink(&self) -> Tensors {
        let mut extras = Tensors::new();
        for (cluster, model) in self.models.iter().enumerate().skip(1) {
            extras.insert(&model_name(cluster), model.clone());
        }
        extras
    }

    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        // The global model is the first cluster's (after a resume, the checkpoint's).
        self.models[0] = global.into();
        let updates = input.updates();
        let mut aggregate = Aggregate::model(Vec::new());
        // With one cluster there is nothing to choose, and the records are FedAvg's.
        if self.models.len() > 1 {
            for update in updates {
                for &client in &update.clients {
                    aggregate = aggregate.with_cluster(client, self.chosen(update));
                }
            }
        }
        for cluster in 0..self.models.len() {
            let chose: Vec<&Update> = updates
                .iter()
                .filter(|u| self.chosen(u) == cluster)
                .collect();
            aggregate = aggregate.with(&format!("cluster_{cluster}"), chose.len() as f64);
            if !chose.is_empty() {
                // FedAvg's fold, over the clients that chose this cluster.
                let sums = vec![Sum::params(Weighting::Samples)];
                let mut fold = Fold::new(sums, Totals::of(chose.iter().map(|u| u.num_samples)));
                for update in chose {
                    fold.add(update);
                }
                let [mean] = Collected::from(fold.finish()).into_sums();
                self.models[cluster] = mean.into();
            }
        }
        aggregate.model = self.models[0].to_vec();
        aggregate
    }

    fn state(&self) -> Tensors {
        // The first cluster's model is the global model, which the checkpoint holds already.
        self.downlink()
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        if state.iter().count() != self.models.len() - 1 {
            return Err(StateError::Invalid(format!(
                "IFCA's state holds {} models, not {}",
                state.iter().count(),
                self.models.len() - 1
            )));
        }
        for cluster in 1..self.models.len() {
            let model = state.require(&model_name(cluster))?;
            self.models[cluster] = model.into();
        }
        Ok(())
    }
}

/// The client half: trains the cluster model of lowest loss on its data, and says which.
#[derive(Debug, Clone, Copy)]
pub struct IfcaClient {
    /// The cluster models sent down.
    pub clusters: usize,
}

impl ClientAlgorithm for IfcaClient {
    /// One loss per cluster model; with one, nothing to choose and nothing measured.
    fn measuring_passes(&self) -> u32 {
        match self.clusters {
            1 => 0,
            k => k as u32,
        }
    }

    fn start_from(
        &self,
        view: &ClientView<'_>,
        loss_of: &mut dyn FnMut(&[f32]) -> f64,
    ) -> Option<Start> {
        let others: Vec<&[f32]> = (1..)
            .map_while(|cluster| view.downlink.get(&model_name(cluster)))
            .collect();
        if others.is_empty() {
            return None;
        }
        let models: Vec<&[f32]> = std::iter::once(view.global).chain(others).collect();
        let losses: Vec<f64> = models.iter().map(|model| loss_of(model)).collect();
        // The lowest loss, the first cluster among equals.
        let best = (1..losses.len()).fold(0, |best, c| {
            if losses[c].total_cmp(&losses[best]).is_lt() {
                c
            } else {
                best
            }
        });
        Some(Start {
            model: models[best].to_vec(),
            extras: Tensors::new().with(CHOSEN, vec![best as f32]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    fn server(models: Vec<Vec<f32>>) -> IfcaServer {
        IfcaServer {
            models: models.into_iter().map(Arc::from).collect(),
        }
    }

    #[test]
    fn each_cluster_averages_the_clients_that_chose_it_and_one_nobody_chose_stays() {
        let mut ifca = server(vec![vec![0.0], vec![10.0], vec![20.0]]);
        let mut updates = [
            update(0, 100, vec![1.0]),
            update(1, 300, vec![5.0]),
            update(2, 100, vec![12.0]),
        ];
        updates[2].extras = Tensors::new().with(CHOSEN, vec![1.0]);
        let next = ifca.aggregate_updates(&round(), &[0.0], &updates);
        assert_eq!(next.model, vec![4.0]);
        assert_eq!(&ifca.models[1][..], &[12.0]);
        assert_eq!(&ifca.models[2][..], &[20.0]);
        assert_eq!(
            (
                next.metrics["cluster_0"],
                next.metrics["cluster_1"],
                next.metrics["cluster_2"]
            ),
            (2.0, 1.0, 0.0)
        );
        assert_eq!(
            next.clusters.into_iter().collect::<Vec<_>>(),
            [(0, 0), (1, 0), (2, 1)]
        );
        let mut restored = server(vec![vec![0.0], vec![0.0], vec![0.0]]);
        restored.restore(&ifca.state()).unwrap();
        assert_eq!(restored.state(), ifca.state());
    }

    #[test]
    fn a_client_trains_the_model_of_lowest_loss_and_says_which() {
        let downlink = Tensors::new()
            .with(&model_name(1), vec![3.0])
            .with(&model_name(2), vec![-1.0]);
        let view = ClientView {
            round: 1,
            client: 0,
            global: &[1.0],
            downlink: &downlink,
            lr: 0.1,
            personal: None,
        };
        // The loss is the distance to 3.
        let start = IfcaClient { clusters: 2 }
            .start_from(&view, &mut |model| f64::from((model[0] - 3.0).abs()))
            .unwrap();
        assert_eq!(start.model, vec![3.0]);
        assert_eq!(start.extras.expect(CHOSEN), &[1.0]);
        let alone = ClientView {
            downlink: &Tensors::new(),
            ..view
        };
        assert!(
            IfcaClient { clusters: 1 }
                .start_from(&alone, &mut |_| 0.0)
                .is_none()
        );
    }
}
