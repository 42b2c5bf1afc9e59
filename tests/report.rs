//! `fedsim report`: the comparison table checked against figures computed by hand from a small
//! run folder written here, the charts rendered to pixels as a person would see them, and the
//! per-class accuracy a real run records.

mod common;

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use common::{experiment, fedsim};
use fedsim::ExperimentConfig;
use fedsim::registry::Registry;
use serde_json::{Value, json};

/// The resolved config of the shipped `mnist-t1` experiment with `sets`, as a run writes it.
fn config(sets: &[&str]) -> Value {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let config =
        ExperimentConfig::load(&experiment("mnist-t1"), &sets, &Registry::builtin()).unwrap();
    serde_json::to_value(config).unwrap()
}

/// One round's record: its accuracy, simulated end time, upward server bytes, and (for
/// FedAvg's runs) the worst tenth of the clients' accuracy.
fn record(round: u32, accuracy: f64, sim_time_s: f64, bytes_up: u64, worst: Option<f64>) -> Value {
    let mut record = json!({
        "round": round, "clients": [1, 2], "dropped": [], "train_loss": 1.0 / f64::from(round),
        "test_accuracy": accuracy, "test_loss": 1.0,
        "traffic": [{"tier": "server", "messages_down": 2, "bytes_down": 1000,
                     "messages_up": 2, "bytes_up": bytes_up}],
        "sim_round_s": 1.0, "sim_time_s": sim_time_s, "wall_ms": 100.0
    });
    if let Some(worst) = worst {
        record["client_accuracy"] =
            json!({"mean": 0.7, "std": 0.1, "worst_10": worst, "best_10": 0.9});
    }
    record
}

/// Writes a run folder: fedsim's marker, `config.json` and one `metrics.jsonl` line per record.
fn write_run(dir: &Path, config: &Value, records: &[Value]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(".fedsim"), "fedsim run folder\n").unwrap();
    fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    fs::write(dir.join("metrics.jsonl"), lines.join("\n") + "\n").unwrap();
}

/// Three seeds of FedAvg, one of the median and one unfinished run, 3 rounds each:
///
/// | run          | accuracy by round | sim s per round | bytes up per round | worst 10% |
/// | fedavg seed 1 | 0.50 0.70 0.80   | 1.0             | 2000               | 0.2       |
/// | fedavg seed 2 | 0.60 0.90 0.85   | 1.5             | 2000               | 0.3       |
/// | fedavg seed 3 | 0.40 0.65 0.95   | 2.0             | 2100               | 0.4       |
/// | median seed 1 | 0.30 0.60 0.50   | 1.0             | 2000               | –         |
fn write_sweep_folder(out: &Path) {
    let fedavg = [
        (1, [0.50, 0.70, 0.80], 1.0, 2000, 0.2),
        (2, [0.60, 0.90, 0.85], 1.5, 2000, 0.3),
        (3, [0.40, 0.65, 0.95], 2.0, 2100, 0.4),
    ];
    for (seed, accuracies, step, bytes_up, worst) in fedavg {
        let records: Vec<Value> = (1..=3)
            .map(|round| {
                let time = step * f64::from(round);
                record(
                    round,
                    accuracies[round as usize - 1],
                    time,
                    bytes_up,
                    Some(worst),
                )
            })
            .collect();
        let seed_set = format!("seed={seed}");
        let config = config(&[&seed_set, "federation.rounds=3"]);
        write_run(&out.join(format!("fedavg_seed-{seed}")), &config, &records);
    }
    let median = config(&[r#"strategy={"name":"median"}"#, "federation.rounds=3"]);
    let records: Vec<Value> = [0.3, 0.6, 0.5]
        .iter()
        .zip(1..)
        .map(|(&accuracy, round)| record(round, accuracy, f64::from(round), 2000, None))
        .collect();
    write_run(&out.join("median_seed-1"), &median, &records);
    let unfinished = config(&[
        r#"strategy={"name":"median"}"#,
        "seed=2",
        "federation.rounds=3",
    ]);
    write_run(&out.join("median_seed-2"), &unfinished, &records[..2]);
}

/// The CSV's rows as maps from column name to cell.
fn read_csv(path: &Path) -> Vec<HashMap<String, String>> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header = reader.headers().unwrap().clone();
    reader
        .records()
        .map(|row| {
            let row = row.unwrap();
            header
                .iter()
                .map(String::from)
                .zip(row.iter().map(String::from))
                .collect()
        })
        .collect()
}

fn assert_close(cell: &str, expected: f64) {
    let value: f64 = cell
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} is not a number"));
    assert!((value - expected).abs() < 1e-6, "{value} is not {expected}");
}

