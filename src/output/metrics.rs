//! The records a run produces: one per round, and a summary at the end.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::network::{ClientId, Dropped, Traffic};
use crate::secure;
use crate::states::StateUsage;

/// Traffic over one tier of links (all links between the server and its children, or all
/// links between schedulers and their groups) in one period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierTraffic {
    /// `"server"` (links below the server) or `"scheduler"` (links below the schedulers).
    pub tier: String,
    /// Messages sent towards the clients.
    pub messages_down: u64,
    /// Bytes sent towards the clients.
    pub bytes_down: u64,
    /// Messages sent towards the server.
    pub messages_up: u64,
    /// Bytes sent towards the server.
    pub bytes_up: u64,
}

impl TierTraffic {
    /// The tier's traffic from its downward and upward totals.
    pub fn new(tier: &str, down: Traffic, up: Traffic) -> Self {
        Self {
            tier: tier.to_string(),
            messages_down: down.messages,
            bytes_down: down.bytes,
            messages_up: up.messages,
            bytes_up: up.bytes,
        }
    }

    /// The traffic since an earlier reading of the same tier.
    pub fn since(&self, earlier: &TierTraffic) -> TierTraffic {
        TierTraffic {
            tier: self.tier.clone(),
            messages_down: self.messages_down - earlier.messages_down,
            bytes_down: self.bytes_down - earlier.bytes_down,
            messages_up: self.messages_up - earlier.messages_up,
            bytes_up: self.bytes_up - earlier.bytes_up,
        }
    }
}

impl std::ops::AddAssign<&TierTraffic> for TierTraffic {
    fn add_assign(&mut self, other: &TierTraffic) {
        self.messages_down += other.messages_down;
        self.bytes_down += other.bytes_down;
        self.messages_up += other.messages_up;
        self.bytes_up += other.bytes_up;
    }
}

/// A client's answer to a probe, as `metrics.jsonl` records it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbedLoss {
    /// The client.
    pub client: ClientId,
    /// Its mean training loss on the model; `null` where that is not a finite number (the
    /// model has diverged).
    pub loss: Option<f64>,
}

/// One line of `metrics.jsonl`. Every field but `wall_ms` is a function of the config: two
/// runs of the same experiment give the same bytes once `wall_ms` is removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// The round (server step, in an asynchronous federation), from 1.
    pub round: u32,
    /// The clients sampled, in id order; in an asynchronous federation, the clients whose
    /// updates the step applied, in the order applied.
    pub clients: Vec<ClientId>,
    /// Sampled clients whose work is not in the new model, and why; in an asynchronous
    /// federation, the clients dropped since the last step.
    pub dropped: Vec<Dropped>,
    /// Mean local training loss of the clients that contributed, weighted by their samples;
    /// absent when none did.
    pub train_loss: Option<f64>,
    /// The clients the selection probed before choosing (Power-of-Choice's candidates), with
    /// their mean training loss on the global model the round started from, in id order;
    /// absent when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probed: Vec<ProbedLoss>,
    /// Test accuracy of the new global model, when this round was evaluated.
    pub test_accuracy: Option<f64>,
    /// Test loss of the new global model, when this round was evaluated.
    pub test_loss: Option<f64>,
    /// Test accuracy of the new global model on each class's samples, by label (`null` for a
    /// class without test samples), when this round was evaluated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_class_accuracy: Vec<Option<f64>>,
    /// The spread of the new global model's accuracy over the clients' held-out samples, when
    /// this round was evaluated and `eval.client_test_fraction` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_accuracy: Option<ClientAccuracy>,
    /// For a personalised algorithm, the spread of accuracy over the clients' own test samples
    /// with each client's personal model (its own, its own layers on the global model, or the
    /// global model fine-tuned on its data), beside `client_accuracy`'s global model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personal_accuracy: Option<ClientAccuracy>,
    /// The strategy's own numbers for the round (FedAdam's step norm, Krum's choice).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub strategy: BTreeMap<String, f64>,
    /// For a clustered algorithm, the cluster each of the round's clients is in after the
    /// round, by client id (IFCA: the one it chose and trained; CFL: its part after a split).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clusters: BTreeMap<ClientId, usize>,
    /// Messages and bytes per tier of links, server tier first.
    pub traffic: Vec<TierTraffic>,
    /// Simulated seconds the round took: the slowest counted path down the tree, through
    /// training and back up (the deadline, if someone missed it).
    pub sim_round_s: f64,
    /// Simulated seconds since the run started, at the end of this round.
    pub sim_time_s: f64,
    /// In an asynchronous federation, the staleness (server steps since the client was sent
    /// its model) of the updates this step applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness: Option<StalenessRecord>,
    /// Real time the round took, in milliseconds. The only field that varies between reruns.
    pub wall_ms: f64,
}

