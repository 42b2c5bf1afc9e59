//! Sweeps and reports from Python, through the calls `fedsim sweep` and `fedsim report` make:
//! the same runs in the same folders, the same report.

use std::path::PathBuf;

use crate::registry::registry;
use fedsim::Error;
use fedsim::report::{ReportOptions, write_report};
use fedsim::sweep::Sweep;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::to_python;
use crate::interrupt::Interruptible;

/// Adds the module's functions.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(sweep, module)?)?;
    module.add_function(wrap_pyfunction!(report, module)?)?;
    Ok(())
}

/// Plays the sweep file at `path` (or, given `text`, the sweep it holds, `path` naming it)
/// into `out` (default `runs/NAME`), `jobs` runs at a time, with `overrides` applied to every
/// run's base, and writes its report there. Returns the folder, the run folders in sweep
/// order, the failed runs (name, error) and whether a stop ended it early (then no report is
/// written).
#[pyfunction]
#[pyo3(signature = (path, out=None, jobs=1, overrides=Vec::new(), text=None))]
fn sweep(
    py: Python<'_>,
    path: PathBuf,
    out: Option<PathBuf>,
    jobs: usize,
    overrides: Vec<String>,
    text: Option<String>,
) -> PyResult<Bound<'_, PyDict>> {
    let registry = registry();
    let sweep = match text {
        Some(text) => Sweep::from_text(&text, &path, &overrides, &registry),
        None => Sweep::load(&path, &overrides, &registry),
    }
    .map_err(|e| to_python(py, e.into()))?;
    let dir = out.unwrap_or_else(|| PathBuf::from("runs").join(&sweep.name));
    let states = sweep.states(&dir).map_err(|e| to_python(py, e))?;
    let folders = sweep.run_folders(&dir, &states);
    let interruptible = Interruptible::default();
    let stop = interruptible.stop();
    let outcome = interruptible
        .wait(py, || {
            sweep.run(&dir, states, jobs.max(1), true, &registry, stop)
        })?
        .map_err(|e| to_python(py, e))?;
    if !outcome.stopped {
        let options = ReportOptions {
            target: sweep.target_accuracy,
        };
        write_report(&folders, &dir, options, &registry)
            .map_err(|e| to_python(py, Error::from(e)))?;
    }
    let failed: Vec<(String, String)> = outcome
        .failed
        .iter()
        .map(|(name, error)| (name.clone(), error.to_string()))
        .collect();
    let result = PyDict::new(py);
    result.set_item("folder", dir)?;
    result.set_item("runs", folders)?;
    result.set_item("failed", failed)?;
    result.set_item("stopped", outcome.stopped)?;
    Ok(result)
}

/// Writes the report of the finished runs in `folders` (run folders, or folders of them) to
/// `out`, as `fedsim report` does; `target` is the test accuracy whose first round the table
/// gives. Returns the runs used, the runs or charts left out and the failed runs.
#[pyfunction]
#[pyo3(signature = (folders, out, target=None))]
fn report(
    py: Python<'_>,
    folders: Vec<PathBuf>,
    out: PathBuf,
    target: Option<f64>,
) -> PyResult<Bound<'_, PyDict>> {
    let registry = registry();
    let options = ReportOptions { target };
    let written = py
        .detach(|| write_report(&folders, &out, options, &registry))
        .map_err(|e| to_python(py, Error::from(e)))?;
    let result = PyDict::new(py);
    result.set_item("folder", out)?;
    result.set_item("runs", written.runs)?;
    result.set_item("left_out", written.left_out)?;
    let failed: Vec<String> = written.failed.iter().map(ToString::to_string).collect();
    result.set_item("failed", failed)?;
    Ok(result)
}
