//! Helpers shared by the end-to-end tests: the real binary, the shipped experiments, and
//! readers for a run folder.

#![allow(dead_code)] // each test file uses its own subset

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A shipped experiment file.
pub fn experiment(name: &str) -> PathBuf {
    root().join("experiments").join(format!("{name}.json"))
}

/// Writes `dir/sweep.json`: a sweep named `s` of the experiment file `base`, with `fields`
/// (JSON object members, such as `"grid": {"seed": [1, 2]}`) after its name and base.
pub fn write_sweep_file(dir: &Path, base: &Path, fields: &str) -> PathBuf {
    let path = dir.join("sweep.json");
    let text = format!(
        r#"{{"name": "s", "base": {:?}, {fields}}}"#,
        base.to_str().unwrap()
    );
    fs::write(&path, text).unwrap();
    path
}

/// Runs the `fedsim` binary with `args` and returns what it did.
pub fn fedsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .args(args)
        .output()
        .expect("the fedsim binary runs")
}

/// Runs the `fedsim` binary with `args`, asserts that it exits with `code` without a panic,
/// and returns what it wrote to stderr.
pub fn fails_with(args: &[&str], code: i32) -> String {
    let output = fedsim(args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// The arguments of `fedsim run EXPERIMENT --out OUT --quiet` with extra `--set`s.
fn run_args<'a>(experiment: &'a Path, out: &'a Path, sets: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        experiment.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    args
}

/// Runs `fedsim run EXPERIMENT --out OUT --quiet` with extra `--set`s and asserts it succeeds.
pub fn run_ok(experiment: &Path, out: &Path, sets: &[&str]) -> Output {
    let args = run_args(experiment, out, sets);
    let output = fedsim(&args);
    assert!(
        output.status.success(),
        "fedsim {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs `fedsim run EXPERIMENT --out OUT --quiet` with extra `--set`s, asserts it is refused as
/// bad input (exit 2, no panic) and returns what it wrote to stderr.
pub fn run_refused(experiment: &Path, out: &Path, sets: &[&str]) -> String {
    fails_with(&run_args(experiment, out, sets), 2)
}

/// Runs `fedsim run EXPERIMENT --out OUT --quiet` with extra `--set`s, killed as it writes the
/// file `FEDSIM_CRASH_AFTER` names (`crash_after`), and asserts it left no summary.
pub fn run_killed(experiment: &Path, out: &Path, sets: &[&str], crash_after: &str) {
    let killed = Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .args(run_args(experiment, out, sets))
        .env("FEDSIM_CRASH_AFTER", crash_after)
        .output()
        .expect("the fedsim binary runs");
    assert!(!killed.status.success(), "killed after {crash_after}");
    assert!(!out.join("summary.json").exists());
}

/// Resumes the run in `out` (`fedsim run --resume OUT --quiet`) and asserts it finishes.
pub fn resume_ok(out: &Path) {
    let resumed = fedsim(&["run", "--resume", out.to_str().unwrap(), "--quiet"]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
}

/// Each line of a run's `metrics.jsonl`, as JSON.
pub fn records(run: &Path) -> Vec<Value> {
    fs::read_to_string(run.join("metrics.jsonl"))
        .expect("metrics.jsonl exists")
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect()
}

/// The lines of a run's `metrics.jsonl` with the timing field removed: what must be identical
/// between reruns.
pub fn metrics_without_timing(run: &Path) -> Vec<String> {
    fs::read_to_string(run.join("metrics.jsonl"))
        .expect("metrics.jsonl exists")
        .lines()
        .map(|line| {
            let mut record: Value = serde_json::from_str(line).expect("each line is JSON");
            record.as_object_mut().unwrap().remove("wall_ms");
            record.to_string()
        })
        .collect()
}

/// A run's `summary.json`.
pub fn summary(run: &Path) -> Value {
    let text = fs::read_to_string(run.join("summary.json")).expect("summary.json exists");
    serde_json::from_str(&text).unwrap()
}

/// A run's `summary.json` without its measured times and memory (and where the clients' states
/// were kept, which depends on the order in which clients finished).
pub fn summary_without_timing(run: &Path) -> Value {
    let mut summary = summary(run);
    let fields = summary.as_object_mut().unwrap();
    fields.remove("wall_seconds");
    fields.remove("peak_resident_bytes");
    fields.remove("client_states");
    summary
}

/// The run in `run` ended with the same bytes as `reference`: the same rounds, summary and
/// final model, but for times.
pub fn assert_same_results(run: &Path, reference: &Path) {
    assert_eq!(
        metrics_without_timing(run),
        metrics_without_timing(reference)
    );
    assert_eq!(model_bytes(run), model_bytes(reference));
    assert_eq!(
        summary_without_timing(run),
        summary_without_timing(reference)
    );
}

/// The final model a run wrote, as raw bytes.
pub fn model_bytes(run: &Path) -> Vec<u8> {
    fs::read(run.join("model.f32")).expect("model.f32 exists")
}

/// CIFAR-10's six binary files in `dir`, `per_file` records each in the real format: a label
/// byte, then a 32x32 image's red, green and blue planes. Each class has its own brightness per
/// channel, with a pattern of the record on top.
pub fn write_cifar_files(dir: &Path, per_file: usize) {
    let names = [
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
    ];
    for (f, name) in names.iter().enumerate() {
        let mut bytes = Vec::new();
        for i in 0..per_file {
            let label = (i + f) % 10;
            bytes.push(label as u8);
            bytes.extend(
                (0..3 * 1024)
                    .map(|p| ((20 * label + 40 * (p / 1024) + (p * 7 + i * 13) % 31) % 256) as u8),
            );
        }
        fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
    }
}

/// The folder this test's build put its binaries in (`target/release`, or `target/debug`),
/// where `cargo test` also builds the examples (`examples/NAME`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<this test>
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}