#[test]
fn the_table_holds_the_figures_computed_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    write_sweep_folder(dir.path());
    let out = dir.path().to_str().unwrap();
    let output = fedsim(&["report", out, "--target", "0.85"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout.contains("left out: ") && stdout.contains("median_seed-2: 2 of 3 rounds"),
        "{stdout}"
    );
    assert!(
        stdout.contains("report of 4 runs in 2 configurations"),
        "{stdout}"
    );

    let rows = read_csv(&dir.path().join("summary.csv"));
    let (fedavg, median) = (&rows[0], &rows[1]);
    assert_eq!(
        (fedavg["configuration"].as_str(), fedavg["seeds"].as_str()),
        ("fedavg", "3")
    );
    // Final accuracies 0.80, 0.85, 0.95: mean 0.866667; deviations -0.0667, -0.0167, 0.0833,
    // squares summing to 0.011667, over n - 1 = 2: std sqrt(0.0058333) = 0.0763763; the 95%
    // half width t(0.975, 2) * std / sqrt(3) = 4.302653 * 0.0763763 / 1.7320508 = 0.1897296.
    assert_close(&fedavg["final_accuracy_mean"], 0.866_666_7);
    assert_close(&fedavg["final_accuracy_std"], 0.076_376_3);
    assert_close(
        &fedavg["final_accuracy_ci95_low"],
        0.866_666_7 - 0.189_729_6,
    );
    assert_close(
        &fedavg["final_accuracy_ci95_high"],
        0.866_666_7 + 0.189_729_6,
    );
    // Best accuracies 0.80, 0.90, 0.95.
    assert_close(&fedavg["best_accuracy_mean"], 0.883_333_3);
    // 0.85 is reached by seed 2 in round 2 (at 3.0 s) and seed 3 in round 3 (at 6.0 s); seed
    // 1 never reaches it.
    assert_eq!(fedavg["target_reached"], "2");
    assert_close(&fedavg["rounds_to_target_mean"], 2.5);
    assert_close(&fedavg["sim_seconds_to_target_mean"], 4.5);
    // Three rounds of 1000 bytes down; up 6000, 6000 and 6300.
    assert_close(&fedavg["server_bytes_down"], 3000.0);
    assert_close(&fedavg["server_bytes_up"], 6100.0);
    // Worst tenth at the last round 0.2, 0.3, 0.4.
    assert_close(&fedavg["client_accuracy_worst_10_mean"], 0.3);
    assert_close(&fedavg["client_accuracy_worst_10_std"], 0.1);
    assert_close(&fedavg["wall_seconds_mean"], 0.3);

    assert_eq!(
        (median["configuration"].as_str(), median["seeds"].as_str()),
        ("median", "1")
    );
    assert_close(&median["final_accuracy_mean"], 0.5);
    assert_close(&median["best_accuracy_mean"], 0.6);
    assert_eq!(
        median["final_accuracy_ci95_low"], "",
        "one seed has no interval"
    );
    assert_eq!(median["target_reached"], "0");
    assert_eq!(median["rounds_to_target_mean"], "");
    assert_eq!(
        median["client_accuracy_worst_10_mean"], "",
        "no client-side evaluation"
    );

    let markdown = fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(
        markdown.contains("| fedavg | 3 | 86.67 ± 7.64 [67.69, 105.64] | 88.33 ± "),
        "{markdown}"
    );
    let html = fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("<td>86.67 ± 7.64 [67.69, 105.64]</td>"));
    assert_eq!(
        html.matches("<svg").count(),
        6,
        "five curve charts (the clients' accuracy among them) and one label chart"
    );
}

