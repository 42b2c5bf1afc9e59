//! The comparison table: one row per configuration, each figure a statistic over its seeds,
//! computed from the runs' round records alone. Written as `summary.csv` (fractions, bytes
//! and seconds at full precision, for scripts) and `summary.md` (percent and MB, for people).

use statrs::distribution::{ContinuousCDF, StudentsT};

use super::runs::{Configuration, Run};
use crate::output::{ClientAccuracy, RoundRecord};

/// A quantity measured once per seed, summarised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Seeds measured.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (divided by n − 1; 0 for one seed).
    pub std: f64,
    /// The 95% confidence interval of the mean from Student's t with n − 1 degrees of
    /// freedom; `None` for one seed.
    pub ci95: Option<(f64, f64)>,
}

impl Stats {
    /// The statistics of `values`; `None` if there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Some(Self {
                n,
                mean,
                std: 0.0,
                ci95: None,
            });
        }
        let freedom = (n - 1) as f64;
        let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / freedom).sqrt();
        let t = StudentsT::new(0.0, 1.0, freedom)
            .expect("degrees of freedom are positive")
            .inverse_cdf(0.975);
        let half_width = t * std / (n as f64).sqrt();
        Some(Self {
            n,
            mean,
            std,
            ci95: Some((mean - half_width, mean + half_width)),
        })
    }
}

/// How the seeds of a configuration reached the target accuracy.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetReach {
    /// Seeds whose test accuracy reached the target in some evaluated round.
    pub reached: usize,
    /// The first round at or above the target, over the seeds that reached it.
    pub rounds: Option<Stats>,
    /// The simulated time at the end of that round, over the same seeds.
    pub sim_time_s: Option<Stats>,
}

/// A tier's bytes over a whole run, as the mean over seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct TierBytes {
    /// `server` or `scheduler`.
    pub tier: String,
    /// Bytes towards the clients.
    pub down: f64,
    /// Bytes towards the server.
    pub up: f64,
}

/// The spread of the final model's accuracy over the clients' held-out samples.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSpread {
    /// Mean over clients.
    pub mean: Stats,
    /// Mean of the worst 10% of clients.
    pub worst_10: Stats,
    /// Mean of the best 10% of clients.
    pub best_10: Stats,
}

/// One configuration's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The configuration's label.
    pub label: String,
    /// Test accuracy after the last round.
    pub final_accuracy: Stats,
    /// Best test accuracy of any evaluated round.
    pub best_accuracy: Stats,
    /// Rounds and simulated time to the target accuracy, when one was asked for.
    pub target: Option<TargetReach>,
    /// Bytes per tier of links, server tier first.
    pub traffic: Vec<TierBytes>,
    /// Per-client accuracy at the last round that measured it, where client-side evaluation
    /// ran.
    pub clients: Option<ClientSpread>,
    /// Per-client accuracy of the clients' personal models at the last round that measured
    /// it, for a personalised algorithm.
    pub personal: Option<ClientSpread>,
    /// Real seconds the rounds took.
    pub wall_seconds: Stats,
}

impl Row {
    /// The row of a configuration (at least one run, each with at least one round).
    pub fn of(configuration: &Configuration, target: Option<f64>) -> Self {
        let runs = &configuration.runs;
        let per_seed = |measure: &dyn Fn(&Run) -> Option<f64>| {
            let values: Vec<f64> = runs.iter().filter_map(measure).collect();
            Stats::of(&values)
        };
        let nan = Stats {
            n: 0,
            mean: f64::NAN,
            std: f64::NAN,
            ci95: None,
        };
        Self {
            label: configuration.label.clone(),
            final_accuracy: per_seed(&|run| run.records.last()?.test_accuracy).unwrap_or(nan),
            best_accuracy: per_seed(&|run| best_accuracy(&run.records)).unwrap_or(nan),
            target: target.map(|target| {
                let first = |run: &Run| first_at_or_above(&run.records, target);
                TargetReach {
                    reached: runs.iter().filter(|run| first(run).is_some()).count(),
                    rounds: per_seed(&|run| first(run).map(|(round, _)| f64::from(round))),
                    sim_time_s: clock_ran(runs)
                        .then(|| per_seed(&|run| first(run).map(|(_, time)| time)))
                        .flatten(),
                }
            }),
            traffic: mean_traffic(runs),
            clients: ClientSpread::over(runs, |r| r.client_accuracy),
            personal: ClientSpread::over(runs, |r| r.personal_accuracy),
            wall_seconds: per_seed(&|run| {
                Some(run.records.iter().map(|r| r.wall_ms).sum::<f64>() / 1000.0)
            })
            .unwrap_or(nan),
        }
    }
}

