//! fedsim's own components, registered in a fixed order through the public builder, one line
//! each: what a plug-in does in its own crate.

use super::{RegistryBuilder, RegistryError};
use crate::compression::{Qsgd, Quantize, RandomK, ScaledSign, TopK};
use crate::data::cifar::Cifar10Data;
use crate::data::leaf::LeafTask;
use crate::data::mnist::{FASHION_MNIST, MNIST};
use crate::data::numpy::NumpyData;
use crate::data::packed::PackedData;
use crate::data::partitioner::{
    DirichletSplit, FileSplit, IidSplit, LabelsSplit, NaturalSplit, QuantitySplit, ShardsSplit,
};
use crate::data::rotated::RotatedMnist;
use crate::data::synthetic::SyntheticData;
use crate::data::tabular::{BreastCancerData, CsvData};
use crate::model::{CifarCnnModel, CnnModel, LogisticModel, LstmModel, MlpModel, ResnetModel};
use crate::strategy::{
    Apfl, Cfl, Ditto, FedAdagrad, FedAdam, FedAla, FedAsync, FedAvg, FedAvgFt, FedAvgM, FedBn,
    FedBuff, FedDyn, FedNova, FedPer, FedProx, FedRep, FedYogi, Ifca, Krum, LgFedAvg, Median, Moon,
    Oort, PFedMe, PerFedAvg, PowerOfChoice, QFfl, Scaffold, SignSgd, TrimmedMean,
};

/// Registers the built-in algorithms, models, data sets and partition schemes, in the order
/// `fedsim strategies`, `fedsim models`, `fedsim datasets` and `fedsim schemes` list them.
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
        .algorithm(Krum)?
        .algorithm(SignSgd)?
        .algorithm(FedAsync)?
        .algorithm(FedBuff)?
        .algorithm(Oort)?
        .algorithm(PowerOfChoice)?
        .algorithm(Cfl)?
        .algorithm(Ifca)?
        .algorithm(Moon)?
        .algorithm(FedAvgFt)?
        .algorithm(FedPer::default())?
        .algorithm(LgFedAvg::default())?
        .algorithm(FedBn::default())?
        .algorithm(Ditto)?
        .algorithm(FedRep)?
        .algorithm(Apfl)?
        .algorithm(PFedMe)?
        .algorithm(PerFedAvg)?
        .algorithm(FedAla)?;
    registry
        .model(MlpModel)?
        .model(LogisticModel)?
        .model(CnnModel)?
        .model(CifarCnnModel)?
        .model(ResnetModel)?
        .model(LstmModel)?;
    registry
        .data_set(&MNIST)?
        .data_set(&FASHION_MNIST)?
        .data_set(RotatedMnist)?
        .data_set(Cifar10Data)?
        .data_set(SyntheticData)?
        .data_set(BreastCancerData)?
        .data_set(CsvData)?
        .data_set(NumpyData)?
        .data_set(LeafTask::Femnist)?
        .data_set(LeafTask::Shakespeare)?
        .data_set(PackedData)?;
    registry
        .partitioner(IidSplit)?
        .partitioner(DirichletSplit)?
        .partitioner(ShardsSplit)?
        .partitioner(LabelsSplit)?
        .partitioner(QuantitySplit)?
        .partitioner(NaturalSplit)?
        .partitioner(FileSplit)?
        .compressor(TopK)?
        .compressor(RandomK)?
        .compressor(Qsgd)?
        .compressor(ScaledSign)?
        .compressor(Quantize)?;
    Ok(())
}
