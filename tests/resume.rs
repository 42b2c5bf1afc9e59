//! A run survives being killed or stopped: `fedsim run --resume DIR` continues it from its
//! checkpoint and ends with the same bytes as a run that never stopped.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_same_results, experiment, fedsim, metrics_without_timing, run_ok};
use serde_json::Value;

/// Rounds long enough to stop one in the middle (about a quarter of a second each on 2 cores),
/// and enough of them that a machine several times faster is still far from the end when the
/// tests stop it after round 2 or 3.
const SETTINGS: &[&str] = &["federation.rounds=12", "client.epochs=4"];

/// Far longer than a run of `SETTINGS` takes.
const PATIENCE: Duration = Duration::from_secs(120);

fn start(out: &Path, extra: &[&str]) -> Child {
    let mut args = vec![
        "run".to_string(),
        experiment("mnist-t1").to_str().unwrap().to_string(),
        "--out".to_string(),
        out.to_str().unwrap().to_string(),
        "--quiet".to_string(),
    ];
    for set in SETTINGS.iter().chain(extra) {
        args.extend(["--set".to_string(), set.to_string()]);
    }
    Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the run has finished `rounds` rounds, then a little longer, so that it is in
/// the middle of the next.
fn wait_for_rounds(run: &mut Child, out: &Path, rounds: usize) {
    let started = Instant::now();
    loop {
        let written = fs::read_to_string(out.join("metrics.jsonl")).unwrap_or_default();
        if written.lines().count() >= rounds {
            std::thread::sleep(Duration::from_millis(100));
            return;
        }
        assert!(run.try_wait().unwrap().is_none(), "the run ended early");
        assert!(started.elapsed() < PATIENCE, "no round {rounds} in time");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait(mut run: Child) -> (Option<i32>, String) {
    let started = Instant::now();
    while run.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < PATIENCE, "the run did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = run.wait().unwrap();
    let stderr = std::io::read_to_string(run.stderr.take().unwrap()).unwrap();
    (status.code(), stderr)
}

fn resume(out: &Path) -> Output {
    fedsim(&["run", "--resume", out.to_str().unwrap(), "--quiet"])
}

/// A short run of the benchmark config that finished, in a temporary folder (kept while the
/// returned guard lives).
fn finished_run(sets: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    run_ok(&experiment("mnist-t1"), &out, sets);
    (dir, out)
}

/// Resumes `out`, expecting a refusal as bad input; returns what fedsim said.
fn refused_resume(out: &Path) -> String {
    let output = resume(out);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    stderr
}

fn uninterrupted(dir: &Path, extra: &[&str]) -> PathBuf {
    let reference = dir.join("reference");
    let sets: Vec<&str> = SETTINGS.iter().chain(extra).copied().collect();
    run_ok(&experiment("mnist-t1"), &reference, &sets);
    reference
}

#[test]
fn a_run_killed_in_the_middle_of_a_round_resumes_to_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints every second round, so the resumed run replays a round it had finished.
    let extra = ["checkpoint.every=2"];
    let killed = dir.path().join("killed");
    let mut run = start(&killed, &extra);
    wait_for_rounds(&mut run, &killed, 3);
    run.kill().unwrap(); // SIGKILL: no chance to clean up.
    run.wait().unwrap();
    // Lines, not records: the kill may have cut the last line short.
    let written = fs::read_to_string(killed.join("metrics.jsonl")).unwrap();
    let finished = written.lines().count();
    assert!(
        (3..12).contains(&finished),
        "killed after {finished} rounds"
    );
    let output = resume(&killed);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    // From the last checkpoint: an even round, at most two rounds before the kill.
    let checkpoint: usize = stdout
        .split("continuing after round ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(checkpoint % 2, 0, "{stdout}");
    assert!((finished.saturating_sub(2)..=finished).contains(&checkpoint));
    assert_same_results(&killed, &uninterrupted(dir.path(), &extra));
    let manifest = fs::read_to_string(killed.join("manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&manifest).unwrap();
    let resumed = manifest["resumed"].as_array().unwrap();
    assert_eq!(resumed.len(), 1, "{manifest}");
    assert_eq!(resumed[0]["after_round"], checkpoint);
    assert_eq!(resumed[0]["command_line"][2], "--resume");
}

#[test]
fn ctrl_c_and_sigterm_stop_promptly_with_a_resume_command_and_resume_to_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    let reference = uninterrupted(dir.path(), &[]);
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        let stopped = dir.path().join(format!("stopped-{signal}"));
        let mut run = start(&stopped, &[]);
        wait_for_rounds(&mut run, &stopped, 2);
        let sent = Instant::now();
        let kill = Command::new("kill")
            .args([format!("-{signal}"), run.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let (status, stderr) = wait(run);
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "{signal}: slow stop"
        );
        assert_eq!(status, Some(code), "{signal}: {stderr}");
        let command = format!("fedsim run --resume {}", stopped.display());
        assert!(stderr.contains(&command), "{signal}: {stderr}");
        assert!(metrics_without_timing(&stopped).len() < 12, "{signal}");
        let output = resume(&stopped);
        assert!(output.status.success(), "{signal}: {output:?}");
        assert_same_results(&stopped, &reference);
    }
}

#[test]
fn resuming_a_finished_run_has_nothing_to_do() {
    let (_dir, out) = finished_run(&["federation.rounds=2"]);
    let before = fs::read(out.join("metrics.jsonl")).unwrap();
    let output = resume(&out);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("nothing to do"), "{stdout}");
    assert_eq!(fs::read(out.join("metrics.jsonl")).unwrap(), before);
}

#[test]
fn resuming_a_run_whose_config_was_edited_is_refused_naming_the_field() {
    let (_dir, out) = finished_run(&["federation.rounds=1"]);
    let path = out.join("config.json");
    let mut config: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    config["federation"]["rounds"] = 3.into();
    config["client"]["lr"] = 0.1.into();
    fs::write(&path, config.to_string()).unwrap();
    let stderr = refused_resume(&out);
    assert!(stderr.contains("client.lr is 0.1, was 0.05"), "{stderr}");
    assert!(stderr.contains("federation.rounds is 3, was 1"), "{stderr}");
}

#[test]
fn a_folder_without_a_run_cannot_be_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = refused_resume(dir.path());
    assert!(stderr.contains("cannot resume"), "{stderr}");
    assert!(stderr.contains("the folder is empty"), "{stderr}");
    fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let stderr = refused_resume(dir.path());
    assert!(
        stderr.contains("fedsim did not write (notes.txt"),
        "{stderr}"
    );
    assert!(!dir.path().join(".fedsim").exists());
}

#[test]
fn a_damaged_checkpoint_is_reported_not_trusted() {
    let (_dir, out) = finished_run(&["federation.rounds=1"]);
    let path = out.join("checkpoint.fedsim");
    let mut bytes = fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&path, bytes).unwrap();
    let stderr = refused_resume(&out);
    assert!(stderr.contains("damaged"), "{stderr}");
}

#[test]
fn a_run_whose_data_files_changed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("mnist");
    fs::create_dir(&data).unwrap();
    for file in fs::read_dir(common::root().join("datasets/mnist")).unwrap() {
        let file = file.unwrap().path();
        if file.extension().is_some_and(|e| e == "gz") {
            fs::copy(&file, data.join(file.file_name().unwrap())).unwrap();
        }
    }
    let out = dir.path().join("run");
    let data_dir = format!("data.dir={}", data.display());
    run_ok(
        &experiment("mnist-t1"),
        &out,
        &["federation.rounds=1", &data_dir],
    );
    // One test pixel changes; the labels, and so the partition, stay the same.
    let images = data.join("t10k-images-idx3-ubyte.gz");
    let mut raw = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(fs::File::open(&images).unwrap()),
        &mut raw,
    )
    .unwrap();
    raw[1000] ^= 0xff;
    fs::remove_file(&images).unwrap();
    fs::write(data.join("t10k-images-idx3-ubyte"), raw).unwrap();
    let stderr = refused_resume(&out);
    assert!(stderr.contains("data files differ"), "{stderr}");
}

