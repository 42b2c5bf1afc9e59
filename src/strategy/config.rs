//! The experiment file's `strategy` section: which algorithm, with which parameters, and what
//! that implies for the rest of the experiment.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::adaptive::{self, Adaptive, Rule};
use super::fedavgm::{self, FedAvgM};
use super::feddyn::{self, FedDyn, FedDynClient};
use super::fednova::{self, FedNova};
use super::fedprox::{self, ProximalClient};
use super::krum::{self, Krum};
use super::median::{self, Median};
use super::qffl::{self, QFedAvg, QFflClient};
use super::scaffold::{self, Scaffold, ScaffoldClient};
use super::trimmed_mean::{self, TrimmedMean};
use super::{ClientAlgorithm, EdgeAggregation, FedAvg, PlainClient, Strategy};
use crate::config::ClientConfig;

/// An algorithm and its parameters: `{"name": "fedadam", "server_lr": 0.01, ...}`. Every
/// parameter has a default; unknown ones are rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name")]
pub enum StrategyConfig {
    /// FedAvg (the default).
    #[serde(rename = "fedavg")]
    FedAvg(NoParams),
    /// FedAvg with server momentum.
    #[serde(rename = "fedavgm")]
    FedAvgM(fedavgm::Params),
    /// Adaptive server optimisation with Adagrad.
    #[serde(rename = "fedadagrad")]
    FedAdagrad(adaptive::AdagradParams),
    /// Adaptive server optimisation with Adam.
    #[serde(rename = "fedadam")]
    FedAdam(adaptive::Params),
    /// Adaptive server optimisation with Yogi.
    #[serde(rename = "fedyogi")]
    FedYogi(adaptive::Params),
    /// FedAvg with a proximal term in local training.
    #[serde(rename = "fedprox")]
    FedProx(fedprox::Params),
    /// Control variates against client drift.
    #[serde(rename = "scaffold")]
    Scaffold(scaffold::Params),
    /// Averaging normalised by local work.
    #[serde(rename = "fednova")]
    FedNova(fednova::Params),
    /// Dynamic regularisation.
    #[serde(rename = "feddyn")]
    FedDyn(feddyn::Params),
    /// Fair resource allocation (q-FedAvg).
    #[serde(rename = "qffl")]
    QFfl(qffl::Params),
    /// Coordinate-wise median.
    #[serde(rename = "median")]
    Median(median::Params),
    /// Coordinate-wise trimmed mean.
    #[serde(rename = "trimmed_mean")]
    TrimmedMean(trimmed_mean::Params),
    /// Krum and Multi-Krum.
    #[serde(rename = "krum")]
    Krum(krum::Params),
}

/// The parameters of an algorithm that has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

impl Default for StrategyConfig {
    fn default() -> Self {
        StrategyConfig::FedAvg(NoParams {})
    }
}

/// One algorithm as `fedsim strategies` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Description {
    /// The `name` to give in the experiment file.
    pub name: &'static str,
    /// The paper it follows.
    pub paper: &'static str,
    /// Whether an aggregating scheduler may pre-combine its group, and how.
    pub edge: EdgeAggregation,
    /// Its parameters: name, default (as JSON) and meaning.
    pub params: Vec<(String, Value, &'static str)>,
}

/// What is known of an algorithm besides its parameters.
struct Facts {
    /// The `name` in the experiment file.
    name: &'static str,
    /// The paper it follows.
    paper: &'static str,
    /// What each parameter means.
    docs: &'static [(&'static str, &'static str)],
    /// How an aggregating scheduler may pre-combine its group.
    edge: EdgeAggregation,
}

/// Why the robust rules cannot run under aggregating schedulers.
const ROBUST: &str = "a robust rule must see every client's update: use topology.mode \"relay\"";

