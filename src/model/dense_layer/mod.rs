//! A dense layer and its activation, `activation(x · W + b)`, as one operation on burn-flex.
//!
//! burn-flex runs `linear` as a matrix product into a buffer it zero-fills and then copies
//! into an aligned one, adds the bias in a second pass, and `relu` in a third, with its own
//! backward step; backward, the mask, the bias gradient and each product's output the same
//! way. In MLP training the weight gradient of the first layer alone (627 KB for MNIST's 2NN)
//! was allocated twice a step, and allocation, zeroing and copying took about a tenth of the
//! step. This op makes the same `gemm` calls into buffers of its own, and adds the bias and
//! applies the activation in the product's one pass (`kernels`).
//!
//! The arithmetic is burn-flex's, in the same order, so the results are the same bits as
//! burn's ops on flex (the tests hold them to it): models that use the op train and evaluate
//! exactly as before. As `conv_pool`, it is a backend extension: on flex (with or without
//! autodiff) it runs the kernels; on any other backend, and for a layer without a bias, it
//! composes burn's ops.

mod autodiff;
mod kernels;

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::nn::Linear;
use burn::tensor::Tensor;
use burn::tensor::activation::relu;

pub use kernels::Activation;

use super::flex::{flex_primitive, flex_tensor, on_flex, with_all_values};
use kernels::Shape;

/// `activation(layer(input))` for samples `[rows, inputs]`.
pub fn dense_layer(layer: &Linear, input: Tensor<2>, activation: Activation) -> Tensor<2> {
    let device = input.device();
    let bias = layer.bias.as_ref().map(|bias| bias.val());
    let (true, Some(bias)) = (on_flex(&device), bias) else {
        return compose(layer, input, activation);
    };
    let [rows, inputs] = input.dims();
    let shape = Shape {
        rows,
        inputs,
        outputs: layer.weight.dims()[1],
    };
    let weight = layer.weight.val();
    if device.is_autodiff() {
        return autodiff::forward(shape, activation, input, weight, bias);
    }
    let [input, weight] = [input, weight].map(flex_primitive);
    let output = forward(&shape, activation, [&input, &weight, &flex_primitive(bias)]);
    Tensor::from_primitive::<Flex>(flex_tensor(output, [shape.rows, shape.outputs]))
}

/// [`kernels::forward`] on the flex tensors of the input, the weight and the bias.
fn forward(
    shape: &Shape,
    activation: Activation,
    [input, weight, bias]: [&FlexTensor; 3],
) -> Vec<f32> {
    with_all_values([input, weight, bias], |[input, weight, bias]| {
        kernels::forward(shape, (input, weight, bias), activation)
    })
}

/// The layer from burn's ops: what every other backend runs, and what the kernels must equal.
fn compose(layer: &Linear, input: Tensor<2>, activation: Activation) -> Tensor<2> {
    let output = layer.forward(input);
    match activation {
        Activation::Identity => output,
        Activation::Relu => relu(output),
    }
}

#[cfg(test)]
mod tests {
    use burn::nn::{Initializer, LinearConfig};
    use burn::tensor::{Device, Distribution};

    use super::*;

    /// The shapes of the models' dense layers that the tests run: a small odd one, the 2NN's
    /// first layer on a batch of 32, and the CNN's first dense layer on a batch of 8 (above
    /// the size from which burn-flex multiplies on several threads).
    const SHAPES: [[usize; 3]; 3] = [[5, 7, 3], [32, 784, 200], [8, 3136, 512]];

    fn layer(inputs: usize, outputs: usize, bias: bool, device: &Device) -> Linear {
        LinearConfig::new(inputs, outputs)
            .with_bias(bias)
            .with_initializer(Initializer::Uniform {
                min: -0.1,
                max: 0.1,
            })
            .init(device)
    }

    fn samples(rows: usize, inputs: usize, device: &Device) -> Tensor<2> {
        Tensor::random([rows, inputs], Distribution::Uniform(-1.0, 1.0), device)
    }

    #[test]
    fn evaluation_gives_burns_bits() {
        let device = Device::flex();
        for [rows, inputs, outputs] in SHAPES {
            let layer = layer(inputs, outputs, true, &device);
            let input = samples(rows, inputs, &device);
            for activation in [Activation::Identity, Activation::Relu] {
                let got = dense_layer(&layer, input.clone(), activation);
                let want = compose(&layer, input.clone(), activation);
                assert_eq!(
                    got.into_data(),
                    want.into_data(),
                    "{rows}x{inputs}x{outputs} {activation:?}"
                );
            }
        }
    }

    /// Outputs and the gradients of the input, the weight and the bias, for a loss that reaches
    /// the layer through other weights (so each output's gradient differs).
    #[test]
    fn training_gives_burns_bits() {
        let device = Device::flex().autodiff();
        for [rows, inputs, outputs] in SHAPES {
            let layer = layer(inputs, outputs, true, &device);
            let data = samples(rows, inputs, &device);
            let weights = samples(rows, outputs, &device);
            for activation in [Activation::Identity, Activation::Relu] {
                let run = |block: fn(&Linear, Tensor<2>, Activation) -> Tensor<2>| {
                    let input = data.clone().detach().require_grad();
                    let output = block(&layer, input.clone(), activation);
                    let grads = (output.clone() * weights.clone()).sum().backward();
                    let bias = layer.bias.as_ref().unwrap().val();
                    [
                        output.inner().into_data(),
                        input.grad(&grads).unwrap().into_data(),
                        layer.weight.val().grad(&grads).unwrap().into_data(),
                        bias.grad(&grads).unwrap().into_data(),
                    ]
                };
                let (got, want) = (run(dense_layer), run(compose));
                for (what, (got, want)) in ["output", "input", "weight", "bias"]
                    .iter()
                    .zip(got.into_iter().zip(want))
                {
                    assert_eq!(
                        got, want,
                        "{what}, {rows}x{inputs}x{outputs} {activation:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn without_a_gradient_for_the_input_the_parameters_still_get_theirs() {
        let device = Device::flex().autodiff();
        let layer = layer(6, 4, true, &device);
        let output = dense_layer(&layer, samples(3, 6, &device), Activation::Relu);
        let grads = output.sum().backward();
        assert!(layer.weight.val().grad(&grads).is_some());
        assert!(layer.bias.as_ref().unwrap().val().grad(&grads).is_some());
    }

    #[test]
    fn layers_without_a_bias_and_other_backends_compose_burns_ops_exactly() {
        #[allow(deprecated)] // the one other CPU backend in every build
        let devices = [(Device::flex(), false), (Device::ndarray(), true)];
        for (device, bias) in devices {
            let layer = layer(6, 4, bias, &device);
            let input = samples(3, 6, &device);
            let got = dense_layer(&layer, input.clone(), Activation::Relu);
            assert_eq!(
                got.into_data(),
                compose(&layer, input, Activation::Relu).into_data()
            );
        }
    }
}
