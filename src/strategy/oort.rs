//! Oort: Lai, Zhu, Madhyastha and Chowdhury (2021), "Oort: Efficient Federated Learning via
//! Guided Participant Selection", OSDI. The server averages as FedAvg does; what changes is
//! who trains. Each client the server has heard from has a utility (Algorithm 1 of the paper):
//!
//! ```text
//! U(i) = stat(i) + sqrt(0.1 ln R / L(i))        stat(i) = |B_i| * loss_i, rescaled to [0, 1]
//! U(i) *= (T / t_i)^α                           when its last round took t_i > T
//! ```
//!
//! with `R` the round, `L(i)` the last round it took part in (the staleness bonus: a client not
//! heard from for long comes back into view), `t_i` its last training plus upload time on the
//! simulated clock and `T` the preferred round duration. Each round takes a share `1 - ε` of
//! its clients by **exploitation** (sampled in proportion to utility among those within
//! `cut_off` of the last place taken) and the rest by **exploration** of clients never heard
//! from (sampled in proportion to their sample counts among the largest); `ε` decays from
//! `exploration` by `exploration_decay` a round down to `exploration_min`.
//!
//! **The pacer.** `T` is the `preferred_percentile` of the durations seen. Every `pacer_step`
//! rounds the pacer compares the statistical utility exploitation brought in the last
//! `pacer_step` rounds with the `pacer_step` before; when it has stopped growing (within 10%),
//! it relaxes `T` by `pacer_delta` percentiles, so that slower clients with useful data are
//! let in.
//!
//! **From the paper to the simulator.** The statistical utility is the client's sample count
//! times its mean training loss, as the update reports it (the paper's root mean square of the
//! per-sample losses needs losses the client does not send up). Clients never heard from are
//! ranked by sample count alone: the server knows no client's speed before it has trained; one
//! whose every update missed the round's deadline stays unexplored (the server drops a late
//! update at the cutoff, before it arrives on the simulated clock), so a deadline suits Oort
//! less than its pacer's preferred duration does.
//! Oort reads each client's own loss and timings, so aggregating schedulers, which send
//! partial aggregates up, cannot run it.

use rand::seq::index;
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::selection::{Candidates, Selector};
use super::{Algorithm, EdgeAggregation, FedAvgServer, Setting, Strategy};
use crate::config::check::Problems;
use crate::history::ClientHistory;
use crate::network::{ClientId, ClientInfo, StateError, Tensors};

/// Oort: guided participant selection, with FedAvg's server.
#[derive(Debug, Clone, Copy, Default)]
pub struct Oort;

impl Algorithm for Oort {
    type Params = Params;

    fn name(&self) -> &'static str {
        "oort"
    }

    fn paper(&self) -> &'static str {
        "Lai et al. 2021, Oort: Efficient Federated Learning via Guided Participant Selection (OSDI)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "exploration",
                "share ε of each round's clients explored at first, in [0, 1]",
            ),
            (
                "exploration_decay",
                "factor ε shrinks by each round, in (0, 1]",
            ),
            ("exploration_min", "the least ε falls to, in [0, 1]"),
            (
                "alpha",
                "penalty exponent α on clients slower than the preferred duration (≥ 0)",
            ),
            (
                "cut_off",
                "exploited clients have at least this share of the last place's utility, in (0, 1]",
            ),
            (
                "preferred_percentile",
                "the preferred duration T starts at this percentile of the durations seen, in (0, 100]",
            ),
            (
                "pacer_step",
                "rounds between the pacer's looks at the utility exploited (≥ 1)",
            ),
            (
                "pacer_delta",
                "percentiles the pacer relaxes T by when utility stops growing (≥ 0)",
            ),
            (
                "sample_window",
                "unexplored clients are drawn from the largest sample_window × wanted (≥ 1)",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        let unit = |problems: &mut Problems, field: &str, value: f64| {
            problems.require((0.0..=1.0).contains(&value), field, || {
                format!("is {value}; must be in [0, 1]")
            });
        };
        unit(problems, "exploration", params.exploration);
        unit(problems, "exploration_min", params.exploration_min);
        for (field, value) in [
            ("exploration_decay", params.exploration_decay),
            ("cut_off", params.cut_off),
        ] {
            problems.require(value > 0.0 && value <= 1.0, field, || {
                format!("is {value}; must be in (0, 1]")
            });
        }
        problems.non_negative("alpha", params.alpha);
        problems.non_negative("pacer_delta", params.pacer_delta);
        let percentile = params.preferred_percentile;
        problems.require(
            percentile > 0.0 && percentile <= 100.0,
            "preferred_percentile",
            || format!("is {percentile}; must be in (0, 100]"),
        );
        problems.at_least_one("pacer_step", u64::from(params.pacer_step));
        let window = params.sample_window;
        problems.require(window >= 1.0 && window.is_finite(), "sample_window", || {
            format!("is {window}; must be at least 1")
        });
    }

    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported(
            "Oort reads each client's own loss and timings: use topology.mode \"relay\"",
        )
    }

    fn server(&self, _: &Params, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }

    fn selector(&self, params: &Params, _: &Setting<'_>) -> Box<dyn Selector> {
        Box::new(OortSelector::new(*params))
    }
}

