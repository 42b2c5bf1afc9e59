//! Server-side clipping and noise as a plug-in: DP-FedAvg's server (McMahan, Ramage, Talwar
//! and Zhang 2018, "Learning Differentially Private Recurrent Language Models", ICLR). Each
//! client's change `Δ_i = y_i - x` is clipped to norm at most `S`, the clipped changes are
//! averaged with equal weights, and Gaussian noise of deviation `σ S / m` (m clients this
//! round) is added to the mean:
//!
//! ```text
//! x ← x + (1/m) Σ_i Δ_i min(1, S / |Δ_i|) + N(0, (σ S / m)² I)
//! ```
//!
//! The noise is drawn from a stream of the experiment seed and the round (`seed::stream` with a
//! purpose of this plug-in's own), so a rerun, a run on other workers and a resumed run draw
//! the same noise. This is the mechanism only: the privacy it gives depends on the sampling
//! and on an accountant, which this example leaves out.

use fedsim::plugin::vector::{add_scaled, difference, norm};
use fedsim::plugin::{
    Aggregate, Algorithm, Collected, EdgeAggregation, Problems, Purpose, Round, Setting, Strategy,
    stream,
};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// The stream the server's noise comes from, per round.
const NOISE: Purpose = Purpose::new("example-clip-noise");

/// The parameters: `{"name": "clip_noise", "clip": 1.0, "noise": 0.1}`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// The largest norm `S` a client's change keeps.
    pub clip: f64,
    /// The noise multiplier `σ`.
    pub noise: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            clip: 1.0,
            noise: 0.1,
        }
    }
}

/// Clipped, noised averaging at the server; FedAvg's clients.
pub struct ClipNoise;

impl Algorithm for ClipNoise {
    type Params = Params;

    fn name(&self) -> &'static str {
        "clip_noise"
    }

    fn paper(&self) -> &'static str {
        "McMahan et al. 2018, Learning Differentially Private Recurrent Language Models (the server's clipping and noise)"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("clip", "largest norm S of a client's change (> 0)"),
            (
                "noise",
                "noise multiplier σ (≥ 0): the deviation is σ S / m",
            ),
        ]
    }

    fn check(&self, params: &Params, _: &Setting<'_>, problems: &mut Problems) {
        problems.positive("clip", params.clip);
        problems.non_negative("noise", params.noise);
    }

    /// Each client's change is clipped on its own.
    fn edge_rule(&self, _params: &Params) -> EdgeAggregation {
        EdgeAggregation::Unsupported("each client's change is clipped on its own: use relay")
    }

    fn server(&self, params: &Params, setting: &Setting<'_>, _: usize) -> Box<dyn Strategy> {
        Box::new(ClipNoiseServer {
            params: *params,
            seed: setting.seed,
        })
    }
}

/// The server half.
struct ClipNoiseServer {
    params: Params,
    seed: u64,
}

impl Strategy for ClipNoiseServer {
    fn aggregate(&mut self, round: &Round<'_>, x: &[f32], input: Collected<'_>) -> Aggregate {
        let updates = input.updates();
        let m = updates.len() as f64;
        let mut next = x.to_vec();
        let mut clipped = 0;
        for update in updates {
            let change = difference(&update.params, x);
            let length = norm(&change);
            let scale = (self.params.clip / length.max(f64::MIN_POSITIVE)).min(1.0);
            clipped += usize::from(scale < 1.0);
            add_scaled(&mut next, &change, (scale / m) as f32);
        }
        let deviation = self.params.noise * self.params.clip / m;
        let mut rng = stream(self.seed, NOISE, round.number, 0);
        for value in &mut next {
            let draw: f64 = StandardNormal.sample(&mut rng);
            *value += (deviation * draw) as f32;
        }
        Aggregate::model(next).with("clipped", clipped as f64)
    }
}
