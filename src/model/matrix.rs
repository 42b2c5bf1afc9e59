//! Matrix products on plain `f32` slices, through the `gemm` library that burn-flex itself
//! calls, and column sums, for the operations fedsim writes for flex (`conv_pool`,
//! `lstm_layer`, `dense_layer`): they run on the calling thread, without burn's tensors or
//! their allocations around each product.

/// A read-only matrix view: element `(r, c)` is `data[r * row_stride + c * column_stride]`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Matrix<'a> {
    data: &'a [f32],
    rows: usize,
    columns: usize,
    row_stride: usize,
    column_stride: usize,
}

impl<'a> Matrix<'a> {
    /// The `rows x columns` matrix stored row by row in `data`.
    pub(super) fn row_major(data: &'a [f32], rows: usize, columns: usize) -> Self {
        assert_eq!(data.len(), rows * columns, "matrix size");
        Self {
            data,
            rows,
            columns,
            row_stride: columns,
            column_stride: 1,
        }
    }

    /// The same data read as the transpose, without moving it.
    pub(super) fn transposed(self) -> Self {
        Self {
            rows: self.columns,
            columns: self.rows,
            row_stride: self.column_stride,
            column_stride: self.row_stride,
            ..self
        }
    }
}

/// `product = lhs · rhs` (or `product += lhs · rhs` if `accumulate`), `product` row-major,
/// on the calling thread: the trainer already runs one client per core.
pub(super) fn multiply(product: &mut [f32], lhs: Matrix<'_>, rhs: Matrix<'_>, accumulate: bool) {
    assert_eq!(lhs.columns, rhs.rows, "inner dimensions");
    assert_eq!(product.len(), lhs.rows * rhs.columns, "product size");
    let as_isize = |n: usize| n as isize;
    // SAFETY: the views were built from slices of exactly `rows * columns` elements in one of
    // two orders (checked in `Matrix::row_major`), so every index gemm forms from these
    // dimensions and strides lies inside `lhs.data`, `rhs.data` and `product`, which do not
    // overlap (one is borrowed mutably).
    unsafe {
        gemm::gemm(
            lhs.rows,
            rhs.columns,
            lhs.columns,
            product.as_mut_ptr(),
            1,
            as_isize(rhs.columns),
            accumulate,
            lhs.data.as_ptr(),
            as_isize(lhs.column_stride),
            as_isize(lhs.row_stride),
            rhs.data.as_ptr(),
            as_isize(rhs.column_stride),
            as_isize(rhs.row_stride),
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// The sum of each column of the row-major `matrix` of `columns` columns, added up row after
/// row from zero: a bias's gradient, in the order burn-flex sums it.
pub(super) fn column_sums(matrix: &[f32], columns: usize) -> Vec<f32> {
    let mut sums = vec![0.0; columns];
    for row in matrix.chunks_exact(columns) {
        for (sum, value) in sums.iter_mut().zip(row) {
            *sum += value;
        }
    }
    sums
}

/// Small, odd-sized values without structure, so that any misplaced index in a kernel's test
/// shows.
#[cfg(test)]
pub(super) fn unstructured_values(len: usize, seed: u32) -> Vec<f32> {
    (0..len as u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1_000) as f32 / 500.0 - 1.0)
        .collect()
}
