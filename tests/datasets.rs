//! Data sets and models beyond MNIST and the 2NN: the built-in copies run from any folder,
//! Fashion-MNIST and the FedProx paper's synthetic data train, models take hyperparameters,
//! and a model that does not fit the data is rejected before anything runs.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{
    experiment, fails_with, fedsim, metrics_without_timing, model_bytes, run_ok, summary,
    write_cifar_files,
};
use serde_json::{Value, json};

/// A copy of the shipped experiment `name` in `dir`, far from the repository, with `edit`
/// applied.
fn copy_of(name: &str, dir: &Path, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let text = fs::read_to_string(experiment(name)).unwrap();
    let mut value: Value = serde_json::from_str(&text).unwrap();
    edit(&mut value);
    let path = dir.join(format!("{name}.json"));
    fs::write(&path, value.to_string()).unwrap();
    path
}

/// Sets a few small clients and `rounds` rounds.
fn small(value: &mut Value, rounds: u32) {
    value["federation"] = json!({"num_clients": 20, "clients_per_round": 2, "rounds": rounds});
    value["eval"] = json!({"every": rounds});
}

#[test]
fn a_shipped_experiment_copied_to_another_folder_runs_on_the_built_in_data() {
    for name in ["mnist-t1", "fashion-mnist-fedavg"] {
        let dir = tempfile::tempdir().unwrap();
        let copy = copy_of(name, dir.path(), |v| small(v, 1));
        let out = dir.path().join("run");
        run_ok(&copy, &out, &[]);
        let manifest: Value =
            serde_json::from_str(&fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
        let files = manifest["data_files"].as_array().unwrap();
        assert_eq!(files.len(), 4, "{name}");
        let path = files[0]["path"].as_str().unwrap();
        assert!(path.starts_with("built-in/"), "{name}: {path}");
        assert!(
            summary(&out)["final_accuracy"].as_f64().unwrap() > 0.3,
            "{name}"
        );
    }
}

#[test]
fn fedsim_datasets_and_schemes_list_the_builtins_with_their_parameters() {
    let listing = |command: &str| {
        let output = common::fedsim(&[command]);
        assert!(output.status.success(), "{command}");
        String::from_utf8(output.stdout).unwrap()
    };
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.is_empty() && !l.starts_with(' ') && !l.contains(' '))
            .map(str::to_string)
            .collect()
    };
    let data_sets = listing("datasets");
    assert_eq!(
        names(&data_sets),
        [
            "mnist",
            "fashion-mnist",
            "rotated-mnist",
            "cifar10",
            "synthetic",
            "breast-cancer",
            "csv",
            "numpy",
            "femnist",
            "shakespeare",
            "packed"
        ]
    );
    // Defaults where every parameter has one; the documentation alone where one is required.
    assert!(
        data_sets.contains("\n  normalize = \"unit\": "),
        "{data_sets}"
    );
    assert!(data_sets.contains("\n  file: the table"), "{data_sets}");
    let schemes = listing("schemes");
    assert_eq!(
        names(&schemes),
        [
            "iid",
            "dirichlet",
            "shards",
            "labels",
            "quantity",
            "natural",
            "file"
        ]
    );
    assert!(
        schemes.contains("\n  alpha: concentration, required"),
        "{schemes}"
    );
}

#[test]
fn fashion_mnist_is_not_mnist() {
    let dir = tempfile::tempdir().unwrap();
    let accuracy = |dataset: &str| {
        let copy = copy_of("mnist-t1", dir.path(), |v| {
            small(v, 2);
            v["data"] = json!({ "dataset": dataset });
        });
        let out = dir.path().join(dataset);
        run_ok(&copy, &out, &[]);
        summary(&out)["final_accuracy"].as_f64().unwrap()
    };
    // The same model, data volume and training reach different accuracies on the two sets.
    let (mnist, fashion) = (accuracy("mnist"), accuracy("fashion-mnist"));
    assert!((mnist - fashion).abs() > 0.005, "{mnist} {fashion}");
}

