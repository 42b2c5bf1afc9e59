//! One experiment end to end: data, partition, initial model, federation, results.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use crate::availability::Availability;
use crate::checkpoint::{CHECKPOINT, InFlightState, RunState};
use crate::config::Placement;
use crate::config::{ClipConfig, ExperimentConfig, NoiseSite};
use crate::connect::InProcess;
use crate::data::partition::{Partition, PartitionStats};

use crate::error::Error;
use crate::history::ClientHistory;
use crate::model::Sharing;
use crate::model::flat::{Layout, initial_params};
use crate::network::{ClientId, Tensors};
use crate::output::atomic::WriteError;
use crate::output::claim::{self, Claim, FolderKind, Found};
use crate::output::manifest::{PluginUse, Resume};
use crate::output::run_folder::{FolderError, Saved, claim_to_continue};
use crate::output::{
    Environment, Manifest, PrivacySpent, Progress, RoundRecord, RunFolder, Summary,
};
use crate::privacy::mechanism::{ClientClipping, ClipGroups};
use crate::registry::{
    self, AlgorithmChoice, DataChoice, ModelChoice, Origin, PartitionChoice, Registry,
    UplinkCompression,
};
use crate::secure::Masking;
use crate::seed::{Purpose, stream};
use crate::states::{ClientStates, StatesSnapshot};
use crate::stop::StopSignal;
use crate::strategy::{FreshModels, PrivateServer, SecureServer, Selector, ServerHalf, Setting};
use crate::topology::{
    self, ClientConditions, EvaluationPlan, FederationError, GroupSetup, Plan, ServerMode,
    ServerSetup, Spread, Start,
};
use crate::training::personal::PersonalSplit;
use crate::training::{ClientStarts, TestEvaluator};
use crate::training::{InjectedFaults, Trainer, TrainerSetup};

/// The run folder's manifest file.
const MANIFEST: &str = "manifest.json";

/// The run folder's resolved experiment.
const CONFIG: &str = "config.json";

/// The run folder's record of which client holds which samples.
const PARTITION: &str = "partition.json";

/// The run folder's list of the clients `eval.clients_sampled` drew.
const EVAL_CLIENTS: &str = "eval_clients.json";

mod held;

use held::{Allocation, HeldData};

/// An experiment with its data loaded and partitioned, ready to run.
pub struct Experiment {
    config: ExperimentConfig,
    /// The algorithm the `strategy` section names, with its parameters.
    algorithm: AlgorithmChoice,
    /// The architecture the `model` section names, with its hyperparameters.
    model: ModelChoice,
    /// The data set the `data` section names, with its parameters.
    data_set: DataChoice,
    /// The scheme the `partition` section names, with its parameters.
    scheme: PartitionChoice,
    /// Its parameter layout for the data set.
    layout: Layout,
    /// The layers that stay with each client with the initial model's values, where the
    /// algorithm keeps some.
    personal: Option<Arc<PersonalSplit>>,
    /// The compressor each client's upload is encoded with, and whether its loss is fed back,
    /// where the `compression` section asks.
    compression: Option<UplinkCompression>,
    /// The data as the federation holds it: each client's training samples, the test samples,
    /// and the test samples of each client scored.
    held: HeldData,
    /// When each client is online.
    availability: Arc<Availability>,
}

/// Where a run shows its rounds and what stops it.
#[derive(Clone, Copy)]
struct Watch<'a> {
    progress: &'a Progress,
    stop: &'a StopSignal,
}

/// Where a run stands when it plays on: its checkpointed state, the algorithm's server side in
/// the state that holds, and the records of the rounds played.
struct Standing {
    state: RunState,
    side: ServerSide,
    records: Vec<RoundRecord>,
}

/// The algorithm's part on the server: its server half and its selector.
struct ServerSide {
    half: ServerHalf,
    selector: Box<dyn Selector>,
}

impl ServerSide {
    /// Takes back the states a checkpoint holds of each.
    fn restore(&mut self, state: &RunState) -> Result<(), String> {
        self.half
            .restore(&state.strategy_state)
            .map_err(|e| format!("its strategy state does not fit: {e}"))?;
        self.selector
            .restore(&state.selector_state)
            .map_err(|e| format!("its selector state does not fit: {e}"))
    }
}

/// How the server half starts: after which round, from which global model, with the
/// algorithm's server side in its state and what the server had seen of each client.
struct ServerStart {
    start: Start,
    model: Vec<f32>,
    side: ServerSide,
    history: ClientHistory,
    /// In an asynchronous federation, the dispatches and clients in flight to resume from.
    in_flight: Option<(u32, Vec<InFlightState>)>,
}

/// What a finished run returns besides its files.
#[derive(Debug)]
pub struct RunResult {
    /// The contents of `summary.json`.
    pub summary: Summary,
    /// Every round's record, as in `metrics.jsonl`.
    pub rounds: Vec<RoundRecord>,
    /// The final global model's flat parameters.
    pub model: Vec<f32>,
}

