//! signSGD with majority vote: Bernstein, Wang, Azizzadenesheli and Anandkumar (2018),
//! "signSGD: Compressed Optimisation for Non-Convex Problems", and Bernstein, Zhao,
//! Azizzadenesheli and Anandkumar (2019), "signSGD with Majority Vote is Communication
//! Efficient and Fault Tolerant", with each client's local training as its step. The server
//! moves every value a fixed step `η` in the direction most clients' changes took:
//!
//! ```text
//! x ← x + η sign(Σ_k sign(y_k − x))
//! ```
//!
//! Each client's vote is one bit a value when its uploads go through the `sign` compressor
//! unscaled (`"compression": {"uplink": {"name": "sign", "scaled": false}}`); the server then
//! sums the decoded votes. Without that compressor the clients send their models whole and
//! the server takes the sign of the sum of their changes, which is the vote only where each
//! client's change is already ±1. A value with as many votes each way stays where it is.

use serde::{Deserialize, Serialize};

use super::{
    Aggregate, Algorithm, Collected, EdgeAggregation, Reads, Round, Setting, Strategy, Sum,
    Weighting,
};
use crate::config::check::Problems;

/// signSGD with majority vote: plain local training, and the server half [`SignSgdServer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SignSgd;

/// signSGD's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The server's step `η` on each value.
    pub server_lr: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { server_lr: 0.001 }
    }
}

impl Algorithm for SignSgd {
    type Params = Params;

    fn name(&self) -> &'static str {
        "signsgd"
    }

    fn paper(&self) -> &'static str {
        "Bernstein et al. 2018, signSGD: Compressed Optimisation for Non-Convex Problems (majority vote)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("server_lr", "the server's step η on each value (> 0)")]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("server_lr", params.server_lr);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported("a majority vote counts each client's signs once")
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(SignSgdServer(*params))
    }
}

/// The majority vote's server half.
#[derive(Debug, Clone, Copy)]
pub struct SignSgdServer(Params);

impl Strategy for SignSgdServer {
    fn reads(&self) -> Reads {
        Reads::Sums(vec![Sum::params(Weighting::One)])
    }

    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let updates = input.len() as f64;
        let [sum] = input.into_sums();
        let step = self.0.server_lr;
        let model = sum
            .iter()
            .zip(global)
            .map(|(&sum, &start)| {
                let votes = f64::from(sum) - updates * f64::from(start);
                let direction = if votes > 0.0 {
                    1.0
                } else if votes < 0.0 {
                    -1.0
                } else {
                    0.0
                };
                (f64::from(start) + step * direction) as f32
            })
            .collect();
        Aggregate::model(model)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    #[test]
    fn each_value_moves_a_step_the_way_most_clients_voted() {
        let mut server = SignSgdServer(Params { server_lr: 0.5 });
        let global = [1.0, 1.0, 1.0];
        // Votes as the sign compressor decodes them: the model sent plus ±1 a value.
        let updates = [
            update(0, 10, vec![2.0, 0.0, 2.0]),
            update(1, 900, vec![2.0, 0.0, 0.0]),
            update(2, 10, vec![0.0, 0.0, 2.0]),
            update(3, 10, vec![0.0, 2.0, 0.0]),
        ];
        let next = server.aggregate_updates(&round(), &global, &updates);
        // Value 0: two votes up, two down; value 1: one up, three down; value 2: two and two.
        assert_eq!(next.model, [1.0, 0.5, 1.0]);
        let updates = &updates[..3];
        let next = server.aggregate_updates(&round(), &global, updates);
        assert_eq!(next.model, [1.5, 0.5, 1.5]);
    }
}
