//! FedAvg: McMahan et al. (2017), "Communication-Efficient Learning of Deep Networks from
//! Decentralized Data". The next global model is the mean of the client models, each weighted
//! by its number of training samples: `w = Σ_k (n_k / n) w_k`.

use super::{Aggregate, Collected, Reads, Round, Strategy, Sum, Weighting};

/// Sample-weighted model averaging.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAvg;

impl Strategy for FedAvg {
    fn reads(&self) -> Reads {
        Reads::Sums(vec![Sum::params(Weighting::Samples)])
    }

    fn aggregate(
        &mut self,
        _round: &Round<'_>,
        _global: &[f32],
        input: Collected<'_>,
    ) -> Aggregate {
        let [mean] = input.into_sums();
        Aggregate::model(mean)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{round, update};
    use super::*;

    #[test]
    fn weights_clients_by_sample_count() {
        let updates = [
            update(0, 100, vec![1.0, 0.0]),
            update(1, 300, vec![5.0, 4.0]),
        ];
        let next = FedAvg.aggregate_updates(&round(), &[0.0, 0.0], &updates);
        assert_eq!(next.model, vec![4.0, 3.0]);
    }
}
