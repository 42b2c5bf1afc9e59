//! Sweeps: one base experiment and the runs that vary it. A sweep file names the base (a path,
//! relative to the sweep file, or an inline experiment), a grid of axes (an experiment field's
//! path and its values; every combination is a run) and optional named variants (each a set of
//! overrides, for what a grid cannot express). Every run is an ordinary experiment with its own
//! run folder under the sweep folder, named from its variant and axis values.
//!
//! ```json
//! {
//!   "name": "drift",
//!   "base": "drift.json",
//!   "variants": [
//!     {"name": "fedavg", "set": {"strategy": {"name": "fedavg"}}},
//!     {"name": "fedprox", "set": {"strategy": {"name": "fedprox", "mu": 0.01}}}
//!   ],
//!   "grid": {"partition.alpha": [0.1, 1.0], "seed": [1, 2, 3]}
//! }
//! ```
//!
//! Every run's config is built and validated before the first run starts. Axes are applied in
//! the order of their paths (sorted), after the variant's overrides.
//!
//! A [`Shard`] keeps every N-th run, so that N machines (a batch system's job array) play
//! disjoint parts of one sweep with no coordinator; `fedsim report` merges their folders.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use serde_json::Value;

use crate::checkpoint::CHECKPOINT;
use crate::config::strict_json;
use crate::config::{ConfigError, ExperimentConfig, Override};
use crate::error::Error;
pub use crate::error::SweepError;
use crate::experiment::{Experiment, Run};
use crate::output::claim::{self, Claim, FolderKind, Found, Hold};
use crate::output::run_folder::{Failure, FolderError, Saved};
use crate::output::{Progress, say};
use crate::registry::Registry;
use crate::stop::StopSignal;

/// A sweep file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    /// The sweep's name: the default folder is `runs/<name>`.
    name: String,
    /// The base experiment: a path relative to the sweep file, or an experiment object.
    base: Value,
    /// Named sets of overrides; each is crossed with the grid.
    #[serde(default)]
    variants: Vec<Variant>,
    /// Field paths and their values; every combination is a run.
    #[serde(default)]
    grid: BTreeMap<String, Vec<Value>>,
    /// The test accuracy (a fraction) whose first round the sweep's report gives.
    #[serde(default)]
    target_accuracy: Option<f64>,
}

/// One named set of overrides.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Variant {
    /// Its name, the first part of its runs' folder names.
    name: String,
    /// Field paths and their values.
    set: BTreeMap<String, Value>,
}

/// One run of a sweep, validated.
#[derive(Debug, Clone)]
pub struct SweepRun {
    /// Its folder name under the sweep folder, from its variant and axis values.
    pub name: String,
    /// Its overrides of the base experiment, as `path=value` texts.
    pub overrides: Vec<String>,
    /// Its resolved experiment.
    pub config: ExperimentConfig,
}

/// A sweep with every run built and checked.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The sweep's name.
    pub name: String,
    /// Its runs, in the order they are run.
    pub runs: Vec<SweepRun>,
    /// The test accuracy whose first round and simulated time its report gives.
    pub target_accuracy: Option<f64>,
    /// The slice it is cut to, if it is one of several processes playing a sweep.
    pub shard: Option<Shard>,
}

