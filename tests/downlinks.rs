//! Clients sent models of their own (CFL's clusters), end to end: each client's downlink is its
//! own message through relaying schedulers too, the links count what each receives, the
//! clusters reach the records, aggregating schedulers, which average one model, refuse such an
//! algorithm, and on rotated MNIST CFL's clusters are its rotation groups.

use serde_json::Value;

mod common;

use common::{experiment, fails_with, records, run_ok};

/// CFL splitting a cluster whenever three of its clients take part in a round.
const SPLITTING: &str = r#"strategy={"name":"cfl","eps_1":1e9,"eps_2":1e-9,"warmup":1}"#;

/// The breast-cancer experiment: 10 clients, 5 a round.
const ROUNDS: &str = "federation.rounds=4";

#[test]
fn after_a_split_each_client_is_sent_its_clusters_model_as_a_message_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let relay = r#"topology={"kind":"hierarchical","schedulers":2,"mode":"relay"}"#;
    let run = dir.path().join("cfl");
    run_ok(
        &experiment("breast-cancer"),
        &run,
        &[ROUNDS, SPLITTING, relay],
    );
    let records = records(&run);
    let clusters: Vec<f64> = records
        .iter()
        .map(|r| r["strategy"]["clusters"].as_f64().unwrap())
        .collect();
    // No split in the warm-up round, then at least one.
    assert_eq!(clusters[0], 1.0);
    assert!(clusters[1] >= 2.0, "{clusters:?}");
    let server_down = |r: &Value| r["traffic"][0]["messages_down"].as_u64().unwrap();
    let sampled = |r: &Value| r["clients"].as_array().unwrap().len() as u64;
    // One model for everyone: one downlink per scheduler with clients in the round.
    assert!(server_down(&records[0]) <= 2);
    assert!(server_down(&records[1]) <= 2);
    // Clusters: one downlink per client, through the schedulers too.
    for record in &records[2..] {
        assert_eq!(server_down(record), sampled(record), "{record}");
    }
    let flat = dir.path().join("flat");
    run_ok(&experiment("breast-cancer"), &flat, &[ROUNDS, SPLITTING]);
    assert_eq!(common::model_bytes(&flat), common::model_bytes(&run));
}

#[test]
fn aggregating_schedulers_refuse_an_algorithm_that_sends_clients_their_own_models() {
    let aggregate = r#"topology={"kind":"hierarchical","schedulers":2,"mode":"aggregate"}"#;
    let dir = tempfile::tempdir().unwrap();
    let (path, out) = (experiment("breast-cancer"), dir.path().join("refused"));
    let (path, out) = (path.to_str().unwrap(), out.to_str().unwrap());
    let args = [
        "run", path, "--out", out, "--set", SPLITTING, "--set", aggregate,
    ];
    let message = fails_with(&args, 2);
    assert!(
        message.contains("CFL sends each client its cluster's model"),
        "{message}"
    );
}

#[test]
fn cfl_finds_rotated_mnists_four_groups_and_scores_each_client_with_its_clusters_model() {
    let dir = tempfile::tempdir().unwrap();
    let cfl = r#"strategy={"name":"cfl","eps_1":0.4,"eps_2":0.8,"warmup":10}"#;
    run_ok(
        &experiment("rotated-mnist"),
        dir.path(),
        &[cfl, "federation.rounds=13"],
    );
    let last = records(dir.path()).pop().unwrap();
    // Client c of 40 is in rotation group c / 10; each group must be a cluster of its own.
    let mut members: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for (client, cluster) in last["clusters"].as_object().unwrap() {
        members
            .entry(cluster.as_u64().unwrap())
            .or_default()
            .push(client.parse().unwrap());
    }
    let mut groups: Vec<Vec<u64>> = members
        .into_values()
        .map(|mut clients| {
            clients.sort_unstable();
            clients
        })
        .collect();
    groups.sort();
    let expected: Vec<Vec<u64>> = (0..4).map(|g| (g * 10..g * 10 + 10).collect()).collect();
    assert_eq!(groups, expected);
    // The pooled test set holds every rotation, which the first cluster's model was not
    // trained for; the clients, scored with their own cluster's models, do far better.
    let pooled = last["test_accuracy"].as_f64().unwrap();
    let clients = last["client_accuracy"]["mean"].as_f64().unwrap();
    assert!(clients > pooled + 0.3, "clients {clients}, pooled {pooled}");
}
