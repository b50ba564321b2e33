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

/// What the library's launch planning reads of a GPU (`mamba_ssu_device_props` of the C
/// header): the compute capability, the SM count and the per-SM limits. The launches read the
/// current device's, queried once per device and cached by the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// Compute capability (major, minor): (9, 0) on an H200, (8, 0) on an A100.
    pub compute_capability: (i32, i32),
    /// Multiprocessors.
    pub num_sms: i32,
    /// Resident threads per SM (2048 on sm_80, sm_90, sm_100; 1536 on sm_86, sm_89, sm_120).
    pub max_threads_per_sm: i32,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: i32,
    /// 32-bit registers per SM.
    pub regs_per_sm: i32,
    /// Shared memory per SM, bytes.
    pub smem_per_sm: i32,
    /// A block's shared memory without opt-in, bytes.
    pub smem_per_block: i32,
    /// Shared memory the system reserves per block, bytes.
    pub reserved_smem_per_block: i32,
}

impl DeviceProps {
    /// The properties of device `ordinal` as the library's planner reads them
    /// (`mamba_ssu_device_props_query`: the CUDA runtime's attributes, queried on the first
    /// call for a device and cached).
    ///
    /// Errors: [`Error::NoDriver`] / [`Error::NoDevice`] as [`open`]; a failed query as the
    /// library's CUDA error.
    pub fn of(ordinal: usize) -> Result<DeviceProps> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let mut p = crate::ffi::sys::mamba_ssu_device_props::default();
        // SAFETY: `p` is a valid output; the call reads device attributes only.
        crate::ffi::check(unsafe {
            crate::ffi::sys::mamba_ssu_device_props_query(ordinal as i32, &mut p)
        })?;
        Ok(DeviceProps::from_ffi(&p))
    }

    /// The sm_90 family's limits (H100, H200) with `num_sms` multiprocessors: what the planner
    /// assumes when it is given only an SM count (`MAMBA_SSU_DEVICE_PROPS_SM90`, through
    /// `mamba_ssu_device_props_sm90`). Errors: `num_sms` < 1 ([`Error::InvalidArgument`]).
    pub fn sm90(num_sms: i32) -> Result<DeviceProps> {
        let mut p = crate::ffi::sys::mamba_ssu_device_props::default();
        // SAFETY: `p` is a valid output; no device is touched.
        crate::ffi::check(unsafe {
            crate::ffi::sys::mamba_ssu_device_props_sm90(num_sms, &mut p)
        })?;
        Ok(DeviceProps::from_ffi(&p))
    }

    fn from_ffi(p: &crate::ffi::sys::mamba_ssu_device_props) -> DeviceProps {
        DeviceProps {
            compute_capability: (p.cc_major, p.cc_minor),
            num_sms: p.num_sms,
            max_threads_per_sm: p.max_threads_per_sm,
            max_blocks_per_sm: p.max_blocks_per_sm,
            regs_per_sm: p.regs_per_sm,
            smem_per_sm: p.smem_per_sm,
            smem_per_block: p.smem_per_block,
            reserved_smem_per_block: p.reserved_smem_per_block,
        }
    }

    /// The C library's form of these properties.
    pub(crate) fn ffi(&self) -> crate::ffi::sys::mamba_ssu_device_props {
        crate::ffi::sys::mamba_ssu_device_props {
            cc_major: self.compute_capability.0,
            cc_minor: self.compute_capability.1,
            num_sms: self.num_sms,
            max_threads_per_sm: self.max_threads_per_sm,
            max_blocks_per_sm: self.max_blocks_per_sm,
            regs_per_sm: self.regs_per_sm,
            smem_per_sm: self.smem_per_sm,
            smem_per_block: self.smem_per_block,
            reserved_smem_per_block: self.reserved_smem_per_block,
            reserved: 0,
        }
    }
}
