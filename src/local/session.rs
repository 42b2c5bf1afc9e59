//! The session one client trains in: its batches in their seeded order, within its budget of
//! steps, and the parts of a step (the loss, the optimiser, the learning rate, the check that
//! the loss stayed finite) that fedsim's loop and a client half's own loop share.

use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha12Rng;

use super::batch::{Altered, batch};
use super::{LocalData, TrainError, optimizer};
use crate::config::ClientConfig;
use crate::model::{Input, Net};
use crate::network::Tensors;
use crate::stop::StopSignal;

/// One batch of a client's training data, as its network takes it.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The samples.
    pub input: Input,
    /// Their labels.
    pub labels: Tensor<1, Int>,
}

/// What local training produced.
#[derive(Debug)]
pub struct TrainedNet {
    /// The trained network.
    pub net: Net,
    /// Mean loss over every sample of every step, as [`LocalTraining::record_loss`] saw it.
    pub mean_loss: f64,
    /// Steps taken (batches handed out).
    pub steps: u32,
    /// Tensors a client half's own loop keeps for its `finish` besides the network (APFL's and
    /// pFedMe's personal models, FedALA's aggregation weights); none by default.
    pub kept: Tensors,
}

impl TrainedNet {
    /// This result, with `kept` for the client half's `finish`.
    pub fn keeping(self, kept: Tensors) -> Self {
        Self { kept, ..self }
    }
}

/// Where a session stands in its epochs.
#[derive(Debug, Default)]
struct Place {
    /// The epoch, from 1 (0 before the first batch).
    epoch: u32,
    /// The step within the epoch, from 1.
    step: usize,
    /// Where the next batch starts in the epoch's order.
    next: usize,
    /// Samples in the last batch handed out.
    last_len: usize,
}

/// A client's local training as it starts: its data, reshuffled each epoch from its seeded
/// stream (the last epoch may stop part-way), a budget of steps, and its settings.
///
/// A loop over it hands out batches with [`LocalTraining::next_batch`] until the budget is
/// spent, records each step's loss with [`LocalTraining::record_loss`] (which ends training
/// with [`TrainError::Diverged`] when the loss is not finite), and ends with
/// [`LocalTraining::finish`]. [`super::train_on_objective`] is fedsim's own.
pub struct LocalTraining<'a> {
    parts: SessionParts<'a>,
    loss_fn: CrossEntropyLoss,
    order: Vec<usize>,
    place: Place,
    steps: u32,
    loss_sum: f64,
    seen: usize,
}

/// What a [`LocalTraining`] is made of.
pub(crate) struct SessionParts<'a> {
    /// The client's data.
    pub local: LocalData<'a>,
    /// Its settings.
    pub config: &'a ClientConfig,
    /// Steps to take.
    pub budget: u32,
    /// Its seeded stream: the shuffles, augmentation, and any draw of the client half.
    pub rng: &'a mut ChaCha12Rng,
    /// The autodiff device its network lives on.
    pub device: &'a Device,
    /// The run's stop request.
    pub stop: &'a StopSignal,
    /// The model training starts from.
    pub start: &'a [f32],
    /// Builds another network of the model's architecture with the given parameters.
    pub build: &'a dyn Fn(&[f32]) -> Net,
}

impl<'a> LocalTraining<'a> {
    /// A session of `parts`, before its first batch.
    pub(crate) fn new(parts: SessionParts<'a>) -> Self {
        Self {
            loss_fn: CrossEntropyLossConfig::new().init(parts.device),
            order: parts.local.indices.to_vec(),
            parts,
            place: Place::default(),
            steps: 0,
            loss_sum: 0.0,
            seen: 0,
        }
    }

    /// The next batch, in the client's seeded order, or `None` once the budget of steps is
    /// spent. Fails with [`TrainError::Stopped`] once the run is being stopped.
    pub fn next_batch(&mut self) -> Result<Option<Batch>, TrainError> {
        if self.steps == self.parts.budget || self.order.is_empty() {
            return Ok(None);
        }
        if self.place.epoch == 0 || self.place.next >= self.order.len() {
            self.order.shuffle(self.parts.rng);
            self.place.epoch += 1;
            (self.place.step, self.place.next) = (0, 0);
        }
        if self.parts.stop.is_requested() {
            return Err(TrainError::Stopped);
        }
        let end = (self.place.next + self.parts.config.batch_size).min(self.order.len());
        let chunk = &self.order[self.place.next..end];
        let altered = Altered {
            flip_labels: self.parts.local.flip_labels,
            augment: Some(&mut *self.parts.rng),
        };
        let (input, labels) = batch(self.parts.local.data, chunk, altered, self.parts.device);
        self.place.step += 1;
        self.place.last_len = chunk.len();
        self.place.next = end;
        self.steps += 1;
        Ok(Some(Batch { input, labels }))
    }

