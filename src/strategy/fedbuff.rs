//! FedBuff: Nguyen et al. (2022), "Federated Learning with Buffered Asynchronous Aggregation",
//! Algorithm 1. Each client trains from the model it was sent and reports its change
//! `Δ = y - x_τ`; the server adds each change, weighted down by its staleness, to a buffer, and
//! once the buffer holds `K` of them takes a server step with their mean:
//!
//! ```text
//! buffer ← buffer + s(t - τ) Δ        with s(t - τ) = 1 / √(1 + t - τ)
//! every K updates:  x ← x + η buffer / K,  buffer ← 0
//! ```
//!
//! The step is plain SGD with the server learning rate `η`, or the mean change handed to
//! FedAdam's, FedAdagrad's or FedYogi's adaptive step (`server_optimizer`), as the paper's
//! experiments do with FedAdam. The client sends its model, as every fedsim client does
//! (the same bytes as its change); the server, which holds the model each client in flight was
//! sent, takes the difference.
//!
//! **In synchronous rounds** every update has staleness 0 and a round's updates fill the buffer
//! whatever `K`: `x ← x + η mean(y_k - x)`, the plain mean over the round's clients.

use serde::{Deserialize, Serialize};

use super::adaptive::{self, Rule};
use super::vector::{add_scaled, difference, squared_norm};
use super::{
    AdaptiveServer, Aggregate, Algorithm, Arrival, AsyncStrategy, Collected, EdgeAggregation,
    Reads, Round, Setting, Strategy,
};
use crate::config::check::Problems;
use crate::network::{StateError, Tensors};

/// FedBuff: buffered, staleness-weighted changes, one server step per `K`.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedBuff;

/// FedBuff's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// `K`: updates per server step, at least 1 and at most `asynchronous.concurrency`.
    pub buffer: usize,
    /// The server step: `"sgd"`, or an adaptive one.
    pub server_optimizer: ServerOptimizer,
    /// The server learning rate `η`.
    pub server_lr: f64,
    /// First-moment decay `β1` of an adaptive step.
    pub beta1: f64,
    /// Second-moment decay `β2` of FedAdam's and FedYogi's steps.
    pub beta2: f64,
    /// Adaptivity `τ` of an adaptive step.
    pub tau: f64,
}

impl Default for Params {
    /// `K = 10` and plain SGD at `η = 1`; the adaptive steps' moments as FedAdam's defaults.
    fn default() -> Self {
        let adaptive = adaptive::Params::default();
        Self {
            buffer: 10,
            server_optimizer: ServerOptimizer::Sgd,
            server_lr: 1.0,
            beta1: adaptive.beta1,
            beta2: adaptive.beta2,
            tau: adaptive.tau,
        }
    }
}

/// How the server steps with the buffer's mean change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerOptimizer {
    /// `x ← x + η Δ̄`.
    Sgd,
    /// FedAdagrad's step.
    Adagrad,
    /// FedAdam's step.
    Adam,
    /// FedYogi's step.
    Yogi,
}

impl Algorithm for FedBuff {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedbuff"
    }

    fn paper(&self) -> &'static str {
        "Nguyen et al. 2022, Federated Learning with Buffered Asynchronous Aggregation"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "buffer",
                "K: updates per server step, 1 to asynchronous.concurrency",
            ),
            (
                "server_optimizer",
                "\"sgd\", \"adam\", \"adagrad\" or \"yogi\": the step taken with the buffer's mean change",
            ),
            ("server_lr", "server learning rate η (> 0)"),
            (
                "beta1",
                "first-moment decay β1 of an adaptive step, in [0, 1)",
            ),
            (
                "beta2",
                "second-moment decay β2 of adam's and yogi's steps, in [0, 1)",
            ),
            ("tau", "adaptivity τ of an adaptive step (> 0)"),
        ]
    }

    fn check(&self, params: &Params, setting: &Setting<'_>, problems: &mut Problems) {
        problems.at_least_one("buffer", params.buffer as u64);
        if let Some(concurrency) = setting.concurrency
            && params.buffer > concurrency
        {
            problems.add(
                "buffer",
                format!(
                    "is {}; a server step cannot wait for more updates than asynchronous.concurrency ({concurrency}) clients in flight",
                    params.buffer
                ),
            );
        }
        adaptive::Params::from(*params).check(problems);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedBuffServer::new(*params))
    }

    fn asynchronous(
        &self,
        params: &Params,
        _: &Setting<'_>,
        _: usize,
    ) -> Option<Box<dyn AsyncStrategy>> {
        Some(Box::new(FedBuffServer::new(*params)))
    }
}

impl From<Params> for adaptive::Params {
    fn from(params: Params) -> Self {
        adaptive::Params {
            server_lr: params.server_lr,
            beta1: params.beta1,
            beta2: params.beta2,
            tau: params.tau,
        }
    }
}

/// FedBuff's server half: the buffer, and the step it takes.
#[derive(Debug, Clone)]
pub struct FedBuffServer {
    params: Params,
    /// The adaptive step, when the server takes one.
    adaptive: Option<AdaptiveServer>,
    /// `Σ s(t - τ) Δ` since the last step (empty when nothing is buffered).
    buffer: Vec<f32>,
    /// Updates in the buffer.
    buffered: usize,
}

