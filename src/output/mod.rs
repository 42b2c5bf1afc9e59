//! What a run reports: per-round records, the manifest, the run folder they are written to,
//! and the progress display.

pub mod atomic;
pub mod claim;
pub mod manifest;
pub mod metrics;
pub mod progress;
pub mod run_folder;

pub use manifest::{Environment, Manifest};
pub use metrics::{
    ClientAccuracy, Evaluation, PrivacySpent, ProbedLoss, RoundRecord, StalenessRecord, Summary,
    TierTraffic,
};
pub use progress::{Progress, say};
pub use run_folder::RunFolder;
