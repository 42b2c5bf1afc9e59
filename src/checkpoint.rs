//! Checkpoints: everything about a run that changes between rounds, so that a killed run can
//! continue and give the same bytes as if it had never stopped.
//!
//! Every random draw derives from (seed, purpose, round, client), and local training starts
//! afresh from the downlinked model each round, so what changes between rounds is small: the
//! global model, the simulated clock, the number of the last finished round, and what the
//! algorithm remembers (its server state, its selector's state, each client's state, what the
//! server has seen of each client). The
//! checkpoint also holds the resolved config it belongs to and a digest of the partition, so
//! that a run is never continued with other settings or data.
//!
//! The file format is versioned and made of named sections, so that later state adds
//! sections, not a new format (`strategy_state`, `client_states`, `client_state_spill`,
//! `selector_state` and `client_history` came that way; a file without them holds none):
//!
//! ```text
//! magic    b"FEDSIMCK"
//! version  u32, little-endian (1)
//! count    u32: number of sections
//! section  name length u16, name (UTF-8), data length u64, data   (count times)
//! digest   SHA-256 of every byte above
//! ```
//!
//! Readers look sections up by name and ignore the ones they do not know.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::history::ClientHistory;
use crate::network::{ClientId, Tensors};
use crate::states::{SpillIndex, StatesSnapshot};

/// A client in flight, as a checkpoint keeps it: resuming sends it the same model at the same
/// simulated time, and its answer arrives as it would have.
#[derive(Debug, Clone, PartialEq)]
pub struct InFlightState {
    /// The dispatch's number, from 1.
    pub dispatch: u32,
    /// The client.
    pub client: ClientId,
    /// Server steps taken when it was dispatched (`τ`).
    pub version: u32,
    /// Simulated time it was dispatched.
    pub sent_at: f64,
    /// The global model it was sent.
    pub model: Arc<[f32]>,
    /// Its state when it was dispatched, if it keeps one.
    pub state: Option<Tensors>,
}

/// The checkpoint's file name in a run folder.
pub const CHECKPOINT: &str = "checkpoint.fedsim";

const MAGIC: &[u8; 8] = b"FEDSIMCK";

/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

const DIGEST_BYTES: usize = 32;

/// Why bytes are not a checkpoint this build can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CheckpointError(String);

/// A checkpoint's sections, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sections(BTreeMap<String, Vec<u8>>);

impl Sections {
    /// Adds or replaces the section `name`.
    pub fn insert(&mut self, name: &str, data: Vec<u8>) {
        self.0.insert(name.to_string(), data);
    }

    /// The section `name`, if present.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.0.get(name).map(Vec::as_slice)
    }

    /// The section `name`, or an error saying it is missing.
    pub fn require(&self, name: &str) -> Result<&[u8], CheckpointError> {
        self.get(name)
            .ok_or_else(|| CheckpointError(format!("the section {name:?} is missing")))
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let count = u32::try_from(self.0.len()).expect("fewer than 2^32 sections");
        out.extend_from_slice(&count.to_le_bytes());
        for (name, data) in &self.0 {
            let name_len = u16::try_from(name.len()).expect("section names are short");
            out.extend_from_slice(&name_len.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(data.len() as u64).to_le_bytes());
            out.extend_from_slice(data);
        }
        let digest = Sha256::digest(&out);
        out.extend_from_slice(&digest);
        out
    }

    /// Reads a file's bytes, checking the magic number, the version and the digest.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let error = |message: &str| CheckpointError(message.to_string());
        if bytes.len() < MAGIC.len() + 8 + DIGEST_BYTES || !bytes.starts_with(MAGIC) {
            return Err(error(
                "not a fedsim checkpoint (wrong magic number or too short)",
            ));
        }
        let (body, digest) = bytes.split_at(bytes.len() - DIGEST_BYTES);
        let mut reader = Reader {
            rest: &body[MAGIC.len()..],
        };
        let version = reader.u32()?;
        if version != VERSION {
            return Err(CheckpointError(format!(
                "checkpoint format version {version}; this fedsim reads version {VERSION}"
            )));
        }
        if Sha256::digest(body).as_slice() != digest {
            return Err(error(
                "the checkpoint is damaged: its SHA-256 digest does not match its contents",
            ));
        }
        let count = reader.u32()?;
        let mut sections = Sections::default();
        for _ in 0..count {
            let name_len = usize::from(reader.u16()?);
            let name = std::str::from_utf8(reader.take(name_len)?)
                .map_err(|_| error("a section name is not UTF-8"))?
                .to_string();
            let len = usize::try_from(reader.u64()?).map_err(|_| error("a section is too long"))?;
            let data = reader.take(len)?.to_vec();
            if sections.0.insert(name.clone(), data).is_some() {
                return Err(CheckpointError(format!(
                    "the section {name:?} appears twice"
                )));
            }
        }
        if !reader.rest.is_empty() {
            return Err(error("bytes after the last section"));
        }
        Ok(sections)
    }
}

