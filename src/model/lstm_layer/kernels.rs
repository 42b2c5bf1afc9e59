//! One LSTM layer's arithmetic on plain `f32` slices: the input product of every step at once,
//! then per step one product of the hidden state with the four gates' weights and a few
//! passes over each sequence's row, in cache, that apply the gates' non-linearities and update
//! the cell; and the backward pass through time. Nothing here knows about burn.
//!
//! Layouts, time-major so that each step's rows are contiguous: the input sequence is
//! `[steps, batch, inputs]`, the hidden and cell states `[steps, batch, units]`; the weights
//! are burn's `Linear` layout, `[inputs, 4 · units]` and `[units, 4 · units]`, each row the four
//! gates side by side in the order input, forget, candidate, output.

use super::step_product::add_product;
use super::vectors::{VectorWork, on_widest_vectors};
use crate::model::matrix::{Matrix, column_sums, multiply};

/// The size of one layer's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Time steps.
    pub steps: usize,
    /// Sequences run side by side.
    pub batch: usize,
    /// Features of each input.
    pub inputs: usize,
    /// Units of the layer: the width of its hidden state.
    pub units: usize,
}

impl Shape {
    /// Pre-activations per row: four gates of `units`.
    fn gates(&self) -> usize {
        4 * self.units
    }

    /// Rows of every step together, `steps · batch`.
    fn rows(&self) -> usize {
        self.steps * self.batch
    }

    /// One step's hidden or cell state, `batch · units` values.
    fn state_len(&self) -> usize {
        self.batch * self.units
    }

    /// The input sequence's shape, `[steps, batch, inputs]`.
    pub fn inputs_shape(&self) -> [usize; 3] {
        [self.steps, self.batch, self.inputs]
    }

    /// The hidden states' shape, `[steps, batch, units]`.
    pub fn hidden_shape(&self) -> [usize; 3] {
        [self.steps, self.batch, self.units]
    }

    /// The input weight's shape, `[inputs, 4 · units]`.
    pub fn input_weight_shape(&self) -> [usize; 2] {
        [self.inputs, self.gates()]
    }

    /// The recurrent weight's shape, `[units, 4 · units]`.
    pub fn recurrent_weight_shape(&self) -> [usize; 2] {
        [self.units, self.gates()]
    }
}

/// The layer's parameters, in burn's `Linear` layout.
#[derive(Debug, Clone, Copy)]
pub struct Weights<'a> {
    /// Inputs to the gates' pre-activations, `[inputs, 4 · units]`.
    pub input: &'a [f32],
    /// The gates' biases, `[4 · units]`.
    pub bias: &'a [f32],
    /// Hidden state to the gates' pre-activations, `[units, 4 · units]`.
    pub recurrent: &'a [f32],
}

/// What the forward pass keeps for the backward pass, beside its inputs and hidden states.
#[derive(Debug)]
pub struct Trace {
    /// Each step's gate activations, `[steps, batch, 4 · units]`.
    gates: Vec<f32>,
    /// Each step's cell state, `[steps, batch, units]`.
    cells: Vec<f32>,
    /// `tanh` of each step's cell state, `[steps, batch, units]`.
    cells_tanh: Vec<f32>,
}

/// Gradients of the layer's inputs and parameters.
#[derive(Debug)]
pub struct Gradients {
    /// Of the input sequence, if asked for.
    pub inputs: Option<Vec<f32>>,
    /// Of the input weight.
    pub input: Vec<f32>,
    /// Of the bias.
    pub bias: Vec<f32>,
    /// Of the recurrent weight.
    pub recurrent: Vec<f32>,
}

