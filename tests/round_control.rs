//! The example `round_control`: four plug-ins written as a user writes them, one per control
//! point of a round (the server's rule, who trains, how a client trains, what each client is
//! sent). Each runs from its experiment file through the example's own program and keeps
//! every promise the conformance kit checks of the built-ins.

#[path = "../examples/round_control/best_of_k.rs"]
mod best_of_k;
#[path = "../examples/round_control/clip_noise.rs"]
mod clip_noise;
mod common;
#[path = "../examples/round_control/contrastive.rs"]
mod contrastive;
#[path = "../examples/round_control/loss_first.rs"]
mod loss_first;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{model_bytes, profile_dir, records, root};
use fedsim::conformance;
use fedsim::registry::{Origin, Registry};

/// Runs the example's experiment `name` for `rounds` rounds into `dir`'s folder `label`, with
/// `sets`.
fn run(dir: &Path, name: &str, label: &str, rounds: u32, sets: &[&str]) -> PathBuf {
    let out = dir.join(label);
    let file = root().join(format!("examples/round_control/{name}.json"));
    let rounds = format!("federation.rounds={rounds}");
    let mut command = Command::new(profile_dir().join("examples/round_control"));
    command
        .arg("run")
        .arg(file)
        .arg("--out")
        .arg(&out)
        .arg("--quiet");
    for set in std::iter::once(rounds.as_str()).chain(sets.iter().copied()) {
        command.args(["--set", set]);
    }
    let output = command.output().expect("cargo test builds the examples");
    assert!(
        output.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

#[test]
fn the_server_side_noise_is_seeded_and_changes_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let noisy = run(dir.path(), "clip_noise", "noisy", 2, &[]);
    let one_worker = ["federation.num_parallels=1"];
    let again = run(dir.path(), "clip_noise", "again", 2, &one_worker);
    let quiet = run(dir.path(), "clip_noise", "quiet", 2, &["strategy.noise=0"]);
    assert_eq!(model_bytes(&noisy), model_bytes(&again));
    assert_ne!(model_bytes(&noisy), model_bytes(&quiet));
    // The clip binds: some of the 20 clients' changes were longer than 0.2.
    let clipped: Vec<f64> = records(&noisy)
        .iter()
        .map(|r| r["strategy"]["clipped"].as_f64().unwrap())
        .collect();
    assert!(
        clipped.iter().all(|&c| (0.0..=20.0).contains(&c)),
        "{clipped:?}"
    );
    assert!(clipped.iter().sum::<f64>() > 0.0, "{clipped:?}");
}

#[test]
fn loss_first_trains_the_probed_clients_of_highest_loss() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "loss_first", "loss_first", 2, &[]);
    for record in records(&out) {
        let mut probed: Vec<(f64, u64)> = record["probed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["loss"].as_f64().unwrap(), p["client"].as_u64().unwrap()))
            .collect();
        assert_eq!(probed.len(), 30);
        probed.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut highest: Vec<u64> = probed[..10].iter().map(|p| p.1).collect();
        highest.sort_unstable();
        let trained: Vec<u64> = record["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert_eq!(trained, highest);
    }
}

#[test]
fn the_contrastive_client_trains_lenet_as_fedavg_until_it_has_a_previous_model() {
    let dir = tempfile::tempdir().unwrap();
    let contrastive = run(dir.path(), "contrastive", "contrastive", 2, &[]);
    let fedavg = run(
        dir.path(),
        "contrastive",
        "fedavg",
        2,
        &["strategy=\"fedavg\""],
    );
    let (contrastive_records, fedavg_records) = (records(&contrastive), records(&fedavg));
    // Round 1: the previous model is the global one, the term log 2 and without gradient:
    // the two similarities are the same bits, so their gradients cancel, up to the order in
    // which autodiff adds them and the cross-entropy's into the representation's gradient.
    let extra = contrastive_records[0]["train_loss"].as_f64().unwrap()
        - fedavg_records[0]["train_loss"].as_f64().unwrap();
    assert!((extra - 2f64.ln()).abs() < 1e-4, "{extra}");
    let accuracy = |records: &[serde_json::Value], round: usize| {
        records[round]["test_accuracy"].as_f64().unwrap()
    };
    let first = (
        accuracy(&contrastive_records, 0),
        accuracy(&fedavg_records, 0),
    );
    assert!((first.0 - first.1).abs() < 1e-3, "{first:?}");
    assert_ne!(
        accuracy(&contrastive_records, 1),
        accuracy(&fedavg_records, 1)
    );
}

#[test]
fn best_of_k_sends_every_client_all_its_models_and_with_one_is_fedavg() {
    let dir = tempfile::tempdir().unwrap();
    let two = run(dir.path(), "best_of_k", "two", 2, &[]);
    let one = run(dir.path(), "best_of_k", "one", 2, &["strategy.k=1"]);
    let fedavg = run(
        dir.path(),
        "best_of_k",
        "fedavg",
        2,
        &["strategy=\"fedavg\""],
    );
    let down = |run: &Path| {
        records(run)[0]["traffic"][0]["bytes_down"]
            .as_f64()
            .unwrap()
    };
    // Two models to each client instead of one.
    let ratio = down(&two) / down(&one);
    assert!((ratio - 2.0).abs() < 0.01, "{ratio}");
    // One model, measured and then trained: FedAvg's bits.
    assert_eq!(model_bytes(&one), model_bytes(&fedavg));
}

#[test]
fn the_four_plug_ins_keep_fedsims_promises() {
    let mut builder = Registry::builder().with_builtins();
    builder.origin(Origin::new("round-control-test", "0"));
    builder.algorithm(clip_noise::ClipNoise).unwrap();
    builder.algorithm(loss_first::LossFirst).unwrap();
    builder.algorithm(contrastive::Contrastive).unwrap();
    builder.algorithm(best_of_k::BestOfK).unwrap();
    let registry = builder.build();
    let scratch = tempfile::tempdir().unwrap();
    for name in ["clip_noise", "loss_first", "contrastive", "best_of_k"] {
        let passed = conformance::check(&registry, name, scratch.path())
            .unwrap_or_else(|breach| panic!("{breach}"));
        assert!(
            passed.contains(&"a stopped run resumes to the same bits"),
            "{name}: {passed:?}"
        );
    }
}
