//! Unit tests of the multi-token layer: the valid fixed-length and varlen calls, one case per
//! malformed input (kind, argument and message), the C check on parameter blocks the Rust
//! API cannot build, and the property test that Rust's `validate_mtp` and the C check accept
//! the same calls.

use super::args::{MtpProblem, MtpSpec};
use super::launch::fill_params;
use super::*;
use crate::error::Error;
use crate::ffi::{self, sys};
use crate::tensor::{DType, TensorLayout};

// A valid fixed-length baseline: slots 3 (padded slot stride), batch 2, T 4, nheads 4, dim 8,
// dstate 64, ngroups 2; fp16 state, bf16 inputs and weights, int32 indices (1-D read slots,
// a (batch, T) dst index), SR with a seed pointer.
const SLOTS: usize = 3;
const BATCH: usize = 2;
const T: usize = 4;
const NH: usize = 4;
const DIM: usize = 8;
const DS: usize = 64;
const NG: usize = 2;
const ROW: usize = NH * DIM;
const SLOT_STRIDE: usize = NH * DIM * DS + 64;
// Varlen baseline: 6 token rows, an intermediate buffer of 3 entries of T steps.
const TOTAL: usize = 6;
const ENTRIES: usize = 3;

/// A layout over a buffer exactly long enough for its largest reachable element (an empty
/// buffer for a tensor with no element).
fn lay(dtype: DType, shape: &[usize], strides: &[usize]) -> TensorLayout {
    try_lay(dtype, shape, strides).unwrap()
}

/// [`lay`], or None where the extent overflows usize.
fn try_lay(dtype: DType, shape: &[usize], strides: &[usize]) -> Option<TensorLayout> {
    if shape.contains(&0) {
        return TensorLayout::new(dtype, shape, strides, 0).ok();
    }
    let mut max = 0usize;
    for (n, s) in shape.iter().zip(strides) {
        max = max.checked_add((n - 1).checked_mul(*s)?)?;
    }
    TensorLayout::new(dtype, shape, strides, max.checked_add(1)?).ok()
}

/// A layout over a buffer of `1 << 50` elements (room for any stride a case sets).
fn roomy(mut l: TensorLayout) -> TensorLayout {
    l.len = 1 << 50;
    l
}

fn contiguous(dtype: DType, shape: &[usize]) -> TensorLayout {
    let n = shape.iter().product();
    TensorLayout::contiguous(dtype, shape, n).unwrap()
}

fn base() -> MtpSpec {
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
        cache_steps: None,
        out: contiguous(DType::BF16, &[BATCH, T, NH, DIM]),
        philox_rounds: 10,
        seed: Some(SeedSpec::Pointer(contiguous(DType::I64, &[1]))),
    }
}

/// The varlen baseline: x (6, nheads, dim), cu_seqlens (3,), cache_steps T, a 2-D read index
/// picked by num_accepted_tokens, an intermediate buffer with entry indices, no dst.
fn base_varlen() -> MtpSpec {
    MtpSpec {
        x: contiguous(DType::BF16, &[TOTAL, NH, DIM]),
        dt: lay(DType::BF16, &[TOTAL, NH, DIM], &[NH, 1, 0]),
        b: contiguous(DType::BF16, &[TOTAL, NG, DS]),
        c: contiguous(DType::BF16, &[TOTAL, NG, DS]),
        z: Some(contiguous(DType::BF16, &[TOTAL, NH, DIM])),
        out: contiguous(DType::BF16, &[TOTAL, NH, DIM]),
        state_batch_indices: Some(contiguous(DType::I32, &[BATCH, 3])),
        dst_state_batch_indices: None,
        num_accepted_tokens: Some(contiguous(DType::I32, &[BATCH])),
        cu_seqlens: Some(contiguous(DType::I32, &[BATCH + 1])),
        intermediate_states_buffer: Some(contiguous(DType::F16, &[ENTRIES, T, NH, DIM, DS])),
        intermediate_state_indices: Some(contiguous(DType::I32, &[BATCH])),
        cache_steps: Some(T),
        ..base()
    }
}

fn with(f: impl FnOnce(&mut MtpSpec)) -> MtpSpec {
    let mut s = base();
    f(&mut s);
    s
}

fn with_varlen(f: impl FnOnce(&mut MtpSpec)) -> MtpSpec {
    let mut s = base_varlen();
    f(&mut s);
    s
}

#[test]
fn baselines_are_valid() {
    let p = validate_mtp(&base()).unwrap();
    assert_eq!(
        p,
        MtpProblem {
            batch: BATCH,
            ntokens: T,
            total_tokens: None,
            nheads: NH,
            dim: DIM,
            dstate: DS,
            ngroups: NG,
            cache_slots: SLOTS,
            intermediate: None,
            state_dtype: DType::F16,
            input_dtype: DType::BF16,
            weight_dtype: DType::BF16,
            index_dtype: Some(DType::I32),
            stochastic_rounding: true,
        }
    );
    let p = validate_mtp(&base_varlen()).unwrap();
    assert_eq!(
        (p.batch, p.ntokens, p.total_tokens, p.intermediate),
        (BATCH, T, Some(TOTAL), Some((ENTRIES, T)))
    );
}

