//! Comparison reports over finished runs (`fedsim report`, and a sweep at its end): a table
//! with one row per configuration, its seeds aggregated, and charts of the configurations side
//! by side. Every figure is computed from the runs' `metrics.jsonl` (their `config.json` only
//! tells which runs belong together), so a report can be rebuilt from old runs; only the
//! label charts read the data set, to count each client's labels.
//!
//! Files written to the report folder: `summary.csv`, `summary.md`, `report.html` (the table
//! and every chart in one file) and `plots/*.svg`.

mod html;
pub mod plots;
pub mod runs;
pub mod table;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::{ExperimentConfig, PartitionConfig};
pub use crate::error::ReportError;
use crate::experiment::Experiment;
use crate::output::RoundRecord;
use crate::output::atomic::{WriteError, write_atomically};
use crate::output::claim::{self, FolderKind};
use crate::registry::Registry;
use plots::{Axes, Curve, DrawError};
use runs::Configuration;
use table::{Row, TextTable};

/// What a report shows beyond the runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportOptions {
    /// The test accuracy (a fraction) whose first round and simulated time the table gives.
    pub target: Option<f64>,
}

/// What was written, and what was left out.
#[derive(Debug, Clone)]
pub struct Written {
    /// The configurations' rows, in table order.
    pub rows: Vec<Row>,
    /// Runs used.
    pub runs: usize,
    /// Runs or charts left out, and why.
    pub left_out: Vec<String>,
    /// The runs that failed, with their errors.
    pub failed: Vec<runs::FailedRun>,
}

/// Reads the finished runs in `inputs` (run folders, or folders of them) and writes the
/// report to `out`: their table and charts, and the runs that failed with their errors.
pub fn write_report(
    inputs: &[PathBuf],
    out: &Path,
    options: ReportOptions,
    registry: &Registry,
) -> Result<Written, ReportError> {
    let runs::Found {
        runs: found,
        unfinished: mut left_out,
        failed,
    } = runs::find(inputs)?;
    let mut configurations = runs::group(found, registry);
    left_out.extend(runs::one_per_seed(&mut configurations)?);
    let run_count = configurations.iter().map(|c| c.runs.len()).sum();
    let failures: Vec<String> = failed.iter().map(ToString::to_string).collect();
    let rows: Vec<Row> = configurations
        .iter()
        .map(|c| Row::of(c, options.target))
        .collect();
    let text_table = TextTable::new(&rows, options.target);
    let mut charts = curve_charts(&configurations, options.target)?;
    let (label_charts, unavailable) = label_charts(&configurations, registry);
    charts.extend(label_charts);
    left_out.extend(unavailable);

    let shared = runs::shared_settings(&configurations);

    let mut report = ReportFolder::create(out)?;
    report.write("summary.csv", &table::csv(&rows))?;
    report.write(
        "summary.md",
        &(text_table.markdown() + &shared_markdown(&shared) + &failed_markdown(&failures)),
    )?;
    for chart in &charts {
        report.write(&format!("plots/{}", chart.file), &chart.svg)?;
    }
    report.remove_stale_charts()?;
    let figures: Vec<html::Figure<'_>> = charts
        .iter()
        .map(|c| html::Figure {
            caption: &c.caption,
            svg: &c.svg,
        })
        .collect();
    let mut about = vec![format!(
        "{run_count} runs in {} configurations.",
        configurations.len()
    )];
    about.extend(left_out.iter().map(|line| format!("Left out: {line}.")));
    if !failures.is_empty() {
        about.push(format!(
            "{} runs failed; they are listed under Failed runs.",
            failures.len()
        ));
    }
    let title = format!("fedsim report: {}", report_name(out));
    let page = html::Page {
        title: &title,
        about: &about,
        table: &text_table,
        shared: &shared,
        failed: &failures,
        figures: &figures,
    };
    report.write("report.html", &page.render())?;
    Ok(Written {
        rows,
        runs: run_count,
        left_out,
        failed,
    })
}

/// The settings section of `summary.md`: what every run compared shares, by path.
fn shared_markdown(shared: &[(String, String)]) -> String {
    if shared.is_empty() {
        return String::new();
    }
    let mut out = format!("\n## {}\n\n", html::SHARED_HEADING);
    for (path, value) in shared {
        out += &format!("- `{path}`: {value}\n");
    }
    out
}

/// The failed runs' section of `summary.md`: nothing when none failed.
fn failed_markdown(failures: &[String]) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let mut out = format!("\n## Failed runs\n\n{}\n\n", html::FAILED_NOTE);
    for line in failures {
        out += &format!("- {line}\n");
    }
    out
}

/// The name a report folder gives its report.
fn report_name(out: &Path) -> String {
    out.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| out.display().to_string())
}

/// A chart ready to write.
struct Chart {
    /// Its file name under `plots/`.
    file: String,
    /// What the page calls it.
    caption: String,
    /// Its SVG text.
    svg: String,
}

