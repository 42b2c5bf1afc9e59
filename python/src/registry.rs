//! The registry the package's experiments, sweeps and catalogues read: fedsim's built-ins and
//! what this interpreter registered from Python (strategies, data sets), each registration
//! checked as the command line's registry checks a plug-in's. It knows the registrations only
//! as components of fedsim's kinds, so the modules that make them depend on it, not it on them.

use std::sync::{Arc, Mutex, PoisonError};

use fedsim::data::DataSource;
use fedsim::registry::{Origin, Registry, RegistryBuilder, RegistryError};
use fedsim::strategy::Algorithm;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// What one registration adds to a registry: its component, under its crate.
type Adds = Arc<dyn Fn(&mut RegistryBuilder) -> Result<(), RegistryError> + Send + Sync>;

/// One registration from Python: the kind and name it replaces an earlier one by, and what it
/// adds.
#[derive(Clone)]
struct Registration {
    kind: &'static str,
    name: &'static str,
    adds: Adds,
}

/// What Python registered, in registration order.
static REGISTERED: Mutex<Vec<Registration>> = Mutex::new(Vec::new());

/// fedsim's built-ins and everything registered from Python.
pub(crate) fn registry() -> Registry {
    let registered = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    build(&registered).expect("each registration was checked as it was made")
}

/// The built-ins and `registered`, or why they cannot be registered together.
fn build(registered: &[Registration]) -> Result<Registry, RegistryError> {
    let mut builder = Registry::builder().with_builtins();
    for registration in registered {
        (registration.adds)(&mut builder)?;
    }
    Ok(builder.build())
}

/// Registers `algorithm` from the crate `origin`, replacing an earlier Python one of its name
/// (a notebook cell run again); a built-in's name, or one not well formed, is a `ValueError`.
pub(crate) fn add_algorithm<A: Algorithm + Clone>(algorithm: A, origin: Origin) -> PyResult<()> {
    let name = algorithm.name();
    add("algorithm", name, move |builder| {
        builder.origin(origin.clone());
        builder.algorithm(algorithm.clone()).map(drop)
    })
}

/// Registers `data_set` as [`add_algorithm`] registers an algorithm.
pub(crate) fn add_data_set<D: DataSource + Clone>(data_set: D, origin: Origin) -> PyResult<()> {
    let name = data_set.name();
    add("data set", name, move |builder| {
        builder.origin(origin.clone());
        builder.data_set(data_set.clone()).map(drop)
    })
}

/// Adds the registration of the `kind` named `name` if the registry it makes is valid.
fn add(
    kind: &'static str,
    name: &'static str,
    adds: impl Fn(&mut RegistryBuilder) -> Result<(), RegistryError> + Send + Sync + 'static,
) -> PyResult<()> {
    let mut registered = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    let mut next: Vec<Registration> = registered
        .iter()
        .filter(|r| (r.kind, r.name) != (kind, name))
        .cloned()
        .collect();
    next.push(Registration {
        kind,
        name,
        adds: Arc::new(adds),
    });
    build(&next).map_err(|e| PyValueError::new_err(e.to_string()))?;
    *registered = next;
    Ok(())
}

/// `text` for as long as the process lives: the registry names components by `&'static str`,
/// and a Python strategy or data set is registered once or a few times a session.
pub(crate) fn leak(text: &str) -> &'static str {
    Box::leak(text.to_string().into_boxed_str())
}