#[test]
fn other_valid_calls() {
    // No optional tensor, fp32 everywhere, dstate 256, round to nearest, T = 1.
    let minimal = MtpSpec {
        state: contiguous(DType::F32, &[BATCH, NH, DIM, 256]),
        x: contiguous(DType::F32, &[BATCH, 1, NH, DIM]),
        dt: lay(DType::F32, &[BATCH, 1, NH, DIM], &[NH, NH, 1, 0]),
        a: lay(DType::F32, &[NH, DIM, 256], &[1, 0, 0]),
        b: contiguous(DType::F32, &[BATCH, 1, 1, 256]),
        c: contiguous(DType::F32, &[BATCH, 1, 1, 256]),
        d: None,
        z: None,
        dt_bias: None,
        state_batch_indices: None,
        dst_state_batch_indices: None,
        out: contiguous(DType::F32, &[BATCH, 1, NH, DIM]),
        philox_rounds: 0,
        seed: None,
        ..base()
    };
    let p = validate_mtp(&minimal).unwrap();
    assert_eq!((p.ntokens, p.ngroups, p.index_dtype), (1, 1, None));
    // T = 1: the token stride of out is free, and the batch stride needs only one row.
    validate_mtp(&MtpSpec {
        out: roomy(lay(DType::F32, &[BATCH, 1, NH, DIM], &[ROW, 0, DIM, 1])),
        ..minimal
    })
    .unwrap();
    // T = 16, a dst wider than T, 2-D read slots with accepted counts, int64 indices.
    validate_mtp(&with(|s| {
        for l in [&mut s.x, &mut s.out, s.z.as_mut().unwrap()] {
            *l = contiguous(DType::BF16, &[BATCH, 16, NH, DIM]);
        }
        s.dt = lay(DType::BF16, &[BATCH, 16, NH, DIM], &[16 * NH, NH, 1, 0]);
        s.b = contiguous(DType::BF16, &[BATCH, 16, NG, DS]);
        s.c = s.b;
        s.state_batch_indices = Some(contiguous(DType::I64, &[BATCH, 5]));
        s.dst_state_batch_indices = Some(lay(DType::I64, &[BATCH, 20], &[1, BATCH]));
        s.num_accepted_tokens = Some(contiguous(DType::I64, &[BATCH]));
    }))
    .unwrap();
    // Broadcast inputs: x, B, C with a zero batch stride; out of one sequence with any batch
    // stride.
    validate_mtp(&with(|s| {
        s.x.strides[0] = 0;
        s.b.strides[0] = 0;
        s.c.strides[0] = 0;
    }))
    .unwrap();
    // Varlen: no token row at all, one row with a zero out stride, no buffer (cache_steps
    // given), the buffer's size(1) as cache_steps, the main write mode, SR off with a bf16
    // state.
    validate_mtp(&with_varlen(|s| {
        for l in [&mut s.x, &mut s.out, s.z.as_mut().unwrap()] {
            *l = contiguous(DType::BF16, &[0, NH, DIM]);
        }
        s.dt = lay(DType::BF16, &[0, NH, DIM], &[NH, 1, 0]);
        s.b = contiguous(DType::BF16, &[0, NG, DS]);
        s.c = s.b;
    }))
    .unwrap();
    validate_mtp(&with_varlen(|s| {
        for l in [&mut s.x, &mut s.out, s.z.as_mut().unwrap()] {
            *l = contiguous(DType::BF16, &[1, NH, DIM]);
        }
        s.out.strides[0] = 0;
        s.dt = lay(DType::BF16, &[1, NH, DIM], &[NH, 1, 0]);
        s.b = contiguous(DType::BF16, &[1, NG, DS]);
        s.c = s.b;
    }))
    .unwrap();
    validate_mtp(&with_varlen(|s| {
        s.intermediate_states_buffer = None;
        s.intermediate_state_indices = None;
        s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, T]));
    }))
    .unwrap();
    validate_mtp(&with_varlen(|s| s.cache_steps = None)).unwrap();
    validate_mtp(&with_varlen(|s| {
        s.intermediate_state_indices = None;
        s.state.dtype = DType::BF16;
        s.intermediate_states_buffer.as_mut().unwrap().dtype = DType::BF16;
        s.philox_rounds = 0;
    }))
    .unwrap();
    // Fixed length with a buffer longer than T; cache_steps without a buffer is not used.
    validate_mtp(&with(|s| {
        s.dst_state_batch_indices = None;
        s.intermediate_states_buffer = Some(contiguous(DType::F16, &[1, 8, NH, DIM, DS]));
    }))
    .unwrap();
    validate_mtp(&with(|s| s.cache_steps = Some(1))).unwrap();
    // Fused seeds with an offset multiple of 4.
    validate_mtp(&with(|s| {
        s.seed = Some(SeedSpec::FromGenerator { offset: 8 })
    }))
    .unwrap();
    validate_mtp(&with(|s| {
        s.seed = Some(SeedSpec::FromValues { seed: 3, offset: 4 })
    }))
    .unwrap();
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Invalid,
    Unsupported,
}
use Kind::{Invalid as I, Unsupported as U};

/// A malformed case: a change to a baseline, the error kind, the argument the error must name
/// and a piece of its message.
type Case = (fn(&mut MtpSpec), Kind, &'static str, &'static str);

fn check_cases(base: fn() -> MtpSpec, cases: &[Case]) {
    for (i, (change, kind, argument, needle)) in cases.iter().enumerate() {
        let mut spec = base();
        change(&mut spec);
        let (got_kind, got, message) = match validate_mtp(&spec) {
            Err(Error::InvalidArgument { argument, message }) => (I, argument, message),
            Err(Error::Unsupported { argument, message }) => (U, argument, message),
            other => panic!("case {i} ({argument}): expected an error, got {other:?}"),
        };
        assert_eq!((got_kind, got), (*kind, *argument), "case {i}: {message}");
        assert!(
            message.contains(needle),
            "case {i}: {message:?} lacks {needle:?}"
        );
    }
}

/// Sets every token tensor's T (fixed length) to `t`, contiguous.
fn set_t(s: &mut MtpSpec, t: usize) {
    for l in [&mut s.x, &mut s.out, s.z.as_mut().unwrap()] {
        *l = contiguous(DType::BF16, &[BATCH, t, NH, DIM]);
    }
    s.dt = lay(DType::BF16, &[BATCH, t, NH, DIM], &[t * NH, NH, 1, 0]);
    s.b = contiguous(DType::BF16, &[BATCH, t, NG, DS]);
    s.c = s.b;
    s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, t.max(1)]));
}

#[rustfmt::skip]
#[test]
fn tokens_and_forms() {
    check_cases(base, &[
        (|s| set_t(s, 0), I, "x", "1..=16, got 0"),
        (|s| set_t(s, 17), I, "x", "1..=16, got 17"),
        (|s| s.cu_seqlens = Some(contiguous(DType::I32, &[BATCH + 1])), I, "cu_seqlens",
            "got a 4-D x"),
        (|s| s.x = contiguous(DType::BF16, &[BATCH * T, NH, DIM]), I, "cu_seqlens",
            "needs cu_seqlens"),
        (|s| s.x = contiguous(DType::BF16, &[BATCH * T, ROW]), I, "x", "expected 4 dimensions"),
        (|s| s.x.shape[0] = 0, I, "x", "batch >= 1"),
    ]);
    check_cases(base_varlen, &[
        (|s| { s.cache_steps = Some(17); s.intermediate_states_buffer = None;
               s.intermediate_state_indices = None; }, I, "cache_steps", "got 17"),
        (|s| { s.cache_steps = Some(0); s.intermediate_states_buffer = None;
               s.intermediate_state_indices = None; }, I, "cache_steps", "got 0"),
        (|s| { s.cache_steps = None; s.intermediate_states_buffer = None;
               s.intermediate_state_indices = None; }, I, "cache_steps", "needs cache_steps"),
        (|s| s.cu_seqlens = Some(contiguous(DType::I32, &[1])), I, "cu_seqlens",
            "batch + 1 >= 2"),
        (|s| s.cu_seqlens = Some(contiguous(DType::F32, &[BATCH + 1])), I, "cu_seqlens",
            "I32 or I64, got F32"),
        (|s| s.cu_seqlens = Some(contiguous(DType::I32, &[BATCH + 1, 1])), I, "cu_seqlens",
            "expected 1 dimensions"),
        (|s| s.cu_seqlens.as_mut().unwrap().len = 2, I, "cu_seqlens", "buffer holds 2"),
        (|s| s.x = contiguous(DType::BF16, &[2, T, NH, DIM]), I, "cu_seqlens", "got a 4-D x"),
    ]);
}

#[rustfmt::skip]
#[test]
fn write_modes() {
    check_cases(base_varlen, &[
        (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, T])), I,
            "dst_state_batch_indices", "two write modes at once"),
        (|s| s.intermediate_states_buffer = None, I, "intermediate_state_indices",
            "without an intermediate_states_buffer"),
        (|s| s.cache_steps = Some(3), I, "cache_steps",
            "expected == intermediate_states_buffer.size(1) (4), got 3"),
        (|s| s.intermediate_states_buffer.as_mut().unwrap().dtype = DType::BF16, I,
            "intermediate_states_buffer", "the dtype of `state`"),
        (|s| s.intermediate_states_buffer =
                Some(contiguous(DType::F16, &[ENTRIES, T, NH, DIM * DS])), I,
            "intermediate_states_buffer", "expected 5 dimensions"),
        (|s| s.intermediate_states_buffer =
                Some(contiguous(DType::F16, &[ENTRIES, T, NH + 1, DIM, DS])), I,
            "intermediate_states_buffer", "expected size(2) == nheads (4), got 5"),
        (|s| s.intermediate_states_buffer.as_mut().unwrap().strides[0] += 8, I,
            "intermediate_states_buffer", "expected contiguous strides"),
        (|s| s.intermediate_states_buffer.as_mut().unwrap().len -= 1, I,
            "intermediate_states_buffer", "but the buffer holds"),
        (|s| s.intermediate_states_buffer =
                Some(contiguous(DType::F16, &[0, T, NH, DIM, DS])), I,
            "intermediate_states_buffer", "every dimension >= 1"),
        (|s| s.intermediate_state_indices = Some(contiguous(DType::I32, &[BATCH + 1])), I,
            "intermediate_state_indices", "expected size(0) == batch (2), got 3"),
        (|s| s.intermediate_state_indices = Some(contiguous(DType::I64, &[BATCH])), I,
            "intermediate_state_indices", "every index tensor has one dtype"),
    ]);
    check_cases(base, &[
        // A fixed-length buffer of fewer steps than T.
        (|s| { s.dst_state_batch_indices = None;
               s.intermediate_states_buffer = Some(contiguous(DType::F16, &[1, 3, NH, DIM, DS])); },
            I, "cache_steps", "expected >= tokens per sequence (4), got 3"),
        (|s| s.intermediate_state_indices = Some(contiguous(DType::I32, &[BATCH])), I,
            "intermediate_state_indices", "without an intermediate_states_buffer"),
    ]);
}

