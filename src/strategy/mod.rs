//! FL algorithms, one file each. An algorithm has two halves:
//!
//! - a **server half** ([`Strategy`]): what goes down with the global model, how a round's
//!   updates (sorted by client id) become the next global model, what it remembers between
//!   rounds, and which named metrics it reports;
//! - a **client half** ([`ClientAlgorithm`]): what local training optimises besides the loss
//!   (a proximal term, a gradient correction), what each client remembers between the rounds
//!   it takes part in, and what it sends up besides its model.
//!
//! Neither half knows about threads, channels or burn: they see flat vectors and named
//! tensors. [`StrategyConfig`] is the experiment file's `strategy` section: it names the
//! algorithm, carries its parameters and says whether an aggregating scheduler may pre-combine
//! its group ([`EdgeAggregation`]).

mod adaptive;
mod config;
mod fedavg;
mod fedavgm;
mod feddyn;
mod fednova;
mod fedprox;
mod krum;
mod median;
mod qffl;
mod scaffold;
mod trimmed_mean;
pub mod vector;

use std::collections::BTreeMap;

pub use config::{Description, StrategyConfig, catalog};
pub use fedavg::FedAvg;

use crate::network::{ClientId, ClientInfo, Tensors, Update};

/// What the server half sees of a round besides the updates.
#[derive(Debug, Clone, Copy)]
pub struct Round<'a> {
    /// The round, from 1.
    pub number: u32,
    /// Every client in the federation with its sample count, in id order.
    pub roster: &'a [ClientInfo],
    /// The clients sampled this round, in id order.
    pub sampled: &'a [ClientId],
}

/// The server half's answer to a round.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// The next global model.
    pub model: Vec<f32>,
    /// Named numbers for the round's line of `metrics.jsonl`.
    pub metrics: BTreeMap<String, f64>,
}

impl Aggregate {
    /// `model`, with no metrics.
    pub fn model(model: Vec<f32>) -> Self {
        Self {
            model,
            metrics: BTreeMap::new(),
        }
    }

    /// This aggregate with the metric `name` set to `value`.
    pub fn with(mut self, name: &str, value: f64) -> Self {
        self.metrics.insert(name.to_string(), value);
        self
    }
}

/// The server half of an FL algorithm.
pub trait Strategy: Send {
    /// Tensors sent down with the global model this round (SCAFFOLD's control variate).
    fn downlink(&self) -> Tensors {
        Tensors::new()
    }

    /// The next global model from the current one and this round's updates (sorted by client
    /// id, never empty), with the round's metrics.
    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], updates: &[Update]) -> Aggregate;

    /// What the strategy remembers between rounds, for checkpoints.
    fn state(&self) -> Tensors {
        Tensors::new()
    }

    /// Takes back what [`Strategy::state`] gave, when a run resumes.
    fn restore(&mut self, state: &Tensors) -> Result<(), String> {
        match state.iter().next() {
            None => Ok(()),
            Some((name, _)) => Err(format!(
                "this strategy keeps no state, but {name:?} is saved"
            )),
        }
    }
}

/// What a client sees when its job starts.
#[derive(Debug, Clone, Copy)]
pub struct ClientView<'a> {
    /// The round.
    pub round: u32,
    /// The client.
    pub client: ClientId,
    /// The model it was sent.
    pub global: &'a [f32],
    /// The tensors sent down beside the model.
    pub downlink: &'a Tensors,
    /// The local learning rate.
    pub lr: f64,
}

/// What local training optimises besides the cross-entropy loss, as terms added to each
/// step's gradient `g`: `g + mu * (w - global) + linear`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Objective {
    /// `mu` of a proximal term `mu/2 * |w - global|²` (FedProx, FedDyn), if any.
    pub proximal: Option<f32>,
    /// A fixed vector added to every gradient (SCAFFOLD's correction `c - c_i`, FedDyn's
    /// linear term), if any.
    pub linear: Option<Vec<f32>>,
}

/// What local training produced, for the client half to finish with.
#[derive(Debug, Clone, Copy)]
pub struct Trained<'a> {
    /// The trained model.
    pub params: &'a [f32],
    /// SGD steps taken.
    pub steps: u32,
    /// Mean loss of the global model on the client's training data, before training, when the
    /// algorithm asks for it.
    pub loss_at_global: Option<f64>,
}

