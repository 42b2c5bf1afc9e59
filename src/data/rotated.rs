//! Rotated MNIST, the clustered benchmark of Ghosh, Chung, Yin and Ramchandran (2020), "An
//! Efficient Framework for Clustered Federated Learning" (IFCA): the clients fall into groups
//! whose images are turned 0, 90, 180 and 270 degrees, so that one model cannot fit every
//! group as well as one model per group does.
//!
//! The training and the test images are each shuffled from the split seed and dealt out in
//! near-equal contiguous shares, one per client (`federation.num_clients` of them, the data
//! set's natural clients); client `c` of `n` is in group `c * groups / n` (contiguous blocks,
//! so with 100 clients and four groups, clients 0 to 24 see upright digits), and every image
//! it holds, training or test, is turned by its group's quarter turns. The pooled test set is
//! the clients' test images together, a quarter in each turn where the clients divide evenly.

use std::path::Path;

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::mnist::MNIST;
use super::{
    DataContext, DataError, DataSource, Dataset, ImageFiles, NaturalClients, SampleKind, TrainTest,
    check_dir, resolve_dir,
};
use crate::config::check::Problems;
use crate::seed::{Purpose, stream};

/// The shuffles that deal the images out to the clients (the training split's at client 0,
/// the test split's at client 1).
const DEAL: Purpose = Purpose::new("rotated-deal");

/// The most groups: one per quarter turn.
const MAX_GROUPS: usize = 4;

/// Rotated MNIST as an experiment file names it; its clients are natural clients
/// (`"partition": {"scheme": "natural"}`).
#[derive(Debug, Clone, Copy)]
pub struct RotatedMnist;

/// Rotated MNIST's parameters: MNIST's, and the number of groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotatedParams {
    /// Groups of clients, 1 to 4: group `g` turns its images `g` quarter turns. Default 4.
    #[serde(default = "all_turns")]
    pub groups: usize,
    /// Where MNIST's files are, and how pixels become features.
    #[serde(flatten)]
    pub images: ImageFiles,
}

fn all_turns() -> usize {
    MAX_GROUPS
}

impl Default for RotatedParams {
    fn default() -> Self {
        Self {
            groups: MAX_GROUPS,
            images: ImageFiles::default(),
        }
    }
}

impl RotatedParams {
    /// The group of `client` among `num_clients`: contiguous blocks of near-equal size.
    pub fn group_of(&self, client: usize, num_clients: usize) -> usize {
        client * self.groups / num_clients
    }
}

impl DataSource for RotatedMnist {
    type Params = RotatedParams;

    fn name(&self) -> &'static str {
        "rotated-mnist"
    }

    fn about(&self) -> &'static str {
        "MNIST dealt to clients in groups whose images turn 0, 90, 180 and 270 degrees (Ghosh et al. 2020, IFCA); natural clients, built in"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "groups",
                "groups of clients, 1 to 4 (default 4); client c of n is in group c * groups / n, turned that many quarter turns",
            ),
            (
                "dir",
                "folder holding MNIST's files; default: the copy built into fedsim",
            ),
            (
                "normalize",
                "\"unit\" scales pixels to [0, 1]; \"standard\" then gives zero mean and unit variance",
            ),
            (
                "augment",
                "random crops (padding 4) and horizontal flips in local training",
            ),
        ]
    }

    fn sample_kind(&self, _: &RotatedParams) -> Option<SampleKind> {
        Some(SampleKind::Image([1, 28, 28]))
    }

    fn has_natural_clients(&self, _: &RotatedParams) -> bool {
        true
    }

    fn resolve_paths(&self, params: &mut RotatedParams, folder: &Path) {
        resolve_dir(&mut params.images.dir, folder);
    }

    fn check(&self, params: &RotatedParams, context: &DataContext, problems: &mut Problems) {
        check_dir(params.images.dir.as_deref(), problems);
        problems.require((1..=MAX_GROUPS).contains(&params.groups), "groups", || {
            format!("is {}; expected 1 to {MAX_GROUPS}", params.groups)
        });
        if context.num_clients < params.groups {
            problems.add_elsewhere(
                "federation.num_clients",
                format!(
                    "is {}; rotated-mnist needs at least one client per group ({})",
                    context.num_clients, params.groups
                ),
            );
        }
    }

    fn load(&self, params: &RotatedParams, context: &DataContext) -> Result<TrainTest, DataError> {
        let mnist = MNIST.load(params.images.dir.as_deref(), params.images.normalize)?;
        let clients = context.num_clients;
        let train = deal(mnist.train.len(), clients, context.split_seed, 0);
        let test = deal(mnist.test.len(), clients, context.split_seed, 1);
        let turns = |shares: &[Vec<usize>], data: &Dataset| {
            let mut turns = vec![0; data.len()];
            for (client, share) in shares.iter().enumerate() {
                for &i in share {
                    turns[i] = params.group_of(client, clients);
                }
            }
            turns
        };
        let (train_turns, test_turns) = (turns(&train, &mnist.train), turns(&test, &mnist.test));
        let (mut train_set, mut test_set) = (mnist.train, mnist.test);
        train_set.rotate_images(|i| train_turns[i]);
        test_set.rotate_images(|i| test_turns[i]);
        let data = TrainTest {
            train: train_set,
            test: test_set,
            natural: Some(NaturalClients { train, test }),
            files: mnist.files,
        };
        Ok(params.images.augmented(data))
    }

    fn describe(&self, params: &RotatedParams) -> String {
        format!("rotated MNIST in {} groups", params.groups)
    }
}

