//! Rényi differential privacy of one step of the subsampled Gaussian mechanism: the step's
//! RDP `ε(α)` at an order `α`, for a noise multiplier `z` (the noise's standard deviation over
//! the L2 sensitivity) and a sampling rate `q`.
//!
//! - **Poisson sampling** (each member in with probability `q`, neighbours add or remove one):
//!   `ε(α) = log(A_α) / (α − 1)`, with `A_α` computed as Mironov, Talwar and Zhang (2019,
//!   "Rényi Differential Privacy of the Sampled Gaussian Mechanism", section 3.3) give it: a
//!   finite binomial sum at integer orders, and at fractional orders the two integrals over
//!   `(−∞, z₀]` and `[z₀, ∞)` expanded as series, summed until both terms fall and are `e^-30`
//!   below the total (the stopping rule of Google's `dp_accounting`).
//! - **Fixed-size sampling** (`m` of `n` drawn without replacement, `q = m / n`; neighbours
//!   replace one member): Wang, Balle and Kasiviswanathan (2019, "Subsampled Rényi
//!   Differential Privacy and Analytical Moments Accountant"), theorem 27 with the Gaussian's
//!   forward differences, computed exactly up to order 256 and with its Stirling-free upper
//!   bound beyond; fractional orders interpolate the cumulant generating function between the
//!   integers around them (their corollary 10).
//!
//! Everything is in log space, so no intermediate overflows at large orders.

use std::f64::consts::{LN_2, PI};

/// How the series of a fractional order adds its terms, whose binomial coefficients
/// `C(α, i)` alternate in sign past `i = α`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Series {
    /// Every term's magnitude: an upper bound on `A_α`, as Google's `dp_accounting` computes
    /// it (and so the larger, safe epsilon).
    #[default]
    Absolute,
    /// The terms with their signs: `A_α` itself, as Opacus and TensorFlow Privacy compute it.
    Signed,
}

/// The most terms the series of a fractional order adds before it is declared not to
/// converge (that order is then left out: its RDP is infinite).
const MAX_SERIES_TERMS: usize = 1000;

/// Orders past which the fixed-size bound drops the forward differences (whose bookkeeping
/// grows with the square of the order) for their upper bound.
const MAX_EXACT_WOR_ORDER: u32 = 256;

/// The RDP at order `alpha` of one step of the Gaussian mechanism with noise multiplier
/// `noise_multiplier`, Poisson-subsampled at rate `q`.
pub fn poisson(q: f64, noise_multiplier: f64, alpha: f64, series: Series) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if alpha.is_infinite() || noise_multiplier == 0.0 {
        return f64::INFINITY;
    }
    if q == 1.0 {
        return alpha / (2.0 * noise_multiplier.powi(2));
    }
    let log_a = if alpha.fract() == 0.0 {
        log_a_integer(q, noise_multiplier, alpha as u32)
    } else {
        log_a_fractional(q, noise_multiplier, alpha, series)
    };
    log_a / (alpha - 1.0)
}

/// The RDP at order `alpha` of one step of the Gaussian mechanism with noise multiplier
/// `noise_multiplier` (to the replace-one sensitivity), on a sample of a fixed fraction `q`
/// drawn without replacement.
pub fn fixed_size(q: f64, noise_multiplier: f64, alpha: f64) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if alpha.is_infinite() || noise_multiplier == 0.0 {
        return f64::INFINITY;
    }
    if q == 1.0 {
        return alpha / (2.0 * noise_multiplier.powi(2));
    }
    if alpha.fract() == 0.0 {
        return wor_cgf(q, noise_multiplier, alpha as u32) / (alpha - 1.0);
    }
    let (below, above) = (alpha.floor(), alpha.ceil());
    let t = alpha - below;
    let lower = wor_cgf(q, noise_multiplier, below as u32);
    let upper = wor_cgf(q, noise_multiplier, above as u32);
    ((1.0 - t) * lower + t * upper) / (alpha - 1.0)
}

/// `log(A_α)` at an integer order: `Σ_i C(α, i) q^i (1 − q)^(α − i) exp((i² − i) / 2σ²)`.
fn log_a_integer(q: f64, sigma: f64, alpha: u32) -> f64 {
    let log1mq = (-q).ln_1p();
    (0..=alpha).fold(f64::NEG_INFINITY, |log_a, i| {
        let i = f64::from(i);
        let alpha = f64::from(alpha);
        let term = log_binomial(alpha, i) + i * q.ln() + (alpha - i) * log1mq;
        log_add(log_a, term + (i * i - i) / (2.0 * sigma * sigma))
    })
}

