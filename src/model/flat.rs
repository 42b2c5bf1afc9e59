//! One flat `f32` vector per model, and the table that says which slice is which parameter.
//!
//! Parameters are visited in the module's declaration order; the same architecture always gives
//! the same layout, so a vector produced by one worker loads into any other worker's model.

use rand::RngExt;
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

use burn::tensor::Tensor;

use super::{Net, ParamSite, flex};

/// What a parameter tensor is to its layer, which decides how it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamKind {
    /// The weights of a dense or convolution layer.
    Weight,
    /// The bias of a dense or convolution layer.
    Bias,
    /// A table of learned vectors, one row per token.
    Embedding,
    /// A normalisation layer's per-channel scale (GroupNorm's gamma).
    NormScale,
    /// A normalisation layer's per-channel shift (GroupNorm's beta).
    NormShift,
    /// A BatchNorm layer's running mean of each channel: a statistic that training updates
    /// from its batches and evaluation normalises with, not a trained value.
    RunningMean,
    /// A BatchNorm layer's running variance of each channel, as [`ParamKind::RunningMean`].
    RunningVariance,
}

impl ParamKind {
    /// Whether the parameter belongs to a normalisation layer (its scale, shift or running
    /// statistics): FedBN's personal layers are those made of these alone.
    pub fn is_normalisation(self) -> bool {
        matches!(
            self,
            ParamKind::NormScale
                | ParamKind::NormShift
                | ParamKind::RunningMean
                | ParamKind::RunningVariance
        )
    }
}

/// One parameter tensor inside the flat vector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParamSpec {
    /// Dotted module path, e.g. `layers.0.weight`.
    pub name: String,
    /// What the tensor is.
    pub kind: ParamKind,
    /// Tensor shape as burn stores it (dense weights are `[inputs, outputs]`).
    pub shape: Vec<usize>,
    /// Number of inputs feeding each output unit, which sets the initial value range.
    pub fan_in: usize,
}

impl ParamSpec {
    /// Number of values in this tensor.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The parameters of a model in flat-vector order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// Every float parameter, in the order its values appear in the flat vector.
    pub params: Vec<ParamSpec>,
}

/// A parameter whose kind fedsim cannot tell, so that it cannot say how it starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the model's parameter {name} (in a {container}) is of no kind fedsim knows; its architecture must say what it is (Architecture::param_kind)"
)]
pub struct UnknownParam {
    /// Its dotted module path.
    pub name: String,
    /// The container type burn gives it (`Struct:MyLayer`).
    pub container: String,
}