impl Experiment {
    /// Loads the data set and splits it as the config says, with the data set, partition
    /// scheme, model and algorithm that `registry` gives for its sections.
    pub fn prepare(config: ExperimentConfig, registry: &Registry) -> Result<Self, Error> {
        let algorithm = registry.algorithm_for(&config)?;
        let context = registry::data_context(&config);
        let data_set = registry
            .choose_data(&config.data, None, &context)
            .map_err(registry::invalid_in_code)?;
        let split = registry::split_context(&config, &data_set);
        let scheme = registry
            .choose_partition(&config.partition, None, &split)
            .map_err(registry::invalid_in_code)?;
        let num_clients = config.federation.num_clients;
        let availability = config
            .availability
            .online
            .load(config.seed, num_clients)
            .map_err(|(field, message)| {
                registry::invalid_in_code(vec![(format!("availability.online.{field}"), message)])
            })?;
        let held = HeldData::prepare(&config, &data_set, &scheme, &context)?;
        // Arrays may hold images or rows: only now is it known whether the model fits them
        // (for the other data sets, validation has told).
        let sample = held.shape.sample;
        let model = registry
            .choose_model(&config.model, Some(sample.kind()))
            .map_err(|problems| {
                let (field, message) = problems.into_iter().next().unwrap_or_default();
                let source = data_set.describe();
                Error::ModelDoesNotFit(format!("{source} holds {sample}; {field}: {message}"))
            })?;
        let layout = model
            .layout(held.shape)
            .map_err(|unknown| Error::ModelDoesNotFit(unknown.to_string()))?;
        // A natural split may turn out, once read, to hold no test samples of its clients.
        let natural = held.client_tests.is_some();
        if let Some(problem) = registry::unscored_personal_models(&algorithm, &config, natural) {
            return Err(registry::invalid_in_code(vec![problem]).into());
        }
        let personal = personal_sharing(&algorithm, &layout, &config)
            .map_err(|problem| registry::invalid_in_code(vec![problem]))?
            .map(|sharing| {
                let initial = initial_model(config.seed, &layout, 0);
                Arc::new(PersonalSplit::new(sharing, &initial))
            });
        // Only now is the number of values a client sends known, which a compressor's count
        // may not exceed.
        let sent = personal
            .as_ref()
            .map_or(layout.len(), |p| p.sharing.shared_len());
        let compression = config
            .compression
            .as_ref()
            .map(|section| {
                registry
                    .choose_compressor(&section.uplink, sent)
                    .map(|compressor| UplinkCompression {
                        compressor,
                        error_feedback: section.error_feedback,
                    })
            })
            .transpose()
            .map_err(registry::invalid_in_code)?;
        Ok(Self {
            config,
            algorithm,
            model,
            data_set,
            scheme,
            layout,
            personal,
            compression,
            held,
            availability: Arc::new(availability),
        })
    }

    /// The resolved config.
    pub fn config(&self) -> &ExperimentConfig {
        &self.config
    }

    /// The split of the training set among clients, where the data set is held whole (not
    /// where its clients are made on demand).
    pub fn partition(&self) -> Option<&Partition> {
        match &self.held.allocation {
            Allocation::Split { partition, .. } => Some(partition),
            Allocation::OnDemand(..) => None,
        }
    }

    /// What `partition_stats.json` holds: per-client label counts and their spread, or the
    /// spread of the sample counts alone where clients are made on demand.
    pub fn partition_stats(&self) -> Result<PartitionStats, Error> {
        Ok(self.held.allocation.stats_at_start()?)
    }

    /// Per-client label counts and their spread, clients made on demand each made (in
    /// parallel) to count theirs: for `fedsim partition` and reports' charts.
    pub fn label_stats(&self) -> Result<PartitionStats, Error> {
        Ok(self.held.allocation.stats()?)
    }

    /// Where the tiers run over `ranks` processes: the `placement` section or its rule; an
    /// error for a securely aggregated run over several processes.
    pub fn placement(&self, ranks: usize) -> Result<Placement, Error> {
        let config = &self.config;
        if ranks > 1 && config.secure_aggregation.is_some() {
            // The server counts the protocol's played-out messages on its own links, which a
            // run over several processes sets from the counts of the other ranks.
            let problem = (
                "secure_aggregation".to_string(),
                format!(
                    "is set; secure aggregation over {ranks} MPI processes is not built: run \
                     it in one process"
                ),
            );
            return Err(registry::invalid_in_code(vec![problem]).into());
        }
        let topology = &config.topology;
        config
            .placement
            .resolve(topology, config.federation.num_clients, ranks)
            .map_err(Error::Placement)
    }

