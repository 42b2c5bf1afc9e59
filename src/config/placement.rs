//! The `placement` section: which process of a run over MPI hosts each scheduler and client
//! group. Where a tier runs never changes a run's results, only how its work is spread.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TopologyConfig;
use super::check::{Problems, Validate};
use crate::network::ClientId;

/// The MPI rank of each scheduler and client group. The server always runs on rank 0, which
/// also writes the run folder.
///
/// Without this section, the rule is: in a single process everything runs on rank 0; over
/// `K > 1` ranks, the flat topology splits its clients into `K - 1` groups (contiguously and
/// evenly, at most one per client), group `g` on rank `g + 1`, and the hierarchical topology
/// puts scheduler `i` and its group on rank `1 + i mod (K - 1)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// The rank of each scheduler, in scheduler order (hierarchical topology only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedulers: Option<Vec<usize>>,
    /// The rank of each client group, in group order. In the flat topology its length is the
    /// number of groups the clients are split into; in the hierarchical one, group `i` sits
    /// under scheduler `i` and runs on its rank unless this list says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<usize>>,
}

/// Where each tier runs: a rank per scheduler and per client group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The rank of each scheduler (none in the flat topology).
    pub schedulers: Vec<usize>,
    /// The rank of each client group.
    pub groups: Vec<usize>,
}

impl PlacementConfig {
    /// Whether the section is absent (the rule decides), so that it is left out of
    /// `config.json`.
    pub fn is_default(&self) -> bool {
        *self == PlacementConfig::default()
    }

    /// Where each tier runs over `ranks` processes, by this section or the rule; an error
    /// names a rank the run does not have.
    pub fn resolve(
        &self,
        topology: &TopologyConfig,
        num_clients: usize,
        ranks: usize,
    ) -> Result<Placement, String> {
        let workers = ranks - 1;
        let round_robin = |count: usize| -> Vec<usize> {
            (0..count)
                .map(|i| if workers == 0 { 0 } else { 1 + i % workers })
                .collect()
        };
        let placement = match topology {
            TopologyConfig::Flat {} => Placement {
                schedulers: Vec::new(),
                groups: self
                    .groups
                    .clone()
                    .unwrap_or_else(|| round_robin(workers.clamp(1, num_clients.max(1)))),
            },
            TopologyConfig::Hierarchical { schedulers, .. } => {
                let scheduler_ranks = self
                    .schedulers
                    .clone()
                    .unwrap_or_else(|| round_robin(*schedulers));
                Placement {
                    groups: self
                        .groups
                        .clone()
                        .unwrap_or_else(|| scheduler_ranks.clone()),
                    schedulers: scheduler_ranks,
                }
            }
        };
        let highest = placement.schedulers.iter().chain(&placement.groups).max();
        match highest {
            Some(&rank) if rank >= ranks => Err(format!(
                "placement puts a tier on rank {rank}, but the run has {ranks} rank{} (0 to {}); start it with `mpirun -n {}` or change `placement`",
                if ranks == 1 { "" } else { "s" },
                ranks - 1,
                rank + 1
            )),
            _ => Ok(placement),
        }
    }
}

impl Placement {
    /// Every tier a rank hosts, as `scheduler 0, client group 0` (or `nothing`).
    pub fn hosted_by(&self, rank: usize) -> String {
        let tiers: Vec<String> = (0..self.groups.len())
            .flat_map(|i| {
                let scheduler =
                    (self.schedulers.get(i) == Some(&rank)).then(|| format!("scheduler {i}"));
                let group = (self.groups[i] == rank).then(|| format!("client group {i}"));
                scheduler.into_iter().chain(group)
            })
            .collect();
        match (rank, tiers.is_empty()) {
            (0, true) => "the server".to_string(),
            (0, false) => format!("the server, {}", tiers.join(", ")),
            (_, true) => "nothing".to_string(),
            (_, false) => tiers.join(", "),
        }
    }

    /// The clients of each group: the topology's groups, or, in the flat topology, its
    /// clients split contiguously and evenly into as many groups as this placement has.
    pub fn client_groups(
        &self,
        topology: &TopologyConfig,
        num_clients: usize,
    ) -> Vec<Vec<ClientId>> {
        match topology {
            TopologyConfig::Flat {} => super::topology::even_split(num_clients, self.groups.len()),
            TopologyConfig::Hierarchical { .. } => topology.groups(num_clients),
        }
    }
}

