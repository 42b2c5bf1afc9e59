//! The optimiser an experiment's `client` section configures, as burn builds it.

use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, ModuleOptimizer, SgdConfig};

use crate::config::{ClientConfig, OptimizerConfig};

/// A fresh optimiser as `config` sets it: no momentum buffer or moments yet.
pub(super) fn configured(config: &ClientConfig) -> ModuleOptimizer {
    let weight_decay = (config.weight_decay > 0.0).then_some(WeightDecayConfig {
        penalty: config.weight_decay as f32,
    });
    match config.optimizer {
        OptimizerConfig::Sgd => sgd(config.momentum).with_weight_decay(weight_decay).init(),
        OptimizerConfig::Adam {
            beta_1,
            beta_2,
            epsilon,
        } => AdamConfig::new()
            .with_beta_1(beta_1 as f32)
            .with_beta_2(beta_2 as f32)
            .with_epsilon(epsilon as f32)
            .with_weight_decay(weight_decay)
            .init(),
    }
}

/// Whether a step of `config`'s optimiser is linear in the gradient (plain SGD without
/// momentum), so that two vectors stepped apart or added to one gradient move the model alike.
pub(super) fn is_linear(config: &ClientConfig) -> bool {
    config.optimizer == OptimizerConfig::Sgd && config.momentum == 0.0
}

/// PyTorch's SGD: momentum without dampening, weight decay added to the gradient.
fn sgd(momentum: f64) -> SgdConfig {
    let momentum = (momentum > 0.0).then_some(MomentumConfig {
        momentum,
        dampening: 0.0,
        nesterov: false,
    });
    SgdConfig::new().with_momentum(momentum)
}