/// Renders an SVG to pixels (without text, which needs fonts) and returns its size and how
/// many pixels are not white and how many are coloured rather than grey.
fn render(svg: &str) -> ((u32, u32), usize, usize) {
    let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).unwrap();
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    let (mut inked, mut coloured) = (0, 0);
    for pixel in pixmap.pixels() {
        let (r, g, b) = (pixel.red(), pixel.green(), pixel.blue());
        if r.min(g).min(b) < 240 {
            inked += 1;
        }
        if r.max(g).max(b) - r.min(g).min(b) > 60 {
            coloured += 1;
        }
    }
    ((size.width(), size.height()), inked, coloured)
}

#[test]
fn every_chart_renders_at_its_size_with_coloured_ink() {
    let dir = tempfile::tempdir().unwrap();
    write_sweep_folder(dir.path());
    // A chart of an earlier report that this one does not draw is removed.
    fs::create_dir(dir.path().join("plots")).unwrap();
    fs::write(dir.path().join("plots/labels-gone.svg"), "<svg/>").unwrap();
    let out = dir.path().to_str().unwrap();
    assert!(fedsim(&["report", out]).status.success());
    let plots = dir.path().join("plots");
    let mut names: Vec<String> = fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "accuracy-by-round.svg",
            "accuracy-by-server-bytes.svg",
            "accuracy-by-sim-time.svg",
            "client-accuracy-by-round.svg",
            "labels-iid-100-clients-split-seed-1.svg",
            "train-loss.svg"
        ]
    );
    for name in &names {
        let svg = fs::read_to_string(plots.join(name)).unwrap();
        let (size, inked, coloured) = render(&svg);
        assert_eq!(size, (960, 540), "{name}");
        let pixels = 960 * 540;
        // Axes, grid, lines and bands or bars: more than 1% of the chart, and not all grey.
        assert!(inked > pixels / 100, "{name}: {inked} inked pixels");
        assert!(coloured > 2_000, "{name}: {coloured} coloured pixels");
        assert!(
            inked < pixels * 9 / 10,
            "{name}: {inked} inked pixels, nearly all"
        );
    }
    // A blank chart fails the same check.
    let blank = r#"<svg xmlns="http://www.w3.org/2000/svg" width="960" height="540"><rect width="960" height="540" fill="white"/></svg>"#;
    assert_eq!(render(blank).1, 0);
}

#[test]
fn the_clients_accuracy_chart_is_drawn_only_where_runs_scored_their_clients() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Value> = (1..=3)
        .map(|round| record(round, 0.5, f64::from(round), 2000, None))
        .collect();
    write_run(
        &dir.path().join("fedavg_seed-1"),
        &config(&["federation.rounds=3"]),
        &records,
    );
    assert!(
        fedsim(&["report", dir.path().to_str().unwrap()])
            .status
            .success()
    );
    let plots = dir.path().join("plots");
    assert!(plots.join("accuracy-by-round.svg").exists());
    assert!(!plots.join("client-accuracy-by-round.svg").exists());
}

