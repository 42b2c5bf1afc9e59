//! The tree over MPI (the `mpi` feature): three ranks on this machine under `mpirun` give the
//! bytes of the run in one process, in every topology and with clients that keep a state; a
//! killed rank ends the whole run within seconds, naming the rank and its tiers, and the run
//! resumes over MPI. An asynchronous run gives the bytes of one process too.
#![cfg(feature = "mpi")]

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_same_results, experiment, run_ok};
use serde_json::Value;

/// The topologies whose runs must not change over MPI, as `--set`s.
const TOPOLOGIES: [(&str, &str); 3] = [
    ("flat", r#"topology={"kind":"flat"}"#),
    (
        "relay",
        r#"topology={"kind":"hierarchical","schedulers":2,"mode":"relay"}"#,
    ),
    (
        "aggregate",
        r#"topology={"kind":"hierarchical","schedulers":2,"mode":"aggregate","edge_rounds":2}"#,
    ),
];

/// `mpirun -n RANKS fedsim ARGS` on this machine: more ranks than cores allowed, and as root
/// where the test runs as root (CI containers do).
fn mpirun<S: AsRef<std::ffi::OsStr>>(ranks: usize, args: &[S]) -> Command {
    let mut command = Command::new("mpirun");
    command
        .args(["--oversubscribe", "-n", &ranks.to_string()])
        .arg(env!("CARGO_BIN_EXE_fedsim"))
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    command
}

/// `run` of the benchmark experiment into `out`, with `sets`.
fn run_args(out: &Path, sets: &[&str]) -> Vec<String> {
    let mut args = vec![
        "run".to_string(),
        experiment("mnist-t1").to_string_lossy().into_owned(),
        "--out".to_string(),
        out.to_string_lossy().into_owned(),
        "--quiet".to_string(),
    ];
    for set in sets {
        args.extend(["--set".to_string(), set.to_string()]);
    }
    args
}

/// Runs the benchmark experiment over `ranks` ranks into `out`, and asserts it succeeds.
fn mpi_run(ranks: usize, out: &Path, sets: &[&str]) -> Output {
    let output = mpirun(ranks, &run_args(out, sets)).output().unwrap();
    assert!(
        output.status.success(),
        "mpirun failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

const SCAFFOLD: &str = r#"strategy={"name":"scaffold"}"#;
const FEDDYN: &str = r#"strategy={"name":"feddyn"}"#;
const FEDPER: &str = r#"strategy={"name":"fedper"}"#;
const LG_FEDAVG: &str = r#"strategy={"name":"lg_fedavg"}"#;
const DITTO: &str = r#"strategy={"name":"ditto"}"#;
const APFL: &str = r#"strategy={"name":"apfl","adaptive":true}"#;
const FEDREP: &str = r#"strategy={"name":"fedrep"}"#;

/// Clients 0 to 29, under scheduler 0, sit 1 s away and miss a 1.5 s deadline; the others,
/// 10 ms away, train 600 samples in 0.6 s and make it.
const DEADLINE: [&str; 2] = [
    r#"availability={"deadline_s":1.5}"#,
    r#"network={"client_link":{"latency_ms":10},"client_overrides":[{"clients":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29],"latency_ms":1000}],"compute":{"kind":"fixed","samples_per_second":1000}}"#,
];

#[test]
fn three_ranks_give_the_bytes_of_one_process_in_every_topology() {
    let dir = tempfile::tempdir().unwrap();
    let [flat, relay, aggregate] = TOPOLOGIES.map(|(_, topology)| topology);
    let aggregate_once = r#"topology={"kind":"hierarchical","schedulers":2,"mode":"aggregate"}"#;
    // SCAFFOLD's and FedDyn's clients keep a state, which travels between the ranks with
    // their messages, also when they are left out of a round.
    // Power-of-Choice's probes, CFL's clients sent models of their own once its cluster
    // splits (round 2) and IFCA's clients choosing their cluster cross the ranks as well.
    // Spilled past a budget of one state, SCAFFOLD's states still travel: rank 0 spills into
    // the run folder, the others into folders of their own.
    // FedPer's and LG-FedAvg's clients keep personal layers in their states, which travel the
    // same way, and the links carry only the shared layers (through aggregating schedulers too);
    // Ditto's keep a whole personal model, trained on the rank that trains the client; APFL's
    // a personal model and its mixing weight, which their own loop trains beside the update;
    // FedRep's a head, under aggregating schedulers.
    let cases: [(&str, Vec<&str>); 15] = [
        ("flat", vec![flat]),
        ("relay", vec![relay]),
        ("aggregate", vec![aggregate]),
        ("flat-scaffold", vec![flat, SCAFFOLD]),
        (
            "relay-scaffold-spilled",
            vec![relay, SCAFFOLD, "federation.client_state_memory_mb=1"],
        ),
        (
            "relay-fedper",
            vec![relay, FEDPER, "eval.client_test_fraction=0.2"],
        ),
        (
            "aggregate-lg-fedavg",
            vec![aggregate, LG_FEDAVG, "eval.client_test_fraction=0.2"],
        ),
        (
            "flat-ditto",
            vec![flat, DITTO, "eval.client_test_fraction=0.2"],
        ),
        (
            "relay-apfl",
            vec![relay, APFL, "eval.client_test_fraction=0.2"],
        ),
        (
            "aggregate-fedrep",
            vec![aggregate, FEDREP, "eval.client_test_fraction=0.2"],
        ),
        (
            "relay-feddyn-dropout",
            vec![relay, FEDDYN, "availability.dropout=0.3"],
        ),
        (
            "aggregate-scaffold-deadline",
            [vec![aggregate_once, SCAFFOLD], DEADLINE.to_vec()].concat(),
        ),
        (
            "aggregate-power-of-choice",
            vec![aggregate, r#"strategy={"name":"power_of_choice","d":20}"#],
        ),
        (
            "relay-cfl",
            vec![
                relay,
                r#"strategy={"name":"cfl","eps_1":1e9,"eps_2":1e-9,"warmup":1}"#,
            ],
        ),
        (
            "flat-ifca",
            vec![flat, r#"strategy={"name":"ifca","clusters":3}"#],
        ),
    ];
    for (name, mut sets) in cases {
        sets.push("federation.rounds=3");
        let single = dir.path().join(format!("{name}-single"));
        run_ok(&experiment("mnist-t1"), &single, &sets);
        let spread = dir.path().join(format!("{name}-mpi"));
        let output = mpi_run(3, &spread, &sets);
        assert_same_results(&spread, &single);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("rank 0 runs the server"), "{stdout}");
        assert!(stdout.contains("rank 2 runs"), "{stdout}");
        // Only rank 0 writes; the real traffic lies beside the simulated.
        let record = read_json(&spread.join("mpi.json"));
        assert_eq!(record["ranks"], 3, "{record}");
        let (real, simulated) = (
            &record["traffic"][0],
            &common::summary(&single)["traffic"][0],
        );
        assert_eq!(real["tier"], "server");
        // Every message crosses as one frame (and each link's end as one more), its payload
        // as the simulated message has it, its header in a different but similar size; with
        // clients' states, updates also carry those, which a real client keeps.
        let with_states = [SCAFFOLD, FEDDYN, FEDPER, LG_FEDAVG, DITTO, APFL, FEDREP]
            .iter()
            .any(|keeping| sets.contains(keeping));
        for direction in ["down", "up"] {
            let count = |traffic: &Value, what: &str| {
                traffic[format!("{what}_{direction}")].as_u64().unwrap()
            };
            let frames = count(real, "messages");
            assert!(frames >= count(simulated, "messages"), "{name}: {record}");
            let (real_bytes, simulated_bytes) = (count(real, "bytes"), count(simulated, "bytes"));
            let carries_states = with_states && direction == "up";
            assert!(
                real_bytes + 64 * frames >= simulated_bytes
                    && (carries_states || real_bytes <= simulated_bytes + 64 * frames),
                "{name}: {record} against {simulated}"
            );
        }
    }
    // The deadline left clients out, so the case tests what it should.
    let dropped = fs::read_to_string(
        dir.path()
            .join("aggregate-scaffold-deadline-single/metrics.jsonl"),
    )
    .unwrap();
    assert!(dropped.contains("deadline"), "{dropped}");
    for run in ["single", "mpi"] {
        let summary = common::summary(&dir.path().join(format!("relay-scaffold-spilled-{run}")));
        let usage = &summary["client_states"];
        assert!(usage["spill_writes"].as_u64() > Some(0), "{run}: {summary}");
    }
}

#[test]
fn an_asynchronous_run_over_three_ranks_gives_the_bytes_of_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let [flat, relay, _] = TOPOLOGIES.map(|(_, topology)| topology);
    for (name, topology) in [("flat", flat), ("relay", relay)] {
        let sets = [
            topology,
            "federation.clients_per_round=null",
            "federation.rounds=8",
            r#"asynchronous={"concurrency":8}"#,
            r#"strategy={"name":"fedbuff","buffer":3}"#,
            r#"network.compute={"kind":"lognormal","median":600,"sigma":1.2}"#,
            "availability.dropout=0.2",
        ];
        let single = dir.path().join(format!("{name}-single"));
        run_ok(&experiment("mnist-t1"), &single, &sets);
        let spread = dir.path().join(format!("{name}-mpi"));
        mpi_run(3, &spread, &sets);
        assert_same_results(&spread, &single);
    }
}

#[test]
fn a_placement_that_splits_a_scheduler_from_its_group_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sets = [
        TOPOLOGIES[1].1,
        "federation.rounds=2",
        r#"placement={"schedulers":[1,2],"groups":[2,1]}"#,
    ];
    let single_sets = [TOPOLOGIES[1].1, "federation.rounds=2"];
    let single = dir.path().join("single");
    run_ok(&experiment("mnist-t1"), &single, &single_sets);
    let spread = dir.path().join("mpi");
    mpi_run(3, &spread, &sets);
    assert_same_results(&spread, &single);
    let record = read_json(&spread.join("mpi.json"));
    assert_eq!(record["groups"], serde_json::json!([2, 1]));
    let scheduler_tier = &record["traffic"][1];
    assert_eq!(scheduler_tier["tier"], "scheduler");
    assert!(
        scheduler_tier["messages_up"].as_u64().unwrap() > 0,
        "{record}"
    );
    // A placement on ranks the run does not have is refused before anything runs.
    let refused = mpirun(2, &run_args(&dir.path().join("refused"), &sets))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("rank 2, but the run has 2 ranks"),
        "{stderr}"
    );
}

#[test]
fn secure_aggregation_over_several_ranks_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("refused");
    let sets = [
        r#"secure_aggregation={"threshold": 7}"#,
        "federation.rounds=1",
    ];
    let refused = mpirun(2, &run_args(&out, &sets)).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("secure_aggregation: is set; secure aggregation over 2 MPI processes"),
        "{stderr}"
    );
    assert!(!out.exists(), "a refused run left a folder");
}