impl ClientSpread {
    /// The spread `of` gives each seed's run at the last round that measured it, over the
    /// seeds; none unless every seed has one.
    fn over(runs: &[Run], of: fn(&RoundRecord) -> Option<ClientAccuracy>) -> Option<Self> {
        let spreads: Vec<ClientAccuracy> = runs
            .iter()
            .map(|run| run.records.iter().rev().find_map(of))
            .collect::<Option<_>>()?;
        let spread = |part: fn(&ClientAccuracy) -> f64| {
            let values: Vec<f64> = spreads.iter().map(part).collect();
            Stats::of(&values).expect("every run has a spread")
        };
        Some(Self {
            mean: spread(|c| c.mean),
            worst_10: spread(|c| c.worst_10),
            best_10: spread(|c| c.best_10),
        })
    }
}

/// Whether any of the runs' rounds took simulated time (a network or compute model is set).
pub fn clock_ran(runs: &[Run]) -> bool {
    runs.iter()
        .any(|run| run.records.iter().any(|r| r.sim_time_s > 0.0))
}

/// The best test accuracy of any evaluated round.
fn best_accuracy(records: &[RoundRecord]) -> Option<f64> {
    records
        .iter()
        .filter_map(|r| r.test_accuracy)
        .reduce(f64::max)
}

/// The first evaluated round whose test accuracy is at least `target`, and its simulated
/// end time.
fn first_at_or_above(records: &[RoundRecord], target: f64) -> Option<(u32, f64)> {
    records
        .iter()
        .find(|r| r.test_accuracy.is_some_and(|a| a >= target))
        .map(|r| (r.round, r.sim_time_s))
}

/// Each tier's bytes summed over the rounds, as the mean over runs; tiers in the order the
/// first run lists them.
fn mean_traffic(runs: &[Run]) -> Vec<TierBytes> {
    let tiers: Vec<String> = runs[0].records[0]
        .traffic
        .iter()
        .map(|t| t.tier.clone())
        .collect();
    tiers
        .into_iter()
        .map(|tier| {
            let (mut down, mut up) = (0.0, 0.0);
            for record in runs.iter().flat_map(|run| &run.records) {
                for traffic in record.traffic.iter().filter(|t| t.tier == tier) {
                    down += traffic.bytes_down as f64;
                    up += traffic.bytes_up as f64;
                }
            }
            let n = runs.len() as f64;
            TierBytes {
                tier,
                down: down / n,
                up: up / n,
            }
        })
        .collect()
}

