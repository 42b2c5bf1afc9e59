//! The `availability` section: sampled clients that drop out, miss the round's deadline or
//! fail, and what a failure does to the run.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TopologyConfig;
use super::check::{Problems, Validate};

/// Clients that do not take part in a round although sampled.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AvailabilityConfig {
    /// Probability that a sampled client is unavailable in a round (drawn per client and
    /// round from the seed).
    #[serde(default)]
    pub dropout: f64,
    /// Simulated seconds a round may last; updates that would arrive later are left out, and
    /// FedAvg renormalises over the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<f64>,
    /// What a client's failed training (an error or a panic) does to the run.
    #[serde(default)]
    pub on_client_failure: FailurePolicy,
}

/// What a client's failed training does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailurePolicy {
    /// Stop the run, exit code 1, naming the client and its place in the tree (the lowest id if
    /// several fail in a round; with several edge rounds, among those that failed in the first
    /// edge round that saw a failure).
    #[default]
    Abort,
    /// Leave the client out of the round (reason `failed`, with its error) and go on.
    Drop,
}

impl Validate for AvailabilityConfig {
    /// The topology, whose edge rounds a deadline cannot be split among.
    type Context<'a> = &'a TopologyConfig;

    fn validate(&self, topology: &TopologyConfig, problems: &mut Problems) {
        problems.fraction_below("dropout", self.dropout, 1.0);
        if let Some(deadline) = self.deadline_s {
            problems.positive("deadline_s", deadline);
            if let TopologyConfig::Hierarchical { edge_rounds, .. } = topology
                && *edge_rounds > 1
            {
                problems.add(
                    "deadline_s",
                    "cannot be combined with topology.edge_rounds > 1 (a deadline applies \
                     to a whole round; how to split it among edge rounds is not defined)",
                );
            }
        }
    }
}