impl StrategyConfig {
    /// The algorithm's name in the experiment file.
    pub fn name(&self) -> &'static str {
        self.facts().name
    }

    /// What `fedsim strategies` and validation need to know of the algorithm.
    fn facts(&self) -> Facts {
        let any = EdgeAggregation::Mean {
            several_edge_rounds: true,
            sums: &[],
        };
        match self {
            Self::FedAvg(_) => Facts {
                name: "fedavg",
                paper: "McMahan et al. 2017, Communication-Efficient Learning of Deep Networks from Decentralized Data",
                docs: &[],
                edge: any,
            },
            Self::FedAvgM(_) => Facts {
                name: "fedavgm",
                paper: "Hsu, Qi and Brown 2019, Measuring the Effects of Non-Identical Data Distribution for Federated Visual Classification",
                docs: fedavgm::DOCS,
                edge: any,
            },
            Self::FedAdagrad(_) => Facts {
                name: "fedadagrad",
                paper: "Reddi et al. 2021, Adaptive Federated Optimization",
                docs: adaptive::ADAGRAD_DOCS,
                edge: any,
            },
            Self::FedAdam(_) => Facts {
                name: "fedadam",
                paper: "Reddi et al. 2021, Adaptive Federated Optimization",
                docs: adaptive::DOCS,
                edge: any,
            },
            Self::FedYogi(_) => Facts {
                name: "fedyogi",
                paper: "Reddi et al. 2021, Adaptive Federated Optimization",
                docs: adaptive::DOCS,
                edge: any,
            },
            Self::FedProx(_) => Facts {
                name: "fedprox",
                paper: "Li et al. 2020, Federated Optimization in Heterogeneous Networks",
                docs: fedprox::DOCS,
                edge: any,
            },
            Self::Scaffold(_) => Facts {
                name: "scaffold",
                paper: "Karimireddy et al. 2020, SCAFFOLD: Stochastic Controlled Averaging for Federated Learning",
                docs: scaffold::DOCS,
                edge: EdgeAggregation::Mean {
                    several_edge_rounds: false,
                    sums: &[scaffold::CONTROL_DELTA],
                },
            },
            Self::FedNova(_) => Facts {
                name: "fednova",
                paper: "Wang et al. 2020, Tackling the Objective Inconsistency Problem in Heterogeneous Federated Optimization",
                docs: &[],
                edge: EdgeAggregation::Unsupported(
                    "FedNova normalises each client's update by its own local work",
                ),
            },
            Self::FedDyn(_) => Facts {
                name: "feddyn",
                paper: "Acar et al. 2021, Federated Learning Based on Dynamic Regularization",
                docs: feddyn::DOCS,
                edge: EdgeAggregation::Unsupported(
                    "FedDyn averages client models with equal weights and counts every client's change",
                ),
            },
            Self::QFfl(_) => Facts {
                name: "qffl",
                paper: "Li, Sanjabi, Beirami and Smith 2020, Fair Resource Allocation in Federated Learning",
                docs: qffl::DOCS,
                edge: EdgeAggregation::Unsupported("q-FFL weighs each client by its own loss"),
            },
            Self::Median(_) => Facts {
                name: "median",
                paper: "Yin et al. 2018, Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates",
                docs: &[],
                edge: EdgeAggregation::Unsupported(ROBUST),
            },
            Self::TrimmedMean(_) => Facts {
                name: "trimmed_mean",
                paper: "Yin et al. 2018, Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates",
                docs: trimmed_mean::DOCS,
                edge: EdgeAggregation::Unsupported(ROBUST),
            },
            Self::Krum(_) => Facts {
                name: "krum",
                paper: "Blanchard et al. 2017, Machine Learning with Adversaries: Byzantine Tolerant Gradient Descent",
                docs: krum::DOCS,
                edge: EdgeAggregation::Unsupported(ROBUST),
            },
        }
    }

    /// How an aggregating scheduler may pre-combine its group's updates.
    pub fn edge_aggregation(&self) -> EdgeAggregation {
        self.facts().edge
    }

    /// Every rule the parameters break, as (field under `strategy`, message).
    pub fn problems(&self, clients_per_round: usize) -> Vec<(&'static str, String)> {
        match self {
            Self::FedAvg(_) | Self::FedNova(_) | Self::Median(_) => Vec::new(),
            Self::FedAvgM(p) => p.problems(),
            Self::FedAdagrad(p) => p.general().problems(),
            Self::FedAdam(p) | Self::FedYogi(p) => p.problems(),
            Self::FedProx(p) => p.problems(),
            Self::Scaffold(p) => p.problems(),
            Self::FedDyn(p) => p.problems(),
            Self::QFfl(p) => p.problems(),
            Self::TrimmedMean(p) => p.problems(),
            Self::Krum(p) => p.problems(clients_per_round),
        }
    }

    /// The server half, for a model of `num_params` values trained by clients set up as
    /// `client`.
    pub fn server(&self, client: &ClientConfig, num_params: usize) -> Box<dyn Strategy> {
        match *self {
            Self::FedAvg(_) | Self::FedProx(_) => Box::new(FedAvg),
            Self::FedAvgM(p) => Box::new(FedAvgM::new(p)),
            Self::FedAdagrad(p) => Box::new(Adaptive::new(Rule::Adagrad, p.general())),
            Self::FedAdam(p) => Box::new(Adaptive::new(Rule::Adam, p)),
            Self::FedYogi(p) => Box::new(Adaptive::new(Rule::Yogi, p)),
            Self::Scaffold(p) => Box::new(Scaffold::new(p, num_params)),
            Self::FedNova(_) => Box::new(FedNova::new(client.momentum)),
            Self::FedDyn(p) => Box::new(FedDyn::new(p, num_params)),
            Self::QFfl(p) => Box::new(QFedAvg::new(p, client.lr, client.momentum)),
            Self::Median(_) => Box::new(Median),
            Self::TrimmedMean(p) => Box::new(TrimmedMean::new(p)),
            Self::Krum(p) => Box::new(Krum::new(p)),
        }
    }

    /// The client half.
    pub fn client(&self) -> Arc<dyn ClientAlgorithm> {
        match *self {
            Self::FedProx(p) => Arc::new(ProximalClient { mu: p.mu as f32 }),
            Self::Scaffold(_) => Arc::new(ScaffoldClient),
            Self::FedDyn(p) => Arc::new(FedDynClient {
                alpha: p.alpha as f32,
            }),
            Self::QFfl(_) => Arc::new(QFflClient),
            _ => Arc::new(PlainClient),
        }
    }
}

