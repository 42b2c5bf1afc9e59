//! The state each client keeps between the rounds it takes part in (SCAFFOLD's control
//! variate, FedDyn's gradient memory, a personal model), held by the framework by client id.
//!
//! States live in memory up to a budget of bytes; past it, a state is appended to the spill
//! file ([`spill`]) and only its place is kept in memory. Where a state lives changes no
//! result: the bits read back are the bits put. Only clients that have a state take room, so a
//! federation of many clients of which few have trained holds little.

pub mod spill;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::network::{ClientId, Tensors};
pub use spill::SpillError;
use spill::{Record, SpillFile};

/// A spill file worth compacting holds at least this many superseded bytes (and more of them
/// than live ones): below it, rewriting would cost more than the space it frees.
const COMPACTION_FLOOR: u64 = 64 << 20;

/// The clients' states, by client id. Only a client's own job takes and puts its state while
/// rounds run; the server reads all of them between rounds to checkpoint them.
#[derive(Debug)]
pub struct ClientStates {
    budget: u64,
    /// Superseded bytes below which the spill file is not compacted ([`COMPACTION_FLOOR`]).
    compaction_floor: u64,
    spill_to: SpillTo,
    held: Mutex<Held>,
}

/// Where states past the budget go.
#[derive(Debug)]
enum SpillTo {
    /// Nowhere: every state stays in memory (a test's store, a relay's placeholder).
    Nowhere,
    /// The run folder, whose checkpoints name the spilled states.
    RunFolder(PathBuf),
    /// A folder of this process's own, removed with it: a process over MPI that trains clients
    /// for the server's process, which holds (and checkpoints) every state.
    Temporary(tempfile::TempDir),
}

#[derive(Debug, Default)]
struct Held {
    slots: BTreeMap<ClientId, Slot>,
    /// Bytes of the states in memory.
    memory_bytes: u64,
    /// Bytes of the spilled states' values, and of their records in the file.
    spilled_bytes: u64,
    spilled_record_bytes: u64,
    file: Option<SpillFile>,
    writes: u64,
    reads: u64,
    spill_seconds: f64,
}

#[derive(Debug)]
enum Slot {
    Memory(Tensors),
    Spilled { record: Record, bytes: u64 },
}

/// The clients' states as a checkpoint keeps them: those in memory whole, those in the spill
/// file by their place in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatesSnapshot {
    /// The states in memory, in client order.
    pub in_memory: Vec<(ClientId, Tensors)>,
    /// The spilled states, if any.
    pub spilled: Option<SpillIndex>,
}

/// Where the spilled states of a snapshot lie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillIndex {
    /// The spill file's generation.
    pub generation: u32,
    /// Its length when the snapshot was taken.
    pub length: u64,
    /// Each spilled client's record, in client order: (client, offset, length).
    pub records: Vec<(ClientId, u64, u64)>,
}

impl StatesSnapshot {
    /// This snapshot with `client`'s state set to `state` whole (a client in flight, whose
    /// checkpointed state is the one it was dispatched with).
    pub fn set(&mut self, client: ClientId, state: Option<Tensors>) {
        self.in_memory.retain(|(held, _)| *held != client);
        if let Some(spilled) = &mut self.spilled {
            spilled.records.retain(|(held, _, _)| *held != client);
        }
        if let Some(state) = state {
            let at = self.in_memory.partition_point(|(held, _)| *held < client);
            self.in_memory.insert(at, (client, state));
        }
    }
}

/// What the clients' states took, for `summary.json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StateUsage {
    /// Clients holding a state.
    pub clients: usize,
    /// Bytes of the states in memory.
    pub memory_bytes: u64,
    /// Bytes of the spilled states' values.
    pub spilled_bytes: u64,
    /// Bytes of the spill file (superseded records included, until compacted).
    pub spill_file_bytes: u64,
    /// States written to the spill file and read back from it by the process that wrote the
    /// summary.
    pub spill_writes: u64,
    /// See `spill_writes`.
    pub spill_reads: u64,
    /// Real seconds those writes and reads took.
    pub spill_seconds: f64,
}

