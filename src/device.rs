//! Opening a CUDA device without panicking where there is no driver.
//!
//! cudarc loads libcuda at run time (its `dynamic-loading` feature), so every binary of this
//! crate starts on a machine without a GPU; [`open`] turns "no driver" and "no device" into
//! [`Error::NoDriver`] and [`Error::NoDevice`] instead of a panic.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{Error, Result};

/// Whether the CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda by its usual names; loads nothing else.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Number of CUDA devices, or [`Error::NoDriver`].
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(Error::NoDriver);
    }
    Ok(CudaContext::device_count()?.max(0) as usize)
}

/// The primary context of device `ordinal`.
///
/// Errors: [`Error::NoDriver`] without libcuda, [`Error::NoDevice`] when the ordinal is out of
/// range, [`Error::Driver`] for other driver failures.
pub fn open(ordinal: usize) -> Result<Arc<CudaContext>> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(Error::NoDevice { ordinal, count });
    }
    Ok(CudaContext::new(ordinal)?)
}

/// Checks that a buffer used on `stream` lives on the stream's device.
pub(crate) fn check_same_device(
    argument: &'static str,
    stream: &CudaStream,
    buffer_stream: &CudaStream,
) -> Result<()> {
    check_ordinal(argument, stream, buffer_stream.context().ordinal())
}

/// Checks that memory on device `got` may be used on `stream`.
pub(crate) fn check_ordinal(argument: &'static str, stream: &CudaStream, got: usize) -> Result<()> {
    let expected = stream.context().ordinal();
    if expected != got {
        return Err(Error::WrongDevice {
            argument,
            expected,
            got,
        });
    }
    Ok(())
}
