//! The RDP accountant: the RDP of a mechanism at a grid of orders, composed over steps by
//! adding, and converted to an `(ε, δ)` guarantee by the best order.

use super::rdp::{self, Series};

/// How each step chooses whom it touches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Each member independently with probability `rate` (neighbouring data sets add or remove
    /// one member).
    Poisson {
        /// The probability.
        rate: f64,
    },
    /// A fixed fraction `rate` of the members, drawn without replacement (neighbouring data
    /// sets replace one member, and the population's size is public).
    FixedSize {
        /// The fraction: the sample's size over the population's.
        rate: f64,
    },
}

impl Sampling {
    /// The sampling rate.
    pub fn rate(&self) -> f64 {
        match *self {
            Sampling::Poisson { rate } | Sampling::FixedSize { rate } => rate,
        }
    }
}

/// One step of the subsampled Gaussian mechanism.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SubsampledGaussian {
    /// The noise's standard deviation over the sensitivity of what it is added to.
    pub noise_multiplier: f64,
    /// How the step samples.
    pub sampling: Sampling,
    /// How fractional orders sum their series (Poisson sampling only).
    pub series: Series,
}

impl SubsampledGaussian {
    /// The step's RDP at `order`.
    pub fn rdp(&self, order: f64) -> f64 {
        match self.sampling {
            Sampling::Poisson { rate } => {
                rdp::poisson(rate, self.noise_multiplier, order, self.series)
            }
            Sampling::FixedSize { rate } => rdp::fixed_size(rate, self.noise_multiplier, order),
        }
    }
}

/// How an RDP guarantee becomes an `(ε, δ)` one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Conversion {
    /// Balle et al. (2020, "Hypothesis Testing Interpretations and Renyi Differential
    /// Privacy", theorem 21): `ε = r + log((α − 1)/α) − (log δ + log α)/(α − 1)`, with the
    /// KL bound `δ ≥ sqrt(1 − e^-r)` giving `ε = 0`; orders at or below 1.01 are left out (the
    /// bound is unstable there). Opacus's and `dp_accounting`'s.
    #[default]
    Balle2020,
    /// Mironov (2017, "Rényi Differential Privacy", proposition 3): `ε = r − log δ / (α − 1)`,
    /// the older, looser conversion of TensorFlow Privacy's tutorials.
    Classic,
}

impl Conversion {
    /// The epsilon order `order` gives for RDP `rdp` at `delta`.
    fn epsilon(self, order: f64, rdp: f64, delta: f64) -> f64 {
        match self {
            Conversion::Classic => rdp - delta.ln() / (order - 1.0),
            Conversion::Balle2020 if rdp < 0.0 || delta * delta + (-rdp).exp_m1() > 0.0 => 0.0,
            Conversion::Balle2020 if order > 1.01 => {
                rdp + (-1.0 / order).ln_1p() - (delta * order).ln() / (order - 1.0)
            }
            Conversion::Balle2020 => f64::INFINITY,
        }
    }
}

/// An `(ε, δ)` guarantee, with the RDP order that gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spent {
    /// Epsilon at the delta asked for.
    pub epsilon: f64,
    /// The order whose RDP gave the least epsilon.
    pub order: f64,
}

/// The orders fedsim tracks RDP at: every tenth from 1.1 to 10.9, the integers 11 to 63, and
/// 128, 256, 512 and 1024 (`dp_accounting`'s defaults), enough for any noise multiplier and
/// step count in use.
pub fn default_orders() -> Vec<f64> {
    let tenths = (1..100).map(|x| 1.0 + f64::from(x) / 10.0);
    let integers = (11..64).map(f64::from);
    tenths
        .chain(integers)
        .chain([128.0, 256.0, 512.0, 1024.0])
        .collect()
}

/// The RDP of the steps composed so far, at each order.
#[derive(Debug, Clone, PartialEq)]
pub struct RdpAccountant {
    orders: Vec<f64>,
    rdp: Vec<f64>,
}

impl Default for RdpAccountant {
    fn default() -> Self {
        Self::with_orders(default_orders())
    }
}

impl RdpAccountant {
    /// An accountant of no steps yet, at `orders` (each above 1).
    pub fn with_orders(orders: Vec<f64>) -> Self {
        Self {
            rdp: vec![0.0; orders.len()],
            orders,
        }
    }

    /// Composes `steps` steps of `step`: RDP adds up.
    pub fn compose(&mut self, step: &SubsampledGaussian, steps: u64) {
        for (total, &order) in self.rdp.iter_mut().zip(&self.orders) {
            *total += steps as f64 * step.rdp(order);
        }
    }