/// The rows as CSV: a header, then one line per row. Statistics take four columns each
/// (`_mean`, `_std`, `_ci95_low`, `_ci95_high`); absent figures are empty cells.
pub fn csv(rows: &[Row]) -> String {
    let mut header = vec!["configuration".to_string(), "seeds".to_string()];
    let stats_columns = |name: &str| {
        ["mean", "std", "ci95_low", "ci95_high"]
            .map(|part| format!("{name}_{part}"))
            .to_vec()
    };
    header.extend(stats_columns("final_accuracy"));
    header.extend(stats_columns("best_accuracy"));
    let with_target = rows.iter().any(|r| r.target.is_some());
    if with_target {
        header.push("target_reached".into());
        header.extend(stats_columns("rounds_to_target"));
        header.extend(stats_columns("sim_seconds_to_target"));
    }
    let tiers = tier_names(rows);
    for tier in &tiers {
        header.push(format!("{tier}_bytes_down"));
        header.push(format!("{tier}_bytes_up"));
    }
    let spreads = spread_columns(rows);
    for column in &spreads {
        for part in ["mean", "worst_10", "best_10"] {
            header.extend(stats_columns(&format!("{}_{part}", column.csv)));
        }
    }
    header.extend(stats_columns("wall_seconds"));

    let mut writer = ::csv::Writer::from_writer(Vec::new());
    writer.write_record(&header).expect("writing to memory");
    for row in rows {
        let mut cells = vec![row.label.clone(), row.final_accuracy.n.to_string()];
        cells.extend(stats_cells(Some(&row.final_accuracy)));
        cells.extend(stats_cells(Some(&row.best_accuracy)));
        if with_target {
            let target = row.target.as_ref();
            cells.push(target.map_or(String::new(), |t| t.reached.to_string()));
            cells.extend(stats_cells(target.and_then(|t| t.rounds.as_ref())));
            cells.extend(stats_cells(target.and_then(|t| t.sim_time_s.as_ref())));
        }
        for tier in &tiers {
            let bytes = row.traffic.iter().find(|t| &t.tier == tier);
            cells.push(bytes.map_or(String::new(), |b| b.down.to_string()));
            cells.push(bytes.map_or(String::new(), |b| b.up.to_string()));
        }
        for column in &spreads {
            let spread = (column.of)(row);
            cells.extend(stats_cells(spread.map(|c| &c.mean)));
            cells.extend(stats_cells(spread.map(|c| &c.worst_10)));
            cells.extend(stats_cells(spread.map(|c| &c.best_10)));
        }
        cells.extend(stats_cells(Some(&row.wall_seconds)));
        writer.write_record(&cells).expect("writing to memory");
    }
    String::from_utf8(writer.into_inner().expect("writing to memory")).expect("CSV of UTF-8 text")
}

/// A spread over the clients, as the tables show it.
struct SpreadColumn {
    /// The CSV columns' prefix.
    csv: &'static str,
    /// The text table's heading.
    heading: &'static str,
    /// A row's spread.
    of: fn(&Row) -> Option<&ClientSpread>,
}

/// The spreads over clients that some row has: the global model's, then the personal
/// models'.
fn spread_columns(rows: &[Row]) -> Vec<SpreadColumn> {
    [
        SpreadColumn {
            csv: "client_accuracy",
            heading: "client accuracy (%): mean, worst 10%",
            of: |row| row.clients.as_ref(),
        },
        SpreadColumn {
            csv: "personal_accuracy",
            heading: "personal accuracy (%): mean, worst 10%",
            of: |row| row.personal.as_ref(),
        },
    ]
    .into_iter()
    .filter(|column| rows.iter().any(|row| (column.of)(row).is_some()))
    .collect()
}

/// The four CSV cells of a statistic.
fn stats_cells(stats: Option<&Stats>) -> [String; 4] {
    let Some(stats) = stats.filter(|s| s.n > 0) else {
        return Default::default();
    };
    let (low, high) = stats.ci95.map_or((String::new(), String::new()), |(l, h)| {
        (l.to_string(), h.to_string())
    });
    [stats.mean.to_string(), stats.std.to_string(), low, high]
}

/// The tiers any row has, in first-seen order.
fn tier_names(rows: &[Row]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for tier in rows.iter().flat_map(|r| &r.traffic) {
        if !names.contains(&tier.tier) {
            names.push(tier.tier.clone());
        }
    }
    names
}

/// The table as text for people: accuracies in percent, traffic in MB.
#[derive(Debug, Clone, PartialEq)]
pub struct TextTable {
    /// Column names.
    pub header: Vec<String>,
    /// One line of cells per configuration.
    pub body: Vec<Vec<String>>,
    /// How to read the figures.
    pub note: String,
}

impl TextTable {
    /// The rows, with the target accuracy the report was asked for.
    pub fn new(rows: &[Row], target: Option<f64>) -> Self {
        let tiers = tier_names(rows);
        let spreads = spread_columns(rows);
        let mut header = vec![
            "configuration".to_string(),
            "seeds".into(),
            "final accuracy (%)".into(),
            "best accuracy (%)".into(),
        ];
        let with_clock = rows
            .iter()
            .any(|r| r.target.as_ref().is_some_and(|t| t.sim_time_s.is_some()));
        if let Some(target) = target {
            let percent = 100.0 * target;
            header.push(format!("reached {percent}%"));
            header.push(format!("rounds to {percent}%"));
            if with_clock {
                header.push(format!("simulated s to {percent}%"));
            }
        }
        for tier in &tiers {
            header.push(format!("{tier} MB down / up"));
        }
        header.extend(spreads.iter().map(|column| column.heading.to_string()));
        header.push("wall s".into());
        let body = rows
            .iter()
            .map(|row| Self::cells(row, &tiers, with_clock, &spreads))
            .collect();
        let mut note = match rows.iter().any(|r| r.final_accuracy.n > 1) {
            true => "Each figure is the mean over the seeds ± their standard deviation, with \
                     the 95% confidence interval of the mean in brackets (Student's t; none \
                     for one seed)."
                .to_string(),
            false => "Each configuration ran with one seed: its figures are that run's (more \
                      seeds give a mean, a deviation and an interval)."
                .to_string(),
        };
        if target.is_some() {
            note += " Rounds and simulated seconds to the target count only the seeds that \
                     reached it.";
        }
        Self { header, body, note }
    }

