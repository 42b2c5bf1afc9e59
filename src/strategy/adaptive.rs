//! FedAdagrad, FedAdam and FedYogi: Reddi et al. (2021), "Adaptive Federated Optimization",
//! Algorithm 2. The server treats the clients' mean change as a gradient and takes an
//! adaptive step with it:
//!
//! ```text
//! Δ = Σ_k (n_k / n) y_k - x
//! m ← β1 m + (1 - β1) Δ
//! v ← v + Δ²                                  (FedAdagrad)
//! v ← β2 v + (1 - β2) Δ²                      (FedAdam)
//! v ← v - (1 - β2) Δ² sign(v - Δ²)            (FedYogi)
//! x ← x + η m / (√v + τ)
//! ```
//!
//! with `m` starting at 0 and `v` at `τ²`, and no bias correction, as in the paper. The paper
//! averages `Δ` with equal client weights; fedsim weighs by samples, as FedAvg does, so the
//! three share FedAvg's aggregate (they coincide on balanced clients). No setting of the three
//! reduces to FedAvg exactly (the step is always divided by `√v + τ`): the tests check one
//! step worked by hand instead.

use serde::{Deserialize, Serialize};

use super::vector::{difference, squared_norm};
use super::{
    Aggregate, Algorithm, Collected, EdgeAggregation, Reads, Round, Setting, Strategy, Sum,
    Weighting,
};
use crate::config::check::Problems;
use crate::network::{StateError, Tensors};

/// The paper the three follow.
const PAPER: &str = "Reddi et al. 2021, Adaptive Federated Optimization";

/// One of the three as an [`Algorithm`]: plain local SGD, and [`AdaptiveServer`] with its
/// second-moment rule.
macro_rules! adaptive_algorithm {
    ($(#[$doc:meta])* $algorithm:ident, $name:literal, $rule:expr, $params:ty, $docs:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $algorithm;

        impl Algorithm for $algorithm {
            type Params = $params;

            fn name(&self) -> &'static str {
                $name
            }

            fn paper(&self) -> &'static str {
                PAPER
            }

            fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
                $docs
            }

            fn check(&self, params: &$params, _: &Setting<'_>, problems: &mut Problems) {
                Params::from(*params).check(problems);
            }

            fn edge_rule(&self, _params: &$params) -> EdgeAggregation {
                EdgeAggregation::MODELS
            }

            fn server(&self, params: &$params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
                Box::new(AdaptiveServer::new($rule, Params::from(*params)))
            }
        }
    };
}

adaptive_algorithm!(
    /// FedAdagrad: Adagrad's sum of squares.
    FedAdagrad,
    "fedadagrad",
    Rule::Adagrad,
    AdagradParams,
    ADAGRAD_DOCS
);
adaptive_algorithm!(
    /// FedAdam: Adam's moving average of squares.
    FedAdam,
    "fedadam",
    Rule::Adam,
    Params,
    DOCS
);
adaptive_algorithm!(
    /// FedYogi: Yogi's additive, sign-controlled update.
    FedYogi,
    "fedyogi",
    Rule::Yogi,
    Params,
    DOCS
);

/// Which second-moment rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Sum of squares.
    Adagrad,
    /// Exponential moving average of squares.
    Adam,
    /// Yogi's additive, sign-controlled update.
    Yogi,
}

/// FedAdam's and FedYogi's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Server learning rate `η`.
    pub server_lr: f64,
    /// First-moment decay `β1`, in `[0, 1)`.
    pub beta1: f64,
    /// Second-moment decay `β2`, in `[0, 1)`.
    pub beta2: f64,
    /// Adaptivity `τ`: added to `√v`, and `v` starts at `τ²`.
    pub tau: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            server_lr: 0.01,
            beta1: 0.9,
            beta2: 0.99,
            tau: 1e-3,
        }
    }
}

/// What each parameter means, for `fedsim strategies`.
const DOCS: &[(&str, &str)] = &[
    ("server_lr", "server learning rate η (> 0)"),
    ("beta1", "first-moment decay β1, in [0, 1)"),
    ("beta2", "second-moment decay β2, in [0, 1)"),
    ("tau", "adaptivity τ (> 0): added to √v; v starts at τ²"),
];

/// FedAdagrad's parameters (it has no `β2`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdagradParams {
    /// Server learning rate `η`.
    pub server_lr: f64,
    /// First-moment decay `β1`, in `[0, 1)`.
    pub beta1: f64,
    /// Adaptivity `τ`.
    pub tau: f64,
}

impl Default for AdagradParams {
    fn default() -> Self {
        let Params {
            server_lr,
            beta1,
            tau,
            ..
        } = Params::default();
        Self {
            server_lr,
            beta1,
            tau,
        }
    }
}

/// What each of FedAdagrad's parameters means.
const ADAGRAD_DOCS: &[(&str, &str)] = &[DOCS[0], DOCS[1], DOCS[3]];

