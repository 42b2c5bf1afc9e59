//! The LeNet-style CNN that NIID-Bench trains (Li et al. 2021, "Federated Learning on Non-IID
//! Data Silos: An Experimental Study", its `SimpleCNN`): two 5x5 convolutions of 6 and 16
//! channels without padding, each followed by ReLU and 2x2 max pooling, then dense layers of
//! 120 and 84 units with ReLU, then the classes. On MNIST's 28x28 images the second block
//! leaves 16 channels of 4x4.
//!
//! A model is two parts: the network, an ordinary burn module with a forward pass, and its
//! architecture, which tells fedsim its name, hyperparameters, which data it takes and how
//! to build it. The network is made of fedsim's layers (`fedsim::model::layers`), each a
//! block that runs as one operation on fedsim's default backend; burn's `Conv2d`, `MaxPool2d`,
//! `Linear` and `relu` would compute the same function, more slowly.

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use fedsim::config::check::Problems;
use fedsim::data::{DataShape, SampleKind, SampleShape};
use fedsim::model::layers::{Activation, ConvPool, ConvPoolConfig, Dense, DenseConfig};
use fedsim::model::{Architecture, Input, Net, Network, Outputs};
use serde::{Deserialize, Serialize};

/// The network.
#[derive(Module, Debug)]
pub struct LeNet {
    block1: ConvPool,
    block2: ConvPool,
    fc1: Dense,
    fc2: Dense,
    fc3: Dense,
}

impl LeNet {
    /// The input of the last layer: what MOON's contrastive term compares.
    fn represent(&self, input: Input) -> Tensor<2> {
        let Input::Images(images) = input else {
            unreachable!("LeNet takes images only, as its architecture says")
        };
        let x = self.block2.forward(self.block1.forward(images));
        self.fc2.forward(self.fc1.forward(x.flatten(1, 3)))
    }
}

impl Network for LeNet {
    fn forward(&self, input: Input) -> Tensor<2> {
        self.fc3.forward(self.represent(input))
    }

    /// Exposing the representation lets algorithms that compute on it (MOON) train LeNet.
    fn outputs(&self, input: Input) -> Outputs {
        Outputs::through(self.represent(input), |z| self.fc3.forward(z))
    }
}

/// Its hyperparameters: the widths of the two hidden dense layers (NIID-Bench's
/// `hidden_dims`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeNetParams {
    pub hidden: [usize; 2],
}

impl Default for LeNetParams {
    fn default() -> Self {
        Self { hidden: [120, 84] }
    }
}

/// The architecture, as an experiment file names it: `"model": "lenet"`.
pub struct LeNetModel;

/// Height or width after a 5x5 convolution without padding and a 2x2 pooling.
fn after_block(side: usize) -> usize {
    side.saturating_sub(4) / 2
}

impl Architecture for LeNetModel {
    type Params = LeNetParams;

    fn name(&self) -> &'static str {
        "lenet"
    }

    fn about(&self) -> &'static str {
        "NIID-Bench's CNN (Li et al. 2021): 5x5 convolutions of 6 and 16 channels with max pooling, dense 120-84-classes"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[("hidden", "units of the two hidden dense layers")]
    }

    fn takes(&self, sample: SampleKind) -> bool {
        matches!(sample, SampleKind::Image(_))
    }

    fn check(&self, params: &LeNetParams, sample: Option<SampleKind>, problems: &mut Problems) {
        if params.hidden.contains(&0) {
            problems.add("hidden", "has a layer of 0 units");
        }
        if let Some(SampleKind::Image([_, height, width])) = sample
            && after_block(after_block(height.min(width))) == 0
        {
            problems.add(
                "name",
                format!("\"lenet\" needs images of at least 16x16; these are {height}x{width}"),
            );
        }
    }

    fn build(&self, params: &LeNetParams, shape: DataShape, device: &Device) -> Net {
        let SampleShape::Image([channels, height, width]) = shape.sample else {
            unreachable!("validation gives LeNet images only")
        };
        let flat = 16 * after_block(after_block(height)) * after_block(after_block(width));
        let [first, second] = params.hidden;
        Net::new(LeNet {
            block1: ConvPoolConfig::new([channels, 6], 5).init(device),
            block2: ConvPoolConfig::new([6, 16], 5).init(device),
            fc1: DenseConfig::new(flat, first).init(device),
            fc2: DenseConfig::new(first, second).init(device),
            fc3: DenseConfig::new(second, shape.num_classes)
                .with_activation(Activation::Identity)
                .init(device),
        })
    }
}
