//! LEAF's next-character model for Shakespeare (Caldas et al. 2018, "LEAF: A Benchmark for
//! Federated Settings"): an 8-dimensional character embedding, two LSTM layers of 256 units,
//! and a dense layer from the last step's output to the vocabulary.
//!
//! The LSTM layers are written here rather than taken from `burn::nn::Lstm`, which computes
//! each of the four gates with two matrix products per time step. Here the input products
//! of all time steps are one matrix product before the loop, and each step does a single
//! product of the hidden state with the four gates' weights side by side: the same
//! arithmetic in far fewer, larger operations. On burn-flex each layer runs as one operation
//! of fedsim's own: the public [`LstmLayer`].

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Initializer, Linear};
use burn::tensor::{Device, Int, Tensor};
use serde::{Deserialize, Serialize};

use super::dense_layer::{Activation, dense_layer};
use super::layers::{LstmLayer, LstmLayerConfig};
use super::mlp::{dense, nonzero_widths};
use super::{Architecture, Input, Net, Network, Outputs, cannot_take};
use crate::config::check::Problems;
use crate::data::{DataShape, SampleKind};

/// LEAF's next-character model, as an experiment file names it: `"lstm"`.
#[derive(Debug, Clone, Copy)]
pub struct LstmModel;

/// The LSTM's hyperparameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LstmParams {
    /// Width of the character embedding.
    pub embedding: usize,
    /// Units of each LSTM layer, in order.
    pub hidden: Vec<usize>,
}

impl Default for LstmParams {
    /// LEAF's: an embedding of 8 and two layers of 256 units.
    fn default() -> Self {
        Self {
            embedding: 8,
            hidden: vec![256, 256],
        }
    }
}

impl Architecture for LstmModel {
    type Params = LstmParams;

    fn name(&self) -> &'static str {
        "lstm"
    }

    fn about(&self) -> &'static str {
        "LEAF's next-character model (Caldas et al. 2018): a character embedding, stacked LSTM layers and a dense layer from the last step to the vocabulary"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("embedding", "width of the character embedding"),
            ("hidden", "units of each LSTM layer, in order"),
        ]
    }

    fn takes(&self, sample: SampleKind) -> bool {
        sample == SampleKind::Tokens
    }

    fn check(&self, params: &LstmParams, _: Option<SampleKind>, problems: &mut Problems) {
        nonzero_widths(&params.hidden, problems);
        if params.embedding == 0 {
            problems.add("embedding", "is 0; must be at least 1");
        }
        if params.hidden.is_empty() {
            problems.add("hidden", "is empty; the LSTM needs a layer");
        }
    }

    fn build(&self, params: &LstmParams, shape: DataShape, device: &Device) -> Net {
        Net::new(CharLstm::new(
            params.embedding,
            &params.hidden,
            shape,
            device,
        ))
    }

    fn multiply_adds(&self, params: &LstmParams, shape: DataShape) -> Option<Vec<u64>> {
        let steps = shape.sample.len();
        Some(multiply_adds(
            params.embedding,
            &params.hidden,
            steps,
            shape,
        ))
    }
}

/// A character embedding, stacked LSTM layers and a dense output layer.
#[derive(Module, Debug)]
pub struct CharLstm {
    embedding: Embedding,
    layers: Vec<LstmLayer>,
    output: Linear,
}

impl CharLstm {
    /// A model over a vocabulary of `shape.num_classes` characters (the classes are the next
    /// character), with zeroed parameters.
    pub fn new(embedding: usize, hidden: &[usize], shape: DataShape, device: &Device) -> Self {
        let vocabulary = shape.num_classes;
        let mut inputs = embedding;
        let layers = hidden
            .iter()
            .map(|&units| {
                let layer = LstmLayerConfig::new(inputs, units).init(device);
                inputs = units;
                layer
            })
            .collect();
        Self {
            embedding: EmbeddingConfig::new(vocabulary, embedding)
                .with_initializer(Initializer::Zeros)
                .init(device),
            layers,
            output: dense(inputs, vocabulary, device),
        }
    }

    /// Next-character logits `[batch, vocabulary]` for character ids `[batch, steps]`.
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<2> {
        self.last(self.represent(tokens))
    }

    /// The input of the last layer: the last LSTM layer's output at the last step.
    fn represent(&self, tokens: Tensor<2, Int>) -> Tensor<2> {
        // Time-major from here on, so that each step's rows are contiguous.
        let mut sequence = self.embedding.forward(tokens.swap_dims(0, 1));
        for layer in &self.layers {
            sequence = layer.forward(sequence);
        }
        let [steps, batch, units] = sequence.dims();
        sequence.narrow(0, steps - 1, 1).reshape([batch, units])
    }

    /// The last layer: logits from the representation.
    fn last(&self, representation: Tensor<2>) -> Tensor<2> {
        dense_layer(&self.output, representation, Activation::Identity)
    }
}

impl Network for CharLstm {
    fn forward(&self, input: Input) -> Tensor<2> {
        CharLstm::forward(self, tokens_of(input))
    }

    fn outputs(&self, input: Input) -> Outputs {
        Outputs::through(self.represent(tokens_of(input)), |r| self.last(r))
    }
}

/// The token ids of a batch.
fn tokens_of(input: Input) -> Tensor<2, Int> {
    match input {
        Input::Tokens(tokens) => tokens,
        other => cannot_take("the LSTM", &other),
    }
}

/// Multiply-adds per sample of each matrix product: each LSTM layer's input and recurrent
/// products over all steps, then the output layer.
fn multiply_adds(embedding: usize, hidden: &[usize], steps: usize, shape: DataShape) -> Vec<u64> {
    let mut inputs = embedding;
    let mut layers: Vec<u64> = hidden
        .iter()
        .map(|&units| {
            let per_step = (inputs + units) * 4 * units;
            inputs = units;
            (steps * per_step) as u64
        })
        .collect();
    layers.push((inputs * shape.num_classes) as u64);
    layers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::SampleShape;
    use burn::tensor::TensorData;

    fn shape() -> DataShape {
        DataShape {
            sample: SampleShape::Tokens(80),
            num_classes: 80,
        }
    }

    #[test]
    fn the_leaf_model_has_its_parameter_count() {
        let net = CharLstm::new(8, &LstmParams::default().hidden, shape(), &Device::flex());
        // Embedding 80x8; layer 1: (8 + 256) x 1024 + 1024; layer 2: (256 + 256) x 1024 +
        // 1024; output 256 x 80 + 80.
        let expected = 80 * 8 + (264 * 1024 + 1024) + (512 * 1024 + 1024) + (256 * 80 + 80);
        assert_eq!(net.num_params(), expected);
        assert_eq!(expected, 817_872);
    }

    #[test]
    fn a_batch_of_sequences_gives_one_row_of_logits_each() {
        let device = Device::flex();
        let net = CharLstm::new(4, &[6, 5], shape(), &device);
        let ids: Vec<i64> = (0..3 * 7).map(|i| i % 80).collect();
        let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [3, 7]), &device);
        assert_eq!(net.forward(tokens).dims(), [3, 80]);
    }
}
