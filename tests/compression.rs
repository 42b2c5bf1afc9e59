//! Compressed uploads end to end on the embedded MNIST: the links count exactly the bytes
//! each encoding takes; compression composes with personal layers (only the shared values
//! travel), with differential privacy, with relaying schedulers and with clustered
//! algorithms' own models; signSGD's majority vote learns through one-bit votes.

use serde_json::Value;

mod common;
use common::{experiment, records, run_ok};

/// The MLP of `experiments/mnist-t1.json`: 784-200-200-10.
const MLP_VALUES: u64 = 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10;

/// Bytes of an upload besides its payload: header, counts and loss, one client id.
const UPLOAD_FIELDS: u64 = 16 + 16 + 4;

/// The server tier's uploads and their bytes in `record`.
fn uploads(record: &Value) -> (u64, u64) {
    let server = record["traffic"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tier"] == "server")
        .unwrap();
    (
        server["messages_up"].as_u64().unwrap(),
        server["bytes_up"].as_u64().unwrap(),
    )
}

#[test]
fn each_upload_takes_exactly_its_encodings_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let k = (0.01 * MLP_VALUES as f64).round() as u64;
    let cases = [
        (r#"{"name":"topk","fraction":0.01}"#, 8 * k),
        (r#"{"name":"randk","fraction":0.01}"#, 8 + 4 * k),
        (
            r#"{"name":"qsgd","levels":4}"#,
            4 + (4 * MLP_VALUES).div_ceil(8),
        ),
        (
            r#"{"name":"qsgd","levels":16}"#,
            4 + (6 * MLP_VALUES).div_ceil(8),
        ),
        (r#"{"name":"sign"}"#, 4 + MLP_VALUES.div_ceil(8)),
        (r#"{"name":"quantize","bits":8}"#, 8 + MLP_VALUES),
        (r#"{"name":"quantize","bits":16}"#, 8 + 2 * MLP_VALUES),
    ];
    for (i, (uplink, payload)) in cases.into_iter().enumerate() {
        let out = dir.path().join(i.to_string());
        let compression = format!(r#"compression={{"uplink":{uplink},"error_feedback":true}}"#);
        run_ok(
            &experiment("mnist-t1"),
            &out,
            &[&compression, "federation.rounds=2"],
        );
        for record in records(&out) {
            let (messages, bytes) = uploads(&record);
            assert_eq!(messages, 10, "{uplink}");
            assert_eq!(bytes, messages * (UPLOAD_FIELDS + payload), "{uplink}");
        }
    }
}

#[test]
fn error_feedback_changes_the_run_and_top_k_still_learns() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, feedback: bool| {
        let out = dir.path().join(name);
        let compression = format!(
            r#"compression={{"uplink":{{"name":"topk","fraction":0.1}},"error_feedback":{feedback}}}"#
        );
        run_ok(
            &experiment("mnist-t1"),
            &out,
            &[&compression, "federation.rounds=8"],
        );
        records(&out)
    };
    let (plain, fed_back) = (run("plain", false), run("fed-back", true));
    let accuracy = |records: &[Value]| records.last().unwrap()["test_accuracy"].as_f64().unwrap();
    assert_ne!(accuracy(&plain), accuracy(&fed_back));
    assert!(accuracy(&fed_back) > 0.7, "{}", accuracy(&fed_back));
}

#[test]
fn compression_composes_with_personal_layers_privacy_relays_and_clusters() {
    let dir = tempfile::tempdir().unwrap();
    let qsgd = r#"compression={"uplink":{"name":"qsgd","levels":16}}"#;
    // FedPer keeps the head (200 * 10 + 10 values): only the body is encoded.
    let fedper = dir.path().join("fedper");
    run_ok(
        &experiment("mnist-t1"),
        &fedper,
        &[
            qsgd,
            "strategy.name=fedper",
            "eval.client_test_fraction=0.2",
            "federation.rounds=2",
        ],
    );
    let body = MLP_VALUES - (200 * 10 + 10);
    let (messages, bytes) = uploads(&records(&fedper)[0]);
    assert_eq!(
        bytes,
        messages * (UPLOAD_FIELDS + 4 + (6 * body).div_ceil(8))
    );
    let sets: [&[&str]; 3] = [
        &[r#"privacy={"noise_multiplier":0.5,"clip":{"kind":"fixed","norm":1.0},"delta":1e-5}"#],
        &[r#"topology={"kind":"hierarchical","schedulers":2,"mode":"relay"}"#],
        &[r#"strategy={"name":"ifca","clusters":2}"#],
    ];
    for (i, sets) in sets.into_iter().enumerate() {
        let out = dir.path().join(i.to_string());
        let mut all = vec![qsgd, "federation.rounds=4"];
        all.extend(sets);
        run_ok(&experiment("mnist-t1"), &out, &all);
        let last = records(&out).last().unwrap().clone();
        assert!(
            last["test_accuracy"].as_f64().unwrap() > 0.3,
            "{sets:?}: {last}"
        );
    }
}

#[test]
fn signsgd_learns_by_majority_vote_of_one_bit_signs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("signsgd");
    run_ok(
        &experiment("mnist-t1"),
        &out,
        &[
            r#"compression={"uplink":{"name":"sign","scaled":false}}"#,
            r#"strategy={"name":"signsgd","server_lr":0.001}"#,
            "federation.rounds=10",
        ],
    );
    let records = records(&out);
    let (messages, bytes) = uploads(&records[0]);
    assert_eq!(
        bytes,
        messages * (UPLOAD_FIELDS + 4 + MLP_VALUES.div_ceil(8))
    );
    let accuracy = records.last().unwrap()["test_accuracy"].as_f64().unwrap();
    assert!(accuracy > 0.6, "{accuracy}");
}
