//! Splitting a training set among clients, and partition files.
//!
//! A [`Partition`] is a list of sample indices per client; client `i` owns `clients[i]`. Every
//! scheme draws from the experiment's partition stream, so the split is a pure function of the
//! seed and the scheme's parameters.

use std::fs;
use std::path::Path;

use rand::RngExt;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

use super::DataError;
use crate::seed::{Purpose, stream};

/// How many times the Dirichlet scheme redraws before it reports that `min_size` is out of reach.
pub const DIRICHLET_MAX_ATTEMPTS: usize = 1000;

/// Sample indices for each client, indexed by client id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// `clients[cid]` lists the training-set indices that client `cid` owns.
    pub clients: Vec<Vec<usize>>,
}

/// A partition that cannot be drawn with the given parameters.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PartitionError(pub String);

/// The draw of each client's held-out samples, per client.
const CLIENT_TEST: Purpose = Purpose::new("client-test");

impl Partition {
    /// Splits each client's samples into a training part and a held-out part of
    /// `round(fraction * n)` samples (at least one, and one fewer than the client has; none
    /// for a client of one sample), drawn from the client's own stream. Both parts keep the
    /// partition's order. With `fraction` 0 the training part is the whole partition.
    pub fn hold_out(&self, fraction: f64, seed: u64) -> (Partition, Vec<Vec<usize>>) {
        if fraction <= 0.0 {
            return (self.clone(), vec![Vec::new(); self.clients.len()]);
        }
        let (train, held): (Vec<_>, Vec<_>) = self
            .clients
            .iter()
            .enumerate()
            .map(|(client, indices)| {
                let held = held_out_positions(indices.len(), fraction, seed, client);
                let pick = |keep: bool| -> Vec<usize> {
                    indices
                        .iter()
                        .zip(&held)
                        .filter(|(_, h)| **h == keep)
                        .map(|(i, _)| *i)
                        .collect()
                };
                (pick(false), pick(true))
            })
            .unzip();
        (Partition { clients: train }, held)
    }

    /// Number of clients.
    pub fn num_clients(&self) -> usize {
        self.clients.len()
    }

    /// Balanced IID split: shuffle all indices, then deal them out in equal contiguous parts
    /// (the first `n % num_clients` clients get one more).
    pub fn iid(num_samples: usize, num_clients: usize, rng: &mut ChaCha12Rng) -> Self {
        let mut indices: Vec<usize> = (0..num_samples).collect();
        indices.shuffle(rng);
        Self {
            clients: split_evenly(&indices, num_clients)
                .map(<[usize]>::to_vec)
                .collect(),
        }
    }

