//! What the algorithms do beyond the promises the conformance kit checks for every one of them
//! (`tests/conformance.rs`): their extra traffic and state, which schedulers may pre-combine
//! them, how each treats client momentum, and the simulation features that come with them
//! (Byzantine clients, per-client evaluation, heterogeneous local work).

mod common;

use std::path::{Path, PathBuf};

use common::{experiment, fedsim, metrics_without_timing, model_bytes, run_ok, summary};
use serde_json::Value;

/// A small federation on the drift experiment's non-IID split: 20 clients, 5 a round, 3
/// rounds of one local epoch.
const SMALL: &[&str] = &[
    "federation.num_clients=20",
    "federation.clients_per_round=5",
    "federation.rounds=3",
    "federation.num_parallels=2",
    "client.epochs=1",
    r#"client.work={"kind":"fixed"}"#,
];

fn drift() -> PathBuf {
    experiment("strategies/drift")
}

/// Runs the small drift experiment with `sets` in `dir/name`.
fn small_run(dir: &Path, name: &str, sets: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let all: Vec<&str> = SMALL.iter().chain(sets).copied().collect();
    run_ok(&drift(), &out, &all);
    out
}

fn strategy(json: &str) -> String {
    format!("strategy={json}")
}

#[test]
fn scaffolds_later_rounds_differ_from_fedavgs() {
    // Its first round is FedAvg's (a reduction the conformance kit checks); from the second,
    // the control variates correct the clients' steps.
    let dir = tempfile::tempdir().unwrap();
    let fedavg = small_run(dir.path(), "fedavg", &[]);
    let scaffold = small_run(
        dir.path(),
        "scaffold",
        &[&strategy(r#"{"name":"scaffold"}"#)],
    );
    assert_ne!(model_bytes(&scaffold), model_bytes(&fedavg));
}

/// The names `fedsim strategies` lists.
fn fedsim_strategies() -> Vec<String> {
    let output = fedsim(&["strategies"]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with(' ') && !l.contains(' '))
        .map(str::to_string)
        .collect()
}

#[test]
fn fedsim_strategies_lists_the_registry_in_registration_order() {
    // The listing is the registry's, so a new built-in needs no edit here; the thirteen the
    // README names come first, in its order.
    let registered: Vec<String> = fedsim::registry::Registry::builtin()
        .algorithms()
        .into_iter()
        .map(|info| info.name.to_string())
        .collect();
    assert_eq!(fedsim_strategies(), registered);
    assert_eq!(
        registered[..13],
        [
            "fedavg",
            "fedavgm",
            "fedadagrad",
            "fedadam",
            "fedyogi",
            "fedprox",
            "scaffold",
            "fednova",
            "feddyn",
            "qffl",
            "median",
            "trimmed_mean",
            "krum"
        ]
    );
}

#[test]
fn scaffold_doubles_the_traffic_and_keeps_one_control_variate_per_client() {
    let dir = tempfile::tempdir().unwrap();
    let fedavg = small_run(dir.path(), "fedavg", &[]);
    let scaffold = small_run(
        dir.path(),
        "scaffold",
        &[&strategy(r#"{"name":"scaffold"}"#)],
    );
    let bytes = |run: &Path, way: &str| summary(run)["traffic"][0][way].as_u64().unwrap();
    let params = summary(&fedavg)["num_params"].as_u64().unwrap();
    // Each of the 15 downlinks and uplinks carries one more tensor of every parameter (plus
    // four bytes naming it).
    for way in ["bytes_down", "bytes_up"] {
        assert_eq!(
            bytes(&scaffold, way) - bytes(&fedavg, way),
            15 * (4 + 4 * params)
        );
    }
    // Every client that took part keeps a control variate the size of the model.
    let took_part: std::collections::BTreeSet<u64> = metrics_without_timing(&scaffold)
        .iter()
        .flat_map(|l| {
            let record: Value = serde_json::from_str(l).unwrap();
            record["clients"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_u64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let state = summary(&scaffold)["client_state_bytes"].as_u64().unwrap();
    assert_eq!(state, took_part.len() as u64 * 4 * params);
    assert_eq!(summary(&fedavg)["client_state_bytes"], 0);
    // q-FFL's clients send their loss beside the model: one tensor of one value each.
    let qffl = small_run(dir.path(), "qffl", &[&strategy(r#"{"name":"qffl"}"#)]);
    assert_eq!(
        bytes(&qffl, "bytes_up") - bytes(&fedavg, "bytes_up"),
        15 * (4 + 4)
    );
}

#[test]
fn aggregating_schedulers_pre_combine_only_what_the_strategy_allows() {
    let dir = tempfile::tempdir().unwrap();
    let aggregate = |edge_rounds: u32| {
        format!(
            r#"topology={{"kind":"hierarchical","schedulers":2,"mode":"aggregate","edge_rounds":{edge_rounds}}}"#
        )
    };
    // SCAFFOLD's control variate changes add up across a group: with one edge round the tree
    // gives flat's model up to f32 rounding.
    let scaffold = strategy(r#"{"name":"scaffold"}"#);
    let flat = small_run(dir.path(), "flat", &[&scaffold]);
    let tree = small_run(dir.path(), "tree", &[&scaffold, &aggregate(1)]);
    let floats = |run: &Path| -> Vec<f32> {
        model_bytes(run)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let largest = floats(&flat)
        .iter()
        .zip(floats(&tree))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(largest < 1e-5, "largest difference {largest}");
    let drift_file = drift();
    let refused = |sets: &[&str], field: &str| {
        let mut args = vec!["run", drift_file.to_str().unwrap()];
        for set in SMALL.iter().chain(sets) {
            args.extend(["--set", set]);
        }
        let output = fedsim(&args);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(field), "{stderr}");
        stderr
    };
    let krum = strategy(r#"{"name":"krum","byzantine":1}"#);
    let stderr = refused(&[&krum, &aggregate(1)], "strategy.name");
    assert!(stderr.contains("relay"), "{stderr}");
    refused(&[&scaffold, &aggregate(2)], "topology.edge_rounds");
    refused(&[&strategy(r#"{"name":"fedadam","beta3":0.5}"#)], "beta3");
    refused(
        &[&strategy(r#"{"name":"krum","byzantine":2}"#)],
        "strategy.byzantine",
    );
}

#[test]
fn byzantine_clients_are_drawn_from_the_seed_recorded_and_attack() {
    let dir = tempfile::tempdir().unwrap();
    let attack = r#"byzantine={"fraction":0.2,"attack":{"kind":"sign_flip","scale":4}}"#;
    let honest = small_run(dir.path(), "honest", &[]);
    let attacked = small_run(dir.path(), "attacked", &[attack]);
    let again = small_run(dir.path(), "again", &[attack]);
    let attackers = summary(&attacked)["attackers"].clone();
    assert_eq!(attackers.as_array().unwrap().len(), 4, "{attackers}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(attacked.join("attackers.json")).unwrap())
            .unwrap();
    assert_eq!(written, attackers);
    assert_ne!(model_bytes(&attacked), model_bytes(&honest));
    assert_eq!(model_bytes(&attacked), model_bytes(&again));
    assert!(!honest.join("attackers.json").exists());
    let flipped = small_run(
        dir.path(),
        "label-flip",
        &[r#"byzantine={"clients":[0,1,2,3],"attack":{"kind":"label_flip"}}"#],
    );
    assert_eq!(
        summary(&flipped)["attackers"],
        serde_json::json!([0, 1, 2, 3])
    );
    assert_ne!(model_bytes(&flipped), model_bytes(&honest));
}

#[test]
fn held_out_client_samples_give_the_spread_of_client_accuracy() {
    let dir = tempfile::tempdir().unwrap();
    let run = small_run(dir.path(), "clients", &["eval.client_test_fraction=0.2"]);
    for line in metrics_without_timing(&run) {
        let record: Value = serde_json::from_str(&line).unwrap();
        let spread = &record["client_accuracy"];
        let get = |field: &str| spread[field].as_f64().unwrap();
        assert!(
            get("worst_10") <= get("mean") && get("mean") <= get("best_10"),
            "{spread}"
        );
        assert!(get("std") > 0.0, "{spread}");
    }
    let plain = small_run(dir.path(), "plain", &[]);
    assert!(!metrics_without_timing(&plain)[0].contains("client_accuracy"));
}

#[test]
fn uneven_local_work_separates_fednova_from_fedavg() {
    let dir = tempfile::tempdir().unwrap();
    let uneven = r#"client.work={"kind":"uniform","min_epochs":1,"max_epochs":3}"#;
    let fedavg = small_run(dir.path(), "fedavg", &[uneven]);
    let fednova = small_run(
        dir.path(),
        "fednova",
        &[uneven, &strategy(r#"{"name":"fednova"}"#)],
    );
    assert_ne!(model_bytes(&fednova), model_bytes(&fedavg));
    let taus: Vec<f64> = metrics_without_timing(&fednova)
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["strategy"]["tau_eff"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert!(taus.iter().any(|t| t.fract() != 0.0), "{taus:?}");
    // Uneven work also sets the simulated compute time: a fixed speed makes it visible.
    let speed = r#"network={"compute":{"kind":"fixed","samples_per_second":1000}}"#;
    let timed = small_run(dir.path(), "timed", &[uneven, speed]);
    let fixed = small_run(dir.path(), "fixed", &[speed]);
    let time = |run: &Path| summary(run)["sim_time_s"].as_f64().unwrap();
    assert!(
        time(&timed) > time(&fixed),
        "{} vs {}",
        time(&timed),
        time(&fixed)
    );
}

#[test]
fn the_shipped_strategy_experiments_run() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["drift", "attack", "fairness"] {
        let out = dir.path().join(name);
        run_ok(
            &experiment(&format!("strategies/{name}")),
            &out,
            &["federation.rounds=2", "eval.every=1"],
        );
        assert_eq!(metrics_without_timing(&out).len(), 2, "{name}");
    }
}

/// The NIID-Bench setting (`experiments/strategies/niid-bench.json`: 10 clients, all in every
/// round, batch 64, SGD with lr 0.01 and momentum 0.9) cut to `rounds` rounds of `epochs`
/// local epochs, with `sets`.
fn niid_bench_run(dir: &Path, name: &str, (rounds, epochs): (u32, u32), sets: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let (rounds, epochs) = (
        format!("federation.rounds={rounds}"),
        format!("client.epochs={epochs}"),
    );
    let all: Vec<&str> = [rounds.as_str(), epochs.as_str()]
        .into_iter()
        .chain(sets.iter().copied())
        .collect();
    run_ok(&experiment("strategies/niid-bench"), &out, &all);
    out
}

/// Trains `algorithm` with client momentum 0.9 on two labels per client for five rounds of one
/// epoch (SCAFFOLD with its correction inside the momentum buffer diverged in round 5 here),
/// and checks that every round's losses are finite.
fn trains_with_momentum_on_a_skewed_split(algorithm: &str) {
    let dir = tempfile::tempdir().unwrap();
    let set = strategy(algorithm);
    let skewed = r#"partition={"scheme":"labels","labels_per_client":2}"#;
    let run = niid_bench_run(dir.path(), "run", (5, 1), &[&set, skewed]);
    let records = metrics_without_timing(&run);
    assert_eq!(records.len(), 5, "{algorithm}");
    for line in records {
        let record: Value = serde_json::from_str(&line).unwrap();
        for field in ["train_loss", "test_loss", "test_accuracy"] {
            let value = record[field].as_f64();
            assert!(value.is_some_and(f64::is_finite), "{algorithm}: {line}");
        }
    }
}

#[test]
fn fedprox_trains_with_momentum_on_a_skewed_split() {
    trains_with_momentum_on_a_skewed_split(r#"{"name":"fedprox","mu":0.01}"#);
}

#[test]
fn scaffold_trains_with_momentum_on_a_skewed_split() {
    trains_with_momentum_on_a_skewed_split(r#"{"name":"scaffold"}"#);
}

#[test]
fn feddyn_trains_with_momentum_on_a_skewed_split() {
    trains_with_momentum_on_a_skewed_split(r#"{"name":"feddyn"}"#);
}

#[test]
fn fednova_trains_with_momentum_on_a_skewed_split() {
    trains_with_momentum_on_a_skewed_split(r#"{"name":"fednova"}"#);
}

#[test]
fn qffl_trains_with_momentum_on_a_skewed_split() {
    trains_with_momentum_on_a_skewed_split(r#"{"name":"qffl"}"#);
}

#[test]
fn scaffold_with_momentum_is_at_least_as_accurate_as_fedavg_under_dirichlet_half() {
    let dir = tempfile::tempdir().unwrap();
    let accuracy = |name: &str| {
        let set = strategy(&format!(r#"{{"name":"{name}"}}"#));
        let run = niid_bench_run(dir.path(), name, (5, 2), &[&set]);
        summary(&run)["final_accuracy"].as_f64().unwrap()
    };
    let (fedavg, scaffold) = (accuracy("fedavg"), accuracy("scaffold"));
    assert!(scaffold >= fedavg, "SCAFFOLD {scaffold}, FedAvg {fedavg}");
}
