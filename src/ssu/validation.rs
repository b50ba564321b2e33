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
    t[contract::STATE_SCALE] = spec.state_scale;
    Call::new(sys::MAMBA_SSU_FORM_SINGLE, t)
}

/// [`validate`], also returning the call it checked.
pub(super) fn checked(spec: &SsuSpec) -> Result<(Call, SsuProblem)> {
    let call = call_of(spec);
    let p = call.check(spec.seed.as_ref(), spec.philox_rounds, spec.sr_rule)?;
    let problem = contract::problem!(SsuProblem, p, call, { sr_rule: spec.sr_rule });
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
    use crate::ssu::props::{self, check_cases, given, shorten, Common, Rng};
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
            state_scale: None,
            philox_rounds: 0,
            sr_rule: SrRule::V074,
            seed: None,
        };
        let p = validate(&spec).unwrap();
        assert_eq!((p.ngroups, p.dstate, p.index_dtype), (1, 256, None));
        assert!(!p.stochastic_rounding);
    }

    /// The C check's rejections surface through `validate` as the C check words them: each
    /// status (INVALID_ARGUMENT, a rule of the parameter block reached through the lowering,
    /// INVALID_VALUE, UNSUPPORTED) as its `Error` variant, naming the argument. The rules
    /// themselves are tested once, at the C level (`contract_tests`).
    #[rustfmt::skip]
    #[test]
    fn c_rejections_name_their_argument() {
        check_cases(base, validate, &[
            (|s| s.x.strides[2] = 2, false, "x", "expected stride(2) == 1 (1), got 2"),
            (|s| s.b.strides[0] = NG * DS + 4, false, "B",
                "B_stride_batch: expected a multiple of 8"),
            // Any count >= 1 is taken (FlashInfer has no upper bound) up to the C ABI's int32.
            (|s| s.philox_rounds = u32::MAX, false, "philox_rounds", "does not fit in the C ABI's int32"),
            (|s| s.state.dtype = DType::BF16, false, "philox_rounds", "needs an F16 state"),
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
        check_cases(base, validate, &[
            (|s| shorten(&mut s.state), false, "state", "reaches element"),
            (|s| shorten(&mut s.x), false, "x", "but the buffer holds"),
            (|s| shorten(&mut s.dt), false, "dt", "but the buffer holds"),
            (|s| shorten(&mut s.a), false, "A", "but the buffer holds"),
            (|s| shorten(&mut s.b), false, "B", "but the buffer holds"),
            (|s| shorten(&mut s.c), false, "C", "but the buffer holds"),
            (|s| shorten(s.d.as_mut().unwrap()), false, "D", "but the buffer holds"),
            (|s| shorten(s.z.as_mut().unwrap()), false, "z", "but the buffer holds"),
            (|s| shorten(s.dt_bias.as_mut().unwrap()), false, "dt_bias", "but the buffer holds"),
            (|s| shorten(&mut s.out), false, "out", "but the buffer holds"),
            (|s| shorten(s.state_batch_indices.as_mut().unwrap()), false, "state_batch_indices",
                "but the buffer holds"),
            (|s| shorten(s.dst_state_batch_indices.as_mut().unwrap()), false,
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
            shorten(&mut s.out);
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
        // A broadcast x, (batch, T) int64 indices.
        validate(&with(|s| s.x.strides[0] = 0)).unwrap();
        let p = validate(&with(|s| {
            s.state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[4, 1]));
            s.dst_state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[1, BATCH]));
        }))
        .unwrap();
        assert_eq!(p.index_dtype, Some(DType::I64));
    }

    /// A random single-token call ([`Common`] sizes, every tensor's shape from them, inner
    /// strides canonical), then at most one mutation: a common field, a batch stride, an index
    /// tensor's dtype or width, or a buffer one element short.
    fn random_spec(rng: &mut Rng) -> Option<SsuSpec> {
        let m = rng.next() % 24;
        let c = Common::draw(rng, m)?;
        let (batch, nheads, dim, dstate) = (c.batch, c.nheads, c.dim, c.dstate);
        let mut dst_dtype = c.index;
        let mut width = rng.pick(&[1usize, 4]);
        let (mut with_sbi, mut with_dsbi) = (rng.chance(70), rng.chance(50));
        let mut slots = c.slots;
        match m {
            13 => dst_dtype = rng.pick(&[DType::F32, DType::I32, DType::I64]),
            14 => {
                (with_sbi, with_dsbi, slots) =
                    (false, rng.chance(50), batch.saturating_sub(1).max(1))
            }
            15 => width = rng.pick(&[0, 2, 16]),
            _ => {}
        }
        let row = nheads.checked_mul(dim)?;
        let xrow = Common::aligned(row, c.input)?;
        let bcrow = Common::aligned(c.ngroups.checked_mul(dstate)?, c.input)?;
        let slot = c.slot_stride()?;
        let (mut xs, mut os, mut zs, mut bs, mut cs, mut dts) =
            (xrow, xrow, xrow, bcrow, bcrow, nheads);
        let mut ss = slot + 64 * rng.pick(&[0usize, 1]);
        match m {
            16 => xs = rng.pick(&[0, xrow + 1, 1 << 62]),
            17 => os = rng.pick(&[0, xrow.saturating_sub(16 / c.input.size_bytes()), xrow + 1]),
            18 => zs = rng.pick(&[0, xrow + 1]),
            19 => bs = rng.pick(&[0, bcrow + 1, 1 << 62]),
            20 => cs = rng.pick(&[0, bcrow + 1]),
            21 => dts = rng.pick(&[0, 1 << 62]),
            22 => ss = rng.pick(&[slot.saturating_sub(1), slot + 1, 1 << 62]),
            _ => {}
        }
        let index = |d: DType| -> Option<TensorLayout> {
            if width == 1 {
                props::try_lay(d, &[batch], &[1])
            } else {
                props::try_lay(d, &[batch, width], &[width, 1])
            }
        };
        let token = |d: DType, s: usize, inner: [usize; 2], inner_s: [usize; 2]| {
            props::try_lay(
                d,
                &[batch, inner[0], inner[1]],
                &[s, inner_s[0], inner_s[1]],
            )
        };
        let mut spec = SsuSpec {
            state: Common { slots, ..c }.state(ss)?,
            x: token(c.input, xs, [nheads, dim], [dim, 1])?,
            dt: token(c.weight, dts, [nheads, dim], [1, 0])?,
            a: c.a()?,
            b: token(c.input, bs, [c.ngroups, dstate], [dstate, 1])?,
            c: token(c.input, cs, [c.ngroups, dstate], [dstate, 1])?,
            d: c.per_head(c.with_d)?,
            z: given(c.with_z, token(c.input, zs, [nheads, dim], [dim, 1]))?,
            dt_bias: c.per_head(c.with_bias)?,
            state_batch_indices: given(with_sbi, index(c.index))?,
            dst_state_batch_indices: given(with_dsbi, index(dst_dtype))?,
            out: token(c.input, os, [nheads, dim], [dim, 1])?,
            state_scale: None,
            philox_rounds: c.rounds,
            sr_rule: c.sr_rule,
            seed: c.seed,
        };
        if m == 23 {
            // One buffer one element short (a Rust-only rule when C accepts the call).
            props::shorten_one(
                rng,
                [&mut spec.state, &mut spec.x, &mut spec.out, &mut spec.b],
            );
        }
        Some(spec)
    }

    /// One contract behind both front doors: for random calls — valid ones and ones mutated
    /// in every kind of field, with sizes near the limits and overflowing products — `validate`
    /// gives the verdict (kind and argument) of the raw C check of a `mamba_ssu_args` a C caller
    /// fills for the same tensors, except on calls C accepts where a buffer is too short or the
    /// seed tensor is not one int64 (the Rust-only rules, predicted here on their own).
    #[test]
    fn validate_agrees_with_the_raw_c_check() {
        let mut rng = Rng(0x00C0_47AC_7000);
        let named_args = props::agree(20_000, || {
            let spec = random_spec(&mut rng)?;
            props::verdicts(
                &validate(&spec),
                &props::named!(spec),
                sys::MAMBA_SSU_FORM_SINGLE,
                0,
                spec.seed,
                spec.philox_rounds,
                spec.sr_rule,
                format!("{spec:?}"),
            )
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
