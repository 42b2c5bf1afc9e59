//! The promises fedsim makes of every registered algorithm, checked in seconds: fedsim's own
//! tests run the kit over every built-in, and a plug-in's author calls it from their crate's
//! tests with their registry.
//!
//! ```no_run
//! # let registry = fedsim::registry::Registry::builtin();
//! let scratch = std::env::temp_dir().join("fedexp-conformance");
//! let passed = fedsim::conformance::check(&registry, "fedexp", &scratch).unwrap();
//! println!("{passed:?}");
//! ```
//!
//! Each check runs the algorithm, with its default parameters ([`check`]) or those given
//! ([`check_with`]), as real experiments: the built-in Breast Cancer Wisconsin table split
//! among 13 equal clients (6 a round, 4 rounds), each holding a quarter of its samples out to
//! be scored on, an MLP with one hidden layer of 8, one local epoch; a run takes milliseconds.
//! A failed check does not stop the others. The checks:
//!
//! - it runs flat, under relaying schedulers, and under aggregating ones where its edge rule
//!   allows (with two edge rounds where it allows several); where it does not, the experiment
//!   is refused with the reason;
//! - relaying gives the flat tree's model and records (but for the traffic) to the bit;
//! - one worker and two give the same records and model (a personalised algorithm's personal
//!   models' scores among them);
//! - a run stopped after a round and resumed from its folder ends with the bits of one that
//!   never stopped (its server's and clients' states went through the checkpoint), also with
//!   a budget for the clients' states so small that they are spilled to the run folder;
//! - under a day-night availability, every client a round takes or probes was online when
//!   the round started, and a rerun chooses the same;
//! - a client that fails ends the run, naming the client and the round, under relaying and
//!   (where allowed) aggregating schedulers;
//! - every reduction the algorithm declares ([`crate::strategy::Algorithm::reductions`])
//!   gives the other algorithm's model and records (but for traffic and the algorithms' own
//!   metrics, and the personal models' scores where the other algorithm has none) to the bit.
//!
//! An algorithm with an asynchronous half ([`crate::strategy::Algorithm::asynchronous`]) is
//! checked again in an asynchronous federation (10 of its 13 clients in flight, log-normal speeds, so that
//! answers overtake each other): it runs flat; relaying equals flat; one worker equals two; a
//! stopped run resumes to the same bits (its clients in flight went through the checkpoint);
//! aggregating schedulers are refused; and a failing client ends the run, flat and relayed
//! alike, naming the same client.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::availability::Availability;
use crate::config::{ExperimentConfig, Override};
use crate::error::Error;
use crate::experiment::{Experiment, Run, RunResult};
use crate::output::{Progress, RoundRecord};
use crate::registry::Registry;
use crate::stop::StopSignal;
use crate::strategy::EdgeAggregation;
use crate::topology::FederationError;

/// A promise the algorithm breaks, or a run the kit could not make; with every other check
/// that failed after it, since a failed check does not stop those that follow.
#[derive(Debug, thiserror::Error)]
#[error("{algorithm}: {check}: {detail}{}", others.iter().map(|o| format!("\n{o}")).collect::<String>())]
pub struct Nonconformance {
    /// The algorithm checked.
    pub algorithm: String,
    /// The check that failed.
    pub check: &'static str,
    /// What happened instead.
    pub detail: String,
    /// The checks that failed after this one.
    pub others: Vec<Nonconformance>,
}

/// Runs every check on the algorithm registered as `algorithm`, with its default parameters,
/// its runs in folders under `scratch` (created if missing); returns the names of the checks
/// that ran and held.
pub fn check(
    registry: &Registry,
    algorithm: &str,
    scratch: &Path,
) -> Result<Vec<&'static str>, Nonconformance> {
    check_with(registry, algorithm, &serde_json::Map::new(), scratch)
}

/// The first 12 hex digits of the SHA-256 of `params` as JSON: a folder name per parameter set.
fn params_digest(params: &serde_json::Map<String, Value>) -> String {
    use sha2::{Digest, Sha256};
    let json = Value::Object(params.clone()).to_string();
    hex::encode(Sha256::digest(json.as_bytes()))[..12].to_string()
}