#[rustfmt::skip]
#[test]
fn index_tensors() {
    check_cases(base, &[
        (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, T - 1])), I,
            "dst_state_batch_indices", "narrower than the longest sequence"),
        (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH])), I,
            "dst_state_batch_indices", "expected a 2-D index"),
        (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, 0])), I,
            "dst_state_batch_indices", "every dimension >= 1"),
        (|s| s.dst_state_batch_indices = Some(contiguous(DType::I64, &[BATCH, T])), I,
            "dst_state_batch_indices", "expected dtype I32 (the dtype of `state_batch_indices`"),
        (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH + 1, T])), I,
            "dst_state_batch_indices", "expected size(0) == batch (2), got 3"),
        (|s| s.state_batch_indices.as_mut().unwrap().dtype = DType::F32, I,
            "state_batch_indices", "expected dtype I32 or I64, got F32"),
        (|s| s.state_batch_indices = Some(contiguous(DType::I32, &[BATCH, 2, 2])), I,
            "state_batch_indices", "(batch,) or (batch, W)"),
        (|s| s.state_batch_indices = Some(contiguous(DType::I32, &[BATCH + 1])), I,
            "state_batch_indices", "expected size(0) == batch (2), got 3"),
        (|s| s.state_batch_indices = Some(contiguous(DType::I32, &[BATCH, 0])), I,
            "state_batch_indices", "every dimension >= 1"),
        (|s| s.state_batch_indices.as_mut().unwrap().len = 1, I, "state_batch_indices",
            "but the buffer holds 1"),
        (|s| { s.state_batch_indices = None; s.state.shape[0] = 1; }, I, "state",
            "expected size(0) >= batch (2), got 1"),
        (|s| s.num_accepted_tokens = Some(contiguous(DType::I32, &[BATCH, 1])), I,
            "num_accepted_tokens", "expected 1 dimensions"),
        (|s| s.num_accepted_tokens = Some(contiguous(DType::I32, &[1])), I,
            "num_accepted_tokens", "expected size(0) == batch (2), got 1"),
        (|s| s.num_accepted_tokens = Some(contiguous(DType::F16, &[BATCH])), I,
            "num_accepted_tokens", "expected dtype I32 or I64, got F16"),
    ]);
}

#[rustfmt::skip]
#[test]
fn state_and_token_tensors() {
    check_cases(base, &[
        (|s| s.state.dtype = DType::I32, I, "state", "expected dtype F16, BF16 or F32, got I32"),
        (|s| s.state = lay(DType::F16, &[SLOTS, NH, DIM, 32], &[NH * DIM * 32, DIM * 32, 32, 1]),
            U, "state", "dstate in {64, 128, 256}, got 32"),
        (|s| s.state.strides[0] = NH * DIM * DS - 8, I, "state",
            "expected stride(0) >= nheads * dim * dstate (2048), got 2040"),
        (|s| s.state.strides[0] = NH * DIM * DS + 4, I, "state", "multiple of 8 elements"),
        (|s| s.state.strides[2] = DS + 8, I, "state", "expected stride(2) == dstate (64)"),
        (|s| s.x.dtype = DType::I64, I, "x", "expected dtype F16, BF16 or F32, got I64"),
        (|s| s.x.shape[2] = NH + 1, I, "x", "expected size(2) == nheads (4), got 5"),
        (|s| s.x.strides[3] = 2, I, "x", "expected stride(3) == 1 (1), got 2"),
        (|s| s.x.len -= 1, I, "x", "but the buffer holds"),
        (|s| s.out = contiguous(DType::BF16, &[BATCH, T - 1, NH, DIM]), I, "out",
            "expected size(1) == T (4), got 3"),
        (|s| s.out.dtype = DType::F16, I, "out", "the dtype of `x`"),
        (|s| s.out.strides[1] = ROW - 1, I, "out", "token rows do not overlap"),
        (|s| s.out = roomy(lay(DType::BF16, &[BATCH, T, NH, DIM], &[T * ROW - 1, ROW, DIM, 1])),
            I, "out", "expected stride(0) >= T * stride(1) (128)"),
        (|s| s.out = roomy(lay(DType::BF16, &[BATCH, T, NH, DIM], &[ROW, ROW * BATCH, DIM, 1])),
            I, "out", "rows of different sequences do not overlap"),
        (|s| s.z.as_mut().unwrap().dtype = DType::F32, I, "z", "the dtype of `x`"),
        (|s| s.z.as_mut().unwrap().strides[2] = DIM + 1, I, "z", "expected stride(2) == dim"),
        (|s| s.dt.strides[3] = 1, I, "dt", "expected stride(3) == 0 (0), got 1"),
        (|s| s.dt.strides[2] = 2, I, "dt", "expected stride(2) == 1 (1), got 2"),
        (|s| s.dt.shape[1] = T - 1, I, "dt", "expected size(1) == T (4), got 3"),
        (|s| s.dt.dtype = DType::I32, I, "dt", "got I32"),
        (|s| s.a.dtype = DType::BF16, I, "A", "expected dtype F32"),
        (|s| s.a.strides[1] = 1, I, "A", "expected stride(1) == 0"),
        (|s| s.d.as_mut().unwrap().strides[1] = 1, I, "D", "expected stride(1) == 0"),
        (|s| s.dt_bias.as_mut().unwrap().dtype = DType::F16, I, "dt_bias", "the dtype of `dt`"),
        (|s| s.b = contiguous(DType::BF16, &[BATCH, T, 3, DS]), I, "B",
            "ngroups dividing nheads (4), got 3"),
        (|s| s.b = roomy(lay(DType::BF16, &[BATCH, T, NG, DS], &[T * NG * DS, NG * DS + 4, DS, 1])),
            I, "B", "expected stride(1) to be a multiple of 8 elements"),
        (|s| s.c = roomy(lay(DType::BF16, &[BATCH, T, NG, DS], &[T * NG * DS + 2, NG * DS, DS, 1])),
            I, "C", "expected stride(0) to be a multiple of 8 elements"),
        (|s| s.c = contiguous(DType::BF16, &[BATCH, T, 1, DS]), I, "C",
            "expected size(2) == ngroups (that of `B`) (2), got 1"),
        (|s| s.c.dtype = DType::F32, I, "C", "the dtype of `x`"),
    ]);
    check_cases(base_varlen, &[
        (|s| s.out.strides[0] = ROW - 1, I, "out", "token rows do not overlap"),
        (|s| s.b = roomy(lay(DType::BF16, &[TOTAL, NG, DS], &[NG * DS + 1, DS, 1])), I, "B",
            "16-byte alignment"),
        (|s| s.dt = lay(DType::BF16, &[TOTAL, NH, DIM], &[NH, 0, 0]), I, "dt",
            "expected stride(1) == 1"),
        (|s| s.z = Some(contiguous(DType::BF16, &[TOTAL + 1, NH, DIM])), I, "z",
            "expected size(0) == total_tokens (6), got 7"),
    ]);
}

