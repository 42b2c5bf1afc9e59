//! Finding finished runs in folders and grouping them into configurations: runs whose
//! settings differ only in their `seed` are one configuration, measured over several seeds.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ReportError;
use crate::config::PartitionConfig;
use crate::output::RoundRecord;
use crate::output::run_folder::Failure;
use crate::registry::Registry;

/// A finished run as its folder records it.
#[derive(Debug, Clone)]
pub struct Run {
    /// Its folder.
    pub dir: PathBuf,
    /// Its resolved experiment (`config.json`), as written.
    pub config: Value,
    /// Its rounds (`metrics.jsonl`), in order.
    pub records: Vec<RoundRecord>,
}

/// A run that failed, as its folder records it ([`Failure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRun {
    /// Its folder.
    pub dir: PathBuf,
    /// The error it ended with.
    pub error: String,
    /// The rounds it finished, and the rounds it was to play, where its folder says.
    pub progress: Option<(u64, u64)>,
}

impl std::fmt::Display for FailedRun {
    /// `runs/s/scaffold: training diverged: … (after 5 of 50 rounds)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.dir.display(), self.error)?;
        match self.progress {
            Some((done, rounds)) => write!(f, " (after {done} of {rounds} rounds)"),
            None => write!(f, " (before its first round)"),
        }
    }
}

/// What the folders given to a report hold.
#[derive(Debug, Clone)]
pub struct Found {
    /// The finished runs, in path order.
    pub runs: Vec<Run>,
    /// A line for each unfinished run that did not fail (a stopped or running one).
    pub unfinished: Vec<String>,
    /// The runs that failed, in path order.
    pub failed: Vec<FailedRun>,
}

/// Runs of one configuration, which differ only in their seed.
#[derive(Debug, Clone)]
pub struct Configuration {
    /// What sets it apart from the other configurations, e.g. `fedprox, mu=0.01, alpha=0.1`:
    /// its runs' `label` (a sweep's variant name) where they have one, then what differs
    /// between the configurations of one label.
    pub label: String,
    /// Its settings: the config's leaves by dotted path, the partition as one value, without
    /// the name, label and seed and what does not change results.
    pub settings: BTreeMap<String, Value>,
    /// Its runs, in seed order.
    pub runs: Vec<Run>,
}

/// The settings that do not define a configuration: the name, the seed being aggregated over,
/// and those that do not change results.
const NOT_SETTINGS: [&str; 8] = [
    "name",
    "label",
    "seed",
    "federation.num_parallels",
    "federation.client_state_memory_mb",
    "checkpoint.every",
    "placement.schedulers",
    "placement.groups",
];

/// The runs in `inputs` (each a run folder, or a folder of run folders such as a sweep's), in
/// path order: the finished ones, and those left out, unfinished or failed. A folder that
/// records a failure but whose run finished (resumed by hand since) counts as finished.
pub fn find(inputs: &[PathBuf]) -> Result<Found, ReportError> {
    let mut dirs = Vec::new();
    for input in inputs {
        if is_run_folder(input) {
            dirs.push(input.clone());
        } else {
            let entries = fs::read_dir(input).map_err(ReportError::read(input))?;
            let mut children: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| is_run_folder(path))
                .collect();
            children.sort();
            dirs.extend(children);
        }
    }
    let mut found = Found {
        runs: Vec::new(),
        unfinished: Vec::new(),
        failed: Vec::new(),
    };
    for dir in dirs {
        let failure = read_failure(&dir)?;
        if !holds_run(&dir) {
            let error = failure.expect("a run folder without a run records a failure");
            found.failed.push(FailedRun {
                dir,
                error: error.error,
                progress: None,
            });
            continue;
        }
        let run = read(&dir)?;
        let rounds = run
            .config
            .pointer("/federation/rounds")
            .and_then(Value::as_u64)
            .ok_or_else(|| ReportError::Config {
                path: dir.join("config.json"),
                message: "no federation.rounds".into(),
            })?;
        let done = run.records.last().map_or(0, |r| u64::from(r.round));
        match failure {
            _ if done == rounds => found.runs.push(run),
            Some(failure) => found.failed.push(FailedRun {
                dir,
                error: failure.error,
                progress: Some((done, rounds)),
            }),
            None => found
                .unfinished
                .push(format!("{}: {done} of {rounds} rounds", dir.display())),
        }
    }
    if found.runs.is_empty() {
        return Err(ReportError::NoRuns {
            inputs: inputs.iter().map(|p| p.display().to_string()).collect(),
            failed: found.failed.iter().map(ToString::to_string).collect(),
        });
    }
    Ok(found)
}

