//! [`validate_mtp`]: a multi-token call's layouts judged by the C contract (`mamba_ssu_check`
//! asked for the multi-token form, placeholder device pointers, no device touched), and the
//! rules only the Rust layer can check (every tensor inside its buffer; sizes that fit the C
//! types).

use crate::error::Result;
use crate::ffi::sys;
use crate::reference::SrRule;
use crate::ssu::contract::{self, Call, TENSORS};

use super::args::{MtpProblem, MtpSpec};

/// Most tokens per sequence of one multi-token call (the header's `MAMBA_SSU_MTP_MAX_TOKENS`).
pub const MTP_MAX_TOKENS: usize = sys::MAMBA_SSU_MTP_MAX_TOKENS as usize;

/// The C contract's view of `spec`: the multi-token form, each tensor under its FlashInfer
/// name, `cache_steps` as given or (the Rust API's default) the buffer's size(1).
pub(super) fn call_of(spec: &MtpSpec) -> Call {
    let mut t = [None; TENSORS];
    t[contract::STATE] = Some(spec.state);
    t[contract::X] = Some(spec.x);
    t[contract::DT] = Some(spec.dt);
    t[contract::A] = Some(spec.a);
    t[contract::B] = Some(spec.b);
    t[contract::C] = Some(spec.c);
    t[contract::D] = spec.d;
    t[contract::Z] = spec.z;
    t[contract::DT_BIAS] = spec.dt_bias;
    t[contract::OUT] = Some(spec.out);
    t[contract::STATE_BATCH_INDICES] = spec.state_batch_indices;
    t[contract::DST_STATE_BATCH_INDICES] = spec.dst_state_batch_indices;
    t[contract::INTERMEDIATE_STATES] = spec.intermediate_states_buffer;
    t[contract::INTERMEDIATE_STATE_INDICES] = spec.intermediate_state_indices;
    t[contract::CU_SEQLENS] = spec.cu_seqlens;
    t[contract::NUM_ACCEPTED_TOKENS] = spec.num_accepted_tokens;
    let mut call = Call::new(sys::MAMBA_SSU_FORM_MULTI, t);
    let buffer_steps = spec
        .intermediate_states_buffer
        .filter(|b| b.rank() >= 2)
        .map(|b| b.shape()[1]);
    call.cache_steps = spec.cache_steps.or(buffer_steps).unwrap_or(0);
    call
}

/// [`validate_mtp`], also returning the call it checked.
pub(super) fn checked(spec: &MtpSpec) -> Result<(Call, MtpProblem)> {
    let call = call_of(spec);
    // The SR rule is the call's (`MtpArgs::sr_rule`): every value of it is valid, and the
    // multi-token plan does not depend on it, so the spec does not carry it.
    let p = call.check(spec.seed.as_ref(), spec.philox_rounds, SrRule::V072)?;
    let problem = MtpProblem {
        batch: contract::size(p.batch),
        ntokens: contract::size(p.ntokens),
        total_tokens: (p.varlen != 0).then(|| contract::size(p.total_tokens)),
        nheads: contract::size(p.nheads),
        dim: contract::size(p.dim),
        dstate: contract::size(p.dstate),
        ngroups: contract::size(p.ngroups),
        cache_slots: contract::size(p.state_cache_size),
        intermediate: spec.intermediate_states_buffer.map(|_| {
            (
                contract::size(p.intermediate_cache_size),
                contract::size(p.cache_steps),
            )
        }),
        state_dtype: contract::dtype(p.state_dtype)?,
        input_dtype: contract::dtype(p.input_dtype)?,
        weight_dtype: contract::dtype(p.weight_dtype)?,
        index_dtype: if call.has_indices() {
            Some(contract::dtype(p.index_dtype)?)
        } else {
            None
        },
        stochastic_rounding: p.stochastic_rounding != 0,
    };
    Ok((call, problem))
}

