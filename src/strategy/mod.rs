//! FL algorithms, one file each. An algorithm has two halves:
//!
//! - a **server half** ([`Strategy`]): what goes down with the global model, how a round's
//!   updates (sorted by client id) become the next global model, what it remembers between
//!   rounds, and which named metrics it reports;
//! - a **client half** ([`ClientAlgorithm`]): what local training optimises besides the loss
//!   (a proximal term, a gradient correction), what each client remembers between the rounds
//!   it takes part in, and what it sends up besides its model; or local training itself, as
//!   MOON's client half trains with a loss term of its own.
//!
//! Neither half knows about threads or channels, and the server half knows nothing of burn:
//! it sees flat vectors and named tensors. A client half that trains itself is handed the
//! network and a [`LocalTraining`] session, and computes on burn's tensors. An [`Algorithm`] puts the two together under a name, with its parameters, its
//! paper and whether an aggregating scheduler may pre-combine its group ([`EdgeAggregation`]);
//! the registry ([`crate::registry`]) lists the algorithms an experiment file can name, each of
//! the files here registered as a user's plug-in would be.
//!
//! An algorithm may also choose **who trains** ([`Selector`], in [`selection`]): by default
//! every online client is equally likely.
//!
//! An algorithm may also have an **asynchronous server half** ([`AsyncStrategy`]), which takes
//! each client's update alone, as the simulated clock delivers it, and says when the updates
//! taken make a server step (FedAsync's every update, FedBuff's every `K`). Only such
//! algorithms run in an experiment with an `asynchronous` section.

mod adaptive;
mod apfl;
mod cfl;
mod ditto;
mod fedala;
mod fedasync;
mod fedavg;
mod fedavg_ft;
mod fedavgm;
mod fedbn;
mod fedbuff;
mod feddyn;
mod fednova;
mod fedper;
mod fedprox;
mod fedrep;
pub mod fold;
mod ifca;
mod krum;
mod layer_split;
mod lg_fedavg;
mod median;
mod moon;
mod oort;
mod perfedavg;
mod pfedme;
mod power_of_choice;
mod private;
mod qffl;
mod scaffold;
mod secure;
pub mod selection;
mod signsgd;
mod trimmed_mean;
pub mod vector;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use adaptive::{AdaptiveServer, FedAdagrad, FedAdam, FedYogi};
pub use apfl::{Apfl, ApflClient};
pub use cfl::{Cfl, CflServer};
pub use ditto::{Ditto, DittoClient, Lambda};
pub use fedala::{FedAla, FedAlaClient};
pub use fedasync::{FedAsync, FedAsyncServer, Staleness};
pub use fedavg::{FedAvg, FedAvgServer};
pub use fedavg_ft::{FedAvgFt, FineTunedClient};
pub use fedavgm::{FedAvgM, FedAvgMServer};
pub use fedbn::{FedBn, KeepNorms};
pub use fedbuff::{FedBuff, FedBuffServer};
pub use feddyn::{FedDyn, FedDynClient, FedDynServer};
pub use fednova::{FedNova, FedNovaServer};
pub use fedper::{FedPer, KeepHead};
pub use fedprox::{FedProx, ProximalClient};
pub use fedrep::{FedRep, FedRepClient};
pub use fold::{Fold, Folded, Sum, Totals, Weighting};
pub use ifca::{Ifca, IfcaClient, IfcaServer};
pub use krum::{Krum, KrumServer};
pub use layer_split::{KeepsLayers, LayerSplit, SplitMethod, SplitParams};
pub use lg_fedavg::{KeepBody, LgFedAvg};
pub use median::{Median, MedianServer};
pub use moon::{Moon, MoonClient};
pub use oort::{Oort, OortSelector};
pub use perfedavg::{PerFedAvg, PerFedAvgClient};
pub use pfedme::{PFedMe, PFedMeClient, PFedMeServer};
pub use power_of_choice::{PowerOfChoice, PowerOfChoiceSelector};
pub use private::PrivateServer;
pub use qffl::{QFfl, QFflClient, QFflServer};
pub use scaffold::{Scaffold, ScaffoldClient, ScaffoldServer};
pub use secure::SecureServer;
pub use selection::{Candidates, Online, Selector, Uniform};
pub use signsgd::{SignSgd, SignSgdServer};
pub use trimmed_mean::{TrimmedMean, TrimmedMeanServer};

pub use crate::local::Objective;

use crate::config::ExperimentConfig;
use crate::config::check::Problems;
use crate::local::{LocalTraining, TrainError, TrainedNet, train_on_objective};
use crate::model::{Net, Sharing};
use crate::network::{ClientId, ClientInfo, StateError, Tensors, Update};