/// Reads little-endian fields off the front of a byte slice.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], CheckpointError> {
        if len > self.rest.len() {
            return Err(CheckpointError(format!(
                "truncated: a field of {len} bytes, {} left",
                self.rest.len()
            )));
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CheckpointError> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    fn u16(&mut self) -> Result<u16, CheckpointError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, CheckpointError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, CheckpointError> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Where a run stands after a round: what a resumed run starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    /// The resolved experiment config, as written to the run folder's `config.json`.
    pub config: serde_json::Value,
    /// SHA-256 of the partition (its `partition.json` text), in hex.
    pub partition_sha256: String,
    /// The last finished round (0 before the first).
    pub round: u32,
    /// The simulated clock at the end of that round.
    pub sim_time_s: f64,
    /// The global model after that round.
    pub model: Vec<f32>,
    /// The strategy's server state after that round.
    pub strategy_state: Tensors,
    /// The selector's state after that round.
    pub selector_state: Tensors,
    /// What the server had seen of each client after that round.
    pub client_history: ClientHistory,
    /// The state of every client that has one: in memory whole, spilled by its place in the
    /// run folder's spill file (`client_state_spill`: the file's generation and length, then
    /// per client its id, offset and length, each u64).
    pub client_states: StatesSnapshot,
    /// In an asynchronous federation, the dispatches so far and the clients in flight after
    /// that step.
    pub in_flight: Option<(u32, Vec<InFlightState>)>,
}

/// The `progress` section.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Progress {
    round: u32,
    /// The clock's bits, so that it comes back exactly.
    sim_time_bits: u64,
    partition_sha256: String,
}

impl RunState {
    /// The checkpoint file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let progress = Progress {
            round: self.round,
            sim_time_bits: self.sim_time_s.to_bits(),
            partition_sha256: self.partition_sha256.clone(),
        };
        let mut sections = Sections::default();
        sections.insert("config", json(&self.config));
        sections.insert("progress", json(&progress));
        let model = self.model.iter().flat_map(|v| v.to_le_bytes()).collect();
        sections.insert("global_model", model);
        sections.insert("strategy_state", self.strategy_state.to_bytes());
        sections.insert("selector_state", self.selector_state.to_bytes());
        sections.insert("client_history", self.client_history.to_bytes());
        let mut clients = Vec::new();
        for (client, state) in &self.client_states.in_memory {
            let bytes = state.to_bytes();
            clients.extend_from_slice(&(*client as u64).to_le_bytes());
            clients.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            clients.extend_from_slice(&bytes);
        }
        sections.insert("client_states", clients);
        if let Some(spilled) = &self.client_states.spilled {
            sections.insert("client_state_spill", spill_index_bytes(spilled));
        }
        if let Some((dispatches, flights)) = &self.in_flight {
            sections.insert("in_flight", in_flight_bytes(*dispatches, flights));
        }
        sections.to_bytes()
    }

    /// Reads a checkpoint file's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let sections = Sections::from_bytes(bytes)?;
        let config = serde_json::from_slice(sections.require("config")?)
            .map_err(|e| CheckpointError(format!("the config section is not JSON: {e}")))?;
        let progress: Progress = serde_json::from_slice(sections.require("progress")?)
            .map_err(|e| CheckpointError(format!("the progress section is malformed: {e}")))?;
        let model = sections.require("global_model")?;
        if model.len() % 4 != 0 {
            return Err(CheckpointError(format!(
                "the global model section holds {} bytes, not a whole number of f32 values",
                model.len()
            )));
        }
        let strategy_state =
            Tensors::from_bytes(sections.get("strategy_state").unwrap_or_default())
                .ok_or_else(|| CheckpointError("the strategy_state section is malformed".into()))?;
        let selector_state =
            Tensors::from_bytes(sections.get("selector_state").unwrap_or_default())
                .ok_or_else(|| CheckpointError("the selector_state section is malformed".into()))?;
        let client_history =
            ClientHistory::from_bytes(sections.get("client_history").unwrap_or_default())
                .ok_or_else(|| CheckpointError("the client_history section is malformed".into()))?;
        let client_states = StatesSnapshot {
            in_memory: client_states(sections.get("client_states").unwrap_or_default())?,
            spilled: sections
                .get("client_state_spill")
                .map(spill_index)
                .transpose()?,
        };
        let in_flight = sections.get("in_flight").map(in_flight).transpose()?;
        Ok(RunState {
            config,
            partition_sha256: progress.partition_sha256,
            round: progress.round,
            sim_time_s: f64::from_bits(progress.sim_time_bits),
            model: model
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            strategy_state,
            selector_state,
            client_history,
            client_states,
            in_flight,
        })
    }
}

