//! The model zoo and the flat parameter view that the federation exchanges.
//!
//! Models are plain burn modules. Outside local training, a model is only ever a flat `f32`
//! vector laid out by [`flat::Layout`]: that is what travels on the links and what strategies
//! aggregate, so nothing outside this module and [`crate::train`] touches burn types.

pub mod cnn;
mod conv_pool;
pub mod flat;
pub mod mlp;

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

pub use cnn::Cnn;
pub use mlp::Mlp;

/// Which architecture to train, as named in the experiment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// Two hidden layers of 200 units with ReLU (the FedAvg paper's "2NN").
    Mlp,
    /// The FedAvg paper's CNN: two 5x5 convolutions (32, 64 channels) with max pooling, then
    /// a 512-unit dense layer.
    Cnn,
}

impl ModelKind {
    /// The name the experiment file uses.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Cnn => "cnn",
        }
    }

    /// Multiply-adds of one sample's forward pass through each dense and convolution layer,
    /// in layer order (the matrix-product work; activations, pooling and biases are left out).
    pub fn multiply_adds(self, sample_shape: [usize; 3], num_classes: usize) -> Vec<u64> {
        match self {
            ModelKind::Mlp => mlp::multiply_adds(sample_shape, num_classes),
            ModelKind::Cnn => cnn::multiply_adds(sample_shape, num_classes),
        }
    }

    /// Floating-point operations (a multiply-add counts two) of one sample's training step:
    /// the forward pass, the weight gradients of every layer, and the input gradients of every
    /// layer but the first. Evaluation is the forward pass alone, [`ModelKind::multiply_adds`]
    /// summed and doubled.
    pub fn training_flops(self, sample_shape: [usize; 3], num_classes: usize) -> u64 {
        let layers = self.multiply_adds(sample_shape, num_classes);
        let forward: u64 = layers.iter().sum();
        2 * (2 * forward + layers[1..].iter().sum::<u64>())
    }
}

/// An instance of one of the zoo's architectures.
// Few instances exist (one per worker), so the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Net {
    /// See [`Mlp`].
    Mlp(Mlp),
    /// See [`Cnn`].
    Cnn(Cnn),
}

impl Net {
    /// Builds the architecture for samples of `sample_shape` (`[channels, height, width]`) and
    /// `num_classes` outputs. Parameters start at zero: the federation loads its seeded initial
    /// values (see [`flat::initial_params`]) rather than using the backend's global RNG.
    pub fn new(
        kind: ModelKind,
        sample_shape: [usize; 3],
        num_classes: usize,
        device: &Device,
    ) -> Self {
        match kind {
            ModelKind::Mlp => Net::Mlp(Mlp::new(sample_shape, num_classes, device)),
            ModelKind::Cnn => Net::Cnn(Cnn::new(sample_shape, num_classes, device)),
        }
    }

    /// Class logits `[batch, classes]` for images `[batch, channels, height, width]`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        match self {
            Net::Mlp(mlp) => mlp.forward(images),
            Net::Cnn(cnn) => cnn.forward(images),
        }
    }
}
