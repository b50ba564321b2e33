//! FFI layer: the bindgen output of `csrc/include/mamba_ssu.h` and the one place its status
//! codes become [`Error`]s. Private to the crate; the safe modules call through here.

use std::ffi::CStr;
use std::os::raw::c_int;

use cudarc::driver::CudaStream;

use crate::error::{Error, Result};

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
pub(crate) mod sys {
    include!(concat!(env!("OUT_DIR"), "/mamba_ssu_bindings.rs"));
}

/// The launchers' stream type from a cudarc stream (both are `CUstream_st*`).
pub(crate) fn stream_handle(stream: &CudaStream) -> sys::mamba_ssu_stream_t {
    stream.cu_stream() as sys::mamba_ssu_stream_t
}

/// Maps a launcher's status code to `Ok(())` or [`Error::Launcher`] with its message and the
/// launcher's per-thread detail.
pub(crate) fn check(status: c_int) -> Result<()> {
    if status == sys::MAMBA_SSU_SUCCESS as c_int {
        return Ok(());
    }
    // SAFETY: both functions return pointers to NUL-terminated strings that stay valid until
    // the next launcher call on this thread; they are copied out at once.
    let (message, detail) = unsafe {
        (
            CStr::from_ptr(sys::mamba_ssu_status_string(status))
                .to_string_lossy()
                .into_owned(),
            CStr::from_ptr(sys::mamba_ssu_last_error_detail())
                .to_string_lossy()
                .into_owned(),
        )
    };
    if status == sys::MAMBA_SSU_ERROR_SCOPE as c_int {
        return Err(Error::Scope(detail));
    }
    Err(Error::Launcher {
        status,
        message,
        detail,
    })
}
