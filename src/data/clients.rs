//! Each client's samples, as training, probes and per-client evaluation read them: indices into
//! a split held whole in memory ([`ClientData::Pooled`]), or the client's own samples made when
//! it is asked for ([`ClientData::OnDemand`]) by a [`ClientSource`], so that a federation of a
//! million clients holds a few bytes per client and the samples of the clients in flight.

use std::sync::Arc;

use rayon::prelude::*;

use super::partition::{Partition, held_out_positions, held_out_size};
use super::{DataError, DataShape, Dataset};
use crate::network::ClientId;

/// A data set's own clients made one at a time, each from its own seeded stream or its own
/// place in a file, rather than all up front ([`super::DataSource::clients_on_demand`]).
pub trait ClientSource: Send + Sync {
    /// What a sample is, and the number of classes.
    fn shape(&self) -> DataShape;

    /// How many training and test samples each client holds, found without making the
    /// samples: the federation's roster.
    fn roster(&self) -> Roster;

    /// Client `client`'s samples: exactly those, in the same order, that the data set's
    /// whole load gives it, so that both ways train to the same bits.
    fn client(&self, client: ClientId) -> Result<OwnSamples, DataError>;

    /// The files it reads, with their digests, for the run's manifest (none by default).
    fn files(&self) -> Vec<super::DataFile> {
        Vec::new()
    }
}

/// One client's samples, made on demand.
#[derive(Debug, Clone)]
pub struct OwnSamples {
    /// Its training samples.
    pub train: Dataset,
    /// Its test samples (none where the data set gives its clients none).
    pub test: Dataset,
}

/// How many training and test samples each client holds: eight bytes a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roster {
    counts: Vec<[u32; 2]>,
}

impl Roster {
    /// The roster of clients holding `counts[client] = [training, test]` samples.
    pub fn new(counts: Vec<[u32; 2]>) -> Self {
        Self { counts }
    }

    /// Number of clients.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether there are no clients.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// The training samples of `client`.
    pub fn train(&self, client: ClientId) -> usize {
        self.counts[client][0] as usize
    }

    /// The test samples of `client`.
    pub fn test(&self, client: ClientId) -> usize {
        self.counts[client][1] as usize
    }
}

/// Which of a client's own samples a [`ClientData`] reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Part {
    /// Its training samples, less any held out.
    Training,
    /// The training samples held out to score it on (`eval.client_test_fraction`).
    HeldOut,
    /// Its own test samples.
    Test,
}

/// What is held out of each client's training samples: `fraction` of them, drawn from the
/// client's own stream of `seed` ([`Partition::hold_out`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HoldOut {
    /// The fraction held out; 0 holds none.
    pub fraction: f64,
    /// The split seed.
    pub seed: u64,
}

/// Where each client's samples are.
#[derive(Clone)]
pub enum ClientData {
    /// A split held whole, and each client's indices into it.
    Pooled {
        /// The split.
        data: Arc<Dataset>,
        /// Each client's samples in it.
        clients: Arc<Partition>,
    },
    /// Each client's own samples, made when asked for.
    OnDemand {
        /// What makes them.
        source: Arc<dyn ClientSource>,
        /// How many each client holds.
        roster: Arc<Roster>,
        /// Which of them are read.
        part: Part,
        /// What is held out of the training samples.
        hold_out: HoldOut,
    },
}

impl ClientData {
    /// Number of clients.
    pub fn num_clients(&self) -> usize {
        match self {
            ClientData::Pooled { clients, .. } => clients.num_clients(),
            ClientData::OnDemand { roster, .. } => roster.len(),
        }
    }

    /// What a sample is, and the number of classes.
    pub fn shape(&self) -> DataShape {
        match self {
            ClientData::Pooled { data, .. } => data.shape(),
            ClientData::OnDemand { source, .. } => source.shape(),
        }
    }

    /// How many samples `client` holds here, without making them.
    pub fn len_of(&self, client: ClientId) -> usize {
        match self {
            ClientData::Pooled { clients, .. } => clients.clients[client].len(),
            ClientData::OnDemand {
                roster,
                part,
                hold_out,
                ..
            } => {
                let train = roster.train(client);
                let held = held_out_size(train, hold_out.fraction);
                match part {
                    Part::Training => train - held,
                    Part::HeldOut => held,
                    Part::Test => roster.test(client),
                }
            }
        }
    }

    /// The largest number of samples a client holds here.
    pub fn largest(&self) -> usize {
        (0..self.num_clients())
            .map(|client| self.len_of(client))
            .max()
            .unwrap_or(0)
    }

