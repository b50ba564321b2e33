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

/// Maps a C status to `Ok(())` or this crate's [`Error`]: `MAMBA_SSU_ERROR_INVALID_ARGUMENT` and
/// `MAMBA_SSU_ERROR_INVALID_VALUE` to [`Error::InvalidArgument`], `MAMBA_SSU_ERROR_UNSUPPORTED`
/// to [`Error::Unsupported`] — both naming the argument `mamba_ssu_last_error_argument()` names,
/// with the C detail (less its leading `argument: `) as the message —, `MAMBA_SSU_ERROR_SCOPE`
/// to [`Error::Scope`], anything else (a CUDA failure, or a rejection that names no argument)
/// to [`Error::Launcher`] with the status message and the detail.
pub(crate) fn check(status: c_int) -> Result<()> {
    if status == sys::MAMBA_SSU_SUCCESS as c_int {
        return Ok(());
    }
    // SAFETY: the status string is static and the detail valid until the next C call on this
    // thread (both NUL-terminated; copied out at once). The argument is a string with static
    // storage duration, valid for the life of the process (`mamba_ssu.h`: the C library hands
    // out only its own string literals there), so borrowing it for 'static is sound.
    let (message, detail, argument): (String, String, &'static str) = unsafe {
        (
            CStr::from_ptr(sys::mamba_ssu_status_string(status))
                .to_string_lossy()
                .into_owned(),
            CStr::from_ptr(sys::mamba_ssu_last_error_detail())
                .to_string_lossy()
                .into_owned(),
            CStr::from_ptr(sys::mamba_ssu_last_error_argument())
                .to_str()
                .unwrap_or(""),
        )
    };
    let named = |detail: String| match detail.strip_prefix(argument) {
        Some(rest) if rest.starts_with(": ") => rest[2..].to_string(),
        _ => detail,
    };
    const INVALID: [u32; 2] = [
        sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT,
        sys::MAMBA_SSU_ERROR_INVALID_VALUE,
    ];
    match u32::try_from(status) {
        Ok(sys::MAMBA_SSU_ERROR_SCOPE) => Err(Error::Scope(detail)),
        Ok(s) if INVALID.contains(&s) && !argument.is_empty() => Err(Error::InvalidArgument {
            argument,
            message: named(detail),
        }),
        Ok(sys::MAMBA_SSU_ERROR_UNSUPPORTED) if !argument.is_empty() => Err(Error::Unsupported {
            argument,
            message: named(detail),
        }),
        _ => Err(Error::Launcher {
            status,
            message,
            detail,
        }),
    }
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

    /// C statuses become the crate's errors, naming the argument C names, its detail (less the
    /// name) as the message: INVALID_ARGUMENT and INVALID_VALUE an `InvalidArgument`,
    /// UNSUPPORTED an `Unsupported`, SCOPE a `Scope`; a rejection naming no argument, and
    /// anything else, a `Launcher` error with the status and the detail.
    #[test]
    fn c_statuses_become_typed_errors() {
        // SAFETY: a NULL output is rejected before anything is launched.
        let status = unsafe {
            sys::mamba_ssu_draw_seeds(std::ptr::null_mut(), std::ptr::null_mut(), 1, 0, 0)
        };
        match check(status) {
            Err(Error::InvalidArgument { argument, message }) => {
                assert_eq!((argument, message.as_str()), ("out", "null pointer"));
            }
            other => panic!("{other:?}"),
        }
        let args = sys::mamba_ssu_args {
            reserved: 1,
            ..Default::default()
        };
        // SAFETY: a valid (empty) call; the check reads it only.
        let status = unsafe { sys::mamba_ssu_check(&args, std::ptr::null_mut()) };
        assert_eq!(status, sys::MAMBA_SSU_ERROR_INVALID_VALUE as c_int);
        match check(status) {
            Err(Error::InvalidArgument { argument, message }) => {
                assert_eq!(
                    (argument, message.as_str()),
                    ("reserved", "expected 0, got 1")
                );
            }
            other => panic!("{other:?}"),
        }
        // Decode scales (FlashInfer's block-scaled state) with an fp16 state are not served.
        let mut args = sys::mamba_ssu_args::default();
        args.state.rank = 1;
        args.state.dtype = sys::MAMBA_SSU_F16 as i32;
        args.state.shape[0] = 1;
        args.state_scale.rank = 1;
        args.state_scale.dtype = sys::MAMBA_SSU_F32 as i32;
        args.state_scale.shape[0] = 1;
        args.state_scale.data = 0x1000 as *mut std::ffi::c_void;
        // SAFETY: a valid call description; the check reads it only.
        let status = unsafe { sys::mamba_ssu_check(&args, std::ptr::null_mut()) };
        match check(status) {
            Err(Error::Unsupported { argument, message }) => {
                assert_eq!(argument, "state_scale");
                assert!(
                    message.contains("block scaling is for an I16 state"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            check(sys::MAMBA_SSU_ERROR_SCOPE as c_int),
            Err(Error::Scope(_))
        ));
        // SAFETY: NULL arguments are rejected; the detail names no argument of the list.
        let status = unsafe {
            sys::mamba_ssu_prefetcher_graph_increment(std::ptr::null(), std::ptr::null_mut())
        };
        match check(status) {
            Err(Error::Launcher {
                status: s, detail, ..
            }) => {
                assert_eq!(s, status);
                assert!(detail.contains("null pointer"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        assert!(check(sys::MAMBA_SSU_SUCCESS as c_int).is_ok());
    }
}
