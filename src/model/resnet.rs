//! The CIFAR residual networks of He et al. (2016), "Deep Residual Learning for Image
//! Recognition" (ResNet-20 and its kin: `6n + 2` layers in three stages of 16, 32 and 64
//! channels), with GroupNorm in place of BatchNorm.
//!
//! GroupNorm, not BatchNorm: BatchNorm normalises with statistics of the batch, and keeps
//! running means and variances for evaluation. Under federated training on non-IID clients
//! each client's batches have other statistics, and averaging the running statistics does not
//! give the global data's: Hsieh et al. (2020), "The Non-IID Data Quagmire of Decentralized
//! Machine Learning", show BatchNorm failing there and GroupNorm recovering most of the loss.
//! GroupNorm normalises each sample over groups of channels, so training and evaluation
//! compute the same function and the model holds trainable tensors only: nothing in the flat
//! vector is a statistic that averaging would corrupt.
//!
//! Where a block changes the channel count or the image size, its shortcut is a 1x1
//! convolution of stride 2 with GroupNorm (the paper's option B).
//!
//! `"norm": "batch"` puts BatchNorm in GroupNorm's place, as the paper has it: for FedBN (Li
//! et al. 2021), which keeps each client's BatchNorm layers, statistics included, with the
//! client, and to measure what GroupNorm saves elsewhere. Its running statistics are in the
//! flat vector (`running_mean`, `running_var` in `model-layout.json`).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{
    BatchNorm, BatchNormConfig, GroupNorm, GroupNormConfig, Initializer, Linear, PaddingConfig2d,
};
use burn::tensor::activation::relu;
use burn::tensor::module::adaptive_avg_pool2d;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::dense_layer::{Activation, dense_layer};
use super::mlp::dense;
use super::{Architecture, Input, Net, Network, Outputs, image, images_of, takes_images};
use crate::config::check::Problems;
use crate::data::{DataShape, SampleKind};

/// Channels of the stem and of each stage.
const STAGE_CHANNELS: [usize; 3] = [16, 32, 64];

/// A CIFAR residual network, as an experiment file names it: `"resnet"`.
#[derive(Debug, Clone, Copy)]
pub struct ResnetModel;

/// The residual network's hyperparameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResnetParams {
    /// Layers: 6n + 2.
    pub depth: usize,
    /// GroupNorm's groups per layer.
    pub groups: usize,
    /// The normalisation after each convolution (left out of a resolved config at its
    /// default, so that the configs of runs from before it was offered resolve as they did).
    #[serde(skip_serializing_if = "Normalisation::is_group")]
    pub norm: Normalisation,
}

/// The normalisation of a residual network's convolutions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Normalisation {
    /// GroupNorm, of `groups` groups.
    #[default]
    Group,
    /// BatchNorm, with running statistics.
    Batch,
}

impl Normalisation {
    fn is_group(&self) -> bool {
        *self == Normalisation::Group
    }
}

impl Default for ResnetParams {
    /// ResNet-20, the depth Hsieh et al. train, with 2 groups per GroupNorm.
    fn default() -> Self {
        Self {
            depth: 20,
            groups: 2,
            norm: Normalisation::Group,
        }
    }
}

impl Architecture for ResnetModel {
    type Params = ResnetParams;

    fn name(&self) -> &'static str {
        "resnet"
    }

    fn about(&self) -> &'static str {
        "a CIFAR residual network of He et al. (2016) with GroupNorm: depth = 6n + 2 layers in three stages of 16, 32 and 64 channels"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("depth", "layers: 8, 14, 20, 32, 44, 56 or 110"),
            (
                "groups",
                "GroupNorm's groups per layer; divides 16 (not read with \"norm\": \"batch\")",
            ),
            (
                "norm",
                "\"group\" (GroupNorm, the default) or \"batch\" (BatchNorm, running statistics in the flat vector)",
            ),
        ]
    }

    fn takes(&self, sample: SampleKind) -> bool {
        takes_images(sample)
    }

    fn check(&self, params: &ResnetParams, _: Option<SampleKind>, problems: &mut Problems) {
        check_params(params, problems);
    }

    fn build(&self, params: &ResnetParams, shape: DataShape, device: &Device) -> Net {
        let [channels, ..] = image(shape);
        Net::new(ResNet::new(params, channels, shape.num_classes, device))
    }

    fn multiply_adds(&self, params: &ResnetParams, shape: DataShape) -> Option<Vec<u64>> {
        Some(multiply_adds(params.depth, image(shape), shape.num_classes))
    }
}

