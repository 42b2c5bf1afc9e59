//! Coordinate-wise trimmed mean: Yin, Chen, Ramchandran and Bartlett (2018),
//! "Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates". For each
//! parameter, the `k = ⌊β n⌋` largest and `k` smallest of the `n` client values are removed
//! and the rest averaged, clients counting equally.
//!
//! Since `β < 1/2`, at least one value always remains, whatever number of updates arrives
//! (with few updates `k` may be 0, and the rule is the plain mean). The kept values are added
//! in client order, so trim 0 is the plain mean to the bit.

use serde::{Deserialize, Serialize};

use super::vector::coordinatewise;
use super::{
    Aggregate, Algorithm, Collected, EdgeAggregation, Reduction, Round, Setting, Strategy,
};
use crate::config::check::Problems;

/// The coordinate-wise trimmed mean: plain local SGD, and the server half
/// [`TrimmedMeanServer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TrimmedMean;

impl Algorithm for TrimmedMean {
    type Params = Params;

    fn name(&self) -> &'static str {
        "trimmed_mean"
    }

    fn paper(&self) -> &'static str {
        super::median::PAPER
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "trim",
            "fraction β trimmed from each end of every coordinate, in [0, 0.5)",
        )]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.fraction_below("trim", params.trim, 0.5);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::ROBUST
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(TrimmedMeanServer::new(*params))
    }

    /// Trimming nothing is the plain mean, which is FedAvg's on equal clients.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to("fedavg", Params { trim: 0.0 }).on_equal_clients()]
    }
}

/// The trimmed mean's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Fraction `β` of values trimmed from each end, in `[0, 0.5)`.
    pub trim: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { trim: 0.1 }
    }
}

/// The server half.
#[derive(Debug, Clone, Copy)]
pub struct TrimmedMeanServer {
    trim: f64,
}

impl TrimmedMeanServer {
    /// A server trimming `params.trim` from each end.
    pub fn new(params: Params) -> Self {
        Self { trim: params.trim }
    }
}

impl Strategy for TrimmedMeanServer {
    fn aggregate(
        &mut self,
        _round: &Round<'_>,
        _global: &[f32],
        input: Collected<'_>,
    ) -> Aggregate {
        let updates = input.updates();
        let n = updates.len();
        let k = (self.trim * n as f64).floor() as usize;
        let share = (1.0 / (n - 2 * k) as f64) as f32;
        let models: Vec<&[f32]> = updates.iter().map(|u| u.params.as_slice()).collect();
        let model = coordinatewise(&models, |column| trimmed_mean(column, k, share));
        Aggregate::model(model).with("trimmed_per_side", k as f64)
    }
}

/// The mean of `values` without their `k` smallest and `k` largest, the kept values added in
/// their given order with weight `share` each.
fn trimmed_mean(values: &mut [f32], k: usize, share: f32) -> f32 {
    let mut sum = 0.0f32;
    if k == 0 {
        for &v in values.iter() {
            sum += share * v;
        }
        return sum;
    }
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_unstable_by(|&a, &b| values[a].total_cmp(&values[b]).then(a.cmp(&b)));
    let mut kept = order[k..values.len() - k].to_vec();
    kept.sort_unstable();
    for i in kept {
        sum += share * values[i];
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::super::FedAvgServer;
    use super::super::testing::{round, update};
    use super::super::vector::reference::{Weight, mean_params};
    use super::*;
    use crate::network::Update;

    #[test]
    fn trims_each_end_of_each_coordinate() {
        // Five clients, β = 0.2: one value off each end. {1, 2, 3, 4, 100} -> 3,
        // {-50, 0, 0, 3, 3} -> 1.
        let values = [
            (1.0, -50.0),
            (2.0, 0.0),
            (3.0, 0.0),
            (4.0, 3.0),
            (100.0, 3.0),
        ];
        let updates: Vec<Update> = values
            .iter()
            .enumerate()
            .map(|(i, &(a, b))| update(i, 10, vec![a, b]))
            .collect();
        let next = TrimmedMeanServer::new(Params { trim: 0.2 }).aggregate_updates(
            &round(),
            &[0.0; 2],
            &updates,
        );
        assert_eq!(next.model, vec![3.0, 1.0]);
    }

    #[test]
    fn trim_zero_with_equal_weights_is_fedavg_to_the_bit() {
        let updates = [
            update(0, 25, vec![0.1, 0.2, -0.37]),
            update(1, 25, vec![1.7, -0.2, 0.3]),
            update(2, 25, vec![-0.9, 0.01, 2.5]),
        ];
        let trimmed = TrimmedMeanServer::new(Params { trim: 0.0 }).aggregate_updates(
            &round(),
            &[0.0; 3],
            &updates,
        );
        assert_eq!(
            trimmed.model,
            FedAvgServer
                .aggregate_updates(&round(), &[0.0; 3], &updates)
                .model
        );
        assert_eq!(trimmed.model, mean_params(&updates, Weight::Clients));
    }
}
