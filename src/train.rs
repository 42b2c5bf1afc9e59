//! Local training and evaluation loops on burn.
//!
//! These are the only functions that run burn's autodiff and optimisers. They take a model and
//! data indices and give back a model and numbers; threads, messages and seeds are the caller's.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha12Rng;
use rayon::prelude::*;

use std::sync::Arc;

use crate::backend::BackendKind;
use crate::config::ClientConfig;
use crate::data::Dataset;
use crate::data::SampleShape;
use crate::model::{Input, ModelConfig, Net, flat};
use crate::report::{ClientAccuracy, Evaluation};
use crate::stop::StopSignal;
use crate::strategy::Objective;
use crate::topology::ModelEvaluator;

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

/// Trains `net` with `budget` SGD steps on `local` data, reshuffled each epoch from `rng`
/// (the last epoch may stop part-way), adding `objective`'s terms (towards `anchor`, the model
/// the client was sent) to each gradient and taking its correction step after each optimiser
/// step. `device` must be the autodiff device the model lives on. Gives up between two steps
/// once `stop` is requested.
#[allow(clippy::too_many_arguments)]
pub fn local_train(
    net: Net,
    local: LocalData<'_>,
    (config, budget): (&ClientConfig, u32),
    (objective, anchor): (&Objective, &[f32]),
    rng: &mut ChaCha12Rng,
    device: &Device,
    stop: &StopSignal,
) -> Result<LocalResult, TrainError> {
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
            let (input, labels) = batch(local.data, chunk, (local.flip_labels, Some(rng)), device);
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
            let mut grads = GradientsParams::from_grads(loss.backward(), &net);
            if let Some(gradient) = &terms.gradient {
                gradient.apply(&net, &mut grads);
            }
            net = optimizer.step(config.lr, net, grads);
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

/// An [`Objective`] as tensors on the device, one per model parameter.
struct ObjectiveTerms {
    /// What each step adds to the gradients, if anything.
    gradient: Option<GradientCorrection>,
    /// The step of its own after each optimiser step, if any.
    correction: Option<CorrectionStep>,
}

impl ObjectiveTerms {
    /// The terms of `objective` for clients whose optimiser has momentum `momentum`. Without
    /// momentum, a correction step and the same vector added to the gradient are one step
    /// (plain SGD is linear in the gradient), so the correction joins the gradient's terms:
    /// one pass over the model less per step.
    fn new(
        objective: &Objective,
        anchor: &[f32],
        net: &Net,
        momentum: f64,
        device: &Device,
    ) -> Self {
        let inner = device.clone().inner();
        let sizes = param_sizes(net);
        let split = |values: &[f32]| -> Vec<Tensor<1>> {
            let mut offset = 0;
            sizes
                .iter()
                .map(|&len| {
                    let part = values[offset..offset + len].to_vec();
                    offset += len;
                    Tensor::from_data(TensorData::new(part, [len]), &inner)
                })
                .collect()
        };
        let (linear, correction) = match (&objective.linear, &objective.correction) {
            (linear, Some(correction)) if momentum == 0.0 => {
                let joined = match linear {
                    Some(linear) => linear.iter().zip(correction).map(|(a, b)| a + b).collect(),
                    None => correction.clone(),
                };
                (Some(joined), None)
            }
            (linear, correction) => (linear.clone(), correction.clone()),
        };
        let gradient =
            (objective.proximal.is_some() || linear.is_some()).then(|| GradientCorrection {
                proximal: objective.proximal.map(|mu| (mu, split(anchor))),
                linear: linear.as_deref().map(split),
            });
        Self {
            gradient,
            correction: correction.as_deref().map(|c| CorrectionStep(split(c))),
        }
    }
}

/// Terms added to each step's gradient: `mu * (w - anchor) + linear` for each parameter `w`.
struct GradientCorrection {
    proximal: Option<(f32, Vec<Tensor<1>>)>,
    linear: Option<Vec<Tensor<1>>>,
}

impl GradientCorrection {
    /// Adds the terms to the gradients of `net`'s parameters.
    fn apply(&self, net: &Net, grads: &mut GradientsParams) {
        net.visit(&mut Corrector {
            correction: self,
            grads,
            index: 0,
        });
    }
}

/// Visits the parameters in flat-vector order, correcting each one's gradient.
struct Corrector<'a> {
    correction: &'a GradientCorrection,
    grads: &'a mut GradientsParams,
    index: usize,
}

