//! Random crops and horizontal flips of a batch of images, in place.
//!
//! Each image is padded by `crop_padding` pixels of the channel's zero-byte feature (as
//! torchvision's `RandomCrop(padding=…)` pads before `Normalize`), a window of the image's own
//! size is cut at an offset drawn uniformly, and with `flip` half the images, drawn at random,
//! are mirrored. The draws come from the client's own training stream, so a run stays a
//! function of its seed.

use rand::RngExt;
use rand_chacha::ChaCha12Rng;

use super::Augmentation;

impl Augmentation {
    /// Augments `features`, a batch of images of `[channels, height, width]` one after
    /// another; `fill[c]` is the feature of a padding pixel of channel `c`.
    pub fn apply(
        &self,
        features: &mut [f32],
        [channels, height, width]: [usize; 3],
        fill: &[f32],
        rng: &mut ChaCha12Rng,
    ) {
        let pad = self.crop_padding as i64;
        let mut source = vec![0.0; channels * height * width];
        for image in features.chunks_exact_mut(channels * height * width) {
            let dy = rng.random_range(-pad..=pad) as isize;
            let dx = rng.random_range(-pad..=pad) as isize;
            let mirrored = self.flip && rng.random_bool(0.5);
            source.copy_from_slice(image);
            for (c, plane) in image.chunks_exact_mut(height * width).enumerate() {
                let from = &source[c * height * width..(c + 1) * height * width];
                for y in 0..height {
                    for x in 0..width {
                        let sx = if mirrored { width - 1 - x } else { x } as isize + dx;
                        let sy = y as isize + dy;
                        let inside =
                            (0..height as isize).contains(&sy) && (0..width as isize).contains(&sx);
                        plane[y * width + x] = if inside {
                            from[sy as usize * width + sx as usize]
                        } else {
                            fill[c]
                        };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::{Purpose, stream};

    #[test]
    fn without_padding_or_flips_images_are_unchanged_and_flips_mirror_them() {
        let image: Vec<f32> = (0..2 * 2 * 3).map(|v| v as f32).collect();
        let rng = &mut stream(0, Purpose::LOCAL_SHUFFLE, 0, 0);
        let mut same = image.clone();
        let none = Augmentation {
            crop_padding: 0,
            flip: false,
        };
        none.apply(&mut same, [2, 2, 3], &[9.0, 9.0], rng);
        assert_eq!(same, image);
        let flip = Augmentation {
            crop_padding: 0,
            flip: true,
        };
        let mut seen = Vec::new();
        for _ in 0..20 {
            let mut copy = image.clone();
            flip.apply(&mut copy, [2, 2, 3], &[9.0, 9.0], rng);
            seen.push(copy);
        }
        let mirrored: Vec<f32> = image
            .chunks(3)
            .flat_map(|row| row.iter().rev().copied())
            .collect();
        assert!(seen.contains(&image) && seen.contains(&mirrored));
        assert!(seen.iter().all(|s| *s == image || *s == mirrored));
    }

    #[test]
    fn crops_shift_the_image_and_fill_the_border() {
        let image = vec![1.0; 16];
        let crop = Augmentation {
            crop_padding: 2,
            flip: false,
        };
        let rng = &mut stream(0, Purpose::LOCAL_SHUFFLE, 0, 0);
        let mut shifted = false;
        for _ in 0..20 {
            let mut copy = image.clone();
            crop.apply(&mut copy, [1, 4, 4], &[-1.0], rng);
            assert!(copy.iter().all(|&v| v == 1.0 || v == -1.0));
            shifted |= copy.contains(&-1.0);
        }
        assert!(shifted);
    }
}
