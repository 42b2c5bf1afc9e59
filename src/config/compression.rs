//! The `compression` section: what each client's upload becomes on the wire. The compressors
//! themselves are registered components ([`crate::compression`]); this section names one.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::NamedSection;

/// Compressed uploads: each client encodes its change to the model it was sent with the
/// `uplink` compressor, the links count the encoding's real bytes (and the simulated clock
/// charges them), and the server decodes it. Extra tensors an algorithm sends beside the model
/// travel whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompressionConfig {
    /// The compressor of each client's change: any name `fedsim compressors` lists, with its
    /// parameters beside it (`{"name": "topk", "fraction": 0.01}`).
    pub uplink: NamedSection,
    /// Feed back what the encoding lost: each client keeps it in its state (and so in
    /// checkpoints) and adds it to its next change before encoding.
    #[serde(default)]
    pub error_feedback: bool,
}
