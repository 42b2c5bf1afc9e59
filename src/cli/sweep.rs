//! `fedsim sweep` and `fedsim report`: many runs played, and their comparison written.

use std::path::{Path, PathBuf};

use super::{Cli, Failure, ReportArgs, SweepArgs};
use crate::error::Error;
use crate::output::say;
use crate::registry::Registry;
use crate::report::ReportOptions;
use crate::stop::StopSignal;
use crate::sweep::{FolderState, Sweep};

/// Runs (or, with `--dry-run`, lists) a sweep.
pub(super) fn sweep(
    args: &SweepArgs,
    registry: &Registry,
    stop: &StopSignal,
) -> Result<(), Failure> {
    let mut sweep =
        Sweep::load(&args.sweep, &args.overrides, registry).map_err(|e| (e.into(), None))?;
    let all_runs = sweep.runs.len();
    if let Some(shard) = args.shard {
        sweep = sweep.shard(shard);
    }
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs").join(&sweep.name));
    // A folder the sweep cannot use is refused before the sweep announces anything.
    let states = sweep.states(&dir).map_err(|e| (e, None))?;
    if args.dry_run {
        for (run, state) in sweep.runs.iter().zip(&states) {
            let state = match state {
                FolderState::New => "new".to_string(),
                FolderState::Partial => "resumes".to_string(),
                FolderState::Finished => "finished".to_string(),
                FolderState::Held(holder) => format!("finished, as {holder}"),
            };
            say(format_args!(
                "{} ({state}): {}",
                dir.join(&run.name).display(),
                run.overrides.join(" ")
            ));
        }
        return Ok(());
    }
    let slice = args
        .shard
        .map(|shard| format!(" (slice {shard} of {all_runs})"))
        .unwrap_or_default();
    say(format_args!(
        "{}: {} runs{slice}, {} at a time; results in {}",
        sweep.name,
        sweep.runs.len(),
        args.jobs,
        dir.display()
    ));
    let in_sweep_order = sweep.run_folders(&dir, &states);
    let outcome = sweep
        .run(
            &dir,
            states,
            usize::from(args.jobs),
            args.quiet,
            registry,
            stop,
        )
        .map_err(|e| (e, None))?;
    say(format_args!(
        "{} runs played, {} finished before, {} failed",
        outcome.completed,
        outcome.skipped,
        outcome.failed.len()
    ));
    if outcome.stopped {
        eprintln!(
            "stopped; {} keeps the finished runs and the stopped ones' checkpoints. Continue with:\n  fedsim sweep {}{}{}",
            dir.display(),
            args.sweep.display(),
            args.out
                .as_ref()
                .map(|out| format!(" --out {}", out.display()))
                .unwrap_or_default(),
            args.shard
                .map(|shard| format!(" --shard {shard}"))
                .unwrap_or_default()
        );
        return Err((Error::Stopped { round: 0 }, None));
    }
    let first_failure = outcome.failed.into_iter().next();
    if args.shard.is_some() {
        if let Some((name, error)) = first_failure {
            return Err((error, Some(dir.join(name))));
        }
        // The other slices may still be running: the report waits for all of them.
        let target = sweep
            .target_accuracy
            .map(|t| format!(" --target {t}"))
            .unwrap_or_default();
        say(format_args!(
            "when every slice has finished: fedsim report {}{target}",
            dir.display()
        ));
        return Ok(());
    }
    let options = ReportOptions {
        target: sweep.target_accuracy,
    };
    let report = write_report(&in_sweep_order, &dir, options, registry);
    // A report of the finished runs is written even when some failed; the sweep still fails.
    match (first_failure, report) {
        (None, report) => report,
        (Some((name, error)), report) => {
            if let Err((report_error, _)) = report {
                eprintln!("no report: {report_error}");
            }
            Err((error, Some(dir.join(name))))
        }
    }
}

/// Writes the report of the runs in `dirs` to `out`, and says where it is.
fn write_report(
    dirs: &[PathBuf],
    out: &Path,
    options: ReportOptions,
    registry: &Registry,
) -> Result<(), Failure> {
    let written =
        crate::report::write_report(dirs, out, options, registry).map_err(|e| (e.into(), None))?;
    for line in &written.left_out {
        say(format_args!("left out: {line}"));
    }
    for run in &written.failed {
        say(format_args!("failed: {run}"));
    }
    say(format_args!(
        "report of {} runs in {} configurations: {}",
        written.runs,
        written.rows.len(),
        out.join("report.html").display()
    ));
    Ok(())
}

/// `fedsim report`: the report folder is `--out`, or the one folder given.
pub(super) fn report_runs(args: &ReportArgs, registry: &Registry) -> Result<(), Failure> {
    let out = match (&args.out, &args.dirs[..]) {
        (Some(out), _) => out.clone(),
        (None, [dir]) => dir.clone(),
        (None, _) => {
            use clap::CommandFactory;
            Cli::command()
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "several folders need --out DIR for the report",
                )
                .exit()
        }
    };
    let options = ReportOptions {
        target: args.target,
    };
    write_report(&args.dirs, &out, options, registry)
}
