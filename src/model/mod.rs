//! Model architectures, the networks they build, and the flat parameter view that the
//! federation exchanges.
//!
//! An [`Architecture`] is what an experiment file's `model` section names: the registry
//! ([`crate::registry`]) holds the built-ins below and a user's own alike. It builds a
//! [`Network`], a plain burn module, behind the [`Net`] handle. Outside local training, a model
//! is only ever a flat `f32` vector laid out by [`flat::Layout`]: that is what travels on the
//! links and what strategies aggregate, so nothing outside this module, local training
//! ([`crate::local`]) and the training tier touches burn types.

pub mod cifar_cnn;
pub mod cnn;
mod conv_pool;
mod dense_layer;
pub mod flat;
mod flex;
pub mod layers;
pub mod lstm;
mod lstm_layer;
mod matrix;
pub mod mlp;
pub mod network;
pub mod resnet;
pub mod sharing;

use burn::tensor::Device;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::check::Problems;
use crate::data::{DataShape, SampleKind, SampleShape};

pub use cifar_cnn::{CifarCnn, CifarCnnModel};
pub use cnn::{Cnn, CnnModel, CnnParams};
pub use flat::ParamKind;
pub use lstm::{CharLstm, LstmModel};
pub use mlp::{LogisticModel, Mlp, MlpModel};
pub use network::{Input, Net, Network, Outputs, ParamSite};
pub use resnet::{ResNet, ResnetModel};
pub use sharing::Sharing;

/// A model architecture an experiment file can name, with its hyperparameters:
/// `{"name": "mlp", "hidden": [200, 200]}`, or the name alone (`"mlp"`) for the defaults.
/// Registered with [`crate::registry::RegistryBuilder::model`].
pub trait Architecture: Send + Sync + 'static {
    /// The hyperparameters: every field with a default (`#[serde(default)]` and a `Default`),
    /// and unknown fields rejected (`#[serde(deny_unknown_fields)]`).
    type Params: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static;

    /// The `name` an experiment file gives: lowercase letters, digits, `_` and `-`.
    fn name(&self) -> &'static str;

    /// What it is and where it comes from, in a line, for `fedsim models`.
    fn about(&self) -> &'static str;

    /// What each hyperparameter means, by field name.
    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// Whether it takes samples of this kind at all; rules on their shape go in
    /// [`Architecture::check`]. A model that does not take a data set's samples is refused with
    /// the names of those that do.
    fn takes(&self, sample: SampleKind) -> bool;

    /// Adds to `problems` every rule the hyperparameters break (fields relative to the `model`
    /// section), for the data set's samples where they are known before its files are read.
    fn check(&self, _params: &Self::Params, _sample: Option<SampleKind>, _problems: &mut Problems) {
    }

    /// The network for data of `shape` on `device` (any backend's, with or without autodiff).
    /// Its parameters' values do not matter: fedsim loads the seeded initial values of
    /// [`flat::initial_params`] before it trains, rather than using the backend's global RNG.
    fn build(&self, params: &Self::Params, shape: DataShape, device: &Device) -> Net;

    /// The kind of a parameter that is not a weight or bias of burn's `Linear` or `Conv2d`, an
    /// `Embedding`'s table or a `GroupNorm`'s scale and shift (which fedsim knows), with its
    /// fan-in: how it starts. A network with a parameter of no known kind cannot run.
    fn param_kind(&self, _site: &ParamSite<'_>) -> Option<(ParamKind, usize)> {
        None
    }

    /// Multiply-adds of one sample's forward pass through each dense and convolution layer, in
    /// layer order (activations, pooling and biases left out), for the benchmarks' FLOP floor;
    /// `None` where not worked out.
    fn multiply_adds(&self, _params: &Self::Params, _shape: DataShape) -> Option<Vec<u64>> {
        None
    }
}

/// Floating-point operations (a multiply-add counts two) of one sample's training step, from
/// the multiply-adds of each layer's forward pass: the forward pass, the weight gradients of
/// every layer, and the input gradients of every layer but the first. Evaluation is the
/// forward pass alone, the layers summed and doubled.
pub fn training_flops(layers: &[u64]) -> u64 {
    let forward: u64 = layers.iter().sum();
    2 * (2 * forward + layers.iter().skip(1).sum::<u64>())
}

/// The image shape of a data set a CNN was configured for.
fn image(shape: DataShape) -> [usize; 3] {
    match shape.sample {
        SampleShape::Image(image) => image,
        _ => panic!("the CNNs take images; validation rejects other data"),
    }
}

/// Whether samples are images.
fn takes_images(sample: SampleKind) -> bool {
    matches!(sample, SampleKind::Image(_))
}

/// The images of a batch for `network`, which takes images alone.
fn images_of(input: network::Input, network: &str) -> burn::tensor::Tensor<4> {
    match input {
        network::Input::Images(images) => images,
        other => cannot_take(network, &other),
    }
}

/// The panic of a network handed a batch its architecture does not take: validation rejects
/// such data before a run starts.
fn cannot_take(network: &str, input: &network::Input) -> ! {
    panic!(
        "{network} cannot take {}; validation rejects such data",
        input.kind()
    )
}
