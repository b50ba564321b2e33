//! The deprecated multi-token parameter block (`mamba_ssu_mtp_params` through
//! `mamba_ssu_selective_state_update_mtp_check`) at the C level: it keeps working for C
//! callers, and its check (the one `mamba_ssu_check` lowers a multi-token call onto) rejects
//! every field out of its range with the block's own names — among them what a tensor
//! descriptor cannot express (NULL or misaligned pointers, negative strides, the flat seed
//! fields).

use super::*;

const ROW: i64 = NH * DIM;
const SLOT_STRIDE: i64 = NH * DIM * DS + 64;
const ENTRIES: i64 = 3;

/// A placeholder address 4 KiB apart (checked, never read), `bytes` past tensor `k`'s.
fn at(k: usize, bytes: usize) -> *mut c_void {
    (0x1000_0000usize + k * 0x1000 + bytes) as *mut c_void
}

/// The fixed-length baseline: (BATCH, T) tokens, contiguous, a 1-D read index, a (BATCH, T)
/// dst index, every optional tensor, SR with a seed pointer.
fn fixed_block() -> sys::mamba_ssu_mtp_params {
    sys::mamba_ssu_mtp_params {
        batch: BATCH,
        ntokens: T,
        nheads: NH,
        dim: DIM,
        dstate: DS,
        ngroups: NG,
        state_cache_size: SLOTS,
        state_stride_batch: SLOT_STRIDE,
        x_stride_batch: T * ROW,
        x_stride_token: ROW,
        dt_stride_batch: T * NH,
        dt_stride_token: NH,
        B_stride_batch: T * NG * DS,
        B_stride_token: NG * DS,
        C_stride_batch: T * NG * DS,
        C_stride_token: NG * DS,
        z_stride_batch: T * ROW,
        z_stride_token: ROW,
        out_stride_batch: T * ROW,
        out_stride_token: ROW,
        state_batch_indices_stride: 1,
        dst_state_batch_indices_stride: T,
        dst_state_batch_indices_stride_col: 1,
        dst_state_batch_indices_cols: T,
        pad_slot_id: -1,
        state: at(1, 0),
        x: at(2, 0),
        dt: at(3, 0),
        A: at(4, 0) as *const f32,
        B: at(5, 0),
        C: at(6, 0),
        out: at(7, 0),
        D: at(8, 0),
        z: at(9, 0),
        dt_bias: at(10, 0),
        state_batch_indices: at(11, 0),
        dst_state_batch_indices: at(12, 0),
        rand_seed: at(17, 0) as *const i64,
        state_dtype: F16,
        input_dtype: BF16,
        weight_dtype: BF16,
        index_dtype: I32,
        dt_softplus: 1,
        update_state: 1,
        philox_rounds: 10,
        seed_source: sys::MAMBA_SSU_SEED_POINTER as i32,
        num_sms: SMS,
        ..Default::default()
    }
}

/// The varlen baseline: TOTAL token rows, cu_seqlens, a (BATCH, 3) read index picked by
/// num_accepted_tokens, an intermediate buffer of ENTRIES entries with entry indices, no dst.
fn varlen_block() -> sys::mamba_ssu_mtp_params {
    let f = fixed_block();
    sys::mamba_ssu_mtp_params {
        total_tokens: TOTAL,
        cache_steps: T,
        intermediate_cache_size: ENTRIES,
        x_stride_batch: 0,
        dt_stride_batch: 0,
        B_stride_batch: 0,
        C_stride_batch: 0,
        z_stride_batch: 0,
        out_stride_batch: 0,
        state_batch_indices_stride: 3,
        state_batch_indices_stride_col: 1,
        state_batch_indices_cols: 3,
        dst_state_batch_indices_stride: 0,
        dst_state_batch_indices_stride_col: 0,
        dst_state_batch_indices_cols: 0,
        num_accepted_tokens_stride: 1,
        cu_seqlens_stride: 1,
        intermediate_state_indices_stride: 1,
        dst_state_batch_indices: std::ptr::null(),
        num_accepted_tokens: at(13, 0),
        cu_seqlens: at(14, 0),
        intermediate_states: at(15, 0),
        intermediate_state_indices: at(16, 0),
        ..f
    }
}

/// The block check's verdict: Ok, or (status, detail).
fn block_check(p: &sys::mamba_ssu_mtp_params) -> Result<(), (i32, String)> {
    // SAFETY: the check reads `p` only (pointer values included, never the memory behind
    // them); the detail is copied at once.
    unsafe {
        match sys::mamba_ssu_selective_state_update_mtp_check(p) {
            OK => Ok(()),
            s => Err((
                s,
                CStr::from_ptr(sys::mamba_ssu_last_error_detail())
                    .to_string_lossy()
                    .into_owned(),
            )),
        }
    }
}