impl ModuleVisitor for Corrector<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let index = self.index;
        self.index += 1;
        let Some(mut grad) = self.grads.remove::<D>(param.id) else {
            return;
        };
        let dims = grad.dims();
        if let Some((mu, anchor)) = &self.correction.proximal {
            let w = param.val().inner();
            grad = grad + (w - anchor[index].clone().reshape(dims)).mul_scalar(*mu);
        }
        if let Some(linear) = &self.correction.linear {
            grad = grad + linear[index].clone().reshape(dims);
        }
        self.grads.register(param.id, grad);
    }
}

/// A vector `v` applied after each optimiser step as `w ← w - lr * v`, outside momentum.
struct CorrectionStep(Vec<Tensor<1>>);

impl CorrectionStep {
    /// `net` moved by one step of `lr` against the correction; its parameters stay leaves of
    /// the autodiff graph, as an optimiser step leaves them.
    fn step(&self, net: Net, lr: f64) -> Net {
        net.map(&mut Stepper {
            correction: &self.0,
            lr,
            index: 0,
        })
    }
}

/// Maps the parameters in flat-vector order, stepping each against its correction.
struct Stepper<'a> {
    correction: &'a [Tensor<1>],
    lr: f64,
    index: usize,
}

impl ModuleMapper for Stepper<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let correction = self.correction[self.index].clone();
        self.index += 1;
        param.map(|w| {
            let require_grad = w.is_require_grad();
            let dims = w.dims();
            let stepped = w.inner() - correction.reshape(dims).mul_scalar(self.lr);
            Tensor::from_inner(stepped).set_require_grad(require_grad)
        })
    }
}

/// The number of values of each float parameter of `net`, in flat-vector order.
fn param_sizes(net: &Net) -> Vec<usize> {
    struct Sizes(Vec<usize>);
    impl ModuleVisitor for Sizes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.lazy_shape().num_elements());
        }
    }
    let mut sizes = Sizes(Vec::new());
    net.visit(&mut sizes);
    sizes.0
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

/// Evaluates the model `params` (of architecture `model`) on all of `data`, `batch_size`
/// samples per forward pass. Batches run in parallel on the current rayon pool, each thread
/// with its own model instance; their sums are added in batch order, so the result does not
/// depend on the thread count.
pub fn evaluate(
    model: &ModelConfig,
    params: &[f32],
    data: &Dataset,
    batch_size: usize,
    device: &Device,
) -> Evaluation {
    let all: Vec<usize> = (0..data.len()).collect();
    let new_net = || {
        let net = Net::new(model, data.shape(), device);
        flat::load(net, params)
    };
    let scores: Vec<Score> = all
        .par_chunks(batch_size)
        .map_init(new_net, |net, chunk| {
            evaluate_batch(net, data, chunk, device)
        })
        .collect();
    let mut correct = vec![0_usize; data.num_classes()];
    let mut loss_sum = 0.0;
    for score in &scores {
        correct
            .iter_mut()
            .zip(&score.correct)
            .for_each(|(total, batch)| *total += batch);
        loss_sum += score.loss_sum;
    }
    let class_accuracy = correct
        .iter()
        .zip(data.label_counts(&all))
        .map(|(&hits, samples)| (samples > 0).then(|| hits as f64 / samples as f64))
        .collect();
    Evaluation {
        accuracy: correct.iter().sum::<usize>() as f64 / data.len() as f64,
        loss: loss_sum / data.len() as f64,
        class_accuracy,
    }
}