/// The hidden state after each step of `inputs`, from zero hidden and cell states, and, if
/// `keep_trace`, what [`backward`] needs. Without a trace (evaluation), the cell states of two
/// steps are all that is held beside the pre-activations and the output.
pub fn forward(
    shape: &Shape,
    inputs: &[f32],
    weights: Weights<'_>,
    keep_trace: bool,
) -> (Vec<f32>, Option<Trace>) {
    check_lengths(shape, inputs, weights);
    let (units, state_len) = (shape.units, shape.state_len());
    let mut gates = input_products(shape, inputs, weights);
    let mut hidden = vec![0.0; shape.rows() * units];
    let mut cells = vec![0.0; if keep_trace { shape.steps } else { 2 } * state_len];
    let mut cells_tanh = vec![0.0; if keep_trace { shape.steps } else { 1 } * state_len];
    let zeros = vec![0.0; state_len];
    let step_len = shape.batch * shape.gates();
    for (step, step_gates) in gates.chunks_exact_mut(step_len).enumerate() {
        let (earlier, current) = hidden.split_at_mut(step * state_len);
        if step > 0 {
            let previous = &earlier[(step - 1) * state_len..];
            add_product(step_gates, previous, weights.recurrent, units);
        }
        let (previous_cell, cell) = cell_pair(&mut cells, &zeros, step, keep_trace);
        let cell_tanh = &mut cells_tanh[if keep_trace { step } else { 0 } * state_len..];
        on_widest_vectors(StepRows {
            units,
            gates: step_gates,
            previous_cell,
            cell,
            cell_tanh: &mut cell_tanh[..state_len],
            hidden: &mut current[..state_len],
        });
    }
    let trace = keep_trace.then_some(Trace {
        gates,
        cells,
        cells_tanh,
    });
    (hidden, trace)
}

