//! The C ABI's one contract (`mamba_ssu_check`, `mamba_ssu_plan`) tested at the C level: raw
//! `mamba_ssu_args` with placeholder device pointers (aligned, never dereferenced) and
//! `num_sms > 0`, so no device is touched. Every rule of the contract is tested once — the
//! status, the argument `mamba_ssu_last_error_argument` names (the detail begins with it) and a
//! piece of the detail — and the valid calls of every form, write mode and seed are accepted.
//! This is where the rules are tested: the Rust front doors (`ssu::validate`, `validate_mtp`)
//! test only that a rejection surfaces through them and the rules only Rust sees. `plans`: the
//! single-token launch plan over a dense grid of checked calls; `blocks`: the deprecated
//! multi-token parameter block's check, field by field.

use std::ffi::{c_void, CStr};

use crate::ffi::sys;

mod blocks;
mod golden;
mod plans;

const OK: i32 = sys::MAMBA_SSU_SUCCESS as i32;
const INV: i32 = sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT as i32;
const UNS: i32 = sys::MAMBA_SSU_ERROR_UNSUPPORTED as i32;
const VAL: i32 = sys::MAMBA_SSU_ERROR_INVALID_VALUE as i32;

const F32: i32 = sys::MAMBA_SSU_F32 as i32;
const F16: i32 = sys::MAMBA_SSU_F16 as i32;
const BF16: i32 = sys::MAMBA_SSU_BF16 as i32;
const I32: i32 = sys::MAMBA_SSU_I32 as i32;
const I64: i32 = sys::MAMBA_SSU_I64 as i32;
const I16: i32 = sys::MAMBA_SSU_I16 as i32;

const SLOTS: i64 = 3;
const NH: i64 = 4;
const DIM: i64 = 8;
const DS: i64 = 64;
const NG: i64 = 2;
const BATCH: i64 = 2;
const T: i64 = 4;
const TOTAL: i64 = 6;
const SMS: i32 = 132;

/// A placeholder device address, 16 MiB apart and 256-byte aligned: checked, never read.
fn ph(k: usize) -> *mut c_void {
    (0x1000_0000usize + k * 0x100_0000) as *mut c_void
}

fn tensor(k: usize, dtype: i32, shape: &[i64], strides: &[i64]) -> sys::mamba_ssu_tensor {
    assert_eq!(shape.len(), strides.len());
    let mut t = sys::mamba_ssu_tensor {
        data: ph(k),
        dtype,
        rank: shape.len() as i32,
        ..Default::default()
    };
    t.shape[..shape.len()].copy_from_slice(shape);
    t.strides[..strides.len()].copy_from_slice(strides);
    t
}

/// A row-major contiguous tensor.
fn dense(k: usize, dtype: i32, shape: &[i64]) -> sys::mamba_ssu_tensor {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    tensor(k, dtype, shape, &strides)
}

fn absent() -> sys::mamba_ssu_tensor {
    sys::mamba_ssu_tensor::default()
}

/// A seed read from device memory (FlashInfer's rand_seed) with 10 rounds.
fn pointer_seed() -> sys::mamba_ssu_seed {
    sys::mamba_ssu_seed {
        mode: sys::MAMBA_SSU_SEED_MODE_POINTER as i32,
        rounds: 10,
        rule: sys::MAMBA_SSU_SR_V072 as i32,
        pointer: ph(40) as *const i64,
        ..Default::default()
    }
}

/// The single-token baseline: every optional single-token tensor, SR with a seed pointer.
fn single() -> sys::mamba_ssu_args {
    sys::mamba_ssu_args {
        state: dense(1, F16, &[SLOTS, NH, DIM, DS]),
        x: dense(2, BF16, &[BATCH, NH, DIM]),
        dt: tensor(3, BF16, &[BATCH, NH, DIM], &[NH, 1, 0]),
        A: tensor(4, F32, &[NH, DIM, DS], &[1, 0, 0]),
        B: dense(5, BF16, &[BATCH, NG, DS]),
        C: dense(6, BF16, &[BATCH, NG, DS]),
        D: tensor(7, BF16, &[NH, DIM], &[1, 0]),
        z: dense(8, BF16, &[BATCH, NH, DIM]),
        dt_bias: tensor(9, BF16, &[NH, DIM], &[1, 0]),
        out: dense(10, BF16, &[BATCH, NH, DIM]),
        state_batch_indices: dense(11, I32, &[BATCH]),
        dst_state_batch_indices: dense(12, I32, &[BATCH]),
        pad_slot_id: -1,
        num_sms: SMS,
        seed: pointer_seed(),
        ..Default::default()
    }
}

/// The fixed-length multi-token baseline: (BATCH, T) tokens, read index, no write tensor.
fn fixed() -> sys::mamba_ssu_args {
    sys::mamba_ssu_args {
        x: dense(2, BF16, &[BATCH, T, NH, DIM]),
        dt: tensor(3, BF16, &[BATCH, T, NH, DIM], &[T * NH, NH, 1, 0]),
        B: dense(5, BF16, &[BATCH, T, NG, DS]),
        C: dense(6, BF16, &[BATCH, T, NG, DS]),
        z: dense(8, BF16, &[BATCH, T, NH, DIM]),
        out: dense(10, BF16, &[BATCH, T, NH, DIM]),
        dst_state_batch_indices: absent(),
        ..single()
    }
}

/// The varlen baseline: TOTAL token rows in BATCH sequences of at most T tokens, an
/// intermediate buffer with an entry per sequence.
fn varlen() -> sys::mamba_ssu_args {
    sys::mamba_ssu_args {
        x: dense(2, BF16, &[TOTAL, NH, DIM]),
        dt: tensor(3, BF16, &[TOTAL, NH, DIM], &[NH, 1, 0]),
        B: dense(5, BF16, &[TOTAL, NG, DS]),
        C: dense(6, BF16, &[TOTAL, NG, DS]),
        z: dense(8, BF16, &[TOTAL, NH, DIM]),
        out: dense(10, BF16, &[TOTAL, NH, DIM]),
        dst_state_batch_indices: absent(),
        cu_seqlens: dense(13, I32, &[BATCH + 1]),
        intermediate_states: dense(14, F16, &[BATCH, T, NH, DIM, DS]),
        intermediate_state_indices: dense(15, I32, &[BATCH]),
        cache_steps: T,
        ..single()
    }
}

/// The check's verdict: the problem, or (status, argument, detail).
fn check(a: &sys::mamba_ssu_args) -> Result<sys::mamba_ssu_problem, (i32, String, String)> {
    let mut problem = sys::mamba_ssu_problem::default();
    // SAFETY: `a` and `problem` are valid; the check reads the descriptors and pointer values
    // only, never the memory behind them.
    let status = unsafe { sys::mamba_ssu_check(a, &mut problem) };
    if status == OK {
        return Ok(problem);
    }
    // SAFETY: both return NUL-terminated strings valid until the next call on this thread.
    let (argument, detail) = unsafe {
        (
            CStr::from_ptr(sys::mamba_ssu_last_error_argument())
                .to_string_lossy()
                .into_owned(),
            CStr::from_ptr(sys::mamba_ssu_last_error_detail())
                .to_string_lossy()
                .into_owned(),
        )
    };
    Err((status, argument, detail))
}

/// A rule: a change to a valid baseline, the status, the argument named and a piece of the
/// detail.
type Rule = (
    fn() -> sys::mamba_ssu_args,
    fn(&mut sys::mamba_ssu_args),
    i32,
    &'static str,
    &'static str,
);

fn check_rules(rules: &[Rule]) {
    for (i, (base, change, status, argument, needle)) in rules.iter().enumerate() {
        let mut a = base();
        assert!(check(&a).is_ok(), "case {i}: the baseline is rejected");
        change(&mut a);
        match check(&a) {
            Err((s, arg, detail)) => {
                assert_eq!(
                    (s, arg.as_str()),
                    (*status, *argument),
                    "case {i}: {detail}"
                );
                assert!(
                    detail.starts_with(&format!("{argument}: ")),
                    "case {i}: {detail:?} does not begin with {argument:?}"
                );
                assert!(
                    detail.contains(needle),
                    "case {i}: {detail:?} lacks {needle:?}"
                );
            }
            Ok(_) => panic!("case {i} ({argument}: {needle}): accepted"),
        }
    }
}

#[rustfmt::skip]
#[test]
fn descriptors_and_what_is_not_served() {
    check_rules(&[
        (single, |a| a.x.rank = 6, INV, "x", "expected rank 0 (absent) to 5, got 6"),
        (single, |a| a.x.rank = -1, INV, "x", "got -1"),
        (single, |a| a.z.dtype = sys::MAMBA_SSU_DTYPE_OTHER, INV, "z",
            "a dtype the crate has no tag for (dtype -1"),
        (single, |a| a.B.dtype = 77, INV, "B", "no tag for (dtype 77"),
        (single, |a| a.C.shape[1] = -2, INV, "C", "expected size(1) >= 0, got -2"),
        (single, |a| a.D.data = std::ptr::null_mut(), INV, "D", "null data pointer"),
        (single, |a| a.out.rank = 0, INV, "out", "a required tensor, got none"),
        // Decode scales with a float state (block scaling is for an int16 state).
        (single, |a| { a.state_scale = dense(20, F32, &[SLOTS, NH, DIM]);
                       a.seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32; }, UNS, "state_scale",
            "decode scales with a state of dtype F16 are not served"),
        // With a seed: FlashInfer's Python check of the pair comes first (ValueError).
        (single, |a| a.state_scale = dense(20, F32, &[SLOTS, NH, DIM]), VAL, "state_scale",
            "not allowed together with a seed"),
        // Intermediate scales without state_scale (an int16 buffer without scales holds its
        // integers).
        (fixed, |a| a.intermediate_state_scales = dense(21, F32, &[BATCH, T, NH, DIM]), UNS,
            "intermediate_state_scales", "without state_scale are not served"),
        (single, |a| a.reserved = 1, VAL, "reserved", "expected 0, got 1"),
    ]);
}

