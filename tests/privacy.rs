//! Private runs end to end on the embedded MNIST: the epsilon each round spent in the records
//! and the total in the summary, as the accountant computes them; Poisson rounds of varying
//! size and fixed ones of exactly `clients_per_round`; the noise the same on every thread
//! count and after a kill and a resume; each branch of the `privacy` section running.

use std::path::Path;

use fedsim::config::PrivacyConfig;
use serde_json::Value;

mod common;
use common::{experiment, records, resume_ok, run_killed, run_ok};

/// The privacy section of the cases below, with `fields` (JSON) over the defaults.
fn privacy(fields: &str) -> String {
    let mut section: Value = serde_json::json!({
        "noise_multiplier": 1.0,
        "clip": {"kind": "fixed", "norm": 1.0},
        "delta": 1e-5,
    });
    let changes: Value = serde_json::from_str(fields).unwrap();
    for (field, value) in changes.as_object().unwrap() {
        section[field] = value.clone();
    }
    format!("privacy={section}")
}

/// A private run of `rounds` rounds into `out`, with `privacy` and further `sets`.
fn private_run(out: &Path, privacy: &str, rounds: u32, sets: &[&str]) -> Vec<Value> {
    let rounds = format!("federation.rounds={rounds}");
    let mut all = vec![privacy, rounds.as_str(), "eval.every=4"];
    all.extend(sets);
    run_ok(&experiment("mnist-t1"), out, &all);
    records(out)
}

#[test]
fn each_round_records_the_epsilon_the_accountant_gives_and_the_summary_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let section = privacy("{}");
    let records = private_run(&dir.path().join("run"), &section, 4, &[]);
    let config: PrivacyConfig =
        serde_json::from_str(section.strip_prefix("privacy=").unwrap()).unwrap();
    let accounting = config.accounting(100, 10);
    for (round, record) in (1..).zip(&records) {
        let spent = record["strategy"]["epsilon"].as_f64().unwrap();
        assert_eq!(spent, accounting.epsilon_after(round).epsilon, "{record}");
        assert_eq!(record["strategy"]["dp_clip"].as_f64(), Some(1.0));
    }
    let summary = common::summary(&dir.path().join("run"));
    assert_eq!(
        summary["privacy"]["epsilon"].as_f64(),
        Some(accounting.epsilon_after(4).epsilon)
    );
    assert_eq!(summary["privacy"]["delta"].as_f64(), Some(1e-5));
    // Poisson sampling: each client in with probability 0.1, so the rounds differ in size.
    let sizes: Vec<usize> = records
        .iter()
        .map(|r| r["clients"].as_array().unwrap().len())
        .collect();
    assert!(sizes.iter().any(|&size| size != sizes[0]), "{sizes:?}");
}

#[test]
fn fixed_size_sampling_takes_clients_per_round_and_spends_more() {
    let dir = tempfile::tempdir().unwrap();
    let poisson = private_run(&dir.path().join("poisson"), &privacy("{}"), 2, &[]);
    let fixed = private_run(
        &dir.path().join("fixed"),
        &privacy(r#"{"sampling": "fixed"}"#),
        2,
        &[],
    );
    for record in &fixed {
        assert_eq!(record["clients"].as_array().unwrap().len(), 10);
    }
    let epsilon = |records: &[Value]| records[1]["strategy"]["epsilon"].as_f64().unwrap();
    assert!(epsilon(&fixed) > epsilon(&poisson));
}

#[test]
fn private_noise_does_not_depend_on_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let section = privacy(r#"{"clip": {"kind": "adaptive", "count_std": 2}}"#);
    let one = dir.path().join("one");
    let four = dir.path().join("four");
    private_run(&one, &section, 3, &["federation.num_parallels=1"]);
    private_run(&four, &section, 3, &["federation.num_parallels=4"]);
    assert_eq!(common::model_bytes(&one), common::model_bytes(&four));
    assert_eq!(
        common::metrics_without_timing(&one),
        common::metrics_without_timing(&four)
    );
}

#[test]
fn a_private_run_killed_and_resumed_draws_the_same_noise_to_the_bit() {
    let dir = tempfile::tempdir().unwrap();
    let section = privacy(r#"{"clip": {"kind": "adaptive", "initial": 0.5, "count_std": 2}}"#);
    let sets = [
        section.as_str(),
        "federation.rounds=4",
        "checkpoint.every=1",
    ];
    let reference = dir.path().join("reference");
    run_ok(&experiment("mnist-t1"), &reference, &sets);
    let killed = dir.path().join("killed");
    run_killed(&experiment("mnist-t1"), &killed, &sets, "checkpoint.fedsim");
    resume_ok(&killed);
    assert_eq!(
        common::model_bytes(&killed),
        common::model_bytes(&reference)
    );
    assert_eq!(
        common::metrics_without_timing(&killed),
        common::metrics_without_timing(&reference)
    );
    // The clip adapted: round 4 was sent another clip than round 1.
    let clips: Vec<f64> = records(&reference)
        .iter()
        .map(|r| r["strategy"]["dp_clip"].as_f64().unwrap())
        .collect();
    assert_ne!(clips[0], clips[3], "{clips:?}");
}

#[test]
fn local_noise_per_layer_clipping_and_server_momentum_run_and_learn_something() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (r#"{"noise": "local", "noise_multiplier": 0.01}"#, "fedavg"),
        (r#"{"per_layer": true, "noise_multiplier": 0.3}"#, "fedavg"),
        (r#"{"noise_multiplier": 0.3}"#, "fedavgm"),
    ];
    for (i, (fields, strategy)) in cases.into_iter().enumerate() {
        let name = format!("strategy.name={strategy}");
        let out = dir.path().join(i.to_string());
        let records = private_run(&out, &privacy(fields), 4, &[&name, "client.lr=0.1"]);
        let last = records.last().unwrap();
        let accuracy = last["test_accuracy"].as_f64().unwrap();
        assert!(accuracy > 0.5, "{fields} with {strategy}: {last}");
        assert!(last["strategy"]["epsilon"].as_f64().unwrap() > 0.0);
    }
}