/// Whether `dir` holds a run, finished or not, or the failure of one.
fn is_run_folder(dir: &Path) -> bool {
    holds_run(dir) || dir.join(Failure::FILE).is_file()
}

/// Whether `dir` holds a run's config and metrics.
fn holds_run(dir: &Path) -> bool {
    dir.join("config.json").is_file() && dir.join("metrics.jsonl").is_file()
}

/// The failure `dir` records, if any.
fn read_failure(dir: &Path) -> Result<Option<Failure>, ReportError> {
    let path = dir.join(Failure::FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(ReportError::read(&path)(error)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ReportError::Config {
            path,
            message: format!("not a run's failure record: {e}"),
        })
}

/// Reads a run folder's config and records.
fn read(dir: &Path) -> Result<Run, ReportError> {
    let config_path = dir.join("config.json");
    let text = fs::read_to_string(&config_path).map_err(ReportError::read(&config_path))?;
    let config = serde_json::from_str(&text).map_err(|e| ReportError::Config {
        path: config_path.clone(),
        message: e.to_string(),
    })?;
    let metrics_path = dir.join("metrics.jsonl");
    let text = fs::read_to_string(&metrics_path).map_err(ReportError::read(&metrics_path))?;
    let mut records = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let refused = |message: String| ReportError::Record {
            path: metrics_path.clone(),
            line: index + 1,
            message,
        };
        let record: RoundRecord =
            serde_json::from_str(line).map_err(|e| refused(format!("not a round record: {e}")))?;
        // As a resumed run checks its folder: rounds 1, 2, 3, … in order, each once.
        let expected = records.len() + 1;
        if record.round as usize != expected {
            return Err(refused(format!(
                "is round {}; expected round {expected} (rounds are written once each, in order)",
                record.round
            )));
        }
        if let Some(problem) = record.out_of_range() {
            return Err(refused(problem));
        }
        records.push(record);
    }
    Ok(Run {
        dir: dir.to_path_buf(),
        config,
        records,
    })
}

/// Groups runs into configurations, in the order each configuration first appears, with
/// each one's runs in seed order.
/// Partitions are labelled as `registry`'s schemes show them.
pub fn group(runs: Vec<Run>, registry: &Registry) -> Vec<Configuration> {
    let mut groups: Vec<(Named, Vec<Run>)> = Vec::new();
    for run in runs {
        let key = Named {
            name: run.config.get("label").and_then(Value::as_str).map(str::to_string),
            settings: settings(&run.config, registry),
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(run),
            None => groups.push((key, vec![run])),
        }
    }
    let labels = labels(&groups.iter().map(|(k, _)| k).collect::<Vec<_>>());
    groups
        .into_iter()
        .zip(labels)
        .map(|((key, mut runs), label)| {
            runs.sort_by_key(|run| run.config.get("seed").and_then(Value::as_u64));
            let label = label
                .or(key.name.clone())
                .unwrap_or_else(|| name_of(&runs[0].config).to_string());
            Configuration {
                label,
                settings: key.settings,
                runs,
            }
        })
        .collect()
}

/// A configuration's settings and the label its runs carry, if any.
#[derive(Debug, PartialEq)]
struct Named {
    name: Option<String>,
    settings: BTreeMap<String, Value>,
}

/// The settings every configuration has with one value, as `(path, value)` texts in path
/// order: what the compared runs share, which their labels leave out.
pub fn shared_settings(configurations: &[Configuration]) -> Vec<(String, String)> {
    let Some((first, others)) = configurations.split_first() else {
        return Vec::new();
    };
    first
        .settings
        .iter()
        .filter(|(path, value)| others.iter().all(|c| c.settings.get(*path) == Some(value)))
        .map(|(path, value)| (path.clone(), shown(value)))
        .collect()
}