    /// Starts a new run in `folder` (just created), the tiers placed and linked as `spread`
    /// says (this process runs the server): writes the resolved config, the partition and a
    /// checkpoint of round 0, then plays every round, writing results as they are produced
    /// and showing each round as `watch` asks.
    fn start(
        &self,
        folder: &mut RunFolder,
        watch: Watch<'_>,
        spread: Spread<'_>,
    ) -> Result<RunResult, Error> {
        let config = &self.config;
        folder.write_json(CONFIG, config)?;
        let partition = self.held.allocation.to_json();
        folder.write_atomically(PARTITION, partition.as_bytes())?;
        folder.write_json("partition_stats.json", &self.partition_stats()?)?;
        if let Some(clients) = &self.held.eval_clients {
            folder.write_json(EVAL_CLIENTS, clients)?;
        }
        let partition_sha256 = sha256_hex(partition.as_bytes());
        let manifest = Manifest {
            environment: Environment::current(),
            backend: config.backend.name().to_string(),
            data_files: self.held.files.clone(),
            partition_sha256: partition_sha256.clone(),
            command_line: command_line(),
            plugins: self.plugins(),
            resumed: Vec::new(),
        };
        folder.write_json(MANIFEST, &manifest)?;
        let attackers = self.attackers();
        if !attackers.is_empty() {
            folder.write_json("attackers.json", &attackers)?;
        }
        let model = self.fresh(0);
        let side = self.server_side();
        let start = RunState {
            config: serde_json::to_value(config).expect("a config always serialises"),
            partition_sha256,
            round: 0,
            sim_time_s: 0.0,
            model,
            strategy_state: side.half.state(),
            selector_state: side.selector.state(),
            client_history: ClientHistory::new(),
            client_states: StatesSnapshot::default(),
            in_flight: None,
        };
        folder.checkpoint(&start)?;
        let standing = Standing {
            state: start,
            side,
            records: Vec::new(),
        };
        self.play(folder, watch, standing, spread)
    }

    /// Runs the tiers that `spread` gives this process, which does not run the server, until
    /// the server's process ends the tree.
    pub fn serve(&self, spread: Spread<'_>, stop: &StopSignal) -> Result<(), Error> {
        let budget = self.config.federation.client_state_budget();
        let states = Arc::new(ClientStates::spilling_to_temporary(budget)?);
        let server = ServerStart {
            start: Start::default(),
            model: Vec::new(),
            side: self.server_side(),
            history: ClientHistory::new(),
            in_flight: None,
        };
        let plan = self.plan(server, &states, stop, &spread.placement);
        let trainer = self.trainer(&states, stop)?;
        let ignore_rounds = |_| Ok::<_, Error>(());
        topology::run_over(plan, Arc::new(trainer), spread.connector, ignore_rounds)??;
        Ok(())
    }

    /// Writes `partition.json` again from the run's own split (whose SHA-256 is `digest`, as
    /// the checkpoint says) if it was edited or removed since the run wrote it, and says so: the
    /// finished folder then holds the partition its manifest names.
    fn restore_partition(&self, folder: &RunFolder, digest: &str) -> Result<(), Error> {
        let path = folder.dir().join(PARTITION);
        let written = std::fs::read(&path).ok();
        if written.as_deref().map(sha256_hex).as_deref() == Some(digest) {
            return Ok(());
        }
        folder.write_atomically(PARTITION, self.held.allocation.to_json().as_bytes())?;
        let what = if written.is_some() {
            "was changed"
        } else {
            "was missing"
        };
        eprintln!(
            "note: {} {what}; written again from the run's own split",
            path.display()
        );
        Ok(())
    }

    /// The Byzantine clients, in id order (none without a `byzantine` section).
    pub fn attackers(&self) -> Vec<ClientId> {
        let config = &self.config;
        config.byzantine.as_ref().map_or_else(Vec::new, |b| {
            b.attackers(config.seed, config.federation.num_clients)
        })
    }

    /// The algorithm the experiment runs.
    pub fn algorithm(&self) -> &AlgorithmChoice {
        &self.algorithm
    }

    /// The components it uses that another crate than fedsim registered, for the manifest.
    fn plugins(&self) -> Vec<PluginUse> {
        let used = [
            ("algorithm", self.algorithm.name(), self.algorithm.origin()),
            ("model", self.model.name(), self.model.origin()),
            ("data set", self.data_set.name(), self.data_set.origin()),
            ("partition scheme", self.scheme.name(), self.scheme.origin()),
        ];
        used.into_iter()
            .filter(|(_, _, origin)| **origin != Origin::fedsim())
            .map(|(kind, name, origin)| PluginUse {
                kind: kind.to_string(),
                name: name.to_string(),
                origin: origin.clone(),
            })
            .collect()
    }

