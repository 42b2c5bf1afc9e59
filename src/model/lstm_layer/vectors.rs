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

/// Runs `work` compiled for the widest vector registers this CPU has (AVX-512 or AVX2 with FMA
/// on x86-64; the baseline's elsewhere).
#[inline(always)]
pub(super) fn on_widest_vectors(work: impl VectorWork) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: this CPU has AVX-512F, just checked.
            return unsafe { with_avx512(work) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: this CPU has AVX2 and FMA, just checked.
            return unsafe { with_avx2(work) };
        }
    }
    work.run();
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
pub(super) type Width<W> = (&'static str, fn(W));

/// Every way [`on_widest_vectors`] may run vector work on this CPU, the baseline first.
#[cfg(test)]
pub(super) fn vector_widths<W: VectorWork>() -> Vec<Width<W>> {
    let mut widths: Vec<Width<W>> = vec![("baseline", |work: W| work.run())];
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("fma") {
            // SAFETY: this CPU has AVX2 and FMA, just checked.
            widths.push(("AVX2", |work: W| unsafe { with_avx2(work) }));
        }
        if has!("avx512f") {
            // SAFETY: this CPU has AVX-512F, just checked.
            widths.push(("AVX-512", |work: W| unsafe { with_avx512(work) }));
        }
    }
    widths
}
