//! The burn trainer: a worker pool that trains a client group's sampled clients in parallel.
//!
//! A rayon pool of `num_parallels` threads runs one client per task, each single-threaded.
//! Every pool thread owns one model instance, kept between clients and rounds: a client loads
//! the downlink's flat parameters into it instead of building a model. Since each client's
//! shuffle comes from its own (seed, round, client) stream and loaded parameters are fresh
//! autodiff leaves, a client's result does not depend on which thread ran it or when.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};

use super::evaluate::mean_loss;
use super::passes::ExtraPasses;
use super::personal::PersonalSplit;
use super::{
    ClientFailure, ClientTrainer, Done, InjectedFaults, Job, JobQueue, Probe, ProbeDone, Probed,
    answer,
};
use burn::tensor::Device;
use rand_chacha::ChaCha12Rng;

use crate::backend::BackendKind;
use crate::config::Attack;
use crate::config::ClientConfig;
use crate::data::{ClientData, DataError};
use crate::local::session::SessionParts;
use crate::local::{LocalData, LocalTraining, TrainError};
use crate::model::{Net, flat};
use crate::network::{ClientId, Tensors, Update};
use crate::compression::{ENCODING, RESIDUAL};
use crate::privacy::mechanism::ClientClipping;
use crate::registry::{ModelChoice, UplinkCompression};
use crate::secure::{Masking, PARTICIPANTS};
use crate::seed::{Purpose, stream};
use crate::states::{ClientStates, SpillError};
use crate::stop::StopSignal;
use crate::strategy::{ClientAlgorithm, ClientView, Start, Trained};

/// Everything a client needs to train that does not change between rounds.
#[derive(Clone)]
pub struct TrainerSetup {
    /// The experiment seed.
    pub seed: u64,
    /// The samples each client trains on.
    pub clients: ClientData,
    /// The architecture.
    pub model: ModelChoice,
    /// Local training settings.
    pub client: ClientConfig,
    /// The client half of the FL algorithm.
    pub algorithm: Arc<dyn ClientAlgorithm>,
    /// Every client's state between rounds.
    pub states: Arc<ClientStates>,
    /// The attack the Byzantine clients make, and whether each client (by id) is one.
    pub byzantine: Option<(Attack, Arc<Vec<bool>>)>,
    /// Backend that trains.
    pub backend: BackendKind,
    /// Injected failures.
    pub faults: InjectedFaults,
    /// Stops training early; queued clients then fail at once, training ones within a step.
    pub stop: StopSignal,
    /// The model's personal layers, where the algorithm keeps some with each client.
    pub personal: Option<Arc<PersonalSplit>>,
    /// What a private run's clients do to their trained models before they send them.
    pub privacy: Option<Arc<ClientClipping>>,
    /// The compressor clients encode their changes with, where uploads are compressed.
    pub compression: Option<UplinkCompression>,
    /// What clients mask their changes with, where the server aggregates securely.
    pub secure: Option<Arc<Masking>>,
}

/// A client's samples that cannot be made, as its training's error.
fn samples_lost(error: DataError) -> TrainError {
    TrainError::SamplesLost(error.to_string())
}

/// A client's state that cannot be read or kept, as its training's error.
fn state_lost(error: SpillError) -> TrainError {
    TrainError::StateLost(error.to_string())
}

/// Trains clients on burn, one per worker of a rayon pool, each worker keeping its model.
pub struct Trainer {
    queue: JobQueue,
    shared: Arc<Shared>,
}

struct Shared {
    setup: TrainerSetup,
    /// One model slot per pool thread, indexed by the thread's pool index. A slot is empty
    /// until its thread trains its first client, or after a client panicked with the model.
    workers: Vec<Mutex<Option<Net>>>,
}

impl Trainer {
    /// A trainer with `num_parallels` worker threads.
    pub fn new(
        setup: TrainerSetup,
        num_parallels: usize,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let workers = (0..num_parallels).map(|_| Mutex::new(None)).collect();
        let shared = Arc::new(Shared { setup, workers });
        let training = shared.clone();
        let queue = JobQueue::new(
            num_parallels,
            "worker",
            Arc::new(move |job| training.train(job)),
        )?;
        Ok(Self { queue, shared })
    }
}

impl ClientTrainer for Trainer {
    fn spawn(&self, job: Job, done: Done) {
        self.queue.push(job, done);
    }

    fn probe(&self, probe: Probe, done: ProbeDone) {
        let shared = self.shared.clone();
        self.queue.run_aside(move || {
            let (round, client) = (probe.round, probe.client);
            let loss = answer(round, client, || shared.probe_on_this_worker(&probe));
            let probed = loss.map(|loss| Probed {
                round,
                client,
                loss,
            });
            // As with training: a receiver gone is a group shutting down.
            let _ = done.send(probed);
        });
    }
}

