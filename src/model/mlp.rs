//! The multilayer perceptron of McMahan et al. (2017), "Communication-Efficient Learning of
//! Deep Networks from Decentralized Data": 784-200-200-10 with ReLU.

use burn::module::Module;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};

const HIDDEN: usize = 200;

/// Two hidden dense layers of 200 units.
#[derive(Module, Debug)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
}

impl Mlp {
    /// An MLP over flattened samples of `sample_shape`, with zeroed parameters.
    pub fn new(sample_shape: [usize; 3], num_classes: usize, device: &Device) -> Self {
        let inputs = sample_shape.iter().product();
        Self {
            fc1: dense(inputs, HIDDEN, device),
            fc2: dense(HIDDEN, HIDDEN, device),
            fc3: dense(HIDDEN, num_classes, device),
        }
    }

    /// Logits for images `[batch, channels, height, width]`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let x = images.flatten(1, 3);
        let x = relu(self.fc1.forward(x));
        let x = relu(self.fc2.forward(x));
        self.fc3.forward(x)
    }
}

/// Multiply-adds per sample of each dense layer.
pub(super) fn multiply_adds(sample_shape: [usize; 3], num_classes: usize) -> Vec<u64> {
    let inputs: usize = sample_shape.iter().product();
    [inputs * HIDDEN, HIDDEN * HIDDEN, HIDDEN * num_classes]
        .map(|n| n as u64)
        .to_vec()
}

/// A dense layer with zeroed parameters (real values are loaded from a flat vector).
pub(super) fn dense(inputs: usize, outputs: usize, device: &Device) -> Linear {
    LinearConfig::new(inputs, outputs)
        .with_initializer(Initializer::Zeros)
        .init(device)
}
