//! The CIFAR-10 network of McMahan et al. (2017), taken there from TensorFlow's CIFAR-10
//! tutorial: conv 5x5 (64) with ReLU and 3x3 max pooling of stride 2, twice, then dense layers
//! of 384 and 192 units with ReLU, then the classes. The tutorial's local response
//! normalisation is left out, and images keep their size (32x32 for CIFAR-10) where the paper
//! cropped them to 24x24: 1.76M parameters instead of about 1M.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Initializer, Linear, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};

use super::dense_layer::{Activation, dense_layer};
use super::mlp::dense;
use super::{Architecture, Input, Net, Network, Outputs, image, images_of, takes_images};
use crate::config::NoParams;
use crate::data::{DataShape, SampleKind, SampleShape};

const KERNEL: usize = 5;
const CHANNELS: usize = 64;
const HIDDEN: [usize; 2] = [384, 192];

/// The FedAvg paper's CIFAR-10 network, as an experiment file names it: `"cifar-cnn"`.
#[derive(Debug, Clone, Copy)]
pub struct CifarCnnModel;

impl Architecture for CifarCnnModel {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        "cifar-cnn"
    }

    fn about(&self) -> &'static str {
        "the CIFAR-10 network of McMahan et al. (2017): two 5x5 convolutions of 64 channels with 3x3 max pooling of stride 2, then dense layers of 384 and 192 units"
    }

    fn takes(&self, sample: SampleKind) -> bool {
        takes_images(sample)
    }

    fn build(&self, _: &NoParams, shape: DataShape, device: &Device) -> Net {
        Net::new(CifarCnn::new(image(shape), shape.num_classes, device))
    }

    fn multiply_adds(&self, _: &NoParams, shape: DataShape) -> Option<Vec<u64>> {
        Some(multiply_adds(shape))
    }
}

/// Two convolution blocks and three dense layers.
#[derive(Module, Debug)]
pub struct CifarCnn {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
}

/// Height or width after one 3x3 pooling of stride 2 and padding 1.
fn pooled(side: usize) -> usize {
    side.div_ceil(2)
}

/// Values after both blocks, for images of `height` x `width`.
fn flat_len(height: usize, width: usize) -> usize {
    CHANNELS * pooled(pooled(height)) * pooled(pooled(width))
}

impl CifarCnn {
    /// The network for images `[channels, height, width]`, with zeroed parameters.
    pub fn new([channels, height, width]: [usize; 3], num_classes: usize, device: &Device) -> Self {
        Self {
            conv1: conv(channels, device),
            conv2: conv(CHANNELS, device),
            pool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            fc1: dense(flat_len(height, width), HIDDEN[0], device),
            fc2: dense(HIDDEN[0], HIDDEN[1], device),
            fc3: dense(HIDDEN[1], num_classes, device),
        }
    }

    /// Logits for images `[batch, channels, height, width]`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        self.last(self.represent(images))
    }

    /// The input of the last layer: the second hidden dense layer's output.
    fn represent(&self, images: Tensor<4>) -> Tensor<2> {
        let x = self.pool.forward(relu(self.conv1.forward(images)));
        let x = self.pool.forward(relu(self.conv2.forward(x)));
        let x = dense_layer(&self.fc1, x.flatten(1, 3), Activation::Relu);
        dense_layer(&self.fc2, x, Activation::Relu)
    }

    /// The last layer: logits from the representation.
    fn last(&self, representation: Tensor<2>) -> Tensor<2> {
        dense_layer(&self.fc3, representation, Activation::Identity)
    }
}

impl Network for CifarCnn {
    fn forward(&self, input: Input) -> Tensor<2> {
        CifarCnn::forward(self, images_of(input, "the CIFAR CNN"))
    }

    fn outputs(&self, input: Input) -> Outputs {
        Outputs::through(self.represent(images_of(input, "the CIFAR CNN")), |r| {
            self.last(r)
        })
    }
}

/// Multiply-adds per sample of each layer.
fn multiply_adds(shape: DataShape) -> Vec<u64> {
    let SampleShape::Image([channels, height, width]) = shape.sample else {
        panic!("the CIFAR CNN takes images; validation rejects other data")
    };
    let second = pooled(height) * pooled(width);
    [
        height * width * CHANNELS * KERNEL * KERNEL * channels,
        second * CHANNELS * KERNEL * KERNEL * CHANNELS,
        flat_len(height, width) * HIDDEN[0],
        HIDDEN[0] * HIDDEN[1],
        HIDDEN[1] * shape.num_classes,
    ]
    .map(|n| n as u64)
    .to_vec()
}

fn conv(inputs: usize, device: &Device) -> Conv2d {
    Conv2dConfig::new([inputs, CHANNELS], [KERNEL, KERNEL])
        .with_padding(PaddingConfig2d::Explicit(2, 2, 2, 2))
        .with_initializer(Initializer::Zeros)
        .init(device)
}
