//! The command line: bad input gets a clear message naming the file and field, exit code 2,
//! and never a panic; the partition command prints label counts.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{experiment, fedsim, root};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::json;

const MNIST_FILES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

/// An experiment file in `dir` that uses the embedded MNIST, with `edit` applied to its JSON.
fn config_with(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let text = fs::read_to_string(experiment("mnist-t1")).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["data"]["dir"] = root().join("datasets/mnist").to_str().unwrap().into();
    edit(&mut value);
    let path = dir.join("experiment.json");
    fs::write(&path, value.to_string()).unwrap();
    path
}

/// Writes the embedded-MNIST experiment with `edit` applied and checks that running it is
/// rejected as bad input, with each of `expected` in the message.
fn assert_edit_rejected(edit: impl FnOnce(&mut serde_json::Value), expected: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    assert_rejected(&config_with(dir.path(), edit), expected)
}

/// `fedsim partition` on the benchmark config with one `--set`.
fn partition_with(set: &str) -> Output {
    fedsim(&[
        "partition",
        experiment("mnist-t1").to_str().unwrap(),
        "--set",
        set,
    ])
}

/// Runs `fedsim run` on `config` and checks the failure is reported as bad input.
fn assert_rejected(config: &Path, expected: &[&str]) -> String {
    let out = config.parent().unwrap().join("out");
    let output = fedsim(&[
        "run",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_bad_input(&output, expected)
}

fn assert_bad_input(output: &Output, expected: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    for part in expected {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
    stderr
}

#[test]
fn unknown_field_is_named_with_its_path() {
    assert_edit_rejected(
        |v| v["client"]["learning_rate"] = 0.1.into(),
        &["experiment.json", "client", "unknown field `learning_rate`"],
    );
}

#[test]
fn each_validation_rule_names_its_field() {
    let cases: &[(&str, serde_json::Value, &str)] = &[
        (
            "/federation/clients_per_round",
            101.into(),
            "federation.clients_per_round",
        ),
        (
            "/federation/clients_per_round",
            0.into(),
            "federation.clients_per_round",
        ),
        (
            "/federation/num_clients",
            0.into(),
            "federation.num_clients",
        ),
        ("/federation/rounds", 0.into(), "federation.rounds"),
        (
            "/federation/num_parallels",
            0.into(),
            "federation.num_parallels",
        ),
        ("/client/lr", 0.0.into(), "client.lr"),
        ("/client/lr", (-0.1).into(), "client.lr"),
        ("/client/momentum", 1.0.into(), "client.momentum"),
        ("/client/weight_decay", (-1.0).into(), "client.weight_decay"),
        ("/client/epochs", 0.into(), "client.epochs"),
        ("/client/batch_size", 0.into(), "client.batch_size"),
        ("/eval/every", 0.into(), "eval.every"),
        ("/name", "a b".into(), "name"),
        ("/model", "transformer".into(), "model"),
        ("/data/dir", "/nonexistent/mnist".into(), "data.dir"),
        (
            "/partition",
            serde_json::json!({"scheme": "dirichlet", "alpha": 0}),
            "partition.alpha",
        ),
        (
            "/partition",
            serde_json::json!({"scheme": "dirichlet", "alpha": 1, "min_size": 0}),
            "partition.min_size",
        ),
        (
            "/partition",
            serde_json::json!({"scheme": "shards", "num_shards": 150}),
            "partition.num_shards",
        ),
        (
            "/partition",
            serde_json::json!({"scheme": "dirichlet"}),
            "missing field `alpha`",
        ),
        (
            "/partition",
            serde_json::json!({"file": "/nonexistent.json"}),
            "partition.file",
        ),
        (
            "/faults",
            serde_json::json!([{"round": 99, "client": 0, "kind": "panic"}]),
            "faults[0].round",
        ),
        (
            "/strategy",
            serde_json::json!({"name": "fedyogi", "beta2": 1.0}),
            "strategy.beta2",
        ),
        (
            "/strategy",
            serde_json::json!({"name": "krum", "byzantine": u64::MAX}),
            "strategy.byzantine",
        ),
        (
            "/strategy",
            serde_json::json!({"name": "trimmed_mean", "trim": 0.5}),
            "strategy.trim",
        ),
        (
            "/strategy",
            serde_json::json!({"name": "qffl", "lipschitz": 0}),
            "strategy.lipschitz",
        ),
        (
            "/client/work",
            serde_json::json!({"kind": "uniform", "min_epochs": 3, "max_epochs": 2}),
            "client.work.min_epochs",
        ),
        (
            "/client/work",
            serde_json::json!({"kind": "steps", "steps": 0}),
            "client.work.steps",
        ),
        (
            "/strategy",
            serde_json::json!({"name": "ditto", "lambda": "large"}),
            "strategy.lambda",
        ),
        (
            "/strategy",
            serde_json::json!({"name": "apfl", "alpha": 1.5}),
            "strategy.alpha",
        ),
        (
            "/byzantine",
            serde_json::json!({"clients": [100], "attack": {"kind": "label_flip"}}),
            "byzantine.clients",
        ),
        (
            "/byzantine",
            serde_json::json!({"fraction": 0.1, "attack": {"kind": "gaussian", "std": -1}}),
            "byzantine.attack.std",
        ),
        (
            "/eval/client_test_fraction",
            1.0.into(),
            "eval.client_test_fraction",
        ),
        (
            "/privacy",
            private(serde_json::json!({"noise_multiplier": 0})),
            "privacy.noise_multiplier",
        ),
        (
            "/privacy",
            private(serde_json::json!({"clip": {"kind": "fixed", "norm": -1}})),
            "privacy.clip.norm",
        ),
        (
            "/privacy",
            private(serde_json::json!({"delta": 1})),
            "privacy.delta",
        ),
        (
            "/privacy",
            private(serde_json::json!({"clip": {"kind": "adaptive", "target_quantile": 1.5}})),
            "privacy.clip.target_quantile",
        ),
        (
            "/privacy",
            private(serde_json::json!({"clip": {"kind": "adaptive", "count_std": 0.25}})),
            "privacy.clip.count_std",
        ),
        (
            "/privacy",
            private(serde_json::json!({"clip": {"kind": "adaptive"}, "noise": "local"})),
            "privacy.clip.kind",
        ),
        (
            "/compression",
            serde_json::json!({"uplink": {"name": "topk", "k": 200_000}}),
            "compression.uplink.k",
        ),
        (
            "/compression",
            serde_json::json!({"uplink": {"name": "qsgd", "levels": 0}}),
            "compression.uplink.levels",
        ),
        (
            "/compression",
            serde_json::json!({"uplink": {"name": "quantize", "bits": 12}}),
            "compression.uplink.bits",
        ),
        (
            "/compression",
            serde_json::json!({"uplink": {"name": "randk", "unbiased": true}, "error_feedback": true}),
            "compression.error_feedback",
        ),
        (
            "/compression",
            serde_json::json!({"uplink": {"name": "topk", "fraction": 0}}),
            "compression.uplink.fraction",
        ),
        (
            "/compression",
            serde_json::json!({"uplink": {"name": "top_k"}}),
            "compression.uplink",
        ),
    ];
    for (pointer, value, expected) in cases {
        let set_field = |v: &mut serde_json::Value| {
            let field = pointer
                .split('/')
                .skip(1)
                .fold(v, |node, key| &mut node[key]);
            *field = value.clone();
        };
        assert_edit_rejected(set_field, &["experiment.json", expected]);
    }
}

/// A privacy section that passes validation on the embedded-MNIST experiment, with the fields
/// of `changes` changed.
fn private(changes: serde_json::Value) -> serde_json::Value {
    let mut section = serde_json::json!({
        "noise_multiplier": 1.0,
        "clip": {"kind": "fixed", "norm": 1.0},
        "delta": 1e-5,
    });
    for (field, value) in changes.as_object().unwrap() {
        section[field] = value.clone();
    }
    section
}

#[test]
fn a_privacy_budget_that_runs_out_names_the_round() {
    let budget = |v: &mut serde_json::Value| {
        v["privacy"] = private(serde_json::json!({"target_epsilon": 3.0}));
    };
    let stderr = assert_edit_rejected(budget, &["privacy.target_epsilon", "runs out after round"]);
    assert!(stderr.contains("20 rounds spend epsilon"), "{stderr}");
}

#[test]
fn privacy_is_refused_where_its_noise_would_not_cover_what_is_read() {
    let cases: &[(serde_json::Value, &str, &str)] = &[
        (
            serde_json::json!({"strategy": {"name": "krum"}}),
            "strategy.name",
            "robust rule",
        ),
        (
            serde_json::json!({"strategy": {"name": "scaffold"}}),
            "strategy.name",
            "does not cover",
        ),
        (
            serde_json::json!({"strategy": {"name": "power_of_choice"}}),
            "strategy.name",
            "drawn uniformly",
        ),
        (
            serde_json::json!({"topology": {"kind": "hierarchical", "schedulers": 2, "mode": "aggregate"}}),
            "topology.mode",
            "sums the clients' clipped changes itself",
        ),
    ];
    for (fields, path, message) in cases {
        let edit = |v: &mut serde_json::Value| {
            v["privacy"] = private(serde_json::json!({}));
            for (field, value) in fields.as_object().unwrap() {
                v[field] = value.clone();
            }
        };
        assert_edit_rejected(edit, &[path, message]);
    }
}

#[test]
fn fedsim_privacy_answers_both_questions() {
    let common = [
        "--sampling-rate",
        "0.04",
        "--steps",
        "2250",
        "--delta",
        "1e-5",
    ];
    let answer = |question: &[&str]| {
        let mut args = vec!["privacy"];
        args.extend(question);
        args.extend(common);
        let output = fedsim(&args);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let spent = answer(&["--noise-multiplier", "1.5", "--series", "signed"]);
    assert!(
        spent.starts_with("epsilon 7.329111 (RDP order 3.9)"),
        "{spent}"
    );
    let needed = answer(&["--target-epsilon", "7.329335"]);
    assert!(needed.starts_with("noise multiplier 1.5000"), "{needed}");
    for (flag, bad, expected) in [
        ("--noise-multiplier", "0", "expected a number above 0"),
        ("--delta", "1.5", "expected a delta in (0, 1)"),
        ("--sampling-rate", "0", "expected a sampling rate in (0, 1]"),
    ] {
        let mut args = vec!["privacy", "--noise-multiplier", "1"];
        args.extend(common);
        let at = args.iter().rposition(|a| *a == flag).unwrap();
        args[at + 1] = bad;
        assert_bad_input(&fedsim(&args), &[flag, expected]);
    }
}

#[test]
fn several_problems_are_reported_together() {
    let edit = |v: &mut serde_json::Value| {
        v["client"]["lr"] = 0.0.into();
        v["federation"]["rounds"] = 0.into();
    };
    assert_edit_rejected(edit, &["client.lr", "federation.rounds"]);
}

#[test]
fn bad_set_override_is_rejected() {
    let output = fedsim(&[
        "run",
        experiment("mnist-t1").to_str().unwrap(),
        "--set",
        "client.lr",
    ]);
    assert_bad_input(&output, &["--set", "path.to.field=value"]);
}

#[test]
fn an_invalid_set_override_is_named_instead_of_the_file() {
    let output = partition_with("federation.clients_per_round=500");
    let stderr = assert_bad_input(
        &output,
        &[
            "invalid --set federation.clients_per_round=500",
            "federation.clients_per_round",
            "is 500",
        ],
    );
    assert!(!stderr.contains("mnist-t1.json"), "{stderr}");
    // An unknown field a --set makes, at the top or further down, is the --set's too.
    for set in ["lrr=5", "client.lrr=5"] {
        let stderr = assert_bad_input(&partition_with(set), &[&format!("invalid --set {set}:")]);
        assert!(!stderr.contains("invalid experiment file"), "{stderr}");
    }
}

#[test]
fn a_misspelt_field_or_variant_gets_the_nearest_valid_name() {
    for (set, suggestion) in [
        ("client.epoch=2", "did you mean \"epochs\"?"),
        ("model=mpl", "did you mean \"mlp\"?"),
        ("partition.scheme=dirchlet", "did you mean \"dirichlet\"?"),
    ] {
        let output = partition_with(set);
        assert_bad_input(&output, &[suggestion]);
    }
}

#[test]
fn spaces_around_a_set_path_and_value_are_understood() {
    let output = partition_with("federation.num_clients = 20");
    assert!(output.status.success(), "{output:?}");
    // A header, 20 clients and the summary.
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 22);
}

#[test]
fn an_unquoted_json_value_gets_a_hint_about_quotes_not_a_type_name() {
    let output = partition_with("partition={scheme:dirichlet,alpha:0.5}");
    let stderr = assert_bad_input(
        &output,
        &[r#"--set 'partition={"scheme":"dirichlet","alpha":0.5}'"#],
    );
    assert!(!stderr.contains("Raw"), "{stderr}");
}

#[test]
fn paths_on_the_command_line_are_relative_to_the_current_folder() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .current_dir(root())
        .args([
            "partition",
            "experiments/mnist-t1.json",
            "--set",
            "data.dir=datasets/mnist",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn missing_experiment_file_is_named_with_the_folder_it_was_looked_for_in() {
    let output = fedsim(&["run", "no-such-experiment.json"]);
    let folder = std::env::current_dir().unwrap();
    let folder = format!("looked for in folder {}", folder.display());
    assert_bad_input(&output, &["no-such-experiment.json", &folder]);
}

#[test]
fn unparsable_json_is_reported_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experiment.json");
    fs::write(&path, "{\"name\": \"x\",\n").unwrap();
    assert_rejected(&path, &["experiment.json", "not valid JSON", "line 2"]);
}

/// A data folder holding copies of the embedded MNIST files (gzipped), with `name` replaced by
/// `bytes` written raw (not gzipped) unless `gzip` is set.
fn data_dir_with(dir: &Path, name: &str, bytes: &[u8], gzip: bool) -> PathBuf {
    let data = dir.join("mnist");
    fs::create_dir_all(&data).unwrap();
    for file in MNIST_FILES.iter().filter(|&&f| f != name) {
        let source = root().join("datasets/mnist").join(format!("{file}.gz"));
        fs::copy(source, data.join(format!("{file}.gz"))).unwrap();
    }
    if gzip {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        encoder.write_all(bytes).unwrap();
        fs::write(data.join(format!("{name}.gz")), encoder.finish().unwrap()).unwrap();
    } else {
        fs::write(data.join(name), bytes).unwrap();
    }
    data
}

fn config_for_data(dir: &Path, data: &Path) -> PathBuf {
    config_with(dir, |v| v["data"]["dir"] = data.to_str().unwrap().into())
}

fn labels_file(count: u32) -> Vec<u8> {
    let mut bytes = vec![0, 0, 8, 1];
    bytes.extend(count.to_be_bytes());
    bytes.extend((0..count).map(|i| (i % 10) as u8));
    bytes
}

/// Replaces the test labels with raw `bytes`, lets `tweak` edit the data folder, and checks
/// that a run is rejected with each of `expected` in its message.
fn assert_test_labels_rejected(bytes: &[u8], tweak: impl FnOnce(&Path), expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir_with(dir.path(), "t10k-labels-idx1-ubyte", bytes, false);
    tweak(&data);
    let config = config_for_data(dir.path(), &data);
    assert_rejected(&config, expected);
}

#[test]
fn truncated_idx_file_is_reported() {
    let mut labels = labels_file(10_000);
    labels.truncate(5_000);
    let expected = [
        "t10k-labels-idx1-ubyte",
        "truncated",
        "need 10000",
        "found 4992",
    ];
    assert_test_labels_rejected(&labels, |_| {}, &expected);
}

#[test]
fn wrong_magic_number_is_reported() {
    let mut labels = labels_file(10_000);
    labels[..4].copy_from_slice(b"\x1f\x8b\x08\x00");
    let expected = ["t10k-labels-idx1-ubyte", "magic number"];
    assert_test_labels_rejected(&labels, |_| {}, &expected);
}

#[test]
fn label_count_that_disagrees_with_the_images_is_reported() {
    let expected = ["t10k-labels-idx1-ubyte", "[9999]", "expected [10000]"];
    assert_test_labels_rejected(&labels_file(9_999), |_| {}, &expected);
}

#[test]
fn a_file_that_differs_from_its_checksum_is_reported() {
    let copy_checksums = |data: &Path| {
        let sums = root().join("datasets/mnist/SHA256SUMS");
        fs::copy(sums, data.join("SHA256SUMS")).unwrap();
    };
    let expected = ["t10k-labels-idx1-ubyte", "does not match SHA256SUMS"];
    assert_test_labels_rejected(&labels_file(10_000), copy_checksums, &expected);
}

#[test]
fn missing_data_file_is_named() {
    let remove = |data: &Path| fs::remove_file(data.join("t10k-labels-idx1-ubyte")).unwrap();
    let expected = ["cannot read", "t10k-labels-idx1-ubyte"];
    assert_test_labels_rejected(&labels_file(10_000), remove, &expected);
}

#[test]
fn corrupt_gzip_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let labels = labels_file(60_000);
    let data = data_dir_with(dir.path(), "train-labels-idx1-ubyte", &labels, true);
    let gz = data.join("train-labels-idx1-ubyte.gz");
    let mut bytes = fs::read(&gz).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..].iter_mut().for_each(|b| *b ^= 0x5a);
    fs::write(&gz, bytes).unwrap();
    let config = config_for_data(dir.path(), &data);
    let expected = ["train-labels-idx1-ubyte.gz", "cannot be decompressed"];
    assert_rejected(&config, &expected);
}

#[test]
fn a_raw_idx_file_beside_a_different_gzipped_one_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let labels = labels_file(10_000);
    let data = data_dir_with(dir.path(), "t10k-labels-idx1-ubyte", &labels, true);
    let mut other = labels.clone();
    other[8..].iter_mut().for_each(|label| *label = 9 - *label);
    fs::write(data.join("t10k-labels-idx1-ubyte"), &other).unwrap();
    let config = config_for_data(dir.path(), &data);
    let expected = [
        "t10k-labels-idx1-ubyte and",
        "t10k-labels-idx1-ubyte.gz both exist and hold different data",
    ];
    assert_rejected(&config, &expected);
    // The same data twice is no ambiguity.
    fs::write(data.join("t10k-labels-idx1-ubyte"), &labels).unwrap();
    let out = dir.path().join("same");
    common::run_ok(&config, &out, &["federation.rounds=1"]);
}

#[test]
fn a_key_given_twice_is_refused_naming_it_in_files_and_sets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experiment.json");
    let text = fs::read_to_string(experiment("mnist-t1")).unwrap();
    let twice = text.replace("\"lr\": 0.05", "\"lr\": 0.05,\n \"lr\": 500");
    assert_ne!(text, twice);
    fs::write(&path, twice).unwrap();
    assert_rejected(&path, &["experiment.json", "client.lr: given twice (line"]);
    let seed_twice = text.replacen("\"seed\": 1,", "\"seed\": 1, \"seed\": 2,", 1);
    fs::write(&path, seed_twice).unwrap();
    assert_rejected(&path, &["seed: given twice"]);
    let output = partition_with(r#"client={"lr": 0.1, "lr": 5}"#);
    assert_bad_input(&output, &["--set", "client.lr: given twice"]);
    let grid = r#""grid": {"seed": [1], "seed": [2]}"#;
    let sweep = common::write_sweep_file(dir.path(), &experiment("mnist-t1"), grid);
    let output = fedsim(&["sweep", sweep.to_str().unwrap(), "--dry-run"]);
    assert_bad_input(&output, &["sweep.json", "grid.seed: given twice"]);
}

#[test]
fn a_bad_compute_speed_names_its_field_not_a_debug_form() {
    for (compute, field) in [
        (
            json!({"kind": "fixed", "samples_per_second": 0.0}),
            "network.compute.samples_per_second: is 0",
        ),
        (
            json!({"kind": "uniform", "min": 5.0, "max": 1.0}),
            "network.compute.max: is 1; must be at least min, 5",
        ),
        (
            json!({"kind": "lognormal", "median": 100.0, "sigma": -1.0}),
            "network.compute.sigma: is -1",
        ),
    ] {
        let stderr = {
            let dir = tempfile::tempdir().unwrap();
            let config = config_with(dir.path(), |v| v["network"] = json!({"compute": compute}));
            assert_rejected(&config, &[field])
        };
        assert!(
            !stderr.contains("Fixed {") && !stderr.contains("Uniform {"),
            "{stderr}"
        );
    }
}

#[test]
fn files_that_are_not_one_utf8_json_object_say_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experiment.json");
    fs::write(&path, "[1, 2]").unwrap();
    let said = assert_rejected(
        &path,
        &[
            "experiment.json",
            "is an array; an experiment is one JSON object",
        ],
    );
    assert!(!said.contains("expected a string"), "{said}");
    fs::write(&path, b"{\"name\": \"caf\xE9\"}").unwrap();
    let said = assert_rejected(&path, &["is not UTF-8 text: byte 13 (line 1) is 0xe9"]);
    assert!(!said.contains("looked for in folder"), "{said}");
    // A byte-order mark is ignored, as JSON allows.
    let text = fs::read(experiment("mnist-t1")).unwrap();
    fs::write(&path, [b"\xEF\xBB\xBF".as_slice(), &text].concat()).unwrap();
    let out = dir.path().join("bom");
    common::run_ok(&path, &out, &["federation.rounds=1"]);
}

#[test]
fn a_file_of_many_bad_entries_lists_fifty_and_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experiment.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(experiment("mnist-t1")).unwrap()).unwrap();
    value["network"] = json!({"client_overrides": (0..500)
        .map(|i| json!({"clients": [100_000 + i]}))
        .collect::<Vec<_>>()});
    fs::write(&path, value.to_string()).unwrap();
    let said = assert_rejected(&path, &["… and 450 more problems of the same file"]);
    assert_eq!(said.matches("client_overrides[").count(), 50, "{said}");
}

