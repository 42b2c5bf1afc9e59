//! Power-of-Choice: Cho, Wang and Joshi (2022), "Towards Understanding Biased Client Selection
//! in Federated Learning", AISTATS. Each round the server draws a candidate set of `d` clients
//! without replacement, each with probability proportional to its share of the data, asks them
//! for their loss on the current global model, and has the `m` of highest loss train
//! (`m` = `federation.clients_per_round`). The paper shows that favouring clients of higher
//! loss speeds convergence, at the cost of a bias that a larger `d` makes stronger. The server
//! averages as FedAvg does.
//!
//! The probe is a real evaluation: each candidate measures the global model's mean loss over
//! its own training data (one pass at its speed, charged to the simulated clock), the model
//! travels down and the loss up on the links, and `metrics.jsonl` lists the candidates' losses
//! under `probed`. With `d` equal to the clients per round every candidate trains, so nothing
//! is probed, and on clients of equal size the candidates are FedAvg's uniform draw: the run is
//! FedAvg's to the bit.

use rand::seq::index;
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::selection::{Candidates, Selector, Uniform};
use super::{Algorithm, EdgeAggregation, FedAvgServer, Reduction, Setting, Strategy};
use crate::config::check::Problems;
use crate::network::{ClientId, ClientInfo};

/// Power-of-Choice selection, with FedAvg's server.
#[derive(Debug, Clone, Copy, Default)]
pub struct PowerOfChoice;

impl Algorithm for PowerOfChoice {
    type Params = Params;

    fn name(&self) -> &'static str {
        "power_of_choice"
    }

    fn paper(&self) -> &'static str {
        "Cho, Wang and Joshi 2022, Towards Understanding Biased Client Selection in Federated Learning (AISTATS)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "d",
            "candidates probed each round (every online client where fewer are online), at least federation.clients_per_round; equal to it gives FedAvg",
        )]
    }

    fn check(&self, params: &Params, setting: &Setting<'_>, problems: &mut Problems) {
        problems.at_least_one("d", params.d as u64);
        if let Some(per_round) = setting.clients_per_round
            && params.d < per_round
        {
            problems.add(
                "d",
                format!(
                    "is {}; the candidates must be at least federation.clients_per_round ({per_round})",
                    params.d
                ),
            );
        }
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn selector(&self, params: &Params, _: &Setting<'_>) -> Box<dyn Selector> {
        Box::new(PowerOfChoiceSelector { d: params.d })
    }

    /// As many candidates as clients per round: every candidate trains.
    fn reductions(&self) -> Vec<Reduction<Params>> {
        vec![
            Reduction::to("fedavg", Params { d: 4 })
                .on_equal_clients()
                .with_setting("federation.clients_per_round", "4"),
        ]
    }
}

/// Power-of-Choice's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Candidates probed each round.
    pub d: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self { d: 20 }
    }
}

/// The selector: `d` candidates drawn by data share, the `wanted` of highest loss.
#[derive(Debug, Clone, Copy)]
pub struct PowerOfChoiceSelector {
    /// Candidates probed each round.
    pub d: usize,
}

impl Selector for PowerOfChoiceSelector {
    fn probe(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        let d = self.d.min(candidates.online.len());
        if d <= candidates.wanted {
            return Vec::new();
        }
        draw_by_data_share(candidates, d, rng)
    }

    fn select(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        if candidates.probed.is_empty() {
            return draw_by_data_share(candidates, candidates.wanted, rng);
        }
        let mut by_loss = candidates.probed.to_vec();
        by_loss.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut chosen: Vec<ClientId> = by_loss
            .into_iter()
            .take(candidates.wanted)
            .map(|(client, _)| client)
            .collect();
        // Fewer answers than clients wanted (a probe failed and was dropped): the rest are
        // drawn by data share from the clients not chosen.
        let short = candidates.wanted - chosen.len();
        if short > 0 {
            let rest: Vec<ClientInfo> = candidates
                .online
                .iter()
                .filter(|c| !chosen.contains(&c.id))
                .collect();
            let rest = Candidates {
                online: (&rest).into(),
                ..*candidates
            };
            chosen.extend(draw_by_data_share(&rest, short, rng));
        }
        chosen
    }
}

