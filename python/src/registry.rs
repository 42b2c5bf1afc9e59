//! The registry the package's experiments, sweeps and catalogues read: fedsim's built-ins and
//! what this interpreter registered from Python (strategies, data sets), each registration
//! checked as the command line's registry checks a plug-in's.

use std::sync::{Mutex, PoisonError};

use fedsim::registry::{Registry, RegistryError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dataset::PyDataSet;
use crate::strategy::PyAlgorithm;

/// What Python registered, in registration order.
#[derive(Clone, Default)]
struct Registered {
    algorithms: Vec<PyAlgorithm>,
    data_sets: Vec<PyDataSet>,
}

static REGISTERED: Mutex<Registered> = Mutex::new(Registered {
    algorithms: Vec::new(),
    data_sets: Vec::new(),
});

/// fedsim's built-ins and everything registered from Python.
pub(crate) fn registry() -> Registry {
    let registered = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    build(&registered).expect("each registration was checked as it was made")
}

/// The built-ins and `registered`, or why they cannot be registered together.
fn build(registered: &Registered) -> Result<Registry, RegistryError> {
    let mut builder = Registry::builder().with_builtins();
    for algorithm in &registered.algorithms {
        builder.origin(algorithm.origin.clone());
        builder.algorithm(algorithm.clone())?;
    }
    for data_set in &registered.data_sets {
        builder.origin(data_set.origin.clone());
        builder.data_set(data_set.clone())?;
    }
    Ok(builder.build())
}

/// Registers `algorithm`, replacing an earlier Python one of its name (a notebook cell run
/// again); a built-in's name, or one not well formed, is a `ValueError`.
pub(crate) fn add_algorithm(algorithm: PyAlgorithm) -> PyResult<()> {
    update(|registered| {
        registered.algorithms.retain(|a| a.name != algorithm.name);
        registered.algorithms.push(algorithm);
    })
}

/// Registers `data_set` as [`add_algorithm`] registers an algorithm.
pub(crate) fn add_data_set(data_set: PyDataSet) -> PyResult<()> {
    update(|registered| {
        registered.data_sets.retain(|d| d.name != data_set.name);
        registered.data_sets.push(data_set);
    })
}

/// Applies `change` to the registrations if the registry they make is valid.
fn update(change: impl FnOnce(&mut Registered)) -> PyResult<()> {
    let mut registered = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    let mut next = registered.clone();
    change(&mut next);
    build(&next).map_err(|e| PyValueError::new_err(e.to_string()))?;
    *registered = next;
    Ok(())
}
