//! Differential privacy's arithmetic: what a run of the subsampled Gaussian mechanism spends.
//!
//! [`rdp`] gives one step's Rényi differential privacy at an order, for Poisson and
//! fixed-size sampling; [`RdpAccountant`] composes steps and converts the total to an
//! `(ε, δ)` guarantee; [`noise_multiplier_for`] inverts it, finding the noise a target epsilon
//! needs. `fedsim privacy` answers both questions from the command line, and a run with a
//! `privacy` section reports its epsilon after every round.
//!
//! Pure numbers: nothing here knows of models, clients or runs.

mod accountant;
pub mod mechanism;
pub mod rdp;

pub use accountant::{
    Conversion, RdpAccountant, Repeated, Sampling, Spent, SubsampledGaussian, default_orders,
    epsilon, noise_multiplier_for,
};
pub use rdp::Series;
