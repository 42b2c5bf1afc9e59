//! Weighted sums of a round's updates, folded in client-id order one update at a time, so
//! that a tier holds one running sum instead of every update. Each term is added exactly as
//! [`super::vector::weighted_sum`] adds it (`sum += weight * value`, element by element, terms
//! in client-id order), so a folded sum equals the one computed from all the updates at once,
//! bit for bit.

use super::vector::add_scaled;
use crate::network::{ClientId, Tensors, Update};

/// How much one update counts in a sum; every weight is known before the first update
/// arrives, from the round's [`Totals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weighting {
    /// `n_k / n`: its share of the round's samples (FedAvg's weight), rounded to `f32` from
    /// the `f64` ratio.
    Samples,
    /// `1 / m` in `f32`, for `m` updates: the plain mean over the updates.
    PerUpdate,
    /// 1: the plain sum.
    One,
}

/// What a sum adds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The updates' models.
    Params,
    /// The updates' extra tensor of this name.
    Extra(&'static str),
}

/// One weighted sum over a round's updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sum {
    /// What it adds up.
    pub of: Source,
    /// How much each update counts.
    pub weighting: Weighting,
}

impl Sum {
    /// The sum of the models, each weighted as `weighting` says.
    pub const fn params(weighting: Weighting) -> Self {
        Self {
            of: Source::Params,
            weighting,
        }
    }

    /// The plain sum of the extra tensor `name`.
    pub const fn extra(name: &'static str) -> Self {
        Self {
            of: Source::Extra(name),
            weighting: Weighting::One,
        }
    }
}

/// What the weights of a round's sums depend on: the samples and the number of the updates
/// that count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Samples behind all the updates.
    pub samples: usize,
    /// Number of updates.
    pub updates: usize,
}

impl Totals {
    /// The totals of updates with these sample counts.
    pub fn of(samples: impl ExactSizeIterator<Item = usize>) -> Self {
        Self {
            updates: samples.len(),
            samples: samples.sum(),
        }
    }

    fn weight(&self, weighting: Weighting, update: &Update) -> f32 {
        match weighting {
            Weighting::Samples => (update.num_samples as f64 / self.samples as f64) as f32,
            Weighting::PerUpdate => 1.0 / self.updates as f32,
            Weighting::One => 1.0,
        }
    }
}

/// Sums being folded, with what a round's record needs of the updates.
#[derive(Debug)]
pub struct Fold {
    sums: Vec<Sum>,
    totals: Totals,
    folded: Folded,
}

/// The result of a [`Fold`]: its sums, and what the folded updates stand for together.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    /// The sums, in the order asked for (empty vectors before the first update).
    pub sums: Vec<Vec<f32>>,
    /// The updates' clients, in id order.
    pub clients: Vec<ClientId>,
    /// Their samples.
    pub num_samples: usize,
    /// `Σ train_loss_k * n_k`, added in client-id order.
    loss_sum: f64,
    /// Their local SGD steps.
    pub steps: u32,
    /// How many updates were folded.
    pub updates: usize,
}

impl Folded {
    /// The sample-weighted mean training loss of the folded updates (0 when there are none).
    pub fn train_loss(&self) -> f64 {
        self.loss_sum / self.num_samples.max(1) as f64
    }

    /// One update standing for all those folded, with `params` and `extras` as its tensors:
    /// a scheduler's partial aggregate.
    pub fn into_update(self, round: u32, params: Vec<f32>, extras: Tensors) -> Update {
        Update {
            round,
            train_loss: self.train_loss(),
            clients: self.clients,
            num_samples: self.num_samples,
            steps: self.steps,
            params,
            extras,
            encoded: Vec::new(),
        }
    }
}

impl Fold {
    /// A fold of `sums` over updates whose totals will be `totals`.
    pub fn new(sums: Vec<Sum>, totals: Totals) -> Self {
        Self {
            folded: Folded {
                sums: vec![Vec::new(); sums.len()],
                clients: Vec::new(),
                num_samples: 0,
                loss_sum: 0.0,
                steps: 0,
                updates: 0,
            },
            sums,
            totals,
        }
    }

    /// Folds the sums of `updates` (sorted by client id) at once.
    pub fn all(sums: Vec<Sum>, updates: &[Update]) -> Folded {
        let mut fold = Self::new(sums, Totals::of(updates.iter().map(|u| u.num_samples)));
        for update in updates {
            fold.add(update);
        }
        fold.finish()
    }

    /// Adds the next update in client-id order.
    pub fn add(&mut self, update: &Update) {
        let folded = &mut self.folded;
        for (sum, total) in self.sums.iter().zip(&mut folded.sums) {
            let values = match sum.of {
                Source::Params => &update.params[..],
                Source::Extra(name) => update.extras.expect(name),
            };
            if total.is_empty() {
                total.resize(values.len(), 0.0);
            }
            add_scaled(total, values, self.totals.weight(sum.weighting, update));
        }
        folded.clients.extend_from_slice(&update.clients);
        folded.num_samples += update.num_samples;
        folded.loss_sum += update.train_loss * update.num_samples as f64;
        folded.steps += update.steps;
        folded.updates += 1;
    }

    /// The sums and what the folded updates stand for.
    pub fn finish(self) -> Folded {
        self.folded
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::update;
    use super::super::vector::CHUNK;
    use super::super::vector::reference::{Weight, mean_loss, mean_params, sum_extra};
    use super::*;

    fn updates() -> Vec<Update> {
        (0..7)
            .map(|c| {
                let params = (0..CHUNK + 5)
                    .map(|i| ((i * 31 + c * 17) % 101) as f32 * 0.37 - 11.0)
                    .collect();
                let mut u = update(c, 50 + 13 * c, params);
                u.train_loss = 0.1 * c as f64 + 0.03;
                u.extras = Tensors::new().with("delta", vec![c as f32 * 0.3 - 0.7; 3]);
                u
            })
            .collect()
    }

    #[test]
    fn a_folded_mean_equals_the_mean_of_all_updates_to_the_bit() {
        let updates = updates();
        let folded = Fold::all(
            vec![Sum::params(Weighting::Samples), Sum::extra("delta")],
            &updates,
        );
        assert_eq!(folded.sums[0], mean_params(&updates, Weight::Samples));
        assert_eq!(folded.sums[1], sum_extra(&updates, "delta"));
        assert_eq!(folded.train_loss(), mean_loss(&updates));
        assert_eq!(folded.clients, (0..7).collect::<Vec<_>>());
        assert_eq!(folded.updates, 7);
    }

    #[test]
    fn per_update_weights_give_the_plain_mean() {
        let updates = [update(0, 10, vec![1.0, 2.0]), update(1, 30, vec![3.0, 6.0])];
        let folded = Fold::all(vec![Sum::params(Weighting::PerUpdate)], &updates);
        assert_eq!(folded.sums[0], [2.0, 4.0]);
    }
}