/// The gradients of [`forward`]'s inputs and parameters, given the gradient of its hidden
/// states `[steps, batch, units]`, its `hidden` states and its `trace`. The input sequence's
/// gradient is computed only if `want_inputs`.
pub fn backward(
    shape: &Shape,
    (inputs, weights): (&[f32], Weights<'_>),
    (hidden, trace): (&[f32], &Trace),
    hidden_grad: &[f32],
    want_inputs: bool,
) -> Gradients {
    check_lengths(shape, inputs, weights);
    let (units, gates_len, state_len) = (shape.units, shape.gates(), shape.state_len());
    assert_eq!(hidden.len(), shape.rows() * units, "hidden states length");
    assert_eq!(hidden_grad.len(), hidden.len(), "hidden gradient length");
    // The pre-activations' gradient of every step, `[steps, batch, 4 · units]`.
    let mut gates_grad = vec![0.0; shape.rows() * gates_len];
    // The gradient reaching the current step's hidden state from the next step's gates, and
    // its cell state's from the next step's cell.
    let mut recurrent_grad = vec![0.0; state_len];
    let mut cell_grad = vec![0.0; state_len];
    let zeros = vec![0.0; state_len];
    let recurrent_t = transpose(weights.recurrent, units);
    for step in (0..shape.steps).rev() {
        let at = step * state_len..(step + 1) * state_len;
        let previous_cell = match step {
            0 => &zeros[..],
            _ => &trace.cells[at.start - state_len..at.start],
        };
        let step_grad =
            &mut gates_grad[step * shape.batch * gates_len..][..shape.batch * gates_len];
        on_widest_vectors(StepRowsBack {
            units,
            grad: step_grad,
            gates: &trace.gates[step * shape.batch * gates_len..][..shape.batch * gates_len],
            hidden_grad: &hidden_grad[at.clone()],
            recurrent_grad: &recurrent_grad,
            cell_grad: &mut cell_grad,
            previous_cell,
            cell_tanh: &trace.cells_tanh[at],
        });
        if step > 0 {
            recurrent_grad.fill(0.0);
            add_product(&mut recurrent_grad, step_grad, &recurrent_t, gates_len);
        }
    }
    parameter_grads(shape, (inputs, weights), hidden, &gates_grad, want_inputs)
}

/// The products of the pre-activations' gradient with what each parameter multiplied, summed
/// over all steps at once, and the input sequence's gradient.
fn parameter_grads(
    shape: &Shape,
    (inputs, weights): (&[f32], Weights<'_>),
    hidden: &[f32],
    gates_grad: &[f32],
    want_inputs: bool,
) -> Gradients {
    let (rows, gates_len, units) = (shape.rows(), shape.gates(), shape.units);
    let all_grads = Matrix::row_major(gates_grad, rows, gates_len);
    let mut grads = Gradients {
        inputs: None,
        input: vec![0.0; shape.inputs * gates_len],
        bias: column_sums(gates_grad, gates_len),
        recurrent: vec![0.0; units * gates_len],
    };
    let inputs_t = Matrix::row_major(inputs, rows, shape.inputs).transposed();
    multiply(&mut grads.input, inputs_t, all_grads, false);
    // Step t's gates read step t - 1's hidden state: every step's but the last, against every
    // step's gradient but the first.
    let later = shape.batch * gates_len;
    if shape.steps > 1 {
        let earlier = &hidden[..rows * units - shape.state_len()];
        let earlier_t = Matrix::row_major(earlier, rows - shape.batch, units).transposed();
        let later_grads = Matrix::row_major(&gates_grad[later..], rows - shape.batch, gates_len);
        multiply(&mut grads.recurrent, earlier_t, later_grads, false);
    }
    if want_inputs {
        let mut inputs_grad = vec![0.0; inputs.len()];
        let input_t = Matrix::row_major(weights.input, shape.inputs, gates_len).transposed();
        multiply(&mut inputs_grad, all_grads, input_t, false);
        grads.inputs = Some(inputs_grad);
    }
    grads
}

/// The `[columns, rows]` transpose of the row-major `[rows, columns]` `matrix`: the
/// recurrent weights read the other way, laid out once for every step of the backward pass.
/// Copied in square tiles, so that the reads and the writes both stay within a few cache
/// lines at a time.
fn transpose(matrix: &[f32], rows: usize) -> Vec<f32> {
    const TILE: usize = 16;
    let columns = matrix.len() / rows;
    let mut transposed = vec![0.0; matrix.len()];
    for top in (0..rows).step_by(TILE) {
        for left in (0..columns).step_by(TILE) {
            for row in top..rows.min(top + TILE) {
                for column in left..columns.min(left + TILE) {
                    transposed[column * rows + row] = matrix[row * columns + column];
                }
            }
        }
    }
    transposed
}

fn check_lengths(shape: &Shape, inputs: &[f32], weights: Weights<'_>) {
    assert!(shape.steps > 0, "a sequence has a step");
    assert_eq!(inputs.len(), shape.rows() * shape.inputs, "inputs length");
    assert_eq!(
        weights.input.len(),
        shape.inputs * shape.gates(),
        "input weight length"
    );
    assert_eq!(weights.bias.len(), shape.gates(), "bias length");
    assert_eq!(
        weights.recurrent.len(),
        shape.units * shape.gates(),
        "recurrent weight length"
    );
}

/// Every step's input products with the gates' biases, `[steps, batch, 4 · units]`: one matrix
/// product for the whole sequence, added to the biases.
fn input_products(shape: &Shape, inputs: &[f32], weights: Weights<'_>) -> Vec<f32> {
    let mut gates = weights.bias.repeat(shape.rows());
    multiply(
        &mut gates,
        Matrix::row_major(inputs, shape.rows(), shape.inputs),
        Matrix::row_major(weights.input, shape.inputs, shape.gates()),
        true,
    );
    gates
}

/// The previous step's cell state (zeros before the first step) and the current step's, in
/// `cells`: one per step with a trace, two taking turns without.
fn cell_pair<'a>(
    cells: &'a mut [f32],
    zeros: &'a [f32],
    step: usize,
    keep_trace: bool,
) -> (&'a [f32], &'a mut [f32]) {
    let len = zeros.len();
    if keep_trace {
        let (earlier, current) = cells.split_at_mut(step * len);
        let previous = if step == 0 {
            zeros
        } else {
            &earlier[(step - 1) * len..]
        };
        return (previous, &mut current[..len]);
    }
    let (even, odd) = cells.split_at_mut(len);
    match (step, step % 2) {
        (0, _) => (zeros, even),
        (_, 0) => (odd, even),
        _ => (even, odd),
    }
}

/// One step of every sequence in the batch: each row's four gates' activations from their
/// pre-activations (written back over them), its new cell state from the previous one, the
/// cell state's `tanh`, and the hidden state. A few passes over each row, which stays in the
/// first-level cache: each pass is a loop over slices that are separate arguments, so that the
/// compiler knows they do not overlap and runs it on vector registers.
struct StepRows<'a> {
    units: usize,
    gates: &'a mut [f32],
    previous_cell: &'a [f32],
    cell: &'a mut [f32],
    cell_tanh: &'a mut [f32],
    hidden: &'a mut [f32],
}

