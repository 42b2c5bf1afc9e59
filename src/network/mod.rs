//! What travels between the tiers, and the counted links it travels on.
//!
//! Nothing here knows about models or training: payloads are flat `f32` vectors and named
//! tensors.

pub mod link;
pub mod message;
pub mod payload;

pub use link::{
    Disconnected, Inlet, Link, LinkEnd, LinkProfile, LinkProfiles, Traffic, UPWARD_BACKLOG,
};
pub use message::{ClientId, ClientInfo, DropReason, Dropped, Envelope, Message, NodeId, Update};
pub use payload::{StateError, Tensors};
