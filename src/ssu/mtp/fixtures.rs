//! Test fixtures shared by the unit tests of the multi-token validation and launch: valid
//! fixed-length and varlen calls' layouts, to which each test applies one change.

use crate::ssu::SeedSpec;
use crate::tensor::{DType, TensorLayout};

use super::args::MtpSpec;

// A valid fixed-length baseline: slots 3 (padded slot stride), batch 2, T 4, nheads 4, dim 8,
// dstate 64, ngroups 2; fp16 state, bf16 inputs and weights, int32 indices (1-D read slots,
// a (batch, T) dst index), SR with a seed pointer.
pub(super) const SLOTS: usize = 3;
pub(super) const BATCH: usize = 2;
pub(super) const T: usize = 4;
pub(super) const NH: usize = 4;
pub(super) const DIM: usize = 8;
pub(super) const DS: usize = 64;
pub(super) const NG: usize = 2;
pub(super) const ROW: usize = NH * DIM;
pub(super) const SLOT_STRIDE: usize = NH * DIM * DS + 64;
// Varlen baseline: 6 token rows, an intermediate buffer of 3 entries of T steps.
pub(super) const TOTAL: usize = 6;
pub(super) const ENTRIES: usize = 3;

/// A layout over a buffer exactly long enough for its largest reachable element (an empty
/// buffer for a tensor with no element).
pub(super) fn lay(dtype: DType, shape: &[usize], strides: &[usize]) -> TensorLayout {
    crate::ssu::props::try_lay(dtype, shape, strides).unwrap()
}

/// A row-major layout over an exactly long buffer.
pub(super) fn contiguous(dtype: DType, shape: &[usize]) -> TensorLayout {
    let n = shape.iter().product();
    TensorLayout::contiguous(dtype, shape, n).unwrap()
}

/// The fixed-length baseline described above.
pub(super) fn base() -> MtpSpec {
    MtpSpec {
        state: lay(
            DType::F16,
            &[SLOTS, NH, DIM, DS],
            &[SLOT_STRIDE, DIM * DS, DS, 1],
        ),
        x: contiguous(DType::BF16, &[BATCH, T, NH, DIM]),
        dt: lay(DType::BF16, &[BATCH, T, NH, DIM], &[T * NH, NH, 1, 0]),
        a: lay(DType::F32, &[NH, DIM, DS], &[1, 0, 0]),
        b: contiguous(DType::BF16, &[BATCH, T, NG, DS]),
        c: contiguous(DType::BF16, &[BATCH, T, NG, DS]),
        d: Some(lay(DType::BF16, &[NH, DIM], &[1, 0])),
        z: Some(contiguous(DType::BF16, &[BATCH, T, NH, DIM])),
        dt_bias: Some(lay(DType::BF16, &[NH, DIM], &[1, 0])),
        state_batch_indices: Some(contiguous(DType::I32, &[BATCH])),
        dst_state_batch_indices: Some(contiguous(DType::I32, &[BATCH, T])),
        num_accepted_tokens: None,
        cu_seqlens: None,
        intermediate_states_buffer: None,
        intermediate_state_indices: None,
        state_scale: None,
        intermediate_state_scales: None,
        cache_steps: None,
        out: contiguous(DType::BF16, &[BATCH, T, NH, DIM]),
        philox_rounds: 10,
        seed: Some(SeedSpec::Pointer(contiguous(DType::I64, &[1]))),
    }
}

/// The varlen baseline: x (6, nheads, dim), cu_seqlens (3,), cache_steps T, a 2-D read index
/// picked by num_accepted_tokens, an intermediate buffer with entry indices, no dst.
pub(super) fn base_varlen() -> MtpSpec {
    MtpSpec {
        x: contiguous(DType::BF16, &[TOTAL, NH, DIM]),
        dt: lay(DType::BF16, &[TOTAL, NH, DIM], &[NH, 1, 0]),
        b: contiguous(DType::BF16, &[TOTAL, NG, DS]),
        c: contiguous(DType::BF16, &[TOTAL, NG, DS]),
        z: Some(contiguous(DType::BF16, &[TOTAL, NH, DIM])),
        out: contiguous(DType::BF16, &[TOTAL, NH, DIM]),
        state_batch_indices: Some(contiguous(DType::I32, &[BATCH, T])),
        dst_state_batch_indices: None,
        num_accepted_tokens: Some(contiguous(DType::I32, &[BATCH])),
        cu_seqlens: Some(contiguous(DType::I32, &[BATCH + 1])),
        intermediate_states_buffer: Some(contiguous(DType::F16, &[ENTRIES, T, NH, DIM, DS])),
        intermediate_state_indices: Some(contiguous(DType::I32, &[BATCH])),
        cache_steps: Some(T),
        ..base()
    }
}

/// The fixed-length baseline with `f` applied.
pub(super) fn with(f: impl FnOnce(&mut MtpSpec)) -> MtpSpec {
    let mut s = base();
    f(&mut s);
    s
}

/// The varlen baseline with `f` applied.
pub(super) fn with_varlen(f: impl FnOnce(&mut MtpSpec)) -> MtpSpec {
    let mut s = base_varlen();
    f(&mut s);
    s
}