impl VectorWork for StepRows<'_> {
    #[inline(always)]
    fn run(self) {
        let StepRows {
            units,
            gates,
            previous_cell,
            cell,
            cell_tanh,
            hidden,
        } = self;
        let rows = gates
            .chunks_exact_mut(4 * units)
            .zip(previous_cell.chunks_exact(units))
            .zip(cell.chunks_exact_mut(units))
            .zip(cell_tanh.chunks_exact_mut(units))
            .zip(hidden.chunks_exact_mut(units));
        for ((((gates, previous_cell), cell), cell_tanh), hidden) in rows {
            let (input_forget, rest) = gates.split_at_mut(2 * units);
            let (candidate, output) = rest.split_at_mut(units);
            apply(input_forget, sigmoid);
            apply(candidate, tanh);
            apply(output, sigmoid);
            update_cell(gates, previous_cell, (cell, cell_tanh), hidden);
        }
    }
}

/// `x <- f(x)` over `values`.
#[inline(always)]
fn apply(values: &mut [f32], f: impl Fn(f32) -> f32) {
    for value in values {
        *value = f(*value);
    }
}

/// `c = f · c_prev + i · g` and `h = o · tanh(c)` over one row, from its gates' activations.
#[inline(always)]
fn update_cell(
    gates: &[f32],
    previous_cell: &[f32],
    (cell, cell_tanh): (&mut [f32], &mut [f32]),
    hidden: &mut [f32],
) {
    let units = cell.len();
    let (input, rest) = gates.split_at(units);
    let (forget, rest) = rest.split_at(units);
    let (candidate, output) = rest.split_at(units);
    let gates = input.iter().zip(forget).zip(candidate).zip(output);
    let states = cell
        .iter_mut()
        .zip(cell_tanh.iter_mut())
        .zip(hidden.iter_mut());
    for (((((i, f), g), o), previous), ((c, c_tanh), h)) in gates.zip(previous_cell).zip(states) {
        *c = f * previous + i * g;
        *c_tanh = tanh(*c);
        *h = o * *c_tanh;
    }
}

/// One step of every sequence backwards: each row's four pre-activations' gradient from the
/// gradient reaching its hidden state (from the layer's output and from the next step's
/// gates) and its cell state (`cell_grad`, from the next step, replaced by what reaches the
/// previous step's). Passes over slices that are separate arguments, as [`StepRows`].
struct StepRowsBack<'a> {
    units: usize,
    grad: &'a mut [f32],
    gates: &'a [f32],
    hidden_grad: &'a [f32],
    recurrent_grad: &'a [f32],
    cell_grad: &'a mut [f32],
    previous_cell: &'a [f32],
    cell_tanh: &'a [f32],
}

impl VectorWork for StepRowsBack<'_> {
    #[inline(always)]
    fn run(self) {
        let StepRowsBack {
            units,
            grad,
            gates,
            hidden_grad,
            recurrent_grad,
            cell_grad,
            previous_cell,
            cell_tanh,
        } = self;
        let rows = grad
            .chunks_exact_mut(4 * units)
            .zip(gates.chunks_exact(4 * units))
            .zip(hidden_grad.chunks_exact(units))
            .zip(recurrent_grad.chunks_exact(units))
            .zip(cell_grad.chunks_exact_mut(units))
            .zip(previous_cell.chunks_exact(units))
            .zip(cell_tanh.chunks_exact(units));
        for ((((((grad, gates), hidden_grad), recurrent_grad), cell_grad), previous), tanh) in rows
        {
            let (input_grad, rest) = grad.split_at_mut(units);
            let (forget_grad, rest) = rest.split_at_mut(units);
            let (candidate_grad, output_grad) = rest.split_at_mut(units);
            let (input, rest) = gates.split_at(units);
            let (forget, rest) = rest.split_at(units);
            let (candidate, output) = rest.split_at(units);
            let hidden_grads = (hidden_grad, recurrent_grad);
            output_and_cell_grads((output_grad, cell_grad), hidden_grads, (output, tanh));
            input_and_candidate_grads((input_grad, candidate_grad), cell_grad, (input, candidate));
            forget_grad_and_carry((forget_grad, cell_grad), previous, forget);
        }
    }
}

