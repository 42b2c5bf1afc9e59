//! FedAvg: McMahan et al. (2017), "Communication-Efficient Learning of Deep Networks from
//! Decentralized Data". The next global model is the mean of the client models, each weighted
//! by its number of training samples: `w = Σ_k (n_k / n) w_k`.

use super::{
    Aggregate, Algorithm, Collected, EdgeAggregation, NoParams, Reads, Round, Setting, Strategy,
    Sum, Weighting,
};

/// FedAvg, the default algorithm: plain local SGD, and the server half [`FedAvgServer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAvg;

impl Algorithm for FedAvg {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        "fedavg"
    }

    fn paper(&self) -> &'static str {
        "McMahan et al. 2017, Communication-Efficient Learning of Deep Networks from Decentralized Data"
    }

    fn edge_rule(&self, _params: &NoParams) -> EdgeAggregation {
        EdgeAggregation::MODELS
    }

    fn server(&self, _: &NoParams, _: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(FedAvgServer)
    }
}

/// Sample-weighted model averaging.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAvgServer;

impl Strategy for FedAvgServer {
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
        let next = FedAvgServer.aggregate_updates(&round(), &[0.0, 0.0], &updates);
        assert_eq!(next.model, vec![4.0, 3.0]);
    }
}
