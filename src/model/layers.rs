//! The layers the built-in models are made of, for a model of one's own to compose: a
//! convolution block with its ReLU and pooling, a dense layer with its activation, and an LSTM
//! layer over a whole sequence. Each is a burn module made from a config, as burn's layers
//! are (`DenseConfig::new(784, 200).init(&device)`), and each runs as one operation on
//! burn-flex, with or without autodiff, where the same network composed from burn's layers
//! runs several ops with a pass over memory each: on MNIST, NIID-Bench's LeNet trains about
//! twice as fast on these (`benches/README.md`). On every other backend they compose burn's
//! own ops, so a model made of them runs anywhere a burn model does.
//!
//! Their parameters start at zero: fedsim loads the seeded initial values of
//! [`super::flat::initial_params`] before it trains, as it does for burn's layers, and the
//! parameters are burn's `Conv2d` and `Linear` weights and biases, so they start as PyTorch's
//! layers do.

use burn::config::Config;
use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Initializer, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::{Device, Tensor};

pub use super::dense_layer::Activation;

use super::conv_pool::conv_relu_pool;
use super::dense_layer::dense_layer;
use super::lstm_layer::lstm_layer;
use super::mlp::dense;

/// The config of a [`ConvPool`] block.
#[derive(Config, Debug)]
pub struct ConvPoolConfig {
    /// Input and output channels.
    pub channels: [usize; 2],
    /// The side of the square kernel.
    pub kernel_size: usize,
    /// The convolution's zero padding; "valid" (none) by default, as in burn's `Conv2dConfig`.
    #[config(default = "PaddingConfig2d::Valid")]
    pub padding: PaddingConfig2d,
}

impl ConvPoolConfig {
    /// The block, its parameters zeroed.
    pub fn init(&self, device: &Device) -> ConvPool {
        let kernel = [self.kernel_size; 2];
        ConvPool {
            conv: Conv2dConfig::new(self.channels, kernel)
                .with_padding(self.padding.clone())
                .with_initializer(Initializer::Zeros)
                .init(device),
        }
    }
}

/// `maxpool2(relu(conv(x)))`: a stride-1 convolution with a bias, ReLU, and 2x2 max pooling of
/// stride 2, the block of LeNet and of the FedAvg paper's CNN. It runs as one operation where
/// the padding is the same on every side and the convolution's output has even sides (as in
/// those networks on MNIST and CIFAR-10); otherwise it composes burn's ops.
#[derive(Module, Debug)]
pub struct ConvPool {
    /// The convolution, `[outputs, inputs, kernel, kernel]` weights and a bias.
    pub conv: Conv2d,
}

impl ConvPool {
    /// The pooled feature maps `[batch, outputs, height', width']` of images
    /// `[batch, channels, height, width]`, where `height'` is half the convolution's output
    /// height, rounded down.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<4> {
        conv_relu_pool(&self.conv, images)
    }
}

/// The config of a [`Dense`] layer.
#[derive(Config, Debug)]
pub struct DenseConfig {
    /// Input features.
    pub d_input: usize,
    /// Output features.
    pub d_output: usize,
    /// What follows the affine map: ReLU by default; `Activation::Identity` for logits.
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
}

impl DenseConfig {
    /// The layer, its parameters zeroed.
    pub fn init(&self, device: &Device) -> Dense {
        Dense {
            linear: dense(self.d_input, self.d_output, device),
            activation: self.activation,
        }
    }
}

/// `activation(x · W + b)`: burn's `Linear` and its activation as one operation, giving the
/// same bits as burn's `Linear` and `relu` on flex.
#[derive(Module, Debug)]
pub struct Dense {
    /// The affine map, weight `[inputs, outputs]` and bias.
    pub linear: Linear,
    /// What follows it.
    #[module(skip)]
    pub activation: Activation,
}

impl Dense {
    /// The outputs `[rows, outputs]` of inputs `[rows, inputs]`.
    pub fn forward(&self, input: Tensor<2>) -> Tensor<2> {
        dense_layer(&self.linear, input, self.activation)
    }
}

/// The config of an [`LstmLayer`].
#[derive(Config, Debug)]
pub struct LstmLayerConfig {
    /// Input features per step.
    pub d_input: usize,
    /// Hidden units.
    pub units: usize,
}

impl LstmLayerConfig {
    /// The layer, its parameters zeroed.
    pub fn init(&self, device: &Device) -> LstmLayer {
        let gates = 4 * self.units;
        LstmLayer {
            input: dense(self.d_input, gates, device),
            recurrent: LinearConfig::new(self.units, gates)
                .with_bias(false)
                .with_initializer(Initializer::Zeros)
                .init(device),
        }
    }
}

/// One LSTM layer (Hochreiter and Schmidhuber 1997, with a forget gate), gates in the order
/// input, forget, cell, output, as PyTorch's `nn.LSTM` orders them; it starts from zero state.
#[derive(Module, Debug)]
pub struct LstmLayer {
    /// Input to the four gates' pre-activations `[inputs, 4 · units]`, with the gates' biases.
    pub input: Linear,
    /// Hidden state to the four gates' pre-activations `[units, 4 · units]`, without a bias.
    pub recurrent: Linear,
}

