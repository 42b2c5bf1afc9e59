//! Evaluation on burn: a model's accuracy and loss on a data set, on every client's own test
//! samples, and the server's [`ModelEvaluator`] built from them.

use std::sync::Arc;

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{Device, Int, Tensor};
use rayon::prelude::*;

use super::passes::ExtraPasses;
use super::personal::PersonalSplit;
use super::{ClientScores, ModelEvaluator};
use crate::backend::BackendKind;
use crate::config::ClientConfig;
use crate::data::clients::Gathered;
use crate::data::{ClientData, Dataset};
use crate::local::batch::{Altered, batch};
use crate::local::LocalData;
use crate::model::{Net, flat};
use crate::network::ClientId;
use crate::output::{ClientAccuracy, Evaluation};
use crate::registry::ModelChoice;
use crate::seed::{Purpose, stream};
use crate::states::ClientStates;
use crate::stop::StopSignal;
use crate::strategy::{ClientAlgorithm, ClientView, Sent};

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
        .map_init(new_net, |net, chunk| correct_of(net, data, chunk, device))
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

/// Whether `net` classifies each of the samples at `indices` correctly, in order.
fn correct_of(net: &Net, data: &Dataset, indices: &[usize], device: &Device) -> Vec<bool> {
    let (logits, labels) = logits(net, data, indices, device);
    let predicted = logits.argmax(1).squeeze_dim::<1>(1);
    predicted.equal(labels).into_data().iter::<bool>().collect()
}

/// How many of the samples at `indices` `net` classifies correctly.
fn hits(net: &Net, data: &Dataset, indices: &[usize], device: &Device) -> usize {
    correct_of(net, data, indices, device)
        .into_iter()
        .filter(|&hit| hit)
        .count()
}

/// What a client half needs to pick the model a client starts from
/// ([`ClientAlgorithm::start_from`]: IFCA measures each cluster model on the client's
/// training samples), so that each client is scored with that model; and to build a
/// personalised algorithm's personal model ([`ClientAlgorithm::personal_model`]) from the
/// client's state, fine-tuning where it asks.
#[derive(Clone)]
pub struct ClientStarts {
    /// The client half.
    pub algorithm: Arc<dyn ClientAlgorithm>,
    /// The samples each client trains on.
    pub training: ClientData,
    /// The clients' local training settings (the learning rate a client is told, samples per
    /// forward pass, the optimiser that fine-tunes).
    pub client: ClientConfig,
    /// The experiment seed, from which fine-tuning draws its batches' order.
    pub seed: u64,
    /// Every client's state.
    pub states: Arc<ClientStates>,
    /// The model's personal layers, where the algorithm keeps some with each client.
    pub personal: Option<Arc<PersonalSplit>>,
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
    /// The test samples of each client scored (held out of its training samples, or its own
    /// where the data set defines them), and what picks the model each is scored with.
    pub clients: Option<(Arc<Gathered>, ClientStarts)>,
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

    fn clients(
        &self,
        round: u32,
        sent: &dyn Fn(ClientId) -> Sent,
    ) -> Result<Option<ClientScores>, String> {
        let Some((tests, starts)) = self.clients.as_ref() else {
            return Ok(None);
        };
        let device = self.backend.device();
        let clients: Vec<ClientId> = tests.clients.iter().map(|(client, _)| *client).collect();
        let models = self.models_of(&clients, round, sent, starts, &device)?;
        let Some(accuracy) = ClientAccuracy::of(&self.accuracies(&models, tests))
        else {
            return Ok(None);
        };
        let personal = if starts.algorithm.personalises() {
            let scores = self.personal_accuracies(&clients, round, sent, (tests, starts))?;
            ClientAccuracy::of(&scores)
        } else {
            None
        };
        Ok(Some(ClientScores { accuracy, personal }))
    }
}

impl TestEvaluator {
    /// The accuracy of each client of `tests` on its test samples with its model in `models`.
    /// Each distinct model scores the clients that use it, in client order.
    fn accuracies(&self, models: &[Arc<[f32]>], tests: &Gathered) -> Vec<f64> {
        let device = self.backend.device();
        let mut accuracies = vec![0.0; tests.clients.len()];
        for (model, users) in distinct(models) {
            let per_client: Vec<&[usize]> = users
                .iter()
                .map(|&at| tests.clients[at].1.as_slice())
                .collect();
            let scores = client_accuracies(
                &self.model,
                &model,
                &tests.data,
                &per_client,
                self.batch_size,
                &device,
            );
            for (at, score) in users.into_iter().zip(scores) {
                accuracies[at] = score;
            }
        }
        accuracies
    }