#[test]
fn a_second_ctrl_c_quits_and_leaves_the_folder_resumable() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut run = start(&out, &[]);
    wait_for_rounds(&mut run, &out, 2);
    for _ in 0..2 {
        let kill = Command::new("kill")
            .args(["-INT", &run.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
    }
    let (status, stderr) = wait(run);
    assert_eq!(status, Some(130), "{stderr}");
    let output = resume(&out);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(metrics_without_timing(&out).len(), 12);
}

#[test]
fn stateful_strategies_resume_with_their_server_and_client_state() {
    let dir = tempfile::tempdir().unwrap();
    // Server state (FedAdam's moments), and server plus client state (SCAFFOLD, FedDyn).
    for name in ["fedadam", "scaffold", "feddyn"] {
        let strategy = format!(r#"strategy={{"name":"{name}"}}"#);
        let extra = [strategy.as_str()];
        let killed = dir.path().join(format!("killed-{name}"));
        let mut run = start(&killed, &extra);
        wait_for_rounds(&mut run, &killed, 3);
        run.kill().unwrap();
        run.wait().unwrap();
        let output = resume(&killed);
        assert!(output.status.success(), "{name}: {output:?}");
        let reference = uninterrupted(&dir.path().join(name), &extra);
        assert_same_results(&killed, &reference);
    }
}
