//! The `fedsim` command line's grammar: every command, argument and flag, with the help text
//! clap prints. The binary dispatches on it; tests parse documented commands with it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::backend::BackendKind;

/// Federated-learning simulation: a whole federation (server, client groups) on one machine.
#[derive(Parser)]
#[command(version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    /// What to do.
    pub command: Command,
}

/// The commands.
#[derive(Subcommand)]
pub enum Command {
    /// Run an experiment and write its results to a run folder, or continue a stopped run.
    Run(RunArgs),
    /// Print each client's label counts under the experiment's partition, without training.
    Partition {
        /// The experiment whose partition is drawn.
        #[command(flatten)]
        experiment: ExperimentArgs,
        /// Also draw the counts as a stacked bar chart to this SVG file.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
    /// List the FL algorithms an experiment's `strategy` can name, with their parameters,
    /// defaults and papers.
    Strategies,
    /// List the model architectures an experiment's `model` can name, with their
    /// hyperparameters and defaults.
    Models,
    /// List the data sets an experiment's `data` can name, with their parameters.
    Datasets,
    /// List the partition schemes an experiment's `partition` can name, with their
    /// parameters.
    Schemes,
    /// List the compressors an experiment's `compression.uplink` can name, with their
    /// parameters.
    Compressors,
    /// Run every experiment of a sweep file (a base experiment, variants and a grid of
    /// field values), each in its own folder; rerunning skips finished runs and resumes
    /// killed ones.
    Sweep(SweepArgs),
    /// Compare finished runs: a table with each configuration's seeds aggregated
    /// (summary.csv, summary.md), SVG charts (plots/) and report.html holding both.
    Report(ReportArgs),
    /// Data sets that do not ship inside fedsim.
    #[command(subcommand)]
    Data(DataCommand),
    /// What the subsampled Gaussian mechanism spends: the epsilon of a noise multiplier, or
    /// the noise multiplier of a target epsilon, over steps at a sampling rate and delta.
    Privacy(PrivacyArgs),
    /// Write the reference pages the code defines (this command line, and the catalogues of
    /// strategies, models, data sets and partition schemes with every registered component)
    /// as Markdown files, for the book.
    Reference {
        /// Folder to write the pages into.
        #[arg(
            long,
            value_name = "DIR",
            default_value = "docs/src/reference/generated"
        )]
        out: PathBuf,
    },
}

/// `fedsim data`'s commands.
#[derive(Subcommand)]
pub enum DataCommand {
    /// Download a data set from its publisher, check it against the published checksum and
    /// unpack it; a rerun continues a download that stopped.
    Fetch(FetchArgs),
    /// Pack the clients of an experiment's data set (one that defines its own, as LEAF's do)
    /// into one file, each client's samples in a block of its own; the `packed` data set then
    /// reads each client from it when the client is sampled.
    Pack(PackArgs),
}

/// `fedsim data pack`'s arguments.
#[derive(Args)]
pub struct PackArgs {
    /// The experiment whose data set is packed.
    #[command(flatten)]
    pub experiment: ExperimentArgs,
    /// The file to write; one that exists is never overwritten.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// `fedsim data fetch`'s arguments.
#[derive(Args)]
pub struct FetchArgs {
    /// The data set.
    #[arg(value_parser = ["cifar10"])]
    pub name: String,
    /// Folder to download and unpack into.
    #[arg(long, value_name = "DIR", default_value = "data")]
    pub dir: PathBuf,
    /// Download from this address instead of the publisher's (a mirror of the same file; the
    /// published checksum still applies).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// `fedsim privacy`'s arguments: one of `--noise-multiplier` (print its epsilon) and
/// `--target-epsilon` (print the least noise multiplier that spends no more).
#[derive(Args)]
#[command(group(clap::ArgGroup::new("question").required(true).args(["noise_multiplier", "target_epsilon"])))]
pub struct PrivacyArgs {
    /// The noise's standard deviation over the sensitivity: print the epsilon it spends.
    #[arg(long, value_name = "Z", value_parser = positive)]
    pub noise_multiplier: Option<f64>,
    /// The epsilon to spend: print the least noise multiplier that spends no more.
    #[arg(long, value_name = "EPSILON", value_parser = positive)]
    pub target_epsilon: Option<f64>,
    /// The probability that a member is in a step's sample (Poisson), or the sample's share
    /// of the population (fixed size).
    #[arg(long, value_name = "Q", value_parser = parse_rate)]
    pub sampling_rate: f64,
    /// Steps of the mechanism (rounds of a federation).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Delta of the (epsilon, delta) guarantee.
    #[arg(long, value_parser = parse_delta)]
    pub delta: f64,
    /// How each step samples: `poisson` (each member independently; add or remove one) or
    /// `fixed` (a fixed-size sample without replacement; replace one).
    #[arg(long, default_value = "poisson", value_parser = ["poisson", "fixed"])]
    pub sampling: String,
    /// How RDP becomes (epsilon, delta): `balle2020` (Balle et al. 2020) or `classic`
    /// (Mironov 2017, looser).
    #[arg(long, default_value = "balle2020", value_parser = ["balle2020", "classic"])]
    pub conversion: String,
    /// How fractional orders sum their series: `absolute` (an upper bound, as Google's
    /// dp_accounting) or `signed` (exact, as Opacus).
    #[arg(long, default_value = "absolute", value_parser = ["absolute", "signed"])]
    pub series: String,
}

/// A number above 0.
fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value > 0.0 && value.is_finite() => Ok(value),
        _ => Err(format!("expected a number above 0; got {text:?}")),
    }
}