/// An FL algorithm: a server half and a client half, with the parameters an experiment file
/// gives it beside its name (`"strategy": {"name": "fedprox", "mu": 0.01}`).
///
/// Each file of this module implements it for one algorithm (or a family, as `adaptive.rs`); a
/// plug-in does the same in its own crate and registers it with
/// [`RegistryBuilder::algorithm`](crate::registry::RegistryBuilder::algorithm), as the
/// built-ins are.
pub trait Algorithm: Send + Sync + 'static {
    /// The parameters: every field with a default (`#[serde(default)]` and a `Default`), and
    /// unknown fields rejected (`#[serde(deny_unknown_fields)]`), so that a file may leave any
    /// of them out and a misspelt one is named.
    type Params: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static;

    /// The `name` an experiment file gives: lowercase letters, digits, `_` and `-`, starting
    /// with a letter.
    fn name(&self) -> &'static str;

    /// The paper it follows, as `fedsim strategies` cites it.
    fn paper(&self) -> &'static str;

    /// What each parameter means, by field name, for `fedsim strategies`.
    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// Adds to `problems` every rule the parameters break (fields as in the file, relative
    /// to the `strategy` section), given the rest of the experiment.
    fn check(&self, _params: &Self::Params, _setting: &Setting<'_>, _problems: &mut Problems) {}

    /// Whether and how an aggregating scheduler may pre-combine its group's updates.
    fn edge_rule(&self, params: &Self::Params) -> EdgeAggregation;

    /// The server half, as it starts, for a model of `num_params` values.
    fn server(
        &self,
        params: &Self::Params,
        setting: &Setting<'_>,
        num_params: usize,
    ) -> Box<dyn Strategy>;

    /// The server half of an asynchronous federation (an experiment with an `asynchronous`
    /// section), as it starts, for a model of `num_params` values; `None` (the default) for an
    /// algorithm of synchronous rounds only, which such an experiment refuses.
    fn asynchronous(
        &self,
        _params: &Self::Params,
        _setting: &Setting<'_>,
        _num_params: usize,
    ) -> Option<Box<dyn AsyncStrategy>> {
        None
    }

    /// How the server chooses who trains, as it starts: by default [`Uniform`], every online
    /// client equally likely. Not asked where the server half chooses itself
    /// ([`Strategy::selector`]).
    fn selector(&self, _params: &Self::Params, _setting: &Setting<'_>) -> Box<dyn Selector> {
        Box::new(Uniform)
    }

    /// The client half: by default a client that trains on the loss alone and keeps nothing.
    fn client(&self, _params: &Self::Params, _setting: &Setting<'_>) -> Arc<dyn ClientAlgorithm> {
        Arc::new(PlainClient)
    }

    /// The model's layers that stay with each client ([`crate::model::sharing`] says how they
    /// are named): only the others travel, and each client keeps its own between rounds. None
    /// (the default): the whole model is shared. Its client half says it personalises
    /// ([`ClientAlgorithm::personalises`]), so that each client is scored with its own layers.
    fn personal_layers(&self, _params: &Self::Params) -> PersonalLayers {
        PersonalLayers::default()
    }

    /// The settings in which the algorithm gives another's results to the bit (FedProx with
    /// `mu` 0 is FedAvg): promises the conformance kit ([`crate::conformance`]) checks.
    fn reductions(&self) -> Vec<Reduction<Self::Params>> {
        Vec::new()
    }
}

/// The layers of the model that stay with each client, as an algorithm's parameters name them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersonalLayers {
    /// The parameter that names them, for errors (`personal`: `strategy.personal[0]`).
    pub field: &'static str,
    /// The layers: a layer's name, `head` or `body`.
    pub names: Vec<String>,
}

/// What a tier's code unwinds with to end the run on purpose, with the reason the run's error
/// gives: `std::panic::resume_unwind(Box::new(EndRun(reason)))`. For code that cannot return an
/// error where it fails (a [`Strategy`] written in Python that raised): the tier's
/// thread unwinds, the others end as when any tier fails, the run folder keeps the rounds
/// before, and `resume_unwind` prints no panic message, since nothing is a bug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndRun(pub String);

/// A setting in which an algorithm gives another's results to the bit.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduction<P> {
    /// The algorithm's parameters in that setting.
    pub params: P,
    /// The registered algorithm it then equals, with that one's default parameters.
    pub equals: &'static str,
    /// Whether it holds only when every client holds as many samples as every other (a rule
    /// that counts clients equally is FedAvg's sample-weighted mean only then).
    pub equal_clients: bool,
    /// Whether it holds only in the first round (before any state differs).
    pub first_round_only: bool,
    /// Fields of the experiment file it holds only with, as `--set` takes them: the field's
    /// path and its value in JSON (`("federation.clients_per_round", "4")`).
    pub settings: Vec<(&'static str, &'static str)>,
}

impl<P> Reduction<P> {
    /// With `params` the algorithm equals `equals` on any clients, in every round.
    pub fn to(equals: &'static str, params: P) -> Self {
        Self {
            params,
            equals,
            equal_clients: false,
            first_round_only: false,
            settings: Vec::new(),
        }
    }

    /// This reduction, holding only on clients of equal size.
    pub fn on_equal_clients(self) -> Self {
        Self {
            equal_clients: true,
            ..self
        }
    }

    /// This reduction, holding only in the first round.
    pub fn in_first_round(self) -> Self {
        Self {
            first_round_only: true,
            ..self
        }
    }