#[test]
fn the_synthetic_data_trains_on_its_natural_clients_and_reruns_to_the_same_bits() {
    let dir = tempfile::tempdir().unwrap();
    let copy = copy_of("synthetic-1-1", dir.path(), |v| {
        v["federation"]["rounds"] = json!(5);
        v["eval"]["every"] = json!(5);
    });
    let runs: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("run{i}"))).collect();
    for run in &runs {
        run_ok(&copy, run, &["federation.num_parallels=1"]);
    }
    assert_eq!(
        metrics_without_timing(&runs[0]),
        metrics_without_timing(&runs[1])
    );
    assert_eq!(model_bytes(&runs[0]), model_bytes(&runs[1]));
    // Logistic regression on 60 features and 10 classes.
    assert_eq!(model_bytes(&runs[0]).len(), 4 * (60 * 10 + 10));
    // The users are made when sampled: the run records each one's sample counts.
    let partition: Value =
        serde_json::from_str(&fs::read_to_string(runs[0].join("partition.json")).unwrap()).unwrap();
    let clients = partition["clients_on_demand"]["train"].as_array().unwrap();
    assert_eq!(clients.len(), 30);
    // Users' sizes follow a heavy-tailed law: they differ.
    let sizes: Vec<u64> = clients.iter().map(|c| c.as_u64().unwrap()).collect();
    assert!(sizes.iter().max() > sizes.iter().min(), "{sizes:?}");
    assert!(summary(&runs[0])["final_accuracy"].as_f64().unwrap() > 0.2);
    // Each user is also evaluated on its own test samples.
    let last: Value = serde_json::from_str(&metrics_without_timing(&runs[0])[4]).unwrap();
    let mean = last["client_accuracy"]["mean"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&mean), "{last}");
}

