//! The `topology`, `network` and `availability` sections: the shape of the federation tree,
//! the simulated links and compute speeds, and which clients fail to take part.

use rand::RngExt;
use rand_distr::{Distribution, LogNormal};
use serde::{Deserialize, Serialize};

use super::MAX_THREADS;
use crate::network::{ClientId, LinkProfile};
use crate::seed::{Purpose, stream};

/// The shape of the federation tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum TopologyConfig {
    /// The server talks to all clients directly. (An empty struct variant, so that serde
    /// rejects stray fields such as `{"kind": "flat", "mode": "relay"}`.)
    Flat {},
    /// Middle schedulers (edge servers) stand between the server and groups of clients.
    Hierarchical {
        /// Number of schedulers, each with its own client group.
        schedulers: usize,
        /// What a scheduler sends up: every update (`"relay"`) or one partial aggregate per
        /// round (`"aggregate"`).
        mode: SchedulerMode,
        /// Edge aggregations a scheduler runs per round in aggregate mode (HierFAVG's κ₁).
        /// Default 1.
        #[serde(default = "one")]
        edge_rounds: u32,
        /// Explicit client ids per scheduler; by default clients are split contiguously and
        /// evenly (scheduler 0 gets the lowest ids).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assignment: Option<Vec<Vec<ClientId>>>,
    },
}

fn one() -> u32 {
    1
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig::Flat {}
    }
}

/// What a scheduler does with its clients' updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerMode {
    /// Forward each update unchanged, as it arrives (FedLab's hierarchical mode).
    Relay,
    /// Average its clients' updates (weighted by samples) and send one partial aggregate with
    /// its total sample count (HierFAVG's edge aggregation).
    Aggregate,
}

impl TopologyConfig {
    /// The client ids under each scheduler (one group for the flat topology).
    pub fn groups(&self, num_clients: usize) -> Vec<Vec<ClientId>> {
        match self {
            TopologyConfig::Flat {} => vec![(0..num_clients).collect()],
            TopologyConfig::Hierarchical {
                assignment: Some(groups),
                ..
            } => groups.clone(),
            TopologyConfig::Hierarchical { schedulers, .. } => even_split(num_clients, *schedulers),
        }
    }

    /// Every rule the topology breaks, as (field, message) pairs.
    pub fn problems(&self, num_clients: usize) -> Vec<(String, String)> {
        let TopologyConfig::Hierarchical {
            schedulers,
            edge_rounds,
            assignment,
            ..
        } = self
        else {
            return Vec::new();
        };
        let mut problems = Vec::new();
        let most = num_clients.min(MAX_THREADS);
        if *schedulers == 0 || *schedulers > most {
            problems.push((
                "topology.schedulers".to_string(),
                format!(
                    "is {schedulers}; must be between 1 and {most} (federation.num_clients, at most {MAX_THREADS})"
                ),
            ));
        }
        if *edge_rounds == 0 {
            problems.push((
                "topology.edge_rounds".to_string(),
                "must be at least 1".to_string(),
            ));
        }
        if let Some(message) = assignment
            .as_ref()
            .and_then(|groups| assignment_problem(groups, *schedulers, num_clients))
        {
            problems.push(("topology.assignment".to_string(), message));
        }
        problems
    }
}

/// Clients `0..num_clients` in `parts` contiguous groups whose sizes differ by at most one
/// (the first groups get the lowest ids, and the extra clients).
pub(super) fn even_split(num_clients: usize, parts: usize) -> Vec<Vec<ClientId>> {
    let (base, extra) = (num_clients / parts, num_clients % parts);
    (0..parts)
        .map(|s| {
            let start = s * base + s.min(extra);
            (start..start + base + usize::from(s < extra)).collect()
        })
        .collect()
}

/// What is wrong with an explicit assignment of clients to schedulers, if anything. Works in
/// the size of the assignment, not of `num_clients`, which an experiment file may set to
/// anything.
fn assignment_problem(
    groups: &[Vec<ClientId>],
    schedulers: usize,
    num_clients: usize,
) -> Option<String> {
    if groups.len() != schedulers {
        return Some(format!(
            "lists {} groups for {schedulers} schedulers",
            groups.len()
        ));
    }
    if let Some(client) = groups.iter().flatten().find(|&&c| c >= num_clients) {
        return Some(format!(
            "names client {client}, but there are {num_clients}"
        ));
    }
    let mut listed: Vec<ClientId> = groups.iter().flatten().copied().collect();
    listed.sort_unstable();
    if let Some(pair) = listed.windows(2).find(|pair| pair[0] == pair[1]) {
        let times = listed.iter().filter(|&&c| c == pair[0]).count();
        return Some(format!(
            "must name every client exactly once; client {} appears {times} times",
            pair[0]
        ));
    }
    if listed.len() < num_clients {
        let missing = (0..)
            .zip(&listed)
            .find(|(i, c)| i != *c)
            .map_or(listed.len(), |(i, _)| i);
        return Some(format!(
            "must name every client exactly once; client {missing} appears 0 times"
        ));
    }
    groups
        .iter()
        .any(Vec::is_empty)
        .then(|| "gives a scheduler no clients".to_string())
}

