//! The convolutional network of McMahan et al. (2017): conv 5x5 (32, padding 2), ReLU,
//! max-pool 2, conv 5x5 (64, padding 2), ReLU, max-pool 2, dense 3136-512, ReLU, dense 512-10.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Initializer, Linear, PaddingConfig2d};
use burn::tensor::{Device, Tensor};

use super::conv_pool::conv_relu_pool;
use super::dense_layer::{Activation, dense_layer};
use super::mlp::dense;
use super::{Architecture, Input, Net, Network, Outputs, image, images_of, takes_images};
use crate::config::NoParams;
use crate::config::check::Problems;
use crate::data::{DataShape, SampleKind, SampleShape};

const KERNEL: usize = 5;
const CHANNELS: [usize; 2] = [32, 64];
const HIDDEN: usize = 512;
/// Each max-pool halves height and width; there are two.
const DOWNSAMPLING: usize = 4;

/// The FedAvg paper's CNN, as an experiment file names it: `"cnn"`.
#[derive(Debug, Clone, Copy)]
pub struct CnnModel;

impl Architecture for CnnModel {
    type Params = NoParams;

    fn name(&self) -> &'static str {
        "cnn"
    }

    fn about(&self) -> &'static str {
        "the CNN of McMahan et al. (2017): two 5x5 convolutions (32, 64 channels) with max pooling, then a 512-unit dense layer"
    }

    fn takes(&self, sample: SampleKind) -> bool {
        takes_images(sample)
    }

    fn check(&self, _: &NoParams, sample: Option<SampleKind>, problems: &mut Problems) {
        if let Some(SampleKind::Image([_, height, width])) = sample
            && (height % DOWNSAMPLING != 0 || width % DOWNSAMPLING != 0)
        {
            problems.add(
                "name",
                format!("\"cnn\" needs image sides divisible by 4; the data set's images are {height}x{width}"),
            );
        }
    }

    fn build(&self, _: &NoParams, shape: DataShape, device: &Device) -> Net {
        Net::new(Cnn::new(image(shape), shape.num_classes, device))
    }

    fn multiply_adds(&self, _: &NoParams, shape: DataShape) -> Option<Vec<u64>> {
        Some(multiply_adds(shape))
    }
}

/// Two convolution blocks and two dense layers.
#[derive(Module, Debug)]
pub struct Cnn {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
}

impl Cnn {
    /// A CNN for samples of `sample_shape` (`[channels, height, width]`), with zeroed parameters.
    pub fn new(sample_shape: [usize; 3], num_classes: usize, device: &Device) -> Self {
        let [channels, height, width] = sample_shape;
        let flat = CHANNELS[1] * (height / DOWNSAMPLING) * (width / DOWNSAMPLING);
        Self {
            conv1: conv(channels, CHANNELS[0], device),
            conv2: conv(CHANNELS[0], CHANNELS[1], device),
            fc1: dense(flat, HIDDEN, device),
            fc2: dense(HIDDEN, num_classes, device),
        }
    }

    /// Logits for images `[batch, channels, height, width]`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        self.last(self.represent(images))
    }

    /// The input of the last layer: the hidden dense layer's output.
    fn represent(&self, images: Tensor<4>) -> Tensor<2> {
        let x = conv_relu_pool(&self.conv1, images);
        let x = conv_relu_pool(&self.conv2, x);
        dense_layer(&self.fc1, x.flatten(1, 3), Activation::Relu)
    }

    /// The last layer: logits from the representation.
    fn last(&self, representation: Tensor<2>) -> Tensor<2> {
        dense_layer(&self.fc2, representation, Activation::Identity)
    }
}

impl Network for Cnn {
    fn forward(&self, input: Input) -> Tensor<2> {
        Cnn::forward(self, images_of(input, "the CNN"))
    }

    fn outputs(&self, input: Input) -> Outputs {
        Outputs::through(self.represent(images_of(input, "the CNN")), |r| {
            self.last(r)
        })
    }
}

/// Multiply-adds per sample of each layer: a convolution does `kernel² × inputs` for each
/// output value (padding keeps height and width), a dense layer `inputs` for each output.
fn multiply_adds(shape: DataShape) -> Vec<u64> {
    let SampleShape::Image([channels, height, width]) = shape.sample else {
        panic!("the CNN takes images; validation rejects other data")
    };
    let num_classes = shape.num_classes;
    let pixels = height * width;
    let flat = CHANNELS[1] * pixels / (DOWNSAMPLING * DOWNSAMPLING);
    [
        pixels * CHANNELS[0] * KERNEL * KERNEL * channels,
        pixels / 4 * CHANNELS[1] * KERNEL * KERNEL * CHANNELS[0],
        flat * HIDDEN,
        HIDDEN * num_classes,
    ]
    .map(|n| n as u64)
    .to_vec()
}

fn conv(inputs: usize, outputs: usize, device: &Device) -> Conv2d {
    Conv2dConfig::new([inputs, outputs], [KERNEL, KERNEL])
        .with_padding(PaddingConfig2d::Explicit(2, 2, 2, 2))
        .with_initializer(Initializer::Zeros)
        .init(device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::training_flops;

    #[test]
    fn the_fedavg_cnn_costs_what_its_layers_add_up_to() {
        let mnist = DataShape {
            sample: SampleShape::Image([1, 28, 28]),
            num_classes: 10,
        };
        // 28·28·32·25, 14·14·64·800, 3136·512, 512·10.
        let layers = CnnModel.multiply_adds(&NoParams {}, mnist).unwrap();
        assert_eq!(layers, [627_200, 10_035_200, 1_605_632, 5_120]);
        let forward: u64 = layers.iter().sum();
        let training = 2 * (2 * forward + forward - 627_200);
        assert_eq!(training_flops(&layers), training);
        // About 72 MFLOP per training sample: 5 rounds of 6,000 samples and 5 evaluations of
        // 10,000 test images are the 3.4 TFLOP of the benchmark run.
        let run = 30_000 * training + 50_000 * 2 * forward;
        assert_eq!(run, 3_398_850_560_000);
    }
}