/// The client half of an FL algorithm.
pub trait ClientAlgorithm: Send + Sync {
    /// The terms local training adds to each gradient, from what came down and the client's
    /// state (`None` before its first round).
    fn objective(&self, _view: &ClientView<'_>, _state: Option<&Tensors>) -> Objective {
        Objective::default()
    }

    /// Whether local training must first measure the global model's loss on the client's data.
    fn needs_loss_at_global(&self) -> bool {
        false
    }

    /// After training: updates the client's state and returns the tensors to send up beside
    /// the model.
    fn finish(
        &self,
        _view: &ClientView<'_>,
        _state: &mut Option<Tensors>,
        _trained: &Trained<'_>,
    ) -> Tensors {
        Tensors::new()
    }
}

/// A client that trains on the loss alone and keeps nothing: FedAvg's, and that of every
/// algorithm that differs only on the server.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainClient;

impl ClientAlgorithm for PlainClient {}

/// How an aggregating scheduler may pre-combine its group's updates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgeAggregation {
    /// Into one update: the sample-weighted mean of the models, the sum of the extra tensors
    /// named in `sums`, the sample-weighted mean of the others.
    Mean {
        /// Whether the group may run several edge rounds (the algorithm's updates are models,
        /// and an edge round's mean is a model the next can start from).
        several_edge_rounds: bool,
        /// Extra tensors that add up rather than average.
        sums: &'static [&'static str],
    },
    /// Not at all, for this reason: the server must see every client's update.
    Unsupported(&'static str),
}

/// A scheduler's partial aggregate of `parts` (sorted by client id): the sample-weighted mean
/// of their models and extra tensors, except the extra tensors named in `sums`, which add up.
pub fn combine(round: u32, parts: &[Update], sums: &[&str]) -> Update {
    let params = vector::mean_params(parts, vector::Weight::Samples);
    let shares = vector::Weight::Samples.shares(parts);
    let mut extras = Tensors::new();
    for (name, _) in parts[0].extras.iter() {
        let combined = if sums.contains(&name) {
            vector::sum_extra(parts, name)
        } else {
            let terms: Vec<(&[f32], f32)> = parts
                .iter()
                .zip(&shares)
                .map(|(u, &share)| (u.extras.expect(name), share))
                .collect();
            vector::weighted_sum(&terms)
        };
        extras.insert(name, combined);
    }
    Update::combined(round, parts, params, extras)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Small updates and rounds for the strategies' unit tests.

    use super::Round;
    use crate::network::{ClientInfo, Tensors, Update};

    /// Client `client`'s update of `num_samples` samples with model `params`.
    pub fn update(client: usize, num_samples: usize, params: Vec<f32>) -> Update {
        Update {
            round: 1,
            clients: vec![client],
            num_samples,
            train_loss: 0.0,
            steps: 1,
            params,
            extras: Tensors::new(),
        }
    }

    /// Round 1 of a federation of ten clients.
    pub fn round() -> Round<'static> {
        const ROSTER: [ClientInfo; 10] = {
            let mut roster = [ClientInfo {
                id: 0,
                num_samples: 100,
            }; 10];
            let mut i = 0;
            while i < 10 {
                roster[i].id = i;
                i += 1;
            }
            roster
        };
        Round {
            number: 1,
            roster: &ROSTER,
            sampled: &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::update;
    use super::*;

    #[test]
    fn a_partial_aggregate_sums_what_adds_up_and_averages_the_rest() {
        let mut a = update(0, 100, vec![1.0]);
        a.extras = Tensors::new()
            .with("delta", vec![1.0])
            .with("mean", vec![2.0]);
        let mut b = update(1, 300, vec![5.0]);
        b.extras = Tensors::new()
            .with("delta", vec![2.0])
            .with("mean", vec![6.0]);
        let partial = combine(1, &[a, b], &["delta"]);
        assert_eq!(partial.params, vec![4.0]);
        assert_eq!(partial.extras.expect("delta"), &[3.0]);
        assert_eq!(partial.extras.expect("mean"), &[5.0]);
        assert_eq!(
            (partial.clients, partial.num_samples, partial.steps),
            (vec![0, 1], 400, 2)
        );
    }
}
