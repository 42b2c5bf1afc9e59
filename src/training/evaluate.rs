//! Evaluation on burn: a model's accuracy and loss on a data set, on every client's own test
//! samples, and the server's [`ModelEvaluator`] built from them.

use std::sync::Arc;

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{Device, Int, Tensor};
use rayon::prelude::*;

use super::ModelEvaluator;
use crate::backend::BackendKind;
use crate::data::Dataset;
use crate::local::LocalData;
use crate::local::batch::{Altered, batch};
use crate::model::{Net, flat};
use crate::output::{ClientAccuracy, Evaluation};
use crate::registry::ModelChoice;

/// Evaluates the model `params` (of architecture `model`) on all of `data`, `batch_size`
/// samples per forward pass. Batches run in parallel on the current rayon pool, each thread
/// with its own model instance; their sums are added in batch order, so the result does not
/// depend on the thread count.
pub fn evaluate(
    model: &ModelChoice,
    params: &[f32],
    data: &Dataset,
    batch_size: usize,
    device: &Device,
) -> Evaluation {
    let all: Vec<usize> = (0..data.len()).collect();
    let new_net = || {
        let net = model.build(data.shape(), device);
        flat::load(net, params)
    };
    let scores: Vec<Score> = all
        .par_chunks(batch_size)
        .map_init(new_net, |net, chunk| {
            evaluate_batch(net, data, chunk, device)
        })
        .collect();
    let mut correct = vec![0_usize; data.num_classes()];
    let mut loss_sum = 0.0;
    for score in &scores {
        correct
            .iter_mut()
            .zip(&score.correct)
            .for_each(|(total, batch)| *total += batch);
        loss_sum += score.loss_sum;
    }
    let class_accuracy = correct
        .iter()
        .zip(data.label_counts(&all))
        .map(|(&hits, samples)| (samples > 0).then(|| hits as f64 / samples as f64))
        .collect();
    Evaluation {
        accuracy: correct.iter().sum::<usize>() as f64 / data.len() as f64,
        loss: loss_sum / data.len() as f64,
        class_accuracy,
    }
}

/// The accuracy of the model `params` on each of `per_client`'s index lists of `data`
/// (none empty). All samples are evaluated together, `batch_size` per forward pass, in
/// parallel on the current rayon pool; the result does not depend on the thread count.
pub fn client_accuracies(
    model: &ModelChoice,
    params: &[f32],
    data: &Dataset,
    per_client: &[&[usize]],
    batch_size: usize,
    device: &Device,
) -> Vec<f64> {
    let all: Vec<usize> = per_client.iter().flat_map(|c| c.iter().copied()).collect();
    let new_net = || {
        let net = model.build(data.shape(), device);
        flat::load(net, params)
    };
    let correct: Vec<bool> = all
        .par_chunks(batch_size)
        .map_init(new_net, |net, chunk| {
            let (logits, labels) = logits(net, data, chunk, device);
            let predicted = logits.argmax(1).squeeze_dim::<1>(1);
            let hits = predicted.equal(labels).into_data();
            hits.iter::<bool>().collect::<Vec<bool>>()
        })
        .flatten()
        .collect();
    let mut offset = 0;
    per_client
        .iter()
        .map(|indices| {
            let hits = correct[offset..offset + indices.len()]
                .iter()
                .filter(|&&h| h)
                .count();
            offset += indices.len();
            hits as f64 / indices.len() as f64
        })
        .collect()
}

/// The samples each client is evaluated on: held out of its training samples, or its own
/// test samples where the data set defines them.
#[derive(Clone)]
pub struct ClientTests {
    /// The split they are in.
    pub data: Arc<Dataset>,
    /// Each client's held-out indices (empty for a client that holds none).
    pub held_out: Arc<Vec<Vec<usize>>>,
}

/// Scores the server's global model on burn: on the test set, and on every client's own test
/// samples where there are any.
pub struct TestEvaluator {
    /// The test set.
    pub test_data: Arc<Dataset>,
    /// Test samples per forward pass.
    pub batch_size: usize,
    /// The architecture, to build the evaluation model.
    pub model: ModelChoice,
    /// The backend that evaluates.
    pub backend: BackendKind,
    /// Each client's test samples, to evaluate on every client too.
    pub clients: Option<ClientTests>,
}

impl ModelEvaluator for TestEvaluator {
    fn test(&self, params: &[f32]) -> Evaluation {
        let device = self.backend.device();
        evaluate(
            &self.model,
            params,
            &self.test_data,
            self.batch_size,
            &device,
        )
    }

