//! The convolutional network of McMahan et al. (2017): conv 5x5 (32, padding 2), ReLU,
//! max-pool 2, conv 5x5 (64, padding 2), ReLU, max-pool 2, dense 3136-512, ReLU, dense 512-10;
//! and its BatchNorm variant (`"batch_norm": true`), with BatchNorm after each convolution
//! (before its ReLU), as FedBN's networks (Li et al. 2021) normalise their convolutions (theirs
//! normalise the hidden dense layers too; this one keeps the FedAvg paper's dense layers).
//!
//! BatchNorm normalises each channel with its batch's mean and variance in training and with
//! running estimates of them in evaluation; the running mean and variance are in the flat
//! vector beside the scale and shift (`running_mean`, `running_var` in `model-layout.json`),
//! so a checkpoint holds them, FedAvg averages them as it averages the rest, and FedBN keeps
//! them with each client.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::MaxPool2dConfig;
use burn::nn::{BatchNorm, BatchNormConfig, Initializer, Linear, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::conv_pool::conv_relu_pool;
use super::dense_layer::{Activation, dense_layer};
use super::mlp::dense;
use super::{Architecture, Input, Net, Network, Outputs, image, images_of, takes_images};
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

/// The CNN's hyperparameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CnnParams {
    /// BatchNorm after each convolution (left out of a resolved config when off, so that the
    /// configs of runs from before it was offered resolve as they did).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub batch_norm: bool,
}

impl Architecture for CnnModel {
    type Params = CnnParams;

    fn name(&self) -> &'static str {
        "cnn"
    }

    fn about(&self) -> &'static str {
        "the CNN of McMahan et al. (2017): two 5x5 convolutions (32, 64 channels) with max pooling, then a 512-unit dense layer"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "batch_norm",
            "BatchNorm after each convolution, its running statistics in the flat vector (default false)",
        )]
    }

    fn takes(&self, sample: SampleKind) -> bool {
        takes_images(sample)
    }

    fn check(&self, _: &CnnParams, sample: Option<SampleKind>, problems: &mut Problems) {
        if let Some(SampleKind::Image([_, height, width])) = sample
            && (height % DOWNSAMPLING != 0 || width % DOWNSAMPLING != 0)
        {
            problems.add(
                "name",
                format!("\"cnn\" needs image sides divisible by 4; the data set's images are {height}x{width}"),
            );
        }
    }

    fn build(&self, params: &CnnParams, shape: DataShape, device: &Device) -> Net {
        let cnn = Cnn::new(image(shape), shape.num_classes, device);
        Net::new(match params.batch_norm {
            true => cnn.with_batch_norm(device),
            false => cnn,
        })
    }

    fn multiply_adds(&self, _: &CnnParams, shape: DataShape) -> Option<Vec<u64>> {
        Some(multiply_adds(shape))
    }
}

