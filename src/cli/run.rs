//! `fedsim run`: a new run or a resumed one, in this process or as one rank of a run over MPI,
//! and what it prints.

use std::path::{Path, PathBuf};

use super::{Failure, RunArgs, prepare};
use crate::config::Placement;
use crate::connect::InProcess;
use crate::experiment::{Experiment, Run, RunResult};
use crate::output::{Progress, RunFolder, say};
use crate::registry::Registry;
use crate::stop::StopSignal;
use crate::topology::Spread;

/// `fedsim run` in this process (over MPI, [`super::over_mpi::run`] plays a rank's part).
pub(super) fn run_command(
    args: &RunArgs,
    registry: &Registry,
    stop: &StopSignal,
) -> Result<(), Failure> {
    let Some((job, placement)) = Job::open(args, registry, 1)? else {
        return Ok(());
    };
    let spread = Spread {
        placement,
        connector: &mut InProcess,
    };
    if let Some(result) = job.play(spread, args.quiet, stop)? {
        report(&result);
    }
    Ok(())
}

/// The run `fedsim run` plays, and its folder.
pub(super) struct Job {
    run: Run,
    dir: PathBuf,
}

impl Job {
    /// The run `args` ask for, announced, with its tiers placed on `ranks` processes; `None`
    /// when it has nothing left to do.
    pub(super) fn open(
        args: &RunArgs,
        registry: &Registry,
        ranks: usize,
    ) -> Result<Option<(Job, Placement)>, Failure> {
        match &args.resume {
            Some(dir) => Job::resume(dir, registry, ranks),
            None => Job::start(args, registry, ranks).map(Some),
        }
    }

    fn start(
        args: &RunArgs,
        registry: &Registry,
        ranks: usize,
    ) -> Result<(Job, Placement), Failure> {
        let experiment = args.experiment.as_deref().expect("clap requires it");
        let experiment =
            prepare(experiment, &args.overrides, args.backend, registry).map_err(|e| (e, None))?;
        // Placed before the folder is made: a run that cannot be placed leaves nothing behind.
        let placement = experiment.placement(ranks).map_err(|e| (e, None))?;
        let dir = args
            .out
            .clone()
            .unwrap_or_else(|| RunFolder::default_dir(&experiment.config().name));
        let run = Run::new(experiment, &dir).map_err(|e| (e, None))?;
        let config = run.experiment().config();
        let pace = match (config.asynchronous, config.federation.clients_per_round) {
            (Some(asynchronous), _) => format!("{} at a time", asynchronous.concurrency),
            (None, per_round) => format!("{} per round", per_round.unwrap_or_default()),
        };
        let steps = match config.asynchronous {
            Some(_) => "server steps",
            None => "rounds",
        };
        say(format_args!(
            "{}: {} model, {} clients ({pace}), {} {steps} on {}; results in {}",
            config.name,
            config.model.name,
            config.federation.num_clients,
            config.federation.rounds,
            config.backend.name(),
            dir.display()
        ));
        Ok((Job { run, dir }, placement))
    }

    fn resume(
        dir: &Path,
        registry: &Registry,
        ranks: usize,
    ) -> Result<Option<(Job, Placement)>, Failure> {
        let run = Run::resume(dir, registry).map_err(|e| (e, None))?;
        let placement = run.experiment().placement(ranks).map_err(|e| (e, None))?;
        let config = run.experiment().config();
        let (done, rounds) = (run.rounds_done(), config.federation.rounds);
        if run.is_finished() {
            say(format_args!(
                "nothing to do: {} finished all {rounds} rounds",
                dir.display()
            ));
            return Ok(None);
        }
        say(format_args!(
            "{}: continuing after round {done} of {rounds}; results in {}",
            config.name,
            dir.display()
        ));
        let job = Job {
            run,
            dir: dir.to_path_buf(),
        };
        Ok(Some((job, placement)))
    }

    pub(super) fn experiment(&self) -> &Experiment {
        self.run.experiment()
    }

    /// The run folder.
    #[cfg(feature = "mpi")]
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Plays the rounds left with a progress bar (unless `quiet`), the tiers placed as
    /// `spread` says; the result of the last round, if the run played it.
    pub(super) fn play(
        self,
        spread: Spread<'_>,
        quiet: bool,
        stop: &StopSignal,
    ) -> Result<Option<RunResult>, Failure> {
        let rounds = self.experiment().config().federation.rounds;
        let progress = Progress::for_stdout(rounds, self.run.rounds_done(), quiet);
        let result = self.run.play(&progress, stop, Some(spread));
        progress.finish();
        result.map_err(|e| (e, Some(self.dir)))
    }
}

/// Prints a finished run's outcome.
pub(super) fn report(result: &RunResult) {
    let summary = &result.summary;
    say(format_args!(
        "done: test accuracy {:.2}% (best {:.2}%) after {} rounds in {:.1} s{}",
        100.0 * summary.final_accuracy,
        100.0 * summary.best_accuracy,
        summary.rounds,
        summary.wall_seconds,
        summary
            .peak_resident_bytes
            .map(|b| format!(", peak memory {:.0} MB", b as f64 / 1e6))
            .unwrap_or_default(),
    ));
    for tier in &summary.traffic {
        say_traffic(
            &format!("{} tier", tier.tier),
            "messages",
            (tier.bytes_down, tier.messages_down),
            (tier.bytes_up, tier.messages_up),
        );
    }
    if summary.sim_time_s > 0.0 || summary.dropped_clients > 0 {
        say(format_args!(
            "  simulated time {:.1} s; {} sampled clients left out",
            summary.sim_time_s, summary.dropped_clients
        ));
    }
    if !summary.aborted_rounds.is_empty() {
        say(format_args!(
            "  {} rounds ended without a new model: fewer clients than secure aggregation's \
             threshold sent their inputs (rounds {:?})",
            summary.aborted_rounds.len(),
            summary.aborted_rounds
        ));
    }
}

/// Prints one tier's traffic, `(bytes, count)` down and up, under `label`; `unit` names what
/// was counted.
pub(super) fn say_traffic(label: &str, unit: &str, down: (u64, u64), up: (u64, u64)) {
    say(format_args!(
        "  {label}: {:.1} MB down in {} {unit}, {:.1} MB up in {} {unit}",
        down.0 as f64 / 1e6,
        down.1,
        up.0 as f64 / 1e6,
        up.1,
    ));
}
