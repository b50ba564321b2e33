//! The launch: [`selective_state_update`] checks the call first ([`validate`]: the C contract
//! with placeholder pointers, and the buffers), then the devices, and enqueues it through the
//! C ABI's `mamba_ssu_launch` with the buffers' device pointers.

use cudarc::driver::CudaStream;

use crate::error::Result;

use super::args::SsuArgs;
use super::contract::{self, Buffers};
use super::validation::checked;

/// Enqueues one selective-state-update on `stream`.
///
/// First the pure check, before any device work: [`validate`](super::validate) of the call's
/// layouts (the C contract's rules, and every tensor inside its buffer); a rejection names the
/// argument. Then every buffer must live on the stream's device ([`Error::WrongDevice`]), and
/// the C launcher checks the call once more with the real device pointers (their alignment
/// included) and enqueues one kernel.
///
/// Asynchronous on `stream`: it returns once the kernel is enqueued; `out` and `state` are
/// written when the kernel runs. Nothing is launched when an error is returned. With
/// [`Algorithm::Auto`](super::Algorithm::Auto) the kernel is picked from the stream device's SM
/// count.
///
/// [`Error::WrongDevice`]: crate::Error::WrongDevice
pub fn selective_state_update(stream: &CudaStream, args: &mut SsuArgs<'_>) -> Result<()> {
    let spec = args.spec();
    let (mut call, _) = checked(&spec)?;
    call.pad_slot_id = args.pad_slot_id;
    call.dt_softplus = args.dt_softplus;
    call.disable_state_update = args.disable_state_update;
    call.algorithm = args.algorithm;
    let buffers = Buffers::new(
        [
            (contract::X, Some(&args.x)),
            (contract::DT, Some(&args.dt)),
            (contract::A, Some(&args.a)),
            (contract::B, Some(&args.b)),
            (contract::C, Some(&args.c)),
            (contract::D, args.d.as_ref()),
            (contract::Z, args.z.as_ref()),
            (contract::DT_BIAS, args.dt_bias.as_ref()),
            (
                contract::STATE_BATCH_INDICES,
                args.state_batch_indices.as_ref(),
            ),
            (
                contract::DST_STATE_BATCH_INDICES,
                args.dst_state_batch_indices.as_ref(),
            ),
        ],
        [
            (contract::STATE, Some(&mut args.state)),
            (contract::OUT, Some(&mut args.out)),
        ],
    );
    contract::launch(
        stream,
        &call,
        buffers,
        args.seed.as_ref(),
        args.philox_rounds,
        args.sr_rule,
    )
}