/// Oort's parameters, with the paper's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The share `ε` of clients explored in the first round.
    pub exploration: f64,
    /// The factor `ε` shrinks by each round.
    pub exploration_decay: f64,
    /// The least `ε` falls to.
    pub exploration_min: f64,
    /// The penalty exponent `α` on slow clients.
    pub alpha: f64,
    /// The share of the last exploited place's utility a client needs to be drawn.
    pub cut_off: f64,
    /// The percentile of the durations seen that the preferred duration `T` starts at.
    pub preferred_percentile: f64,
    /// Rounds between the pacer's looks.
    pub pacer_step: u32,
    /// Percentiles the pacer relaxes `T` by.
    pub pacer_delta: f64,
    /// Unexplored clients are drawn from the largest `sample_window × wanted`.
    pub sample_window: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            exploration: 0.9,
            exploration_decay: 0.98,
            exploration_min: 0.3,
            alpha: 2.0,
            cut_off: 0.95,
            preferred_percentile: 30.0,
            pacer_step: 20,
            pacer_delta: 5.0,
            sample_window: 5.0,
        }
    }
}

/// The selector: Oort's parameters and its pacer.
#[derive(Debug, Clone)]
pub struct OortSelector {
    params: Params,
    /// The percentile of the durations seen that is the preferred duration `T` now.
    percentile: f32,
    /// The statistical utility exploitation brought in each of the last `2 * pacer_step`
    /// rounds, oldest first. Kept as `f32`, as the checkpoint keeps it, so that a resumed run
    /// paces as the uninterrupted one.
    exploited: Vec<f32>,
}

/// A client the server has heard from, as Oort weighs it.
struct Explored {
    client: ClientId,
    /// `|B_i| * loss_i`.
    statistical: f64,
    last_round: u32,
    /// Its last training plus upload time, where the server knows it.
    duration: Option<f64>,
}

impl OortSelector {
    /// A selector with `params`, before its first round.
    pub fn new(params: Params) -> Self {
        Self {
            params,
            percentile: params.preferred_percentile as f32,
            exploited: Vec::new(),
        }
    }

    /// The share of clients explored in `round`.
    fn exploration(&self, round: u32) -> f64 {
        let p = &self.params;
        let decays = i32::try_from(round.saturating_sub(1)).unwrap_or(i32::MAX);
        (p.exploration * p.exploration_decay.powi(decays)).max(p.exploration_min)
    }