    /// What the algorithm's halves are built for.
    fn setting(&self) -> Setting<'_> {
        Setting::of(&self.config).with_fresh_models(self)
    }

    /// What the clients and the server of a securely aggregated run agree on: a client's
    /// weight is its share of the largest client's samples where the algorithm weighs by
    /// samples.
    fn masking(&self) -> Option<Masking> {
        let secure = self.config.secure_aggregation.as_ref()?;
        let half = self
            .algorithm
            .server_half(&self.setting(), self.layout().len());
        let by_samples = match &half {
            ServerHalf::Rounds(strategy) => SecureServer::weighs_by_samples(strategy.as_ref()),
            ServerHalf::Asynchronous(_) => unreachable!("validation refuses asynchronous runs"),
        };
        // The samples each client trains on: its share of the training set, less any held out.
        let largest = Some(self.held.clients.largest());
        Some(Masking::new(
            self.config.seed,
            secure.threshold(self.config.federation.round_size()),
            secure.range,
            largest.filter(|_| by_samples),
        ))
    }

    /// What a private run's clients do to their trained models before they send them.
    fn client_clipping(&self) -> Option<ClientClipping> {
        let privacy = self.config.privacy.as_ref()?;
        let sharing = self.personal.as_ref().map(|split| &split.sharing);
        let mut offset = 0;
        let layers = self.layout.params.iter().map(|param| {
            let shared = sharing.is_none_or(|s| !s.is_personal(offset));
            offset += param.len();
            (param.len(), shared)
        });
        Some(ClientClipping {
            seed: self.config.seed,
            groups: ClipGroups::of_layers(layers, privacy.per_layer),
            fixed_clip: match privacy.clip {
                ClipConfig::Fixed { norm } => Some(norm),
                ClipConfig::Adaptive { .. } => None,
            },
            local_noise: (privacy.noise == NoiseSite::Local).then_some(privacy.noise_multiplier),
        })
    }

    /// The experiment's algorithm on the server, as it starts: made private where the
    /// experiment asks (its validation refused an algorithm that cannot be).
    fn server_side(&self) -> ServerSide {
        let setting = self.setting();
        let mut half = self.algorithm.server_half(&setting, self.layout().len());
        if let Some(privacy) = &self.config.privacy
            && let ServerHalf::Rounds(strategy) = half
        {
            let federation = &self.config.federation;
            let private = PrivateServer::new(
                strategy,
                privacy,
                self.config.seed,
                federation.num_clients,
                federation.round_size(),
            )
            .expect("validation refuses an algorithm that cannot run privately");
            half = ServerHalf::Rounds(Box::new(private));
        }
        if let Some(masking) = self.masking()
            && let ServerHalf::Rounds(strategy) = half
        {
            let secure = SecureServer::new(strategy, Arc::new(masking))
                .expect("validation refuses an algorithm that cannot aggregate securely");
            half = ServerHalf::Rounds(Box::new(secure));
        }
        let selector = half
            .selector()
            .unwrap_or_else(|| self.algorithm.selector(&setting));
        ServerSide { half, selector }
    }

    /// Plays the rounds after the one the run stands at, showing each on `watch.progress`.
    fn play(
        &self,
        folder: &mut RunFolder,
        watch: Watch<'_>,
        standing: Standing,
        spread: Spread<'_>,
    ) -> Result<RunResult, Error> {
        let Watch { progress, stop } = watch;
        let Standing {
            mut state,
            side,
            mut records,
        } = standing;
        let config = &self.config;
        let rounds = config.federation.rounds;
        let server = ServerStart {
            start: Start {
                round: state.round,
                sim_time_s: state.sim_time_s,
            },
            model: state.model.clone(),
            side,
            history: state.client_history.clone(),
            in_flight: state.in_flight.clone(),
        };
        let budget = config.federation.client_state_budget();
        let states = Arc::new(ClientStates::spilling_to(folder.dir(), budget));
        states
            .restore(&state.client_states)
            .map_err(|e| FolderError::not_resumable(folder.dir(), e.to_string()))?;
        let plan = self.plan(server, &states, stop, &spread.placement);
        let trainer = self.trainer(&states, stop)?;
        // The latest round not yet in the checkpoint, if any.
        let mut pending = None;
        let federation = topology::run_over(plan, Arc::new(trainer), spread.connector, |end| {
            folder.append_round(&end.record)?;
            progress.round(&end.record);
            let round = end.record.round;
            let sim_time_s = end.record.sim_time_s;
            records.push(end.record);
            pending = Some(Advance {
                round,
                sim_time_s,
                model: end.model,
                strategy_state: end.strategy_state,
                selector_state: end.selector_state,
                client_history: end.history,
                client_states: end.client_states,
                in_flight: end.in_flight,
            });
            // The last round's checkpoint waits for the summary: a run whose checkpoint says
            // it is finished has all its files.
            if round.is_multiple_of(config.checkpoint.every) && round < rounds {
                state.advance(pending.take());
                checkpoint(folder, &state, &states)?;
            }
            Ok::<_, Error>(())
        })?
        .map(|result| result.expect("the process that plays the rounds runs the server"));
        if let Err(error) = federation {
            // A checkpoint at the last round says the folder is complete: without the summary
            // it is not, and a resumed run plays the last round again.
            if pending.as_ref().is_some_and(|p| p.round < rounds) {
                state.advance(pending);
            }
            checkpoint(folder, &state, &states)?;
            return Err(match error {
                FederationError::Stopped => Error::Stopped { round: state.round },
                other => other.into(),
            });
        }
        state.advance(pending);
        let result = self.finish(folder, state.model.clone(), records, &states)?;
        checkpoint(folder, &state, &states)?;
        Ok(result)
    }

    /// Writes the final model and the summary.
    fn finish(
        &self,
        folder: &RunFolder,
        model: Vec<f32>,
        rounds: Vec<RoundRecord>,
        states: &ClientStates,
    ) -> Result<RunResult, Error> {
        let bytes: Vec<u8> = model.iter().flat_map(|v| v.to_le_bytes()).collect();
        folder.write_atomically("model.f32", &bytes)?;
        folder.write_json("model-layout.json", &self.layout())?;
        let mut summary = Summary::new(&self.config.name, &rounds, &model);
        let usage = states.usage();
        summary.client_state_bytes = usage.memory_bytes + usage.spilled_bytes;
        summary.client_states =
            (usage.spill_writes > 0 || usage.spilled_bytes > 0).then_some(usage);
        summary.attackers = self.attackers();
        summary.privacy = self.config.privacy.as_ref().map(|privacy| {
            let federation = &self.config.federation;
            let accounting = privacy.accounting(federation.num_clients, federation.round_size());
            PrivacySpent {
                epsilon: accounting.epsilon_after(summary.rounds.into()).epsilon,
                delta: privacy.delta,
            }
        });
        folder.write_json("summary.json", &summary)?;
        Ok(RunResult {
            summary,
            rounds,
            model,
        })
    }

    /// The model's parameter layout: where each parameter's values lie in the flat model.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// What picks the model each client is scored with on its own test samples.
    fn client_starts(&self, states: &Arc<ClientStates>) -> ClientStarts {
        ClientStarts {
            algorithm: self.algorithm.client(&self.setting()),
            training: self.held.clients.clone(),
            client: self.config.client.clone(),
            seed: self.config.seed,
            states: states.clone(),
            personal: self.personal.clone(),
        }
    }

    /// The burn trainer for this experiment's clients.
    fn trainer(&self, states: &Arc<ClientStates>, stop: &StopSignal) -> Result<Trainer, Error> {
        let config = &self.config;
        let setup = TrainerSetup {
            seed: config.seed,
            clients: self.held.clients.clone(),
            model: self.model.clone(),
            client: config.client.clone(),
            algorithm: self.algorithm.client(&self.setting()),
            states: states.clone(),
            byzantine: config.byzantine.as_ref().map(|b| {
                let mut attacking = vec![false; config.federation.num_clients];
                for client in self.attackers() {
                    attacking[client] = true;
                }
                (b.attack, Arc::new(attacking))
            }),
            backend: config.backend,
            faults: InjectedFaults::new(&config.faults),
            stop: stop.clone(),
            personal: self.personal.clone(),
            privacy: self.client_clipping().map(Arc::new),
            compression: self.compression.clone(),
            secure: self.masking().map(Arc::new),
        };
        Trainer::new(setup, config.federation.num_parallels)
            .map_err(|e| Error::Threads(e.to_string()))
    }

    /// The federation tree, its server starting as `server` says, with the clients' states in
    /// `states` and the tiers placed by `placement`.
    fn plan(
        &self,
        server: ServerStart,
        states: &Arc<ClientStates>,
        stop: &StopSignal,
        placement: &Placement,
    ) -> Plan {
        let ServerStart {
            start,
            model,
            side,
            history,
            in_flight,
        } = server;
        let config = &self.config;
        let mode = match (side.half, config.asynchronous) {
            (ServerHalf::Rounds(strategy), _) => ServerMode::Rounds {
                strategy,
                clients_per_round: config.federation.clients_per_round.unwrap_or_default(),
                poisson_rate: config.privacy.as_ref().and_then(|privacy| {
                    let federation = &config.federation;
                    privacy.poisson_rate(federation.num_clients, federation.round_size())
                }),
                deadline_s: config.availability.deadline_s,
            },
            (ServerHalf::Asynchronous(strategy), Some(asynchronous)) => ServerMode::Asynchronous {
                strategy,
                concurrency: asynchronous.concurrency,
                resume: in_flight,
            },
            (ServerHalf::Asynchronous(_), None) => {
                unreachable!("the asynchronous half is built for an asynchronous section")
            }
        };
        let server = ServerSetup {
            seed: config.seed,
            rounds: config.federation.rounds,
            on_client_failure: config.availability.on_client_failure,
            start,
            initial_model: model,
            mode,
            selector: side.selector,
            history,
            availability: self.availability.clone(),
            client_states: states.clone(),
            sharing: self.personal.as_ref().map(|p| Arc::new(p.sharing.clone())),
            compression: self.compression.as_ref().map(|c| c.compressor.clone()),
            secure_aggregation: config
                .secure_aggregation
                .as_ref()
                .map(|secure| secure.threshold(config.federation.round_size())),
            evaluation: Some(EvaluationPlan {
                every: config.eval.every,
                every_s: config.eval.every_s,
                evaluator: Box::new(TestEvaluator {
                    test_data: self.held.test.clone(),
                    batch_size: config.eval.batch_size,
                    model: self.model.clone(),
                    backend: config.backend,
                    clients: self
                        .held
                        .client_tests
                        .clone()
                        .map(|tests| (tests, self.client_starts(states))),
                }),
            }),
        };
        let speeds = Arc::new(
            config
                .network
                .compute
                .speeds(config.seed, config.federation.num_clients),
        );
        let training = &self.held.clients;
        let num_samples: Vec<usize> = (0..training.num_clients())
            .map(|client| training.len_of(client))
            .collect();
        let conditions = ClientConditions {
            seed: config.seed,
            dropout: config.availability.dropout,
            work: config.work_plan(),
            speeds,
            availability: self.availability.clone(),
            measuring_passes: self.algorithm.client(&self.setting()).measuring_passes(),
        };
        let groups = GroupSetup::for_parts(
            placement.client_groups(&config.topology, config.federation.num_clients),
            &num_samples,
            &conditions,
        );
        let mut scheduler_panics: HashMap<usize, Vec<u32>> = HashMap::new();
        for fault in &config.faults {
            if let Some(scheduler) = fault.scheduler {
                scheduler_panics
                    .entry(scheduler)
                    .or_default()
                    .push(fault.round);
            }
        }
        Plan {
            server,
            topology: config.topology.clone(),
            network: config.network.clone(),
            groups,
            scheduler_panics,
            edge_aggregation: self.algorithm.edge_rule(),
            stop: stop.clone(),
        }
    }
}