/// The curve charts: accuracy by round, by simulated time (where the clock ran) and by
/// server bytes, each with a line at `target` if one is given, the clients' own accuracy by
/// round (where runs scored them), and the training loss by round.
fn curve_charts(
    configurations: &[Configuration],
    target: Option<f64>,
) -> Result<Vec<Chart>, ReportError> {
    let accuracy: YOf = |r| r.test_accuracy;
    let curves = |x: plots::XOf, y: YOf| -> Vec<Curve> {
        configurations
            .iter()
            .map(|c| plots::curve(c, x, y))
            .collect()
    };
    let band = match configurations.iter().any(|c| c.runs.len() > 1) {
        true => {
            "Lines are the mean over a configuration's seeds; bands span its lowest and \
             highest seed"
        }
        false => "Each line is one run (one seed a configuration)",
    };
    let target_text = target.map(|t| format!("target {}%", 100.0 * t));
    let target = target.zip(target_text.as_deref());
    let mut specs = vec![(
        "accuracy-by-round.svg",
        Axes {
            title: "Test accuracy by round",
            x: "round",
            y: "test accuracy (%)",
            y_scale: 100.0,
            target,
        },
        curves(plots::rounds, accuracy),
    )];
    if configurations.iter().any(|c| table::clock_ran(&c.runs)) {
        specs.push((
            "accuracy-by-sim-time.svg",
            Axes {
                title: "Test accuracy by simulated time",
                x: "simulated time (s)",
                y: "test accuracy (%)",
                y_scale: 100.0,
                target,
            },
            curves(plots::sim_time, accuracy),
        ));
    }
    specs.push((
        "accuracy-by-server-bytes.svg",
        Axes {
            title: "Test accuracy by traffic through the server",
            x: "MB sent over the server's links, down and up",
            y: "test accuracy (%)",
            y_scale: 100.0,
            target,
        },
        curves(plots::server_megabytes, accuracy),
    ));
    // Where some runs compressed their uploads, the uploads' bytes tell them apart: the
    // downlink, the same for all, would flatten the difference.
    if configurations.iter().flat_map(|c| &c.runs).any(plots::compresses) {
        specs.push((
            "accuracy-by-uploaded-bytes.svg",
            Axes {
                title: "Test accuracy by the clients' uploads",
                x: "MB uploaded over the server's links",
                y: "test accuracy (%)",
                y_scale: 100.0,
                target,
            },
            curves(plots::uploaded_megabytes, accuracy),
        ));
    }
    // Private runs: accuracy against the privacy spent, for the configurations that spend it.
    let private: Vec<&Configuration> = configurations
        .iter()
        .filter(|c| c.runs.iter().any(plots::is_private))
        .collect();
    if !private.is_empty() {
        specs.push((
            "accuracy-by-epsilon.svg",
            Axes {
                title: "Test accuracy by privacy spent",
                x: "epsilon spent (RDP accountant, at the run's delta)",
                y: "test accuracy (%)",
                y_scale: 100.0,
                target,
            },
            private
                .iter()
                .map(|c| plots::curve(c, plots::epsilon, accuracy))
                .collect(),
        ));
    }
    // Where clients are sent models of their own (clustered algorithms), the test set's
    // accuracy is that of one of them; each client's own is the method's. A personalised
    // algorithm's clients each use a personal model besides.
    let by_round = |title, y| Axes {
        title,
        x: "round",
        y,
        y_scale: 100.0,
        target: None,
    };
    let spreads: [(&str, Axes<'_>, YOf); 2] = [
        (
            "client-accuracy-by-round.svg",
            by_round(
                "Clients' accuracy by round (each on its own test samples)",
                "mean client accuracy (%)",
            ),
            |r| r.client_accuracy.map(|c| c.mean),
        ),
        (
            "personal-accuracy-by-round.svg",
            by_round(
                "Personal models' accuracy by round (each on its client's test samples)",
                "mean personal accuracy (%)",
            ),
            |r| r.personal_accuracy.map(|c| c.mean),
        ),
    ];
    for (file, axes, mean) in spreads {
        let scored = |run: &runs::Run| run.records.iter().any(|r| mean(r).is_some());
        if configurations.iter().flat_map(|c| &c.runs).any(scored) {
            specs.push((file, axes, curves(plots::rounds, mean)));
        }
    }
    specs.push((
        "train-loss.svg",
        Axes {
            title: "Training loss by round (clients' own data)",
            x: "round",
            y: "mean local training loss",
            y_scale: 1.0,
            target: None,
        },
        curves(plots::rounds, |r| r.train_loss),
    ));
    specs
        .into_iter()
        .map(|(file, axes, curves)| {
            let svg = plots::line_chart(axes, &curves).map_err(draw_error(file))?;
            Ok(Chart {
                file: file.to_string(),
                caption: format!("{band}. File: plots/{file}"),
                svg,
            })
        })
        .collect()
}

/// A figure of a round's record, drawn against an x of [`plots::XOf`].
type YOf = fn(&RoundRecord) -> Option<f64>;

/// Wraps a drawing failure of chart `file`.
fn draw_error(file: &str) -> impl FnOnce(DrawError) -> ReportError + '_ {
    move |error| ReportError::Draw {
        name: file.to_string(),
        message: error.to_string(),
    }
}

