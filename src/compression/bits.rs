//! Fixed-width bit packing: values of `width` bits, least significant first, in consecutive
//! bits of a byte string, the last byte padded with zeros.

/// The bytes that `count` values of `width` bits take.
pub(super) fn packed_len(count: usize, width: u32) -> usize {
    (count * width as usize).div_ceil(8)
}

/// Packs `values` (each below `2^width`) into bytes, `width` bits each.
pub(super) fn pack(values: impl IntoIterator<Item = u32>, width: u32, count: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; packed_len(count, width)];
    for (i, value) in values.into_iter().enumerate() {
        debug_assert!(width == 32 || value < 1 << width);
        let start = i * width as usize;
        for bit in 0..width as usize {
            if value >> bit & 1 == 1 {
                let at = start + bit;
                bytes[at / 8] |= 1 << (at % 8);
            }
        }
    }
    bytes
}

/// The `count` values of `width` bits packed in `bytes`.
pub(super) fn unpack(bytes: &[u8], width: u32, count: usize) -> Vec<u32> {
    (0..count)
        .map(|i| {
            let start = i * width as usize;
            (0..width as usize).fold(0u32, |value, bit| {
                let at = start + bit;
                value | u32::from(bytes[at / 8] >> (at % 8) & 1) << bit
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_at_every_width() {
        for width in [1, 3, 5, 8, 13] {
            let values: Vec<u32> = (0..29).map(|i| (i * 7919) % (1 << width)).collect();
            let bytes = pack(values.iter().copied(), width, values.len());
            assert_eq!(bytes.len(), packed_len(values.len(), width));
            assert_eq!(unpack(&bytes, width, values.len()), values, "width {width}");
        }
    }
}
