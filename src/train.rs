//! Local training and evaluation loops on burn.
//!
//! These are the only functions that run burn's autodiff and optimisers. They take a model and
//! data indices and give back a model and numbers; threads, messages and seeds are the caller's.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha12Rng;
use rayon::prelude::*;

use crate::config::ClientConfig;
use crate::data::Dataset;
use crate::model::{ModelKind, Net, flat};
use crate::stop::StopSignal;

/// Local training that cannot go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrainError {
    /// The loss became NaN or infinite; the learning rate is usually too high.
    #[error(
        "training diverged: loss is {loss} at epoch {epoch}, step {step} (try a lower client.lr)"
    )]
    Diverged {
        /// The non-finite loss.
        loss: f64,
        /// Epoch, from 1.
        epoch: u32,
        /// Step within the epoch, from 1.
        step: usize,
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
}

/// Trains `net` with SGD on the samples at `indices`, reshuffled each epoch from `rng`.
/// `device` must be the autodiff device the model lives on. Gives up between two steps once
/// `stop` is requested.
pub fn local_train(
    net: Net,
    data: &Dataset,
    indices: &[usize],
    config: &ClientConfig,
    rng: &mut ChaCha12Rng,
    device: &Device,
    stop: &StopSignal,
) -> Result<LocalResult, TrainError> {
    let mut optimizer = sgd(config).init();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let mut order = indices.to_vec();
    let (mut net, mut loss_sum, mut seen) = (net, 0.0, 0usize);
    for epoch in 1..=config.epochs {
        order.shuffle(rng);
        for (step, chunk) in order.chunks(config.batch_size).enumerate() {
            if stop.is_requested() {
                return Err(TrainError::Stopped);
            }
            let (images, labels) = batch(data, chunk, device);
            let loss = loss_fn.forward(net.forward(images), labels);
            let loss_value = f64::from(loss.clone().into_scalar::<f32>());
            if !loss_value.is_finite() {
                return Err(TrainError::Diverged {
                    loss: loss_value,
                    epoch,
                    step: step + 1,
                });
            }
            loss_sum += loss_value * chunk.len() as f64;
            seen += chunk.len();
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optimizer.step(config.lr, net, grads);
        }
    }
    Ok(LocalResult {
        net,
        mean_loss: loss_sum / seen.max(1) as f64,
    })
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

/// Accuracy and mean loss of a model on a data set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Fraction of samples classified correctly.
    pub accuracy: f64,
    /// Mean cross-entropy loss.
    pub loss: f64,
}

/// Evaluates the model `params` (of architecture `model`) on all of `data`, `batch_size`
/// samples per forward pass. Batches run in parallel on the current rayon pool, each thread
/// with its own model instance; their sums are added in batch order, so the result does not
/// depend on the thread count.
pub fn evaluate(
    model: ModelKind,
    params: &[f32],
    data: &Dataset,
    batch_size: usize,
    device: &Device,
) -> Evaluation {
    let all: Vec<usize> = (0..data.len()).collect();
    let new_net = || {
        let net = Net::new(model, data.sample_shape(), data.num_classes(), device);
        flat::load(net, params)
    };
    let sums: Vec<(i64, f64)> = all
        .par_chunks(batch_size)
        .map_init(new_net, |net, chunk| {
            evaluate_batch(net, data, chunk, device)
        })
        .collect();
    let (correct, loss_sum) = sums
        .iter()
        .fold((0, 0.0), |(c, l), &(bc, bl)| (c + bc, l + bl));
    Evaluation {
        accuracy: correct as f64 / data.len() as f64,
        loss: loss_sum / data.len() as f64,
    }
}

/// Correct predictions and summed loss over the samples at `indices`.
fn evaluate_batch(net: &Net, data: &Dataset, indices: &[usize], device: &Device) -> (i64, f64) {
    let (images, labels) = batch(data, indices, device);
    let logits = net.forward(images);
    let loss = CrossEntropyLossConfig::new()
        .init(device)
        .forward(logits.clone(), labels.clone());
    let loss_sum = f64::from(loss.into_scalar::<f32>()) * indices.len() as f64;
    let predicted = logits.argmax(1).squeeze_dim::<1>(1);
    let correct = predicted.equal(labels).int().sum().into_scalar::<i64>();
    (correct, loss_sum)
}

/// The samples at `indices` as an image tensor and a label tensor.
fn batch(data: &Dataset, indices: &[usize], device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
    let mut features = Vec::with_capacity(indices.len() * data.feature_len());
    let mut labels = Vec::with_capacity(indices.len());
    data.gather(indices, &mut features, &mut labels);
    let [c, h, w] = data.sample_shape();
    let images = Tensor::from_data(TensorData::new(features, [indices.len(), c, h, w]), device);
    let labels = Tensor::from_data(TensorData::new(labels, [indices.len()]), device);
    (images, labels)
}