#[test]
fn a_misspelt_sweep_field_gets_the_nearest_valid_name() {
    let dir = tempfile::tempdir().unwrap();
    let misspelt = r#""gird": {"seed": [1]}"#;
    let sweep = common::write_sweep_file(dir.path(), &experiment("mnist-t1"), misspelt);
    let output = fedsim(&["sweep", sweep.to_str().unwrap(), "--dry-run"]);
    assert_bad_input(&output, &["sweep.json", "gird", "did you mean \"grid\"?"]);
}

#[test]
fn unreachable_dirichlet_min_size_is_reported() {
    let edit = |v: &mut serde_json::Value| {
        v["partition"] = serde_json::json!({"scheme": "dirichlet", "alpha": 0.01, "min_size": 600});
    };
    assert_edit_rejected(edit, &["min_size 600", "lower partition.min_size"]);
}

#[test]
fn more_clients_than_samples_is_reported() {
    let edit = |v: &mut serde_json::Value| v["federation"]["num_clients"] = 60_001.into();
    assert_edit_rejected(edit, &["num_clients 60001", "60000 training samples"]);
}

#[test]
fn partition_command_prints_label_counts_per_client() {
    let output = fedsim(&[
        "partition",
        experiment("mnist-cnn-shards").to_str().unwrap(),
    ]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let (summary, table) = lines[1..].split_last().unwrap();
    assert!(
        summary.starts_with("100 clients; samples per client: min 600, median 600, max 600"),
        "{summary}"
    );
    let rows: Vec<Vec<usize>> = table
        .iter()
        .map(|line| {
            line.split_whitespace()
                .map(|n| n.parse().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 100);
    for (client, row) in rows.iter().enumerate() {
        assert_eq!(row[0], client);
        assert_eq!(row[1], 600, "each client holds two shards of 300");
        assert_eq!(row[2..].iter().sum::<usize>(), 600);
        assert!(row[2..].iter().filter(|&&n| n > 0).count() <= 4);
    }
}

#[test]
fn help_documents_both_commands() {
    let output = fedsim(&["--help"]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains("run") && stdout.contains("partition"),
        "{stdout}"
    );
    let output = fedsim(&["run", "--help"]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    for flag in ["--out", "--backend", "--set", "--quiet"] {
        assert!(stdout.contains(flag), "{flag} not in {stdout}");
    }
}

#[test]
fn an_out_folder_that_holds_a_run_is_refused_as_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    common::run_ok(&experiment("mnist-t1"), &out, &["federation.rounds=1"]);
    let output = fedsim(&[
        "run",
        experiment("mnist-t1").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_bad_input(&output, &["already holds a run", "--resume"]);
}
