//! The launch: [`selective_state_update`] checks the call first ([`validate`]: the C contract
//! with placeholder pointers, and the buffers), then the devices, and enqueues it through the
//! C ABI's `mamba_ssu_launch` with the buffers' device pointers.

use cudarc::driver::CudaStream;

use crate::error::Result;

use super::args::SsuArgs;
use super::contract;
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
    call.algorithm = args.algorithm;
    contract::launch_args!(
        stream,
        call,
        args,
        [],
        [(contract::STATE_SCALE, args.state_scale.as_mut())]
    )
}
