//! A failing client is a reported event: the run stops cleanly, names the client and round,
//! and keeps the rounds it finished.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{experiment, metrics_without_timing};

/// Far longer than the two short rounds take; a hang would blow through it.
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs the benchmark config for 4 rounds with `fault` injected, under a deadline.
fn run_with_fault(fault: &str) -> (Option<i32>, String, tempfile::TempDir) {
    run_with_fault_in(fault, r#"{"kind": "flat"}"#)
}

/// Four schedulers relaying for 25 clients each (scheduler s hosts clients 25s to 25s + 24).
const HIERARCHY: &str = r#"{"kind": "hierarchical", "schedulers": 4, "mode": "relay"}"#;

/// Runs the benchmark config for 4 rounds on `topology` with `fault` injected, under a
/// deadline.
fn run_with_fault_in(fault: &str, topology: &str) -> (Option<i32>, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .args([
            "run",
            experiment("mnist-t1").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--quiet",
            "--set",
            "federation.rounds=4",
            "--set",
            &format!("faults=[{fault}]"),
            "--set",
            &format!("topology={topology}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            child.kill().unwrap();
            panic!("fedsim did not stop within {DEADLINE:?} after a client failure");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    (status.code(), stderr, dir)
}

#[test]
fn a_panicking_client_stops_the_run_with_a_report_naming_it() {
    let client = sampled_clients(3)[4];
    let fault = format!(r#"{{"round": 3, "client": {client}, "kind": "panic"}}"#);
    let (code, stderr, dir) = run_with_fault(&fault);
    assert_eq!(code, Some(1), "{stderr}");
    let message = stderr.lines().last().unwrap();
    assert!(
        message.starts_with(&format!("error: client {client} failed in round 3")),
        "{stderr}"
    );
    assert!(message.contains("panicked: injected panic"), "{stderr}");
    let finished = metrics_without_timing(&dir.path().join("run"));
    assert_eq!(finished.len(), 2, "rounds before the failure are kept");
}

#[test]
fn a_client_error_stops_the_run_with_a_report_naming_it() {
    let client = sampled_clients(1)[0];
    let fault = format!(r#"{{"round": 1, "client": {client}, "kind": "error"}}"#);
    let (code, stderr, dir) = run_with_fault(&fault);
    assert_eq!(code, Some(1), "{stderr}");
    let expected =
        format!("error: client {client} failed in round 1 (client group 0): injected failure");
    assert_eq!(stderr.lines().last().unwrap(), expected, "{stderr}");
    assert!(metrics_without_timing(&dir.path().join("run")).is_empty());
}

#[test]
fn of_two_failing_clients_the_lower_id_is_reported() {
    let sampled = sampled_clients(2);
    let (low, high) = (sampled[2], sampled[7]);
    // Both fail as soon as they start; which failure reaches the server first depends on
    // scheduling, the report does not.
    let faults = format!(
        r#"{{"round": 2, "client": {high}, "kind": "panic"}}, {{"round": 2, "client": {low}, "kind": "error"}}"#
    );
    let (code, stderr, _dir) = run_with_fault(&faults);
    assert_eq!(code, Some(1), "{stderr}");
    let expected =
        format!("error: client {low} failed in round 2 (client group 0): injected failure");
    assert_eq!(stderr.lines().last().unwrap(), expected, "{stderr}");
}

#[test]
fn an_unsampled_faulty_client_changes_nothing() {
    let sampled = sampled_clients(1);
    let idle = (0..100).find(|c| !sampled.contains(c)).unwrap();
    let fault = format!(r#"{{"round": 1, "client": {idle}, "kind": "panic"}}"#);
    let (code, stderr, dir) = run_with_fault(&fault);
    assert_eq!(code, Some(0), "{stderr}");
    let clean = tempfile::tempdir().unwrap();
    common::run_ok(
        &experiment("mnist-t1"),
        clean.path(),
        &["federation.rounds=4"],
    );
    let faulty = dir.path().join("run");
    assert_eq!(
        metrics_without_timing(&faulty),
        metrics_without_timing(clean.path())
    );
    assert_eq!(
        common::model_bytes(&faulty),
        common::model_bytes(clean.path())
    );
}

#[test]
fn a_panicking_scheduler_is_reported_with_its_place_and_the_tree_shuts_down() {
    let scheduler = sampled_clients(2)[0] / 25;
    let fault = format!(r#"{{"round": 2, "scheduler": {scheduler}, "kind": "panic"}}"#);
    let (code, stderr, dir) = run_with_fault_in(&fault, HIERARCHY);
    assert_eq!(code, Some(1), "{stderr}");
    let expected = format!(
        "error: the scheduler {scheduler} (client connector) stopped unexpectedly: panicked: injected panic"
    );
    assert_eq!(stderr.lines().last().unwrap(), expected, "{stderr}");
    assert_eq!(metrics_without_timing(&dir.path().join("run")).len(), 1);
}

#[test]
fn a_failing_client_under_a_scheduler_is_reported_with_its_path() {
    let client = sampled_clients(2)[3];
    let fault = format!(r#"{{"round": 2, "client": {client}, "kind": "error"}}"#);
    let (code, stderr, _dir) = run_with_fault_in(&fault, HIERARCHY);
    assert_eq!(code, Some(1), "{stderr}");
    let group = client / 25;
    let expected = format!(
        "error: client {client} failed in round 2 (scheduler {group} > client group {group}): injected failure"
    );
    assert_eq!(stderr.lines().last().unwrap(), expected, "{stderr}");
}

/// The clients the benchmark config samples in `round`, read from a clean run's metrics.
fn sampled_clients(round: u32) -> Vec<u64> {
    let dir = tempfile::tempdir().unwrap();
    let rounds = format!("federation.rounds={round}");
    common::run_ok(&experiment("mnist-t1"), dir.path(), &[&rounds]);
    let metrics = metrics_without_timing(dir.path());
    let line: serde_json::Value = serde_json::from_str(&metrics[round as usize - 1]).unwrap();
    line["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect()
}

#[test]
fn a_diverging_client_is_told_what_lengthened_its_steps() {
    let dir = tempfile::tempdir().unwrap();
    let file = experiment("mnist-t1");
    let diverge = |momentum: &str| {
        let out = dir.path().join(format!("momentum-{momentum}"));
        let momentum = format!("client.momentum={momentum}");
        let args = [
            "run",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--quiet",
            "--set",
            "client.lr=100",
            "--set",
            &momentum,
        ];
        let stderr = common::fails_with(&args, 1);
        assert!(stderr.contains("training diverged: loss is"), "{stderr}");
        stderr
    };
    let plain = diverge("0");
    assert!(plain.contains("(try a lower client.lr)"), "{plain}");
    let heavy = diverge("0.9");
    assert!(
        heavy.contains(
            "(client.momentum 0.9 makes each step about 10 times client.lr, 1000 in effect: try a lower client.lr or client.momentum)"
        ),
        "{heavy}"
    );
}
