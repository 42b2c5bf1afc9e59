//! fedsim's own local training: one optimiser step per batch on the cross-entropy loss, with
//! an algorithm's [`Objective`] added to each gradient and its correction step taken after
//! each optimiser step. Every client half that does not train itself runs it.

use super::objective::{Objective, ObjectiveTerms};
use super::{LocalTraining, TrainError, TrainedNet};
use crate::model::Net;

/// Trains `net` through `local`'s batches on the cross-entropy loss and `objective`'s terms,
/// which pull towards the model training started from.
pub fn train_on_objective(
    mut local: LocalTraining<'_>,
    net: Net,
    objective: &Objective,
) -> Result<TrainedNet, TrainError> {
    let mut optimizer = local.optimizer();
    let terms = ObjectiveTerms::new(
        objective,
        local.start(),
        &net,
        local.optimizer_is_linear(),
        local.device(),
    );
    let mut net = net;
    while let Some(batch) = local.next_batch()? {
        let loss = local.cross_entropy(net.forward(batch.input), batch.labels);
        local.record_loss(&loss)?;
        let mut grads = net.gradients(loss);
        if let Some(gradient) = &terms.gradient {
            gradient.apply(&net, &mut grads);
        }
        net = local.step(net, &mut optimizer, grads);
        if let Some(correction) = &terms.correction {
            net = correction.step(net, local.lr());
        }
    }
    Ok(local.finish(net))
}