    /// The RDP so far at each order, in the order of [`RdpAccountant::orders`].
    pub fn rdp(&self) -> &[f64] {
        &self.rdp
    }

    /// The orders tracked.
    pub fn orders(&self) -> &[f64] {
        &self.orders
    }

    /// The least epsilon of any order at `delta` (in (0, 1)): infinite where no order gives a
    /// finite one.
    pub fn epsilon(&self, delta: f64, conversion: Conversion) -> Spent {
        let mut best = Spent {
            epsilon: f64::INFINITY,
            order: f64::NAN,
        };
        for (&order, &rdp) in self.orders.iter().zip(&self.rdp) {
            let epsilon = conversion.epsilon(order, rdp, delta);
            if epsilon < best.epsilon {
                best = Spent { epsilon, order };
            }
        }
        best.epsilon = best.epsilon.max(0.0);
        best
    }
}

/// What the same step repeated spends, step after step: a run's privacy budget, read at any
/// round without composing the rounds before again.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeated {
    one_step: RdpAccountant,
    delta: f64,
    conversion: Conversion,
}

impl Repeated {
    /// Steps of `step`, read at `delta` by `conversion`.
    pub fn new(step: &SubsampledGaussian, delta: f64, conversion: Conversion) -> Self {
        let mut one_step = RdpAccountant::default();
        one_step.compose(step, 1);
        Self {
            one_step,
            delta,
            conversion,
        }
    }

    /// The epsilon spent after `steps` steps.
    pub fn epsilon_after(&self, steps: u64) -> Spent {
        let mut total = self.one_step.clone();
        for rdp in &mut total.rdp {
            *rdp *= steps as f64;
        }
        total.epsilon(self.delta, self.conversion)
    }

    /// The most steps, up to `limit`, that spend at most `target` (0 where even one spends
    /// more): epsilon grows with the steps, so a binary search finds it.
    pub fn steps_within(&self, target: f64, limit: u64) -> u64 {
        let (mut within, mut beyond) = (0, limit + 1);
        while beyond - within > 1 {
            let middle = within + (beyond - within) / 2;
            if self.epsilon_after(middle).epsilon <= target {
                within = middle;
            } else {
                beyond = middle;
            }
        }
        within
    }
}

/// The epsilon at `delta` of `steps` steps of `step`.
pub fn epsilon(step: &SubsampledGaussian, steps: u64, delta: f64, conversion: Conversion) -> Spent {
    let mut accountant = RdpAccountant::default();
    accountant.compose(step, steps);
    accountant.epsilon(delta, conversion)
}

