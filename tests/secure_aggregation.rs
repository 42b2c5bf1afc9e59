//! Securely aggregated runs end to end on the embedded MNIST: the server's mean from the
//! masked sum is FedAvg's to the ring's resolution; the links count the protocol's every extra
//! message and byte and the clock its round trips; dropped clients' masks are recovered, and
//! a round with fewer survivors than the threshold ends without a model, on the record; runs
//! are the same on every thread count and after a kill and a resume; bad sections are refused.

use std::path::Path;

use fedsim::network::message::HEADER_BYTES;
use fedsim::secure::Exchange;
use serde_json::Value;

mod common;
use common::{experiment, records, resume_ok, run_killed, run_ok, run_refused};

/// Clients a round of the cases below samples (all of them train: no dropouts unless asked).
const PER_ROUND: u64 = 10;

/// `sets` over the small MNIST experiment, `rounds` rounds, into `out`.
fn run(out: &Path, rounds: u32, sets: &[&str]) -> Vec<Value> {
    let rounds = format!("federation.rounds={rounds}");
    let mut all = vec![rounds.as_str(), "eval.every=1"];
    all.extend(sets);
    run_ok(&experiment("mnist-t1"), out, &all);
    records(out)
}

const SECURE: &str = r#"secure_aggregation={"threshold": 7}"#;

fn model(out: &Path) -> Vec<f32> {
    common::model_bytes(out)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn number(record: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(record, |value, field| &value[field])
        .as_f64()
        .unwrap_or_else(|| panic!("{path:?} in {record}"))
}

#[test]
fn the_mean_read_from_the_masked_sum_is_fedavgs_to_the_rings_resolution() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, secure) = (dir.path().join("plain"), dir.path().join("secure"));
    run(&plain, 1, &[]);
    let records = run(&secure, 1, &[SECURE]);
    assert_eq!(records[0]["strategy"]["secagg_aborted"].as_f64(), Some(0.0));
    let (plain, secure) = (model(&plain), model(&secure));
    let largest = plain
        .iter()
        .zip(&secure)
        .map(|(p, s)| (p - s).abs())
        .fold(0.0f32, f32::max);
    // Ten changes quantised at 1 / ⌊(2^31 − 1) / 10⌋ each, then rounded to f32.
    assert!(largest < 1e-6, "the models differ by up to {largest}");
    assert_ne!(
        plain, secure,
        "quantising moved nothing: was the sum read in the ring?"
    );
}

#[test]
fn the_links_count_each_message_of_the_protocol_and_the_clock_its_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let link = r#"network.client_link={"latency_ms": 50}"#;
    let plain = run(&dir.path().join("plain"), 2, &[link]);
    let secure = run(&dir.path().join("secure"), 2, &[link, SECURE]);
    let n = PER_ROUND;
    let exchange = Exchange::of(n as usize, n as usize);
    let header = HEADER_BYTES;
    // Per client: its key advertisement, its sealed shares, its unmasking answer, and the
    // weight that travels as one more value of its masked input.
    let up = (header + exchange.advertise_up)
        + (header + exchange.shares_up)
        + (header + exchange.unmask_up)
        + 4;
    // Per client: everyone's keys, the shares addressed to it, the survivors' list, and the
    // participants' ids beside its model (a named tensor: four bytes of name, four per id).
    let down = (header + exchange.advertise_down)
        + (header + exchange.shares_down)
        + (header + exchange.unmask_down)
        + 4
        + 4 * n;
    for (plain, secure) in plain.iter().zip(&secure) {
        let field = |record: &Value, name: &str| number(&record["traffic"][0], &[name]) as u64;
        assert_eq!(field(secure, "bytes_up") - field(plain, "bytes_up"), n * up);
        assert_eq!(
            field(secure, "bytes_down") - field(plain, "bytes_down"),
            n * down
        );
        assert_eq!(
            field(secure, "messages_up") - field(plain, "messages_up"),
            3 * n
        );
        assert_eq!(
            field(secure, "messages_down") - field(plain, "messages_down"),
            3 * n
        );
        // Three round trips more, at 50 ms each way.
        let extra = number(secure, &["sim_round_s"]) - number(plain, &["sim_round_s"]);
        assert!((extra - 0.3).abs() < 1e-9, "{extra}");
    }
}

