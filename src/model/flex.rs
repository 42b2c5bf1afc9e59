//! What fedsim's own operations on burn-flex (`conv_pool`, `lstm_layer`, `dense_layer`) share:
//! whether a device is flex, and the moves between burn's tensors and flex's primitives and
//! values.

use burn::backend::autodiff::Autodiff;
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{DispatchDevice, Flex};
use burn::tensor::{Device, Tensor, TensorData};

/// The training device's backend: flex under autodiff without gradient checkpointing.
pub(super) type Tracked = Autodiff<Flex>;

/// Whether `device` is burn-flex, with or without autodiff.
pub(super) fn on_flex(device: &Device) -> bool {
    matches!(
        device.clone().inner().as_dispatch(),
        DispatchDevice::Flex(_)
    )
}

/// Runs `read` on the tensor's values in row-major order, copying only if they are not
/// contiguous already.
pub(super) fn with_values<R>(tensor: &FlexTensor, read: impl FnOnce(&[f32]) -> R) -> R {
    with_all_values([tensor], |[values]| read(values))
}

/// Runs `read` on the values of each of `tensors` in row-major order, as [`with_values`] does
/// for one, copying only those that are not contiguous already.
pub(super) fn with_all_values<const N: usize, R>(
    tensors: [&FlexTensor; N],
    read: impl FnOnce([&[f32]; N]) -> R,
) -> R {
    let copies = tensors.map(|tensor| {
        let strided = tensor.as_slice::<f32>().is_none();
        strided.then(|| tensor.to_contiguous())
    });
    let values = std::array::from_fn(|i| {
        copies[i]
            .as_ref()
            .unwrap_or(tensors[i])
            .as_slice::<f32>()
            .expect("fedsim's operations compute in f32")
    });
    read(values)
}

/// The tensor as flex's primitive.
pub(super) fn flex_primitive<const D: usize>(tensor: Tensor<D>) -> FlexTensor {
    tensor
        .try_into_primitive::<Flex>()
        .expect("a tensor on the flex device")
}

/// The tensor as flex's autodiff primitive.
pub(super) fn tracked<const D: usize>(tensor: Tensor<D>) -> FloatTensor<Tracked> {
    tensor
        .try_into_primitive::<Tracked>()
        .expect("a tensor on the flex autodiff device")
}

/// A flex tensor of `shape` holding `values`.
pub(super) fn flex_tensor<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape))
}

/// Asserts that `got` has `want`'s shape and each value within `absolute + relative · |want|`
/// of it: how the tests of fedsim's operations hold them to burn's own.
#[cfg(test)]
pub(super) fn assert_close<const D: usize>(
    got: Tensor<D>,
    want: Tensor<D>,
    (absolute, relative): (f32, f32),
) {
    let (got, want) = (got.into_data(), want.into_data());
    assert_eq!(got.shape(), want.shape());
    let (got, want) = (
        got.as_slice::<f32>().unwrap(),
        want.as_slice::<f32>().unwrap(),
    );
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < absolute + relative * w.abs(), "{g} vs {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_in_row_major_order_whether_a_tensor_is_contiguous_or_a_strided_view() {
        let device = Device::flex();
        let matrix = Tensor::<2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &device);
        let transposed = flex_primitive(matrix.clone().transpose());
        let matrix = flex_primitive(matrix);
        assert!(
            transposed.as_slice::<f32>().is_none(),
            "the transpose is a view"
        );
        with_all_values([&matrix, &transposed], |[values, transposed]| {
            assert_eq!(values, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
            assert_eq!(transposed, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        });
        with_values(&transposed, |values| {
            assert_eq!(values, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        });
    }
}
