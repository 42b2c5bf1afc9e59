//! The model zoo and the flat parameter view that the federation exchanges.
//!
//! Models are plain burn modules. Outside local training, a model is only ever a flat `f32`
//! vector laid out by [`flat::Layout`]: that is what travels on the links and what strategies
//! aggregate, so nothing outside this module and [`crate::training`] touches burn types.

pub mod cifar_cnn;
pub mod cnn;
mod conv_pool;
pub mod flat;
pub mod lstm;
pub mod mlp;
pub mod resnet;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::data::{DataShape, SampleKind, SampleShape};

pub use cifar_cnn::CifarCnn;
pub use cnn::Cnn;
pub use lstm::CharLstm;
pub use mlp::Mlp;
pub use resnet::ResNet;

/// Which architecture to train, with its hyperparameters, as the experiment file gives it:
/// `{"name": "mlp", "hidden": [200, 200]}`, or the name alone (`"mlp"`) for the defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelConfig {
    /// Multinomial logistic regression: one dense layer from the features to the classes (the
    /// FedProx paper's model for its synthetic data).
    Logistic {},
    /// Dense layers with ReLU between them; the default is the FedAvg paper's "2NN".
    Mlp {
        /// Units of each hidden layer, in order. Default `[200, 200]`.
        #[serde(default = "mlp::default_hidden")]
        hidden: Vec<usize>,
    },
    /// The FedAvg paper's CNN: two 5x5 convolutions (32, 64 channels) with max pooling, then
    /// a 512-unit dense layer. Takes images.
    Cnn {},
    /// The FedAvg paper's CIFAR-10 network: two 5x5 convolutions of 64 channels with 3x3
    /// max pooling of stride 2, then dense layers of 384 and 192 units. Takes images.
    #[serde(rename = "cifar-cnn")]
    CifarCnn {},
    /// A CIFAR residual network of He et al. (2016) with GroupNorm: `depth` = 6n + 2 layers
    /// in three stages of 16, 32 and 64 channels. Takes images.
    Resnet {
        /// Layers: 8, 14, 20, 32, 44, 56 or 110. Default 20.
        #[serde(default = "resnet::default_depth")]
        depth: usize,
        /// GroupNorm's groups per layer; divides 16. Default 2.
        #[serde(default = "resnet::default_groups")]
        groups: usize,
    },
    /// LEAF's next-character model: a character embedding, stacked LSTM layers and a dense
    /// layer from the last step to the vocabulary. Takes character sequences.
    Lstm {
        /// Width of the character embedding. Default 8.
        #[serde(default = "lstm::default_embedding")]
        embedding: usize,
        /// Units of each LSTM layer, in order. Default `[256, 256]`.
        #[serde(default = "lstm::default_hidden")]
        hidden: Vec<usize>,
    },
}

impl ModelConfig {
    /// The FedAvg paper's "2NN".
    pub fn mlp() -> Self {
        ModelConfig::Mlp {
            hidden: mlp::default_hidden(),
        }
    }

    /// The name the experiment file uses.
    pub fn name(&self) -> &'static str {
        match self {
            ModelConfig::Logistic {} => "logistic",
            ModelConfig::Mlp { .. } => "mlp",
            ModelConfig::Cnn {} => "cnn",
            ModelConfig::CifarCnn {} => "cifar-cnn",
            ModelConfig::Resnet { .. } => "resnet",
            ModelConfig::Lstm { .. } => "lstm",
        }
    }

    /// Why the model cannot take samples of `sample`, if it cannot; and every problem with
    /// its hyperparameters, as (field under `model`, message).
    pub fn problems(&self, sample: SampleKind) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if let ModelConfig::Mlp { hidden } | ModelConfig::Lstm { hidden, .. } = self
            && let Some(i) = hidden.iter().position(|&units| units == 0)
        {
            problems.push((
                format!("hidden[{i}]"),
                "is 0; every hidden layer needs at least 1 unit".into(),
            ));
        }
        if let ModelConfig::Lstm { embedding, hidden } = self {
            if *embedding == 0 {
                problems.push(("embedding".into(), "is 0; must be at least 1".into()));
            }
            if hidden.is_empty() {
                problems.push(("hidden".into(), "is empty; the LSTM needs a layer".into()));
            }
        }
        if let ModelConfig::Resnet { depth, groups } = self {
            problems.extend(resnet::problems(*depth, *groups));
        }
        if let (ModelConfig::Cnn {}, SampleKind::Image([_, height, width])) = (self, sample)
            && (height % cnn::DOWNSAMPLING != 0 || width % cnn::DOWNSAMPLING != 0)
        {
            problems.push((
                "name".into(),
                format!("\"cnn\" needs image sides divisible by 4; the data set's images are {height}x{width}"),
            ));
        }
        if let Some(fitting) = self.fitting_models(sample) {
            problems.push((
                "name".into(),
                format!(
                    "{:?} cannot take {}; use {fitting}",
                    self.name(),
                    sample.describe()
                ),
            ));
        }
        problems
    }

    /// The models that fit samples of `sample`, for a message, if this one does not.
    fn fitting_models(&self, sample: SampleKind) -> Option<&'static str> {
        let fits = match self {
            ModelConfig::Logistic {} | ModelConfig::Mlp { .. } => sample != SampleKind::Tokens,
            ModelConfig::Cnn {} | ModelConfig::CifarCnn {} | ModelConfig::Resnet { .. } => {
                matches!(sample, SampleKind::Image(_))
            }
            ModelConfig::Lstm { .. } => sample == SampleKind::Tokens,
        };
        (!fits).then_some(match sample {
            SampleKind::Image(_) => "\"mlp\", \"logistic\", \"cnn\", \"cifar-cnn\" or \"resnet\"",
            SampleKind::Row => "\"mlp\" or \"logistic\"",
            SampleKind::Tokens => "\"lstm\"",
        })
    }

    /// Multiply-adds of one sample's forward pass through each dense and convolution layer,
    /// in layer order (the matrix-product work; activations, pooling and biases are left out).
    pub fn multiply_adds(&self, shape: DataShape) -> Vec<u64> {
        match self {
            ModelConfig::Logistic {} => mlp::multiply_adds(&[], shape),
            ModelConfig::Mlp { hidden } => mlp::multiply_adds(hidden, shape),
            ModelConfig::Cnn {} => cnn::multiply_adds(shape),
            ModelConfig::CifarCnn {} => cifar_cnn::multiply_adds(shape),
            ModelConfig::Resnet { depth, .. } => {
                resnet::multiply_adds(*depth, image(shape), shape.num_classes)
            }
            ModelConfig::Lstm { embedding, hidden } => {
                lstm::multiply_adds(*embedding, hidden, shape.sample.len(), shape)
            }
        }
    }

    /// Floating-point operations (a multiply-add counts two) of one sample's training step:
    /// the forward pass, the weight gradients of every layer, and the input gradients of every
    /// layer but the first. Evaluation is the forward pass alone, [`ModelConfig::multiply_adds`]
    /// summed and doubled.
    pub fn training_flops(&self, shape: DataShape) -> u64 {
        let layers = self.multiply_adds(shape);
        let forward: u64 = layers.iter().sum();
        2 * (2 * forward + layers[1..].iter().sum::<u64>())
    }
}

