//! The conformance kit over every registered algorithm, the built-ins and the example plug-in
//! alike: each runs flat, relayed and (where allowed) aggregated, relay equals flat, workers do
//! not change results, a stopped run resumes to the same bits, failures end runs by name, and
//! every declared reduction holds; the asynchronous algorithms keep them asynchronously too.

#[path = "../examples/custom_strategy/fedexp.rs"]
mod fedexp;

use fedsim::conformance;
use fedsim::registry::{Origin, Registry};
use fedsim::strategy::vector::combination;
use fedsim::strategy::{
    Aggregate, Algorithm, Collected, EdgeAggregation, NoParams, Reads, Reduction, Round, Setting,
    Strategy, Sum, Weighting,
};
use serde_json::json;

/// The built-ins and the example's FedExP.
fn registry() -> Registry {
    let mut builder = Registry::builder().with_builtins();
    builder.origin(Origin::new("conformance-test", "0"));
    builder.algorithm(fedexp::FedExP).unwrap();
    builder.build()
}

#[test]
fn every_registered_compressor_keeps_fedsims_promises() {
    let registry = registry();
    let scratch = tempfile::tempdir().unwrap();
    let mut checked = Vec::new();
    for compressor in registry.compressors() {
        let passed = conformance::check_compressor(&registry, compressor.name, scratch.path())
            .unwrap_or_else(|breach| panic!("{breach}"));
        checked.push((compressor.name, passed));
    }
    let names: Vec<&str> = checked.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["topk", "randk", "qsgd", "sign", "quantize"]);
    for (name, passed) in &checked {
        // Every built-in's encoding takes a length fixed by the vector's.
        assert!(
            passed.contains(&"the links count each upload's encoded bytes"),
            "{name}: {passed:?}"
        );
        assert_eq!(passed.len(), 10, "{name}: {passed:?}");
    }
}

#[test]
fn every_registered_algorithm_keeps_fedsims_promises() {
    let registry = registry();
    let scratch = tempfile::tempdir().unwrap();
    let mut checked = Vec::new();
    for algorithm in registry.algorithms() {
        let passed = conformance::check(&registry, algorithm.name, scratch.path())
            .unwrap_or_else(|breach| panic!("{breach}"));
        assert!(passed.contains(&"relay equals flat"), "{passed:?}");
        let available = "a selection takes only online clients, the same on a rerun";
        assert!(passed.contains(&available), "{passed:?}");
        let resumed_asynchronously =
            passed.contains(&"a stopped asynchronous run resumes to the same bits");
        assert_eq!(resumed_asynchronously, algorithm.asynchronous, "{passed:?}");
        checked.push((algorithm.name, passed.len()));
    }
    // Every registered algorithm, the thirty-one built-ins and the example at least.
    assert!(checked.len() >= 32, "{checked:?}");
    let asynchronous: Vec<&str> = registry
        .algorithms()
        .iter()
        .filter(|a| a.asynchronous)
        .map(|a| a.name)
        .collect();
    assert_eq!(asynchronous, ["fedasync", "fedbuff"]);
    // Every built-in with a reduction in its file had it checked: FedProx, FedAvgM, SCAFFOLD,
    // FedNova, q-FFL, the trimmed mean, FedAsync, Power-of-Choice, IFCA, MOON, FedAvg with
    // fine-tuning, FedPer, LG-FedAvg, FedBN, Ditto, FedRep, APFL and FedALA.
    let reductions = registry
        .algorithms()
        .iter()
        .filter(|a| !a.reductions.is_empty())
        .count();
    assert_eq!(reductions, 18);
}

