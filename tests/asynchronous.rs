//! Asynchronous federations end to end, through the real binary on the embedded data: answers
//! are applied in the order of their arrival on the simulated clock, whatever the trainer's
//! threads do; the bytes do not change with workers, reruns, relaying schedulers or a stop and
//! resume; availability traces are honoured in rounds and asynchronously; and bad settings are
//! refused with the file, the field and exit code 2.

mod common;

use std::fs;
use std::path::Path;

use common::{
    assert_same_results, experiment, fails_with, metrics_without_timing, records, run_ok,
};
use fedsim::config::Override;
use fedsim::output::{Progress, RoundRecord};
use fedsim::registry::Registry;
use fedsim::stop::StopSignal;
use fedsim::{Error, Experiment, ExperimentConfig, Run};
use serde_json::Value;

/// mnist-t1 made asynchronous: 10 of its 100 clients in flight, speeds with a heavy tail.
const ASYNCHRONOUS: &[&str] = &[
    "federation.clients_per_round=null",
    r#"asynchronous={"concurrency":10}"#,
    r#"network.compute={"kind":"lognormal","median":600,"sigma":1.2}"#,
    "eval.every=5",
];

/// `ASYNCHRONOUS` with `extra`.
fn sets<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    ASYNCHRONOUS.iter().chain(extra).copied().collect()
}

/// The metrics without the traffic, which relaying schedulers add a tier to.
fn without_traffic(run: &Path) -> Vec<String> {
    metrics_without_timing(run)
        .into_iter()
        .map(|line| {
            let mut record: Value = serde_json::from_str(&line).unwrap();
            record.as_object_mut().unwrap().remove("traffic");
            record.to_string()
        })
        .collect()
}

