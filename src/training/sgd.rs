//! The SGD loop of one client's local training on burn: steps on the loss and the algorithm's
//! terms, a clear error when the loss diverges, and the stop between two steps.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::SgdConfig;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::tensor::Device;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha12Rng;

use super::batch::{Altered, batch};
use super::objective::ObjectiveTerms;
use crate::config::ClientConfig;
use crate::data::Dataset;
use crate::model::Net;
use crate::stop::StopSignal;
use crate::strategy::Objective;

/// Local training that cannot go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrainError {
    /// The loss became NaN or infinite; the steps are usually too long.
    #[error("training diverged: loss is {loss} at epoch {epoch}, step {step} ({hint})")]
    Diverged {
        /// The non-finite loss.
        loss: f64,
        /// Epoch, from 1.
        epoch: u32,
        /// Step within the epoch, from 1.
        step: usize,
        /// What to change, from the local settings.
        hint: String,
    },
    /// A failure injected by the experiment's `faults`.
    #[error("injected failure")]
    Injected,
    /// The run is being stopped (Ctrl-C, SIGTERM); the client gave up between two steps.
    #[error("stopped with the run")]
    Stopped,
}

/// What local training produced.
#[derive(Debug)]
pub struct LocalResult {
    /// The trained model.
    pub net: Net,
    /// Mean loss over every sample of every local step.
    pub mean_loss: f64,
    /// SGD steps taken.
    pub steps: u32,
}

/// A client's training data.
#[derive(Debug, Clone, Copy)]
pub struct LocalData<'a> {
    /// The data set.
    pub data: &'a Dataset,
    /// The client's samples in it.
    pub indices: &'a [usize],
    /// Whether the client sees every label `l` as `C - 1 - l` (a label-flipping attacker).
    pub flip_labels: bool,
}

/// What one client's local training does: its settings, its number of steps, and what it
/// optimises besides the loss.
#[derive(Debug, Clone, Copy)]
pub struct LocalTask<'a> {
    /// Batch size, learning rate, momentum and weight decay.
    pub config: &'a ClientConfig,
    /// SGD steps to take.
    pub budget: u32,
    /// The algorithm's terms and correction.
    pub objective: &'a Objective,
    /// The model the client was sent, which the terms pull towards.
    pub anchor: &'a [f32],
}

/// Trains `net` with `task.budget` SGD steps on `local` data, reshuffled each epoch from `rng`
/// (the last epoch may stop part-way), adding the objective's terms to each gradient and taking
/// its correction step after each optimiser step. `device` must be the autodiff device the
/// model lives on. Gives up between two steps once `stop` is requested.
pub fn local_train(
    net: Net,
    local: LocalData<'_>,
    task: LocalTask<'_>,
    rng: &mut ChaCha12Rng,
    device: &Device,
    stop: &StopSignal,
) -> Result<LocalResult, TrainError> {
    let LocalTask {
        config,
        budget,
        objective,
        anchor,
    } = task;
    let mut optimizer = sgd(config).init();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let terms = ObjectiveTerms::new(objective, anchor, &net, config.momentum, device);
    let mut order = local.indices.to_vec();
    let (mut net, mut loss_sum, mut seen, mut steps) = (net, 0.0, 0usize, 0u32);
    let mut epoch = 0;
    while steps < budget {
        epoch += 1;
        order.shuffle(rng);
        for (step, chunk) in order.chunks(config.batch_size).enumerate() {
            if steps == budget {
                break;
            }
            if stop.is_requested() {
                return Err(TrainError::Stopped);
            }
            let altered = Altered {
                flip_labels: local.flip_labels,
                augment: Some(rng),
            };
            let (input, labels) = batch(local.data, chunk, altered, device);
            let loss = loss_fn.forward(net.forward(input), labels);
            let loss_value = f64::from(loss.clone().into_scalar::<f32>());
            if !loss_value.is_finite() {
                return Err(TrainError::Diverged {
                    loss: loss_value,
                    epoch,
                    step: step + 1,
                    hint: divergence_hint(config),
                });
            }
            loss_sum += loss_value * chunk.len() as f64;
            seen += chunk.len();
            let mut grads = net.gradients(loss);
            if let Some(gradient) = &terms.gradient {
                gradient.apply(&net, &mut grads);
            }
            net = net.step(&mut optimizer, config.lr, grads);
            if let Some(correction) = &terms.correction {
                net = correction.step(net, config.lr);
            }
            steps += 1;
        }
    }
    Ok(LocalResult {
        net,
        mean_loss: loss_sum / seen.max(1) as f64,
        steps,
    })
}

/// What to change when local training with `config` diverges. Without momentum the steps of
/// `client.lr` are too long. With momentum β each step, once the buffer has filled, is
/// `lr / (1 - β)` long (ten times `lr` at 0.9), and so is every term the algorithm adds to the
/// gradient: a rate that trains without momentum can diverge with it.
fn divergence_hint(config: &ClientConfig) -> String {
    let beta = config.momentum;
    if beta == 0.0 {
        return "try a lower client.lr".to_string();
    }
    let factor = 1.0 / (1.0 - beta);
    format!(
        "client.momentum {beta} makes each step about {} times client.lr, {} in effect: try a \
         lower client.lr or client.momentum",
        significant(factor),
        significant(config.lr * factor)
    )
}

/// `value` to three significant digits, without trailing zeros: `10`, `0.5`, `0.00333`.
fn significant(value: f64) -> String {
    let decimals = (2 - value.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// PyTorch's SGD: momentum without dampening, weight decay added to the gradient.
fn sgd(config: &ClientConfig) -> SgdConfig {
    let momentum = (config.momentum > 0.0).then_some(MomentumConfig {
        momentum: config.momentum,
        dampening: 0.0,
        nesterov: false,
    });
    let weight_decay = (config.weight_decay > 0.0).then_some(WeightDecayConfig {
        penalty: config.weight_decay as f32,
    });
    SgdConfig::new()
        .with_momentum(momentum)
        .with_weight_decay(weight_decay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divergence_names_momentum_when_it_lengthens_the_steps() {
        let config = |lr, momentum| ClientConfig {
            lr,
            momentum,
            ..serde_json::from_str(r#"{"lr": 1}"#).unwrap()
        };
        assert_eq!(divergence_hint(&config(0.05, 0.0)), "try a lower client.lr");
        assert_eq!(
            divergence_hint(&config(0.05, 0.9)),
            "client.momentum 0.9 makes each step about 10 times client.lr, 0.5 in effect: try a lower client.lr or client.momentum"
        );
        assert_eq!(significant(1.0 / 3.0 / 100.0), "0.00333");
    }
}