/// A sampling rate: a fraction in (0, 1].
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate <= 1.0 => Ok(rate),
        _ => Err(format!("expected a sampling rate in (0, 1]; got {text:?}")),
    }
}

/// A delta: a probability in (0, 1).
fn parse_delta(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(delta) if delta > 0.0 && delta < 1.0 => Ok(delta),
        _ => Err(format!(
            "expected a delta in (0, 1), e.g. 1e-5; got {text:?}"
        )),
    }
}

/// `fedsim report`'s arguments.
#[derive(Args)]
pub struct ReportArgs {
    /// Run folders, or folders of run folders such as a sweep's.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Report folder: new, empty, or one fedsim made [default: the DIR, when only one is given].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Test accuracy to reach, as a fraction (e.g. 0.9): the table gives the first round
    /// and simulated time at or above it.
    #[arg(long, value_name = "FRACTION", value_parser = parse_target)]
    pub target: Option<f64>,
}

/// A target accuracy: a fraction in (0, 1].
pub fn parse_target(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(target) if target > 0.0 && target <= 1.0 => Ok(target),
        _ => Err(format!(
            "expected a test accuracy as a fraction in (0, 1], e.g. 0.9; got {text:?}"
        )),
    }
}

/// `fedsim sweep`'s arguments.
#[derive(Args)]
pub struct SweepArgs {
    /// Sweep file (JSON); see the book's guide to sweeps (docs/src/how-to/sweeps.md).
    pub sweep: PathBuf,
    /// Sweep folder: new, empty, or one fedsim made [default: runs/NAME, after the sweep's name].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Override a field of every run's base experiment, e.g. --set federation.rounds=5, before
    /// the variants' and the grid's own overrides (value read as JSON, or as a string if it is
    /// not JSON). Repeatable.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub overrides: Vec<String>,
    /// Experiments run at once; each gets an equal share of the cores as its workers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub jobs: u16,
    /// Print the runs and their folders, and what the folder holds of each, without running.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one plain line per finished run instead of a progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Play only the I-th of N disjoint slices of the runs (every N-th run, from run I), as
    /// one task of a job array; `fedsim report DIR` merges the slices' folders afterwards.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<crate::sweep::Shard>,
}

/// `fedsim run`'s arguments.
#[derive(Args)]
pub struct RunArgs {
    /// Experiment file (JSON); see experiments/, and the book's reference for the format.
    #[arg(required_unless_present = "resume")]
    pub experiment: Option<PathBuf>,
    /// Override a field of the file, e.g. --set federation.rounds=5 --set client.lr=0.1
    /// (value read as JSON, or as a string if it is not JSON). Repeatable.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub overrides: Vec<String>,
    /// Run folder: new, empty, or one fedsim made; never a folder of yours [default:
    /// runs/NAME-TIMESTAMP, after the experiment's name].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Backend that trains; overrides the file's `backend`.
    #[arg(long, value_enum)]
    pub backend: Option<BackendKind>,
    /// Continue the run in DIR from its checkpoint, with the settings it started with; the
    /// result is the same, bit for bit, as if it had never stopped.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["experiment", "overrides", "out", "backend"])]
    pub resume: Option<PathBuf>,
    /// Print one plain line per round instead of a progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// An experiment file and overrides of its fields.
#[derive(Args)]
pub struct ExperimentArgs {
    /// Experiment file (JSON); see experiments/, and the book's reference for the format.
    pub experiment: PathBuf,
    /// Override a field of the file, e.g. --set federation.rounds=5 --set client.lr=0.1
    /// (value read as JSON, or as a string if it is not JSON). Repeatable.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub overrides: Vec<String>,
}
