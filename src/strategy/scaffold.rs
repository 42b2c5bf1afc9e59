//! SCAFFOLD: Karimireddy et al. (2020), "SCAFFOLD: Stochastic Controlled Averaging for
//! Federated Learning", Algorithm 1 with option II control variates.
//!
//! The server keeps a control variate `c`, each client `i` its own `c_i` (zero before its first
//! round). Both travel with the model, so SCAFFOLD's traffic is twice FedAvg's:
//!
//! ```text
//! client i, from x and c:   K steps of  y ← y - η_l (g_i(y) - c_i + c)
//!                           c_i⁺ = c_i - c + (x - y) / (K η_l)           (option II)
//!                           sends y and Δc_i = c_i⁺ - c_i;  keeps c_i⁺
//! server:                   x ← x + η_g (ȳ - x)
//!                           c ← c + (1/N) Σ_{i∈S} Δc_i                 (N: all clients)
//! ```
//!
//! `ȳ` is the sample-weighted mean of the client models, as in FedAvg (the paper's analysis
//! weighs clients equally; they coincide on balanced clients), computed as
//! `η_g ȳ + (1 - η_g) x` so that with `η_g = 1` the model step is FedAvg's to the bit. In the
//! first round every control variate is zero, so that round is FedAvg's too.
//!
//! **Momentum and weight decay.** The paper's local steps are plain SGD. With `client.momentum`
//! β, fedsim follows NIID-Bench's `train_net_scaffold` (Li et al. 2022, "Federated Learning on
//! Non-IID Data Silos"): the optimiser (momentum and weight decay included) steps on the loss's
//! gradient alone, and the correction is a step of its own after each optimiser step,
//! `y ← y - η_l (c - c_i)`, outside the momentum buffer; option II stays as written. The two
//! then agree: momentum makes the loss's steps about `1 / (1 - β)` times longer, option II's
//! `(x - y) / (K η_l)` measures the client's gradient that many times too, so `c_i` and `c` come
//! out `1 / (1 - β)` times the gradients, and the correction keeps its proportion to the
//! gradient steps it corrects. Passing the correction through the momentum buffer instead (as
//! adding it to the gradient would) lengthens it a second time: the estimate then grows by
//! about `β / (1 - β)` times the previous correction every round (nine times with β = 0.9),
//! and training diverges within a few rounds. Weight decay is part of the local loss, so `c_i`
//! estimates the gradient of the regularised loss. Without momentum the separate step and a
//! term of the gradient are the same step, and local training takes the latter.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::vector::{combination, squared_norm, weighted_sum};
use super::{
    Aggregate, Algorithm, ClientAlgorithm, ClientView, Collected, EdgeAggregation, Objective,
    Reads, Reduction, Round, Setting, Strategy, Sum, Trained, Weighting,
};
use crate::config::check::Problems;
use crate::network::{StateError, Tensors};

/// The downlink tensor holding the server's control variate `c`.
pub const CONTROL: &str = "control";
/// The uplink tensor holding a client's control variate change `Δc_i`.
pub const CONTROL_DELTA: &str = "control_delta";

/// SCAFFOLD's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Global step size `η_g`.
    pub server_lr: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { server_lr: 1.0 }
    }
}

/// SCAFFOLD: the server half [`ScaffoldServer`] and the client half [`ScaffoldClient`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Scaffold;

impl Algorithm for Scaffold {
    type Params = Params;

    fn name(&self) -> &'static str {
        "scaffold"
    }

    fn paper(&self) -> &'static str {
        "Karimireddy et al. 2020, SCAFFOLD: Stochastic Controlled Averaging for Federated Learning"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "server_lr",
            "global step size η_g (> 0); the local one is client.lr",
        )]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("server_lr", params.server_lr);
    }

    /// The control variates' changes add up across a group, so a scheduler can send their
    /// sum beside its models' mean; an update holds more than a model, so a further edge round
    /// could not start from it: one edge round.
    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Mean {
            several_edge_rounds: false,
            sums: &[CONTROL_DELTA],
        }
    }

    fn server(&self, params: &Params, _: &Setting<'_>, num_params: usize) -> Box<dyn Strategy> {
        Box::new(ScaffoldServer::new(*params, num_params))
    }

    fn client(&self, _params: &Params, _: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(ScaffoldClient)
    }

    /// Every control variate is zero in the first round: that round is FedAvg's.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![Reduction::to("fedavg", Params::default()).in_first_round()]
    }
}

/// The server half: the model step and the server control variate.
#[derive(Debug, Clone)]
pub struct ScaffoldServer {
    params: Params,
    /// The server control variate `c`.
    control: Vec<f32>,
}