/// `amount` of the online clients drawn without replacement, each with probability in
/// proportion to its sample count. Where every client holds as many samples, that is the
/// uniform draw, made as [`Uniform`] makes it.
fn draw_by_data_share(
    candidates: &Candidates<'_>,
    amount: usize,
    rng: &mut ChaCha12Rng,
) -> Vec<ClientId> {
    let online: Vec<ClientInfo> = candidates.online.iter().collect();
    let equal = online
        .windows(2)
        .all(|w| w[0].num_samples == w[1].num_samples);
    if equal {
        return Uniform.select(&candidates.wanting(amount), rng);
    }
    let weight = |i: usize| online[i].num_samples as f64;
    index::sample_weighted(rng, online.len(), weight, amount)
        .expect("sample counts are finite and at least 0")
        .into_iter()
        .map(|i| online[i].id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ClientHistory;
    use crate::network::ClientInfo;
    use crate::seed::{Purpose, stream};

    fn clients(samples: &[usize]) -> Vec<ClientInfo> {
        samples
            .iter()
            .enumerate()
            .map(|(id, &num_samples)| ClientInfo { id, num_samples })
            .collect()
    }

    #[test]
    fn the_candidates_of_highest_loss_train() {
        let online = clients(&[10, 20, 30, 40, 50, 60]);
        let history = ClientHistory::new();
        let candidates = Candidates::new(1, &online, 2, &history, 0.0);
        let mut selector = PowerOfChoiceSelector { d: 4 };
        let mut rng = stream(3, Purpose::CLIENT_SAMPLING, 1, 0);
        let mut asked = selector.probe(&candidates, &mut rng);
        asked.sort_unstable();
        assert_eq!(asked.len(), 4);
        let probed: Vec<(ClientId, f64)> = asked.iter().map(|&c| (c, c as f64 % 3.0)).collect();
        let mut chosen = selector.select(&candidates.with_probed(&probed), &mut rng);
        chosen.sort_unstable();
        let mut best = probed.clone();
        best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut expected: Vec<ClientId> = best[..2].iter().map(|(c, _)| *c).collect();
        expected.sort_unstable();
        assert_eq!(chosen, expected);
    }

    #[test]
    fn with_as_many_candidates_as_wanted_nothing_is_probed_and_equal_clients_draw_uniformly() {
        let online = clients(&[25; 8]);
        let history = ClientHistory::new();
        let candidates = Candidates::new(5, &online, 3, &history, 0.0);
        let mut selector = PowerOfChoiceSelector { d: 3 };
        let mut rng = stream(9, Purpose::CLIENT_SAMPLING, 5, 0);
        assert!(selector.probe(&candidates, &mut rng).is_empty());
        let chosen = selector.select(&candidates, &mut rng);
        let mut uniform_rng = stream(9, Purpose::CLIENT_SAMPLING, 5, 0);
        assert_eq!(chosen, Uniform.select(&candidates, &mut uniform_rng));
    }

    #[test]
    fn too_few_answers_are_topped_up_from_the_other_clients() {
        let online = clients(&[10, 20, 30, 40]);
        let history = ClientHistory::new();
        let probed = [(2, 0.5)];
        let candidates = Candidates::new(1, &online, 3, &history, 0.0).with_probed(&probed);
        let mut rng = stream(3, Purpose::CLIENT_SAMPLING, 1, 0);
        let chosen = PowerOfChoiceSelector { d: 4 }.select(&candidates, &mut rng);
        assert_eq!(chosen[0], 2);
        assert_eq!(
            crate::strategy::selection::misfit(&chosen, &online, 3),
            None
        );
    }

    #[test]
    fn larger_clients_are_likelier_candidates() {
        let online = clients(&[1, 1, 1, 1, 1000, 1000]);
        let history = ClientHistory::new();
        let candidates = Candidates::new(1, &online, 1, &history, 0.0);
        let mut large = 0;
        for round in 1..200 {
            let mut rng = stream(0, Purpose::CLIENT_SAMPLING, round, 0);
            let asked = PowerOfChoiceSelector { d: 2 }.probe(&candidates, &mut rng);
            large += asked.iter().filter(|&&c| c >= 4).count();
        }
        assert!(large > 350, "{large}");
    }
}
