//! The records a run produces: one per round, and a summary at the end.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::network::{ClientId, Traffic, Update};
use crate::train::Evaluation;

/// One line of `metrics.jsonl`. Every field but `wall_ms` is a function of the config: two
/// runs of the same experiment give the same bytes once `wall_ms` is removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// The round, from 1.
    pub round: u32,
    /// The clients that trained, in id order.
    pub clients: Vec<ClientId>,
    /// Mean local training loss of those clients, weighted by their sample counts.
    pub train_loss: f64,
    /// Test accuracy of the new global model, when this round was evaluated.
    pub test_accuracy: Option<f64>,
    /// Test loss of the new global model, when this round was evaluated.
    pub test_loss: Option<f64>,
    /// Messages sent from the server towards the clients this round.
    pub messages_down: u64,
    /// Bytes sent from the server towards the clients this round.
    pub bytes_down: u64,
    /// Messages sent from the clients towards the server this round.
    pub messages_up: u64,
    /// Bytes sent from the clients towards the server this round.
    pub bytes_up: u64,
    /// Real time the round took, in milliseconds. The only field that varies between reruns.
    pub wall_ms: f64,
}

impl RoundRecord {
    /// The record of a round with these updates (sorted by client id) and measurements.
    pub fn new(
        round: u32,
        updates: &[Update],
        evaluation: Option<Evaluation>,
        down: Traffic,
        up: Traffic,
        wall: Duration,
    ) -> Self {
        let samples: usize = updates.iter().map(|u| u.num_samples).sum();
        let loss_sum: f64 = updates
            .iter()
            .map(|u| u.train_loss * u.num_samples as f64)
            .sum();
        Self {
            round,
            clients: updates.iter().map(|u| u.client).collect(),
            train_loss: loss_sum / samples.max(1) as f64,
            test_accuracy: evaluation.map(|e| e.accuracy),
            test_loss: evaluation.map(|e| e.loss),
            messages_down: down.messages,
            bytes_down: down.bytes,
            messages_up: up.messages,
            bytes_up: up.bytes,
            wall_ms: (wall.as_secs_f64() * 1e4).round() / 10.0,
        }
    }
}

/// `summary.json`: the outcome of a finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The experiment's name.
    pub name: String,
    /// Rounds completed.
    pub rounds: u32,
    /// Test accuracy after the last round.
    pub final_accuracy: f64,
    /// Test loss after the last round.
    pub final_loss: f64,
    /// Best test accuracy seen in any evaluated round.
    pub best_accuracy: f64,
    /// Bytes sent towards the clients over the run.
    pub total_bytes_down: u64,
    /// Bytes sent towards the server over the run.
    pub total_bytes_up: u64,
    /// Number of values in the model's flat parameter vector.
    pub num_params: usize,
    /// SHA-256 of the final model's parameters (little-endian `f32`), to compare runs.
    pub final_model_sha256: String,
    /// Real time the rounds took, in seconds.
    pub wall_seconds: f64,
}

impl Summary {
    /// Summarises a run from its round records (at least one, the last evaluated) and its final
    /// model.
    pub fn new(name: &str, records: &[RoundRecord], model: &[f32]) -> Self {
        let last = records.last().expect("a finished run has rounds");
        Self {
            name: name.to_string(),
            rounds: last.round,
            final_accuracy: last.test_accuracy.unwrap_or(f64::NAN),
            final_loss: last.test_loss.unwrap_or(f64::NAN),
            best_accuracy: records
                .iter()
                .filter_map(|r| r.test_accuracy)
                .fold(0.0, f64::max),
            total_bytes_down: records.iter().map(|r| r.bytes_down).sum(),
            total_bytes_up: records.iter().map(|r| r.bytes_up).sum(),
            num_params: model.len(),
            final_model_sha256: model_sha256(model),
            wall_seconds: records.iter().map(|r| r.wall_ms).sum::<f64>() / 1000.0,
        }
    }
}

/// SHA-256 of a flat model as little-endian bytes, in hex.
pub fn model_sha256(model: &[f32]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for value in model {
        hasher.update(value.to_le_bytes());
    }
    hex::encode(hasher.finalize())
}
