//! The `topology` section: the shape of the federation tree.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::MAX_THREADS;
use super::check::{Problems, Validate};
use crate::network::ClientId;

/// The shape of the federation tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum TopologyConfig {
    /// The server talks to all clients directly.
    // An empty struct variant, so that serde rejects stray fields such as
    // `{"kind": "flat", "mode": "relay"}`.
    Flat {},
    /// Middle schedulers (edge servers) stand between the server and groups of clients: relaying
    /// gives the flat tree's model to the bit, aggregating sends one partial aggregate per
    /// scheduler, where the algorithm's edge rule allows it.
    Hierarchical {
        /// Number of schedulers, each with its own client group; at most 1024.
        schedulers: usize,
        /// What a scheduler sends up: every update (`"relay"`) or one partial aggregate per
        /// round (`"aggregate"`).
        mode: SchedulerMode,
        /// Edge aggregations a scheduler runs per round in aggregate mode (HierFAVG's κ₁).
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
}

impl Validate for TopologyConfig {
    /// `federation.num_clients`.
    type Context<'a> = usize;

    fn validate(&self, num_clients: usize, problems: &mut Problems) {
        let TopologyConfig::Hierarchical {
            schedulers,
            edge_rounds,
            assignment,
            ..
        } = self
        else {
            return;
        };
        let most = num_clients.min(MAX_THREADS);
        problems.require(*schedulers >= 1 && *schedulers <= most, "schedulers", || {
            format!(
                "is {schedulers}; must be between 1 and {most} (federation.num_clients, at most {MAX_THREADS})"
            )
        });
        problems.at_least_one("edge_rounds", (*edge_rounds).into());
        if let Some(message) = assignment
            .as_ref()
            .and_then(|groups| assignment_problem(groups, *schedulers, num_clients))
        {
            problems.add("assignment", message);
        }
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

    /// The problems of a topology for `num_clients` clients, as (field, message).
    fn problems_of(topology: TopologyConfig, num_clients: usize) -> Vec<(String, String)> {
        let mut problems = Problems::new();
        topology.validate(num_clients, &mut problems);
        problems.into_vec()
    }

    #[test]
    fn default_assignment_is_contiguous_and_even() {
        let groups = hierarchical(3, None).groups(8);
        assert_eq!(groups, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
    }

    #[test]
    fn explicit_assignment_must_name_each_client_once() {
        let problems = problems_of(hierarchical(2, Some(vec![vec![0, 1], vec![1, 3]])), 4);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].1.contains("client 1 appears 2 times"),
            "{problems:?}"
        );
        assert!(problems_of(hierarchical(2, Some(vec![vec![0, 2], vec![1, 3]])), 4).is_empty());
    }

    #[test]
    fn an_assignment_that_misses_a_client_or_lists_other_groups_is_rejected() {
        let message = |assignment, clients| problems_of(hierarchical(2, Some(assignment)), clients);
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
}