impl Shared {
    /// Runs `work` on this worker's model loaded with `model`, and keeps the model it gives
    /// back for the worker's next client. A client that fails leaves the worker without one.
    fn on_this_worker<T>(
        &self,
        model: &[f32],
        work: impl FnOnce(Net, &Device) -> Result<(Net, T), TrainError>,
    ) -> Result<T, TrainError> {
        if self.setup.stop.is_requested() {
            return Err(TrainError::Stopped);
        }
        let worker = rayon::current_thread_index().expect("clients run on the trainer's pool");
        let mut slot = self.workers[worker]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let device = self.setup.backend.training_device();
        let net = slot.take().unwrap_or_else(|| self.new_net(&device));
        let (net, answer) = work(flat::load(net, model), &device)?;
        *slot = Some(net);
        Ok(answer)
    }

    /// The mean loss of `probe`'s model over its client's training data, as that client sees
    /// them (a label-flipping attacker with its labels flipped).
    fn probe_on_this_worker(&self, probe: &Probe) -> Result<f64, TrainError> {
        let setup = &self.setup;
        let whole = match &setup.personal {
            Some(split) => {
                let state = setup.states.get(probe.client).map_err(state_lost)?;
                Some(split.whole(&probe.model, state.as_ref()))
            }
            None => None,
        };
        let samples = setup.clients.samples(probe.client).map_err(samples_lost)?;
        self.on_this_worker(whole.as_deref().unwrap_or(&probe.model), |net, device| {
            let local = LocalData {
                data: samples.data(),
                indices: samples.indices(),
                flip_labels: self
                    .attack_of(probe.client)
                    .is_some_and(Attack::flips_labels),
            };
            let loss = mean_loss(&net, local, setup.client.batch_size, device);
            Ok((net, loss))
        })
    }

    fn train(&self, job: Job) -> Result<Update, ClientFailure> {
        let (round, client) = (job.round, job.client);
        answer(round, client, || {
            let state = self.setup.states.get(client).map_err(state_lost)?;
            // With personal layers the job brings the shared values: the client adds its own.
            let job = match &self.setup.personal {
                Some(split) => Job {
                    model: split.whole(&job.model, state.as_ref()).into(),
                    ..job
                },
                None => job,
            };
            self.on_this_worker(&job.model, |net, device| {
                self.train_net(&job, state, net, device)
            })
        })
    }

    /// Trains `job`'s client, whose state is `state`, from `net`, loaded with the job's
    /// (whole) model; gives the trained network back with the client's update.
    fn train_net(
        &self,
        job: &Job,
        mut state: Option<Tensors>,
        net: Net,
        device: &Device,
    ) -> Result<(Net, Update), TrainError> {
        let setup = &self.setup;
        setup.faults.strike(job.round, job.client)?;
        let samples = setup.clients.samples(job.client).map_err(samples_lost)?;
        let purpose = Purpose::LOCAL_SHUFFLE.at_edge_round(job.edge_round);
        let mut rng = stream(setup.seed, purpose, job.round, job.client);
        let view = ClientView {
            round: job.round,
            client: job.client,
            global: &job.model,
            downlink: &job.extras,
            lr: setup.client.lr,
            personal: setup.personal.as_ref().map(|split| &split.sharing),
        };
        let attack = self.attack_of(job.client);
        let local = LocalData {
            data: samples.data(),
            indices: samples.indices(),
            flip_labels: attack.is_some_and(Attack::flips_labels),
        };
        let loss_at_global = setup
            .algorithm
            .needs_loss_at_global()
            .then(|| mean_loss(&net, local, setup.client.batch_size, device));
        let (net, start) = self.chosen_start(net, &view, local, device);
        let (anchor, start_extras) = match &start {
            Some(start) => (start.model.as_slice(), Some(&start.extras)),
            None => (&job.model[..], None),
        };
        let build = |params: &[f32]| flat::load(self.new_net(device), params);
        let session = LocalTraining::new(SessionParts {
            local,
            config: &setup.client,
            budget: job.steps,
            rng: &mut rng,
            device,
            stop: &setup.stop,
            start: anchor,
            build: &build,
        });
        let result = setup.algorithm.train(session, net, &view, state.as_ref())?;
        let mut params = flat::flatten(&result.net);
        let trained = Trained {
            params: &params,
            steps: result.steps,
            loss_at_global,
            kept: &result.kept,
        };
        let mut extras = setup.algorithm.finish(&view, &mut state, &trained);
        for (name, values) in start_extras.iter().flat_map(|e| e.iter()) {
            extras.insert(name, values.to_vec());
        }
        // A personal model's own passes, on this worker's network once the update is taken.
        let mut net = Some(result.net);
        let mut passes = ExtraPasses {
            local,
            config: &setup.client,
            model: &setup.model,
            shape: setup.clients.shape(),
            rng: stream(setup.seed, Purpose::PERSONAL_PASS, job.round, job.client),
            net: &mut net,
            device,
            stop: &setup.stop,
        };
        setup
            .algorithm
            .personal_update(&view, &mut state, &trained, &mut passes)?;
        let net = net.expect("a pass gives the network back");
        if let Some(split) = &setup.personal {
            split.keep(&params, &mut state);
        }
        if let Some(privacy) = &setup.privacy {
            let said = privacy.apply(job.round, job.client, &job.model, &mut params, &job.extras);
            for (name, values) in said.iter() {
                extras.insert(name, values.to_vec());
            }
        }
        // An attacker's upload is corrupted after the protocol's clipping, as it would not clip.
        if let Some(attack) = attack {
            let key = (setup.seed, job.round, job.edge_round);
            attack.corrupt(key, job.client, anchor, &mut params);
        }
        if let Some(split) = &setup.personal {
            params = split.sharing.shared_of(&params);
        }
        // The model a compressed or masked change is taken from: the part the server sent.
        let sent = || match &setup.personal {
            Some(split) => Cow::Owned(split.sharing.shared_of(&job.model)),
            None => Cow::Borrowed(&job.model[..]),
        };
        let encoded = match (&setup.compression, &setup.secure) {
            (Some(compression), _) => {
                let mut rng = stream(
                    setup.seed,
                    ENCODING.at_edge_round(job.edge_round),
                    job.round,
                    job.client,
                );
                let change = encode_change(compression, &sent(), &params, &mut state, &mut rng);
                params = Vec::new();
                change
            }
            (None, Some(masking)) => {
                let participants = job.extras.expect(PARTICIPANTS);
                let masked = masking.masked_change(
                    job.round,
                    job.client,
                    participants,
                    (&sent(), &params),
                    samples.indices().len(),
                );
                params = Vec::new();
                masked
            }
            (None, None) => Vec::new(),
        };
        setup.states.put(job.client, state).map_err(state_lost)?;
        let update = Update {
            round: job.round,
            clients: vec![job.client],
            num_samples: samples.indices().len(),
            train_loss: result.mean_loss,
            steps: result.steps,
            params,
            extras,
            encoded,
        };
        Ok((net, update))
    }

