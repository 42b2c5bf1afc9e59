//! Strategies written in Python: a class with the server half's methods (`fedsim.Strategy`:
//! what goes down, the aggregation, what it keeps, and optionally who trains),
//! registered by name beside the built-ins, so that an experiment, a sweep and the conformance
//! kit name it as they name `fedavg`. Only the server half: its clients train as FedAvg's do,
//! in Rust, since a Python call per batch would cost the simulator its speed and its bits.
//!
//! The engine calls a Python strategy on the server thread, once per round and in client-id
//! order, taking the interpreter's lock for each call, with a NumPy generator seeded from the
//! experiment seed and the round: a rerun gives the same bits. What it keeps between rounds
//! goes through the run's checkpoints as float32 arrays. An exception from the class ends the
//! run with the exception and its traceback in the error; the rounds before it stay in the run
//! folder, which resumes from them.

use std::path::PathBuf;
use std::sync::Arc;

use fedsim::config::check::Problems;
use fedsim::history::Seen;
use fedsim::network::{ClientId, StateError, Tensors};
use fedsim::registry::Origin;
use fedsim::seed::{self, Purpose};
use fedsim::strategy::{
    Aggregate, Algorithm, Candidates, Collected, EdgeAggregation, EndRun, Round, Selector, Setting,
    Strategy,
};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rand::RngExt;
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::registry::{add_algorithm, leak, registry};

/// The draws a Python strategy's NumPy generator is seeded from, one stream per round.
const PYTHON_STRATEGY: Purpose = Purpose::new("python-strategy");

/// Adds the module's functions.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(register_strategy, module)?)?;
    module.add_function(wrap_pyfunction!(conformance, module)?)?;
    Ok(())
}

/// Runs the conformance kit on the algorithm registered as `name` (a built-in or a Python
/// strategy) with the parameters `params_json`, its runs under `scratch`, with the lock
/// released; the checks that held, or a `FedsimError` naming each promise broken.
#[pyfunction]
fn conformance(
    py: Python<'_>,
    name: &str,
    params_json: &str,
    scratch: PathBuf,
) -> PyResult<Vec<&'static str>> {
    let params: Map<String, Value> = serde_json::from_str(params_json)
        .map_err(|e| PyValueError::new_err(format!("the parameters are not a JSON object: {e}")))?;
    let registry = registry();
    py.detach(|| fedsim::conformance::check_with(&registry, name, &params, &scratch))
        .map_err(|breach| {
            let errors = py.import("fedsim.errors");
            match errors.and_then(|e| e.getattr("FedsimError")?.call1((breach.to_string(),))) {
                Ok(exception) => PyErr::from_value(exception),
                Err(error) => error,
            }
        })
}

/// Registers the server half `adapter` (a `fedsim.strategy._Adapter` over the user's class)
/// under `name`, replacing an earlier Python strategy of that name (a notebook cell run
/// again); `origin` names the class. A built-in's name, or one that is not well formed, is a
/// `ValueError`.
#[pyfunction]
fn register_strategy(name: &str, paper: &str, origin: &str, adapter: Py<PyAny>) -> PyResult<()> {
    let algorithm = PyAlgorithm {
        name: leak(name),
        paper: leak(paper),
        adapter: Arc::new(adapter),
    };
    add_algorithm(algorithm, Origin::new(origin, env!("CARGO_PKG_VERSION")))
}

/// A strategy class registered from Python, as the registry holds an algorithm.
#[derive(Clone)]
struct PyAlgorithm {
    name: &'static str,
    paper: &'static str,
    /// The `fedsim.strategy._Adapter` that makes instances of the class and calls them.
    adapter: Arc<Py<PyAny>>,
}

/// A Python strategy's parameters: the fields of its `strategy` section, which the class
/// checks against its `params` and takes as keyword arguments.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
struct PyParams(Map<String, Value>);

impl PyParams {
    fn json(&self) -> String {
        Value::Object(self.0.clone()).to_string()
    }
}

/// `setting` as the JSON the adapter reads into a `fedsim.Setting`.
fn setting_json(setting: &Setting<'_>) -> String {
    serde_json::json!({
        "seed": setting.seed,
        "lr": setting.lr,
        "momentum": setting.momentum,
        "num_clients": setting.num_clients,
        "clients_per_round": setting.clients_per_round,
    })
    .to_string()
}

impl Algorithm for PyAlgorithm {
    type Params = PyParams;