/// `len` sample indices shuffled from `seed` and dealt into `clients` near-equal contiguous
/// shares (the first `len % clients` one larger), each sorted.
fn deal(len: usize, clients: usize, seed: u64, split: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..len).collect();
    order.shuffle(&mut stream(seed, DEAL, 0, split));
    let (base, extra) = (len / clients, len % clients);
    let mut rest = order.as_slice();
    (0..clients)
        .map(|client| {
            let (share, after) = rest.split_at(base + usize::from(client < extra));
            rest = after;
            let mut share = share.to_vec();
            share.sort_unstable();
            share
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{DataShape, SampleShape};

    #[test]
    fn a_quarter_turn_moves_the_top_right_corner_to_the_top_left_and_four_turn_back() {
        // A 3x3 image: 0 1 2 / 3 4 5 / 6 7 8.
        let shape = DataShape {
            sample: SampleShape::Image([1, 3, 3]),
            num_classes: 1,
        };
        let image: Vec<u8> = (0..9).collect();
        let mut data = Dataset::from_bytes(image.clone(), f32::from, vec![0], shape);
        data.rotate_images(|_| 1);
        let (mut features, mut labels) = (Vec::new(), Vec::new());
        data.gather(&[0], &mut features, &mut labels);
        assert_eq!(features, [2., 5., 8., 1., 4., 7., 0., 3., 6.]);
        data.rotate_images(|_| 3);
        data.gather(&[0], &mut features, &mut labels);
        let upright: Vec<f32> = image.iter().map(|&v| f32::from(v)).collect();
        assert_eq!(features, upright);
    }

    #[test]
    fn every_image_goes_to_one_client_and_turns_with_its_group() {
        let context = DataContext {
            num_clients: 10,
            seed: 1,
            split_seed: 1,
        };
        let params = RotatedParams::default();
        let rotated = RotatedMnist.load(&params, &context).unwrap();
        let upright = MNIST.load(None, Default::default()).unwrap();
        let natural = rotated.natural.as_ref().unwrap();
        for (shares, len) in [(&natural.train, 60_000), (&natural.test, 10_000)] {
            let mut all: Vec<usize> = shares.iter().flatten().copied().collect();
            all.sort_unstable();
            assert_eq!(all, (0..len).collect::<Vec<_>>());
            assert!(shares.iter().all(|s| s.len() == len / 10));
        }
        // Client 9 is in group 3: its images are MNIST's turned three times.
        let first = natural.test[9][0];
        let mut expected = upright.test.clone();
        expected.rotate_images(|i| if i == first { 3 } else { 0 });
        let (mut turned, mut wanted, mut labels) = (Vec::new(), Vec::new(), Vec::new());
        rotated.test.gather(&[first], &mut turned, &mut labels);
        expected.gather(&[first], &mut wanted, &mut labels);
        assert_eq!(turned, wanted);
        upright.test.gather(&[first], &mut wanted, &mut labels);
        assert_ne!(turned, wanted);
        let groups = [0, 2, 3, 9].map(|client| params.group_of(client, 10));
        assert_eq!(groups, [0, 0, 1, 3]);
    }

    #[test]
    fn the_groups_and_the_number_of_clients_are_checked() {
        let context = DataContext {
            num_clients: 3,
            seed: 1,
            split_seed: 1,
        };
        let mut problems = Problems::new();
        let params = RotatedParams {
            groups: 5,
            ..RotatedParams::default()
        };
        RotatedMnist.check(&params, &context, &mut problems);
        let found = problems.into_vec();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].1.contains("expected 1 to 4"), "{found:?}");
        assert!(found[1].0.contains("num_clients"), "{found:?}");
    }
}
