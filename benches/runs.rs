//! Whole runs as a user starts them: each benchmark setting is one `fedsim run` process on the
//! embedded MNIST, so the peak resident memory that its `summary.json` records is that run's
//! alone. Prints a table of wall time, time per round and peak memory against the limits the
//! performance section states.
//!
//! `cargo bench --bench runs` (a few minutes on 2 cores; the CNN run is most of it).

use std::path::Path;
use std::process::Command;

/// One benchmark setting: what it is, its `fedsim run` arguments after the experiment file,
/// and the peak resident memory it should stay within, in MB.
struct Setting {
    name: &'static str,
    overrides: &'static [&'static str],
    memory_limit_mb: u64,
}

const SETTINGS: [Setting; 5] = [
    Setting {
        name: "MLP, 100 clients, 10 a round, 20 rounds",
        overrides: &[],
        memory_limit_mb: 150,
    },
    Setting {
        name: "CNN, 100 clients, 10 a round, 5 rounds",
        overrides: &["model=\"cnn\"", "federation.rounds=5"],
        memory_limit_mb: 300,
    },
    Setting {
        name: "MLP, 1,000 clients, 100 a round, 5 rounds",
        overrides: &[
            "federation.num_clients=1000",
            "federation.clients_per_round=100",
            "federation.rounds=5",
        ],
        memory_limit_mb: 200,
    },
    Setting {
        name: "MLP, 10,000 clients, 1,000 a round, 2 rounds",
        overrides: &[
            "federation.num_clients=10000",
            "federation.clients_per_round=1000",
            "federation.rounds=2",
        ],
        memory_limit_mb: 200,
    },
    Setting {
        name: "FedPer, 10,000 clients, 100 a round, 100 rounds, 16 MiB for the personal heads",
        overrides: &[
            "federation.num_clients=10000",
            "federation.clients_per_round=100",
            "federation.rounds=100",
            "strategy.name=fedper",
            "eval.client_test_fraction=0.2",
            "eval.every=50",
            "federation.client_state_memory_mb=16",
            "checkpoint.every=10",
        ],
        memory_limit_mb: 400,
    },
];

/// Where the clients' states were kept, from `summary.json`: their bytes in memory and spilled,
/// the spill file's size and the seconds its writes and reads took; `–` where none spilled.
fn states(summary: &serde_json::Value) -> String {
    let usage = &summary["client_states"];
    let megabytes = |field: &str| usage[field].as_f64().unwrap_or(f64::NAN) / 1e6;
    match usage.is_null() {
        true => "–".to_string(),
        false => format!(
            "{} clients: {:.1} MB in memory, {:.1} MB spilled ({:.1} MB file, {} writes, {} reads, {:.2} s)",
            usage["clients"],
            megabytes("memory_bytes"),
            megabytes("spilled_bytes"),
            megabytes("spill_file_bytes"),
            usage["spill_writes"],
            usage["spill_reads"],
            usage["spill_seconds"].as_f64().unwrap_or(f64::NAN)
        ),
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let experiment = root.join("experiments/mnist-t1.json");
    let scratch = tempfile::tempdir().expect("a scratch folder");
    println!("every setting: `fedsim run experiments/mnist-t1.json` with the overrides shown");
    println!();
    println!(
        "| setting | overrides | wall s | s per round | peak memory MB | limit MB | clients' states |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (index, setting) in SETTINGS.iter().enumerate() {
        let out = scratch.path().join(index.to_string());
        let mut command = Command::new(env!("CARGO_BIN_EXE_fedsim"));
        command
            .arg("run")
            .arg(&experiment)
            .arg("--out")
            .arg(&out)
            .arg("--quiet");
        for value in setting.overrides {
            command.args(["--set", value]);
        }
        let status = command
            .stdout(std::process::Stdio::null())
            .status()
            .expect("fedsim starts");
        assert!(status.success(), "{} failed: {status}", setting.name);
        let summary: serde_json::Value = serde_json::from_slice(
            &std::fs::read(out.join("summary.json")).expect("the run wrote its summary"),
        )
        .expect("summary.json is JSON");
        let wall = summary["wall_seconds"].as_f64().expect("wall_seconds");
        let rounds = summary["rounds"].as_f64().expect("rounds");
        let peak = summary["peak_resident_bytes"]
            .as_f64()
            .map_or("unknown".to_string(), |b| format!("{:.0}", b / 1e6));
        println!(
            "| {} | {} | {wall:.2} | {:.3} | {peak} | {} | {} |",
            setting.name,
            setting.overrides.join(" "),
            wall / rounds,
            setting.memory_limit_mb,
            states(&summary)
        );
    }
}