    /// The utility of each explored client in `round`, in the order given, against the
    /// preferred duration `preferred`.
    fn utilities(&self, round: u32, explored: &[Explored], preferred: Option<f64>) -> Vec<f64> {
        let (low, high) = explored
            .iter()
            .map(|e| e.statistical)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), s| {
                (l.min(s), h.max(s))
            });
        let range = (high - low).max(1e-4);
        explored
            .iter()
            .map(|e| {
                let staleness =
                    (0.1 * f64::from(round).ln() / f64::from(e.last_round.max(1))).sqrt();
                let utility = (e.statistical - low) / range + staleness;
                match (e.duration, preferred) {
                    (Some(took), Some(preferred)) if took > preferred => {
                        utility * (preferred / took).powf(self.params.alpha)
                    }
                    _ => utility,
                }
            })
            .collect()
    }

    /// The preferred round duration `T`: the pacer's percentile of the durations seen of every
    /// client heard from, online now or not.
    fn preferred_duration(&self, history: &ClientHistory) -> Option<f64> {
        let mut durations: Vec<f64> = history
            .iter()
            .filter_map(|(_, seen)| seen.last_train_s.zip(seen.last_upload_s))
            .map(|(train, upload)| train + upload)
            .collect();
        if durations.is_empty() {
            return None;
        }
        durations.sort_by(f64::total_cmp);
        let rank = (f64::from(self.percentile) / 100.0 * durations.len() as f64).ceil() as usize;
        Some(durations[rank.clamp(1, durations.len()) - 1])
    }

    /// After a round whose exploitation brought `utility`: relaxes `T` when the utility
    /// exploited has stopped growing.
    fn pace(&mut self, round: u32, utility: f32) {
        let step = self.params.pacer_step as usize;
        self.exploited.push(utility);
        if self.exploited.len() > 2 * step {
            self.exploited.remove(0);
        }
        if self.exploited.len() == 2 * step && round.is_multiple_of(self.params.pacer_step) {
            let sum = |part: &[f32]| part.iter().map(|&u| f64::from(u)).sum::<f64>();
            let (last, current) = self.exploited.split_at(step);
            let (last, current) = (sum(last), sum(current));
            if (current - last).abs() <= 0.1 * last {
                self.percentile = (self.percentile + self.params.pacer_delta as f32).min(100.0);
            }
        }
    }
}

/// `amount` of `items` drawn without replacement in proportion to `weight` (evenly where fewer
/// than `amount` weights are positive).
fn draw<T: Copy>(
    rng: &mut ChaCha12Rng,
    items: &[T],
    weight: impl Fn(&T) -> f64,
    amount: usize,
) -> Vec<T> {
    // Too few positive weights leave `sample_weighted` short: every item is then as likely.
    let positive = items.iter().filter(|item| weight(item) > 0.0).count();
    let even = positive < amount;
    let weight = |i: usize| {
        if even {
            1.0
        } else {
            weight(&items[i]).max(0.0)
        }
    };
    let chosen = index::sample_weighted(rng, items.len(), weight, amount)
        .expect("weights are finite and at least 0");
    chosen.into_iter().map(|i| items[i]).collect()
}

impl Selector for OortSelector {
    fn select(&mut self, candidates: &Candidates<'_>, rng: &mut ChaCha12Rng) -> Vec<ClientId> {
        let round = candidates.round;
        let (mut explored, mut unexplored) = (Vec::new(), Vec::<ClientInfo>::new());
        for info in candidates.online.iter() {
            let seen = candidates.history.get(info.id);
            match (seen.last_loss, seen.last_round) {
                (Some(loss), Some(last_round)) => explored.push(Explored {
                    client: info.id,
                    // A diverged client's loss says nothing of its data.
                    statistical: Some(info.num_samples as f64 * loss)
                        .filter(|s| s.is_finite())
                        .unwrap_or(0.0),
                    last_round,
                    duration: seen
                        .last_train_s
                        .zip(seen.last_upload_s)
                        .map(|(t, u)| t + u),
                }),
                _ => unexplored.push(info),
            }
        }
        let wanted = candidates.wanted;
        let exploit_share = ((1.0 - self.exploration(round)) * wanted as f64).floor() as usize;
        let explore = (wanted - exploit_share.min(explored.len())).min(unexplored.len());
        let exploit = wanted - explore;

        let preferred = self.preferred_duration(candidates.history);
        let utilities = self.utilities(round, &explored, preferred);
        let mut ranked: Vec<usize> = (0..explored.len()).collect();
        ranked.sort_by(|&a, &b| {
            utilities[b]
                .total_cmp(&utilities[a])
                .then(explored[a].client.cmp(&explored[b].client))
        });
        let admitted = match exploit {
            0 => 0,
            _ => {
                let bar = utilities[ranked[exploit - 1]] * self.params.cut_off;
                ranked.iter().take_while(|&&i| utilities[i] >= bar).count()
            }
        };
        let exploited = draw(rng, &ranked[..admitted], |&i| utilities[i], exploit);
        let statistical: f64 = exploited.iter().map(|&i| explored[i].statistical).sum();
        self.pace(round, statistical as f32);

        unexplored.sort_by(|a, b| b.num_samples.cmp(&a.num_samples).then(a.id.cmp(&b.id)));
        let window = (self.params.sample_window * explore as f64).ceil() as usize;
        unexplored.truncate(window.max(explore));
        let explored_now = draw(rng, &unexplored, |c| c.num_samples as f64, explore);
        exploited
            .into_iter()
            .map(|i| explored[i].client)
            .chain(explored_now.into_iter().map(|c| c.id))
            .collect()
    }

