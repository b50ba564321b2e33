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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every status code of the C ABI has its own message; anything else is "unknown".
    #[test]
    fn every_status_code_has_a_message() {
        let message = |s: c_int| {
            // SAFETY: mamba_ssu_status_string returns a static NUL-terminated string.
            unsafe { CStr::from_ptr(sys::mamba_ssu_status_string(s)) }
                .to_string_lossy()
                .into_owned()
        };
        let codes = [
            sys::MAMBA_SSU_SUCCESS,
            sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT,
            sys::MAMBA_SSU_ERROR_UNSUPPORTED,
            sys::MAMBA_SSU_ERROR_CUDA,
            sys::MAMBA_SSU_ERROR_SCOPE,
            sys::MAMBA_SSU_ERROR_INVALID_VALUE,
        ];
        let mut seen = std::collections::HashSet::new();
        for code in codes {
            let m = message(code as c_int);
            assert!(!m.contains("unknown"), "status {code}: {m}");
            assert!(
                seen.insert(m.clone()),
                "status {code} shares its message {m:?}"
            );
        }
        assert_eq!(
            codes.len(),
            6,
            "a new status code needs a message and a line here"
        );
        for other in [-1, 6, 99] {
            assert!(message(other).contains("unknown"), "status {other}");
        }
    }
}
