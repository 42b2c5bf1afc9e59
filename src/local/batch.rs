//! A batch of samples as a model's input and its labels.

use burn::tensor::{Device, Int, Tensor, TensorData};
use rand_chacha::ChaCha12Rng;

use crate::data::{Dataset, SampleShape};
use crate::model::Input;

/// How a training batch differs from the stored samples; evaluation takes them as they are
/// ([`Altered::none`]).
pub(crate) struct Altered<'a> {
    /// Every label `l` is seen as `C - 1 - l` (a label-flipping attacker).
    pub flip_labels: bool,
    /// The stream the data set's image augmentation draws from (local training's).
    pub augment: Option<&'a mut ChaCha12Rng>,
}

impl Altered<'_> {
    /// The samples as stored.
    pub fn none() -> Self {
        Self {
            flip_labels: false,
            augment: None,
        }
    }
}

/// The samples at `indices` as the model's input and a label tensor, `altered` as it says.
pub(crate) fn batch(
    data: &Dataset,
    indices: &[usize],
    altered: Altered<'_>,
    device: &Device,
) -> (Input, Tensor<1, Int>) {
    let mut features = Vec::with_capacity(indices.len() * data.shape().sample.len());
    let mut labels = Vec::with_capacity(indices.len());
    data.gather(indices, &mut features, &mut labels);
    if let Some(rng) = altered.augment {
        data.augment(&mut features, rng);
    }
    if altered.flip_labels {
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
