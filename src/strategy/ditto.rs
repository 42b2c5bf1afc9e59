//! Ditto: Li et al. (2021), "Ditto: Fair and Robust Federated Learning Through
//! Personalization". The federation trains FedAvg's global model `w`, to the bit; each client
//! also keeps a personal model `v_k`, which after its round of training takes as many steps
//! of its own on
//!
//! ```text
//! F_k(v) + λ/2 |v - w_t|²      so each step uses   ∇F_k(v) + λ (v - w_t)
//! ```
//!
//! where `w_t` is the global model the client was sent (the paper's Algorithm 1, its local
//! solver SGD). `λ` trades personalisation (0: each client trains alone) against the pull of the
//! global model (large: `v_k` stays near `w_t`; `"infinity"`, the limit: `v_k` is `w_t`, and no
//! personal step is taken). A client's personal model starts as the first
//! model it is sent and lives in its state between rounds (spilled past the budget); it is what
//! the client is scored with (`personal_accuracy`). The personal steps draw their batches from
//! a stream of their own, so the update sent up, and so the global model, is FedAvg's.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, FineTuning, Objective,
    PERSONAL_MODEL, Pass, Reduction, Setting, Strategy, Trained, kept_personal_model,
};
use crate::config::check::Problems;
use crate::local::TrainError;
use crate::network::Tensors;

/// Ditto: FedAvg's server, and [`DittoClient`]'s personal models.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ditto;

impl Algorithm for Ditto {
    type Params = Params;

    fn name(&self) -> &'static str {
        "ditto"
    }

    fn paper(&self) -> &'static str {
        "Li et al. 2021, Ditto: Fair and Robust Federated Learning Through Personalization"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "lambda",
            "λ (≥ 0, or \"infinity\": the personal model is the model sent), the pull of the global model on each client's personal model",
        )]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        if let Lambda::Finite(lambda) = params.lambda {
            problems.non_negative("lambda", lambda);
        }
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(DittoClient {
            lambda: match params.lambda {
                Lambda::Finite(lambda) => Some(lambda as f32),
                Lambda::Infinite => None,
            },
        })
    }

    /// Its global model is FedAvg's, whatever `λ`; at `λ = ∞` its personal models are that
    /// global model too.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![
            Reduction::to("fedavg", Params::default()),
            Reduction::to(
                "fedavg",
                Params {
                    lambda: Lambda::Infinite,
                },
            ),
        ]
    }
}

/// Ditto's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// `λ`.
    pub lambda: Lambda,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            lambda: Lambda::Finite(0.1),
        }
    }
}

/// `λ`: a number, or its limit, which a JSON number cannot hold (`"infinity"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lambda {
    /// A finite `λ`.
    Finite(f64),
    /// `λ = ∞`: the personal model is the model sent.
    Infinite,
}

impl Serialize for Lambda {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Lambda::Finite(lambda) => serializer.serialize_f64(*lambda),
            Lambda::Infinite => serializer.serialize_str(INFINITY),
        }
    }
}

impl<'de> Deserialize<'de> for Lambda {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LambdaVisitor)
    }
}

/// How `λ = ∞` is written.
const INFINITY: &str = "infinity";

/// Reads a number or `"infinity"`.
struct LambdaVisitor;

