//! The `fedsim` command line as a library call: [`main`] parses the arguments, runs the
//! command with the components a [`Registry`] holds, and prints. The `fedsim` binary is
//! `cli::main(Registry::builtin())`; a user's crate that registers its own algorithms gets
//! every command (`run`, `--resume`, `sweep`, `report`, `strategies`, `partition`, runs over
//! MPI) with its plug-ins beside the built-ins by calling it with its own registry.
//!
//! ```no_run
//! use fedsim::registry::Registry;
//!
//! fn main() -> std::process::ExitCode {
//!     let mut registry = Registry::builder().with_builtins();
//!     registry.origin(fedsim::origin!());
//!     // registry.algorithm(MyAlgorithm).expect("a name of its own");
//!     fedsim::cli::main(registry.build())
//! }
//! ```

mod args;
#[cfg(feature = "mpi")]
mod over_mpi;
mod privacy;
pub mod reference;
mod run;
mod sweep;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use clap::Parser;

pub use args::{
    Cli, Command, DataCommand, ExperimentArgs, FetchArgs, PackArgs, PrivacyArgs, ReportArgs,
    RunArgs, SweepArgs,
};

use crate::backend::BackendKind;
use crate::config::{ConfigError, ExperimentConfig};
use crate::error::Error;
use crate::experiment::Experiment;
use crate::output::say;
use crate::registry::{ParamInfo, Registry};
use crate::stop::StopSignal;

/// The allocator the `fedsim` binary runs with: burn's CPU backend trains about twice as fast
/// with it as with the system's (its large tensors are mapped and unmapped at every step
/// otherwise). A binary of a user's crate can take it too:
/// `#[global_allocator] static ALLOCATOR: fedsim::cli::Allocator = fedsim::cli::Allocator;`
pub use mimalloc::MiMalloc as Allocator;

