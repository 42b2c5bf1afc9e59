//! The registry's catalogues (`fedsim strategies`, `models`, `datasets`, `schemes`) as JSON rows
//! for Python's tables.

use fedsim::registry::{ComponentInfo, ParamInfo};

use crate::registry::registry;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{Value, json};

/// Adds the module's functions.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(catalogue, module)?)
}

/// The components of one kind (`strategies`, `models`, `datasets`, `schemes`) the built-in
/// registry holds, one JSON object each, in the order the command line lists them.
#[pyfunction]
fn catalogue(kind: &str) -> PyResult<String> {
    let registry = registry();
    let rows: Vec<Value> = match kind {
        "strategies" => registry
            .algorithms()
            .into_iter()
            .map(|algorithm| {
                json!({
                    "name": algorithm.name,
                    "paper": algorithm.paper,
                    "asynchronous": algorithm.asynchronous,
                    "params": params(&algorithm.params),
                    "crate": algorithm.origin.crate_name,
                })
            })
            .collect(),
        "models" => components(registry.models()),
        "datasets" => components(registry.data_sets()),
        "schemes" => components(registry.schemes()),
        other => {
            return Err(PyValueError::new_err(format!(
                "no catalogue {other:?}: strategies, models, datasets or schemes"
            )));
        }
    };
    Ok(Value::Array(rows).to_string())
}

/// Models, data sets or schemes as rows.
fn components(listed: Vec<ComponentInfo>) -> Vec<Value> {
    listed
        .into_iter()
        .map(|component| {
            json!({
                "name": component.name,
                "about": component.about,
                "params": params(&component.params),
                "crate": component.origin.crate_name,
            })
        })
        .collect()
}

/// Parameters by name, each with its default (`null` where required) and meaning.
fn params(params: &[ParamInfo]) -> Value {
    params
        .iter()
        .map(|param| {
            let described = json!({"default": param.default, "doc": param.doc});
            (param.name.clone(), described)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}
