//! The convolution block's arithmetic on plain `f32` slices: im2col, one matrix product per
//! tile of images, then bias, ReLU and 2x2 max pooling in one pass; and the backward pass that
//! undoes each step. Nothing here knows about burn.
//!
//! Layouts: images are `[images, channels, height, width]`; the weight is
//! `[outputs, channels · kernel · kernel]` (burn's `[outputs, channels, kernel, kernel]` read
//! flat); the column matrix of a tile is `[channels · kernel · kernel, tile · height · width]`,
//! one row per kernel tap `(channel, row, column)` and one column per output pixel; the
//! convolution of a tile is `[outputs, tile · height · width]`.

use std::cell::RefCell;
use std::ops::Range;

use crate::model::matrix::{Matrix, multiply};

/// Column-matrix elements a tile may hold (4 MiB of `f32`): tiles of a few images keep the
/// matrix products large enough to run near the machine's rate while bounding the buffer, which
/// for a whole evaluation chunk would be hundreds of megabytes.
const COLUMN_BUDGET: usize = 1 << 20;

thread_local! {
    /// Each thread's buffers for a tile's column matrix and convolution (or its gradient),
    /// kept between calls: allocated afresh, their megabytes would be mapped and zeroed by the
    /// kernel at every training step, on every worker at once.
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Marks a pooled value that ReLU zeroed, so that no gradient flows back through it.
const INACTIVE: u8 = u8::MAX;

/// The shape of one block: a stride-1 convolution with a square kernel and the same zero
/// padding on every side, then ReLU, then 2x2 max pooling with stride 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Images in the batch.
    pub images: usize,
    /// Input channels.
    pub channels: usize,
    /// Input height.
    pub height: usize,
    /// Input width.
    pub width: usize,
    /// Output channels.
    pub outputs: usize,
    /// Kernel side.
    pub kernel: usize,
    /// Zeros added on each side: `kernel / 2` for "same" padding of an odd kernel, 0 for
    /// "valid"; less than `kernel`.
    pub pad: usize,
}

impl Geometry {
    /// Kernel taps per output value: the rows of the column matrix.
    fn taps(&self) -> usize {
        self.channels * self.kernel * self.kernel
    }

    /// The convolution's output height and width, `[side + 2 pad - kernel + 1]`; each must be
    /// even and positive for the pooling.
    pub fn convolved_sides(&self) -> [usize; 2] {
        [self.height, self.width].map(|side| (side + 2 * self.pad + 1).saturating_sub(self.kernel))
    }

    /// Pixels of an input plane.
    fn pixels(&self) -> usize {
        self.height * self.width
    }

    /// Pixels of a convolution output plane.
    fn convolved_pixels(&self) -> usize {
        self.convolved_sides().iter().product()
    }

    fn convolved_width(&self) -> usize {
        self.convolved_sides()[1]
    }

    fn image_len(&self) -> usize {
        self.channels * self.pixels()
    }

    /// The images' shape, `[images, channels, height, width]`.
    pub fn images_shape(&self) -> [usize; 4] {
        [self.images, self.channels, self.height, self.width]
    }

    /// The weight's shape as burn holds it, `[outputs, channels, kernel, kernel]`.
    pub fn weight_shape(&self) -> [usize; 4] {
        [self.outputs, self.channels, self.kernel, self.kernel]
    }

    /// The pooled output's shape, `[images, outputs, convolved height / 2, convolved width / 2]`.
    pub fn pooled_shape(&self) -> [usize; 4] {
        let [height, width] = self.convolved_sides();
        [self.images, self.outputs, height / 2, width / 2]
    }

    fn pooled_len(&self) -> usize {
        self.pooled_shape().iter().product()
    }

    /// Images per tile: as many as fit [`COLUMN_BUDGET`], at least one.
    fn tile_images(&self) -> usize {
        let per_image = self.taps() * self.convolved_pixels();
        (COLUMN_BUDGET / per_image.max(1)).clamp(1, self.images.max(1))
    }