    /// Batches of a random `fraction` of the client's samples (at least one), drawn from the
    /// session's stream, apart from the batches of [`LocalTraining::next_batch`] and outside
    /// the budget: data a client half reads to set something up before it trains (FedALA's
    /// aggregation weights). Drawing moves the stream, so the shuffles after differ from those
    /// of a session that drew nothing.
    pub fn sample_batches(&mut self, fraction: f64) -> Vec<Batch> {
        let mut chosen = self.parts.local.indices.to_vec();
        let count =
            ((chosen.len() as f64 * fraction).ceil() as usize).clamp(1, chosen.len().max(1));
        let (picked, _) = chosen.partial_shuffle(self.parts.rng, count);
        let picked = picked.to_vec();
        picked
            .chunks(self.parts.config.batch_size)
            .map(|chunk| {
                let altered = Altered {
                    flip_labels: self.parts.local.flip_labels,
                    augment: Some(&mut *self.parts.rng),
                };
                let (input, labels) =
                    batch(self.parts.local.data, chunk, altered, self.parts.device);
                Batch { input, labels }
            })
            .collect()
    }

    /// The mean cross-entropy loss of `logits` against `labels`.
    pub fn cross_entropy(&self, logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
        self.loss_fn.forward(logits, labels)
    }

    /// Records the loss of the last batch handed out, for the mean loss the client reports
    /// (`train_loss` in the records); fails with [`TrainError::Diverged`] if it is not finite.
    /// Record the whole loss the step minimises: fedsim's loop records the cross-entropy (its
    /// other terms act on the gradient, not the loss), MOON's the cross-entropy plus its
    /// contrastive term.
    pub fn record_loss(&mut self, loss: &Tensor<1>) -> Result<(), TrainError> {
        let value = f64::from(loss.clone().into_scalar::<f32>());
        if !value.is_finite() {
            return Err(TrainError::Diverged {
                loss: value,
                epoch: self.place.epoch,
                step: self.place.step,
                hint: match (self.place.epoch, self.place.step) {
                    // The first batch's loss is the received model's, before any local step.
                    (1, 1) => sent_model_diverged(self.parts.config),
                    _ => divergence_hint(self.parts.config),
                },
            });
        }
        self.loss_sum += value * self.place.last_len as f64;
        self.seen += self.place.last_len;
        Ok(())
    }

    /// A fresh optimiser as the experiment's `client` section configures it (`optimizer`,
    /// `momentum`, `weight_decay`).
    pub fn optimizer(&self) -> ModuleOptimizer {
        optimizer::configured(self.parts.config)
    }

    /// The learning rate of the step now being taken (`client.lr`, the same for every step).
    pub fn lr(&self) -> f64 {
        self.parts.config.lr
    }

    /// `net` after one step of `optimizer` on `grads`, at [`LocalTraining::lr`].
    pub fn step(&self, net: Net, optimizer: &mut ModuleOptimizer, grads: GradientsParams) -> Net {
        net.step(optimizer, self.lr(), grads)
    }

    /// The model training started from: the one sent, or the one the client chose
    /// ([`crate::strategy::ClientAlgorithm::start_from`]).
    pub fn start(&self) -> &'a [f32] {
        self.parts.start
    }

    /// Another network of the model's architecture on this session's device, loaded with
    /// `params`: a model the client reads (MOON's global and previous models; detach what it
    /// computes, or its graph joins the loss's) or trains beside the session's own (APFL's and
    /// pFedMe's personal models).
    pub fn network(&self, params: &[f32]) -> Net {
        (self.parts.build)(params)
    }

    /// The samples per batch.
    pub fn batch_size(&self) -> usize {
        self.parts.config.batch_size
    }

    /// The steps of one epoch, one pass over the client's samples (the last batch may be
    /// short).
    pub fn epoch_steps(&self) -> u32 {
        self.order.len().div_ceil(self.parts.config.batch_size) as u32
    }

    /// The steps this session may take.
    pub fn budget(&self) -> u32 {
        self.parts.budget
    }

    /// The autodiff device the network lives on.
    pub fn device(&self) -> &Device {
        self.parts.device
    }

    /// The client's seeded stream for this (round, edge round), which the shuffles and the
    /// data's augmentation also draw from: a client half's own draws from it are the same on
    /// every run.
    pub fn rng(&mut self) -> &mut ChaCha12Rng {
        self.parts.rng
    }

    /// Whether the configured optimiser is linear in the gradient (plain SGD, no momentum).
    pub(super) fn optimizer_is_linear(&self) -> bool {
        optimizer::is_linear(self.parts.config)
    }

    /// The end of training with `net`: the mean recorded loss and the steps taken.
    pub fn finish(self, net: Net) -> TrainedNet {
        TrainedNet {
            net,
            mean_loss: self.loss_sum / self.seen.max(1) as f64,
            steps: self.steps,
            kept: Tensors::new(),
        }
    }
}

/// What a divergence on the first batch says: that loss is the sent model's, before any local
/// step, so the global model diverged earlier, from the server's side or from earlier rounds'
/// local steps; blaming this client's settings alone would send the user to the wrong knob.
fn sent_model_diverged(config: &ClientConfig) -> String {
    format!(
        "the model it was sent gives this loss before any local step: the global model had \
         diverged, under attack, after too long a server step or from earlier local steps ({})",
        divergence_hint(config)
    )
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