impl Sweep {
    /// Reads the sweep file at `path` and builds and validates every run, its registered
    /// sections read with `registry`. `overrides` (`fedsim sweep --set`'s `path.to.field=value`
    /// texts) change the base experiment of every run, before its variant's and its axes'
    /// overrides, which the sweep is about.
    pub fn load(path: &Path, overrides: &[String], registry: &Registry) -> Result<Self, SweepError> {
        let file_error = |reason: String| SweepError::File {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = fs::read(path).map_err(|e| file_error(e.to_string()))?;
        let text = strict_json::text(bytes).map_err(file_error)?;
        Self::from_text(&text, path, overrides, registry)
    }

    /// The sweep `text` holds, as [`Sweep::load`] reads a file: `path` names it in messages,
    /// and a base given as a path starts from its folder (a sweep made in Python, not read
    /// from a file, is named as `<dict>` in the current folder).
    pub fn from_text(
        text: &str,
        path: &Path,
        overrides: &[String],
        registry: &Registry,
    ) -> Result<Self, SweepError> {
        for text in overrides {
            Override::parse(text)?;
        }
        let file_error = |reason: String| SweepError::File {
            path: path.to_path_buf(),
            reason,
        };
        let value = strict_json::parse(text).map_err(|e| file_error(e.to_string()))?;
        let file: SweepFile =
            serde_path_to_error::deserialize(value).map_err(|e| file_error(field_error(&e)))?;
        let (base, base_path) = match &file.base {
            Value::String(relative) => {
                let base_path = path.parent().unwrap_or(Path::new(".")).join(relative);
                let text = fs::read_to_string(&base_path)
                    .map_err(|e| file_error(format!("base {}: {e}", base_path.display())))?;
                let base = strict_json::parse(&text)
                    .map_err(|e| file_error(format!("base {}: {e}", base_path.display())))?;
                (base, base_path)
            }
            Value::Object(_) => (file.base.clone(), path.to_path_buf()),
            _ => {
                return Err(file_error(
                    "`base` must be an experiment file's path or an experiment object".into(),
                ));
            }
        };
        if let Some(target) = file.target_accuracy.filter(|t| !(*t > 0.0 && *t <= 1.0)) {
            return Err(file_error(format!(
                "target_accuracy must be a fraction in (0, 1], e.g. 0.9; got {target}"
            )));
        }
        if let Some((axis, _)) = file.grid.iter().find(|(_, values)| values.is_empty()) {
            return Err(file_error(format!("grid axis {axis:?} has no values")));
        }
        let mut runs = Vec::new();
        let mut problems = Vec::new();
        for (name, sets) in expand(&file) {
            let overrides: Vec<String> = overrides
                .iter()
                .cloned()
                .chain(sets.iter().map(|(field, value)| format!("{field}={value}")))
                .collect();
            match build(&base, &base_path, &overrides, registry) {
                Ok(config) => runs.push(SweepRun {
                    name,
                    overrides,
                    config,
                }),
                Err(error) => {
                    problems.push(format!("  run {name}: {}", indent(&error.to_string())))
                }
            }
        }
        let mut names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            problems.push(format!(
                "  two runs would share the folder {:?}: give the variants distinct names",
                pair[0]
            ));
        }
        if problems.is_empty() {
            Ok(Sweep {
                name: file.name,
                runs,
                target_accuracy: file.target_accuracy,
                shard: None,
            })
        } else {
            Err(SweepError::InvalidRuns {
                path: path.to_path_buf(),
                problems,
            })
        }
    }
}

/// The `index`-th of `count` disjoint slices of a sweep's runs, written `I/N` (from `1/N` to
/// `N/N`). Run `k` (in sweep order, from 0) belongs to slice `k mod N + 1`: dealing the runs
/// out in turn gives every slice a share of each variant, so slices take similar times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, from 1.
    pub index: usize,
    /// How many slices.
    pub count: usize,
}

impl Shard {
    /// Whether the run at position `run` (from 0) of the sweep belongs to this slice.
    pub fn holds(&self, run: usize) -> bool {
        run % self.count + 1 == self.index
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let expected = || format!("expected I/N with 1 <= I <= N, such as 2/8; got {text:?}");
        let (index, count) = text.split_once('/').ok_or_else(expected)?;
        let index: usize = index.trim().parse().map_err(|_| expected())?;
        let count: usize = count.trim().parse().map_err(|_| expected())?;
        if index == 0 || index > count {
            return Err(expected());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// What a sweep folder already holds of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FolderState {
    /// Nothing: the run starts.
    New,
    /// A checkpoint short of the last round: the run resumes.
    Partial,
    /// A finished run: skipped.
    Finished,
    /// A finished run of the same settings in another folder of the sweep (named here), left
    /// by an earlier sweep into the folder: not played again, for it would give the same
    /// model, and a report would count one experiment twice.
    Held(String),
}

impl FolderState {
    /// Whether the run is to be played (started or resumed).
    pub fn to_play(&self) -> bool {
        matches!(self, FolderState::New | FolderState::Partial)
    }
}

/// How a sweep ended.
#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// Runs played (started or resumed) to their end.
    pub completed: usize,
    /// Runs that had finished before and were skipped.
    pub skipped: usize,
    /// Runs that failed, with why.
    pub failed: Vec<(String, Error)>,
    /// Whether a stop (Ctrl-C, SIGTERM) ended the sweep early.
    pub stopped: bool,
}

impl Sweep {
    /// The folder under `dir` of each run, in sweep order, `states` being what
    /// [`Sweep::states`] read of `dir`: a run held under another folder name is that folder.
    pub fn run_folders(&self, dir: &Path, states: &[FolderState]) -> Vec<PathBuf> {
        self.runs
            .iter()
            .zip(states)
            .map(|(run, state)| match state {
                FolderState::Held(holder) => dir.join(holder),
                _ => dir.join(&run.name),
            })
            .collect()
    }