impl ClientStates {
    /// A store that keeps every state in memory, whatever its size.
    pub fn in_memory() -> Self {
        Self::with(u64::MAX, SpillTo::Nowhere)
    }

    /// A store that keeps `budget` bytes of states in memory and spills the rest to `dir`, a
    /// run folder.
    pub fn spilling_to(dir: &Path, budget: u64) -> Self {
        Self::with(budget, SpillTo::RunFolder(dir.to_path_buf()))
    }

    /// A store that keeps `budget` bytes of states in memory and spills the rest to a
    /// temporary folder, removed with the store.
    pub fn spilling_to_temporary(budget: u64) -> Result<Self, SpillError> {
        let dir = tempfile::Builder::new()
            .prefix("fedsim-states-")
            .tempdir()
            .map_err(|source| SpillError::Io {
                action: "create a folder in",
                path: std::env::temp_dir(),
                source,
            })?;
        Ok(Self::with(budget, SpillTo::Temporary(dir)))
    }

    fn with(budget: u64, spill_to: SpillTo) -> Self {
        Self {
            budget,
            compaction_floor: COMPACTION_FLOOR,
            spill_to,
            held: Mutex::new(Held::default()),
        }
    }

    /// The state of `client` (`None` before its first round).
    pub fn get(&self, client: ClientId) -> Result<Option<Tensors>, SpillError> {
        let record = match self.held().slots.get(&client) {
            None => return Ok(None),
            Some(Slot::Memory(state)) => return Ok(Some(state.clone())),
            Some(Slot::Spilled { record, .. }) => record.clone(),
        };
        // Read without the lock: other clients' jobs go on meanwhile.
        let started = Instant::now();
        let state = record.read(client)?;
        let mut held = self.held();
        held.reads += 1;
        held.spill_seconds += started.elapsed().as_secs_f64();
        Ok(Some(state))
    }

    /// Replaces the state of `client`: in memory while the budget allows, else in the spill
    /// file.
    pub fn put(&self, client: ClientId, state: Option<Tensors>) -> Result<(), SpillError> {
        let mut guard = self.held();
        let held = &mut *guard;
        held.forget(client);
        let Some(state) = state else {
            return Ok(());
        };
        let bytes = state.memory_bytes() as u64;
        let dir = match &self.spill_to {
            SpillTo::RunFolder(dir) => Some(dir.as_path()),
            SpillTo::Temporary(dir) => Some(dir.path()),
            SpillTo::Nowhere => None,
        };
        match dir {
            Some(dir) if held.memory_bytes + bytes > self.budget => {
                let started = Instant::now();
                let file = match &mut held.file {
                    Some(file) => file,
                    empty => empty.insert(SpillFile::create(dir)?),
                };
                let record = file.append(client, &state)?;
                held.spilled_bytes += bytes;
                held.spilled_record_bytes += record.size();
                held.writes += 1;
                held.spill_seconds += started.elapsed().as_secs_f64();
                held.slots.insert(client, Slot::Spilled { record, bytes });
            }
            _ => {
                held.memory_bytes += bytes;
                held.slots.insert(client, Slot::Memory(state));
            }
        }
        Ok(())
    }

    /// Every client's state, in memory or by its place in the spill file, for a checkpoint.
    /// Compacts the spill file first where most of it is superseded.
    pub fn snapshot(&self) -> Result<StatesSnapshot, SpillError> {
        let mut held = self.held();
        held.compact_if_worth_it(self.compaction_floor)?;
        let mut snapshot = StatesSnapshot::default();
        let mut records = Vec::new();
        for (&client, slot) in &held.slots {
            match slot {
                Slot::Memory(state) => snapshot.in_memory.push((client, state.clone())),
                Slot::Spilled { record, .. } => {
                    records.push((client, record.offset(), record.size()));
                }
            }
        }
        snapshot.spilled = held.file.as_ref().map(|file| SpillIndex {
            generation: file.generation(),
            length: file.length(),
            records,
        });
        Ok(snapshot)
    }

