//! FedRep: Collins et al. (2021), "Exploiting Shared Representations for Personalized
//! Federated Learning". As FedPer, the body (the representation) is shared and averaged as
//! FedAvg averages it, and the head stays with each client; unlike FedPer, a client trains the
//! two apart: first its head alone on the body it was sent, then the body alone under its new
//! head, so the representation learns from heads already fitted to each client's labels.
//!
//! The split of a client's local work follows the authors' code: of its steps (`client.epochs`
//! epochs, or those `client.work` gives), the last `body_epochs` epochs' worth train the body and the steps before
//! them train the head; the paper's experiments use 10 epochs, the last one for the body
//! (`client.epochs` 10, `body_epochs` 1). Where that would leave the body more than half of the
//! steps (a local work of one epoch), it takes the second half (rounded up) and the head the
//! first, rather than leave the head unfitted. With no personal layer, every step trains the
//! whole model: FedAvg to the bit. Only the body travels; each client
//! is scored with the body sent and its own head (`personal_accuracy`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    Algorithm, ClientAlgorithm, ClientView, EdgeAggregation, FedAvgServer, PersonalLayers,
    Reduction, Setting, Strategy,
};
use crate::config::check::Problems;
use crate::local::{LocalTraining, TrainError, TrainedNet};
use crate::model::{Net, Sharing};
use crate::network::Tensors;

/// FedRep: FedAvg's server over the body, and [`FedRepClient`]'s alternating training.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedRep;

impl Algorithm for FedRep {
    type Params = Params;

    fn name(&self) -> &'static str {
        "fedrep"
    }

    fn paper(&self) -> &'static str {
        "Collins et al. 2021, Exploiting Shared Representations for Personalized Federated Learning"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "personal",
                "the layers each client keeps (its head): layer names of the model, \"head\" (the last), \"body\" (the others) or \"norm\" (the normalisation layers)",
            ),
            (
                "body_epochs",
                "epochs at the end of each client's local work that train the body (≥ 1); the steps before train the head",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.at_least_one("body_epochs", u64::from(params.body_epochs));
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn client(&self, params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(FedRepClient {
            body_epochs: params.body_epochs,
        })
    }

    fn personal_layers(&self, params: &Params) -> PersonalLayers {
        PersonalLayers {
            field: "personal",
            names: params.personal.clone(),
        }
    }

    /// With no personal layer, FedAvg.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to(
            "fedavg",
            Params {
                personal: Vec::new(),
                ..Params::default()
            },
        )]
    }
}

/// FedRep's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The layers each client keeps: layer names, `head` or `body`.
    pub personal: Vec<String>,
    /// Epochs at the end of the local work that train the body.
    pub body_epochs: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            personal: vec!["head".to_string()],
            body_epochs: 1,
        }
    }
}

/// FedRep's client half: the head's steps, then the body's.
#[derive(Debug, Clone, Copy)]
pub struct FedRepClient {
    /// Epochs at the end of the local work that train the body.
    pub body_epochs: u32,
}

impl ClientAlgorithm for FedRepClient {
    fn train(
        &self,
        mut local: LocalTraining<'_>,
        net: Net,
        view: &ClientView<'_>,
        _state: Option<&Tensors>,
    ) -> Result<TrainedNet, TrainError> {
        let personal = personal_params(&net, view.personal);
        let budget = local.budget();
        let body_steps = match personal.contains(&true) {
            true => (self.body_epochs.saturating_mul(local.epoch_steps())).min(budget.div_ceil(2)),
            false => budget,
        };
        let head_steps = budget - body_steps;
        let mut optimizer = local.optimizer();
        let (mut net, mut step) = (net, 0);
        while let Some(batch) = local.next_batch()? {
            let loss = local.cross_entropy(net.forward(batch.input), batch.labels);
            local.record_loss(&loss)?;
            let mut grads = net.gradients(loss);
            let training_head = step < head_steps;
            net.freeze(&mut grads, &|index| personal[index] != training_head);
            net = local.step(net, &mut optimizer, grads);
            step += 1;
        }
        Ok(local.finish(net))
    }

    fn personalises(&self) -> bool {
        true
    }
}

/// Whether each parameter of `net` (in flat-vector order) is one of the client's own under
/// `sharing`; none is where every value is shared.
fn personal_params(net: &Net, sharing: Option<&Sharing>) -> Vec<bool> {
    let mut personal = Vec::new();
    let mut offset = 0;
    net.walk(&mut |site| {
        personal.push(sharing.is_some_and(|s| s.is_personal(offset)));
        offset += site.shape.iter().product::<usize>();
    });
    personal
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testing::{close, logistic_gradient, train_toy};

    #[test]
    fn the_head_trains_first_and_the_body_last_each_with_the_other_frozen() {
        // Logistic regression has one layer, the head: two head steps take SGD's steps, and
        // the body's last step moves nothing.
        let start = [0.5f32, -0.25, 0.0, 0.75, 0.1, -0.1];
        let client = FedRepClient { body_epochs: 1 };
        let run = train_toy(&client, &[], &["head"], (&start, 3, 0.5), None);
        let mut w: Vec<f64> = start.iter().map(|&v| f64::from(v)).collect();
        for _ in 0..2 {
            let g = logistic_gradient(&w);
            w.iter_mut().zip(g).for_each(|(w, g)| *w -= 0.5 * g);
        }
        assert!(
            close(&run.params, &w, 1e-6),
            "{:?} against {w:?}",
            run.params
        );
        // A single step trains the body and leaves the head as it was: the MLP 2→3→2 holds 9
        // values of body, then 8 of head.
        let start: Vec<f32> = (0..17).map(|i| ((i * 7) % 5) as f32 / 5.0 - 0.4).collect();
        let run = train_toy(&client, &[3], &["head"], (&start, 1, 0.5), None);
        assert_eq!(run.params[9..], start[9..]);
        assert_ne!(run.params[..9], start[..9]);
        // Two steps of one epoch each: the head's, then the body's.
        let halves = train_toy(
            &FedRepClient { body_epochs: 1 },
            &[3],
            &["head"],
            (&start, 2, 0.5),
            None,
        );
        let body_first = train_toy(&client, &[3], &["head"], (&start, 1, 0.5), None);
        assert_ne!(halves.params[9..], start[9..]);
        assert_ne!(halves.params[..9], body_first.params[..9]);
    }
}
