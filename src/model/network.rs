//! A network as fedsim trains it: any burn module whose forward pass maps a batch of samples
//! to class logits ([`Network`]), behind one handle ([`Net`]) that the trainer, the evaluator
//! and the flat view use without knowing its type. The built-in architectures and a user's
//! own are networks alike.
//!
//! burn's module visitors are generic over each parameter's rank, so they cannot be called
//! through a trait object. [`Net`] therefore offers the few walks fedsim makes over the
//! parameters (read them, map their values, correct their gradients, load a flat vector, take
//! an optimiser step), each written once for every network type, with every parameter seen as
//! a one-dimensional tensor in flat-vector order. Reshaping a contiguous tensor moves no value,
//! so results are those of walking each network by its own type.

use std::fmt;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Int, Tensor, TensorData};

/// A batch of samples as a network takes it.
#[derive(Debug, Clone)]
pub enum Input {
    /// Images `[batch, channels, height, width]`.
    Images(Tensor<4>),
    /// Feature rows `[batch, features]`.
    Rows(Tensor<2>),
    /// Token ids `[batch, steps]`.
    Tokens(Tensor<2, Int>),
}

impl Input {
    /// What the batch holds, for the message of a network that cannot take it.
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Images(_) => "images",
            Input::Rows(_) => "feature rows",
            Input::Tokens(_) => "token sequences",
        }
    }
}

/// A trainable network: a burn module (`#[derive(Module)]`) with a forward pass to class
/// logits. Its float parameters are what the federation exchanges, in the order burn visits
/// them.
pub trait Network: Module + 'static {
    /// Class logits `[batch, classes]` for a batch. Only batches of the sample kinds its
    /// architecture takes ([`super::Architecture::takes`]) reach it: validation rejects other
    /// data before a run starts.
    fn forward(&self, input: Input) -> Tensor<2>;

    /// The logits and, where the network exposes it, its representation of the batch: the
    /// input of its last layer, `[batch, features]` (what MOON's contrastive term compares).
    /// By default the logits alone; the logits must be [`Network::forward`]'s to the bit.
    fn outputs(&self, input: Input) -> Outputs {
        Outputs {
            logits: self.forward(input),
            representation: None,
        }
    }
}

/// What a network computes for a batch ([`Network::outputs`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Outputs {
    /// Class logits `[batch, classes]`.
    pub logits: Tensor<2>,
    /// The input of the last layer `[batch, features]`, if the network exposes it.
    pub representation: Option<Tensor<2>>,
}

impl Outputs {
    /// The logits computed from `representation` by the last layer `last`.
    pub fn through(representation: Tensor<2>, last: impl FnOnce(Tensor<2>) -> Tensor<2>) -> Self {
        Self {
            logits: last(representation.clone()),
            representation: Some(representation),
        }
    }
}

/// One float parameter met on a walk over a network, in flat-vector order.
pub struct ParamSite<'a> {
    /// The modules down to it, outermost first, each as (field name, container type): a dense
    /// layer's weight ends with `("weight", "Struct:Linear")`.
    pub path: &'a [(String, String)],
    /// Its shape.
    pub shape: Vec<usize>,
    value: &'a dyn Fn() -> Tensor<1>,
}

impl ParamSite<'_> {
    /// Its values, flattened.
    pub fn value(&self) -> Tensor<1> {
        (self.value)()
    }
}

/// How a walk corrects one parameter's gradient: from the parameter's index in flat-vector
/// order, its gradient and a function giving its value, the gradient to use.
pub type CorrectGradient<'a> =
    dyn FnMut(usize, Tensor<1>, &dyn Fn() -> Tensor<1>) -> Tensor<1> + 'a;

/// Any network, its type erased: what fedsim trains, evaluates and flattens.
pub struct Net(Box<dyn Erased>);

impl fmt::Debug for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Net {
    /// Wraps `network`.
    pub fn new(network: impl Network) -> Self {
        Net(Box::new(network))
    }

    /// Class logits `[batch, classes]` for a batch.
    pub fn forward(&self, input: Input) -> Tensor<2> {
        self.0.forward(input)
    }

    /// The logits and, where the network exposes it, its representation of a batch.
    pub fn outputs(&self, input: Input) -> Outputs {
        self.0.outputs(input)
    }