/// `single()` with an int16 state, its decode scales (dense F32 (SLOTS, NH, DIM)) and no seed.
fn int16() -> sys::mamba_ssu_args {
    let mut a = single();
    a.state.dtype = I16;
    a.state_scale = dense(20, F32, &[SLOTS, NH, DIM]);
    a.seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32;
    a
}

/// `fixed()` with an int16 state and decode scales, no seed.
fn int16_fixed() -> sys::mamba_ssu_args {
    let mut a = fixed();
    a.state.dtype = I16;
    a.state_scale = dense(20, F32, &[SLOTS, NH, DIM]);
    a.seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32;
    a
}

/// `varlen()` (an intermediate buffer) with an int16 state and buffer, both sets of scales, no
/// seed.
fn int16_varlen() -> sys::mamba_ssu_args {
    let mut a = varlen();
    a.state.dtype = I16;
    a.intermediate_states.dtype = I16;
    a.state_scale = dense(20, F32, &[SLOTS, NH, DIM]);
    a.intermediate_state_scales = dense(21, F32, &[BATCH, T, NH, DIM]);
    a.seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32;
    a
}

/// `a` with `ds` state columns: the last dimension of `state`, `B`, `C` and (when given)
/// `intermediate_states` resized, their other strides made contiguous again; `A`'s broadcast
/// strides need no change.
fn with_dstate(mut a: sys::mamba_ssu_args, ds: i64) -> sys::mamba_ssu_args {
    let resize = |t: &mut sys::mamba_ssu_tensor| {
        let r = t.rank as usize;
        t.shape[r - 1] = ds;
        for i in (0..r - 1).rev() {
            t.strides[i] = t.strides[i + 1] * t.shape[i + 1];
        }
    };
    for t in [&mut a.state, &mut a.B, &mut a.C] {
        resize(t);
    }
    if a.intermediate_states.rank > 0 {
        resize(&mut a.intermediate_states);
    }
    a.A.shape[a.A.rank as usize - 1] = ds;
    a
}

/// `a` with `ds` state columns (with_dstate) and a state (and intermediate buffer) of `dtype`;
/// without SR unless the state is F16 (the seed's rule).
fn with_dstate_and_dtype(a: sys::mamba_ssu_args, ds: i64, dtype: i32) -> sys::mamba_ssu_args {
    let mut a = with_dstate(a, ds);
    a.state.dtype = dtype;
    if a.intermediate_states.rank > 0 {
        a.intermediate_states.dtype = dtype;
    }
    if dtype != F16 {
        a.seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32;
    }
    a
}

/// Above dstate 256 (to 512): an explicit VERTICAL is FlashInfer's launcher's refusal,
/// INVALID_ARGUMENT (its vertical kernel's TMA box holds at most 256 elements; recorded on an
/// H100, docs/flashinfer-ssu.md); SIMPLE and AUTO (which the plan resolves) are taken (HORIZONTAL
/// too: plans.rs), as is the multi-token path, with fp16, bf16 and fp32 states and with fp32
/// inputs; an int16 state is UNSUPPORTED there; above 512 UNSUPPORTED. dstate 256 with VERTICAL
/// is served.
#[rustfmt::skip]
#[test]
fn dstates_above_256_rules() {
    fn algo(a: &mut sys::mamba_ssu_args, v: u32) {
        a.algorithm = v as i32;
    }
    let mut a = with_dstate(single(), 256);
    algo(&mut a, sys::MAMBA_SSU_ALGO_VERTICAL);
    assert!(check(&a).is_ok());
    for (ds, dtype) in [(288, F16), (512, F16), (288, BF16), (448, BF16), (272, F32), (512, F32)] {
        // (HORIZONTAL: single()'s head dim 8 is one its kernel refuses; plans.rs plans it.)
        for (v, want) in [
            (sys::MAMBA_SSU_ALGO_VERTICAL, INV),
            (sys::MAMBA_SSU_ALGO_SIMPLE, OK),
            (sys::MAMBA_SSU_ALGO_AUTO, OK),
        ] {
            let mut a = with_dstate_and_dtype(single(), ds, dtype);
            algo(&mut a, v);
            if want == OK {
                assert!(check(&a).is_ok(), "{ds} {dtype} {v}: {:?}", check(&a));
                continue;
            }
            let (s, arg, detail) = check(&a).expect_err("refused");
            assert_eq!((s, arg.as_str()), (want, "state"), "{ds} {dtype} {v}: {detail}");
            assert_eq!(
                detail,
                format!("state: dstate: VERTICAL takes at most 256 (FlashInfer's vertical kernel \
                         loads a row as one TMA box of at most 256 elements, and its launcher \
                         refuses the call), got {ds}")
            );
        }
        for make in [fixed, varlen] {
            let a = with_dstate_and_dtype(make(), ds, dtype);
            assert!(check(&a).is_ok(), "multi token {ds} {dtype}: {:?}", check(&a));
        }
    }
    // fp32 inputs above 256, single and multi token, over each state dtype: taken.
    for dtype in [F16, BF16, F32] {
        for make in [single, fixed, varlen] {
            let mut a = with_dstate_and_dtype(make(), 288, dtype);
            for t in [&mut a.x, &mut a.B, &mut a.C, &mut a.out] {
                t.dtype = F32;
            }
            if a.z.rank > 0 {
                a.z.dtype = F32;
            }
            assert!(check(&a).is_ok(), "fp32 inputs over {dtype}: {:?}", check(&a));
        }
    }
    // An int16 state with its scales above 256: multi token at every dstate up to 512; single
    // token at 512 only (FlashInfer's simple kernel overruns a register array at 288 to 480),
    // the others UNSUPPORTED; VERTICAL refused as for every state there.
    for ds in (288..=512).step_by(32) {
        for make in [int16_fixed, int16_varlen] {
            let a = with_dstate(make(), ds);
            assert!(check(&a).is_ok(), "int16 multi token {ds}: {:?}", check(&a));
        }
        let single_i16 = check(&with_dstate(int16(), ds));
        if ds == 512 {
            assert!(single_i16.is_ok(), "int16 single token 512: {single_i16:?}");
            continue;
        }
        let (s, _, detail) = single_i16.expect_err("refused");
        assert_eq!(s, UNS, "{detail}");
        assert!(
            detail.contains(&format!(
                "dstate: a single-token I16 state above 256 is served at 512 only, got {ds}"
            )),
            "{detail}"
        );
    }
    let mut a = with_dstate(int16(), 512);
    algo(&mut a, sys::MAMBA_SSU_ALGO_VERTICAL);
    let (s, _, detail) = check(&a).expect_err("refused");
    assert_eq!(s, INV, "{detail}");
    assert!(detail.contains("VERTICAL takes at most 256"), "{detail}");
    // Above 512 (FlashInfer's module builds there): UNSUPPORTED whatever the mapping.
    for ds in [544, 1024] {
        let (s, _, detail) = check(&with_dstate(single(), ds)).expect_err("refused");
        assert_eq!(s, UNS, "{detail}");
        assert!(detail.contains("from 64 to 512"), "{detail}");
    }
    // Not a dstate FlashInfer builds at: INVALID_ARGUMENT whatever the mapping, as before.
    let mut a = with_dstate(single(), 300);
    algo(&mut a, sys::MAMBA_SSU_ALGO_VERTICAL);
    let (s, _, detail) = check(&a).expect_err("refused");
    assert_eq!(s, INV);
    assert!(
        detail.starts_with("state: dstate: expected a multiple of 32 from 64"),
        "{detail}"
    );
}

/// The uneven dstates (96, 160, 192, 224) are served for every state dtype on both paths, an
/// int16 state with its scales included.
#[rustfmt::skip]
#[test]
fn uneven_dstate_rules() {
    for ds in [96, 160, 192, 224] {
        for make in [single, fixed, varlen] {
            for dtype in [F16, BF16, F32] {
                let a = with_dstate_and_dtype(make(), ds, dtype);
                if let Err(e) = check(&a) {
                    panic!("dstate {ds}, state dtype {dtype}: {e:?}");
                }
            }
        }
        for make in [int16, int16_fixed, int16_varlen] {
            let a = with_dstate(make(), ds);
            if let Err(e) = check(&a) {
                panic!("dstate {ds}, int16: {e:?}");
            }
        }
    }
    // FlashInfer's vertical kernel indexes past a register array for the odd columns of a
    // partial last 64-column block of an int16 row (undefined): refused there, served at 192.
    fn vertical(a: &mut sys::mamba_ssu_args) {
        a.algorithm = sys::MAMBA_SSU_ALGO_VERTICAL as i32;
    }
    let mut a = with_dstate(int16(), 192);
    vertical(&mut a);
    assert!(check(&a).is_ok());
    check_rules(&[
        (int16, |a| { *a = with_dstate(*a, 96); vertical(a); },
            UNS, "algorithm",
            "algorithm: VERTICAL with an I16 state at dstate 96 is not served (FlashInfer's"),
        (int16, |a| { *a = with_dstate(*a, 224); vertical(a); },
            UNS, "algorithm",
            "algorithm: VERTICAL with an I16 state at dstate 224 is not served"),
    ]);
}

