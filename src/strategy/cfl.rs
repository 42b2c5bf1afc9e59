//! CFL: Sattler, Müller and Samek (2020), "Clustered Federated Learning: Model-Agnostic
//! Distributed Multitask Optimization Under Privacy Constraints", IEEE TNNLS. Clients whose
//! data follow different distributions pull a shared model in different directions; CFL splits
//! them into clusters, each with a model of its own, by the directions of their updates.
//!
//! Every client starts in one cluster. After each round, for each cluster with clients in the
//! round, with `Δ_i` each one's update (its trained model less the cluster model it was sent):
//!
//! ```text
//! split when  |Σ_i (n_i/n) Δ_i| < eps_1    (the cluster as a whole is near a stationary point)
//!        and  max_i |Δ_i| > eps_2          (but some clients are far from theirs)
//! ```
//!
//! and the round is past `warmup` and the cluster has at least `min_clients` clients in it.
//! A split bipartitions the cluster's clients by the cosine similarity of their updates, with
//! complete linkage (the paper's clustering); each part then steps by the sample-weighted mean
//! of its clients' updates, and each client is sent its cluster's model from the next round.
//!
//! **From the paper to the simulator.** The paper has every client in every round. Where a
//! round samples some, only the sampled clients of a cluster decide and take part in its split;
//! its other clients stay with the part that holds the lowest client id. The model the records
//! evaluate on the test set is the first cluster's (the one holding client 0), and each client
//! is scored on its own test samples with its cluster's model. Each round's `strategy` metrics
//! count the clusters and give, for each cluster in the round, the two norms the rule compares
//! (`mean_norm_0`, `max_norm_0`, ...), to set the thresholds by: they depend on the model and
//! the learning rate, and the defaults are those of the paper's code for its CNN on MNIST.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::vector::{difference, dot, norm, weighted_sum};
use super::{Aggregate, Algorithm, Collected, EdgeAggregation, Round, Sent, Setting, Strategy};
use crate::config::check::Problems;
use crate::network::{ClientId, StateError, Tensors, Update};

/// CFL: clusters split by the similarity of their clients' updates.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cfl;

impl Algorithm for Cfl {
    type Params = Params;

    fn name(&self) -> &'static str {
        "cfl"
    }

    fn paper(&self) -> &'static str {
        "Sattler, Müller and Samek 2020, Clustered Federated Learning: Model-Agnostic Distributed Multitask Optimization Under Privacy Constraints (IEEE TNNLS)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "eps_1",
                "a cluster may split when the norm of its mean update is below this (> 0)",
            ),
            (
                "eps_2",
                "and when its largest update's norm is above this (> 0)",
            ),
            ("warmup", "rounds before any split"),
            (
                "min_clients",
                "the fewest clients of a round a cluster splits over (≥ 2)",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("eps_1", params.eps_1);
        problems.positive("eps_2", params.eps_2);
        problems.require(params.min_clients >= 2, "min_clients", || {
            format!(
                "is {}; a split needs at least 2 clients",
                params.min_clients
            )
        });
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported(
            "CFL sends each client its cluster's model and reads each client's own update: use topology.mode \"relay\"",
        )
    }

    fn server(&self, params: &Params, setting: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(CflServer::new(*params, setting.num_clients))
    }
}

/// CFL's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The largest norm of a cluster's mean update at which it may split.
    pub eps_1: f64,
    /// The smallest norm of its largest client update at which it may split.
    pub eps_2: f64,
    /// Rounds before any split.
    pub warmup: u32,
    /// The fewest clients of a round a cluster splits over.
    pub min_clients: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            eps_1: 0.4,
            eps_2: 1.6,
            warmup: 20,
            min_clients: 3,
        }
    }
}

/// The server half: each cluster's model and each client's cluster.
#[derive(Debug, Clone)]
pub struct CflServer {
    params: Params,
    /// Each cluster's model; empty before the first round (the global model is then the one
    /// cluster's).
    models: Vec<Arc<[f32]>>,
    /// Each client's cluster, by client id.
    cluster_of: Vec<usize>,
}

/// A client's update, as CFL reads it.
struct Step {
    client: ClientId,
    samples: f64,
    delta: Vec<f32>,
}

impl CflServer {
    /// Every one of `num_clients` clients in one cluster.
    pub fn new(params: Params, num_clients: usize) -> Self {
        Self {
            params,
            models: Vec::new(),
            cluster_of: vec![0; num_clients],
        }
    }

    /// Each client's cluster, by client id.
    pub fn clusters(&self) -> &[usize] {
        &self.cluster_of
    }

