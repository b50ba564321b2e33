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