/// A setting's value as a label shows it: a string without its quotes.
fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Keeps one run of each seed in each configuration: two runs of one configuration and seed
/// are one sample, not two (counted twice, they would narrow its interval falsely). Every
/// rerun of an experiment gives the same model to the bit, so the runs kept apart must hold
/// the same `model.f32`; returns a line for each run left out, naming the one kept.
pub fn one_per_seed(configurations: &mut [Configuration]) -> Result<Vec<String>, ReportError> {
    let mut left_out = Vec::new();
    for configuration in configurations {
        let mut kept: Vec<Run> = Vec::new();
        for run in configuration.runs.drain(..) {
            let seed = run.config.get("seed");
            let Some(twin) = kept.iter().find(|k| k.config.get("seed") == seed) else {
                kept.push(run);
                continue;
            };
            if model_of(&twin.dir)? != model_of(&run.dir)? {
                return Err(ReportError::Conflicting {
                    first: twin.dir.clone(),
                    second: run.dir,
                });
            }
            left_out.push(format!(
                "{}: the same configuration and seed as {}, with the same model; counted once",
                run.dir.display(),
                twin.dir.display()
            ));
        }
        configuration.runs = kept;
    }
    Ok(left_out)
}

/// The final model a finished run folder holds, as written.
fn model_of(dir: &Path) -> Result<Vec<u8>, ReportError> {
    let path = dir.join("model.f32");
    fs::read(&path).map_err(ReportError::read(&path))
}

/// Each configuration's label: its runs' own label (a sweep's variant name) if they carry
/// one, then the values of the fields whose present values differ between configurations (a
/// field only some have, such as FedProx's `mu` beside FedAvg, is told by the algorithm's
/// name), or of every field that differs in any way where that leaves two labels equal. A
/// field whose value the runs' labels tell (one value under each label: what a variant sets)
/// is left to them. `None` when nothing differs and no label is given.
fn labels(all: &[&Named]) -> Vec<Option<String>> {
    let settings: Vec<&BTreeMap<String, Value>> = all.iter().map(|n| &n.settings).collect();
    // One name over every configuration (a sweep of one variant) tells none apart.
    let names: BTreeSet<&Option<String>> = all.iter().map(|n| &n.name).collect();
    let named = names.len() > 1;
    let with = |varying: Vec<String>| -> Vec<Option<String>> {
        let varying = match named {
            true => untold_by_names(all, varying),
            false => varying,
        };
        all.iter()
            .map(|named_config| {
                let told = label(&named_config.settings, &varying);
                let name = named_config.name.as_ref().filter(|_| named);
                match (name, told) {
                    (Some(name), Some(told)) => Some(format!("{name}, {told}")),
                    (Some(name), None) => Some(name.clone()),
                    (None, told) => told,
                }
            })
            .collect()
    };
    let short = with(varying_paths(&settings, false));
    let distinct: BTreeSet<&Option<String>> = short.iter().collect();
    if distinct.len() == short.len() {
        short
    } else {
        with(varying_paths(&settings, true))
    }
}

/// The paths of `varying` whose value differs between two configurations of one name (or
/// two without one): those the names do not tell.
fn untold_by_names(all: &[&Named], varying: Vec<String>) -> Vec<String> {
    varying
        .into_iter()
        .filter(|path| {
            all.iter().any(|a| {
                all.iter()
                    .any(|b| a.name == b.name && a.settings.get(path) != b.settings.get(path))
            })
        })
        .collect()
}

/// A config's leaf values by dotted path, without the fields in [`NOT_SETTINGS`]. The
/// partition is one leaf, `partition`, valued as it reads (`dirichlet(0.5)`): a scheme and its
/// parameters are one setting, not several.
fn settings(config: &Value, registry: &Registry) -> BTreeMap<String, Value> {
    let mut leaves = BTreeMap::new();
    flatten(config, String::new(), &mut leaves);
    for path in NOT_SETTINGS {
        leaves.remove(path);
    }
    if let Some(partition) = partition_of(config) {
        leaves.retain(|path, _| !path.starts_with("partition."));
        let label = registry.partition_label(&partition);
        leaves.insert("partition".into(), Value::String(label));
    }
    leaves
}

/// The partition a run's config gives, if it is one that fedsim reads.
pub(super) fn partition_of(config: &Value) -> Option<PartitionConfig> {
    serde_json::from_value(config.get("partition")?.clone()).ok()
}

/// Collects the leaves of `value` under `path`; arrays are leaves.
fn flatten(value: &Value, path: String, leaves: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                flatten(child, child_path, leaves);
            }
        }
        leaf => {
            leaves.insert(path, leaf.clone());
        }
    }
}