/// Two convolution blocks and two dense layers.
#[derive(Module, Debug)]
pub struct Cnn {
    conv1: Conv2d,
    /// BatchNorm of the first convolution, in the BatchNorm variant.
    norm1: Option<BatchNorm>,
    conv2: Conv2d,
    /// BatchNorm of the second convolution, in the BatchNorm variant.
    norm2: Option<BatchNorm>,
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
            norm1: None,
            conv2: conv(CHANNELS[0], CHANNELS[1], device),
            norm2: None,
            fc1: dense(flat, HIDDEN, device),
            fc2: dense(HIDDEN, num_classes, device),
        }
    }

    /// This CNN with BatchNorm after each convolution (PyTorch's momentum 0.1 and ε 1e-5).
    pub fn with_batch_norm(self, device: &Device) -> Self {
        Self {
            norm1: Some(BatchNormConfig::new(CHANNELS[0]).init(device)),
            norm2: Some(BatchNormConfig::new(CHANNELS[1]).init(device)),
            ..self
        }
    }

    /// Logits for images `[batch, channels, height, width]`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        self.last(self.represent(images))
    }

    /// The input of the last layer: the hidden dense layer's output.
    fn represent(&self, images: Tensor<4>) -> Tensor<2> {
        let x = block(&self.conv1, self.norm1.as_ref(), images);
        let x = block(&self.conv2, self.norm2.as_ref(), x);
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

/// A convolution, its BatchNorm if it has one, ReLU and a 2x2 max-pool; without BatchNorm the
/// fused block of [`conv_relu_pool`].
fn block(conv: &Conv2d, norm: Option<&BatchNorm>, x: Tensor<4>) -> Tensor<4> {
    match norm {
        None => conv_relu_pool(conv, x),
        Some(norm) => {
            let x = relu(norm.forward(conv.forward(x)));
            MaxPool2dConfig::new([2, 2]).init().forward(x)
        }
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
        let layers = CnnModel
            .multiply_adds(&CnnParams::default(), mnist)
            .unwrap();
        assert_eq!(layers, [627_200, 10_035_200, 1_605_632, 5_120]);
        let forward: u64 = layers.iter().sum();
        let training = 2 * (2 * forward + forward - 627_200);
        assert_eq!(training_flops(&layers), training);
        // About 72 MFLOP per training sample: 5 rounds of 6,000 samples and 5 evaluations of
        // 10,000 test images are the 3.4 TFLOP of the benchmark run.
        let run = 30_000 * training + 50_000 * 2 * forward;
        assert_eq!(run, 3_398_850_560_000);
    }

    #[test]
    fn batch_norm_keeps_its_running_statistics_in_the_flat_vector_and_evaluates_with_them() {
        use crate::model::flat::{self, Layout, ParamKind, initial_params};
        use crate::seed::{Purpose, stream};
        use burn::tensor::TensorData;
        let mnist = DataShape {
            sample: SampleShape::Image([1, 8, 8]),
            num_classes: 10,
        };
        let with_norm = CnnParams { batch_norm: true };
        let device = Device::flex().autodiff();
        let net = CnnModel.build(&with_norm, mnist, &device);
        let layout = Layout::of(&net, &|_| None).unwrap();
        let norm1: Vec<(&str, ParamKind)> = layout.params[2..6]
            .iter()
            .map(|p| (p.name.as_str(), p.kind))
            .collect();
        assert_eq!(
            norm1,
            [
                ("norm1.gamma", ParamKind::NormScale),
                ("norm1.beta", ParamKind::NormShift),
                ("norm1.running_mean", ParamKind::RunningMean),
                ("norm1.running_var", ParamKind::RunningVariance),
            ]
        );
        let initial = initial_params(&layout, &mut stream(1, Purpose::MODEL_INIT, 0, 0));
        let norm_start = layout.params[..2].iter().map(|p| p.len()).sum::<usize>();
        assert_eq!(initial[norm_start..norm_start + 32], [1.0; 32]);
        assert_eq!(initial[norm_start + 96..norm_start + 128], [1.0; 32]);
        // A training pass updates the running statistics, and the flat vector holds the
        // update at once.
        let net = flat::load(net, &initial);
        let values: Vec<f32> = (0..2 * 64).map(|i| (i % 7) as f32 - 3.0).collect();
        let images = Tensor::<4>::from_data(TensorData::new(values, [2, 1, 8, 8]), &device);
        let _ = net.forward(crate::model::Input::Images(images.clone()));
        let trained = flat::flatten(&net);
        let running_mean = &trained[norm_start + 64..norm_start + 96];
        assert!(running_mean.iter().any(|&m| m != 0.0), "{running_mean:?}");
        // Evaluation (no autodiff) normalises with those statistics, not the batch's: a
        // network loaded with the initial ones computes another function.
        let evaluate = |params: &[f32]| {
            let net = flat::load(CnnModel.build(&with_norm, mnist, &Device::flex()), params);
            let images = Tensor::<4>::from_data(images.to_data(), &Device::flex());
            net.forward(crate::model::Input::Images(images)).into_data()
        };
        assert_ne!(evaluate(&trained), evaluate(&initial));
    }
}
