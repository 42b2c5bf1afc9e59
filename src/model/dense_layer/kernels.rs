//! A dense layer's arithmetic on plain slices: one matrix product, then the bias and the
//! activation in one pass; backward, the activation's mask, the bias gradient and two products.
//!
//! Each step is the arithmetic burn-flex does for `linear` and `relu`, in the same order: the
//! products are the same `gemm` calls on the same strides, the bias is added to each product
//! once, and its gradient sums the rows from zero, one after another. So results are the same
//! bits as burn's composition on flex, which the tests hold them to.

use std::borrow::Cow;

use crate::model::matrix::{Matrix, column_sums, multiply};

/// A layer's sizes for one batch: `[rows, inputs] · [inputs, outputs]`.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Samples in the batch.
    pub rows: usize,
    /// Features of each sample.
    pub inputs: usize,
    /// Units of the layer.
    pub outputs: usize,
}

/// What follows the layer's affine map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    /// Nothing: the logits of a last layer.
    Identity,
    /// `max(x, 0)`, keeping NaN as burn does.
    Relu,
}

impl Activation {
    /// The activation of `x`.
    fn apply(self, x: f32) -> f32 {
        match self {
            Self::Identity => x,
            Self::Relu => pass_relu(x, x),
        }
    }
}

/// `value` where ReLU let `output` through (positive or NaN, as burn-flex's `relu` and
/// `relu_backward` decide), else 0.
fn pass_relu(output: f32, value: f32) -> f32 {
    if output.is_nan() || output > 0.0 {
        value
    } else {
        0.0
    }
}

/// The gradients of one batch's loss.
#[derive(Debug)]
pub struct Gradients {
    /// Of the inputs, `[rows, inputs]`, if asked for.
    pub input: Option<Vec<f32>>,
    /// Of the weight, `[inputs, outputs]`.
    pub weight: Vec<f32>,
    /// Of the bias, `[outputs]`.
    pub bias: Vec<f32>,
}

/// `activation(input · weight + bias)`, `[rows, outputs]`, for `input` `[rows, inputs]` and
/// `weight` `[inputs, outputs]`, all row-major.
pub fn forward(
    shape: &Shape,
    (input, weight, bias): (&[f32], &[f32], &[f32]),
    activation: Activation,
) -> Vec<f32> {
    assert_eq!(bias.len(), shape.outputs, "bias size");
    let mut output = vec![0.0; shape.rows * shape.outputs];
    multiply(
        &mut output,
        Matrix::row_major(input, shape.rows, shape.inputs),
        Matrix::row_major(weight, shape.inputs, shape.outputs),
        false,
    );
    for row in output.chunks_exact_mut(shape.outputs) {
        for (value, bias) in row.iter_mut().zip(bias) {
            *value = activation.apply(*value + bias);
        }
    }
    output
}

