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
    t[contract::STATE_SCALE] = spec.state_scale;
    t[contract::INTERMEDIATE_STATE_SCALES] = spec.intermediate_state_scales;
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
    let problem = contract::problem!(MtpProblem, p, call, {
        ntokens: contract::size(p.ntokens),
        total_tokens: (p.varlen != 0).then(|| contract::size(p.total_tokens)),
        intermediate: spec.intermediate_states_buffer.map(|_| {
            (
                contract::size(p.intermediate_cache_size),
                contract::size(p.cache_steps),
            )
        }),
    });
    Ok((call, problem))
}

/// The multi-token [`validate`](crate::ssu::validate): `spec` judged by the C check
/// (`mamba_ssu_check` asked for the multi-token form, placeholder pointers, no device touched),
/// which decides every rule of the contract ([module docs](super)) and names the argument it
/// rejects, then by the rules only this layer sees (buffers, sizes above `i64::MAX`, the seed
/// tensor's memory). Returns the sizes and dtypes the C check describes.
pub fn validate_mtp(spec: &MtpSpec) -> Result<MtpProblem> {
    checked(spec).map(|(_, problem)| problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssu::mtp::fixtures::*;
    use crate::ssu::props::{self, check_cases, given, shorten, Common, Rng};
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

    /// The C check's rejections surface through `validate_mtp` as its `Error` variants, naming
    /// the argument as C does (the rules are tested once at the C level: `contract_tests`).
    #[rustfmt::skip]
    #[test]
    fn c_rejections_name_their_argument() {
        check_cases(base, validate_mtp, &[
            (|s| s.x.strides[3] = 2, false, "x", "expected stride(3) == 1 (1), got 2"),
            (|s| s.out.strides[1] = ROW - 8, false, "out",
                "out_stride_token: expected >= nheads * dim (32)"),
            (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH - 1, T])), false,
                "dst_state_batch_indices", "expected size(0) >= batch (2), got 1"),
            (|s| s.state.dtype = DType::BF16, false, "philox_rounds", "needs an F16 state"),
            (|s| s.seed = None, false, "seed.pointer", "null pointer"),
            // The multi-token form is asked for: a 3-D x without cu_seqlens or cache_steps is
            // the single-token form, refused.
            (|s| s.x = contiguous(DType::BF16, &[BATCH * T, NH, DIM]), false, "form",
                "MULTI asked, but the call is single-token"),
            (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, T - 1])),
                false, "dst_state_batch_indices", "expected size(1) >= T (4), got 3"),
        ]);
        check_cases(base_varlen, validate_mtp, &[
            (|s| s.dst_state_batch_indices = Some(contiguous(DType::I32, &[BATCH, T])), false,
                "dst_state_batch_indices", "two write modes at once"),
            (|s| { s.cache_steps = None; s.intermediate_states_buffer = None;
                   s.intermediate_state_indices = None; }, false, "cache_steps",
                "needs cache_steps >= 1"),
            // A cache_steps other than the buffer's size(1): FlashInfer steps by cache_steps.
            (|s| { s.cache_steps = Some(T + 1);
                   s.state_batch_indices = Some(contiguous(DType::I32, &[BATCH, T + 1])); },
                false, "intermediate_states_buffer",
                "expected size(1) == cache_steps (5"),
            (|s| s.intermediate_state_indices = Some(contiguous(DType::I64, &[BATCH])), false,
                "intermediate_state_indices", "the dtype of state_batch_indices"),
        ]);
    }

    /// What only the Rust layer sees, after the C check accepts: each tensor's reach inside its
    /// buffer (the tensors both forms have are named one by one in the single-token tests, the
    /// same code; here the multi-token ones), sizes that fit int64, the seed tensor's memory.
    #[rustfmt::skip]
    #[test]
    fn rust_only_rules() {
        check_cases(base, validate_mtp, &[
            (|s| shorten(&mut s.state), false, "state", "but the buffer holds"),
            (|s| s.seed = Some(SeedSpec::Pointer(contiguous(DType::I32, &[1]))), false,
                "rand_seed", "one I64 element"),
        ]);
        check_cases(base_varlen, validate_mtp, &[
            (|s| shorten(s.intermediate_states_buffer.as_mut().unwrap()), false,
                "intermediate_states_buffer", "but the buffer holds"),
            (|s| shorten(s.intermediate_state_indices.as_mut().unwrap()), false,
                "intermediate_state_indices", "but the buffer holds"),
            (|s| shorten(s.cu_seqlens.as_mut().unwrap()), false, "cu_seqlens",
                "but the buffer holds"),
            (|s| shorten(s.num_accepted_tokens.as_mut().unwrap()), false, "num_accepted_tokens",
                "but the buffer holds"),
            (|s| s.cache_steps = Some(usize::MAX), false, "cache_steps",
                "does not fit in the C ABI's int64"),
        ]);
    }

    /// A random multi-token call ([`Common`] sizes, fixed length or varlen, every tensor's shape
    /// from them, inner strides canonical), then at most one mutation: a common field, the
    /// tokens, a write mode, an index width or dtype, cache_steps, a stride near its bound, or a
    /// buffer one element short.
    fn random_spec(rng: &mut Rng) -> Option<MtpSpec> {
        let m = rng.next() % 37;
        let c = Common::draw(rng, m)?;
        let (batch, nheads, dim, dstate) = (c.batch, c.nheads, c.dim, c.dstate);
        let varlen = rng.chance(40);
        let mut t = rng.pick(&[1usize, 2, 4, 7, 16]);
        let mut total = rng.pick(&[0usize, 1, 2, 9, 100]);
        let mut cu_dtype = c.index;
        let mut sbi_width = rng.pick(&[0usize, 1, 4]);
        let mut with_sbi = rng.chance(70);
        let mut with_nat = rng.chance(30);
        let mut mode = rng.next() % 3; // 0 the read slot, 1 dst, 2 buffer
        let mut with_isi = mode == 2 && rng.chance(50);
        let mut slots = c.slots;
        let mut entries = rng.pick(&[1usize, 3]);
        let mut extra_steps = rng.pick(&[0usize, 0, 3]);
        let mut dst_width = t + rng.pick(&[0usize, 0, 2]);
        let mut cache_steps: Option<Option<usize>> = None; // None: as the form needs
        match m {
            13 => (with_sbi, slots) = (false, batch.saturating_sub(1).max(1)),
            14 => t = rng.pick(&[0, 15, 16, 17, 64]),
            15 => dst_width = rng.pick(&[0, t.saturating_sub(1), t + 9]),
            16 => (mode, with_isi) = (rng.pick(&[0, 1]), true),
            17 => mode = 3,                 // buffer and dst at once
            18 => extra_steps = usize::MAX, // a buffer one step short
            19 => entries = rng.pick(&[1 << 40, 1 << 50]),
            20 => total = rng.pick(&[0, 1, 1 << 40]),
            21 => sbi_width = rng.pick(&[2, 16]),
            22 => with_nat = !with_nat,
            23 => cu_dtype = rng.pick(&[DType::I32, DType::I64]),
            24 => cache_steps = Some(rng.pick(&[None, Some(0), Some(1), Some(t + 1)])),
            _ => {}
        }
        let row = nheads.checked_mul(dim)?;
        let bcrow = Common::aligned(c.ngroups.checked_mul(dstate)?, c.input)?;
        let slot = c.slot_stride()?;
        // Token strides (elements): x, out, z rows; B rows; dt rows.
        let (mut xs, mut os, mut zs, mut bs, mut dts) = (row, row, row, bcrow, nheads);
        let (mut xb, mut ob, mut bb) = (0usize, 0usize, 0usize);
        let mut ss = if rng.chance(20) { slot + 64 } else { slot };
        match m {
            25 => xs = rng.pick(&[0, row + 1, 1 << 62]),
            26 => os = rng.pick(&[0, row.saturating_sub(1), row + 1, 1 << 40]),
            27 => zs = rng.pick(&[0, row + 3]),
            28 => bs = rng.pick(&[0, bcrow + 1, bcrow + 16 / c.input.size_bytes(), 1 << 62]),
            29 => dts = rng.pick(&[0, 1 << 62]),
            30 => ss = rng.pick(&[slot.saturating_sub(1), slot + 1, 1 << 62]),
            31 => ob = rng.pick(&[1, 2]), // the batch stride of out below a whole sequence
            32 => xb = 1 << 61,
            33 => bb = rng.pick(&[1, 1 << 62]),
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
                props::try_lay(dtype, &shape, &strides)
            };
        let index = |dtype: DType, shape: &[usize]| -> Option<TensorLayout> {
            let strides = if shape.len() == 2 {
                vec![shape[1], 1]
            } else {
                vec![1]
            };
            props::try_lay(dtype, shape, &strides)
        };
        let with_buffer = mode >= 2;
        let with_dst = mode == 1 || mode == 3;
        let buffer = || {
            let shape = [entries, steps, nheads, dim, dstate];
            let n = shape.iter().try_fold(1usize, |a, &v| a.checked_mul(v))?;
            TensorLayout::contiguous(c.state, &shape, n).ok()
        };
        let sbi_shape = if sbi_width == 0 {
            vec![batch]
        } else {
            vec![batch, sbi_width]
        };
        let mut spec = MtpSpec {
            state: Common { slots, ..c }.state(ss)?,
            x: token(c.input, xs, xb, [nheads, dim], [dim, 1])?,
            dt: token(c.weight, dts, 0, [nheads, dim], [1, 0])?,
            a: c.a()?,
            b: token(c.input, bs, bb, [c.ngroups, dstate], [dstate, 1])?,
            c: token(c.input, bcrow, 0, [c.ngroups, dstate], [dstate, 1])?,
            d: c.per_head(c.with_d)?,
            z: given(c.with_z, token(c.input, zs, 0, [nheads, dim], [dim, 1]))?,
            dt_bias: c.per_head(c.with_bias)?,
            state_batch_indices: given(with_sbi, index(c.index, &sbi_shape))?,
            dst_state_batch_indices: given(with_dst, index(c.index, &[batch, dst_width]))?,
            num_accepted_tokens: given(with_nat, index(c.index, &[batch]))?,
            cu_seqlens: given(varlen, index(cu_dtype, &[batch + 1]))?,
            intermediate_states_buffer: given(with_buffer, buffer())?,
            intermediate_state_indices: given(with_isi, index(c.index, &[batch]))?,
            state_scale: None,
            intermediate_state_scales: None,
            cache_steps: cache_steps.unwrap_or(if varlen {
                Some(if with_buffer { steps } else { t })
            } else {
                None
            }),
            out: token(c.input, os, ob, [nheads, dim], [dim, 1])?,
            philox_rounds: c.rounds,
            seed: c.seed,
        };
        if m >= 34 {
            // One buffer one element short (a Rust-only rule when C accepts the call).
            props::shorten_one(
                rng,
                [&mut spec.state, &mut spec.x, &mut spec.c, &mut spec.a],
            );
        }
        Some(spec)
    }

    /// One contract behind both front doors, multi-token: for random calls, `validate_mtp`
    /// gives the verdict (kind and argument) of the raw C check of a `mamba_ssu_args` a C caller
    /// fills for the same tensors (cache_steps: the given one, else the buffer's size(1), else
    /// 0), except on calls C accepts where a Rust-only rule fires (predicted here on its own).
    #[test]
    fn validate_mtp_agrees_with_the_raw_c_check() {
        let mut rng = Rng(0x4D54_5000_C0DE);
        let named_args = props::agree(20_000, || {
            let spec = random_spec(&mut rng)?;
            let steps = spec
                .cache_steps
                .or(spec.intermediate_states_buffer.map(|b| b.shape()[1]))
                .unwrap_or(0);
            props::verdicts(
                &validate_mtp(&spec),
                &props::named!(
                    spec,
                    spec.intermediate_states_buffer,
                    spec.intermediate_state_indices,
                    spec.cu_seqlens,
                    spec.num_accepted_tokens,
                ),
                sys::MAMBA_SSU_FORM_MULTI,
                steps,
                spec.seed,
                spec.philox_rounds,
                SrRule::V072,
                format!("{spec:?}"),
            )
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
