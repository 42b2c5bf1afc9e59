//! One federation over the processes that `mpirun` starts (the `mpi` feature).
//!
//! Every rank reads the same experiment (rank 0 resolves it and hands it to the others),
//! builds the same tree and runs the tiers that the [`Placement`] gives it: the server on
//! rank 0, which alone writes the run folder. A link between tiers on two ranks is relayed
//! over MPI: each end keeps an ordinary [`crate::network::LinkEnd`], so no tier knows which
//! transport it talks through, and messages keep the sender and simulated arrival time
//! stamped where they were sent. The results are those of the same run in one process.

mod relay;
mod wire;

use std::thread;

use mpi::Threading;
use mpi::collective::{CommunicatorCollectives, Root};
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use serde::Serialize;

pub use relay::MpiConnector;
use wire::{TIERS, Wire};

use crate::config::ExperimentConfig;
use crate::config::Placement;

/// The environment variables by which MPI launchers (Open MPI's `mpirun`, MPICH's
/// `mpiexec`, Slurm's `srun` with PMI or PMIx) tell a process it is one of several.
const LAUNCHER_VARIABLES: [&str; 4] = ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"];

/// Whether an MPI launcher started this process. A plain `fedsim run` does not start MPI.
pub fn launched() -> bool {
    LAUNCHER_VARIABLES
        .iter()
        .any(|name| std::env::var_os(name).is_some())
}

/// Why a run over MPI cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// MPI was started already, or could not start.
    #[error("MPI could not be started")]
    NotStarted,
    /// The MPI library does not let several threads call it at once.
    #[error(
        "the MPI library offers threads {0:?} support; fedsim relays messages from several threads and needs MPI_THREAD_MULTIPLE (Open MPI provides it)"
    )]
    Threading(Threading),
}

/// Makes a panic on the main thread or in a relay or the wire's receiver end every rank, after
/// the usual message: the other ranks would otherwise wait for this one's links, since the
/// process lives on. (A tier's panic is caught where the tier is joined and reported through
/// the tree, as in one process.)
fn abort_on_relay_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        let thread = std::thread::current();
        let name = thread.name().unwrap_or_default();
        if name == "main" || name.starts_with("fedsim relay") || name == RECEIVER {
            SimpleCommunicator::world().abort(101);
        }
    }));
}

/// The name of the thread that receives a process's frames.
const RECEIVER: &str = "fedsim mpi receiver";

/// This process's place in a run over MPI. It runs one tree at a time: each
/// [`Cluster::connector`] is followed by a [`Cluster::finish`].
pub struct Cluster {
    /// Ends MPI when dropped.
    _universe: Universe,
    rank: usize,
    size: usize,
}

/// The traffic that really crossed MPI in one tier, from all ranks together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RealTraffic {
    /// `server` (the server's links) or `scheduler` (the schedulers' links to their groups).
    pub tier: &'static str,
    /// Frames sent down.
    pub messages_down: u64,
    /// Their bytes, as MPI carried them.
    pub bytes_down: u64,
    /// Frames sent up.
    pub messages_up: u64,
    /// Their bytes.
    pub bytes_up: u64,
}

/// What a run over MPI records beside the run folder's usual files (`mpi.json`).
#[derive(Debug, Clone, Serialize)]
pub struct MpiRecord {
    /// Processes in the run.
    pub ranks: usize,
    /// The rank of each scheduler.
    pub schedulers: Vec<usize>,
    /// The rank of each client group.
    pub groups: Vec<usize>,
    /// Real traffic per tier, to compare with the simulated traffic in `summary.json`.
    pub traffic: Vec<RealTraffic>,
}

impl Cluster {
    /// Starts MPI in this process.
    pub fn start() -> Result<Cluster, ClusterError> {
        let (universe, threading) =
            mpi::initialize_with_threading(Threading::Multiple).ok_or(ClusterError::NotStarted)?;
        if threading != Threading::Multiple {
            return Err(ClusterError::Threading(threading));
        }
        abort_on_relay_panics();
        let world = universe.world();
        let to_usize = |n: i32| usize::try_from(n).expect("MPI ranks are not negative");
        Ok(Cluster {
            rank: to_usize(world.rank()),
            size: to_usize(world.size()),
            _universe: universe,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of processes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Rank 0 hands every rank the experiment to run: `Some(config)` on rank 0, `None` where it
    /// could not prepare one (the other ranks then end quietly; rank 0 reports why). Every
    /// rank calls this once; the others pass `None` and get rank 0's experiment.
    pub fn share(&self, config: Option<&ExperimentConfig>) -> Option<ExperimentConfig> {
        let world = SimpleCommunicator::world();
        let root = world.process_at_rank(0);
        let mut text = config
            .map(|c| serde_json::to_vec(c).expect("a config always serialises"))
            .unwrap_or_default();
        let mut length = [text.len() as u64];
        root.broadcast_into(&mut length[..]);
        if length[0] == 0 {
            return None;
        }
        text.resize(
            usize::try_from(length[0]).expect("a config fits in memory"),
            0,
        );
        root.broadcast_into(&mut text[..]);
        // Rank 0 checked the config (and filled in its defaults) before it sent it.
        Some(serde_json::from_slice(&text).expect("rank 0 sends a config it wrote itself"))
    }

    /// The connector for this rank's part of a tree, with its wire's receiving thread
    /// started.
    pub fn connector(&self, placement: Placement) -> MpiConnector {
        let wire = Wire::new();
        let receiving = wire.clone();
        let receiver = thread::Builder::new()
            .name(RECEIVER.to_string())
            .spawn(move || receiving.receive())
            .expect("the operating system refused to start a thread");
        MpiConnector::new(self.rank, placement, (wire, receiver))
    }

    /// Waits for every relay of `connector` to end, then gathers the real traffic of all
    /// ranks on rank 0 (`Some` there, `None` elsewhere). Every rank calls this after its
    /// part of the tree has ended, before the next tree, once the tree has been made (see
    /// [`MpiConnector::made_tree`]).
    pub fn finish(&self, connector: MpiConnector) -> Option<MpiRecord> {
        let placement = connector.placement().clone();
        let counts = connector.join();
        let world = SimpleCommunicator::world();
        let root = world.process_at_rank(0);
        let mut all = vec![0u64; counts.len() * self.size];
        if self.rank == 0 {
            root.gather_into_root(&counts[..], &mut all[..]);
        } else {
            root.gather_into(&counts[..]);
        }
        // No rank starts another tree, whose links reuse these numbers, before all are done.
        world.barrier();
        if self.rank != 0 {
            return None;
        }
        let total = |i: usize| all.iter().skip(i).step_by(counts.len()).sum::<u64>();
        let traffic = TIERS
            .into_iter()
            .enumerate()
            .map(|(t, tier)| RealTraffic {
                tier,
                messages_down: total(4 * t),
                bytes_down: total(4 * t + 1),
                messages_up: total(4 * t + 2),
                bytes_up: total(4 * t + 3),
            })
            .filter(|t| t.tier == TIERS[0] || !placement.schedulers.is_empty())
            .collect();
        Some(MpiRecord {
            ranks: self.size,
            schedulers: placement.schedulers,
            groups: placement.groups,
            traffic,
        })
    }

    /// Ends every rank of the run at once with `code`, for a failure the tree cannot report.
    pub fn abort(&self, code: i32) -> ! {
        SimpleCommunicator::world().abort(code)
    }
}