    /// The sweep cut down to the runs of `shard`, which keep their names and folders.
    pub fn shard(mut self, shard: Shard) -> Sweep {
        self.shard = Some(shard);
        let mut position = 0..;
        self.runs
            .retain(|_| shard.holds(position.next().expect("an endless range")));
        self
    }

    /// What `dir` holds of each run, read without changing anything. A folder left by a run
    /// stopped before its first checkpoint holds no finished round: the run starts again. A
    /// sweep folder or run folder holding files fedsim did not write, or a run with other
    /// settings than the sweep now gives it, is refused.
    pub fn states(&self, dir: &Path) -> Result<Vec<FolderState>, Error> {
        claim::check(dir, FolderKind::Sweep, &[]).map_err(FolderError::from)?;
        let saved = saved_runs(dir)?;
        self.runs
            .iter()
            .map(|run| {
                let folder = dir.join(&run.name);
                claim::check(&folder, FolderKind::Run, &[]).map_err(FolderError::from)?;
                let now = serde_json::to_value(&run.config).expect("a config always serialises");
                match saved.get(&run.name) {
                    Some(own) => own.state_for(&folder, &now),
                    None => Ok(held_by(&saved, &now).unwrap_or(FolderState::New)),
                }
            })
            .collect()
    }

    /// Plays every run that `dir` does not hold finished, `jobs` at a time, each with an equal
    /// share of the machine's cores as its workers; shows progress on stdout (one line per run
    /// if `plain`), and stops starting runs once `stop` is requested. A run that fails leaves
    /// its error in its folder ([`Failure`]), where the sweep's report finds it; the others go
    /// on.
    /// `states` are what [`Sweep::states`] read of `dir`.
    pub fn run(
        &self,
        dir: &Path,
        states: Vec<FolderState>,
        jobs: usize,
        plain: bool,
        registry: &Registry,
        stop: &StopSignal,
    ) -> Result<SweepOutcome, Error> {
        // The slices of a sharded sweep share its folder, each playing runs of its own.
        let hold = match self.shard {
            Some(_) => Hold::Shared,
            None => Hold::Alone,
        };
        let _claim = Claim::take(dir, FolderKind::Sweep, &[], hold).map_err(FolderError::from)?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let workers = (cores / jobs.max(1)).max(1);
        let todo: VecDeque<(&SweepRun, FolderState)> = self
            .runs
            .iter()
            .zip(states)
            .filter(|(_, state)| state.to_play())
            .collect();
        let outcome = Mutex::new(SweepOutcome {
            skipped: self.runs.len() - todo.len(),
            ..SweepOutcome::default()
        });
        let bar = sweep_bar(todo.len(), plain);
        let total = todo.len();
        let queue = Mutex::new(todo);
        std::thread::scope(|scope| {
            for _ in 0..jobs.max(1) {
                scope.spawn(|| {
                    loop {
                        if stop.is_requested() {
                            return;
                        }
                        let Some((run, state)) =
                            queue.lock().expect("no panics hold it").pop_front()
                        else {
                            return;
                        };
                        let folder = dir.join(&run.name);
                        let result = Failure::clear(&folder)
                            .map_err(Error::from)
                            .and_then(|()| play(&folder, run, state, workers, registry, stop));
                        let mut outcome = outcome.lock().expect("no panics hold it");
                        let line = match result {
                            Ok(accuracy) => {
                                outcome.completed += 1;
                                format!("{}: test accuracy {:.2}%", run.name, 100.0 * accuracy)
                            }
                            Err(Error::Stopped { .. }) => {
                                outcome.stopped = true;
                                format!("{}: stopped", run.name)
                            }
                            Err(error) => {
                                let failure = Failure {
                                    error: error.to_string(),
                                };
                                let unrecorded = failure
                                    .record(&folder)
                                    .err()
                                    .map(|e| format!(" (the failure could not be recorded: {e})"));
                                let line = format!(
                                    "{}: failed: {error}{}",
                                    run.name,
                                    unrecorded.unwrap_or_default()
                                );
                                outcome.failed.push((run.name.clone(), error));
                                line
                            }
                        };
                        let done = outcome.completed + outcome.failed.len();
                        match &bar {
                            Some(bar) => {
                                bar.println(&line);
                                bar.inc(1);
                            }
                            None => say(format_args!("[{done}/{total}] {line}")),
                        }
                    }
                });
            }
        });
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        let mut outcome = outcome.into_inner().expect("no panics hold it");
        outcome.stopped |= stop.is_requested();
        Ok(outcome)
    }
}

/// A bar over the sweep's runs with its estimated time left, on a terminal unless `plain`.
fn sweep_bar(runs: usize, plain: bool) -> Option<ProgressBar> {
    use std::io::IsTerminal;
    if plain || !std::io::stdout().is_terminal() {
        return None;
    }
    let style = ProgressStyle::with_template(
        "sweep [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} runs done (eta {eta})",
    )
    .expect("the template is valid")
    .progress_chars("=> ");
    Some(ProgressBar::new(runs as u64).with_style(style))
}

/// A run's checkpoint in a sweep folder: the settings it ran with and the rounds it finished.
struct SavedRun {
    config: Value,
    round: u32,
}

impl SavedRun {
    /// Whether the run has played all its rounds.
    fn is_finished(&self) -> bool {
        let rounds = self.config.pointer("/federation/rounds");
        rounds.and_then(Value::as_u64) == Some(u64::from(self.round))
    }