    fn clients(&self, params: &[f32]) -> Option<ClientAccuracy> {
        let tests = self.clients.as_ref()?;
        let device = self.backend.device();
        let per_client: Vec<&[usize]> = tests
            .held_out
            .iter()
            .filter(|h| !h.is_empty())
            .map(Vec::as_slice)
            .collect();
        let accuracies = client_accuracies(
            &self.model,
            params,
            &tests.data,
            &per_client,
            self.batch_size,
            &device,
        );
        ClientAccuracy::of(&accuracies)
    }
}

/// The mean loss of `net` on `local` data, `batch_size` samples per forward pass, on this
/// thread alone. A trainer worker calls it: a parallel loop there could steal another
/// client's job onto the same worker while it holds that worker's model.
pub fn mean_loss(net: &Net, local: LocalData<'_>, batch_size: usize, device: &Device) -> f64 {
    let loss_sum: f64 = local
        .indices
        .chunks(batch_size)
        .map(|chunk| evaluate_batch(net, local.data, chunk, device).loss_sum)
        .sum();
    loss_sum / local.indices.len().max(1) as f64
}

/// Correct predictions per class, and the summed loss, over some samples.
struct Score {
    /// Samples classified correctly, by their label.
    correct: Vec<usize>,
    /// The sum of the samples' cross-entropy losses.
    loss_sum: f64,
}

/// Samples per forward pass when evaluating: an evaluation batch (1,000 by default) goes
/// through the model this many at a time and its logits are joined, so the activations of the
/// whole batch (hundreds of MB for the CNN) are never held at once. Each sample's logits do
/// not depend on what else is in its pass, so the scores equal those of one pass.
const FORWARD_CHUNK: usize = 100;

/// The logits of the samples at `indices`, [`FORWARD_CHUNK`] at a time, and their labels.
fn logits(
    net: &Net,
    data: &Dataset,
    indices: &[usize],
    device: &Device,
) -> (Tensor<2>, Tensor<1, Int>) {
    let (parts, labels): (Vec<Tensor<2>>, Vec<Tensor<1, Int>>) = indices
        .chunks(FORWARD_CHUNK)
        .map(|chunk| {
            let (input, labels) = batch(data, chunk, Altered::none(), device);
            (net.forward(input), labels)
        })
        .unzip();
    (Tensor::cat(parts, 0), Tensor::cat(labels, 0))
}

/// Scores the model on the samples at `indices`.
fn evaluate_batch(net: &Net, data: &Dataset, indices: &[usize], device: &Device) -> Score {
    let (logits, labels) = logits(net, data, indices, device);
    let loss = CrossEntropyLossConfig::new()
        .init(device)
        .forward(logits.clone(), labels.clone());
    let loss_sum = f64::from(loss.into_scalar::<f32>()) * indices.len() as f64;
    let hits = logits
        .argmax(1)
        .squeeze_dim::<1>(1)
        .equal(labels)
        .into_data();
    let mut correct = vec![0; data.num_classes()];
    for (hit, &index) in hits.iter::<bool>().zip(indices) {
        if hit {
            correct[usize::from(data.labels()[index])] += 1;
        }
    }
    Score { correct, loss_sum }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use crate::config::ModelConfig;
    use crate::data::{DataShape, SampleShape};
    use crate::model::flat::initial_params;
    use crate::registry::Registry;
    use crate::seed::{Purpose, stream};

    /// 250 synthetic 28x28 images of 10 classes.
    fn images() -> Dataset {
        let values = (0..250 * 784).map(|i| ((i * 37) % 251) as u8).collect();
        let labels = (0..250).map(|i| (i % 10) as u8).collect();
        let shape = DataShape {
            sample: SampleShape::Image([1, 28, 28]),
            num_classes: 10,
        };
        Dataset::from_bytes(values, |v| f32::from(v) / 255.0, labels, shape)
    }

    #[test]
    fn logits_in_chunks_equal_those_of_one_pass_to_the_bit() {
        let data = images();
        let device = BackendKind::Flex.device();
        let indices: Vec<usize> = (0..data.len()).rev().collect();
        let registry = Registry::builtin();
        for name in ["mlp", "cnn"] {
            let model = registry
                .choose_model(&ModelConfig::named(name), None)
                .unwrap();
            let layout = model.layout(data.shape()).unwrap();
            let params = initial_params(&layout, &mut stream(5, Purpose::MODEL_INIT, 0, 0));
            let net = flat::load(model.build(data.shape(), &device), &params);
            let (chunked, _) = logits(&net, &data, &indices, &device);
            let (images, _) = batch(&data, &indices, Altered::none(), &device);
            let whole = net.forward(images);
            assert_eq!(chunked.into_data(), whole.into_data(), "{name}");
        }
    }
}