impl ScaffoldServer {
    /// A server whose control variate is zero, for a model of `num_params` values.
    pub fn new(params: Params, num_params: usize) -> Self {
        Self {
            params,
            control: vec![0.0; num_params],
        }
    }
}

impl Strategy for ScaffoldServer {
    fn downlink(&self) -> Tensors {
        Tensors::new().with(CONTROL, self.control.clone())
    }

    fn reads(&self) -> Reads {
        Reads::Sums(vec![
            Sum::params(Weighting::Samples),
            Sum::extra(CONTROL_DELTA),
        ])
    }

    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let lr = self.params.server_lr as f32;
        let [mean, delta_sum] = input.into_sums();
        let model = combination(&[(&mean, lr), (global, 1.0 - lr)]);
        let share = (1.0 / round.roster.len() as f64) as f32;
        self.control = weighted_sum(&[(&self.control, 1.0), (&delta_sum, share)]);
        Aggregate::model(model).with("control_norm", squared_norm(&self.control).sqrt())
    }

    fn state(&self) -> Tensors {
        Tensors::new().with(CONTROL, self.control.clone())
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        self.control = state.require(CONTROL)?.to_vec();
        Ok(())
    }
}

/// The client half: corrected steps, and the client control variate.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScaffoldClient;

impl ClientAlgorithm for ScaffoldClient {
    fn objective(&self, view: &ClientView<'_>, state: Option<&Tensors>) -> Objective {
        let c = view.downlink.expect(CONTROL);
        let correction = match state.map(|s| s.expect(CONTROL)) {
            Some(ci) => c.iter().zip(ci).map(|(c, ci)| c - ci).collect(),
            None => c.to_vec(),
        };
        Objective {
            correction: Some(correction),
            ..Objective::default()
        }
    }

    fn finish(
        &self,
        view: &ClientView<'_>,
        state: &mut Option<Tensors>,
        trained: &Trained<'_>,
    ) -> Tensors {
        let c = view.downlink.expect(CONTROL);
        let scale = (1.0 / (f64::from(trained.steps.max(1)) * view.lr)) as f32;
        let old: Vec<f32> = match state.as_ref() {
            Some(s) => s.expect(CONTROL).to_vec(),
            None => vec![0.0; c.len()],
        };
        let mut new = Vec::with_capacity(c.len());
        let mut delta = Vec::with_capacity(c.len());
        for (((&ci, &c), &x), &y) in old.iter().zip(c).zip(view.global).zip(trained.params) {
            let updated = ci - c + (x - y) * scale;
            new.push(updated);
            delta.push(updated - ci);
        }
        *state = Some(Tensors::new().with(CONTROL, new));
        Tensors::new().with(CONTROL_DELTA, delta)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    #[test]
    fn option_two_control_variates_match_the_hand_computation() {
        // x = 1, y = 0.5 after K = 2 steps of η_l = 0.25: (x - y) / (K η_l) = 1.
        // c = 0.5 and c_i = 0.25 at the start: the correction is c - c_i = 0.25,
        // c_i⁺ = 0.25 - 0.5 + 1 = 0.75 and Δc_i = 0.5.
        let downlink = Tensors::new().with(CONTROL, vec![0.5]);
        let view = ClientView {
            round: 2,
            client: 3,
            global: &[1.0],
            downlink: &downlink,
            lr: 0.25,
            personal: None,
        };
        let mut state = Some(Tensors::new().with(CONTROL, vec![0.25]));
        let objective = ScaffoldClient.objective(&view, state.as_ref());
        assert_eq!(objective.correction, Some(vec![0.25]));
        let trained = Trained {
            params: &[0.5],
            steps: 2,
            loss_at_global: None,
            kept: &Tensors::new(),
        };
        let up = ScaffoldClient.finish(&view, &mut state, &trained);
        assert_eq!(up.expect(CONTROL_DELTA), &[0.5]);
        assert_eq!(state.unwrap().expect(CONTROL), &[0.75]);
    }

    #[test]
    fn the_server_moves_its_control_by_the_mean_change_over_all_clients() {
        // Ten clients in the federation, two report Δc of 1 and 3: c = 0 + 4 / 10.
        let mut server = ScaffoldServer::new(Params { server_lr: 0.5 }, 1);
        let mut a = update(0, 10, vec![3.0]);
        a.extras = Tensors::new().with(CONTROL_DELTA, vec![1.0]);
        let mut b = update(1, 10, vec![5.0]);
        b.extras = Tensors::new().with(CONTROL_DELTA, vec![3.0]);
        let next = server.aggregate_updates(&round(), &[0.0], &[a, b]);
        // x = 0 + 0.5 * (4 - 0) = 2.
        assert_eq!(next.model, vec![2.0]);
        assert!((server.control[0] - 0.4).abs() < 1e-7);
    }
}