/// With `dh` the two gradients reaching the hidden state: the output gate's pre-activation
/// gradient `dh · tanh(c) · o (1 - o)`, and `dc += dh · o (1 - tanh(c)^2)`.
#[inline(always)]
fn output_and_cell_grads(
    (output_grad, cell_grad): (&mut [f32], &mut [f32]),
    (hidden_grad, recurrent_grad): (&[f32], &[f32]),
    (output, cell_tanh): (&[f32], &[f32]),
) {
    let from = hidden_grad
        .iter()
        .zip(recurrent_grad)
        .zip(output)
        .zip(cell_tanh);
    for ((((dh_out, dh_next), o), c_tanh), (grad, dc)) in
        from.zip(output_grad.iter_mut().zip(cell_grad.iter_mut()))
    {
        let dh = dh_out + dh_next;
        *grad = dh * c_tanh * o * (1.0 - o);
        *dc += dh * o * (1.0 - c_tanh * c_tanh);
    }
}

/// The input gate's and the candidate's pre-activation gradients, `dc · g · i (1 - i)` and
/// `dc · i (1 - g^2)`: one loop for each, since the two are parts of one row and a loop
/// writing both was compiled for one value at a time.
#[inline(always)]
fn input_and_candidate_grads(
    (input_grad, candidate_grad): (&mut [f32], &mut [f32]),
    cell_grad: &[f32],
    (input, candidate): (&[f32], &[f32]),
) {
    let from = cell_grad.iter().zip(input).zip(candidate);
    for (((dc, i), g), i_grad) in from.clone().zip(input_grad) {
        *i_grad = dc * g * i * (1.0 - i);
    }
    for (((dc, i), g), g_grad) in from.zip(candidate_grad) {
        *g_grad = dc * i * (1.0 - g * g);
    }
}

/// The forget gate's pre-activation gradient `dc · c_prev · f (1 - f)`, then `dc <- dc · f`,
/// the gradient reaching the previous step's cell state.
#[inline(always)]
fn forget_grad_and_carry(
    (forget_grad, cell_grad): (&mut [f32], &mut [f32]),
    previous_cell: &[f32],
    forget: &[f32],
) {
    let from = previous_cell.iter().zip(forget);
    for ((previous, f), (grad, dc)) in from.zip(forget_grad.iter_mut().zip(cell_grad)) {
        *grad = *dc * previous * f * (1.0 - f);
        *dc *= f;
    }
}