/// FlashInfer's int16 block-scaled state: `state_scale` (slots, nheads, dim) F32 with
/// FlashInfer's host-wrapper rules (sizes, stride(2) == 1, stride(1) == dim; a 4-D one with a
/// trailing 1 squeezed), its slots' rows apart; an int16 state without scales; multi token
/// `intermediate_state_scales` (batch, cache_steps, nheads, dim), contiguous, required with an
/// int16 buffer and scales.
#[rustfmt::skip]
#[test]
fn int16_state_rules() {
    check_rules(&[
        (int16, |a| a.state_scale.shape[0] = SLOTS + 1, INV, "state_scale",
            "expected size(0) == state.size(0) (3), got 4"),
        (int16, |a| a.state_scale.shape[1] = NH - 1, INV, "state_scale",
            "expected size(1) == nheads (4), got 3"),
        (int16, |a| a.state_scale.shape[2] = DIM * 2, INV, "state_scale",
            "expected size(2) == dim (8), got 16"),
        (int16, |a| a.state_scale = dense(20, F32, &[SLOTS, NH, DIM, 2]), INV, "state_scale",
            "expected 3 dimensions (slots, nheads, dim), or 4 with a trailing 1, got 4"),
        (int16, |a| a.state_scale = dense(20, F32, &[SLOTS, NH * DIM]), INV, "state_scale",
            "expected 3 dimensions"),
        (int16, |a| a.state_scale.strides[2] = 2, INV, "state_scale",
            "expected stride(2) == 1 (1), got 2"),
        (int16, |a| a.state_scale.strides[1] = DIM + 1, INV, "state_scale",
            "expected stride(1) == dim (8), got 9"),
        (int16, |a| a.state_scale.strides[0] = NH * DIM - 1, INV, "state_scale",
            "expected stride(0) >= nheads * dim (32: the scales of different slots must not \
             overlap), got 31"),
        (int16, |a| a.state_scale.dtype = BF16, UNS, "state_scale",
            "decode scales of dtype BF16 are not served (F32 expected)"),
        (int16, |a| a.state_scale.dtype = I16, UNS, "state_scale", "of dtype I16"),
        (int16, |a| a.state_scale.data = (ph(20) as usize + 2) as *mut std::ffi::c_void, INV,
            "state_scale", "4-byte aligned"),
        // FlashInfer's Python check of a seed with scales comes first (ValueError); a seed with
        // an int16 state without scales is refused by the seed's rule.
        (int16, |a| a.seed.mode = sys::MAMBA_SSU_SEED_MODE_POINTER as i32, VAL, "state_scale",
            "not allowed together with a seed"),
        (int16, |a| { a.state_scale = absent(); a.seed.mode = sys::MAMBA_SSU_SEED_MODE_POINTER as i32; },
            INV, "philox_rounds", "needs an F16 state"),
        // Multi token: the intermediate buffer's scales (FlashInfer's host-wrapper rules).
        (int16_varlen, |a| a.intermediate_state_scales = absent(), INV,
            "intermediate_state_scales", "required with an int16 intermediate_states_buffer and \
             state_scale"),
        (int16_varlen, |a| a.intermediate_state_scales.shape[0] = BATCH + 1, INV,
            "intermediate_state_scales", "expected size(0) == batch (2), got 3"),
        (int16_varlen, |a| a.intermediate_state_scales.shape[1] = T + 1, INV,
            "intermediate_state_scales", "expected size(1) == cache_steps (4), got 5"),
        (int16_varlen, |a| a.intermediate_state_scales.shape[3] = DIM - 1, INV,
            "intermediate_state_scales", "expected size(3) == dim (8), got 7"),
        (int16_varlen, |a| a.intermediate_state_scales.strides[0] = T * NH * DIM + 8, INV,
            "intermediate_state_scales", "expected stride(0) == cache_steps * nheads * dim (128)"),
        (int16_varlen, |a| a.intermediate_state_scales.dtype = BF16, UNS,
            "intermediate_state_scales", "of dtype BF16 are not served"),
        (int16_varlen, |a| a.intermediate_state_scales.data = (ph(21) as usize + 2) as *mut c_void,
            INV, "intermediate_state_scales", "4-byte aligned"),
        (int16_varlen, |a| a.intermediate_states.dtype = F16, INV, "intermediate_states_buffer",
            "expected dtype I16 (the dtype of state), got F16"),
        (int16_fixed, |a| a.state_scale.shape[0] = SLOTS - 1, INV, "state_scale",
            "expected size(0) == state.size(0) (3), got 2"),
    ]);
    // Accepted: with scales (3-D, 4-D with a trailing 1, slot rows padded), without, every
    // algorithm but HORIZONTAL, both index dtypes; the problem reports the I16 state.
    let mut accepted = 0;
    for algorithm in [
        sys::MAMBA_SSU_ALGO_AUTO,
        sys::MAMBA_SSU_ALGO_SIMPLE,
        sys::MAMBA_SSU_ALGO_VERTICAL,
    ] {
        for scales in 0..4 {
            let mut a = int16();
            a.algorithm = algorithm as i32;
            match scales {
                0 => a.state_scale = absent(),
                1 => {}
                2 => a.state_scale = dense(20, F32, &[SLOTS, NH, DIM, 1]),
                _ => a.state_scale = tensor(20, F32, &[SLOTS, NH, DIM], &[NH * DIM + 4, DIM, 1]),
            }
            if scales == 3 {
                a.state_batch_indices.dtype = I64;
                a.dst_state_batch_indices.dtype = I64;
            }
            let p = check(&a).unwrap_or_else(|e| panic!("algorithm {algorithm}, scales {scales}: {e:?}"));
            assert_eq!((p.state_dtype, p.form), (I16, sys::MAMBA_SSU_FORM_SINGLE as i32));
            // The run-time kernel, in the layout asked (AUTO: simple for this small grid).
            let mut out = sys::mamba_ssu_launch_plan::default();
            // SAFETY: valid pointers; num_sms > 0 touches no device.
            assert_eq!(unsafe { sys::mamba_ssu_plan(&a, SMS, &mut out) }, OK);
            let want = if algorithm == sys::MAMBA_SSU_ALGO_VERTICAL {
                sys::MAMBA_SSU_ALGO_VERTICAL
            } else {
                sys::MAMBA_SSU_ALGO_SIMPLE
            };
            assert_eq!((out.compiled_kernel, out.algorithm), (0, want as i32), "{out:?}");
            accepted += 1;
        }
    }
    assert_eq!(accepted, 12);
    // Multi token: every form, with and without scales, the compiled-in kernel (BF16 inputs and
    // weights, dstate 64).
    for (base, what) in [
        (int16_fixed as fn() -> sys::mamba_ssu_args, "fixed"),
        (int16_varlen, "varlen"),
    ] {
        for scaled in [true, false] {
            let mut a = base();
            if !scaled {
                a.state_scale = absent();
                a.intermediate_state_scales = absent();
            }
            let p = check(&a).unwrap_or_else(|e| panic!("{what}, scaled {scaled}: {e:?}"));
            assert_eq!((p.state_dtype, p.form), (I16, sys::MAMBA_SSU_FORM_MULTI as i32));
            let mut out = sys::mamba_ssu_launch_plan::default();
            // SAFETY: valid pointers; num_sms > 0 touches no device.
            assert_eq!(unsafe { sys::mamba_ssu_plan(&a, SMS, &mut out) }, OK);
            assert_eq!(out.compiled_kernel, 1, "{what}: {out:?}");
        }
    }
}

