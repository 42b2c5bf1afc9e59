//! An algorithm of your own, registered beside fedsim's built-ins: FedAvg with a server step
//! size, `x ← x + η (ȳ - x)` (`ȳ` the clients' sample-weighted mean), as Reddi et al. 2021
//! ("Adaptive Federated Optimization") write FedAvg's server step. Rename it and change the
//! server half to make it yours; `fedsim::plugin` has everything a plug-in uses (the traits,
//! `vector`'s arithmetic on flat models, the conformance kit, and burn and rand at fedsim's
//! versions).
//!
//! The crate is a library (this file: the algorithm and [`registry`]) and a program
//! (`src/main.rs`: fedsim's command line over that registry), so that its own tests
//! (`tests/conformance.rs`) reach the registry as the program does.

use fedsim::plugin::vector::combination;
use fedsim::plugin::{
    Aggregate, Algorithm, Collected, EdgeAggregation, Problems, Reads, Registry, Round, Setting,
    Strategy, Sum, Weighting,
};
use serde::{Deserialize, Serialize};

/// The parameters, as the experiment file's `strategy` section gives them beside the name.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The server step size `η`; 1 is FedAvg.
    pub lr: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { lr: 1.0 }
    }
}

/// The algorithm: its name, paper, parameters and halves.
pub struct ServerStep;

impl Algorithm for ServerStep {
    type Params = Params;

    fn name(&self) -> &'static str {
        "server_step"
    }

    fn paper(&self) -> &'static str {
        "Reddi et al. 2021, Adaptive Federated Optimization (FedAvg with a server step size)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("lr", "server step size η (> 0); 1 is FedAvg")]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("lr", params.lr);
    }

    /// An aggregating scheduler may send its group's mean model: the server reads only the
    /// mean of all of them.
    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, params: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(ServerStepServer { lr: params.lr })
    }
}

/// The server half.
struct ServerStepServer {
    pub lr: f64,
}

impl Strategy for ServerStepServer {
    /// Only the sample-weighted mean of the models: the server folds it as updates arrive.
    fn reads(&self) -> Reads {
        Reads::Sums(vec![Sum::params(Weighting::Samples)])
    }

    fn aggregate(&mut self, _round: &Round<'_>, x: &[f32], input: Collected<'_>) -> Aggregate {
        let [mean] = input.into_sums();
        let lr = self.lr as f32;
        Aggregate::model(combination(&[(&mean, lr), (x, 1.0 - lr)]))
    }
}

/// fedsim's built-ins with this crate's algorithm.
pub fn registry() -> Registry {
    let mut registry = Registry::builder().with_builtins();
    registry.origin(fedsim::origin!());
    registry
        .algorithm(ServerStep)
        .expect("server_step is a name of its own");
    registry.build()
}