/// The `in_flight` section: the dispatch count (u32) and the number of clients in flight
/// (u32), then per client its dispatch (u32), id (u64), version (u32), dispatch time (the
/// f64's bits, u64), the model it was sent (u64 count, then the f32 values, little-endian), and
/// its state (u64 length, 0 for none, then the tensors). A model shared by several clients is
/// written once per client: at most `concurrency` copies.
fn in_flight_bytes(dispatches: u32, flights: &[InFlightState]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&dispatches.to_le_bytes());
    let count = u32::try_from(flights.len()).expect("fewer than 2^32 clients in flight");
    out.extend_from_slice(&count.to_le_bytes());
    for flight in flights {
        out.extend_from_slice(&flight.dispatch.to_le_bytes());
        out.extend_from_slice(&(flight.client as u64).to_le_bytes());
        out.extend_from_slice(&flight.version.to_le_bytes());
        out.extend_from_slice(&flight.sent_at.to_bits().to_le_bytes());
        out.extend_from_slice(&(flight.model.len() as u64).to_le_bytes());
        out.extend(flight.model.iter().flat_map(|v| v.to_le_bytes()));
        let state = flight
            .state
            .as_ref()
            .map(Tensors::to_bytes)
            .unwrap_or_default();
        out.extend_from_slice(&(state.len() as u64).to_le_bytes());
        out.extend_from_slice(&state);
    }
    out
}

/// Reads what [`in_flight_bytes`] wrote.
fn in_flight(bytes: &[u8]) -> Result<(u32, Vec<InFlightState>), CheckpointError> {
    let malformed = || CheckpointError("the in_flight section is malformed".into());
    let mut reader = Reader { rest: bytes };
    let dispatches = reader.u32()?;
    let count = reader.u32()?;
    let mut flights = Vec::new();
    for _ in 0..count {
        let dispatch = reader.u32()?;
        let client = usize::try_from(reader.u64()?).map_err(|_| malformed())?;
        let version = reader.u32()?;
        let sent_at = f64::from_bits(reader.u64()?);
        let values = usize::try_from(reader.u64()?).map_err(|_| malformed())?;
        let model: Vec<f32> = reader
            .take(values.checked_mul(4).ok_or_else(malformed)?)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let state_len = usize::try_from(reader.u64()?).map_err(|_| malformed())?;
        let state = match state_len {
            0 => None,
            len => Some(Tensors::from_bytes(reader.take(len)?).ok_or_else(malformed)?),
        };
        flights.push(InFlightState {
            dispatch,
            client,
            version,
            sent_at,
            model: model.into(),
            state,
        });
    }
    if !reader.rest.is_empty() {
        return Err(malformed());
    }
    Ok((dispatches, flights))
}

