//! Experiments loaded and played from Python, through the same calls as `fedsim run`: the same
//! files, the same checks, the same bits.
//!
//! A run plays on a thread of its own while the calling thread, the interpreter's lock released,
//! looks for signals every few milliseconds: Ctrl-C in a notebook (a `KeyboardInterrupt`) asks
//! the run to stop at the next round boundary, as SIGINT asks `fedsim run`, and its folder then
//! resumes to the bits of an uninterrupted run. A Python exception raised by the per-round
//! callback stops the run the same way and is raised again once the run has stopped.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use fedsim::config::{ConfigError, FieldError, Override};
use fedsim::output::{Progress, RunFolder};
use fedsim::registry::Registry;
use fedsim::stop::StopSignal;
use fedsim::{Error, Experiment, ExperimentConfig, Run, RunResult};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::to_python;

/// How often the waiting thread looks for a `KeyboardInterrupt`.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// Adds the module's functions and classes.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PyExperiment>()?;
    module.add_function(wrap_pyfunction!(load, module)?)?;
    module.add_function(wrap_pyfunction!(from_json, module)?)?;
    module.add_function(wrap_pyfunction!(resume, module)?)?;
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
        let registry = Registry::builtin();
        let experiment = py
            .detach(|| Experiment::prepare(config.clone(), &registry))
            .map_err(|e| to_python(py, e))?;
        let partition_stats =
            serde_json::to_string(&experiment.partition_stats()).expect("stats serialise");
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
        match prepared {
            Some(experiment) => Ok(experiment),
            None => {
                let registry = Registry::builtin();
                py.detach(|| Experiment::prepare(self.config.clone(), &registry))
                    .map_err(|e| to_python(py, e))
            }
        }
    }
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
    let registry = Registry::builtin();
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
    let registry = Registry::builtin();
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

/// Continues the run in `folder` (as `fedsim run --resume`), calling `on_round` with each
/// finished round's record; `None` if it had finished already.
#[pyfunction]
#[pyo3(signature = (folder, on_round=None))]
fn resume<'py>(
    py: Python<'py>,
    folder: PathBuf,
    on_round: Option<Py<PyAny>>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let registry = Registry::builtin();
    let run = Run::resume(&folder, &registry).map_err(|e| to_python(py, e))?;
    match play(py, run, on_round)? {
        Some(result) => outcome(py, folder, result).map(Some),
        None => Ok(None),
    }
}

/// Plays `run` on a thread of its own, the lock released, until it ends, stops, or a
/// `KeyboardInterrupt` or an exception from `on_round` stops it (then that is raised).
fn play(py: Python<'_>, run: Run, on_round: Option<Py<PyAny>>) -> PyResult<Option<RunResult>> {
    let stop = StopSignal::new();
    let raised = Arc::new(Mutex::new(None::<PyErr>));
    let keep_first = |error: PyErr| {
        raised
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(error);
        stop.request();
    };
    let progress = match on_round {
        Some(callback) => {
            let (stop, raised) = (stop.clone(), raised.clone());
            Progress::Each(Box::new(move |record| {
                let record = serde_json::to_string(record).expect("a record serialises");
                Python::attach(|py| {
                    if let Err(error) = callback.call1(py, (record,)) {
                        raised
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .get_or_insert(error);
                        stop.request();
                    }
                });
            }))
        }
        None => Progress::Silent,
    };
    let played = py.detach(|| {
        thread::scope(|scope| {
            let playing = scope.spawn(|| run.play(&progress, &stop, None));
            while !playing.is_finished() {
                thread::sleep(SIGNAL_POLL);
                if let Err(interrupt) = Python::attach(|py| py.check_signals()) {
                    keep_first(interrupt);
                }
            }
            playing.join()
        })
    });
    let played = played.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    if let Some(error) = raised.lock().unwrap_or_else(PoisonError::into_inner).take() {
        return Err(error);
    }
    played.map_err(|e| to_python(py, e))
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