/// `1 / (1 + e^-x)`, through [`exp`].
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh(x)` as `2 sigmoid(2x) - 1`, through [`exp`]: exact at large `|x|`, within about
/// 1e-7 of `tanh` near 0.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    2.0 * sigmoid(2.0 * x) - 1.0
}

/// `e^x` within about one unit in the last place, without branches or table lookups, so that
/// the loops calling it run on vector registers (libm's `expf` takes one value at a time):
/// Cephes' `expf`, the range reduction `x = n ln 2 + r` with `|r| <= ln 2 / 2` and a
/// degree-6 polynomial for `e^r`, then `2^n` written straight into the exponent bits.
/// Arguments are clamped to `[-87, 88]`, where `e^x` and `2^n` are normal floats; NaN stays
/// NaN. Each value is computed by the same operations whatever the vector width, so results do
/// not depend on it.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Adding 1.5 · 2^23 rounds to an integer held in the low mantissa bits.
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = x - n * LN2_HIGH - n * LN2_LOW;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    let exponent = shifted
        .to_bits()
        .wrapping_sub(ROUNDER.to_bits())
        .wrapping_add(127);
    e_r * f32::from_bits(exponent << 23)
}

#[cfg(test)]
mod tests {
    use super::super::vectors::vector_widths;
    use super::*;
    use crate::model::matrix::unstructured_values as values;

    fn shape() -> Shape {
        Shape {
            steps: 5,
            batch: 3,
            inputs: 4,
            units: 6,
        }
    }

    /// A layer's inputs and parameters: the input sequence, the input weight, the bias and
    /// the recurrent weight.
    fn layer(shape: &Shape) -> [Vec<f32>; 4] {
        [
            values(shape.rows() * shape.inputs, 1),
            values(shape.inputs * shape.gates(), 2),
            values(shape.gates(), 3),
            values(shape.units * shape.gates(), 4),
        ]
    }

    fn weights(layer: &[Vec<f32>; 4]) -> Weights<'_> {
        Weights {
            input: &layer[1],
            bias: &layer[2],
            recurrent: &layer[3],
        }
    }

    /// The LSTM's definition in `f64`, one value at a time: every step's hidden state.
    fn definition(shape: &Shape, [inputs, input, bias, recurrent]: &[Vec<f32>; 4]) -> Vec<f64> {
        let (units, gates) = (shape.units, shape.gates());
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        let mut hidden = vec![0.0; shape.rows() * units];
        let mut cell = vec![0.0; shape.batch * units];
        for step in 0..shape.steps {
            for b in 0..shape.batch {
                let row = step * shape.batch + b;
                let pre = |gate: usize, j: usize| {
                    let column = gate * units + j;
                    let mut sum = f64::from(bias[column]);
                    for k in 0..shape.inputs {
                        let x = f64::from(inputs[row * shape.inputs + k]);
                        sum += x * f64::from(input[k * gates + column]);
                    }
                    if step > 0 {
                        for k in 0..units {
                            let h = hidden[(row - shape.batch) * units + k];
                            sum += h * f64::from(recurrent[k * gates + column]);
                        }
                    }
                    sum
                };
                let activated: Vec<[f64; 4]> = (0..units)
                    .map(|j| {
                        let [i, f, g, o] = [0, 1, 2, 3].map(|gate| pre(gate, j));
                        [sigmoid(i), sigmoid(f), g.tanh(), sigmoid(o)]
                    })
                    .collect();
                for (j, [i, f, g, o]) in activated.into_iter().enumerate() {
                    let c = &mut cell[b * units + j];
                    *c = f * *c + i * g;
                    hidden[row * units + j] = o * c.tanh();
                }
            }
        }
        hidden
    }

    #[test]
    fn the_element_wise_passes_give_the_same_bits_at_every_vector_width() {
        let (units, batch) = (37, 3);
        // Pre-activations far into both tails, where exp saturates, as well as near 0.
        let gates: Vec<f32> = values(batch * 4 * units, 7)
            .iter()
            .map(|v| 60.0 * v * v * v)
            .collect();
        let [previous, hidden_grad, recurrent_grad, cell_grad] =
            [8, 9, 10, 11].map(|seed| values(batch * units, seed));
        let forward = |variant: usize| {
            let run = vector_widths::<StepRows<'_>>()[variant].1;
            let mut gates = gates.clone();
            let [mut cell, mut cell_tanh, mut hidden] = [0; 3].map(|_| vec![0.0; batch * units]);
            let (cell_states, rows) = ((&mut cell, &mut cell_tanh), &mut gates);
            run(StepRows {
                units,
                gates: rows,
                previous_cell: &previous,
                cell: cell_states.0,
                cell_tanh: cell_states.1,
                hidden: &mut hidden,
            });
            [gates, cell, cell_tanh, hidden]
        };
        let backward = |variant: usize, [gates, _, cell_tanh, _]: &[Vec<f32>; 4]| {
            let run = vector_widths::<StepRowsBack<'_>>()[variant].1;
            let (mut grad, mut cell_grad) = (vec![0.0; gates.len()], cell_grad.clone());
            run(StepRowsBack {
                units,
                grad: &mut grad,
                gates,
                hidden_grad: &hidden_grad,
                recurrent_grad: &recurrent_grad,
                cell_grad: &mut cell_grad,
                previous_cell: &previous,
                cell_tanh,
            });
            [grad, cell_grad]
        };
        let bits = |values: &[Vec<f32>]| -> Vec<Vec<u32>> {
            values
                .iter()
                .map(|v| v.iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        let want_forward = forward(0);
        let want_backward = backward(0, &want_forward);
        for (variant, (name, _)) in vector_widths::<StepRows<'_>>()
            .into_iter()
            .enumerate()
            .skip(1)
        {
            let got_forward = forward(variant);
            assert_eq!(
                bits(&got_forward),
                bits(&want_forward),
                "forward on {name:?}"
            );
            let got_backward = backward(variant, &want_forward);
            assert_eq!(
                bits(&got_backward),
                bits(&want_backward),
                "backward on {name:?}"
            );
        }
    }

    #[test]
    fn transposing_moves_every_value_to_its_mirrored_place() {
        for (rows, columns) in [(5, 20), (37, 18), (1, 3)] {
            let matrix = values(rows * columns, 12);
            let transposed = transpose(&matrix, rows);
            for row in 0..rows {
                for column in 0..columns {
                    let (at, mirrored) = (row * columns + column, column * rows + row);
                    assert_eq!(transposed[mirrored], matrix[at], "({row}, {column})");
                }
            }
        }
    }

    #[test]
    fn exp_sigmoid_and_tanh_are_within_a_few_units_in_the_last_place() {
        for k in -8_700..8_800 {
            let x = k as f32 / 100.0 + 0.003;
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            assert!(
                (got - want).abs() <= 2.5e-7 * want,
                "exp({x}) = {got}, not {want}"
            );
        }
        for k in -2_000..=2_000 {
            let x = k as f32 / 100.0 + 0.003;
            let sigmoid_want = 1.0 / (1.0 + (-f64::from(x)).exp());
            assert!(
                (f64::from(sigmoid(x)) - sigmoid_want).abs() < 2e-7,
                "sigmoid({x})"
            );
            assert!(
                (f64::from(tanh(x)) - f64::from(x).tanh()).abs() < 2e-7,
                "tanh({x})"
            );
        }
        assert_eq!(sigmoid(200.0), 1.0);
        assert_eq!(tanh(-200.0), -1.0);
        assert!(exp(f32::NAN).is_nan() && sigmoid(f32::NAN).is_nan());
    }

    #[test]
    fn forward_matches_the_definition_and_needs_no_trace_to_do_so() {
        let shape = shape();
        let layer = layer(&shape);
        let (hidden, trace) = forward(&shape, &layer[0], weights(&layer), true);
        assert!(trace.is_some());
        for (got, want) in hidden.iter().zip(definition(&shape, &layer)) {
            assert!((f64::from(*got) - want).abs() < 1e-5, "{got} vs {want}");
        }
        let (untraced, none) = forward(&shape, &layer[0], weights(&layer), false);
        assert!(none.is_none());
        assert_eq!(untraced, hidden);
    }

    #[test]
    fn backward_matches_finite_differences_of_every_input() {
        let shape = shape();
        let layer = layer(&shape);
        // The loss is the hidden states' dot product with fixed directions.
        let directions = values(shape.rows() * shape.units, 5);
        let loss = |layer: &[Vec<f32>; 4]| -> f64 {
            let hidden = definition(&shape, layer);
            hidden
                .iter()
                .zip(&directions)
                .map(|(h, d)| h * f64::from(*d))
                .sum()
        };
        let (hidden, trace) = forward(&shape, &layer[0], weights(&layer), true);
        let grads = backward(
            &shape,
            (&layer[0], weights(&layer)),
            (&hidden, &trace.unwrap()),
            &directions,
            true,
        );
        let computed = [
            grads.inputs.unwrap(),
            grads.input,
            grads.bias,
            grads.recurrent,
        ];
        for (which, computed) in computed.iter().enumerate() {
            assert_eq!(computed.len(), layer[which].len());
            for (at, grad) in computed.iter().enumerate() {
                let nudged = |by: f32| {
                    let mut layer = layer.clone();
                    layer[which][at] += by;
                    loss(&layer)
                };
                let h = 1e-3;
                let numeric = (nudged(h) - nudged(-h)) / (2.0 * f64::from(h));
                assert!(
                    (f64::from(*grad) - numeric).abs() < 1e-3 * (1.0 + numeric.abs()),
                    "input {which}, element {at}: {grad} vs {numeric}"
                );
            }
        }
    }

    #[test]
    fn a_single_step_has_no_recurrent_gradient_and_the_inputs_gradient_is_optional() {
        let shape = Shape {
            steps: 1,
            ..shape()
        };
        let layer = layer(&shape);
        let (hidden, trace) = forward(&shape, &layer[0], weights(&layer), true);
        let grads = backward(
            &shape,
            (&layer[0], weights(&layer)),
            (&hidden, &trace.unwrap()),
            &values(hidden.len(), 6),
            false,
        );
        assert!(grads.inputs.is_none());
        assert!(grads.recurrent.iter().all(|&g| g == 0.0));
        assert!(grads.input.iter().any(|&g| g != 0.0));
    }
}