    /// `net` (loaded with the model sent) ready to train: loaded with the model the client
    /// half chooses to start from where it chooses one, with that choice.
    fn chosen_start(
        &self,
        net: Net,
        view: &ClientView<'_>,
        local: LocalData<'_>,
        device: &Device,
    ) -> (Net, Option<Start>) {
        let batch_size = self.setup.client.batch_size;
        let (mut held, mut measured) = (Some(net), false);
        let mut loss_of = |params: &[f32]| {
            let net = flat::load(held.take().expect("the net is back"), params);
            let loss = mean_loss(&net, local, batch_size, device);
            (held, measured) = (Some(net), true);
            loss
        };
        let start = self.setup.algorithm.start_from(view, &mut loss_of);
        let net = held.expect("the net is back");
        match start {
            Some(start) => (flat::load(net, &start.model), Some(start)),
            // Measuring left another model in the net.
            None if measured => (flat::load(net, view.global), None),
            None => (net, None),
        }
    }

    /// A model for a worker that has none yet.
    fn new_net(&self, device: &Device) -> Net {
        self.setup.model.build(self.setup.clients.shape(), device)
    }

    /// The attack `client` makes, if it is a Byzantine client.
    fn attack_of(&self, client: ClientId) -> Option<Attack> {
        let (attack, attackers) = self.setup.byzantine.as_ref()?;
        attackers[client].then_some(*attack)
    }
}

/// The bytes of a client's change from `sent` to `trained` as `compression` encodes it,
/// drawing from `rng`. With error feedback, what the last encoding lost (kept in `state`) is
/// added to the change first, and what this one loses kept in its place.
fn encode_change(
    compression: &UplinkCompression,
    sent: &[f32],
    trained: &[f32],
    state: &mut Option<Tensors>,
    rng: &mut ChaCha12Rng,
) -> Vec<u8> {
    let mut change: Vec<f32> = trained.iter().zip(sent).map(|(t, s)| t - s).collect();
    let residual = state.as_ref().and_then(|s| s.get(RESIDUAL));
    if let (true, Some(residual)) = (compression.error_feedback, residual) {
        for (value, carried) in change.iter_mut().zip(residual) {
            *value += carried;
        }
    }
    let bytes = compression.compressor.encode(&change, rng);
    if compression.error_feedback {
        let decoded = compression
            .compressor
            .decode(&bytes, change.len())
            .expect("a compressor decodes its own encoding");
        let lost: Vec<f32> = change.iter().zip(decoded).map(|(c, d)| c - d).collect();
        state.get_or_insert_with(Tensors::new).insert(RESIDUAL, lost);
    }
    bytes
}
