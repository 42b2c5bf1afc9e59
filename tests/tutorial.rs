//! The tutorial (`experiments/tutorial/`) and the shipped sweeps cannot rot: every sweep runs
//! for one round and writes its report, and every command the tutorial's README shows parses
//! and names files that exist, as do the charts it shows.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use clap::Parser;
use common::{fedsim, root};
use fedsim::cli::{Cli, Command};
use serde_json::{Value, json};

/// The tutorial's steps and the shipped sweeps.
fn sweep_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["experiments/tutorial", "experiments/sweeps"] {
        for entry in fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".json") && name != "base.json" {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The sweep file at `path` cut to one round per run, and to one local epoch where neither the
/// sweep nor its base sets the local work otherwise, and rewritten to run from `dir`: its
/// base's path made absolute (an inline base uses the built-in data set).
fn one_round_copy(path: &Path, dir: &Path) -> PathBuf {
    let text = fs::read_to_string(path).unwrap();
    let mut sweep: Value = serde_json::from_str(&text).unwrap();
    let folder = path.parent().unwrap();
    let mut base_client = sweep["base"]["client"].clone();
    if let Value::String(base) = &mut sweep["base"] {
        *base = folder.join(&*base).to_string_lossy().into_owned();
        let base: Value = serde_json::from_str(&fs::read_to_string(&*base).unwrap()).unwrap();
        base_client = base["client"].clone();
    }
    if sweep.get("grid").is_none() {
        sweep["grid"] = json!({});
    }
    sweep["grid"]["federation.rounds"] = json!([1]);
    if !text.contains("epochs") && !text.contains("work") && base_client.get("work").is_none() {
        sweep["grid"]["client.epochs"] = json!([1]);
    }
    let copy = dir.join(path.file_name().unwrap());
    fs::write(&copy, sweep.to_string()).unwrap();
    copy
}

#[test]
fn every_tutorial_step_and_shipped_sweep_runs_for_a_round_and_reports() {
    let files = sweep_files();
    assert!(files.len() >= 8, "{files:?}");
    let dir = tempfile::tempdir().unwrap();
    for file in files {
        let copy = one_round_copy(&file, dir.path());
        let out = dir.path().join(file.file_stem().unwrap());
        let args = [
            "sweep",
            copy.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        let output = fedsim(&[&args[..], &["--quiet", "--jobs", "2"]].concat());
        assert!(
            output.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(out.join("report.html").is_file(), "{}", file.display());
    }
}

/// The commands in the README's shell blocks, without the `cargo run --release --` that
/// starts them.
fn readme_commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_shell = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_shell = line == "```sh";
            continue;
        }
        if in_shell && let Some(command) = line.strip_prefix("cargo run --release -- ") {
            commands.push(command.to_string());
        }
    }
    commands
}

#[test]
fn the_tutorial_readme_commands_parse_and_name_files_that_exist() {
    let readme = fs::read_to_string(root().join("experiments/tutorial/README.md")).unwrap();
    let commands = readme_commands(&readme);
    assert!(commands.len() >= 9, "{commands:?}");
    let mut sweeps = Vec::new();
    for command in &commands {
        // The README's commands quote only whole words, with single quotes.
        let words = command.split_whitespace().map(|w| w.trim_matches('\''));
        let words = std::iter::once("fedsim").chain(words);
        let cli = Cli::try_parse_from(words).unwrap_or_else(|e| panic!("{command}: {e}"));
        match cli.command {
            Command::Sweep(args) => {
                assert!(root().join(&args.sweep).is_file(), "{command}");
                sweeps.push(args.sweep);
            }
            Command::Run(args) => {
                let experiment = args.experiment.unwrap();
                assert!(root().join(experiment).is_file(), "{command}");
            }
            Command::Partition { experiment, .. } => {
                assert!(root().join(&experiment.experiment).is_file(), "{command}");
            }
            Command::Report(_)
            | Command::Strategies
            | Command::Models
            | Command::Datasets
            | Command::Schemes
            | Command::Data(_) => {}
        }
    }
    // Every step is shown.
    let steps: Vec<PathBuf> = sweep_files()
        .into_iter()
        .filter(|f| f.starts_with(root().join("experiments/tutorial")))
        .map(|f| f.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    for step in &steps {
        assert!(sweeps.contains(step), "the README runs {}", step.display());
    }
    // Every chart it shows is committed.
    for (i, _) in readme.match_indices("](plots/") {
        let target = &readme[i + 2..];
        let end = target.find(')').unwrap();
        let chart = root().join("experiments/tutorial").join(&target[..end]);
        assert!(chart.is_file(), "{}", chart.display());
    }
}
