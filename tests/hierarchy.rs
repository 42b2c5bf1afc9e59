//! The hierarchical federation: schedulers between the server and client groups, the
//! simulated network, and unavailable clients.

mod common;

use std::path::Path;

use common::{experiment, metrics_without_timing, model_bytes, run_ok};
use serde_json::Value;

/// The benchmark config, shortened: three rounds of 10 clients out of 100.
const SHORT: &[&str] = &["federation.rounds=3"];

fn records(run: &Path) -> Vec<Value> {
    metrics_without_timing(run)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn params(run: &Path) -> Vec<f32> {
    model_bytes(run)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Runs the shortened benchmark config with `topology` (a JSON object) and more `--set`s.
fn run_with_topology(out: &Path, topology: &str, sets: &[&str]) {
    let topology = format!("topology={topology}");
    let mut all: Vec<&str> = SHORT.to_vec();
    all.push(&topology);
    all.extend(sets);
    run_ok(&experiment("mnist-t1"), out, &all);
}

#[test]
fn relay_scheduler_matches_flat_topology_bitwise() {
    let dir = tempfile::tempdir().unwrap();
    let (flat, relay) = (dir.path().join("flat"), dir.path().join("relay"));
    run_with_topology(&flat, r#"{"kind":"flat"}"#, &[]);
    run_with_topology(
        &relay,
        r#"{"kind":"hierarchical","schedulers":4,"mode":"relay"}"#,
        &["federation.num_parallels=1"],
    );
    assert_eq!(model_bytes(&relay), model_bytes(&flat));
    for (r, f) in records(&relay).iter().zip(records(&flat)) {
        for field in ["clients", "train_loss", "test_accuracy", "test_loss"] {
            assert_eq!(r[field], f[field], "{field} in round {}", r["round"]);
        }
    }
}

/// Aggregate mode computes `Σ_s (n_s/n) Σ_{k∈s} (n_k/n_s) w_k` where flat computes
/// `Σ_k (n_k/n) w_k`: the same sum, regrouped, in f32, so each parameter moves by a few units in
/// its last place (parameters here are below 1, so about 1e-8), and three rounds of local SGD
/// from the slightly different models carry that on (3.7e-8 at most, measured). 1e-6 leaves
/// room for other seeds and machines, yet stays far below the differences between client
/// models after local training, which any wrong weighting would let through.
const REGROUPING_TOLERANCE: f32 = 1e-6;

#[test]
fn aggregate_scheduler_matches_flat_within_float_rounding() {
    let dir = tempfile::tempdir().unwrap();
    let (flat, aggregate) = (dir.path().join("flat"), dir.path().join("aggregate"));
    run_with_topology(&flat, r#"{"kind":"flat"}"#, &[]);
    run_with_topology(
        &aggregate,
        r#"{"kind":"hierarchical","schedulers":4,"mode":"aggregate"}"#,
        &[],
    );
    let (a, f) = (params(&aggregate), params(&flat));
    let worst = a
        .iter()
        .zip(&f)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(worst <= REGROUPING_TOLERANCE, "largest difference {worst}");
    assert_ne!(
        model_bytes(&aggregate),
        model_bytes(&flat),
        "regrouping should show"
    );
    for (r, f) in records(&aggregate).iter().zip(records(&flat)) {
        let (ra, fa) = (
            r["test_accuracy"].as_f64().unwrap(),
            f["test_accuracy"].as_f64().unwrap(),
        );
        assert!(
            (ra - fa).abs() <= 0.002,
            "round {}: {ra} vs {fa}",
            r["round"]
        );
    }
}

/// Wire size of a model message, as `ARCHITECTURE.md` tabulates it.
const MLP_PARAMS: u64 = 199_210;

#[test]
fn traffic_counts_match_the_message_arithmetic() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, aggregate) = (dir.path().join("relay"), dir.path().join("aggregate"));
    run_with_topology(
        &relay,
        r#"{"kind":"hierarchical","schedulers":4,"mode":"relay"}"#,
        &[],
    );
    run_with_topology(
        &aggregate,
        r#"{"kind":"hierarchical","schedulers":4,"mode":"aggregate","edge_rounds":2}"#,
        &[],
    );
    for (relay, aggregate) in records(&relay).iter().zip(records(&aggregate)) {
        let sampled: Vec<u64> = relay["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        // Contiguous default assignment: clients 0-24 under scheduler 0, 25-49 under 1, …
        let per_scheduler: Vec<u64> = (0..4)
            .map(|s| sampled.iter().filter(|&&c| c / 25 == s).count() as u64)
            .collect();
        let busy = per_scheduler.iter().filter(|&&k| k > 0).count() as u64;
        let k = sampled.len() as u64;
        let server_down: u64 = per_scheduler
            .iter()
            .filter(|&&n| n > 0)
            .map(|n| 16 + 8 + 4 * n + 4 * MLP_PARAMS)
            .sum();
        let client_downlink = 16 + 8 + 4 + 4 * MLP_PARAMS;
        let client_uplink = 16 + 16 + 4 + 4 * MLP_PARAMS;

        let [server, edge] = tiers(relay);
        assert_eq!(
            (
                server["messages_down"].as_u64(),
                server["bytes_down"].as_u64()
            ),
            (Some(busy), Some(server_down))
        );
        assert_eq!(
            server["messages_up"].as_u64(),
            Some(k),
            "relay forwards every update"
        );
        assert_eq!(server["bytes_up"].as_u64(), Some(k * client_uplink));
        assert_eq!(edge["bytes_down"].as_u64(), Some(k * client_downlink));
        assert_eq!(edge["bytes_up"].as_u64(), Some(k * client_uplink));

        let [server, edge] = tiers(&aggregate);
        let partials: u64 = per_scheduler
            .iter()
            .filter(|&&n| n > 0)
            .map(|n| 16 + 16 + 4 * n + 4 * MLP_PARAMS)
            .sum();
        assert_eq!(
            server["messages_up"].as_u64(),
            Some(busy),
            "one partial per scheduler"
        );
        assert_eq!(server["bytes_up"].as_u64(), Some(partials));
        assert_eq!(server["bytes_down"].as_u64(), Some(server_down));
        // Two edge rounds: every sampled client downloads and uploads twice.
        assert_eq!(edge["messages_down"].as_u64(), Some(2 * k));
        assert_eq!(edge["bytes_up"].as_u64(), Some(2 * k * client_uplink));
    }
}

fn tiers(record: &Value) -> [&Value; 2] {
    let traffic = record["traffic"].as_array().unwrap();
    assert_eq!(traffic[0]["tier"], "server");
    assert_eq!(traffic[1]["tier"], "scheduler");
    [&traffic[0], &traffic[1]]
}

#[test]
fn simulated_round_time_is_the_slowest_path() {
    let dir = tempfile::tempdir().unwrap();
    // Flat; every link 10 ms and 8 Mbit/s each way, except clients 0-49 at 100 ms; 600
    // samples at 1000 samples/s each.
    let slow: Vec<u64> = (0..50).collect();
    let network = serde_json::json!({
        "client_link": {"latency_ms": 10, "bandwidth_mbps": 8},
        "client_overrides": [{"clients": slow, "latency_ms": 100, "bandwidth_mbps": 8}],
        "compute": {"kind": "fixed", "samples_per_second": 1000}
    });
    let network = format!("network={network}");
    run_with_topology(dir.path(), r#"{"kind":"flat"}"#, &[&network]);
    let path = |latency: f64| {
        let down = latency + (16 + 8 + 4 + 4 * MLP_PARAMS) as f64 * 8.0 / 8e6;
        let up = latency + (16 + 16 + 4 + 4 * MLP_PARAMS) as f64 * 8.0 / 8e6;
        down + 0.6 + up
    };
    let mut elapsed = 0.0;
    let mut rounds_with_a_slow_client = 0;
    for record in records(dir.path()) {
        let sampled = record["clients"].as_array().unwrap();
        let any_slow = sampled.iter().any(|c| c.as_u64().unwrap() < 50);
        rounds_with_a_slow_client += usize::from(any_slow);
        let expected = path(if any_slow { 0.100 } else { 0.010 });
        let round = record["sim_round_s"].as_f64().unwrap();
        assert!((round - expected).abs() < 1e-9, "{round} vs {expected}");
        elapsed += expected;
        let total = record["sim_time_s"].as_f64().unwrap();
        assert!((total - elapsed).abs() < 1e-9, "{total} vs {elapsed}");
    }
    assert!(rounds_with_a_slow_client > 0, "no slow client was sampled");
}

#[test]
fn hierarchical_runs_do_not_depend_on_the_worker_count() {
    let dir = tempfile::tempdir().unwrap();
    let topology = r#"{"kind":"hierarchical","schedulers":3,"mode":"aggregate","edge_rounds":2}"#;
    let runs: Vec<_> = [1, 2]
        .iter()
        .map(|parallels| {
            let out = dir.path().join(format!("p{parallels}"));
            let parallels = format!("federation.num_parallels={parallels}");
            run_with_topology(&out, topology, &[&parallels, "availability.dropout=0.2"]);
            out
        })
        .collect();
    assert_eq!(
        metrics_without_timing(&runs[0]),
        metrics_without_timing(&runs[1])
    );
    assert_eq!(model_bytes(&runs[0]), model_bytes(&runs[1]));
}

#[test]
fn stragglers_experiment_drops_the_same_clients_on_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<_> = [1, 2]
        .iter()
        .map(|parallels| {
            let out = dir.path().join(format!("p{parallels}"));
            let parallels = format!("federation.num_parallels={parallels}");
            run_ok(
                &experiment("stragglers"),
                &out,
                &["federation.rounds=4", &parallels],
            );
            out
        })
        .collect();
    assert_eq!(
        metrics_without_timing(&runs[0]),
        metrics_without_timing(&runs[1])
    );
    let dropped: Vec<Value> = records(&runs[0])
        .iter()
        .flat_map(|r| r["dropped"].as_array().unwrap().clone())
        .collect();
    let count = |reason: &str| dropped.iter().filter(|d| d["reason"] == reason).count();
    assert!(count("deadline") > 0 && count("dropout") > 0, "{dropped:?}");
    // Clients 0-9 sit behind 2 Mbit/s links: 0.8 MB takes over 3 s each way, past the 1.5 s
    // deadline, so whenever one is sampled and available it misses the round.
    for record in records(&runs[0]) {
        let missed: Vec<u64> = record["dropped"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["reason"] == "deadline")
            .map(|d| d["client"].as_u64().unwrap())
            .collect();
        let slow_and_present: Vec<u64> = record["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .filter(|&c| c < 10)
            .filter(|c| {
                !record["dropped"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|d| d["client"] == *c && d["reason"] == "dropout")
            })
            .collect();
        for client in slow_and_present {
            assert!(
                missed.contains(&client),
                "client {client} should miss the deadline"
            );
        }
        if !missed.is_empty() {
            let round = record["sim_round_s"].as_f64().unwrap();
            assert!(
                (round - 1.5).abs() < 1e-9,
                "the server waits until the deadline: {round}"
            );
        }
    }
}

#[test]
fn hierarchical_experiments_run_as_shipped() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["hierarchical-relay", "hierarchical-aggregate"] {
        let out = dir.path().join(name);
        run_ok(&experiment(name), &out, &["federation.rounds=2"]);
        let records = records(&out);
        assert_eq!(records.len(), 2);
        assert!(records[1]["sim_time_s"].as_f64().unwrap() > 0.0);
        let accuracy = |r: &Value| r["test_accuracy"].as_f64().unwrap();
        assert!(
            accuracy(&records[0]) > 0.2,
            "{name} learns in its first round"
        );
        assert!(
            accuracy(&records[1]) > accuracy(&records[0]),
            "{name} improves"
        );
    }
}