    /// Takes back the states a snapshot holds, as a resumed run starts: the spill file it names
    /// cut back to its length then (every record checked), other spill files removed.
    pub fn restore(&self, snapshot: &StatesSnapshot) -> Result<(), SpillError> {
        *self.held() = Held::default();
        if let SpillTo::RunFolder(dir) = &self.spill_to {
            match &snapshot.spilled {
                Some(index) => {
                    let file = SpillFile::reopen(dir, index.generation, index.length)?;
                    let mut held = self.held();
                    for &(client, offset, len) in &index.records {
                        let (record, state) = file.record_at(client, offset, len)?;
                        let bytes = state.memory_bytes() as u64;
                        held.spilled_bytes += bytes;
                        held.spilled_record_bytes += record.size();
                        held.slots.insert(client, Slot::Spilled { record, bytes });
                    }
                    held.file = Some(file);
                }
                None => spill::remove_all(dir),
            }
        }
        for (client, state) in &snapshot.in_memory {
            self.put(*client, Some(state.clone()))?;
        }
        Ok(())
    }

    /// Says that a checkpoint naming spill file generation `generation` is written: older
    /// generations are no longer needed.
    pub fn committed(&self, snapshot: &StatesSnapshot) {
        let held = self.held();
        if let (Some(index), Some(file)) = (&snapshot.spilled, &held.file) {
            file.remove_generations(|generation| generation < index.generation);
        }
    }

