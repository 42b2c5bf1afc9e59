//! Hostile input: the fuzzers' corpus (`fuzz/corpus/<target>/`) and the inputs that once made a
//! reader fail (`tests/fuzz-regressions/<target>/`) replayed through the readers, as the fuzz
//! targets run them. None may panic.

mod common;
mod hostile;

use std::fs;
use std::path::Path;

/// Feeds every file under `dir/<target>/` to `reader`; returns how many there were.
fn replay(dir: &Path, target: &str, reader: fn(&[u8])) -> usize {
    let Ok(entries) = fs::read_dir(dir.join(target)) else {
        return 0;
    };
    let mut count = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let bytes = fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| reader(&bytes));
        assert!(outcome.is_ok(), "{} made the reader panic", path.display());
        count += 1;
    }
    count
}

fn replay_all(target: &str, reader: fn(&[u8])) {
    let root = common::root();
    let corpus = replay(&root.join("fuzz/corpus"), target, reader);
    let regressions = replay(&root.join("tests/fuzz-regressions"), target, reader);
    assert!(corpus + regressions > 0, "no inputs for {target}");
}

#[test]
fn experiment_files_and_set_overrides_never_panic() {
    replay_all("experiment_file", hostile::experiment_file);
}

#[test]
fn idx_files_never_panic() {
    replay_all("idx", hostile::idx);
}

#[test]
fn partition_files_never_panic() {
    replay_all("partition_file", hostile::partition_file);
}

#[test]
fn csv_tables_never_panic() {
    replay_all("csv_table", hostile::csv_table);
}

#[test]
fn npy_arrays_never_panic() {
    replay_all("npy", hostile::npy);
}

#[test]
fn leaf_json_files_never_panic() {
    replay_all("leaf_json", hostile::leaf_json);
}

#[test]
fn checkpoints_never_panic() {
    replay_all("checkpoint", hostile::checkpoint);
}