/// The accuracy of the model `params` on each of `per_client`'s index lists of `data`
/// (none empty). All samples are evaluated together, `batch_size` per forward pass, in
/// parallel on the current rayon pool; the result does not depend on the thread count.
pub fn client_accuracies(
    model: &ModelConfig,
    params: &[f32],
    data: &Dataset,
    per_client: &[&[usize]],
    batch_size: usize,
    device: &Device,
) -> Vec<f64> {
    let all: Vec<usize> = per_client.iter().flat_map(|c| c.iter().copied()).collect();
    let new_net = || {
        let net = Net::new(model, data.shape(), device);
        flat::load(net, params)
    };
    let correct: Vec<bool> = all
        .par_chunks(batch_size)
        .map_init(new_net, |net, chunk| {
            let (logits, labels) = logits(net, data, chunk, device);
            let predicted = logits.argmax(1).squeeze_dim::<1>(1);
            let hits = predicted.equal(labels).into_data();
            hits.iter::<bool>().collect::<Vec<bool>>()
        })
        .flatten()
        .collect();
    let mut offset = 0;
    per_client
        .iter()
        .map(|indices| {
            let hits = correct[offset..offset + indices.len()]
                .iter()
                .filter(|&&h| h)
                .count();
            offset += indices.len();
            hits as f64 / indices.len() as f64
        })
        .collect()
}

/// The samples each client is evaluated on: held out of its training samples, or its own
/// test samples where the data set defines them.
#[derive(Clone)]
pub struct ClientTests {
    /// The split they are in.
    pub data: Arc<Dataset>,
    /// Each client's held-out indices (empty for a client that holds none).
    pub held_out: Arc<Vec<Vec<usize>>>,
}

/// Scores the server's global model on burn: on the test set, and on every client's own test
/// samples where there are any.
pub struct TestEvaluator {
    /// The test set.
    pub test_data: Arc<Dataset>,
    /// Test samples per forward pass.
    pub batch_size: usize,
    /// The architecture, to build the evaluation model.
    pub model: ModelConfig,
    /// The backend that evaluates.
    pub backend: BackendKind,
    /// Each client's test samples, to evaluate on every client too.
    pub clients: Option<ClientTests>,
}

impl ModelEvaluator for TestEvaluator {
    fn test(&self, params: &[f32]) -> Evaluation {
        let device = self.backend.device();
        evaluate(
            &self.model,
            params,
            &self.test_data,
            self.batch_size,
            &device,
        )
    }

    fn clients(&self, params: &[f32]) -> Option<ClientAccuracy> {
        let tests = self.clients.as_ref()?;
        let device = self.backend.device();
        let per_client: Vec<&[usize]> = tests
            .held_out
            .iter()
            .filter(|h| !h.is_empty())
            .map(Vec::as_slice)
            .collect();
        let accuracies = client_accuracies(
            &self.model,
            params,
            &tests.data,
            &per_client,
            self.batch_size,
            &device,
        );
        ClientAccuracy::of(&accuracies)
    }
}

/// The mean loss of `net` on `local` data, `batch_size` samples per forward pass, on this
/// thread alone. A trainer worker calls it: a parallel loop there could steal another
/// client's job onto the same worker while it holds that worker's model.
pub fn mean_loss(net: &Net, local: LocalData<'_>, batch_size: usize, device: &Device) -> f64 {
    let loss_sum: f64 = local
        .indices
        .chunks(batch_size)
        .map(|chunk| evaluate_batch(net, local.data, chunk, device).loss_sum)
        .sum();
    loss_sum / local.indices.len().max(1) as f64
}

/// Correct predictions per class, and the summed loss, over some samples.
struct Score {
    /// Samples classified correctly, by their label.
    correct: Vec<usize>,
    /// The sum of the samples' cross-entropy losses.
    loss_sum: f64,
}

/// Samples per forward pass when evaluating: an evaluation batch (1,000 by default) goes
/// through the model this many at a time and its logits are joined, so the activations of the
/// whole batch (hundreds of MB for the CNN) are never held at once. Each sample's logits do
/// not depend on what else is in its pass, so the scores equal those of one pass.
const FORWARD_CHUNK: usize = 100;

/// The logits of the samples at `indices`, [`FORWARD_CHUNK`] at a time, and their labels.
fn logits(
    net: &Net,
    data: &Dataset,
    indices: &[usize],
    device: &Device,
) -> (Tensor<2>, Tensor<1, Int>) {
    let (parts, labels): (Vec<Tensor<2>>, Vec<Tensor<1, Int>>) = indices
        .chunks(FORWARD_CHUNK)
        .map(|chunk| {
            let (input, labels) = batch(data, chunk, (false, None), device);
            (net.forward(input), labels)
        })
        .unzip();
    (Tensor::cat(parts, 0), Tensor::cat(labels, 0))
}

