//! Running the layer's loops on the widest vector registers the CPU has. The loops are written
//! once, as plain Rust over slices, and compiled here for AVX-512, for AVX2 with FMA, and for
//! the baseline; which runs is decided once the CPU has been asked. Every loop computes each
//! value by the same operations in the same order at every width (nothing is fused that the
//! source does not fuse, nothing is reordered), so the width changes no result.

/// Work to compile for several vector widths: `run` is inlined into each of
/// [`on_widest_vectors`]' variants, and compiled with its instruction set there (a closure
/// would not be inlined reliably).
pub(super) trait VectorWork {
    /// Does the work; to be marked `#[inline(always)]`.
    fn run(self);
}

/// The vector registers that fedsim's loops are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Width {
    /// The target's baseline (SSE2 on x86-64).
    Baseline,
    /// AVX2 with FMA: 8 lanes.
    Avx2,
    /// AVX-512F: 16 lanes.
    Avx512,
}

impl Width {
    /// The widest this CPU has (the standard library keeps what the CPU answered).
    #[inline(always)]
    pub(super) fn widest() -> Self {
        [Self::Avx512, Self::Avx2]
            .into_iter()
            .find(|width| width.on_this_cpu())
            .unwrap_or(Self::Baseline)
    }

    /// Every width this CPU has, the baseline first.
    #[cfg(test)]
    pub(super) fn available() -> Vec<Self> {
        [Self::Baseline, Self::Avx2, Self::Avx512]
            .into_iter()
            .filter(|width| width.on_this_cpu())
            .collect()
    }

    /// Whether this CPU has the width's instructions (AVX-512's count only in a build with
    /// the `x86-v4` feature).
    #[inline(always)]
    fn on_this_cpu(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Self::Baseline => true,
                Self::Avx2 => has!("avx2") && has!("fma"),
                Self::Avx512 => cfg!(feature = "x86-v4") && has!("avx512f"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Self::Baseline
        }
    }
}

/// Runs `work` compiled for the widest vector registers this CPU has (AVX-512 or AVX2 with FMA
/// on x86-64; the baseline's elsewhere).
#[inline(always)]
pub(super) fn on_widest_vectors(work: impl VectorWork) {
    on_vectors(Width::widest(), work);
}

/// Runs `work` compiled for `width`, which [`Width`] found on this CPU.
#[inline(always)]
fn on_vectors(width: Width, work: impl VectorWork) {
    match width {
        Width::Baseline => work.run(),
        // SAFETY (both): `Width` gives these widths only where the CPU has them.
        #[cfg(target_arch = "x86_64")]
        Width::Avx2 => unsafe { with_avx2(work) },
        #[cfg(target_arch = "x86_64")]
        Width::Avx512 => unsafe { with_avx512(work) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("no wider registers off x86-64"),
    }
}

/// `work`, compiled with AVX-512F (and the FMA it implies).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn with_avx512(work: impl VectorWork) {
    work.run();
}

/// `work`, compiled with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn with_avx2(work: impl VectorWork) {
    work.run();
}

/// A way to run vector work, by name.
#[cfg(test)]
pub(super) type Named<W> = (Width, fn(W));

/// Every way [`on_widest_vectors`] may run vector work on this CPU, the baseline first.
#[cfg(test)]
pub(super) fn vector_widths<W: VectorWork>() -> Vec<Named<W>> {
    Width::available()
        .into_iter()
        .map(|width| {
            let run: fn(W) = match width {
                Width::Baseline => |work: W| on_vectors(Width::Baseline, work),
                Width::Avx2 => |work: W| on_vectors(Width::Avx2, work),
                Width::Avx512 => |work: W| on_vectors(Width::Avx512, work),
            };
            (width, run)
        })
        .collect()
}
