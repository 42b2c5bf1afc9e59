//! The product each time step makes with a weight matrix that every step shares: a few rows
//! (one step of a batch of sequences) times the recurrent weights, forward, or the gates'
//! gradient times their transpose, backward.
//!
//! A general matrix product (`gemm`) first copies its right-hand matrix into panels laid out
//! for its kernels; over a step's ten rows that copy costs more than the arithmetic, and it is
//! made again at each of a sequence's steps, since the library cannot keep it. This product
//! reads the weights where they are: a block of rows times a panel of adjacent columns, the
//! block's results held in registers while the panel is read row by row down the depth (each
//! of its rows contiguous), the panel staying in cache for the next block of rows.
//!
//! Each value of the product is one chain of fused multiply-adds down the depth, in order,
//! starting from the value already there. Blocks, panels and vector lanes only choose which
//! chains run side by side, so a value's bits depend neither on the vector width (AVX-512 or
//! AVX2) nor on how many rows are multiplied together (a sequence gives the same result alone
//! as in a batch). Other CPUs (without AVX2 and FMA, or not x86-64) call `gemm` instead, whose
//! kernels for them are faster than a scalar loop, and whose bits differ, as they differ
//! between its own kernels.

use super::super::matrix::{Matrix, multiply};
use super::vectors::Width;

/// `product += lhs · rhs`, row-major: `product` `[rows, columns]`, `lhs` `[rows, depth]`,
/// `rhs` `[depth, columns]`, on the widest vector registers this CPU has.
pub(super) fn add_product(product: &mut [f32], lhs: &[f32], rhs: &[f32], depth: usize) {
    on_width(Width::widest(), Operands::new(product, lhs, rhs, depth));
}

/// The product on `width`, which [`Width`] found on this CPU.
fn on_width(width: Width, operands: Operands<'_>) {
    match width {
        Width::Baseline => with_gemm(operands),
        // SAFETY (both): `Width` gives these widths only where the CPU has them.
        #[cfg(target_arch = "x86_64")]
        Width::Avx2 => unsafe { on_avx2(operands) },
        #[cfg(target_arch = "x86_64")]
        Width::Avx512 => unsafe { on_avx512(operands) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("no wider registers off x86-64"),
    }
}

/// The product on 16-lane registers: blocks of 10 rows by two registers of columns, 20 of
/// AVX-512's 32 registers.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn on_avx512(operands: Operands<'_>) {
    // SAFETY: the CPU has AVX-512F, which `__m512`'s lanes use.
    unsafe { operands.panels::<std::arch::x86_64::__m512, 10, 2>() }
}

/// The product on 8-lane registers: blocks of 5 rows by two registers of columns, 10 of AVX2's
/// 16 registers.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn on_avx2(operands: Operands<'_>) {
    // SAFETY: the CPU has AVX2 and FMA, which `__m256`'s lanes use.
    unsafe { operands.panels::<std::arch::x86_64::__m256, 5, 2>() }
}

/// The product through `gemm`, on any CPU.
fn with_gemm(operands: Operands<'_>) {
    let (rows, depth, columns) = (operands.rows, operands.depth, operands.columns);
    let lhs = Matrix::row_major(operands.lhs, rows, depth);
    let rhs = Matrix::row_major(operands.rhs, depth, columns);
    multiply(operands.product, lhs, rhs, true);
}

/// The operands of [`add_product`], their lengths checked against each other.
struct Operands<'a> {
    product: &'a mut [f32],
    lhs: &'a [f32],
    rhs: &'a [f32],
    rows: usize,
    depth: usize,
    columns: usize,
}

impl<'a> Operands<'a> {
    fn new(product: &'a mut [f32], lhs: &'a [f32], rhs: &'a [f32], depth: usize) -> Self {
        assert!(depth > 0, "a product has a depth");
        let (rows, columns) = (lhs.len() / depth, rhs.len() / depth);
        assert_eq!(lhs.len(), rows * depth, "left-hand side length");
        assert_eq!(rhs.len(), depth * columns, "right-hand side length");
        assert_eq!(product.len(), rows * columns, "product length");
        Self {
            product,
            lhs,
            rhs,
            rows,
            depth,
            columns,
        }
    }

    /// The product in panels of `COLUMNS` registers of `V`'s lanes, then in panels one
    /// register wide, then column by column.
    ///
    /// # Safety
    /// The CPU has the instructions `V` uses.
    #[inline(always)]
    unsafe fn panels<V: Lanes, const ROWS: usize, const COLUMNS: usize>(mut self) {
        let wide = COLUMNS * V::LANES;
        let mut left = 0;
        // SAFETY (all three): the caller's.
        while left + wide <= self.columns {
            unsafe { self.panel::<V, ROWS, COLUMNS>(left) };
            left += wide;
        }
        while left + V::LANES <= self.columns {
            unsafe { self.panel::<V, ROWS, 1>(left) };
            left += V::LANES;
        }
        for column in left..self.columns {
            unsafe { self.panel::<f32, ROWS, 1>(column) };
        }
    }