impl FedBuffServer {
    /// An empty buffer.
    pub fn new(params: Params) -> Self {
        let rule = match params.server_optimizer {
            ServerOptimizer::Sgd => None,
            ServerOptimizer::Adagrad => Some(Rule::Adagrad),
            ServerOptimizer::Adam => Some(Rule::Adam),
            ServerOptimizer::Yogi => Some(Rule::Yogi),
        };
        Self {
            params,
            adaptive: rule.map(|rule| AdaptiveServer::new(rule, params.into())),
            buffer: Vec::new(),
            buffered: 0,
        }
    }

    /// The staleness weight `1 / √(1 + t - τ)`.
    pub fn weight(staleness: u32) -> f32 {
        (1.0 / (1.0 + f64::from(staleness)).sqrt()) as f32
    }

    /// Adds `weight * (model - sent)` to the buffer.
    fn add(&mut self, model: &[f32], sent: &[f32], weight: f32) {
        if self.buffer.is_empty() {
            self.buffer = vec![0.0; model.len()];
        }
        add_scaled(&mut self.buffer, &difference(model, sent), weight);
        self.buffered += 1;
    }

    /// The step from `global` with the buffer's mean, emptying the buffer.
    fn step(&mut self, global: &[f32]) -> Aggregate {
        let buffered = std::mem::take(&mut self.buffered);
        let mut mean = std::mem::take(&mut self.buffer);
        let share = 1.0 / buffered as f32;
        mean.iter_mut().for_each(|d| *d *= share);
        let model = match &mut self.adaptive {
            Some(adaptive) => adaptive.step(global, &mean),
            None => {
                let mut model = global.to_vec();
                add_scaled(&mut model, &mean, self.params.server_lr as f32);
                model
            }
        };
        Aggregate::model(model).with("mean_change_norm", squared_norm(&mean).sqrt())
    }
}

impl Strategy for FedBuffServer {
    fn reads(&self) -> Reads {
        Reads::Updates
    }

    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        for update in input.updates() {
            self.add(&update.params, global, 1.0);
        }
        self.step(global)
    }

    fn state(&self) -> Tensors {
        buffer_state(self)
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        restore_buffer(self, state)
    }
}

impl AsyncStrategy for FedBuffServer {
    fn receive(&mut self, global: &[f32], arrival: Arrival<'_>) -> Option<Aggregate> {
        let weight = Self::weight(arrival.staleness);
        self.add(&arrival.update.params, arrival.sent, weight);
        (self.buffered >= self.params.buffer).then(|| self.step(global))
    }

    fn state(&self) -> Tensors {
        buffer_state(self)
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        restore_buffer(self, state)
    }
}

/// The buffer, its count and the adaptive step's moments, as tensors.
fn buffer_state(server: &FedBuffServer) -> Tensors {
    let mut state = Tensors::new()
        .with("buffer", server.buffer.clone())
        .with("buffered", vec![server.buffered as f32]);
    if let Some(adaptive) = &server.adaptive {
        for (name, values) in adaptive.state().iter() {
            state.insert(name, values.to_vec());
        }
    }
    state
}

/// Takes back what [`buffer_state`] gave.
fn restore_buffer(server: &mut FedBuffServer, state: &Tensors) -> Result<(), StateError> {
    server.buffer = state.require("buffer")?.to_vec();
    let buffered = state.require("buffered")?;
    server.buffered = buffered.first().map_or(0, |&n| n as usize);
    if let Some(adaptive) = &mut server.adaptive {
        Strategy::restore(adaptive, state)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::update;
    use super::*;

    fn arrival<'a>(
        update: &'a crate::network::Update,
        sent: &'a [f32],
        staleness: u32,
    ) -> Arrival<'a> {
        Arrival {
            update,
            sent,
            staleness,
        }
    }

    #[test]
    fn a_step_waits_for_k_updates_and_weighs_each_by_its_staleness() {
        let params = Params {
            buffer: 2,
            ..Params::default()
        };
        let mut server = FedBuffServer::new(params);
        let first = update(0, 10, vec![3.0]);
        assert!(server.receive(&[1.0], arrival(&first, &[1.0], 0)).is_none());
        // Sent 2, trained to 4, three steps stale: weight 1/2, change 2.
        let second = update(1, 10, vec![4.0]);
        let step = server
            .receive(&[1.0], arrival(&second, &[2.0], 3))
            .expect("the buffer is full");
        // Buffer = 2 + 0.5 * 2 = 3, mean 1.5: x = 1 + 1.5.
        assert_eq!(step.model, vec![2.5]);
        assert_eq!(server.buffered, 0);
    }

    #[test]
    fn the_buffer_survives_a_checkpoint() {
        let mut server = FedBuffServer::new(Params::default());
        let first = update(0, 10, vec![3.0]);
        assert!(server.receive(&[1.0], arrival(&first, &[1.0], 0)).is_none());
        let mut resumed = FedBuffServer::new(Params::default());
        AsyncStrategy::restore(&mut resumed, &AsyncStrategy::state(&server)).unwrap();
        assert_eq!((resumed.buffer, resumed.buffered), (vec![2.0], 1));
    }
}