/// Signed running sums in log space: the positive terms' and the negative terms' apart.
#[derive(Debug, Clone, Copy)]
struct SignedSum {
    positive: f64,
    negative: f64,
}

impl SignedSum {
    const ZERO: Self = Self {
        positive: f64::NEG_INFINITY,
        negative: f64::NEG_INFINITY,
    };

    fn add(&mut self, log_term: f64, negative: bool) {
        let side = if negative {
            &mut self.negative
        } else {
            &mut self.positive
        };
        *side = log_add(*side, log_term);
    }

    /// The log of the sum as `series` adds it.
    fn total(&self, series: Series) -> f64 {
        match series {
            Series::Absolute => log_add(self.positive, self.negative),
            Series::Signed => log_sub(self.positive, self.negative),
        }
    }
}

/// `log(A_α)` at a fractional order, from the two series of Mironov, Talwar and Zhang's
/// section 3.3; infinite when they do not converge within [`MAX_SERIES_TERMS`] terms.
fn log_a_fractional(q: f64, sigma: f64, alpha: f64, series: Series) -> f64 {
    let z0 = sigma * sigma * (1.0 / q - 1.0).ln() + 0.5;
    let log1mq = (-q).ln_1p();
    let (mut below, mut above) = (SignedSum::ZERO, SignedSum::ZERO);
    let (mut last_below, mut last_above) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for i in 0..MAX_SERIES_TERMS {
        let i = i as f64;
        let j = alpha - i;
        let log_coef = log_binomial(alpha, i);
        let negative = binomial_is_negative(alpha, i);
        let log_e0 = (0.5f64).ln() + log_erfc((i - z0) / (2.0f64.sqrt() * sigma));
        let log_e1 = (0.5f64).ln() + log_erfc((z0 - j) / (2.0f64.sqrt() * sigma));
        let term_below = log_coef + i * q.ln() + j * log1mq + (i * i - i) / (2.0 * sigma * sigma);
        let term_above = log_coef + j * q.ln() + i * log1mq + (j * j - j) / (2.0 * sigma * sigma);
        let (term_below, term_above) = (term_below + log_e0, term_above + log_e1);
        below.add(term_below, negative);
        above.add(term_above, negative);
        let magnitude = log_add(below.total(Series::Absolute), above.total(Series::Absolute));
        let falling = term_below < last_below && term_above < last_above;
        if falling && term_below.max(term_above) < magnitude - 30.0 {
            return log_add(below.total(series), above.total(series));
        }
        (last_below, last_above) = (term_below, term_above);
    }
    f64::INFINITY
}

/// Whether the generalised binomial coefficient `C(α, i)` is negative: for integer `i` past
/// `α`, its sign is that of `(−1)^(i − ⌈α⌉)`.
fn binomial_is_negative(alpha: f64, i: f64) -> bool {
    i > alpha && (i - alpha.ceil()) % 2.0 == 1.0
}

/// The cumulant generating function `(α − 1) ε(α)` of fixed-size sampling at an integer order:
/// `log` of Wang, Balle and Kasiviswanathan's theorem 27 bound.
fn wor_cgf(q: f64, sigma: f64, alpha: u32) -> f64 {
    if alpha <= 1 {
        return 0.0;
    }
    // The Gaussian's cumulant generating function at x, `x (x + 1) / 2σ²`, and its RDP.
    let cgf = |x: f64| x * (x + 1.0) / (2.0 * sigma * sigma);
    let rdp = |x: f64| x / (2.0 * sigma * sigma);
    let log_f2m1 = rdp(2.0) + (-(-rdp(2.0)).exp()).ln_1p();
    let second = 2.0 * q.ln()
        + log_binomial(f64::from(alpha), 2.0)
        + (4.0f64.ln() + log_f2m1).min(rdp(2.0) + LN_2);
    let deltas = (alpha <= MAX_EXACT_WOR_ORDER).then(|| forward_differences(cgf, alpha));
    let mut log_a = log_add(0.0, second);
    for i in 3..=alpha {
        let bound = LN_2 + cgf(f64::from(i - 1));
        let log_term = match &deltas {
            Some(deltas) => {
                let lo = deltas[2 * (i / 2) as usize - 1];
                let hi = deltas[2 * i.div_ceil(2) as usize - 1];
                (4.0f64.ln() + 0.5 * (lo + hi)).min(bound)
            }
            None => bound,
        };
        let coefficient = f64::from(i) * q.ln() + log_binomial(f64::from(alpha), f64::from(i));
        log_a = log_add(log_a, log_term + coefficient);
    }
    log_a
}