impl RoundRecord {
    /// The first value outside the range fedsim writes (an accuracy outside [0, 1], a
    /// negative loss or time), as `field: what is wrong`; `None` for a record fedsim could
    /// have written.
    pub fn out_of_range(&self) -> Option<String> {
        let client = self.client_accuracy.iter().flat_map(|c| {
            [
                ("client_accuracy.mean", c.mean),
                ("client_accuracy.worst_10", c.worst_10),
                ("client_accuracy.best_10", c.best_10),
            ]
        });
        let fractions = self
            .test_accuracy
            .map(|a| ("test_accuracy", a))
            .into_iter()
            .chain(
                self.test_class_accuracy
                    .iter()
                    .flatten()
                    .map(|&a| ("test_class_accuracy", a)),
            )
            .chain(client);
        let amounts = [
            ("train_loss", self.train_loss),
            ("test_loss", self.test_loss),
            ("sim_round_s", Some(self.sim_round_s)),
            ("sim_time_s", Some(self.sim_time_s)),
        ]
        .into_iter()
        .filter_map(|(field, value)| value.map(|v| (field, v)));
        let fraction = |(field, value): (&str, f64)| {
            (!(0.0..=1.0).contains(&value))
                .then(|| format!("{field} is {value}; an accuracy is a fraction in [0, 1]"))
        };
        let amount = |(field, value): (&str, f64)| {
            (!(value >= 0.0 && value.is_finite()))
                .then(|| format!("{field} is {value}; it is a finite number of at least 0"))
        };
        fractions
            .filter_map(fraction)
            .chain(amounts.filter_map(amount))
            .next()
    }
}

/// The staleness of a server step's updates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StalenessRecord {
    /// The mean.
    pub mean: f64,
    /// The largest.
    pub max: u32,
}

/// Accuracy and mean loss of a model on a data set.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Fraction of samples classified correctly.
    pub accuracy: f64,
    /// Mean cross-entropy loss.
    pub loss: f64,
    /// Fraction of each class's samples classified correctly, by label; `None` for a class
    /// the data set has no sample of. Under label skew it shows which classes a model forgot.
    pub class_accuracy: Vec<Option<f64>>,
}

/// The global model's accuracy on each client's held-out samples, summarised.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientAccuracy {
    /// Mean over the clients.
    pub mean: f64,
    /// Standard deviation over the clients (of the population).
    pub std: f64,
    /// Mean of the worst 10% of the clients (at least one client).
    pub worst_10: f64,
    /// Mean of the best 10% of the clients (at least one client).
    pub best_10: f64,
}

impl ClientAccuracy {
    /// The summary of per-client accuracies; `None` if there are none.
    pub fn of(accuracies: &[f64]) -> Option<Self> {
        if accuracies.is_empty() {
            return None;
        }
        let n = accuracies.len() as f64;
        let mean = accuracies.iter().sum::<f64>() / n;
        let variance = accuracies.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / n;
        let mut sorted = accuracies.to_vec();
        sorted.sort_unstable_by(f64::total_cmp);
        let tenth = accuracies.len().div_ceil(10);
        let mean_of = |part: &[f64]| part.iter().sum::<f64>() / part.len() as f64;
        Some(Self {
            mean,
            std: variance.sqrt(),
            worst_10: mean_of(&sorted[..tenth]),
            best_10: mean_of(&sorted[sorted.len() - tenth..]),
        })
    }
}