    /// Calls `visit` on every float parameter, in flat-vector order.
    pub fn walk(&self, visit: &mut dyn FnMut(&ParamSite<'_>)) {
        self.0.walk(visit);
    }

    /// Replaces each float parameter's value `w` (on the inner, non-autodiff backend) by
    /// `step(index, w)`, in flat-vector order; the parameters stay leaves of the autodiff
    /// graph, as an optimiser step leaves them.
    pub fn map_values(self, step: &mut dyn FnMut(usize, Tensor<1>) -> Tensor<1>) -> Self {
        Net(self.0.map_values(step))
    }

    /// Replaces the gradient of each float parameter that has one by
    /// `correct(index, gradient, value)`, where `value` gives the parameter's own value on
    /// the inner backend.
    pub fn correct_gradients(
        &self,
        grads: &mut GradientsParams,
        correct: &mut CorrectGradient<'_>,
    ) {
        self.0.correct_gradients(grads, correct);
    }

    /// Loads the float parameters from the front of `values`, in flat-vector order, as fresh
    /// leaves; returns the network and how many values it took.
    pub fn load_values(self, values: &[f32]) -> (Self, usize) {
        let (erased, taken) = self.0.load(values);
        (Net(erased), taken)
    }

    /// The gradients of `loss` with respect to the parameters.
    pub fn gradients(&self, loss: Tensor<1>) -> GradientsParams {
        self.0.gradients(loss)
    }

    /// One step of `optimizer` with learning rate `lr` on `grads`.
    pub fn step(self, optimizer: &mut ModuleOptimizer, lr: f64, grads: GradientsParams) -> Self {
        Net(self.0.step(optimizer, lr, grads))
    }

    /// Makes the running statistics of its BatchNorm layers (burn's `RunningState`) hold
    /// their last update: burn keeps a training step's update aside until the next step
    /// reads it, and a walk over the parameters would see the value before it.
    pub(crate) fn settle_running_statistics(&self) {
        self.0.settle_running_statistics();
    }

    /// A copy whose parameters have the same ids as this network's: map its values
    /// ([`Net::map_values`]) to get a model derived from this one within a step, whose
    /// gradients then step this network (Per-FedAvg's gradient at the model after an inner
    /// step, APFL's at the mixed model). A BatchNorm layer's running statistics are shared
    /// with this network's (burn's `RunningState` is shared between clones): a training-mode
    /// pass of the copy updates this network's statistics too.
    pub fn duplicate(&self) -> Self {
        Net(self.0.duplicate())
    }

    /// Each float parameter's values on the inner (non-autodiff) backend, flattened, in
    /// flat-vector order (BatchNorm's running statistics as last settled: the last training
    /// step's update may not be in them yet).
    pub fn values(&self) -> Vec<Tensor<1>> {
        let mut values = Vec::new();
        self.walk(&mut |site| values.push(site.value().inner()));
        values
    }

    /// The gradient in `grads` of each float parameter, flattened, in flat-vector order;
    /// `None` for a parameter without one.
    pub fn gradient_values(&self, grads: &GradientsParams) -> Vec<Option<Tensor<1>>> {
        let mut values = Vec::new();
        self.0.read_gradients(grads, &mut |grad| values.push(grad));
        values
    }

    /// Removes from `grads` the gradient of each float parameter whose index (in flat-vector
    /// order) `frozen` names: an optimiser step then leaves that parameter as it is (FedRep
    /// trains its head and its body in turn).
    pub fn freeze(&self, grads: &mut GradientsParams, frozen: &dyn Fn(usize) -> bool) {
        self.0.freeze(grads, frozen);
    }
}

/// The walks of [`Net`], written once for every [`Network`].
trait Erased: Send + fmt::Debug {
    fn forward(&self, input: Input) -> Tensor<2>;
    fn outputs(&self, input: Input) -> Outputs;
    fn walk(&self, visit: &mut dyn FnMut(&ParamSite<'_>));
    fn map_values(
        self: Box<Self>,
        step: &mut dyn FnMut(usize, Tensor<1>) -> Tensor<1>,
    ) -> Box<dyn Erased>;
    fn correct_gradients(&self, grads: &mut GradientsParams, correct: &mut CorrectGradient<'_>);
    fn load(self: Box<Self>, values: &[f32]) -> (Box<dyn Erased>, usize);
    fn gradients(&self, loss: Tensor<1>) -> GradientsParams;
    fn duplicate(&self) -> Box<dyn Erased>;
    fn settle_running_statistics(&self);
    fn read_gradients(&self, grads: &GradientsParams, read: &mut dyn FnMut(Option<Tensor<1>>));
    fn freeze(&self, grads: &mut GradientsParams, frozen: &dyn Fn(usize) -> bool);
    fn step(
        self: Box<Self>,
        optimizer: &mut ModuleOptimizer,
        lr: f64,
        grads: GradientsParams,
    ) -> Box<dyn Erased>;
}

impl<N: Network> Erased for N {
    fn forward(&self, input: Input) -> Tensor<2> {
        Network::forward(self, input)
    }

    fn outputs(&self, input: Input) -> Outputs {
        Network::outputs(self, input)
    }

    fn walk(&self, visit: &mut dyn FnMut(&ParamSite<'_>)) {
        self.visit(&mut Walker {
            visit,
            path: Vec::new(),
        });
    }

    fn map_values(
        self: Box<Self>,
        step: &mut dyn FnMut(usize, Tensor<1>) -> Tensor<1>,
    ) -> Box<dyn Erased> {
        Box::new(self.map(&mut ValueMapper { step, index: 0 }))
    }

    fn correct_gradients(&self, grads: &mut GradientsParams, correct: &mut CorrectGradient<'_>) {
        self.visit(&mut GradientCorrector {
            grads,
            correct,
            index: 0,
        });
    }

    fn load(self: Box<Self>, values: &[f32]) -> (Box<dyn Erased>, usize) {
        let mut loader = Loader { values, offset: 0 };
        let net = self.map(&mut loader);
        (Box::new(net), loader.offset)
    }

    fn gradients(&self, loss: Tensor<1>) -> GradientsParams {
        GradientsParams::from_grads(loss.backward(), self)
    }

    fn duplicate(&self) -> Box<dyn Erased> {
        Box::new(self.clone())
    }

    fn settle_running_statistics(&self) {
        // `valid` folds every running state's pending update into its value (shared with
        // the copy it returns, which is not needed).
        drop(Module::valid(self));
    }

    fn read_gradients(&self, grads: &GradientsParams, read: &mut dyn FnMut(Option<Tensor<1>>)) {
        self.visit(&mut GradientReader { grads, read });
    }

    fn freeze(&self, grads: &mut GradientsParams, frozen: &dyn Fn(usize) -> bool) {
        self.visit(&mut GradientFreezer {
            grads,
            frozen,
            index: 0,
        });
    }

    fn step(
        self: Box<Self>,
        optimizer: &mut ModuleOptimizer,
        lr: f64,
        grads: GradientsParams,
    ) -> Box<dyn Erased> {
        Box::new(optimizer.step(lr, *self, grads))
    }
}

/// A tensor of any rank as one dimension.
fn flat<const D: usize>(tensor: Tensor<D>) -> Tensor<1> {
    let len = tensor.shape().num_elements();
    tensor.reshape([len])
}

struct Walker<'a> {
    visit: &'a mut dyn FnMut(&ParamSite<'_>),
    path: Vec<(String, String)>,
}

impl ModuleVisitor for Walker<'_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path
            .push((name.to_string(), container_type.to_string()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = || flat(param.val());
        (self.visit)(&ParamSite {
            path: &self.path,
            shape: param.lazy_shape().to_vec(),
            value: &value,
        });
    }
}

struct ValueMapper<'a> {
    step: &'a mut dyn FnMut(usize, Tensor<1>) -> Tensor<1>,
    index: usize,
}

impl ModuleMapper for ValueMapper<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let index = self.index;
        self.index += 1;
        param.map(|w| {
            let require_grad = w.is_require_grad();
            let dims = w.dims();
            let stepped = (self.step)(index, flat(w.inner())).reshape(dims);
            Tensor::from_inner(stepped).set_require_grad(require_grad)
        })
    }
}

