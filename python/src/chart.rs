//! Line charts drawn by the report's code, for Python: what `fedsim.LiveChart` redraws as a
//! run's rounds finish, in the style of the report's charts.

use fedsim::report::plots::{self, Axes, Curve, Point};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// Adds the module's functions.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(line_chart, module)?)?;
    Ok(())
}

/// A line chart's SVG text: `curves` as (label, [(x, y), ...]) in y's units before `y_scale`,
/// with a dashed line at `target`'s level (same units) and its legend text, if given.
#[pyfunction]
#[pyo3(signature = (title, x, y, y_scale, curves, target=None))]
fn line_chart(
    title: &str,
    x: &str,
    y: &str,
    y_scale: f64,
    curves: Vec<(String, Vec<(f64, f64)>)>,
    target: Option<(f64, String)>,
) -> PyResult<String> {
    let curves: Vec<Curve> = curves
        .into_iter()
        .map(|(label, points)| Curve {
            label,
            points: points
                .into_iter()
                .map(|(x, y)| Point {
                    x,
                    mean: y,
                    low: y,
                    high: y,
                })
                .collect(),
        })
        .collect();
    let axes = Axes {
        title,
        x,
        y,
        y_scale,
        target: target.as_ref().map(|(level, text)| (*level, text.as_str())),
    };
    plots::line_chart(axes, &curves).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}