/// The gradients for `output_grad`, the loss's gradient with respect to the layer's output;
/// `relu_output` is that output when the layer applied ReLU, whose mask it gives. The inputs'
/// gradient only if `want_input`.
pub fn backward(
    shape: &Shape,
    (input, weight): (&[f32], &[f32]),
    output_grad: &[f32],
    relu_output: Option<&[f32]>,
    want_input: bool,
) -> Gradients {
    let Shape {
        rows,
        inputs,
        outputs,
    } = *shape;
    assert_eq!(output_grad.len(), rows * outputs, "output gradient size");
    let grad: Cow<'_, [f32]> = match relu_output {
        None => Cow::Borrowed(output_grad),
        Some(output) => output
            .iter()
            .zip(output_grad)
            .map(|(&output, &grad)| pass_relu(output, grad))
            .collect(),
    };
    let grad_matrix = Matrix::row_major(&grad, rows, outputs);
    let mut weight_grad = vec![0.0; inputs * outputs];
    let input_matrix = Matrix::row_major(input, rows, inputs);
    multiply(
        &mut weight_grad,
        input_matrix.transposed(),
        grad_matrix,
        false,
    );
    let input_grad = want_input.then(|| {
        let mut input_grad = vec![0.0; rows * inputs];
        let weight_matrix = Matrix::row_major(weight, inputs, outputs);
        multiply(
            &mut input_grad,
            grad_matrix,
            weight_matrix.transposed(),
            false,
        );
        input_grad
    });
    Gradients {
        input: input_grad,
        weight: weight_grad,
        bias: column_sums(&grad, outputs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::matrix::unstructured_values;

    const SHAPE: Shape = Shape {
        rows: 3,
        inputs: 4,
        outputs: 5,
    };

    /// `activation(input · weight + bias)` by its definition, in `f64`.
    fn definition(input: &[f32], weight: &[f32], bias: &[f32], activation: Activation) -> Vec<f64> {
        let mut output = Vec::new();
        for row in input.chunks_exact(SHAPE.inputs) {
            for unit in 0..SHAPE.outputs {
                let sum: f64 = (0..SHAPE.inputs)
                    .map(|i| f64::from(row[i]) * f64::from(weight[i * SHAPE.outputs + unit]))
                    .sum::<f64>()
                    + f64::from(bias[unit]);
                output.push(match activation {
                    Activation::Identity => sum,
                    Activation::Relu => sum.max(0.0),
                });
            }
        }
        output
    }

    fn parameters() -> [Vec<f32>; 3] {
        [
            unstructured_values(SHAPE.rows * SHAPE.inputs, 1),
            unstructured_values(SHAPE.inputs * SHAPE.outputs, 2),
            unstructured_values(SHAPE.outputs, 3),
        ]
    }

    #[test]
    fn forward_follows_the_definition() {
        let [input, weight, bias] = parameters();
        for activation in [Activation::Identity, Activation::Relu] {
            let got = forward(&SHAPE, (&input, &weight, &bias), activation);
            let want = definition(&input, &weight, &bias, activation);
            for (got, want) in got.iter().zip(&want) {
                assert!((f64::from(*got) - want).abs() < 1e-5, "{got} vs {want}");
            }
        }
    }

    /// Every gradient against central differences of `sum(output · direction)`, in `f64`.
    #[test]
    fn gradients_match_finite_differences() {
        let [input, weight, bias] = parameters();
        let direction = unstructured_values(SHAPE.rows * SHAPE.outputs, 4);
        let objective = |input: &[f32], weight: &[f32], bias: &[f32], activation| {
            definition(input, weight, bias, activation)
                .iter()
                .zip(&direction)
                .map(|(output, d)| output * f64::from(*d))
                .sum::<f64>()
        };
        for activation in [Activation::Identity, Activation::Relu] {
            let output = forward(&SHAPE, (&input, &weight, &bias), activation);
            let relu_output = (activation == Activation::Relu).then_some(&output[..]);
            let got = backward(&SHAPE, (&input, &weight), &direction, relu_output, true);
            let mut parameters = [input.clone(), weight.clone(), bias.clone()];
            let computed = [got.input.as_deref().unwrap(), &got.weight, &got.bias];
            for which in 0..3 {
                for i in 0..parameters[which].len() {
                    let step = 1e-3;
                    let original = parameters[which][i];
                    let mut at = |value| {
                        parameters[which][i] = value;
                        let [input, weight, bias] = &parameters;
                        objective(input, weight, bias, activation)
                    };
                    let difference = (at(original + step) - at(original - step)) / (2.0 * 1e-3);
                    parameters[which][i] = original;
                    let got = f64::from(computed[which][i]);
                    assert!((got - difference).abs() < 1e-3, "{got} vs {difference}");
                }
            }
        }
    }

    #[test]
    fn relu_passes_nan_as_burn_does() {
        assert!(Activation::Relu.apply(f32::NAN).is_nan());
        assert_eq!(Activation::Relu.apply(-0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(pass_relu(f32::NAN, 2.0), 2.0);
        assert_eq!(pass_relu(0.0, 2.0), 0.0);
    }
}