#[test]
fn the_seed_draws_another_synthetic_data_set() {
    let out = |seed: &str| {
        let output = fedsim(&[
            "partition",
            experiment("synthetic-1-1").to_str().unwrap(),
            "--set",
            seed,
        ]);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(out("seed=3"), out("seed=3"));
    assert_ne!(out("seed=3"), out("seed=4"));
}

#[test]
fn mlp_widths_come_from_the_experiment_file() {
    let dir = tempfile::tempdir().unwrap();
    let copy = copy_of("mnist-t1", dir.path(), |v| {
        small(v, 1);
        v["model"] = json!({"name": "mlp", "hidden": [16]});
    });
    let out = dir.path().join("run");
    run_ok(&copy, &out, &[]);
    assert_eq!(model_bytes(&out).len(), 4 * (784 * 16 + 16 + 16 * 10 + 10));
    let config: Value =
        serde_json::from_str(&fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model"], json!({"name": "mlp", "hidden": [16]}));
}

/// Runs the experiment `name` with `sets` and checks that it is rejected as bad input with
/// each of `expected` in the message.
fn assert_rejected(name: &str, sets: &[&str], expected: &[&str]) {
    let path = experiment(name);
    let mut args = vec!["run", path.to_str().unwrap()];
    for set in sets {
        args.extend(["--set", set]);
    }
    let output = fedsim(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for part in expected {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
}

#[test]
fn a_model_that_does_not_fit_the_data_is_rejected_with_a_message() {
    assert_rejected(
        "synthetic-1-1",
        &["model=cnn"],
        &[
            "model.name",
            "\"cnn\" cannot take",
            "rows of numeric features",
        ],
    );
    assert_rejected(
        "mnist-t1",
        &[r#"model={"name": "mlp", "hidden": [200, 0]}"#],
        &["model.hidden[1]", "at least 1 unit"],
    );
    assert_rejected(
        "mnist-t1",
        &[r#"model={"name": "mlp", "widths": [10]}"#],
        &["model", "unknown field `widths`"],
    );
    assert_rejected(
        "shakespeare-lstm",
        &["model=mlp"],
        &["\"mlp\" cannot take sequences of characters; use \"lstm\""],
    );
    assert_rejected(
        "mnist-t1",
        &["model=lstm"],
        &["\"lstm\" cannot take 28x28 images"],
    );
    assert_rejected(
        "mnist-t1",
        &[r#"model={"name": "resnet", "depth": 21, "groups": 3}"#],
        &["model.depth: is 21", "model.groups: is 3"],
    );
}

#[test]
fn the_natural_partition_needs_a_data_set_with_clients() {
    assert_rejected(
        "mnist-t1",
        &[r#"partition={"scheme": "natural"}"#],
        &["partition.scheme", "\"mnist\" does not"],
    );
    assert_rejected(
        "synthetic-1-1",
        &["data.alpha=-1"],
        &["data.alpha", "at least 0"],
    );
}

#[test]
fn the_built_in_table_trains_logistic_regression_to_the_published_range() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    run_ok(&experiment("breast-cancer"), &out, &[]);
    let accuracy = summary(&out)["final_accuracy"].as_f64().unwrap();
    // The data set's creators report 97.5%; 114 test rows make one row 0.9 points.
    assert!(accuracy > 0.93, "{accuracy}");
}

/// The built-in table's rows split into a gzipped training file and a plain test file in
/// `dir`, the first `train_rows` rows for training; `corrupt` may edit the test file's text.
fn table_files(dir: &Path, train_rows: usize, corrupt: impl FnOnce(String) -> String) -> Value {
    let text = fs::read_to_string(common::root().join("datasets/breast-cancer/breast-cancer.csv"))
        .unwrap();
    let (header, rows) = text.split_once('\n').unwrap();
    let rows: Vec<&str> = rows.lines().collect();
    let file = |rows: &[&str]| format!("{header}\n{}\n", rows.join("\n"));
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gzip, file(&rows[..train_rows]).as_bytes()).unwrap();
    fs::write(dir.join("train.csv.gz"), gzip.finish().unwrap()).unwrap();
    fs::write(dir.join("test.csv"), corrupt(file(&rows[train_rows..]))).unwrap();
    json!({"dataset": "csv", "file": "train.csv.gz", "test_file": "test.csv", "label": "diagnosis"})
}

#[test]
fn a_users_csv_files_train_with_their_own_test_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = table_files(dir.path(), 400, |text| text);
    let copy = copy_of("breast-cancer", dir.path(), |v| v["data"] = data);
    let out = dir.path().join("run");
    run_ok(&copy, &out, &[]);
    let manifest: Value =
        serde_json::from_str(&fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let files: Vec<&str> = manifest["data_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        files[0].ends_with("train.csv.gz") && files[1].ends_with("test.csv"),
        "{files:?}"
    );
    assert!(summary(&out)["final_accuracy"].as_f64().unwrap() > 0.9);
}

#[test]
fn a_bad_csv_row_is_named_with_its_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let data = table_files(dir.path(), 400, |text| text.replacen(",0.", ",x.", 1));
    let copy = copy_of("breast-cancer", dir.path(), |v| v["data"] = data);
    let stderr = fails_with(&["run", copy.to_str().unwrap()], 2);
    assert!(stderr.contains("test.csv line 2, column"), "{stderr}");
    assert!(stderr.contains("is not a finite number"), "{stderr}");
    let data = table_files(dir.path(), 400, |text| {
        text.replacen("diagnosis", "label", 1)
    });
    let copy = copy_of("breast-cancer", dir.path(), |v| v["data"] = data);
    let stderr = fails_with(&["run", copy.to_str().unwrap()], 2);
    assert!(
        stderr.contains("test.csv has no column \"diagnosis\""),
        "{stderr}"
    );
}

/// The first `count` samples of an embedded MNIST split (`prefix` `train` or `t10k`): pixels
/// and labels, read straight from the IDX files.
fn mnist_part(prefix: &str, count: usize) -> (Vec<u8>, Vec<u8>) {
    let read = |name: &str, header: usize| {
        let path = common::root().join(format!("datasets/mnist/{prefix}-{name}.gz"));
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(fs::File::open(path).unwrap()),
            &mut bytes,
        )
        .unwrap();
        bytes.split_off(header)
    };
    let mut pixels = read("images-idx3-ubyte", 16);
    pixels.truncate(count * 784);
    let mut labels = read("labels-idx1-ubyte", 8);
    labels.truncate(count);
    (pixels, labels)
}

/// An `.npy` file of `values` with `shape`.
fn npy<T: npyz::AutoSerialize>(shape: &[u64], values: impl IntoIterator<Item = T>) -> Vec<u8> {
    use npyz::WriterBuilder;
    let mut bytes = Vec::new();
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut bytes)
        .begin_nd()
        .unwrap();
    writer.extend(values).unwrap();
    writer.finish().unwrap();
    bytes
}

/// 2,000 training and 500 test MNIST samples as NumPy arrays, pixels as `pixels` makes them:
/// `(name, npy bytes)` for each of `x_train`, `y_train`, `x_test`, `y_test`.
fn mnist_arrays(pixels: impl Fn(&[u8], u64) -> Vec<u8>) -> Vec<(&'static str, Vec<u8>)> {
    let (train_x, train_y) = mnist_part("train", 2000);
    let (test_x, test_y) = mnist_part("t10k", 500);
    vec![
        ("x_train", pixels(&train_x, 2000)),
        (
            "y_train",
            npy(&[2000], train_y.iter().map(|&l| i64::from(l))),
        ),
        ("x_test", pixels(&test_x, 500)),
        ("y_test", npy(&[500], test_y)),
    ]
}

/// Writes `arrays` as an `.npz` archive at `path`, stored as `np.savez` does or deflated as
/// `np.savez_compressed` does.
fn write_npz(path: &Path, arrays: &[(&str, Vec<u8>)], method: zip::CompressionMethod) {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
    let options = zip::write::SimpleFileOptions::default().compression_method(method);
    for (name, bytes) in arrays {
        zip.start_file(format!("{name}.npy"), options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}

/// Runs a three-round MLP experiment on the arrays at `path` (an archive or a folder).
fn run_on_arrays(dir: &Path, path: &Path, run: &str) -> PathBuf {
    let copy = copy_of("mnist-t1", dir, |v| {
        v["federation"] = json!({"num_clients": 10, "clients_per_round": 5, "rounds": 3});
        v["client"] = json!({"epochs": 5, "batch_size": 32, "lr": 0.1});
        v["data"] = json!({"dataset": "numpy", "path": path});
    });
    let out = dir.join(run);
    run_ok(&copy, &out, &[]);
    out
}

#[test]
fn numpy_arrays_train_alike_as_bytes_or_floats_archived_or_in_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let as_bytes = |pixels: &[u8], n: u64| npy(&[n, 28, 28], pixels.iter().copied());
    // float32 pixels scaled as fedsim scales bytes, with a channels-last axis.
    let as_floats = |pixels: &[u8], n: u64| {
        npy(
            &[n, 28, 28, 1],
            pixels.iter().map(|&p| f32::from(p) / 255.0),
        )
    };
    let archive = dir.path().join("mnist.npz");
    write_npz(
        &archive,
        &mnist_arrays(as_bytes),
        zip::CompressionMethod::Stored,
    );
    let folder = dir.path().join("arrays");
    fs::create_dir(&folder).unwrap();
    for (name, bytes) in mnist_arrays(as_floats) {
        fs::write(folder.join(format!("{name}.npy")), bytes).unwrap();
    }
    let bytes_run = run_on_arrays(dir.path(), &archive, "bytes");
    let floats_run = run_on_arrays(dir.path(), &folder, "floats");
    assert_eq!(model_bytes(&bytes_run), model_bytes(&floats_run));
    let accuracy = summary(&bytes_run)["final_accuracy"].as_f64().unwrap();
    assert!(accuracy > 0.6, "{accuracy}");
}

#[test]
fn bad_numpy_arrays_are_named_with_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let as_bytes = |pixels: &[u8], n: u64| npy(&[n, 28, 28], pixels.iter().copied());
    let rejected = |arrays: Vec<(&str, Vec<u8>)>, model: &str, expected: &[&str]| {
        let archive = dir.path().join("bad.npz");
        write_npz(&archive, &arrays, zip::CompressionMethod::Deflated);
        let copy = copy_of("mnist-t1", dir.path(), |v| {
            v["data"] = json!({"dataset": "numpy", "path": archive});
            v["model"] = json!(model);
        });
        let output = fedsim(&["run", copy.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        for part in expected {
            assert!(stderr.contains(part), "{part:?} not in: {stderr}");
        }
    };
    let mut float_labels = mnist_arrays(as_bytes);
    float_labels[1].1 = npy(&[2000], (0..2000).map(|i| (i % 10) as f32));
    rejected(
        float_labels,
        "mlp",
        &["bad.npz/y_train.npy", "labels must be integers"],
    );
    let mut cut = mnist_arrays(as_bytes);
    cut[2].1.truncate(1000);
    rejected(cut, "mlp", &["x_test.npy is truncated", "[500, 28, 28]"]);
    let mut missing = mnist_arrays(as_bytes);
    missing.pop();
    rejected(missing, "mlp", &["y_test.npy is missing"]);
    // NaN and infinite features are refused at load, not found as a diverged run.
    for bad in [f32::NAN, f32::INFINITY] {
        let with_bad = |pixels: &[u8], n: u64| {
            let mut values: Vec<f32> = pixels.iter().map(|&p| f32::from(p) / 255.0).collect();
            values[2 * 784 + 5] = bad;
            npy(&[n, 784], values)
        };
        rejected(
            mnist_arrays(with_bad),
            "mlp",
            &[
                "bad.npz",
                &format!("holds {bad} in training sample 2, feature 5"),
            ],
        );
    }
    let rows = |pixels: &[u8], n: u64| npy(&[n, 784], pixels.iter().copied());
    rejected(
        mnist_arrays(rows),
        "cnn",
        &["bad.npz holds rows of 784 features", "\"cnn\" cannot take"],
    );
}

/// The summary line of `fedsim partition` on the benchmark config with `partition` set.
fn partition_summary(partition: &str) -> String {
    let set = format!("partition={partition}");
    let output = fedsim(&[
        "partition",
        experiment("mnist-t1").to_str().unwrap(),
        "--set",
        &set,
    ]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    stdout.lines().last().unwrap().to_string()
}

#[test]
fn skewed_partitions_show_in_the_printed_statistics() {
    let iid = partition_summary(r#"{"scheme": "iid"}"#);
    assert!(
        iid.starts_with("100 clients; samples per client: min 600, median 600, max 600"),
        "{iid}"
    );
    // Two labels per client: at most one bit of label entropy each.
    let labels = partition_summary(r#"{"scheme": "labels", "labels_per_client": 2}"#);
    let entropy: f64 = labels.split("entropy ").nth(1).unwrap()[..5]
        .parse()
        .unwrap();
    assert!(entropy <= 1.0, "{labels}");
    let quantity = partition_summary(r#"{"scheme": "quantity", "sigma": 1}"#);
    assert!(!quantity.contains("min 600, median 600"), "{quantity}");
    assert_rejected(
        "mnist-t1",
        &[r#"partition={"scheme": "quantity", "sigma": -1}"#],
        &["partition.sigma"],
    );
    assert_rejected(
        "mnist-t1",
        &[r#"partition={"scheme": "labels", "labels_per_client": 11}"#],
        &["labels_per_client is 11", "between 1 and 10"],
    );
}

#[test]
fn a_run_folder_holds_the_partition_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let copy = copy_of("breast-cancer", dir.path(), |v| {
        v["federation"]["rounds"] = json!(1)
    });
    let out = dir.path().join("run");
    run_ok(&copy, &out, &[]);
    let stats: Value =
        serde_json::from_str(&fs::read_to_string(out.join("partition_stats.json")).unwrap())
            .unwrap();
    assert_eq!(stats["clients"], 10);
    let counts = stats["label_counts"].as_array().unwrap();
    let total: u64 = counts
        .iter()
        .flat_map(|c| c.as_array().unwrap())
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(total, 455);
}

#[test]
fn cifar10_trains_the_cifar_cnn_with_seeded_augmentation() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cifar-10-batches-bin");
    fs::create_dir(&data).unwrap();
    write_cifar_files(&data, 40);
    let run = |name: &str, augment: bool, workers: u32| {
        let copy = copy_of("mnist-t1", dir.path(), |v| {
            small(v, 1);
            v["model"] = json!("cifar-cnn");
            v["data"] = json!({"dataset": "cifar10", "dir": data, "normalize": "standard", "augment": augment});
        });
        model_bytes(&run_with_workers(&copy, dir.path().join(name), workers))
    };
    let augmented = run("one-worker", true, 1);
    // 1.76M parameters: conv 3-64 and 64-64, dense 4096-384-192-10.
    assert_eq!(augmented.len(), 4 * 1_756_426);
    assert_eq!(augmented, run("two-workers", true, 2));
    assert_ne!(augmented, run("plain", false, 1));
}

#[test]
fn data_sets_that_do_not_ship_need_their_folder() {
    for (dataset, expected) in [
        ("cifar10", "data.dir: CIFAR-10 is not built into fedsim"),
        ("femnist", "data.dir: FEMNIST is not built into fedsim"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let copy = copy_of("mnist-t1", dir.path(), |v| {
            v["data"] = json!({ "dataset": dataset })
        });
        let stderr = fails_with(&["run", copy.to_str().unwrap()], 2);
        assert!(stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn the_built_in_shakespeare_set_trains_the_lstm_on_its_speaking_roles() {
    let dir = tempfile::tempdir().unwrap();
    let copy = copy_of("shakespeare-lstm", dir.path(), |v| {
        v["model"] = json!({"name": "lstm", "embedding": 8, "hidden": [16]});
        v["federation"]["clients_per_round"] = json!(2);
        v["federation"]["rounds"] = json!(2);
        v["eval"] = json!({"every": 2});
    });
    let run = |name: &str, workers: u32| run_with_workers(&copy, dir.path().join(name), workers);
    let (one, two) = (run("one-worker", 1), run("two-workers", 2));
    assert_eq!(model_bytes(&one), model_bytes(&two));
    assert_eq!(metrics_without_timing(&one), metrics_without_timing(&two));
    // Embedding 80x8, one LSTM layer of 16 (gates side by side), dense 16 to 80.
    let params = 80 * 8 + (8 * 64 + 64 + 16 * 64) + (16 * 80 + 80);
    assert_eq!(model_bytes(&one).len(), 4 * params);
    // Next-character accuracy on the held-out text, and on each role's own.
    let last: Value = serde_json::from_str(&metrics_without_timing(&one)[1]).unwrap();
    let accuracy = last["test_accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&accuracy), "{last}");
    assert!(last["client_accuracy"]["mean"].as_f64().is_some(), "{last}");
    let manifest = fs::read_to_string(one.join("manifest.json")).unwrap();
    assert!(
        manifest.contains("built-in/shakespeare/train/shakespeare.json"),
        "{manifest}"
    );
}

/// Writes MNIST's first `writers * per_writer` training images to `dir/train` and the next
/// `writers * 2` to `dir/test` as LEAF FEMNIST files, each writer holding consecutive images,
/// pixel bytes written as LEAF writes them (value / 255).
fn write_femnist_files(dir: &Path, writers: usize, per_writer: usize) {
    let (images, labels) = mnist_part("train", writers * (per_writer + 2));
    let mut next = 0;
    for (split, count) in [("train", per_writer), ("test", 2)] {
        let mut user_data = serde_json::Map::new();
        let users: Vec<String> = (0..writers).map(|w| format!("f{w:04}_00")).collect();
        for user in &users {
            let x: Vec<Vec<f64>> = (next..next + count)
                .map(|i| {
                    images[i * 784..(i + 1) * 784]
                        .iter()
                        .map(|&p| f64::from(p) / 255.0)
                        .collect()
                })
                .collect();
            let y: Vec<u8> = labels[next..next + count].to_vec();
            user_data.insert(user.clone(), json!({"x": x, "y": y}));
            next += count;
        }
        let file =
            json!({"users": users, "num_samples": vec![count; writers], "user_data": user_data});
        fs::create_dir_all(dir.join(split)).unwrap();
        fs::write(dir.join(split).join("all_data_0.json"), file.to_string()).unwrap();
    }
}

/// Runs `copy` on `workers` worker threads into `out`; returns `out`.
fn run_with_workers(copy: &Path, out: PathBuf, workers: u32) -> PathBuf {
    run_ok(
        copy,
        &out,
        &[&format!("federation.num_parallels={workers}")],
    );
    out
}

/// A copy of mnist-t1 in `dir` that reads LEAF FEMNIST files of `writers` writers (see
/// [`write_femnist_files`]) with the natural partition and `model`; returns it and the files'
/// folder.
fn femnist_experiment(
    dir: &Path,
    writers: usize,
    per_writer: usize,
    model: Value,
) -> (PathBuf, PathBuf) {
    let data = dir.join("femnist");
    write_femnist_files(&data, writers, per_writer);
    let copy = copy_of("mnist-t1", dir, |v| {
        v["data"] = json!({"dataset": "femnist", "dir": data});
        v["partition"] = json!({"scheme": "natural"});
        v["model"] = model;
        v["federation"] =
            json!({"num_clients": writers, "clients_per_round": writers / 2, "rounds": 1});
        v["eval"] = json!({"every": 1});
    });
    (copy, data)
}

#[test]
fn femnist_in_leafs_format_trains_on_its_writers() {
    let dir = tempfile::tempdir().unwrap();
    let (copy, _) = femnist_experiment(dir.path(), 6, 20, json!("cnn"));
    let out = dir.path().join("run");
    run_ok(&copy, &out, &[]);
    let partition: Value =
        serde_json::from_str(&fs::read_to_string(out.join("partition.json")).unwrap()).unwrap();
    let clients = partition["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 6);
    assert_eq!(clients[1], json!((20..40).collect::<Vec<_>>()));
    // The FedAvg CNN with 62 outputs.
    assert_eq!(
        model_bytes(&out).len(),
        4 * (1_663_370 - 512 * 10 - 10 + 512 * 62 + 62)
    );
    let last: Value = serde_json::from_str(&metrics_without_timing(&out)[0]).unwrap();
    assert!(last["client_accuracy"]["mean"].as_f64().is_some(), "{last}");
    // The natural partition takes the writers as they are.
    let stderr = fails_with(
        &[
            "run",
            copy.to_str().unwrap(),
            "--set",
            "federation.num_clients=5",
            "--set",
            "federation.clients_per_round=2",
        ],
        2,
    );
    assert!(
        stderr.contains("federation.num_clients is 5, and the data set defines 6 clients"),
        "{stderr}"
    );
}

#[test]
fn a_bad_leaf_file_is_named_with_the_user_and_sample() {
    let dir = tempfile::tempdir().unwrap();
    let (copy, data) = femnist_experiment(dir.path(), 2, 3, json!("cnn"));
    let train = data.join("train").join("all_data_0.json");
    let text = fs::read_to_string(&train).unwrap();
    // The second writer's first label becomes 62, one past FEMNIST's classes.
    let mut file: Value = serde_json::from_str(&text).unwrap();
    file["user_data"]["f0001_00"]["y"][0] = json!(62);
    fs::write(&train, file.to_string()).unwrap();
    let stderr = fails_with(&["run", copy.to_str().unwrap()], 2);
    assert!(
        stderr.contains(
            "all_data_0.json user \"f0001_00\", sample 0: y is 62; FEMNIST classes are 0 to 61"
        ),
        "{stderr}"
    );
    // A user listed twice is named as such, not as missing from user_data.
    let mut twice: Value = serde_json::from_str(&text).unwrap();
    let first = twice["users"][0].clone();
    twice["users"].as_array_mut().unwrap().push(first);
    let count = twice["num_samples"][0].clone();
    twice["num_samples"].as_array_mut().unwrap().push(count);
    fs::write(&train, twice.to_string()).unwrap();
    let stderr = fails_with(&["run", copy.to_str().unwrap()], 2);
    assert!(
        stderr.contains("all_data_0.json lists user \"f0000_00\" twice in users"),
        "{stderr}"
    );
    // A file cut short names its line and column.
    fs::write(&train, &text[..text.len() / 2]).unwrap();
    let stderr = fails_with(&["run", copy.to_str().unwrap()], 2);
    assert!(
        stderr.contains("all_data_0.json is not a LEAF file") && stderr.contains("line 1 column"),
        "{stderr}"
    );
}

#[test]
fn the_residual_network_with_groupnorm_trains_alike_on_one_or_two_workers() {
    let dir = tempfile::tempdir().unwrap();
    let model = json!({"name": "resnet", "depth": 8, "groups": 4});
    let (copy, _) = femnist_experiment(dir.path(), 4, 25, model);
    let run = |name: &str, workers: u32| {
        model_bytes(&run_with_workers(&copy, dir.path().join(name), workers))
    };
    let one = run("one-worker", 1);
    assert_eq!(one, run("two-workers", 2));
    // ResNet-8: the stem, three blocks (two with projections), GroupNorm after each
    // convolution, and a dense layer from 64 to FEMNIST's 62 classes.
    let convs = 9 * 16
        + 2 * 9 * 16 * 16
        + (9 * 16 * 32 + 9 * 32 * 32 + 16 * 32)
        + (9 * 32 * 64 + 9 * 64 * 64 + 32 * 64);
    let norms = 2 * (16 + 2 * 16 + 3 * 32 + 3 * 64);
    assert_eq!(one.len(), 4 * (convs + norms + 64 * 62 + 62));
}
