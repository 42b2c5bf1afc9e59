//! One convolution block of the CNN, `maxpool2(relu(conv(x)))`, as one operation on burn-flex.
//!
//! burn-flex runs the three ops separately: its convolution copies each batch to channels-last,
//! builds the column matrix image by image and scatters the product back, and its pooling and
//! ReLU make two more passes, each with its own backward op in the autodiff graph. Profiling the
//! FedAvg CNN showed the matrix products at about 38% of a training step and the copies,
//! pooling and allocation around them at most of the rest. This op does the same arithmetic as
//! im2col plus one matrix product per tile of images (the same GEMM library, on the calling
//! thread), then bias, ReLU and pooling in one pass that remembers each window's winner, and a
//! hand-written backward pass: two products per tile and the adjoint of im2col (`kernels`).
//!
//! It is a backend extension in the sense of burn's extension API: on burn-flex (with or
//! without autodiff) it runs these kernels; on any other backend it composes burn's own ops,
//! so ndarray and wgpu results are what they were. The results on flex differ from burn's ops
//! in the low bits (another summation order), and are as reproducible.

mod autodiff;
mod kernels;

use burn::backend::flex::FlexTensor;
use burn::backend::{DispatchDevice, Flex};
use burn::nn::conv::Conv2d;
use burn::tensor::activation::relu;
use burn::tensor::module::max_pool2d;
use burn::tensor::ops::MaxPoolOptions;
use burn::tensor::{Tensor, TensorData};

use kernels::Geometry;

/// `maxpool2(relu(conv(images)))` for a stride-1 convolution with "same" padding, an odd square
/// kernel and a bias, on images `[batch, channels, height, width]` with even sides.
pub fn conv_relu_pool(conv: &Conv2d, images: Tensor<4>) -> Tensor<4> {
    let device = images.device();
    if !matches!(
        device.clone().inner().as_dispatch(),
        DispatchDevice::Flex(_)
    ) {
        return max_pool2d(relu(conv.forward(images)), MaxPoolOptions::new([2, 2]));
    }
    let bias = conv
        .bias
        .as_ref()
        .expect("the CNN's convolutions have a bias")
        .val();
    let geometry = geometry(&images, &conv.weight.val());
    if device.is_autodiff() {
        autodiff::forward(geometry, images, conv.weight.val(), bias)
    } else {
        let [images, weight] = [images, conv.weight.val()].map(flex_primitive);
        let (pooled, _) = forward(&geometry, &images, &weight, &flex_primitive(bias));
        Tensor::from_primitive::<Flex>(flex_tensor(pooled, geometry.pooled_shape()))
    }
}

fn geometry(images: &Tensor<4>, weight: &Tensor<4>) -> Geometry {
    let [batch, channels, height, width] = images.dims();
    let [outputs, weight_channels, kernel, kernel_width] = weight.dims();
    assert_eq!(
        weight_channels, channels,
        "weight and images disagree on channels"
    );
    assert_eq!(kernel, kernel_width, "square kernels only");
    Geometry {
        images: batch,
        channels,
        height,
        width,
        outputs,
        kernel,
    }
}

/// [`kernels::forward`] on flex tensors.
fn forward(
    geometry: &Geometry,
    images: &FlexTensor,
    weight: &FlexTensor,
    bias: &FlexTensor,
) -> (Vec<f32>, kernels::Winners) {
    with_values(images, |images| {
        with_values(weight, |weight| {
            with_values(bias, |bias| {
                kernels::forward(geometry, images, weight, bias)
            })
        })
    })
}

/// Runs `read` on the tensor's values in row-major order, copying only if they are not
/// contiguous already.
fn with_values<R>(tensor: &FlexTensor, read: impl FnOnce(&[f32]) -> R) -> R {
    match tensor.as_slice::<f32>() {
        Some(values) => read(values),
        None => read(
            tensor
                .to_contiguous()
                .as_slice::<f32>()
                .expect("the CNN computes in f32"),
        ),
    }
}

fn flex_primitive<const D: usize>(tensor: Tensor<D>) -> FlexTensor {
    tensor
        .try_into_primitive::<Flex>()
        .expect("a tensor on the flex device")
}

fn flex_tensor<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape))
}

#[cfg(test)]
mod tests {
    use burn::nn::conv::Conv2dConfig;
    use burn::nn::{Initializer, PaddingConfig2d};
    use burn::tensor::{Device, Distribution};

    use super::*;

    fn conv(device: &Device) -> Conv2d {
        Conv2dConfig::new([3, 4], [5, 5])
            .with_padding(PaddingConfig2d::Explicit(2, 2, 2, 2))
            .with_initializer(Initializer::Uniform {
                min: -0.3,
                max: 0.3,
            })
            .init(device)
    }

    /// burn's own ops, the definition this op must agree with.
    fn reference(conv: &Conv2d, images: Tensor<4>) -> Tensor<4> {
        max_pool2d(relu(conv.forward(images)), MaxPoolOptions::new([2, 2]))
    }

    fn assert_close(got: Tensor<4>, want: Tensor<4>) {
        let (got, want) = (got.into_data(), want.into_data());
        assert_eq!(got.shape(), want.shape());
        let (got, want) = (
            got.as_slice::<f32>().unwrap(),
            want.as_slice::<f32>().unwrap(),
        );
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-4, "{g} vs {w}");
        }
    }

    #[test]
    fn evaluation_agrees_with_burns_ops() {
        let device = Device::flex();
        let conv = conv(&device);
        let images = Tensor::<4>::random([6, 3, 8, 10], Distribution::Uniform(-1.0, 1.0), &device);
        assert_close(
            conv_relu_pool(&conv, images.clone()),
            reference(&conv, images),
        );
    }

    #[test]
    fn training_gradients_agree_with_burns_ops() {
        let device = Device::flex().autodiff();
        let conv = conv(&device);
        let data = Tensor::<4>::random([5, 3, 8, 6], Distribution::Uniform(-1.0, 1.0), &device);
        let weights = Tensor::<4>::random([5, 4, 4, 3], Distribution::Uniform(-1.0, 1.0), &device);
        let grads_of = |block: fn(&Conv2d, Tensor<4>) -> Tensor<4>| {
            let images = data.clone().detach().require_grad();
            let output = block(&conv, images.clone());
            let grads = (output.clone() * weights.clone()).sum().backward();
            let bias = conv.bias.as_ref().unwrap().val();
            (
                output.inner(),
                [
                    images.grad(&grads).unwrap(),
                    conv.weight.val().grad(&grads).unwrap(),
                ],
                bias.grad(&grads).unwrap(),
            )
        };
        let (output, [images, weight], bias) = grads_of(conv_relu_pool);
        let (want_output, [want_images, want_weight], want_bias) = grads_of(reference);
        assert_close(output, want_output);
        assert_close(images, want_images);
        assert_close(weight, want_weight);
        assert_close(bias.unsqueeze(), want_bias.unsqueeze());
    }

    #[test]
    fn other_backends_compose_burns_ops_exactly() {
        #[allow(deprecated)] // the one other CPU backend in every build
        let device = Device::ndarray();
        let conv = conv(&device);
        let images = Tensor::<4>::random([2, 3, 4, 4], Distribution::Uniform(-1.0, 1.0), &device);
        let got = conv_relu_pool(&conv, images.clone()).into_data();
        assert_eq!(got, reference(&conv, images).into_data());
    }
}