/// The logs of the magnitudes of the forward differences of `exp(f)` at 0, orders 0 to
/// `n + 1`, each from the one before by one more difference, all in log space with signs.
fn forward_differences(f: impl Fn(f64) -> f64, n: u32) -> Vec<f64> {
    let n = n as usize;
    // Slot 0 holds exp(0) = 1 ahead of f's values at 0, 1, …, n + 1.
    let mut values: Vec<f64> = std::iter::once(0.0)
        .chain((0..n + 2).map(|x| f(x as f64)))
        .collect();
    let mut positive = vec![true; n + 3];
    (0..n + 2)
        .map(|order| {
            difference_in_log(&mut values, &mut positive, n + 2 - order);
            values[0]
        })
        .collect()
}

/// Replaces the first `count` of `values` (logs of magnitudes, with signs in `positive`) by
/// the differences `next − this`.
fn difference_in_log(values: &mut [f64], positive: &mut [bool], count: usize) {
    for j in 0..count {
        if positive[j] == positive[j + 1] {
            let (sign, magnitude) = log_sub_sign(values[j + 1], values[j]);
            values[j] = magnitude;
            positive[j] = if positive[j + 1] { sign } else { !sign };
        } else {
            values[j] = log_add(values[j], values[j + 1]);
            positive[j] = positive[j + 1];
        }
    }
}

/// `log(e^x + e^y)`.
pub(super) fn log_add(x: f64, y: f64) -> f64 {
    let (low, high) = if x < y { (x, y) } else { (y, x) };
    if low == f64::NEG_INFINITY {
        return high;
    }
    (low - high).exp().ln_1p() + high
}

/// `log(e^x − e^y)` for `x ≥ y` (negative infinity when they are equal).
fn log_sub(x: f64, y: f64) -> f64 {
    if y == f64::NEG_INFINITY {
        return x;
    }
    if x <= y {
        return f64::NEG_INFINITY;
    }
    (y - x).exp().mul_add(-1.0, 1.0).ln() + x
}

/// The sign (`true` for positive) and the log of the magnitude of `e^x − e^y`.
fn log_sub_sign(x: f64, y: f64) -> (bool, f64) {
    if x > y {
        (true, x + (-(y - x).exp()).ln_1p())
    } else if x < y {
        (false, y + (-(x - y).exp()).ln_1p())
    } else {
        (true, f64::NEG_INFINITY)
    }
}

/// `log |C(n, k)|` for real `n` and `k`, through the log-gamma function.
fn log_binomial(n: f64, k: f64) -> f64 {
    libm::lgamma(n + 1.0) - libm::lgamma(k + 1.0) - libm::lgamma(n - k + 1.0)
}

