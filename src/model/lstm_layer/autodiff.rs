//! The layer as an operation of burn's autodiff graph on burn-flex: the forward pass runs
//! [`kernels::forward`] with a trace and records a backward step that runs
//! [`kernels::backward`].

use std::sync::Arc;

use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::tensor::Tensor;

use super::kernels::{self, Shape, Trace};
use super::with_weights;
use crate::model::flex::{Tracked, flex_tensor, tracked, with_all_values, with_values};

/// [`kernels::forward`] on tracked tensors; the output's gradient step is [`LstmLayer`].
pub(super) fn forward(
    shape: Shape,
    sequence: Tensor<3>,
    [input_weight, recurrent_weight]: [Tensor<2>; 2],
    bias: Tensor<1>,
) -> Tensor<3> {
    let (sequence, sequence_node) = tracked(sequence).into_parts();
    let (input_weight, input_node) = tracked(input_weight).into_parts();
    let (bias, bias_node) = tracked(bias).into_parts();
    let (recurrent_weight, recurrent_node) = tracked(recurrent_weight).into_parts();
    let step = LstmLayer
        .prepare::<NoCheckpointing>([sequence_node, input_node, bias_node, recurrent_node])
        .compute_bound()
        .stateful();
    // A trace is kept only when a gradient will be asked for.
    let run = |keep_trace| {
        let (hidden, trace) = with_values(&sequence, |values| {
            with_weights([&input_weight, &bias, &recurrent_weight], |weights| {
                kernels::forward(&shape, values, weights, keep_trace)
            })
        });
        (flex_tensor(hidden, shape.hidden_shape()), trace)
    };
    let output = match step {
        OpsKind::Tracked(prep) => {
            let (hidden, trace) = run(true);
            let saved = Saved {
                shape,
                sequence,
                weights: [input_weight, bias, recurrent_weight],
                hidden: hidden.clone(),
                trace: Arc::new(trace.expect("a trace was asked for")),
            };
            prep.finish(saved, hidden)
        }
        OpsKind::UnTracked(prep) => prep.finish(run(false).0),
    };
    Tensor::from_primitive::<Tracked>(output)
}

/// The backward step of one layer over one sequence.
#[derive(Debug)]
struct LstmLayer;

/// What the backward step reads: the forward pass's inputs and output (not copies: flex
/// tensors share their storage) and its trace.
#[derive(Debug, Clone)]
struct Saved {
    shape: Shape,
    sequence: FlexTensor,
    /// The input weight, the bias and the recurrent weight.
    weights: [FlexTensor; 3],
    hidden: FlexTensor,
    trace: Arc<Trace>,
}

impl Backward<Flex, 4> for LstmLayer {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [sequence_node, input_node, bias_node, recurrent_node] = ops.parents;
        let hidden_grad = grads.consume::<Flex>(&ops.node);
        let Saved {
            shape,
            sequence,
            weights,
            hidden,
            trace,
        } = ops.state;
        let [input_weight, bias, recurrent_weight] = &weights;
        let want_inputs = sequence_node.is_some();
        let values = [&hidden_grad, &hidden, &sequence];
        let computed = with_all_values(values, |[hidden_grad, hidden, sequence]| {
            with_weights([input_weight, bias, recurrent_weight], |weights| {
                let (inputs, states) = ((sequence, weights), (hidden, &*trace));
                kernels::backward(&shape, inputs, states, hidden_grad, want_inputs)
            })
        });
        if let (Some(node), Some(values)) = (sequence_node, computed.inputs) {
            grads.register::<Flex>(node.id, flex_tensor(values, shape.inputs_shape()));
        }
        if let Some(node) = input_node {
            let values = flex_tensor(computed.input, shape.input_weight_shape());
            grads.register::<Flex>(node.id, values);
        }
        if let Some(node) = bias_node {
            grads.register::<Flex>(node.id, flex_tensor(computed.bias, [4 * shape.units]));
        }
        if let Some(node) = recurrent_node {
            let values = flex_tensor(computed.recurrent, shape.recurrent_weight_shape());
            grads.register::<Flex>(node.id, values);
        }
    }
}
