//! A property over kill moments: a run or a sweep killed at any moment of its life, by SIGKILL
//! or SIGTERM, and then continued as a user would (`run --resume`, or the same `run` again
//! where there is nothing to resume; the same `sweep` again), ends with the model of a run
//! that was never stopped, to the bit, and no folder ever needs deleting by hand.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{experiment, model_bytes};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Six short rounds of logistic regression on the breast-cancer table.
const SETS: &[&str] = &["federation.rounds=6", "eval.every=2", "checkpoint.every=2"];

/// Far longer than any of these runs or sweeps takes.
const PATIENCE: Duration = Duration::from_secs(120);

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn fedsim(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fedsim"));
    command
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

fn run_command(out: &Path) -> Command {
    let experiment = experiment("breast-cancer");
    let mut command = fedsim(&["run", path(&experiment), "--out", path(out), "--quiet"]);
    for set in SETS {
        command.args(["--set", set]);
    }
    command
}

/// A sweep file of two seeds of the same run, in `dir`.
fn sweep_file(dir: &Path) -> PathBuf {
    let file = dir.join("sweep.json");
    let sets: Vec<String> = SETS
        .iter()
        .map(|set| {
            let (field, value) = set.split_once('=').unwrap();
            format!("{field:?}: {value}")
        })
        .collect();
    let text = format!(
        r#"{{"name": "k", "base": {:?}, "variants": [{{"name": "v", "set": {{{}}}}}], "grid": {{"seed": [1, 2]}}}}"#,
        path(&experiment("breast-cancer")),
        sets.join(", ")
    );
    fs::write(&file, text).unwrap();
    file
}

fn sweep_command(file: &Path, out: &Path) -> Command {
    fedsim(&["sweep", path(file), "--out", path(out), "--quiet"])
}

fn finish(mut command: Command) -> Output {
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    output
}

/// What the uninterrupted run and sweep left, and how long each took, made once.
struct Reference {
    _dir: tempfile::TempDir,
    run: PathBuf,
    run_time: Duration,
    sweep_file: PathBuf,
    sweep: PathBuf,
    sweep_time: Duration,
}

fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let started = Instant::now();
        finish(run_command(&run));
        let run_time = started.elapsed();
        let sweep_file = sweep_file(dir.path());
        let sweep = dir.path().join("sweep");
        let started = Instant::now();
        finish(sweep_command(&sweep_file, &sweep));
        let sweep_time = started.elapsed();
        Reference {
            _dir: dir,
            run,
            run_time,
            sweep_file,
            sweep,
            sweep_time,
        }
    })
}

/// Starts `command`, and after `delay` sends it `signal` (unless it has ended by then).
fn kill_after(mut command: Command, delay: Duration, signal: i32) {
    let mut child: Child = command.spawn().unwrap();
    let deadline = Instant::now() + delay;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: sends a signal to the child process, which has not been reaped yet.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < PATIENCE,
            "the killed process did not end"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Continues the run in `out` as its user would: `--resume`; where the run had not written
/// what resuming needs, the same `run` command again.
fn continue_run(out: &Path) {
    let resumed = fedsim(&["run", "--resume", path(out), "--quiet"])
        .output()
        .unwrap();
    if resumed.status.success() {
        return;
    }
    let said = stderr(&resumed);
    assert_eq!(resumed.status.code(), Some(2), "{said}");
    assert!(
        [
            "no such folder",
            "start it again with: fedsim run",
            "start the run with: fedsim run"
        ]
        .iter()
        .any(|advice| said.contains(advice)),
        "a refusal that leaves the user stuck: {said}"
    );
    finish(run_command(out));
}

fn signal(sigkill: bool) -> i32 {
    if sigkill {
        libc::SIGKILL
    } else {
        libc::SIGTERM
    }
}

fn runner(cases: u32, seed: u8) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    // A fixed seed: CI tries the same kill moments every time.
    TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    )
}

#[test]
fn a_run_killed_at_any_moment_continues_to_the_uninterrupted_model() {
    let reference = reference();
    let expected = model_bytes(&reference.run);
    let scratch = tempfile::tempdir().unwrap();
    let span = reference.run_time.as_secs_f64() * 1.1;
    let case = std::cell::Cell::new(0);
    runner(300, 1)
        .run(&(0.0..span, any::<bool>()), |(delay, sigkill)| {
            case.set(case.get() + 1);
            let out = scratch.path().join(format!("run-{}", case.get()));
            kill_after(
                run_command(&out),
                Duration::from_secs_f64(delay),
                signal(sigkill),
            );
            continue_run(&out);
            prop_assert_eq!(
                model_bytes(&out),
                expected.clone(),
                "killed after {} s",
                delay
            );
            fs::remove_dir_all(&out).unwrap();
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_sweep_killed_at_any_moment_reruns_to_the_uninterrupted_models() {
    let reference = reference();
    let scratch = tempfile::tempdir().unwrap();
    let span = reference.sweep_time.as_secs_f64() * 1.1;
    let runs: Vec<PathBuf> = fs::read_dir(&reference.sweep)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|folder| folder.join("model.f32").exists())
        .collect();
    assert_eq!(runs.len(), 2);
    let case = std::cell::Cell::new(0);
    runner(100, 2)
        .run(&(0.0..span, any::<bool>()), |(delay, sigkill)| {
            case.set(case.get() + 1);
            let out = scratch.path().join(format!("sweep-{}", case.get()));
            let command = sweep_command(&reference.sweep_file, &out);
            kill_after(command, Duration::from_secs_f64(delay), signal(sigkill));
            finish(sweep_command(&reference.sweep_file, &out));
            for run in &runs {
                let name = run.file_name().unwrap();
                prop_assert_eq!(
                    model_bytes(&out.join(name)),
                    model_bytes(run),
                    "killed after {} s",
                    delay
                );
            }
            fs::remove_dir_all(&out).unwrap();
            Ok(())
        })
        .unwrap();
}
