//! The folders fedsim writes: never a user's own, never by two processes at once, and never
//! left in a state that needs deleting by hand, wherever a run or sweep was killed.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{experiment, fails_with, fedsim, model_bytes, run_ok, write_sweep_file};

/// A run of a few seconds' work at most: the breast-cancer table, logistic regression.
const QUICK: &[&str] = &["federation.rounds=6", "eval.every=2"];

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn run_args<'a>(out: &'a Path, sets: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--out", path(out), "--quiet"];
    for set in sets {
        args.extend(["--set", set]);
    }
    args
}

/// `fedsim run breast-cancer.json --out OUT` with `sets`, its environment given `env`.
fn run_with_env(out: &Path, sets: &[&str], env: &[(&str, &str)]) -> Output {
    let experiment = experiment("breast-cancer");
    let mut args = run_args(out, sets);
    args.insert(1, path(&experiment));
    Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn resume(out: &Path) -> Output {
    fedsim(&["run", "--resume", path(out), "--quiet"])
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The uninterrupted run of `sets`, in `dir/reference`.
fn reference(dir: &Path, sets: &[&str]) -> PathBuf {
    let out = dir.join("reference");
    run_ok(&experiment("breast-cancer"), &out, sets);
    out
}

#[test]
fn run_out_never_overwrites_a_users_files() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "config.json",
        "summary.json",
        "model.f32",
        "partition.json",
        "manifest.json",
        "checkpoint.fedsim",
        "metrics.jsonl",
        "notes.txt",
    ] {
        let users = dir.path().join(name.replace('.', "_"));
        fs::create_dir(&users).unwrap();
        fs::write(users.join(name), "precious").unwrap();
        let output = run_with_env(&users, QUICK, &[]);
        let said = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{name}: {said}");
        assert!(
            said.contains("fedsim did not write") && said.contains(name),
            "{said}"
        );
        let entries = fs::read_dir(&users).unwrap().count();
        assert_eq!(entries, 1, "{name}: fedsim wrote beside the user's file");
        assert_eq!(fs::read_to_string(users.join(name)).unwrap(), "precious");
    }
    // An empty folder, and one fedsim made, are fedsim's to write.
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    run_ok(&experiment("breast-cancer"), &empty, QUICK);
}

#[test]
fn out_naming_a_file_is_refused_as_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("results.txt");
    fs::write(&file, "mine").unwrap();
    let output = run_with_env(&file, QUICK, &[]);
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("is not a folder"), "{said}");
    assert!(!said.contains("os error"), "{said}");
    assert_eq!(fs::read_to_string(&file).unwrap(), "mine");
}

#[test]
fn sweep_and_report_out_never_write_into_a_users_folder() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    fs::create_dir(&users).unwrap();
    fs::write(users.join("report.html"), "mine").unwrap();
    let grid = r#""grid": {"seed": [1]}"#;
    let sweep = write_sweep_file(dir.path(), &experiment("breast-cancer"), grid);
    for args in [
        vec!["sweep", path(&sweep), "--out", path(&users), "--quiet"],
        vec!["sweep", path(&sweep), "--out", path(&users), "--dry-run"],
    ] {
        let said = fails_with(&args, 2);
        assert!(said.contains("fedsim did not write (report.html"), "{said}");
    }
    let run = dir.path().join("run");
    run_ok(&experiment("breast-cancer"), &run, QUICK);
    let said = fails_with(&["report", path(&run), "--out", path(&users)], 2);
    assert!(said.contains("fedsim did not write"), "{said}");
    assert_eq!(
        fs::read_to_string(users.join("report.html")).unwrap(),
        "mine"
    );
    assert_eq!(fs::read_dir(&users).unwrap().count(), 1);
    // A run's own folder takes its report.
    let reported = fedsim(&["report", path(&run)]);
    assert!(reported.status.success(), "{}", stderr(&reported));
    assert!(run.join("report.html").exists());
    let resumed = resume(&run);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
}

/// Kills a run right after it writes `file`, then continues it as a user would: `--resume`,
/// or when the run had not written its settings yet, the same `run` again.
fn killed_after(dir: &Path, file: &str, continue_with_run: bool) -> PathBuf {
    let out = dir.join(format!("killed-after-{file}"));
    let killed = run_with_env(&out, QUICK, &[("FEDSIM_CRASH_AFTER", file)]);
    assert_eq!(
        killed.status.code(),
        None,
        "{file}: not killed: {}",
        stderr(&killed)
    );
    assert!(!out.join("checkpoint.fedsim").exists() || file == "checkpoint.fedsim");
    let continued = match continue_with_run {
        true => run_with_env(&out, QUICK, &[]),
        false => resume(&out),
    };
    assert!(continued.status.success(), "{file}: {}", stderr(&continued));
    out
}