/// The simulated network and compute speeds that drive the virtual clock. Everything defaults
/// to instant: then every round takes zero simulated seconds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// The link between the server and each scheduler (hierarchical topology only).
    #[serde(default)]
    pub server_link: LinkProfile,
    /// Each client's link to its parent: the server (flat) or its scheduler.
    #[serde(default)]
    pub client_link: LinkProfile,
    /// Client links that differ from `client_link`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_overrides: Vec<ClientLinkOverride>,
    /// How fast clients train.
    #[serde(default)]
    pub compute: ComputeConfig,
}

/// A link profile for a few clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientLinkOverride {
    /// The clients this profile applies to.
    pub clients: Vec<ClientId>,
    /// Their one-way latency in milliseconds. Default 0.
    #[serde(default)]
    pub latency_ms: f64,
    /// Their bandwidth in megabits per second; absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
}

impl ClientLinkOverride {
    /// The profile these clients' links have.
    pub fn link(&self) -> LinkProfile {
        LinkProfile {
            latency_ms: self.latency_ms,
            bandwidth_mbps: self.bandwidth_mbps,
        }
    }
}

/// Simulated training speed of each client, in samples per second (local epochs times the
/// client's samples make the work of a round).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ComputeConfig {
    /// Training takes no simulated time.
    #[default]
    Instant,
    /// Every client trains at the same speed.
    Fixed {
        /// Samples per second.
        samples_per_second: f64,
    },
    /// Each client's speed is drawn once, uniformly between `min` and `max`.
    Uniform {
        /// Slowest speed, samples per second.
        min: f64,
        /// Fastest speed, samples per second.
        max: f64,
    },
    /// Each client's speed is drawn once from a log-normal distribution: many clients near
    /// `median`, a long tail of slow and fast ones.
    LogNormal {
        /// Median speed, samples per second.
        median: f64,
        /// Standard deviation of the speed's logarithm.
        sigma: f64,
    },
}

impl ComputeConfig {
    /// Every client's speed in samples per second (infinite when instant), each drawn from
    /// the client's own stream.
    pub fn speeds(&self, seed: u64, num_clients: usize) -> Vec<f64> {
        (0..num_clients)
            .map(|client| {
                let mut rng = stream(seed, Purpose::COMPUTE_SPEED, 0, client as u32);
                match *self {
                    ComputeConfig::Instant => f64::INFINITY,
                    ComputeConfig::Fixed { samples_per_second } => samples_per_second,
                    ComputeConfig::Uniform { min, max } if min == max => min,
                    ComputeConfig::Uniform { min, max } => rng.random_range(min..max),
                    ComputeConfig::LogNormal { median, sigma } => {
                        LogNormal::new(median.ln(), sigma)
                            .expect("validated: sigma >= 0")
                            .sample(&mut rng)
                    }
                }
            })
            .collect()
    }
}

impl NetworkConfig {
    /// Every rule the section breaks, as (field, message) pairs.
    pub fn problems(&self, num_clients: usize) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        problems.extend(link_problems("network.server_link", &self.server_link));
        problems.extend(link_problems("network.client_link", &self.client_link));
        for (i, link) in self.client_overrides.iter().enumerate() {
            let path = format!("network.client_overrides[{i}]");
            problems.extend(link_problems(&path, &link.link()));
            if let Some(client) = link.clients.iter().find(|&&c| c >= num_clients) {
                problems.push((
                    format!("{path}.clients"),
                    format!("names client {client}, but there are {num_clients}"),
                ));
            }
        }
        let positive = |x: f64| x > 0.0 && x.is_finite();
        let compute_ok = match self.compute {
            ComputeConfig::Instant => true,
            ComputeConfig::Fixed { samples_per_second } => positive(samples_per_second),
            ComputeConfig::Uniform { min, max } => positive(min) && positive(max) && min <= max,
            ComputeConfig::LogNormal { median, sigma } => {
                positive(median) && sigma >= 0.0 && sigma.is_finite()
            }
        };
        if !compute_ok {
            problems.push((
                "network.compute".into(),
                format!(
                    "{:?}: speeds must be greater than 0 (and min <= max, sigma >= 0)",
                    self.compute
                ),
            ));
        }
        problems
    }
}

