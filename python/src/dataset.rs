//! Data sets registered from Python: NumPy arrays (and, optionally, which client each sample
//! belongs to) under a name an experiment's `data` section gives, beside the built-ins. They
//! go through the checks a file of arrays goes through (shapes, labels, one sample shape for
//! both splits, finite features), named as `python:NAME/x_train` and so on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fedsim::config::NoParams;
use fedsim::data::numpy::{self, Array, Channels};
use fedsim::data::{DataContext, DataError, DataSource, NaturalClients, SampleKind, TrainTest};
use fedsim::registry::Origin;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::to_python;
use crate::registry::{add_data_set, leak};

/// Adds the module's functions.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(register_dataset, module)?)?;
    Ok(())
}

/// A data set registered from Python, as the registry holds one.
#[derive(Clone)]
struct PyDataSet {
    name: &'static str,
    about: &'static str,
    arrays: Arc<Arrays>,
}

/// A Python data set's arrays, as `.npy` bytes (`np.save`'s), and its clients.
struct Arrays {
    /// `x_train`, `y_train`, `x_test`, `y_test`.
    npy: [Vec<u8>; 4],
    channels: Channels,
    /// Each training sample's client, and each test sample's, if the data define clients.
    clients: Option<(Vec<usize>, Vec<usize>)>,
    /// What its samples are.
    kind: SampleKind,
}

/// Registers the arrays (`.npy` bytes of `x_train`, `y_train`, `x_test` and `y_test`) as the
/// data set `name`, with each training and test sample's client if `clients` gives them.
/// They are read and checked now, so that a mistake is told where it is made: an `InputError`
/// naming the array; a taken name or one not well formed is a `ValueError`.
#[pyfunction]
#[pyo3(signature = (name, about, npy, channels_first, clients=None))]
fn register_dataset(
    py: Python<'_>,
    name: &str,
    about: &str,
    npy: [Vec<u8>; 4],
    channels_first: bool,
    clients: Option<(Vec<i64>, Vec<i64>)>,
) -> PyResult<()> {
    let channels = match channels_first {
        true => Channels::First,
        false => Channels::Last,
    };
    let clients = clients
        .map(|(train, test)| client_ids(&train, &test))
        .transpose()?;
    let mut arrays = Arrays {
        npy,
        channels,
        clients,
        kind: SampleKind::Row,
    };
    let splits = arrays.read(name).map_err(|e| to_python(py, e.into()))?;
    arrays.kind = splits.train.shape().sample.kind();
    let data_set = PyDataSet {
        name: leak(name),
        about: leak(about),
        arrays: Arc::new(arrays),
    };
    let origin = Origin::new("NumPy arrays (Python)", env!("CARGO_PKG_VERSION"));
    add_data_set(data_set, origin)
}

/// Client ids as indices: from 0, every client with a training sample, test samples only of
/// those clients.
fn client_ids(train: &[i64], test: &[i64]) -> PyResult<(Vec<usize>, Vec<usize>)> {
    let index = |id: &i64, which: &str| {
        usize::try_from(*id).map_err(|_| {
            PyValueError::new_err(format!(
                "{which} holds client {id}; clients are numbered from 0"
            ))
        })
    };
    let train: Vec<usize> = train
        .iter()
        .map(|id| index(id, "clients"))
        .collect::<PyResult<_>>()?;
    let test: Vec<usize> = test
        .iter()
        .map(|id| index(id, "test_clients"))
        .collect::<PyResult<_>>()?;
    let count = train.iter().max().map_or(0, |&m| m + 1);
    let mut has_samples = vec![false; count];
    for &client in &train {
        has_samples[client] = true;
    }
    if let Some(empty) = has_samples.iter().position(|&has| !has) {
        return Err(PyValueError::new_err(format!(
            "clients has no training sample of client {empty}; clients are numbered 0 to {} with none left out",
            count.saturating_sub(1)
        )));
    }
    if let Some(stranger) = test.iter().find(|&&client| client >= count) {
        return Err(PyValueError::new_err(format!(
            "test_clients holds client {stranger}, which has no training sample (clients 0 to {})",
            count.saturating_sub(1)
        )));
    }
    Ok((train, test))
}

impl Arrays {
    /// The splits, read from the arrays and checked as a file's; `name` names them.
    fn read(&self, name: &str) -> Result<TrainTest, DataError> {
        let origin = PathBuf::from(format!("python:{name}"));
        let parse = |i: usize, array: &str| Array::parse(origin.join(array), &self.npy[i]);
        let arrays = [
            parse(0, "x_train")?,
            parse(1, "y_train")?,
            parse(2, "x_test")?,
            parse(3, "y_test")?,
        ];
        let mut splits = numpy::from_arrays(arrays, self.channels, &origin)?;
        if let Some((train, test)) = &self.clients {
            splits.natural = Some(natural(train, test, &splits, &origin)?);
        }
        Ok(splits)
    }
}

/// Each client's training and test samples, from each sample's client.
fn natural(
    train: &[usize],
    test: &[usize],
    splits: &TrainTest,
    origin: &Path,
) -> Result<NaturalClients, DataError> {
    for (ids, split, which) in [
        (train, &splits.train, "clients"),
        (test, &splits.test, "test_clients"),
    ] {
        if ids.len() != split.len() {
            return Err(DataError::Corrupt {
                path: origin.join(which),
                reason: format!(
                    "holds {} clients for {} samples; give one client per sample",
                    ids.len(),
                    split.len()
                ),
            });
        }
    }
    let count = train.iter().max().map_or(0, |&m| m + 1);
    let group = |ids: &[usize]| {
        let mut groups = vec![Vec::new(); count];
        for (sample, &client) in ids.iter().enumerate() {
            groups[client].push(sample);
        }
        groups
    };
    Ok(NaturalClients {
        train: group(train),
        test: group(test),
    })
}

impl DataSource for PyDataSet {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        self.name
    }

    fn about(&self) -> &'static str {
        self.about
    }

    fn sample_kind(&self, _: &NoParams) -> Option<SampleKind> {
        Some(self.arrays.kind)
    }

    fn has_natural_clients(&self, _: &NoParams) -> bool {
        self.arrays.clients.is_some()
    }

    fn load(&self, _: &NoParams, _: &DataContext) -> Result<TrainTest, DataError> {
        self.arrays.read(self.name)
    }

    fn describe(&self, _: &NoParams) -> String {
        format!("the Python data set {:?}", self.name)
    }
}
