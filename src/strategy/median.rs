//! Coordinate-wise median: Yin, Chen, Ramchandran and Bartlett (2018), "Byzantine-Robust
//! Distributed Learning: Towards Optimal Statistical Rates". Each parameter of the next model
//! is the median of that parameter over the round's client models, so a minority of
//! arbitrary uploads cannot move it far. Clients count equally (sample counts are what an
//! attacker would lie about).
//!
//! Any number of updates works: the median of one update is that update, of an even number
//! the mean of the two middle values.

use super::vector::coordinatewise;
use super::{Aggregate, Algorithm, Collected, EdgeAggregation, NoParams, Round, Setting, Strategy};

/// The paper the median and the trimmed mean follow.
pub(super) const PAPER: &str =
    "Yin et al. 2018, Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates";

/// The coordinate-wise median: plain local SGD, and the server half [`MedianServer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Median;

impl Algorithm for Median {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        "median"
    }

    fn paper(&self) -> &'static str {
        PAPER
    }

    fn edge_rule(&self, _params: &NoParams) -> EdgeAggregation {
        EdgeAggregation::ROBUST
    }

    fn server(&self, _: &NoParams, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(MedianServer)
    }
}

/// The server half.
#[derive(Debug, Clone, Copy, Default)]
pub struct MedianServer;

impl Strategy for MedianServer {
    fn aggregate(
        &mut self,
        _round: &Round<'_>,
        _global: &[f32],
        input: Collected<'_>,
    ) -> Aggregate {
        let updates = input.updates();
        let models: Vec<&[f32]> = updates.iter().map(|u| u.params.as_slice()).collect();
        Aggregate::model(coordinatewise(&models, median))
    }
}

/// The median of `values` (reordering them).
fn median(values: &mut [f32]) -> f32 {
    values.sort_unstable_by(f32::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    #[test]
    fn takes_the_median_of_each_coordinate() {
        // Coordinates: {1, 9, 2} -> 2, {-5, 0, 100} -> 0, {3, 3, 3} -> 3.
        let updates = [
            update(0, 1, vec![1.0, -5.0, 3.0]),
            update(1, 1000, vec![9.0, 0.0, 3.0]),
            update(2, 1, vec![2.0, 100.0, 3.0]),
        ];
        let next = MedianServer.aggregate_updates(&round(), &[0.0; 3], &updates);
        assert_eq!(next.model, vec![2.0, 0.0, 3.0]);
        let even = MedianServer.aggregate_updates(&round(), &[0.0; 3], &updates[..2]);
        assert_eq!(even.model, vec![5.0, -2.5, 3.0]);
    }
}