#[rustfmt::skip]
#[test]
fn stochastic_rounding_and_limits() {
    check_cases(base, &[
        (|s| s.philox_rounds = 11, I, "philox_rounds", "expected 0..=10, got 11"),
        (|s| s.state.dtype = DType::BF16, U, "philox_rounds", "needs an F16 state"),
        (|s| s.seed = None, I, "rand_seed", "needs a seed, got none"),
        (|s| s.seed = Some(SeedSpec::Pointer(contiguous(DType::I32, &[1]))), I, "rand_seed",
            "expected dtype I64"),
        (|s| s.seed = Some(SeedSpec::Pointer(contiguous(DType::I64, &[2]))), I, "rand_seed",
            "expected one element"),
        (|s| s.seed = Some(SeedSpec::FromGenerator { offset: 6 }), I, "seed_offset",
            "multiple of 4, got 6"),
        (|s| s.seed = Some(SeedSpec::FromValues { seed: 1, offset: 2 }), I, "seed_offset",
            "multiple of 4, got 2"),
        // Sizes past the C limits, caught by the C check that validate_mtp ends with.
        (|s| { s.state = lay(DType::F16, &[SLOTS, NH, 1 << 31, DS], &[NH << 37, 1 << 37, DS, 1]);
               s.a.shape[1] = 1 << 31;
               for l in [s.d.as_mut().unwrap(), s.dt_bias.as_mut().unwrap()] { l.shape[1] = 1 << 31; }
               for l in [&mut s.x, &mut s.out, s.z.as_mut().unwrap()] {
                   *l = contiguous(DType::BF16, &[BATCH, T, NH, 1 << 31]);
               }
               s.dt = lay(DType::BF16, &[BATCH, T, NH, 1 << 31], &[T * NH, NH, 1, 0]); },
            I, "dim", "dim: expected 1..=1073741824"),
        (|s| { s.x.strides[0] = 1 << 61; s.x.len = (1 << 61) + 1024; }, U, "x",
            "extent above 2^60 bytes"),
        (|s| { s.state.strides[0] = 1 << 60; s.state.len = 1 << 62; }, U, "state",
            "extent above 2^60 bytes"),
    ]);
    // The grid bound: batch * nheads * max(4, ceil(dim / 64)) <= i32::MAX.
    let big = with(|s| {
        let batch = 1 << 28;
        for l in [&mut s.x, &mut s.out, s.z.as_mut().unwrap()] {
            *l = contiguous(DType::BF16, &[batch, T, NH, DIM]);
        }
        s.dt = lay(DType::BF16, &[batch, T, NH, DIM], &[T * NH, NH, 1, 0]);
        s.b = contiguous(DType::BF16, &[batch, T, NG, DS]);
        s.c = s.b;
        s.state_batch_indices = Some(contiguous(DType::I32, &[batch]));
        s.dst_state_batch_indices = Some(contiguous(DType::I32, &[batch, T]));
    });
    match validate_mtp(&big) {
        Err(Error::Unsupported { message, .. }) => assert!(message.contains("grid size"), "{message}"),
        other => panic!("expected the grid bound, got {other:?}"),
    }
    // A seed with philox_rounds == 0 is ignored, even a malformed one.
    validate_mtp(&with(|s| {
        s.philox_rounds = 0;
        s.state.dtype = DType::F32;
        s.seed = Some(SeedSpec::Pointer(contiguous(DType::I32, &[3])));
    }))
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// The C check on parameter blocks
// ---------------------------------------------------------------------------------------------

/// The C block of a valid spec with placeholder pointers (what `validate_mtp` passes to C).
fn params_of(spec: &MtpSpec) -> sys::mamba_ssu_mtp_params {
    let problem = validate_mtp(spec).unwrap();
    let p = fill_params(spec, &problem, -1, true, true, SrRule::V072).unwrap();
    spec_pointers(p, spec)
}

/// `p` with the launcher's placeholder pointers, the seed pointer only for the seed source the
/// spec uses.
fn spec_pointers(p: sys::mamba_ssu_mtp_params, spec: &MtpSpec) -> sys::mamba_ssu_mtp_params {
    let mut p = super::launch::with_placeholders(p, spec);
    if !matches!(spec.seed, Some(SeedSpec::Pointer(_))) {
        p.rand_seed = std::ptr::null();
    }
    if !matches!(spec.seed, Some(SeedSpec::FromGenerator { .. })) {
        p.generator_state = std::ptr::null();
    }
    p
}

fn c_check(p: &sys::mamba_ssu_mtp_params) -> std::result::Result<(), (i32, String)> {
    // SAFETY: the check reads `p` only (pointer values included, never the memory behind them).
    let status = unsafe { sys::mamba_ssu_selective_state_update_mtp_check(p) };
    match ffi::check(status) {
        Ok(()) => Ok(()),
        Err(Error::Launcher { status, detail, .. }) => Err((status, detail)),
        Err(e) => panic!("{e}"),
    }
}

/// A change to a valid C block, the status and the start of the detail.
type CCase = (fn(&mut sys::mamba_ssu_mtp_params), u32, &'static str);

fn check_c_cases(spec: &MtpSpec, cases: &[CCase]) {
    let good = params_of(spec);
    assert_eq!(c_check(&good), Ok(()));
    for (i, (change, status, needle)) in cases.iter().enumerate() {
        let mut p = good;
        change(&mut p);
        match c_check(&p) {
            Err((s, detail)) => {
                assert_eq!(s, *status as i32, "case {i}: {detail}");
                assert!(
                    detail.starts_with(needle),
                    "case {i}: {detail:?} lacks {needle:?}"
                );
            }
            Ok(()) => panic!("case {i} ({needle}): accepted"),
        }
    }
}

const INV: u32 = sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT;
const UNS: u32 = sys::MAMBA_SSU_ERROR_UNSUPPORTED;
const VAL: u32 = sys::MAMBA_SSU_ERROR_INVALID_VALUE;

fn bump<T>(p: *const T, bytes: usize) -> *const T {
    (p as usize + bytes) as *const T
}

#[rustfmt::skip]
#[test]
fn c_check_rejects_blocks_the_rust_api_cannot_build() {
    // SAFETY: a null block is one of the documented inputs.
    assert_eq!(unsafe { sys::mamba_ssu_selective_state_update_mtp_check(std::ptr::null()) },
               INV as i32);
    check_c_cases(&base(), &[
        (|p| p.ntokens = 17, INV, "ntokens: expected 1..=16, got 17"),
        (|p| p.ntokens = 0, INV, "ntokens: expected 1..=16, got 0"),
        (|p| p.batch = 0, INV, "batch: expected >= 1"),
        (|p| p.nheads = 0, INV, "nheads"),
        (|p| p.dim = (1 << 30) + 1, INV, "dim: expected 1..=1073741824"),
        (|p| p.dstate = 96, UNS, "dstate: expected 64, 128 or 256, got 96"),
        (|p| p.ngroups = 3, INV, "ngroups: expected a divisor of nheads (4), got 3"),
        (|p| p.state_cache_size = 0, INV, "state_cache_size"),
        (|p| { p.batch = 1 << 28; p.nheads = 2; p.ngroups = 1; }, UNS,
            "batch: batch * nheads * max(4, ceil(dim / 64))"),
        (|p| p.state_dtype = 7, INV, "state_dtype"),
        (|p| p.input_dtype = sys::MAMBA_SSU_I32 as i32, INV, "input_dtype"),
        (|p| p.weight_dtype = -1, INV, "weight_dtype"),
        (|p| p.index_dtype = sys::MAMBA_SSU_F32 as i32, INV, "index_dtype"),
        (|p| p.sr_rule = 2, INV, "sr_rule: expected V072 (0) or V074 (1), got 2"),
        (|p| p.seed_source = 3, INV, "seed_source"),
        (|p| p.philox_rounds = -1, INV, "philox_rounds: expected 0..=10"),
        (|p| p.state_dtype = sys::MAMBA_SSU_BF16 as i32, UNS, "philox_rounds"),
        (|p| p.state = bump(p.state, 8) as *mut _, INV, "state: expected a 16-byte aligned"),
        (|p| p.x = bump(p.x, 1), INV, "x: expected a 2-byte aligned"),
        (|p| p.x = std::ptr::null(), INV, "x: null pointer"),
        (|p| p.out = bump(p.out, 1) as *mut _, INV, "out: expected a 2-byte aligned"),
        (|p| p.B = bump(p.B, 8), INV, "B: expected a 16-byte aligned"),
        (|p| p.C = bump(p.C, 2), INV, "C: expected a 16-byte aligned"),
        (|p| p.A = bump(p.A, 2), INV, "A: expected a 4-byte aligned"),
        (|p| p.dt = bump(p.dt, 1), INV, "dt: expected a 2-byte aligned"),
        (|p| p.z = bump(p.z, 1), INV, "z: expected a 2-byte aligned"),
        (|p| p.D = bump(p.D, 1), INV, "D: expected a 2-byte aligned"),
        (|p| p.state_batch_indices = bump(p.state_batch_indices, 2), INV,
            "state_batch_indices: expected a 4-byte aligned"),
        (|p| p.dst_state_batch_indices = bump(p.dst_state_batch_indices, 2), INV,
            "dst_state_batch_indices: expected a 4-byte aligned"),
        (|p| p.rand_seed = bump(p.rand_seed, 4), INV, "rand_seed: expected a 8-byte aligned"),
        (|p| p.rand_seed = std::ptr::null(), INV, "rand_seed: null pointer"),
        (|p| { p.seed_source = 1; p.seed_offset = 4; }, INV, "generator_state: null pointer"),
        (|p| { p.seed_source = 2; p.seed_offset = 6; }, INV, "seed_offset: expected a multiple of 4"),
        (|p| { p.generator_seed_ptr = 0x2000_0000usize as *const i64;
               p.generator_state = 0x2000_1000usize as *const _; }, INV,
            "generator_seed_ptr/generator_offset_ptr: not allowed together"),
        (|p| p.generator_seed_ptr = 0x2000_0000usize as *const i64, INV,
            "generator_offset_ptr: null pointer"),
        (|p| { p.generator_seed_ptr = 0x2000_0004usize as *const i64;
               p.generator_offset_ptr = 0x2000_0008usize as *const i64; }, INV,
            "generator_seed_ptr: expected a 8-byte aligned"),
        (|p| p.seed_next = 0x2000_0004usize as *mut i64, INV, "seed_next: expected a 8-byte"),
        (|p| { p.seed_next = 0x2000_0000usize as *mut i64; p.seed_offset = 6; }, INV,
            "seed_offset: expected a multiple of 4 (seed_next is set)"),
        (|p| p.state_batch_indices_stride = -1, INV, "state_batch_indices_stride: expected >= 0"),
        (|p| p.state_batch_indices_cols = -1, INV, "state_batch_indices_cols: expected >= 0"),
        (|p| p.dst_state_batch_indices_cols = 0, INV,
            "dst_state_batch_indices: expected a 2-D index"),
        (|p| p.dst_state_batch_indices_cols = 3, INV,
            "dst_state_batch_indices: a 2-D index narrower than the longest sequence"),
        (|p| p.dst_state_batch_indices_stride_col = -1, INV,
            "dst_state_batch_indices_stride_col: expected >= 0"),
        (|p| p.num_accepted_tokens = bump(p.state_batch_indices, 2), INV,
            "num_accepted_tokens: expected a 4-byte aligned"),
        (|p| p.intermediate_states = 0x3000_0000usize as *mut _, VAL,
            "dst_state_batch_indices: two write modes at once"),
        (|p| p.intermediate_state_indices = 0x3000_0000usize as *const _, INV,
            "intermediate_state_indices: given without intermediate_states"),
        (|p| p.state_stride_batch = 2048 - 8, INV, "state_stride_batch: expected >= 2048"),
        (|p| p.state_stride_batch = 2048 + 4, INV, "state_stride_batch: expected a multiple of 8"),
        (|p| p.x_stride_token = -1, INV, "x_stride_token: expected >= 0"),
        (|p| p.x_stride_batch = -1, INV, "x_stride_batch: expected >= 0"),
        (|p| p.dt_stride_token = -1, INV, "dt_stride_token: expected >= 0"),
        (|p| p.z_stride_batch = -1, INV, "z_stride_batch: expected >= 0"),
        (|p| p.B_stride_token = 4, INV, "B_stride_token: expected a multiple of 8"),
        (|p| p.C_stride_batch = 12, INV, "C_stride_batch: expected a multiple of 8"),
        (|p| p.out_stride_token = 31, INV, "out_stride_token: expected >= nheads * dim (32)"),
        (|p| p.out_stride_batch = 127, INV,
            "out_stride_batch: expected >= ntokens * out_stride_token (128)"),
        (|p| p.out_stride_token = i64::MAX / 2, INV,
            "out_stride_batch: expected >= ntokens * out_stride_token"),
        (|p| p.x_stride_batch = 1 << 61, UNS, "x: extent above 2^60 bytes"),
        (|p| p.state_batch_indices_stride = 1 << 59, UNS,
            "state_batch_indices: extent above 2^60 bytes"),
        (|p| { p.out_stride_token = 1 << 58; p.out_stride_batch = 1 << 61; }, UNS,
            "out: extent above 2^60 bytes"),
        (|p| p.state_stride_batch = i64::MAX - 7, UNS, "state: extent above 2^60 bytes"),
    ]);
    check_c_cases(&base_varlen(), &[
        (|p| p.total_tokens = -1, INV, "total_tokens: expected >= 0, got -1"),
        (|p| p.cache_steps = T as i64 - 1, INV, "cache_steps: expected >= ntokens (4), got 3"),
        (|p| p.intermediate_cache_size = 0, INV, "intermediate_cache_size: expected >= 1"),
        (|p| p.intermediate_states = bump(p.intermediate_states, 8) as *mut _, INV,
            "intermediate_states: expected a 16-byte aligned"),
        (|p| p.cu_seqlens = bump(p.cu_seqlens, 2), INV, "cu_seqlens: expected a 4-byte aligned"),
        (|p| p.cu_seqlens_stride = -1, INV, "cu_seqlens_stride: expected >= 0"),
        (|p| p.intermediate_state_indices_stride = -2, INV,
            "intermediate_state_indices_stride: expected >= 0"),
        (|p| p.state_batch_indices_stride_col = -1, INV,
            "state_batch_indices_stride_col: expected >= 0"),
        (|p| p.out_stride_token = 0, INV, "out_stride_token: expected >= nheads * dim"),
        (|p| p.intermediate_cache_size = i64::MAX, UNS, "intermediate_states: extent above 2^60"),
        (|p| p.cu_seqlens_stride = 1 << 60, UNS, "cu_seqlens: extent above 2^60"),
        (|p| p.index_dtype = 9, INV, "index_dtype"),
    ]);
    // Varlen reads no batch stride; one token row needs no token stride; cols 0 is 1-D.
    let ok = |f: fn(&mut sys::mamba_ssu_mtp_params), spec: &MtpSpec| {
        let mut p = params_of(spec);
        f(&mut p);
        assert_eq!(c_check(&p), Ok(()));
    };
    ok(|p| { p.x_stride_batch = -5; p.B_stride_batch = 3; p.out_stride_batch = -1; }, &base_varlen());
    ok(|p| { p.total_tokens = 1; p.out_stride_token = 0; }, &base_varlen());
    ok(|p| p.total_tokens = 0, &base_varlen());
    ok(|p| { p.state_batch_indices_cols = 0; p.state_batch_indices_stride_col = -3; }, &base_varlen());
    ok(|p| { p.seed_source = 2; p.seed_offset = 8; p.rand_seed = std::ptr::null(); }, &base());
    ok(|p| p.sr_rule = sys::MAMBA_SSU_SR_V074 as i32, &base());
    ok(|p| { p.generator_seed_ptr = 0x2000_0000usize as *const i64;
             p.generator_offset_ptr = 0x2000_0008usize as *const i64;
             p.seed_source = 1; p.seed_offset = 4; }, &base());
}

#[test]
fn params_carry_the_spec() {
    let spec = base();
    let problem = validate_mtp(&spec).unwrap();
    let p = fill_params(&spec, &problem, 7, true, false, SrRule::V074).unwrap();
    assert_eq!(
        (p.batch, p.ntokens, p.nheads, p.dim, p.dstate, p.ngroups),
        (2, 4, 4, 8, 64, 2)
    );
    assert_eq!(
        (p.state_cache_size, p.state_stride_batch),
        (3, SLOT_STRIDE as i64)
    );
    assert_eq!(
        (p.x_stride_batch, p.x_stride_token),
        ((T * ROW) as i64, ROW as i64)
    );
    assert_eq!(
        (p.dt_stride_batch, p.dt_stride_token),
        ((T * NH) as i64, NH as i64)
    );
    assert_eq!(
        (p.B_stride_batch, p.B_stride_token),
        ((T * NG * DS) as i64, (NG * DS) as i64)
    );
    assert_eq!(
        (p.state_batch_indices_stride, p.state_batch_indices_cols),
        (1, 0)
    );
    assert_eq!(
        (
            p.dst_state_batch_indices_stride,
            p.dst_state_batch_indices_stride_col,
            p.dst_state_batch_indices_cols
        ),
        (T as i64, 1, T as i64)
    );
    assert_eq!((p.pad_slot_id, p.dt_softplus, p.update_state), (7, 1, 0));
    assert_eq!(
        (p.philox_rounds, p.sr_rule),
        (10, sys::MAMBA_SSU_SR_V074 as i32)
    );
    assert_eq!((p.cache_steps, p.intermediate_cache_size), (0, 0));

    let spec = with_varlen(|s| {
        s.seed = Some(SeedSpec::FromValues {
            seed: 99,
            offset: 12,
        })
    });
    let problem = validate_mtp(&spec).unwrap();
    let p = fill_params(&spec, &problem, -1, false, true, SrRule::V072).unwrap();
    assert_eq!((p.batch, p.ntokens, p.total_tokens), (2, 4, TOTAL as i64));
    assert_eq!((p.x_stride_batch, p.x_stride_token), (0, ROW as i64));
    assert_eq!((p.out_stride_batch, p.out_stride_token), (0, ROW as i64));
    assert_eq!((p.B_stride_batch, p.B_stride_token), (0, (NG * DS) as i64));
    assert_eq!(
        (
            p.state_batch_indices_stride,
            p.state_batch_indices_stride_col,
            p.state_batch_indices_cols
        ),
        (3, 1, 3)
    );
    assert_eq!(
        (p.cache_steps, p.intermediate_cache_size),
        (T as i64, ENTRIES as i64)
    );
    assert_eq!((p.cu_seqlens_stride, p.num_accepted_tokens_stride), (1, 1));
    assert_eq!(p.seed_source, sys::MAMBA_SSU_SEED_FROM_VALUES as i32);
    assert_eq!((p.generator_seed, p.seed_offset), (99, 12));
}

#[test]
fn launch_plan_of_a_call() {
    assert!(matches!(
        mtp_launch_plan(&base(), 0),
        Err(Error::InvalidArgument {
            argument: "num_sms",
            ..
        })
    ));
    // An invalid call fails validation before the planner.
    assert!(matches!(
        mtp_launch_plan(&with(|s| s.philox_rounds = 11), 132),
        Err(Error::InvalidArgument {
            argument: "philox_rounds",
            ..
        })
    ));
    // A valid one gets a plan, or is reported unsupported while no kernel is built.
    for spec in [base(), base_varlen()] {
        match mtp_launch_plan(&spec, 132) {
            Ok(plan) => {
                assert!(plan.grid_blocks >= (BATCH * NH) as u64, "{plan:?}");
                assert_eq!(
                    plan.threads_per_block,
                    32 * plan.warps_per_block,
                    "{plan:?}"
                );
                assert_eq!(plan.num_sms, 132);
            }
            Err(Error::Unsupported { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Property test: one contract behind both front doors
// ---------------------------------------------------------------------------------------------

/// A small deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn pick<V: Copy>(&mut self, v: &[V]) -> V {
        v[(self.next() % v.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The C parameter block that carries `spec` (no validation: what the C ABI receives when a
/// caller passes the same sizes, dtypes, strides and flags), with placeholder pointers; None
/// where the block cannot express the call (no cache_steps for a varlen call, a cache_steps
/// other than the buffer's, index tensors of different dtypes).
fn spec_params(spec: &MtpSpec) -> Option<sys::mamba_ssu_mtp_params> {
    let varlen = spec.cu_seqlens.is_some();
    let buf = spec.intermediate_states_buffer;
    if let (Some(b), Some(cs)) = (buf, spec.cache_steps) {
        if b.shape()[1] != cs {
            return None;
        }
    }
    let indices = [
        spec.state_batch_indices,
        spec.dst_state_batch_indices,
        spec.num_accepted_tokens,
        spec.cu_seqlens,
        spec.intermediate_state_indices,
    ];
    let mut dtypes = indices.iter().flatten().map(|l| l.dtype());
    let index_dtype = dtypes.next().unwrap_or(DType::I32);
    if dtypes.any(|d| d != index_dtype) {
        return None;
    }
    let ntokens = if varlen {
        spec.cache_steps.or(buf.map(|b| b.shape()[1]))?
    } else {
        spec.x.shape()[1]
    };
    let i = |v: usize| v as i64;
    let tok = |l: &TensorLayout| {
        if varlen {
            (0, i(l.strides()[0]))
        } else {
            (i(l.strides()[0]), i(l.strides()[1]))
        }
    };
    let (x_sb, x_st) = tok(&spec.x);
    let (dt_sb, dt_st) = tok(&spec.dt);
    let (b_sb, b_st) = tok(&spec.b);
    let (c_sb, c_st) = tok(&spec.c);
    let (z_sb, z_st) = spec.z.as_ref().map_or((0, 0), tok);
    let (o_sb, o_st) = tok(&spec.out);
    let lead = if varlen { 1 } else { 2 };
    let s0 = |l: &Option<TensorLayout>| l.map_or(0, |l| i(l.strides()[0]));
    let col = |l: &Option<TensorLayout>| match l {
        Some(l) if l.rank() == 2 => (i(l.strides()[1]), i(l.shape()[1])),
        _ => (0, 0),
    };
    let sr = spec.philox_rounds > 0;
    let (seed_source, seed_offset, generator_seed) = match spec.seed {
        Some(SeedSpec::FromGenerator { offset }) if sr => {
            (sys::MAMBA_SSU_SEED_FROM_GENERATOR, offset, 0)
        }
        Some(SeedSpec::FromValues { seed, offset }) if sr => {
            (sys::MAMBA_SSU_SEED_FROM_VALUES, offset, seed)
        }
        _ => (sys::MAMBA_SSU_SEED_POINTER, 0, 0),
    };
    let p = sys::mamba_ssu_mtp_params {
        batch: if varlen {
            i(spec.cu_seqlens.unwrap().shape()[0]) - 1
        } else {
            i(spec.x.shape()[0])
        },
        ntokens: i(ntokens),
        total_tokens: if varlen { i(spec.x.shape()[0]) } else { 0 },
        nheads: i(spec.state.shape()[1]),
        dim: i(spec.state.shape()[2]),
        dstate: i(spec.state.shape()[3]),
        ngroups: i(spec.b.shape()[lead]),
        state_cache_size: i(spec.state.shape()[0]),
        cache_steps: buf.map_or(0, |b| i(b.shape()[1])),
        intermediate_cache_size: buf.map_or(0, |b| i(b.shape()[0])),
        state_stride_batch: i(spec.state.strides()[0]),
        x_stride_batch: x_sb,
        x_stride_token: x_st,
        dt_stride_batch: dt_sb,
        dt_stride_token: dt_st,
        B_stride_batch: b_sb,
        B_stride_token: b_st,
        C_stride_batch: c_sb,
        C_stride_token: c_st,
        z_stride_batch: z_sb,
        z_stride_token: z_st,
        out_stride_batch: o_sb,
        out_stride_token: o_st,
        state_batch_indices_stride: s0(&spec.state_batch_indices),
        state_batch_indices_stride_col: col(&spec.state_batch_indices).0,
        state_batch_indices_cols: col(&spec.state_batch_indices).1,
        dst_state_batch_indices_stride: s0(&spec.dst_state_batch_indices),
        dst_state_batch_indices_stride_col: col(&spec.dst_state_batch_indices).0,
        dst_state_batch_indices_cols: col(&spec.dst_state_batch_indices).1,
        num_accepted_tokens_stride: s0(&spec.num_accepted_tokens),
        cu_seqlens_stride: s0(&spec.cu_seqlens),
        intermediate_state_indices_stride: s0(&spec.intermediate_state_indices),
        pad_slot_id: -1,
        state_dtype: spec.state.dtype().ffi(),
        input_dtype: spec.x.dtype().ffi(),
        weight_dtype: spec.dt.dtype().ffi(),
        index_dtype: index_dtype.ffi(),
        dt_softplus: 1,
        update_state: 1,
        philox_rounds: spec.philox_rounds as i32,
        sr_rule: 0,
        seed_source: seed_source as i32,
        seed_offset,
        generator_seed,
        num_sms: 132,
        ..Default::default()
    };
    Some(spec_pointers(p, spec))
}

/// A random call the C parameter block can express (every tensor's shape follows from the
/// common sizes, inner strides canonical), fixed length or varlen, then at most one mutation
/// of a field the block carries: a size to a limit or an overflowing value, a stride near its
/// bound, a dtype, an optional tensor, an index width, a write mode, the rounds or the seed.
fn random_spec(rng: &mut Rng) -> Option<MtpSpec> {
    let f = [DType::F16, DType::BF16, DType::F32];
    let varlen = rng.chance(40);
    let mut batch = rng.pick(&[1usize, 2, 3, 5, 64, 512]);
    let mut t = rng.pick(&[1usize, 2, 4, 7, 16]);
    let mut total = rng.pick(&[0usize, 1, 2, 9, 100]);
    let mut nheads = rng.pick(&[1usize, 2, 4, 6, 64, 8192]);
    let mut dim = rng.pick(&[1usize, 2, 7, 8, 64, 100]);
    let mut dstate = rng.pick(&[64usize, 128, 256]);
    let mut ngroups = rng.pick(&[1usize, 2]).min(nheads);
    if nheads % ngroups != 0 {
        ngroups = 1;
    }
    let mut rounds = rng.pick(&[0u32, 5, 10]);
    let mut state_dtype = if rounds > 0 { DType::F16 } else { rng.pick(&f) };
    let mut input = rng.pick(&f);
    let mut weight = rng.pick(&f);
    let mut idx_dtype = rng.pick(&[DType::I32, DType::I64]);
    let mut sbi_width = rng.pick(&[0usize, 1, 4]);
    let mut with_sbi = rng.chance(70);
    let mut with_nat = rng.chance(30);
    let mut mode = rng.next() % 3; // 0 main, 1 dst, 2 buffer
    let mut with_isi = mode == 2 && rng.chance(50);
    let mut slots = batch + rng.pick(&[0usize, 1, 7]);
    let mut entries = rng.pick(&[1usize, 3]);
    let mut extra_steps = rng.pick(&[0usize, 0, 3]);
    let mut dst_width = t + rng.pick(&[0usize, 0, 2]);
    let mut seed = match rng.next() % 3 {
        0 => Some(SeedSpec::FromGenerator {
            offset: 4 * (rng.next() % 1000),
        }),
        1 => Some(SeedSpec::FromValues {
            seed: rng.next(),
            offset: 8,
        }),
        _ => Some(SeedSpec::Pointer(contiguous(DType::I64, &[1]))),
    };
    let (mut with_d, mut with_z, mut with_bias) = (rng.chance(70), rng.chance(50), rng.chance(70));
    let mutation = rng.next() % 36;
    match mutation {
        0 => batch = rng.pick(&[0, 1 << 20, (1 << 29) - 1, 1 << 29, 1 << 40]),
        1 => nheads = rng.pick(&[1 << 20, 1 << 29, 3 << 30]),
        2 => dim = rng.pick(&[1 << 20, 1 << 30, (1 << 30) + 1, 1 << 40]),
        3 => dstate = rng.pick(&[16, 32, 96, 512]),
        4 => ngroups = rng.pick(&[3, nheads + 1, 0]),
        5 => slots = rng.pick(&[batch.saturating_sub(1), 0, 1 << 40]),
        6 => state_dtype = rng.pick(&[DType::I32, DType::I64, DType::BF16, DType::F32]),
        7 => input = rng.pick(&[DType::I32, DType::I64]),
        8 => weight = rng.pick(&[DType::I32, DType::I64]),
        9 => idx_dtype = rng.pick(&[DType::F32, DType::F16]),
        10 => rounds = rng.pick(&[1, 2, 9, 11, 64]),
        11 => {
            seed = rng.pick(&[
                None,
                Some(SeedSpec::FromGenerator { offset: 6 }),
                Some(SeedSpec::FromValues { seed: 1, offset: 2 }),
            ])
        }
        12 => (with_sbi, slots) = (false, batch.saturating_sub(1).max(1)),
        13 => t = rng.pick(&[0, 15, 16, 17, 64]),
        14 => dst_width = rng.pick(&[0, t.saturating_sub(1), t + 9]),
        15 => (mode, with_isi) = (rng.pick(&[0, 1]), true),
        16 => mode = 3,                 // buffer and dst at once
        17 => extra_steps = usize::MAX, // a buffer one step short
        18 => entries = rng.pick(&[1 << 40, 1 << 50]),
        19 => total = rng.pick(&[0, 1, 1 << 40]),
        20 => sbi_width = rng.pick(&[2, 16]),
        21 => {
            (with_d, with_z, with_bias, with_nat) = (
                rng.chance(50),
                rng.chance(50),
                rng.chance(50),
                rng.chance(50),
            )
        }
        _ => {}
    }
    let bytes = |d: DType| match d {
        DType::F32 | DType::I32 => 4,
        DType::I64 => 8,
        _ => 2,
    };
    let align = |d: DType| 16 / bytes(d);
    let up = |v: usize, a: usize| v.div_ceil(a).checked_mul(a);
    let head = dim.checked_mul(dstate)?;
    let slot = up(nheads.checked_mul(head)?, align(state_dtype))?;
    let row = nheads.checked_mul(dim)?;
    let bcrow = up(ngroups.checked_mul(dstate)?, align(input))?;
    // Token strides (elements): x, out, z rows; B, C rows; dt rows.
    let (mut xs, mut os, mut zs, mut bs, mut dts) = (row, row, row, bcrow, nheads);
    let (mut xb, mut ob, mut bb, mut ss) = (0usize, 0usize, 0usize, slot);
    if rng.chance(20) {
        ss = slot + 64;
    }
    match mutation {
        22 => xs = rng.pick(&[0, row + 1, 1 << 62]),
        23 => os = rng.pick(&[0, row.saturating_sub(1), row + 1, 1 << 40]),
        24 => zs = rng.pick(&[0, row + 3]),
        25 => bs = rng.pick(&[0, bcrow + 1, bcrow + align(input), 1 << 62]),
        26 => dts = rng.pick(&[0, 1 << 62]),
        27 => ss = rng.pick(&[slot.saturating_sub(1), slot + 1, 1 << 62]),
        28 => ob = rng.pick(&[1, 2]), // the batch stride of out below a whole sequence
        29 => xb = 1 << 61,
        30 => bb = rng.pick(&[1, 1 << 62]),
        _ => {}
    }
    if varlen && extra_steps != usize::MAX {
        // Varlen T is the buffer's steps: more than T would be a second violation.
        extra_steps = 0;
    }
    let steps = if extra_steps == usize::MAX {
        t.checked_sub(1)?
    } else {
        t + extra_steps
    };
    // Leading dimensions and strides of the token tensors.
    let lead = |stride: usize, bstride_extra: usize| -> (Vec<usize>, Vec<usize>) {
        if varlen {
            (vec![total], vec![stride])
        } else {
            let seq = t.max(1).saturating_mul(stride);
            let b = match bstride_extra {
                0 => seq,
                1 => seq.saturating_sub(1),
                2 => stride,
                e => e,
            };
            (vec![batch, t], vec![b, stride])
        }
    };
    let token =
        |dtype: DType, stride: usize, extra: usize, inner: [usize; 2], inner_s: [usize; 2]| {
            let (mut shape, mut strides) = lead(stride, extra);
            shape.extend_from_slice(&inner);
            strides.extend_from_slice(&inner_s);
            try_lay(dtype, &shape, &strides)
        };
    let index = |shape: &[usize]| -> Option<TensorLayout> {
        try_lay(
            idx_dtype,
            shape,
            &if shape.len() == 2 {
                vec![shape[1], 1]
            } else {
                vec![1]
            },
        )
    };
    let bc_extra = if bb == 0 { 0 } else { bb };
    let with_buffer = mode >= 2;
    let with_dst = mode == 1 || mode == 3;
    let spec = MtpSpec {
        state: try_lay(
            state_dtype,
            &[slots, nheads, dim, dstate],
            &[ss, head, dstate, 1],
        )?,
        x: token(
            input,
            xs,
            if xb == 0 { 0 } else { xb },
            [nheads, dim],
            [dim, 1],
        )?,
        dt: token(weight, dts, 0, [nheads, dim], [1, 0])?,
        a: try_lay(DType::F32, &[nheads, dim, dstate], &[1, 0, 0])?,
        b: token(input, bs, bc_extra, [ngroups, dstate], [dstate, 1])?,
        c: token(input, bcrow, 0, [ngroups, dstate], [dstate, 1])?,
        d: if with_d {
            Some(try_lay(weight, &[nheads, dim], &[1, 0])?)
        } else {
            None
        },
        z: if with_z {
            Some(token(input, zs, 0, [nheads, dim], [dim, 1])?)
        } else {
            None
        },
        dt_bias: if with_bias {
            Some(try_lay(weight, &[nheads, dim], &[1, 0])?)
        } else {
            None
        },
        state_batch_indices: if with_sbi {
            Some(if sbi_width == 0 {
                index(&[batch])?
            } else {
                index(&[batch, sbi_width])?
            })
        } else {
            None
        },
        dst_state_batch_indices: if with_dst {
            Some(index(&[batch, dst_width])?)
        } else {
            None
        },
        num_accepted_tokens: if with_nat {
            Some(index(&[batch])?)
        } else {
            None
        },
        cu_seqlens: if varlen {
            Some(index(&[batch + 1])?)
        } else {
            None
        },
        intermediate_states_buffer: if with_buffer {
            let shape = [entries, steps, nheads, dim, dstate];
            let n = shape.iter().try_fold(1usize, |a, &v| a.checked_mul(v))?;
            Some(TensorLayout::contiguous(state_dtype, &shape, n).ok()?)
        } else {
            None
        },
        intermediate_state_indices: if with_isi {
            Some(index(&[batch])?)
        } else {
            None
        },
        cache_steps: if varlen {
            Some(if with_buffer { steps } else { t })
        } else {
            None
        },
        out: token(
            input,
            os,
            if ob == 0 { 0 } else { ob },
            [nheads, dim],
            [dim, 1],
        )?,
        philox_rounds: rounds,
        seed,
    };
    Some(spec)
}

/// For random calls both front doors can express — valid ones and ones mutated in every field
/// the C block carries, with sizes near the limits and overflowing products — Rust's
/// `validate_mtp` and the C ABI's `mamba_ssu_selective_state_update_mtp_check` accept exactly
/// the same calls, and reject the others with the same kind of error.
#[test]
fn rust_validate_mtp_and_the_c_check_accept_the_same_calls() {
    let mut rng = Rng(0x4D54_5000_C0DE);
    let (mut cases, mut accepted) = (0usize, 0usize);
    let mut kinds = std::collections::BTreeMap::new();
    let mut mismatches: Vec<String> = Vec::new();
    let mut tries = 0usize;
    while cases < 20_000 {
        tries += 1;
        assert!(tries < 1_000_000, "the generator yields too few cases");
        let Some(spec) = random_spec(&mut rng) else {
            continue;
        };
        let Some(p) = spec_params(&spec) else {
            continue;
        };
        cases += 1;
        let rust = match validate_mtp(&spec) {
            Ok(_) => 0,
            Err(Error::InvalidArgument { .. }) => INV as i32,
            Err(Error::Unsupported { .. }) => UNS as i32,
            Err(e) => panic!("unexpected error kind {e:?}"),
        };
        // SAFETY: the check reads `p` only (never the memory behind its pointers).
        let c = unsafe { sys::mamba_ssu_selective_state_update_mtp_check(&p) };
        // The Rust API reports an option conflict (INVALID_VALUE) as an invalid argument.
        let kind = if c == VAL as i32 { INV as i32 } else { c };
        if rust != kind {
            let detail = ffi::check(c).err().map(|e| e.to_string());
            let r = validate_mtp(&spec).err().map(|e| e.to_string());
            mismatches.push(format!("Rust {r:?} vs C {detail:?}"));
        }
        accepted += usize::from(rust == 0);
        *kinds.entry(rust).or_insert(0usize) += 1;
    }
    mismatches.sort();
    mismatches.dedup_by(|a, b| a.split(" vs ").next() == b.split(" vs ").next());
    assert!(
        mismatches.is_empty(),
        "{} kinds of disagreement:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(accepted > 1_000 && kinds.len() == 3, "coverage: {kinds:?}");
}
