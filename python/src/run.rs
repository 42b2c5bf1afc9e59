//! Experiments loaded and played from Python, through the same calls as `fedsim run`: the same
//! files, the same checks, the same bits.
//! A run plays as [`Interruptible`] work: Ctrl-C stops it at a round boundary, and its folder
//! then resumes to the bits of an uninterrupted run.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use crate::registry::registry;
use fedsim::config::{ConfigError, FieldError, Override};
use fedsim::output::{Progress, RunFolder};
use fedsim::registry::Registry;
use fedsim::{Error, Experiment, ExperimentConfig, Run, RunResult};
use numpy::PyArray1;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::to_python;
use crate::interrupt::Interruptible;

/// Adds the module's functions and classes.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PyExperiment>()?;
    module.add_function(wrap_pyfunction!(load, module)?)?;
    module.add_function(wrap_pyfunction!(from_json, module)?)?;
    module.add_class::<PyResumable>()?;
    module.add_function(wrap_pyfunction!(resumable, module)?)?;
    module.add_function(wrap_pyfunction!(default_folder, module)?)?;
    Ok(())
}

/// An experiment, checked, its data loaded and split: what `fedsim run FILE` starts from.
#[pyclass(module = "fedsim._fedsim", name = "Experiment", frozen)]
struct PyExperiment {
    /// The resolved config, to prepare the experiment again for a second run.
    config: ExperimentConfig,
    /// The prepared experiment, until a run takes it.
    prepared: Mutex<Option<Experiment>>,
    /// Per-client label counts and their spread, as JSON.
    partition_stats: String,
    /// The model's parameter layout, as JSON.
    layout: String,
}

impl PyExperiment {
    /// Prepares `config` (loads and splits its data, with the lock released).
    fn prepare(py: Python<'_>, config: ExperimentConfig) -> PyResult<Self> {
        let experiment = prepare(py, &config)?;
        let stats = experiment.partition_stats().map_err(|e| to_python(py, e))?;
        let partition_stats = serde_json::to_string(&stats).expect("stats serialise");
        let layout = serde_json::to_string(experiment.layout()).expect("a layout serialises");
        Ok(Self {
            config,
            prepared: Mutex::new(Some(experiment)),
            partition_stats,
            layout,
        })
    }

    /// The prepared experiment, or, once a run has taken it, the same experiment prepared again.
    fn take(&self, py: Python<'_>) -> PyResult<Experiment> {
        let prepared = self
            .prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        prepared.map_or_else(|| prepare(py, &self.config), Ok)
    }
}

/// Loads and splits `config`'s data with the lock released: an [`Experiment`] ready to play.
fn prepare(py: Python<'_>, config: &ExperimentConfig) -> PyResult<Experiment> {
    let registry = registry();
    py.detach(|| Experiment::prepare(config.clone(), &registry))
        .map_err(|e| to_python(py, e))
}

#[pymethods]
impl PyExperiment {
    /// The resolved experiment, as the run folder's `config.json` holds it (JSON text).
    fn config_json(&self) -> String {
        serde_json::to_string(&self.config).expect("a config serialises")
    }

    /// Per-client label counts and their spread, as `partition_stats.json` holds them (JSON
    /// text).
    fn partition_stats_json(&self) -> &str {
        &self.partition_stats
    }

    /// The model's parameter layout, as `model-layout.json` holds it (JSON text).
    fn layout_json(&self) -> &str {
        &self.layout
    }

    /// Plays the experiment in a new run folder `out` (default `runs/NAME-TIMESTAMP`, as
    /// `fedsim run`'s), calling `on_round` with each finished round's record (JSON text).
    /// Returns the folder, the summary and the records (JSON text) and the final model.
    #[pyo3(signature = (out=None, on_round=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        out: Option<PathBuf>,
        on_round: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let experiment = self.take(py)?;
        let folder = out.unwrap_or_else(|| default_folder(&self.config.name));
        let run = Run::new(experiment, &folder).map_err(|e| to_python(py, e))?;
        let result = play(py, run, on_round)?.expect("a new run plays");
        outcome(py, folder, result)
    }
}

/// The folder `fedsim run` gives a new run of the experiment `name`: `runs/NAME-TIMESTAMP`.
#[pyfunction]
fn default_folder(name: &str) -> PathBuf {
    RunFolder::default_dir(name)
}

/// Reads, overrides, checks and prepares the experiment file at `path`; `overrides` are
/// `--set`'s `path.to.field=value` strings.
#[pyfunction]
fn load(py: Python<'_>, path: PathBuf, overrides: Vec<String>) -> PyResult<PyExperiment> {
    let registry = registry();
    let config = ExperimentConfig::load(&path, &overrides, &registry)
        .map_err(|e| to_python(py, e.into()))?;
    PyExperiment::prepare(py, config)
}