/// Adds a problem for a depth or a number of groups that makes no network.
fn check_params(
    &ResnetParams {
        depth,
        groups,
        norm,
    }: &ResnetParams,
    problems: &mut Problems,
) {
    if depth < 8 || !(depth - 2).is_multiple_of(6) {
        problems.add(
            "depth",
            format!("is {depth}; the CIFAR ResNets have 6n + 2 layers: 8, 14, 20, 32, 44, 56, 110"),
        );
    }
    if norm == Normalisation::Group && (groups == 0 || !STAGE_CHANNELS[0].is_multiple_of(groups)) {
        problems.add(
            "groups",
            format!(
                "is {groups}; it must divide 16, the fewest channels of a layer: 1, 2, 4, 8 or 16"
            ),
        );
    }
}

/// The stem, three stages of residual blocks, global average pooling and a dense layer.
#[derive(Module, Debug)]
pub struct ResNet {
    stem: ConvNorm,
    blocks: Vec<Block>,
    output: Linear,
}

/// A 3x3 (or 1x1) convolution without bias, then GroupNorm or BatchNorm.
#[derive(Module, Debug)]
struct ConvNorm {
    conv: Conv2d,
    /// GroupNorm, unless the network has BatchNorm.
    norm: Option<GroupNorm>,
    /// BatchNorm, where the network has it.
    batch_norm: Option<BatchNorm>,
}

/// Two 3x3 convolutions with a shortcut around them.
#[derive(Module, Debug)]
struct Block {
    first: ConvNorm,
    second: ConvNorm,
    /// The projection where the block changes channels and size; none where the input
    /// passes as it is.
    shortcut: Option<ConvNorm>,
}

/// The blocks as (inputs, outputs, stride), in order.
fn block_plan(depth: usize) -> Vec<(usize, usize, usize)> {
    let per_stage = (depth - 2) / 6;
    let mut plan = Vec::new();
    let mut inputs = STAGE_CHANNELS[0];
    for (stage, &outputs) in STAGE_CHANNELS.iter().enumerate() {
        for block in 0..per_stage {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            plan.push((inputs, outputs, stride));
            inputs = outputs;
        }
    }
    plan
}

impl ResNet {
    /// A network of `params.depth` layers for images of `channels`, with zeroed parameters
    /// and the norms' scales at one.
    pub fn new(
        params: &ResnetParams,
        channels: usize,
        num_classes: usize,
        device: &Device,
    ) -> Self {
        let batch = params.norm == Normalisation::Batch;
        let conv_norm = |inputs, outputs, kernel, stride| ConvNorm {
            conv: Conv2dConfig::new([inputs, outputs], [kernel, kernel])
                .with_stride([stride, stride])
                .with_padding(PaddingConfig2d::Explicit(
                    kernel / 2,
                    kernel / 2,
                    kernel / 2,
                    kernel / 2,
                ))
                .with_bias(false)
                .with_initializer(Initializer::Zeros)
                .init(device),
            norm: (!batch).then(|| GroupNormConfig::new(params.groups, outputs).init(device)),
            batch_norm: batch.then(|| BatchNormConfig::new(outputs).init(device)),
        };
        let blocks = block_plan(params.depth)
            .into_iter()
            .map(|(inputs, outputs, stride)| Block {
                first: conv_norm(inputs, outputs, 3, stride),
                second: conv_norm(outputs, outputs, 3, 1),
                shortcut: (inputs != outputs || stride != 1)
                    .then(|| conv_norm(inputs, outputs, 1, stride)),
            })
            .collect();
        Self {
            stem: conv_norm(channels, STAGE_CHANNELS[0], 3, 1),
            blocks,
            output: dense(STAGE_CHANNELS[2], num_classes, device),
        }
    }

    /// Logits for images `[batch, channels, height, width]`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        self.last(self.represent(images))
    }

    /// The input of the last layer: the last block's output, pooled over height and width.
    fn represent(&self, images: Tensor<4>) -> Tensor<2> {
        let x = relu(self.stem.forward(images));
        let x = self.blocks.iter().fold(x, |x, block| block.forward(x));
        adaptive_avg_pool2d(x, [1, 1]).flatten(1, 3)
    }

    /// The last layer: logits from the representation.
    fn last(&self, representation: Tensor<2>) -> Tensor<2> {
        dense_layer(&self.output, representation, Activation::Identity)
    }
}