    fn name(&self) -> &'static str {
        self.name
    }

    fn paper(&self) -> &'static str {
        self.paper
    }

    /// Each parameter the class does not declare, and the exception its constructor raises
    /// with these parameters, if any.
    fn check(&self, params: &PyParams, setting: &Setting<'_>, problems: &mut Problems) {
        let found: PyResult<Vec<(String, String)>> = Python::attach(|py| {
            self.adapter
                .call_method1(py, "check", (params.json(), setting_json(setting)))?
                .extract(py)
        });
        match found {
            Ok(found) => {
                for (field, message) in found {
                    problems.add(field, message);
                }
            }
            Err(error) => problems.add("", Python::attach(|py| describe(py, &error))),
        }
    }

    fn edge_rule(&self, _params: &PyParams) -> EdgeAggregation {
        EdgeAggregation::Unsupported(
            "a strategy written in Python reads every client's update: use topology.mode \"relay\"",
        )
    }

    fn server(&self, params: &PyParams, setting: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        let made = Python::attach(|py| {
            self.adapter
                .call_method1(py, "make", (params.json(), setting_json(setting)))
                .map_err(|error| describe(py, &error))
        });
        let instance = made.unwrap_or_else(|error| self.fail("__init__", None, error));
        Box::new(PyServer {
            name: self.name,
            seed: setting.seed,
            instance,
        })
    }
}

impl PyAlgorithm {
    /// Ends the run: see [`fail`].
    fn fail(&self, method: &str, round: Option<u32>, error: String) -> ! {
        fail(self.name, method, round, error)
    }
}

/// Ends the run because the strategy `name`'s `method` raised `error` (its traceback and
/// message), as [`EndRun`] ends one: the run's error gives this text, and its folder keeps the
/// rounds before.
fn fail(name: &str, method: &str, round: Option<u32>, error: String) -> ! {
    let when = round.map(|r| format!(" in round {r}")).unwrap_or_default();
    std::panic::resume_unwind(Box::new(EndRun(format!(
        "the Python strategy {name:?} raised in {method}{when}:\n{error}"
    ))))
}

/// A Python exception as the interpreter prints it: its traceback, then its type and message.
fn describe(py: Python<'_>, error: &PyErr) -> String {
    let traceback = error
        .traceback(py)
        .and_then(|t| t.format().ok())
        .unwrap_or_default();
    format!("{traceback}{error}")
}

/// A Python strategy's server half: the instance of the class the run made.
struct PyServer {
    name: &'static str,
    seed: u64,
    /// The adapter's instance wrapper (`fedsim.strategy._Instance`).
    instance: Py<PyAny>,
}

impl PyServer {
    /// Calls `method` of the instance, ending the run if it raises.
    fn call<T>(
        &self,
        method: &str,
        round: Option<u32>,
        call: impl FnOnce(Python<'_>, &Bound<'_, PyAny>) -> PyResult<T>,
    ) -> T {
        Python::attach(|py| call(py, self.instance.bind(py)).map_err(|error| describe(py, &error)))
            .unwrap_or_else(|error| fail(self.name, method, round, error))
    }
}

/// Named float32 arrays as `[(name, array), ...]`, for Python.
fn tensors_to_python<'py>(py: Python<'py>, tensors: &Tensors) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for (name, values) in tensors.iter() {
        list.append((name, PyArray1::from_slice(py, values)))?;
    }
    Ok(list)
}

