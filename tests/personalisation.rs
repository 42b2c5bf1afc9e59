//! Personalised FL: each client's own model scored on its own test samples beside the global
//! model (`personal_accuracy` in `metrics.jsonl`), on real data.

mod common;

use std::path::Path;

use common::{
    experiment, fedsim, records, resume_ok, run_killed, run_ok, run_refused, write_sweep_file,
};

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// MNIST over 100 clients of Dirichlet(0.1) labels, each holding a fifth of its samples out.
const SKEWED: &[&str] = &[
    r#"partition={"scheme":"dirichlet","alpha":0.1}"#,
    "eval.client_test_fraction=0.2",
    "federation.rounds=5",
    "eval.every=5",
];

#[test]
fn fine_tuning_fedavgs_model_on_skewed_clients_beats_the_global_model_on_their_own_data() {
    let dir = tempfile::tempdir().unwrap();
    let (fedavg, tuned) = (dir.path().join("fedavg"), dir.path().join("tuned"));
    run_ok(&experiment("mnist-t1"), &fedavg, SKEWED);
    let sets: Vec<&str> = [SKEWED, &[r#"strategy={"name":"fedavg_ft","steps":10}"#]].concat();
    run_ok(&experiment("mnist-t1"), &tuned, &sets);
    let (plain, personal) = (records(&fedavg), records(&tuned));
    let last = |records: &[serde_json::Value]| records.last().unwrap().clone();
    // Training is FedAvg's: the same global model and its scores.
    assert_eq!(
        last(&plain)["test_accuracy"],
        last(&personal)["test_accuracy"]
    );
    assert_eq!(
        last(&plain)["client_accuracy"],
        last(&personal)["client_accuracy"]
    );
    assert!(last(&plain).get("personal_accuracy").is_none());
    // Each client's few local steps fit the model to its own labels.
    let record = last(&personal);
    let (global, tuned) = (
        record["client_accuracy"]["mean"].as_f64().unwrap(),
        record["personal_accuracy"]["mean"].as_f64().unwrap(),
    );
    assert!(tuned > global + 0.2, "{record}");
    let worst = record["personal_accuracy"]["worst_10"].as_f64().unwrap();
    assert!(
        worst > record["client_accuracy"]["worst_10"].as_f64().unwrap(),
        "{record}"
    );
}

#[test]
fn a_personalised_algorithm_without_clients_test_samples_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let (file, out) = (experiment("mnist-t1"), dir.path().join("run"));
    let stderr = run_refused(&file, &out, &["strategy.name=fedavg_ft"]);
    assert!(
        stderr.contains("eval.client_test_fraction: is 0"),
        "{stderr}"
    );
    assert!(stderr.contains("\"fedavg_ft\" is personalised"), "{stderr}");
}

#[test]
fn a_report_gives_the_personal_models_scores_beside_the_global_models() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = write_sweep_file(
        dir.path(),
        &experiment("mnist-t1"),
        r#""variants": [{"name": "fedavg", "set": {}},
                        {"name": "fine-tuned", "set": {"strategy": {"name": "fedavg_ft"}}}]"#,
    );
    let out = dir.path().join("out");
    let mut args = vec!["sweep", path(&sweep), "--out", path(&out), "--quiet"];
    for set in SKEWED {
        args.extend(["--set", set]);
    }
    let swept = fedsim(&args);
    assert!(
        swept.status.success(),
        "{}",
        String::from_utf8_lossy(&swept.stderr)
    );
    let table = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        table.contains("personal accuracy (%): mean, worst 10%"),
        "{table}"
    );
    // FedAvg has no personal models: its cell is empty.
    let fedavg = table.lines().find(|l| l.starts_with("| fedavg |")).unwrap();
    assert!(fedavg.contains("| – |"), "{table}");
    let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .contains("personal_accuracy_worst_10_mean"),
        "{csv}"
    );
    assert!(out.join("plots/personal-accuracy-by-round.svg").is_file());
}

/// The values of the MLP's head (200 × 10 weights and 10 biases) and of the whole MLP.
const HEAD: u64 = 2010;
const MLP: u64 = 199_210;

