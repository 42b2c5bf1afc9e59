//! `manifest.json`: what is needed to tell whether two runs should give the same bytes.
//!
//! A run is a pure function of its config, for one build of fedsim on one kind of CPU: burn's
//! CPU kernels choose their vector width from the CPU's features at run time, and a different
//! width sums in a different order, which changes the low bits. So the manifest records the
//! build (version, git commit, target), the CPU features those kernels look at, the backend,
//! the digests of the data files and of the partition, and the command line.

use serde::{Deserialize, Serialize};

use crate::data::DataFile;

/// The build of fedsim and the machine a run (or a part of it) ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    /// fedsim's version.
    pub fedsim_version: String,
    /// The git commit fedsim was built from (with `-modified` if tracked files had changes),
    /// when it was built from a checkout.
    pub git_commit: Option<String>,
    /// The target triple it was built for.
    pub target: String,
    /// The CPU features that decide which vector kernels run, as detected at run time.
    pub cpu_features: Vec<CpuFeature>,
    /// The instruction set of the matrix-product kernels that burn's CPU backend picked on this
    /// machine: runs agree to the bit only between machines where this (and the build) agree.
    #[serde(default)]
    pub matmul_kernels: String,
}

/// Whether the CPU has one feature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuFeature {
    /// The feature's name, as `std::arch` spells it.
    pub name: String,
    /// Whether the CPU running fedsim has it.
    pub present: bool,
}

impl Environment {
    /// This build, on this machine.
    pub fn current() -> Self {
        let commit = env!("FEDSIM_GIT_COMMIT");
        Self {
            fedsim_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: (!commit.is_empty()).then(|| commit.to_string()),
            target: env!("FEDSIM_TARGET").to_string(),
            cpu_features: cpu_features(),
            matmul_kernels: matmul_kernels().to_string(),
        }
    }
}

/// The kernels burn-flex's matrix products (through the `gemm` crate) choose at run time:
/// AVX-512 where the CPU has it and the build has them (the default `x86-v4` feature), else AVX2
/// with FMA, else scalar code.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
pub fn matmul_kernels() -> &'static str {
    use std::arch::is_x86_feature_detected as has;
    if cfg!(feature = "x86-v4") && has!("avx512f") {
        "x86-64 AVX-512"
    } else if has!("fma") {
        "x86-64 AVX2+FMA"
    } else {
        "x86-64 scalar"
    }
}

/// The kernels burn-flex's matrix products (through the `gemm` crate) choose at run time.
#[cfg(target_arch = "aarch64")]
pub fn matmul_kernels() -> &'static str {
    if std::arch::is_aarch64_feature_detected!("neon") {
        "aarch64 NEON"
    } else {
        "aarch64 scalar"
    }
}

/// The kernels burn-flex's matrix products (through the `gemm` crate) choose at run time.
#[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
pub fn matmul_kernels() -> &'static str {
    "scalar"
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn cpu_features() -> Vec<CpuFeature> {
    use std::arch::is_x86_feature_detected as has;
    let features = [
        ("sse4.2", has!("sse4.2")),
        ("avx", has!("avx")),
        ("avx2", has!("avx2")),
        ("fma", has!("fma")),
        ("avx512f", has!("avx512f")),
    ];
    named(&features)
}

#[cfg(target_arch = "aarch64")]
fn cpu_features() -> Vec<CpuFeature> {
    use std::arch::is_aarch64_feature_detected as has;
    named(&[("neon", has!("neon")), ("sve", has!("sve"))])
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
fn cpu_features() -> Vec<CpuFeature> {
    named(&[])
}

fn named(features: &[(&str, bool)]) -> Vec<CpuFeature> {
    features
        .iter()
        .map(|&(name, present)| CpuFeature {
            name: name.to_string(),
            present,
        })
        .collect()
}

/// The contents of `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Where the run started.
    pub environment: Environment,
    /// The burn backend that trained.
    pub backend: String,
    /// The data files read, with the SHA-256 of their contents.
    pub data_files: Vec<DataFile>,
    /// SHA-256 of `partition.json`.
    pub partition_sha256: String,
    /// The command line, program name first.
    pub command_line: Vec<String>,
    /// The components the run used that another crate than fedsim registered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginUse>,
    /// Each time the run was continued with `--resume`: after which round, where, and how.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<Resume>,
}

/// A plug-in a run used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginUse {
    /// What kind of component: `algorithm`.
    pub kind: String,
    /// Its registered name.
    pub name: String,
    /// The crate that registered it, and its version.
    #[serde(flatten)]
    pub origin: Origin,
}

/// One continuation of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The last round played before it.
    pub after_round: u32,
    /// The build and machine it ran on.
    pub environment: Environment,
    /// The data files it read (the same digests as the run's, or it would have been refused).
    pub data_files: Vec<DataFile>,
    /// Its command line.
    pub command_line: Vec<String>,
}

/// The crate that registers a component, and its version: recorded in a run's manifest, so
/// that a run says which plug-ins made it. `fedsim::origin!` gives the calling
/// crate's own; the registry hands it to plug-ins as `registry::Origin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The crate's name (`CARGO_PKG_NAME`).
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// Its version (`CARGO_PKG_VERSION`).
    pub version: String,
}

impl Origin {
    /// The crate `name` at `version`.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            crate_name: name.to_string(),
            version: version.to_string(),
        }
    }

    /// fedsim itself, for its built-ins.
    pub fn fedsim() -> Self {
        Self::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
    }
}
