//! A user's own algorithm, model or data set, registered beside the built-ins, gets the whole command
//! line: the example plug-ins run from their experiment files and are recorded in the
//! manifest, a program without them refuses to continue their runs, and a crate outside the
//! repository, made from the template in `examples/plugin-crate/`, builds against fedsim and
//! runs its algorithm.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{metrics_without_timing, model_bytes, profile_dir, root, run_ok};
use serde_json::Value;

/// Runs the example `name` (built beside this test) with `args`.
fn example(name: &str, args: &[&str]) -> Output {
    Command::new(profile_dir().join("examples").join(name))
        .args(args)
        .output()
        .expect("cargo test builds the examples")
}

/// Asserts that a command succeeded and returns its stdout.
fn succeeded(output: Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A round's line of `metrics.jsonl`.
fn record(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

#[test]
fn the_example_strategy_runs_beside_the_builtins_and_its_runs_need_it_to_resume() {
    let listed = succeeded(example("custom_strategy", &["strategies"]));
    assert!(listed.contains("\nfedexp\n  paper: Jhunjhunwala, Wang and Joshi 2023"));
    assert!(listed.contains("  from: fedsim-example-custom-strategy "));
    assert!(listed.contains("\nscaffold\n"), "the built-ins stay");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fedexp");
    let file = root().join("examples/custom_strategy/fedexp.json");
    succeeded(example(
        "custom_strategy",
        &[
            "run",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--quiet",
            "--set",
            "federation.rounds=3",
        ],
    ));
    let steps: Vec<f64> = metrics_without_timing(&out)
        .iter()
        .map(|line| record(line)["strategy"]["server_lr"].as_f64().unwrap())
        .collect();
    assert_eq!(steps.len(), 3);
    assert!(steps.iter().all(|&eta| eta >= 1.0), "{steps:?}");
    assert!(steps.iter().any(|&eta| eta > 1.0), "{steps:?}");
    let manifest: Value =
        serde_json::from_str(&fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["plugins"][0]["name"], "fedexp");
    assert_eq!(
        manifest["plugins"][0]["crate"],
        "fedsim-example-custom-strategy"
    );
    let config: Value =
        serde_json::from_str(&fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["strategy"]["epsilon"], 0.001);
    // The fedsim binary does not register FedExP: it refuses the file and the run folder.
    let refused = common::fails_with(&["run", "--resume", out.to_str().unwrap()], 2);
    assert!(
        refused.contains(
            "the run used the algorithm \"fedexp\" from the crate fedsim-example-custom-strategy"
        ),
        "{refused}"
    );
    let unknown = common::fails_with(&["run", file.to_str().unwrap()], 2);
    assert!(
        unknown.contains("strategy.name: unknown variant `fedexp`"),
        "{unknown}"
    );
    // Its parameters are checked as a built-in's are.
    let bad = example(
        "custom_strategy",
        &["run", file.to_str().unwrap(), "--set", "strategy.epsilon=0"],
    );
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("strategy.epsilon: is 0; must be greater than 0"),
        "{stderr}"
    );
}

#[test]
fn the_example_model_trains_from_its_name_reproducibly_and_is_checked_as_a_builtin() {
    let listed = succeeded(example("custom_model", &["models"]));
    assert!(
        listed.contains("\nlenet\n  NIID-Bench's CNN (Li et al. 2021)"),
        "{listed}"
    );
    assert!(listed.contains("  from: fedsim-example-custom-model "));
    assert!(listed.contains("  hidden = [120,84]: "), "{listed}");
    assert!(listed.contains("\ncnn\n"), "the built-ins stay");
    let dir = tempfile::tempdir().unwrap();
    let file = root().join("examples/custom_model/lenet.json");
    let file = file.to_str().unwrap();
    let train = |name: &str, workers: &str| {
        let out = dir.path().join(name);
        let sets = [
            "federation.rounds=2",
            "federation.clients_per_round=4",
            "client.lr=0.05",
        ];
        let mut args = vec!["run", file, "--quiet", "--out", out.to_str().unwrap()];
        for set in sets.iter().chain(&[workers]) {
            args.extend(["--set", set]);
        }
        succeeded(example("custom_model", &args));
        out
    };
    let two = train("two-workers", "federation.num_parallels=2");
    let one = train("one-worker", "federation.num_parallels=1");
    assert_eq!(model_bytes(&two), model_bytes(&one));
    let rounds = metrics_without_timing(&two);
    let accuracy = record(&rounds[1])["test_accuracy"].as_f64().unwrap();
    assert!(accuracy > 0.5, "LeNet learns MNIST: {accuracy}");
    let layout: Value =
        serde_json::from_str(&fs::read_to_string(two.join("model-layout.json")).unwrap()).unwrap();
    let names: Vec<&str> = layout["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[..2], ["block1.conv.weight", "block1.conv.bias"]);
    // 6·25 + 6, 16·150 + 16, 256·120 + 120, 120·84 + 84, 84·10 + 10.
    let values: u64 = layout["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .product::<u64>()
        })
        .sum();
    assert_eq!(values, 156 + 2_416 + 30_840 + 10_164 + 850);
    let manifest: Value =
        serde_json::from_str(&fs::read_to_string(two.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["plugins"][0]["kind"], "model");
    assert_eq!(manifest["plugins"][0]["name"], "lenet");
    let refused = common::fails_with(&["run", "--resume", two.to_str().unwrap()], 2);
    assert!(
        refused.contains(
            "the run used the model \"lenet\" from the crate fedsim-example-custom-model"
        ),
        "{refused}"
    );
    let unknown = common::fails_with(&["run", file], 2);
    assert!(
        unknown.contains("model.name: unknown variant `lenet`"),
        "{unknown}"
    );
    // Its hyperparameters and the data it takes are checked as a built-in's are.
    for (sets, expected) in [
        (
            vec!["model={\"name\": \"lenet\", \"hidden\": [120, 0]}"],
            "model.hidden: has a layer of 0 units",
        ),
        (
            vec!["model={\"name\": \"lenet\", \"width\": 3}"],
            "model.width: unknown field `width`",
        ),
        (
            vec!["data={\"dataset\": \"breast-cancer\"}"],
            "model.name: \"lenet\" cannot take rows of numeric features; use \"mlp\" or \"logistic\"",
        ),
    ] {
        let mut args = vec!["run", file];
        for set in &sets {
            args.extend(["--set", set]);
        }
        let bad = example("custom_model", &args);
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(bad.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn the_example_data_set_is_made_in_code_with_its_own_clients_reproducibly_and_checked_as_a_builtin()
{
    let listed = succeeded(example("custom_dataset", &["datasets"]));
    assert!(
        listed.contains("\nblobs\n  Gaussian blobs, one per class"),
        "{listed}"
    );
    assert!(listed.contains("  from: fedsim-example-custom-dataset "));
    assert!(listed.contains("  shift = 1.0: "), "{listed}");
    assert!(listed.contains("\nmnist\n"), "the built-ins stay");
    let dir = tempfile::tempdir().unwrap();
    let file = root().join("examples/custom_dataset/blobs.json");
    let file = file.to_str().unwrap();
    let train = |name: &str, workers: &str| {
        let out = dir.path().join(name);
        let mut args = vec!["run", file, "--quiet", "--out", out.to_str().unwrap()];
        for set in ["federation.rounds=3", workers] {
            args.extend(["--set", set]);
        }
        succeeded(example("custom_dataset", &args));
        out
    };
    let two = train("two-workers", "federation.num_parallels=2");
    let one = train("one-worker", "federation.num_parallels=1");
    assert_eq!(model_bytes(&two), model_bytes(&one));
    assert_eq!(metrics_without_timing(&two), metrics_without_timing(&one));
    let rounds = metrics_without_timing(&two);
    let accuracy = record(&rounds[2])["test_accuracy"].as_f64().unwrap();
    assert!(accuracy > 0.5, "four blobs are told apart: {accuracy}");
    // Each site is a client with its own 200 training samples, and is evaluated on its own
    // test samples.
    let partition: Value =
        serde_json::from_str(&fs::read_to_string(two.join("partition.json")).unwrap()).unwrap();
    let clients = partition["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 20);
    assert!(clients.iter().all(|c| c.as_array().unwrap().len() == 200));
    assert!(
        record(&rounds[2])["client_accuracy"].is_object(),
        "{}",
        rounds[2]
    );
    let manifest: Value =
        serde_json::from_str(&fs::read_to_string(two.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["plugins"][0]["kind"], "data set");
    assert_eq!(manifest["plugins"][0]["name"], "blobs");
    assert_eq!(manifest["data_files"], serde_json::json!([]));
    let config: Value =
        serde_json::from_str(&fs::read_to_string(two.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["data"]["shift"], 1.5);
    assert_eq!(config["data"]["classes"], 4);
    let refused = common::fails_with(&["run", "--resume", two.to_str().unwrap()], 2);
    assert!(
        refused.contains(
            "the run used the data set \"blobs\" from the crate fedsim-example-custom-dataset"
        ),
        "{refused}"
    );
    let unknown = common::fails_with(&["run", file], 2);
    assert!(
        unknown.contains("data.dataset: unknown variant `blobs`"),
        "{unknown}"
    );
    // Its parameters, and what it fits, are checked as a built-in's are.
    for (set, expected) in [
        (
            "data.classes=1",
            "data.classes: is 1; must be between 2 and 256",
        ),
        ("data.spread=-1", "data.spread: is -1; must be at least 0"),
        ("data.shfit=2", "data.shfit: unknown field `shfit`"),
        (
            "model=cnn",
            "model.name: \"cnn\" cannot take rows of numeric features",
        ),
    ] {
        let bad = example("custom_dataset", &["run", file, "--set", set]);
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(bad.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{set}: {stderr}");
    }
}

/// The template crate copied to `dir`, its fedsim dependency pointed at this checkout and its
/// lock file at this checkout's versions (so that it builds with the crates already built).
fn outside_crate(dir: &Path) -> PathBuf {
    let template = root().join("examples/plugin-crate");
    let crate_dir = dir.join("my-fl-algorithm");
    fs::create_dir_all(crate_dir.join("src")).unwrap();
    fs::create_dir_all(crate_dir.join("tests")).unwrap();
    let manifest = fs::read_to_string(template.join("Cargo.toml")).unwrap();
    let pointed = manifest.replace(
        r#"fedsim = { path = "../.." }"#,
        &format!("fedsim = {{ path = {:?} }}", root().to_str().unwrap()),
    );
    assert_ne!(manifest, pointed, "the template depends on fedsim by path");
    fs::write(crate_dir.join("Cargo.toml"), pointed).unwrap();
    for file in [
        "src/lib.rs",
        "src/main.rs",
        "tests/conformance.rs",
        "experiment.json",
    ] {
        fs::copy(template.join(file), crate_dir.join(file)).unwrap();
    }
    fs::copy(root().join("Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
    crate_dir
}

/// Runs `cargo <command> --offline --quiet` in the outside crate `crate_dir`, with this
/// test's target folder, profile and fedsim features (so that the dependencies are built), and
/// asserts it succeeds.
fn cargo_in(crate_dir: &Path, command: &str) {
    let profile = profile_dir();
    let target = profile.parent().unwrap();
    let mut build = Command::new(env!("CARGO"));
    build
        .args([command, "--offline", "--quiet"])
        .current_dir(crate_dir);
    // What cargo set for this test (CARGO_MANIFEST_DIR and the like) is not the outside crate's
    // environment; left in, build scripts that watch it would run again in both builds.
    for (name, _) in std::env::vars() {
        if name.starts_with("CARGO_") && name != "CARGO_HOME" {
            build.env_remove(name);
        }
    }
    build.env("CARGO_TARGET_DIR", target);
    if profile.ends_with("release") {
        build.arg("--release");
    }
    // fedsim with this test's own features: the crates they pull in (MPI's among them) then
    // resolve as in this test's build, so that burn is not compiled a second time (from a
    // cold cache, that took 12 of this test's 12.5 minutes).
    let features: Vec<&str> = [
        ("fedsim/mpi", cfg!(feature = "mpi")),
        ("fedsim/wgpu", cfg!(feature = "wgpu")),
    ]
    .into_iter()
    .filter_map(|(feature, on)| on.then_some(feature))
    .collect();
    if !features.is_empty() {
        build.args(["--features", &features.join(",")]);
    }
    let built = build.output().unwrap();
    assert!(
        built.status.success(),
        "cargo {command}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}

#[test]
fn the_template_algorithm_and_its_test_name_fedsim_only_through_the_plugin_module() {
    // `origin!`, a macro, is at the crate's root, as every exported macro is.
    for file in ["src/lib.rs", "tests/conformance.rs"] {
        let text = fs::read_to_string(root().join("examples/plugin-crate").join(file)).unwrap();
        let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
        for line in code.filter(|l| l.contains("fedsim::")) {
            let uses = line.matches("fedsim::").count() - line.matches("fedsim::origin!").count();
            assert_eq!(
                line.matches("fedsim::plugin::").count(),
                uses,
                "{file}: {line}"
            );
        }
    }
}

#[test]
fn a_crate_made_from_the_template_builds_outside_the_repository_and_runs_its_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = outside_crate(dir.path());
    cargo_in(&crate_dir, "build");
    // Its own tests reach its registry through its library: the conformance kit passes.
    cargo_in(&crate_dir, "test");
    let program = profile_dir().join("my-fl-algorithm");
    let run = |args: &[&str]| Command::new(&program).args(args).output().unwrap();
    let listed = succeeded(run(&["strategies"]));
    assert!(listed.contains("\nserver_step\n"), "{listed}");
    assert!(
        listed.contains("  from: my-fl-algorithm 0.1.0\n"),
        "{listed}"
    );
    // Its own experiment file, for two rounds; with a step of 1 it is FedAvg, to the bit.
    let out = dir.path().join("run");
    let file = crate_dir.join("experiment.json");
    let file = file.to_str().unwrap();
    let sets = ["--quiet", "--set", "federation.rounds=2", "--out"];
    succeeded(run(
        &[&["run", file][..], &sets, &[out.to_str().unwrap()]].concat()
    ));
    assert_eq!(metrics_without_timing(&out).len(), 2);
    let unit = dir.path().join("unit");
    let unit_step = [
        &["run", file][..],
        &sets,
        &[unit.to_str().unwrap(), "--set", "strategy.lr=1"],
    ]
    .concat();
    succeeded(run(&unit_step));
    let fedavg = dir.path().join("fedavg");
    run_ok(
        Path::new(file),
        &fedavg,
        &[r#"strategy={"name":"fedavg"}"#, "federation.rounds=2"],
    );
    assert_eq!(model_bytes(&unit), model_bytes(&fedavg));
    assert_ne!(model_bytes(&out), model_bytes(&fedavg));
}
