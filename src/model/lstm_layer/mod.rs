//! One LSTM layer over a whole sequence as one operation on burn-flex.
//!
//! Composed from burn's ops, each time step of the layer is a dozen small operations (a slice
//! of the input products, the recurrent product, the sum, four gate activations, the cell
//! update), each allocating its output and recording its own backward step, and burn-flex
//! computes `sigmoid` and `tanh` one value at a time through libm: on LEAF's Shakespeare task
//! the model ran at a fourteenth of the machine's matrix-product rate. This op does the same
//! arithmetic in `kernels`: the input products of every step in one product, then per step
//! the recurrent product into the step's pre-activations and passes over each sequence's row
//! that apply the gates' non-linearities (through a polynomial `exp` that runs on vector
//! registers) and update the cell, into buffers allocated once per sequence; its backward pass
//! through time is hand-written, a few passes and one product per step, then one product per
//! parameter for the whole sequence. The per-step products, a few rows against weights that
//! every step shares, run in `step_product`, a kernel of fedsim's own that reads the weights in
//! place (a general matrix product would copy them into its own layout at every step); the
//! element-wise passes and that kernel are compiled for each vector width (`vectors`).
//!
//! As `conv_pool`, it is a backend extension: on flex (with or without autodiff) it runs the
//! kernels; on any other backend it composes burn's ops, so ndarray and wgpu results are what
//! they were. On flex, results differ from burn's ops in the low bits (another `exp`, another
//! summation order), and are as reproducible.

mod autodiff;
mod kernels;
mod step_product;
mod vectors;

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::nn::Linear;
use burn::tensor::Tensor;
use burn::tensor::activation::sigmoid;

use super::flex::{flex_primitive, flex_tensor, on_flex, with_all_values, with_values};
use kernels::Shape;

/// The hidden state `[steps, batch, units]` after each step of `sequence`
/// `[steps, batch, inputs]`, from zero state, of the LSTM layer whose gates' pre-activations
/// are `input(x_t) + recurrent(h_{t-1})`, each `[batch, 4 · units]` with the gates side by side
/// in the order input, forget, candidate, output (`input` with the biases, `recurrent`
/// without).
pub fn lstm_layer(input: &Linear, recurrent: &Linear, sequence: Tensor<3>) -> Tensor<3> {
    let device = sequence.device();
    let bias = input.bias.as_ref().map(|bias| bias.val());
    let (true, Some(bias)) = (on_flex(&device), bias) else {
        return compose(input, recurrent, sequence);
    };
    let [steps, batch, inputs] = sequence.dims();
    let shape = Shape {
        steps,
        batch,
        inputs,
        units: recurrent.weight.dims()[0],
    };
    let (input_weight, recurrent_weight) = (input.weight.val(), recurrent.weight.val());
    if device.is_autodiff() {
        return autodiff::forward(shape, sequence, [input_weight, recurrent_weight], bias);
    }
    let sequence = flex_primitive(sequence);
    let [input_weight, recurrent_weight] = [input_weight, recurrent_weight].map(flex_primitive);
    let bias = flex_primitive(bias);
    let (hidden, _) = with_values(&sequence, |sequence| {
        with_weights([&input_weight, &bias, &recurrent_weight], |weights| {
            kernels::forward(&shape, sequence, weights, false)
        })
    });
    Tensor::from_primitive::<Flex>(flex_tensor(hidden, shape.hidden_shape()))
}

