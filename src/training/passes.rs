//! Local training beside a client's round of training: the passes a client half asks for to
//! personalise a model ([`FineTuning`]), when its client is scored (fine-tuning the model it
//! would be sent) or after it trained (Ditto's personal model). Each pass runs on the calling
//! thread's network, its batches in the order of a stream of its own, so the round's training
//! (and its batch order) is the same with or without them.

use burn::tensor::Device;
use rand_chacha::ChaCha12Rng;

use crate::config::ClientConfig;
use crate::data::DataShape;
use crate::local::session::SessionParts;
use crate::local::{LocalData, LocalTraining, TrainError, train_on_objective};
use crate::model::{Net, flat};
use crate::registry::ModelChoice;
use crate::stop::StopSignal;
use crate::strategy::{FineTuning, Pass};

/// Passes of local training over one client's data.
pub struct ExtraPasses<'a> {
    /// The client's training data.
    pub local: LocalData<'a>,
    /// Its local training settings.
    pub config: &'a ClientConfig,
    /// The architecture, to build a network where the thread has none.
    pub model: &'a ModelChoice,
    /// The data's shape.
    pub shape: DataShape,
    /// The stream the passes draw their batches' order from, one pass after the other.
    pub rng: ChaCha12Rng,
    /// The thread's network, taken and given back.
    pub net: &'a mut Option<Net>,
    /// The autodiff device it trains on.
    pub device: &'a Device,
    /// The run's stop request.
    pub stop: &'a StopSignal,
}

impl FineTuning for ExtraPasses<'_> {
    fn train(&mut self, start: &[f32], pass: &Pass<'_>) -> Result<Vec<f32>, TrainError> {
        let (model, shape, device) = (self.model, self.shape, self.device);
        let scratch = self
            .net
            .take()
            .unwrap_or_else(|| model.build(shape, device));
        let build = |params: &[f32]| flat::load(model.build(shape, device), params);
        let session = LocalTraining::new(SessionParts {
            local: self.local,
            config: self.config,
            budget: pass.steps,
            rng: &mut self.rng,
            device,
            stop: self.stop,
            start: pass.anchor,
            build: &build,
        });
        let trained = train_on_objective(session, flat::load(scratch, start), &pass.objective)?;
        let params = flat::flatten(&trained.net);
        *self.net = Some(trained.net);
        Ok(params)
    }
}
