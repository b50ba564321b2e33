//! A stand-in for a layer's other kernels: one memory-touching kernel of a chosen size, used
//! by the decode-step benchmark (in place of the conv1d update) and the prefetcher tests (work
//! interleaved between layers). Asynchronous on the given stream.
//!
//! **Unstable benchmark and test scaffolding** (cargo feature `bench-support`): not part of the
//! library's API, without stability or semver guarantee; library users should not enable the
//! feature. Its C counterpart `mamba_ssu_filler` is likewise outside the stable C ABI.

use cudarc::driver::{CudaStream, DevicePtrMut};

use crate::device::check_same_device;
use crate::error::{Error, Result};
use crate::ffi;

/// Rewrites every element of `buf` `rounds` times (`v = v * 0.5 + 1`) in one kernel on
/// `stream`. Errors (nothing launched): empty `buf`, `rounds == 0`, `buf` on another device.
pub fn filler<D: DevicePtrMut<f32>>(stream: &CudaStream, buf: &mut D, rounds: u32) -> Result<()> {
    if buf.len() == 0 {
        return Err(Error::invalid("buf", "expected at least one element"));
    }
    if rounds == 0 {
        return Err(Error::invalid("rounds", "expected >= 1, got 0"));
    }
    check_same_device("buf", stream, buf.stream())?;
    // The launcher uses the thread's current context: make it the buffer's (== the stream's).
    stream.context().bind_to_thread()?;
    let n = buf.len() as u64;
    let (ptr, _guard) = buf.device_ptr_mut(stream);
    // SAFETY: `ptr` addresses `n` f32 on the stream's device, alive until `_guard` drops after
    // the launch is enqueued.
    ffi::check(unsafe {
        ffi::sys::mamba_ssu_filler(ffi::stream_handle(stream), ptr as *mut f32, n, rounds)
    })
}
