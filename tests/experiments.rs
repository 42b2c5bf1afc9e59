//! The shipped experiments run as documented and reach their stated accuracy.

mod common;

use common::{experiment, run_ok, summary};

#[test]
fn default_experiment_reaches_97_percent() {
    let dir = tempfile::tempdir().unwrap();
    run_ok(&experiment("mnist-fedavg"), dir.path(), &[]);
    let accuracy = summary(dir.path())["final_accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.97, "final accuracy {accuracy}");
}

#[test]
fn benchmark_config_lands_within_one_point_of_89_percent() {
    let dir = tempfile::tempdir().unwrap();
    run_ok(&experiment("mnist-t1"), dir.path(), &[]);
    let accuracy = summary(dir.path())["final_accuracy"].as_f64().unwrap();
    assert!((accuracy - 0.89).abs() <= 0.01, "final accuracy {accuracy}");
}

#[test]
fn cnn_shards_experiment_learns_in_a_shortened_run() {
    let dir = tempfile::tempdir().unwrap();
    let sets = ["federation.rounds=2", "federation.clients_per_round=4"];
    run_ok(&experiment("mnist-cnn-shards"), dir.path(), &sets);
    let summary = summary(dir.path());
    assert_eq!(summary["rounds"], 2);
    assert_eq!(summary["num_params"], 1_663_370);
    // Four clients holding about two digits each make no good global model in two rounds, but
    // local training must fit their data: the mean local loss ends far below the ln(10) = 2.30
    // of an untrained 10-class model.
    let metrics = common::metrics_without_timing(dir.path());
    let last: serde_json::Value = serde_json::from_str(metrics.last().unwrap()).unwrap();
    let train_loss = last["train_loss"].as_f64().unwrap();
    assert!(train_loss < 1.5, "mean local loss {train_loss}");
}

#[test]
fn run_folder_holds_config_partition_metrics_summary_and_model() {
    let dir = tempfile::tempdir().unwrap();
    run_ok(
        &experiment("mnist-t1"),
        dir.path(),
        &["federation.rounds=2"],
    );
    for file in [
        "config.json",
        "partition.json",
        "metrics.jsonl",
        "summary.json",
        "model.f32",
        "model-layout.json",
    ] {
        assert!(dir.path().join(file).is_file(), "{file} missing");
    }
    let metrics = common::metrics_without_timing(dir.path());
    assert_eq!(metrics.len(), 2);
    let first: serde_json::Value = serde_json::from_str(&metrics[0]).unwrap();
    // Flat: one tier, ten downlinks and ten uplinks of the 199,210-parameter MLP, each with a
    // 16-byte header; a downlink also carries a deadline and one client id, an uplink a sample
    // count, a loss and one client id.
    let traffic = first["traffic"].as_array().unwrap();
    assert_eq!(traffic.len(), 1);
    assert_eq!(traffic[0]["tier"], "server");
    assert_eq!(traffic[0]["messages_down"], 10);
    assert_eq!(traffic[0]["bytes_down"], 10 * (16 + 8 + 4 + 4 * 199_210));
    assert_eq!(traffic[0]["messages_up"], 10);
    assert_eq!(traffic[0]["bytes_up"], 10 * (16 + 16 + 4 + 4 * 199_210));
    assert_eq!(first["clients"].as_array().unwrap().len(), 10);
    assert_eq!(first["dropped"].as_array().unwrap().len(), 0);
    assert_eq!(first["sim_round_s"], 0.0);
    let model = common::model_bytes(dir.path());
    assert_eq!(model.len(), 4 * 199_210);
}