/// Reads the `client_states` section: per client, its id (u64), the length of its state
/// (u64) and the state's tensors.
fn client_states(bytes: &[u8]) -> Result<Vec<(ClientId, Tensors)>, CheckpointError> {
    let malformed = || CheckpointError("the client_states section is malformed".into());
    let mut reader = Reader { rest: bytes };
    let mut states = Vec::new();
    while !reader.rest.is_empty() {
        let client = usize::try_from(reader.u64()?).map_err(|_| malformed())?;
        let len = usize::try_from(reader.u64()?).map_err(|_| malformed())?;
        let state = Tensors::from_bytes(reader.take(len)?).ok_or_else(malformed)?;
        states.push((client, state));
    }
    Ok(states)
}

fn spill_index_bytes(index: &SpillIndex) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + 24 * index.records.len());
    out.extend_from_slice(&index.generation.to_le_bytes());
    out.extend_from_slice(&index.length.to_le_bytes());
    for &(client, offset, len) in &index.records {
        out.extend_from_slice(&(client as u64).to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    out
}

fn spill_index(bytes: &[u8]) -> Result<SpillIndex, CheckpointError> {
    let malformed = || CheckpointError("the client_state_spill section is malformed".into());
    let mut reader = Reader { rest: bytes };
    let generation = reader.u32()?;
    let length = reader.u64()?;
    let mut records = Vec::new();
    while !reader.rest.is_empty() {
        let client = usize::try_from(reader.u64()?).map_err(|_| malformed())?;
        records.push((client, reader.u64()?, reader.u64()?));
    }
    Ok(SpillIndex {
        generation,
        length,
        records,
    })
}

fn json(value: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(value).expect("checkpoint sections always serialise")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Seen;

    fn state() -> RunState {
        RunState {
            config: serde_json::json!({"name": "x", "seed": 3}),
            partition_sha256: "ab".repeat(32),
            round: 7,
            sim_time_s: 0.1 + 0.2,
            model: vec![1.5, -0.0, f32::MIN_POSITIVE, 3.25],
            strategy_state: Tensors::new().with("m", vec![0.5]).with("v", vec![2.0]),
            selector_state: Tensors::new().with("pacer", vec![4.0]),
            client_history: {
                let mut history = ClientHistory::new();
                history.record(5, Seen::reported(6, 0.25, Some(1.5), None));
                history
            },
            client_states: StatesSnapshot {
                in_memory: vec![(4, Tensors::new().with("control", vec![-1.0, 7.0]))],
                spilled: Some(SpillIndex {
                    generation: 2,
                    length: 4096,
                    records: vec![(1, 0, 96), (6, 2048, 96)],
                }),
            },
            in_flight: Some((
                9,
                vec![InFlightState {
                    dispatch: 8,
                    client: 2,
                    version: 6,
                    sent_at: 0.1 + 0.7,
                    model: vec![0.5, -2.0].into(),
                    state: Some(Tensors::new().with("h", vec![1.0])),
                }],
            )),
        }
    }

    #[test]
    fn a_state_comes_back_bit_for_bit() {
        let back = RunState::from_bytes(&state().to_bytes()).unwrap();
        assert_eq!(back, state());
        assert_eq!(back.sim_time_s.to_bits(), (0.1f64 + 0.2).to_bits());
    }

    #[test]
    fn unknown_sections_are_ignored_so_that_later_state_needs_no_new_format() {
        let mut sections = Sections::from_bytes(&state().to_bytes()).unwrap();
        sections.insert("later_state", vec![1, 2, 3]);
        assert_eq!(RunState::from_bytes(&sections.to_bytes()).unwrap(), state());
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let bytes = state().to_bytes();
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x01;
            assert!(RunState::from_bytes(&damaged).is_err(), "byte {i}");
        }
    }

    #[test]
    fn truncation_and_other_versions_are_reported() {
        let bytes = state().to_bytes();
        let error = RunState::from_bytes(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(error.to_string().contains("digest"), "{error}");
        let mut other = bytes.clone();
        other[8..12].copy_from_slice(&2u32.to_le_bytes());
        let error = RunState::from_bytes(&other).unwrap_err();
        assert!(error.to_string().contains("version 2"), "{error}");
        assert!(RunState::from_bytes(b"FEDSIM").is_err());
    }
}