impl FreshModels for Experiment {
    /// Draw `draw` of the model's initialisation, from its own stream of the seed's
    /// initialisation purpose: draw 0 is the run's initial global model.
    fn fresh(&self, draw: u32) -> Vec<f32> {
        initial_model(self.config.seed, self.layout(), draw)
    }
}

/// A run folder to continue, with its experiment prepared and the rounds it has played.
struct Resumable {
    experiment: Experiment,
    saved: Saved,
    manifest: Manifest,
    side: ServerSide,
    /// Held from opening to the end: no other process writes the folder meanwhile.
    claim: Claim,
}

impl Resumable {
    /// Claims the run folder `dir` and opens its run without changing it, its components
    /// looked up in `registry`. It must hold a checkpoint that fits its experiment, its
    /// `config.json` must be the config the run started with, and the data files must be the
    /// ones it read, so that they split into the same partition.
    fn open(dir: &Path, registry: &Registry) -> Result<Self, Error> {
        let claim = claim_to_continue(dir)?;
        let saved = Saved::read(dir)?;
        let not_resumable = |reason: String| FolderError::not_resumable(dir, reason);
        let config_path = dir.join(CONFIG);
        let written: serde_json::Value = read_json(dir, CONFIG).map_err(not_resumable)?;
        let manifest: Manifest = read_json(dir, MANIFEST).map_err(not_resumable)?;
        let state = &saved.state;
        let edits = differences(&state.config, &written, "");
        if !edits.is_empty() {
            return Err(not_resumable(format!(
                "{} was edited after the run started (a run continues only with its own settings):\n  {}",
                config_path.display(),
                edits.join("\n  ")
            ))
            .into());
        }
        for plugin in &manifest.plugins {
            let registered = match plugin.kind.as_str() {
                "algorithm" => registry.algorithm(&plugin.name).is_some(),
                "model" => registry.model(&plugin.name).is_some(),
                "data set" => registry.data_set(&plugin.name).is_some(),
                "partition scheme" => registry.scheme(&plugin.name).is_some(),
                _ => false,
            };
            if !registered {
                return Err(not_resumable(format!(
                    "the run used the {} {:?} from the crate {} {}, which this program does not register; continue it with the program that does",
                    plugin.kind, plugin.name, plugin.origin.crate_name, plugin.origin.version
                ))
                .into());
            }
        }
        let config = ExperimentConfig::from_value(state.config.clone(), &config_path, registry)?;
        let rounds = config.federation.rounds;
        if state.round > rounds {
            return Err(not_resumable(format!(
                "its checkpoint is at round {}, past the run's {rounds} rounds",
                state.round
            ))
            .into());
        }
        let experiment = Experiment::prepare(config, registry)?;
        let digests = |files: &[crate::data::DataFile]| {
            files.iter().map(|f| f.sha256.clone()).collect::<Vec<_>>()
        };
        if digests(&experiment.held.files) != digests(&manifest.data_files) {
            return Err(not_resumable(
                "the data files differ from the ones the run read (see manifest.json)".to_string(),
            )
            .into());
        }
        let partition = sha256_hex(experiment.held.allocation.to_json().as_bytes());
        if partition != state.partition_sha256 {
            return Err(not_resumable(
                "the data now splits into another partition than the run started with".to_string(),
            )
            .into());
        }
        let params = experiment.layout().len();
        if state.model.len() != params {
            return Err(not_resumable(format!(
                "its checkpoint holds {} parameters; the model has {params}",
                state.model.len()
            ))
            .into());
        }
        let mut side = experiment.server_side();
        side.restore(state).map_err(not_resumable)?;
        Ok(Self {
            experiment,
            saved,
            manifest,
            side,
            claim,
        })
    }

