//! `fedsim sweep`: a grid of runs from one file, each in its own folder, every run checked
//! before the first starts, and a rerun that skips finished runs and resumes killed ones.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{experiment, fedsim, metrics_without_timing, model_bytes};

/// A sweep of two strategies and two seeds over the benchmark config, `rounds` rounds each.
fn write_sweep(dir: &Path, rounds: u32, median_set: &str) -> PathBuf {
    let base = experiment("mnist-t1");
    let text = format!(
        r#"{{
  "name": "tiny",
  "base": {base:?},
  "variants": [
    {{"name": "fedavg", "set": {{"strategy": {{"name": "fedavg"}}}}}},
    {{"name": "median", "set": {median_set}}}
  ],
  "grid": {{"seed": [1, 2], "federation.rounds": [{rounds}]}}
}}"#,
        base = base.to_str().unwrap()
    );
    let path = dir.join("sweep.json");
    fs::write(&path, text).unwrap();
    path
}

const MEDIAN: &str = r#"{"strategy": {"name": "median"}}"#;

fn sweep(file: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "sweep",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    args.extend(extra);
    fedsim(&args)
}

/// The run folders in a sweep folder (every folder but the report's `plots`).
fn folders(out: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.is_dir() && !path.ends_with("plots"))
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_sweep_runs_its_grid_in_named_folders_and_a_rerun_skips_finished_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_sweep(dir.path(), 2, MEDIAN);
    let out = dir.path().join("out");
    let first = sweep(&file, &out, &["--jobs", "2"]);
    assert!(first.status.success(), "{first:?}");
    assert_eq!(
        folders(&out),
        [
            "fedavg_rounds-2_seed-1",
            "fedavg_rounds-2_seed-2",
            "median_rounds-2_seed-1",
            "median_rounds-2_seed-2"
        ]
    );
    for name in folders(&out) {
        assert_eq!(metrics_without_timing(&out.join(&name)).len(), 2, "{name}");
    }
    // The sweep ends with its report: a row per strategy, the seeds aggregated.
    let table = fs::read_to_string(out.join("summary.csv")).unwrap();
    let labels: Vec<&str> = table
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(labels, ["fedavg", "median"], "{table}");
    assert!(
        table
            .lines()
            .skip(1)
            .all(|l| l.split(',').nth(1) == Some("2")),
        "{table}"
    );
    for file in ["summary.md", "report.html", "plots/accuracy-by-round.svg"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    // Each run is the experiment its overrides describe: the same bytes as `fedsim run`.
    let single = dir.path().join("single");
    common::run_ok(
        &experiment("mnist-t1"),
        &single,
        &[
            r#"strategy={"name":"median"}"#,
            "federation.rounds=2",
            "seed=2",
        ],
    );
    let swept = out.join("median_rounds-2_seed-2");
    assert_eq!(
        metrics_without_timing(&swept),
        metrics_without_timing(&single)
    );
    let again = sweep(&file, &out, &[]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{again:?}");
    assert!(
        stdout.contains("0 runs played, 4 finished before, 0 failed"),
        "{stdout}"
    );
    let dry = sweep(&file, &out, &["--dry-run"]);
    let listed = String::from_utf8_lossy(&dry.stdout);
    assert_eq!(listed.matches("(finished)").count(), 4, "{listed}");
}

#[test]
fn shards_running_at_once_play_every_run_exactly_once_and_report_merges_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_sweep(dir.path(), 2, MEDIAN);
    let out = dir.path().join("out");
    let shards: Vec<_> = (1..=3)
        .map(|index| {
            Command::new(env!("CARGO_BIN_EXE_fedsim"))
                .args(["sweep", file.to_str().unwrap(), "--out"])
                .arg(&out)
                .args(["--quiet", "--shard", &format!("{index}/3")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut played = Vec::new();
    for shard in shards {
        let output = shard.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{output:?}");
        assert!(stdout.contains("when every slice has finished"), "{stdout}");
        played.extend(
            stdout
                .lines()
                .filter(|line| line.contains("test accuracy"))
                .map(|line| {
                    line.split(": ")
                        .next()
                        .unwrap()
                        .split("] ")
                        .nth(1)
                        .unwrap()
                        .to_string()
                }),
        );
    }
    // Runs 1 and 4 fall to slice 1/3, 2 to 2/3, 3 to 3/3: no run twice, none lost.
    played.sort();
    assert_eq!(played, folders(&out));
    assert_eq!(played.len(), 4);
    assert!(!out.join("summary.csv").exists(), "a slice reported alone");
    let report = fedsim(&["report", out.to_str().unwrap()]);
    assert!(report.status.success(), "{report:?}");
    let table = fs::read_to_string(out.join("summary.csv")).unwrap();
    let rows: Vec<(&str, &str)> = table
        .lines()
        .skip(1)
        .map(|l| {
            let mut cells = l.split(',');
            (cells.next().unwrap(), cells.next().unwrap())
        })
        .collect();
    assert_eq!(rows, [("fedavg", "2"), ("median", "2")], "{table}");
    let invalid = sweep(&file, &out, &["--shard", "4/3"]);
    let stderr = String::from_utf8_lossy(&invalid.stderr);
    assert_eq!(invalid.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("expected I/N with 1 <= I <= N"), "{stderr}");
}

#[test]
fn a_killed_sweep_reruns_to_the_results_of_one_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_sweep(dir.path(), 12, MEDIAN);
    let reference = dir.path().join("reference");
    assert!(sweep(&file, &reference, &[]).status.success());
    let killed = dir.path().join("killed");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .args([
            "sweep",
            file.to_str().unwrap(),
            "--out",
            killed.to_str().unwrap(),
            "--quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it in the middle of its second run.
    let second = killed.join("fedavg_rounds-12_seed-2").join("metrics.jsonl");
    let started = Instant::now();
    while fs::read_to_string(&second).map_or(0, |m| m.lines().count()) < 3 {
        assert!(child.try_wait().unwrap().is_none(), "the sweep ended early");
        assert!(started.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let rerun = sweep(&file, &killed, &[]);
    let stdout = String::from_utf8_lossy(&rerun.stdout);
    assert!(rerun.status.success(), "{rerun:?}");
    assert!(
        stdout.contains("3 runs played, 1 finished before"),
        "{stdout}"
    );
    for name in folders(&reference) {
        let (a, b) = (killed.join(&name), reference.join(&name));
        assert_eq!(
            metrics_without_timing(&a),
            metrics_without_timing(&b),
            "{name}"
        );
        assert_eq!(model_bytes(&a), model_bytes(&b), "{name}");
    }
}

#[test]
fn a_sweep_whose_runs_changed_or_are_invalid_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_sweep(dir.path(), 2, MEDIAN);
    let out = dir.path().join("out");
    assert!(sweep(&file, &out, &[]).status.success());
    // The median variant now trains at another rate: its finished folders no longer match.
    let changed = write_sweep(
        dir.path(),
        2,
        r#"{"strategy": {"name": "median"}, "client.lr": 0.1}"#,
    );
    let refused = sweep(&changed, &out, &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("median_rounds-2_seed-1") && stderr.contains("client.lr"),
        "{stderr}"
    );
    // An axis that is not a field: every run is named, nothing is created.
    let bad = dir.path().join("bad.json");
    let text = fs::read_to_string(&file)
        .unwrap()
        .replace("federation.rounds", "federation.roundz");
    fs::write(&bad, text).unwrap();
    let fresh = dir.path().join("fresh");
    let refused = sweep(&bad, &fresh, &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("unknown field `roundz`").count(),
        4,
        "{stderr}"
    );
    assert!(!fresh.exists());
    // A folder of the same name that is not a run is left alone.
    let other = dir.path().join("other");
    fs::create_dir_all(other.join("fedavg_rounds-2_seed-1")).unwrap();
    fs::write(
        other.join("fedavg_rounds-2_seed-1").join("notes.txt"),
        "mine",
    )
    .unwrap();
    let refused = sweep(&file, &other, &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("fedsim did not write"), "{stderr}");
    assert!(
        other
            .join("fedavg_rounds-2_seed-1")
            .join("notes.txt")
            .exists()
    );
}

#[test]
fn a_sweep_with_failed_runs_reports_the_finished_ones_lists_the_failed_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    // Every client fails in round 2 of the median runs: they stop there, the FedAvg runs finish.
    let faults: Vec<String> = (0..100)
        .map(|client| format!(r#"{{"round": 2, "client": {client}, "kind": "error"}}"#))
        .collect();
    let failing = format!(
        r#"{{"strategy": {{"name": "median"}}, "faults": [{}]}}"#,
        faults.join(", ")
    );
    let file = write_sweep(dir.path(), 3, &failing);
    let out = dir.path().join("out");
    let played = sweep(&file, &out, &["--jobs", "2"]);
    let stdout = String::from_utf8_lossy(&played.stdout);
    let stderr = String::from_utf8_lossy(&played.stderr);
    assert_eq!(played.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stdout.contains("2 runs played, 0 finished before, 2 failed"),
        "{stdout}"
    );
    assert!(stderr.contains("injected failure"), "{stderr}");
    // The report holds the finished configuration only, and names each failed run with its
    // error and how far it got.
    let table = fs::read_to_string(out.join("summary.csv")).unwrap();
    let labels: Vec<&str> = table
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    // Named by its variant, as the sweep calls it.
    assert_eq!(labels, ["fedavg"], "{table}");
    let summary = fs::read_to_string(out.join("summary.md")).unwrap();
    let html = fs::read_to_string(out.join("report.html")).unwrap();
    for name in ["median_rounds-3_seed-1", "median_rounds-3_seed-2"] {
        let start = format!("{}: client ", out.join(name).display());
        let end = "failed in round 2 (client group 0): injected failure (after 1 of 3 rounds)";
        let listed = |text: &str, (before, after): (&str, &str)| {
            text.lines().any(|line| {
                line.strip_prefix(before)
                    .and_then(|rest| rest.strip_suffix(after))
                    .is_some_and(|item| item.starts_with(&start) && item.ends_with(end))
            })
        };
        assert!(listed(&summary, ("- ", "")), "{summary}");
        assert!(listed(&html, ("<li>", "</li>")), "{html}");
        assert!(out.join(name).join("failure.json").is_file());
    }
    assert!(summary.contains("## Failed runs"), "{summary}");
    assert!(html.contains("2 runs failed"), "{html}");
    // A rerun plays the failed runs again (they resume and fail alike) and reports the same.
    let again = sweep(&file, &out, &[]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("0 runs played, 2 finished before, 2 failed"),
        "{stdout}"
    );
    assert_eq!(fs::read_to_string(out.join("summary.md")).unwrap(), summary);
    // `fedsim report` of the folder finds the failures as the sweep did.
    let report = fedsim(&["report", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{report:?}");
    assert_eq!(stdout.matches("failed: ").count(), 2, "{stdout}");
}

#[test]
fn a_rerun_with_a_wider_grid_does_not_retrain_runs_it_holds_under_other_names() {
    let dir = tempfile::tempdir().unwrap();
    let base = experiment("breast-cancer");
    let file = dir.path().join("sweep.json");
    let write = |grid: &str| {
        let text = format!(
            r#"{{"name": "lr", "base": {:?}, "grid": {{{grid}, "federation.rounds": [4]}}}}"#,
            base.to_str().unwrap()
        );
        fs::write(&file, text).unwrap();
    };
    let out = dir.path().join("out");
    write(r#""seed": [1, 2]"#);
    let first = sweep(&file, &out, &[]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let before = folders(&out);
    assert_eq!(before.len(), 2, "{before:?}");
    // The base's own learning rate, 0.05, is what the first sweep ran.
    write(r#""seed": [1, 2], "client.lr": [0.05, 0.2]"#);
    let listed = sweep(&file, &out, &["--dry-run"]);
    let listing = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listing.matches("(finished, as ").count(), 2, "{listing}");
    assert_eq!(listing.matches("(new)").count(), 2, "{listing}");
    let second = sweep(&file, &out, &[]);
    let said = String::from_utf8_lossy(&second.stdout);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(said.contains("2 runs played, 2 finished before"), "{said}");
    assert!(
        said.contains("report of 4 runs in 2 configurations"),
        "{said}"
    );
    let after = folders(&out);
    assert_eq!(after.len(), 4, "{after:?}");
    assert!(before.iter().all(|name| after.contains(name)));
}

#[test]
fn a_set_changes_every_runs_base_and_the_grid_still_wins_on_its_axes() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_sweep(dir.path(), 2, MEDIAN);
    let out = dir.path().join("out");
    // The base's client.lr for every run; federation.rounds is the grid's, which wins.
    let sets = ["--set", "client.lr=0.02", "--set", "federation.rounds=7"];
    let listed = sweep(&file, &out, &[&sets[..], &["--dry-run"]].concat());
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.matches("client.lr=0.02").count(), 4, "{listed}");
    let played = sweep(&file, &out, &sets);
    assert!(played.status.success(), "{played:?}");
    let swept = out.join("fedavg_rounds-2_seed-1");
    assert_eq!(metrics_without_timing(&swept).len(), 2);
    let single = dir.path().join("single");
    common::run_ok(
        &experiment("mnist-t1"),
        &single,
        &["client.lr=0.02", "federation.rounds=2", "seed=1"],
    );
    assert_eq!(
        metrics_without_timing(&swept),
        metrics_without_timing(&single)
    );
    // Rerun without the --set, the folder's runs are of other settings: refused, untouched.
    let changed = sweep(&file, &out, &[]);
    assert_eq!(changed.status.code(), Some(2), "{changed:?}");
    let stderr = String::from_utf8_lossy(&changed.stderr);
    assert!(
        stderr.contains("client.lr") && stderr.contains("--set"),
        "{stderr}"
    );
    // A --set that is no PATH=VALUE is named, exit 2, before anything runs.
    let bad = sweep(&file, &dir.path().join("bad"), &["--set", "nonsense"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--set \"nonsense\""),
        "{bad:?}"
    );
    assert!(!dir.path().join("bad").exists());
}