/// The least noise multiplier whose `steps` steps, sampled as `sampling`, spend at most
/// `target_epsilon` at `delta`, to a relative precision of 1e-9 (the value returned spends
/// at most the target); `None` where no noise multiplier up to 10⁶ does.
pub fn noise_multiplier_for(
    target_epsilon: f64,
    delta: f64,
    sampling: Sampling,
    steps: u64,
    series: Series,
    conversion: Conversion,
) -> Option<f64> {
    let spends = |noise_multiplier: f64| {
        let step = SubsampledGaussian {
            noise_multiplier,
            sampling,
            series,
        };
        epsilon(&step, steps, delta, conversion).epsilon
    };
    let (mut low, mut high) = (0.0, 1.0);
    while spends(high) > target_epsilon {
        (low, high) = (high, 2.0 * high);
        if high > 1e6 {
            return None;
        }
    }
    while high - low > 1e-9 * high {
        let middle = 0.5 * (low + high);
        if spends(middle) > target_epsilon {
            low = middle;
        } else {
            high = middle;
        }
    }
    Some(high)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poisson(noise_multiplier: f64, rate: f64, series: Series) -> SubsampledGaussian {
        SubsampledGaussian {
            noise_multiplier,
            sampling: Sampling::Poisson { rate },
            series,
        }
    }

    /// Opacus's accountant test (`test_rdp_accountant`): noise 1.5, rate 0.04, 2,250 steps,
    /// delta 1e-5 gives 7.32911117143 to seven places. Opacus sums the fractional orders'
    /// series with their signs; `dp_accounting`'s absolute series gives 7.3293347 at the same
    /// order 3.9, the safe bound a run reports.
    #[test]
    fn opacus_published_epsilon() {
        let signed = epsilon(
            &poisson(1.5, 0.04, Series::Signed),
            2250,
            1e-5,
            Conversion::Balle2020,
        );
        assert!((signed.epsilon - 7.32911117143).abs() < 5e-8, "{signed:?}");
        assert_eq!(signed.order, 3.9);
        let bound = epsilon(
            &poisson(1.5, 0.04, Series::Absolute),
            2250,
            1e-5,
            Conversion::Balle2020,
        );
        assert!(
            (bound.epsilon - 7.329334702381698).abs() < 1e-9,
            "{bound:?}"
        );
    }

    /// TensorFlow Privacy's MNIST tutorial: rate 256/60000, 60 epochs of 234 steps, noise
    /// 1.12, delta 1e-5 spends 2.92 by the classic conversion (2.52 by Balle et al.'s).
    #[test]
    fn tensorflow_privacy_tutorial_epsilon() {
        let step = poisson(1.12, 256.0 / 60000.0, Series::Absolute);
        let classic = epsilon(&step, 60 * 234, 1e-5, Conversion::Classic);
        assert!((classic.epsilon - 2.92).abs() < 0.005, "{classic:?}");
        let tighter = epsilon(&step, 60 * 234, 1e-5, Conversion::Balle2020);
        assert!(
            (tighter.epsilon - 2.5164624454431204).abs() < 1e-9,
            "{tighter:?}"
        );
    }

    /// The noise found spends the target to within its precision, and a little less noise
    /// spends more.
    #[test]
    fn the_noise_multiplier_for_a_target_spends_it() {
        let sampling = Sampling::Poisson { rate: 0.04 };
        let steps = 2250;
        let noise = noise_multiplier_for(
            8.0,
            1e-5,
            sampling,
            steps,
            Series::Absolute,
            Conversion::Balle2020,
        )
        .unwrap();
        let spends = |noise| {
            let step = poisson(noise, 0.04, Series::Absolute);
            epsilon(&step, steps, 1e-5, Conversion::Balle2020).epsilon
        };
        assert!(
            spends(noise) <= 8.0 && spends(noise) > 8.0 - 1e-6,
            "{noise}"
        );
        assert!(spends(noise * (1.0 - 1e-6)) > 8.0);
    }

    #[test]
    fn fixed_size_sampling_spends_more_than_poisson_at_the_same_rate_and_noise() {
        let fixed = SubsampledGaussian {
            noise_multiplier: 1.12,
            sampling: Sampling::FixedSize {
                rate: 256.0 / 60000.0,
            },
            series: Series::Absolute,
        };
        let spent = epsilon(&fixed, 60 * 234, 1e-5, Conversion::Balle2020);
        // dp_accounting 0.6.0, SampledWithoutReplacementDpEvent(60000, 256, noise 1.12).
        assert!(
            (spent.epsilon - 5.148717655519825).abs() < 1e-9,
            "{spent:?}"
        );
        assert_eq!(spent.order, 5.0);
        let poisson = poisson(1.12, 256.0 / 60000.0, Series::Absolute);
        let at_poisson = epsilon(&poisson, 60 * 234, 1e-5, Conversion::Balle2020);
        assert!(spent.epsilon > at_poisson.epsilon);
    }

    #[test]
    fn composition_adds_and_no_steps_spend_nothing() {
        let step = poisson(1.0, 0.01, Series::Absolute);
        let mut twice = RdpAccountant::default();
        twice.compose(&step, 1);
        twice.compose(&step, 1);
        let mut at_once = RdpAccountant::default();
        at_once.compose(&step, 2);
        assert_eq!(twice.rdp(), at_once.rdp());
        let none = RdpAccountant::default();
        assert_eq!(none.epsilon(1e-5, Conversion::Balle2020).epsilon, 0.0);
    }

    #[test]
    fn a_repeated_step_spends_what_its_composition_does() {
        let step = poisson(1.1, 0.01, Series::Absolute);
        let repeated = Repeated::new(&step, 1e-5, Conversion::Balle2020);
        assert_eq!(
            repeated.epsilon_after(700),
            epsilon(&step, 700, 1e-5, Conversion::Balle2020)
        );
        let within = repeated.steps_within(2.0, 100_000);
        assert!(repeated.epsilon_after(within).epsilon <= 2.0);
        assert!(repeated.epsilon_after(within + 1).epsilon > 2.0);
        assert_eq!(repeated.steps_within(1e-9, 10), 0);
        assert_eq!(repeated.steps_within(1e9, 10), 10);
    }

    #[test]
    fn no_noise_spends_everything() {
        let spent = epsilon(
            &poisson(0.0, 0.01, Series::Absolute),
            1,
            1e-5,
            Conversion::Balle2020,
        );
        assert_eq!(spent.epsilon, f64::INFINITY);
    }
}