/// The paths whose values differ between the configurations that have them, and with
/// `absence_counts`, also those some configurations lack.
fn varying_paths(all: &[&BTreeMap<String, Value>], absence_counts: bool) -> Vec<String> {
    let paths: BTreeSet<&String> = all.iter().flat_map(|s| s.keys()).collect();
    paths
        .into_iter()
        .filter(|path| {
            let values: Vec<Option<&Value>> = all.iter().map(|s| s.get(*path)).collect();
            let present: BTreeSet<String> =
                values.iter().flatten().map(|v| v.to_string()).collect();
            present.len() > 1 || (absence_counts && values.contains(&None))
        })
        .cloned()
        .collect()
}

/// The fields whose value names a kind of thing (`strategy.name`, `partition`,
/// `topology.kind`, `topology.mode`): a label shows them by value alone, first.
const KIND_FIELDS: [&str; 5] = ["name", "partition", "scheme", "kind", "mode"];

/// `fedprox, dirichlet(0.1), seed=7`: the configuration's values on the varying paths, each
/// named by its last part (by its whole path where two last parts are equal), a kind field by
/// its value alone, the algorithm first. `None` when nothing varies.
fn label(settings: &BTreeMap<String, Value>, varying: &[String]) -> Option<String> {
    let leaf = |path: &str| path.rsplit('.').next().unwrap_or(path).to_string();
    let is_kind = |path: &str| KIND_FIELDS.contains(&leaf(path).as_str());
    let ambiguous = |path: &str| {
        varying
            .iter()
            .filter(|other| leaf(other) == leaf(path))
            .count()
            > 1
    };
    let mut ordered: Vec<&String> = varying.iter().filter(|p| is_kind(p)).collect();
    // The algorithm leads: `fedprox, dirichlet(0.1)`.
    ordered.sort_by_key(|path| path.as_str() != "strategy.name");
    ordered.extend(varying.iter().filter(|p| !is_kind(p)));
    let mut present: Vec<String> = Vec::new();
    let mut absent: Vec<String> = Vec::new();
    for path in ordered {
        match settings.get(path) {
            Some(value) => {
                let shown = shown(value);
                present.push(match (is_kind(path), ambiguous(path)) {
                    (true, _) => shown,
                    (false, false) => format!("{}={shown}", leaf(path)),
                    (false, true) => format!("{path}={shown}"),
                });
            }
            None => {
                let part = format!("no {}", leaf(missing_section(settings, path)));
                if !absent.contains(&part) {
                    absent.push(part);
                }
            }
        }
    }
    // What a configuration lacks is named only when it has nothing else to be told by.
    let parts = if present.is_empty() { absent } else { present };
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The outermost section of `path` that `settings` has nothing under (`byzantine` for
/// `byzantine.attack.kind` when the config has no `byzantine` at all).
fn missing_section<'a>(settings: &BTreeMap<String, Value>, path: &'a str) -> &'a str {
    let has_under = |prefix: &str| {
        settings
            .keys()
            .any(|key| key == prefix || key.starts_with(&format!("{prefix}.")))
    };
    path.match_indices('.')
        .map(|(i, _)| &path[..i])
        .find(|prefix| !has_under(prefix))
        .unwrap_or(path)
}