    /// The tiles, as `(first image, image count)`, in image order.
    fn tiles(&self) -> impl Iterator<Item = (usize, usize)> + use<> {
        let (images, size) = (self.images, self.tile_images());
        (0..images)
            .step_by(size)
            .map(move |first| (first, size.min(images - first)))
    }
}

/// What the forward pass keeps for the backward pass: which of its four inputs each pooled
/// value took, or [`INACTIVE`].
#[derive(Debug, Clone)]
pub struct Winners(Vec<u8>);

/// Gradients of the block's three inputs.
#[derive(Debug)]
pub struct Gradients {
    /// Of the images, if asked for.
    pub images: Option<Vec<f32>>,
    /// Of the weight.
    pub weight: Vec<f32>,
    /// Of the bias.
    pub bias: Vec<f32>,
}

/// `maxpool2(relu(conv(images, weight) + bias))`, and where each pooled value came from.
pub fn forward(
    geometry: &Geometry,
    images: &[f32],
    weight: &[f32],
    bias: &[f32],
) -> (Vec<f32>, Winners) {
    check_lengths(geometry, images, weight, bias);
    let mut pooled = vec![0.0; geometry.pooled_len()];
    let mut winners = vec![0; geometry.pooled_len()];
    SCRATCH.with_borrow_mut(|(columns, convolved)| {
        for (first, count) in geometry.tiles() {
            let width = count * geometry.convolved_pixels();
            let columns = scratch(columns, geometry.taps() * width);
            im2col(
                geometry,
                tile(geometry, images, first, count),
                count,
                columns,
            );
            let convolved = scratch(convolved, geometry.outputs * width);
            let weight = Matrix::row_major(weight, geometry.outputs, geometry.taps());
            multiply(
                convolved,
                weight,
                Matrix::row_major(columns, geometry.taps(), width),
                false,
            );
            pool(
                geometry,
                convolved,
                bias,
                (first, count),
                (&mut pooled, &mut winners),
            );
        }
    });
    (pooled, Winners(winners))
}

/// The gradients of [`forward`]'s inputs given the gradient of its output. The images'
/// gradient is computed only if `want_images`. Each tile's column matrix is built again rather
/// than kept from the forward pass: keeping a batch's would hold 20 MB per worker for the
/// CNN's second block, against one cheap copy pass per tile.
pub fn backward(
    geometry: &Geometry,
    (images, weight): (&[f32], &[f32]),
    winners: &Winners,
    output_grad: &[f32],
    want_images: bool,
) -> Gradients {
    assert_eq!(
        output_grad.len(),
        geometry.pooled_len(),
        "output gradient length"
    );
    let taps = geometry.taps();
    let mut grads = Gradients {
        images: want_images.then(|| vec![0.0; images.len()]),
        weight: vec![0.0; weight.len()],
        bias: vec![0.0; geometry.outputs],
    };
    SCRATCH.with_borrow_mut(|(columns, convolved_grad)| {
        for (index, (first, count)) in geometry.tiles().enumerate() {
            let width = count * geometry.convolved_pixels();
            let convolved_grad = scratch(convolved_grad, geometry.outputs * width);
            let columns = scratch(columns, taps * width);
            unpool(
                geometry,
                winners,
                output_grad,
                (first, count),
                convolved_grad,
            );
            add_bias_grad(geometry, convolved_grad, width, &mut grads.bias);
            im2col(
                geometry,
                tile(geometry, images, first, count),
                count,
                columns,
            );
            let convolved_grad = Matrix::row_major(convolved_grad, geometry.outputs, width);
            let columns_t = Matrix::row_major(columns, taps, width).transposed();
            multiply(&mut grads.weight, convolved_grad, columns_t, index > 0);
            if let Some(images_grad) = &mut grads.images {
                // The column matrix is spent: its buffer takes the columns' gradient.
                let weight_t = Matrix::row_major(weight, geometry.outputs, taps).transposed();
                multiply(columns, weight_t, convolved_grad, false);
                let images_grad = &mut images_grad[first * geometry.image_len()..];
                col2im(
                    geometry,
                    columns,
                    count,
                    &mut images_grad[..count * geometry.image_len()],
                );
            }
        }
    });
    grads
}