#[test]
fn a_run_killed_before_its_first_checkpoint_starts_again_from_round_0() {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference(dir.path(), QUICK);
    for file in ["config.json", "partition.json", "manifest.json"] {
        for continue_with_run in [false, true] {
            let out = killed_after(dir.path(), file, continue_with_run);
            assert_eq!(model_bytes(&out), model_bytes(&reference), "{file}");
            fs::remove_dir_all(&out).unwrap();
        }
    }
    // Killed before it wrote its settings, a run has nothing to resume from and says how to
    // start it again; doing so needs no folder deleted.
    let out = dir.path().join("before-config");
    let killed = run_with_env(&out, QUICK, &[("FEDSIM_CRASH_AFTER", ".fedsim")]);
    assert_eq!(killed.status.code(), None);
    let said = stderr(&resume(&out));
    assert!(said.contains("start it again with: fedsim run"), "{said}");
    let again = run_with_env(&out, QUICK, &[]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(model_bytes(&out), model_bytes(&reference));
}

#[test]
fn a_stale_partial_checkpoint_is_removed_when_the_run_continues() {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference(dir.path(), QUICK);
    for file in ["config.json", "checkpoint.fedsim"] {
        let out = dir.path().join(format!("partial-{file}"));
        let killed = run_with_env(&out, QUICK, &[("FEDSIM_CRASH_AFTER", file)]);
        assert_eq!(killed.status.code(), None);
        // What a disk that filled while the checkpoint was written leaves.
        fs::write(out.join(".checkpoint.fedsim.partial"), [0u8; 7]).unwrap();
        let resumed = resume(&out);
        assert!(resumed.status.success(), "{}", stderr(&resumed));
        assert!(!out.join(".checkpoint.fedsim.partial").exists());
        assert_eq!(model_bytes(&out), model_bytes(&reference));
    }
}

#[test]
fn a_sweep_killed_before_a_runs_first_checkpoint_can_be_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let grid = r#""grid": {"seed": [1, 2], "federation.rounds": [4]}"#;
    let sweep = write_sweep_file(dir.path(), &experiment("breast-cancer"), grid);
    let sweep_into = |out: &Path, extra: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_fedsim"))
            .args(["sweep", path(&sweep), "--out", path(out), "--quiet"])
            .args(extra)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let reference = dir.path().join("reference");
    let played = sweep_into(&reference, &[], &[]);
    assert!(played.status.success(), "{}", stderr(&played));
    let out = dir.path().join("killed");
    let killed = sweep_into(&out, &[], &[("FEDSIM_CRASH_AFTER", "config.json")]);
    assert_eq!(killed.status.code(), None, "{}", stderr(&killed));
    let listed = sweep_into(&out, &["--dry-run"], &[]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(String::from_utf8_lossy(&listed.stdout).contains("(new)"));
    let rerun = sweep_into(&out, &[], &[]);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    let mut compared = 0;
    for entry in fs::read_dir(&reference).unwrap() {
        let folder = entry.unwrap().path();
        if folder.join("model.f32").exists() {
            let name = folder.file_name().unwrap();
            assert_eq!(
                model_bytes(&out.join(name)),
                model_bytes(&folder),
                "{name:?}"
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 2);
}

#[test]
fn a_folder_being_written_is_refused_to_a_second_process_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Long enough to be caught running: 12 rounds of 4 epochs of the MNIST MLP.
    let mut running = Command::new(env!("CARGO_BIN_EXE_fedsim"))
        .args([
            "run",
            path(&experiment("mnist-t1")),
            "--out",
            path(&out),
            "--quiet",
        ])
        .args(["--set", "federation.rounds=12", "--set", "client.epochs=4"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !out.join("checkpoint.fedsim").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no checkpoint"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = resume(&out);
    let said = stderr(&second);
    let finished_first = running.try_wait().unwrap().is_some();
    running.kill().unwrap();
    running.wait().unwrap();
    assert!(
        !finished_first,
        "the first run ended before the second was tried"
    );
    assert_eq!(second.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("another fedsim process (pid {})", running.id())),
        "{said}"
    );
    // Once the first has ended, the folder is free: the run continues.
    let resumed = fedsim(&["run", "--resume", path(&out), "--quiet"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
}

#[test]
fn an_edited_or_deleted_partition_is_written_again_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference(dir.path(), QUICK);
    let expected = fs::read(reference.join("partition.json")).unwrap();
    for edit in ["edit", "delete"] {
        let out = dir.path().join(edit);
        let killed = run_with_env(&out, QUICK, &[("FEDSIM_CRASH_AFTER", "checkpoint.fedsim")]);
        assert_eq!(killed.status.code(), None);
        match edit {
            "edit" => fs::write(out.join("partition.json"), r#"{"clients": [[0]]}"#).unwrap(),
            _ => fs::remove_file(out.join("partition.json")).unwrap(),
        }
        let resumed = resume(&out);
        let said = stderr(&resumed);
        assert!(resumed.status.success(), "{said}");
        assert!(
            said.contains("written again from the run's own split"),
            "{said}"
        );
        assert_eq!(fs::read(out.join("partition.json")).unwrap(), expected);
        assert_eq!(model_bytes(&out), model_bytes(&reference));
    }
}