    /// The accuracy of each of `clients` on its test samples with the personal model it would
    /// use in `round` when sent `sent(client)`, as its client half builds it from the client's
    /// state. Clients are personalised and scored in parallel, each alone (a fine-tuning and
    /// a scoring network per thread), so the scores do not depend on the thread count; each
    /// model is dropped once scored, so a federation of many clients holds a few at a time.
    fn personal_accuracies(
        &self,
        clients: &[ClientId],
        round: u32,
        sent: &dyn Fn(ClientId) -> Sent,
        (tests, starts): (&Gathered, &ClientStarts),
    ) -> Result<Vec<f64>, String> {
        let sent: Vec<Sent> = clients.iter().map(|&client| sent(client)).collect();
        let (device, scoring) = (self.backend.training_device(), self.backend.device());
        let shape = tests.data.shape();
        // Scoring is short: it finishes before the run stops.
        let never = StopSignal::new();
        clients
            .par_iter()
            .zip(&sent)
            .zip(&tests.clients)
            .map_init(
                || (None, None),
                |(net, scorer): &mut (Option<Net>, Option<Net>),
                 ((&client, sent), (_, held_out))| {
                    let failed = |e: &dyn std::fmt::Display| {
                        format!("the personal model of client {client} in round {round}: {e}")
                    };
                    let state = starts.states.get(client).map_err(|e| failed(&e))?;
                    // With personal layers, the client's own in the model sent.
                    let own = starts
                        .personal
                        .as_ref()
                        .map(|split| split.with_own(&sent.model, state.as_ref()));
                    let view = ClientView {
                        round,
                        client,
                        global: own.as_deref().unwrap_or(&sent.model),
                        downlink: &sent.extras,
                        lr: starts.client.lr,
                        personal: starts.personal.as_ref().map(|split| &split.sharing),
                    };
                    let samples = starts.training.samples(client).map_err(|e| failed(&e))?;
                    let mut tuning = ExtraPasses {
                        local: LocalData {
                            data: samples.data(),
                            indices: samples.indices(),
                            flip_labels: false,
                        },
                        config: &starts.client,
                        model: &self.model,
                        shape,
                        rng: stream(starts.seed, Purpose::FINE_TUNE, round, client),
                        net,
                        device: &device,
                        stop: &never,
                    };
                    let model = starts
                        .algorithm
                        .personal_model(&view, state.as_ref(), &mut tuning)
                        .map_err(|e| failed(&e))?;
                    let empty = scorer
                        .take()
                        .unwrap_or_else(|| self.model.build(shape, &scoring));
                    let loaded = flat::load(empty, &model);
                    let score = hits(&loaded, &tests.data, held_out, &scoring) as f64;
                    *scorer = Some(loaded);
                    Ok(score / held_out.len() as f64)
                },
            )
            .collect()
    }
    /// The model each of `clients` would train from in `round` when sent `sent(client)`:
    /// the one its client half picks ([`ClientAlgorithm::start_from`]), else the model sent.
    /// A network is built only where a client half measures a loss, so a client half that
    /// picks nothing costs nothing here. Clients are measured in parallel, each alone, so the
    /// models do not depend on the thread count.
    fn models_of(
        &self,
        clients: &[ClientId],
        round: u32,
        sent: &dyn Fn(ClientId) -> Sent,
        starts: &ClientStarts,
        device: &Device,
    ) -> Result<Vec<Arc<[f32]>>, String> {
        let sent: Vec<Sent> = clients.iter().map(|&client| sent(client)).collect();
        clients
            .par_iter()
            .zip(&sent)
            .map_init(
                || None,
                |net: &mut Option<Net>, (&client, sent)| {
                    let view = ClientView {
                        round,
                        client,
                        global: &sent.model,
                        downlink: &sent.extras,
                        lr: starts.client.lr,
                        personal: starts.personal.as_ref().map(|split| &split.sharing),
                    };
                    let samples = starts.training.samples(client).map_err(|e| {
                        format!("the samples of client {client} in round {round}: {e}")
                    })?;
                    let local = LocalData {
                        data: samples.data(),
                        indices: samples.indices(),
                        flip_labels: false,
                    };
                    let mut loss_of = |params: &[f32]| {
                        let scratch = net
                            .take()
                            .unwrap_or_else(|| self.model.build(local.data.shape(), device));
                        let loaded = flat::load(scratch, params);
                        let loss = mean_loss(&loaded, local, starts.client.batch_size, device);
                        *net = Some(loaded);
                        loss
                    };
                    Ok(match starts.algorithm.start_from(&view, &mut loss_of) {
                        Some(start) => start.model.into(),
                        None => sent.model.clone(),
                    })
                },
            )
            .collect()
    }
}