impl LstmLayer {
    /// The hidden state `[steps, batch, units]` after each step of a time-major sequence
    /// `[steps, batch, inputs]`.
    pub fn forward(&self, sequence: Tensor<3>) -> Tensor<3> {
        lstm_layer(&self.input, &self.recurrent, sequence)
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::activation::relu;
    use burn::tensor::module::max_pool2d;
    use burn::tensor::ops::MaxPoolOptions;
    use burn::tensor::{Distribution, Tensor};

    use super::*;
    use burn::module::Param;

    use crate::model::flat::{self, Layout, ParamKind};
    use crate::model::{Input, Net, Network};
    use crate::seed::{Purpose, stream};

    /// A small LeNet of the three layers.
    #[derive(Module, Debug)]
    struct Small {
        block: ConvPool,
        lstm: LstmLayer,
        hidden: Dense,
        logits: Dense,
    }

    impl Network for Small {
        fn forward(&self, input: Input) -> Tensor<2> {
            let Input::Images(images) = input else {
                unreachable!()
            };
            let features = self.block.forward(images); // [batch, 4, 3, 3]
            let [batch, ..] = features.dims();
            let sequence = features.reshape([batch, 4, 9]).swap_dims(0, 1);
            let last = self
                .lstm
                .forward(sequence)
                .narrow(0, 3, 1)
                .reshape([batch, 5]);
            self.logits.forward(self.hidden.forward(last))
        }
    }

    fn small(device: &Device) -> Net {
        Net::new(Small {
            block: ConvPoolConfig::new([2, 4], 3)
                .with_padding(PaddingConfig2d::Same)
                .init(device),
            lstm: LstmLayerConfig::new(9, 5).init(device),
            hidden: DenseConfig::new(5, 7).init(device),
            logits: DenseConfig::new(7, 3)
                .with_activation(Activation::Identity)
                .init(device),
        })
    }

    #[test]
    fn a_network_of_the_layers_has_parameters_fedsim_knows_and_starts_them_seeded() {
        let net = small(&Device::flex());
        let layout = Layout::of(&net, &|_| None).expect("every parameter is burn's");
        let named: Vec<(&str, ParamKind)> = layout
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.kind))
            .collect();
        assert_eq!(
            named,
            [
                ("block.conv.weight", ParamKind::Weight),
                ("block.conv.bias", ParamKind::Bias),
                ("lstm.input.weight", ParamKind::Weight),
                ("lstm.input.bias", ParamKind::Bias),
                ("lstm.recurrent.weight", ParamKind::Weight),
                ("hidden.linear.weight", ParamKind::Weight),
                ("hidden.linear.bias", ParamKind::Bias),
                ("logits.linear.weight", ParamKind::Weight),
                ("logits.linear.bias", ParamKind::Bias),
            ]
        );
        assert!(
            flat::flatten(&net).iter().all(|&v| v == 0.0),
            "built zeroed"
        );
        let initial = flat::initial_params(&layout, &mut stream(1, Purpose::MODEL_INIT, 0, 0));
        let net = flat::load(net, &initial);
        let images = Tensor::<4>::random(
            [2, 2, 6, 6],
            Distribution::Uniform(0.0, 1.0),
            &Device::flex(),
        );
        assert_eq!(net.forward(Input::Images(images)).dims(), [2, 3]);
    }

    /// Each layer computes what its config says: the padding reaches the convolution and the
    /// activation the dense layer (checked against burn's ops on the backend that runs them).
    #[test]
    fn the_configs_reach_the_layers() {
        #[allow(deprecated)] // the one other CPU backend in every build
        let device = Device::ndarray();
        let random = |shape: [usize; 4]| {
            Tensor::<4>::random(shape, Distribution::Uniform(-1.0, 1.0), &device)
        };
        for (padding, side) in [(PaddingConfig2d::Valid, 2), (PaddingConfig2d::Same, 3)] {
            let mut block = ConvPoolConfig::new([1, 2], 3)
                .with_padding(padding)
                .init(&device);
            block.conv.weight = Param::from_tensor(random([2, 1, 3, 3]));
            let images = random([1, 1, 6, 6]);
            let convolved = block.conv.forward(images.clone());
            let want = max_pool2d(relu(convolved), MaxPoolOptions::new([2, 2]));
            let got = block.forward(images);
            assert_eq!(got.dims(), [1, 2, side, side]);
            assert_eq!(got.into_data(), want.into_data());
        }
        let rows = random([1, 1, 3, 4]).reshape([3, 4]);
        for activation in [Activation::Relu, Activation::Identity] {
            let mut dense = DenseConfig::new(4, 2)
                .with_activation(activation)
                .init(&device);
            dense.linear.weight = Param::from_tensor(random([1, 1, 4, 2]).reshape([4, 2]));
            let affine = dense.linear.forward(rows.clone());
            let want = match activation {
                Activation::Relu => relu(affine),
                Activation::Identity => affine,
            };
            assert_eq!(dense.forward(rows.clone()).into_data(), want.into_data());
        }
    }
}