    /// This reduction, holding only where the experiment file's field at `path` (as `--set`
    /// names it) is `value` (JSON).
    pub fn with_setting(mut self, path: &'static str, value: &'static str) -> Self {
        self.settings.push((path, value));
        self
    }
}

/// The parts of the experiment an algorithm may depend on: plain values of its own, not the
/// experiment file's sections, so that the file's format can change without a plug-in
/// changing. It may grow ([`Setting::new`] and the `with_` methods build one).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Setting<'a> {
    /// The experiment seed: an algorithm's own random draws come from streams derived from it
    /// ([`crate::seed::stream`] with a [`crate::seed::Purpose`] of the algorithm's own), so
    /// that they are the same on every rerun.
    pub seed: u64,
    /// The clients' local learning rate (`client.lr`; SCAFFOLD, q-FFL).
    pub lr: f64,
    /// The clients' momentum (`client.momentum`, 0 for none; FedNova, q-FFL).
    pub momentum: f64,
    /// Clients in the federation.
    pub num_clients: usize,
    /// Clients trained each round (`federation.clients_per_round`), `None` for all of them
    /// (Krum, Power-of-Choice).
    pub clients_per_round: Option<usize>,
    /// Clients training at once in an asynchronous federation (FedBuff's buffer may hold no
    /// more); `None` in rounds.
    pub concurrency: Option<usize>,
    /// Fresh models as the experiment initialises its global model, for a server half that
    /// starts several (IFCA's clusters). `Some` whenever fedsim builds a server half to run
    /// it; `None` in the setting handed to `check` and `client`, and when the registry asks
    /// whether [`Algorithm::asynchronous`] has a half at all (a one-client setting whose half
    /// is dropped unused).
    pub fresh_models: Option<&'a dyn FreshModels>,
}

/// Models initialised as the experiment initialises its global model.
pub trait FreshModels: Sync {
    /// The `draw`-th: draw 0 is the experiment's initial global model, and each other draw
    /// another model from the same initialisation, the same on every run.
    fn fresh(&self, draw: u32) -> Vec<f32>;
}

impl fmt::Debug for dyn FreshModels + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FreshModels")
    }
}

impl<'a> Setting<'a> {
    /// A synchronous federation of `num_clients` clients, all of them training each round, at
    /// learning rate `lr` without momentum, with seed 0 and no fresh models: the setting to
    /// build on for a test of an algorithm's halves.
    pub fn new(num_clients: usize, lr: f64) -> Self {
        Self {
            seed: 0,
            lr,
            momentum: 0.0,
            num_clients,
            clients_per_round: None,
            concurrency: None,
            fresh_models: None,
        }
    }

    /// The setting of `config`.
    pub fn of(config: &ExperimentConfig) -> Self {
        Self {
            seed: config.seed,
            lr: config.client.lr,
            momentum: config.client.momentum,
            num_clients: config.federation.num_clients,
            clients_per_round: config.federation.clients_per_round,
            concurrency: config.asynchronous.map(|a| a.concurrency),
            fresh_models: None,
        }
    }

    /// This setting, with the experiment's fresh models.
    pub fn with_fresh_models(self, fresh_models: &'a dyn FreshModels) -> Self {
        Self {
            fresh_models: Some(fresh_models),
            ..self
        }
    }

    /// This setting, asynchronous with `concurrency` clients training at once.
    pub fn with_concurrency(self, concurrency: usize) -> Self {
        Self {
            concurrency: Some(concurrency),
            ..self
        }
    }
}

pub use crate::config::NoParams;

/// What the server half sees of a round besides the updates.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Round<'a> {
    /// The round, from 1.
    pub number: u32,
    /// Every client in the federation with its sample count, in id order.
    pub roster: &'a [ClientInfo],
    /// The clients sampled this round, in id order.
    pub sampled: &'a [ClientId],
}

impl<'a> Round<'a> {
    /// Round `number` of the federation `roster`, in which the clients `sampled` train.
    pub fn new(number: u32, roster: &'a [ClientInfo], sampled: &'a [ClientId]) -> Self {
        Self {
            number,
            roster,
            sampled,
        }
    }
}

/// The server half's answer to a round.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// The next global model.
    pub model: Vec<f32>,
    /// Named numbers for the round's line of `metrics.jsonl`.
    pub metrics: BTreeMap<String, f64>,
    /// For a clustered algorithm, the cluster each of the round's clients is in after the
    /// round (`clusters` in `metrics.jsonl`); empty for the others.
    pub clusters: BTreeMap<ClientId, usize>,
}

impl Aggregate {
    /// `model`, with no metrics.
    pub fn model(model: Vec<f32>) -> Self {
        Self {
            model,
            metrics: BTreeMap::new(),
            clusters: BTreeMap::new(),
        }
    }

    /// This aggregate with the metric `name` set to `value`.
    pub fn with(mut self, name: &str, value: f64) -> Self {
        self.metrics.insert(name.to_string(), value);
        self
    }

