//! How a client trains: the representation every built-in network exposes, a client half that
//! trains itself (MOON), and the optimiser choice (`client.optimizer`), through the real
//! binary on the embedded MNIST.

mod common;

use std::path::Path;

use burn::tensor::{Int, Tensor, TensorData};
use common::{experiment, fails_with, model_bytes, records, run_ok};
use fedsim::backend::BackendKind;
use fedsim::config::ModelConfig;
use fedsim::data::{DataShape, SampleShape};
use fedsim::model::Input;
use fedsim::model::flat::{initial_params, load};
use fedsim::registry::Registry;
use fedsim::seed::{Purpose, stream};

/// A batch of three samples of `shape`, with values that vary.
fn batch(shape: SampleShape, device: &burn::tensor::Device) -> Input {
    match shape {
        SampleShape::Image([c, h, w]) => {
            let values = (0..3 * c * h * w).map(|i| ((i * 37) % 101) as f32 / 101.0);
            let data = TensorData::new(values.collect::<Vec<_>>(), [3, c, h, w]);
            Input::Images(Tensor::from_data(data, device))
        }
        SampleShape::Row(width) => {
            let values = (0..3 * width).map(|i| ((i * 37) % 101) as f32 / 101.0);
            let data = TensorData::new(values.collect::<Vec<_>>(), [3, width]);
            Input::Rows(Tensor::from_data(data, device))
        }
        SampleShape::Tokens(steps) => {
            let ids = (0..3 * steps).map(|i| ((i * 7) % 10) as i64);
            let data = TensorData::new(ids.collect::<Vec<_>>(), [3, steps]);
            Input::Tokens(Tensor::<2, Int>::from_data(data, device))
        }
    }
}

#[test]
fn every_built_in_network_exposes_its_representation_beside_the_same_logits() {
    let registry = Registry::builtin();
    let device = BackendKind::Flex.device();
    let image = |c, side| SampleShape::Image([c, side, side]);
    // (model, samples, width of the last layer's input)
    let cases = [
        ("mlp", image(1, 28), 200),
        ("logistic", SampleShape::Row(30), 30),
        ("cnn", image(1, 28), 512),
        ("cifar-cnn", image(3, 32), 192),
        ("resnet", image(3, 32), 64),
        ("lstm", SampleShape::Tokens(20), 256),
    ];
    for (name, sample, width) in cases {
        let shape = DataShape {
            sample,
            num_classes: 10,
        };
        let model = registry
            .choose_model(&ModelConfig::named(name), Some(sample.kind()))
            .unwrap();
        let layout = model.layout(shape).unwrap();
        let params = initial_params(&layout, &mut stream(3, Purpose::MODEL_INIT, 0, 0));
        let net = load(model.build(shape, &device), &params);
        let input = batch(sample, &device);
        let outputs = net.outputs(input.clone());
        let representation = outputs.representation.expect(name);
        assert_eq!(representation.dims(), [3, width], "{name}");
        assert_eq!(
            outputs.logits.into_data(),
            net.forward(input).into_data(),
            "{name}: the logits beside the representation are forward's"
        );
    }
}

/// A small MNIST federation in which every client trains every round, as MOON's experiments
/// run: the second round's clients all have a previous local model.
fn every_client_every_round(dir: &Path, name: &str, sets: &[&str]) -> std::path::PathBuf {
    let out = dir.join(name);
    let mut all = vec![
        "federation={\"num_clients\": 10, \"clients_per_round\": 10, \"rounds\": 2}",
        "client.epochs=1",
        "client.momentum=0",
    ];
    all.extend_from_slice(sets);
    run_ok(&experiment("mnist-fedavg"), &out, &all);
    out
}

#[test]
fn moon_trains_its_first_round_as_fedavg_and_then_pulls_its_own_way() {
    let dir = tempfile::tempdir().unwrap();
    let fedavg = every_client_every_round(dir.path(), "fedavg", &[]);
    let moon = every_client_every_round(
        dir.path(),
        "moon",
        &["strategy={\"name\": \"moon\", \"mu\": 1, \"temperature\": 0.5}"],
    );
    let (fedavg_rounds, moon_rounds) = (records(&fedavg), records(&moon));
    // Before a client's first round its previous model is the global one, so the term is
    // log 2 whatever the weights, and has no gradient: the same model, a loss log 2 higher.
    let first = |r: &[serde_json::Value], field: &str| r[0][field].as_f64().unwrap();
    assert_eq!(
        first(&moon_rounds, "test_accuracy"),
        first(&fedavg_rounds, "test_accuracy")
    );
    let extra = first(&moon_rounds, "train_loss") - first(&fedavg_rounds, "train_loss");
    assert!((extra - 2f64.ln()).abs() < 1e-4, "{extra}");
    // From the second round on, the previous local models pull: another model.
    assert_ne!(model_bytes(&moon), model_bytes(&fedavg));
}

#[test]
fn adam_trains_and_gives_another_model_than_sgd() {
    let dir = tempfile::tempdir().unwrap();
    let sgd = every_client_every_round(dir.path(), "sgd", &["client.lr=0.001"]);
    let adam = every_client_every_round(
        dir.path(),
        "adam",
        &["client.lr=0.001", "client.optimizer={\"name\": \"adam\"}"],
    );
    let again = every_client_every_round(
        dir.path(),
        "adam-again",
        &["client.lr=0.001", "client.optimizer={\"name\": \"adam\"}"],
    );
    assert_ne!(model_bytes(&adam), model_bytes(&sgd));
    assert_eq!(model_bytes(&adam), model_bytes(&again));
    let accuracy = |run: &Path| records(run)[1]["test_accuracy"].as_f64().unwrap();
    // At a rate SGD barely moves with, Adam's normalised steps train.
    assert!(accuracy(&adam) > 0.85, "{}", accuracy(&adam));
    assert!(accuracy(&adam) > accuracy(&sgd) + 0.1);
}

#[test]
fn adam_with_momentum_or_a_bad_beta_is_refused_by_field() {
    let file = experiment("mnist-fedavg");
    let file = file.to_str().unwrap();
    let message = fails_with(
        &[
            "run",
            file,
            "--set",
            "client.optimizer={\"name\": \"adam\", \"beta_2\": 1.5}",
        ],
        2,
    );
    assert!(
        message.contains("client.optimizer.name: is \"adam\", which keeps its own running mean"),
        "{message}"
    );
    assert!(
        message.contains("client.optimizer.beta_2: is 1.5; must be in [0, 1)"),
        "{message}"
    );
    let message = fails_with(
        &[
            "run",
            file,
            "--set",
            "client.optimizer={\"name\": \"rmsprop\"}",
        ],
        2,
    );
    assert!(message.contains("client.optimizer"), "{message}");
    assert!(message.contains("rmsprop"), "{message}");
}