/// Runs `read` on the values of the input weight, the bias and the recurrent weight.
fn with_weights<R>(weights: [&FlexTensor; 3], read: impl FnOnce(kernels::Weights<'_>) -> R) -> R {
    with_all_values(weights, |[input, bias, recurrent]| {
        read(kernels::Weights {
            input,
            bias,
            recurrent,
        })
    })
}

/// The layer from burn's ops: what every backend but flex runs, and the definition the
/// kernels must agree with.
fn compose(input: &Linear, recurrent: &Linear, sequence: Tensor<3>) -> Tensor<3> {
    let [steps, batch, inputs] = sequence.dims();
    let units = recurrent.weight.dims()[0];
    let gate_inputs = input
        .forward(sequence.reshape([steps * batch, inputs]))
        .reshape([steps, batch, 4 * units]);
    let device = gate_inputs.device();
    let mut hidden = Tensor::<2>::zeros([batch, units], &device);
    let mut cell = Tensor::<2>::zeros([batch, units], &device);
    let mut outputs = Vec::with_capacity(steps);
    for step in 0..steps {
        let pre_activations = gate_inputs
            .clone()
            .narrow(0, step, 1)
            .reshape([batch, 4 * units])
            + recurrent.forward(hidden);
        let [input, forget, candidate, output] =
            <[Tensor<2>; 4]>::try_from(pre_activations.chunk(4, 1)).expect("four gates");
        cell = sigmoid(forget) * cell + sigmoid(input) * tanh_by_sigmoid(candidate);
        hidden = sigmoid(output) * tanh_by_sigmoid(cell.clone());
        outputs.push(hidden.clone());
    }
    Tensor::stack(outputs, 0)
}

/// `tanh(x)` as `2 sigmoid(2x) - 1`: burn-flex computes `tanh` through libm's slow `expm1f`,
/// `sigmoid` through `expf`.
fn tanh_by_sigmoid(x: Tensor<2>) -> Tensor<2> {
    sigmoid(x.mul_scalar(2.0)).mul_scalar(2.0).sub_scalar(1.0)
}

#[cfg(test)]
mod tests {
    use burn::nn::{Initializer, LinearConfig};
    use burn::tensor::{Device, Distribution};

    use super::*;
    use crate::model::flex::assert_close;

    /// A layer of 5 units over inputs of 3, with the model's two `Linear`s.
    fn layer(device: &Device) -> (Linear, Linear) {
        let init = Initializer::Uniform {
            min: -0.6,
            max: 0.6,
        };
        let linear = |inputs, bias| {
            LinearConfig::new(inputs, 20)
                .with_bias(bias)
                .with_initializer(init.clone())
                .init(device)
        };
        (linear(3, true), linear(5, false))
    }

    #[test]
    fn evaluation_agrees_with_burns_ops() {
        let device = Device::flex();
        let (input, recurrent) = layer(&device);
        let sequence = Tensor::<3>::random([7, 4, 3], Distribution::Uniform(-1.0, 1.0), &device);
        assert_close(
            lstm_layer(&input, &recurrent, sequence.clone()),
            compose(&input, &recurrent, sequence),
            (1e-5, 1e-5),
        );
    }

    #[test]
    fn training_output_and_every_gradient_agree_with_burns_ops() {
        let device = Device::flex().autodiff();
        let (input, recurrent) = layer(&device);
        let data = Tensor::<3>::random([6, 4, 3], Distribution::Uniform(-1.0, 1.0), &device);
        let directions = Tensor::<3>::random([6, 4, 5], Distribution::Uniform(-1.0, 1.0), &device);
        let grads_of = |run: fn(&Linear, &Linear, Tensor<3>) -> Tensor<3>| {
            let sequence = data.clone().detach().require_grad();
            let output = run(&input, &recurrent, sequence.clone());
            let grads = (output.clone() * directions.clone()).sum().backward();
            let bias = input.bias.as_ref().unwrap().val();
            (
                output.inner(),
                sequence.grad(&grads).unwrap(),
                [
                    input.weight.val().grad(&grads).unwrap(),
                    recurrent.weight.val().grad(&grads).unwrap(),
                ],
                bias.grad(&grads).unwrap(),
            )
        };
        let (output, sequence, [input_weight, recurrent_weight], bias) = grads_of(lstm_layer);
        let (want_output, want_sequence, [want_input, want_recurrent], want_bias) =
            grads_of(compose);
        assert_close(output, want_output, (1e-5, 1e-5));
        assert_close(sequence, want_sequence, (1e-5, 1e-5));
        assert_close(input_weight, want_input, (1e-5, 1e-5));
        assert_close(recurrent_weight, want_recurrent, (1e-5, 1e-5));
        assert_close(bias, want_bias, (1e-5, 1e-5));
    }

    #[test]
    fn other_backends_compose_burns_ops_exactly() {
        #[allow(deprecated)] // the one other CPU backend in every build
        let device = Device::ndarray();
        let (input, recurrent) = layer(&device);
        let sequence = Tensor::<3>::random([3, 2, 3], Distribution::Uniform(-1.0, 1.0), &device);
        let got = lstm_layer(&input, &recurrent, sequence.clone()).into_data();
        assert_eq!(got, compose(&input, &recurrent, sequence).into_data());
    }
}
