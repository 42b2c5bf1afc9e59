//! The `client.optimizer` setting: the optimiser of local training. SGD is PyTorch's (with
//! `client.momentum` and `client.weight_decay`); Adam is Kingma and Ba's (2015), with
//! `client.weight_decay` as an L2 term added to the gradient, as PyTorch's `Adam` adds it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::check::{Problems, Validate};

/// The `client.optimizer` setting.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum OptimizerConfig {
    /// Stochastic gradient descent with `client.momentum` (the default).
    #[default]
    Sgd,
    /// Adam, its moments started afresh each time a client trains.
    Adam {
        /// Decay of the first moment's running mean.
        #[serde(default = "default_beta_1")]
        beta_1: f64,
        /// Decay of the second moment's running mean.
        #[serde(default = "default_beta_2")]
        beta_2: f64,
        /// Added to the second moment's root, against division by zero.
        #[serde(default = "default_epsilon")]
        epsilon: f64,
    },
}

fn default_beta_1() -> f64 {
    0.9
}

fn default_beta_2() -> f64 {
    0.999
}

fn default_epsilon() -> f64 {
    1e-8
}

impl OptimizerConfig {
    /// Whether this is the default, which the resolved config leaves out.
    pub fn is_sgd(&self) -> bool {
        *self == OptimizerConfig::Sgd
    }
}

impl Validate for OptimizerConfig {
    /// `client.momentum`, which only SGD takes.
    type Context<'a> = f64;

    fn validate(&self, momentum: f64, problems: &mut Problems) {
        let OptimizerConfig::Adam {
            beta_1,
            beta_2,
            epsilon,
        } = *self
        else {
            return;
        };
        problems.fraction_below("beta_1", beta_1, 1.0);
        problems.fraction_below("beta_2", beta_2, 1.0);
        problems.positive("epsilon", epsilon);
        problems.require(momentum == 0.0, "name", || {
            format!(
                "is \"adam\", which keeps its own running mean of the gradient: leave \
                 client.momentum out (it is {momentum})"
            )
        });
    }
}