    /// What this checkpoint, in the run's own `folder`, is to the run whose config is `now`.
    fn state_for(&self, folder: &Path, now: &Value) -> Result<FolderState, Error> {
        let fields = changed_fields(&self.config, now);
        if !fields.is_empty() {
            return Err(SweepError::Changed {
                folder: folder.to_path_buf(),
                fields,
            }
            .into());
        }
        Ok(match self.is_finished() {
            true => FolderState::Finished,
            false => FolderState::Partial,
        })
    }
}

/// The checkpoints of the run folders in the sweep folder `dir`, by folder name, each read
/// once. The checkpoint alone says whether a run is finished and with which settings; the
/// data are loaded (and checked) only when a run resumes.
fn saved_runs(dir: &Path) -> Result<BTreeMap<String, SavedRun>, Error> {
    let mut saved = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(saved);
    };
    for folder in entries.filter_map(|entry| entry.ok().map(|e| e.path())) {
        let is_run = matches!(claim::inspect(&folder)?, Found::Fedsim(FolderKind::Run));
        if is_run && folder.join(CHECKPOINT).exists() {
            let state = Saved::read(&folder)?.state;
            let name = folder.file_name().unwrap_or_default().to_string_lossy();
            let run = SavedRun {
                config: state.config,
                round: state.round,
            };
            saved.insert(name.into_owned(), run);
        }
    }
    Ok(saved)
}

/// The folder, among `saved`, of a finished run of the experiment `now` (the first by name).
fn held_by(saved: &BTreeMap<String, SavedRun>, now: &Value) -> Option<FolderState> {
    saved
        .iter()
        .find(|(_, run)| run.is_finished() && same_experiment(&run.config, now))
        .map(|(name, _)| FolderState::Held(name.clone()))
}

/// Whether two resolved configs are one experiment: equal but for their names and the fields
/// that do not change results.
fn same_experiment(before: &Value, now: &Value) -> bool {
    changed_fields(before, now)
        .iter()
        .all(|field| field.starts_with("name is "))
}

