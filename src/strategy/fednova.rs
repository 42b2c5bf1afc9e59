//! FedNova: Wang et al. (2020), "Tackling the Objective Inconsistency Problem in
//! Heterogeneous Federated Optimization". Clients that take more local steps pull FedAvg
//! towards their own optimum; FedNova divides each client's change by how much work made it,
//! then scales the mean back by the effective number of steps:
//!
//! ```text
//! x ← x - τ_eff Σ_k p_k (x - y_k) / a_k        p_k = n_k / n,   τ_eff = Σ_k p_k a_k
//! ```
//!
//! `a_k = |a_k|_1` is the norm of client `k`'s accumulation vector: `τ_k` for plain SGD with
//! `τ_k` steps, and with local momentum `ρ` (section 4 of the paper)
//! `a_k = (τ_k - ρ (1 - ρ^τ_k) / (1 - ρ)) / (1 - ρ)`.
//!
//! **Momentum and weight decay.** FedNova adds nothing to local training; the server accounts
//! for `client.momentum` in `a_k` as the paper's section 4 does (and NIID-Bench's FedNova with
//! its `rho`), for a momentum buffer that starts empty each round, as fedsim's does. Weight
//! decay is part of the local loss's gradient and leaves `a_k` as it is.
//!
//! The step is computed as the combination `Σ_k p_k s_k y_k + (Σ_k p_k (1 - s_k)) x` with
//! `s_k = τ_eff / a_k`: when every client did the same work, `s_k = 1` exactly and the result
//! is FedAvg's to the bit.

use super::vector::combination;
use super::{
    Aggregate, Algorithm, Collected, EdgeAggregation, NoParams, Reduction, Round, Setting, Strategy,
};

/// FedNova: plain local SGD, and the normalising server half [`FedNovaServer`]. It has no
/// parameters beyond the local ones (`client.momentum` sets `ρ`).
#[derive(Debug, Clone, Copy, Default)]
pub struct FedNova;

impl Algorithm for FedNova {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        "fednova"
    }

    fn paper(&self) -> &'static str {
        "Wang et al. 2020, Tackling the Objective Inconsistency Problem in Heterogeneous Federated Optimization"
    }

    fn edge_rule(&self, _params: &NoParams) -> EdgeAggregation {
        EdgeAggregation::Unsupported(
            "FedNova normalises each client's update by its own local work",
        )
    }

    fn server(&self, _: &NoParams, setting: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedNovaServer::new(setting.momentum))
    }

    /// Equal clients take equal numbers of steps: FedAvg.
    fn reductions(&self) -> Vec<Reduction<NoParams>> {
        vec![Reduction::to("fedavg", NoParams {}).on_equal_clients()]
    }
}

/// The server half.
#[derive(Debug, Clone, Copy)]
pub struct FedNovaServer {
    /// The clients' local momentum `ρ`.
    momentum: f64,
}

impl FedNovaServer {
    /// A server for clients that train with local momentum `momentum`.
    pub fn new(momentum: f64) -> Self {
        Self { momentum }
    }

    /// `|a|_1` for `steps` local steps.
    fn work(&self, steps: u32) -> f64 {
        let (tau, rho) = (f64::from(steps), self.momentum);
        if rho == 0.0 {
            tau
        } else {
            (tau - rho * (1.0 - rho.powf(tau)) / (1.0 - rho)) / (1.0 - rho)
        }
    }
}

impl Strategy for FedNovaServer {
    fn aggregate(&mut self, _round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let updates = input.updates();
        let total: f64 = updates.iter().map(|u| u.num_samples as f64).sum();
        let work: Vec<f64> = updates.iter().map(|u| self.work(u.steps.max(1))).collect();
        let tau_eff: f64 = updates
            .iter()
            .zip(&work)
            .map(|(u, a)| u.num_samples as f64 * a)
            .sum::<f64>()
            / total;
        let scales: Vec<f64> = work.iter().map(|a| tau_eff / a).collect();
        let mut terms: Vec<(&[f32], f32)> = updates
            .iter()
            .zip(&scales)
            .map(|(u, s)| {
                (
                    u.params.as_slice(),
                    (u.num_samples as f64 * s / total) as f32,
                )
            })
            .collect();
        let global_weight: f64 = updates
            .iter()
            .zip(&scales)
            .map(|(u, s)| u.num_samples as f64 * (1.0 - s))
            .sum::<f64>()
            / total;
        terms.push((global, global_weight as f32));
        Aggregate::model(combination(&terms)).with("tau_eff", tau_eff)
    }
}

#[cfg(test)]
mod tests {
    use super::super::FedAvgServer;
    use super::super::testing::{round, update};
    use super::*;
    use crate::network::Update;

    fn with_steps(mut update: Update, steps: u32) -> Update {
        update.steps = steps;
        update
    }

    #[test]
    fn equal_work_gives_fedavg_to_the_bit() {
        let updates = [
            with_steps(update(0, 30, vec![0.1, 0.7, -3.3]), 5),
            with_steps(update(2, 70, vec![1.9, -0.4, 0.06]), 5),
        ];
        let global = [0.3, 0.3, 0.3];
        let nova = FedNovaServer::new(0.9)
            .aggregate_updates(&round(), &global, &updates)
            .model;
        assert_eq!(
            nova,
            FedAvgServer
                .aggregate_updates(&round(), &global, &updates)
                .model
        );
    }

    #[test]
    fn unequal_work_is_normalised_as_worked_by_hand() {
        // x = 0; client A (p = 1/2) took 1 step to y = 1, client B (p = 1/2) 3 steps to y = 6.
        // Plain SGD: a = 1 and 3, τ_eff = 2;
        // x = 0 - 2 * (1/2 * (0 - 1) / 1 + 1/2 * (0 - 6) / 3) = -2 * (-1/2 - 1) = 3
        // (FedAvg gives 3.5).
        let updates = [
            with_steps(update(0, 10, vec![1.0]), 1),
            with_steps(update(1, 10, vec![6.0]), 3),
        ];
        let nova = FedNovaServer::new(0.0).aggregate_updates(&round(), &[0.0], &updates);
        assert!((nova.model[0] - 3.0).abs() < 1e-6);
        assert_eq!(nova.metrics["tau_eff"], 2.0);
    }

    #[test]
    fn momentum_work_follows_the_paper() {
        // ρ = 0.5, τ = 2: (2 - 0.5 * (1 - 0.25) / 0.5) / 0.5 = (2 - 0.75) / 0.5 = 2.5.
        assert!((FedNovaServer::new(0.5).work(2) - 2.5).abs() < 1e-12);
    }
}
