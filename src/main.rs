//! The `fedsim` command line: parses arguments, calls the library, prints.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use fedsim::backend::BackendKind;
use fedsim::report::{Progress, RunFolder, say};
use fedsim::{Error, Experiment, ExperimentConfig};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Federated-learning simulation: a whole federation (server, client groups) on one machine.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an experiment and write its results to a run folder.
    Run {
        #[command(flatten)]
        experiment: ExperimentArgs,
        /// Run folder to create [default: runs/<name>-<timestamp>].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Backend that trains; overrides the file's `backend`.
        #[arg(long, value_enum)]
        backend: Option<BackendKind>,
        /// Print one plain line per round instead of a progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Print each client's label counts under the experiment's partition, without training.
    Partition {
        #[command(flatten)]
        experiment: ExperimentArgs,
    },
}

#[derive(Args)]
struct ExperimentArgs {
    /// Experiment file (JSON); see experiments/ and the README for the format.
    experiment: PathBuf,
    /// Override a field of the file, e.g. --set federation.rounds=5 --set client.lr=0.1
    /// (value read as JSON, or as a string if it is not JSON). Repeatable.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    overrides: Vec<String>,
}

impl ExperimentArgs {
    fn load(&self, backend: Option<BackendKind>) -> Result<ExperimentConfig, Error> {
        let mut overrides = self.overrides.clone();
        if let Some(backend) = backend {
            overrides.push(format!("backend={}", backend.name()));
        }
        Ok(ExperimentConfig::load(&self.experiment, &overrides)?)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Run {
            experiment,
            out,
            backend,
            quiet,
        } => run(&experiment, out, backend, quiet),
        Command::Partition { experiment } => partition(&experiment),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(if error.is_bad_input() { 2 } else { 1 })
        }
    }
}

fn run(
    args: &ExperimentArgs,
    out: Option<PathBuf>,
    backend: Option<BackendKind>,
    quiet: bool,
) -> Result<(), Error> {
    let config = args.load(backend)?;
    let experiment = Experiment::prepare(config)?;
    let config = experiment.config();
    let dir = out.unwrap_or_else(|| RunFolder::default_dir(&config.name));
    let mut folder = RunFolder::create(&dir)?;
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
    let progress = Progress::for_stdout(config.federation.rounds, quiet);
    let result = experiment.run(&mut folder, &progress);
    progress.finish();
    let summary = result?.summary;
    say(format_args!(
        "done: test accuracy {:.2}% (best {:.2}%) after {} rounds in {:.1} s",
        100.0 * summary.final_accuracy,
        100.0 * summary.best_accuracy,
        summary.rounds,
        summary.wall_seconds,
    ));
    for tier in &summary.traffic {
        say(format_args!(
            "  {} tier: {:.1} MB down in {} messages, {:.1} MB up in {} messages",
            tier.tier,
            tier.bytes_down as f64 / 1e6,
            tier.messages_down,
            tier.bytes_up as f64 / 1e6,
            tier.messages_up,
        ));
    }
    if summary.sim_time_s > 0.0 || summary.dropped_clients > 0 {
        say(format_args!(
            "  simulated time {:.1} s; {} sampled clients left out",
            summary.sim_time_s, summary.dropped_clients
        ));
    }
    Ok(())
}

fn partition(args: &ExperimentArgs) -> Result<(), Error> {
    let experiment = Experiment::prepare(args.load(None)?)?;
    let counts = experiment.label_counts();
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
    Ok(())
}
