//! [`validate_mtp`]: a multi-token call's layouts judged by the C contract (`mamba_ssu_check`
//! asked for the multi-token form, placeholder device pointers, no device touched), and the
//! rules only the Rust layer can check (every tensor inside its buffer; sizes that fit the C
//! types).

use crate::error::Result;
use crate::ffi::sys;
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
    let p = call.check(spec.seed.as_ref(), spec.philox_rounds, spec.sr_rule)?;
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