/// The (epsilon, delta) guarantee a private run's rounds spent, from the RDP accountant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PrivacySpent {
    /// Epsilon after the last round.
    pub epsilon: f64,
    /// The delta it holds at.
    pub delta: f64,
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
    /// Traffic per tier over the whole run.
    pub traffic: Vec<TierTraffic>,
    /// Sampled clients left out of a round, over the run.
    pub dropped_clients: usize,
    /// Simulated seconds the run took.
    pub sim_time_s: f64,
    /// Number of values in the model's flat parameter vector.
    pub num_params: usize,
    /// SHA-256 of the final model's parameters (little-endian `f32`), to compare runs.
    pub final_model_sha256: String,
    /// Bytes the clients' states took at the end, in memory and spilled (SCAFFOLD's control
    /// variates, FedDyn's gradients; 0 for algorithms whose clients keep nothing).
    #[serde(default)]
    pub client_state_bytes: u64,
    /// Where the clients' states were kept, when some were spilled to the run folder
    /// (`federation.client_state_memory_mb`): bytes in memory and spilled, the spill file's
    /// size, and the spill's writes, reads and real seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_states: Option<StateUsage>,
    /// The Byzantine clients, in id order (see `byzantine` in the experiment file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attackers: Vec<ClientId>,
    /// What a private run spent over its rounds (see `privacy` in the experiment file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy: Option<PrivacySpent>,
    /// Rounds of a securely aggregated run that ended without a new model, because fewer
    /// clients than the threshold sent their masked inputs (see `secure_aggregation`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aborted_rounds: Vec<u32>,
    /// Real time the rounds took, in seconds.
    pub wall_seconds: f64,
    /// The process's peak resident memory in bytes (its high-water mark, read when the
    /// summary is written), where the system reports it. A resumed run counts only the process
    /// that finished it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_resident_bytes: Option<u64>,
}

impl Summary {
    /// Summarises a run from its round records (at least one, the last evaluated) and its final
    /// model.
    pub fn new(name: &str, records: &[RoundRecord], model: &[f32]) -> Self {
        let last = records.last().expect("a finished run has rounds");
        let mut traffic = records[0].traffic.clone();
        for record in &records[1..] {
            for (total, round) in traffic.iter_mut().zip(&record.traffic) {
                *total += round;
            }
        }
        Self {
            name: name.to_string(),
            rounds: last.round,
            final_accuracy: last.test_accuracy.unwrap_or(f64::NAN),
            final_loss: last.test_loss.unwrap_or(f64::NAN),
            best_accuracy: records
                .iter()
                .filter_map(|r| r.test_accuracy)
                .fold(0.0, f64::max),
            traffic,
            dropped_clients: records.iter().map(|r| r.dropped.len()).sum(),
            sim_time_s: last.sim_time_s,
            num_params: model.len(),
            final_model_sha256: model_sha256(model),
            client_state_bytes: 0,
            client_states: None,
            attackers: Vec::new(),
            privacy: None,
            aborted_rounds: records
                .iter()
                .filter(|r| r.strategy.get(secure::ABORTED) == Some(&1.0))
                .map(|r| r.round)
                .collect(),
            wall_seconds: records.iter().map(|r| r.wall_ms).sum::<f64>() / 1000.0,
            peak_resident_bytes: peak_resident_bytes(),
        }
    }
}

/// The process's peak resident set size in bytes: `VmHWM` in `/proc/self/status` on Linux;
/// `None` where that file does not exist or says nothing.
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_high_water_mark(&status)
}

/// The `VmHWM:  <n> kB` line of a `/proc/<pid>/status` file, in bytes.
fn parse_high_water_mark(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kilobytes: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kilobytes * 1024)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_high_water_mark_is_read_in_bytes() {
        let status = "Name:\tfedsim\nVmPeak:\t  900 kB\nVmHWM:\t   311296 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(parse_high_water_mark(status), Some(311_296 * 1024));
        assert_eq!(parse_high_water_mark("VmRSS: 1 kB\n"), None);
        assert_eq!(parse_high_water_mark("VmHWM: lots\n"), None);
        if cfg!(target_os = "linux") {
            assert!(peak_resident_bytes().is_some_and(|b| b > 1 << 20));
        }
    }

    #[test]
    fn client_accuracy_summarises_the_spread() {
        // Twenty clients: 0.0, 0.05, ..., 0.95. The worst 10% are two clients (0 and 0.05),
        // the best two 0.9 and 0.95; the mean is 0.475.
        let accuracies: Vec<f64> = (0..20).map(|i| f64::from(i) * 0.05).collect();
        let spread = ClientAccuracy::of(&accuracies).unwrap();
        assert!((spread.mean - 0.475).abs() < 1e-12);
        assert!((spread.worst_10 - 0.025).abs() < 1e-12);
        assert!((spread.best_10 - 0.925).abs() < 1e-12);
        let variance: f64 = accuracies.iter().map(|a| (a - 0.475).powi(2)).sum::<f64>() / 20.0;
        assert!((spread.std - variance.sqrt()).abs() < 1e-12);
        assert_eq!(ClientAccuracy::of(&[]), None);
    }
}
