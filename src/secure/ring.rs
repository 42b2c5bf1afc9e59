//! The ring the masked vectors live in, `Z_2^32`: real values quantised into it, masks
//! expanded from seeds, and sums read back.
//!
//! A value `x` in `[−range, range]` becomes `round(x · Q / range)` in two's complement, with
//! `Q = ⌊(2^31 − 1) / summands⌋`, so that the sum of up to `summands` of them never wraps
//! past `±2^31` and reads back exactly as a signed integer: the ring's sum is the integers'.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;

/// How real values map into the ring and back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantiser {
    /// Values are clamped to `[−range, range]`.
    range: f64,
    /// The integer `range` maps to.
    levels: f64,
}

impl Quantiser {
    /// A quantiser of values within `range` (positive) for sums of up to `summands` (at least
    /// one) of them.
    pub fn new(range: f64, summands: usize) -> Self {
        let summands = summands.max(1) as f64;
        Self {
            range,
            levels: (f64::from(i32::MAX) / summands).floor(),
        }
    }

    /// `value`, clamped to the range, as a ring element.
    pub fn quantise(&self, value: f64) -> u32 {
        let clamped = value.clamp(-self.range, self.range);
        ((clamped / self.range * self.levels).round() as i32) as u32
    }

    /// The real value of a ring element that is a sum of quantised values.
    pub fn value_of_sum(&self, sum: u32) -> f64 {
        f64::from(sum as i32) * self.range / self.levels
    }
}

/// Adds (`negate` false) or subtracts the mask that `seed` expands to onto `vector`, in the
/// ring.
pub fn apply_mask(vector: &mut [u32], seed: u64, negate: bool) {
    let mut rng = ChaCha12Rng::seed_from_u64(seed);
    for value in vector.iter_mut() {
        let mask = rng.next_u32();
        *value = match negate {
            false => value.wrapping_add(mask),
            true => value.wrapping_sub(mask),
        };
    }
}

/// `into += vector` in the ring.
pub fn add_into(into: &mut [u32], vector: &[u32]) {
    for (sum, value) in into.iter_mut().zip(vector) {
        *sum = sum.wrapping_add(*value);
    }
}

/// A ring vector as the bytes that travel: four little-endian bytes per element.
pub fn to_bytes(vector: &[u32]) -> Vec<u8> {
    vector.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The ring vector `bytes` hold, if they hold whole elements.
pub fn from_bytes(bytes: &[u8]) -> Option<Vec<u32>> {
    let chunks = bytes.chunks_exact(4);
    if !chunks.remainder().is_empty() {
        return None;
    }
    Some(
        chunks
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_of_extreme_values_read_back_without_wrapping() {
        let quantiser = Quantiser::new(0.5, 10);
        let mut sum = vec![0u32; 2];
        for _ in 0..10 {
            add_into(
                &mut sum,
                &[quantiser.quantise(0.5), quantiser.quantise(-9.0)],
            );
        }
        assert!((quantiser.value_of_sum(sum[0]) - 5.0).abs() < 1e-9);
        assert!((quantiser.value_of_sum(sum[1]) + 5.0).abs() < 1e-9);
    }

    #[test]
    fn a_mask_and_its_negation_cancel_and_bytes_round_trip() {
        let plain = vec![1, 2, u32::MAX, 0];
        let mut masked = plain.clone();
        apply_mask(&mut masked, 42, false);
        assert!(masked.iter().zip(&plain).all(|(m, p)| m != p));
        apply_mask(&mut masked, 42, true);
        assert_eq!(masked, plain);
        assert_eq!(from_bytes(&to_bytes(&plain)), Some(plain));
        assert_eq!(from_bytes(&[1, 2, 3]), None);
    }
}