/// Like [`check`], with the parameters in `params` (as the experiment file's `strategy`
/// section holds them beside the name): what an algorithm does only away from its defaults (a
/// split that needs a threshold crossed) is checked too. The runs go under `scratch`, in a
/// folder named for the algorithm and a digest of `params`, emptied first, so that checks of
/// other parameters may share `scratch` and run at once (as cargo runs tests).
pub fn check_with(
    registry: &Registry,
    algorithm: &str,
    params: &serde_json::Map<String, Value>,
    scratch: &Path,
) -> Result<Vec<&'static str>, Nonconformance> {
    let mut strategy = params.clone();
    strategy.insert("name".into(), Value::String(algorithm.to_string()));
    let folder = match params.is_empty() {
        true => algorithm.to_string(),
        false => format!("{algorithm}-with-{}", params_digest(params)),
    };
    let kit = Kit {
        registry,
        algorithm,
        strategy: Value::Object(strategy),
        scratch: scratch.join(folder),
        mode: &[],
    };
    let info = registry.algorithm(algorithm).ok_or_else(|| {
        kit.breach(
            "registered",
            "no algorithm of that name is registered".into(),
        )
    })?;
    let _ = fs::remove_dir_all(&kit.scratch);
    // Every other check compares with this run: without it, none can run.
    let flat = kit.finish("flat", &[])?;
    let mut checks = Checks {
        passed: vec!["runs flat"],
        breaches: Vec::new(),
    };
    checks.run("relay equals flat", || {
        let relay = kit.finish("relay", &[RELAY])?;
        kit.same("relay equals flat", &relay, &flat, &["traffic"])
    });
    checks.run("one worker equals two", || {
        let serial = kit.finish("one-worker", &["federation.num_parallels=1"])?;
        kit.same("one worker equals two", &serial, &flat, &[])
    });
    let aggregate = match info.edge {
        EdgeAggregation::Unsupported(reason) => {
            checks.run("aggregating schedulers refused", || {
                kit.refused("aggregating schedulers refused", &aggregate(1), reason)
            });
            None
        }
        EdgeAggregation::Mean {
            several_edge_rounds,
            ..
        } => {
            checks.run("runs under aggregating schedulers", || {
                kit.finish("aggregate", &[&aggregate(1)]).map(drop)
            });
            if several_edge_rounds {
                checks.run("runs with two edge rounds", || {
                    kit.finish("aggregate-2", &[&aggregate(2)]).map(drop)
                });
            }
            Some(aggregate(1))
        }
    };
    checks.run(RESUMES, || kit.resumes(RESUMES, &flat, &[]));
    checks.run(RESUMES_SPILLED, || {
        kit.resumes(RESUMES_SPILLED, &flat, &[SPILLING])
    });
    checks.run(AVAILABLE, || kit.respects_availability());
    let sampled = &flat.rounds[FAILING_ROUND as usize - 1].clients;
    let first = *sampled.iter().min().expect("a round samples clients");
    let check = "a failing client ends a relayed run";
    checks.run(check, || {
        let failing = (RELAY, &[FAILING_ROUND][..]);
        let named = Some((FAILING_ROUND, first));
        kit.fails(check, "failing-relay", failing, named).map(drop)
    });
    if let Some(aggregate) = &aggregate {
        let check = "a failing client ends an aggregated run";
        checks.run(check, || {
            let failing = (aggregate.as_str(), &[FAILING_ROUND][..]);
            let named = Some((FAILING_ROUND, first));
            kit.fails(check, "failing-aggregate", failing, named)
                .map(drop)
        });
    }
    for index in 0..info.reductions.len() {
        checks.run("a declared reduction holds", || kit.reduction(index));
    }
    if info.asynchronous {
        let kit = Kit {
            mode: ASYNCHRONOUS,
            scratch: kit.scratch.join("asynchronous"),
            ..kit
        };
        match kit.asynchronous() {
            Ok(passed) => checks.passed.extend(passed),
            Err(breach) => checks.breaches.push(breach),
        }
    }
    checks.into_result()
}

