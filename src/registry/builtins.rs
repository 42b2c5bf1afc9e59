//! fedsim's own components, registered in a fixed order through the public builder, one line
//! each: what a plug-in does in its own crate.

use super::{RegistryBuilder, RegistryError};
use crate::model::{CifarCnnModel, CnnModel, LogisticModel, LstmModel, MlpModel, ResnetModel};
use crate::strategy::{
    FedAdagrad, FedAdam, FedAvg, FedAvgM, FedDyn, FedNova, FedProx, FedYogi, Krum, Median, QFfl,
    Scaffold, TrimmedMean,
};

/// Registers the built-in algorithms and models, in the order `fedsim strategies` and
/// `fedsim models` list them.
pub(super) fn register(registry: &mut RegistryBuilder) -> Result<(), RegistryError> {
    registry
        .algorithm(FedAvg)?
        .algorithm(FedAvgM)?
        .algorithm(FedAdagrad)?
        .algorithm(FedAdam)?
        .algorithm(FedYogi)?
        .algorithm(FedProx)?
        .algorithm(Scaffold)?
        .algorithm(FedNova)?
        .algorithm(FedDyn)?
        .algorithm(QFfl)?
        .algorithm(Median)?
        .algorithm(TrimmedMean)?
        .algorithm(Krum)?;
    registry
        .model(MlpModel)?
        .model(LogisticModel)?
        .model(CnnModel)?
        .model(CifarCnnModel)?
        .model(ResnetModel)?
        .model(LstmModel)?;
    Ok(())
}