/// One label chart per distinct data split (the partition settings, the data and the number
/// of clients; a seed-driven split is drawn for its lowest seed), and a line for each split
/// that could not be drawn.
fn label_charts(
    configurations: &[Configuration],
    registry: &Registry,
) -> (Vec<Chart>, Vec<String>) {
    let mut seen: Vec<Value> = Vec::new();
    let (mut charts, mut unavailable) = (Vec::new(), Vec::new());
    for run in configurations.iter().flat_map(|c| &c.runs) {
        let config = &run.config;
        let split = serde_json::json!([
            config["data"],
            config["partition"],
            config["federation"]["num_clients"]
        ]);
        if seen.contains(&split) {
            continue;
        }
        seen.push(split);
        let described = describe_partition(config, registry);
        let mut file = format!("labels-{}.svg", file_stem(&described));
        if charts.iter().any(|chart: &Chart| chart.file == file) {
            file = format!("labels-{}-{}.svg", file_stem(&described), seen.len());
        }
        let drawn =
            ExperimentConfig::from_value(config.clone(), &run.dir.join("config.json"), registry)
                .map_err(|e| e.to_string())
                .and_then(|c| Experiment::prepare(c, registry).map_err(|e| e.to_string()))
                .and_then(|experiment| {
                    let title = format!("Labels per client: {described}");
                    let stats = experiment.label_stats().map_err(|e| e.to_string())?;
                    plots::label_distribution(&stats.label_counts, &title)
                        .map_err(|e| e.to_string())
                });
        match drawn {
            Ok(svg) => charts.push(Chart {
                caption: format!(
                    "Each client's training samples, stacked by class (the first 100 clients). \
                     File: plots/{file}"
                ),
                file,
                svg,
            }),
            Err(error) => unavailable.push(format!(
                "the label chart of {} ({error})",
                run.dir.display()
            )),
        }
    }
    (charts, unavailable)
}

/// `dirichlet(0.1); 100 clients; split seed 1`.
fn describe_partition(config: &Value, registry: &Registry) -> String {
    let partition = match runs::partition_of(config) {
        Some(partition) => registry.partition_label(&PartitionConfig {
            seed: None,
            ..partition
        }),
        None => config["partition"].to_string(),
    };
    let seed = config["partition"]
        .get("seed")
        .filter(|s| !s.is_null())
        .unwrap_or(&config["seed"]);
    format!(
        "{partition}; {} clients; split seed {seed}",
        config["federation"]["num_clients"]
    )
}

/// `dirichlet-0.1-100-clients-split-seed-1` for a description: what a file name can hold of
/// it, without runs of dashes.
fn file_stem(description: &str) -> String {
    crate::sweep::sanitise(description)
        .split('-')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// A report folder being written; whole files, each written to a temporary name and renamed.
struct ReportFolder {
    dir: PathBuf,
    files: Vec<PathBuf>,
}

impl ReportFolder {
    /// Opens `dir` for a report: a new or empty folder, or one of fedsim's own (a run's or a
    /// sweep's folder, or an earlier report's).
    fn create(dir: &Path) -> Result<Self, ReportError> {
        let fedsims = [FolderKind::Run, FolderKind::Sweep];
        claim::mark(dir, FolderKind::Report, &fedsims)?;
        fs::create_dir_all(dir.join("plots")).map_err(|source| WriteError {
            path: dir.join("plots"),
            source,
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            files: Vec::new(),
        })
    }

    /// Removes the charts an earlier report left in `plots/` that this one did not write
    /// (a split or a clock no longer among the runs), so the folder shows this report only.
    fn remove_stale_charts(&self) -> Result<(), WriteError> {
        let plots = self.dir.join("plots");
        let entries = fs::read_dir(&plots).map_err(|source| WriteError {
            path: plots.clone(),
            source,
        })?;
        for path in entries.filter_map(|entry| entry.ok().map(|e| e.path())) {
            let chart = path.extension().is_some_and(|e| e == "svg");
            if chart && !self.files.contains(&path) {
                fs::remove_file(&path).map_err(|source| WriteError { path, source })?;
            }
        }
        Ok(())
    }

    fn write(&mut self, name: &str, text: &str) -> Result<(), WriteError> {
        let path = self.dir.join(name);
        write_atomically(&path, text.as_bytes())?;
        self.files.push(path);
        Ok(())
    }
}