#[test]
fn algorithms_keep_the_promises_away_from_their_defaults_too() {
    let registry = registry();
    let scratch = tempfile::tempdir().unwrap();
    let checks = [
        // CFL splitting whenever a cluster has three clients in a round: clients are sent
        // models of their own from the first round on.
        ("cfl", json!({"eps_1": 1e9, "eps_2": 1e-9, "warmup": 0})),
        // Oort exploiting most of each round from the second on.
        ("oort", json!({"exploration": 0.2, "exploration_min": 0.0})),
        // Power-of-Choice probing every client, and probing about half of them.
        ("power_of_choice", json!({"d": 13})),
        ("power_of_choice", json!({"d": 6})),
    ];
    // At once, in one scratch folder, as a plug-in's tests of several parameter sets run.
    std::thread::scope(|scope| {
        let runs: Vec<_> = checks
            .iter()
            .map(|(algorithm, params)| {
                let (registry, scratch) = (&registry, scratch.path());
                scope.spawn(move || {
                    let params = params.as_object().unwrap();
                    conformance::check_with(registry, algorithm, params, scratch)
                        .unwrap_or_else(|breach| panic!("{algorithm} {params:?}: {breach}"))
                })
            })
            .collect();
        for run in runs {
            let passed = run.join().unwrap();
            assert!(
                passed.contains(&"a stopped run resumes to the same bits"),
                "{passed:?}"
            );
        }
    });
}

/// A plug-in that breaks a promise: FedAvg whose server steps by `1 / t` in its `t`-th round,
/// counting rounds in memory rather than in its state, so a resumed run counts from 1 again;
/// it also claims, wrongly, to reduce to FedAvg.
struct Forgetful;

/// Its server half.
struct ForgetfulServer {
    rounds: u32,
}

impl Algorithm for Forgetful {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        "forgetful"
    }

    fn paper(&self) -> &'static str {
        "none: a test's broken plug-in"
    }

    fn edge_rule(&self, _: &NoParams) -> EdgeAggregation {
        EdgeAggregation::Unsupported("a test's plug-in")
    }

    fn server(&self, _: &NoParams, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(ForgetfulServer { rounds: 0 })
    }

    fn reductions(&self) -> Vec<Reduction<NoParams>> {
        vec![Reduction::to("fedavg", NoParams {})]
    }
}

impl Strategy for ForgetfulServer {
    fn reads(&self) -> Reads {
        Reads::Sums(vec![Sum::params(Weighting::Samples)])
    }

    fn aggregate(&mut self, _: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        self.rounds += 1;
        let [mean] = input.into_sums();
        let step = 1.0 / self.rounds as f32;
        Aggregate::model(combination(&[(&mean, step), (global, 1.0 - step)]))
    }
}

#[test]
fn a_broken_promise_is_named() {
    let mut builder = Registry::builder().with_builtins();
    builder.origin(Origin::new("conformance-test", "0"));
    builder.algorithm(Forgetful).unwrap();
    let registry = builder.build();
    let scratch = tempfile::tempdir().unwrap();
    let breach = conformance::check(&registry, "forgetful", scratch.path()).unwrap_err();
    assert_eq!(
        breach.check, "a stopped run resumes to the same bits",
        "{breach}"
    );
    // The resumed run steps by 1 again in round 2, where the straight one stepped by 1/2.
    assert!(
        breach.detail.starts_with("round 2 differs: ") && breach.detail.contains("test_loss"),
        "{breach}"
    );
    // The checks after it ran: the same breach with its states spilled, and its false
    // reduction, are named too.
    let others: Vec<&str> = breach.others.iter().map(|o| o.check).collect();
    assert_eq!(
        others,
        [
            "a stopped run whose clients' states are spilled resumes to the same bits",
            "a declared reduction holds"
        ],
        "{breach}"
    );
    assert!(
        breach
            .to_string()
            .contains("\nforgetful: a declared reduction holds: round ")
    );
    let breach = conformance::check(&registry, "fedexq", scratch.path()).unwrap_err();
    assert_eq!(
        breach.to_string(),
        "fedexq: registered: no algorithm of that name is registered"
    );
}

#[test]
fn a_reduction_that_does_not_hold_is_named() {
    let mut builder = Registry::builder().with_builtins();
    builder.origin(Origin::new("conformance-test", "0"));
    builder.algorithm(Forgetful).unwrap();
    let registry = builder.build();
    let breach = conformance::reduction(
        &registry,
        "forgetful",
        0,
        tempfile::tempdir().unwrap().path(),
    )
    .unwrap_err();
    assert_eq!(breach.check, "a declared reduction holds", "{breach}");
}
