//! Clients' states past the memory budget (`federation.client_state_memory_mb`) go to the run
//! folder's spill file and come back to the bit: a run that spills ends as one that keeps every
//! state in memory, a run killed while spilling resumes to the bits of one never stopped, and a
//! damaged spill file stops the resume with its name.

mod common;

use std::fs;
use std::path::Path;

use common::{
    experiment, fails_with, metrics_without_timing, model_bytes, resume_ok, run_killed, run_ok,
    run_refused, summary,
};

/// SCAFFOLD on the breast-cancer table: every client keeps a control variate of the logistic
/// model's 62 values (248 bytes), and a checkpoint follows every round.
const SCAFFOLD: &[&str] = &[
    "strategy.name=scaffold",
    "federation.rounds=6",
    "eval.every=2",
    "checkpoint.every=1",
];

/// Room for two of those states in memory: the other clients' are spilled.
const TWO_STATES: &str = "federation.client_state_memory_mb=0.0005";

fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    SCAFFOLD
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The results two runs must share: every round's record, the final model and the bytes of
/// the clients' states (where they were kept, and how long that took, may differ).
fn assert_same_results(run: &Path, reference: &Path) {
    assert_eq!(
        metrics_without_timing(run),
        metrics_without_timing(reference)
    );
    assert_eq!(model_bytes(run), model_bytes(reference));
    let bytes = |run: &Path| summary(run)["client_state_bytes"].as_u64().unwrap();
    assert_eq!(bytes(run), bytes(reference));
}

#[test]
fn a_run_that_spills_its_clients_states_ends_with_the_bits_of_one_that_keeps_them_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (kept, spilled) = (dir.path().join("kept"), dir.path().join("spilled"));
    run_ok(&experiment("breast-cancer"), &kept, &with(&[]));
    run_ok(&experiment("breast-cancer"), &spilled, &with(&[TWO_STATES]));
    assert_same_results(&spilled, &kept);

    assert!(summary(&kept).get("client_states").is_none());
    let usage = &summary(&spilled)["client_states"];
    assert_eq!(usage["clients"], 10, "{usage}");
    assert!(usage["memory_bytes"].as_u64().unwrap() <= 524, "{usage}");
    assert_eq!(
        usage["memory_bytes"].as_u64().unwrap() + usage["spilled_bytes"].as_u64().unwrap(),
        10 * 248,
        "{usage}"
    );
    assert!(usage["spill_writes"].as_u64().unwrap() > 0, "{usage}");
    assert!(spilled.join("client-states.0.log").is_file());
}

#[test]
fn a_run_killed_while_spilling_resumes_to_the_bits_of_one_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference");
    run_ok(&experiment("breast-cancer"), &reference, &with(&[]));
    // Five clients a round, of which at most two keep their state in memory: the 12th record
    // is written in round 3 or later, after checkpoints that name spilled states.
    for nth in [12, 1] {
        let out = dir.path().join(format!("killed-{nth}"));
        killed_at_spill(&out, nth);
        resume_ok(&out);
        assert_same_results(&out, &reference);
    }
}

/// The spilling run in `out`, killed as it writes the `nth` record of its spill file.
fn killed_at_spill(out: &Path, nth: u32) {
    let crash = format!("client-states.0.log#{nth}");
    run_killed(
        &experiment("breast-cancer"),
        out,
        &with(&[TWO_STATES]),
        &crash,
    );
}

#[test]
fn a_damaged_or_cut_spill_file_stops_the_resume_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    for damage in ["damaged", "cut"] {
        let out = dir.path().join(damage);
        killed_at_spill(&out, 12);
        let spill = out.join("client-states.0.log");
        let bytes = fs::read(&spill).unwrap();
        let damaged: Vec<u8> = match damage {
            "damaged" => bytes.iter().map(|b| b ^ 0x5a).collect(),
            _ => bytes[..10].to_vec(),
        };
        fs::write(&spill, damaged).unwrap();
        let stderr = fails_with(&["run", "--resume", path(&out), "--quiet"], 2);
        assert!(stderr.contains("client-states.0.log"), "{stderr}");
        let expected = match damage {
            "damaged" => "is damaged",
            _ => "it holds 10 bytes, but the checkpoint names",
        };
        assert!(stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn a_memory_budget_that_is_not_a_positive_number_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (file, out) = (experiment("breast-cancer"), dir.path().join("run"));
    let stderr = run_refused(&file, &out, &["federation.client_state_memory_mb=0"]);
    assert!(
        stderr.contains("federation.client_state_memory_mb"),
        "{stderr}"
    );
}
