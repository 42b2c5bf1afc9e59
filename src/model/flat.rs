//! One flat `f32` vector per model, and the table that says which slice is which parameter.
//!
//! Parameters are visited in the module's declaration order; the same architecture always gives
//! the same layout, so a vector produced by one worker loads into any other worker's model.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Tensor, TensorData};
use rand::RngExt;
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

use super::Net;

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
}

/// One parameter tensor inside the flat vector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParamSpec {
    /// Dotted module path, e.g. `Mlp.layers.0.weight`.
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

impl Layout {
    /// Reads the layout off a model.
    pub fn of(net: &Net) -> Self {
        let mut collector = LayoutCollector::default();
        net.visit(&mut collector);
        Self {
            params: collector.params,
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
/// `±1/sqrt(fan_in)`, embeddings standard normal, norm scales one and shifts zero. Using the run's own stream (not the backend's global RNG) makes the
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
            ParamKind::NormScale => values.extend(std::iter::repeat_n(1.0, spec.len())),
            ParamKind::NormShift => values.extend(std::iter::repeat_n(0.0, spec.len())),
        }
    }
    values
}

/// Copies a model's parameters into one flat vector.
pub fn flatten(net: &Net) -> Vec<f32> {
    let mut flattener = Flattener::default();
    net.visit(&mut flattener);
    flattener.values
}

/// Replaces a model's parameters with the values of a flat vector laid out by [`Layout::of`].
/// The loaded tensors are fresh leaves, so training starts a new autodiff graph.
pub fn load(net: Net, values: &[f32]) -> Net {
    let mut loader = Loader { values, offset: 0 };
    let net = net.map(&mut loader);
    assert_eq!(
        loader.offset,
        values.len(),
        "flat vector has {} values, the model {}",
        values.len(),
        loader.offset
    );
    net
}

#[derive(Default)]
struct LayoutCollector {
    params: Vec<ParamSpec>,
    /// Module path with each entry's container type (`Struct:Linear`, …).
    path: Vec<(String, String)>,
    /// Fan-in of the last weight seen, which its layer's bias shares.
    last_weight_fan_in: usize,
}

impl ModuleVisitor for LayoutCollector {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path
            .push((name.to_string(), container_type.to_string()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let shape = param.lazy_shape().to_vec();
        let (field, container) = self.path.last().cloned().unwrap_or_default();
        let name = self
            .path
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(".");
        let (kind, fan_in) = match (field.as_str(), container.as_str()) {
            ("bias", "Struct:Linear" | "Struct:Conv2d") => {
                (ParamKind::Bias, self.last_weight_fan_in)
            }
            // burn stores dense weights as [inputs, outputs].
            ("weight", "Struct:Linear") => (ParamKind::Weight, shape[0]),
            // Convolution weights are [out, in, kernel...], as in PyTorch.
            ("weight", "Struct:Conv2d") => (ParamKind::Weight, shape[1..].iter().product()),
            // One row per token; no fan-in sets its scale.
            ("weight", "Struct:Embedding") => (ParamKind::Embedding, 1),
            ("gamma", "Struct:GroupNorm") => (ParamKind::NormScale, 1),
            ("beta", "Struct:GroupNorm") => (ParamKind::NormShift, 1),
            _ => panic!("parameter {name} ({container}) has no known kind; add it to ParamKind"),
        };
        self.last_weight_fan_in = fan_in;
        self.params.push(ParamSpec {
            name,
            kind,
            shape,
            fan_in,
        });
    }
}

#[derive(Default)]
struct Flattener {
    values: Vec<f32>,
}

impl ModuleVisitor for Flattener {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let data = param.val().into_data();
        let values = data
            .as_slice::<f32>()
            .expect("fedsim models hold f32 parameters");
        self.values.extend_from_slice(values);
    }
}

struct Loader<'a> {
    values: &'a [f32],
    offset: usize,
}

impl ModuleMapper for Loader<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let shape = param.lazy_shape();
        let len = shape.num_elements();
        let slice = &self.values[self.offset..self.offset + len];
        self.offset += len;
        let device = param.lazy_device();
        let tensor = Tensor::from_data(TensorData::new(slice.to_vec(), shape), &device);
        let id = param.id;
        param.transform_for_load(tensor, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{DataShape, SampleShape};
    use crate::model::ModelConfig;
    use crate::seed::{Purpose, stream};
    use burn::tensor::Device;

    fn mnist_net(kind: ModelConfig) -> Net {
        let shape = DataShape {
            sample: SampleShape::Image([1, 28, 28]),
            num_classes: 10,
        };
        Net::new(&kind, shape, &Device::flex())
    }

    #[test]
    fn mlp_layout_matches_the_architecture() {
        let layout = Layout::of(&mnist_net(ModelConfig::mlp()));
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
        assert_eq!(layout.params[1].name, "Mlp.layers.0.bias");
        let kinds: Vec<ParamKind> = layout.params.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, [ParamKind::Weight, ParamKind::Bias].repeat(3));
    }

    #[test]
    fn cnn_has_the_fedavg_paper_parameter_count() {
        let layout = Layout::of(&mnist_net(ModelConfig::Cnn {}));
        assert_eq!(layout.len(), 1_663_370);
        assert_eq!(layout.params[0].fan_in, 25);
        assert_eq!(layout.params[2].fan_in, 32 * 25);
    }

    #[test]
    fn load_then_flatten_round_trips_exactly() {
        let net = mnist_net(ModelConfig::Cnn {});
        let layout = Layout::of(&net);
        let values = initial_params(&layout, &mut stream(3, Purpose::MODEL_INIT, 0, 0));
        let net = load(net, &values);
        assert_eq!(flatten(&net), values);
    }
}