    /// The experiment being continued.
    fn experiment(&self) -> &Experiment {
        &self.experiment
    }

    /// Rounds already played.
    fn rounds_done(&self) -> u32 {
        self.saved.state.round
    }

    /// Whether the run had played all its rounds (and written all its files) already.
    fn is_finished(&self) -> bool {
        self.saved.state.round == self.experiment.config.federation.rounds
    }

    /// Plays the remaining rounds, the tiers placed and linked as `spread` says; a finished
    /// run is left as it is (`None`).
    fn play_on(mut self, watch: Watch<'_>, spread: Spread<'_>) -> Result<Option<RunResult>, Error> {
        if self.is_finished() {
            return Ok(None);
        }
        let mut folder = self.saved.reopen(self.claim)?;
        let digest = &self.saved.state.partition_sha256;
        self.experiment.restore_partition(&folder, digest)?;
        self.manifest.resumed.push(Resume {
            after_round: self.saved.state.round,
            environment: Environment::current(),
            data_files: self.experiment.held.files.clone(),
            command_line: command_line(),
        });
        folder.write_json(MANIFEST, &self.manifest)?;
        let Saved { state, records, .. } = self.saved;
        let standing = Standing {
            state,
            side: self.side,
            records,
        };
        self.experiment
            .play(&mut folder, watch, standing, spread)
            .map(Some)
    }
}