    /// The updates of `members` of cluster `cluster` (indices into `steps`, at least one) split
    /// in two when the rule says so: the second part becomes a new cluster. Returns the norms
    /// the rule compares: of their weighted mean and the largest.
    fn maybe_split(
        &mut self,
        round: u32,
        cluster: usize,
        members: &[usize],
        steps: &[Step],
    ) -> (f64, f64) {
        let p = self.params;
        let mean = norm(&weighted_mean(members.iter().map(|&i| &steps[i])));
        let largest = members
            .iter()
            .map(|&i| norm(&steps[i].delta))
            .fold(0.0, f64::max);
        let norms = (mean, largest);
        if round <= p.warmup
            || members.len() < p.min_clients
            || mean >= p.eps_1
            || largest <= p.eps_2
        {
            return norms;
        }
        let deltas: Vec<&[f32]> = members.iter().map(|&i| steps[i].delta.as_slice()).collect();
        let (_, second) = bipartition(&similarities(&deltas));
        let new = self.models.len();
        self.models.push(self.models[cluster].clone());
        for index in second {
            self.cluster_of[steps[members[index]].client] = new;
        }
        norms
    }
}

impl Strategy for CflServer {
    fn downlink_to(&self, client: ClientId, _global: &Arc<[f32]>) -> Option<Sent> {
        (self.models.len() > 1).then(|| Sent {
            model: self.models[self.cluster_of[client]].clone(),
            extras: Tensors::new(),
        })
    }

    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        if self.models.is_empty() {
            self.models.push(global.into());
        }
        let steps: Vec<Step> = input
            .updates()
            .iter()
            .map(|update| self.step_of(update))
            .collect();
        let before = self.models.len();
        let mut norms = BTreeMap::new();
        for cluster in 0..before {
            let members: Vec<usize> = (0..steps.len())
                .filter(|&i| self.cluster_of[steps[i].client] == cluster)
                .collect();
            if !members.is_empty() {
                let (mean, largest) = self.maybe_split(round.number, cluster, &members, &steps);
                norms.insert(format!("mean_norm_{cluster}"), mean);
                norms.insert(format!("max_norm_{cluster}"), largest);
            }
        }
        for (cluster, model) in self.models.iter_mut().enumerate() {
            let members = steps
                .iter()
                .filter(|s| self.cluster_of[s.client] == cluster);
            if members.clone().next().is_none() {
                continue;
            }
            let mean = weighted_mean(members);
            *model = model.iter().zip(&mean).map(|(w, d)| w + d).collect();
        }
        let clusters = self.models.len();
        let mut aggregate = Aggregate::model(self.models[0].to_vec())
            .with("clusters", clusters as f64)
            .with("splits", (clusters - before) as f64);
        aggregate.metrics.extend(norms);
        steps.iter().fold(aggregate, |aggregate, step| {
            aggregate.with_cluster(step.client, self.cluster_of[step.client])
        })
    }

    fn state(&self) -> Tensors {
        let cluster_of: Vec<f32> = self.cluster_of.iter().map(|&c| c as f32).collect();
        let mut state = Tensors::new().with("cluster_of", cluster_of);
        for (cluster, model) in self.models.iter().enumerate() {
            state.insert(&format!("model_{cluster}"), model.clone());
        }
        state
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        let cluster_of = state.require("cluster_of")?;
        if cluster_of.len() != self.cluster_of.len() {
            return Err(StateError::Invalid(format!(
                "CFL's state holds {} clients' clusters, not {}",
                cluster_of.len(),
                self.cluster_of.len()
            )));
        }
        let models: Vec<Arc<[f32]>> = (0..)
            .map_while(|cluster| state.get(&format!("model_{cluster}")))
            .map(Arc::from)
            .collect();
        if state.iter().count() != models.len() + 1 {
            let known = |name: &str| name == "cluster_of" || name.starts_with("model_");
            let unknown = state.iter().map(|(name, _)| name).find(|n| !known(n));
            return Err(match unknown {
                Some(name) => StateError::Unexpected(name.to_string()),
                None => StateError::Invalid("its cluster models are not numbered from 0".into()),
            });
        }
        let clusters = models.len().max(1);
        if cluster_of
            .iter()
            .any(|&c| c as usize >= clusters || c.fract() != 0.0)
        {
            return Err(StateError::Invalid(format!(
                "CFL's state puts a client outside its {clusters} clusters"
            )));
        }
        self.cluster_of = cluster_of.iter().map(|&c| c as usize).collect();
        self.models = models;
        Ok(())
    }
}

impl CflServer {
    /// `update`'s change from the model its client was sent: its cluster's.
    fn step_of(&self, update: &Update) -> Step {
        let client = update.clients[0];
        let sent = &self.models[self.cluster_of[client]];
        Step {
            client,
            samples: update.num_samples as f64,
            delta: difference(&update.params, sent),
        }
    }
}

/// The sample-weighted mean of `steps`' updates, weighted as FedAvg weighs its clients.
fn weighted_mean<'a>(steps: impl Iterator<Item = &'a Step> + Clone) -> Vec<f32> {
    let total: f64 = steps.clone().map(|s| s.samples).sum();
    let terms: Vec<(&[f32], f32)> = steps
        .map(|s| (s.delta.as_slice(), (s.samples / total) as f32))
        .collect();
    weighted_sum(&terms)
}