#[test]
fn dropped_clients_masks_are_recovered_and_too_few_survivors_end_the_round_on_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let dropout = "availability.dropout=0.2";
    let (plain, secure) = (dir.path().join("plain"), dir.path().join("secure"));
    run(&plain, 3, &[dropout]);
    let recovered = run(
        &secure,
        3,
        &[dropout, r#"secure_aggregation={"threshold": 6}"#],
    );
    let mut dropped_somewhere = false;
    for record in &recovered {
        let dropped = record["dropped"].as_array().unwrap().len();
        dropped_somewhere |= dropped > 0;
        assert_eq!(number(record, &["strategy", "secagg_aborted"]), 0.0);
        assert_eq!(
            number(record, &["strategy", "secagg_recovered"]),
            dropped as f64
        );
    }
    assert!(
        dropped_somewhere,
        "no round lost a client: the case tests nothing"
    );
    // The survivors' mean, as FedAvg takes it over the same survivors.
    let largest = model(&plain)
        .iter()
        .zip(model(&secure))
        .map(|(p, s)| (p - s).abs())
        .fold(0.0f32, f32::max);
    assert!(largest < 1e-5, "the models differ by up to {largest}");

    // Every client of every round must answer: any dropout ends the round without a model,
    // and without the unmasking's messages.
    let strict = r#"secure_aggregation={"threshold": 10}"#;
    let link = r#"network.client_link={"latency_ms": 50}"#;
    let plain = run(
        &dir.path().join("plain-aborted"),
        3,
        &["availability.dropout=0.3", link],
    );
    let out = dir.path().join("aborted");
    let aborted = run(&out, 3, &["availability.dropout=0.3", link, strict]);
    let summary = common::summary(&out);
    let ended: Vec<u64> = summary["aborted_rounds"]
        .as_array()
        .map(|rounds| rounds.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    assert!(!ended.is_empty(), "{summary}");
    for record in &aborted {
        let round = record["round"].as_u64().unwrap();
        let lost = !record["dropped"].as_array().unwrap().is_empty();
        assert_eq!(ended.contains(&round), lost, "{record}");
        assert_eq!(
            number(record, &["strategy", "secagg_aborted"]),
            f64::from(u8::from(lost))
        );
    }
    for (plain, secure) in plain.iter().zip(&aborted) {
        let lost = !secure["dropped"].as_array().unwrap().is_empty();
        let extra = number(secure, &["sim_round_s"]) - number(plain, &["sim_round_s"]);
        let steps = if lost { 2.0 } else { 3.0 };
        assert!((extra - steps * 0.1).abs() < 1e-9, "{extra} in {secure}");
    }
}

#[test]
fn a_secure_run_is_the_same_on_any_thread_count_and_after_a_kill_and_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    let sets = [
        SECURE,
        "availability.dropout=0.2",
        "federation.rounds=4",
        "checkpoint.every=1",
    ];
    let reference = dir.path().join("reference");
    run_ok(&experiment("mnist-t1"), &reference, &sets);
    let one = dir.path().join("one");
    let one_thread: Vec<&str> = sets
        .iter()
        .copied()
        .chain(["federation.num_parallels=1"])
        .collect();
    run_ok(&experiment("mnist-t1"), &one, &one_thread);
    common::assert_same_results(&one, &reference);
    let killed = dir.path().join("killed");
    run_killed(&experiment("mnist-t1"), &killed, &sets, "checkpoint.fedsim");
    resume_ok(&killed);
    common::assert_same_results(&killed, &reference);
}

#[test]
fn adaptive_servers_and_personal_models_run_on_the_unmasked_mean() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ["strategy.name=fedadam", "eval.client_test_fraction=0"],
        ["strategy.name=ditto", "eval.client_test_fraction=0.2"],
    ];
    for (i, sets) in cases.iter().enumerate() {
        let out = dir.path().join(i.to_string());
        let all = [SECURE, "client.lr=0.1", sets[0], sets[1]];
        let records = run(&out, 3, &all);
        let last = records.last().unwrap();
        assert_eq!(
            number(last, &["strategy", "secagg_aborted"]),
            0.0,
            "{sets:?}"
        );
        assert!(number(last, &["test_accuracy"]) > 0.5, "{sets:?}: {last}");
    }
}

#[test]
fn sections_secure_aggregation_cannot_honour_are_refused_with_their_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("refused");
    let cases: [(&[&str], &str); 7] = [
        (
            &[r#"secure_aggregation={"threshold": 11}"#],
            "secure_aggregation.threshold: is 11; must be 2 to federation.clients_per_round (10)",
        ),
        (
            &[r#"secure_aggregation={"range": -1}"#],
            "secure_aggregation.range",
        ),
        (
            &[SECURE, "federation.num_clients=16777217"],
            "federation.num_clients: is 16777217; secure aggregation lists a round's clients",
        ),
        (&[SECURE, "strategy.name=krum"], "strategy.name"),
        (&[SECURE, "strategy.name=fedper"], "personal layers"),
        (
            &[
                SECURE,
                r#"topology={"kind": "hierarchical", "schedulers": 2, "mode": "relay"}"#,
            ],
            "topology: is hierarchical",
        ),
        (
            &[SECURE, r#"compression={"uplink": {"name": "topk"}}"#],
            "compression: is set",
        ),
    ];
    for (sets, expected) in cases {
        let message = run_refused(&experiment("mnist-t1"), &out, sets);
        assert!(message.contains(expected), "{sets:?}: {message}");
    }
}
