//! What fedsim's loop optimises besides the cross-entropy loss ([`Objective`]), and its terms
//! as tensors on the device: what each step adds to the gradients, and the correction step it
//! takes after the optimiser's.

use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};

use crate::model::Net;

/// What local training optimises besides the cross-entropy loss.
///
/// `proximal` and `linear` are terms of the local objective: each step adds
/// `mu * (w - global) + linear` to the loss's gradient `g` before the optimiser sees it, so they
/// pass through weight decay's sum and the momentum buffer as the loss's own gradient does.
/// `correction` is not a term of the objective but a step of its own, `w ← w - lr * correction`
/// after each optimiser step, which momentum never amplifies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Objective {
    /// `mu` of a proximal term `mu/2 * |w - global|²` (FedProx, FedDyn), if any.
    pub proximal: Option<f32>,
    /// The gradient of a linear term `<linear, w>` (FedDyn's), if any.
    pub linear: Option<Vec<f32>>,
    /// A vector applied at the learning rate after each optimiser step, outside momentum
    /// (SCAFFOLD's `c - c_i`), if any.
    pub correction: Option<Vec<f32>>,
}

/// An [`Objective`] as tensors on the device, one per model parameter.
pub(super) struct ObjectiveTerms {
    /// What each step adds to the gradients, if anything.
    pub(super) gradient: Option<GradientCorrection>,
    /// The step of its own after each optimiser step, if any.
    pub(super) correction: Option<CorrectionStep>,
}

impl ObjectiveTerms {
    /// The terms of `objective`, pulling towards `anchor`. Where the optimiser is linear in the
    /// gradient (plain SGD without momentum), a correction step and the same vector added to
    /// the gradient are one step, so the correction joins the gradient's terms: one pass over
    /// the model less per step.
    pub(super) fn new(
        objective: &Objective,
        anchor: &[f32],
        net: &Net,
        linear_optimizer: bool,
        device: &Device,
    ) -> Self {
        let inner = device.clone().inner();
        let sizes = param_sizes(net);
        let split = |values: &[f32]| -> Vec<Tensor<1>> {
            let mut offset = 0;
            sizes
                .iter()
                .map(|&len| {
                    let part = values[offset..offset + len].to_vec();
                    offset += len;
                    Tensor::from_data(TensorData::new(part, [len]), &inner)
                })
                .collect()
        };
        let (linear, correction) = match (&objective.linear, &objective.correction) {
            (linear, Some(correction)) if linear_optimizer => {
                let joined = match linear {
                    Some(linear) => linear.iter().zip(correction).map(|(a, b)| a + b).collect(),
                    None => correction.clone(),
                };
                (Some(joined), None)
            }
            (linear, correction) => (linear.clone(), correction.clone()),
        };
        let gradient =
            (objective.proximal.is_some() || linear.is_some()).then(|| GradientCorrection {
                proximal: objective.proximal.map(|mu| (mu, split(anchor))),
                linear: linear.as_deref().map(split),
            });
        Self {
            gradient,
            correction: correction.as_deref().map(|c| CorrectionStep(split(c))),
        }
    }
}

/// Terms added to each step's gradient: `mu * (w - anchor) + linear` for each parameter `w`.
pub(super) struct GradientCorrection {
    proximal: Option<(f32, Vec<Tensor<1>>)>,
    linear: Option<Vec<Tensor<1>>>,
}

impl GradientCorrection {
    /// Adds the terms to the gradients of `net`'s parameters.
    pub(super) fn apply(&self, net: &Net, grads: &mut GradientsParams) {
        net.correct_gradients(grads, &mut |index, mut grad, value| {
            if let Some((mu, anchor)) = &self.proximal {
                grad = grad + (value() - anchor[index].clone()).mul_scalar(*mu);
            }
            if let Some(linear) = &self.linear {
                grad = grad + linear[index].clone();
            }
            grad
        });
    }
}

/// A vector `v` applied after each optimiser step as `w ← w - lr * v`, outside momentum.
pub(super) struct CorrectionStep(Vec<Tensor<1>>);

impl CorrectionStep {
    /// `net` moved by one step of `lr` against the correction; its parameters stay leaves of
    /// the autodiff graph, as an optimiser step leaves them.
    pub(super) fn step(&self, net: Net, lr: f64) -> Net {
        net.map_values(&mut |index, w| w - self.0[index].clone().mul_scalar(lr))
    }
}

/// The number of values of each float parameter of `net`, in flat-vector order.
fn param_sizes(net: &Net) -> Vec<usize> {
    let mut sizes = Vec::new();
    net.walk(&mut |site| sizes.push(site.shape.iter().product()));
    sizes
}
