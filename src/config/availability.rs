//! The `availability` section: when clients are online, sampled clients that drop out, miss
//! the round's deadline or fail, and what a failure does to the run.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TopologyConfig;
use super::check::{Problems, Validate};
use crate::availability::Availability;

/// Clients that are offline, or do not take part in a round although sampled.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AvailabilityConfig {
    /// When each client is online. Only online clients are sampled (or, asynchronously,
    /// dispatched), and one that goes offline before its training ends is dropped with reason
    /// `offline`.
    #[serde(default, skip_serializing_if = "OnlineConfig::is_always")]
    #[schemars(extend("default" = {"kind": "always"}))]
    pub online: OnlineConfig,
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

/// When each client is online.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum OnlineConfig {
    /// Every client, all the time.
    #[default]
    Always,
    /// The online intervals a CSV file lists, under the header `client,start_s,end_s`: client
    /// `client` is online from `start_s` (included) to `end_s` (excluded), in simulated
    /// seconds; a client's intervals must not overlap, and a client the file never names is
    /// never online. The book's availability guide tells how to turn FedScale's
    /// device-behaviour trace into one.
    Trace {
        /// The CSV file, relative to the experiment file.
        file: PathBuf,
        /// The trace repeats every `period_s` seconds (every interval must then end by
        /// `period_s`); absent, it is played once.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        period_s: Option<f64>,
    },
    /// A day-night cycle drawn from the seed: each client is online for `online_fraction` of
    /// every `period_s` seconds, from a phase drawn uniformly in the period.
    Diurnal {
        /// The length of a day, in simulated seconds.
        period_s: f64,
        /// The fraction of each day a client is online, in `(0, 1]`.
        online_fraction: f64,
    },
}

impl OnlineConfig {
    /// Whether this is the default, which the resolved config leaves out.
    pub fn is_always(&self) -> bool {
        *self == OnlineConfig::Always
    }

    /// Makes a relative trace file relative to `folder`, the experiment file's.
    pub fn resolve_paths(&mut self, folder: &Path) {
        if let OnlineConfig::Trace { file, .. } = self
            && file.is_relative()
        {
            *file = folder.join(&*file);
        }
    }

    /// Each client's online intervals, for `num_clients` clients and the experiment `seed`; an
    /// error is (field, message).
    pub fn load(&self, seed: u64, num_clients: usize) -> Result<Availability, (String, String)> {
        match self {
            OnlineConfig::Always => Ok(Availability::always()),
            OnlineConfig::Trace { file, period_s } => {
                Availability::read_trace(file, num_clients, *period_s)
                    .map_err(|e| ("file".to_string(), format!("{}: {e}", file.display())))
            }
            OnlineConfig::Diurnal {
                period_s,
                online_fraction,
            } => Ok(Availability::diurnal(
                seed,
                num_clients,
                *period_s,
                *online_fraction,
            )),
        }
    }
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
    /// The topology, whose edge rounds a deadline cannot be split among, and
    /// `federation.num_clients`, the clients a trace may name.
    type Context<'a> = (&'a TopologyConfig, usize);

    fn validate(&self, (topology, num_clients): (&TopologyConfig, usize), problems: &mut Problems) {
        problems.at("online", |p| self.online.validate(num_clients, p));
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

impl Validate for OnlineConfig {
    /// `federation.num_clients`.
    type Context<'a> = usize;

    fn validate(&self, num_clients: usize, problems: &mut Problems) {
        match *self {
            OnlineConfig::Always => {}
            OnlineConfig::Trace { period_s, .. } => {
                if let Some(period) = period_s {
                    problems.positive("period_s", period);
                }
                if period_s.is_none_or(|p| p > 0.0 && p.is_finite())
                    && let Err((field, message)) = self.load(0, num_clients)
                {
                    problems.add(field, message);
                }
            }
            OnlineConfig::Diurnal {
                period_s,
                online_fraction,
            } => {
                problems.positive("period_s", period_s);
                problems.require(
                    online_fraction > 0.0 && online_fraction <= 1.0,
                    "online_fraction",
                    || format!("is {online_fraction}; must be in (0, 1]"),
                );
            }
        }
    }
}