    /// One row's cells.
    fn cells(
        row: &Row,
        tiers: &[String],
        with_clock: bool,
        spreads: &[SpreadColumn],
    ) -> Vec<String> {
        let mut cells = vec![
            row.label.clone(),
            row.final_accuracy.n.to_string(),
            stats_text(Some(&row.final_accuracy), 100.0, 2),
            stats_text(Some(&row.best_accuracy), 100.0, 2),
        ];
        if let Some(reach) = &row.target {
            cells.push(format!("{}/{}", reach.reached, row.final_accuracy.n));
            cells.push(stats_text(reach.rounds.as_ref(), 1.0, 1));
            if with_clock {
                cells.push(stats_text(reach.sim_time_s.as_ref(), 1.0, 1));
            }
        }
        for tier in tiers {
            cells.push(match row.traffic.iter().find(|t| &t.tier == tier) {
                Some(bytes) => format!("{:.1} / {:.1}", bytes.down / 1e6, bytes.up / 1e6),
                None => "–".into(),
            });
        }
        for column in spreads {
            cells.push(match (column.of)(row) {
                Some(spread) => format!(
                    "{}, {}",
                    stats_text(Some(&spread.mean), 100.0, 1),
                    stats_text(Some(&spread.worst_10), 100.0, 1)
                ),
                None => "–".into(),
            });
        }
        cells.push(format!("{:.1}", row.wall_seconds.mean));
        cells
    }

    /// The table in Markdown, followed by its note.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = line(&self.header);
        out += &format!("|{}\n", " --- |".repeat(self.header.len()));
        for cells in &self.body {
            out += &line(cells);
        }
        out + "\n" + &self.note + "\n"
    }
}

/// `97.12 ± 0.31 [96.35, 97.89]`, each figure times `scale` with `decimals` decimals; `–`
/// when absent.
pub fn stats_text(stats: Option<&Stats>, scale: f64, decimals: usize) -> String {
    let Some(stats) = stats.filter(|s| s.n > 0) else {
        return "–".into();
    };
    let number = |v: f64| format!("{:.decimals$}", v * scale);
    match stats.ci95 {
        Some((low, high)) => format!(
            "{} ± {} [{}, {}]",
            number(stats.mean),
            number(stats.std),
            number(low),
            number(high)
        ),
        None => number(stats.mean),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_the_mean_sample_deviation_and_t_interval() {
        // Three values 1, 2, 3: mean 2, sample std 1, t(0.975, 2) = 4.302652729749464,
        // half width 4.3027 / sqrt(3) = 2.484138.
        let stats = Stats::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!((stats.n, stats.mean, stats.std), (3, 2.0, 1.0));
        let (low, high) = stats.ci95.unwrap();
        assert!((high - 2.0 - 2.484_138).abs() < 1e-5, "{high}");
        assert!((2.0 - low - 2.484_138).abs() < 1e-5, "{low}");
        assert_eq!(Stats::of(&[0.5]).unwrap().ci95, None);
        assert_eq!(Stats::of(&[]), None);
    }

    #[test]
    fn stats_text_scales_and_rounds() {
        let stats = Stats::of(&[0.9, 0.95]).unwrap();
        // Mean 0.925, std 0.0353553, t(0.975, 1) = 12.7062, half width 0.317655.
        assert_eq!(
            stats_text(Some(&stats), 100.0, 1),
            "92.5 ± 3.5 [60.7, 124.3]"
        );
        assert_eq!(stats_text(None, 100.0, 1), "–");
    }
}
