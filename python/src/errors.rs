//! fedsim's errors as the Python exceptions of `fedsim/errors.py`. Each carries what the command
//! line's message carries (the file, every field at fault with what it expects, the `--set` that
//! gave it); bad input, what `fedsim run` exits 2 for, is an `InputError`, a `ValueError` too.

use fedsim::Error;
use fedsim::config::ConfigError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// `error` as the Python exception that says the same: an `InputError` for bad input, with
/// `file` and `problems` (one dict per field at fault: `field`, `message`, `set_by`) for an
/// invalid experiment; `Stopped` with the `round` the run stopped after; a `FedsimError`
/// otherwise.
pub(crate) fn to_python(py: Python<'_>, error: Error) -> PyErr {
    raise(py, &error).unwrap_or_else(|failure| failure)
}

fn raise(py: Python<'_>, error: &Error) -> PyResult<PyErr> {
    let classes = py.import("fedsim.errors")?;
    let message = error.to_string();
    let exception = match error {
        Error::Stopped { round } => {
            let exception = classes.getattr("Stopped")?.call1((message,))?;
            exception.setattr("round", round)?;
            exception
        }
        error if error.is_bad_input() => {
            let exception = classes.getattr("InputError")?.call1((message,))?;
            let (file, problems) = match error {
                Error::Config(config) => describe_config(py, config)?,
                _ => (None, PyList::empty(py)),
            };
            exception.setattr("file", file)?;
            exception.setattr("problems", problems)?;
            exception
        }
        _ => classes.getattr("FedsimError")?.call1((message,))?,
    };
    Ok(PyErr::from_value(exception))
}

/// The file and the problems, one dict per field, of an experiment that cannot be used.
fn describe_config<'py>(
    py: Python<'py>,
    error: &ConfigError,
) -> PyResult<(Option<String>, Bound<'py, PyList>)> {
    let problems = PyList::empty(py);
    let file = match error {
        ConfigError::Invalid { path, errors } => {
            for problem in errors {
                let entry = PyDict::new(py);
                entry.set_item("field", problem.field())?;
                entry.set_item("message", &problem.message)?;
                entry.set_item("set_by", &problem.set_by)?;
                problems.append(entry)?;
            }
            Some(path.display().to_string())
        }
        ConfigError::Io { path, .. } => Some(path.display().to_string()),
        ConfigError::BadOverride { text, reason } => {
            let entry = PyDict::new(py);
            entry.set_item("field", text.split('=').next().unwrap_or_default())?;
            entry.set_item("message", reason)?;
            entry.set_item("set_by", text)?;
            problems.append(entry)?;
            None
        }
    };
    Ok((file, problems))
}