#[rustfmt::skip]
#[test]
fn options_and_forms() {
    check_rules(&[
        (single, |a| a.algorithm = 4, VAL, "algorithm", "got 4"),
        (single, |a| a.form = 3, VAL, "form", "expected AUTO (0), SINGLE (1) or MULTI (2)"),
        // FlashInfer's multi-token checks (RuntimeError there); the single-token path ignores
        // cache_steps < 1.
        (fixed, |a| a.cache_steps = -1, INV, "cache_steps", "expected >= 0, got -1"),
        (varlen, |a| a.cache_steps = -1, INV, "cache_steps", "expected >= 0, got -1"),
        (fixed, |a| a.form = sys::MAMBA_SSU_FORM_SINGLE as i32, VAL, "form",
            "SINGLE asked, but the call is multi-token"),
        (single, |a| a.form = sys::MAMBA_SSU_FORM_MULTI as i32, VAL, "form",
            "MULTI asked, but the call is single-token"),
        // An intermediate buffer with dst indices: FlashInfer's Python check, whatever the form.
        (single, |a| a.intermediate_states = dense(14, F16, &[BATCH, 1, NH, DIM, DS]), VAL,
            "dst_state_batch_indices", "two write modes at once"),
        (single, |a| { a.cu_seqlens = dense(13, I32, &[BATCH + 1]);
                       a.x = dense(2, BF16, &[BATCH, DIM]); }, INV, "cu_seqlens",
            "the varlen form needs a 3-D x (total_tokens, nheads, dim), got a 2-D x"),
        (fixed, |a| a.cu_seqlens = dense(13, I32, &[BATCH + 1]), INV, "cu_seqlens",
            "got a 4-D x"),
        (varlen, |a| a.cache_steps = 0, INV, "cache_steps",
            "the varlen form (cu_seqlens) needs cache_steps >= 1"),
        // FlashInfer's multi-token launcher built for sm_90 refuses VERTICAL and HORIZONTAL
        // (RuntimeError).
        (fixed, |a| a.algorithm = sys::MAMBA_SSU_ALGO_VERTICAL as i32, INV, "algorithm",
            "the multi-token path has one layout (AUTO or SIMPLE), got VERTICAL"),
        (varlen, |a| a.algorithm = sys::MAMBA_SSU_ALGO_HORIZONTAL as i32, INV, "algorithm",
            "got HORIZONTAL"),
        // An unknown value is FlashInfer's Python ValueError, before any tensor rule.
        (fixed, |a| { a.algorithm = 9; a.x.shape[2] = NH + 1; }, VAL, "algorithm", "got 9"),
    ]);
}

/// `single()` with a head dim of `dim` rows (every tensor that has one resized).
fn with_dim(mut a: sys::mamba_ssu_args, dim: i64) -> sys::mamba_ssu_args {
    a.state = dense(1, a.state.dtype, &[SLOTS, NH, dim, DS]);
    a.x = dense(2, a.x.dtype, &[BATCH, NH, dim]);
    a.dt = tensor(3, a.dt.dtype, &[BATCH, NH, dim], &[NH, 1, 0]);
    a.A = tensor(4, F32, &[NH, dim, DS], &[1, 0, 0]);
    a.D = tensor(7, a.D.dtype, &[NH, dim], &[1, 0]);
    a.z = dense(8, a.z.dtype, &[BATCH, NH, dim]);
    a.dt_bias = tensor(9, a.dt_bias.dtype, &[NH, dim], &[1, 0]);
    a.out = dense(10, a.out.dtype, &[BATCH, NH, dim]);
    a
}

/// A single-token HORIZONTAL call at head dim 64 (its smallest).
fn horizontal() -> sys::mamba_ssu_args {
    sys::mamba_ssu_args {
        algorithm: sys::MAMBA_SSU_ALGO_HORIZONTAL as i32,
        ..with_dim(single(), 64)
    }
}

/// HORIZONTAL: FlashInfer's horizontal kernel takes head dims that are a multiple of 64 up to
/// 256 (0.7.4's launcher check, a RuntimeError: INVALID_ARGUMENT), any state dtype, and
/// refuses a block-scaled state (its launcher's check, a RuntimeError, before the crate's own
/// refusal of such a state); the multi-token path stays AUTO or SIMPLE (see options_and_forms).
#[rustfmt::skip]
#[test]
fn horizontal_rules() {
    check_rules(&[
        (single, |a| a.algorithm = sys::MAMBA_SSU_ALGO_HORIZONTAL as i32, INV, "algorithm",
            "HORIZONTAL needs a head dim that is a multiple of 64 and at most 256 (FlashInfer's \
             horizontal kernel), got dim 8"),
        (horizontal, |a| *a = with_dim(*a, 80), INV, "algorithm",
            "got dim 80"),
        (horizontal, |a| *a = with_dim(*a, 96), INV, "algorithm",
            "got dim 96"),
        (horizontal, |a| *a = with_dim(*a, 320), INV, "algorithm",
            "got dim 320"),
        (horizontal, |a| *a = with_dim(*a, 32), INV, "algorithm",
            "got dim 32"),
        (horizontal, |a| { a.state_scale = dense(20, F32, &[SLOTS, NH, 64]);
                           a.state.dtype = I16;
                           a.seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32; }, INV, "algorithm",
            "does not take a block-scaled int16 state"),
        // An int16 state without scales: the crate's horizontal kernel has no int16 path.
        (horizontal, |a| { a.state.dtype = I16;
                           a.seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32; }, UNS, "algorithm",
            "HORIZONTAL with an I16 state is not served"),
        // With a seed, FlashInfer's Python check of a seed with state_scale still comes first.
        (horizontal, |a| a.state_scale = dense(20, F32, &[SLOTS, NH, 64]), VAL, "state_scale",
            "not allowed together with a seed"),
        // Multi token: the sm_90 multi-token launcher's refusal (INVALID_ARGUMENT).
        (fixed, |a| a.algorithm = sys::MAMBA_SSU_ALGO_HORIZONTAL as i32, INV, "algorithm",
            "the multi-token path has one layout (AUTO or SIMPLE), got HORIZONTAL"),
    ]);
    // Accepted: every head dim it takes, with every state dtype (SR with an F16 one), both
    // index dtypes, z or not; the check's problem keeps the algorithm.
    for dim in [64, 128, 192, 256] {
        for state in [F16, BF16, F32] {
            for (index, z) in [(I32, true), (I64, false)] {
                let mut a = with_dim(horizontal(), dim);
                a.state.dtype = state;
                a.state_batch_indices.dtype = index;
                a.dst_state_batch_indices.dtype = index;
                if state != F16 {
                    a.seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32;
                }
                if !z {
                    a.z = absent();
                }
                let p = check(&a).unwrap_or_else(|e| panic!("dim {dim} state {state}: {e:?}"));
                assert_eq!(p.algorithm, sys::MAMBA_SSU_ALGO_HORIZONTAL as i32);
                assert_eq!((p.dim, p.state_dtype), (dim, state));
            }
        }
    }
}

#[rustfmt::skip]
#[test]
fn tensor_rules() {
    check_rules(&[
        // state: (slots, nheads, dim, dstate), a float dtype, the inner three dims contiguous.
        (single, |a| a.state = dense(1, F16, &[SLOTS, NH * DIM * DS]), INV, "state",
            "expected 4 dimensions"),
        (single, |a| a.state.dtype = I32, INV, "state", "expected dtype F32, F16 or BF16, got I32"),
        (single, |a| a.state.strides[2] = DS + 8, INV, "state",
            "expected stride(2) == dstate (64), got 72"),
        // x, out, z: (batch, nheads, dim), strides (.., dim, 1), x's float dtype.
        (single, |a| a.x.shape[1] = NH + 1, INV, "x", "expected size(1) == nheads (4), got 5"),
        (single, |a| a.x.dtype = I64, INV, "x", "expected dtype F32, F16 or BF16, got I64"),
        (single, |a| a.x.strides[2] = 2, INV, "x", "expected stride(2) == 1 (1), got 2"),
        (single, |a| a.z.strides[1] = DIM + 8, INV, "z", "expected stride(1) == dim (8), got 16"),
        (single, |a| a.out.shape[0] = BATCH + 1, INV, "out", "expected size(0) == batch (2), got 3"),
        (single, |a| a.out.dtype = F16, INV, "out", "expected dtype BF16 (the dtype of x), got F16"),
        // dt: strides (.., 1, 0), a float dtype.
        (single, |a| a.dt.strides[1] = 2, INV, "dt", "expected stride(1) == 1 (1), got 2"),
        (single, |a| a.dt.strides[2] = 1, INV, "dt", "expected stride(2) == 0 (0), got 1"),
        (single, |a| a.dt.dtype = I32, INV, "dt", "expected dtype F32, F16 or BF16, got I32"),
        // A: (nheads, dim, dstate) F32, strides (1, 0, 0).
        (single, |a| a.A.dtype = BF16, INV, "A", "expected dtype F32 (FlashInfer's A is fp32)"),
        (single, |a| a.A.shape[2] = 128, INV, "A", "expected size(2) == dstate (64), got 128"),
        (single, |a| a.A.strides[1] = 1, INV, "A", "expected stride(1) == 0 (0), got 1"),
        // D, dt_bias: (nheads, dim), strides (1, 0), dt's dtype.
        (single, |a| a.D.dtype = F32, INV, "D", "expected dtype BF16 (the dtype of dt), got F32"),
        (single, |a| a.dt_bias.strides[0] = 2, INV, "dt_bias", "expected stride(0) == 1 (1), got 2"),
        (single, |a| a.dt_bias.shape[1] = DIM + 1, INV, "dt_bias", "expected size(1) == dim (8)"),
        // B, C: (batch, ngroups, dstate), strides (.., dstate, 1), x's dtype.
        (single, |a| { a.B.strides[1] = 2 * DS; a.B.strides[0] = 4 * DS; }, INV, "B",
            "expected stride(1) == dstate (64), got 128"),
        (single, |a| a.C.shape[1] = 1, INV, "C", "expected size(1) == ngroups (size of B) (2), got 1"),
        (single, |a| a.B.dtype = F32, INV, "B", "the dtype of x"),
        (fixed, |a| a.dt.shape[1] = T - 1, INV, "dt", "expected size(1) == T (4), got 3"),
        (varlen, |a| a.B.shape[0] = TOTAL + 1, INV, "B", "expected size(0) == total_tokens (6), got 7"),
    ]);
}