struct GradientCorrector<'a> {
    grads: &'a mut GradientsParams,
    correct: &'a mut CorrectGradient<'a>,
    index: usize,
}

impl ModuleVisitor for GradientCorrector<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let index = self.index;
        self.index += 1;
        let Some(grad) = self.grads.remove::<D>(param.id) else {
            return;
        };
        let dims = grad.dims();
        let value = || flat(param.val().inner());
        let corrected = (self.correct)(index, flat(grad), &value).reshape(dims);
        self.grads.register(param.id, corrected);
    }
}

struct GradientReader<'a> {
    grads: &'a GradientsParams,
    read: &'a mut dyn FnMut(Option<Tensor<1>>),
}

impl ModuleVisitor for GradientReader<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        (self.read)(self.grads.get::<D>(param.id).map(flat));
    }
}

struct GradientFreezer<'a> {
    grads: &'a mut GradientsParams,
    frozen: &'a dyn Fn(usize) -> bool,
    index: usize,
}

impl ModuleVisitor for GradientFreezer<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if (self.frozen)(self.index) {
            self.grads.remove::<D>(param.id);
        }
        self.index += 1;
    }
}

struct Loader<'a> {
    values: &'a [f32],
    offset: usize,
}

impl ModuleMapper for Loader<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let shape = param.lazy_shape();
        let len = shape.num_elements();
        let slice = &self.values[self.offset..self.offset + len];
        self.offset += len;
        let device = param.lazy_device();
        let tensor = Tensor::from_data(TensorData::new(slice.to_vec(), shape), &device);
        let id = param.id;
        param.transform_for_load(tensor, id)
    }
}