    /// This aggregate with `client` recorded as in `cluster`.
    pub fn with_cluster(mut self, client: ClientId, cluster: usize) -> Self {
        self.clusters.insert(client, cluster);
        self
    }
}

/// What a strategy's aggregate reads of a round's updates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reads {
    /// Only these weighted sums of them, which the server folds as the updates arrive, so a
    /// round holds one running sum rather than every update.
    Sums(Vec<Sum>),
    /// Every update whole (the robust rules, and weights that depend on all the updates).
    Updates,
}

/// A round's updates as the strategy asked to read them ([`Strategy::reads`]).
#[derive(Debug)]
pub enum Collected<'a> {
    /// The sums asked for, in that order, and what they add up.
    Sums {
        /// The sums.
        sums: Vec<Vec<f32>>,
        /// The number of updates behind them.
        updates: usize,
        /// The clients behind them, in id order.
        clients: Vec<ClientId>,
    },
    /// The updates, sorted by client id.
    Updates(&'a [Update]),
}

impl From<Folded> for Collected<'_> {
    fn from(folded: Folded) -> Self {
        Collected::Sums {
            sums: folded.sums,
            updates: folded.updates,
            clients: folded.clients,
        }
    }
}

impl Collected<'_> {
    /// The `N` sums a strategy that reads sums asked for, in its order.
    pub fn into_sums<const N: usize>(self) -> [Vec<f32>; N] {
        match self {
            Collected::Sums { sums, .. } => sums
                .try_into()
                .unwrap_or_else(|s: Vec<_>| panic!("{} sums, not {N}", s.len())),
            Collected::Updates(_) => panic!("this strategy reads sums, not updates"),
        }
    }

    /// The updates, for a strategy that reads updates.
    pub fn updates(&self) -> &[Update] {
        match self {
            Collected::Updates(updates) => updates,
            Collected::Sums { .. } => panic!("this strategy reads updates, not sums"),
        }
    }

    /// How many updates the round brought.
    pub fn len(&self) -> usize {
        match self {
            Collected::Sums { updates, .. } => *updates,
            Collected::Updates(updates) => updates.len(),
        }
    }

    /// Whether the round brought no updates.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one client is sent at the start of a round.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// The model it trains from.
    pub model: Arc<[f32]>,
    /// The tensors beside it.
    pub extras: Tensors,
}

/// The server half of an FL algorithm.
pub trait Strategy: Send {
    /// Tensors sent down with the global model this round (SCAFFOLD's control variate).
    fn downlink(&self) -> Tensors {
        Tensors::new()
    }

    /// What `client` is sent this round, for a server half that sends clients different
    /// models or tensors (each client its cluster's model); `None` (the default) sends it the
    /// global model and [`Strategy::downlink`], as every other client. Where any client of a
    /// round is sent its own, each is sent its own message, and the links count what each
    /// receives. An algorithm whose server half does this must refuse aggregating schedulers
    /// ([`EdgeAggregation::Unsupported`]): they average one model's updates.
    fn downlink_to(&self, _client: ClientId, _global: &Arc<[f32]>) -> Option<Sent> {
        None
    }

    /// What [`Strategy::aggregate`] reads of the updates: every update whole unless the
    /// strategy says it needs only sums.
    fn reads(&self) -> Reads {
        Reads::Updates
    }

    /// The next global model from the current one and this round's updates (at least one),
    /// read as [`Strategy::reads`] asks, with the round's metrics. `global` is the model the
    /// last call returned (the initial model before the first round, the checkpoint's after a
    /// resume); it is the one the records evaluate on the test set, so a server half that
    /// keeps several models (IFCA's clusters) returns one of them, the same one each round,
    /// and keeps the others in its [`Strategy::state`].
    fn aggregate(&mut self, round: &Round<'_>, global: &[f32], input: Collected<'_>) -> Aggregate;

    /// [`Strategy::aggregate`] over `updates` (sorted by client id), folding the sums it
    /// reads from them first if it reads sums.
    fn aggregate_updates(
        &mut self,
        round: &Round<'_>,
        global: &[f32],
        updates: &[Update],
    ) -> Aggregate {
        let input = match self.reads() {
            Reads::Sums(sums) => Fold::all(sums, updates).into(),
            Reads::Updates => Collected::Updates(updates),
        };
        self.aggregate(round, global, input)
    }

    /// What the strategy remembers between rounds, for checkpoints.
    fn state(&self) -> Tensors {
        Tensors::new()
    }

    /// Takes back what [`Strategy::state`] gave, when a run resumes.
    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        no_state(state)
    }

    /// Whether a round that brought no update is aggregated all the same (its sums then
    /// empty): a private server half adds its noise whatever arrived, so that a round nobody
    /// answered looks like any other. By default such a round keeps the global model.
    fn aggregates_no_updates(&self) -> bool {
        false
    }

    /// How the server chooses who trains, where this server half chooses itself, sharing its
    /// state with its aggregation (a strategy written in Python, whose `select` and
    /// `aggregate` are methods of one object); `None` (the default) leaves the choice to
    /// [`Algorithm::selector`]. Asked once, as the run starts; what the selection keeps
    /// between rounds then goes through [`Strategy::state`].
    fn selector(&mut self) -> Option<Box<dyn Selector>> {
        None
    }
}