#[rustfmt::skip]
#[test]
fn index_and_intermediate_rules() {
    check_rules(&[
        (single, |a| a.state_batch_indices.dtype = F32, INV, "state_batch_indices",
            "expected dtype I32 or I64, got F32"),
        (single, |a| a.dst_state_batch_indices.dtype = I64, INV, "dst_state_batch_indices",
            "expected dtype I32 (the dtype of state_batch_indices), got I64"),
        (varlen, |a| a.intermediate_state_indices.dtype = I64, INV, "intermediate_state_indices",
            "expected dtype I32 (the dtype of state_batch_indices), got I64"),
        (varlen, |a| a.cu_seqlens.dtype = F32, INV, "cu_seqlens", "expected dtype I32 or I64"),
        (fixed, |a| a.num_accepted_tokens = dense(16, I16, &[BATCH]), INV, "num_accepted_tokens",
            "expected dtype I32 or I64, got I16"),
        (single, |a| a.state_batch_indices = dense(11, I32, &[BATCH, 2, 2]), INV,
            "state_batch_indices", "expected 1 or 2 dimensions"),
        // FlashInfer's sizes: size(0) >= batch (padded index tensors), a 2-D index's size(1) >= T
        // (1 single token; the tokens, or cache_steps varlen, multi token).
        (single, |a| a.state_batch_indices.shape[0] = BATCH - 1, INV, "state_batch_indices",
            "expected size(0) >= batch (2), got 1"),
        (single, |a| a.dst_state_batch_indices = dense(12, I32, &[BATCH, 0]), INV,
            "dst_state_batch_indices", "expected size(1) >= 1 (1), got 0"),
        (fixed, |a| a.state_batch_indices = dense(11, I32, &[BATCH, T - 1]), INV,
            "state_batch_indices", "expected size(1) >= T (4), got 3"),
        (varlen, |a| a.state_batch_indices = dense(11, I32, &[BATCH, T - 1]), INV,
            "state_batch_indices", "expected size(1) >= cache_steps (the longest sequence) (4)"),
        (fixed, |a| a.dst_state_batch_indices = dense(12, I32, &[BATCH - 1, T]), INV,
            "dst_state_batch_indices", "expected size(0) >= batch (2), got 1"),
        (fixed, |a| { a.num_accepted_tokens = dense(16, I32, &[BATCH]);
                      a.state_batch_indices = absent(); }, INV, "num_accepted_tokens",
            "needs state_batch_indices"),
        (fixed, |a| { a.num_accepted_tokens = dense(16, I32, &[BATCH, 1]);
                      a.state_batch_indices = dense(11, I32, &[BATCH, T]); }, INV,
            "num_accepted_tokens", "expected 1 dimensions (batch,)"),
        (fixed, |a| a.num_accepted_tokens = dense(16, I32, &[BATCH - 1]), INV,
            "num_accepted_tokens", "expected size(0) >= batch (2), got 1"),
        (varlen, |a| a.intermediate_state_indices.shape[0] = BATCH + 1, INV,
            "intermediate_state_indices", "expected size(0) == batch (2), got 3"),
        (varlen, |a| a.cu_seqlens = dense(13, I32, &[BATCH + 1, 1]), INV, "cu_seqlens",
            "expected 1 dimensions (batch + 1,)"),
        (varlen, |a| a.intermediate_states = dense(14, F16, &[BATCH, T + 1, NH, DIM, DS]), INV,
            "intermediate_states_buffer", "expected size(1) == cache_steps (4"),
        (varlen, |a| a.intermediate_states.dtype = F32, INV, "intermediate_states_buffer",
            "expected dtype F16 (the dtype of state), got F32"),
        (varlen, |a| a.intermediate_states.strides[0] += 8, INV, "intermediate_states_buffer",
            "expected stride(0) == cache_steps * nheads * dim * dstate"),
        (varlen, |a| a.intermediate_states = dense(14, F16, &[BATCH, T, NH, DIM * DS]), INV,
            "intermediate_states_buffer", "expected 5 dimensions"),
        // With a buffer cache_steps is its size(1): 0 is refused (FlashInfer would step by 0).
        (fixed, |a| a.intermediate_states = dense(14, F16, &[BATCH, T, NH, DIM, DS]), INV,
            "intermediate_states_buffer", "expected size(1) == cache_steps (0"),
    ]);
}

/// The parameter blocks' rules, reached through the lowering: their errors name the tensor.
#[rustfmt::skip]
#[test]
fn lowered_rules_name_the_tensor() {
    check_rules(&[
        (single, |a| { a.state.shape[3] = 544; a.A.shape[2] = 544; a.B.shape[2] = 544;
                       a.C.shape[2] = 544; a.B.strides[0] = NG * 544; a.C.strides[0] = NG * 544;
                       a.B.strides[1] = 544; a.C.strides[1] = 544;
                       a.state.strides = [NH * DIM * 544, DIM * 544, 544, 1, 0]; }, UNS, "state",
            "dstate: expected a multiple of 32 from 64 to 512 (of 16 from 32 with an \
             fp32 state), got 544"),
        (single, |a| { a.B.shape[1] = 3; a.C.shape[1] = 3; a.B.strides[0] = 3 * DS;
                       a.C.strides[0] = 3 * DS; }, INV, "B", "ngroups: expected a divisor of nheads"),
        (single, |a| { a.state_batch_indices = absent(); a.state.shape[0] = 1; }, INV, "state",
            "state_cache_size: without state_batch_indices"),
        (single, |a| a.x.data = (ph(2) as usize + 2) as *mut c_void, INV, "x",
            "x: expected a 16-byte aligned pointer"),
        (single, |a| a.state.strides[0] = NH * DIM * DS - 8, INV, "state",
            "state_stride_batch: expected >= 2048, got 2040"),
        (single, |a| a.state.strides[0] = NH * DIM * DS + 4, INV, "state",
            "state_stride_batch: expected a multiple of 8"),
        (single, |a| a.state.shape[0] = 0, INV, "state", "state_cache_size: expected >= 1"),
        (single, |a| a.x.strides[0] = NH * DIM + 4, INV, "x",
            "x_stride_batch: expected a multiple of 8"),
        (single, |a| a.out.strides[0] = NH * DIM + 4, INV, "out",
            "out_stride_batch: expected a multiple of 8"),
        (single, |a| { for t in [&mut a.x, &mut a.z, &mut a.out, &mut a.dt, &mut a.B, &mut a.C,
                                 &mut a.state_batch_indices, &mut a.dst_state_batch_indices] {
                           t.shape[0] = 0;
                       } }, INV, "x", "batch: expected >= 1, got 0"),
        (single, |a| a.B.strides[0] = NG * DS + 4, INV, "B",
            "B_stride_batch: expected a multiple of 8 (16-byte alignment)"),
        (single, |a| a.out.strides[0] = 0, INV, "out", "out_stride_batch: expected >= 32"),
        (single, |a| { a.x.strides[0] = 1 << 61; }, UNS, "x", "x: extent above 2^60 bytes"),
        (single, |a| { let b = 1 << 30;
                       for t in [&mut a.x, &mut a.z, &mut a.out] { *t = dense(2, BF16, &[b, NH, DIM]); }
                       a.dt = tensor(3, BF16, &[b, NH, DIM], &[NH, 1, 0]);
                       a.B = dense(5, BF16, &[b, NG, DS]); a.C = dense(6, BF16, &[b, NG, DS]);
                       a.state_batch_indices = dense(11, I32, &[b]);
                       a.dst_state_batch_indices = dense(12, I32, &[b]); }, UNS, "x", "(grid size)"),
        (single, |a| a.state_batch_indices.data = (ph(11) as usize + 2) as *mut c_void, INV,
            "state_batch_indices", "expected a 4-byte aligned pointer"),
        (single, |a| { a.dst_state_batch_indices.strides[0] = -1; }, INV,
            "dst_state_batch_indices", "dst_state_batch_indices_stride: expected >= 0"),
        (fixed, |a| { for t in [&mut a.x, &mut a.z, &mut a.out] { *t = dense(2, BF16, &[BATCH, 17, NH, DIM]); }
                      a.dt = tensor(3, BF16, &[BATCH, 17, NH, DIM], &[17 * NH, NH, 1, 0]);
                      a.B = dense(5, BF16, &[BATCH, 17, NG, DS]);
                      a.C = dense(6, BF16, &[BATCH, 17, NG, DS]); }, INV, "x",
            "ntokens: expected 1..=16, got 17"),
        (varlen, |a| { a.cache_steps = 17;
                       a.intermediate_states = dense(14, F16, &[BATCH, 17, NH, DIM, DS]); }, INV,
            "cache_steps", "ntokens: expected 1..=16, got 17"),
        (varlen, |a| { a.cu_seqlens = dense(13, I32, &[1]); a.state_batch_indices = absent();
                       a.intermediate_states = absent(); a.intermediate_state_indices = absent(); },
            INV, "cu_seqlens", "batch: expected >= 1, got 0"),
        (varlen, |a| a.dst_state_batch_indices = dense(12, I32, &[BATCH, T]), VAL,
            "dst_state_batch_indices", "two write modes at once"),
        (fixed, |a| { a.cache_steps = T - 1;
                      a.intermediate_states = dense(14, F16, &[BATCH, T - 1, NH, DIM, DS]); }, INV,
            "cache_steps", "cache_steps: expected >= ntokens (4), got 3"),
        (fixed, |a| a.out.strides[1] = NH * DIM - 8, INV, "out",
            "out_stride_token: expected >= nheads * dim (32)"),
        (varlen, |a| a.intermediate_states.data = (ph(14) as usize + 8) as *mut c_void, INV,
            "intermediate_states_buffer", "intermediate_states: expected a 16-byte aligned"),
    ]);
}

