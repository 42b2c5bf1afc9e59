//! `fedsim._fedsim`: the engine behind fedsim's Python package. It is a thin layer over the
//! library the command line runs, so that a run from Python gives the bits `fedsim run` gives:
//! it loads experiments, plays them with the interpreter's lock released, and hands back what
//! they wrote. The Python modules beside it (`python/fedsim/`) make of these calls the API a
//! Python user expects.

use pyo3::prelude::*;

mod catalogue;
mod chart;
mod dataset;
mod errors;
mod interrupt;
mod registry;
mod run;
mod strategy;
mod sweep;

/// The extension module.
#[pymodule]
fn _fedsim(module: &Bound<'_, PyModule>) -> PyResult<()> {
    run::register(module)?;
    sweep::register(module)?;
    strategy::register(module)?;
    dataset::register(module)?;
    chart::register(module)?;
    catalogue::register(module)
}