fn check_lengths(geometry: &Geometry, images: &[f32], weight: &[f32], bias: &[f32]) {
    let [height, width] = geometry.convolved_sides();
    assert!(
        height % 2 == 0 && width % 2 == 0 && height > 0 && width > 0,
        "pooling needs even sides"
    );
    assert!(
        geometry.pad < geometry.kernel,
        "padding of a kernel's side or more"
    );
    assert_eq!(
        images.len(),
        geometry.images * geometry.image_len(),
        "images length"
    );
    assert_eq!(
        weight.len(),
        geometry.outputs * geometry.taps(),
        "weight length"
    );
    assert_eq!(bias.len(), geometry.outputs, "bias length");
}

fn tile<'a>(geometry: &Geometry, images: &'a [f32], first: usize, count: usize) -> &'a [f32] {
    &images[first * geometry.image_len()..][..count * geometry.image_len()]
}

/// The first `len` values of a scratch buffer, for a caller that writes every one of them
/// before it reads any. The buffer only grows: the two blocks of a CNN share it, and cutting
/// it to each block's size would have it zero-fill megabytes again at every call.
fn scratch(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
    &mut buffer[..len]
}

/// Fills `columns` with the column matrix of `count` images: row `(c, i, j)`, column
/// `(image, y, x)` holds pixel `(y + i - pad, x + j - pad)` of channel `c`, or 0 outside.
fn im2col(geometry: &Geometry, images: &[f32], count: usize, columns: &mut [f32]) {
    let (pixels, convolved) = (geometry.pixels(), geometry.convolved_pixels());
    for_each_tap_plane(geometry, count, |row, channel, shift, image| {
        let out = &mut columns[(row * count + image) * convolved..][..convolved];
        let plane = &images[(image * geometry.channels + channel) * pixels..][..pixels];
        shift.copy_plane(geometry, plane, out);
    });
}

/// The adjoint of [`im2col`]: adds each column-matrix entry back onto the pixel it was read
/// from.
fn col2im(geometry: &Geometry, columns: &[f32], count: usize, images: &mut [f32]) {
    let (pixels, convolved) = (geometry.pixels(), geometry.convolved_pixels());
    for_each_tap_plane(geometry, count, |row, channel, shift, image| {
        let from = &columns[(row * count + image) * convolved..][..convolved];
        let plane = &mut images[(image * geometry.channels + channel) * pixels..][..pixels];
        shift.add_plane_back(geometry, from, plane);
    });
}

/// Calls `visit(row, channel, shift, image)` for every image under every kernel tap, in
/// column-matrix order.
fn for_each_tap_plane(
    geometry: &Geometry,
    count: usize,
    mut visit: impl FnMut(usize, usize, Shift, usize),
) {
    let (kernel, pad) = (geometry.kernel, geometry.pad);
    for channel in 0..geometry.channels {
        for i in 0..kernel {
            for j in 0..kernel {
                let row = (channel * kernel + i) * kernel + j;
                let shift = Shift {
                    down: i as isize - pad as isize,
                    right: j as isize - pad as isize,
                };
                for image in 0..count {
                    visit(row, channel, shift, image);
                }
            }
        }
    }
}

/// Where a kernel tap reads from, relative to the output pixel.
#[derive(Debug, Clone, Copy)]
struct Shift {
    down: isize,
    right: isize,
}

impl Shift {
    /// `out[y, x] = plane[y + down, x + right]` over the convolution's output plane, 0 where
    /// that is outside the input plane.
    fn copy_plane(&self, geometry: &Geometry, plane: &[f32], out: &mut [f32]) {
        if geometry.convolved_sides() == [geometry.height, geometry.width] {
            self.copy_same_plane(geometry.width, plane, out);
        } else {
            self.copy_rows(geometry, plane, out);
        }
    }

