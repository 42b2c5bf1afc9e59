//! A run is a pure function of its config: the same bytes whatever the worker count.

mod common;

use common::{experiment, metrics_without_timing, model_bytes, run_ok};

/// A few rounds of the benchmark config, enough to mix sampling, shuffling and averaging.
const SHORT: &[&str] = &["federation.rounds=4", "federation.clients_per_round=6"];

#[test]
fn reruns_and_worker_counts_give_identical_metrics_and_models() {
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<_> = [("a", 1), ("b", 1), ("c", 2), ("d", 2)]
        .iter()
        .map(|(name, parallels)| {
            let out = dir.path().join(name);
            let parallels = format!("federation.num_parallels={parallels}");
            let sets: Vec<&str> = SHORT.iter().copied().chain([parallels.as_str()]).collect();
            run_ok(&experiment("mnist-t1"), &out, &sets);
            out
        })
        .collect();
    let reference = metrics_without_timing(&runs[0]);
    assert_eq!(reference.len(), 4);
    for run in &runs[1..] {
        assert_eq!(metrics_without_timing(run), reference, "{}", run.display());
        assert_eq!(model_bytes(run), model_bytes(&runs[0]), "{}", run.display());
    }
}

#[test]
fn a_different_seed_gives_different_results() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    run_ok(&experiment("mnist-t1"), &a, &["federation.rounds=1"]);
    run_ok(
        &experiment("mnist-t1"),
        &b,
        &["federation.rounds=1", "seed=2"],
    );
    assert_ne!(metrics_without_timing(&a), metrics_without_timing(&b));
}

#[test]
fn a_saved_partition_file_reproduces_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (first, again) = (dir.path().join("first"), dir.path().join("again"));
    let sets = [
        "federation.rounds=2",
        "partition.scheme=shards",
        "partition.num_shards=200",
    ];
    run_ok(&experiment("mnist-t1"), &first, &sets);
    let file = format!(
        "partition={{\"file\": {:?}}}",
        first.join("partition.json").to_str().unwrap()
    );
    run_ok(
        &experiment("mnist-t1"),
        &again,
        &["federation.rounds=2", &file],
    );
    assert_eq!(
        metrics_without_timing(&again),
        metrics_without_timing(&first)
    );
}

#[test]
fn a_runs_resolved_config_reruns_it_from_any_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (first, again) = (dir.path().join("first"), dir.path().join("again"));
    // Started from the repository root with a relative path, as the README does.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .current_dir(common::root())
        .args([
            "run",
            "experiments/mnist-t1.json",
            "--quiet",
            "--set",
            "federation.rounds=2",
        ])
        .arg("--out")
        .arg(&first)
        .output()
        .unwrap();
    assert!(status.status.success());
    // Rerun from elsewhere with nothing but the run folder's config.json.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .current_dir(dir.path())
        .args(["run", "first/config.json", "--quiet", "--out", "again"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(
        metrics_without_timing(&again),
        metrics_without_timing(&first)
    );
    assert_eq!(model_bytes(&again), model_bytes(&first));
}