impl Validate for PlacementConfig {
    /// The topology and `federation.num_clients`.
    type Context<'a> = (&'a TopologyConfig, usize);

    fn validate(&self, (topology, num_clients): Self::Context<'_>, problems: &mut Problems) {
        match topology {
            TopologyConfig::Flat {} => {
                problems.require(self.schedulers.is_none(), "schedulers", || {
                    "the flat topology has no schedulers".to_string()
                });
                if let Some(groups) = &self.groups {
                    problems.require((1..=num_clients.max(1)).contains(&groups.len()), "groups", || {
                        format!(
                            "lists {} groups; the flat topology's clients split into 1 to {num_clients} (federation.num_clients)",
                            groups.len()
                        )
                    });
                }
            }
            TopologyConfig::Hierarchical { schedulers, .. } => {
                for (field, list) in [("schedulers", &self.schedulers), ("groups", &self.groups)] {
                    if let Some(list) = list.as_ref().filter(|l| l.len() != *schedulers) {
                        problems.add(
                            field,
                            format!(
                                "lists {} ranks for {schedulers} schedulers (topology.schedulers)",
                                list.len()
                            ),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SchedulerMode;

    fn hierarchical(schedulers: usize) -> TopologyConfig {
        TopologyConfig::Hierarchical {
            schedulers,
            mode: SchedulerMode::Relay,
            edge_rounds: 1,
            assignment: None,
        }
    }

    #[test]
    fn the_rule_spreads_subtrees_over_the_ranks_after_the_servers() {
        let rule = PlacementConfig::default();
        let flat = TopologyConfig::Flat {};
        let one = rule.resolve(&flat, 10, 1).unwrap();
        assert_eq!(one.groups, [0]);
        let three = rule.resolve(&flat, 10, 3).unwrap();
        assert_eq!(three.groups, [1, 2]);
        assert_eq!(
            three.client_groups(&flat, 10),
            [vec![0, 1, 2, 3, 4], vec![5, 6, 7, 8, 9]]
        );
        // No more groups than clients.
        assert_eq!(rule.resolve(&flat, 2, 8).unwrap().groups, [1, 2]);
        let tree = rule.resolve(&hierarchical(5), 10, 3).unwrap();
        assert_eq!(tree.schedulers, [1, 2, 1, 2, 1]);
        assert_eq!(tree.groups, tree.schedulers);
        assert_eq!(
            tree.hosted_by(2),
            "scheduler 1, client group 1, scheduler 3, client group 3"
        );
        assert_eq!(tree.hosted_by(0), "the server");
        assert_eq!(
            rule.resolve(&hierarchical(2), 10, 1).unwrap().schedulers,
            [0, 0]
        );
    }

    #[test]
    fn an_explicit_placement_is_checked_against_the_tree_and_the_ranks() {
        let split = PlacementConfig {
            schedulers: None,
            groups: Some(vec![2, 1]),
        };
        let tree = split.resolve(&hierarchical(2), 10, 3).unwrap();
        assert_eq!((tree.schedulers, tree.groups), (vec![1, 2], vec![2, 1]));
        let error = split.resolve(&hierarchical(2), 10, 2).unwrap_err();
        assert!(
            error.contains("rank 2") && error.contains("mpirun -n 3"),
            "{error}"
        );
        let problems_of = |placement: &PlacementConfig, topology: &TopologyConfig| {
            let mut problems = Problems::new();
            problems.at("placement", |p| placement.validate((topology, 10), p));
            problems.into_vec()
        };
        let problems = problems_of(&split, &hierarchical(3));
        assert_eq!(problems[0].0, "placement.groups");
        assert!(
            problems[0].1.contains("2 ranks for 3 schedulers"),
            "{problems:?}"
        );
        let flat = TopologyConfig::Flat {};
        let too_many = PlacementConfig {
            schedulers: Some(vec![1]),
            groups: Some(vec![1; 11]),
        };
        let fields: Vec<String> = problems_of(&too_many, &flat)
            .into_iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(fields, ["placement.schedulers", "placement.groups"]);
    }
}
