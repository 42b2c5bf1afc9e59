//! Arithmetic on flat model vectors that the strategies share. Every reduction adds its terms
//! in the order given (updates come sorted by client id), so results do not depend on thread
//! count or arrival order.

use rayon::prelude::*;

/// Values per parallel chunk: large enough to amortise a task, small enough to spread a
/// 200k-parameter model over a few cores.
pub(crate) const CHUNK: usize = 16 * 1024;

/// `Σ_k weight_k * vector_k`, element by element, from zero: each element adds its terms in
/// the order given (see [`add_scaled`]), so the result does not depend on the number of
/// threads.
pub fn weighted_sum(terms: &[(&[f32], f32)]) -> Vec<f32> {
    let len = terms.first().map_or(0, |(v, _)| v.len());
    let mut out = vec![0.0f32; len];
    for (vector, weight) in terms {
        add_scaled(&mut out, vector, *weight);
    }
    out
}

/// `sum += weight * values`, element by element, as every weighted sum adds a term. On the
/// calling thread: the server folds each update as it arrives, while the workers train, and
/// waking a pool for one update's fold took their cores from them (a round of 100 small
/// clients ran a quarter slower on two workers with the fold spread over the pool).
pub fn add_scaled(sum: &mut [f32], values: &[f32], weight: f32) {
    assert_eq!(sum.len(), values.len(), "vectors of different lengths");
    for (s, &v) in sum.iter_mut().zip(values) {
        *s += weight * v;
    }
}

/// [`weighted_sum`] of the terms whose weight is not zero: an update written as a
/// combination of vectors (`η ȳ + (1 - η) x`) then gives exactly `ȳ` when `η = 1`.
pub fn combination(terms: &[(&[f32], f32)]) -> Vec<f32> {
    let nonzero: Vec<(&[f32], f32)> = terms.iter().copied().filter(|(_, w)| *w != 0.0).collect();
    weighted_sum(&nonzero)
}

/// `a - b`, element by element.
pub fn difference(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.par_iter().zip(b).map(|(x, y)| x - y).collect()
}

/// The squared Euclidean norm, summed in `f64` in element order.
pub fn squared_norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x) * f64::from(x)).sum()
}

/// The Euclidean norm, from [`squared_norm`].
pub fn norm(v: &[f32]) -> f64 {
    squared_norm(v).sqrt()
}

/// The inner product of `a` and `b`, summed in `f64` in element order.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// The squared Euclidean distance between `a` and `b`, in `f64`.
pub fn squared_distance(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = f64::from(x) - f64::from(y);
            d * d
        })
        .sum()
}

/// Applies `rule` to each coordinate's values across `vectors` (in the order given): the
/// coordinate-wise robust rules. Runs chunks of coordinates in parallel.
pub fn coordinatewise(vectors: &[&[f32]], rule: impl Fn(&mut [f32]) -> f32 + Sync) -> Vec<f32> {
    let len = vectors.first().map_or(0, |v| v.len());
    let mut out = vec![0.0f32; len];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(chunk, slice)| {
            let mut column = vec![0.0f32; vectors.len()];
            for (offset, value) in slice.iter_mut().enumerate() {
                let i = chunk * CHUNK + offset;
                for (c, v) in column.iter_mut().zip(vectors) {
                    *c = v[i];
                }
                *value = rule(&mut column);
            }
        });
    out
}

/// Means over a whole round's updates at once, as the strategies computed them before the
/// server folded updates as they arrive: the references that folds must equal to the bit.
#[cfg(test)]
pub(crate) mod reference {
    use super::weighted_sum;
    use crate::network::Update;

    /// How much each update counts in a mean.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Weight {
        /// By training samples, as FedAvg weighs clients (`n_k / n`).
        Samples,
        /// Equally per client (a partial aggregate counts for each client it stands for).
        Clients,
    }

    impl Weight {
        /// The weight of `update` before normalising.
        pub fn of(self, update: &Update) -> f64 {
            match self {
                Weight::Samples => update.num_samples as f64,
                Weight::Clients => update.clients.len() as f64,
            }
        }

        /// Each update's share of the total (in `f32`, as the means apply them).
        pub fn shares(self, updates: &[Update]) -> Vec<f32> {
            let total: f64 = updates.iter().map(|u| self.of(u)).sum();
            updates
                .iter()
                .map(|u| (self.of(u) / total) as f32)
                .collect()
        }
    }

    /// The weighted mean of the updates' models.
    pub fn mean_params(updates: &[Update], weight: Weight) -> Vec<f32> {
        let shares = weight.shares(updates);
        let terms: Vec<(&[f32], f32)> = updates
            .iter()
            .zip(shares)
            .map(|(u, share)| (u.params.as_slice(), share))
            .collect();
        weighted_sum(&terms)
    }

    /// The sum of the updates' extra tensor `name`.
    pub fn sum_extra(updates: &[Update], name: &str) -> Vec<f32> {
        let terms: Vec<(&[f32], f32)> = updates
            .iter()
            .map(|u| (u.extras.expect(name), 1.0))
            .collect();
        weighted_sum(&terms)
    }

    /// The sample-weighted mean training loss of `updates` (0 when there are none).
    pub fn mean_loss(updates: &[Update]) -> f64 {
        let samples: usize = updates.iter().map(|u| u.num_samples).sum();
        let loss_sum: f64 = updates
            .iter()
            .map(|u| u.train_loss * u.num_samples as f64)
            .sum();
        loss_sum / samples.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_weights_give_the_plain_mean_across_chunk_boundaries() {
        let len = 3 * CHUNK + 7;
        let a: Vec<f32> = (0..len).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..len).map(|i| -(i as f32) + 2.0).collect();
        let mean = weighted_sum(&[(&a, 0.5), (&b, 0.5)]);
        assert!(mean.iter().all(|&m| m == 1.0));
    }

    #[test]
    fn coordinatewise_sees_each_column_in_order() {
        let len = CHUNK + 3;
        let a = vec![1.0f32; len];
        let b: Vec<f32> = (0..len).map(|i| i as f32).collect();
        let firsts = coordinatewise(&[&a, &b], |column| column[1] - column[0]);
        assert_eq!(firsts[CHUNK + 2], (CHUNK + 1) as f32);
    }
}
