//! The layer as an operation of burn's autodiff graph on burn-flex: the forward pass runs
//! [`kernels::forward`] and records a backward step that runs [`kernels::backward`].

use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::tensor::Tensor;

use super::kernels::{self, Activation, Shape};
use crate::model::flex::{Tracked, flex_tensor, tracked, with_all_values, with_values};

/// [`kernels::forward`] on tracked tensors; the output's gradient step is [`DenseLayer`].
pub(super) fn forward(
    shape: Shape,
    activation: Activation,
    input: Tensor<2>,
    weight: Tensor<2>,
    bias: Tensor<1>,
) -> Tensor<2> {
    let (input, input_node) = tracked(input).into_parts();
    let (weight, weight_node) = tracked(weight).into_parts();
    let (bias, bias_node) = tracked(bias).into_parts();
    let output = flex_tensor(
        super::forward(&shape, activation, [&input, &weight, &bias]),
        [shape.rows, shape.outputs],
    );
    let step = DenseLayer
        .prepare::<NoCheckpointing>([input_node, weight_node, bias_node])
        .compute_bound()
        .stateful();
    let output = match step {
        OpsKind::Tracked(prep) => {
            // Flex tensors share their storage: the step keeps the output, not a copy of it.
            let relu_output = (activation == Activation::Relu).then(|| output.clone());
            let saved = Saved {
                shape,
                input,
                weight,
                relu_output,
            };
            prep.finish(saved, output)
        }
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    Tensor::from_primitive::<Tracked>(output)
}

/// The backward step of one dense layer.
#[derive(Debug)]
struct DenseLayer;

/// What the backward step reads: the forward pass's input and weight, and its output if the
/// layer applied ReLU, whose mask needs it.
#[derive(Debug, Clone)]
struct Saved {
    shape: Shape,
    input: FlexTensor,
    weight: FlexTensor,
    relu_output: Option<FlexTensor>,
}

impl Backward<Flex, 3> for DenseLayer {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [input_node, weight_node, bias_node] = ops.parents;
        let output_grad = grads.consume::<Flex>(&ops.node);
        let Saved {
            shape,
            input,
            weight,
            relu_output,
        } = ops.state;
        let want_input = input_node.is_some();
        let values = [&output_grad, &input, &weight];
        let computed = with_all_values(values, |[output_grad, input, weight]| {
            let backward = |relu_output: Option<&[f32]>| {
                let inputs = (input, weight);
                kernels::backward(&shape, inputs, output_grad, relu_output, want_input)
            };
            match &relu_output {
                Some(output) => with_values(output, |output| backward(Some(output))),
                None => backward(None),
            }
        });
        if let (Some(node), Some(values)) = (input_node, computed.input) {
            grads.register::<Flex>(node.id, flex_tensor(values, [shape.rows, shape.inputs]));
        }
        if let Some(node) = weight_node {
            let values = flex_tensor(computed.weight, [shape.inputs, shape.outputs]);
            grads.register::<Flex>(node.id, values);
        }
        if let Some(node) = bias_node {
            grads.register::<Flex>(node.id, flex_tensor(computed.bias, [shape.outputs]));
        }
    }
}
