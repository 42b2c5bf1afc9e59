//! Clients made when sampled: a federation whose data set makes each client on demand (the
//! synthetic set's users) trains, scores and records to the same bits as the same federation
//! with the data set generated whole, in every way a run reads clients' samples (training,
//! client states, held-out and own test samples, personal models, a sample of clients scored);
//! and a run records its roster and its scored clients.

use std::fs;
use std::path::Path;

use fedsim::config::check::Problems;
use fedsim::data::synthetic::{SyntheticConfig, SyntheticData};
use fedsim::data::{DataContext, DataError, DataSource, SampleKind, TrainTest};
use fedsim::output::Progress;
use fedsim::registry::{Origin, Registry};
use fedsim::stop::StopSignal;
use fedsim::{Experiment, ExperimentConfig, Run, RunResult};
use serde_json::{Value, json};

/// The synthetic set generated whole, as every data set without clients on demand is: the
/// materialised path to compare with.
struct Whole;

impl DataSource for Whole {
    type Params = SyntheticConfig;

    fn name(&self) -> &'static str {
        "synthetic-whole"
    }

    fn about(&self) -> &'static str {
        "the synthetic set, generated whole"
    }

    fn sample_kind(&self, params: &SyntheticConfig) -> Option<SampleKind> {
        SyntheticData.sample_kind(params)
    }

    fn has_natural_clients(&self, _: &SyntheticConfig) -> bool {
        true
    }

    fn check(&self, params: &SyntheticConfig, context: &DataContext, problems: &mut Problems) {
        SyntheticData.check(params, context, problems);
    }

    fn load(
        &self,
        params: &SyntheticConfig,
        context: &DataContext,
    ) -> Result<TrainTest, DataError> {
        SyntheticData.load(params, context)
    }
}

fn registry() -> Registry {
    let mut builder = Registry::builder().with_builtins();
    builder.origin(Origin::new("on-demand-test", "0"));
    builder.data_set(Whole).unwrap();
    builder.build()
}

/// A federation of 40 synthetic users, 8 a round, with `changes` merged into its sections.
fn experiment(dataset: &str, changes: &Value) -> Value {
    let mut config = json!({
        "name": "on-demand",
        "seed": 3,
        "data": {"dataset": dataset, "alpha": 0.5, "beta": 0.5},
        "partition": {"scheme": "natural"},
        "model": "mlp",
        "federation": {"num_clients": 40, "clients_per_round": 8, "rounds": 3},
        "client": {"epochs": 1, "batch_size": 10, "lr": 0.05},
        "strategy": {"name": "fedavg"},
        "eval": {"every": 1}
    });
    for (section, fields) in changes.as_object().unwrap() {
        match fields {
            Value::Object(fields) => {
                let target = config[section].as_object_mut();
                match target {
                    Some(target) => target.extend(fields.clone()),
                    None => config[section] = Value::Object(fields.clone()),
                }
            }
            value => config[section] = value.clone(),
        }
    }
    config
}

/// Runs `config` into `dir`.
fn run(registry: &Registry, config: Value, dir: &Path) -> RunResult {
    let path = dir.join("experiment.json");
    let config = ExperimentConfig::from_value(config, &path, registry).unwrap();
    let experiment = Experiment::prepare(config, registry).unwrap();
    Run::new(experiment, dir)
        .unwrap()
        .play(&Progress::Silent, &StopSignal::new(), None)
        .unwrap()
        .expect("a new run plays its rounds")
}

fn bits(model: &[f32]) -> Vec<u32> {
    model.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn clients_made_on_demand_train_and_score_to_the_bits_of_the_whole_data_set() {
    let registry = registry();
    let scratch = tempfile::tempdir().unwrap();
    let cases = [
        ("fedavg", json!({})),
        (
            "scaffold, held-out samples, a sample of clients scored",
            json!({"strategy": {"name": "scaffold"},
                   "eval": {"client_test_fraction": 0.2, "clients_sampled": 7}}),
        ),
        (
            "ditto's personal models on the clients' own test samples",
            json!({"strategy": {"name": "ditto", "lambda": 0.5}}),
        ),
        (
            "fedprox, a sample of clients scored on their own test samples",
            json!({"strategy": {"name": "fedprox", "mu": 0.1}, "eval": {"clients_sampled": 5}}),
        ),
    ];
    for (at, (case, changes)) in cases.iter().enumerate() {
        let on_demand = scratch.path().join(format!("on-demand-{at}"));
        let whole = scratch.path().join(format!("whole-{at}"));
        let a = run(&registry, experiment("synthetic", changes), &on_demand);
        let b = run(&registry, experiment("synthetic-whole", changes), &whole);
        assert_eq!(bits(&a.model), bits(&b.model), "{case}: the models differ");
        // Everything a round records but its wall-clock time.
        let records = |result: &RunResult| {
            let mut records = serde_json::to_value(&result.rounds).unwrap();
            for record in records.as_array_mut().unwrap() {
                record.as_object_mut().unwrap().remove("wall_ms");
            }
            records
        };
        let (ra, rb) = (records(&a), records(&b));
        assert_eq!(ra, rb, "{case}: the round records differ");
        let scored = ra.as_array().unwrap().last().unwrap();
        assert!(
            scored["test_accuracy"].as_f64().unwrap() > 0.0,
            "{case}: {scored}"
        );
        if changes["eval"].get("clients_sampled").is_some() || at == 2 {
            assert!(scored.get("client_accuracy").is_some(), "{case}: {scored}");
        }
        // The on-demand run records each client's sample counts, not index lists.
        let partition: Value =
            serde_json::from_str(&fs::read_to_string(on_demand.join("partition.json")).unwrap())
                .unwrap();
        let train = partition["clients_on_demand"]["train"].as_array().unwrap();
        let whole_partition: Value =
            serde_json::from_str(&fs::read_to_string(whole.join("partition.json")).unwrap())
                .unwrap();
        let lists = whole_partition["clients"].as_array().unwrap();
        assert_eq!(train.len(), 40, "{case}");
        for (count, list) in train.iter().zip(lists) {
            assert_eq!(
                count.as_u64().unwrap() as usize,
                list.as_array().unwrap().len()
            );
        }
        // Both name the same clients scored, where a sample of them is.
        let sampled = |dir: &Path| fs::read_to_string(dir.join("eval_clients.json")).ok();
        assert_eq!(sampled(&on_demand), sampled(&whole), "{case}");
        if let Some(sample) = changes["eval"].get("clients_sampled") {
            let listed: Vec<usize> = serde_json::from_str(&sampled(&on_demand).unwrap()).unwrap();
            assert_eq!(listed.len() as u64, sample.as_u64().unwrap(), "{case}");
            assert!(listed.windows(2).all(|w| w[0] < w[1]), "{case}: {listed:?}");
        }
    }
}

#[test]
fn a_sample_of_clients_scored_is_checked_against_the_federation() {
    let registry = registry();
    let config = experiment("synthetic", &json!({"eval": {"clients_sampled": 41}}));
    let error = ExperimentConfig::from_value(config, Path::new("e.json"), &registry).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("eval.clients_sampled") && message.contains("between 1 and"),
        "{message}"
    );
}