    /// `client`'s samples: its indices into the pooled split, or its own samples made now.
    pub fn samples(&self, client: ClientId) -> Result<ClientSamples, DataError> {
        match self {
            ClientData::Pooled { data, clients } => Ok(ClientSamples {
                data: data.clone(),
                indices: Indices::Pooled(clients.clone(), client),
            }),
            ClientData::OnDemand {
                source,
                part,
                hold_out,
                ..
            } => {
                let own = source.client(client)?;
                let data = match part {
                    Part::Test => own.test,
                    Part::Training | Part::HeldOut => own.train,
                };
                let positions = match part {
                    Part::Test => (0..data.len()).collect(),
                    Part::Training | Part::HeldOut => {
                        let held = held_out_positions(
                            data.len(),
                            hold_out.fraction,
                            hold_out.seed,
                            client,
                        );
                        let keep = *part == Part::HeldOut;
                        (0..data.len()).filter(|&i| held[i] == keep).collect()
                    }
                };
                Ok(ClientSamples {
                    data: Arc::new(data),
                    indices: Indices::Own(positions),
                })
            }
        }
    }
}

/// The samples of several clients, each scored on its own: the data set they lie in, and each
/// client with its indices in it.
pub struct Gathered {
    /// The samples.
    pub data: Arc<Dataset>,
    /// Each client, with its samples in `data`; clients holding none are left out.
    pub clients: Vec<(ClientId, Vec<usize>)>,
}

impl ClientData {
    /// The samples of `clients` (in that order): the pooled split shared with each one's
    /// indices, or every one's own samples made (in parallel) and joined into one data set.
    pub fn gather(&self, clients: &[ClientId]) -> Result<Gathered, DataError> {
        let holding = clients.iter().copied().filter(|&c| self.len_of(c) > 0);
        if let ClientData::Pooled { data, clients } = self {
            return Ok(Gathered {
                data: data.clone(),
                clients: holding.map(|c| (c, clients.clients[c].clone())).collect(),
            });
        }
        let holding: Vec<ClientId> = holding.collect();
        let made = holding
            .par_iter()
            .map(|&client| self.samples(client))
            .collect::<Result<Vec<_>, _>>()?;
        let parts: Vec<(&Dataset, &[usize])> =
            made.iter().map(|s| (s.data(), s.indices())).collect();
        let data = Dataset::gathered(&parts, self.shape());
        let mut start = 0;
        let clients = holding
            .into_iter()
            .zip(&made)
            .map(|(client, samples)| {
                let end = start + samples.indices().len();
                let indices = (start..end).collect();
                start = end;
                (client, indices)
            })
            .collect();
        Ok(Gathered {
            data: Arc::new(data),
            clients,
        })
    }
}

/// One client's samples: a data set and the indices of the client's samples in it.
pub struct ClientSamples {
    data: Arc<Dataset>,
    indices: Indices,
}

/// A client's indices: borrowed from the pooled partition, or its own.
enum Indices {
    Pooled(Arc<Partition>, ClientId),
    Own(Vec<usize>),
}

impl ClientSamples {
    /// The data set the indices point into.
    pub fn data(&self) -> &Dataset {
        &self.data
    }

    /// The client's samples in [`data`](Self::data), in the client's order.
    pub fn indices(&self) -> &[usize] {
        match &self.indices {
            Indices::Pooled(partition, client) => &partition.clients[*client],
            Indices::Own(indices) => indices,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::synthetic::SyntheticConfig;

    fn synthetic() -> SyntheticConfig {
        serde_json::from_str(r#"{"alpha": 1, "beta": 1}"#).unwrap()
    }

    #[test]
    fn a_client_made_on_demand_holds_the_samples_the_pooled_split_gives_it() {
        let config = synthetic();
        let pooled = config.generate(6, 11);
        let natural = pooled.natural.as_ref().unwrap();
        let source: Arc<dyn ClientSource> = Arc::new(config.users(6, 11));
        let roster = Arc::new(source.roster());
        let hold_out = HoldOut {
            fraction: 0.25,
            seed: 5,
        };
        let (training, held) = Partition {
            clients: natural.train.clone(),
        }
        .hold_out(hold_out.fraction, hold_out.seed);
        let train = Arc::new(pooled.train.clone());
        let cases = [
            (Part::Training, train.clone(), training.clients),
            (Part::HeldOut, train, held),
            (
                Part::Test,
                Arc::new(pooled.test.clone()),
                natural.test.clone(),
            ),
        ];
        for (part, data, clients) in cases {
            let pooled = ClientData::Pooled {
                data,
                clients: Arc::new(Partition { clients }),
            };
            let on_demand = ClientData::OnDemand {
                source: source.clone(),
                roster: roster.clone(),
                part,
                hold_out,
            };
            for client in 0..6 {
                let (a, b) = (pooled.samples(client), on_demand.samples(client));
                let (a, b) = (a.unwrap(), b.unwrap());
                assert_eq!(on_demand.len_of(client), a.indices().len(), "{part:?}");
                assert_eq!(pooled.len_of(client), b.indices().len(), "{part:?}");
                let (mut fa, mut la, mut fb, mut lb) = (vec![], vec![], vec![], vec![]);
                a.data().gather(a.indices(), &mut fa, &mut la);
                b.data().gather(b.indices(), &mut fb, &mut lb);
                assert_eq!(la, lb, "{part:?} of client {client}");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fa), bits(&fb), "{part:?} of client {client}");
            }
        }
    }
}