fn server_bytes(run: &Path) -> (u64, u64, u64) {
    let summary = common::summary(run);
    let server = &summary["traffic"][0];
    assert_eq!(server["tier"], "server");
    let count = |field: &str| server[field].as_u64().unwrap();
    (
        count("bytes_down"),
        count("bytes_up"),
        count("messages_down"),
    )
}

#[test]
fn only_the_shared_layers_travel_and_each_client_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let out = dir.path().join(name);
        let strategy = format!("strategy.name={name}");
        run_ok(
            &experiment("mnist-t1"),
            &out,
            &[SKEWED, &[strategy.as_str()]].concat(),
        );
        out
    };
    let (fedavg, fedper, lg) = (run("fedavg"), run("fedper"), run("lg_fedavg"));
    let fedrep = run("fedrep");
    let (down, up, messages) = server_bytes(&fedavg);
    // FedPer keeps the head: each message is 4 bytes a value lighter; LG-FedAvg keeps the
    // body: each carries the head alone.
    let lighter = |kept: u64| {
        (
            down - messages * 4 * kept,
            up - messages * 4 * kept,
            messages,
        )
    };
    assert_eq!(server_bytes(&fedper), lighter(HEAD));
    assert_eq!(server_bytes(&fedrep), lighter(HEAD));
    assert_eq!(server_bytes(&lg), lighter(MLP - HEAD));
    // A client's own layers, trained on its labels, fit them better than the global model
    // (after five rounds half the clients have trained theirs).
    for run in [&fedper, &fedrep, &lg] {
        let record = records(run).last().unwrap().clone();
        let global = record["client_accuracy"]["mean"].as_f64().unwrap();
        let personal = record["personal_accuracy"]["mean"].as_f64().unwrap();
        assert!(personal > global + 0.1, "{record}");
    }
}

#[test]
fn a_layer_the_model_lacks_or_a_state_memory_too_small_for_one_client_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |sets: &[&str]| {
        let sets = [&["eval.client_test_fraction=0.2"], sets].concat();
        run_refused(&experiment("mnist-t1"), &dir.path().join("run"), &sets)
    };
    let stderr = refused(&[r#"strategy={"name":"fedper","personal":["head","fc9"]}"#]);
    assert!(stderr.contains("strategy.personal[1]"), "{stderr}");
    assert!(
        stderr.contains("no layer \"fc9\"") && stderr.contains("layers.2"),
        "{stderr}"
    );
    let stderr = refused(&[
        "strategy.name=lg_fedavg",
        "federation.client_state_memory_mb=0.5",
    ]);
    assert!(
        stderr.contains("federation.client_state_memory_mb"),
        "{stderr}"
    );
    assert!(stderr.contains("197200 values"), "{stderr}");
}

#[test]
fn a_run_killed_while_spilling_personal_layers_resumes_to_the_bits_of_one_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    // Each client's body is 0.75 MiB: two fit in memory, the rest are spilled.
    let sets: Vec<&str> = [
        SKEWED,
        &[
            "strategy.name=lg_fedavg",
            "federation.client_state_memory_mb=2",
            "checkpoint.every=1",
        ],
    ]
    .concat();
    let reference = dir.path().join("reference");
    run_ok(&experiment("mnist-t1"), &reference, &sets);
    assert!(common::summary(&reference)["client_states"]["spill_writes"].as_u64() > Some(0));
    let out = dir.path().join("killed");
    // Ten clients a round, of which at most two keep their state in memory: the 20th record
    // is written in round 3 or later, after checkpoints that name spilled states.
    run_killed(
        &experiment("mnist-t1"),
        &out,
        &sets,
        "client-states.0.log#20",
    );
    resume_ok(&out);
    assert_eq!(common::model_bytes(&out), common::model_bytes(&reference));
    assert_eq!(
        common::metrics_without_timing(&out),
        common::metrics_without_timing(&reference)
    );
}