    /// [`Shift::copy_plane`] where the output plane has the input's sides ("same" padding):
    /// one copy of the whole plane at the linear offset, then zeros over the rows it ran past
    /// (a block above or below) and down the columns it wrapped. A shift moves a plane by at
    /// most the kernel's half-width, so those are a column or two: zeroed row by row, they were
    /// two calls to `memset` per row, which cost more than the copy.
    fn copy_same_plane(&self, width: usize, plane: &[f32], out: &mut [f32]) {
        let height = plane.len() / width;
        let offset = self.down * width as isize + self.right;
        let skip = offset.unsigned_abs().min(plane.len());
        if offset >= 0 {
            out[..plane.len() - skip].copy_from_slice(&plane[skip..]);
        } else {
            out[skip..].copy_from_slice(&plane[..plane.len() - skip]);
        }
        let (rows, columns) = (
            Self::inside(self.down, height, height),
            Self::inside(self.right, width, width),
        );
        out[..rows.start * width].fill(0.0);
        out[rows.end * width..].fill(0.0);
        for x in (0..columns.start).chain(columns.end..width) {
            for y in rows.clone() {
                out[y * width + x] = 0.0;
            }
        }
    }

    /// [`Shift::copy_plane`] for any padding, a row at a time: under "valid" padding every
    /// output row is one copy from an input row, with nothing to zero.
    fn copy_rows(&self, geometry: &Geometry, plane: &[f32], out: &mut [f32]) {
        let (rows, columns) = self.inside_planes(geometry);
        let width = geometry.convolved_width();
        out[..rows.start * width].fill(0.0);
        out[rows.end * width..].fill(0.0);
        for y in rows {
            let row = &mut out[y * width..][..width];
            let source = self.source_start(geometry, y, columns.start);
            row[..columns.start].fill(0.0);
            row[columns.clone()].copy_from_slice(&plane[source..][..columns.len()]);
            row[columns.end..].fill(0.0);
        }
    }

    /// `plane[y + down, x + right] += from[y, x]` wherever `(y + down, x + right)` is inside.
    fn add_plane_back(&self, geometry: &Geometry, from: &[f32], plane: &mut [f32]) {
        let (rows, columns) = self.inside_planes(geometry);
        let width = geometry.convolved_width();
        for y in rows {
            let from = &from[y * width..][columns.clone()];
            let start = self.source_start(geometry, y, columns.start);
            for (to, from) in plane[start..][..from.len()].iter_mut().zip(from) {
                *to += from;
            }
        }
    }

    /// The output rows and columns whose source pixel is inside the input plane.
    fn inside_planes(&self, geometry: &Geometry) -> (Range<usize>, Range<usize>) {
        let [height, width] = geometry.convolved_sides();
        (
            Self::inside(self.down, height, geometry.height),
            Self::inside(self.right, width, geometry.width),
        )
    }

    /// Where in the input plane the source of output pixel `(y, x)` is.
    fn source_start(&self, geometry: &Geometry, y: usize, x: usize) -> usize {
        let row = y as isize + self.down;
        (row * geometry.width as isize + x as isize + self.right) as usize
    }

    /// The output positions `p` in `0..len` whose source `p + by` is in `0..source_len`.
    fn inside(by: isize, len: usize, source_len: usize) -> Range<usize> {
        let start = (-by).clamp(0, len as isize) as usize;
        let end = (source_len as isize - by).clamp(0, len as isize) as usize;
        start..end.max(start)
    }
}