/// A run to play in its folder: a new one, or one to continue. It is the one way to play an
/// experiment: `fedsim run` (with or without `--resume`, in one process or over MPI), every run
/// of a sweep and the conformance kit's runs play one. The processes of an MPI run that do not
/// run the server hold tiers of it instead ([`Experiment::serve`]).
pub struct Run(Playing);

/// What a [`Run`] plays.
enum Playing {
    /// A new run, its folder just created.
    New {
        experiment: Box<Experiment>,
        folder: RunFolder,
    },
    /// A run to continue from its folder's checkpoint.
    Resumed(Box<Resumable>),
}

impl Run {
    /// A new run of `experiment` in `dir`, which must not hold a run already.
    pub fn new(experiment: Experiment, dir: &Path) -> Result<Self, Error> {
        let folder = RunFolder::create(dir)?;
        Ok(Run(Playing::New {
            experiment: Box::new(experiment),
            folder,
        }))
    }

    /// The run in `dir`, to continue, its components looked up in `registry`. The folder is
    /// claimed, so that no other process writes it meanwhile; it must hold a checkpoint that
    /// fits its experiment, its `config.json` must be the config the run started with, and the
    /// data files must be the ones it read, so that they split into the same partition. A run
    /// folder without a checkpoint holds a run stopped before its first one, which finished no
    /// round: the run starts again from round 0, with the settings its `config.json` holds.
    pub fn resume(dir: &Path, registry: &Registry) -> Result<Self, Error> {
        let unstarted = matches!(claim::inspect(dir)?, Found::Fedsim(FolderKind::Run))
            && !dir.join(CHECKPOINT).exists();
        if !unstarted {
            let resumable = Resumable::open(dir, registry)?;
            return Ok(Run(Playing::Resumed(Box::new(resumable))));
        }
        let config_path = dir.join(CONFIG);
        if !config_path.exists() {
            return Err(FolderError::not_resumable(
                dir,
                format!(
                    "it was stopped before it wrote its settings ({CONFIG}) and finished no round; start it again with: fedsim run EXPERIMENT --out {}",
                    dir.display()
                ),
            )
            .into());
        }
        let written =
            read_json(dir, CONFIG).map_err(|reason| FolderError::not_resumable(dir, reason))?;
        let config = ExperimentConfig::from_value(written, &config_path, registry)?;
        Run::new(Experiment::prepare(config, registry)?, dir)
    }

    /// The experiment played.
    pub fn experiment(&self) -> &Experiment {
        match &self.0 {
            Playing::New { experiment, .. } => experiment,
            Playing::Resumed(resumable) => resumable.experiment(),
        }
    }

    /// Rounds already played.
    pub fn rounds_done(&self) -> u32 {
        match &self.0 {
            Playing::New { .. } => 0,
            Playing::Resumed(resumable) => resumable.rounds_done(),
        }
    }

    /// Whether the run had played all its rounds already.
    pub fn is_finished(&self) -> bool {
        matches!(&self.0, Playing::Resumed(resumable) if resumable.is_finished())
    }