impl Layout {
    /// Reads the layout off a network. The weights and biases of burn's `Linear` and `Conv2d`,
    /// an `Embedding`'s table, a `GroupNorm`'s scale and shift and a `BatchNorm`'s with its
    /// running statistics are known; `kind_of` says
    /// what any other parameter is, with its fan-in.
    pub fn of(
        net: &Net,
        kind_of: &dyn Fn(&ParamSite<'_>) -> Option<(ParamKind, usize)>,
    ) -> Result<Self, UnknownParam> {
        let mut params = Vec::new();
        let mut last_weight_fan_in = 0;
        let mut unknown = None;
        net.walk(&mut |site| {
            if unknown.is_some() {
                return;
            }
            let name = site
                .path
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(".");
            let Some((kind, fan_in)) =
                known_kind(site, last_weight_fan_in).or_else(|| kind_of(site))
            else {
                let container = site.path.last().map(|(_, c)| c.clone()).unwrap_or_default();
                unknown = Some(UnknownParam { name, container });
                return;
            };
            last_weight_fan_in = fan_in;
            params.push(ParamSpec {
                name,
                kind,
                shape: site.shape.clone(),
                fan_in,
            });
        });
        match unknown {
            Some(unknown) => Err(unknown),
            None => Ok(Self { params }),
        }
    }

    /// Total number of values in the flat vector.
    pub fn len(&self) -> usize {
        self.params.iter().map(ParamSpec::len).sum()
    }

    /// Whether the model has no parameters.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Draws initial parameters tensor by tensor, in layout order, each as its kind starts in
/// PyTorch by default: the weights and biases of `Linear` and `Conv2d` uniform in
/// `±1/sqrt(fan_in)`, embeddings standard normal, norm scales and running variances one,
/// shifts and running means zero. Using the run's own stream (not the backend's global RNG) makes the
/// initial model a function of the seed alone.
pub fn initial_params(layout: &Layout, rng: &mut ChaCha12Rng) -> Vec<f32> {
    let mut values = Vec::with_capacity(layout.len());
    for spec in &layout.params {
        match spec.kind {
            ParamKind::Weight | ParamKind::Bias => {
                let bound = 1.0 / (spec.fan_in as f32).sqrt();
                values.extend((0..spec.len()).map(|_| rng.random_range(-bound..bound)));
            }
            ParamKind::Embedding => {
                values.extend(
                    (0..spec.len()).map(|_| Distribution::<f32>::sample(&StandardNormal, rng)),
                );
            }
            ParamKind::NormScale | ParamKind::RunningVariance => {
                values.extend(std::iter::repeat_n(1.0, spec.len()))
            }
            ParamKind::NormShift | ParamKind::RunningMean => {
                values.extend(std::iter::repeat_n(0.0, spec.len()))
            }
        }
    }
    values
}

/// The kind and fan-in of a parameter of one of burn's layers that fedsim knows; a bias shares
/// the fan-in of the weight before it.
fn known_kind(site: &ParamSite<'_>, last_weight_fan_in: usize) -> Option<(ParamKind, usize)> {
    let (field, container) = site.path.last()?;
    let shape = &site.shape;
    Some(match (field.as_str(), container.as_str()) {
        ("bias", "Struct:Linear" | "Struct:Conv2d") => (ParamKind::Bias, last_weight_fan_in),
        // burn stores dense weights as [inputs, outputs].
        ("weight", "Struct:Linear") => (ParamKind::Weight, shape[0]),
        // Convolution weights are [out, in, kernel...], as in PyTorch.
        ("weight", "Struct:Conv2d") => (ParamKind::Weight, shape[1..].iter().product()),
        // One row per token; no fan-in sets its scale.
        ("weight", "Struct:Embedding") => (ParamKind::Embedding, 1),
        ("gamma", "Struct:GroupNorm" | "Struct:BatchNorm") => (ParamKind::NormScale, 1),
        ("beta", "Struct:GroupNorm" | "Struct:BatchNorm") => (ParamKind::NormShift, 1),
        ("running_mean", "Struct:BatchNorm") => (ParamKind::RunningMean, 1),
        ("running_var", "Struct:BatchNorm") => (ParamKind::RunningVariance, 1),
        _ => return None,
    })
}

/// Copies a model's parameters into one flat vector (BatchNorm's running statistics with their
/// last update).
pub fn flatten(net: &Net) -> Vec<f32> {
    net.settle_running_statistics();
    // Sized up front: growing it tensor by tensor would copy what it holds again each time.
    let mut len = 0;
    net.walk(&mut |site| len += site.shape.iter().product::<usize>());
    let mut values = Vec::with_capacity(len);
    net.walk(&mut |site| append_values(site.value().inner(), &mut values));
    values
}

/// Appends a parameter's values to `values`: read in place on flex, copied out of the tensor
/// first on other backends.
fn append_values(value: Tensor<1>, values: &mut Vec<f32>) {
    if flex::on_flex(&value.device()) {
        flex::with_values(&flex::flex_primitive(value), |read| {
            values.extend_from_slice(read);
        });
    } else {
        let data = value.into_data();
        let read = data
            .as_slice::<f32>()
            .expect("fedsim models hold f32 parameters");
        values.extend_from_slice(read);
    }
}

/// Replaces a model's parameters with the values of a flat vector laid out by [`Layout::of`].
/// The loaded tensors are fresh leaves, so training starts a new autodiff graph.
pub fn load(net: Net, values: &[f32]) -> Net {
    let (net, taken) = net.load_values(values);
    assert_eq!(
        taken,
        values.len(),
        "flat vector has {} values, the model {taken}",
        values.len(),
    );
    net
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{DataShape, SampleShape};
    use crate::model::{Architecture, CnnModel, MlpModel};
    use crate::seed::{Purpose, stream};
    use burn::tensor::Device;

    const MNIST: DataShape = DataShape {
        sample: SampleShape::Image([1, 28, 28]),
        num_classes: 10,
    };

    fn layout(net: &Net) -> Layout {
        Layout::of(net, &|_| None).unwrap()
    }

    #[test]
    fn mlp_layout_matches_the_architecture() {
        let net = MlpModel.build(&Default::default(), MNIST, &Device::flex());
        let layout = layout(&net);
        let shapes: Vec<&[usize]> = layout.params.iter().map(|p| p.shape.as_slice()).collect();
        assert_eq!(
            shapes,
            [
                &[784, 200][..],
                &[200],
                &[200, 200],
                &[200],
                &[200, 10],
                &[10]
            ]
        );
        assert_eq!(layout.len(), 199_210);
        assert_eq!(layout.params[1].fan_in, 784);
        assert_eq!(layout.params[1].name, "layers.0.bias");
        let kinds: Vec<ParamKind> = layout.params.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, [ParamKind::Weight, ParamKind::Bias].repeat(3));
    }

    #[test]
    fn cnn_has_the_fedavg_paper_parameter_count() {
        let layout = layout(&CnnModel.build(&Default::default(), MNIST, &Device::flex()));
        assert_eq!(layout.len(), 1_663_370);
        assert_eq!(layout.params[0].fan_in, 25);
        assert_eq!(layout.params[2].fan_in, 32 * 25);
    }

    #[test]
    fn load_then_flatten_round_trips_exactly() {
        let net = CnnModel.build(&Default::default(), MNIST, &Device::flex());
        let layout = layout(&net);
        let values = initial_params(&layout, &mut stream(3, Purpose::MODEL_INIT, 0, 0));
        let net = load(net, &values);
        assert_eq!(flatten(&net), values);
    }
}