/// One client's update as an asynchronous server half takes it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Arrival<'a> {
    /// The update: the client's trained model, its samples, loss and extra tensors.
    pub update: &'a Update,
    /// The global model the client was sent and trained from.
    pub sent: &'a [f32],
    /// Server steps taken since the client was sent its model (`t - τ`).
    pub staleness: u32,
}

/// The server half of an asynchronous FL algorithm: it takes updates one at a time, in the
/// order of their arrival on the simulated clock (ties broken by client id), and says when the
/// updates taken make a server step.
pub trait AsyncStrategy: Send {
    /// Tensors sent down with the global model to each client dispatched.
    fn downlink(&self) -> Tensors {
        Tensors::new()
    }

    /// Takes one update at the current global model `global`; returns the next global model,
    /// with the step's metrics, when this update completes a server step, and `None` when it
    /// waits for more (FedBuff's buffer).
    fn receive(&mut self, global: &[f32], arrival: Arrival<'_>) -> Option<Aggregate>;

    /// What the strategy remembers between updates (FedBuff's buffer), for checkpoints.
    fn state(&self) -> Tensors {
        Tensors::new()
    }

    /// Takes back what [`AsyncStrategy::state`] gave, when a run resumes.
    fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        no_state(state)
    }
}

/// A server half of either kind, as an experiment runs it.
pub enum ServerHalf {
    /// Synchronous rounds.
    Rounds(Box<dyn Strategy>),
    /// Asynchronous server steps.
    Asynchronous(Box<dyn AsyncStrategy>),
}

impl ServerHalf {
    /// What the server half remembers, for checkpoints.
    pub fn state(&self) -> Tensors {
        match self {
            ServerHalf::Rounds(strategy) => strategy.state(),
            ServerHalf::Asynchronous(strategy) => strategy.state(),
        }
    }

    /// Takes back what [`ServerHalf::state`] gave.
    pub fn restore(&mut self, state: &Tensors) -> Result<(), StateError> {
        match self {
            ServerHalf::Rounds(strategy) => strategy.restore(state),
            ServerHalf::Asynchronous(strategy) => strategy.restore(state),
        }
    }

    /// The server half's own choice of who trains, if it makes it ([`Strategy::selector`]).
    pub fn selector(&mut self) -> Option<Box<dyn Selector>> {
        match self {
            ServerHalf::Rounds(strategy) => strategy.selector(),
            ServerHalf::Asynchronous(_) => None,
        }
    }
}

/// The check of a server half that keeps no state: nothing may have been saved.
pub(crate) fn no_state(state: &Tensors) -> Result<(), StateError> {
    match state.iter().next() {
        None => Ok(()),
        Some((name, _)) => Err(StateError::Unexpected(name.to_string())),
    }
}

/// What a client sees when its job starts.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ClientView<'a> {
    /// The round (in an asynchronous federation, the number of the dispatch, from 1).
    pub round: u32,
    /// The client.
    pub client: ClientId,
    /// The model it was sent.
    pub global: &'a [f32],
    /// The tensors sent down beside the model.
    pub downlink: &'a Tensors,
    /// The local learning rate.
    pub lr: f64,
    /// Which of the model's values stay with the client, for an algorithm with personal
    /// layers ([`Algorithm::personal_layers`]); `None` where every value is shared.
    pub personal: Option<&'a Sharing>,
}

/// Where a client chose to start local training ([`ClientAlgorithm::start_from`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// The model it trains from.
    pub model: Vec<f32>,
    /// Tensors sent up beside its update (which model it chose).
    pub extras: Tensors,
}

/// What local training produced, for the client half to finish with.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Trained<'a> {
    /// The trained model.
    pub params: &'a [f32],
    /// SGD steps taken.
    pub steps: u32,
    /// Mean loss of the global model on the client's training data, before training, when the
    /// algorithm asks for it.
    pub loss_at_global: Option<f64>,
    /// What a client half's own loop kept for [`ClientAlgorithm::finish`] besides the trained
    /// model ([`TrainedNet::keeping`]: APFL's and pFedMe's personal models, FedALA's weights).
    pub kept: &'a Tensors,
}

/// The client half of an FL algorithm.
pub trait ClientAlgorithm: Send + Sync {
    /// The terms fedsim's local training adds to each gradient, from what came down and the
    /// client's state (`None` before its first round).
    fn objective(&self, _view: &ClientView<'_>, _state: Option<&Tensors>) -> Objective {
        Objective::default()
    }

    /// Trains `net` (loaded with the model training starts from) through `local`'s batches.
    /// By default fedsim's loop ([`train_on_objective`]): one step of the configured optimiser
    /// per batch on the cross-entropy loss and [`ClientAlgorithm::objective`]'s terms. A
    /// client half that trains itself (MOON: a loss term on the network's representation)
    /// writes its own loop over the same session, with the client's state (`None` before its
    /// first round) and what came down in `view`.
    fn train(
        &self,
        local: LocalTraining<'_>,
        net: Net,
        view: &ClientView<'_>,
        state: Option<&Tensors>,
    ) -> Result<TrainedNet, TrainError> {
        train_on_objective(local, net, &self.objective(view, state))
    }

