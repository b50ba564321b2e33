//! Test fixtures shared by the unit tests of validation and of the launch: a valid call's
//! layouts, to which each test applies one change.

use crate::reference::SrRule;
use crate::tensor::{DType, TensorLayout};

use super::args::SsuSpec;
use super::seed::SeedSpec;

// A valid baseline: slots 3 (padded slot stride), batch 2, nheads 4, dim 8, dstate 64,
// ngroups 2; fp16 state, bf16 inputs and weights, int32 indices, SR with a seed pointer.
pub(super) const SLOTS: usize = 3;
pub(super) const BATCH: usize = 2;
pub(super) const NH: usize = 4;
pub(super) const DIM: usize = 8;
pub(super) const DS: usize = 64;
pub(super) const NG: usize = 2;
pub(super) const SLOT_STRIDE: usize = NH * DIM * DS + 64;

/// A layout over a buffer exactly long enough for its largest reachable element.
pub(super) fn lay(dtype: DType, shape: &[usize], strides: &[usize]) -> TensorLayout {
    let max = shape
        .iter()
        .zip(strides)
        .map(|(n, s)| (n - 1) * s)
        .sum::<usize>();
    TensorLayout::new(dtype, shape, strides, max + 1).unwrap()
}

/// The valid baseline call described above.
pub(super) fn base() -> SsuSpec {
    let row = NH * DIM;
    SsuSpec {
        state: lay(
            DType::F16,
            &[SLOTS, NH, DIM, DS],
            &[SLOT_STRIDE, DIM * DS, DS, 1],
        ),
        x: lay(DType::BF16, &[BATCH, NH, DIM], &[row, DIM, 1]),
        dt: lay(DType::BF16, &[BATCH, NH, DIM], &[NH, 1, 0]),
        a: lay(DType::F32, &[NH, DIM, DS], &[1, 0, 0]),
        b: lay(DType::BF16, &[BATCH, NG, DS], &[NG * DS, DS, 1]),
        c: lay(DType::BF16, &[BATCH, NG, DS], &[NG * DS, DS, 1]),
        d: Some(lay(DType::BF16, &[NH, DIM], &[1, 0])),
        z: Some(lay(DType::BF16, &[BATCH, NH, DIM], &[row, DIM, 1])),
        dt_bias: Some(lay(DType::BF16, &[NH, DIM], &[1, 0])),
        state_batch_indices: Some(lay(DType::I32, &[BATCH], &[1])),
        dst_state_batch_indices: Some(lay(DType::I32, &[BATCH], &[1])),
        out: lay(DType::BF16, &[BATCH, NH, DIM], &[row, DIM, 1]),
        state_scale: None,
        philox_rounds: 10,
        sr_rule: SrRule::V072,
        seed: Some(SeedSpec::Pointer(lay(DType::I64, &[1], &[1]))),
    }
}

/// The baseline with `f` applied.
pub(super) fn with(f: impl FnOnce(&mut SsuSpec)) -> SsuSpec {
    let mut s = base();
    f(&mut s);
    s
}
