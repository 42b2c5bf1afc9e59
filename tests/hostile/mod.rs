//! What fedsim does with hostile bytes, one function per reader: each must return a value or
//! an error, never panic, hang or allocate without bound. The fuzz targets in `fuzz/` call
//! these functions, and `tests/hostile_input.rs` replays the corpus and the inputs the fuzzers
//! found through them.

use std::path::Path;

use fedsim::checkpoint::RunState;
use fedsim::config::{ExperimentConfig, Override};
use fedsim::data::idx::parse_idx;
use fedsim::data::leaf::{LeafTask, parse_file};
use fedsim::data::numpy::Array;
use fedsim::data::partition::Partition;
use fedsim::data::tabular::parse_csv;
use fedsim::registry::Registry;

/// An experiment file's bytes: parsed and validated, and the error displayed. Then the same
/// bytes as a `--set` argument, applied to the shipped default experiment's JSON.
pub fn experiment_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(value) = serde_json::from_str(text) {
        match ExperimentConfig::from_value(value, Path::new("fuzzed.json"), &Registry::builtin()) {
            Ok(config) => assert!(config.problems().is_empty()),
            Err(error) => assert!(!error.to_string().is_empty()),
        }
    }
    let mut document = serde_json::json!({"name": "x", "client": {"lr": 0.1}});
    match Override::parse(text) {
        Ok(set) => {
            let _ = set.apply(&mut document);
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
}

/// An IDX file's (decompressed) bytes.
pub fn idx(data: &[u8]) {
    if let Ok(array) = parse_idx(data.to_vec()) {
        assert_eq!(array.dims.iter().product::<usize>(), array.data.len());
    }
}

/// A partition file's bytes, checked against an experiment whose client and sample counts
/// come from the first two bytes.
pub fn partition_file(data: &[u8]) {
    let [clients, samples, rest @ ..] = data else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (clients, samples) = (usize::from(*clients), usize::from(*samples) * 4);
    if let Ok(partition) = Partition::from_json(text, clients, samples) {
        assert_eq!(partition.num_clients(), clients);
        let mut seen = vec![false; samples];
        for &index in partition.clients.iter().flatten() {
            assert!(!std::mem::replace(&mut seen[index], true));
        }
    }
}

/// A checkpoint file's bytes.
pub fn checkpoint(data: &[u8]) {
    if let Ok(state) = RunState::from_bytes(data) {
        let again = RunState::from_bytes(&state.to_bytes()).expect("a written checkpoint reads");
        assert_eq!(again.round, state.round);
        assert_eq!(again.model.len(), state.model.len());
    }
}

/// A CSV table's bytes, with its label column named `y`.
pub fn csv_table(data: &[u8]) {
    match parse_csv(Path::new("fuzzed.csv"), data, "y") {
        Ok(table) => {
            assert!(!table.labels.is_empty() && table.width() > 0);
            assert_eq!(table.features.len(), table.labels.len() * table.width());
            assert!(table.features.iter().all(|v| v.is_finite()));
        }
        Err(error) => assert!(error.to_string().starts_with("fuzzed.csv")),
    }
}

/// An `.npy` file's bytes.
pub fn npy(data: &[u8]) {
    match Array::parse("fuzzed.npy".into(), data) {
        Ok(array) => assert_eq!(array.shape().iter().product::<usize>(), array.len()),
        Err(error) => assert!(error.to_string().starts_with("fuzzed.npy")),
    }
}

/// A LEAF JSON file's bytes, read as FEMNIST and as Shakespeare.
pub fn leaf_json(data: &[u8]) {
    for task in [LeafTask::Femnist, LeafTask::Shakespeare] {
        if let Err(error) = parse_file(task, Path::new("fuzzed.json"), data) {
            assert!(error.to_string().starts_with("fuzzed.json"));
        }
    }
}