/// Adds the bias, applies ReLU and max-pools one tile's convolution into the whole batch's
/// `pooled` output (`[images, outputs, height / 2, width / 2]`), noting each value's winner.
/// Adding the bias after the maximum gives the same value: rounding is monotonic.
fn pool(
    geometry: &Geometry,
    convolved: &[f32],
    bias: &[f32],
    (first, count): (usize, usize),
    (pooled, winners): (&mut [f32], &mut [u8]),
) {
    let width = geometry.convolved_width();
    for_each_plane_pair(geometry, (first, count), |output, plane, at| {
        let pooled = pooled[at.clone()].chunks_exact_mut(width / 2);
        let winners = winners[at].chunks_exact_mut(width / 2);
        let row_pairs = convolved[plane].chunks_exact(2 * width);
        for ((rows, pooled), winners) in row_pairs.zip(pooled).zip(winners) {
            let (upper, lower) = rows.split_at(width);
            let windows = upper.chunks_exact(2).zip(lower.chunks_exact(2));
            for ((upper, lower), (pooled, winner)) in windows.zip(pooled.iter_mut().zip(winners)) {
                let (position, max) = window_max([upper[0], upper[1], lower[0], lower[1]]);
                let value = max + bias[output];
                let active = value > 0.0 || value.is_nan();
                *pooled = if active { value } else { 0.0 };
                *winner = if active { position } else { INACTIVE };
            }
        }
    });
}

/// Calls `visit(output, plane, pooled)` for each output channel and image of a tile: the
/// ranges of that image's convolution plane in the tile's `[outputs, tile · pixels]` matrix
/// and of its pooled plane in the batch's `[images, outputs, height / 2, width / 2]` output.
fn for_each_plane_pair(
    geometry: &Geometry,
    (first, count): (usize, usize),
    mut visit: impl FnMut(usize, Range<usize>, Range<usize>),
) {
    let pixels = geometry.convolved_pixels();
    let pooled_pixels = pixels / 4;
    for output in 0..geometry.outputs {
        for image in 0..count {
            let plane = (output * count + image) * pixels;
            let pooled = ((first + image) * geometry.outputs + output) * pooled_pixels;
            visit(
                output,
                plane..plane + pixels,
                pooled..pooled + pooled_pixels,
            );
        }
    }
}

/// The first largest of a 2x2 window in row order, as (position, value); NaN if any value is
/// NaN, so that it reaches the loss. Branch-free: which value wins is data, and mispredicted
/// branches cost more than the arithmetic.
fn window_max([a, b, c, d]: [f32; 4]) -> (u8, f32) {
    let max = a.max(b).max(c.max(d));
    let later = |value: f32| u8::from(value != max);
    let position = later(a) * (1 + later(b) * (1 + later(c)));
    let any_nan = a.is_nan() || b.is_nan() || c.is_nan() || d.is_nan();
    (position, if any_nan { f32::NAN } else { max })
}

/// Routes one tile's share of the output gradient to the convolution values that won their
/// windows (and passed ReLU), and 0 to the others: fills `convolved_grad`,
/// `[outputs, tile · height · width]`, in one pass of zeros and one that writes the winners.
fn unpool(
    geometry: &Geometry,
    winners: &Winners,
    output_grad: &[f32],
    (first, count): (usize, usize),
    convolved_grad: &mut [f32],
) {
    convolved_grad.fill(0.0);
    let width = geometry.convolved_width();
    for_each_plane_pair(geometry, (first, count), |_, plane, at| {
        let grads = output_grad[at.clone()].chunks_exact(width / 2);
        let winners = winners.0[at].chunks_exact(width / 2);
        let row_pairs = convolved_grad[plane].chunks_exact_mut(2 * width);
        for ((rows, grads), winners) in row_pairs.zip(grads).zip(winners) {
            for (x, (&grad, &winner)) in grads.iter().zip(winners).enumerate() {
                // Branch-free: an inactive value writes 0 over a 0 (INACTIVE & 3 is in range).
                let position = usize::from(winner & 3);
                rows[(position / 2) * width + 2 * x + position % 2] =
                    if winner == INACTIVE { 0.0 } else { grad };
            }
        }
    });
}

