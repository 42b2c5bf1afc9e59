//! The `fedsim` command line: parses arguments, calls the library, prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use clap::Parser;
use fedsim::backend::BackendKind;
use fedsim::cli::{
    Cli, Command, DataCommand, ExperimentArgs, FetchArgs, ReportArgs, RunArgs, SweepArgs,
};
use fedsim::compare::ReportOptions;
use fedsim::config::Placement;
use fedsim::report::{Progress, RunFolder, say};
use fedsim::stop::StopSignal;
use fedsim::topology::{InProcess, Spread};
use fedsim::{Error, Experiment, ExperimentConfig, Resumable, RunResult};

#[cfg(feature = "mpi")]
mod over_mpi;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Reads an experiment file with its overrides, and the `--backend` flag as one more.
fn load(
    experiment: &Path,
    overrides: &[String],
    backend: Option<BackendKind>,
) -> Result<ExperimentConfig, Error> {
    let mut overrides = overrides.to_vec();
    if let Some(backend) = backend {
        overrides.push(format!("backend={}", backend.name()));
    }
    Ok(ExperimentConfig::load(experiment, &overrides)?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stop = StopSignal::new();
    let mut signal = None;
    let outcome = match cli.command {
        Command::Run(args) => {
            // Only a run has work worth stopping cleanly; other commands end as signals say.
            signal = Some(watch_signals(&stop));
            run_command(&args, &stop)
        }
        Command::Partition { experiment, plot } => partition(&experiment, plot.as_deref()),
        Command::Report(args) => report_runs(&args),
        Command::Sweep(args) => {
            signal = Some(watch_signals(&stop));
            sweep(&args, &stop)
        }
        Command::Strategies => {
            print!("{}", strategies());
            Ok(())
        }
        Command::Data(DataCommand::Fetch(args)) => fetch(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err((Error::Stopped { round }, dir)) => {
            if let Some(dir) = dir {
                eprintln!(
                    "stopped after round {round}; the run folder keeps what it has done. Continue it with:\n  fedsim run --resume {}",
                    dir.display()
                );
            }
            // As shells report a process ended by a signal: 128 + its number.
            let received = signal.map_or(0, |s| s.load(Ordering::SeqCst));
            let code = 128 + received;
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        Err((error, _)) => {
            eprintln!("error: {error}");
            ExitCode::from(exit_code(&error))
        }
    }
}

/// The exit code of a command that failed with `error`: 2 for bad input, 1 for the rest.
fn exit_code(error: &Error) -> u8 {
    if error.is_bad_input() { 2 } else { 1 }
}

/// Downloads, checks and unpacks a data set, and says how an experiment names it.
fn fetch(args: &FetchArgs) -> Result<(), Failure> {
    use fedsim::data::fetch::{Fetch, REMOTES};
    let remote = REMOTES
        .iter()
        .find(|r| r.name == args.name)
        .expect("clap accepts only known names");
    let mut fetch = Fetch::new(remote);
    if let Some(url) = &args.url {
        fetch.url = url.clone();
    }
    fetch.progress = !args.quiet;
    let folder = fetch.run(&args.dir).map_err(|e| (e.into(), None))?;
    say(format_args!(
        "{} is in {}; an experiment reads it with\n  \"data\": {{\"dataset\": \"{}\", \"dir\": {:?}}}",
        remote.name,
        folder.display(),
        remote.name,
        folder.display().to_string()
    ));
    Ok(())
}

/// Runs (or, with `--dry-run`, lists) a sweep.
fn sweep(args: &SweepArgs, stop: &StopSignal) -> Result<(), Failure> {
    use fedsim::sweep::{FolderState, Sweep};
    let mut sweep = Sweep::load(&args.sweep).map_err(|e| (e.into(), None))?;
    let all_runs = sweep.runs.len();
    if let Some(shard) = args.shard {
        sweep = sweep.shard(shard);
    }
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs").join(&sweep.name));
    if args.dry_run {
        let states = sweep.states(&dir).map_err(|e| (e, None))?;
        for (run, state) in sweep.runs.iter().zip(states) {
            let state = match state {
                FolderState::New => "new",
                FolderState::Partial => "resumes",
                FolderState::Finished => "finished",
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
    let outcome = sweep
        .run(&dir, usize::from(args.jobs), args.quiet, stop)
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
    let in_sweep_order: Vec<PathBuf> = sweep.runs.iter().map(|run| dir.join(&run.name)).collect();
    let report = write_report(&in_sweep_order, &dir, options);
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
fn write_report(dirs: &[PathBuf], out: &Path, options: ReportOptions) -> Result<(), Failure> {
    let written =
        fedsim::compare::write_report(dirs, out, options).map_err(|e| (e.into(), None))?;
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
fn report_runs(args: &ReportArgs) -> Result<(), Failure> {
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
    write_report(&args.dirs, &out, options)
}

/// The algorithms, their parameters and papers, as `fedsim strategies` prints them.
fn strategies() -> String {
    use fedsim::strategy::{EdgeAggregation, catalog};
    let mut out = String::from(
        "Set the algorithm in an experiment file's \"strategy\", e.g.\n  \"strategy\": {\"name\": \"fedadam\", \"server_lr\": 0.01}\nEvery parameter may be left out for its default.\n",
    );
    for strategy in catalog() {
        out += &format!("\n{}\n  paper: {}\n", strategy.name, strategy.paper);
        for (name, default, meaning) in &strategy.params {
            out += &format!("  {name} = {default}: {meaning}\n");
        }
        out += match strategy.edge {
            EdgeAggregation::Mean {
                several_edge_rounds: true,
                ..
            } => "  aggregating schedulers: yes\n".to_string(),
            EdgeAggregation::Mean { .. } => {
                "  aggregating schedulers: yes, with 1 edge round\n".to_string()
            }
            EdgeAggregation::Unsupported(reason) => {
                format!("  aggregating schedulers: no ({reason})\n")
            }
        }
        .as_str();
    }
    out
}

/// On Ctrl-C or SIGTERM, asks the run to stop after the work in flight and records the signal;
/// a second one ends the process at once.
#[cfg(unix)]
fn watch_signals(stop: &StopSignal) -> Arc<AtomicI32> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let received = Arc::new(AtomicI32::new(0));
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .expect("signal handlers can be installed");
    let (stop, first) = (stop.clone(), received.clone());
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if first.swap(signal, Ordering::SeqCst) != 0 {
                std::process::exit(128 + signal);
            }
            eprintln!(
                "\nstopping after the work in flight (press Ctrl-C again to quit at once){}",
                launcher_note()
            );
            stop.request();
        }
    });
    received
}

/// Why a rank of a run over MPI may be asked to stop: its launcher ends every rank so.
fn launcher_note() -> &'static str {
    #[cfg(feature = "mpi")]
    if fedsim::cluster::launched() {
        return "; under mpirun, every rank is asked to stop when one of them fails or mpirun is interrupted, and mpirun names the rank";
    }
    ""
}

#[cfg(not(unix))]
fn watch_signals(_stop: &StopSignal) -> Arc<AtomicI32> {
    Arc::new(AtomicI32::new(0))
}

/// What a command failed with, and the run folder a stopped run can be continued from.
type Failure = (Error, Option<PathBuf>);

/// `fedsim run`: in this process, or, when an MPI launcher started it, as one rank of a run
/// over MPI.
fn run_command(args: &RunArgs, stop: &StopSignal) -> Result<(), Failure> {
    #[cfg(feature = "mpi")]
    if fedsim::cluster::launched() {
        return over_mpi::run(args, stop);
    }
    let Some((job, placement)) = Job::open(args, 1)? else {
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

/// A run to play: a new one in its new folder, or one to continue.
enum Job {
    New {
        experiment: Box<Experiment>,
        folder: RunFolder,
        dir: PathBuf,
    },
    Resume {
        resumable: Box<Resumable>,
        dir: PathBuf,
    },
}

impl Job {
    /// The run `args` ask for, announced, with its tiers placed on `ranks` processes; `None`
    /// when it has nothing left to do.
    fn open(args: &RunArgs, ranks: usize) -> Result<Option<(Job, Placement)>, Failure> {
        match &args.resume {
            Some(dir) => Job::resume(dir, ranks),
            None => Job::start(args, ranks).map(Some),
        }
    }

    fn start(args: &RunArgs, ranks: usize) -> Result<(Job, Placement), Failure> {
        let experiment = args.experiment.as_deref().expect("clap requires it");
        let experiment = load(experiment, &args.overrides, args.backend)
            .and_then(Experiment::prepare)
            .map_err(|e| (e, None))?;
        let placement = experiment.placement(ranks).map_err(|e| (e, None))?;
        let config = experiment.config();
        let dir = args
            .out
            .clone()
            .unwrap_or_else(|| RunFolder::default_dir(&config.name));
        let folder = RunFolder::create(&dir).map_err(|e| (e.into(), None))?;
        say(format_args!(
            "{}: {} model, {} clients ({} per round), {} rounds on {}; results in {}",
            config.name,
            config.model.name(),
            config.federation.num_clients,
            config.federation.clients_per_round,
            config.federation.rounds,
            config.backend.name(),
            dir.display()
        ));
        let job = Job::New {
            experiment: Box::new(experiment),
            folder,
            dir,
        };
        Ok((job, placement))
    }

    fn resume(dir: &Path, ranks: usize) -> Result<Option<(Job, Placement)>, Failure> {
        let resumable = Resumable::open(dir).map_err(|e| (e, None))?;
        let placement = resumable
            .experiment()
            .placement(ranks)
            .map_err(|e| (e, None))?;
        let config = resumable.experiment().config();
        let (done, rounds) = (resumable.rounds_done(), config.federation.rounds);
        if resumable.is_finished() {
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
        let job = Job::Resume {
            resumable: Box::new(resumable),
            dir: dir.to_path_buf(),
        };
        Ok(Some((job, placement)))
    }

    fn experiment(&self) -> &Experiment {
        match self {
            Job::New { experiment, .. } => experiment,
            Job::Resume { resumable, .. } => resumable.experiment(),
        }
    }

    /// The run folder.
    fn dir(&self) -> &Path {
        match self {
            Job::New { dir, .. } | Job::Resume { dir, .. } => dir,
        }
    }

    /// Plays the rounds left with a progress bar (unless `quiet`), the tiers placed as
    /// `spread` says; the result of the last round, if the run played it.
    fn play(
        self,
        spread: Spread<'_>,
        quiet: bool,
        stop: &StopSignal,
    ) -> Result<Option<RunResult>, Failure> {
        let dir = self.dir().to_path_buf();
        let rounds = self.experiment().config().federation.rounds;
        let result = match self {
            Job::New {
                experiment,
                mut folder,
                ..
            } => {
                let progress = Progress::for_stdout(rounds, 0, quiet);
                let result = experiment.run_spread(&mut folder, &progress, stop, spread);
                progress.finish();
                result.map(Some)
            }
            Job::Resume { resumable, .. } => {
                let progress = Progress::for_stdout(rounds, resumable.rounds_done(), quiet);
                let result = resumable.run_spread(&progress, stop, spread);
                progress.finish();
                result
            }
        };
        result.map_err(|e| (e, Some(dir)))
    }
}

/// Prints a finished run's outcome.
fn report(result: &RunResult) {
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
}

/// Prints one tier's traffic, `(bytes, count)` down and up, under `label`; `unit` names what
/// was counted.
fn say_traffic(label: &str, unit: &str, down: (u64, u64), up: (u64, u64)) {
    say(format_args!(
        "  {label}: {:.1} MB down in {} {unit}, {:.1} MB up in {} {unit}",
        down.0 as f64 / 1e6,
        down.1,
        up.0 as f64 / 1e6,
        up.1,
    ));
}

fn partition(args: &ExperimentArgs, plot: Option<&Path>) -> Result<(), Failure> {
    let experiment = load(&args.experiment, &args.overrides, None)
        .and_then(Experiment::prepare)
        .map_err(|e| (e, None))?;
    let stats = experiment.partition_stats();
    let counts = &stats.label_counts;
    let classes = counts.first().map_or(0, Vec::len);
    let header: String = (0..classes).map(|c| format!("{c:>6}")).collect();
    say(format_args!("client  samples{header}"));
    for (client, row) in counts.iter().enumerate() {
        let cells: String = row.iter().map(|n| format!("{n:>6}")).collect();
        say(format_args!(
            "{client:>6}  {:>7}{cells}",
            row.iter().sum::<usize>()
        ));
    }
    say(format_args!(
        "{} clients; samples per client: min {}, median {}, max {}; mean label entropy {:.3} bits (log2 {classes} = {:.3} for all classes alike)",
        stats.clients,
        stats.samples_min,
        stats.samples_median,
        stats.samples_max,
        stats.mean_label_entropy_bits,
        (classes as f64).log2()
    ));
    if let Some(path) = plot {
        let title = format!("Labels per client: {}", experiment.config().name);
        let svg = fedsim::compare::plots::label_distribution(counts, &title)
            .expect("a chart draws to memory");
        fedsim::report::run_folder::write_atomically(path, svg.as_bytes())
            .map_err(|e| (e.into(), None))?;
        say(format_args!("label chart: {}", path.display()));
    }
    Ok(())
}