/// Runs the command line of this process with the components of `registry`, and returns the
/// exit code: 0, 1 for a run that failed, 2 for bad input, 128 + the signal for a run that a
/// signal stopped.
pub fn main(registry: Registry) -> ExitCode {
    disable_huge_pages();
    let cli = Cli::parse();
    let stop = StopSignal::new();
    let mut signal = None;
    let outcome = match cli.command {
        Command::Run(args) => {
            // Only a run has work worth stopping cleanly; other commands end as signals say.
            signal = Some(watch_signals(&stop));
            // Started by an MPI launcher, this process is one rank of a run over MPI.
            #[cfg(feature = "mpi")]
            if crate::cluster::launched() {
                over_mpi::run(&args, &registry, &stop)
            } else {
                run::run_command(&args, &registry, &stop)
            }
            #[cfg(not(feature = "mpi"))]
            run::run_command(&args, &registry, &stop)
        }
        Command::Partition { experiment, plot } => {
            partition(&experiment, plot.as_deref(), &registry)
        }
        Command::Report(args) => sweep::report_runs(&args, &registry),
        Command::Sweep(args) => {
            signal = Some(watch_signals(&stop));
            sweep::sweep(&args, &registry, &stop)
        }
        Command::Strategies => {
            print!("{}", strategies(&registry));
            Ok(())
        }
        Command::Models => {
            print!("{}", models(&registry));
            Ok(())
        }
        Command::Datasets => {
            print!("{}", data_sets(&registry));
            Ok(())
        }
        Command::Schemes => {
            print!("{}", schemes(&registry));
            Ok(())
        }
        Command::Compressors => {
            print!("{}", compressors(&registry));
            Ok(())
        }
        Command::Data(DataCommand::Fetch(args)) => fetch(&args),
        Command::Data(DataCommand::Pack(args)) => pack(&args, &registry),
        Command::Privacy(args) => {
            println!("{}", privacy::answer(&args));
            Ok(())
        }
        Command::Reference { out } => reference::write_pages(&registry, &out)
            .map(|()| {
                say(format_args!(
                    "wrote the reference pages to {}",
                    out.display()
                ))
            })
            .map_err(|e| (e.into(), None)),
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

/// Asks the kernel not to back this process's memory with transparent huge pages, as
/// [`main`] does first. mimalloc asks for them on its arenas, and where the kernel grants
/// them on request (`madvise`, a common default) or everywhere (`always`), each 2 MiB region
/// that a worker touches is resident whole: `experiments/mnist-t1.json` peaked at 158 to 166 MB
/// with them and 113 to 117 MB without, at the same speed and to the same bits
/// (`benches/README.md`). Benches that train in their own process call it too, so that they
/// measure what the binary runs. A kernel without the setting leaves it as it was.
pub fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE reads one integer argument and writes no memory of ours; it
    // sets a flag of the process, which every later page fault honours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// What a command failed with, and the run folder a stopped run can be continued from.
type Failure = (Error, Option<PathBuf>);

/// Reads an experiment file with its overrides, and the `--backend` flag as one more, its
/// registered sections read with `registry`.
fn load(
    experiment: &Path,
    overrides: &[String],
    backend: Option<BackendKind>,
    registry: &Registry,
) -> Result<ExperimentConfig, Error> {
    let mut overrides = overrides.to_vec();
    if let Some(backend) = backend {
        overrides.push(format!("backend={}", backend.name()));
    }
    Ok(ExperimentConfig::load(experiment, &overrides, registry)?)
}

/// The experiment in the file `experiment`, with `overrides`, loaded and prepared to run. A
/// rule that only the data and the model can be checked against (a compressor's count
/// against the model's size) is named in the file, as validation's rules are.
fn prepare(
    experiment: &Path,
    overrides: &[String],
    backend: Option<BackendKind>,
    registry: &Registry,
) -> Result<Experiment, Error> {
    let config = load(experiment, overrides, backend, registry)?;
    Experiment::prepare(config, registry).map_err(|error| match error {
        Error::Config(ConfigError::Invalid { path, errors }) if path.as_os_str().is_empty() => {
            let path = experiment.to_path_buf();
            Error::Config(ConfigError::Invalid { path, errors })
        }
        other => other,
    })
}

/// The exit code of a command that failed with `error`: 2 for bad input, 1 for the rest.
fn exit_code(error: &Error) -> u8 {
    if error.is_bad_input() { 2 } else { 1 }
}

/// Downloads, checks and unpacks a data set, and says how an experiment names it.
fn fetch(args: &FetchArgs) -> Result<(), Failure> {
    use crate::data::fetch::{Fetch, REMOTES};
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

/// Packs the clients of an experiment's data set into one file, and says how an experiment
/// names it.
fn pack(args: &PackArgs, registry: &Registry) -> Result<(), Failure> {
    let fail = |error: Error| (error, None);
    let ExperimentArgs {
        experiment,
        overrides,
    } = &args.experiment;
    let config = load(experiment, overrides, None, registry).map_err(fail)?;
    let context = crate::registry::data_context(&config);
    let data = registry
        .choose_data(&config.data, None, &context)
        .map_err(|problems| fail(crate::registry::invalid_in_code(problems).into()))?;
    let whole = data.load(&context).map_err(|e| fail(e.into()))?;
    let packed =
        crate::data::packed::pack(data.name(), &whole, &args.out).map_err(|e| fail(e.into()))?;
    say(format_args!(
        "packed the {} clients of {} into {} ({} bytes, sha256 {}); an experiment reads it with\n  \"data\": {{\"dataset\": \"packed\", \"path\": {:?}}}, \"partition\": {{\"scheme\": \"natural\"}}",
        packed.clients,
        data.describe(),
        args.out.display(),
        packed.bytes,
        packed.sha256,
        args.out.display().to_string()
    ));
    Ok(())
}

/// The algorithms, their parameters and papers, as `fedsim strategies` prints them; those
/// another crate registered say which.
fn strategies(registry: &Registry) -> String {
    let mut out = String::from(
        "Set the algorithm in an experiment file's \"strategy\", e.g.\n  \"strategy\": {\"name\": \"fedadam\", \"server_lr\": 0.01}\nEvery parameter may be left out for its default.\n",
    );
    for algorithm in registry.algorithms() {
        out += &format!("\n{}\n  paper: {}\n", algorithm.name, algorithm.paper);
        out += &origin_and_params(&algorithm.origin, &algorithm.params);
        out += &format!("  aggregating schedulers: {}\n", algorithm.edge.described());
        out += &format!(
            "  asynchronous federations: {}\n",
            algorithm.asynchrony_described()
        );
    }
    out
}

/// The architectures and their hyperparameters, as `fedsim models` prints them; those another
/// crate registered say which.
fn models(registry: &Registry) -> String {
    let mut out = String::from(
        "Set the architecture in an experiment file's \"model\", by its name alone for the defaults or with hyperparameters, e.g.\n  \"model\": {\"name\": \"mlp\", \"hidden\": [100]}\n",
    );
    for model in registry.models() {
        out += &format!("\n{}\n  {}\n", model.name, model.about);
        out += &origin_and_params(&model.origin, &model.params);
    }
    out
}

/// The data sets and their parameters, as `fedsim datasets` prints them; those another crate
/// registered say which.
fn data_sets(registry: &Registry) -> String {
    let mut out = String::from(
        "Set the data set in an experiment file's \"data\", with its parameters beside it, e.g.\n  \"data\": {\"dataset\": \"mnist\", \"dir\": \"data/mnist\"}\nRelative paths are resolved against the experiment file's folder.\n",
    );
    for data_set in registry.data_sets() {
        out += &format!("\n{}\n  {}\n", data_set.name, data_set.about);
        out += &origin_and_params(&data_set.origin, &data_set.params);
    }
    out
}

/// The partition schemes and their parameters, as `fedsim schemes` prints them; those another
/// crate registered say which.
fn schemes(registry: &Registry) -> String {
    let mut out = String::from(
        "Set the split of the training set in an experiment file's \"partition\", with its parameters beside the scheme, e.g.\n  \"partition\": {\"scheme\": \"dirichlet\", \"alpha\": 0.5}\nA scheme that draws also takes a \"seed\" of its own (default: the experiment's).\n",
    );
    for scheme in registry.schemes() {
        out += &format!("\n{}\n  {}\n", scheme.name, scheme.about);
        out += &origin_and_params(&scheme.origin, &scheme.params);
    }
    out
}

/// `fedsim compressors`' listing.
fn compressors(registry: &Registry) -> String {
    let mut out = String::from(
        "Compress each client's upload in an experiment file's \"compression\", with the compressor's parameters beside its name, e.g.\n  \"compression\": {\"uplink\": {\"name\": \"topk\", \"fraction\": 0.01}, \"error_feedback\": true}\n",
    );
    for compressor in registry.compressors() {
        out += &format!("\n{}\n  {}\n", compressor.name, compressor.about);
        out += &origin_and_params(&compressor.origin, &compressor.params);
    }
    out
}

/// The lines of a listing that name the crate a component comes from, if not fedsim, and
/// its parameters with their defaults.
fn origin_and_params(origin: &crate::registry::Origin, params: &[ParamInfo]) -> String {
    let mut out = String::new();
    if *origin != crate::registry::Origin::fedsim() {
        out += &format!("  from: {} {}\n", origin.crate_name, origin.version);
    }
    for param in params {
        out += &match &param.default {
            Some(default) => format!("  {} = {default}: {}\n", param.name, param.doc),
            None => format!("  {}: {}\n", param.name, param.doc),
        };
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
    if crate::cluster::launched() {
        return "; under mpirun, every rank is asked to stop when one of them fails or mpirun is interrupted, and mpirun names the rank";
    }
    ""
}

#[cfg(not(unix))]
fn watch_signals(_stop: &StopSignal) -> Arc<AtomicI32> {
    Arc::new(AtomicI32::new(0))
}

/// `fedsim partition`: each client's label counts, and their chart if asked for.
fn partition(
    args: &ExperimentArgs,
    plot: Option<&Path>,
    registry: &Registry,
) -> Result<(), Failure> {
    let experiment =
        prepare(&args.experiment, &args.overrides, None, registry).map_err(|e| (e, None))?;
    let stats = experiment.label_stats().map_err(|e| (e, None))?;
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
        stats.mean_label_entropy_bits.unwrap_or_default(),
        (classes as f64).log2()
    ));
    if let Some(path) = plot {
        let title = format!("Labels per client: {}", experiment.config().name);
        let svg = crate::report::plots::label_distribution(counts, &title)
            .expect("a chart draws to memory");
        crate::output::atomic::write_atomically(path, svg.as_bytes())
            .map_err(|e| (e.into(), None))?;
        say(format_args!("label chart: {}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[test]
    fn huge_pages_are_off_once_disabled() {
        super::disable_huge_pages();
        // SAFETY: PR_GET_THP_DISABLE takes no argument and writes no memory of ours.
        let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(disabled, 1, "the process's flag reads back as set");
    }
}