impl Network for ResNet {
    fn forward(&self, input: Input) -> Tensor<2> {
        ResNet::forward(self, images_of(input, "the residual network"))
    }

    fn outputs(&self, input: Input) -> Outputs {
        Outputs::through(
            self.represent(images_of(input, "the residual network")),
            |r| self.last(r),
        )
    }
}

impl ConvNorm {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let x = self.conv.forward(x);
        match (&self.norm, &self.batch_norm) {
            (Some(norm), _) => norm.forward(x),
            (None, Some(norm)) => norm.forward(x),
            (None, None) => unreachable!("a convolution of the network has a norm"),
        }
    }
}

impl Block {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let shortcut = match &self.shortcut {
            Some(projection) => projection.forward(x.clone()),
            None => x.clone(),
        };
        let y = relu(self.first.forward(x));
        relu(self.second.forward(y) + shortcut)
    }
}

/// Multiply-adds per sample of each convolution and of the dense layer, in order (stride-2
/// layers halve height and width, rounding up as padded convolutions do).
fn multiply_adds(depth: usize, image: [usize; 3], num_classes: usize) -> Vec<u64> {
    let [channels, mut height, mut width] = image;
    let conv = |inputs: usize, outputs: usize, kernel: usize, pixels: usize| {
        (pixels * outputs * inputs * kernel * kernel) as u64
    };
    let mut layers = vec![conv(channels, STAGE_CHANNELS[0], 3, height * width)];
    for (inputs, outputs, stride) in block_plan(depth) {
        if stride == 2 {
            (height, width) = (height.div_ceil(2), width.div_ceil(2));
        }
        let pixels = height * width;
        layers.push(conv(inputs, outputs, 3, pixels));
        layers.push(conv(outputs, outputs, 3, pixels));
        if inputs != outputs || stride != 1 {
            layers.push(conv(inputs, outputs, 1, pixels));
        }
    }
    layers.push((STAGE_CHANNELS[2] * num_classes) as u64);
    layers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ParamKind;
    use crate::registry::Registry;
    use burn::tensor::TensorData;

    #[test]
    fn resnet_20_has_its_parameter_count() {
        let net = ResNet::new(&ResnetParams::default(), 3, 10, &Device::flex());
        // ResNet-20 with option A shortcuts and BatchNorm has 269,722 parameters (He et al.'s
        // 0.27M); GroupNorm has as many, and option B adds two 1x1 projections (16 to 32 and
        // 32 to 64 channels) with their norms.
        let params = net.num_params();
        assert_eq!(params, 269_722 + (16 * 32 + 2 * 32) + (32 * 64 + 2 * 64));
    }

    #[test]
    fn norm_scales_start_at_one_and_shifts_at_zero() {
        let section = serde_json::from_str(r#"{"name": "resnet", "depth": 8}"#).unwrap();
        let model = Registry::builtin().choose_model(&section, None).unwrap();
        let shape = DataShape {
            sample: crate::data::SampleShape::Image([1, 28, 28]),
            num_classes: 10,
        };
        let layout = model.layout(shape).unwrap();
        let kinds: Vec<ParamKind> = layout.params.iter().take(3).map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                ParamKind::Weight,
                ParamKind::NormScale,
                ParamKind::NormShift
            ]
        );
    }

    #[test]
    fn images_of_any_size_give_one_row_of_logits_each() {
        let device = Device::flex();
        let params = ResnetParams {
            depth: 8,
            groups: 4,
            ..ResnetParams::default()
        };
        let net = ResNet::new(&params, 1, 62, &device);
        let images = Tensor::<4>::from_data(
            TensorData::new(vec![0.5f32; 2 * 28 * 28], [2, 1, 28, 28]),
            &device,
        );
        assert_eq!(net.forward(images).dims(), [2, 62]);
        assert_eq!(multiply_adds(8, [1, 28, 28], 62).len(), 1 + 3 * 2 + 2 + 1);
    }

    #[test]
    fn depths_and_groups_that_make_no_network_are_named() {
        let problems = |depth, groups| {
            let mut problems = Problems::new();
            let params = ResnetParams {
                depth,
                groups,
                ..ResnetParams::default()
            };
            check_params(&params, &mut problems);
            problems.into_vec()
        };
        assert!(problems(20, 2).is_empty());
        let fields: Vec<String> = problems(21, 3).into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["depth", "groups"]);
    }
}