    /// Label skew after Hsu et al. (2019), "Measuring the effects of non-identical data
    /// distribution": for each class, client shares are drawn from Dir(`alpha`) and the class's
    /// shuffled samples are cut at those shares. A client that already holds its fair share
    /// (`n / num_clients`) gets no more (as in NIID-Bench), which keeps sizes bounded. The whole
    /// draw repeats until every client has at least `min_size` samples, at most
    /// [`DIRICHLET_MAX_ATTEMPTS`] times.
    pub fn dirichlet(
        labels: &[u8],
        num_classes: usize,
        num_clients: usize,
        alpha: f64,
        min_size: usize,
        rng: &mut ChaCha12Rng,
    ) -> Result<Self, PartitionError> {
        let gamma = Gamma::new(alpha, 1.0)
            .map_err(|e| PartitionError(format!("dirichlet alpha {alpha} is invalid: {e}")))?;
        let by_class = indices_by_class(labels, num_classes);
        let fair_share = labels.len() as f64 / num_clients as f64;
        let mut smallest = 0;
        for _ in 0..DIRICHLET_MAX_ATTEMPTS {
            let mut clients = vec![Vec::new(); num_clients];
            for class_indices in by_class.iter().filter(|c| !c.is_empty()) {
                let mut shuffled = class_indices.clone();
                shuffled.shuffle(rng);
                let mut shares: Vec<f64> = clients
                    .iter()
                    .map(|owned: &Vec<usize>| {
                        let draw = gamma.sample(rng);
                        if (owned.len() as f64) < fair_share {
                            draw
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let total: f64 = shares.iter().sum();
                if total <= 0.0 || !total.is_finite() {
                    // Every eligible share underflowed (tiny alpha): hand the class to one
                    // eligible client, which is what Dir(alpha) tends to as alpha goes to 0.
                    shares.iter_mut().for_each(|s| *s = 0.0);
                    let eligible: Vec<usize> = (0..num_clients)
                        .filter(|&c| (clients[c].len() as f64) < fair_share)
                        .collect();
                    let chosen = eligible[rng.random_range(0..eligible.len())];
                    shares[chosen] = 1.0;
                }
                let total: f64 = shares.iter().sum();
                let last = num_clients - 1;
                let (mut start, mut cumulative) = (0, 0.0);
                for (cid, (client, share)) in clients.iter_mut().zip(&shares).enumerate() {
                    cumulative += share / total;
                    // The last cut is the class's end, so rounding never drops a sample.
                    let end = if cid == last {
                        shuffled.len()
                    } else {
                        ((cumulative * shuffled.len() as f64) as usize).clamp(start, shuffled.len())
                    };
                    client.extend_from_slice(&shuffled[start..end]);
                    start = end;
                }
            }
            smallest = clients.iter().map(Vec::len).min().unwrap_or(0);
            if smallest >= min_size {
                return Ok(Self { clients });
            }
        }
        Err(PartitionError(format!(
            "dirichlet partition with alpha {alpha} left a client with {smallest} samples \
             after {DIRICHLET_MAX_ATTEMPTS} draws, fewer than min_size {min_size}; \
             lower partition.min_size or raise partition.alpha"
        )))
    }

    /// The FedAvg paper's pathological non-IID split (McMahan et al., 2017): sort samples by
    /// label, cut them into `num_shards` equal shards, and give each client
    /// `num_shards / num_clients` shards chosen at random.
    pub fn shards(
        labels: &[u8],
        num_clients: usize,
        num_shards: usize,
        rng: &mut ChaCha12Rng,
    ) -> Result<Self, PartitionError> {
        if num_shards > labels.len() {
            return Err(PartitionError(format!(
                "partition.num_shards {num_shards} exceeds the {} training samples",
                labels.len()
            )));
        }
        let mut sorted: Vec<usize> = (0..labels.len()).collect();
        sorted.sort_by_key(|&i| (labels[i], i));
        let shards: Vec<&[usize]> = split_evenly(&sorted, num_shards).collect();
        let mut order: Vec<usize> = (0..num_shards).collect();
        order.shuffle(rng);
        let per_client = num_shards / num_clients;
        let clients = order
            .chunks(per_client)
            .map(|ids| {
                ids.iter()
                    .flat_map(|&s| shards[s].iter().copied())
                    .collect()
            })
            .collect();
        Ok(Self { clients })
    }

    /// Label-quantity skew, NIID-Bench's `#C=k` (Li et al., 2022, "Federated Learning on
    /// Non-IID Data Silos"): each client holds `per_client` distinct labels, client `i`'s first
    /// label `i mod C` (so every label has a holder when there are at least `C` clients) and
    /// the others drawn at random; each label's shuffled samples are cut into equal parts among
    /// its holders. Samples of a label no client holds are left out.
    pub fn label_quantity(
        labels: &[u8],
        num_classes: usize,
        num_clients: usize,
        per_client: usize,
        rng: &mut ChaCha12Rng,
    ) -> Result<Self, PartitionError> {
        let by_class = indices_by_class(labels, num_classes);
        let present: Vec<usize> = (0..num_classes)
            .filter(|&c| !by_class[c].is_empty())
            .collect();
        if per_client == 0 || per_client > present.len() {
            return Err(PartitionError(format!(
                "partition.labels_per_client is {per_client}; the training set has {} labels, so it must be between 1 and {}",
                present.len(),
                present.len()
            )));
        }
        let mut holders = vec![Vec::new(); num_classes];
        for client in 0..num_clients {
            let first = present[client % present.len()];
            let mut others: Vec<usize> = present.iter().copied().filter(|&c| c != first).collect();
            others.shuffle(rng);
            for class in std::iter::once(first).chain(others.into_iter().take(per_client - 1)) {
                holders[class].push(client);
            }
        }
        let mut clients = vec![Vec::new(); num_clients];
        for (class, owners) in holders.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
            let mut shuffled = by_class[class].clone();
            shuffled.shuffle(rng);
            for (&client, part) in owners.iter().zip(split_evenly(&shuffled, owners.len())) {
                clients[client].extend_from_slice(part);
            }
        }
        if let Some(empty) = clients.iter().position(Vec::is_empty) {
            return Err(PartitionError(format!(
                "client {empty} got no samples: its labels have fewer samples than holders; use fewer clients or more labels per client"
            )));
        }
        Ok(Self { clients })
    }

    /// Quantity skew: client sizes in proportion to draws from LogNormal(0, `sigma`) (as
    /// FedLab's unbalanced splits), each at least one sample, filled from one shuffle of the
    /// training set; labels stay IID.
    pub fn quantity(
        num_samples: usize,
        num_clients: usize,
        sigma: f64,
        rng: &mut ChaCha12Rng,
    ) -> Result<Self, PartitionError> {
        let law = rand_distr::LogNormal::new(0.0, sigma)
            .map_err(|e| PartitionError(format!("partition.sigma {sigma} is invalid: {e}")))?;
        let weights: Vec<f64> = (0..num_clients).map(|_| law.sample(rng)).collect();
        let total: f64 = weights.iter().sum();
        // One sample each first, the rest in proportion to the weights; rounding down leaves
        // a few samples, which go to the largest clients.
        let spare = num_samples - num_clients;
        let mut sizes: Vec<usize> = weights
            .iter()
            .map(|w| 1 + (w / total * spare as f64) as usize)
            .collect();
        let mut by_weight: Vec<usize> = (0..num_clients).collect();
        by_weight.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]));
        let left = num_samples - sizes.iter().sum::<usize>();
        for &client in by_weight.iter().cycle().take(left) {
            sizes[client] += 1;
        }
        let mut indices: Vec<usize> = (0..num_samples).collect();
        indices.shuffle(rng);
        let mut start = 0;
        let clients = sizes
            .iter()
            .map(|&size| {
                start += size;
                indices[start - size..start].to_vec()
            })
            .collect();
        Ok(Self { clients })
    }

    /// The partition file's text: `{"clients": [[indices of client 0], …]}` on one line
    /// (pretty-printing would put each of the 60,000 indices on a line of its own).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a partition always serialises")
    }

    /// Reads a partition file and checks it against the experiment: one entry per client,
    /// no client without samples, every index inside the training set and owned once.
    pub fn load(path: &Path, num_clients: usize, num_samples: usize) -> Result<Self, DataError> {
        let text = fs::read_to_string(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text, num_clients, num_samples).map_err(|reason| DataError::Corrupt {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Parses a partition file's text and checks it as [`Partition::load`] does; the error
    /// says what is wrong.
    pub fn from_json(text: &str, num_clients: usize, num_samples: usize) -> Result<Self, String> {
        let partition: Self = serde_json::from_str(text)
            .map_err(|e| format!("is not a partition file ({{\"clients\": [[…], …]}}): {e}"))?;
        if partition.num_clients() != num_clients {
            return Err(format!(
                "lists {} clients, but federation.num_clients is {num_clients}",
                partition.num_clients()
            ));
        }
        let mut owner: Vec<Option<usize>> = vec![None; num_samples];
        for (cid, indices) in partition.clients.iter().enumerate() {
            if indices.is_empty() {
                return Err(format!("gives client {cid} no samples"));
            }
            for &index in indices {
                let slot = owner.get_mut(index).ok_or_else(|| {
                    format!(
                        "gives client {cid} sample {index}, but the training set has {num_samples}"
                    )
                })?;
                if let Some(first) = slot.replace(cid) {
                    return Err(format!(
                        "gives sample {index} to client {first} and again to client {cid}; \
                         a sample belongs to one client"
                    ));
                }
            }
        }
        Ok(partition)
    }
}

/// How many of a client's `n` training samples [`Partition::hold_out`] holds out:
/// `round(fraction * n)`, at least one and one fewer than `n`; none of one sample or with
/// `fraction` 0.
pub fn held_out_size(n: usize, fraction: f64) -> usize {
    if n < 2 || fraction <= 0.0 {
        return 0;
    }
    ((fraction * n as f64).round() as usize).clamp(1, n - 1)
}

/// Which of client `client`'s `n` training samples (by position) are held out, drawn from its
/// own stream of `seed`.
pub fn held_out_positions(n: usize, fraction: f64, seed: u64, client: usize) -> Vec<bool> {
    let mut held = vec![false; n];
    let count = held_out_size(n, fraction);
    if count > 0 {
        let mut rng = stream(seed, CLIENT_TEST, 0, client);
        for i in rand::seq::index::sample(&mut rng, n, count) {
            held[i] = true;
        }
    }
    held
}

/// Cuts `items` into `parts` contiguous slices whose lengths differ by at most one.
fn split_evenly<T>(items: &[T], parts: usize) -> impl Iterator<Item = &[T]> {
    let (base, extra) = (items.len() / parts, items.len() % parts);
    (0..parts).map(move |p| {
        let start = p * base + p.min(extra);
        let len = base + usize::from(p < extra);
        &items[start..start + len]
    })
}

fn indices_by_class(labels: &[u8], num_classes: usize) -> Vec<Vec<usize>> {
    let mut by_class = vec![Vec::new(); num_classes];
    for (i, &label) in labels.iter().enumerate() {
        by_class[usize::from(label)].push(i);
    }
    by_class
}

/// What a partition gives each client, and the spread of it: what `fedsim partition` prints
/// and a run writes to `partition_stats.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionStats {
    /// Number of clients.
    pub clients: usize,
    /// Samples of the smallest client.
    pub samples_min: usize,
    /// The median client's samples (the lower middle one for an even count).
    pub samples_median: usize,
    /// Samples of the largest client.
    pub samples_max: usize,
    /// The mean over clients of the entropy, in bits, of each client's label distribution:
    /// `log2(C)` for clients holding every class equally, 0 for clients of one class. Absent
    /// where clients are made on demand, their labels unknown until each is made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_label_entropy_bits: Option<f64>,
    /// `label_counts[client][class]`; empty where clients are made on demand.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub label_counts: Vec<Vec<usize>>,
}

impl PartitionStats {
    /// The spread of the clients' sample counts, their labels unknown.
    pub fn of_sizes(mut sizes: Vec<usize>) -> Self {
        sizes.sort_unstable();
        let clients = sizes.len();
        Self {
            clients,
            samples_min: sizes.first().copied().unwrap_or(0),
            samples_median: sizes
                .get(clients.saturating_sub(1) / 2)
                .copied()
                .unwrap_or(0),
            samples_max: sizes.last().copied().unwrap_or(0),
            mean_label_entropy_bits: None,
            label_counts: Vec::new(),
        }
    }

    /// The statistics of per-client label counts.
    pub fn of(label_counts: Vec<Vec<usize>>) -> Self {
        let sizes: Vec<usize> = label_counts.iter().map(|c| c.iter().sum()).collect();
        // Folded from +0.0: a client of one class has the single term -1 * log2(1) = -0.0,
        // and a sum that starts from -0.0, as `Iterator::sum` does, would keep that sign.
        let entropy = |counts: &Vec<usize>| {
            let total: usize = counts.iter().sum();
            counts
                .iter()
                .filter(|&&n| n > 0)
                .map(|&n| {
                    let p = n as f64 / total as f64;
                    -p * p.log2()
                })
                .fold(0.0, |sum, term| sum + term)
        };
        let clients = label_counts.len();
        Self {
            mean_label_entropy_bits: Some(
                label_counts
                    .iter()
                    .map(entropy)
                    .fold(0.0, |sum, bits| sum + bits)
                    / clients.max(1) as f64,
            ),
            label_counts,
            ..Self::of_sizes(sizes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rng() -> ChaCha12Rng {
        stream(1, Purpose::PARTITION, 0, 0)
    }

    /// 1,000 synthetic labels, 100 of each of 10 classes.
    fn labels() -> Vec<u8> {
        (0..1000).map(|i| (i % 10) as u8).collect()
    }

    fn assert_covers_each_index_once(partition: &Partition, n: usize) {
        let mut all: Vec<usize> = partition.clients.concat();
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn holding_out_splits_each_client_and_keeps_every_sample() {
        let partition = Partition {
            clients: vec![(0..10).collect(), vec![10], (11..14).collect()],
        };
        let (train, held) = partition.hold_out(0.2, 7);
        // round(0.2 * 10) = 2; a lone sample stays for training; at least one of three.
        let held_sizes: Vec<usize> = held.iter().map(Vec::len).collect();
        assert_eq!(held_sizes, [2, 0, 1]);
        for ((all, train), held) in partition.clients.iter().zip(&train.clients).zip(&held) {
            let mut joined: Vec<usize> = train.iter().chain(held).copied().collect();
            joined.sort_unstable();
            assert_eq!(&joined, all);
        }
        assert_eq!(partition.hold_out(0.2, 7), (train.clone(), held));
        assert_ne!(partition.hold_out(0.2, 8).0, train);
        assert_eq!(partition.hold_out(0.0, 7).0, partition);
    }

    #[test]
    fn iid_is_balanced_and_covers_every_sample() {
        let partition = Partition::iid(1003, 10, &mut rng());
        assert_covers_each_index_once(&partition, 1003);
        let sizes: Vec<usize> = partition.clients.iter().map(Vec::len).collect();
        assert_eq!(sizes, [101, 101, 101, 100, 100, 100, 100, 100, 100, 100]);
    }

    #[test]
    fn shards_give_each_client_few_labels() {
        let labels = labels();
        let partition = Partition::shards(&labels, 10, 20, &mut rng()).unwrap();
        assert_covers_each_index_once(&partition, labels.len());
        for client in &partition.clients {
            assert_eq!(client.len(), 100);
            let mut classes: Vec<u8> = client.iter().map(|&i| labels[i]).collect();
            classes.dedup();
            assert!(classes.len() <= 2, "a client holds {classes:?}");
        }
    }

    #[test]
    fn dirichlet_meets_min_size_and_covers_every_sample() {
        let labels = labels();
        let partition = Partition::dirichlet(&labels, 10, 10, 0.5, 20, &mut rng()).unwrap();
        assert_covers_each_index_once(&partition, labels.len());
        assert!(partition.clients.iter().all(|c| c.len() >= 20));
    }

    #[test]
    fn dirichlet_with_small_alpha_skews_labels() {
        let labels = labels();
        let partition = Partition::dirichlet(&labels, 10, 10, 0.05, 1, &mut rng()).unwrap();
        let dominant_share = |client: &Vec<usize>| {
            let mut counts = [0usize; 10];
            client
                .iter()
                .for_each(|&i| counts[usize::from(labels[i])] += 1);
            *counts.iter().max().unwrap() as f64 / client.len() as f64
        };
        let mean = partition.clients.iter().map(dominant_share).sum::<f64>() / 10.0;
        assert!(mean > 0.5, "mean dominant-label share {mean}");
    }

    #[test]
    fn dirichlet_reports_an_unreachable_min_size_instead_of_looping() {
        let err = Partition::dirichlet(&labels(), 10, 10, 0.05, 100, &mut rng()).unwrap_err();
        assert!(err.0.contains("min_size 100"), "{err}");
    }

    #[test]
    fn load_rejects_out_of_range_indices() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        fs::write(&path, r#"{"clients": [[0, 1], [2, 99]]}"#).unwrap();
        let err = Partition::load(&path, 2, 10).unwrap_err().to_string();
        assert!(err.contains("sample 99") && err.contains("has 10"), "{err}");
    }

    #[test]
    fn written_then_loaded_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let partition = Partition::iid(50, 5, &mut rng());
        fs::write(&path, partition.to_json()).unwrap();
        assert_eq!(Partition::load(&path, 5, 50).unwrap(), partition);
    }

    /// Whether each sample index appears at most once in `partition`, all below `n`.
    fn each_index_at_most_once(partition: &Partition, n: usize) -> bool {
        let mut seen = vec![false; n];
        partition
            .clients
            .iter()
            .flatten()
            .all(|&i| i < n && !std::mem::replace(&mut seen[i], true))
    }

    /// Labels of `n` samples over `classes` classes, unevenly spread.
    fn any_labels() -> impl Strategy<Value = (Vec<u8>, usize)> {
        (2usize..12).prop_flat_map(|classes| {
            let labels = proptest::collection::vec(0..classes as u8, 1..600);
            (labels, Just(classes))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn iid_gives_every_sample_to_one_client_and_no_client_nothing(
            n in 1usize..3000, clients in 1usize..200, seed in any::<u64>()
        ) {
            prop_assume!(clients <= n);
            let draw = || Partition::iid(n, clients, &mut stream(seed, Purpose::PARTITION, 0, 0));
            let partition = draw();
            prop_assert_eq!(partition.num_clients(), clients);
            prop_assert!(partition.clients.iter().all(|c| !c.is_empty()));
            assert_covers_each_index_once(&partition, n);
            prop_assert_eq!(draw(), partition);
        }

        #[test]
        fn dirichlet_gives_each_sample_to_at_most_one_client_and_keeps_min_size(
            (labels, classes) in any_labels(),
            clients in 1usize..20,
            alpha in 0.05f64..50.0,
            min_size in 1usize..10,
            seed in any::<u64>(),
        ) {
            let draw = || Partition::dirichlet(
                &labels, classes, clients, alpha, min_size,
                &mut stream(seed, Purpose::PARTITION, 0, 0),
            );
            if let Ok(partition) = draw() {
                prop_assert_eq!(partition.num_clients(), clients);
                prop_assert!(each_index_at_most_once(&partition, labels.len()));
                prop_assert!(partition.clients.iter().all(|c| c.len() >= min_size));
                prop_assert_eq!(draw().unwrap(), partition);
            }
        }

        #[test]
        fn shards_give_each_sample_to_at_most_one_client_and_no_client_nothing(
            (labels, _) in any_labels(),
            clients in 1usize..30,
            per_client in 1usize..4,
            seed in any::<u64>(),
        ) {
            let num_shards = clients * per_client;
            let draw = || Partition::shards(
                &labels, clients, num_shards, &mut stream(seed, Purpose::PARTITION, 0, 0),
            );
            match draw() {
                Ok(partition) => {
                    prop_assert_eq!(partition.num_clients(), clients);
                    prop_assert!(each_index_at_most_once(&partition, labels.len()));
                    prop_assert!(partition.clients.iter().all(|c| !c.is_empty()));
                    prop_assert_eq!(draw().unwrap(), partition);
                }
                Err(_) => prop_assert!(num_shards > labels.len()),
            }
        }
    }

    #[test]
    fn load_rejects_a_sample_given_to_two_clients() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(&path, r#"{"clients": [[0, 1], [2, 1]]}"#).unwrap();
        let error = Partition::load(&path, 2, 3).unwrap_err().to_string();
        assert!(
            error.contains("gives sample 1 to client 0 and again to client 1"),
            "{error}"
        );
    }
}

#[cfg(test)]
mod skew_tests {
    use super::*;

    fn labels() -> Vec<u8> {
        (0..1000).map(|i| (i % 10) as u8).collect()
    }

    fn covered_once(partition: &Partition) -> usize {
        let mut all: Vec<usize> = partition.clients.iter().flatten().copied().collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a sample went to two clients");
        count
    }

    #[test]
    fn each_client_gets_exactly_k_labels_and_every_label_a_holder() {
        let labels = labels();
        let rng = &mut stream(1, Purpose::PARTITION, 0, 0);
        let partition = Partition::label_quantity(&labels, 10, 20, 2, rng).unwrap();
        for client in &partition.clients {
            let mut held: Vec<u8> = client.iter().map(|&i| labels[i]).collect();
            held.sort_unstable();
            held.dedup();
            assert_eq!(held.len(), 2, "{held:?}");
        }
        assert_eq!(covered_once(&partition), 1000);
        let error = Partition::label_quantity(&labels, 10, 20, 11, rng).unwrap_err();
        assert!(error.0.contains("between 1 and 10"), "{error}");
    }

    #[test]
    fn log_normal_sizes_differ_and_cover_the_set() {
        let rng = &mut stream(1, Purpose::PARTITION, 0, 0);
        let partition = Partition::quantity(1000, 20, 1.0, rng).unwrap();
        assert_eq!(covered_once(&partition), 1000);
        let sizes: Vec<usize> = partition.clients.iter().map(Vec::len).collect();
        assert!(sizes.iter().all(|&n| n >= 1));
        assert!(
            sizes.iter().max().unwrap() > &(3 * sizes.iter().min().unwrap()),
            "{sizes:?}"
        );
        let even = Partition::quantity(1000, 20, 0.0, rng).unwrap();
        assert!(even.clients.iter().all(|c| c.len() == 50));
    }

    #[test]
    fn statistics_give_sizes_and_label_entropy() {
        let stats = PartitionStats::of(vec![vec![5, 5], vec![10, 0], vec![3, 0]]);
        assert_eq!(
            (
                stats.clients,
                stats.samples_min,
                stats.samples_median,
                stats.samples_max
            ),
            (3, 3, 10, 10)
        );
        assert!((stats.mean_label_entropy_bits.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn clients_of_one_label_have_an_entropy_of_plus_zero() {
        let stats = PartitionStats::of(vec![vec![0, 7], vec![3, 0]]);
        assert_eq!(
            stats.mean_label_entropy_bits.unwrap().to_bits(),
            0.0_f64.to_bits()
        );
        let json = serde_json::to_value(&stats).unwrap();
        assert_eq!(json["mean_label_entropy_bits"].to_string(), "0.0");
    }
}
