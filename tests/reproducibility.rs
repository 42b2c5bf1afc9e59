//! A run is a pure function of its config: the same bytes whatever the worker count.

mod common;

use common::{experiment, metrics_without_timing, model_bytes, run_ok};

/// A few rounds of the benchmark config, enough to mix sampling, shuffling and averaging.
const SHORT: &[&str] = &["federation.rounds=4", "federation.clients_per_round=6"];

#[test]
fn reruns_and_worker_counts_give_identical_metrics_and_models() {
    assert_identical_across_runs(SHORT, &[1, 1, 2, 2], 4);
}

#[test]
fn the_cnn_gives_identical_bytes_on_one_and_two_workers() {
    // Its convolution blocks run fedsim's own kernels on flex (`model/conv_pool`), in training
    // and in evaluation; they too must not depend on the worker count.
    let sets = [
        r#"model="cnn""#,
        "federation.rounds=1",
        "federation.clients_per_round=4",
    ];
    assert_identical_across_runs(&sets, &[1, 2], 1);
}

/// Runs the benchmark config with `sets` once per entry of `parallels` (its `num_parallels`)
/// and checks that every run gives the first one's metrics (`rounds` records) and model.
fn assert_identical_across_runs(sets: &[&str], parallels: &[usize], rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<_> = parallels
        .iter()
        .enumerate()
        .map(|(index, parallels)| {
            let out = dir.path().join(index.to_string());
            let parallels = format!("federation.num_parallels={parallels}");
            let sets: Vec<&str> = sets.iter().copied().chain([parallels.as_str()]).collect();
            run_ok(&experiment("mnist-t1"), &out, &sets);
            out
        })
        .collect();
    let reference = metrics_without_timing(&runs[0]);
    assert_eq!(reference.len(), rounds);
    for run in &runs[1..] {
        assert_eq!(metrics_without_timing(run), reference, "{}", run.display());
        assert_eq!(model_bytes(run), model_bytes(&runs[0]), "{}", run.display());
    }
}

#[test]
fn splitting_the_flat_topologys_clients_into_groups_changes_nothing() {
    // A run over MPI splits them so, one group per rank; in one process the placement's
    // groups all run on rank 0.
    let dir = tempfile::tempdir().unwrap();
    let (one, three) = (dir.path().join("one"), dir.path().join("three"));
    run_ok(&experiment("mnist-t1"), &one, SHORT);
    let split: Vec<&str> = SHORT
        .iter()
        .copied()
        .chain([r#"placement={"groups":[0,0,0]}"#])
        .collect();
    run_ok(&experiment("mnist-t1"), &three, &split);
    common::assert_same_results(&three, &one);
    // A rank the run does not have is refused before anything runs.
    let refused = three.with_file_name("refused");
    let stderr = common::fails_with(
        &[
            "run",
            experiment("mnist-t1").to_str().unwrap(),
            "--out",
            refused.to_str().unwrap(),
            "--set",
            r#"placement={"groups":[1,2]}"#,
        ],
        2,
    );
    assert!(
        stderr.contains("placement puts a tier on rank 2, but the run has 1 rank"),
        "{stderr}"
    );
    assert!(!refused.exists());
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
fn a_partition_seed_holds_the_split_while_the_seed_varies_the_training() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, sets: &[&str]| {
        let out = dir.path().join(name);
        let all: Vec<&str> = [
            "federation.rounds=1",
            r#"partition={"scheme":"dirichlet","alpha":0.5}"#,
        ]
        .into_iter()
        .chain(sets.iter().copied())
        .collect();
        run_ok(&experiment("mnist-t1"), &out, &all);
        out
    };
    let partition = |out: &std::path::Path| std::fs::read(out.join("partition.json")).unwrap();
    let fixed = r#"partition={"scheme":"dirichlet","alpha":0.5,"seed":7}"#;
    let (a, b) = (run("a", &[fixed]), run("b", &[fixed, "seed=2"]));
    assert_eq!(partition(&a), partition(&b));
    assert_ne!(metrics_without_timing(&a), metrics_without_timing(&b));
    // Without its own seed the split follows the experiment seed, as before; naming that same
    // seed changes nothing.
    let (c, d) = (run("c", &["seed=2"]), run("d", &["seed=2"]));
    let same = run(
        "same",
        &[
            "seed=2",
            r#"partition={"scheme":"dirichlet","alpha":0.5,"seed":2}"#,
        ],
    );
    assert_ne!(partition(&c), partition(&a));
    assert_eq!(partition(&c), partition(&d));
    assert_eq!(metrics_without_timing(&same), metrics_without_timing(&c));
    assert_eq!(model_bytes(&same), model_bytes(&c));
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

#[test]
fn two_runs_of_one_command_have_the_same_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let manifests: Vec<String> = ["a", "b"]
        .iter()
        .map(|folder| {
            // The same command line, from two folders.
            let cwd = dir.path().join(folder);
            std::fs::create_dir(&cwd).unwrap();
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_fedsim"))
                .current_dir(&cwd)
                .args(["run", experiment("mnist-t1").to_str().unwrap()])
                .args(["--out", "run", "--quiet", "--set", "federation.rounds=1"])
                .output()
                .unwrap();
            assert!(output.status.success(), "{output:?}");
            std::fs::read_to_string(cwd.join("run/manifest.json")).unwrap()
        })
        .collect();
    assert_eq!(manifests[0], manifests[1]);
    let manifest: serde_json::Value = serde_json::from_str(&manifests[0]).unwrap();
    assert_eq!(manifest["backend"], "flex");
    assert_eq!(manifest["data_files"].as_array().unwrap().len(), 4);
    assert_eq!(manifest["command_line"][1], "run");
    let features = manifest["environment"]["cpu_features"].as_array().unwrap();
    assert!(!features.is_empty() || !cfg!(target_arch = "x86_64"));
    assert_eq!(
        manifest["environment"]["matmul_kernels"],
        fedsim::output::manifest::matmul_kernels()
    );
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("a/run/summary.json")).unwrap(),
    )
    .unwrap();
    if cfg!(target_os = "linux") {
        let peak = summary["peak_resident_bytes"].as_u64().unwrap();
        assert!((10 << 20..4 << 30).contains(&peak), "{peak}");
    }
    let digest = |name: &str| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            std::fs::read(dir.path().join("a/run").join(name)).unwrap(),
        ))
    };
    assert_eq!(manifest["partition_sha256"], digest("partition.json"));
}
