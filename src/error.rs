//! The library's error type: every fallible call returns [`Result<T>`](Result).

use std::fmt;

use cudarc::driver::DriverError;

/// Errors of the safe API. Invalid input is reported before anything is launched.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library (libcuda) could not be loaded: no NVIDIA driver on this machine.
    NoDriver,
    /// The driver loaded but reports no device with this ordinal.
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// A CUDA driver call made through cudarc failed.
    Driver(DriverError),
    /// An argument violates the kernel's contract; nothing was launched. The C ABI's
    /// `MAMBA_SSU_ERROR_INVALID_ARGUMENT` (a shape, dtype, stride or size outside the contract)
    /// and `MAMBA_SSU_ERROR_INVALID_VALUE` (an option outside its set, or two options that
    /// conflict), and the rules only the Rust layer can check (a tensor reaching past its
    /// buffer, a size that does not fit the C types).
    InvalidArgument {
        /// The argument, as the C check names it (e.g. `B`, `philox_rounds`, `seed.position`)
        /// or as named in the Rust API (e.g. `offset`).
        argument: &'static str,
        /// What was expected and what was given (the C check's detail).
        message: String,
    },
    /// A valid combination the kernels do not serve (e.g. a `dstate` above 256 that
    /// FlashInfer takes,
    /// stochastic rounding of a non-fp16 state, a grid or extent past the kernel's limits);
    /// nothing was launched. The C ABI's `MAMBA_SSU_ERROR_UNSUPPORTED`.
    Unsupported {
        /// The argument, as the C check names it.
        argument: &'static str,
        /// What is served and what was given.
        message: String,
    },
    /// A device buffer lives on another device than the stream it is used on.
    WrongDevice {
        /// The argument.
        argument: &'static str,
        /// The stream's device ordinal.
        expected: usize,
        /// The buffer's device ordinal.
        got: usize,
    },
    /// A C launcher returned a non-zero status.
    Launcher {
        /// The launcher's status code (`mamba_ssu_status`).
        status: i32,
        /// The status message.
        message: String,
        /// The launcher's detail (which argument, or the CUDA error text).
        detail: String,
    },
    /// A prefetcher's forward scope was used against its contract (e.g. a captured forward
    /// that consumed fewer seeds than it drew); the streams are joined and usable.
    Scope(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub(crate) fn invalid(argument: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            argument,
            message: message.into(),
        }
    }

    /// Whether the error means "no GPU here" (no driver or no device) rather than a failure.
    pub fn is_no_gpu(&self) -> bool {
        matches!(self, Error::NoDriver | Error::NoDevice { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDriver => write!(f, "no CUDA driver: libcuda could not be loaded"),
            Error::NoDevice { ordinal, count } => {
                write!(f, "no CUDA device {ordinal} (the driver reports {count})")
            }
            Error::Driver(e) => write!(f, "CUDA driver error: {e}"),
            Error::InvalidArgument { argument, message } => write!(f, "`{argument}`: {message}"),
            Error::Unsupported { argument, message } => {
                write!(f, "`{argument}`: unsupported: {message}")
            }
            Error::WrongDevice {
                argument,
                expected,
                got,
            } => write!(
                f,
                "`{argument}`: buffer is on device {got}, the stream on device {expected}"
            ),
            Error::Launcher {
                status,
                message,
                detail,
            } => {
                if detail.is_empty() {
                    write!(f, "launcher failed ({status}): {message}")
                } else {
                    write!(f, "launcher failed ({status}): {message}: {detail}")
                }
            }
            Error::Scope(m) => write!(f, "forward scope: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Driver(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}
