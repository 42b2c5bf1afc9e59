//! `fedsim privacy`: the accountant's two questions from the command line.

use super::PrivacyArgs;
use crate::privacy::{
    Conversion, Sampling, Series, SubsampledGaussian, epsilon, noise_multiplier_for,
};

/// The answer to `args`' question, as one line.
pub(super) fn answer(args: &PrivacyArgs) -> String {
    let rate = args.sampling_rate;
    let sampling = match args.sampling.as_str() {
        "fixed" => Sampling::FixedSize { rate },
        _ => Sampling::Poisson { rate },
    };
    let conversion = match args.conversion.as_str() {
        "classic" => Conversion::Classic,
        _ => Conversion::Balle2020,
    };
    let series = match args.series.as_str() {
        "signed" => Series::Signed,
        _ => Series::Absolute,
    };
    let over = format!(
        "over {} steps at sampling rate {rate} ({}), delta {}",
        args.steps, args.sampling, args.delta
    );
    match (args.noise_multiplier, args.target_epsilon) {
        (Some(noise_multiplier), _) => {
            let step = SubsampledGaussian {
                noise_multiplier,
                sampling,
                series,
            };
            let spent = epsilon(&step, args.steps, args.delta, conversion);
            format!(
                "epsilon {:.6} (RDP order {}): noise multiplier {noise_multiplier} {over}",
                spent.epsilon, spent.order
            )
        }
        (None, target) => {
            let target = target.expect("clap requires one of the two");
            match noise_multiplier_for(target, args.delta, sampling, args.steps, series, conversion)
            {
                Some(noise) => {
                    let noise = printable(noise, |z| {
                        let step = SubsampledGaussian {
                            noise_multiplier: z,
                            sampling,
                            series,
                        };
                        epsilon(&step, args.steps, args.delta, conversion).epsilon <= target
                    });
                    format!("noise multiplier {noise:.6}: spends at most epsilon {target} {over}")
                }
                None => {
                    format!("no noise multiplier up to 1e6 spends at most epsilon {target} {over}")
                }
            }
        }
    }
}

/// `noise` rounded up to the six decimals printed, and raised by a millionth until it still
/// `spends_within` the target: the series' stopping rule leaves epsilon a little uneven
/// in the noise at that scale, so a figure copied into an experiment file must be checked.
fn printable(noise: f64, spends_within: impl Fn(f64) -> bool) -> f64 {
    let mut printed = (noise * 1e6).ceil() / 1e6;
    while !spends_within(printed) {
        printed += 1e-6;
    }
    printed
}