/// Runs every check on the compressor registered as `compressor`, with its default
/// parameters and error feedback where it allows it, its runs (FedAvg's, on the kit's
/// experiment) in folders under `scratch`; returns the names of the checks that ran and held.
///
/// Without a run: it decodes what it encodes at several lengths, zeros to zeros; the same
/// stream gives the same bytes; an encoding cut short is refused, not misread. In runs: it
/// runs flat; relaying equals flat; one worker equals two; a stopped run resumes to the same
/// bits (with its clients' losses fed back through the checkpoint, also spilled); aggregating
/// schedulers are refused; and where its encoding's length depends on the length alone, the
/// links count exactly those bytes for each upload.
pub fn check_compressor(
    registry: &Registry,
    compressor: &str,
    scratch: &Path,
) -> Result<Vec<&'static str>, Nonconformance> {
    let breach = |check, detail| Nonconformance {
        algorithm: format!("compressor {compressor}"),
        check,
        detail,
        others: Vec::new(),
    };
    let section = crate::config::NamedSection::named(compressor);
    let choice = registry
        .choose_compressor(&section, usize::MAX)
        .map_err(|problems| breach("registered", format!("{problems:?}")))?;
    let mut checks = Checks {
        passed: Vec::new(),
        breaches: Vec::new(),
    };
    let encoded = |values: &[f32], seed| {
        let mut rng = rand::SeedableRng::seed_from_u64(seed);
        choice.encode(values, &mut rng)
    };
    let varied = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 % 1009) as f32 - 504.0) * 1e-3)
            .collect()
    };
    let check = "decodes what it encodes, zeros to zeros";
    checks.run(check, || {
        for len in [1, 2, 13, 1000] {
            let decoded = choice
                .decode(&encoded(&varied(len), 1), len)
                .map_err(|e| breach(check, format!("{len} values: {e}")))?;
            if decoded.len() != len || decoded.iter().any(|v| !v.is_finite()) {
                return Err(breach(check, format!("{len} values decode to {decoded:?}")));
            }
            let zeros = choice.decode(&encoded(&vec![0.0; len], 1), len);
            if zeros.as_ref().map_or(true, |z| z.iter().any(|&v| v != 0.0)) {
                return Err(breach(check, format!("{len} zeros decode to {zeros:?}")));
            }
        }
        Ok(())
    });
    let check = "the same stream gives the same bytes";
    checks.run(check, || {
        match encoded(&varied(100), 7) == encoded(&varied(100), 7) {
            true => Ok(()),
            false => Err(breach(check, "two encodings differ".into())),
        }
    });
    let check = "an encoding cut short is refused";
    checks.run(check, || {
        let bytes = encoded(&varied(100), 1);
        match choice.decode(&bytes[..bytes.len() - 1], 100) {
            Err(_) => Ok(()),
            Ok(_) => Err(breach(check, "it decoded".into())),
        }
    });
    let feedback = choice.refuses_error_feedback().is_none();
    let compression = format!(
        r#"compression={{"uplink":{{"name":"{compressor}"}},"error_feedback":{feedback}}}"#
    );
    let mode = [compression.as_str()];
    let kit = Kit {
        registry,
        algorithm: compressor,
        strategy: json!({"name": "fedavg"}),
        scratch: scratch.join(format!("compressor-{compressor}")),
        mode: &mode,
    };
    let _ = fs::remove_dir_all(&kit.scratch);
    let flat = kit.finish("flat", &[])?;
    checks.passed.push("runs flat");
    checks.run("relay equals flat", || {
        let relay = kit.finish("relay", &[RELAY])?;
        kit.same("relay equals flat", &relay, &flat, &["traffic"])
    });
    checks.run("one worker equals two", || {
        let serial = kit.finish("one-worker", &["federation.num_parallels=1"])?;
        kit.same("one worker equals two", &serial, &flat, &[])
    });
    checks.run(RESUMES, || kit.resumes(RESUMES, &flat, &[]));
    checks.run(RESUMES_SPILLED, || {
        kit.resumes(RESUMES_SPILLED, &flat, &[SPILLING])
    });
    checks.run("aggregating schedulers refused", || {
        let reason = "an aggregating scheduler would have to decode";
        kit.refused("aggregating schedulers refused", &aggregate(1), reason)
    });
    let fixed_length = [3, 100, 1000]
        .iter()
        .all(|&len| encoded(&varied(len), 1).len() == encoded(&vec![0.0; len], 2).len());
    if fixed_length {
        let check = "the links count each upload's encoded bytes";
        checks.run(check, || kit.counts_encoded_bytes(check, &flat, &encoded));
    }
    checks.into_result()
}

/// The checks run so far: those that held, and the breaches of those that did not.
struct Checks {
    passed: Vec<&'static str>,
    breaches: Vec<Nonconformance>,
}

impl Checks {
    /// Runs the check `name`, noting whether it held; a breach does not stop the checks that
    /// follow.
    fn run(&mut self, name: &'static str, check: impl FnOnce() -> Result<(), Nonconformance>) {
        match check() {
            Ok(()) => self.passed.push(name),
            Err(breach) => self.breaches.push(breach),
        }
    }