#[rustfmt::skip]
#[test]
fn seed_rules() {
    check_rules(&[
        (single, |a| a.seed.mode = 3, VAL, "seed.mode",
            "expected NONE (0), POINTER (1) or DERIVED (2), got 3"),
        (single, |a| a.seed.rule = 2, VAL, "sr_rule", "expected V072 (0) or V074 (1), got 2"),
        (single, |a| a.seed.reserved = 1, VAL, "seed.reserved", "expected 0, got 1"),
        (single, |a| a.seed.rounds = 0, VAL, "philox_rounds", "expected >= 1 with a seed, got 0"),
        (fixed, |a| a.seed.rounds = -3, VAL, "philox_rounds", "got -3"),
        // FlashInfer's Python check: before any tensor rule.
        (varlen, |a| { a.seed.rounds = 0; a.x.shape[1] = NH + 1; }, VAL, "philox_rounds",
            "got 0"),
        (single, |a| { a.state.dtype = BF16; }, INV, "philox_rounds",
            "stochastic rounding (10 rounds) needs an F16 state"),
        (single, |a| a.seed.pointer = std::ptr::null(), INV, "seed.pointer", "null pointer"),
        (fixed, |a| a.seed.pointer = (ph(40) as usize + 4) as *const i64, INV, "seed.pointer",
            "expected a 8-byte aligned pointer"),
        (single, |a| { a.seed.mode = sys::MAMBA_SSU_SEED_MODE_DERIVED as i32;
                       a.seed.position.offset = 6; }, INV, "seed.position",
            "offset: expected a multiple of 4, got 6"),
        (single, |a| { a.seed.next = ph(41) as *mut i64; a.seed.position.offset = 2; }, INV,
            "seed.position", "offset: expected a multiple of 4 (seed.next is set), got 2"),
        (single, |a| a.seed.next = (ph(41) as usize + 4) as *mut i64, INV, "seed.next",
            "expected a 8-byte aligned pointer"),
        (single, |a| a.seed.position.seed_ptr = ph(42) as *const i64, INV, "seed.position",
            "offset_ptr: null pointer"),
        (single, |a| { a.seed.position.seed_ptr = (ph(42) as usize + 4) as *const i64;
                       a.seed.position.offset_ptr = ph(43) as *const i64; }, INV,
            "seed.position", "seed_ptr: expected a 8-byte aligned pointer"),
    ]);
}

fn accept(a: &sys::mamba_ssu_args, what: &str) -> sys::mamba_ssu_problem {
    match check(a) {
        Ok(p) => p,
        Err(e) => panic!("{what}: rejected: {e:?}"),
    }
}

#[test]
fn single_token_calls_are_accepted_and_described() {
    let p = accept(&single(), "the baseline");
    assert_eq!(
        (p.form, p.varlen, p.batch, p.ntokens, p.total_tokens),
        (sys::MAMBA_SSU_FORM_SINGLE as i32, 0, BATCH, 1, BATCH)
    );
    assert_eq!(
        (p.nheads, p.dim, p.dstate, p.ngroups, p.state_cache_size),
        (NH, DIM, DS, NG, SLOTS)
    );
    assert_eq!((p.cache_steps, p.intermediate_cache_size), (0, 0));
    assert_eq!(
        (p.state_dtype, p.input_dtype, p.weight_dtype, p.index_dtype),
        (F16, BF16, BF16, I32)
    );
    assert_eq!(p.stochastic_rounding, 1);
    // ALGO_AUTO resolves with an SM count (8 heads < 2 * 132: SIMPLE), stays AUTO without.
    assert_eq!(p.algorithm, sys::MAMBA_SSU_ALGO_SIMPLE as i32);
    let p = accept(
        &sys::mamba_ssu_args {
            num_sms: 0,
            ..single()
        },
        "num_sms 0",
    );
    assert_eq!(p.algorithm, sys::MAMBA_SSU_ALGO_AUTO as i32);
    let p = accept(
        &sys::mamba_ssu_args {
            algorithm: sys::MAMBA_SSU_ALGO_VERTICAL as i32,
            ..single()
        },
        "vertical",
    );
    assert_eq!(p.algorithm, sys::MAMBA_SSU_ALGO_VERTICAL as i32);

    // Minimal: no optional tensor, no seed (its rounds and the state dtype are not read), F32,
    // dstate 256.
    let minimal = sys::mamba_ssu_args {
        state: dense(1, F32, &[SLOTS, NH, DIM, 256]),
        A: tensor(4, F32, &[NH, DIM, 256], &[1, 0, 0]),
        B: dense(5, F32, &[BATCH, 1, 256]),
        C: dense(6, F32, &[BATCH, 1, 256]),
        x: dense(2, F32, &[BATCH, NH, DIM]),
        dt: tensor(3, F32, &[BATCH, NH, DIM], &[NH, 1, 0]),
        out: dense(10, F32, &[BATCH, NH, DIM]),
        D: absent(),
        z: absent(),
        dt_bias: absent(),
        state_batch_indices: absent(),
        dst_state_batch_indices: absent(),
        seed: sys::mamba_ssu_seed {
            rounds: 99,
            ..Default::default()
        },
        ..single()
    };
    let p = accept(&minimal, "minimal");
    assert_eq!((p.ngroups, p.dstate, p.stochastic_rounding), (1, 256, 0));

    // FlashInfer's one-head ranks: state (slots, dim, dstate), A (dim, dstate), D and dt_bias
    // (dim,), x, dt, B, C, z, out (batch, dim) and (batch, dstate).
    let one_head = sys::mamba_ssu_args {
        state: dense(1, F16, &[SLOTS, DIM, DS]),
        A: tensor(4, F32, &[DIM, DS], &[0, 0]),
        D: tensor(7, BF16, &[DIM], &[0]),
        dt_bias: tensor(9, BF16, &[DIM], &[0]),
        x: dense(2, BF16, &[BATCH, DIM]),
        z: dense(8, BF16, &[BATCH, DIM]),
        out: dense(10, BF16, &[BATCH, DIM]),
        dt: tensor(3, BF16, &[BATCH, DIM], &[1, 0]),
        B: dense(5, BF16, &[BATCH, DS]),
        C: dense(6, BF16, &[BATCH, DS]),
        ..single()
    };
    let p = accept(&one_head, "one head");
    assert_eq!(
        (p.nheads, p.ngroups, p.form),
        (1, 1, sys::MAMBA_SSU_FORM_SINGLE as i32)
    );

    // A stride of a size-1 dimension is never read; (batch, cols) I64 indices; a broadcast x.
    let mut a = single();
    for t in [
        &mut a.x, &mut a.z, &mut a.out, &mut a.dt, &mut a.B, &mut a.C,
    ] {
        t.shape[0] = 1;
        t.strides[0] = -12345;
    }
    a.state_batch_indices = tensor(11, I64, &[1, 4], &[7, 1]);
    a.dst_state_batch_indices = tensor(12, I64, &[1, 4], &[-3, 1]);
    a.state.shape[0] = 1;
    a.state.strides[0] = 5;
    assert_eq!(accept(&a, "size-1 strides").index_dtype, I64);
    accept(
        &sys::mamba_ssu_args {
            x: tensor(2, BF16, &[BATCH, NH, DIM], &[0, DIM, 1]),
            form: sys::MAMBA_SSU_FORM_SINGLE as i32,
            disable_state_update: 1,
            ..single()
        },
        "broadcast x",
    );
}

