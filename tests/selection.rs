//! Client selection end to end, on `experiments/selection.json` (MNIST, lognormal speeds and the
//! shipped availability trace) cut to a few rounds: the built-in selections choose only clients
//! online when the round starts, a probe is a real job charged to the links and the clock and
//! recorded, and the choice is the same whether the clients reach the server directly or
//! through relaying schedulers.

use std::path::Path;

use fedsim::availability::Availability;
use serde_json::Value;

mod common;

use common::{assert_same_results, experiment, records, run_ok};

/// Rounds of each run: enough for Oort to exploit what it has seen.
const ROUNDS: &str = "federation.rounds=6";

fn ids(values: &Value) -> Vec<usize> {
    values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect()
}

/// The shipped trace, as the experiment reads it.
fn trace() -> Availability {
    let file = common::root().join("experiments/traces/sessions.csv");
    Availability::read_trace(&file, 100, Some(1200.0)).unwrap()
}

#[test]
fn every_selection_takes_only_clients_online_when_its_round_starts() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace();
    for strategy in [
        r#"strategy={"name":"fedavg"}"#,
        r#"strategy={"name":"oort"}"#,
        r#"strategy={"name":"power_of_choice","d":30}"#,
    ] {
        let run = dir.path().join(strategy.len().to_string());
        run_ok(&experiment("selection"), &run, &[ROUNDS, strategy]);
        let mut started = 0.0;
        for record in records(&run) {
            let round = &record["round"];
            let clients = ids(&record["clients"]);
            assert_eq!(clients.len(), 10, "{strategy} round {round}");
            // A round starts when the last ended, or later if nobody was online then.
            let online = trace.online_among(0..100, started);
            let start = if online.is_empty() {
                trace.next_online_among(0..100, started).unwrap()
            } else {
                started
            };
            let online = trace.online_among(0..100, start);
            for client in &clients {
                assert!(
                    online.contains(client),
                    "{strategy} round {round}: {client}"
                );
            }
            for probed in record["probed"].as_array().into_iter().flatten() {
                let client = probed["client"].as_u64().unwrap() as usize;
                assert!(online.contains(&client), "{strategy} probed {client}");
            }
            started = record["sim_time_s"].as_f64().unwrap();
        }
    }
}

#[test]
fn a_probe_is_a_job_counted_on_the_links_the_clock_and_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let (uniform, probing) = (dir.path().join("uniform"), dir.path().join("probing"));
    let sets = [ROUNDS, r#"availability.online={"kind":"always"}"#];
    run_ok(&experiment("selection"), &uniform, &sets);
    let strategy = r#"strategy={"name":"power_of_choice","d":30}"#;
    run_ok(
        &experiment("selection"),
        &probing,
        &[sets[0], sets[1], strategy],
    );
    for (plain, probed) in records(&uniform).iter().zip(records(&probing)) {
        let candidates = probed["probed"].as_array().unwrap();
        assert_eq!(candidates.len(), 30);
        let losses: Vec<f64> = candidates
            .iter()
            .map(|c| c["loss"].as_f64().unwrap())
            .collect();
        assert!(
            losses.iter().all(|l| l.is_finite() && *l > 0.0),
            "{losses:?}"
        );
        // The clients of highest loss among the candidates train.
        let mut ranked: Vec<(f64, usize)> = candidates
            .iter()
            .map(|c| {
                (
                    c["loss"].as_f64().unwrap(),
                    c["client"].as_u64().unwrap() as usize,
                )
            })
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut best: Vec<usize> = ranked[..10].iter().map(|(_, c)| *c).collect();
        best.sort_unstable();
        assert_eq!(ids(&probed["clients"]), best);
        // Thirty probes down and up beside the ten models and updates.
        let server = |record: &Value, field: &str| record["traffic"][0][field].as_u64().unwrap();
        assert_eq!(server(plain, "messages_down"), 10);
        assert_eq!(server(&probed, "messages_down"), 40);
        assert_eq!(server(&probed, "messages_up"), 40);
        assert!(server(&probed, "bytes_down") > 3 * server(plain, "bytes_down"));
        assert!(plain.get("probed").is_none());
    }
    // The probes take time: a pass over thirty clients' data before the round's training.
    let time = |run: &Path| records(run).last().unwrap()["sim_time_s"].as_f64().unwrap();
    assert!(time(&probing) > time(&uniform));
}

#[test]
fn a_selection_chooses_the_same_through_relaying_schedulers() {
    let dir = tempfile::tempdir().unwrap();
    let relay = r#"topology={"kind":"hierarchical","schedulers":4,"mode":"relay"}"#;
    for strategy in [
        r#"strategy={"name":"oort"}"#,
        r#"strategy={"name":"power_of_choice","d":30}"#,
    ] {
        let flat = dir.path().join(format!("flat-{}", strategy.len()));
        let relayed = dir.path().join(format!("relayed-{}", strategy.len()));
        let sets = [ROUNDS, strategy, r#"availability.online={"kind":"always"}"#];
        run_ok(&experiment("selection"), &flat, &sets);
        run_ok(
            &experiment("selection"),
            &relayed,
            &[sets[0], sets[1], sets[2], relay],
        );
        let chosen = |run: &Path| -> Vec<Vec<usize>> {
            records(run).iter().map(|r| ids(&r["clients"])).collect()
        };
        assert_eq!(chosen(&relayed), chosen(&flat), "{strategy}");
        assert_eq!(common::model_bytes(&relayed), common::model_bytes(&flat));
    }
    // A rerun chooses the same, to the bit.
    let again = dir.path().join("again");
    let strategy = r#"strategy={"name":"oort"}"#;
    run_ok(
        &experiment("selection"),
        &again,
        &[ROUNDS, strategy, r#"availability.online={"kind":"always"}"#],
    );
    assert_same_results(&again, &dir.path().join(format!("flat-{}", strategy.len())));
}