    /// Whether local training must first measure the global model's loss on the client's data.
    fn needs_loss_at_global(&self) -> bool {
        false
    }

    /// The passes over its training data a client makes before it trains, measuring losses:
    /// one for [`ClientAlgorithm::needs_loss_at_global`], and one for each model that
    /// [`ClientAlgorithm::start_from`] measures. The simulated clock charges each pass as it
    /// charges a probe, the client's samples at its speed.
    fn measuring_passes(&self) -> u32 {
        u32::from(self.needs_loss_at_global())
    }

    /// The model local training starts from, where the client chooses it (IFCA: the cluster
    /// model of lowest loss among those sent down): `loss_of` measures a model's mean loss
    /// over the client's training data. `None` (the default) starts from the model sent,
    /// measuring nothing. Count the measurements in [`ClientAlgorithm::measuring_passes`], for
    /// the simulated clock.
    fn start_from(
        &self,
        _view: &ClientView<'_>,
        _loss_of: &mut dyn FnMut(&[f32]) -> f64,
    ) -> Option<Start> {
        None
    }

    /// After training: updates the client's state and returns the tensors to send up beside
    /// the model.
    fn finish(
        &self,
        _view: &ClientView<'_>,
        _state: &mut Option<Tensors>,
        _trained: &Trained<'_>,
    ) -> Tensors {
        Tensors::new()
    }

    /// After [`ClientAlgorithm::finish`], for a client half that keeps a personal model: updates
    /// it in the client's state by passes of local training of its own (`passes`), which leave
    /// the update sent up as it is (Ditto trains its personal model towards the model sent).
    /// By default nothing.
    fn personal_update(
        &self,
        _view: &ClientView<'_>,
        _state: &mut Option<Tensors>,
        _trained: &Trained<'_>,
        _passes: &mut dyn FineTuning,
    ) -> Result<(), TrainError> {
        Ok(())
    }

    /// Whether the algorithm is personalised: each client uses a model of its own
    /// ([`ClientAlgorithm::personal_model`]), which the records score on the clients' own test
    /// samples beside the global model (`personal_accuracy` in `metrics.jsonl`).
    fn personalises(&self) -> bool {
        false
    }

    /// The model the client would use on its own data now, for a personalised algorithm: its
    /// personal model from `state`, the model sent (`view.global`) with its own layers, or the
    /// model sent fine-tuned on its training data by `tuning`. By default the model sent.
    fn personal_model(
        &self,
        view: &ClientView<'_>,
        _state: Option<&Tensors>,
        _tuning: &mut dyn FineTuning,
    ) -> Result<Vec<f32>, TrainError> {
        Ok(view.global.to_vec())
    }
}

/// Local training that a client half may ask for to personalise a model
/// ([`ClientAlgorithm::personal_model`], [`ClientAlgorithm::personal_update`]): steps of the
/// client's own optimiser settings over its training data, the batches in an order drawn for
/// that purpose from the seed (so the same on every rerun, and apart from the order its
/// training rounds draw).
pub trait FineTuning {
    /// The model after `pass` from `start`.
    fn train(&mut self, start: &[f32], pass: &Pass<'_>) -> Result<Vec<f32>, TrainError>;

    /// The model after `steps` steps from `start`, on the loss alone.
    fn fine_tune(&mut self, start: &[f32], steps: u32) -> Result<Vec<f32>, TrainError> {
        self.train(start, &Pass::new(steps, start))
    }
}

/// A pass of local training a client half asks [`FineTuning`] for.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass<'a> {
    /// Steps to take.
    pub steps: u32,
    /// What the steps optimise besides the loss.
    pub objective: Objective,
    /// The model the objective's proximal term pulls towards.
    pub anchor: &'a [f32],
}

impl<'a> Pass<'a> {
    /// `steps` steps on the loss alone (`anchor` is then read by no term).
    pub fn new(steps: u32, anchor: &'a [f32]) -> Self {
        Self {
            steps,
            objective: Objective::default(),
            anchor,
        }
    }

    /// This pass, with the terms of `objective`.
    pub fn with_objective(self, objective: Objective) -> Self {
        Self { objective, ..self }
    }
}

/// The name under which a client half keeps a whole personal model in the client's state
/// (Ditto's, APFL's `v`, pFedMe's `θ`).
pub(crate) const PERSONAL_MODEL: &str = "personal_model";

/// The personal model a client keeps in `state`, or, before it has one, the model it was sent
/// (`view.global`): where each personal model starts, and what a client without one uses.
pub(crate) fn kept_personal_model<'a>(
    view: &ClientView<'a>,
    state: Option<&'a Tensors>,
) -> &'a [f32] {
    state
        .and_then(|s| s.get(PERSONAL_MODEL))
        .unwrap_or(view.global)
}

