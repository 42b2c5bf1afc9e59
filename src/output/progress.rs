//! Progress over rounds: a bar on a terminal, plain lines otherwise.

use std::fmt;
use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};

use super::RoundRecord;

/// How a run shows its progress.
pub enum Progress {
    /// An indicatif bar with the latest accuracy, for an interactive terminal.
    Bar(ProgressBar),
    /// One line per round on stdout, for logs and pipes.
    Lines {
        /// Total rounds, for "round 3/50".
        rounds: u32,
    },
    /// Nothing.
    Silent,
    /// Each finished round handed to a function, on the thread that runs the experiment: for
    /// a program that embeds fedsim and follows (or stops) its runs.
    Each(Box<dyn Fn(&RoundRecord) + Send + Sync>),
}

impl Progress {
    /// A bar when stdout is a terminal and `plain` is not asked for, lines otherwise; `done`
    /// rounds are finished already (a resumed run).
    pub fn for_stdout(rounds: u32, done: u32, plain: bool) -> Self {
        if plain || !std::io::stdout().is_terminal() {
            return Progress::Lines { rounds };
        }
        let bar = ProgressBar::new(u64::from(rounds)).with_style(
            ProgressStyle::with_template(
                "{prefix} [{elapsed_precise}] {bar:30.cyan/blue} round {pos}/{len} {msg} (eta {eta})",
            )
            .expect("the template is valid")
            .progress_chars("=> "),
        );
        bar.set_prefix("training");
        bar.set_position(u64::from(done));
        bar.reset_eta();
        Progress::Bar(bar)
    }

    /// Shows a finished round.
    pub fn round(&self, record: &RoundRecord) {
        let accuracy = record
            .test_accuracy
            .map(|a| format!("  test acc {:.2}%", 100.0 * a))
            .unwrap_or_default();
        match self {
            Progress::Bar(bar) => {
                if record.test_accuracy.is_some() {
                    bar.set_message(accuracy.trim().to_string());
                }
                bar.set_position(u64::from(record.round));
            }
            Progress::Lines { rounds } => {
                let loss = record
                    .train_loss
                    .map_or("-".to_string(), |l| format!("{l:.4}"));
                say(format_args!(
                    "round {}/{rounds}  train loss {loss}{accuracy}  {:.0} ms",
                    record.round, record.wall_ms
                ))
            }
            Progress::Each(follow) => follow(record),
            Progress::Silent => {}
        }
    }

    /// Clears the bar, if any.
    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Prints a line on stdout. A reader that went away (`fedsim run … | head`) is not an error:
/// the run goes on and its results still reach the run folder.
pub fn say(line: fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stdout(), "{line}");
}