/// Plays one run in `folder` (new, or resumed), with `workers` training threads for a new run;
/// returns its final test accuracy.
fn play(
    folder: &Path,
    run: &SweepRun,
    state: FolderState,
    workers: usize,
    registry: &Registry,
    stop: &StopSignal,
) -> Result<f64, Error> {
    let playing = match state {
        FolderState::Partial => Run::resume(folder, registry)?,
        // A new run: finished ones are never played.
        FolderState::New | FolderState::Finished | FolderState::Held(_) => {
            let mut config = run.config.clone();
            config.federation.num_parallels = workers;
            Run::new(Experiment::prepare(config, registry)?, folder)?
        }
    };
    let result = playing.play(&Progress::Silent, stop, None)?;
    Ok(result.map_or(f64::NAN, |r| r.summary.final_accuracy))
}

/// What is wrong with a sweep file's field: its path, and for a misspelt field name the valid
/// name nearest to it.
fn field_error(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let message = crate::config::explain(&error.inner().to_string());
    match error.path().to_string().as_str() {
        "." => message,
        path => format!("{path}: {message}"),
    }
}

/// Every run of `file` as its folder name and its overrides (field path, JSON value): each
/// variant (or none) crossed with every combination of the grid's axes.
fn expand(file: &SweepFile) -> Vec<(String, Vec<(String, Value)>)> {
    let plain = Variant {
        name: String::new(),
        set: BTreeMap::new(),
    };
    let variants: Vec<&Variant> = if file.variants.is_empty() {
        vec![&plain]
    } else {
        file.variants.iter().collect()
    };
    let mut combinations: Vec<Vec<(&String, &Value)>> = vec![Vec::new()];
    for (axis, values) in &file.grid {
        combinations = combinations
            .into_iter()
            .flat_map(|combination| {
                values.iter().map(move |value| {
                    let mut next = combination.clone();
                    next.push((axis, value));
                    next
                })
            })
            .collect();
    }
    let mut runs = Vec::new();
    for variant in variants {
        for combination in &combinations {
            let mut parts: Vec<String> = Vec::new();
            if !variant.name.is_empty() {
                parts.push(sanitise(&variant.name));
            }
            parts.extend(combination.iter().map(|(axis, value)| label(axis, value)));
            let name = if parts.is_empty() {
                "run".to_string()
            } else {
                parts.join("_")
            };
            // A named variant is what its runs are called in the sweep's report, unless it
            // sets a label of its own.
            let label = (!variant.name.is_empty()).then(|| ("label".to_string(), Value::String(variant.name.clone())));
            let sets = label
                .into_iter()
                .chain(
                    variant
                        .set
                        .iter()
                        .chain(combination.iter().copied())
                        .map(|(field, value)| (field.clone(), value.clone())),
                )
                .collect();
            runs.push((name, sets));
        }
    }
    runs
}

/// A readable folder-name part for an axis value: the field's last name and the value (an
/// object by its `name` and other fields, as `strategy-fedprox-mu-0.01`).
fn label(axis: &str, value: &Value) -> String {
    let key = axis.rsplit('.').next().unwrap_or(axis);
    let text =
        match value {
            Value::String(s) => s.clone(),
            Value::Object(fields) => {
                let mut parts: Vec<String> = fields
                    .get("name")
                    .map(|n| n.as_str().map_or(n.to_string(), str::to_string))
                    .into_iter()
                    .collect();
                parts.extend(fields.iter().filter(|(k, _)| *k != "name").map(|(k, v)| {
                    format!("{k}-{}", v.as_str().map_or(v.to_string(), str::to_string))
                }));
                parts.join("-")
            }
            other => other.to_string(),
        };
    sanitise(&format!("{key}-{text}"))
}

