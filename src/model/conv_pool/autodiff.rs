//! The block as an operation of burn's autodiff graph on burn-flex: the forward pass runs
//! [`kernels::forward`] and records a backward step that runs [`kernels::backward`].

use std::sync::Arc;

use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::tensor::Tensor;

use super::kernels::{self, Geometry, Winners};
use crate::model::flex::{Tracked, flex_tensor, tracked, with_all_values};

/// [`kernels::forward`] on tracked tensors; the output's gradient step is [`ConvReluPool`].
pub(super) fn forward(
    geometry: Geometry,
    images: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
) -> Tensor<4> {
    let (images, images_node) = tracked(images).into_parts();
    let (weight, weight_node) = tracked(weight).into_parts();
    let (bias, bias_node) = tracked(bias).into_parts();
    let (pooled, winners) = super::forward(&geometry, &images, &weight, &bias);
    let output = flex_tensor(pooled, geometry.pooled_shape());
    let step = ConvReluPool
        .prepare::<NoCheckpointing>([images_node, weight_node, bias_node])
        .compute_bound()
        .stateful();
    let output = match step {
        OpsKind::Tracked(prep) => prep.finish(
            Saved {
                geometry,
                images,
                weight,
                winners: Arc::new(winners),
            },
            output,
        ),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    Tensor::from_primitive::<Tracked>(output)
}

/// The backward step of one block.
#[derive(Debug)]
struct ConvReluPool;

/// What the backward step reads: the forward pass's inputs (not copies: flex tensors share
/// their storage) and its pooling winners.
#[derive(Debug, Clone)]
struct Saved {
    geometry: Geometry,
    images: FlexTensor,
    weight: FlexTensor,
    winners: Arc<Winners>,
}

impl Backward<Flex, 3> for ConvReluPool {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [images_node, weight_node, bias_node] = ops.parents;
        let output_grad = grads.consume::<Flex>(&ops.node);
        let Saved {
            geometry,
            images,
            weight,
            winners,
        } = ops.state;
        let want_images = images_node.is_some();
        let values = [&output_grad, &images, &weight];
        let computed = with_all_values(values, |[output_grad, images, weight]| {
            let inputs = (images, weight);
            kernels::backward(&geometry, inputs, &winners, output_grad, want_images)
        });
        if let (Some(node), Some(values)) = (images_node, computed.images) {
            grads.register::<Flex>(node.id, flex_tensor(values, geometry.images_shape()));
        }
        if let Some(node) = weight_node {
            grads.register::<Flex>(
                node.id,
                flex_tensor(computed.weight, geometry.weight_shape()),
            );
        }
        if let Some(node) = bias_node {
            grads.register::<Flex>(node.id, flex_tensor(computed.bias, [geometry.outputs]));
        }
    }
}
