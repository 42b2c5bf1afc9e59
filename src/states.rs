//! The state each client keeps between the rounds it takes part in (SCAFFOLD's control
//! variate, FedDyn's gradient memory), held by the framework by client id.

use std::sync::{Mutex, PoisonError};

use crate::network::{ClientId, Tensors};

/// One slot per client, empty until the client's first round. Only that client's job takes
/// and puts its slot, so the lock is never contended; the server reads every slot between
/// rounds, when no job runs, to checkpoint them.
#[derive(Debug)]
pub struct ClientStates {
    slots: Vec<Mutex<Option<Tensors>>>,
}

impl ClientStates {
    /// Empty slots for `num_clients` clients.
    pub fn new(num_clients: usize) -> Self {
        Self {
            slots: (0..num_clients).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// The state of `client` (`None` before its first round).
    pub fn get(&self, client: ClientId) -> Option<Tensors> {
        self.slot(client).clone()
    }

    /// Replaces the state of `client`.
    pub fn put(&self, client: ClientId, state: Option<Tensors>) {
        *self.slot(client) = state;
    }

    /// Every client's state that is set, in id order (the tensors are shared, not copied).
    pub fn snapshot(&self) -> Vec<(ClientId, Tensors)> {
        (0..self.slots.len())
            .filter_map(|client| self.get(client).map(|state| (client, state)))
            .collect()
    }

    /// Sets the states a snapshot holds; the other clients keep none.
    pub fn restore(&self, snapshot: &[(ClientId, Tensors)]) {
        for client in 0..self.slots.len() {
            self.put(client, None);
        }
        for (client, state) in snapshot {
            self.put(*client, Some(state.clone()));
        }
    }

    /// Bytes of memory the states take.
    pub fn memory_bytes(&self) -> usize {
        (0..self.slots.len())
            .filter_map(|client| self.get(client))
            .map(|state| state.memory_bytes())
            .sum()
    }

    fn slot(&self, client: ClientId) -> std::sync::MutexGuard<'_, Option<Tensors>> {
        self.slots[client]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_allocated_on_first_use_and_survive_a_snapshot() {
        let states = ClientStates::new(3);
        assert_eq!(states.memory_bytes(), 0);
        states.put(2, Some(Tensors::new().with("c", vec![1.0, 2.0])));
        assert_eq!(states.memory_bytes(), 8);
        let snapshot = states.snapshot();
        let restored = ClientStates::new(3);
        restored.restore(&snapshot);
        assert_eq!(restored.get(2), states.get(2));
        assert_eq!(restored.get(0), None);
    }
}
