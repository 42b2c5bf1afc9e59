//! Personalised FL: each client's own model scored on its own test samples beside the global
//! model (`personal_accuracy` in `metrics.jsonl`), on real data.

mod common;

use std::path::Path;

use common::{experiment, fails_with, fedsim, records, run_ok, write_sweep_file};

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
    let stderr = fails_with(
        &[
            "run",
            path(&experiment("mnist-t1")),
            "--out",
            path(&dir.path().join("run")),
            "--set",
            "strategy.name=fedavg_ft",
        ],
        2,
    );
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