/// The distinct models among `models` (equal to the bit), each with the positions that hold
/// it, in order of first appearance.
fn distinct(models: &[Arc<[f32]>]) -> Vec<(Arc<[f32]>, Vec<usize>)> {
    let same = |a: &[f32], b: &[f32]| {
        a.iter()
            .map(|v| v.to_bits())
            .eq(b.iter().map(|v| v.to_bits()))
    };
    let mut found: Vec<(Arc<[f32]>, Vec<usize>)> = Vec::new();
    for (at, model) in models.iter().enumerate() {
        match found
            .iter_mut()
            .find(|(seen, _)| Arc::ptr_eq(seen, model) || same(seen, model))
        {
            Some((_, users)) => users.push(at),
            None => found.push((model.clone(), vec![at])),
        }
    }
    found
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
    use crate::data::partition::Partition;
    use crate::data::{DataShape, SampleShape};
    use crate::model::flat::initial_params;
    use crate::network::Tensors;
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

    #[test]
    fn each_client_is_scored_with_the_model_it_would_train_from() {
        let data = Arc::new(images());
        let registry = Registry::builtin();
        let model = registry
            .choose_model(&ModelConfig::named("mlp"), None)
            .unwrap();
        let layout = model.layout(data.shape()).unwrap();
        let draw = |seed| -> Arc<[f32]> {
            initial_params(&layout, &mut stream(seed, Purpose::MODEL_INIT, 0, 0)).into()
        };
        let (a, b) = (draw(1), draw(2));
        let shares: Vec<Vec<usize>> = (0..5).map(|c| (c * 50..c * 50 + 50).collect()).collect();
        let training = ClientData::Pooled {
            data: data.clone(),
            clients: Arc::new(Partition {
                clients: shares.clone(),
            }),
        };
        let tests = Arc::new(training.gather(&[0, 1, 2, 3, 4]).unwrap());
        let starts = |algorithm: Arc<dyn ClientAlgorithm>| ClientStarts {
            algorithm,
            training: training.clone(),
            client: ClientConfig {
                batch_size: 32,
                ..serde_json::from_str(r#"{"lr": 0.1}"#).unwrap()
            },
            seed: 0,
            states: Arc::new(ClientStates::in_memory()),
            personal: None,
        };
        let evaluator = |algorithm| TestEvaluator {
            test_data: data.clone(),
            batch_size: 64,
            model: model.clone(),
            backend: BackendKind::Flex,
            clients: Some((tests.clone(), starts(algorithm))),
        };
        let device = BackendKind::Flex.device();
        let accuracy_of = |models: &[&Arc<[f32]>]| {
            let accuracies: Vec<f64> = (0..5)
                .map(|c| {
                    let only = [shares[c].as_slice()];
                    client_accuracies(&model, models[c], &data, &only, 64, &device)[0]
                })
                .collect();
            ClientAccuracy::of(&accuracies)
        };

        // Sent its own model: even clients `a`, odd clients `b`.
        let own = |client: ClientId| Sent {
            model: if client.is_multiple_of(2) {
                a.clone()
            } else {
                b.clone()
            },
            extras: Tensors::new(),
        };
        let plain = evaluator(Arc::new(crate::strategy::PlainClient));
        let scored = plain.clients(1, &own).unwrap().map(|s| s.accuracy);
        assert_eq!(scored, accuracy_of(&[&a, &b, &a, &b, &a]));
        assert_ne!(scored, accuracy_of(&[&a; 5]));

        // Sent both, it picks the one of lower loss on its training samples, as IFCA's does.
        let both = |_| Sent {
            model: a.clone(),
            extras: Tensors::new().with("cluster_1", b.to_vec()),
        };
        let ifca = evaluator(Arc::new(crate::strategy::IfcaClient { clusters: 2 }));
        let clients: Vec<ClientId> = (0..5).collect();
        let picked = ifca.models_of(
            &clients,
            1,
            &both,
            &starts(Arc::new(crate::strategy::IfcaClient { clusters: 2 })),
            &device,
        )
        .unwrap();
        let net = |params: &[f32]| flat::load(model.build(data.shape(), &device), params);
        let (net_a, net_b) = (net(&a), net(&b));
        let mut expected = Vec::new();
        for (client, picked) in picked.iter().enumerate() {
            let local = LocalData {
                data: &data,
                indices: &shares[client],
                flip_labels: false,
            };
            let losses = (
                mean_loss(&net_a, local, 32, &device),
                mean_loss(&net_b, local, 32, &device),
            );
            let lower = if losses.1 < losses.0 { &b } else { &a };
            assert_eq!(picked, lower, "client {client}");
            expected.push(lower);
        }
        let scored = ifca.clients(1, &both).unwrap().map(|s| s.accuracy);
        assert_eq!(scored, accuracy_of(&expected));
    }
}