/// Scores the model on the samples at `indices`.
fn evaluate_batch(net: &Net, data: &Dataset, indices: &[usize], device: &Device) -> Score {
    let (logits, labels) = logits(net, data, indices, device);
    let loss = CrossEntropyLossConfig::new()
        .init(device)
        .forward(logits.clone(), labels.clone());
    let loss_sum = f64::from(loss.into_scalar::<f32>()) * indices.len() as f64;
    let hits = logits
        .argmax(1)
        .squeeze_dim::<1>(1)
        .equal(labels)
        .into_data();
    let mut correct = vec![0; data.num_classes()];
    for (hit, &index) in hits.iter::<bool>().zip(indices) {
        if hit {
            correct[usize::from(data.labels()[index])] += 1;
        }
    }
    Score { correct, loss_sum }
}

/// The samples at `indices` as the model's input and a label tensor, with every label `l` as
/// `C - 1 - l` if `flip_labels`, and the images augmented as the data set says with draws
/// from `augment_rng` if one is given (local training gives its stream; evaluation none).
fn batch(
    data: &Dataset,
    indices: &[usize],
    (flip_labels, augment_rng): (bool, Option<&mut ChaCha12Rng>),
    device: &Device,
) -> (Input, Tensor<1, Int>) {
    let mut features = Vec::with_capacity(indices.len() * data.shape().sample.len());
    let mut labels = Vec::with_capacity(indices.len());
    data.gather(indices, &mut features, &mut labels);
    if let Some(rng) = augment_rng {
        data.augment(&mut features, rng);
    }
    if flip_labels {
        let last = data.num_classes() as i64 - 1;
        labels.iter_mut().for_each(|l| *l = last - *l);
    }
    let n = indices.len();
    let input = match data.shape().sample {
        SampleShape::Image([c, h, w]) => Input::Images(Tensor::from_data(
            TensorData::new(features, [n, c, h, w]),
            device,
        )),
        SampleShape::Row(width) => Input::Rows(Tensor::from_data(
            TensorData::new(features, [n, width]),
            device,
        )),
        // Token ids are small integers, exact in the features' f32.
        SampleShape::Tokens(steps) => {
            let ids: Vec<i64> = features.iter().map(|&id| id as i64).collect();
            Input::Tokens(Tensor::from_data(TensorData::new(ids, [n, steps]), device))
        }
    };
    let labels = Tensor::from_data(TensorData::new(labels, [n]), device);
    (input, labels)
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
    use crate::backend::BackendKind;
    use crate::data::DataShape;
    use crate::model::flat::{Layout, initial_params};
    use crate::seed::{Purpose, stream};

    /// 250 synthetic 28x28 images of 10 classes.
    fn images() -> Dataset {
        let values = (0..250 * 784).map(|i| ((i * 37) % 251) as u8).collect();
        let labels = (0..250).map(|i| (i % 10) as u8).collect();
        let shape = DataShape {
            sample: SampleShape::Image([1, 28, 28]),
            num_classes: 10,
        };
        Dataset::from_bytes(values, |v| f32::from(v) / 255.0, labels, shape)
    }

    #[test]
    fn logits_in_chunks_equal_those_of_one_pass_to_the_bit() {
        let data = images();
        let device = BackendKind::Flex.device();
        let indices: Vec<usize> = (0..data.len()).rev().collect();
        for kind in [ModelConfig::mlp(), ModelConfig::Cnn {}] {
            let net = Net::new(&kind, data.shape(), &device);
            let params =
                initial_params(&Layout::of(&net), &mut stream(5, Purpose::MODEL_INIT, 0, 0));
            let net = flat::load(net, &params);
            let (chunked, _) = logits(&net, &data, &indices, &device);
            let (images, _) = batch(&data, &indices, (false, None), &device);
            let whole = net.forward(images);
            assert_eq!(chunked.into_data(), whole.into_data(), "{kind:?}");
        }
    }
}