    /// What the states take, in memory and in the spill file.
    pub fn usage(&self) -> StateUsage {
        let held = self.held();
        StateUsage {
            clients: held.slots.len(),
            memory_bytes: held.memory_bytes,
            spilled_bytes: held.spilled_bytes,
            spill_file_bytes: held.file.as_ref().map_or(0, SpillFile::length),
            spill_writes: held.writes,
            spill_reads: held.reads,
            spill_seconds: held.spill_seconds,
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Held {
    /// Drops the state of `client`, wherever it lies.
    fn forget(&mut self, client: ClientId) {
        match self.slots.remove(&client) {
            Some(Slot::Memory(state)) => self.memory_bytes -= state.memory_bytes() as u64,
            Some(Slot::Spilled { record, bytes }) => {
                self.spilled_bytes -= bytes;
                self.spilled_record_bytes -= record.size();
            }
            None => {}
        }
    }

    /// Rewrites the spill file's live records into its next generation if superseded ones
    /// take more than the live ones and more than `floor`.
    fn compact_if_worth_it(&mut self, floor: u64) -> Result<(), SpillError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let superseded = file.length() - self.spilled_record_bytes;
        if superseded <= floor.max(self.spilled_record_bytes) {
            return Ok(());
        }
        let live: Vec<(ClientId, &Record)> = self
            .slots
            .iter()
            .filter_map(|(&client, slot)| match slot {
                Slot::Spilled { record, .. } => Some((client, record)),
                Slot::Memory(_) => None,
            })
            .collect();
        let (next, moved) = file.compact(&live)?;
        let clients: Vec<ClientId> = live.iter().map(|(client, _)| *client).collect();
        for (client, record) in clients.into_iter().zip(moved) {
            if let Some(Slot::Spilled { record: old, .. }) = self.slots.get_mut(&client) {
                *old = record;
            }
        }
        self.file = Some(next);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(value: f32) -> Tensors {
        Tensors::new().with("c", vec![value; 4])
    }

    #[test]
    fn states_are_allocated_on_first_use_and_survive_a_snapshot() {
        let states = ClientStates::in_memory();
        assert_eq!(states.usage().memory_bytes, 0);
        states
            .put(2, Some(Tensors::new().with("c", vec![1.0, 2.0])))
            .unwrap();
        assert_eq!(states.usage().memory_bytes, 8);
        let snapshot = states.snapshot().unwrap();
        let restored = ClientStates::in_memory();
        restored.restore(&snapshot).unwrap();
        assert_eq!(restored.get(2).unwrap(), states.get(2).unwrap());
        assert_eq!(restored.get(0).unwrap(), None);
    }

    #[test]
    fn past_the_budget_states_are_spilled_and_read_back_to_the_bit() {
        let dir = tempfile::tempdir().unwrap();
        // Room for two states of 16 bytes in memory.
        let states = ClientStates::spilling_to(dir.path(), 32);
        for client in 0..5 {
            states.put(client, Some(state(client as f32 + 0.1))).unwrap();
        }
        let usage = states.usage();
        assert_eq!((usage.clients, usage.memory_bytes), (5, 32));
        assert_eq!((usage.spilled_bytes, usage.spill_writes), (48, 3));
        for client in 0..5 {
            assert_eq!(states.get(client).unwrap(), Some(state(client as f32 + 0.1)));
        }
        // A spilled client put again is spilled again; one in memory stays there.
        states.put(4, Some(state(9.0))).unwrap();
        states.put(0, None).unwrap();
        states.put(3, Some(state(8.0))).unwrap();
        assert_eq!(states.get(3).unwrap(), Some(state(8.0)));
        assert_eq!(states.get(4).unwrap(), Some(state(9.0)));
        assert_eq!(states.get(0).unwrap(), None);
        assert_eq!(states.usage().memory_bytes, 32);
    }

    #[test]
    fn a_resumed_store_reads_the_snapshots_states_not_those_spilled_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let states = ClientStates::spilling_to(dir.path(), 16);
        for client in 0..4 {
            states.put(client, Some(state(client as f32))).unwrap();
        }
        let snapshot = states.snapshot().unwrap();
        assert_eq!(snapshot.in_memory.len(), 1);
        assert_eq!(snapshot.spilled.as_ref().unwrap().records.len(), 3);
        states.committed(&snapshot);
        // The next round changes spilled states, then the process is killed.
        states.put(2, Some(state(20.0))).unwrap();
        states.put(5, Some(state(50.0))).unwrap();
        drop(states);

        let resumed = ClientStates::spilling_to(dir.path(), 16);
        resumed.restore(&snapshot).unwrap();
        for client in 0..4 {
            assert_eq!(resumed.get(client).unwrap(), Some(state(client as f32)));
        }
        assert_eq!(resumed.get(5).unwrap(), None);
        assert_eq!(resumed.snapshot().unwrap(), snapshot);
    }

    #[test]
    fn a_mostly_superseded_spill_file_is_compacted_and_the_old_generation_removed_once_committed() {
        let dir = tempfile::tempdir().unwrap();
        let states = ClientStates {
            compaction_floor: 0,
            ..ClientStates::spilling_to(dir.path(), 0)
        };
        for round in 0..3 {
            for client in 0..2 {
                states.put(client, Some(state(round as f32))).unwrap();
            }
        }
        let snapshot = states.snapshot().unwrap();
        let index = snapshot.spilled.clone().unwrap();
        assert_eq!(index.generation, 1);
        assert_eq!(index.length, 2 * index.records[0].2);
        assert!(dir.path().join(spill::file_name(0)).exists());
        states.committed(&snapshot);
        assert!(!dir.path().join(spill::file_name(0)).exists());
        let resumed = ClientStates::spilling_to(dir.path(), 0);
        resumed.restore(&snapshot).unwrap();
        assert_eq!(resumed.get(1).unwrap(), Some(state(2.0)));
    }

    #[test]
    fn a_client_in_flight_is_checkpointed_with_the_state_it_was_dispatched_with() {
        let dir = tempfile::tempdir().unwrap();
        let states = ClientStates::spilling_to(dir.path(), 16);
        for client in 0..3 {
            states.put(client, Some(state(client as f32))).unwrap();
        }
        let mut snapshot = states.snapshot().unwrap();
        snapshot.set(2, Some(state(7.0)));
        snapshot.set(0, None);
        let resumed = ClientStates::spilling_to(dir.path(), 16);
        resumed.restore(&snapshot).unwrap();
        assert_eq!(resumed.get(0).unwrap(), None);
        assert_eq!(resumed.get(1).unwrap(), Some(state(1.0)));
        assert_eq!(resumed.get(2).unwrap(), Some(state(7.0)));
    }
}