#[test]
fn dittos_global_model_is_fedavgs_to_the_bit_and_its_personal_models_fit_their_clients() {
    let dir = tempfile::tempdir().unwrap();
    let (fedavg, ditto) = (dir.path().join("fedavg"), dir.path().join("ditto"));
    run_ok(&experiment("mnist-t1"), &fedavg, SKEWED);
    let sets: Vec<&str> = [SKEWED, &[r#"strategy={"name":"ditto","lambda":0.1}"#]].concat();
    run_ok(&experiment("mnist-t1"), &ditto, &sets);
    // The personal steps draw from a stream of their own: the updates are FedAvg's.
    assert_eq!(common::model_bytes(&ditto), common::model_bytes(&fedavg));
    let record = records(&ditto).last().unwrap().clone();
    let global = record["client_accuracy"]["mean"].as_f64().unwrap();
    let personal = record["personal_accuracy"]["mean"].as_f64().unwrap();
    assert!(personal > global + 0.1, "{record}");
}

#[test]
fn apfl_pfedme_per_fedavg_and_fedalas_personal_models_fit_their_clients_better_than_the_global_model()
 {
    let dir = tempfile::tempdir().unwrap();
    let fedavg = dir.path().join("fedavg");
    run_ok(&experiment("mnist-t1"), &fedavg, SKEWED);
    for strategy in [
        r#"strategy={"name":"apfl","alpha":0.5}"#,
        r#"strategy={"name":"apfl","adaptive":true}"#,
        r#"strategy={"name":"pfedme"}"#,
        r#"strategy={"name":"perfedavg"}"#,
        r#"strategy={"name":"perfedavg","variant":"hessian_free"}"#,
    ] {
        let out = dir.path().join("run");
        let _ = std::fs::remove_dir_all(&out);
        run_ok(
            &experiment("mnist-t1"),
            &out,
            &[SKEWED, &[strategy]].concat(),
        );
        let record = records(&out).last().unwrap().clone();
        let global = record["client_accuracy"]["mean"].as_f64().unwrap();
        let personal = record["personal_accuracy"]["mean"].as_f64().unwrap();
        assert!(personal > global + 0.05, "{strategy}: {record}");
        // APFL's updates are FedAvg's: its global model is FedAvg's to the bit.
        if strategy.contains("apfl") {
            assert_eq!(common::model_bytes(&out), common::model_bytes(&fedavg));
        }
    }
}

#[test]
fn fedbn_keeps_each_clients_batch_norm_layers_statistics_included() {
    let dir = tempfile::tempdir().unwrap();
    let sets = |strategy: &'static str| -> Vec<&'static str> {
        vec![
            r#"model={"name":"cnn","batch_norm":true}"#,
            r#"partition={"scheme":"dirichlet","alpha":0.1}"#,
            "eval.client_test_fraction=0.2",
            "federation.rounds=1",
            "federation.clients_per_round=5",
            strategy,
        ]
    };
    let (fedavg, fedbn) = (dir.path().join("fedavg"), dir.path().join("fedbn"));
    run_ok(
        &experiment("mnist-t1"),
        &fedavg,
        &sets("strategy.name=fedavg"),
    );
    run_ok(
        &experiment("mnist-t1"),
        &fedbn,
        &sets("strategy.name=fedbn"),
    );
    // The two BatchNorm layers (32 and 64 channels, each a scale, a shift, a running mean and
    // a running variance) stay with the clients: each message is 4 bytes a value lighter.
    let kept = 4 * (32 + 64);
    let (down, up, messages) = server_bytes(&fedavg);
    assert_eq!(
        server_bytes(&fedbn),
        (
            down - messages * 4 * kept,
            up - messages * 4 * kept,
            messages
        )
    );
    // The global model's norms keep their initial values: running means 0, variances 1.
    let values: Vec<f32> = common::model_bytes(&fedbn)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let conv1 = 32 * 25 + 32;
    assert_eq!(values[conv1 + 64..conv1 + 96], [0.0; 32]);
    assert_eq!(values[conv1 + 96..conv1 + 128], [1.0; 32]);
    // FedAvg averages them: the running means moved.
    let averaged: Vec<f32> = common::model_bytes(&fedavg)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(averaged[conv1 + 64..conv1 + 96].iter().any(|&m| m != 0.0));
    let record = records(&fedbn).last().unwrap().clone();
    assert!(
        record["personal_accuracy"]["mean"].as_f64().unwrap() > 0.0,
        "{record}"
    );
}
