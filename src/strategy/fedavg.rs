//! FedAvg: McMahan et al. (2017), "Communication-Efficient Learning of Deep Networks from
//! Decentralized Data". The next global model is the mean of the client models, each weighted
//! by its number of training samples: `w = Σ_k (n_k / n) w_k`.

use rayon::prelude::*;

use super::Strategy;
use crate::network::Update;

/// Sample-weighted model averaging.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAvg;

impl Strategy for FedAvg {
    fn aggregate(&mut self, _global: &[f32], updates: &[Update]) -> Vec<f32> {
        let total: usize = updates.iter().map(|u| u.num_samples).sum();
        let weighted: Vec<(&[f32], f32)> = updates
            .iter()
            .map(|u| {
                (
                    u.params.as_slice(),
                    (u.num_samples as f64 / total as f64) as f32,
                )
            })
            .collect();
        weighted_sum(&weighted)
    }
}

/// Values per parallel chunk: large enough to amortise a task, small enough to spread a
/// 200k-parameter model over a few cores.
const CHUNK: usize = 16 * 1024;

/// `Σ_k weight_k * vector_k`, element by element. Chunks of the output run in parallel, but
/// each element adds its terms in the order given, so the result does not depend on the
/// number of threads.
pub fn weighted_sum(terms: &[(&[f32], f32)]) -> Vec<f32> {
    let len = terms.first().map_or(0, |(v, _)| v.len());
    assert!(
        terms.iter().all(|(v, _)| v.len() == len),
        "all vectors must have the same length"
    );
    let mut out = vec![0.0f32; len];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(chunk, acc)| {
            let start = chunk * CHUNK;
            for (vector, weight) in terms {
                let part = &vector[start..start + acc.len()];
                for (a, &x) in acc.iter_mut().zip(part) {
                    *a += weight * x;
                }
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(client: usize, num_samples: usize, params: Vec<f32>) -> Update {
        Update {
            round: 1,
            clients: vec![client],
            num_samples,
            train_loss: 0.0,
            params,
        }
    }

    #[test]
    fn weights_clients_by_sample_count() {
        let updates = [
            update(0, 100, vec![1.0, 0.0]),
            update(1, 300, vec![5.0, 4.0]),
        ];
        let next = FedAvg.aggregate(&[0.0, 0.0], &updates);
        assert_eq!(next, vec![4.0, 3.0]);
    }

    #[test]
    fn equal_weights_give_the_plain_mean_across_chunk_boundaries() {
        let len = 3 * CHUNK + 7;
        let a: Vec<f32> = (0..len).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..len).map(|i| -(i as f32) + 2.0).collect();
        let mean = weighted_sum(&[(&a, 0.5), (&b, 0.5)]);
        assert!(mean.iter().all(|&m| m == 1.0));
    }
}