#[test]
fn multi_token_calls_of_every_write_mode_are_accepted() {
    // Fixed length, the read slot written (no write tensor).
    let p = accept(&fixed(), "fixed");
    assert_eq!(
        (p.form, p.varlen, p.batch, p.ntokens, p.total_tokens),
        (sys::MAMBA_SSU_FORM_MULTI as i32, 0, BATCH, T, BATCH * T)
    );
    assert_eq!(p.algorithm, sys::MAMBA_SSU_ALGO_SIMPLE as i32);
    // Per-token write slots, a 2-D read index with num_accepted_tokens, I64 everywhere.
    let p = accept(
        &sys::mamba_ssu_args {
            state_batch_indices: dense(11, I64, &[BATCH, T]),
            dst_state_batch_indices: tensor(12, I64, &[BATCH, T + 2], &[1, BATCH]),
            num_accepted_tokens: dense(16, I64, &[BATCH]),
            form: sys::MAMBA_SSU_FORM_MULTI as i32,
            ..fixed()
        },
        "fixed, dst",
    );
    assert_eq!(p.index_dtype, I64);
    // The intermediate buffer, cache_steps its size(1) (>= T).
    let p = accept(
        &sys::mamba_ssu_args {
            intermediate_states: dense(14, F16, &[3, T + 2, NH, DIM, DS]),
            intermediate_state_indices: dense(15, I32, &[BATCH]),
            cache_steps: T + 2,
            ..fixed()
        },
        "fixed, buffer",
    );
    assert_eq!((p.cache_steps, p.intermediate_cache_size), (T + 2, 3));
    // One token per sequence: a (batch, nheads, dim) x with cache_steps 1 (FlashInfer's
    // normalisation), the state left alone.
    let one = sys::mamba_ssu_args {
        cache_steps: 1,
        disable_state_update: 1,
        dst_state_batch_indices: absent(),
        ..single()
    };
    let p = accept(&one, "T = 1 through cache_steps");
    assert_eq!((p.form, p.ntokens), (sys::MAMBA_SSU_FORM_MULTI as i32, 1));

    // Varlen with the buffer.
    let p = accept(&varlen(), "varlen");
    assert_eq!(
        (p.varlen, p.batch, p.ntokens, p.total_tokens, p.cache_steps),
        (1, BATCH, T, TOTAL, T)
    );
    // Varlen with per-token write slots, and with none; no token rows at all.
    accept(
        &sys::mamba_ssu_args {
            intermediate_states: absent(),
            intermediate_state_indices: absent(),
            dst_state_batch_indices: dense(12, I32, &[BATCH, T]),
            ..varlen()
        },
        "varlen, dst",
    );
    let mut empty = sys::mamba_ssu_args {
        intermediate_states: absent(),
        intermediate_state_indices: absent(),
        ..varlen()
    };
    for t in [
        &mut empty.x,
        &mut empty.z,
        &mut empty.out,
        &mut empty.dt,
        &mut empty.B,
        &mut empty.C,
    ] {
        t.shape[0] = 0;
    }
    assert_eq!(accept(&empty, "varlen, no rows").total_tokens, 0);
}

/// FlashInfer 0.7.x's argument rules that the check follows: padded index tensors (size(0) >=
/// batch, a 2-D index wider than T), num_accepted_tokens and cu_seqlens with their own dtypes,
/// a 1-D dst index and a 1-D read index with num_accepted_tokens in the multi-token form,
/// intermediate_state_indices without a buffer (not read), the multi-token arguments ignored on
/// the single-token path, and any philox_rounds >= 1.
#[test]
fn flashinfer_argument_rules_are_accepted() {
    let plan = |a: &sys::mamba_ssu_args| {
        let mut out = sys::mamba_ssu_launch_plan::default();
        // SAFETY: valid pointers; num_sms > 0 touches no device.
        let status = unsafe { sys::mamba_ssu_plan(a, SMS, &mut out) };
        assert_eq!(status, OK);
        out
    };
    // Single token: padded read and write indices (engines pass their padded tensors).
    accept(
        &sys::mamba_ssu_args {
            state_batch_indices: dense(11, I64, &[BATCH + 3]),
            dst_state_batch_indices: dense(12, I64, &[BATCH + 1, 2]),
            ..single()
        },
        "single, padded indices",
    );
    // Single token: FlashInfer ignores intermediate_*, num_accepted_tokens and a cache_steps
    // below 1 there (whatever their shapes and dtypes).
    let p = accept(
        &sys::mamba_ssu_args {
            dst_state_batch_indices: absent(),
            intermediate_states: dense(14, F32, &[1, 1, 1, 1, 1]),
            intermediate_state_indices: dense(15, I64, &[7]),
            intermediate_state_scales: dense(21, F32, &[1, 2, 3]),
            num_accepted_tokens: dense(16, F32, &[BATCH, 5]),
            cache_steps: -4,
            ..single()
        },
        "single, multi-token arguments ignored",
    );
    assert_eq!(
        (p.form, p.cache_steps, p.index_dtype),
        (sys::MAMBA_SSU_FORM_SINGLE as i32, 0, I32)
    );
    // Fixed length: I64 num_accepted_tokens with I32 slot indices, padded rows and columns.
    let mixed = sys::mamba_ssu_args {
        state_batch_indices: dense(11, I32, &[BATCH + 2, T + 3]),
        dst_state_batch_indices: dense(12, I32, &[BATCH + 1, T]),
        num_accepted_tokens: dense(16, I64, &[BATCH + 5]),
        ..fixed()
    };
    assert_eq!(accept(&mixed, "fixed, mixed index dtypes").index_dtype, I32);
    // A 1-D dst index (every token of a sequence goes to one slot) and a 1-D read index with
    // num_accepted_tokens (FlashInfer reads its column 0).
    accept(
        &sys::mamba_ssu_args {
            state_batch_indices: dense(11, I64, &[BATCH]),
            dst_state_batch_indices: dense(12, I64, &[BATCH]),
            num_accepted_tokens: dense(16, I32, &[BATCH]),
            ..fixed()
        },
        "fixed, 1-D dst and read indices",
    );
    // intermediate_state_indices without a buffer: checked, not read.
    accept(
        &sys::mamba_ssu_args {
            intermediate_state_indices: dense(15, I32, &[BATCH]),
            ..fixed()
        },
        "fixed, intermediate_state_indices without a buffer",
    );
    // Varlen: I64 cu_seqlens with I32 slot indices.
    let p = accept(
        &sys::mamba_ssu_args {
            cu_seqlens: dense(13, I64, &[BATCH + 1]),
            ..varlen()
        },
        "varlen, I64 cu_seqlens",
    );
    assert_eq!(p.index_dtype, I32);
    // The slot indices' dtype without a read index: dst's, else intermediate_state_indices'.
    let p = accept(
        &sys::mamba_ssu_args {
            state_batch_indices: absent(),
            dst_state_batch_indices: dense(12, I64, &[BATCH, T]),
            ..fixed()
        },
        "fixed, dst only",
    );
    assert_eq!(p.index_dtype, I64);
    // Any philox_rounds >= 1, both forms.
    for rounds in [1, 3, 7, 11, 12, 64, i32::MAX] {
        for base in [single, fixed, varlen] {
            let mut a = base();
            a.seed.rounds = rounds;
            assert_eq!(
                accept(&a, &format!("rounds {rounds}")).stochastic_rounding,
                1
            );
        }
    }

    // The compiled-in kernels (F16 state, BF16 inputs, dstate 64, 128 or 256, 0, 5 or 10
    // rounds) serve indices of one dtype; other dtypes of num_accepted_tokens or cu_seqlens, and
    // other rounds, run the run-time kernels.
    for ds in [64, 128, 256] {
        let hot = |mut a: sys::mamba_ssu_args| {
            a.state = dense(1, F16, &[SLOTS, NH, DIM, ds]);
            a.A = tensor(4, F32, &[NH, DIM, ds], &[1, 0, 0]);
            let lead = a.B.shape[..a.B.rank as usize - 1].to_vec();
            let shape = [&lead[..lead.len() - 1], &[NG, ds]].concat();
            a.B = dense(5, BF16, &shape);
            a.C = dense(6, BF16, &shape);
            if a.intermediate_states.rank > 0 {
                let s = a.intermediate_states.shape;
                a.intermediate_states = dense(14, F16, &[s[0], s[1], NH, DIM, ds]);
            }
            a
        };
        let mixed = hot(mixed);
        assert_eq!(
            plan(&mixed).compiled_kernel,
            0,
            "{ds}: I64 num_accepted_tokens"
        );
        let uniform = sys::mamba_ssu_args {
            num_accepted_tokens: dense(16, I32, &[BATCH + 5]),
            ..mixed
        };
        assert_eq!(plan(&uniform).compiled_kernel, 1, "{ds}: I32 everywhere");
        let mut twelve = uniform;
        twelve.seed.rounds = 12;
        assert_eq!(plan(&twelve).compiled_kernel, 0, "{ds}: 12 rounds");
        let v = hot(varlen());
        assert_eq!(plan(&v).compiled_kernel, 1, "{ds}: varlen, I32 everywhere");
        let v64 = sys::mamba_ssu_args {
            cu_seqlens: dense(13, I64, &[BATCH + 1]),
            ..v
        };
        assert_eq!(
            plan(&v64).compiled_kernel,
            0,
            "{ds}: varlen, I64 cu_seqlens"
        );
    }
}

#[test]
fn every_seed_form_is_accepted() {
    let derived_values = sys::mamba_ssu_seed {
        mode: sys::MAMBA_SSU_SEED_MODE_DERIVED as i32,
        rounds: 5,
        rule: sys::MAMBA_SSU_SR_V074 as i32,
        position: sys::mamba_ssu_position {
            seed: u64::MAX,
            offset: 1 << 40,
            ..Default::default()
        },
        ..Default::default()
    };
    let derived_device = sys::mamba_ssu_seed {
        position: sys::mamba_ssu_position {
            seed_ptr: ph(42) as *const i64,
            offset_ptr: ph(43) as *const i64,
            offset: 12,
            ..Default::default()
        },
        ..derived_values
    };
    // A chain link: read a pointer, store the next link (position by value or on the device).
    let linked = sys::mamba_ssu_seed {
        next: ph(41) as *mut i64,
        position: derived_values.position,
        ..pointer_seed()
    };
    let linked_device = sys::mamba_ssu_seed {
        next: ph(41) as *mut i64,
        position: derived_device.position,
        ..pointer_seed()
    };
    // No rounding, but a fused chain's next link stored all the same.
    let none_with_next = sys::mamba_ssu_seed {
        mode: sys::MAMBA_SSU_SEED_MODE_NONE as i32,
        next: ph(41) as *mut i64,
        ..Default::default()
    };
    for (i, seed) in [
        derived_values,
        derived_device,
        linked,
        linked_device,
        none_with_next,
    ]
    .into_iter()
    .enumerate()
    {
        for base in [single, fixed, varlen] {
            let p = accept(
                &sys::mamba_ssu_args { seed, ..base() },
                &format!("seed {i}"),
            );
            assert_eq!(p.stochastic_rounding, i32::from(i != 4), "seed {i}");
        }
    }
}

