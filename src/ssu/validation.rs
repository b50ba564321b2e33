//! [`validate`]: a single-token call's layouts judged by the C contract (`mamba_ssu_check`,
//! placeholder device pointers, no device touched), and the rules only the Rust layer can
//! check (every tensor inside its buffer; sizes that fit the C types).

use crate::error::Result;
use crate::ffi::sys;

use super::args::{SsuProblem, SsuSpec};
use super::contract::{self, Call, TENSORS};

/// The C contract's view of `spec`: the single-token form, each tensor under its FlashInfer
/// name, FlashInfer's default options.
pub(super) fn call_of(spec: &SsuSpec) -> Call {
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
    Call::new(sys::MAMBA_SSU_FORM_SINGLE, t)
}

/// [`validate`], also returning the call it checked.
pub(super) fn checked(spec: &SsuSpec) -> Result<(Call, SsuProblem)> {
    let call = call_of(spec);
    let p = call.check(spec.seed.as_ref(), spec.philox_rounds, spec.sr_rule)?;
    let problem = SsuProblem {
        batch: contract::size(p.batch),
        nheads: contract::size(p.nheads),
        dim: contract::size(p.dim),
        dstate: contract::size(p.dstate),
        ngroups: contract::size(p.ngroups),
        cache_slots: contract::size(p.state_cache_size),
        state_dtype: contract::dtype(p.state_dtype)?,
        input_dtype: contract::dtype(p.input_dtype)?,
        weight_dtype: contract::dtype(p.weight_dtype)?,
        index_dtype: if call.has_indices() {
            Some(contract::dtype(p.index_dtype)?)
        } else {
            None
        },
        stochastic_rounding: p.stochastic_rounding != 0,
        sr_rule: spec.sr_rule,
    };
    Ok((call, problem))
}

