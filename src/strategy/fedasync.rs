//! FedAsync: Xie, Koyejo and Gupta (2019), "Asynchronous Federated Optimization". The server
//! mixes each client's model into the global model as soon as it arrives, weighted down by its
//! staleness `t - τ` (server steps since the client was sent the model it trained from):
//!
//! ```text
//! α_t = α · s(t - τ)
//! x ← (1 - α_t) x + α_t x_new
//! ```
//!
//! with `s` one of the paper's three staleness functions (constant, polynomial, hinge). Each
//! client minimises its loss plus the paper's proximal term `ρ/2 |w - x_τ|²` (FedProx's term,
//! with `ρ` for `μ`).
//!
//! **In synchronous rounds** every update has staleness 0, and the round's sample-weighted mean
//! `x̄` is mixed in at once: `x ← (1 - α) x + α x̄`, so `α = 1` is FedAvg to the bit.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::vector::combination;
use super::{
    Aggregate, Algorithm, Arrival, AsyncStrategy, ClientAlgorithm, Collected, EdgeAggregation,
    ProximalClient, Reads, Reduction, Round, Setting, Strategy, Sum, Weighting,
};
use crate::config::check::Problems;

/// FedAsync: staleness-weighted mixing on the server, the proximal term on the clients.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAsync;

/// FedAsync's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The mixing weight `α`, in `(0, 1]`.
    pub alpha: f64,
    /// The staleness function `s`.
    pub staleness: Staleness,
    /// The proximal weight `ρ` of the local objective, at least 0.
    pub rho: f64,
}

impl Default for Params {
    /// The paper's MNIST-like settings: `α = 0.6`, no staleness weighting, no proximal term.
    fn default() -> Self {
        Self {
            alpha: 0.6,
            staleness: Staleness::Constant,
            rho: 0.0,
        }
    }
}

/// How much an update `t - τ` server steps stale still counts (the paper's `s`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Staleness {
    /// `s = 1`.
    Constant,
    /// `s = (t - τ + 1)^(-a)`.
    Polynomial {
        /// The exponent `a`, at least 0.
        a: f64,
    },
    /// `s = 1` when `t - τ <= b`, else `1 / (a (t - τ - b) + 1)`.
    Hinge {
        /// The slope `a`, at least 0.
        a: f64,
        /// The staleness `b` up to which updates count fully, at least 0.
        b: f64,
    },
}

impl Staleness {
    /// `s(staleness)`.
    pub fn weight(&self, staleness: u32) -> f64 {
        let stale = f64::from(staleness);
        match *self {
            Staleness::Constant => 1.0,
            Staleness::Polynomial { a } => (stale + 1.0).powf(-a),
            Staleness::Hinge { b, .. } if stale <= b => 1.0,
            Staleness::Hinge { a, b } => 1.0 / (a * (stale - b) + 1.0),
        }
    }

    fn check(&self, problems: &mut Problems) {
        match *self {
            Staleness::Constant => {}
            Staleness::Polynomial { a } => problems.non_negative("a", a),
            Staleness::Hinge { a, b } => {
                problems.non_negative("a", a);
                problems.non_negative("b", b);
            }
        }
    }
}

impl Algorithm for FedAsync {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedasync"
    }

    fn paper(&self) -> &'static str {
        "Xie et al. 2019, Asynchronous Federated Optimization"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("alpha", "mixing weight α, in (0, 1]"),
            (
                "staleness",
                "s(t - τ): {\"kind\": \"constant\"}, {\"kind\": \"polynomial\", \"a\": 0.5} \
                 ((t - τ + 1)^-a) or {\"kind\": \"hinge\", \"a\": 10, \"b\": 4} (1 up to b, \
                 then 1 / (a (t - τ - b) + 1))",
            ),
            ("rho", "proximal weight ρ of the local objective (≥ 0)"),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        let alpha = params.alpha;
        problems.require(alpha > 0.0 && alpha <= 1.0, "alpha", || {
            format!("is {alpha}; must be in (0, 1]")
        });
        problems.at("staleness", |p| params.staleness.check(p));
        problems.non_negative("rho", params.rho);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAsyncServer { params: *params })
    }

    fn asynchronous(
        &self,
        params: &Params,
        _: &Setting<'_>,
        _: usize,
    ) -> Option<Box<dyn AsyncStrategy>> {
        Some(Box::new(FedAsyncServer { params: *params }))
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(ProximalClient {
            mu: params.rho as f32,
        })
    }

    /// Mixing the whole mean in, FedAvg.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to(
            "fedavg",
            Params {
                alpha: 1.0,
                ..Params::default()
            },
        )]
    }
}

/// FedAsync's server half, in rounds and asynchronously.
#[derive(Debug, Clone, Copy)]
pub struct FedAsyncServer {
    params: Params,
}

impl FedAsyncServer {
    /// `(1 - weight) global + weight model`, exactly `model` when `weight` is 1.
    fn mix(global: &[f32], model: &[f32], weight: f64) -> Vec<f32> {
        let weight = weight as f32;
        combination(&[(global, 1.0 - weight), (model, weight)])
    }
}

impl Strategy for FedAsyncServer {
    fn reads(&self) -> Reads {
        Reads::Sums(vec![Sum::params(Weighting::Samples)])
    }

    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let [mean] = input.into_sums();
        Aggregate::model(Self::mix(global, &mean, self.params.alpha))
    }
}

impl AsyncStrategy for FedAsyncServer {
    fn receive(&mut self, global: &[f32], arrival: Arrival<'_>) -> Option<Aggregate> {
        let alpha_t = self.params.alpha * self.params.staleness.weight(arrival.staleness);
        let model = Self::mix(global, &arrival.update.params, alpha_t);
        Some(Aggregate::model(model).with("alpha_t", alpha_t))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::update;
    use super::*;

    #[test]
    fn the_staleness_functions_follow_the_paper() {
        assert_eq!(Staleness::Constant.weight(7), 1.0);
        let polynomial = Staleness::Polynomial { a: 0.5 };
        assert_eq!(polynomial.weight(0), 1.0);
        assert!((polynomial.weight(3) - 0.5).abs() < 1e-12);
        let hinge = Staleness::Hinge { a: 10.0, b: 4.0 };
        assert_eq!(hinge.weight(4), 1.0);
        assert!((hinge.weight(6) - 1.0 / 21.0).abs() < 1e-12);
    }

    #[test]
    fn each_update_is_a_step_mixed_in_by_its_staleness() {
        let params = Params {
            alpha: 0.5,
            staleness: Staleness::Polynomial { a: 1.0 },
            rho: 0.0,
        };
        let mut server = FedAsyncServer { params };
        let arrived = update(3, 10, vec![4.0]);
        let arrival = Arrival {
            update: &arrived,
            sent: &[0.0],
            staleness: 1,
        };
        // α_t = 0.5 / 2 = 0.25: x = 0.75 * 2 + 0.25 * 4 = 2.5.
        let step = server.receive(&[2.0], arrival).expect("every update steps");
        assert_eq!(step.model, vec![2.5]);
        assert_eq!(step.metrics["alpha_t"], 0.25);
    }
}
