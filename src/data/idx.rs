//! Reader for the IDX format that MNIST and Fashion-MNIST ship in.
//!
//! An IDX file is a 4-byte magic number (two zero bytes, a type code, the number of dimensions),
//! one big-endian `u32` per dimension, then the values. fedsim reads only unsigned-byte files
//! (type code `0x08`), which covers MNIST's images and labels. Every structural check names the
//! file and what was found, because a truncated download is the most common way this breaks.

use std::path::Path;

use super::DataError;

/// Type code of unsigned bytes, the only element type fedsim reads.
const UNSIGNED_BYTE: u8 = 0x08;

/// An unsigned-byte IDX array: its dimensions and its values in row-major order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxArray {
    /// Size of each dimension, outermost first (e.g. `[60000, 28, 28]`).
    pub dims: Vec<usize>,
    /// The values, `dims.iter().product()` of them.
    pub data: Vec<u8>,
}

/// Parses an IDX file's (decompressed) bytes, naming `path` in any error.
pub fn parse_idx_file(path: &Path, bytes: Vec<u8>) -> Result<IdxArray, DataError> {
    parse_idx(bytes).map_err(|reason| DataError::Corrupt {
        path: path.to_path_buf(),
        reason,
    })
}

/// Parses the bytes of an uncompressed IDX file, keeping them as the values (the header is
/// removed in place, so the data is never held twice); the error says what is wrong with them.
pub fn parse_idx(mut bytes: Vec<u8>) -> Result<IdxArray, String> {
    let Some(magic) = bytes.get(..4) else {
        return Err(format!(
            "is {} bytes long, too short for an IDX header",
            bytes.len()
        ));
    };
    if magic[0] != 0 || magic[1] != 0 {
        return Err(format!(
            "has magic number {magic:02x?}, not an IDX file (expected 00 00 <type> <rank>)"
        ));
    }
    if magic[2] != UNSIGNED_BYTE {
        return Err(format!(
            "has element type 0x{:02x}; only unsigned bytes (0x08) are supported",
            magic[2]
        ));
    }
    let rank = usize::from(magic[3]);
    if rank == 0 {
        return Err("declares zero dimensions".to_string());
    }
    let header_len = 4 + 4 * rank;
    let Some(dim_bytes) = bytes.get(4..header_len) else {
        return Err(format!(
            "is truncated inside its header ({} bytes, the header of a rank-{rank} file needs {header_len})",
            bytes.len()
        ));
    };
    let dims: Vec<usize> = dim_bytes
        .chunks_exact(4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("declares dimensions {dims:?}, too large to hold"))?;
    let found = bytes.len() - header_len;
    if found != expected {
        let how = if found < expected {
            "truncated"
        } else {
            "longer than declared"
        };
        return Err(format!(
            "is {how}: dimensions {dims:?} need {expected} value bytes, found {found}"
        ));
    }
    bytes.drain(..header_len);
    Ok(IdxArray { dims, data: bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx_bytes(dims: &[u32], values: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0, 0, UNSIGNED_BYTE, dims.len() as u8];
        for d in dims {
            bytes.extend(d.to_be_bytes());
        }
        bytes.extend(values);
        bytes
    }

    #[test]
    fn parses_a_well_formed_array() {
        let array = parse_idx(idx_bytes(&[2, 3], &[1, 2, 3, 4, 5, 6])).unwrap();
        assert_eq!(array.dims, vec![2, 3]);
        assert_eq!(array.data, vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn rejects_missing_values() {
        let err = parse_idx(idx_bytes(&[2, 3], &[1, 2, 3])).unwrap_err();
        assert!(err.contains("truncated") && err.contains("need 6"), "{err}");
    }

    #[test]
    fn rejects_extra_values() {
        let err = parse_idx(idx_bytes(&[1], &[1, 2])).unwrap_err();
        assert!(err.contains("longer than declared"), "{err}");
    }

    #[test]
    fn rejects_a_header_cut_short() {
        let err = parse_idx(idx_bytes(&[2, 3], &[])[..7].to_vec()).unwrap_err();
        assert!(err.contains("inside its header"), "{err}");
    }

    #[test]
    fn rejects_a_wrong_magic_number() {
        let err = parse_idx(b"PK\x03\x04rest".to_vec()).unwrap_err();
        assert!(err.contains("magic number"), "{err}");
    }

    #[test]
    fn rejects_non_byte_elements() {
        let mut bytes = idx_bytes(&[1], &[0, 0, 0, 0]);
        bytes[2] = 0x0d; // float
        let err = parse_idx(bytes).unwrap_err();
        assert!(err.contains("element type 0x0d"), "{err}");
    }
}