/// What is wrong with a link profile at `path`.
fn link_problems(path: &str, link: &LinkProfile) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if !(link.latency_ms >= 0.0 && link.latency_ms.is_finite()) {
        problems.push((
            format!("{path}.latency_ms"),
            format!("is {}; must be at least 0", link.latency_ms),
        ));
    }
    if let Some(mbps) = link.bandwidth_mbps.filter(|m| !(*m > 0.0 && m.is_finite())) {
        problems.push((
            format!("{path}.bandwidth_mbps"),
            format!("is {mbps}; must be greater than 0"),
        ));
    }
    problems
}

/// Clients that do not take part in a round although sampled.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvailabilityConfig {
    /// Probability that a sampled client is unavailable in a round (drawn per client and
    /// round from the seed). Default 0.
    #[serde(default)]
    pub dropout: f64,
    /// Simulated seconds a round may last; updates that would arrive later are left out.
    /// Default: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<f64>,
    /// What a client's failed training does to the run: `"abort"` (the default) stops it with
    /// an error; `"drop"` leaves the client out of the round, like a dropout, and goes on.
    #[serde(default)]
    pub on_client_failure: FailurePolicy,
}

/// What a client's failed training does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailurePolicy {
    /// Stop the run with an error naming the client (the lowest id, if several failed).
    #[default]
    Abort,
    /// Leave the client out of the round (reason `failed`, with its error) and go on.
    Drop,
}

impl AvailabilityConfig {
    /// Every rule the section breaks, as (field, message) pairs.
    pub fn problems(&self, topology: &TopologyConfig) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if !(0.0..1.0).contains(&self.dropout) {
            problems.push((
                "availability.dropout".to_string(),
                format!("is {}; must be in [0, 1)", self.dropout),
            ));
        }
        if let Some(deadline) = self.deadline_s {
            if !(deadline > 0.0 && deadline.is_finite()) {
                problems.push((
                    "availability.deadline_s".to_string(),
                    format!("is {deadline}; must be greater than 0"),
                ));
            }
            if let TopologyConfig::Hierarchical { edge_rounds, .. } = topology
                && *edge_rounds > 1
            {
                problems.push((
                    "availability.deadline_s".to_string(),
                    "cannot be combined with topology.edge_rounds > 1 (a deadline applies \
                     to a whole round; how to split it among edge rounds is not defined)"
                        .to_string(),
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hierarchical(schedulers: usize, assignment: Option<Vec<Vec<ClientId>>>) -> TopologyConfig {
        TopologyConfig::Hierarchical {
            schedulers,
            mode: SchedulerMode::Relay,
            edge_rounds: 1,
            assignment,
        }
    }

    #[test]
    fn default_assignment_is_contiguous_and_even() {
        let groups = hierarchical(3, None).groups(8);
        assert_eq!(groups, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
    }

    #[test]
    fn explicit_assignment_must_name_each_client_once() {
        let problems = hierarchical(2, Some(vec![vec![0, 1], vec![1, 3]])).problems(4);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].1.contains("client 1 appears 2 times"),
            "{problems:?}"
        );
        assert!(
            hierarchical(2, Some(vec![vec![0, 2], vec![1, 3]]))
                .problems(4)
                .is_empty()
        );
    }

    #[test]
    fn an_assignment_that_misses_a_client_or_lists_other_groups_is_rejected() {
        let message = |assignment, clients| hierarchical(2, Some(assignment)).problems(clients);
        let missing = message(vec![vec![0, 1], vec![3]], 4);
        assert!(
            missing[0].1.contains("client 2 appears 0 times"),
            "{missing:?}"
        );
        let last_missing = message(vec![vec![0, 1], vec![2]], 4);
        assert!(last_missing[0].1.contains("client 3 appears 0 times"));
        let groups = message(vec![vec![0], vec![1], vec![2]], 3);
        assert!(groups[0].1.contains("lists 3 groups for 2 schedulers"));
        // Checked in the size of the assignment, whatever the number of clients claims.
        let huge = message(vec![vec![0], vec![1]], usize::MAX);
        assert!(huge[0].1.contains("client 2 appears 0 times"));
    }

    #[test]
    fn topology_parses_with_defaults() {
        let config: TopologyConfig = serde_json::from_value(
            json!({"kind": "hierarchical", "schedulers": 4, "mode": "aggregate"}),
        )
        .unwrap();
        assert_eq!(
            config,
            TopologyConfig::Hierarchical {
                schedulers: 4,
                mode: SchedulerMode::Aggregate,
                edge_rounds: 1,
                assignment: None
            }
        );
        let err =
            serde_json::from_value::<TopologyConfig>(json!({"kind": "flat", "mode": "relay"}));
        assert!(err.is_err());
    }

    #[test]
    fn compute_speeds_parse_by_kind() {
        let config: ComputeConfig =
            serde_json::from_value(json!({"kind": "lognormal", "median": 500, "sigma": 0.5}))
                .unwrap();
        assert_eq!(
            config,
            ComputeConfig::LogNormal {
                median: 500.0,
                sigma: 0.5
            }
        );
    }
}