#[test]
fn plans_come_from_the_checked_call() {
    let plan = |a: &sys::mamba_ssu_args, sms: i32| {
        let mut out = sys::mamba_ssu_launch_plan::default();
        // SAFETY: valid pointers; with sms > 0 the plan touches no device.
        let status = unsafe { sys::mamba_ssu_plan(a, sms, &mut out) };
        (status, out)
    };
    for (base, what) in [
        (single as fn() -> sys::mamba_ssu_args, "single"),
        (fixed, "fixed"),
        (varlen, "varlen"),
    ] {
        let (status, out) = plan(&base(), SMS);
        assert_eq!(status, OK, "{what}");
        assert!(out.grid_blocks >= BATCH * NH, "{what}: {out:?}");
        assert_eq!(out.num_sms, SMS, "{what}");
        assert_eq!(out.threads_per_block, 32 * out.warps_per_block, "{what}");
    }
    // 8 (batch, head) pairs on 2 SMs is above FlashInfer's switch, but head dim 8 is not one
    // its vertical kernel takes (multiples of 16 from 48): SIMPLE, as FlashInfer 0.7.4's rule
    // (the SM-count switch at other head dims: plans::auto_follows_flashinfer_per_architecture).
    assert_eq!(
        plan(&single(), 2).1.algorithm,
        sys::MAMBA_SSU_ALGO_SIMPLE as i32
    );
    // A fused chain's link block is part of the grid.
    let with_next = sys::mamba_ssu_args {
        seed: sys::mamba_ssu_seed {
            next: ph(41) as *mut i64,
            ..pointer_seed()
        },
        ..single()
    };
    assert_eq!(
        plan(&with_next, SMS).1.grid_blocks,
        plan(&single(), SMS).1.grid_blocks + 1
    );
    // The plan checks like the check, and needs its output.
    let (status, _) = plan(
        &sys::mamba_ssu_args {
            seed: sys::mamba_ssu_seed {
                mode: 7,
                ..pointer_seed()
            },
            ..single()
        },
        SMS,
    );
    assert_eq!(status, VAL);
    // SAFETY: a null output is one of the documented inputs.
    let status = unsafe { sys::mamba_ssu_plan(&single(), SMS, std::ptr::null_mut()) };
    assert_eq!(status, INV);
    // SAFETY: as above (a null call).
    let status = unsafe { sys::mamba_ssu_check(std::ptr::null(), std::ptr::null_mut()) };
    assert_eq!(status, INV);
}

/// A valid deprecated single-token parameter block (no seed).
fn legacy_single() -> sys::mamba_ssu_params {
    sys::mamba_ssu_params {
        batch: BATCH,
        nheads: NH,
        dim: DIM,
        dstate: DS,
        ngroups: NG,
        state_cache_size: SLOTS,
        state_stride_batch: NH * DIM * DS,
        x_stride_batch: NH * DIM,
        dt_stride_batch: NH,
        B_stride_batch: NG * DS,
        C_stride_batch: NG * DS,
        out_stride_batch: NH * DIM,
        pad_slot_id: -1,
        state: ph(1),
        x: ph(2),
        dt: ph(3),
        A: ph(4) as *const f32,
        B: ph(5),
        C: ph(6),
        out: ph(10),
        state_dtype: F16,
        input_dtype: BF16,
        weight_dtype: BF16,
        index_dtype: I32,
        update_state: 1,
        num_sms: SMS,
        ..Default::default()
    }
}

/// The deprecated single-token check of `p`: (status, the error's argument, its detail).
fn legacy_check(p: &sys::mamba_ssu_params) -> (i32, String, String) {
    // SAFETY: the check reads `p` only.
    let status = unsafe { sys::mamba_ssu_selective_state_update_check(p) };
    // SAFETY: static or thread-local NUL-terminated strings.
    let (arg, detail) = unsafe {
        (
            CStr::from_ptr(sys::mamba_ssu_last_error_argument()).to_string_lossy(),
            CStr::from_ptr(sys::mamba_ssu_last_error_detail()).to_string_lossy(),
        )
    };
    (status, arg.into_owned(), detail.into_owned())
}

/// The dstate rule of FlashInfer's sm_90 module (docs/flashinfer-ssu.md, "Shapes FlashInfer
/// takes on sm_90"), through the single-token block: the multiples of 32 from 64 to 512 served,
/// with an fp32 state the multiples of 16 from 32 to 512 but 112; every other dstate FlashInfer's
/// build takes (2-byte state: multiples of 32 from 64; fp32 state: multiples of 16 from 32)
/// UNSUPPORTED, the rest INVALID_ARGUMENT (FlashInfer's RuntimeError), naming `dstate`.
#[test]
fn dstates_follow_flashinfers_sm90_module() {
    let good = legacy_single();
    let c = legacy_check;
    assert_eq!(c(&good).0, OK);
    let mut taken = Vec::new();
    for state_dtype in [F16, BF16, F32] {
        for ds in -1..=560i64 {
            let p = sys::mamba_ssu_params {
                dstate: ds,
                state_dtype,
                ..good
            };
            let served = ((64..=512).contains(&ds) && ds % 32 == 0)
                || (state_dtype == F32 && (32..=512).contains(&ds) && ds % 16 == 0 && ds != 112);
            if served {
                // Served: any refusal is another rule's (an SR seed with a non-F16 state).
                let (status, arg, detail) = c(&p);
                assert!(status == OK || arg != "dstate", "{ds}: {detail}");
                continue;
            }
            let flashinfer_takes = if state_dtype == F32 {
                ds >= 32 && ds % 16 == 0
            } else {
                ds >= 64 && ds % 32 == 0
            };
            let (status, arg, detail) = c(&p);
            assert_eq!(arg, "dstate", "{ds}: {detail}");
            if flashinfer_takes {
                assert_eq!(status, UNS, "{ds}: {detail}");
                if ds == 112 {
                    assert!(detail.starts_with("dstate: 112 with an fp32 state is not served"));
                } else {
                    assert_eq!(
                        detail,
                        format!(
                            "dstate: expected a multiple of 32 from 64 to 512 (of 16 from 32 with \
                             an fp32 state), got {ds} (FlashInfer's sm_90 kernels take it; not \
                             served yet)"
                        )
                    );
                }
                taken.push((state_dtype, ds));
            } else {
                assert_eq!(status, INV, "{ds}: {detail}");
                assert!(
                    detail.starts_with("dstate: expected a multiple of"),
                    "{detail}"
                );
            }
        }
    }
    // dstate 544 is taken for every state dtype (above the served 512); 112 and 528 for an fp32
    // state only.
    for t in [F16, BF16, F32] {
        assert!(taken.contains(&(t, 544)), "{t} 544");
    }
    assert!(taken.contains(&(F32, 112)) && taken.contains(&(F32, 528)));
    assert!(!taken.contains(&(F16, 112)) && !taken.contains(&(F32, 48)));
}

/// The deprecated parameter blocks keep their behaviour: the flat seed fields become one
/// mamba_ssu_seed at entry and meet the same seed check, under the blocks' own names.
#[test]
fn deprecated_blocks_meet_the_same_seed_check() {
    let mut p = sys::mamba_ssu_params {
        philox_rounds: 10,
        seed_source: sys::MAMBA_SSU_SEED_FROM_VALUES as i32,
        seed_offset: 8,
        ..legacy_single()
    };
    let c = legacy_check;
    assert_eq!(c(&p).0, OK);
    p.seed_offset = 6;
    assert_eq!(
        c(&p),
        (
            INV,
            "seed_offset".to_string(),
            "seed_offset: expected a multiple of 4, got 6".to_string()
        )
    );
    p.seed_offset = 8;
    p.state_dtype = BF16;
    let (status, arg, _) = c(&p);
    assert_eq!((status, arg.as_str()), (INV, "philox_rounds"));
    p.state_dtype = F16;
    p.seed_next = (ph(41) as usize + 4) as *mut i64;
    let (status, arg, _) = c(&p);
    assert_eq!((status, arg.as_str()), (INV, "seed_next"));
    p.seed_next = std::ptr::null_mut();
    // Any count of rounds >= 0 (0: no SR), as the contract's seed.
    for rounds in [0, 1, 11, 12, 1000] {
        p.philox_rounds = rounds;
        assert_eq!(c(&p).0, OK, "rounds {rounds}");
    }
    p.philox_rounds = -1;
    assert_eq!(
        c(&p),
        (
            INV,
            "philox_rounds".to_string(),
            "philox_rounds: expected >= 0, got -1".to_string()
        )
    );
}
