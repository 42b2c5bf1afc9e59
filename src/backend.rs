//! Which burn backend trains and evaluates, chosen at run time.

use burn::tensor::Device;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The burn backends fedsim can run on.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// burn-flex: the fast pure-Rust CPU backend.
    #[default]
    Flex,
    /// burn-ndarray: the older CPU backend (deprecated upstream, slow on convolutions).
    Ndarray,
    /// burn-wgpu: GPU through Vulkan, Metal or DirectX; needs the `wgpu` cargo feature.
    Wgpu,
}

impl BackendKind {
    /// The name the experiment file and `--backend` use.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Flex => "flex",
            BackendKind::Ndarray => "ndarray",
            BackendKind::Wgpu => "wgpu",
        }
    }

    /// Whether this build can run the backend; the error says how to get it.
    pub fn check_available(self) -> Result<(), String> {
        if self == BackendKind::Wgpu && !cfg!(feature = "wgpu") {
            return Err(
                "\"wgpu\" needs fedsim built with the wgpu feature (cargo build --release --features wgpu)"
                    .to_string(),
            );
        }
        Ok(())
    }

    /// The device for inference (evaluation).
    pub fn device(self) -> Device {
        match self {
            BackendKind::Flex => Device::flex(),
            #[allow(deprecated)] // offered for comparison; flex is the default
            BackendKind::Ndarray => Device::ndarray(),
            #[cfg(feature = "wgpu")]
            BackendKind::Wgpu => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
            #[cfg(not(feature = "wgpu"))]
            BackendKind::Wgpu => panic!("{}", self.check_available().unwrap_err()),
        }
    }

    /// The device for local training: [`Self::device`] with autodiff.
    pub fn training_device(self) -> Device {
        self.device().autodiff()
    }
}
