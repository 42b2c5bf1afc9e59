//! Named tensors: what an algorithm sends beside the model (SCAFFOLD's control variates, a
//! client's loss), keeps between rounds (a server optimiser's moments, a client's state), and
//! writes to checkpoints.

use std::sync::Arc;

/// What is wrong with a saved state (a checkpoint's) handed back to a server half or a
/// selector to restore: the run it came from cannot continue with this algorithm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A tensor the state must hold is missing.
    #[error("it has no tensor {0:?}")]
    Missing(String),
    /// A tensor the algorithm does not keep is there.
    #[error("it holds {0:?}, which this algorithm does not keep")]
    Unexpected(String),
    /// The tensors are there but do not fit this run: what is wrong.
    #[error("{0}")]
    Invalid(String),
}

/// An ordered set of named flat `f32` tensors. Cheap to clone: the values are shared.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tensors(Vec<(String, Arc<[f32]>)>);

impl Tensors {
    /// No tensors.
    pub fn new() -> Self {
        Self::default()
    }

    /// These tensors and `values` under `name` (replacing a tensor of that name).
    pub fn with(mut self, name: &str, values: impl Into<Arc<[f32]>>) -> Self {
        self.insert(name, values);
        self
    }

    /// Adds `values` under `name`, replacing a tensor of that name.
    pub fn insert(&mut self, name: &str, values: impl Into<Arc<[f32]>>) {
        let values = values.into();
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, slot)) => *slot = values,
            None => self.0.push((name.to_string(), values)),
        }
    }

    /// The tensor `name`, if present.
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, values)| &**values)
    }

    /// The tensor `name` of a saved state, or the error that it is missing.
    pub fn require(&self, name: &str) -> Result<&[f32], StateError> {
        self.get(name)
            .ok_or_else(|| StateError::Missing(name.to_string()))
    }

    /// The tensor `name`, which the algorithm that reads it has always put there.
    pub fn expect(&self, name: &str) -> &[f32] {
        self.get(name)
            .unwrap_or_else(|| panic!("the tensor {name:?} is missing"))
    }

    /// Every tensor, in the order added.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[f32])> {
        self.0.iter().map(|(n, v)| (n.as_str(), &**v))
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of values in all tensors together.
    pub fn num_values(&self) -> usize {
        self.0.iter().map(|(_, v)| v.len()).sum()
    }

    /// Bytes on a network: a four-byte name code and four bytes per value, for each tensor.
    pub fn wire_bytes(&self) -> usize {
        self.0.iter().map(|(_, v)| 4 + 4 * v.len()).sum()
    }

    /// Bytes of memory the values take.
    pub fn memory_bytes(&self) -> usize {
        4 * self.num_values()
    }

    /// The tensors as bytes: per tensor, the name's length (u16), the name, the number of
    /// values (u64) and the values, all little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.memory_bytes() + 16 * self.0.len());
        for (name, values) in &self.0 {
            let name_len = u16::try_from(name.len()).expect("tensor names are short");
            out.extend_from_slice(&name_len.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(values.len() as u64).to_le_bytes());
            out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        }
        out
    }

    /// Reads what [`Tensors::to_bytes`] wrote; `None` if the bytes are not such a list.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let mut rest = bytes;
        let mut take = |len: usize| -> Option<&[u8]> {
            let (head, tail) = rest.split_at_checked(len)?;
            rest = tail;
            Some(head)
        };
        let mut tensors = Tensors::new();
        let mut left = bytes.len();
        while left > 0 {
            let name_len = usize::from(u16::from_le_bytes(take(2)?.try_into().ok()?));
            let name = std::str::from_utf8(take(name_len)?).ok()?.to_string();
            let len = usize::try_from(u64::from_le_bytes(take(8)?.try_into().ok()?)).ok()?;
            let values: Vec<f32> = take(len.checked_mul(4)?)?
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("four bytes")))
                .collect();
            left -= 2 + name_len + 8 + 4 * len;
            tensors.0.push((name, values.into()));
        }
        Some(tensors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_wire_size_counts_every_value() {
        let tensors = Tensors::new()
            .with("control", vec![1.5, -2.0])
            .with("h", vec![3.0]);
        assert_eq!(
            Tensors::from_bytes(&tensors.to_bytes()),
            Some(tensors.clone())
        );
        assert_eq!(tensors.wire_bytes(), 4 + 8 + 4 + 4);
        assert_eq!(tensors.expect("h"), &[3.0]);
        assert!(Tensors::from_bytes(&[1, 0, b'x', 9]).is_none());
        let mut trailing = tensors.to_bytes();
        trailing.push(0);
        assert!(Tensors::from_bytes(&trailing).is_none());
    }

    #[test]
    fn inserting_a_name_again_replaces_it() {
        let tensors = Tensors::new().with("a", vec![1.0]).with("a", vec![2.0]);
        assert_eq!(tensors.iter().count(), 1);
        assert_eq!(tensors.expect("a"), &[2.0]);
    }
}