/// Adds each output channel's gradient sum (its row of `convolved_grad`) to its bias gradient.
fn add_bias_grad(geometry: &Geometry, convolved_grad: &[f32], width: usize, bias: &mut [f32]) {
    for (output, grad) in bias.iter_mut().enumerate().take(geometry.outputs) {
        *grad += convolved_grad[output * width..][..width]
            .iter()
            .sum::<f32>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::matrix::unstructured_values as values;

    fn geometry(images: usize) -> Geometry {
        Geometry {
            images,
            channels: 3,
            height: 6,
            width: 4,
            outputs: 2,
            kernel: 3,
            pad: 1,
        }
    }

    /// Geometries whose convolution shrinks the planes: "valid" padding (LeNet's), and less
    /// padding than "same", with an even kernel.
    fn shrinking(images: usize) -> [Geometry; 2] {
        let valid = Geometry {
            height: 8,
            width: 10,
            pad: 0,
            ..geometry(images)
        };
        let partial = Geometry {
            height: 7,
            width: 9,
            kernel: 4,
            pad: 1,
            ..geometry(images)
        };
        assert_eq!(valid.convolved_sides(), [6, 8]);
        assert_eq!(partial.convolved_sides(), [6, 8]);
        [valid, partial]
    }

    /// A geometry whose images each fill a tile, so that a batch spans several tiles.
    fn wide(images: usize) -> Geometry {
        let g = Geometry {
            channels: 64,
            height: 24,
            width: 24,
            kernel: 5,
            pad: 2,
            ..geometry(images)
        };
        assert_eq!(g.tile_images(), 1);
        g
    }

    /// The convolution at one output value, straight from the definition, in f64.
    fn direct_conv(g: &Geometry, images: &[f32], weight: &[f32], at: [usize; 4]) -> f64 {
        let [image, output, y, x] = at;
        let pad = g.pad as isize;
        let mut sum = 0.0;
        for channel in 0..g.channels {
            for i in 0..g.kernel {
                for j in 0..g.kernel {
                    let (sy, sx) = (y as isize + i as isize - pad, x as isize + j as isize - pad);
                    if sy < 0 || sx < 0 || sy >= g.height as isize || sx >= g.width as isize {
                        continue;
                    }
                    let pixel = images[((image * g.channels + channel) * g.height + sy as usize)
                        * g.width
                        + sx as usize];
                    let tap =
                        weight[((output * g.channels + channel) * g.kernel + i) * g.kernel + j];
                    sum += f64::from(pixel) * f64::from(tap);
                }
            }
        }
        sum
    }

    fn direct_block(g: &Geometry, images: &[f32], weight: &[f32], bias: &[f32]) -> Vec<f64> {
        let [n, _, ph, pw] = g.pooled_shape();
        let mut out = Vec::new();
        for image in 0..n {
            for (output, bias) in bias.iter().enumerate() {
                for y in 0..ph {
                    for x in 0..pw {
                        let max = [(0, 0), (0, 1), (1, 0), (1, 1)]
                            .map(|(dy, dx)| {
                                direct_conv(
                                    g,
                                    images,
                                    weight,
                                    [image, output, 2 * y + dy, 2 * x + dx],
                                )
                            })
                            .into_iter()
                            .fold(f64::MIN, f64::max);
                        out.push((max + f64::from(*bias)).max(0.0));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn forward_matches_the_definition_across_tile_boundaries() {
        let [valid, partial] = shrinking(4);
        for g in [geometry(7), wide(3), valid, partial] {
            let images = values(g.images * g.image_len(), 1);
            let weight = values(g.outputs * g.taps(), 2);
            let bias = [0.1, -0.2];
            let (pooled, _) = forward(&g, &images, &weight, &bias);
            for (got, want) in pooled.iter().zip(direct_block(&g, &images, &weight, &bias)) {
                assert!((f64::from(*got) - want).abs() < 1e-4, "{got} vs {want}");
            }
        }
    }

    /// The loss `sum(output · weights)` for fixed random `weights`, in f64, for finite
    /// differences.
    fn loss(g: &Geometry, images: &[f32], weight: &[f32], bias: &[f32], dir: &[f32]) -> f64 {
        let out = direct_block(g, images, weight, bias);
        out.iter().zip(dir).map(|(o, d)| o * f64::from(*d)).sum()
    }

    #[test]
    fn backward_matches_finite_differences() {
        let [valid, partial] = shrinking(2);
        for g in [geometry(3), valid, partial] {
            backward_matches_finite_differences_for(g);
        }
    }

    fn backward_matches_finite_differences_for(g: Geometry) {
        let images = values(g.images * g.image_len(), 3);
        let weight = values(g.outputs * g.taps(), 4);
        let bias = vec![0.05, -0.1];
        let dir = values(g.pooled_len(), 5);
        let (_, winners) = forward(&g, &images, &weight, &bias);
        let grads = backward(&g, (&images, &weight), &winners, &dir, true);
        let step = 1e-3;
        let numeric = |which: usize, at: usize| {
            let mut inputs = [images.clone(), weight.clone(), bias.clone()];
            inputs[which][at] += step;
            let up = loss(&g, &inputs[0], &inputs[1], &inputs[2], &dir);
            inputs[which][at] -= 2.0 * step;
            let down = loss(&g, &inputs[0], &inputs[1], &inputs[2], &dir);
            (up - down) / (2.0 * f64::from(step))
        };
        let analytic = [grads.images.unwrap(), grads.weight, grads.bias];
        for (which, grad) in analytic.iter().enumerate() {
            for (at, value) in grad.iter().enumerate() {
                let want = numeric(which, at);
                assert!(
                    (f64::from(*value) - want).abs() < 2e-2,
                    "input {which}, element {at}: {value} vs {want}"
                );
            }
        }
    }

    #[test]
    fn gradients_do_not_depend_on_the_tiling() {
        let g = wide(3);
        let images = values(g.images * g.image_len(), 6);
        let weight = values(g.outputs * g.taps(), 7);
        let bias = [0.0, 0.3];
        let dir = values(g.pooled_len(), 8);
        let (_, winners) = forward(&g, &images, &weight, &bias);
        let tiled = backward(&g, (&images, &weight), &winners, &dir, true);
        // One image at a time, summed: the same gradients up to rounding.
        let mut weight_sum = vec![0.0f64; weight.len()];
        for image in 0..g.images {
            let one = Geometry { images: 1, ..g };
            let single = tile(&g, &images, image, 1);
            let (_, winners) = forward(&one, single, &weight, &bias);
            let dir = &dir[image * one.pooled_len()..][..one.pooled_len()];
            let grads = backward(&one, (single, &weight), &winners, dir, true);
            for (sum, value) in weight_sum.iter_mut().zip(&grads.weight) {
                *sum += f64::from(*value);
            }
            let image_grad = &tiled.images.as_ref().unwrap()[image * g.image_len()..];
            assert_eq!(&image_grad[..g.image_len()], &grads.images.unwrap()[..]);
        }
        for (sum, value) in weight_sum.iter().zip(&tiled.weight) {
            assert!((sum - f64::from(*value)).abs() < 1e-4);
        }
    }

    #[test]
    fn relu_blocks_gradients_and_nan_reaches_the_output() {
        let g = geometry(1);
        let images = values(g.image_len(), 9);
        let weight = vec![0.0; g.outputs * g.taps()];
        let (pooled, winners) = forward(&g, &images, &weight, &[-1.0, f32::NAN]);
        let half = pooled.len() / 2;
        assert!(pooled[..half].iter().all(|&v| v == 0.0));
        assert!(pooled[half..].iter().all(|v| v.is_nan()));
        let grads = backward(
            &g,
            (&images, &weight),
            &winners,
            &vec![1.0; pooled.len()],
            false,
        );
        assert_eq!(grads.bias[0], 0.0);
        assert!(grads.images.is_none());
    }
}