/// `log(erfc(x))`, accurate where `erfc` itself underflows: past `x = 26` from the
/// asymptotic series `erfc(x) ~ exp(−x² − 1/(2x²) + 5/(8x⁴) − 37/(24x⁶) + 353/(64x⁸)) /
/// (x √π)`.
fn log_erfc(x: f64) -> f64 {
    if x < 26.0 {
        return libm::erfc(x).ln();
    }
    let inverse_square = 1.0 / (x * x);
    let tail = inverse_square
        * (-0.5
            + inverse_square
                * (0.625 + inverse_square * (-37.0 / 24.0 + inverse_square * 353.0 / 64.0)));
    -PI.ln() / 2.0 - x.ln() - x * x + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(actual: f64, expected: f64, relative: f64) {
        let error = ((actual - expected) / expected).abs();
        assert!(
            error <= relative,
            "{actual} is not {expected} within {relative} (relative error {error:e})"
        );
    }

    /// Google's `dp_accounting` RDP test (`test_compute_rdp_sequence`): 50 steps at q 0.01,
    /// noise 2.5; relative tolerance 1e-4.
    #[test]
    fn poisson_matches_dp_accountings_published_sequence() {
        let expected = [
            (1.5, 6.70579741e-4),
            (2.5, 1.08548710e-3),
            (5.0, 2.18075656e-3),
            (50.0, 2.38460375e-2),
            (100.0, 167.416308),
        ];
        for (order, value) in expected {
            assert_close(
                50.0 * poisson(0.01, 2.5, order, Series::Absolute),
                value,
                1e-4,
            );
        }
    }

    /// The signed series is `A_α` itself, at most the absolute one, and equal to it at integer
    /// orders and where no term is negative before the series stops.
    #[test]
    fn the_signed_series_is_below_the_absolute_one() {
        for order in [1.5, 2.5, 3.9, 10.5] {
            let signed = poisson(0.01, 2.5, order, Series::Signed);
            let absolute = poisson(0.01, 2.5, order, Series::Absolute);
            assert!(signed <= absolute, "order {order}: {signed} > {absolute}");
            assert!(signed > 0.0);
        }
        assert_eq!(
            poisson(0.01, 2.5, 5.0, Series::Signed),
            poisson(0.01, 2.5, 5.0, Series::Absolute)
        );
    }

    /// Values of `dp_accounting` 0.6.0's `_compute_rdp_sample_wor_gaussian` (q 0.01, noise
    /// 2.5; q 0.05, noise 0.8): the exact branch, the bound past order 256, and fractional
    /// orders between them.
    #[test]
    fn fixed_size_matches_dp_accounting() {
        let cases = [
            (0.01, 2.5, 1.5, 6.940194002636958e-05),
            (0.01, 2.5, 2.0, 6.940194002636958e-05),
            (0.01, 2.5, 2.5, 9.277216433069121e-05),
            (0.01, 2.5, 3.0, 1.0445727648285201e-04),
            (0.01, 2.5, 5.0, 1.75267210383834e-04),
            (0.01, 2.5, 50.0, 1.9694830059410542e-03),
            (0.01, 2.5, 100.0, 3.355327771064257),
            (0.01, 2.5, 300.5, 19.421834745546374),
            (0.01, 2.5, 1024.0, 77.3110057446029),
            (0.05, 0.8, 3.0, 0.04706671859107109),
            (0.05, 0.8, 7.5, 2.540598806598029),
            (0.05, 0.8, 256.0, 196.99523798098326),
        ];
        for (q, noise, order, value) in cases {
            assert_close(fixed_size(q, noise, order), value, 1e-9);
        }
    }

    /// Values of `dp_accounting` 0.6.0's `_compute_rdp_poisson_subsampled_gaussian` at q 0.05,
    /// noise 0.8, including order 1.1, whose series does not converge (infinite: left out).
    #[test]
    fn poisson_matches_dp_accounting_at_small_noise() {
        assert_eq!(poisson(0.05, 0.8, 1.1, Series::Absolute), f64::INFINITY);
        let cases = [
            (1.5, 0.007410724685494642),
            (2.0, 0.00938267764472453),
            (7.5, 2.403619865769767),
            (40.0, 28.17745407840616),
            (1024.0, 797.0013393469018),
        ];
        for (order, value) in cases {
            assert_close(poisson(0.05, 0.8, order, Series::Absolute), value, 1e-9);
        }
    }

    #[test]
    fn no_sampling_is_the_plain_gaussian_and_no_noise_is_no_privacy() {
        assert_eq!(poisson(1.0, 2.0, 3.0, Series::Absolute), 3.0 / 8.0);
        assert_eq!(fixed_size(1.0, 2.0, 3.0), 3.0 / 8.0);
        assert_eq!(poisson(0.0, 2.0, 3.0, Series::Absolute), 0.0);
        assert_eq!(poisson(0.5, 0.0, 3.0, Series::Absolute), f64::INFINITY);
        assert_eq!(fixed_size(0.5, 0.0, 3.0), f64::INFINITY);
    }

    #[test]
    fn log_erfc_joins_its_asymptotic_series() {
        let just_below = libm::erfc(25.999).ln();
        assert_close(log_erfc(26.0), just_below, 1e-4);
        assert_close(log_erfc(1.0), libm::erfc(1.0).ln(), 1e-15);
        assert!(log_erfc(40.0).is_finite());
    }
}