/// A client that trains on the loss alone and keeps nothing: FedAvg's, and that of every
/// algorithm that differs only on the server.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainClient;

impl ClientAlgorithm for PlainClient {}

/// How an aggregating scheduler may pre-combine its group's updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeAggregation {
    /// Into one update: the sample-weighted mean of the models and the sum of each extra
    /// tensor named in `sums` (the algorithm's clients send no others).
    Mean {
        /// Whether the group may run several edge rounds (the algorithm's updates are models,
        /// and an edge round's mean is a model the next can start from).
        several_edge_rounds: bool,
        /// Extra tensors that add up rather than average.
        sums: &'static [&'static str],
    },
    /// Not at all, for this reason: the server must see every client's update.
    Unsupported(&'static str),
}

impl EdgeAggregation {
    /// The sample-weighted mean of the models alone, over any number of edge rounds: the rule
    /// of every algorithm whose updates are models and whose server reads their mean.
    pub const MODELS: EdgeAggregation = EdgeAggregation::Mean {
        several_edge_rounds: true,
        sums: &[],
    };

    /// The rule of a robust aggregation rule (median, trimmed mean, Krum): none.
    pub const ROBUST: EdgeAggregation = EdgeAggregation::Unsupported(
        "a robust rule must see every client's update: use topology.mode \"relay\"",
    );

    /// Whether aggregating schedulers may run the algorithm, as `fedsim strategies` and the
    /// reference pages say it: `yes`, `yes, with 1 edge round` or `no (why)`.
    pub fn described(&self) -> String {
        match self {
            EdgeAggregation::Mean {
                several_edge_rounds: true,
                ..
            } => "yes".to_string(),
            EdgeAggregation::Mean { .. } => "yes, with 1 edge round".to_string(),
            EdgeAggregation::Unsupported(reason) => format!("no ({reason})"),
        }
    }
}