/// Checks a multi-token call's layouts and flags against the contract (the [module
/// docs](super)); a pure function of `spec`, no device involved. Returns the call's sizes and
/// dtypes as the C check describes them.
///
/// As [`validate`](crate::ssu::validate): the C check (`mamba_ssu_check`, asked for the
/// multi-token form) decides every rule of the contract and names the argument; then the rules
/// only this layer sees (buffers, sizes above `i64::MAX`, the seed tensor's memory).
pub fn validate_mtp(spec: &MtpSpec) -> Result<MtpProblem> {
    checked(spec).map(|(_, problem)| problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::ssu::mtp::fixtures::*;
    use crate::ssu::props::{self, Rng};
    use crate::ssu::SeedSpec;
    use crate::tensor::{DType, TensorLayout};

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

    /// What the Rust front door adds to a call before C sees it: `cache_steps` defaults to the
    /// buffer's size(1) (fixed length and varlen), and a varlen call without token rows has
    /// empty buffers that reach no element.
    #[test]
    fn the_front_doors_defaults() {
        let p = validate_mtp(&with_varlen(|s| s.cache_steps = None)).unwrap();
        assert_eq!((p.ntokens, p.intermediate), (T, Some((ENTRIES, T))));
        let p = validate_mtp(&with(|s| {
            s.dst_state_batch_indices = None;
            s.intermediate_states_buffer = Some(contiguous(DType::F16, &[1, 8, NH, DIM, DS]));
        }))
        .unwrap();
        assert_eq!((p.ntokens, p.intermediate), (T, Some((1, 8))));
        assert_eq!(call_of(&base()).cache_steps, 0, "not given: FlashInfer's 0");
        let p = validate_mtp(&with_varlen(|s| {
            for l in [&mut s.x, &mut s.out, s.z.as_mut().unwrap()] {
                *l = contiguous(DType::BF16, &[0, NH, DIM]);
            }
            s.dt = lay(DType::BF16, &[0, NH, DIM], &[NH, 1, 0]);
            s.b = contiguous(DType::BF16, &[0, NG, DS]);
            s.c = s.b;
        }))
        .unwrap();
        assert_eq!(p.total_tokens, Some(0));
        // No optional tensor, fp32, round to nearest: no index dtype.
        let p = validate_mtp(&with(|s| {
            (s.d, s.z, s.dt_bias) = (None, None, None);
            (s.state_batch_indices, s.dst_state_batch_indices) = (None, None);
            s.philox_rounds = 0;
            s.seed = Some(SeedSpec::Pointer(lay(DType::I32, &[3], &[1])));
        }))
        .unwrap();
        assert_eq!((p.index_dtype, p.stochastic_rounding), (None, false));
    }

    /// A case: a change to a baseline, whether the error is `Unsupported`, the argument it
    /// must name and a piece of its message.
    type Case = (fn(&mut MtpSpec), bool, &'static str, &'static str);

    fn check_cases(base: fn() -> MtpSpec, cases: &[Case]) {
        for (i, (change, unsupported, argument, needle)) in cases.iter().enumerate() {
            let mut spec = base();
            change(&mut spec);
            let (got_unsupported, got, message) = match validate_mtp(&spec) {
                Err(Error::InvalidArgument { argument, message }) => (false, argument, message),
                Err(Error::Unsupported { argument, message }) => (true, argument, message),
                other => panic!("case {i} ({argument}): expected an error, got {other:?}"),
            };
            assert_eq!(
                (got_unsupported, got),
                (*unsupported, *argument),
                "case {i}: {message}"
            );
            assert!(
                message.contains(needle),
                "case {i}: {message:?} lacks {needle:?}"
            );
        }
    }

    /// The C check's rejections surface through `validate_mtp` as its `Error` variants, naming
    /// the argument as C does (the rules are tested once at the C level: `contract_tests`).
    #[rustfmt::skip]
    #[test]
    fn c_rejections_name_their_argument() {
        check_cases(base, &[
            (|s| s.x.strides[3] = 2, false, "x", "expected stride(3) == 1 (1), got 2"),
            (|s| s.out.strides[1] = ROW - 8, false, "out",
                "out_stride_token: expected >= nheads * dim (32)"),
            (|s| s.philox_rounds = 11, false, "philox_rounds", "got 11"),
            (|s| s.state.dtype = DType::BF16, true, "philox_rounds", "needs an F16 state"),
            (|s| s.seed = None, false, "seed.pointer", "null pointer"),
            // The multi-token form is asked for: a 3-D x without cu_seqlens or cache_steps is
            // the single-token form, refused.
            (|s| s.x = contiguous(DType::BF16, &[BATCH * T, NH, DIM]), false, "form",
                "MULTI asked, but the call is single-token"),
            (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, T - 1])),
                false, "dst_state_batch_indices", "narrower than the longest sequence"),
        ]);
        check_cases(base_varlen, &[
            (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, T])), false,
                "dst_state_batch_indices", "two write modes at once"),
            (|s| { s.cache_steps = None; s.intermediate_states_buffer = None;
                   s.intermediate_state_indices = None; }, false, "cache_steps",
                "needs cache_steps >= 1"),
            // A cache_steps other than the buffer's size(1): FlashInfer steps by cache_steps.
            (|s| s.cache_steps = Some(T + 1), false, "intermediate_states_buffer",
                "expected size(1) == cache_steps (5"),
            (|s| s.cu_seqlens = Some(contiguous(DType::I64, &[BATCH + 1])), false, "cu_seqlens",
                "every index tensor has one dtype"),
        ]);
    }

    /// What only the Rust layer sees, after the C check accepts: each tensor's reach inside its
    /// buffer (every tensor of the form named), the seed tensor's memory.
    #[rustfmt::skip]
    #[test]
    fn rust_only_rules() {
        fn short(l: &mut TensorLayout) {
            *l = TensorLayout::new(l.dtype(), l.shape(), l.strides(), l.max_offset().unwrap())
                .unwrap();
        }
        check_cases(base, &[
            (|s| short(&mut s.state), false, "state", "but the buffer holds"),
            (|s| short(&mut s.x), false, "x", "but the buffer holds"),
            (|s| short(&mut s.dt), false, "dt", "but the buffer holds"),
            (|s| short(&mut s.a), false, "A", "but the buffer holds"),
            (|s| short(&mut s.b), false, "B", "but the buffer holds"),
            (|s| short(&mut s.c), false, "C", "but the buffer holds"),
            (|s| short(s.d.as_mut().unwrap()), false, "D", "but the buffer holds"),
            (|s| short(s.z.as_mut().unwrap()), false, "z", "but the buffer holds"),
            (|s| short(s.dt_bias.as_mut().unwrap()), false, "dt_bias", "but the buffer holds"),
            (|s| short(&mut s.out), false, "out", "but the buffer holds"),
            (|s| short(s.state_batch_indices.as_mut().unwrap()), false, "state_batch_indices",
                "but the buffer holds"),
            (|s| short(s.dst_state_batch_indices.as_mut().unwrap()), false,
                "dst_state_batch_indices", "but the buffer holds"),
            (|s| s.seed = Some(SeedSpec::Pointer(contiguous(DType::I32, &[1]))), false,
                "rand_seed", "one I64 element"),
        ]);
        check_cases(base_varlen, &[
            (|s| short(s.intermediate_states_buffer.as_mut().unwrap()), false,
                "intermediate_states_buffer", "but the buffer holds"),
            (|s| short(s.intermediate_state_indices.as_mut().unwrap()), false,
                "intermediate_state_indices", "but the buffer holds"),
            (|s| short(s.cu_seqlens.as_mut().unwrap()), false, "cu_seqlens",
                "but the buffer holds"),
            (|s| short(s.num_accepted_tokens.as_mut().unwrap()), false, "num_accepted_tokens",
                "but the buffer holds"),
            (|s| s.cache_steps = Some(usize::MAX), false, "cache_steps",
                "does not fit in the C ABI's int64"),
        ]);
    }

    /// A random multi-token call (fixed length or varlen; every tensor's shape from common
    /// sizes, inner strides canonical), then at most one mutation: a size to a limit or an
    /// overflowing value, a stride near its bound, a dtype, an optional tensor, an index width,
    /// a write mode, the rounds, the seed, or a buffer one element short.
    fn random_spec(rng: &mut Rng) -> Option<MtpSpec> {
        let try_lay = props::try_lay;
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
        let mut cu_dtype = idx_dtype;
        let mut sbi_width = rng.pick(&[0usize, 1, 4]);
        let mut with_sbi = rng.chance(70);
        let mut with_nat = rng.chance(30);
        let mut mode = rng.next() % 3; // 0 the read slot, 1 dst, 2 buffer
        let mut with_isi = mode == 2 && rng.chance(50);
        let mut slots = batch + rng.pick(&[0usize, 1, 7]);
        let mut entries = rng.pick(&[1usize, 3]);
        let mut extra_steps = rng.pick(&[0usize, 0, 3]);
        let mut dst_width = t + rng.pick(&[0usize, 0, 2]);
        let mut cache_steps: Option<Option<usize>> = None; // None: as the form needs
        let mut seed = match rng.next() % 3 {
            0 => Some(SeedSpec::FromGenerator {
                offset: 4 * (rng.next() % 1000),
            }),
            1 => Some(SeedSpec::FromValues {
                seed: rng.next(),
                offset: 8,
            }),
            _ => Some(SeedSpec::Pointer(try_lay(DType::I64, &[1], &[1])?)),
        };
        let (mut with_d, mut with_z, mut with_bias) =
            (rng.chance(70), rng.chance(50), rng.chance(70));
        let mutation = rng.next() % 40;
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
                    Some(SeedSpec::Pointer(try_lay(DType::I32, &[1], &[1])?)),
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
            22 => cu_dtype = rng.pick(&[DType::I32, DType::I64]),
            23 => cache_steps = Some(rng.pick(&[None, Some(0), Some(1), Some(t + 1)])),
            _ => {}
        }
        let align = |d: DType| 16 / d.size_bytes();
        let up = |v: usize, a: usize| v.div_ceil(a).checked_mul(a);
        let head = dim.checked_mul(dstate)?;
        let slot = up(nheads.checked_mul(head)?, align(state_dtype))?;
        let row = nheads.checked_mul(dim)?;
        let bcrow = up(ngroups.checked_mul(dstate)?, align(input))?;
        // Token strides (elements): x, out, z rows; B rows; dt rows.
        let (mut xs, mut os, mut zs, mut bs, mut dts) = (row, row, row, bcrow, nheads);
        let (mut xb, mut ob, mut bb, mut ss) = (0usize, 0usize, 0usize, slot);
        if rng.chance(20) {
            ss = slot + 64;
        }
        match mutation {
            24 => xs = rng.pick(&[0, row + 1, 1 << 62]),
            25 => os = rng.pick(&[0, row.saturating_sub(1), row + 1, 1 << 40]),
            26 => zs = rng.pick(&[0, row + 3]),
            27 => bs = rng.pick(&[0, bcrow + 1, bcrow + align(input), 1 << 62]),
            28 => dts = rng.pick(&[0, 1 << 62]),
            29 => ss = rng.pick(&[slot.saturating_sub(1), slot + 1, 1 << 62]),
            30 => ob = rng.pick(&[1, 2]), // the batch stride of out below a whole sequence
            31 => xb = 1 << 61,
            32 => bb = rng.pick(&[1, 1 << 62]),
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
        // A token tensor: leading (batch, T) or (total,) dimensions, then `inner`.
        let token =
            |dtype: DType, stride: usize, b: usize, inner: [usize; 2], inner_s: [usize; 2]| {
                let (mut shape, mut strides) = if varlen {
                    (vec![total], vec![stride])
                } else {
                    let seq = t.max(1).saturating_mul(stride);
                    let bstride = match b {
                        0 => seq,
                        1 => seq.saturating_sub(1),
                        2 => stride,
                        e => e,
                    };
                    (vec![batch, t], vec![bstride, stride])
                };
                shape.extend_from_slice(&inner);
                strides.extend_from_slice(&inner_s);
                try_lay(dtype, &shape, &strides)
            };
        let index = |dtype: DType, shape: &[usize]| -> Option<TensorLayout> {
            let strides = if shape.len() == 2 {
                vec![shape[1], 1]
            } else {
                vec![1]
            };
            try_lay(dtype, shape, &strides)
        };
        let opt = |on: bool, l: Option<TensorLayout>| if on { l.map(Some) } else { Some(None) };
        let with_buffer = mode >= 2;
        let with_dst = mode == 1 || mode == 3;
        let buffer = || {
            let shape = [entries, steps, nheads, dim, dstate];
            let n = shape.iter().try_fold(1usize, |a, &v| a.checked_mul(v))?;
            TensorLayout::contiguous(state_dtype, &shape, n).ok()
        };
        let sbi_shape = if sbi_width == 0 {
            vec![batch]
        } else {
            vec![batch, sbi_width]
        };
        let mut spec = MtpSpec {
            state: try_lay(
                state_dtype,
                &[slots, nheads, dim, dstate],
                &[ss, head, dstate, 1],
            )?,
            x: token(input, xs, xb, [nheads, dim], [dim, 1])?,
            dt: token(weight, dts, 0, [nheads, dim], [1, 0])?,
            a: try_lay(DType::F32, &[nheads, dim, dstate], &[1, 0, 0])?,
            b: token(input, bs, bb, [ngroups, dstate], [dstate, 1])?,
            c: token(input, bcrow, 0, [ngroups, dstate], [dstate, 1])?,
            d: opt(with_d, try_lay(weight, &[nheads, dim], &[1, 0]))?,
            z: opt(with_z, token(input, zs, 0, [nheads, dim], [dim, 1]))?,
            dt_bias: opt(with_bias, try_lay(weight, &[nheads, dim], &[1, 0]))?,
            state_batch_indices: opt(with_sbi, index(idx_dtype, &sbi_shape))?,
            dst_state_batch_indices: opt(with_dst, index(idx_dtype, &[batch, dst_width]))?,
            num_accepted_tokens: opt(with_nat, index(idx_dtype, &[batch]))?,
            cu_seqlens: opt(varlen, index(cu_dtype, &[batch + 1]))?,
            intermediate_states_buffer: opt(with_buffer, buffer())?,
            intermediate_state_indices: opt(with_isi, index(idx_dtype, &[batch]))?,
            cache_steps: cache_steps.unwrap_or(if varlen {
                Some(if with_buffer { steps } else { t })
            } else {
                None
            }),
            out: token(input, os, ob, [nheads, dim], [dim, 1])?,
            philox_rounds: rounds,
            seed,
        };
        if mutation >= 36 {
            // One buffer one element short (a Rust-only rule when C accepts the call).
            let l = match rng.next() % 4 {
                0 => &mut spec.state,
                1 => &mut spec.x,
                2 => &mut spec.c,
                _ => &mut spec.a,
            };
            *l = TensorLayout::new(l.dtype(), l.shape(), l.strides(), l.len().saturating_sub(1))
                .ok()?;
        }
        Some(spec)
    }

    /// The tensors of `spec` under their C names, in `mamba_ssu_args` order.
    fn named(spec: &MtpSpec) -> [(&'static str, Option<TensorLayout>); 16] {
        [
            ("state", Some(spec.state)),
            ("x", Some(spec.x)),
            ("dt", Some(spec.dt)),
            ("A", Some(spec.a)),
            ("B", Some(spec.b)),
            ("C", Some(spec.c)),
            ("D", spec.d),
            ("z", spec.z),
            ("dt_bias", spec.dt_bias),
            ("out", Some(spec.out)),
            ("state_batch_indices", spec.state_batch_indices),
            ("dst_state_batch_indices", spec.dst_state_batch_indices),
            (
                "intermediate_states_buffer",
                spec.intermediate_states_buffer,
            ),
            (
                "intermediate_state_indices",
                spec.intermediate_state_indices,
            ),
            ("cu_seqlens", spec.cu_seqlens),
            ("num_accepted_tokens", spec.num_accepted_tokens),
        ]
    }

    /// The `mamba_ssu_args` a C caller fills for the same tensors and options (cache_steps:
    /// the given one, else the buffer's size(1), else 0).
    fn raw_args(spec: &MtpSpec) -> sys::mamba_ssu_args {
        let t = props::raw_tensor;
        let steps = spec
            .cache_steps
            .or(spec.intermediate_states_buffer.map(|b| b.shape()[1]))
            .unwrap_or(0);
        sys::mamba_ssu_args {
            state: t(Some(spec.state), 1),
            x: t(Some(spec.x), 2),
            dt: t(Some(spec.dt), 3),
            A: t(Some(spec.a), 4),
            B: t(Some(spec.b), 5),
            C: t(Some(spec.c), 6),
            D: t(spec.d, 7),
            z: t(spec.z, 8),
            dt_bias: t(spec.dt_bias, 9),
            out: t(Some(spec.out), 10),
            state_batch_indices: t(spec.state_batch_indices, 11),
            dst_state_batch_indices: t(spec.dst_state_batch_indices, 12),
            intermediate_states: t(spec.intermediate_states_buffer, 13),
            intermediate_state_indices: t(spec.intermediate_state_indices, 14),
            cu_seqlens: t(spec.cu_seqlens, 15),
            num_accepted_tokens: t(spec.num_accepted_tokens, 16),
            pad_slot_id: -1,
            cache_steps: steps as i64,
            form: sys::MAMBA_SSU_FORM_MULTI as i32,
            seed: props::raw_seed(spec.seed, spec.philox_rounds, SrRule::V072),
            ..Default::default()
        }
    }

    /// One contract behind both front doors, multi-token: for random calls, `validate_mtp`
    /// gives the raw C check's verdict (kind and argument), except on calls C accepts where a
    /// Rust-only rule fires (predicted here on its own).
    #[test]
    fn validate_mtp_agrees_with_the_raw_c_check() {
        let mut rng = Rng(0x4D54_5000_C0DE);
        let named_args = props::agree(20_000, || {
            let spec = random_spec(&mut rng)?;
            let c = props::c_verdict(&raw_args(&spec));
            let want = props::expected(c, &named(&spec), spec.seed, spec.philox_rounds);
            Some((
                props::rust_verdict(&validate_mtp(&spec)),
                want,
                format!("{spec:?}"),
            ))
        });
        for a in [
            "state",
            "x",
            "C",
            "cache_steps",
            "dst_state_batch_indices",
            "intermediate_states_buffer",
            "cu_seqlens",
            "rand_seed",
        ] {
            assert!(
                named_args.get(a).is_some_and(|&n| n > 10),
                "{a}: {named_args:?}"
            );
        }
    }
}
