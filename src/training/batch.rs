//! A batch of samples as a model's input and its labels.

use burn::tensor::{Device, Int, Tensor, TensorData};
use rand_chacha::ChaCha12Rng;

use crate::data::{Dataset, SampleShape};
use crate::model::Input;

/// The samples at `indices` as the model's input and a label tensor, with every label `l` as
/// `C - 1 - l` if `flip_labels`, and the images augmented as the data set says with draws
/// from `augment_rng` if one is given (local training gives its stream; evaluation none).
pub(super) fn batch(
    data: &Dataset,
    indices: &[usize],
    (flip_labels, augment_rng): (bool, Option<&mut ChaCha12Rng>),
    device: &Device,
) -> (Input, Tensor<1, Int>) {
    let mut features = Vec::with_capacity(indices.len() * data.shape().sample.len());
    let mut labels = Vec::with_capacity(indices.len());
    data.gather(indices, &mut features, &mut labels);
    if let Some(rng) = augment_rng {
        data.augment(&mut features, rng);
    }
    if flip_labels {
        let last = data.num_classes() as i64 - 1;
        labels.iter_mut().for_each(|l| *l = last - *l);
    }
    let n = indices.len();
    let input = match data.shape().sample {
        SampleShape::Image([c, h, w]) => Input::Images(Tensor::from_data(
            TensorData::new(features, [n, c, h, w]),
            device,
        )),
        SampleShape::Row(width) => Input::Rows(Tensor::from_data(
            TensorData::new(features, [n, width]),
            device,
        )),
        // Token ids are small integers, exact in the features' f32.
        SampleShape::Tokens(steps) => {
            let ids: Vec<i64> = features.iter().map(|&id| id as i64).collect();
            Input::Tokens(Tensor::from_data(TensorData::new(ids, [n, steps]), device))
        }
    };
    let labels = Tensor::from_data(TensorData::new(labels, [n]), device);
    (input, labels)
}
