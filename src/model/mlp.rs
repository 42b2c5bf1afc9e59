//! Dense networks: the multilayer perceptron of McMahan et al. (2017), "Communication-Efficient
//! Learning of Deep Networks from Decentralized Data" (784-200-200-10 with ReLU) by default,
//! any widths the experiment file gives, and logistic regression (no hidden layer).

use burn::module::Module;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::dense_layer::{Activation, dense_layer};
use super::{Architecture, Input, Net, Network, Outputs, cannot_take};
use crate::config::check::Problems;
use crate::data::{DataShape, SampleKind};

/// Dense layers with ReLU between them; the default is the FedAvg paper's "2NN".
#[derive(Debug, Clone, Copy)]
pub struct MlpModel;

/// The MLP's hyperparameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MlpParams {
    /// Units of each hidden layer, in order.
    pub hidden: Vec<usize>,
}

impl Default for MlpParams {
    /// The FedAvg paper's two hidden layers of 200 units.
    fn default() -> Self {
        Self {
            hidden: vec![200, 200],
        }
    }
}

impl Architecture for MlpModel {
    type Params = MlpParams;

    fn name(&self) -> &'static str {
        "mlp"
    }

    fn about(&self) -> &'static str {
        "dense layers with ReLU between them; by default the \"2NN\" of McMahan et al. (2017), 784-200-200-10 on MNIST"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("hidden", "units of each hidden layer, in order")]
    }

    fn takes(&self, sample: SampleKind) -> bool {
        sample != SampleKind::Tokens
    }

    fn check(&self, params: &MlpParams, _: Option<SampleKind>, problems: &mut Problems) {
        nonzero_widths(&params.hidden, problems);
    }

    fn build(&self, params: &MlpParams, shape: DataShape, device: &Device) -> Net {
        Net::new(Mlp::new(&params.hidden, shape, device))
    }

    fn multiply_adds(&self, params: &MlpParams, shape: DataShape) -> Option<Vec<u64>> {
        Some(multiply_adds(&params.hidden, shape))
    }
}

/// Multinomial logistic regression: one dense layer from the features to the classes (the
/// FedProx paper's model for its synthetic data), the MLP without hidden layers.
#[derive(Debug, Clone, Copy)]
pub struct LogisticModel;

impl Architecture for LogisticModel {
    type Params = crate::config::NoParams;

    fn name(&self) -> &'static str {
        "logistic"
    }

    fn about(&self) -> &'static str {
        "multinomial logistic regression: one dense layer from the features to the classes"
    }

    fn takes(&self, sample: SampleKind) -> bool {
        sample != SampleKind::Tokens
    }

    fn build(&self, _: &Self::Params, shape: DataShape, device: &Device) -> Net {
        Net::new(Mlp::new(&[], shape, device))
    }

    fn multiply_adds(&self, _: &Self::Params, shape: DataShape) -> Option<Vec<u64>> {
        Some(multiply_adds(&[], shape))
    }
}

/// Adds a problem for the first hidden layer of no unit.
pub(super) fn nonzero_widths(hidden: &[usize], problems: &mut Problems) {
    if let Some(i) = hidden.iter().position(|&units| units == 0) {
        problems.add(
            format!("hidden[{i}]"),
            "is 0; every hidden layer needs at least 1 unit",
        );
    }
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
        self.last(self.represent(features))
    }

    /// The input of the last layer (the last hidden layer's output; the features themselves
    /// without hidden layers).
    fn represent(&self, features: Tensor<2>) -> Tensor<2> {
        let hidden = &self.layers[..self.layers.len() - 1];
        hidden
            .iter()
            .fold(features, |x, layer| dense_layer(layer, x, Activation::Relu))
    }

    /// The last layer: logits from the representation.
    fn last(&self, representation: Tensor<2>) -> Tensor<2> {
        let last = self.layers.last().expect("an MLP has a layer");
        dense_layer(last, representation, Activation::Identity)
    }

    /// Samples as rows of features.
    fn features(input: Input) -> Tensor<2> {
        match input {
            Input::Images(images) => images.flatten(1, 3),
            Input::Rows(rows) => rows,
            other => cannot_take("the MLP", &other),
        }
    }
}

impl Network for Mlp {
    fn forward(&self, input: Input) -> Tensor<2> {
        Mlp::forward(self, Mlp::features(input))
    }

    fn outputs(&self, input: Input) -> Outputs {
        Outputs::through(self.represent(Mlp::features(input)), |r| self.last(r))
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