    /// Plays the rounds left, writing results as they are produced and showing each round on
    /// `progress`, until they are done or `stop` is requested. The tiers are placed and linked
    /// as `spread` says (this process runs the server), or all in this process where it is
    /// `None`. Returns `None` when the run had finished already.
    pub fn play(
        self,
        progress: &Progress,
        stop: &StopSignal,
        spread: Option<Spread<'_>>,
    ) -> Result<Option<RunResult>, Error> {
        let watch = Watch { progress, stop };
        match spread {
            Some(spread) => self.play_spread(watch, spread),
            None => {
                let placement = self.experiment().placement(1)?;
                let connector = &mut InProcess;
                self.play_spread(
                    watch,
                    Spread {
                        placement,
                        connector,
                    },
                )
            }
        }
    }

    /// Plays the rounds left, the tiers as `spread` says.
    fn play_spread(self, watch: Watch<'_>, spread: Spread<'_>) -> Result<Option<RunResult>, Error> {
        match self.0 {
            Playing::New {
                experiment,
                mut folder,
            } => experiment.start(&mut folder, watch, spread).map(Some),
            Playing::Resumed(resumable) => resumable.play_on(watch, spread),
        }
    }
}

/// This process's command line, program name first.
fn command_line() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Writes `state` as the run's checkpoint; the clients' states then drop what no checkpoint
/// names any longer (an older spill file).
fn checkpoint(
    folder: &RunFolder,
    state: &RunState,
    states: &ClientStates,
) -> Result<(), WriteError> {
    folder.checkpoint(state)?;
    states.committed(&state.client_states);
    Ok(())
}

/// The `draw`-th model of `layout` initialised from `seed`: draw 0 is the experiment's initial
/// global model.
fn initial_model(seed: u64, layout: &Layout, draw: u32) -> Vec<f32> {
    initial_params(
        layout,
        &mut stream(seed, Purpose::MODEL_INIT, 0, draw as usize),
    )
}

/// The layers of `layout` that `algorithm` keeps with each client, if any; a layer the model
/// does not have, or personal layers larger than the memory for clients' states, is the field
/// at fault with what is wrong.
fn personal_sharing(
    algorithm: &AlgorithmChoice,
    layout: &Layout,
    config: &ExperimentConfig,
) -> Result<Option<Sharing>, (String, String)> {
    let personal = algorithm.personal_layers();
    let sharing = Sharing::of(layout, &personal.names)
        .map_err(|(at, message)| (format!("strategy.{}[{at}]", personal.field), message))?;
    let budget = config.federation.client_state_budget();
    match sharing {
        Some(sharing) if 4 * sharing.personal_len() as u64 > budget => Err((
            "federation.client_state_memory_mb".to_string(),
            format!(
                "is {}; one client's personal layers take {:.3} MiB ({} values), more than \
                 all the memory for clients' states",
                config.federation.client_state_memory_mb,
                (4 * sharing.personal_len()) as f64 / (1024.0 * 1024.0),
                sharing.personal_len()
            ),
        )),
        sharing => Ok(sharing),
    }
}

/// A finished round's part of the run state.
struct Advance {
    round: u32,
    sim_time_s: f64,
    model: Arc<[f32]>,
    strategy_state: Tensors,
    selector_state: Tensors,
    client_history: ClientHistory,
    client_states: StatesSnapshot,
    in_flight: Option<(u32, Vec<InFlightState>)>,
}

impl RunState {
    /// Moves the state to a finished round, if one is given.
    fn advance(&mut self, round: Option<Advance>) {
        if let Some(advance) = round {
            self.round = advance.round;
            self.sim_time_s = advance.sim_time_s;
            self.model = advance.model.to_vec();
            self.strategy_state = advance.strategy_state;
            self.selector_state = advance.selector_state;
            self.client_history = advance.client_history;
            self.client_states = advance.client_states;
            self.in_flight = advance.in_flight;
        }
    }
}

/// Where two JSON documents differ, as `path is now, was before` lines.
pub(crate) fn differences(
    before: &serde_json::Value,
    now: &serde_json::Value,
    path: &str,
) -> Vec<String> {
    use serde_json::Value;
    let child = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (before, now) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            let missing = Value::Null;
            keys.into_iter()
                .flat_map(|k| {
                    let (x, y) = (a.get(k).unwrap_or(&missing), b.get(k).unwrap_or(&missing));
                    differences(x, y, &child(k))
                })
                .collect()
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .flat_map(|(i, (x, y))| differences(x, y, &format!("{path}[{i}]")))
            .collect(),
        (a, b) if a == b => Vec::new(),
        (a, b) => vec![format!("{path} is {b}, was {a}")],
    }
}

/// Reads the JSON file `name` in `dir`.
fn read_json<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> Result<T, String> {
    fs::read_to_string(dir.join(name))
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot read {name}: {e}"))
}

/// SHA-256 of `bytes`, in hex.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}