    /// The checks that held, or the first breach with every later one in its `others`.
    fn into_result(self) -> Result<Vec<&'static str>, Nonconformance> {
        let mut breaches = self.breaches.into_iter();
        match breaches.next() {
            None => Ok(self.passed),
            Some(mut first) => {
                first.others = breaches.collect();
                Err(first)
            }
        }
    }
}

/// Checks the algorithm's `index`-th declared reduction alone ([`check`] checks them all).
pub fn reduction(
    registry: &Registry,
    algorithm: &str,
    index: usize,
    scratch: &Path,
) -> Result<(), Nonconformance> {
    let kit = Kit {
        registry,
        algorithm,
        strategy: json!({"name": algorithm}),
        scratch: scratch.join(algorithm),
        mode: &[],
    };
    kit.reduction(index)
}

/// The check that a stopped run resumes.
const RESUMES: &str = "a stopped run resumes to the same bits";
/// The check that a stopped run resumes with its clients' states spilled to the run folder.
const RESUMES_SPILLED: &str =
    "a stopped run whose clients' states are spilled resumes to the same bits";

/// A budget for the clients' states of 2 KiB: one state of a whole model of the kit's (a
/// little over 1 KiB) fits, and the others go to the run folder.
const SPILLING: &str = "federation.client_state_memory_mb=0.002";

/// The check that a selection respects availability and is reproducible.
const AVAILABLE: &str = "a selection takes only online clients, the same on a rerun";

/// The kit's seed and clients, as [`base`] sets them.
const SEED: u64 = 3;
const CLIENTS: usize = 13;

/// A day-night availability of the kit's clients: a day of 2 simulated seconds, half of it
/// online.
const DAY_S: f64 = 2.0;
const ONLINE_FRACTION: f64 = 0.5;
const DIURNAL: &str =
    r#"availability={"online":{"kind":"diurnal","period_s":2,"online_fraction":0.5}}"#;

/// The round whose clients fail in the failure checks.
const FAILING_ROUND: u32 = 2;

/// An asynchronous federation of the kit's clients (10 in flight (FedBuff's default buffer),
/// of speeds spread widely).
const ASYNCHRONOUS: &[&str] = &[
    "federation.clients_per_round=null",
    r#"asynchronous={"concurrency":10}"#,
    r#"network.compute={"kind":"lognormal","median":100,"sigma":1}"#,
];

/// Two relaying schedulers.
const RELAY: &str = r#"topology={"kind":"hierarchical","schedulers":2,"mode":"relay"}"#;

/// A split whose clients hold different numbers of samples.
const UNEQUAL: &str = r#"{"scheme":"quantity","sigma":1}"#;

/// Two aggregating schedulers with `edge_rounds` edge rounds.
fn aggregate(edge_rounds: u32) -> String {
    format!(
        r#"topology={{"kind":"hierarchical","schedulers":2,"mode":"aggregate","edge_rounds":{edge_rounds}}}"#
    )
}

/// The kit's experiment: small, real and fast. The network has a hidden layer, so that a
/// client half that computes on its representation (MOON's) trains parameters through it.
/// Every client holds test samples of its own, so each check covers the clients' scores and a
/// personalised algorithm's personal models.
fn base(strategy: &Value) -> Value {
    json!({
        "name": "conformance",
        "seed": SEED,
        "data": {"dataset": "breast-cancer"},
        "partition": {"scheme": "iid"},
        "model": {"name": "mlp", "hidden": [8]},
        "federation": {"num_clients": CLIENTS, "clients_per_round": 6, "rounds": 4, "num_parallels": 2},
        "client": {"epochs": 1, "batch_size": 8, "lr": 0.05},
        "strategy": strategy,
        "eval": {"every": 1, "client_test_fraction": 0.25}
    })
}

/// The runs of one algorithm's checks.
struct Kit<'a> {
    registry: &'a Registry,
    algorithm: &'a str,
    scratch: PathBuf,
    /// The experiment file's `strategy` section: the algorithm's name and parameters.
    strategy: Value,
    /// Settings every run of the kit takes first: none, or the asynchronous federation's.
    mode: &'a [&'a str],
}