impl From<AdagradParams> for Params {
    /// The same values as the shared parameter set (`β2` unused).
    fn from(params: AdagradParams) -> Self {
        Params {
            server_lr: params.server_lr,
            beta1: params.beta1,
            beta2: 0.0,
            tau: params.tau,
        }
    }
}

impl Params {
    /// Adds the rules these values break to `problems`.
    pub(super) fn check(&self, problems: &mut Problems) {
        problems.positive("server_lr", self.server_lr);
        problems.positive("tau", self.tau);
        problems.fraction_below("beta1", self.beta1, 1.0);
        problems.fraction_below("beta2", self.beta2, 1.0);
    }
}

/// The server half of the three algorithms.
#[derive(Debug, Clone)]
pub struct AdaptiveServer {
    rule: Rule,
    params: Params,
    /// First moment `m` (empty until the first round).
    m: Vec<f32>,
    /// Second moment `v` (empty until the first round).
    v: Vec<f32>,
}

impl AdaptiveServer {
    /// A server for `rule` with fresh moments.
    pub fn new(rule: Rule, params: Params) -> Self {
        Self {
            rule,
            params,
            m: Vec::new(),
            v: Vec::new(),
        }
    }
}

impl AdaptiveServer {
    /// One adaptive step from `global` along the pseudo-gradient `delta` (the clients' mean
    /// change), updating the moments: what FedBuff's server takes with its buffer's mean.
    pub fn step(&mut self, global: &[f32], delta: &[f32]) -> Vec<f32> {
        let p = self.params;
        let (lr, beta1, beta2, tau) = (
            p.server_lr as f32,
            p.beta1 as f32,
            p.beta2 as f32,
            p.tau as f32,
        );
        if self.m.is_empty() {
            self.m = vec![0.0; global.len()];
            self.v = vec![tau * tau; global.len()];
        }
        let mut model = global.to_vec();
        for (((x, m), v), &d) in model
            .iter_mut()
            .zip(&mut self.m)
            .zip(&mut self.v)
            .zip(delta)
        {
            *m = beta1 * *m + (1.0 - beta1) * d;
            let d2 = d * d;
            *v = match self.rule {
                Rule::Adagrad => *v + d2,
                Rule::Adam => beta2 * *v + (1.0 - beta2) * d2,
                Rule::Yogi => *v - (1.0 - beta2) * d2 * sign(*v - d2),
            };
            *x += lr * *m / (v.sqrt() + tau);
        }
        model
    }
}

impl Strategy for AdaptiveServer {
    fn reads(&self) -> Reads {
        Reads::Sums(vec![Sum::params(Weighting::Samples)])
    }

    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let [mean] = input.into_sums();
        let delta = difference(&mean, global);
        let model = self.step(global, &delta);
        Aggregate::model(model).with("pseudo_gradient_norm", squared_norm(&delta).sqrt())
    }

    fn state(&self) -> Tensors {
        Tensors::new()
            .with("m", self.m.clone())
            .with("v", self.v.clone())
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        self.m = state.require("m")?.to_vec();
        self.v = state.require("v")?.to_vec();
        Ok(())
    }
}

/// The sign function, with `sign(0) = 0` as Yogi uses it.
fn sign(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    /// One step from x = 1 towards clients averaging 3 (Δ = 2), with η = 0.5, β1 = 0.5,
    /// β2 = 0.75, τ = 0.5 (so v starts at 0.25): m = 0.5 * 2 = 1.
    fn one_step(rule: Rule) -> f32 {
        let params = Params {
            server_lr: 0.5,
            beta1: 0.5,
            beta2: 0.75,
            tau: 0.5,
        };
        let updates = [update(0, 10, vec![2.0]), update(1, 10, vec![4.0])];
        AdaptiveServer::new(rule, params)
            .aggregate_updates(&round(), &[1.0], &updates)
            .model[0]
    }

    #[test]
    fn one_step_of_each_rule_matches_the_hand_computation() {
        // Adagrad: v = 0.25 + 4 = 4.25, x = 1 + 0.5 * 1 / (√4.25 + 0.5).
        let adagrad = 1.0 + 0.5 / (4.25f32.sqrt() + 0.5);
        // Adam: v = 0.75 * 0.25 + 0.25 * 4 = 1.1875.
        let adam = 1.0 + 0.5 / (1.1875f32.sqrt() + 0.5);
        // Yogi: v - Δ² < 0, so v = 0.25 + 0.25 * 4 = 1.25.
        let yogi = 1.0 + 0.5 / (1.25f32.sqrt() + 0.5);
        for (rule, expected) in [
            (Rule::Adagrad, adagrad),
            (Rule::Adam, adam),
            (Rule::Yogi, yogi),
        ] {
            let got = one_step(rule);
            assert!(
                (got - expected).abs() < 1e-6,
                "{rule:?}: {got} != {expected}"
            );
        }
    }
}