/// `text` with every character but letters, digits, `.`, `-` and `_` replaced by `-`.
pub(crate) fn sanitise(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The experiment `base` (read from `path`) with `overrides` applied, validated.
fn build(
    base: &Value,
    path: &Path,
    overrides: &[String],
    registry: &Registry,
) -> Result<ExperimentConfig, ConfigError> {
    let parsed = overrides
        .iter()
        .map(|text| Override::parse(text))
        .collect::<Result<Vec<_>, _>>()?;
    ExperimentConfig::with_overrides(base.clone(), path, &parsed, registry)
}

/// A multi-line message indented under its run's line.
fn indent(text: &str) -> String {
    text.replace('\n', "\n    ")
}

/// The fields in which a run folder's `config.json` (`before`) differs from the config the
/// sweep now gives that run (`now`), ignoring `federation.num_parallels`,
/// `federation.client_state_memory_mb`, `placement` and `label`, which never change results.
fn changed_fields(before: &Value, now: &Value) -> Vec<String> {
    let (mut before, mut now) = (before.clone(), now.clone());
    for config in [&mut now, &mut before] {
        if let Some(federation) = config.get_mut("federation").and_then(Value::as_object_mut) {
            federation.remove("num_parallels");
            federation.remove("client_state_memory_mb");
        }
        if let Some(config) = config.as_object_mut() {
            config.remove("placement");
            config.remove("label");
        }
    }
    crate::experiment::differences(&before, &now, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sweep(value: Value) -> SweepFile {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn variants_cross_the_grid_with_readable_names() {
        let file = sweep(json!({
            "name": "s",
            "base": "x.json",
            "variants": [
                {"name": "fedavg", "set": {"strategy": {"name": "fedavg"}}},
                {"name": "prox", "set": {"strategy": {"name": "fedprox", "mu": 0.01}}}
            ],
            "grid": {"seed": [1, 2, 3], "partition.alpha": [0.1, 1.0]}
        }));
        let runs = expand(&file);
        assert_eq!(runs.len(), 2 * 2 * 3);
        assert_eq!(runs[0].0, "fedavg_alpha-0.1_seed-1");
        assert_eq!(runs[11].0, "prox_alpha-1.0_seed-3");
        let sets: Vec<String> = runs[11].1.iter().map(|(f, v)| format!("{f}={v}")).collect();
        assert_eq!(
            sets,
            [
                r#"label="prox""#,
                r#"strategy={"mu":0.01,"name":"fedprox"}"#,
                "partition.alpha=1.0",
                "seed=3"
            ]
        );
    }

    #[test]
    fn an_object_value_is_named_by_its_name_and_fields() {
        let value = json!({"name": "fedprox", "mu": 0.01});
        assert_eq!(label("strategy", &value), "strategy-fedprox-mu-0.01");
        assert_eq!(
            label("client.work", &json!({"kind": "fixed"})),
            "work-kind-fixed"
        );
    }

    #[test]
    fn shards_deal_the_runs_out_in_turn() {
        let shard = |text: &str| text.parse::<Shard>();
        assert_eq!(shard("2/3"), Ok(Shard { index: 2, count: 3 }));
        for bad in ["0/3", "4/3", "1/0", "3", "a/b", "1/2/3", ""] {
            let error = shard(bad).unwrap_err();
            assert!(error.contains("1 <= I <= N"), "{bad}: {error}");
        }
        let held: Vec<usize> = (0..7).filter(|&k| shard("2/3").unwrap().holds(k)).collect();
        assert_eq!(held, [1, 4]);
    }

    proptest::proptest! {
        /// Every run lands in exactly one slice, whatever the number of runs and slices.
        #[test]
        fn shards_are_disjoint_and_lose_no_run(runs in 0usize..50, count in 1usize..12) {
            for run in 0..runs {
                let owners = (1..=count)
                    .filter(|&index| Shard { index, count }.holds(run))
                    .count();
                proptest::prop_assert_eq!(owners, 1);
            }
        }
    }

    #[test]
    fn no_grid_and_no_variants_is_one_run() {
        let runs = expand(&sweep(json!({"name": "s", "base": "x.json"})));
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].0, "run");
    }

    #[test]
    fn only_result_changing_fields_count_as_changes() {
        let before = json!({"seed": 1, "federation": {"num_parallels": 1, "rounds": 5}});
        let mut after = before.clone();
        after["federation"]["num_parallels"] = json!(8);
        after["label"] = json!("what the report calls it");
        assert!(changed_fields(&before, &after).is_empty());
        after["federation"]["rounds"] = json!(6);
        after["strategy"] = json!({"name": "fedprox"});
        assert_eq!(
            changed_fields(&before, &after),
            [
                "federation.rounds is 6, was 5",
                r#"strategy is {"name":"fedprox"}, was null"#
            ]
        );
    }
}
