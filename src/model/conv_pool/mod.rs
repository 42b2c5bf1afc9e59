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
//! without autodiff) it runs these kernels; on any other backend, and for a convolution the
//! kernels do not implement, it composes burn's own ops, so ndarray and wgpu results are what
//! they were. The results on flex differ from burn's ops
//! in the low bits (another summation order), and are as reproducible.

mod autodiff;
mod kernels;

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::nn::PaddingConfig2d;
use burn::nn::conv::Conv2d;
use burn::tensor::Tensor;
use burn::tensor::activation::relu;
use burn::tensor::module::max_pool2d;
use burn::tensor::ops::MaxPoolOptions;

use super::flex::{flex_primitive, flex_tensor, on_flex, with_all_values};
use kernels::Geometry;

/// `maxpool2(relu(conv(images)))` with 2x2 pooling of stride 2, on images
/// `[batch, channels, height, width]`. On flex, a convolution that the kernels implement (stride
/// 1, no dilation or groups, a square kernel, the same padding on every side and less than the
/// kernel, a bias, an output of even sides) runs on them; anything else composes burn's ops.
pub fn conv_relu_pool(conv: &Conv2d, images: Tensor<4>) -> Tensor<4> {
    let device = images.device();
    let geometry = if on_flex(&device) {
        geometry(conv, &images)
    } else {
        None
    };
    let bias = conv.bias.as_ref().map(|bias| bias.val());
    let (Some(geometry), Some(bias)) = (geometry, bias) else {
        return max_pool2d(relu(conv.forward(images)), MaxPoolOptions::new([2, 2]));
    };
    let weight = conv.weight.val();
    if device.is_autodiff() {
        autodiff::forward(geometry, images, weight, bias)
    } else {
        let [images, weight] = [images, weight].map(flex_primitive);
        let (pooled, _) = forward(&geometry, &images, &weight, &flex_primitive(bias));
        Tensor::from_primitive::<Flex>(flex_tensor(pooled, geometry.pooled_shape()))
    }
}

/// The block's geometry, if the kernels implement `conv` on images of this shape.
fn geometry(conv: &Conv2d, images: &Tensor<4>) -> Option<Geometry> {
    let [batch, channels, height, width] = images.dims();
    let [outputs, _, kernel, kernel_width] = conv.weight.dims();
    let pad = match conv.padding {
        PaddingConfig2d::Same if kernel % 2 == 1 => kernel / 2,
        PaddingConfig2d::Explicit(top, left, bottom, right)
            if [left, bottom, right] == [top; 3] =>
        {
            top
        }
        PaddingConfig2d::Valid => 0,
        _ => return None,
    };
    let geometry = Geometry {
        images: batch,
        channels,
        height,
        width,
        outputs,
        kernel,
        pad,
    };
    let [convolved_height, convolved_width] = geometry.convolved_sides();
    let implemented = kernel == kernel_width
        && pad < kernel
        && conv.stride == [1, 1]
        && conv.dilation == [1, 1]
        && conv.groups == 1
        && convolved_height > 0
        && convolved_width > 0
        && convolved_height % 2 == 0
        && convolved_width % 2 == 0;
    implemented.then_some(geometry)
}

/// [`kernels::forward`] on flex tensors.
fn forward(
    geometry: &Geometry,
    images: &FlexTensor,
    weight: &FlexTensor,
    bias: &FlexTensor,
) -> (Vec<f32>, kernels::Winners) {
    with_all_values([images, weight, bias], |[images, weight, bias]| {
        kernels::forward(geometry, images, weight, bias)
    })
}

#[cfg(test)]
mod tests {
    use burn::nn::Initializer;
    use burn::nn::conv::Conv2dConfig;
    use burn::nn::pool::MaxPool2dConfig;
    use burn::tensor::{Device, Distribution};

    use super::*;
    use crate::model::flex::assert_close;

    fn conv(device: &Device) -> Conv2d {
        conv_with(PaddingConfig2d::Explicit(2, 2, 2, 2), device)
    }

    fn conv_with(padding: PaddingConfig2d, device: &Device) -> Conv2d {
        Conv2dConfig::new([3, 4], [5, 5])
            .with_padding(padding)
            .with_initializer(Initializer::Uniform {
                min: -0.3,
                max: 0.3,
            })
            .init(device)
    }

    /// burn's own ops as the CNN composed them before this op: the definition it must agree
    /// with, and what every other backend and configuration must still get exactly.
    fn reference(conv: &Conv2d, images: Tensor<4>) -> Tensor<4> {
        let pool = MaxPool2dConfig::new([2, 2]).init();
        pool.forward(relu(conv.forward(images)))
    }

    /// The paddings the kernels implement: "same" (the FedAvg CNN's), "valid" (LeNet's), and
    /// in between.
    fn paddings() -> [PaddingConfig2d; 4] {
        [
            PaddingConfig2d::Explicit(2, 2, 2, 2),
            PaddingConfig2d::Same,
            PaddingConfig2d::Valid,
            PaddingConfig2d::Explicit(1, 1, 1, 1),
        ]
    }

    #[test]
    fn evaluation_agrees_with_burns_ops() {
        let device = Device::flex();
        for padding in paddings() {
            let conv = conv_with(padding.clone(), &device);
            let images =
                Tensor::<4>::random([6, 3, 8, 10], Distribution::Uniform(-1.0, 1.0), &device);
            assert!(geometry(&conv, &images).is_some(), "{padding:?}");
            assert_close(
                conv_relu_pool(&conv, images.clone()),
                reference(&conv, images),
                (1e-4, 0.0),
            );
        }
    }

    #[test]
    fn training_gradients_agree_with_burns_ops() {
        let device = Device::flex().autodiff();
        let [same, _, valid, _] = paddings();
        training_gradients_agree_for(conv_with(same, &device), [4, 3]);
        training_gradients_agree_for(conv_with(valid, &device), [2, 1]);
    }

    fn training_gradients_agree_for(conv: Conv2d, [height, width]: [usize; 2]) {
        let device = conv.weight.device();
        let data = Tensor::<4>::random([5, 3, 8, 6], Distribution::Uniform(-1.0, 1.0), &device);
        let weights = Tensor::<4>::random(
            [5, 4, height, width],
            Distribution::Uniform(-1.0, 1.0),
            &device,
        );
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
        assert_close(output, want_output, (1e-4, 0.0));
        assert_close(images, want_images, (1e-4, 0.0));
        assert_close(weight, want_weight, (1e-4, 0.0));
        assert_close(bias, want_bias, (1e-4, 0.0));
    }

    #[test]
    fn convolutions_the_kernels_do_not_implement_compose_burns_ops_exactly() {
        let device = Device::flex();
        // An odd output side (9 - 5 + 1), and padding on one side only.
        let unimplemented = [
            (PaddingConfig2d::Valid, [2, 3, 9, 8]),
            (PaddingConfig2d::Explicit(2, 2, 0, 0), [2, 3, 8, 8]),
        ];
        for (padding, shape) in unimplemented {
            let conv = conv_with(padding, &device);
            let images = Tensor::<4>::random(shape, Distribution::Uniform(-1.0, 1.0), &device);
            assert!(geometry(&conv, &images).is_none());
            let got = conv_relu_pool(&conv, images.clone()).into_data();
            assert_eq!(got, reference(&conv, images).into_data());
        }
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
