//! Dense networks: the multilayer perceptron of McMahan et al. (2017), "Communication-Efficient
//! Learning of Deep Networks from Decentralized Data" (784-200-200-10 with ReLU) by default,
//! any widths the experiment file gives, and logistic regression (no hidden layer).

use burn::module::Module;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};

use crate::data::DataShape;

/// The FedAvg paper's two hidden layers of 200 units.
pub(super) fn default_hidden() -> Vec<usize> {
    vec![200, 200]
}

/// Dense layers with ReLU between them.
#[derive(Module, Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
}

impl Mlp {
    /// An MLP with `hidden` layers of those widths over flattened samples of `shape`, with
    /// zeroed parameters.
    pub fn new(hidden: &[usize], shape: DataShape, device: &Device) -> Self {
        let widths = widths(hidden, shape);
        Self {
            layers: widths
                .windows(2)
                .map(|pair| dense(pair[0], pair[1], device))
                .collect(),
        }
    }

    /// Logits for flattened samples `[batch, features]`.
    pub fn forward(&self, features: Tensor<2>) -> Tensor<2> {
        let (last, hidden) = self.layers.split_last().expect("an MLP has a layer");
        let x = hidden
            .iter()
            .fold(features, |x, layer| relu(layer.forward(x)));
        last.forward(x)
    }
}

/// Inputs, hidden widths and classes, in order.
fn widths(hidden: &[usize], shape: DataShape) -> Vec<usize> {
    let mut widths = vec![shape.sample.len()];
    widths.extend_from_slice(hidden);
    widths.push(shape.num_classes);
    widths
}

/// Multiply-adds per sample of each dense layer.
pub(super) fn multiply_adds(hidden: &[usize], shape: DataShape) -> Vec<u64> {
    widths(hidden, shape)
        .windows(2)
        .map(|pair| (pair[0] * pair[1]) as u64)
        .collect()
}

/// A dense layer with zeroed parameters (real values are loaded from a flat vector).
pub(super) fn dense(inputs: usize, outputs: usize, device: &Device) -> Linear {
    LinearConfig::new(inputs, outputs)
        .with_initializer(Initializer::Zeros)
        .init(device)
}