    /// The panel of `COLUMNS` registers from column `left`, in blocks of `ROWS` rows, then
    /// row by row.
    ///
    /// # Safety
    /// The CPU has the instructions `V` uses.
    #[inline(always)]
    unsafe fn panel<V: Lanes, const ROWS: usize, const COLUMNS: usize>(&mut self, left: usize) {
        let blocks = self.rows / ROWS;
        // SAFETY (both): the caller's.
        for block in 0..blocks {
            unsafe { self.block::<V, ROWS, COLUMNS>(block * ROWS, left) };
        }
        for row in blocks * ROWS..self.rows {
            unsafe { self.block::<V, 1, COLUMNS>(row, left) };
        }
    }

    /// `ROWS` rows from `top` by `COLUMNS` registers from column `left`: each sum read into a
    /// register, its chain of multiply-adds run down the depth, and written back.
    ///
    /// # Safety
    /// The CPU has the instructions `V` uses.
    #[inline(always)]
    unsafe fn block<V: Lanes, const ROWS: usize, const COLUMNS: usize>(
        &mut self,
        top: usize,
        left: usize,
    ) {
        let (depth, columns, width) = (self.depth, self.columns, COLUMNS * V::LANES);
        let lhs: [&[f32]; ROWS] =
            std::array::from_fn(|row| &self.lhs[(top + row) * depth..][..depth]);
        let at = |row: usize| (top + row) * columns + left;
        // SAFETY (all of this block's): the caller's, and each register's lanes are sliced
        // out of the operands, bounds checked.
        // (Loops rather than `array::from_fn`, whose closures would not be compiled with
        // `V`'s instructions.)
        let zero = unsafe { V::splat(0.0) };
        let mut sums = [[zero; COLUMNS]; ROWS];
        for (row, sums) in sums.iter_mut().enumerate() {
            let product = &self.product[at(row)..][..width];
            for (sum, product) in sums.iter_mut().zip(product.chunks_exact(V::LANES)) {
                *sum = unsafe { V::load(product) };
            }
        }
        for k in 0..depth {
            let rhs = &self.rhs[k * columns + left..][..width];
            let mut weights = [zero; COLUMNS];
            for (weights, rhs) in weights.iter_mut().zip(rhs.chunks_exact(V::LANES)) {
                *weights = unsafe { V::load(rhs) };
            }
            for (sums, lhs) in sums.iter_mut().zip(lhs) {
                let factor = unsafe { V::splat(lhs[k]) };
                for (sum, weights) in sums.iter_mut().zip(weights) {
                    *sum = unsafe { factor.mul_add(weights, *sum) };
                }
            }
        }
        for (row, sums) in sums.into_iter().enumerate() {
            let product = &mut self.product[at(row)..][..width];
            for (sum, product) in sums.into_iter().zip(product.chunks_exact_mut(V::LANES)) {
                unsafe { sum.store(product) };
            }
        }
    }
}

/// A register of `LANES` `f32` lanes, each of whose operations is the same lane by lane at
/// every width: a multiply-add is fused (one rounding) in each.
///
/// # Safety
/// Its methods may be called only on a CPU with the instructions the register uses.
unsafe trait Lanes: Copy {
    /// Lanes per register.
    const LANES: usize;

    /// The register holding `from`'s first `LANES` values.
    ///
    /// # Safety
    /// `from` holds at least `LANES` values, and the CPU has the register's instructions.
    unsafe fn load(from: &[f32]) -> Self;

    /// Writes the register over `to`'s first `LANES` values.
    ///
    /// # Safety
    /// As [`Lanes::load`].
    unsafe fn store(self, to: &mut [f32]);

    /// `value` in every lane.
    ///
    /// # Safety
    /// The CPU has the register's instructions.
    unsafe fn splat(value: f32) -> Self;

    /// `self · factor + sum` in each lane, rounded once.
    ///
    /// # Safety
    /// The CPU has the register's instructions.
    unsafe fn mul_add(self, factor: Self, sum: Self) -> Self;
}

// SAFETY: plain `f32` arithmetic, on every CPU.
unsafe impl Lanes for f32 {
    const LANES: usize = 1;

    #[inline(always)]
    unsafe fn load(from: &[f32]) -> Self {
        from[0]
    }

    #[inline(always)]
    unsafe fn store(self, to: &mut [f32]) {
        to[0] = self;
    }

    #[inline(always)]
    unsafe fn splat(value: f32) -> Self {
        value
    }

    #[inline(always)]
    unsafe fn mul_add(self, factor: Self, sum: Self) -> Self {
        f32::mul_add(self, factor, sum)
    }
}

