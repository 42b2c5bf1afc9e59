//! A data set's own clients packed into one file (`fedsim data pack`) and read in place, each
//! client when it is sampled (the `packed` data set): LEAF's Shakespeare, built into fedsim,
//! trains, scores and records to the same bits either way; the manifest names the packed
//! file with its digest; a file that exists is never overwritten, and a damaged one is refused
//! with its name.

mod common;

use std::fs;
use std::path::Path;

use common::{assert_same_results, fails_with, fedsim, run_ok, run_refused};
use serde_json::Value;

/// The Shakespeare experiment cut small: a 16-unit LSTM, 6 clients a round, 2 rounds.
const SMALL: [&str; 4] = [
    r#"model={"name": "lstm", "embedding": 8, "hidden": [16]}"#,
    "federation.clients_per_round=6",
    "federation.rounds=2",
    "eval.every=1",
];

/// The arguments of `fedsim data pack EXPERIMENT --out OUT`.
fn pack_args<'a>(experiment: &'a Path, out: &'a Path) -> [&'a str; 5] {
    let [experiment, out] = [experiment, out].map(|p| p.to_str().unwrap());
    ["data", "pack", experiment, "--out", out]
}

/// Packs the experiment's Shakespeare into `out` with `fedsim data pack`.
fn pack(out: &Path) {
    let packed = fedsim(&pack_args(&common::experiment("shakespeare-lstm"), out));
    let said = String::from_utf8_lossy(&packed.stdout);
    assert!(
        packed.status.success(),
        "{}",
        String::from_utf8_lossy(&packed.stderr)
    );
    assert!(said.contains("packed the 84 clients"), "{said}");
    assert!(said.contains(r#""dataset": "packed""#), "{said}");
}

#[test]
fn clients_read_from_a_packed_file_train_to_the_bits_of_the_json_files() {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("shakespeare.pack");
    pack(&file);
    let experiment = common::experiment("shakespeare-lstm");
    let packed = format!(
        r#"data={{"dataset": "packed", "path": {:?}}}"#,
        file.to_str().unwrap()
    );
    let cases: [&[&str]; 2] = [
        &[],
        &["eval.clients_sampled=9", "eval.client_test_fraction=0.25"],
    ];
    for (at, extra) in cases.iter().enumerate() {
        let json_run = scratch.path().join(format!("json-{at}"));
        let packed_run = scratch.path().join(format!("packed-{at}"));
        let sets: Vec<&str> = SMALL.iter().chain(extra.iter()).copied().collect();
        run_ok(&experiment, &json_run, &sets);
        let mut packed_sets = sets.clone();
        packed_sets.push(&packed);
        run_ok(&experiment, &packed_run, &packed_sets);
        assert_same_results(&packed_run, &json_run);
        // The run read the packed file, and its manifest says which, by digest.
        let manifest: Value =
            serde_json::from_str(&fs::read_to_string(packed_run.join("manifest.json")).unwrap())
                .unwrap();
        let files = manifest["data_files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{files:?}");
        assert!(
            files[0]["path"]
                .as_str()
                .unwrap()
                .ends_with("shakespeare.pack")
        );
        assert_eq!(files[0]["sha256"].as_str().unwrap().len(), 64);
        // It holds the roster of sample counts, not the clients' index lists.
        let partition: Value =
            serde_json::from_str(&fs::read_to_string(packed_run.join("partition.json")).unwrap())
                .unwrap();
        assert_eq!(
            partition["clients_on_demand"]["train"]
                .as_array()
                .unwrap()
                .len(),
            84
        );
    }
}

#[test]
fn packing_never_overwrites_and_damaged_files_are_refused_with_their_name() {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("shakespeare.pack");
    pack(&file);
    let bytes = fs::read(&file).unwrap();
    let experiment = common::experiment("shakespeare-lstm");
    let refused = fails_with(&pack_args(&experiment, &file), 2);
    assert!(refused.contains("never overwrites"), "{refused}");
    assert_eq!(fs::read(&file).unwrap(), bytes, "the file is as it was");

    // A data set without clients of its own has nothing to pack.
    let mnist = common::experiment("mnist-fedavg");
    let other = scratch.path().join("mnist.pack");
    let refused = fails_with(&pack_args(&mnist, &other), 2);
    assert!(
        refused.contains("defines no clients of its own"),
        "{refused}"
    );
    assert!(!other.exists());

    let damaged = |name: &str, bytes: &[u8]| {
        let path = scratch.path().join(name);
        fs::write(&path, bytes).unwrap();
        let data = format!(
            r#"data={{"dataset": "packed", "path": {:?}}}"#,
            path.to_str().unwrap()
        );
        let out = scratch.path().join(format!("run-{name}"));
        let mut sets = SMALL.to_vec();
        sets.push(&data);
        let refused = run_refused(&experiment, &out, &sets);
        assert!(refused.contains(name), "{name}: {refused}");
        refused
    };
    let cut = damaged("cut.pack", &bytes[..bytes.len() - 100]);
    assert!(cut.contains("its index accounts for"), "{cut}");
    let not_packed = damaged("other.pack", b"client,start_s,end_s\n");
    assert!(not_packed.contains("not a packed data set"), "{not_packed}");
    // A label past the vocabulary: the last byte of the file is the last client's last label.
    let mut relabelled = bytes.clone();
    *relabelled.last_mut().unwrap() = 200;
    let label = damaged("label.pack", &relabelled);
    assert!(label.contains("the label 200, of 80 classes"), "{label}");
}
