//! `fedsim run` as one rank of a run over MPI (the command line's part; the cluster's is
//! [`crate::cluster`]). Rank 0 opens the run as a plain `fedsim run` would, hands the
//! experiment to the other ranks and plays the rounds; the others run their tiers until
//! rank 0 ends the tree. Every rank then meets rank 0 once more to total the real traffic.

use super::run::{Job, report, say_traffic};
use super::{Failure, RunArgs, exit_code};
use crate::cluster::{Cluster, MpiConnector, MpiRecord};
use crate::error::Error;
use crate::experiment::Experiment;
use crate::output::say;
use crate::registry::Registry;
use crate::stop::StopSignal;
use crate::topology::Spread;

/// Plays this rank's part of the run `args` ask for, with the components of `registry`.
pub(super) fn run(args: &RunArgs, registry: &Registry, stop: &StopSignal) -> Result<(), Failure> {
    let cluster = Cluster::start().map_err(|e| (e.into(), None))?;
    if cluster.rank() != 0 {
        serve(cluster, registry, stop);
        return Ok(());
    }
    let (job, placement) = match Job::open(args, registry, cluster.size()) {
        Ok(Some(opened)) => opened,
        other => {
            // The other ranks end quietly; this one says why (or that nothing is left to do).
            cluster.share(None);
            return other.map(|_| ());
        }
    };
    cluster.share(Some(job.experiment().config()));
    for rank in 0..cluster.size() {
        say(format_args!(
            "rank {rank} runs {}",
            placement.hosted_by(rank)
        ));
    }
    let dir = job.dir().to_path_buf();
    let mut connector = cluster.connector(placement.clone());
    let spread = Spread {
        placement,
        connector: &mut connector,
    };
    let result = job.play(spread, args.quiet, stop);
    let failure = result.as_ref().err().map(|(error, _)| error);
    let record = finish(&cluster, connector, failure).expect("rank 0 gathers the record");
    let written = crate::output::atomic::write_atomically(
        &dir.join("mpi.json"),
        serde_json::to_string_pretty(&record)
            .expect("the record serialises")
            .as_bytes(),
    );
    if let Some(result) = result? {
        report(&result);
        report_real_traffic(&record);
    }
    written.map_err(|e| (e.into(), Some(dir)))
}

/// Runs the tiers of a rank other than 0. Their failures reach rank 0 through the tree (a
/// client's error, a tier that ended), which reports them and sets the exit code; this rank
/// adds what only it knows, on stderr.
fn serve(cluster: Cluster, registry: &Registry, stop: &StopSignal) {
    let rank = cluster.rank();
    let Some(config) = cluster.share(None) else {
        return;
    };
    let prepared = Experiment::prepare(config, registry).and_then(|experiment| {
        let placement = experiment.placement(cluster.size())?;
        Ok((experiment, placement))
    });
    let (experiment, placement) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            // Rank 0 is about to wait for this rank's tiers: end every rank now.
            eprintln!("error on rank {rank}: {error}");
            cluster.abort(exit_code(&error).into());
        }
    };
    let mut connector = cluster.connector(placement.clone());
    let spread = Spread {
        placement,
        connector: &mut connector,
    };
    let served = experiment.serve(spread, stop);
    finish(&cluster, connector, served.as_ref().err());
    if let Err(error) = served {
        eprintln!("rank {rank}: {error}");
    }
}

/// Ends this rank's part of the tree: see [`Cluster::finish`]. A rank that failed before it
/// made its part would leave the others waiting for its links: it says why (`failure`) and
/// ends every rank.
fn finish(
    cluster: &Cluster,
    connector: MpiConnector,
    failure: Option<&Error>,
) -> Option<MpiRecord> {
    if !connector.made_tree() {
        match failure {
            Some(error) => eprintln!("error on rank {}: {error}", cluster.rank()),
            None => eprintln!(
                "error on rank {}: its part of the tree never started",
                cluster.rank()
            ),
        }
        cluster.abort(failure.map_or(1, exit_code).into());
    }
    cluster.finish(connector)
}

/// Prints the traffic that really crossed MPI, beside the simulated traffic `report` printed.
fn report_real_traffic(record: &MpiRecord) {
    for tier in &record.traffic {
        say_traffic(
            &format!("{} tier over MPI", tier.tier),
            "frames",
            (tier.bytes_down, tier.messages_down),
            (tier.bytes_up, tier.messages_up),
        );
    }
}