/// The experiment name a config gives.
fn name_of(config: &Value) -> &str {
    config.get("name").and_then(Value::as_str).unwrap_or("run")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The runs grouped, partitions labelled by the built-in schemes.
    fn group(runs: Vec<Run>) -> Vec<Configuration> {
        super::group(runs, &Registry::builtin())
    }

    fn run(config: Value) -> Run {
        Run {
            dir: PathBuf::new(),
            config,
            records: Vec::new(),
        }
    }

    #[test]
    fn runs_differing_only_in_seed_form_one_configuration_labelled_by_what_varies() {
        let config = |strategy: Value, alpha: f64, seed: u64| {
            json!({"name": "drift", "seed": seed, "federation": {"rounds": 3, "num_parallels": seed},
                   "partition": {"scheme": "dirichlet", "alpha": alpha}, "strategy": strategy})
        };
        let fedavg = json!({"name": "fedavg"});
        let fedprox = json!({"name": "fedprox", "mu": 0.01});
        let configs = group(vec![
            run(config(fedavg.clone(), 0.1, 2)),
            run(config(fedprox.clone(), 0.1, 1)),
            run(config(fedavg.clone(), 0.1, 1)),
            run(config(fedavg, 1.0, 1)),
        ]);
        let labels: Vec<&str> = configs.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "fedavg, dirichlet(0.1)",
                "fedprox, dirichlet(0.1)",
                "fedavg, dirichlet(1.0)"
            ]
        );
        let seeds: Vec<u64> = configs[0]
            .runs
            .iter()
            .map(|r| r.config["seed"].as_u64().unwrap())
            .collect();
        assert_eq!(seeds, [1, 2]);
    }

    #[test]
    fn a_field_only_some_configurations_have_is_shown_where_labels_would_collide() {
        let fixed = json!({"name": "a", "partition": {"scheme": "iid", "seed": 7}});
        let from_seed = json!({"name": "a", "partition": {"scheme": "iid"}});
        let labels: Vec<String> = group(vec![run(fixed), run(from_seed)])
            .into_iter()
            .map(|c| c.label)
            .collect();
        assert_eq!(labels, ["iid(seed=7)", "iid"]);
        let attacked =
            json!({"name": "a", "byzantine": {"fraction": 0.2, "attack": {"kind": "sign_flip"}}});
        let labels: Vec<String> = group(vec![run(attacked), run(json!({"name": "a"}))])
            .into_iter()
            .map(|c| c.label)
            .collect();
        assert_eq!(labels, ["sign_flip, fraction=0.2", "no byzantine"]);
    }

    #[test]
    fn runs_labelled_by_a_sweeps_variants_are_called_by_them_and_by_what_varies_within_them() {
        // The variants of tutorial step 5 (one sets a deadline, the other nothing) crossed
        // with a grid of the learning rate.
        let config = |label: &str, deadline: Option<f64>, lr: f64| {
            let mut config = json!({"name": "s", "label": label, "client": {"lr": lr},
                                    "availability": {"dropout": 0.1}});
            if let Some(deadline) = deadline {
                config["availability"]["deadline_s"] = json!(deadline);
            }
            config
        };
        let configs = group(vec![
            run(config("wait-for-all", None, 0.1)),
            run(config("deadline", Some(1.5), 0.1)),
            run(config("wait-for-all", None, 0.05)),
            run(config("deadline", Some(1.5), 0.05)),
        ]);
        let labels: Vec<&str> = configs.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "wait-for-all, lr=0.1",
                "deadline, lr=0.1",
                "wait-for-all, lr=0.05",
                "deadline, lr=0.05"
            ]
        );
        let shared = shared_settings(&configs);
        assert_eq!(shared, [("availability.dropout".to_string(), "0.1".to_string())]);
        // One variant crossed with a grid: its name tells nothing apart, and names a report of
        // one configuration.
        let single = group(vec![
            run(config("non-iid", None, 0.1)),
            run(config("non-iid", None, 0.05)),
        ]);
        let labels: Vec<&str> = single.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["lr=0.1", "lr=0.05"]);
        assert_eq!(group(vec![run(config("deadline", Some(1.5), 0.1))])[0].label, "deadline");
    }

    #[test]
    fn a_partition_that_varies_reads_as_one_value() {
        let config = |partition: Value| json!({"name": "a", "partition": partition});
        let labels: Vec<String> = group(vec![
            run(config(
                json!({"scheme": "dirichlet", "alpha": 0.5, "min_size": 10}),
            )),
            run(config(json!({"scheme": "labels", "labels_per_client": 1}))),
            run(config(json!({"scheme": "labels", "labels_per_client": 2}))),
        ])
        .into_iter()
        .map(|c| c.label)
        .collect();
        assert_eq!(labels, ["dirichlet(0.5)", "labels(1)", "labels(2)"]);
    }

    #[test]
    fn a_single_configuration_is_labelled_by_its_name_and_equal_leaves_by_their_path() {
        let configs = group(vec![run(json!({"name": "mnist", "seed": 1}))]);
        assert_eq!(configs[0].label, "mnist");
        let config = |a: u64, b: u64| json!({"server_link": {"latency_ms": a}, "client_link": {"latency_ms": b}});
        let labels: Vec<String> = group(vec![run(config(1, 2)), run(config(3, 4))])
            .into_iter()
            .map(|c| c.label)
            .collect();
        assert_eq!(
            labels,
            [
                "client_link.latency_ms=2, server_link.latency_ms=1",
                "client_link.latency_ms=4, server_link.latency_ms=3"
            ]
        );
    }
}