impl serde::de::Visitor<'_> for LambdaVisitor {
    type Value = Lambda;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a number or \"{INFINITY}\"")
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Lambda, E> {
        Ok(Lambda::Finite(value))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Lambda, E> {
        Ok(Lambda::Finite(value as f64))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Lambda, E> {
        Ok(Lambda::Finite(value as f64))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Lambda, E> {
        match value {
            INFINITY => Ok(Lambda::Infinite),
            _ => Err(E::invalid_value(serde::de::Unexpected::Str(value), &self)),
        }
    }
}

/// Ditto's client half: FedAvg's training, then its personal model's steps.
#[derive(Debug, Clone, Copy)]
pub struct DittoClient {
    /// `λ`; `None` for `λ = ∞`, where the personal model is the model sent.
    pub lambda: Option<f32>,
}

impl ClientAlgorithm for DittoClient {
    fn personal_update(
        &self,
        view: &ClientView<'_>,
        state: &mut Option<Tensors>,
        trained: &Trained<'_>,
        passes: &mut dyn FineTuning,
    ) -> Result<(), TrainError> {
        // At λ = ∞ the personal model is the model sent: nothing to keep.
        let Some(lambda) = self.lambda else {
            return Ok(());
        };
        let personal = kept_personal_model(view, state.as_ref());
        let pass = Pass::new(trained.steps, view.global).with_objective(Objective {
            proximal: Some(lambda),
            ..Objective::default()
        });
        let updated = passes.train(personal, &pass)?;
        state
            .get_or_insert_with(Tensors::new)
            .insert(PERSONAL_MODEL, updated);
        Ok(())
    }

    fn personalises(&self) -> bool {
        true
    }

    fn personal_model(
        &self,
        view: &ClientView<'_>,
        state: Option<&Tensors>,
        _tuning: &mut dyn FineTuning,
    ) -> Result<Vec<f32>, TrainError> {
        Ok(kept_personal_model(view, state).to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records each pass it is asked for and answers with the start plus one.
    #[derive(Default)]
    struct Recorded(Vec<(Vec<f32>, u32, Objective, Vec<f32>)>);

    impl FineTuning for Recorded {
        fn train(&mut self, start: &[f32], pass: &Pass<'_>) -> Result<Vec<f32>, TrainError> {
            let (steps, objective) = (pass.steps, pass.objective.clone());
            self.0
                .push((start.to_vec(), steps, objective, pass.anchor.to_vec()));
            Ok(start.iter().map(|v| v + 1.0).collect())
        }
    }

    #[test]
    fn the_personal_model_takes_the_rounds_steps_towards_the_model_sent_and_is_kept() {
        let client = DittoClient { lambda: Some(0.5) };
        let (sent, trained_params) = ([1.0, 2.0], [3.0, 4.0]);
        let nothing = Tensors::new();
        let view = |global| ClientView {
            round: 1,
            client: 4,
            global,
            downlink: &nothing,
            lr: 0.1,
            personal: None,
        };
        let trained = Trained {
            params: &trained_params,
            steps: 7,
            loss_at_global: None,
            kept: &Tensors::new(),
        };
        let mut passes = Recorded::default();
        let mut state = None;
        // First round: the personal model starts as the model sent.
        client
            .personal_update(&view(&sent), &mut state, &trained, &mut passes)
            .unwrap();
        let proximal = Objective {
            proximal: Some(0.5),
            ..Objective::default()
        };
        assert_eq!(
            passes.0[0],
            (vec![1.0, 2.0], 7, proximal.clone(), vec![1.0, 2.0])
        );
        let kept = state.as_ref().unwrap().expect(PERSONAL_MODEL).to_vec();
        assert_eq!(kept, [2.0, 3.0]);
        // Next round: from its own model, pulled towards the new one sent.
        let next = [0.0, 0.5];
        client
            .personal_update(&view(&next), &mut state, &trained, &mut passes)
            .unwrap();
        assert_eq!(passes.0[1], (vec![2.0, 3.0], 7, proximal, vec![0.0, 0.5]));
        let scored = client
            .personal_model(&view(&next), state.as_ref(), &mut passes)
            .unwrap();
        assert_eq!(scored, [3.0, 4.0]);
        // A client that never trained is scored with the model sent.
        let fresh = client
            .personal_model(&view(&next), None, &mut passes)
            .unwrap();
        assert_eq!(fresh, [0.0, 0.5]);
    }

    #[test]
    fn at_lambda_infinity_the_personal_model_is_the_model_sent_and_no_step_is_taken() {
        let params: Params = serde_json::from_str(r#"{"lambda": "infinity"}"#).unwrap();
        assert_eq!(params.lambda, Lambda::Infinite);
        assert_eq!(
            serde_json::to_string(&params).unwrap(),
            r#"{"lambda":"infinity"}"#
        );
        let finite: Params = serde_json::from_str(r#"{"lambda": 2}"#).unwrap();
        assert_eq!(finite.lambda, Lambda::Finite(2.0));
        let wrong = serde_json::from_str::<Params>(r#"{"lambda": "large"}"#).unwrap_err();
        assert!(
            wrong.to_string().contains(r#"a number or "infinity""#),
            "{wrong}"
        );
        let client = DittoClient { lambda: None };
        let nothing = Tensors::new();
        let view = ClientView {
            round: 1,
            client: 0,
            global: &[1.5, -2.0],
            downlink: &nothing,
            lr: 0.1,
            personal: None,
        };
        let trained = Trained {
            params: &[0.0, 0.0],
            steps: 3,
            loss_at_global: None,
            kept: &Tensors::new(),
        };
        let (mut passes, mut state) = (Recorded::default(), None);
        client
            .personal_update(&view, &mut state, &trained, &mut passes)
            .unwrap();
        assert!(passes.0.is_empty() && state.is_none());
        let scored = client.personal_model(&view, None, &mut passes).unwrap();
        assert_eq!(scored, [1.5, -2.0]);
    }
}