/// A parameter that must be a finite number greater than 0, and its problem if it is not.
pub(super) fn positive(field: &'static str, value: f64) -> Option<(&'static str, String)> {
    (!(value > 0.0 && value.is_finite()))
        .then(|| (field, format!("is {value}; must be greater than 0")))
}

/// A parameter that must be a finite number of at least 0, and its problem if it is not.
pub(super) fn non_negative(field: &'static str, value: f64) -> Option<(&'static str, String)> {
    (!(value >= 0.0 && value.is_finite()))
        .then(|| (field, format!("is {value}; must be at least 0")))
}

/// A parameter that must lie in `[0, below)`, and its problem if it does not.
pub(super) fn fraction_below(
    field: &'static str,
    value: f64,
    below: f64,
) -> Option<(&'static str, String)> {
    (!(0.0..below).contains(&value))
        .then(|| (field, format!("is {value}; must be in [0, {below})")))
}

/// Every algorithm, with its defaults, for `fedsim strategies`.
pub fn catalog() -> Vec<Description> {
    let all = [
        StrategyConfig::FedAvg(NoParams {}),
        StrategyConfig::FedAvgM(Default::default()),
        StrategyConfig::FedAdagrad(Default::default()),
        StrategyConfig::FedAdam(Default::default()),
        StrategyConfig::FedYogi(Default::default()),
        StrategyConfig::FedProx(Default::default()),
        StrategyConfig::Scaffold(Default::default()),
        StrategyConfig::FedNova(Default::default()),
        StrategyConfig::FedDyn(Default::default()),
        StrategyConfig::QFfl(Default::default()),
        StrategyConfig::Median(Default::default()),
        StrategyConfig::TrimmedMean(Default::default()),
        StrategyConfig::Krum(Default::default()),
    ];
    all.iter()
        .map(|config| {
            let Facts {
                name,
                paper,
                docs,
                edge,
            } = config.facts();
            let defaults = serde_json::to_value(config).expect("a strategy always serialises");
            let params = docs
                .iter()
                .map(|&(param, doc)| (param.to_string(), defaults[param].clone(), doc))
                .collect();
            Description {
                name,
                paper,
                edge,
                params,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parameter_is_documented_and_every_documented_one_exists() {
        for description in catalog() {
            let config: StrategyConfig =
                serde_json::from_value(serde_json::json!({ "name": description.name })).unwrap();
            let Value::Object(fields) = serde_json::to_value(&config).unwrap() else {
                panic!("a strategy serialises as an object");
            };
            let mut serialised: Vec<&String> = fields.keys().filter(|k| *k != "name").collect();
            serialised.sort();
            let mut documented: Vec<&String> = description.params.iter().map(|p| &p.0).collect();
            documented.sort();
            assert_eq!(serialised, documented, "{}", description.name);
        }
    }

    #[test]
    fn parameters_take_defaults_and_unknown_ones_are_rejected() {
        let config: StrategyConfig =
            serde_json::from_str(r#"{"name": "fedadam", "beta1": 0.5}"#).unwrap();
        let StrategyConfig::FedAdam(params) = config else {
            panic!("parsed as {config:?}");
        };
        assert_eq!((params.beta1, params.beta2), (0.5, 0.99));
        let error = serde_json::from_str::<StrategyConfig>(r#"{"name": "fedadam", "beta3": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `beta3`"), "{error}");
        let error = serde_json::from_str::<StrategyConfig>(r#"{"name": "fedavg", "mu": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `mu`"), "{error}");
    }
}