    fn state(&self) -> Tensors {
        Tensors::new()
            .with("percentile", vec![self.percentile])
            .with("exploited", self.exploited.clone())
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        let [percentile] = <[f32; 1]>::try_from(state.require("percentile")?)
            .map_err(|_| StateError::Invalid("Oort's percentile is not one number".into()))?;
        let exploited = state.require("exploited")?;
        if exploited.len() > 2 * self.params.pacer_step as usize {
            return Err(StateError::Invalid(format!(
                "Oort's state holds {} rounds of utility, more than 2 * pacer_step",
                exploited.len()
            )));
        }
        self.percentile = percentile;
        self.exploited = exploited.to_vec();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{ClientHistory, Seen};
    use crate::seed::{Purpose, stream};
    use crate::strategy::selection::misfit;

    fn clients(n: usize) -> Vec<ClientInfo> {
        (0..n)
            .map(|id| ClientInfo {
                id,
                num_samples: 10 + id,
            })
            .collect()
    }

    #[test]
    fn the_first_round_explores_the_largest_clients() {
        let online = clients(20);
        let history = ClientHistory::new();
        let candidates = Candidates::new(1, &online, 4, &history, 0.0);
        let mut rng = stream(0, Purpose::CLIENT_SAMPLING, 1, 0);
        let chosen = OortSelector::new(Params::default()).select(&candidates, &mut rng);
        assert_eq!(misfit(&chosen, &online, 4), None);
        // The window is the 5 × 4 largest: every client here.
        assert!(chosen.iter().all(|&c| c < 20));
    }

    #[test]
    fn exploitation_prefers_high_loss_and_penalises_slow_clients() {
        let online = clients(6);
        let mut history = ClientHistory::new();
        // Clients 0 to 2: high loss, but 2 is ten times slower than the others.
        for (client, loss, took) in [(0, 5.0, 1.0), (1, 5.0, 1.0), (2, 5.0, 10.0)] {
            history.record(client, Seen::reported(1, loss, Some(took), Some(0.0)));
        }
        // Clients 3 to 5: low loss.
        for client in 3..6 {
            history.record(client, Seen::reported(1, 0.01, Some(1.0), Some(0.0)));
        }
        let params = Params {
            exploration: 0.0,
            exploration_min: 0.0,
            ..Params::default()
        };
        let mut counts = [0; 6];
        for round in 2..200 {
            let candidates = Candidates::new(round, &online, 2, &history, 0.0);
            let mut rng = stream(1, Purpose::CLIENT_SAMPLING, round, 0);
            let chosen = OortSelector::new(params).select(&candidates, &mut rng);
            assert_eq!(misfit(&chosen, &online, 2), None);
            for client in chosen {
                counts[client] += 1;
            }
        }
        assert!(counts[0] + counts[1] > 300, "{counts:?}");
        assert!(
            counts[2] < counts[0] && counts[3..].iter().all(|&c| c == 0),
            "{counts:?}"
        );
    }

    #[test]
    fn the_pacer_relaxes_the_preferred_duration_when_utility_stalls() {
        let mut selector = OortSelector::new(Params {
            pacer_step: 2,
            ..Params::default()
        });
        for round in 1..=4 {
            selector.pace(round, 1.0);
        }
        assert_eq!(selector.percentile, 35.0);
        let mut restored = OortSelector::new(selector.params);
        restored.restore(&selector.state()).unwrap();
        assert_eq!(restored.state(), selector.state());
    }
}