#[test]
fn answers_are_applied_in_the_order_of_their_arrival_on_the_clock() {
    // Four clients always in flight, each with its own latency and no compute time: client c
    // answers every 2 * latency_c seconds, so the order of the steps is known in advance.
    let latencies_ms = [10.0, 33.0, 71.0, 113.0];
    let overrides: Vec<String> = latencies_ms
        .iter()
        .enumerate()
        .map(|(c, ms)| format!(r#"{{"clients":[{c}],"latency_ms":{ms}}}"#))
        .collect();
    let network = format!(
        r#"network={{"client_overrides":[{}]}}"#,
        overrides.join(",")
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let settings = [
        "federation.num_clients=4",
        "federation.clients_per_round=null",
        "federation.rounds=20",
        r#"asynchronous={"concurrency":4}"#,
        r#"strategy={"name":"fedasync","staleness":{"kind":"polynomial","a":0.5}}"#,
        &network,
    ];
    run_ok(&experiment("breast-cancer"), &out, &settings);
    // Each answer arrives at (sent + latency) + latency, as the links stamp it, and the client
    // is sent the model again at once; the steps go in (arrival, client) order.
    let mut next: Vec<(f64, usize, u32)> = latencies_ms
        .iter()
        .enumerate()
        .map(|(c, ms)| {
            let latency = ms / 1000.0;
            (0.0 + latency + latency, c, 0)
        })
        .collect();
    let mut expected = Vec::new();
    for step in 0..20u32 {
        next.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (at, client, version) = next[0];
        expected.push((client, step - version, at));
        let latency = latencies_ms[client] / 1000.0;
        next[0] = (at + latency + latency, client, step + 1);
    }
    let got: Vec<(usize, u32, f64)> = records(&out)
        .iter()
        .map(|r| {
            let clients = r["clients"].as_array().unwrap();
            assert_eq!(clients.len(), 1, "FedAsync steps on every update: {r}");
            (
                clients[0].as_u64().unwrap() as usize,
                r["staleness"]["max"].as_u64().unwrap() as u32,
                r["sim_time_s"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected);
    // The slow clients' updates were stale, and weighted down for it.
    assert!(
        got.iter().any(|&(_, staleness, _)| staleness >= 5),
        "{got:?}"
    );
}

#[test]
fn workers_reruns_and_relaying_schedulers_leave_the_bytes_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str); 2] = [
        (
            "fedbuff",
            r#"strategy={"name":"fedbuff","buffer":4,"server_optimizer":"adam","server_lr":0.01}"#,
        ),
        (
            "fedasync",
            r#"strategy={"name":"fedasync","staleness":{"kind":"hinge","a":10,"b":4}}"#,
        ),
    ];
    for (name, strategy) in cases {
        let run = |label: &str, extra: &[&str]| {
            let out = dir.path().join(format!("{name}-{label}"));
            let mut all = sets(&[strategy, "federation.rounds=12", "availability.dropout=0.2"]);
            all.extend(extra);
            run_ok(&experiment("mnist-t1"), &out, &all);
            out
        };
        let two = run("two", &["federation.num_parallels=2"]);
        let one = run("one", &["federation.num_parallels=1"]);
        let again = run("again", &["federation.num_parallels=2"]);
        assert_same_results(&one, &two);
        assert_same_results(&again, &two);
        let relay = run(
            "relay",
            &[r#"topology={"kind":"hierarchical","schedulers":4,"mode":"relay"}"#],
        );
        assert_eq!(without_traffic(&relay), without_traffic(&two), "{name}");
        assert_eq!(common::model_bytes(&relay), common::model_bytes(&two));
        let lines = records(&two);
        assert_eq!(lines.len(), 12);
        assert!(
            lines
                .iter()
                .any(|r| r["dropped"].as_array().is_some_and(|d| !d.is_empty())),
            "{name}: dropout left nobody out"
        );
        assert!(lines.iter().all(|r| r["staleness"]["mean"].is_number()));
        assert!(lines[4]["test_accuracy"].is_number() && lines[3]["test_accuracy"].is_null());
    }
}

#[test]
fn a_stopped_asynchronous_run_resumes_to_the_bits_of_one_that_never_stopped() {
    let registry = Registry::builtin();
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        r#"strategy={"name":"fedbuff","buffer":3}"#,
        "federation.rounds=10",
        r#"topology={"kind":"hierarchical","schedulers":2,"mode":"relay"}"#,
        r#"availability={"dropout":0.1,"online":{"kind":"diurnal","period_s":4,"online_fraction":0.5}}"#,
        "checkpoint.every=2",
    ];
    let settings: Vec<String> = sets(&extra).into_iter().map(String::from).collect();
    let config = ExperimentConfig::load(&experiment("mnist-t1"), &settings, &registry).unwrap();
    let prepare = || Experiment::prepare(config.clone(), &registry).unwrap();
    let straight = dir.path().join("straight");
    Run::new(prepare(), &straight)
        .unwrap()
        .play(&Progress::Silent, &StopSignal::new(), None)
        .unwrap();
    // Stopped as step 5's record arrives: the checkpoint after step 4 holds the clients in
    // flight then.
    for attempt in 0..5 {
        let stopped = dir.path().join(format!("stopped-{attempt}"));
        let stop = StopSignal::new();
        let asked = stop.clone();
        let progress = Progress::Each(Box::new(move |record: &RoundRecord| {
            if record.round == 5 {
                asked.request();
            }
        }));
        match Run::new(prepare(), &stopped)
            .unwrap()
            .play(&progress, &stop, None)
        {
            Ok(_) => continue,
            Err(Error::Stopped { .. }) => {}
            Err(error) => panic!("{error}"),
        }
        let resumed = Run::resume(&stopped, &registry).unwrap();
        assert!((4..10).contains(&resumed.rounds_done()));
        resumed
            .play(&Progress::Silent, &StopSignal::new(), None)
            .unwrap()
            .expect("steps were left");
        assert_same_results(&stopped, &straight);
        return;
    }
    panic!("every run finished before its stop took effect");
}

/// A trace over breast-cancer's 10 clients: 0 to 5 always online; 6 to 9 online only for
/// the first 50 ms, too short for their training.
fn short_lived_trace(dir: &Path) -> String {
    let mut trace = String::from("client,start_s,end_s\n");
    for client in 0..10 {
        let end = if client < 6 { 1e6 } else { 0.05 };
        trace += &format!("{client},0,{end}\n");
    }
    let path = dir.join("online.csv");
    fs::write(&path, trace).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn an_availability_trace_is_honoured_in_rounds_and_asynchronously() {
    let dir = tempfile::tempdir().unwrap();
    let trace = short_lived_trace(dir.path());
    let online = format!(r#"availability.online={{"kind":"trace","file":"{trace}"}}"#);
    // Every client trains for a tenth of a second or more.
    let slow = r#"network.compute={"kind":"fixed","samples_per_second":300}"#;
    let modes: [(&str, Vec<&str>); 2] = [
        ("rounds", vec!["federation.clients_per_round=8"]),
        (
            "asynchronous",
            vec![
                "federation.clients_per_round=null",
                r#"asynchronous={"concurrency":8}"#,
                r#"strategy={"name":"fedasync"}"#,
            ],
        ),
    ];
    for (mode, mut settings) in modes {
        settings.extend([online.as_str(), slow, "federation.rounds=6"]);
        let out = dir.path().join(mode);
        run_ok(&experiment("breast-cancer"), &out, &settings);
        let lines = records(&out);
        let dropped: Vec<&Value> = lines
            .iter()
            .flat_map(|r| r["dropped"].as_array().unwrap())
            .collect();
        // The clients offline soon after the start were sent the model, and dropped.
        assert!(!dropped.is_empty(), "{mode}: {lines:?}");
        for drop in &dropped {
            assert_eq!(drop["reason"], "offline", "{mode}: {drop}");
            assert!(drop["client"].as_u64().unwrap() >= 6, "{mode}: {drop}");
        }
        // Only the clients online throughout trained into the model (in rounds, from the
        // second round on, once the first round's offline clients have dropped).
        let from = usize::from(mode == "rounds");
        let trained: Vec<u64> = lines[from..]
            .iter()
            .flat_map(|r| r["clients"].as_array().unwrap())
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert!(trained.iter().all(|&c| c < 6), "{mode}: {trained:?}");
        // In rounds, after the first only the six online clients are sampled, all of them.
        if mode == "rounds" {
            assert_eq!(lines[1]["clients"], serde_json::json!([0, 1, 2, 3, 4, 5]));
        }
    }
}

#[test]
fn bad_asynchronous_settings_are_refused_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad_trace = dir.path().join("bad.csv");
    fs::write(&bad_trace, "client,start_s,end_s\n0,0,10\n3,five,9\n").unwrap();
    let unknown = dir.path().join("unknown.csv");
    fs::write(&unknown, "client,start_s,end_s\n0,0,10\n40,0,9\n").unwrap();
    let trace = |file: &Path| {
        format!(
            r#"availability.online={{"kind":"trace","file":"{}"}}"#,
            file.display()
        )
    };
    let asynchronous = ["federation.clients_per_round=null"];
    let cases: Vec<(Vec<String>, &str, String)> = vec![
        (
            vec![r#"asynchronous={"concurrency":0}"#.into()],
            "asynchronous.concurrency",
            "is 0; must be between 1 and federation.num_clients (10)".into(),
        ),
        (
            vec![r#"asynchronous={"concurrency":11}"#.into()],
            "asynchronous.concurrency",
            "is 11; must be between 1 and federation.num_clients (10)".into(),
        ),
        (
            vec![
                r#"asynchronous={"concurrency":4}"#.into(),
                r#"strategy={"name":"fedbuff","buffer":5}"#.into(),
            ],
            "strategy.buffer",
            "asynchronous.concurrency (4)".into(),
        ),
        (
            vec![r#"asynchronous={"concurrency":4}"#.into()],
            "strategy.name",
            "\"fedavg\" runs in synchronous rounds only; an asynchronous federation runs fedasync, fedbuff".into(),
        ),
        (
            vec![
                r#"asynchronous={"concurrency":4}"#.into(),
                r#"strategy="fedasync""#.into(),
                r#"topology={"kind":"hierarchical","schedulers":2,"mode":"aggregate"}"#.into(),
            ],
            "topology.mode",
            "flat or under relaying schedulers".into(),
        ),
        (
            vec![trace(&bad_trace)],
            "availability.online.file",
            format!("{}: line 3: \"five\" is not a time", bad_trace.display()),
        ),
        (
            vec![trace(&unknown)],
            "availability.online.file",
            format!(
                "{}: line 3: names client 40, but federation.num_clients is 10",
                unknown.display()
            ),
        ),
    ];
    let text = fs::read_to_string(experiment("breast-cancer")).unwrap();
    for (index, (sets, field, message)) in cases.into_iter().enumerate() {
        // The settings written into an experiment file, which the error must name.
        let mut config: Value = serde_json::from_str(&text).unwrap();
        let with_async = sets.iter().any(|s| s.starts_with("asynchronous"));
        let all = asynchronous
            .iter()
            .copied()
            .filter(|_| with_async)
            .chain(sets.iter().map(String::as_str));
        for set in all {
            Override::parse(set).unwrap().apply(&mut config).unwrap();
        }
        let file = dir.path().join(format!("case-{index}.json"));
        fs::write(&file, config.to_string()).unwrap();
        let stderr = fails_with(&["run", file.to_str().unwrap(), "--quiet"], 2);
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
        assert!(stderr.contains(&format!("{field}: ")), "{field}: {stderr}");
        assert!(stderr.contains(&message), "{field}: {stderr}");
    }
    // clients_per_round belongs to rounds only.
    let stderr = fails_with(
        &[
            "run",
            experiment("breast-cancer").to_str().unwrap(),
            "--set",
            r#"asynchronous={"concurrency":4}"#,
            "--set",
            "strategy=fedasync",
        ],
        2,
    );
    assert!(
        stderr.contains("federation.clients_per_round: an asynchronous federation"),
        "{stderr}"
    );
}