/// The cosine similarity of every pair of `deltas`.
fn similarities(deltas: &[&[f32]]) -> Vec<Vec<f64>> {
    let norms: Vec<f64> = deltas.iter().map(|d| norm(d)).collect();
    deltas
        .iter()
        .enumerate()
        .map(|(i, a)| {
            deltas
                .iter()
                .enumerate()
                .map(|(j, b)| dot(a, b) / (norms[i] * norms[j]).max(f64::MIN_POSITIVE))
                .collect()
        })
        .collect()
}

/// Two groups of the items whose pairwise similarities are `similarity`, by agglomerative
/// clustering with complete linkage on the distance `-similarity`: the two clusters left when
/// the closest pair is merged until two remain. The group holding item 0 comes first; ties
/// merge the lowest indices first.
fn bipartition(similarity: &[Vec<f64>]) -> (Vec<usize>, Vec<usize>) {
    let n = similarity.len();
    let mut groups: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    let mut distance: Vec<Vec<f64>> = similarity
        .iter()
        .map(|row| row.iter().map(|s| -s).collect())
        .collect();
    while groups.len() > 2 {
        let mut closest = (f64::INFINITY, 0, 1);
        for (a, row) in distance.iter().enumerate() {
            for (b, &d) in row.iter().enumerate().skip(a + 1) {
                if d < closest.0 {
                    closest = (d, a, b);
                }
            }
        }
        let (_, a, b) = closest;
        // Complete linkage: the merged group is as far from another as its farther half.
        let merged_row: Vec<f64> = distance[a]
            .iter()
            .zip(&distance[b])
            .map(|(x, y)| x.max(*y))
            .collect();
        for (row, &farther) in distance.iter_mut().zip(&merged_row) {
            row[a] = farther;
        }
        distance[a] = merged_row;
        let merged = groups.remove(b);
        groups[a].extend(merged);
        distance.remove(b);
        for row in &mut distance {
            row.remove(b);
        }
    }
    for group in &mut groups {
        group.sort_unstable();
    }
    groups.sort();
    let second = groups.pop().unwrap_or_default();
    let first = groups.pop().unwrap_or_default();
    (first, second)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    #[test]
    fn complete_linkage_splits_two_directions() {
        let deltas: [&[f32]; 5] = [
            &[1.0, 0.1],
            &[-1.0, 0.0],
            &[0.9, 0.0],
            &[-1.1, 0.2],
            &[1.0, -0.1],
        ];
        assert_eq!(
            bipartition(&similarities(&deltas)),
            (vec![0, 2, 4], vec![1, 3])
        );
    }

    #[test]
    fn a_cluster_pulled_two_ways_splits_and_each_part_gets_its_model() {
        let params = Params {
            eps_1: 0.5,
            eps_2: 1.0,
            warmup: 0,
            min_clients: 3,
        };
        let mut server = CflServer::new(params, 10);
        let global = [0.0f32, 0.0];
        // Clients 0 and 1 pull one way, 2 and 3 the other: the mean stays near 0.
        let updates = [
            update(0, 100, vec![2.0, 0.0]),
            update(1, 100, vec![2.0, 0.1]),
            update(2, 100, vec![-2.0, 0.0]),
            update(3, 100, vec![-2.0, -0.1]),
        ];
        let next = server.aggregate_updates(&round(), &global, &updates);
        assert_eq!(next.metrics["clusters"], 2.0);
        assert_eq!(&server.clusters()[..4], &[0, 0, 1, 1]);
        let recorded: Vec<(usize, usize)> = next.clusters.clone().into_iter().collect();
        assert_eq!(recorded, [(0, 0), (1, 0), (2, 1), (3, 1)]);
        assert_eq!(next.model, vec![2.0, 0.05]);
        let global: Arc<[f32]> = next.model.clone().into();
        let sent = |client| server.downlink_to(client, &global).unwrap().model.to_vec();
        assert_eq!(sent(3), vec![-2.0, -0.05]);
        // Clients that were not in the round stay with the first part.
        assert_eq!(sent(7), vec![2.0, 0.05]);
        let mut restored = CflServer::new(params, 10);
        restored.restore(&server.state()).unwrap();
        assert_eq!(restored.state(), server.state());
    }

    #[test]
    fn one_cluster_sends_every_client_the_global_model() {
        let mut server = CflServer::new(Params::default(), 4);
        let global: Arc<[f32]> = vec![0.0f32].into();
        assert!(server.downlink_to(1, &global).is_none());
        let updates = [update(0, 100, vec![1.0]), update(1, 300, vec![5.0])];
        let next = server.aggregate_updates(&round(), &global, &updates);
        assert_eq!(next.model, vec![4.0]);
        assert!(server.downlink_to(1, &next.model.into()).is_none());
    }
}