/// Checks a single-token call's layouts and flags against the contract (the [module
/// docs](super)); a pure function of `spec`, no device involved. Returns the call's sizes and
/// dtypes as the C check describes them.
///
/// The C check (`mamba_ssu_check` of `mamba_ssu.h`, asked for the single-token form) is the
/// one place the contract's rules are written: its rejection is an [`Error::InvalidArgument`]
/// (a shape, dtype, stride or size outside the contract; an option outside its set or in
/// conflict) or an [`Error::Unsupported`] (a valid combination the kernels do not serve),
/// naming the argument as the C check does (`state`, `x`, `B`, `philox_rounds`,
/// `seed.position`, ...) with its detail as the message. Then the rules only this layer sees,
/// as [`Error::InvalidArgument`]: a tensor whose shape and strides reach past its buffer (named
/// by the tensor), a size or stride above `i64::MAX`, and, with stochastic rounding, a
/// [`SeedSpec::Pointer`](super::SeedSpec::Pointer) tensor that is not one I64 element
/// (`rand_seed`).
///
/// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
/// [`Error::Unsupported`]: crate::Error::Unsupported
pub fn validate(spec: &SsuSpec) -> Result<SsuProblem> {
    checked(spec).map(|(_, problem)| problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::reference::SrRule;
    use crate::ssu::fixtures::*;
    use crate::ssu::props::{self, Rng};
    use crate::ssu::SeedSpec;
    use crate::tensor::{DType, TensorLayout};

    #[test]
    fn baseline_is_valid() {
        let p = validate(&base()).unwrap();
        assert_eq!(
            p,
            SsuProblem {
                batch: BATCH,
                nheads: NH,
                dim: DIM,
                dstate: DS,
                ngroups: NG,
                cache_slots: SLOTS,
                state_dtype: DType::F16,
                input_dtype: DType::BF16,
                weight_dtype: DType::BF16,
                index_dtype: Some(DType::I32),
                stochastic_rounding: true,
                sr_rule: SrRule::V072,
            }
        );
    }

    #[test]
    fn minimal_call_is_valid() {
        // No optional tensors, round to nearest, fp32 everywhere, dstate 256.
        let row = NH * DIM;
        let spec = SsuSpec {
            state: lay(
                DType::F32,
                &[BATCH, NH, DIM, 256],
                &[NH * DIM * 256, DIM * 256, 256, 1],
            ),
            x: lay(DType::F32, &[BATCH, NH, DIM], &[row, DIM, 1]),
            dt: lay(DType::F32, &[BATCH, NH, DIM], &[NH, 1, 0]),
            a: lay(DType::F32, &[NH, DIM, 256], &[1, 0, 0]),
            b: lay(DType::F32, &[BATCH, 1, 256], &[256, 256, 1]),
            c: lay(DType::F32, &[BATCH, 1, 256], &[256, 256, 1]),
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: None,
            dst_state_batch_indices: None,
            out: lay(DType::F32, &[BATCH, NH, DIM], &[row, DIM, 1]),
            philox_rounds: 0,
            sr_rule: SrRule::V074,
            seed: None,
        };
        let p = validate(&spec).unwrap();
        assert_eq!((p.ngroups, p.dstate, p.index_dtype), (1, 256, None));
        assert!(!p.stochastic_rounding);
    }

    /// A case: a change to the valid baseline, whether the error is `Unsupported`, the argument
    /// it must name and a piece of its message.
    type Case = (fn(&mut SsuSpec), bool, &'static str, &'static str);

    fn check_cases(cases: &[Case]) {
        for (i, (change, unsupported, argument, needle)) in cases.iter().enumerate() {
            let (got_unsupported, got, message) = match validate(&with(change)) {
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
            assert!(
                !message.starts_with(&format!("{argument}:")),
                "case {i}: the argument is not repeated in {message:?}"
            );
        }
    }

    /// The C check's rejections surface through `validate` as the C check words them: each
    /// status (INVALID_ARGUMENT, a rule of the parameter block reached through the lowering,
    /// INVALID_VALUE, UNSUPPORTED) as its `Error` variant, naming the argument. The rules
    /// themselves are tested once, at the C level (`contract_tests`).
    #[rustfmt::skip]
    #[test]
    fn c_rejections_name_their_argument() {
        check_cases(&[
            (|s| s.x.strides[2] = 2, false, "x", "expected stride(2) == 1 (1), got 2"),
            (|s| s.b.strides[0] = NG * DS + 4, false, "B",
                "B_stride_batch: expected a multiple of 8"),
            (|s| s.philox_rounds = 11, false, "philox_rounds", "expected 1..=10 with a seed"),
            (|s| s.state.dtype = DType::BF16, true, "philox_rounds", "needs an F16 state"),
            // Rounds without a seed: FlashInfer's rand_seed = None.
            (|s| s.seed = None, false, "seed.pointer", "null pointer"),
            (|s| s.seed = Some(SeedSpec::FromValues { seed: 1, offset: 2 }), false,
                "seed.position", "offset: expected a multiple of 4, got 2"),
            (|s| s.seed = Some(SeedSpec::FromGenerator { offset: 6 }), false,
                "seed.position", "got 6"),
            // The single-token form is asked for: a 4-D x is refused, not taken as multi-token.
            (|s| s.x = lay(DType::BF16, &[BATCH, 1, NH, DIM], &[NH * DIM, NH * DIM, DIM, 1]),
                false, "form", "SINGLE asked, but the call is multi-token"),
        ]);
    }

    /// What only the Rust layer sees, checked after the C check accepts: every tensor's reach
    /// inside its buffer (each tensor named), sizes that fit int64, the seed tensor's memory.
    #[rustfmt::skip]
    #[test]
    fn rust_only_rules() {
        fn short(l: &mut TensorLayout) {
            *l = TensorLayout::new(l.dtype(), l.shape(), l.strides(), l.max_offset().unwrap())
                .unwrap();
        }
        check_cases(&[
            (|s| short(&mut s.state), false, "state", "reaches element"),
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
            // A broadcast stride the C check allows, past the buffer.
            (|s| s.x.strides[0] = 0x10_0000, false, "x", "reaches element"),
            (|s| s.seed = Some(SeedSpec::Pointer(lay(DType::I32, &[1], &[1]))), false,
                "rand_seed", "one I64 element"),
            (|s| s.seed = Some(SeedSpec::Pointer(lay(DType::I64, &[2], &[1]))), false,
                "rand_seed", "shape (2,)"),
            (|s| s.x.strides[0] = usize::MAX, false, "x", "does not fit in the C ABI's int64"),
        ]);
        // A C rejection comes first: a short buffer with a broken stride names the C rule.
        let e = validate(&with(|s| {
            short(&mut s.out);
            s.x.strides[2] = 2;
        }))
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { argument: "x", .. }), "{e}");
    }

    /// A seed given with 0 rounds is not read: neither checked by C (mode NONE) nor its memory
    /// by Rust; the state may then be of any float dtype.
    #[test]
    fn a_seed_with_zero_rounds_is_not_read() {
        let p = validate(&with(|s| {
            s.philox_rounds = 0;
            s.state.dtype = DType::BF16;
            s.seed = Some(SeedSpec::Pointer(lay(DType::I32, &[3], &[1])));
        }))
        .unwrap();
        assert!(!p.stochastic_rounding);
        let p = validate(&with(|s| {
            s.philox_rounds = 0;
            s.seed = Some(SeedSpec::FromValues { seed: 1, offset: 2 });
        }))
        .unwrap();
        assert!(!p.stochastic_rounding);
        // A broadcast x, a one-entry out with any batch stride, (batch, T) int64 indices.
        validate(&with(|s| s.x.strides[0] = 0)).unwrap();
        let p = validate(&with(|s| {
            s.state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[4, 1]));
            s.dst_state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[1, BATCH]));
        }))
        .unwrap();
        assert_eq!(p.index_dtype, Some(DType::I64));
    }

    /// A random call of the single-token form (every tensor's shape from common sizes, inner
    /// strides canonical), then at most one mutation: a size to a limit or an overflowing value,
    /// a batch stride, a dtype, an optional tensor, an index, the rounds, the seed, or a buffer
    /// one element short.
    fn random_spec(rng: &mut Rng) -> Option<SsuSpec> {
        let try_lay = props::try_lay;
        let f = [DType::F16, DType::BF16, DType::F32];
        let mut batch = rng.pick(&[1usize, 2, 3, 5, 64, 512]);
        let mut nheads = rng.pick(&[1usize, 2, 4, 6, 64, 8192]);
        let mut dim = rng.pick(&[1usize, 2, 7, 8, 64, 100]);
        let mut dstate = rng.pick(&[64usize, 128, 256]);
        let mut ngroups = rng.pick(&[1usize, 2]).min(nheads);
        if nheads % ngroups != 0 {
            ngroups = 1;
        }
        let mut rounds = rng.pick(&[0u32, 5, 10]);
        let sr_rule = rng.pick(&[SrRule::V072, SrRule::V074]);
        let mut state_dtype = if rounds > 0 { DType::F16 } else { rng.pick(&f) };
        let mut input = rng.pick(&f);
        let mut weight = rng.pick(&f);
        let mut idx_dtype = rng.pick(&[DType::I32, DType::I64]);
        let mut dst_dtype = idx_dtype;
        let mut width = rng.pick(&[1usize, 4]);
        let (mut with_sbi, mut with_dsbi) = (rng.chance(70), rng.chance(50));
        let mut slots = batch + rng.pick(&[0usize, 1, 7]);
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
        let mutation = rng.next() % 26;
        match mutation {
            0 => batch = rng.pick(&[0, 1 << 20, (1 << 31) - 1, 1 << 31, 1 << 40]),
            1 => nheads = rng.pick(&[0, 1 << 20, 1 << 31, 3 << 30]),
            2 => dim = rng.pick(&[1 << 20, 1 << 30, (1 << 30) + 1, 1 << 40]),
            3 => dstate = rng.pick(&[0, 16, 32, 96, 512]),
            4 => ngroups = rng.pick(&[3, nheads + 1, 0]),
            5 => slots = rng.pick(&[batch.saturating_sub(1), 0, 1 << 40]),
            6 => state_dtype = rng.pick(&[DType::I32, DType::I64, DType::BF16, DType::F32]),
            7 => input = rng.pick(&[DType::I32, DType::I64]),
            8 => weight = rng.pick(&[DType::I32, DType::I64]),
            9 => idx_dtype = rng.pick(&[DType::F32, DType::F16, DType::I64]),
            10 => dst_dtype = rng.pick(&[DType::F32, DType::I32, DType::I64]),
            11 => rounds = rng.pick(&[1, 2, 9, 11, 64]),
            12 => {
                seed = rng.pick(&[
                    None,
                    Some(SeedSpec::FromGenerator { offset: 6 }),
                    Some(SeedSpec::FromValues { seed: 1, offset: 2 }),
                    Some(SeedSpec::Pointer(try_lay(DType::I32, &[1], &[1])?)),
                    Some(SeedSpec::Pointer(try_lay(DType::I64, &[2], &[1])?)),
                ])
            }
            13 => {
                (with_sbi, with_dsbi, slots) =
                    (false, rng.chance(50), batch.saturating_sub(1).max(1))
            }
            14 => width = rng.pick(&[0, 2, 16]),
            15 => (with_d, with_z, with_bias) = (rng.chance(50), rng.chance(50), rng.chance(50)),
            _ => {}
        }
        let bytes = |d: DType| d.size_bytes();
        let align = |d: DType| 16 / bytes(d);
        let up = |v: usize, a: usize| v.div_ceil(a).checked_mul(a);
        let head = dim.checked_mul(dstate)?;
        let slot = up(nheads.checked_mul(head)?, align(state_dtype))?;
        let row = nheads.checked_mul(dim)?;
        let xrow = up(row, align(input))?;
        let bcrow = up(ngroups.checked_mul(dstate)?, align(input))?;
        let (mut xs, mut os, mut zs, mut bs, mut cs, mut dts, mut ss) = (
            xrow,
            xrow,
            xrow,
            bcrow,
            bcrow,
            nheads,
            slot + 64 * rng.pick(&[0usize, 1]),
        );
        match mutation {
            16 => xs = rng.pick(&[0, xrow + 1, 1 << 62]),
            17 => os = rng.pick(&[0, xrow.saturating_sub(align(input)), xrow + 1]),
            18 => zs = rng.pick(&[0, xrow + 1]),
            19 => bs = rng.pick(&[0, bcrow + 1, 1 << 62]),
            20 => cs = rng.pick(&[0, bcrow + 1]),
            21 => dts = rng.pick(&[0, 1 << 62]),
            22 => ss = rng.pick(&[slot.saturating_sub(1), slot + 1, 1 << 62]),
            _ => {}
        }
        let index = |d: DType| -> Option<TensorLayout> {
            if width == 1 {
                try_lay(d, &[batch], &[1])
            } else {
                try_lay(d, &[batch, width], &[width, 1])
            }
        };
        let opt = |on: bool, l: Option<TensorLayout>| if on { l.map(Some) } else { Some(None) };
        let mut spec = SsuSpec {
            state: try_lay(
                state_dtype,
                &[slots, nheads, dim, dstate],
                &[ss, head, dstate, 1],
            )?,
            x: try_lay(input, &[batch, nheads, dim], &[xs, dim, 1])?,
            dt: try_lay(weight, &[batch, nheads, dim], &[dts, 1, 0])?,
            a: try_lay(DType::F32, &[nheads, dim, dstate], &[1, 0, 0])?,
            b: try_lay(input, &[batch, ngroups, dstate], &[bs, dstate, 1])?,
            c: try_lay(input, &[batch, ngroups, dstate], &[cs, dstate, 1])?,
            d: opt(with_d, try_lay(weight, &[nheads, dim], &[1, 0]))?,
            z: opt(with_z, try_lay(input, &[batch, nheads, dim], &[zs, dim, 1]))?,
            dt_bias: opt(with_bias, try_lay(weight, &[nheads, dim], &[1, 0]))?,
            state_batch_indices: opt(with_sbi, index(idx_dtype))?,
            dst_state_batch_indices: opt(with_dsbi, index(dst_dtype))?,
            out: try_lay(input, &[batch, nheads, dim], &[os, dim, 1])?,
            philox_rounds: rounds,
            sr_rule,
            seed,
        };
        if mutation >= 23 {
            // One buffer one element short (a Rust-only rule when C accepts the call).
            let l = match rng.next() % 4 {
                0 => &mut spec.state,
                1 => &mut spec.x,
                2 => &mut spec.out,
                _ => &mut spec.b,
            };
            *l = TensorLayout::new(l.dtype(), l.shape(), l.strides(), l.len().saturating_sub(1))
                .ok()?;
        }
        Some(spec)
    }

    /// The tensors of `spec` under their C names, in `mamba_ssu_args` order.
    fn named(spec: &SsuSpec) -> [(&'static str, Option<TensorLayout>); 12] {
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
        ]
    }

    /// The `mamba_ssu_args` a C caller fills for the same tensors and options.
    fn raw_args(spec: &SsuSpec) -> sys::mamba_ssu_args {
        let t = props::raw_tensor;
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
            pad_slot_id: -1,
            form: sys::MAMBA_SSU_FORM_SINGLE as i32,
            seed: props::raw_seed(spec.seed, spec.philox_rounds, spec.sr_rule),
            ..Default::default()
        }
    }

    /// One contract behind both front doors: for random calls — valid ones and ones mutated
    /// in every kind of field, with sizes near the limits and overflowing products — `validate`
    /// gives the raw C check's verdict (kind and argument), except on calls C accepts where a
    /// buffer is too short or the seed tensor is not one int64 (the Rust-only rules, predicted
    /// here on their own).
    #[test]
    fn validate_agrees_with_the_raw_c_check() {
        let mut rng = Rng(0x00C0_47AC_7000);
        let named_args = props::agree(20_000, || {
            let spec = random_spec(&mut rng)?;
            let c = props::c_verdict(&raw_args(&spec));
            let want = props::expected(c, &named(&spec), spec.seed, spec.philox_rounds);
            Some((
                props::rust_verdict(&validate(&spec)),
                want,
                format!("{spec:?}"),
            ))
        });
        for a in [
            "state",
            "x",
            "B",
            "philox_rounds",
            "rand_seed",
            "seed.pointer",
        ] {
            assert!(
                named_args.get(a).is_some_and(|&n| n > 10),
                "{a}: {named_args:?}"
            );
        }
    }
}