/// `[(name, array), ...]` from Python (the adapter hands float32 arrays) as tensors.
fn tensors_from_python(list: &Bound<'_, PyAny>) -> PyResult<Tensors> {
    let pairs: Vec<(String, PyReadonlyArray1<'_, f32>)> = list.extract()?;
    let mut tensors = Tensors::new();
    for (name, array) in pairs {
        tensors.insert(&name, array.as_slice()?.to_vec());
    }
    Ok(tensors)
}

impl Strategy for PyServer {
    fn downlink(&self) -> Tensors {
        self.call("downlink", None, |_, instance| {
            tensors_from_python(&instance.call_method0("downlink")?)
        })
    }

    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let updates = input.updates();
        let mut rng = seed::stream(self.seed, PYTHON_STRATEGY, round.number, 0);
        let rng_seed: u64 = rng.random();
        self.call("aggregate", Some(round.number), |py, instance| {
            let models: Vec<f32> = updates
                .iter()
                .flat_map(|u| u.params.iter().copied())
                .collect();
            let models = PyArray1::from_vec(py, models).reshape([updates.len(), global.len()])?;
            let clients: Vec<u64> = updates.iter().map(|u| u.clients[0] as u64).collect();
            let samples: Vec<u64> = updates.iter().map(|u| u.num_samples as u64).collect();
            let losses: Vec<f64> = updates.iter().map(|u| u.train_loss).collect();
            let sampled: Vec<u64> = round.sampled.iter().map(|&c| c as u64).collect();
            let arguments = PyDict::new(py);
            arguments.set_item("number", round.number)?;
            arguments.set_item("sampled", PyArray1::from_vec(py, sampled))?;
            arguments.set_item("num_clients", round.roster.len())?;
            arguments.set_item("global_model", PyArray1::from_slice(py, global))?;
            arguments.set_item("clients", PyArray1::from_vec(py, clients))?;
            arguments.set_item("samples", PyArray1::from_vec(py, samples))?;
            arguments.set_item("models", models)?;
            arguments.set_item("losses", PyArray1::from_vec(py, losses))?;
            arguments.set_item("rng_seed", rng_seed)?;
            let (model, metrics): (PyReadonlyArray1<'_, f32>, Vec<(String, f64)>) = instance
                .call_method("aggregate", (), Some(&arguments))?
                .extract()?;
            let mut aggregate = Aggregate::model(model.as_slice()?.to_vec());
            for (name, value) in metrics {
                aggregate = aggregate.with(&name, value);
            }
            Ok(aggregate)
        })
    }

    fn state(&self) -> Tensors {
        self.call("state", None, |_, instance| {
            tensors_from_python(&instance.call_method0("state")?)
        })
    }

    /// The class's `select`, if it defines one, called on this instance.
    fn selector(&mut self) -> Option<Box<dyn Selector>> {
        let selects = self.call("select", None, |_, instance| {
            instance.getattr("selects")?.extract::<bool>()
        });
        selects.then(|| {
            Box::new(PySelector {
                name: self.name,
                instance: Python::attach(|py| self.instance.clone_ref(py)),
            }) as Box<dyn Selector>
        })
    }

    /// A checkpoint the class refuses (its `restore` raises) is one that does not fit the run,
    /// as a built-in's missing tensor is.
    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        Python::attach(|py| {
            let state = tensors_to_python(py, state)?;
            self.instance.bind(py).call_method1("restore", (state,))?;
            Ok(())
        })
        .map_err(|error: PyErr| {
            StateError::Invalid(Python::attach(|py| {
                format!(
                    "the Python strategy {:?} refused it: {}",
                    self.name,
                    describe(py, &error)
                )
            }))
        })
    }
}

/// A Python strategy's choice of who trains: its `select`, called on the instance that
/// aggregates, so the two share what the instance keeps.
struct PySelector {
    name: &'static str,
    instance: Py<PyAny>,
}

impl Selector for PySelector {
    fn select(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        let rng_seed: u64 = rng.random();
        let round = Some(candidates.round);
        let chosen: PyResult<Vec<u64>> = Python::attach(|py| {
            let online = candidates.online;
            let seen: Vec<Seen> = online
                .iter()
                .map(|c| candidates.history.get(c.id))
                .collect();
            let or_nan = |value: Option<f64>| value.unwrap_or(f64::NAN);
            let column = |of: fn(&Seen) -> Option<f64>| -> Vec<f64> {
                seen.iter().map(|s| or_nan(of(s))).collect()
            };
            let arguments = PyDict::new(py);
            arguments.set_item("number", candidates.round)?;
            let ids: Vec<u64> = online.iter().map(|c| c.id as u64).collect();
            let samples: Vec<u64> = online.iter().map(|c| c.num_samples as u64).collect();
            arguments.set_item("online", PyArray1::from_vec(py, ids))?;
            arguments.set_item("samples", PyArray1::from_vec(py, samples))?;
            arguments.set_item("wanted", candidates.wanted)?;
            arguments.set_item("now_s", candidates.now_s)?;
            let last_round = column(|s| s.last_round.map(f64::from));
            arguments.set_item("last_round", PyArray1::from_vec(py, last_round))?;
            arguments.set_item("last_loss", PyArray1::from_vec(py, column(|s| s.last_loss)))?;
            arguments.set_item(
                "last_train_s",
                PyArray1::from_vec(py, column(|s| s.last_train_s)),
            )?;
            arguments.set_item(
                "last_upload_s",
                PyArray1::from_vec(py, column(|s| s.last_upload_s)),
            )?;
            arguments.set_item("rng_seed", rng_seed)?;
            self.instance
                .bind(py)
                .call_method("select", (), Some(&arguments))?
                .extract()
        });
        match chosen {
            Ok(chosen) => chosen.into_iter().map(|id| id as ClientId).collect(),
            Err(error) => {
                let error = Python::attach(|py| describe(py, &error));
                fail(self.name, "select", round, error)
            }
        }
    }
}
