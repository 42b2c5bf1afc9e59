//! Power-of-Choice as a user writes it (Cho, Wang and Joshi 2022, "Towards Understanding
//! Biased Client Selection in Federated Learning", AISTATS): each round, `d` online clients
//! drawn at random are asked for their loss on the global model, and the `m` of highest loss
//! train. Only the selection changes: the clients and the server are FedAvg's.
//!
//! The probe is the simulator's own: the candidates measure the loss on their data, charged to
//! the links and the clock, and `metrics.jsonl` lists the answers under `probed`. fedsim's
//! built-in `power_of_choice` draws the candidates by data share; this one draws them
//! uniformly, as the paper's `π_rand` variant does.

use fedsim::plugin::{
    Algorithm, Candidates, ClientId, ClientInfo, EdgeAggregation, FedAvgServer, Online, Problems,
    Selector, Setting, Strategy,
};
use rand::seq::index;
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

/// The parameter: `{"name": "loss_first", "d": 20}`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Candidates asked each round.
    pub d: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self { d: 20 }
    }
}

/// Loss-first selection with FedAvg's halves.
pub struct LossFirst;

impl Algorithm for LossFirst {
    type Params = Params;

    fn name(&self) -> &'static str {
        "loss_first"
    }

    fn paper(&self) -> &'static str {
        "Cho, Wang and Joshi 2022, Towards Understanding Biased Client Selection in Federated Learning (uniform candidates)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("d", "candidates asked for their loss each round (≥ 1)")]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.at_least_one("d", params.d as u64);
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn selector(&self, params: &Params, _: &Setting<'_>) -> Box<dyn Selector> {
        Box::new(LossFirstSelector { d: params.d })
    }
}

/// The selector.
struct LossFirstSelector {
    d: usize,
}

/// `amount` of `online`, drawn uniformly without replacement.
fn draw(online: Online<'_>, amount: usize, rng: &mut ChaCha12Rng) -> Vec<ClientId> {
    index::sample(rng, online.len(), amount.min(online.len()))
        .into_iter()
        .map(|i| online.get(i).id)
        .collect()
}

impl Selector for LossFirstSelector {
    /// `d` candidates, unless that is no more than the clients wanted (then all of them train).
    fn probe(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        if self.d <= candidates.wanted {
            return Vec::new();
        }
        draw(candidates.online, self.d, rng)
    }

    /// The clients of highest loss among the answers; if fewer answered than are wanted (a
    /// probe failed), the rest drawn from the others.
    fn select(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        let mut by_loss = candidates.probed.to_vec();
        by_loss.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut chosen: Vec<ClientId> = by_loss
            .iter()
            .take(candidates.wanted)
            .map(|&(client, _)| client)
            .collect();
        let others: Vec<ClientInfo> = candidates
            .online
            .iter()
            .filter(|c| !chosen.contains(&c.id))
            .collect();
        chosen.extend(draw(
            (&others).into(),
            candidates.wanted - chosen.len(),
            rng,
        ));
        chosen
    }
}
