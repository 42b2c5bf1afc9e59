//! The server half of a securely aggregated run (Bonawitz et al. 2017, simulated): around any
//! algorithm whose server reads the mean of the clients' models, the server sums the round's
//! masked uploads in the ring, takes the masks off with the survivors' shares, and hands the
//! algorithm the weighted mean model that the sum alone gives. It never reads an update.

use std::sync::Arc;

use super::{Aggregate, Collected, PrivateServer, Reads, Round, Strategy, Sum, Weighting};
use crate::network::{ClientId, StateError, Tensors, Update};
use crate::secure::ring::{add_into, from_bytes};
use crate::secure::{ABORTED, Masking, RECOVERED};

/// Secure aggregation around an algorithm's server half.
pub struct SecureServer {
    inner: Box<dyn Strategy>,
    masking: Arc<Masking>,
}

impl SecureServer {
    /// `inner`, reading the sums that `masking` unmasks; an error where `inner` reads more than
    /// the mean of the models.
    pub fn new(inner: Box<dyn Strategy>, masking: Arc<Masking>) -> Result<Self, String> {
        if !Self::can_wrap(inner.as_ref()) {
            return Err(
                "its server half reads more than the mean of the clients' models, \
                        which is all that the masked sum gives"
                    .to_string(),
            );
        }
        Ok(Self { inner, masking })
    }

    /// Whether `inner` reads the round's mean model alone (as a private server needs too).
    pub fn can_wrap(inner: &dyn Strategy) -> bool {
        PrivateServer::can_wrap(inner)
    }

    /// Whether `inner` weighs each update by its samples (`true`) or all alike.
    pub fn weighs_by_samples(inner: &dyn Strategy) -> bool {
        matches!(
            inner.reads(),
            Reads::Sums(sums) if matches!(sums[..], [Sum { weighting: Weighting::Samples, .. }])
        )
    }

    /// The ring sum of the survivors' masked uploads, and who they are, in id order.
    fn masked_sum(&self, updates: &[Update], length: usize) -> (Vec<u32>, Vec<ClientId>) {
        let mut sum = vec![0; length + 1];
        let mut survivors = Vec::with_capacity(updates.len());
        for update in updates {
            let masked = from_bytes(&update.encoded)
                .filter(|masked| masked.len() == sum.len())
                .expect("every client masks a vector of the model's length and its weight");
            add_into(&mut sum, &masked);
            survivors.extend(&update.clients);
        }
        (sum, survivors)
    }
}

impl Strategy for SecureServer {
    fn downlink(&self) -> Tensors {
        self.inner.downlink()
    }

    fn reads(&self) -> Reads {
        Reads::Updates
    }

    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate {
        let Collected::Updates(updates) = input else {
            unreachable!("a secure server reads the masked updates");
        };
        let (sum, survivors) = self.masked_sum(updates, global.len());
        let recovered = (round.sampled.len() - survivors.len()) as f64;
        let protocol = self.masking.round(round.number, round.sampled.to_vec());
        // Every survivor answers the unmasking: a client that sent its input stays.
        let Ok(plain) = protocol.unmask(sum, &survivors, &survivors) else {
            return Aggregate::model(global.to_vec())
                .with(RECOVERED, 0.0)
                .with(ABORTED, 1.0);
        };
        let mean: Vec<f32> = global
            .iter()
            .zip(self.masking.mean_change(&plain, round.sampled.len()))
            .map(|(&start, change)| (f64::from(start) + change) as f32)
            .collect();
        let input = Collected::Sums {
            sums: vec![mean],
            updates: survivors.len(),
            clients: survivors,
        };
        self.inner
            .aggregate(round, global, input)
            .with(RECOVERED, recovered)
            .with(ABORTED, 0.0)
    }

    fn state(&self) -> Tensors {
        self.inner.state()
    }

    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        self.inner.restore(state)
    }

    fn aggregates_no_updates(&self) -> bool {
        // A round nobody survived still records that it ended without a model.
        true
    }

    fn selector(&mut self) -> Option<Box<dyn super::Selector>> {
        self.inner.selector()
    }
}
