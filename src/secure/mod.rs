//! Secure aggregation, simulated (Bonawitz et al. 2017): clients quantise their updates into
//! the ring `Z_2^32` and mask them so that the server can read only their sum.
//!
//! [`ring`] quantises and masks, [`SecureRound`] is one round of the protocol (the clients'
//! masked inputs and the server's unmasking, with dropped clients' masks recovered from
//! Shamir shares, [`shamir`], over the field of [`field`]), and [`Exchange`] the bytes of the
//! messages it adds. The training pool masks each client's input; the server's
//! `strategy/secure.rs` unmasks the sum, and `topology/server.rs` charges the key exchange
//! and the unmasking on the links and the simulated clock.
//!
//! A simulation: the key agreement runs in a 61-bit group, and the key-exchange and unmasking
//! messages are played out by the server and counted rather than sent.

pub mod field;
mod masking;
mod protocol;
pub mod ring;
pub mod shamir;

pub use masking::{Masking, PARTICIPANTS};
pub use protocol::{Exchange, SecureRound, Shortfall};

/// The metric of a round's line in `metrics.jsonl`: 1 where fewer clients than the threshold
/// sent their masked inputs, so the round ended without a new model; 0 otherwise.
pub const ABORTED: &str = "secagg_aborted";

/// The metric of a round's line in `metrics.jsonl`: the clients whose pair masks the server
/// recovered from the survivors' shares (those that dropped out after the key exchange).
pub const RECOVERED: &str = "secagg_recovered";