/// Registers of the x86-64 vector extensions.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m256, __m512, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_storeu_ps,
        _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps,
    };

    use super::Lanes;

    /// [`Lanes`] for a register type of `lanes` lanes, through its unaligned load and store,
    /// its broadcast and its fused multiply-add.
    macro_rules! lanes {
        ($register:ty, $lanes:literal, $load:ident, $store:ident, $splat:ident, $mul_add:ident) => {
            // SAFETY: the register's instructions, called only where the CPU has them (the
            // trait's contract); loads and stores stay within the slices (the methods').
            unsafe impl Lanes for $register {
                const LANES: usize = $lanes;

                #[inline(always)]
                unsafe fn load(from: &[f32]) -> Self {
                    debug_assert!(from.len() >= Self::LANES);
                    unsafe { $load(from.as_ptr()) }
                }

                #[inline(always)]
                unsafe fn store(self, to: &mut [f32]) {
                    debug_assert!(to.len() >= Self::LANES);
                    unsafe { $store(to.as_mut_ptr(), self) }
                }

                #[inline(always)]
                unsafe fn splat(value: f32) -> Self {
                    unsafe { $splat(value) }
                }

                #[inline(always)]
                unsafe fn mul_add(self, factor: Self, sum: Self) -> Self {
                    unsafe { $mul_add(self, factor, sum) }
                }
            }
        };
    }

    // AVX-512F's.
    lanes!(
        __m512,
        16,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_set1_ps,
        _mm512_fmadd_ps
    );
    // AVX's and FMA's, used where the CPU has AVX2 and FMA.
    lanes!(
        __m256,
        8,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_set1_ps,
        _mm256_fmadd_ps
    );
}

/// The widths on which this CPU runs kernels of fedsim's own (not `gemm`).
#[cfg(test)]
fn kernel_widths() -> Vec<Width> {
    let mut widths = Width::available();
    widths.retain(|&width| width != Width::Baseline);
    widths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::matrix::unstructured_values as values;

    /// `lhs · rhs` in `f64`, one value at a time.
    fn definition(lhs: &[f32], rhs: &[f32], depth: usize) -> Vec<f64> {
        let (rows, columns) = (lhs.len() / depth, rhs.len() / depth);
        let mut product = vec![0.0; rows * columns];
        for (row, out) in product.chunks_exact_mut(columns).enumerate() {
            for (column, out) in out.iter_mut().enumerate() {
                *out = (0..depth)
                    .map(|k| f64::from(lhs[row * depth + k]) * f64::from(rhs[k * columns + column]))
                    .sum();
            }
        }
        product
    }

    /// Shapes with whole blocks and panels, and with rows and columns left over at either
    /// block size.
    const SHAPES: [(usize, usize, usize); 4] =
        [(10, 128, 512), (13, 37, 70), (1, 5, 20), (23, 9, 33)];

    /// Each value's chain of fused multiply-adds down the depth from its start, one value at
    /// a time: the bits each of fedsim's kernels must give.
    fn chains(start: &[f32], lhs: &[f32], rhs: &[f32], depth: usize) -> Vec<f32> {
        let columns = rhs.len() / depth;
        let mut product = start.to_vec();
        for (row, out) in product.chunks_exact_mut(columns).enumerate() {
            for (column, out) in out.iter_mut().enumerate() {
                for k in 0..depth {
                    *out = lhs[row * depth + k].mul_add(rhs[k * columns + column], *out);
                }
            }
        }
        product
    }

    #[test]
    fn adds_the_product_to_what_is_there_at_every_width_gemm_at_the_baseline_included() {
        for (rows, depth, columns) in SHAPES {
            let (lhs, rhs) = (values(rows * depth, 1), values(depth * columns, 2));
            let start = values(rows * columns, 3);
            let want = definition(&lhs, &rhs, depth);
            for width in Width::available() {
                let mut product = start.clone();
                on_width(width, Operands::new(&mut product, &lhs, &rhs, depth));
                for ((got, want), start) in product.iter().zip(&want).zip(&start) {
                    let want = want + f64::from(*start);
                    let error = (f64::from(*got) - want).abs();
                    assert!(error < 1e-5 * depth as f64, "{width:?}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn each_kernel_gives_every_values_chain_to_the_bit_whatever_the_rows_taken_together() {
        let bits = |values: &[f32]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for (rows, depth, columns) in SHAPES {
            let (lhs, rhs) = (values(rows * depth, 4), values(depth * columns, 5));
            let start = values(rows * columns, 6);
            let want = bits(&chains(&start, &lhs, &rhs, depth));
            for width in kernel_widths() {
                let mut product = start.clone();
                on_width(width, Operands::new(&mut product, &lhs, &rhs, depth));
                assert_eq!(
                    bits(&product),
                    want,
                    "{width:?}, {rows} x {depth} x {columns}"
                );
            }
        }
    }
}
