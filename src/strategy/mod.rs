//! How the server turns client updates into the next global model.
//!
//! A strategy sees flat vectors and sample counts only: nothing here knows about threads,
//! channels or burn. Updates always arrive sorted by client id, so a strategy that reduces
//! them in order gives the same bits whatever order the clients finished in.

pub mod fedavg;

pub use fedavg::FedAvg;

use crate::config::StrategyKind;
use crate::network::Update;

/// The server half of an FL algorithm.
pub trait Strategy: Send {
    /// The next global model from the current one and this round's updates (sorted by client
    /// id, never empty).
    fn aggregate(&mut self, global: &[f32], updates: &[Update]) -> Vec<f32>;
}

/// The strategy an experiment names.
pub fn from_kind(kind: StrategyKind) -> Box<dyn Strategy> {
    match kind {
        StrategyKind::FedAvg => Box::new(FedAvg),
    }
}
