//! Krum and Multi-Krum: Blanchard, El Mhamdi, Guerraoui and Stainer (2017), "Machine Learning
//! with Adversaries: Byzantine Tolerant Gradient Descent". With `n` updates of which at most
//! `f` may be Byzantine, each update is scored by the sum of its squared distances to its
//! `n - f - 2` nearest neighbours; Krum keeps the update with the lowest score, Multi-Krum the
//! mean of the `m` lowest (ties go to the lower client id).
//!
//! Krum needs `n ≥ 2f + 3`. In a round where dropouts or deadlines leave fewer updates, no
//! update can be trusted: the global model is kept, and the round's metrics say
//! `krum_skipped: 1`. Multi-Krum keeps at most `n - f` updates.

use serde::{Deserialize, Serialize};

use super::vector::{squared_distance, weighted_sum};
use super::{Aggregate, Algorithm, Collected, EdgeAggregation, Round, Setting, Strategy};
use crate::config::check::Problems;
use crate::network::Update;

/// Krum and Multi-Krum: plain local SGD, and the server half [`KrumServer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Krum;

impl Algorithm for Krum {
    type Params = Params;

    fn name(&self) -> &'static str {
        "krum"
    }

    fn paper(&self) -> &'static str {
        "Blanchard et al. 2017, Machine Learning with Adversaries: Byzantine Tolerant Gradient Descent"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        DOCS
    }

    fn check(&self, params: &Params, setting: &Setting<'_>, problems: &mut Problems) {
        let needed = needed(params.byzantine);
        if let Some(clients_per_round) = setting.clients_per_round
            && clients_per_round < needed
        {
            problems.add(
                "byzantine",
                format!(
                    "is {}; Krum needs at least 2 * byzantine + 3 = {needed} updates a round, and \
                     federation.clients_per_round is {clients_per_round}",
                    params.byzantine
                ),
            );
        }
        if params.multi < 1 {
            problems.add("multi", "must be at least 1");
        }
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::ROBUST
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(KrumServer::new(*params))
    }
}

/// Krum's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Byzantine updates `f` to tolerate per round.
    pub byzantine: usize,
    /// Updates `m` to average (1 is Krum, more is Multi-Krum).
    pub multi: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            byzantine: 1,
            multi: 1,
        }
    }
}

/// What each parameter means, for `fedsim strategies`.
const DOCS: &[(&str, &str)] = &[
    (
        "byzantine",
        "Byzantine updates f tolerated per round; needs 2f + 3 updates",
    ),
    (
        "multi",
        "updates m averaged: 1 is Krum, more is Multi-Krum (at most n - f)",
    ),
];

/// The updates Krum needs to tolerate `byzantine` attackers: `2f + 3` (saturating, for
/// absurd `f` from an experiment file).
fn needed(byzantine: usize) -> usize {
    byzantine.saturating_mul(2).saturating_add(3)
}

/// The server half.
#[derive(Debug, Clone, Copy)]
pub struct KrumServer {
    params: Params,
}

impl KrumServer {
    /// A server tolerating `params.byzantine` attackers.
    pub fn new(params: Params) -> Self {
        Self { params }
    }

    /// Each update's score: the sum of squared distances to its `n - f - 2` nearest others.
    fn scores(&self, updates: &[Update]) -> Vec<f64> {
        let n = updates.len();
        let neighbours = n - self.params.byzantine - 2;
        let mut distances = vec![vec![0.0; n]; n];
        for i in 0..n {
            for j in i + 1..n {
                let d = squared_distance(&updates[i].params, &updates[j].params);
                distances[i][j] = d;
                distances[j][i] = d;
            }
        }
        distances
            .into_iter()
            .enumerate()
            .map(|(i, mut row)| {
                row.remove(i);
                row.sort_unstable_by(f64::total_cmp);
                row[..neighbours].iter().sum()
            })
            .collect()
    }
}

impl Strategy for KrumServer {
    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let updates = input.updates();
        let (n, f) = (updates.len(), self.params.byzantine);
        if n < needed(f) {
            return Aggregate::model(global.to_vec()).with("krum_skipped", 1.0);
        }
        let scores = self.scores(updates);
        let mut ranked: Vec<usize> = (0..n).collect();
        ranked.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
        ranked.truncate(self.params.multi.min(n - f));
        ranked.sort_unstable();
        let share = (1.0 / ranked.len() as f64) as f32;
        let terms: Vec<(&[f32], f32)> = ranked
            .iter()
            .map(|&i| (updates[i].params.as_slice(), share))
            .collect();
        let best = (0..n).min_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
        let best_client = best.map_or(0, |i| updates[i].clients[0]);
        Aggregate::model(weighted_sum(&terms))
            .with("krum_skipped", 0.0)
            .with("krum_best_client", best_client as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    fn five_updates() -> Vec<Update> {
        // Four honest clients near 0 and one attacker at 10, on one coordinate.
        [0.0, 1.0, -1.0, 0.5, 10.0]
            .iter()
            .enumerate()
            .map(|(i, &v)| update(i, 10, vec![v]))
            .collect()
    }

    #[test]
    fn krum_picks_the_update_closest_to_its_neighbours() {
        // n = 5, f = 1: each score sums the 2 nearest squared distances.
        // 0: {0.25, 1} = 1.25;  1: {0.25, 1} = 1.25;  -1: {1, 2.25} = 3.25;
        // 0.5: {0.25, 0.25} = 0.5;  10: {90.25, 81} = 171.25. Krum keeps 0.5 (client 3).
        let mut krum = KrumServer::new(Params::default());
        let next = krum.aggregate_updates(&round(), &[7.0], &five_updates());
        assert_eq!(next.model, vec![0.5]);
        assert_eq!(next.metrics["krum_best_client"], 3.0);
    }

    #[test]
    fn multi_krum_averages_the_best_scores() {
        // m = 3 keeps clients 3, 0 and 1 (scores 0.5, 1.25, 1.25): mean 0.5.
        let mut krum = KrumServer::new(Params {
            byzantine: 1,
            multi: 3,
        });
        let next = krum.aggregate_updates(&round(), &[7.0], &five_updates());
        assert!((next.model[0] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn too_few_updates_keep_the_global_model() {
        let mut krum = KrumServer::new(Params::default());
        let next = krum.aggregate_updates(&round(), &[7.0], &five_updates()[..4]);
        assert_eq!(next.model, vec![7.0]);
        assert_eq!(next.metrics["krum_skipped"], 1.0);
    }
}