/// The sums a scheduler folds its group's updates into: the sample-weighted mean of the
/// models, then the plain sum of each extra tensor named in `sums`.
pub fn edge_sums(sums: &[&'static str]) -> Vec<Sum> {
    std::iter::once(Sum::params(Weighting::Samples))
        .chain(sums.iter().map(|&name| Sum::extra(name)))
        .collect()
}

/// A scheduler's partial aggregate from its fold of [`edge_sums`] over `sums`: one update
/// standing for the folded clients.
pub fn partial_aggregate(round: u32, mut folded: Folded, sums: &[&'static str]) -> Update {
    let mut tensors = std::mem::take(&mut folded.sums).into_iter();
    let params = tensors.next().expect("the models' mean comes first");
    let mut extras = Tensors::new();
    for (&name, sum) in sums.iter().zip(tensors) {
        extras.insert(name, sum);
    }
    folded.into_update(round, params, extras)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Small updates and rounds for the strategies' unit tests, and a client half's training
    //! on four samples of two features, whose steps a test works out by hand.

    use super::{ClientAlgorithm, ClientView, Round};
    use crate::backend::BackendKind;
    use crate::config::{ClientConfig, ModelConfig};
    use crate::data::{DataShape, Dataset, SampleShape};
    use crate::local::LocalData;
    use crate::local::session::{LocalTraining, SessionParts};
    use crate::model::{Sharing, flat};
    use crate::network::{ClientInfo, Tensors, Update};
    use crate::registry::Registry;
    use crate::seed::{Purpose, stream};
    use crate::stop::StopSignal;

    /// The four samples: two features each, two classes.
    pub const SAMPLES: [([f64; 2], usize); 4] = [
        ([1.0, 0.5], 0),
        ([-0.5, 1.0], 1),
        ([0.25, -1.0], 0),
        ([-1.0, -0.25], 1),
    ];

    /// The model and what training gave: its parameters and what the client half kept.
    pub struct ToyRun {
        /// The trained parameters.
        pub params: Vec<f32>,
        /// What the client half's loop kept for its `finish`.
        pub kept: Tensors,
    }

    /// Trains `client` from `start` for `steps` steps, each batch all four samples, at
    /// learning rate `lr` without momentum, on logistic regression (`hidden` empty: the
    /// parameters are the weight `[2, 2]`, row by input, then the bias) or an MLP of those
    /// hidden widths; `personal` names its personal layers.
    pub fn train_toy(
        client: &dyn ClientAlgorithm,
        hidden: &[usize],
        personal: &[&str],
        (start, steps, lr): (&[f32], u32, f64),
        state: Option<&Tensors>,
    ) -> ToyRun {
        let features: Vec<f32> = SAMPLES
            .iter()
            .flat_map(|(x, _)| x.map(|v| v as f32))
            .collect();
        let labels = SAMPLES.iter().map(|(_, y)| *y as u8).collect();
        let shape = DataShape {
            sample: SampleShape::Row(2),
            num_classes: 2,
        };
        let data = Dataset::from_floats(features, labels, shape);
        let section: ModelConfig =
            serde_json::from_value(serde_json::json!({"name": "mlp", "hidden": hidden})).unwrap();
        let model = Registry::builtin().choose_model(&section, None).unwrap();
        let layout = model.layout(shape).unwrap();
        let names: Vec<String> = personal.iter().map(|n| n.to_string()).collect();
        let sharing = Sharing::of(&layout, &names).unwrap();
        let config = ClientConfig {
            batch_size: 4,
            ..serde_json::from_value(serde_json::json!({ "lr": lr })).unwrap()
        };
        let device = BackendKind::Flex.training_device();
        let (stop, indices) = (StopSignal::new(), [0, 1, 2, 3]);
        let mut rng = stream(0, Purpose::LOCAL_SHUFFLE, 1, 0);
        let build = |params: &[f32]| flat::load(model.build(shape, &device), params);
        let session = LocalTraining::new(SessionParts {
            local: LocalData {
                data: &data,
                indices: &indices,
                flip_labels: false,
            },
            config: &config,
            budget: steps,
            rng: &mut rng,
            device: &device,
            stop: &stop,
            start,
            build: &build,
        });
        let view = ClientView {
            round: 1,
            client: 0,
            global: start,
            downlink: &Tensors::new(),
            lr,
            personal: sharing.as_ref(),
        };
        let trained = client.train(session, build(start), &view, state).unwrap();
        ToyRun {
            params: flat::flatten(&trained.net),
            kept: trained.kept,
        }
    }

    /// The gradient of the mean cross-entropy of logistic regression `params` (as
    /// [`train_toy`] lays them out) over [`SAMPLES`], worked out by hand: `(p - y) x` for the
    /// weight and `p - y` for the bias, averaged.
    pub fn logistic_gradient(params: &[f64]) -> Vec<f64> {
        let mut grad = vec![0.0; 6];
        for (x, y) in SAMPLES {
            let logit = |j: usize| x[0] * params[j] + x[1] * params[2 + j] + params[4 + j];
            let (a, b) = (logit(0), logit(1));
            let p1 = 1.0 / (1.0 + (a - b).exp());
            let error = [1.0 - p1 - f64::from(y == 0), p1 - f64::from(y == 1)];
            for j in 0..2 {
                grad[j] += error[j] * x[0] / 4.0;
                grad[2 + j] += error[j] * x[1] / 4.0;
                grad[4 + j] += error[j] / 4.0;
            }
        }
        grad
    }

    /// Whether `got` equals `want` within `tolerance`, value by value.
    pub fn close(got: &[f32], want: &[f64], tolerance: f64) -> bool {
        got.len() == want.len()
            && got
                .iter()
                .zip(want)
                .all(|(g, w)| (f64::from(*g) - w).abs() <= tolerance)
    }

    /// Client `client`'s update of `num_samples` samples with model `params`.
    pub fn update(client: usize, num_samples: usize, params: Vec<f32>) -> Update {
        Update {
            round: 1,
            clients: vec![client],
            num_samples,
            train_loss: 0.0,
            steps: 1,
            params,
            extras: Tensors::new(),
            encoded: Vec::new(),
        }
    }

    /// Round 1 of a federation of ten clients.
    pub fn round() -> Round<'static> {
        const ROSTER: [ClientInfo; 10] = {
            let mut roster = [ClientInfo {
                id: 0,
                num_samples: 100,
            }; 10];
            let mut i = 0;
            while i < 10 {
                roster[i].id = i;
                i += 1;
            }
            roster
        };
        Round {
            number: 1,
            roster: &ROSTER,
            sampled: &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::update;
    use super::*;

    #[test]
    fn a_partial_aggregate_averages_the_models_and_sums_the_extras() {
        let mut a = update(0, 100, vec![1.0]);
        a.extras = Tensors::new().with("delta", vec![1.0]);
        let mut b = update(1, 300, vec![5.0]);
        b.extras = Tensors::new().with("delta", vec![2.0]);
        let folded = Fold::all(edge_sums(&["delta"]), &[a, b]);
        let partial = partial_aggregate(1, folded, &["delta"]);
        assert_eq!(partial.params, vec![4.0]);
        assert_eq!(partial.extras.expect("delta"), &[3.0]);
        assert_eq!(
            (partial.clients, partial.num_samples, partial.steps),
            (vec![0, 1], 400, 2)
        );
    }

    #[test]
    fn a_plain_client_takes_sgd_steps_on_the_hand_worked_gradient() {
        use super::testing::{close, logistic_gradient, train_toy};
        let start = [0.5, -0.25, 0.0, 0.75, 0.1, -0.1];
        let run = train_toy(&PlainClient, &[], &[], (&start, 2, 0.5), None);
        let mut w: Vec<f64> = start.iter().map(|&v| f64::from(v)).collect();
        for _ in 0..2 {
            let g = logistic_gradient(&w);
            w.iter_mut().zip(g).for_each(|(w, g)| *w -= 0.5 * g);
        }
        assert!(
            close(&run.params, &w, 1e-6),
            "{:?} against {w:?}",
            run.params
        );
    }
}