#[test]
fn partition_plot_draws_the_clients_labels() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("labels.svg");
    let output = fedsim(&[
        "partition",
        experiment("mnist-t1").to_str().unwrap(),
        "--set",
        r#"partition={"scheme":"dirichlet","alpha":0.1}"#,
        "--plot",
        chart.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    let (size, inked, coloured) = render(&fs::read_to_string(&chart).unwrap());
    assert_eq!(size, (960, 540));
    assert!(
        inked > 960 * 540 / 20 && coloured > 10_000,
        "{inked} {coloured}"
    );
}

#[test]
fn folders_without_finished_runs_or_with_bad_records_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let output = fedsim(&["report", empty.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("no finished run") && stderr.contains("empty"),
        "{stderr}"
    );

    let run = dir.path().join("run");
    write_run(
        &run,
        &config(&["federation.rounds=1"]),
        &[json!({"round": "one"})],
    );
    let output = fedsim(&["report", run.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("metrics.jsonl line 1: not a round record"),
        "{stderr}"
    );

    let output = fedsim(&["report", empty.to_str().unwrap(), "--target", "90"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("fraction in (0, 1]"), "{stderr}");
}

#[test]
fn records_out_of_order_repeated_or_out_of_range_are_refused_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&["federation.rounds=3"]);
    let refused = |name: &str, records: &[Value], expected: &str| {
        let run = dir.path().join(name);
        write_run(&run, &config, records);
        let output = fedsim(&["report", run.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(!run.join("report.html").exists(), "{name}");
    };
    let round = |r, accuracy| record(r, accuracy, f64::from(r), 2000, None);
    refused(
        "repeated",
        &[round(1, 0.5), round(2, 0.6), round(2, 0.6)],
        "metrics.jsonl line 3: is round 2; expected round 3",
    );
    refused(
        "shuffled",
        &[round(1, 0.5), round(3, 0.6), round(2, 0.6)],
        "metrics.jsonl line 2: is round 3; expected round 2",
    );
    refused(
        "too-accurate",
        &[round(1, 0.5), round(2, 2.8775), round(3, 0.6)],
        "line 2: test_accuracy is 2.8775; an accuracy is a fraction in [0, 1]",
    );
    let mut negative = round(1, 0.5);
    negative["test_loss"] = json!(-1.0);
    refused(
        "negative-loss",
        &[negative, round(2, 0.6), round(3, 0.7)],
        "line 1: test_loss is -1",
    );
}

#[test]
fn two_folders_of_one_run_count_as_one_sample_and_differing_twins_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let rounds = [
        record(1, 0.5, 1.0, 2000, None),
        record(2, 0.7, 2.0, 2000, None),
    ];
    let config_of = |seed: u32| config(&["federation.rounds=2", &format!("seed={seed}")]);
    for (name, seed) in [("a-seed-1", 1), ("a-seed-2", 2), ("b-seed-1", 1)] {
        let run = runs.join(name);
        write_run(&run, &config_of(seed), &rounds);
        fs::write(run.join("model.f32"), [seed as u8; 8]).unwrap();
    }
    let out = dir.path().join("report");
    let output = fedsim(&[
        "report",
        runs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("b-seed-1: the same configuration and seed as")
            && stdout.contains("counted once"),
        "{stdout}"
    );
    assert!(
        stdout.contains("report of 2 runs in 1 configurations"),
        "{stdout}"
    );
    let rows = read_csv(&out.join("summary.csv"));
    assert_eq!(rows.len(), 1);
    // A twin whose model differs is not the run its config says: refused.
    fs::write(runs.join("b-seed-1/model.f32"), [9u8; 8]).unwrap();
    let output = fedsim(&[
        "report",
        runs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("yet their models differ"), "{stderr}");
}

#[test]
fn an_evaluated_round_records_each_class_accuracy_consistent_with_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    common::run_ok(&experiment("mnist-t1"), &run, &["federation.rounds=1"]);
    let line = fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let record: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let per_class: Vec<f64> = record["test_class_accuracy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_f64().unwrap())
        .collect();
    // The MNIST test set's samples per digit.
    let samples = [
        980.0, 1135.0, 1032.0, 1010.0, 982.0, 892.0, 958.0, 1028.0, 974.0, 1009.0,
    ];
    let correct: f64 = per_class.iter().zip(samples).map(|(a, n)| a * n).sum();
    let total = record["test_accuracy"].as_f64().unwrap();
    assert!(
        (correct / 10_000.0 - total).abs() < 1e-9,
        "{per_class:?} vs {total}"
    );
    assert!(per_class.iter().any(|&a| a != total), "the classes differ");
}