/// The fedsim process of `rank` that writes to `out`, found by the rank variable `mpirun` gives
/// each process.
fn pid_of_rank(rank: usize, out: &Path) -> Option<u32> {
    let wanted = format!("OMPI_COMM_WORLD_RANK={rank}");
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = fs::read(entry.path().join("cmdline")).ok()?;
        let environ = fs::read(entry.path().join("environ")).ok()?;
        let mine = String::from_utf8_lossy(&cmdline).contains(out.to_str()?);
        let ranked = environ
            .split(|&b| b == 0)
            .any(|variable| variable == wanted.as_bytes());
        (mine && ranked).then_some(pid)
    })
}

#[test]
fn a_killed_rank_ends_the_run_within_seconds_and_the_run_resumes_over_mpi() {
    let dir = tempfile::tempdir().unwrap();
    // With LG-FedAvg's personal layers, most of them spilled past a budget of 2 MiB (each
    // client's body is 0.75 MiB): the resumed ranks get their clients' states from rank 0's
    // checkpoint and its spill file.
    let sets = [
        TOPOLOGIES[1].1,
        LG_FEDAVG,
        "eval.client_test_fraction=0.2",
        "federation.client_state_memory_mb=2",
        "federation.rounds=30",
    ];
    let reference = dir.path().join("reference");
    run_ok(&experiment("mnist-t1"), &reference, &sets);
    let out = dir.path().join("killed");
    let mut run = mpirun(3, &run_args(&out, &sets))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = out.join("metrics.jsonl");
    let started = Instant::now();
    while fs::read_to_string(&metrics).map_or(0, |m| m.lines().count()) < 2 {
        assert!(run.try_wait().unwrap().is_none(), "the run ended early");
        assert!(started.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = pid_of_rank(2, &out).expect("rank 2 is running");
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    let killed_at = Instant::now();
    let output = run.wait_with_output().unwrap();
    eprintln!(
        "mpirun ended {:.1} s after rank 2 was killed",
        killed_at.elapsed().as_secs_f64()
    );
    assert!(
        killed_at.elapsed() < Duration::from_secs(20),
        "the run took {:?} to end",
        killed_at.elapsed()
    );
    assert!(!output.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // mpirun names the rank; fedsim, the tiers it ran.
    assert!(
        said.contains("rank 2 runs scheduler 1, client group 1"),
        "{said}"
    );
    assert!(said.contains("process rank 2"), "{said}");
    let finished = fs::read_to_string(&metrics).unwrap().lines().count();
    assert!((2..30).contains(&finished), "{finished} rounds");
    let resumed = mpirun(3, &["run", "--resume", out.to_str().unwrap(), "--quiet"])
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{resumed:?}");
    assert_same_results(&out, &reference);
}