/// A change to a valid block, the status and the start of the detail.
type BlockCase = (fn(&mut sys::mamba_ssu_mtp_params), i32, &'static str);

fn check_block_cases(good: sys::mamba_ssu_mtp_params, cases: &[BlockCase]) {
    assert_eq!(block_check(&good), Ok(()));
    for (i, (change, status, needle)) in cases.iter().enumerate() {
        let mut p = good;
        change(&mut p);
        match block_check(&p) {
            Err((s, detail)) => {
                assert_eq!(s, *status, "case {i}: {detail}");
                assert!(
                    detail.starts_with(needle),
                    "case {i}: {detail:?} lacks {needle:?}"
                );
            }
            Ok(()) => panic!("case {i} ({needle}): accepted"),
        }
    }
}

fn bump<P>(p: *const P, bytes: usize) -> *const P {
    (p as usize + bytes) as *const P
}

#[rustfmt::skip]
#[test]
fn the_multi_token_block_check_rejects_each_field_out_of_range() {
    // SAFETY: a null block is one of the documented inputs.
    assert_eq!(unsafe { sys::mamba_ssu_selective_state_update_mtp_check(std::ptr::null()) }, INV);
    check_block_cases(fixed_block(), &[
        (|p| p.ntokens = 17, INV, "ntokens: expected 1..=16, got 17"),
        (|p| p.ntokens = 0, INV, "ntokens: expected 1..=16, got 0"),
        (|p| p.batch = 0, INV, "batch: expected >= 1"),
        (|p| p.nheads = 0, INV, "nheads"),
        (|p| p.dim = (1 << 30) + 1, INV, "dim: expected 1..=1073741824"),
        (|p| p.dstate = 544, UNS,
            "dstate: expected a multiple of 32 from 64 to 512 (of 16 from 32 with an \
             fp32 state), got 544"),
        // Dstates FlashInfer's sm_90 module does not build (its RuntimeError).
        (|p| p.dstate = 100, INV, "dstate: expected a multiple of 32 from 64"),
        (|p| p.dstate = 32, INV, "dstate: expected a multiple of 32 from 64"),
        (|p| { p.dstate = 528; p.state_dtype = F32; p.philox_rounds = 0; }, UNS,
            "dstate: expected a multiple of 32 from 64 to 512 (of 16 from 32 with an \
             fp32 state), got 528"),
        (|p| { p.dstate = 112; p.state_dtype = F32; p.philox_rounds = 0; }, UNS,
            "dstate: 112 with an fp32 state is not served"),
        (|p| { p.dstate = 40; p.state_dtype = F32; p.philox_rounds = 0; }, INV,
            "dstate: expected a multiple of 16 from 32"),
        (|p| p.ngroups = 3, INV, "ngroups: expected a divisor of nheads (4), got 3"),
        (|p| p.state_cache_size = 0, INV, "state_cache_size"),
        (|p| { p.state_batch_indices = std::ptr::null(); p.state_cache_size = 1; }, INV,
            "state_cache_size: without state_batch_indices"),
        (|p| { p.batch = 1 << 28; p.nheads = 2; p.ngroups = 1; }, UNS,
            "batch: batch * nheads * max(4, ceil(dim / 64))"),
        (|p| p.state_dtype = 7, INV, "state_dtype"),
        (|p| p.input_dtype = I32, INV, "input_dtype"),
        (|p| p.weight_dtype = -1, INV, "weight_dtype"),
        (|p| p.index_dtype = F32, INV, "index_dtype"),
        (|p| p.sr_rule = 2, INV, "sr_rule: expected V072 (0) or V074 (1), got 2"),
        (|p| p.seed_source = 3, INV, "seed_source"),
        (|p| p.philox_rounds = -1, INV, "philox_rounds: expected >= 0, got -1"),
        (|p| p.state_dtype = BF16, INV, "philox_rounds"),
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
    check_block_cases(varlen_block(), &[
        (|p| p.total_tokens = -1, INV, "total_tokens: expected >= 0, got -1"),
        (|p| p.cache_steps = T - 1, INV, "cache_steps: expected >= ntokens (4), got 3"),
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
        // num_accepted_tokens' and cu_seqlens' own dtypes (0: index_dtype).
        (|p| p.cu_seqlens_dtype = 9, INV, "cu_seqlens_dtype: expected I32, I64 or 0"),
        (|p| { p.cu_seqlens_dtype = I64; p.cu_seqlens = bump(p.cu_seqlens, 4); }, INV,
            "cu_seqlens: expected a 8-byte aligned"),
    ]);
    // Varlen reads no batch stride; one token row needs no token stride; cols 0 is 1-D; the
    // flat seed fields of every source.
    let ok = |f: fn(&mut sys::mamba_ssu_mtp_params), mut p: sys::mamba_ssu_mtp_params| {
        f(&mut p);
        assert_eq!(block_check(&p), Ok(()));
    };
    ok(|p| { p.x_stride_batch = -5; p.B_stride_batch = 3; p.out_stride_batch = -1; }, varlen_block());
    ok(|p| { p.total_tokens = 1; p.out_stride_token = 0; }, varlen_block());
    ok(|p| p.total_tokens = 0, varlen_block());
    ok(|p| { p.state_batch_indices_cols = 0; p.state_batch_indices_stride_col = -3; }, varlen_block());
    ok(|p| { p.seed_source = 2; p.seed_offset = 8; p.rand_seed = std::ptr::null(); }, fixed_block());
    ok(|p| p.sr_rule = sys::MAMBA_SSU_SR_V074 as i32, fixed_block());
    ok(|p| p.philox_rounds = 12, fixed_block());
    ok(|p| { p.cu_seqlens_dtype = I64; p.index_dtype = I32; }, varlen_block());
    ok(|p| { p.generator_seed_ptr = 0x2000_0000usize as *const i64;
             p.generator_offset_ptr = 0x2000_0008usize as *const i64;
             p.seed_source = 1; p.seed_offset = 4; }, fixed_block());
}