/// Reads a model given as its name alone (`"mlp"`) or with hyperparameters
/// (`{"name": "mlp", "hidden": [100]}`); for the experiment file's `model` field.
pub fn named_or_configured<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ModelConfig, D::Error> {
    let value = match Value::deserialize(deserializer)? {
        Value::String(name) => serde_json::json!({ "name": name }),
        other => other,
    };
    ModelConfig::deserialize(value).map_err(serde::de::Error::custom)
}

/// An instance of one of the zoo's architectures.
// Few instances exist (one per worker), so the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Net {
    /// See [`Mlp`]; logistic regression is the MLP without hidden layers.
    Mlp(Mlp),
    /// See [`Cnn`].
    Cnn(Cnn),
    /// See [`CifarCnn`].
    CifarCnn(CifarCnn),
    /// See [`ResNet`].
    Resnet(ResNet),
    /// See [`CharLstm`].
    Lstm(CharLstm),
}

/// The image shape of a data set a CNN was configured for.
fn image(shape: DataShape) -> [usize; 3] {
    match shape.sample {
        SampleShape::Image(image) => image,
        _ => panic!("the CNNs take images; validation rejects other data"),
    }
}

/// A batch of samples as the model takes it.
#[derive(Debug, Clone)]
pub enum Input {
    /// Images `[batch, channels, height, width]`.
    Images(Tensor<4>),
    /// Feature rows `[batch, features]`.
    Rows(Tensor<2>),
    /// Token ids `[batch, steps]`.
    Tokens(Tensor<2, Int>),
}

impl Net {
    /// The architecture's name, for messages.
    fn name(&self) -> &'static str {
        match self {
            Net::Mlp(_) => "the MLP",
            Net::Cnn(_) | Net::CifarCnn(_) | Net::Resnet(_) => "a CNN",
            Net::Lstm(_) => "the LSTM",
        }
    }

    /// Builds the architecture `config` for data of `shape`. Parameters start at zero: the
    /// federation loads its seeded initial values (see [`flat::initial_params`]) rather than
    /// using the backend's global RNG. The config must have passed
    /// [`ModelConfig::problems`] for the data.
    pub fn new(config: &ModelConfig, shape: DataShape, device: &Device) -> Self {
        match config {
            ModelConfig::Logistic {} => Net::Mlp(Mlp::new(&[], shape, device)),
            ModelConfig::Mlp { hidden } => Net::Mlp(Mlp::new(hidden, shape, device)),
            ModelConfig::Cnn {} => Net::Cnn(Cnn::new(image(shape), shape.num_classes, device)),
            ModelConfig::CifarCnn {} => {
                Net::CifarCnn(CifarCnn::new(image(shape), shape.num_classes, device))
            }
            ModelConfig::Resnet { depth, groups } => {
                let [channels, ..] = image(shape);
                Net::Resnet(ResNet::new(
                    *depth,
                    *groups,
                    channels,
                    shape.num_classes,
                    device,
                ))
            }
            ModelConfig::Lstm { embedding, hidden } => {
                Net::Lstm(CharLstm::new(*embedding, hidden, shape, device))
            }
        }
    }

    /// Class logits `[batch, classes]` for a batch of samples.
    pub fn forward(&self, input: Input) -> Tensor<2> {
        match (self, input) {
            (Net::Mlp(mlp), Input::Images(images)) => mlp.forward(images.flatten(1, 3)),
            (Net::Mlp(mlp), Input::Rows(rows)) => mlp.forward(rows),
            (Net::Cnn(cnn), Input::Images(images)) => cnn.forward(images),
            (Net::CifarCnn(cnn), Input::Images(images)) => cnn.forward(images),
            (Net::Resnet(resnet), Input::Images(images)) => resnet.forward(images),
            (Net::Lstm(lstm), Input::Tokens(tokens)) => lstm.forward(tokens),
            (net, _) => panic!(
                "{} cannot take this input; validation rejects such data",
                net.name()
            ),
        }
    }
}