/// Overrides, checks and prepares an experiment given as JSON text; `label` names it in
/// messages and its folder is where relative paths start.
#[pyfunction]
fn from_json(
    py: Python<'_>,
    text: &str,
    label: PathBuf,
    overrides: Vec<String>,
) -> PyResult<PyExperiment> {
    let registry = registry();
    let config = parse(text, &label, &overrides, &registry).map_err(|e| to_python(py, e))?;
    PyExperiment::prepare(py, config)
}

/// The experiment `text` holds, with `overrides` applied.
fn parse(
    text: &str,
    label: &std::path::Path,
    overrides: &[String],
    registry: &Registry,
) -> Result<ExperimentConfig, Error> {
    let value = serde_json::from_str(text).map_err(|e| ConfigError::Invalid {
        path: label.to_path_buf(),
        errors: vec![FieldError {
            path: ".".to_string(),
            message: format!("is not JSON: {e}"),
            set_by: None,
        }],
    })?;
    let overrides = overrides
        .iter()
        .map(|text| Override::parse(text))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ExperimentConfig::with_overrides(
        value, label, &overrides, registry,
    )?)
}

/// The run in `folder`, opened to continue (as `fedsim run --resume`): the folder is claimed
/// until it is played or dropped.
#[pyfunction]
fn resumable(py: Python<'_>, folder: PathBuf) -> PyResult<PyResumable> {
    let registry = registry();
    let run = py
        .detach(|| Run::resume(&folder, &registry))
        .map_err(|e| to_python(py, e))?;
    Ok(PyResumable {
        rounds: run.experiment().config().federation.rounds,
        rounds_done: run.rounds_done(),
        run: Mutex::new(Some(run)),
        folder,
    })
}

/// A run folder opened to continue, with how far it had got.
#[pyclass(module = "fedsim._fedsim", name = "Resumable", frozen)]
struct PyResumable {
    /// The run, until `play` takes it.
    run: Mutex<Option<Run>>,
    folder: PathBuf,
    /// Rounds already played.
    #[pyo3(get)]
    rounds_done: u32,
    /// Rounds the experiment plays in all.
    #[pyo3(get)]
    rounds: u32,
}

#[pymethods]
impl PyResumable {
    /// Plays the rounds left, calling `on_round` with each finished round's record (JSON text);
    /// `None` if the run had finished already. A run plays once.
    #[pyo3(signature = (on_round=None))]
    fn play<'py>(
        &self,
        py: Python<'py>,
        on_round: Option<Py<PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let run = self
            .run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this run has been played; open it again"))?;
        match play(py, run, on_round)? {
            Some(result) => outcome(py, self.folder.clone(), result).map(Some),
            None => Ok(None),
        }
    }
}

/// Plays `run` on a thread of its own, the lock released, until it ends, stops, or a
/// `KeyboardInterrupt` or an exception from `on_round` stops it (then that is raised).
fn play(py: Python<'_>, run: Run, on_round: Option<Py<PyAny>>) -> PyResult<Option<RunResult>> {
    let interruptible = Interruptible::default();
    let progress = match on_round {
        Some(callback) => {
            let interruptible = interruptible.clone();
            Progress::Each(Box::new(move |record| {
                let record = serde_json::to_string(record).expect("a record serialises");
                Python::attach(|py| {
                    if let Err(error) = callback.call1(py, (record,)) {
                        interruptible.raise(error);
                    }
                });
            }))
        }
        None => Progress::Silent,
    };
    let stop = interruptible.stop();
    interruptible
        .wait(py, || run.play(&progress, stop, None))?
        .map_err(|e| to_python(py, e))
}

/// What a finished run hands Python: its folder, summary and records as JSON text, and the
/// final model as a NumPy array that owns the run's vector (no copy).
fn outcome(py: Python<'_>, folder: PathBuf, result: RunResult) -> PyResult<Bound<'_, PyDict>> {
    let RunResult {
        summary,
        rounds,
        model,
    } = result;
    let outcome = PyDict::new(py);
    outcome.set_item("folder", folder)?;
    outcome.set_item(
        "summary",
        serde_json::to_string(&summary).expect("a summary serialises"),
    )?;
    outcome.set_item(
        "rounds",
        serde_json::to_string(&rounds).expect("records serialise"),
    )?;
    outcome.set_item("model", PyArray1::from_vec(py, model))?;
    Ok(outcome)
}