impl Kit<'_> {
    fn breach(&self, check: &'static str, detail: String) -> Nonconformance {
        Nonconformance {
            algorithm: self.algorithm.to_string(),
            check,
            detail,
            others: Vec::new(),
        }
    }

    /// The kit's experiment with `sets`, loaded as a file would be.
    fn config(&self, sets: &[&str]) -> Result<ExperimentConfig, Error> {
        let overrides = self
            .mode
            .iter()
            .chain(sets)
            .map(|text| Override::parse(text))
            .collect::<Result<Vec<_>, _>>()?;
        let path = self.scratch.join("experiment.json");
        let config = ExperimentConfig::with_overrides(
            base(&self.strategy),
            &path,
            &overrides,
            self.registry,
        )?;
        Ok(config)
    }

    /// Starts the run `name` with `sets`, following it with `progress`.
    fn start(
        &self,
        name: &str,
        sets: &[&str],
        progress: &Progress,
        stop: &StopSignal,
    ) -> Result<RunResult, Error> {
        let experiment = Experiment::prepare(self.config(sets)?, self.registry)?;
        let played = Run::new(experiment, &self.scratch.join(name))?.play(progress, stop, None)?;
        Ok(played.expect("a new run has rounds to play"))
    }

    /// The run `name` with `sets`, which must finish.
    fn finish(&self, name: &str, sets: &[&str]) -> Result<RunResult, Nonconformance> {
        self.start(name, sets, &Progress::Silent, &StopSignal::new())
            .map_err(|error| self.breach("runs", format!("{name} ({}): {error}", sets.join(" "))))
    }

    /// Checks that the algorithm's `index`-th declared reduction gives the other algorithm's
    /// bits: on equal clients where it says so (unequal ones otherwise), in the first round
    /// where it says so.
    fn reduction(&self, index: usize) -> Result<(), Nonconformance> {
        let check = "a declared reduction holds";
        let info = self.registry.algorithm(self.algorithm);
        let reduction = info
            .as_ref()
            .and_then(|info| info.reductions.get(index))
            .ok_or_else(|| self.breach(check, format!("no reduction {index} is declared")))?;
        let mut params = reduction.params.clone();
        params.insert("name".into(), Value::String(self.algorithm.to_string()));
        let mut sets = vec![format!("strategy={}", Value::Object(params))];
        if reduction.first_round_only {
            sets.push("federation.rounds=1".into());
        }
        sets.extend(
            reduction
                .settings
                .iter()
                .map(|(path, value)| format!("{path}={value}")),
        );
        if !reduction.equal_clients {
            sets.push(format!("partition={UNEQUAL}"));
        }
        let reduced_sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let reduced = self.finish(&format!("reduction-{index}"), &reduced_sets)?;
        sets[0] = format!(r#"strategy={{"name":"{}"}}"#, reduction.equals);
        let target_sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let target = self.finish(
            &format!("reduction-{index}-{}", reduction.equals),
            &target_sets,
        )?;
        // A personalised algorithm that reduces to one that is not gives its global model, and
        // scores its personal models besides.
        let target_unpersonalised = target.rounds.iter().all(|r| r.personal_accuracy.is_none());
        let ignored: &[&str] = match target_unpersonalised {
            true => &["traffic", "strategy", "personal_accuracy"],
            false => &["traffic", "strategy"],
        };
        self.same(check, &reduced, &target, ignored)
    }

    /// Checks that `run` gave `reference`'s records, but for `ignored` fields and the wall
    /// time, and its model, to the bit. A difference is named where it first shows: the
    /// round and its fields that differ, or the final model's first differing parameter and
    /// the largest difference.
    fn same(
        &self,
        check: &'static str,
        run: &RunResult,
        reference: &RunResult,
        ignored: &[&str],
    ) -> Result<(), Nonconformance> {
        let (a, b) = (
            records(&run.rounds, ignored),
            records(&reference.rounds, ignored),
        );
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
            let detail = format!(
                "round {} differs: {}",
                i + 1,
                field_differences(&a[i], &b[i])
            );
            return Err(self.breach(check, detail));
        }
        if a.len() != b.len() {
            return Err(self.breach(check, format!("{} rounds against {}", a.len(), b.len())));
        }
        match model_difference(&run.model, &reference.model) {
            Some(detail) => Err(self.breach(check, format!("the final models differ: {detail}"))),
            None => Ok(()),
        }
    }

    /// Checks that each round's uploads through the server's links took exactly their
    /// encodings' bytes besides the message's fixed fields, for a compressor whose encoding's
    /// length (which `encoded` gives) depends on the length alone.
    fn counts_encoded_bytes(
        &self,
        check: &'static str,
        run: &RunResult,
        encoded: &dyn Fn(&[f32], u64) -> Vec<u8>,
    ) -> Result<(), Nonconformance> {
        let payload = encoded(&vec![0.0; run.model.len()], 0).len() as u64;
        // Header, the update's counts and loss, its one client's id.
        let per_upload = crate::network::message::HEADER_BYTES + 16 + 4 + payload;
        for record in &run.rounds {
            let server = record.traffic.iter().find(|t| t.tier == "server");
            let (uploads, bytes) = server.map_or((0, 0), |t| (t.messages_up, t.bytes_up));
            if bytes != uploads * per_upload {
                return Err(self.breach(
                    check,
                    format!(
                        "round {}: {bytes} bytes up in {uploads} uploads, not {per_upload} each",
                        record.round
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks that the experiment with `set` is refused, giving `reason`.
    fn refused(&self, check: &'static str, set: &str, reason: &str) -> Result<(), Nonconformance> {
        match self.config(&[set]) {
            Err(error) if error.to_string().contains(reason) => Ok(()),
            Err(error) => Err(self.breach(check, format!("refused without its reason: {error}"))),
            Ok(_) => Err(self.breach(check, "the experiment was accepted".into())),
        }
    }

    /// Checks that a run with `sets` stopped after its first round and resumed gives
    /// `straight`'s bits. The stop is asked for as the first round's record arrives, while the
    /// server goes on; a run fast enough to finish first is tried again.
    fn resumes(
        &self,
        check: &'static str,
        straight: &RunResult,
        sets: &[&str],
    ) -> Result<(), Nonconformance> {
        for attempt in 0..5 {
            let name = format!("stopped-{}{attempt}", sets.len());
            let stop = StopSignal::new();
            let asked = stop.clone();
            let progress = Progress::Each(Box::new(move |record: &RoundRecord| {
                if record.round == 1 {
                    asked.request();
                }
            }));
            match self.start(&name, sets, &progress, &stop) {
                Ok(_) => continue,
                Err(Error::Stopped { .. }) => {}
                Err(error) => return Err(self.breach(check, format!("the stopped run: {error}"))),
            }
            let resumed = Run::resume(&self.scratch.join(&name), self.registry)
                .and_then(|run| run.play(&Progress::Silent, &StopSignal::new(), None))
                .map_err(|error| self.breach(check, format!("resuming: {error}")))?
                .ok_or_else(|| {
                    self.breach(check, "the resumed run had nothing left to do".into())
                })?;
            return self.same(check, &resumed, straight, &[]);
        }
        Err(self.breach(
            check,
            "every run finished before its stop took effect".into(),
        ))
    }

    /// Checks that under a day-night availability every client a round takes or probes was
    /// online when the round started, and that a rerun chooses the same.
    fn respects_availability(&self) -> Result<(), Nonconformance> {
        let sets = [DIURNAL];
        let run = self.finish("available", &sets)?;
        let availability = Availability::diurnal(SEED, CLIENTS, DAY_S, ONLINE_FRACTION);
        let clients = || 0..CLIENTS;
        let mut ended = 0.0;
        for record in &run.rounds {
            // A round starts when the last ended, or when a client comes online after that.
            let started = match availability.online_among(clients(), ended).is_empty() {
                true => availability
                    .next_online_among(clients(), ended)
                    .unwrap_or(ended),
                false => ended,
            };
            let online = availability.online_among(clients(), started);
            let probed = record.probed.iter().map(|p| &p.client);
            if let Some(client) = record
                .clients
                .iter()
                .chain(probed)
                .find(|c| !online.contains(c))
            {
                return Err(self.breach(
                    AVAILABLE,
                    format!(
                        "round {} took client {client}, offline when the round started at {started} s",
                        record.round
                    ),
                ));
            }
            ended = record.sim_time_s;
        }
        let again = self.finish("available-again", &sets)?;
        self.same(AVAILABLE, &again, &run, &[])
    }

    /// The checks of an asynchronous federation (see the module documentation).
    fn asynchronous(&self) -> Result<Vec<&'static str>, Nonconformance> {
        let _ = fs::remove_dir_all(&self.scratch);
        let mut passed = Vec::new();
        let flat = self.finish("flat", &[])?;
        passed.push("runs asynchronously");
        let relay = self.finish("relay", &[RELAY])?;
        self.same(
            "asynchronous relay equals flat",
            &relay,
            &flat,
            &["traffic"],
        )?;
        passed.push("asynchronous relay equals flat");
        let serial = self.finish("one-worker", &["federation.num_parallels=1"])?;
        self.same("asynchronous: one worker equals two", &serial, &flat, &[])?;
        passed.push("asynchronous: one worker equals two");
        self.refused(
            "asynchronous: aggregating schedulers refused",
            &aggregate(1),
            "an asynchronous federation runs flat or under relaying schedulers",
        )?;
        passed.push("asynchronous: aggregating schedulers refused");
        let check = "a stopped asynchronous run resumes to the same bits";
        self.resumes(check, &flat, &[])?;
        passed.push(check);
        // Every first dispatch fails, so the first answer on the clock is a failure.
        let check = "a failing client ends an asynchronous run";
        let first_dispatches: Vec<u32> = (1..=10).collect();
        let flat = "topology={\"kind\":\"flat\"}";
        let failing = self.fails(check, "failing-flat", (flat, &first_dispatches), None)?;
        self.fails(
            check,
            "failing-relay",
            (RELAY, &first_dispatches),
            Some(failing),
        )?;
        passed.push(check);
        Ok(passed)
    }

    /// Checks that, every client failing in `rounds`, the run `name` under `topology` ends
    /// naming `expected` (round and client), or any one if `expected` is `None`; returns the
    /// round and client named.
    fn fails(
        &self,
        check: &'static str,
        name: &str,
        (topology, rounds): (&str, &[u32]),
        expected: Option<(u32, usize)>,
    ) -> Result<(u32, usize), Nonconformance> {
        let faults: Vec<String> = rounds
            .iter()
            .flat_map(|round| {
                (0..13).map(move |client| {
                    format!(r#"{{"round":{round},"client":{client},"kind":"error"}}"#)
                })
            })
            .collect();
        let faults = format!("faults=[{}]", faults.join(","));
        match self.start(
            name,
            &[topology, &faults],
            &Progress::Silent,
            &StopSignal::new(),
        ) {
            Err(Error::Federation(FederationError::ClientFailed { round, client, .. }))
                if expected.is_none_or(|named| named == (round, client)) =>
            {
                Ok((round, client))
            }
            Err(error) => Err(self.breach(check, format!("ended with: {error}"))),
            Ok(_) => Err(self.breach(check, "the run finished".into())),
        }
    }
}

/// The fields in which two records differ, each with both values: `train_loss 0.5 against
/// 0.25, test_accuracy 0.9 against 0.8`.
fn field_differences(a: &Value, b: &Value) -> String {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return format!("{a} against {b}");
    };
    let fields: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let missing = Value::Null;
    fields
        .into_iter()
        .filter_map(|field| {
            let (x, y) = (
                a.get(field).unwrap_or(&missing),
                b.get(field).unwrap_or(&missing),
            );
            (x != y).then(|| format!("{field} {x} against {y}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How two models differ, or `None` where they are the same to the bit: their first
/// differing parameter with both values, how many differ, and the largest difference.
fn model_difference(model: &[f32], reference: &[f32]) -> Option<String> {
    if model.len() != reference.len() {
        return Some(format!(
            "{} parameters against {}",
            model.len(),
            reference.len()
        ));
    }
    let differing: Vec<usize> = (0..model.len())
        .filter(|&i| model[i].to_bits() != reference[i].to_bits())
        .collect();
    let &first = differing.first()?;
    let largest = differing
        .iter()
        .map(|&i| (f64::from(model[i]) - f64::from(reference[i])).abs())
        .fold(0.0, f64::max);
    Some(format!(
        "parameter {first} is {} against {}; {} of {} parameters differ, by up to {largest:e}",
        model[first],
        reference[first],
        differing.len(),
        model.len()
    ))
}

/// The records as JSON, without their wall time and `ignored` fields.
fn records(rounds: &[RoundRecord], ignored: &[&str]) -> Vec<Value> {
    rounds
        .iter()
        .map(|record| {
            let mut value = serde_json::to_value(record).expect("a record serialises");
            let fields = value.as_object_mut().expect("a record is an object");
            fields.remove("wall_ms");
            for field in ignored {
                fields.remove(*field);
            }
            value
        })
        .collect()
}
