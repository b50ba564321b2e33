//! Selective state update (single token): the safe layer over the C launcher
//! `mamba_ssu_selective_state_update` (`csrc/ssu.cu`), FlashInfer 0.7.2 compatible.
//!
//! Layer: safe API. Tensors are type-erased views of borrowed cudarc buffers ([`Tensor`],
//! [`TensorMut`]) with a dtype, a shape and strides in elements, like torch tensors whose
//! storage offset is the start of the buffer: element `[i0, i1, ..]` lives at
//! `Σ i_k · stride_k` (a stride may be 0 for a broadcast dimension). [`validate`] checks the
//! whole contract as a pure function of the layouts; [`selective_state_update`] validates,
//! checks devices, fills `mamba_ssu_params` and enqueues one kernel. The call is
//! **asynchronous on the stream it is given**: it returns once the kernel is enqueued, and
//! cudarc's event tracking orders it after earlier writes of the buffers.
//!
//! # Shape and stride contract (FlashInfer's)
//! | argument | shape | dtype | strides (elements) |
//! |---|---|---|---|
//! | `state` | (slots, nheads, dim, dstate) | F16, BF16, F32 | (s0, dim·dstate, dstate, 1), s0 ≥ nheads·dim·dstate, s0 · elem a multiple of 16 bytes |
//! | `x`, `out`, `z` | (batch, nheads, dim) | input dtype: F16, BF16, F32 | (sb, dim, 1), sb · elem a multiple of 16 bytes; `out` rows may not overlap |
//! | `dt` | (batch, nheads, dim) | weight dtype: F16, BF16, F32 | (any, 1, 0) |
//! | `A` | (nheads, dim, dstate) | F32 | (1, 0, 0) |
//! | `D`, `dt_bias` | (nheads, dim) | weight dtype | (1, 0) |
//! | `B`, `C` | (batch, ngroups, dstate) | input dtype | (sb, dstate, 1), sb · elem a multiple of 16 bytes |
//! | `state_batch_indices`, `dst_state_batch_indices` | (batch,) or (batch, T) | I32 or I64 (both the same) | any; column 0 is read |
//! | `rand_seed` ([`SeedSource::Pointer`]) | one element | I64 | — |
//!
//! dstate ∈ {64, 128, 256}; ngroups divides nheads; batch ≥ 1; every dimension ≥ 1; every
//! tensor's largest reachable element lies inside its buffer. `x`, `z`, `B`, `C`, `out` and
//! `state` must start 16-byte aligned (checked at launch; whole cudarc allocations are).
//! `philox_rounds` ∈ 0..=10; rounds > 0 (stochastic rounding) need an F16 state and a seed. A
//! seed given with `philox_rounds == 0` is ignored, unchecked and not passed (the state is
//! rounded to nearest). The seed is one int64 in device memory ([`SeedSource::Pointer`],
//! FlashInfer's `rand_seed`), or the kernel derives the stock torch draw itself, from a
//! device-resident generator state ([`SeedSource::FromGenerator`], CUDA-graph safe) or from
//! host values ([`SeedSource::FromValues`]); the fused offsets are multiples of 4.
//!
//! Slots: batch entry `b` reads slot `state_batch_indices[b, 0]` (or `b` without indices) and
//! writes `dst_state_batch_indices[b, 0]` (or the read slot). A read slot equal to
//! `pad_slot_id` (or outside `0..slots`) is a pad: the state is read as zeros, `out` is still
//! written, no state is written; a write slot equal to `pad_slot_id` (or out of range) is not
//! written either. Index values live in device memory and are not checked on the host.
//!
//! Speed: the shapes engines run hot (F16 state, BF16 inputs and weights, F32 `A`, dim 64,
//! dstate 128, 0, 5 or 10 rounds) run compiled-in kernels, each built with and without `z`:
//! leaving `z` as `None` (gating done later, as in engines' Mamba-2 mixers) runs a loop with
//! no `z` work at all. Every other combination runs a kernel that takes sizes, dtypes and rounds
//! at run time (same results, slower). Figures: `BENCHMARKS.md`.
//!
//! # Example
//! ```no_run
//! use mamba_ssu::device;
//! use mamba_ssu::ssu::{selective_state_update, SeedSource, SsuArgs, Tensor, TensorMut};
//! use half::{bf16, f16};
//!
//! # fn main() -> Result<(), mamba_ssu::Error> {
//! let (slots, batch, nheads, dim, dstate, ngroups) = (8, 4, 32, 64, 128, 8);
//! let ctx = device::open(0)?;
//! let stream = ctx.new_stream()?;
//! let mut state = stream.alloc_zeros::<f16>(slots * nheads * dim * dstate)?;
//! let x = stream.alloc_zeros::<bf16>(batch * nheads * dim)?;
//! let dt = stream.alloc_zeros::<bf16>(batch * nheads)?;
//! let a = stream.alloc_zeros::<f32>(nheads)?;
//! let bc = stream.alloc_zeros::<bf16>(batch * ngroups * dstate)?;
//! let mut out = stream.alloc_zeros::<bf16>(batch * nheads * dim)?;
//! let seed = stream.alloc_zeros::<i64>(1)?;
//! let mut args = SsuArgs::new(
//!     TensorMut::contiguous(&mut state, &[slots, nheads, dim, dstate])?,
//!     Tensor::contiguous(&x, &[batch, nheads, dim])?,
//!     Tensor::new(&dt, &[batch, nheads, dim], &[nheads, 1, 0])?,
//!     Tensor::new(&a, &[nheads, dim, dstate], &[1, 0, 0])?,
//!     Tensor::contiguous(&bc, &[batch, ngroups, dstate])?,
//!     Tensor::contiguous(&bc, &[batch, ngroups, dstate])?,
//!     TensorMut::contiguous(&mut out, &[batch, nheads, dim])?,
//! )
//! .dt_softplus(true)
//! .stochastic_rounding(SeedSource::Pointer(Tensor::contiguous(&seed, &[1])?), 10);
//! selective_state_update(&stream, &mut args)?; // asynchronous on `stream`
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::{CUdevice_attribute, CUdeviceptr};
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    SyncOnDrop,
};
use half::{bf16, f16};

use crate::device::{check_ordinal, check_same_device};
use crate::error::{Error, Result};
use crate::ffi::{self, sys};
use crate::generator::GraphSeedState;
use crate::prefetch::{FusedSeed, SeedPtr};

/// Most dimensions a [`TensorLayout`] has.
pub const MAX_RANK: usize = 4;

/// The `dstate` values the kernel supports.
pub const SUPPORTED_DSTATE: [usize; 3] = [64, 128, 256];

/// Most Philox rounds of stochastic rounding.
pub const MAX_PHILOX_ROUNDS: u32 = 10;

/// Alignment in bytes FlashInfer requires of the vector-loaded tensors and batch strides.
pub const VECTOR_ALIGN: usize = 16;

// ---------------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------------

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
}

impl DType {
    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::I64 => 8,
        }
    }

    /// Whether this is one of the floating-point types (F32, F16, BF16).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// The name used in messages (`F16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::I64 => "I64",
        }
    }

    /// The C ABI's `mamba_ssu_dtype` value.
    fn ffi(self) -> i32 {
        (match self {
            DType::F32 => sys::MAMBA_SSU_F32,
            DType::F16 => sys::MAMBA_SSU_F16,
            DType::BF16 => sys::MAMBA_SSU_BF16,
            DType::I32 => sys::MAMBA_SSU_I32,
            DType::I64 => sys::MAMBA_SSU_I64,
        }) as i32
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    use super::*;

    /// A borrowed device view of one of the five element types.
    pub enum AnyView<'a> {
        F32(CudaView<'a, f32>),
        F16(CudaView<'a, f16>),
        BF16(CudaView<'a, bf16>),
        I32(CudaView<'a, i32>),
        I64(CudaView<'a, i64>),
    }

    /// A borrowed mutable device view of one of the five element types.
    pub enum AnyViewMut<'a> {
        F32(CudaViewMut<'a, f32>),
        F16(CudaViewMut<'a, f16>),
        BF16(CudaViewMut<'a, bf16>),
        I32(CudaViewMut<'a, i32>),
        I64(CudaViewMut<'a, i64>),
    }

    /// Seals [`super::Element`]: a wrong `DTYPE` would break the bounds checks.
    pub trait Sealed: Sized {
        fn erase(view: CudaView<'_, Self>) -> AnyView<'_>;
        fn erase_mut(view: CudaViewMut<'_, Self>) -> AnyViewMut<'_>;
    }

    macro_rules! sealed_impl {
        ($t:ty, $v:ident) => {
            impl Sealed for $t {
                fn erase(view: CudaView<'_, Self>) -> AnyView<'_> {
                    AnyView::$v(view)
                }
                fn erase_mut(view: CudaViewMut<'_, Self>) -> AnyViewMut<'_> {
                    AnyViewMut::$v(view)
                }
            }
        };
    }
    sealed_impl!(f32, F32);
    sealed_impl!(f16, F16);
    sealed_impl!(bf16, BF16);
    sealed_impl!(i32, I32);
    sealed_impl!(i64, I64);

    macro_rules! each {
        ($e:expr, $enum:ident, $v:ident => $body:expr) => {
            match $e {
                $enum::F32($v) => $body,
                $enum::F16($v) => $body,
                $enum::BF16($v) => $body,
                $enum::I32($v) => $body,
                $enum::I64($v) => $body,
            }
        };
    }

    impl AnyView<'_> {
        pub(super) fn stream(&self) -> &Arc<CudaStream> {
            each!(self, AnyView, v => cudarc::driver::DeviceSlice::stream(v))
        }
        pub(super) fn len(&self) -> usize {
            each!(self, AnyView, v => v.len())
        }
        pub(super) fn ptr<'s>(&'s self, stream: &'s CudaStream) -> (CUdeviceptr, SyncOnDrop<'s>) {
            each!(self, AnyView, v => v.device_ptr(stream))
        }
    }

    impl AnyViewMut<'_> {
        pub(super) fn stream(&self) -> &Arc<CudaStream> {
            each!(self, AnyViewMut, v => cudarc::driver::DeviceSlice::stream(v))
        }
        pub(super) fn len(&self) -> usize {
            each!(self, AnyViewMut, v => v.len())
        }
        pub(super) fn ptr_mut<'s>(
            &'s mut self,
            stream: &'s CudaStream,
        ) -> (CUdeviceptr, SyncOnDrop<'s>) {
            each!(self, AnyViewMut, v => v.device_ptr_mut(stream))
        }
    }
}

use sealed::{AnyView, AnyViewMut};

/// An element type the kernel reads or writes: `f32`, [`half::f16`], [`half::bf16`], `i32`,
/// `i64` (sealed).
pub trait Element: DeviceRepr + sealed::Sealed + 'static {
    /// The element's [`DType`].
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for i64 {
    const DTYPE: DType = DType::I64;
}

/// A read-only device buffer a [`Tensor`] can borrow: `&CudaSlice<T>`, `CudaView<T>` or
/// `&CudaViewMut<T>`.
pub trait IntoDeviceView<'a, T> {
    /// The borrowed view.
    fn into_device_view(self) -> CudaView<'a, T>;
}

impl<'a, T> IntoDeviceView<'a, T> for &'a CudaSlice<T> {
    fn into_device_view(self) -> CudaView<'a, T> {
        self.as_view()
    }
}

impl<'a, T> IntoDeviceView<'a, T> for CudaView<'a, T> {
    fn into_device_view(self) -> CudaView<'a, T> {
        self
    }
}

impl<'a, T> IntoDeviceView<'a, T> for &'a CudaViewMut<'_, T> {
    fn into_device_view(self) -> CudaView<'a, T> {
        self.as_view()
    }
}

/// A mutable device buffer a [`TensorMut`] can borrow: `&mut CudaSlice<T>` or `CudaViewMut<T>`.
pub trait IntoDeviceViewMut<'a, T> {
    /// The borrowed mutable view.
    fn into_device_view_mut(self) -> CudaViewMut<'a, T>;
}

impl<'a, T> IntoDeviceViewMut<'a, T> for &'a mut CudaSlice<T> {
    fn into_device_view_mut(self) -> CudaViewMut<'a, T> {
        self.as_view_mut()
    }
}

impl<'a, T> IntoDeviceViewMut<'a, T> for CudaViewMut<'a, T> {
    fn into_device_view_mut(self) -> CudaViewMut<'a, T> {
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Layouts and tensors
// ---------------------------------------------------------------------------------------------

/// The host-side description of a tensor: dtype, shape, strides in elements and the length of
/// the buffer it lives in (in elements). Rank 0..=[`MAX_RANK`]. What [`validate`] checks.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorLayout {
    dtype: DType,
    rank: usize,
    shape: [usize; MAX_RANK],
    strides: [usize; MAX_RANK],
    len: usize,
}

impl TensorLayout {
    /// One int64 (a seed in device memory).
    const fn one_i64() -> Self {
        Self {
            dtype: DType::I64,
            rank: 1,
            shape: [1, 0, 0, 0],
            strides: [1, 0, 0, 0],
            len: 1,
        }
    }

    /// A layout of the given shape and strides (elements) over a buffer of `len` elements.
    ///
    /// Errors: more than [`MAX_RANK`] dimensions (`shape`); `strides` of another length than
    /// `shape` (`strides`). Bounds are checked by [`validate`], which knows the argument name.
    pub fn new(dtype: DType, shape: &[usize], strides: &[usize], len: usize) -> Result<Self> {
        if shape.len() > MAX_RANK {
            return Err(Error::invalid(
                "shape",
                format!(
                    "expected at most {MAX_RANK} dimensions, got {} {}",
                    shape.len(),
                    fmt_dims(shape)
                ),
            ));
        }
        if strides.len() != shape.len() {
            return Err(Error::invalid(
                "strides",
                format!(
                    "expected {} strides (one per dimension of shape {}), got {} {}",
                    shape.len(),
                    fmt_dims(shape),
                    strides.len(),
                    fmt_dims(strides)
                ),
            ));
        }
        let mut s = [0; MAX_RANK];
        let mut t = [0; MAX_RANK];
        s[..shape.len()].copy_from_slice(shape);
        t[..shape.len()].copy_from_slice(strides);
        Ok(Self {
            dtype,
            rank: shape.len(),
            shape: s,
            strides: t,
            len,
        })
    }

    /// A row-major (C-contiguous) layout of `shape` over a buffer of `len` elements.
    pub fn contiguous(dtype: DType, shape: &[usize], len: usize) -> Result<Self> {
        let strides = contiguous_strides(shape)?;
        Self::new(dtype, shape, &strides[..shape.len().min(MAX_RANK)], len)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The sizes of the dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape[..self.rank]
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides[..self.rank]
    }

    /// Length of the underlying buffer, in elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the underlying buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of elements of the tensor (the product of the shape; `None` on overflow).
    pub fn numel(&self) -> Option<usize> {
        self.shape()
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n))
    }

    /// Offset of the largest reachable element, `Σ (shape_k - 1) · stride_k`; `None` when the
    /// tensor has no element or the sum overflows.
    pub fn max_offset(&self) -> Option<usize> {
        let mut max = 0usize;
        for (&n, &s) in self.shape().iter().zip(self.strides()) {
            let last = n.checked_sub(1)?;
            max = max.checked_add(last.checked_mul(s)?)?;
        }
        Some(max)
    }
}

impl fmt::Debug for TensorLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} shape {} strides {} in {} elements",
            self.dtype,
            fmt_dims(self.shape()),
            fmt_dims(self.strides()),
            self.len
        )
    }
}

fn contiguous_strides(shape: &[usize]) -> Result<[usize; MAX_RANK]> {
    if shape.len() > MAX_RANK {
        return Err(Error::invalid(
            "shape",
            format!(
                "expected at most {MAX_RANK} dimensions, got {} {}",
                shape.len(),
                fmt_dims(shape)
            ),
        ));
    }
    let mut strides = [0usize; MAX_RANK];
    let mut acc = 1usize;
    for k in (0..shape.len()).rev() {
        strides[k] = acc;
        acc = acc.checked_mul(shape[k]).ok_or_else(|| {
            Error::invalid(
                "shape",
                format!("element count of {} overflows usize", fmt_dims(shape)),
            )
        })?;
    }
    Ok(strides)
}

fn fmt_dims(d: &[usize]) -> String {
    match d {
        [one] => format!("({one},)"),
        _ => {
            let inner: Vec<String> = d.iter().map(|v| v.to_string()).collect();
            format!("({})", inner.join(", "))
        }
    }
}

/// A read-only, type-erased tensor over a borrowed device buffer (see the module doc for the
/// element addressing). The raw device pointer is taken only at launch.
pub struct Tensor<'a> {
    view: AnyView<'a>,
    layout: TensorLayout,
}

impl<'a> Tensor<'a> {
    /// A tensor of `shape` with `strides` (elements) over `buf`, element 0 at the buffer's
    /// start. Errors as [`TensorLayout::new`].
    pub fn new<T: Element>(
        buf: impl IntoDeviceView<'a, T>,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self> {
        let view = T::erase(buf.into_device_view());
        let layout = TensorLayout::new(T::DTYPE, shape, strides, view.len())?;
        Ok(Self { view, layout })
    }

    /// A row-major tensor of `shape` over `buf`.
    pub fn contiguous<T: Element>(
        buf: impl IntoDeviceView<'a, T>,
        shape: &[usize],
    ) -> Result<Self> {
        let strides = contiguous_strides(shape)?;
        Self::new(buf, shape, &strides[..shape.len()])
    }

    /// The tensor's layout.
    pub fn layout(&self) -> &TensorLayout {
        &self.layout
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// The sizes of the dimensions.
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        self.layout.strides()
    }

    /// The stream the underlying buffer was allocated on (its device).
    pub fn buffer_stream(&self) -> &Arc<CudaStream> {
        self.view.stream()
    }

    /// The device pointer for reading on `stream`; keep the guard alive until the kernel that
    /// uses the pointer is enqueued (it records the read for cudarc's event tracking).
    pub(crate) fn device_ptr<'s>(
        &'s self,
        stream: &'s CudaStream,
    ) -> (CUdeviceptr, SyncOnDrop<'s>) {
        self.view.ptr(stream)
    }
}

impl fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Tensor").field(&self.layout).finish()
    }
}

/// A writable, type-erased tensor over a mutably borrowed device buffer.
pub struct TensorMut<'a> {
    view: AnyViewMut<'a>,
    layout: TensorLayout,
}

impl<'a> TensorMut<'a> {
    /// A tensor of `shape` with `strides` (elements) over `buf`, element 0 at the buffer's
    /// start. Errors as [`TensorLayout::new`].
    pub fn new<T: Element>(
        buf: impl IntoDeviceViewMut<'a, T>,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self> {
        let view = T::erase_mut(buf.into_device_view_mut());
        let layout = TensorLayout::new(T::DTYPE, shape, strides, view.len())?;
        Ok(Self { view, layout })
    }

    /// A row-major tensor of `shape` over `buf`.
    pub fn contiguous<T: Element>(
        buf: impl IntoDeviceViewMut<'a, T>,
        shape: &[usize],
    ) -> Result<Self> {
        let strides = contiguous_strides(shape)?;
        Self::new(buf, shape, &strides[..shape.len()])
    }

    /// The tensor's layout.
    pub fn layout(&self) -> &TensorLayout {
        &self.layout
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// The sizes of the dimensions.
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        self.layout.strides()
    }

    /// The stream the underlying buffer was allocated on (its device).
    pub fn buffer_stream(&self) -> &Arc<CudaStream> {
        self.view.stream()
    }

    /// The device pointer for writing on `stream`; keep the guard alive until the kernel that
    /// uses the pointer is enqueued (it records the write for cudarc's event tracking).
    pub(crate) fn device_ptr_mut<'s>(
        &'s mut self,
        stream: &'s CudaStream,
    ) -> (CUdeviceptr, SyncOnDrop<'s>) {
        self.view.ptr_mut(stream)
    }
}

impl fmt::Debug for TensorMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TensorMut").field(&self.layout).finish()
    }
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

/// Which of FlashInfer's two kernels the results must match: it fixes the per-element random
/// bits of stochastic rounding and the summation order of `out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// FlashInfer's rule: [`Algorithm::Simple`] when `batch * nheads < 2 * SMs`, else
    /// [`Algorithm::Vertical`] (see [`Algorithm::resolve`]).
    #[default]
    Auto,
    /// FlashInfer's "simple" kernel.
    Simple,
    /// FlashInfer's "vertical" kernel.
    Vertical,
}

impl Algorithm {
    /// The kernel this choice runs for `batch * nheads` on a device with `num_sms`
    /// multiprocessors: `Simple` or `Vertical`, never `Auto` (FlashInfer's rule for `Auto`).
    pub fn resolve(self, batch: usize, nheads: usize, num_sms: u32) -> Algorithm {
        match self {
            Algorithm::Auto => {
                if (batch as u128) * (nheads as u128) < 2 * u128::from(num_sms) {
                    Algorithm::Simple
                } else {
                    Algorithm::Vertical
                }
            }
            other => other,
        }
    }

    /// [`Algorithm::resolve`] on the device of `ctx` (reads its multiprocessor count).
    pub fn resolve_on(self, ctx: &CudaContext, batch: usize, nheads: usize) -> Result<Algorithm> {
        Ok(self.resolve(batch, nheads, num_sms(ctx)?))
    }

    fn ffi(self) -> i32 {
        (match self {
            Algorithm::Auto => sys::MAMBA_SSU_ALGO_AUTO,
            Algorithm::Simple => sys::MAMBA_SSU_ALGO_SIMPLE,
            Algorithm::Vertical => sys::MAMBA_SSU_ALGO_VERTICAL,
        }) as i32
    }
}

fn num_sms(ctx: &CudaContext) -> Result<u32> {
    let n = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Ok(n.max(1) as u32)
}

/// Where the stochastic-rounding seed comes from.
pub enum SeedSource<'a> {
    /// One int64 in device memory, read by the kernel (FlashInfer's `rand_seed`).
    Pointer(Tensor<'a>),
    /// Fused: the kernel computes the seed itself as the stock torch draw at generator offset
    /// `state.offset + offset` (read from `state`'s device memory when the kernel runs), i.e.
    /// [`crate::philox::torch_seed`]`(seed, offset_now + offset)`. `offset` is a multiple of 4.
    FromGenerator {
        /// The device-resident generator state.
        state: &'a GraphSeedState,
        /// Offset added to the device state's offset (intragraph offset; a multiple of 4).
        offset: u64,
    },
    /// Fused, eager: the kernel computes the seed as the stock torch draw from generator state
    /// `(seed, offset)` given here, i.e. [`crate::philox::torch_seed`]`(seed, offset)`; no
    /// device memory is read. `offset` is a multiple of 4.
    FromValues {
        /// The generator's seed.
        seed: u64,
        /// The draw's generator offset (a multiple of 4).
        offset: u64,
    },
    /// A seed handed out by the [`crate::prefetch::Prefetcher`] (prefetched from its batched
    /// draw, or drawn inline by the stock path): one int64 in the prefetcher's device memory.
    Prefetched(SeedPtr<'a>),
    /// The fused path from [`crate::prefetch::Prefetcher::fused_seed`]: the kernel derives the
    /// stock seed itself (from values eagerly, from the prefetcher's device generator state
    /// under capture).
    Fused(FusedSeed<'a>),
}

impl fmt::Debug for SeedSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeedSource::Pointer(t) => f.debug_tuple("Pointer").field(t).finish(),
            SeedSource::FromGenerator { offset, .. } => f
                .debug_struct("FromGenerator")
                .field("offset", offset)
                .finish_non_exhaustive(),
            SeedSource::FromValues { seed, offset } => f
                .debug_struct("FromValues")
                .field("seed", seed)
                .field("offset", offset)
                .finish(),
            SeedSource::Prefetched(p) => f.debug_tuple("Prefetched").field(p).finish(),
            SeedSource::Fused(p) => f.debug_tuple("Fused").field(p).finish(),
        }
    }
}

/// The arguments of one [`selective_state_update`] call (FlashInfer's names; see the module doc
/// for the contract). [`SsuArgs::new`] fills the defaults; the builder methods set the rest.
#[derive(Debug)]
pub struct SsuArgs<'a> {
    /// State cache (slots, nheads, dim, dstate), updated in place.
    pub state: TensorMut<'a>,
    /// Input (batch, nheads, dim).
    pub x: Tensor<'a>,
    /// Time step (batch, nheads, dim), strides (any, 1, 0).
    pub dt: Tensor<'a>,
    /// `A` (nheads, dim, dstate), strides (1, 0, 0), F32.
    pub a: Tensor<'a>,
    /// `B` (batch, ngroups, dstate).
    pub b: Tensor<'a>,
    /// `C` (batch, ngroups, dstate).
    pub c: Tensor<'a>,
    /// Optional skip weight `D` (nheads, dim), strides (1, 0).
    pub d: Option<Tensor<'a>>,
    /// Optional gate `z` (batch, nheads, dim).
    pub z: Option<Tensor<'a>>,
    /// Optional `dt_bias` (nheads, dim), strides (1, 0).
    pub dt_bias: Option<Tensor<'a>>,
    /// Optional read slots (batch,) or (batch, T), I32 or I64.
    pub state_batch_indices: Option<Tensor<'a>>,
    /// Optional write slots, same form and dtype as `state_batch_indices`.
    pub dst_state_batch_indices: Option<Tensor<'a>>,
    /// Output (batch, nheads, dim), written.
    pub out: TensorMut<'a>,
    /// Slot value that marks a padded batch entry (default -1).
    pub pad_slot_id: i64,
    /// Apply softplus to `dt + dt_bias` (default false).
    pub dt_softplus: bool,
    /// Write the updated state (default true).
    pub update_state: bool,
    /// 0 (default): round the state to nearest; 1..=10: stochastic rounding of an F16 state
    /// with that many Philox rounds (needs `seed`).
    pub philox_rounds: u32,
    /// Which FlashInfer kernel to match (default [`Algorithm::Auto`]).
    pub algorithm: Algorithm,
    /// The stochastic-rounding seed; ignored when `philox_rounds == 0`.
    pub seed: Option<SeedSource<'a>>,
}

impl<'a> SsuArgs<'a> {
    /// The required tensors, with defaults: no `D`, `z`, `dt_bias` or indices,
    /// `pad_slot_id = -1`, no softplus, state updated, round to nearest, [`Algorithm::Auto`].
    pub fn new(
        state: TensorMut<'a>,
        x: Tensor<'a>,
        dt: Tensor<'a>,
        a: Tensor<'a>,
        b: Tensor<'a>,
        c: Tensor<'a>,
        out: TensorMut<'a>,
    ) -> Self {
        Self {
            state,
            x,
            dt,
            a,
            b,
            c,
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: None,
            dst_state_batch_indices: None,
            out,
            pad_slot_id: -1,
            dt_softplus: false,
            update_state: true,
            philox_rounds: 0,
            algorithm: Algorithm::Auto,
            seed: None,
        }
    }

    /// Sets `D`.
    pub fn d(mut self, d: Tensor<'a>) -> Self {
        self.d = Some(d);
        self
    }

    /// Sets the gate `z`.
    pub fn z(mut self, z: Tensor<'a>) -> Self {
        self.z = Some(z);
        self
    }

    /// Sets `dt_bias`.
    pub fn dt_bias(mut self, dt_bias: Tensor<'a>) -> Self {
        self.dt_bias = Some(dt_bias);
        self
    }

    /// Sets the read slots.
    pub fn state_batch_indices(mut self, indices: Tensor<'a>) -> Self {
        self.state_batch_indices = Some(indices);
        self
    }

    /// Sets the write slots.
    pub fn dst_state_batch_indices(mut self, indices: Tensor<'a>) -> Self {
        self.dst_state_batch_indices = Some(indices);
        self
    }

    /// Sets `pad_slot_id`.
    pub fn pad_slot_id(mut self, pad_slot_id: i64) -> Self {
        self.pad_slot_id = pad_slot_id;
        self
    }

    /// Sets `dt_softplus`.
    pub fn dt_softplus(mut self, on: bool) -> Self {
        self.dt_softplus = on;
        self
    }

    /// Sets `update_state` (false: FlashInfer's `disable_state_update`).
    pub fn update_state(mut self, on: bool) -> Self {
        self.update_state = on;
        self
    }

    /// Sets the algorithm.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Enables stochastic rounding with `philox_rounds` rounds (1..=10) and `seed`.
    pub fn stochastic_rounding(mut self, seed: SeedSource<'a>, philox_rounds: u32) -> Self {
        self.seed = Some(seed);
        self.philox_rounds = philox_rounds;
        self
    }

    /// The layouts and flags [`validate`] checks.
    pub fn spec(&self) -> SsuSpec {
        SsuSpec {
            state: self.state.layout,
            x: self.x.layout,
            dt: self.dt.layout,
            a: self.a.layout,
            b: self.b.layout,
            c: self.c.layout,
            d: self.d.as_ref().map(|t| t.layout),
            z: self.z.as_ref().map(|t| t.layout),
            dt_bias: self.dt_bias.as_ref().map(|t| t.layout),
            state_batch_indices: self.state_batch_indices.as_ref().map(|t| t.layout),
            dst_state_batch_indices: self.dst_state_batch_indices.as_ref().map(|t| t.layout),
            out: self.out.layout,
            philox_rounds: self.philox_rounds,
            seed: self.seed.as_ref().map(|s| match s {
                SeedSource::Pointer(t) => SeedSpec::Pointer(t.layout),
                SeedSource::FromGenerator { offset, .. } => {
                    SeedSpec::FromGenerator { offset: *offset }
                }
                SeedSource::FromValues { seed, offset } => SeedSpec::FromValues {
                    seed: *seed,
                    offset: *offset,
                },
                SeedSource::Prefetched(_) => SeedSpec::Pointer(PREFETCHED_SEED_LAYOUT),
                SeedSource::Fused(f) => match (f.linked_seed(), f.generator_state()) {
                    // A chained call reads the seed its predecessor stored.
                    (Some(_), _) => SeedSpec::Pointer(PREFETCHED_SEED_LAYOUT),
                    (None, Some(_)) => SeedSpec::FromGenerator {
                        offset: f.seed_offset(),
                    },
                    (None, None) => SeedSpec::FromValues {
                        seed: f.generator_seed(),
                        offset: f.seed_offset(),
                    },
                },
            }),
        }
    }
}

/// The seed as [`validate`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedSpec {
    /// [`SeedSource::Pointer`]: the layout of the seed tensor.
    Pointer(TensorLayout),
    /// [`SeedSource::FromGenerator`] with this offset.
    FromGenerator {
        /// The offset added to the device generator state's offset.
        offset: u64,
    },
    /// [`SeedSource::FromValues`].
    FromValues {
        /// The generator's seed.
        seed: u64,
        /// The draw's generator offset.
        offset: u64,
    },
}

/// Everything [`validate`] checks: the layouts of every tensor and the flags that constrain
/// them (no device memory involved). [`SsuArgs::spec`] builds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsuSpec {
    /// `state`.
    pub state: TensorLayout,
    /// `x`.
    pub x: TensorLayout,
    /// `dt`.
    pub dt: TensorLayout,
    /// `A`.
    pub a: TensorLayout,
    /// `B`.
    pub b: TensorLayout,
    /// `C`.
    pub c: TensorLayout,
    /// `D`.
    pub d: Option<TensorLayout>,
    /// `z`.
    pub z: Option<TensorLayout>,
    /// `dt_bias`.
    pub dt_bias: Option<TensorLayout>,
    /// `state_batch_indices`.
    pub state_batch_indices: Option<TensorLayout>,
    /// `dst_state_batch_indices`.
    pub dst_state_batch_indices: Option<TensorLayout>,
    /// `out`.
    pub out: TensorLayout,
    /// Philox rounds (0: round to nearest).
    pub philox_rounds: u32,
    /// The seed, if any.
    pub seed: Option<SeedSpec>,
}

/// The sizes and dtypes of a validated call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsuProblem {
    /// Batch entries (`x.size(0)`).
    pub batch: usize,
    /// Heads.
    pub nheads: usize,
    /// Head dimension (rows per head).
    pub dim: usize,
    /// State columns.
    pub dstate: usize,
    /// Groups of `B` and `C`.
    pub ngroups: usize,
    /// State cache slots (`state.size(0)`).
    pub cache_slots: usize,
    /// State dtype.
    pub state_dtype: DType,
    /// Dtype of `x`, `z`, `B`, `C`, `out`.
    pub input_dtype: DType,
    /// Dtype of `dt`, `D`, `dt_bias`.
    pub weight_dtype: DType,
    /// Dtype of the index tensors, if any is given.
    pub index_dtype: Option<DType>,
    /// Whether the state is stochastically rounded (`philox_rounds > 0`).
    pub stochastic_rounding: bool,
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

fn expect_rank(name: &'static str, l: &TensorLayout, rank: usize, what: &str) -> Result<()> {
    if l.rank() != rank {
        return Err(Error::invalid(
            name,
            format!(
                "expected {rank} dimensions {what}, got {} with shape {}",
                l.rank(),
                fmt_dims(l.shape())
            ),
        ));
    }
    Ok(())
}

fn expect_float(name: &'static str, l: &TensorLayout) -> Result<()> {
    if !l.dtype().is_float() {
        return Err(Error::invalid(
            name,
            format!("expected dtype F16, BF16 or F32, got {}", l.dtype()),
        ));
    }
    Ok(())
}

fn expect_dtype(name: &'static str, l: &TensorLayout, dtype: DType, why: &str) -> Result<()> {
    if l.dtype() != dtype {
        return Err(Error::invalid(
            name,
            format!("expected dtype {dtype} ({why}), got {}", l.dtype()),
        ));
    }
    Ok(())
}

/// Checks `l.shape()[k] == expected[k]` for every `Some`, naming the dimension.
fn expect_dim(
    name: &'static str,
    l: &TensorLayout,
    k: usize,
    dim_name: &str,
    expected: usize,
) -> Result<()> {
    let got = l.shape()[k];
    if got != expected {
        return Err(Error::invalid(
            name,
            format!(
                "expected size({k}) == {dim_name} ({expected}), got {got} (shape {})",
                fmt_dims(l.shape())
            ),
        ));
    }
    Ok(())
}

fn expect_stride(
    name: &'static str,
    l: &TensorLayout,
    k: usize,
    what: &str,
    expected: usize,
) -> Result<()> {
    let got = l.strides()[k];
    if got != expected {
        return Err(Error::invalid(
            name,
            format!("expected stride({k}) == {what} ({expected}), got {got}"),
        ));
    }
    Ok(())
}

fn expect_nonempty(name: &'static str, l: &TensorLayout) -> Result<()> {
    if l.shape().contains(&0) {
        return Err(Error::invalid(
            name,
            format!(
                "expected every dimension >= 1, got shape {}",
                fmt_dims(l.shape())
            ),
        ));
    }
    Ok(())
}

/// `stride(k)` in bytes must be a multiple of [`VECTOR_ALIGN`].
fn expect_aligned_stride(name: &'static str, l: &TensorLayout, k: usize) -> Result<()> {
    let s = l.strides()[k];
    let bytes = l.dtype().size_bytes();
    if (s as u128 * bytes as u128) % VECTOR_ALIGN as u128 != 0 {
        return Err(Error::invalid(
            name,
            format!(
                "expected stride({k}) to be a multiple of {} elements ({VECTOR_ALIGN}-byte \
                 alignment of {} elements), got {s}",
                VECTOR_ALIGN / bytes,
                l.dtype()
            ),
        ));
    }
    Ok(())
}

/// The largest reachable element must lie inside the buffer.
fn expect_in_bounds(name: &'static str, l: &TensorLayout) -> Result<()> {
    match l.max_offset() {
        Some(m) if m < l.len() => Ok(()),
        Some(m) => Err(Error::invalid(
            name,
            format!(
                "shape {} with strides {} reaches element {m}, but the buffer holds {} elements",
                fmt_dims(l.shape()),
                fmt_dims(l.strides()),
                l.len()
            ),
        )),
        None => Err(Error::invalid(
            name,
            format!(
                "shape {} with strides {} has no element or an extent that overflows",
                fmt_dims(l.shape()),
                fmt_dims(l.strides())
            ),
        )),
    }
}

/// `x`, `z`, `out`: (batch, nheads, dim), input dtype, strides (16-byte multiple, dim, 1).
fn check_activation(
    name: &'static str,
    l: &TensorLayout,
    x: &TensorLayout,
    nheads: usize,
    dim: usize,
) -> Result<()> {
    expect_rank(name, l, 3, "(batch, nheads, dim)")?;
    if name != "x" {
        expect_dtype(name, l, x.dtype(), "the dtype of `x`")?;
        expect_dim(name, l, 0, "batch", x.shape()[0])?;
    }
    expect_nonempty(name, l)?;
    expect_dim(name, l, 1, "nheads", nheads)?;
    expect_dim(name, l, 2, "dim", dim)?;
    expect_stride(name, l, 2, "1", 1)?;
    expect_stride(name, l, 1, "dim", dim)?;
    expect_aligned_stride(name, l, 0)?;
    expect_in_bounds(name, l)
}

/// `D`, `dt_bias`: (nheads, dim), strides (1, 0), the dtype of `dt`.
fn check_per_head(
    name: &'static str,
    l: &TensorLayout,
    dt: &TensorLayout,
    nheads: usize,
    dim: usize,
) -> Result<()> {
    expect_rank(name, l, 2, "(nheads, dim)")?;
    expect_dtype(name, l, dt.dtype(), "the dtype of `dt`")?;
    expect_dim(name, l, 0, "nheads", nheads)?;
    expect_dim(name, l, 1, "dim", dim)?;
    expect_stride(name, l, 0, "1", 1)?;
    expect_stride(name, l, 1, "0", 0)?;
    expect_in_bounds(name, l)
}

/// `B`, `C`: (batch, ngroups, dstate), input dtype, strides (16-byte multiple, dstate, 1).
fn check_bc(
    name: &'static str,
    l: &TensorLayout,
    x: &TensorLayout,
    nheads: usize,
    dstate: usize,
) -> Result<usize> {
    expect_rank(name, l, 3, "(batch, ngroups, dstate)")?;
    expect_dtype(name, l, x.dtype(), "the dtype of `x`")?;
    expect_nonempty(name, l)?;
    expect_dim(name, l, 0, "batch", x.shape()[0])?;
    expect_dim(name, l, 2, "dstate", dstate)?;
    let ngroups = l.shape()[1];
    if nheads % ngroups != 0 {
        return Err(Error::invalid(
            name,
            format!("expected size(1) == ngroups dividing nheads ({nheads}), got {ngroups}"),
        ));
    }
    expect_stride(name, l, 2, "1", 1)?;
    expect_stride(name, l, 1, "dstate", dstate)?;
    expect_aligned_stride(name, l, 0)?;
    expect_in_bounds(name, l)?;
    Ok(ngroups)
}

fn check_indices(name: &'static str, l: &TensorLayout, batch: usize) -> Result<()> {
    if !matches!(l.dtype(), DType::I32 | DType::I64) {
        return Err(Error::invalid(
            name,
            format!("expected dtype I32 or I64, got {}", l.dtype()),
        ));
    }
    if l.rank() != 1 && l.rank() != 2 {
        return Err(Error::invalid(
            name,
            format!(
                "expected shape (batch,) or (batch, T), got {} dimensions {}",
                l.rank(),
                fmt_dims(l.shape())
            ),
        ));
    }
    expect_dim(name, l, 0, "batch", batch)?;
    expect_nonempty(name, l)?;
    expect_in_bounds(name, l)
}

/// Checks a call's layouts and flags against the kernel's contract (the module doc's table);
/// a pure function of `spec`, no device involved. Returns the call's sizes and dtypes.
///
/// Every violation is an [`Error::InvalidArgument`] naming the argument (`state`, `x`, `dt`,
/// `A`, `B`, `C`, `D`, `z`, `dt_bias`, `out`, `state_batch_indices`,
/// `dst_state_batch_indices`, `rand_seed`, `seed_offset`, `philox_rounds`) and saying what was
/// expected and what was got.
pub fn validate(spec: &SsuSpec) -> Result<SsuProblem> {
    // state: (slots, nheads, dim, dstate), inner three dims contiguous.
    let st = &spec.state;
    expect_rank("state", st, 4, "(slots, nheads, dim, dstate)")?;
    expect_float("state", st)?;
    expect_nonempty("state", st)?;
    let [slots, nheads, dim, dstate] = [st.shape[0], st.shape[1], st.shape[2], st.shape[3]];
    if !SUPPORTED_DSTATE.contains(&dstate) {
        return Err(Error::invalid(
            "state",
            format!("expected size(3) == dstate in {{64, 128, 256}}, got {dstate}"),
        ));
    }
    expect_stride("state", st, 3, "1", 1)?;
    expect_stride("state", st, 2, "dstate", dstate)?;
    let head_block = dim
        .checked_mul(dstate)
        .ok_or_else(|| Error::invalid("state", "dim * dstate overflows"))?;
    expect_stride("state", st, 1, "dim * dstate", head_block)?;
    let slot_block = nheads
        .checked_mul(head_block)
        .ok_or_else(|| Error::invalid("state", "nheads * dim * dstate overflows"))?;
    if st.strides[0] < slot_block {
        return Err(Error::invalid(
            "state",
            format!(
                "expected stride(0) >= nheads * dim * dstate ({slot_block}), got {}",
                st.strides[0]
            ),
        ));
    }
    expect_aligned_stride("state", st, 0)?;
    expect_in_bounds("state", st)?;

    // x, out, z.
    let x = &spec.x;
    expect_rank("x", x, 3, "(batch, nheads, dim)")?;
    expect_float("x", x)?;
    if x.shape[0] == 0 {
        return Err(Error::invalid(
            "x",
            format!(
                "expected size(0) == batch >= 1, got {}",
                fmt_dims(x.shape())
            ),
        ));
    }
    check_activation("x", x, x, nheads, dim)?;
    let batch = x.shape[0];
    check_activation("out", &spec.out, x, nheads, dim)?;
    let row = nheads * dim; // <= nheads * dim * dstate, no overflow
    if batch > 1 && spec.out.strides[0] < row {
        return Err(Error::invalid(
            "out",
            format!(
                "expected stride(0) >= nheads * dim ({row}) so rows of different batch entries \
                 do not overlap, got {}",
                spec.out.strides[0]
            ),
        ));
    }
    if let Some(z) = &spec.z {
        check_activation("z", z, x, nheads, dim)?;
    }

    // dt: (batch, nheads, dim), strides (any, 1, 0), the weight dtype.
    let dt = &spec.dt;
    expect_rank("dt", dt, 3, "(batch, nheads, dim)")?;
    expect_float("dt", dt)?;
    expect_dim("dt", dt, 0, "batch", batch)?;
    expect_dim("dt", dt, 1, "nheads", nheads)?;
    expect_dim("dt", dt, 2, "dim", dim)?;
    expect_stride("dt", dt, 1, "1", 1)?;
    expect_stride("dt", dt, 2, "0", 0)?;
    expect_in_bounds("dt", dt)?;

    // A: (nheads, dim, dstate), strides (1, 0, 0), F32.
    let a = &spec.a;
    expect_rank("A", a, 3, "(nheads, dim, dstate)")?;
    expect_dtype("A", a, DType::F32, "FlashInfer's A is fp32")?;
    expect_dim("A", a, 0, "nheads", nheads)?;
    expect_dim("A", a, 1, "dim", dim)?;
    expect_dim("A", a, 2, "dstate", dstate)?;
    expect_stride("A", a, 0, "1", 1)?;
    expect_stride("A", a, 1, "0", 0)?;
    expect_stride("A", a, 2, "0", 0)?;
    expect_in_bounds("A", a)?;

    if let Some(d) = &spec.d {
        check_per_head("D", d, dt, nheads, dim)?;
    }
    if let Some(bias) = &spec.dt_bias {
        check_per_head("dt_bias", bias, dt, nheads, dim)?;
    }

    // B, C.
    let ngroups = check_bc("B", &spec.b, x, nheads, dstate)?;
    check_bc("C", &spec.c, x, nheads, dstate)?;
    expect_dim("C", &spec.c, 1, "ngroups (size(1) of `B`)", ngroups)?;

    // Index tensors.
    let mut index_dtype = None;
    if let Some(idx) = &spec.state_batch_indices {
        check_indices("state_batch_indices", idx, batch)?;
        index_dtype = Some(idx.dtype());
    } else if batch > slots {
        return Err(Error::invalid(
            "state",
            format!(
                "without `state_batch_indices` batch entry b uses slot b: expected size(0) >= \
                 batch ({batch}), got {slots}"
            ),
        ));
    }
    if let Some(idx) = &spec.dst_state_batch_indices {
        check_indices("dst_state_batch_indices", idx, batch)?;
        if let Some(src) = index_dtype {
            expect_dtype(
                "dst_state_batch_indices",
                idx,
                src,
                "the dtype of `state_batch_indices`",
            )?;
        }
        index_dtype = Some(idx.dtype());
    }

    // Stochastic rounding.
    if spec.philox_rounds > MAX_PHILOX_ROUNDS {
        return Err(Error::invalid(
            "philox_rounds",
            format!(
                "expected 0..={MAX_PHILOX_ROUNDS}, got {}",
                spec.philox_rounds
            ),
        ));
    }
    let sr = spec.philox_rounds > 0;
    if sr {
        if st.dtype() != DType::F16 {
            return Err(Error::invalid(
                "philox_rounds",
                format!(
                    "stochastic rounding ({} rounds) needs an F16 state, got a {} state",
                    spec.philox_rounds,
                    st.dtype()
                ),
            ));
        }
        match &spec.seed {
            None => {
                return Err(Error::invalid(
                    "rand_seed",
                    format!(
                        "philox_rounds = {} needs a seed, got none",
                        spec.philox_rounds
                    ),
                ))
            }
            Some(SeedSpec::Pointer(s)) => {
                expect_dtype("rand_seed", s, DType::I64, "one int64 seed")?;
                if s.numel() != Some(1) {
                    return Err(Error::invalid(
                        "rand_seed",
                        format!("expected one element, got shape {}", fmt_dims(s.shape())),
                    ));
                }
                expect_in_bounds("rand_seed", s)?;
            }
            Some(SeedSpec::FromGenerator { offset } | SeedSpec::FromValues { offset, .. }) => {
                if offset % 4 != 0 {
                    return Err(Error::invalid(
                        "seed_offset",
                        format!("expected a multiple of 4, got {offset}"),
                    ));
                }
            }
        }
    }

    Ok(SsuProblem {
        batch,
        nheads,
        dim,
        dstate,
        ngroups,
        cache_slots: slots,
        state_dtype: st.dtype(),
        input_dtype: x.dtype(),
        weight_dtype: dt.dtype(),
        index_dtype,
        stochastic_rounding: sr,
    })
}

// ---------------------------------------------------------------------------------------------
// Launch
// ---------------------------------------------------------------------------------------------

fn to_i64(name: &'static str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(name, format!("{v} does not fit in int64")))
}

/// `mamba_ssu_params` of a validated call, every pointer null (filled at launch).
fn fill_params(
    spec: &SsuSpec,
    p: &SsuProblem,
    pad_slot_id: i64,
    dt_softplus: bool,
    update_state: bool,
    algorithm: Algorithm,
) -> Result<sys::mamba_ssu_params> {
    let sr = p.stochastic_rounding;
    let (seed_source, seed_offset, generator_seed) = match spec.seed {
        Some(SeedSpec::FromGenerator { offset }) if sr => {
            (sys::MAMBA_SSU_SEED_FROM_GENERATOR, offset, 0)
        }
        Some(SeedSpec::FromValues { seed, offset }) if sr => {
            (sys::MAMBA_SSU_SEED_FROM_VALUES, offset, seed)
        }
        _ => (sys::MAMBA_SSU_SEED_POINTER, 0, 0),
    };
    let stride0 = |l: &Option<TensorLayout>| l.map_or(0, |l| l.strides()[0]);
    Ok(sys::mamba_ssu_params {
        batch: to_i64("x", p.batch)?,
        nheads: to_i64("state", p.nheads)?,
        dim: to_i64("state", p.dim)?,
        dstate: to_i64("state", p.dstate)?,
        ngroups: to_i64("B", p.ngroups)?,
        state_cache_size: to_i64("state", p.cache_slots)?,
        state_stride_batch: to_i64("state", spec.state.strides()[0])?,
        x_stride_batch: to_i64("x", spec.x.strides()[0])?,
        dt_stride_batch: to_i64("dt", spec.dt.strides()[0])?,
        B_stride_batch: to_i64("B", spec.b.strides()[0])?,
        C_stride_batch: to_i64("C", spec.c.strides()[0])?,
        z_stride_batch: to_i64("z", stride0(&spec.z))?,
        out_stride_batch: to_i64("out", spec.out.strides()[0])?,
        state_batch_indices_stride: to_i64(
            "state_batch_indices",
            stride0(&spec.state_batch_indices),
        )?,
        dst_state_batch_indices_stride: to_i64(
            "dst_state_batch_indices",
            stride0(&spec.dst_state_batch_indices),
        )?,
        pad_slot_id,
        state_dtype: p.state_dtype.ffi(),
        input_dtype: p.input_dtype.ffi(),
        weight_dtype: p.weight_dtype.ffi(),
        index_dtype: p.index_dtype.unwrap_or(DType::I32).ffi(),
        dt_softplus: i32::from(dt_softplus),
        update_state: i32::from(update_state),
        philox_rounds: if sr { spec.philox_rounds as i32 } else { 0 },
        algorithm: algorithm.ffi(),
        seed_source: seed_source as i32,
        seed_offset,
        generator_seed,
        num_sms: 0,
        ..Default::default()
    })
}

/// The layout of a prefetched seed: one int64.
const PREFETCHED_SEED_LAYOUT: TensorLayout = TensorLayout::one_i64();

/// The pointer of an optional tensor's `(pointer, guard)`, 0 when absent.
fn raw(p: &Option<(CUdeviceptr, SyncOnDrop<'_>)>) -> CUdeviceptr {
    p.as_ref().map_or(0, |(ptr, _)| *ptr)
}

fn check_ptr_alignment(name: &'static str, ptr: CUdeviceptr, align: usize) -> Result<()> {
    if ptr % align as u64 != 0 {
        return Err(Error::invalid(
            name,
            format!("expected a {align}-byte aligned start, got address {ptr:#x}"),
        ));
    }
    Ok(())
}

/// Enqueues one selective-state-update on `stream`: validates `args` ([`validate`]), checks
/// that every buffer lives on the stream's device ([`Error::WrongDevice`]) and that the
/// vector-loaded tensors start 16-byte aligned, then launches through the C launcher.
///
/// Asynchronous on `stream`: it returns once the kernel is enqueued; `out` and `state` are
/// written when the kernel runs. Nothing is launched when an error is returned. With
/// [`Algorithm::Auto`] the kernel is picked from the stream device's SM count.
pub fn selective_state_update(stream: &CudaStream, args: &mut SsuArgs<'_>) -> Result<()> {
    let spec = args.spec();
    let problem = validate(&spec)?;

    // Devices.
    check_same_device("state", stream, args.state.buffer_stream())?;
    check_same_device("out", stream, args.out.buffer_stream())?;
    let inputs: [(&'static str, Option<&Tensor<'_>>); 10] = [
        ("x", Some(&args.x)),
        ("dt", Some(&args.dt)),
        ("A", Some(&args.a)),
        ("B", Some(&args.b)),
        ("C", Some(&args.c)),
        ("D", args.d.as_ref()),
        ("z", args.z.as_ref()),
        ("dt_bias", args.dt_bias.as_ref()),
        ("state_batch_indices", args.state_batch_indices.as_ref()),
        (
            "dst_state_batch_indices",
            args.dst_state_batch_indices.as_ref(),
        ),
    ];
    for (name, t) in inputs {
        if let Some(t) = t {
            check_same_device(name, stream, t.buffer_stream())?;
        }
    }
    let sr = problem.stochastic_rounding;
    if sr {
        match &args.seed {
            Some(SeedSource::Pointer(t)) => {
                check_same_device("rand_seed", stream, t.buffer_stream())?
            }
            Some(SeedSource::FromGenerator { state, .. }) => {
                check_same_device("generator_state", stream, state.device_state().stream())?
            }
            Some(SeedSource::Prefetched(p)) => check_ordinal("rand_seed", stream, p.ordinal())?,
            Some(SeedSource::Fused(f)) => check_ordinal("generator_state", stream, f.ordinal())?,
            // No device memory; a missing seed was rejected by validate.
            Some(SeedSource::FromValues { .. }) | None => {}
        }
    }

    let mut params = fill_params(
        &spec,
        &problem,
        args.pad_slot_id,
        args.dt_softplus,
        args.update_state,
        args.algorithm,
    )?;
    let ctx = stream.context();
    ctx.bind_to_thread()?;
    params.num_sms = num_sms(ctx)? as i32;

    // Device pointers; every guard lives until the launcher has returned.
    let (state_ptr, _state_guard) = args.state.device_ptr_mut(stream);
    let (out_ptr, _out_guard) = args.out.device_ptr_mut(stream);
    let (x_ptr, _x_guard) = args.x.device_ptr(stream);
    let (dt_ptr, _dt_guard) = args.dt.device_ptr(stream);
    let (a_ptr, _a_guard) = args.a.device_ptr(stream);
    let (b_ptr, _b_guard) = args.b.device_ptr(stream);
    let (c_ptr, _c_guard) = args.c.device_ptr(stream);
    let d = args.d.as_ref().map(|t| t.device_ptr(stream));
    let z = args.z.as_ref().map(|t| t.device_ptr(stream));
    let dt_bias = args.dt_bias.as_ref().map(|t| t.device_ptr(stream));
    let src_idx = args
        .state_batch_indices
        .as_ref()
        .map(|t| t.device_ptr(stream));
    let dst_idx = args
        .dst_state_batch_indices
        .as_ref()
        .map(|t| t.device_ptr(stream));
    let seed = match (&args.seed, sr) {
        (Some(SeedSource::Pointer(t)), true) => Some(t.device_ptr(stream)),
        (Some(SeedSource::FromGenerator { state, .. }), true) => {
            Some(state.device_state().device_ptr(stream))
        }
        _ => None,
    };

    for (name, ptr) in [
        ("state", state_ptr),
        ("out", out_ptr),
        ("x", x_ptr),
        ("B", b_ptr),
        ("C", c_ptr),
        ("z", raw(&z)),
    ] {
        check_ptr_alignment(name, ptr, VECTOR_ALIGN)?;
    }

    params.state = state_ptr as *mut std::ffi::c_void;
    params.out = out_ptr as *mut std::ffi::c_void;
    params.x = x_ptr as *const std::ffi::c_void;
    params.dt = dt_ptr as *const std::ffi::c_void;
    params.A = a_ptr as *const f32;
    params.B = b_ptr as *const std::ffi::c_void;
    params.C = c_ptr as *const std::ffi::c_void;
    params.D = raw(&d) as *const std::ffi::c_void;
    params.z = raw(&z) as *const std::ffi::c_void;
    params.dt_bias = raw(&dt_bias) as *const std::ffi::c_void;
    params.state_batch_indices = raw(&src_idx) as *const std::ffi::c_void;
    params.dst_state_batch_indices = raw(&dst_idx) as *const std::ffi::c_void;
    match &args.seed {
        Some(SeedSource::FromGenerator { .. }) if sr => {
            params.generator_state = raw(&seed) as *const sys::mamba_ssu_generator_state;
        }
        Some(SeedSource::Pointer(_)) if sr => params.rand_seed = raw(&seed) as *const i64,
        Some(SeedSource::Prefetched(p)) if sr => params.rand_seed = p.device_ptr() as *const i64,
        Some(SeedSource::Fused(f)) => {
            // The draw position (also what a chain's next link is derived from), even without
            // stochastic rounding in this call: the next call of the chain needs its link.
            if let Some(state) = f.generator_state() {
                params.generator_state = state as *const sys::mamba_ssu_generator_state;
            }
            params.generator_seed = f.generator_seed();
            params.seed_offset = f.seed_offset();
            if let Some(link) = f.linked_seed().filter(|_| sr) {
                params.rand_seed = link as *const i64;
            }
            if let Some(next) = f.seed_next() {
                params.seed_next = next as *mut i64;
            }
        }
        _ => {}
    }

    // SAFETY: every pointer in `params` is null (an absent optional tensor) or the start of a
    // live device buffer on the stream's device (checked above), held by a guard that is
    // dropped only after this call returns; `validate` proved that every element the kernel
    // can address (shape, strides, dtype) lies inside its buffer and that the layouts are
    // the launcher's contract. Index values are device data the kernel range-checks (an
    // out-of-range slot is treated as a pad). `params` outlives the call, which copies it.
    let status =
        unsafe { sys::mamba_ssu_selective_state_update(ffi::stream_handle(stream), &params) };
    ffi::check(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A valid baseline: slots 3 (padded slot stride), batch 2, nheads 4, dim 8, dstate 64,
    // ngroups 2; fp16 state, bf16 inputs and weights, int32 indices, SR with a seed pointer.
    const SLOTS: usize = 3;
    const BATCH: usize = 2;
    const NH: usize = 4;
    const DIM: usize = 8;
    const DS: usize = 64;
    const NG: usize = 2;
    const SLOT_STRIDE: usize = NH * DIM * DS + 64;

    fn lay(dtype: DType, shape: &[usize], strides: &[usize]) -> TensorLayout {
        let max = shape
            .iter()
            .zip(strides)
            .map(|(n, s)| (n - 1) * s)
            .sum::<usize>();
        TensorLayout::new(dtype, shape, strides, max + 1).unwrap()
    }

    fn base() -> SsuSpec {
        let row = NH * DIM;
        SsuSpec {
            state: lay(
                DType::F16,
                &[SLOTS, NH, DIM, DS],
                &[SLOT_STRIDE, DIM * DS, DS, 1],
            ),
            x: lay(DType::BF16, &[BATCH, NH, DIM], &[row, DIM, 1]),
            dt: lay(DType::BF16, &[BATCH, NH, DIM], &[NH, 1, 0]),
            a: lay(DType::F32, &[NH, DIM, DS], &[1, 0, 0]),
            b: lay(DType::BF16, &[BATCH, NG, DS], &[NG * DS, DS, 1]),
            c: lay(DType::BF16, &[BATCH, NG, DS], &[NG * DS, DS, 1]),
            d: Some(lay(DType::BF16, &[NH, DIM], &[1, 0])),
            z: Some(lay(DType::BF16, &[BATCH, NH, DIM], &[row, DIM, 1])),
            dt_bias: Some(lay(DType::BF16, &[NH, DIM], &[1, 0])),
            state_batch_indices: Some(lay(DType::I32, &[BATCH], &[1])),
            dst_state_batch_indices: Some(lay(DType::I32, &[BATCH], &[1])),
            out: lay(DType::BF16, &[BATCH, NH, DIM], &[row, DIM, 1]),
            philox_rounds: 10,
            seed: Some(SeedSpec::Pointer(lay(DType::I64, &[1], &[1]))),
        }
    }

    fn with(f: impl FnOnce(&mut SsuSpec)) -> SsuSpec {
        let mut s = base();
        f(&mut s);
        s
    }

    fn shorter(l: TensorLayout) -> TensorLayout {
        TensorLayout::new(l.dtype(), l.shape(), l.strides(), l.max_offset().unwrap()).unwrap()
    }

    #[test]
    fn baseline_is_valid() {
        let p = validate(&base()).unwrap();
        assert_eq!(
            p,
            SsuProblem {
                batch: BATCH,
                nheads: NH,
                dim: DIM,
                dstate: DS,
                ngroups: NG,
                cache_slots: SLOTS,
                state_dtype: DType::F16,
                input_dtype: DType::BF16,
                weight_dtype: DType::BF16,
                index_dtype: Some(DType::I32),
                stochastic_rounding: true,
            }
        );
    }

    #[test]
    fn minimal_call_is_valid() {
        // No optional tensors, round to nearest, fp32 everywhere, dstate 256.
        let row = NH * DIM;
        let spec = SsuSpec {
            state: lay(
                DType::F32,
                &[BATCH, NH, DIM, 256],
                &[NH * DIM * 256, DIM * 256, 256, 1],
            ),
            x: lay(DType::F32, &[BATCH, NH, DIM], &[row, DIM, 1]),
            dt: lay(DType::F32, &[BATCH, NH, DIM], &[NH, 1, 0]),
            a: lay(DType::F32, &[NH, DIM, 256], &[1, 0, 0]),
            b: lay(DType::F32, &[BATCH, 1, 256], &[256, 256, 1]),
            c: lay(DType::F32, &[BATCH, 1, 256], &[256, 256, 1]),
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: None,
            dst_state_batch_indices: None,
            out: lay(DType::F32, &[BATCH, NH, DIM], &[row, DIM, 1]),
            philox_rounds: 0,
            seed: None,
        };
        let p = validate(&spec).unwrap();
        assert_eq!((p.ngroups, p.dstate, p.index_dtype), (1, 256, None));
        assert!(!p.stochastic_rounding);
    }

    /// A rule case: a change to the valid baseline, the argument the error must name and a
    /// piece of its message.
    type Rule = (fn(&mut SsuSpec), &'static str, &'static str);

    fn check_rules(rules: &[Rule]) {
        for (i, (change, argument, needle)) in rules.iter().enumerate() {
            let mut spec = base();
            change(&mut spec);
            match validate(&spec) {
                Err(Error::InvalidArgument {
                    argument: got,
                    message,
                }) => {
                    assert_eq!(got, *argument, "case {i}: {message}");
                    assert!(
                        message.contains(needle),
                        "case {i}: {message:?} lacks {needle:?}"
                    );
                }
                other => panic!("case {i}: expected InvalidArgument({argument}), got {other:?}"),
            }
        }
    }

    #[rustfmt::skip]
    #[test]
    fn state_rules() {
        check_rules(&[
            (|s| s.state = lay(DType::F16, &[SLOTS, NH, DIM * DS], &[NH * DIM * DS, DIM * DS, 1]),
                "state", "expected 4 dimensions"),
            (|s| s.state.dtype = DType::I32, "state", "expected dtype F16, BF16 or F32, got I32"),
            (|s| s.state =
                    lay(DType::F16, &[SLOTS, NH, DIM, 32], &[NH * DIM * 32, DIM * 32, 32, 1]),
                "state", "dstate in {64, 128, 256}, got 32"),
            (|s| s.state.strides[3] = 2, "state", "expected stride(3) == 1 (1), got 2"),
            (|s| s.state.strides[2] = DS + 8, "state", "expected stride(2) == dstate (64), got 72"),
            (|s| s.state.strides[1] = DIM * DS + 8, "state",
                "expected stride(1) == dim * dstate (512), got 520"),
            (|s| s.state.strides[0] = NH * DIM * DS - 8, "state",
                "expected stride(0) >= nheads * dim * dstate (2048), got 2040"),
            // 16-byte alignment of the slot stride: 2052 fp16 = 4104 bytes.
            (|s| s.state.strides[0] = NH * DIM * DS + 4, "state", "multiple of 8 elements"),
            (|s| s.state = shorter(s.state), "state", "but the buffer holds"),
            (|s| s.state.shape[0] = 0, "state", "every dimension >= 1"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn x_rules() {
        check_rules(&[
            (|s| s.x = lay(DType::BF16, &[BATCH, NH * DIM], &[NH * DIM, 1]), "x",
                "expected 3 dimensions"),
            (|s| s.x.dtype = DType::I64, "x", "expected dtype F16, BF16 or F32, got I64"),
            (|s| s.x.shape[0] = 0, "x", "batch >= 1"),
            (|s| s.x.shape[1] = NH + 1, "x", "expected size(1) == nheads (4), got 5"),
            (|s| s.x.shape[2] = DIM * 2, "x", "expected size(2) == dim (8), got 16"),
            (|s| s.x.strides[2] = 2, "x", "expected stride(2) == 1 (1), got 2"),
            (|s| s.x.strides[1] = DIM + 1, "x", "expected stride(1) == dim (8), got 9"),
            (|s| { s.x.strides[0] = NH * DIM + 4; s.x.len = 1 << 20; }, "x",
                "multiple of 8 elements"),
            (|s| s.x = shorter(s.x), "x", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn out_rules() {
        check_rules(&[
            (|s| s.out.shape[0] = BATCH + 1, "out", "expected size(0) == batch (2), got 3"),
            (|s| s.out.dtype = DType::F16, "out",
                "expected dtype BF16 (the dtype of `x`), got F16"),
            (|s| s.out.strides[1] = 0, "out", "expected stride(1) == dim (8), got 0"),
            (|s| s.out.strides[2] = 0, "out", "expected stride(2) == 1"),
            (|s| { s.out.strides[0] = NH * DIM + 2; s.out.len = 1 << 20; }, "out",
                "16-byte alignment"),
            (|s| s.out.strides[0] = 0, "out", "do not overlap"),
            (|s| s.out = shorter(s.out), "out", "but the buffer holds"),
        ]);
        // A broadcast (stride 0) x is allowed; a single-entry out may have any batch stride.
        validate(&with(|s| s.x.strides[0] = 0)).unwrap();
        validate(&with(|s| {
            for t in [&mut s.x, &mut s.out, s.z.as_mut().unwrap(), &mut s.dt, &mut s.b,
                      &mut s.c] {
                t.shape[0] = 1;
            }
            for t in [&mut s.state_batch_indices, &mut s.dst_state_batch_indices] {
                t.as_mut().unwrap().shape[0] = 1;
            }
            s.out.strides[0] = 0;
        }))
        .unwrap();
    }

    #[rustfmt::skip]
    #[test]
    fn z_rules() {
        check_rules(&[
            (|s| s.z.as_mut().unwrap().shape[2] = 4, "z", "expected size(2) == dim (8), got 4"),
            (|s| s.z.as_mut().unwrap().dtype = DType::F32, "z", "the dtype of `x`"),
            (|s| s.z.as_mut().unwrap().strides[1] = 16, "z", "stride(1) == dim"),
            (|s| { let z = s.z.as_mut().unwrap(); z.strides[0] = 33; z.len = 1 << 20; }, "z",
                "16-byte alignment"),
            (|s| s.z = Some(shorter(s.z.unwrap())), "z", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn dt_rules() {
        check_rules(&[
            (|s| s.dt = lay(DType::BF16, &[BATCH, NH], &[NH, 1]), "dt", "expected 3 dimensions"),
            (|s| s.dt.dtype = DType::I32, "dt", "got I32"),
            (|s| s.dt.shape[0] = 1, "dt", "expected size(0) == batch (2), got 1"),
            (|s| s.dt.shape[2] = 1, "dt", "expected size(2) == dim (8), got 1"),
            (|s| s.dt.strides[1] = 2, "dt", "expected stride(1) == 1 (1), got 2"),
            (|s| s.dt.strides[2] = 1, "dt", "expected stride(2) == 0 (0), got 1"),
            (|s| s.dt = shorter(s.dt), "dt", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn a_rules() {
        check_rules(&[
            (|s| s.a.dtype = DType::BF16, "A", "expected dtype F32"),
            (|s| s.a.shape[2] = 128, "A", "expected size(2) == dstate (64), got 128"),
            (|s| s.a.strides[0] = 0, "A", "expected stride(0) == 1"),
            (|s| s.a.strides[1] = 1, "A", "expected stride(1) == 0"),
            (|s| s.a.strides[2] = 1, "A", "expected stride(2) == 0"),
            (|s| s.a = shorter(s.a), "A", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn d_and_dt_bias_rules() {
        check_rules(&[
            (|s| s.d.as_mut().unwrap().dtype = DType::F32, "D", "the dtype of `dt`"),
            (|s| s.d.as_mut().unwrap().shape[0] = 2, "D", "expected size(0) == nheads (4), got 2"),
            (|s| s.d.as_mut().unwrap().strides[1] = 1, "D", "expected stride(1) == 0"),
            (|s| s.d = Some(lay(DType::BF16, &[NH], &[1])), "D", "expected 2 dimensions"),
            (|s| s.dt_bias.as_mut().unwrap().dtype = DType::F16, "dt_bias", "the dtype of `dt`"),
            (|s| s.dt_bias.as_mut().unwrap().strides[0] = 2, "dt_bias", "expected stride(0) == 1"),
            (|s| s.dt_bias = Some(shorter(s.dt_bias.unwrap())), "dt_bias", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn b_and_c_rules() {
        check_rules(&[
            (|s| { s.b.strides[1] = 2 * DS; s.b.strides[0] = 4 * DS; s.b.len = 1 << 20; }, "B",
                "expected stride(1) == dstate (64), got 128"),
            (|s| s.b.strides[2] = 0, "B", "expected stride(2) == 1"),
            (|s| s.b.shape[0] = 1, "B", "expected size(0) == batch (2), got 1"),
            (|s| s.b.shape[2] = 128, "B", "expected size(2) == dstate (64), got 128"),
            (|s| { s.b.shape[1] = 3; s.b.len = 1 << 20; }, "B",
                "ngroups dividing nheads (4), got 3"),
            (|s| s.b.dtype = DType::F16, "B", "the dtype of `x`"),
            (|s| s.b.strides[0] = NG * DS + 1, "B", "16-byte alignment"),
            (|s| s.b = shorter(s.b), "B", "but the buffer holds"),
            (|s| s.c = lay(DType::BF16, &[BATCH, 1, DS], &[DS, DS, 1]), "C",
                "expected size(1) == ngroups (size(1) of `B`) (2), got 1"),
            (|s| s.c.dtype = DType::F32, "C", "the dtype of `x`"),
            (|s| s.c.strides[1] = 0, "C", "stride(1) == dstate"),
            (|s| s.c.strides[0] = 3, "C", "16-byte alignment"),
            (|s| s.c = shorter(s.c), "C", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn index_rules() {
        check_rules(&[
            (|s| s.state_batch_indices.as_mut().unwrap().dtype = DType::F32,
                "state_batch_indices", "expected dtype I32 or I64, got F32"),
            (|s| s.state_batch_indices = Some(lay(DType::I32, &[BATCH, 2, 2], &[4, 2, 1])),
                "state_batch_indices", "(batch,) or (batch, T)"),
            (|s| s.state_batch_indices = Some(lay(DType::I32, &[BATCH + 1], &[1])),
                "state_batch_indices", "expected size(0) == batch (2), got 3"),
            (|s| s.state_batch_indices = Some(shorter(s.state_batch_indices.unwrap())),
                "state_batch_indices", "but the buffer holds"),
            (|s| s.dst_state_batch_indices.as_mut().unwrap().dtype = DType::I64,
                "dst_state_batch_indices",
                "expected dtype I32 (the dtype of `state_batch_indices`), got I64"),
            (|s| s.dst_state_batch_indices =
                    Some(TensorLayout::new(DType::I32, &[BATCH, 0], &[1, 1], 4).unwrap()),
                "dst_state_batch_indices", "every dimension >= 1"),
            // Without read indices batch entry b uses slot b: batch must not exceed the slots.
            (|s| { s.state_batch_indices = None; s.state.shape[0] = 1; }, "state",
                "expected size(0) >= batch (2), got 1"),
        ]);
        // (batch, T) indices, int64 both, and dst alone are accepted.
        let ok = with(|s| {
            s.state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[4, 1]));
            s.dst_state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[1, BATCH]));
        });
        assert_eq!(validate(&ok).unwrap().index_dtype, Some(DType::I64));
        validate(&with(|s| s.state_batch_indices = None)).unwrap();
    }

    #[rustfmt::skip]
    #[test]
    fn stochastic_rounding_rules() {
        check_rules(&[
            (|s| s.philox_rounds = 11, "philox_rounds", "expected 0..=10, got 11"),
            (|s| s.state.dtype = DType::BF16, "philox_rounds",
                "needs an F16 state, got a BF16 state"),
            (|s| s.seed = None, "rand_seed", "needs a seed, got none"),
            (|s| s.seed = Some(SeedSpec::Pointer(lay(DType::I32, &[1], &[1]))), "rand_seed",
                "expected dtype I64"),
            (|s| s.seed = Some(SeedSpec::Pointer(lay(DType::I64, &[2], &[1]))), "rand_seed",
                "expected one element, got shape (2,)"),
            (|s| s.seed = Some(SeedSpec::Pointer(
                    TensorLayout::new(DType::I64, &[1], &[1], 0).unwrap())),
                "rand_seed", "but the buffer holds 0"),
            (|s| s.seed = Some(SeedSpec::FromGenerator { offset: 6 }), "seed_offset",
                "multiple of 4, got 6"),
            (|s| s.seed = Some(SeedSpec::FromValues { seed: 1, offset: 2 }), "seed_offset",
                "multiple of 4, got 2"),
        ]);
        validate(&with(|s| s.seed = Some(SeedSpec::FromValues { seed: 1, offset: 4 }))).unwrap();
        validate(&with(|s| s.seed = Some(SeedSpec::FromGenerator { offset: 8 }))).unwrap();
        validate(&with(|s| s.seed = Some(SeedSpec::Pointer(lay(DType::I64, &[], &[]))))).unwrap();
        // A seed with philox_rounds == 0 is ignored, even a malformed one; bf16 state allowed.
        let p = validate(&with(|s| {
            s.philox_rounds = 0;
            s.state.dtype = DType::BF16;
            s.seed = Some(SeedSpec::Pointer(lay(DType::I32, &[3], &[1])));
        }))
        .unwrap();
        assert!(!p.stochastic_rounding);
        validate(&with(|s| { s.philox_rounds = 0; s.seed = None; })).unwrap();
    }

    #[test]
    fn layout_construction() {
        let e = TensorLayout::new(DType::F32, &[1, 2, 3, 4, 5], &[1; 5], 120).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    argument: "shape",
                    ..
                }
            ),
            "{e}"
        );
        let e = TensorLayout::new(DType::F32, &[2, 3], &[3], 6).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    argument: "strides",
                    ..
                }
            ),
            "{e}"
        );
        let l = TensorLayout::contiguous(DType::BF16, &[2, 3, 4], 24).unwrap();
        assert_eq!(l.strides(), &[12, 4, 1]);
        assert_eq!(
            (l.max_offset(), l.numel(), l.rank()),
            (Some(23), Some(24), 3)
        );
        let l = TensorLayout::new(DType::F32, &[2, 0], &[1, 1], 4).unwrap();
        assert_eq!(l.max_offset(), None);
        let l = TensorLayout::new(DType::F32, &[usize::MAX, 3], &[2, 1], 4).unwrap();
        assert_eq!(l.max_offset(), None);
        assert!(TensorLayout::contiguous(DType::F32, &[usize::MAX, 3], 4).is_err());
        assert_eq!(
            format!("{l:?}"),
            format!("F32 shape ({}, 3) strides (2, 1) in 4 elements", usize::MAX)
        );
    }

    #[test]
    fn dtypes() {
        assert_eq!(<f32 as Element>::DTYPE, DType::F32);
        assert_eq!(<f16 as Element>::DTYPE, DType::F16);
        assert_eq!(<bf16 as Element>::DTYPE, DType::BF16);
        assert_eq!(<i32 as Element>::DTYPE, DType::I32);
        assert_eq!(<i64 as Element>::DTYPE, DType::I64);
        for (t, size) in [
            (DType::F32, 4),
            (DType::F16, 2),
            (DType::BF16, 2),
            (DType::I32, 4),
            (DType::I64, 8),
        ] {
            assert_eq!(t.size_bytes(), size);
            assert_eq!(t.to_string(), t.name());
        }
        assert_eq!(DType::F16.ffi(), sys::MAMBA_SSU_F16 as i32);
        assert_eq!(DType::I64.ffi(), 4);
    }

    #[test]
    fn algorithm_resolution_matches_the_launcher() {
        for (batch, nheads, sms) in [
            (1, 32, 132),
            (8, 32, 132),
            (9, 32, 132),
            (4, 66, 132),
            (4, 65, 132),
            (1, 1, 1),
            (1, 2, 1),
            (256, 128, 132),
        ] {
            let ours = Algorithm::Auto.resolve(batch, nheads, sms);
            let expect = if batch * nheads < 2 * sms as usize {
                Algorithm::Simple
            } else {
                Algorithm::Vertical
            };
            assert_eq!(ours, expect);
            // SAFETY: a pure function of its arguments when num_sms > 0 (no device query).
            let c = unsafe {
                sys::mamba_ssu_resolve_algorithm(
                    Algorithm::Auto.ffi(),
                    batch as i64,
                    nheads as i64,
                    sms as i32,
                )
            };
            assert_eq!(c, ours.ffi(), "batch {batch} nheads {nheads} sms {sms}");
        }
        assert_eq!(Algorithm::Simple.resolve(1000, 1000, 1), Algorithm::Simple);
        assert_eq!(Algorithm::Vertical.resolve(1, 1, 132), Algorithm::Vertical);
    }

    /// Fake device addresses, 256-byte aligned, one per tensor.
    fn with_fake_pointers(mut p: sys::mamba_ssu_params, spec: &SsuSpec) -> sys::mamba_ssu_params {
        let mut next = 0x1000_0000usize;
        let mut addr = || {
            next += 0x10_0000;
            next as *mut std::ffi::c_void
        };
        p.state = addr();
        p.out = addr();
        p.x = addr();
        p.dt = addr();
        p.A = addr() as *const f32;
        p.B = addr();
        p.C = addr();
        let mut opt = |l: &Option<TensorLayout>| {
            if l.is_some() {
                addr() as *const std::ffi::c_void
            } else {
                std::ptr::null()
            }
        };
        p.D = opt(&spec.d);
        p.z = opt(&spec.z);
        p.dt_bias = opt(&spec.dt_bias);
        p.state_batch_indices = opt(&spec.state_batch_indices);
        p.dst_state_batch_indices = opt(&spec.dst_state_batch_indices);
        p.rand_seed = addr() as *const i64;
        p.generator_state = addr() as *const sys::mamba_ssu_generator_state;
        p.num_sms = 132;
        p
    }

    #[test]
    fn launcher_check_accepts_what_validate_accepts() {
        let specs = [
            base(),
            with(|s| {
                s.d = None;
                s.z = None;
                s.dt_bias = None;
                s.state_batch_indices = None;
                s.dst_state_batch_indices = None;
                s.philox_rounds = 0;
            }),
            with(|s| {
                s.state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[4, 1]));
                s.dst_state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[4, 1]));
                s.seed = Some(SeedSpec::FromGenerator { offset: 12 });
                s.philox_rounds = 5;
            }),
            with(|s| {
                s.state.dtype = DType::F32;
                s.philox_rounds = 0;
                s.x.strides[0] = 0;
            }),
            with(|s| {
                s.seed = Some(SeedSpec::FromValues {
                    seed: u64::MAX,
                    offset: 1 << 40,
                })
            }),
        ];
        for spec in specs {
            let problem = validate(&spec).unwrap();
            for algorithm in [Algorithm::Auto, Algorithm::Simple, Algorithm::Vertical] {
                let p = fill_params(&spec, &problem, 0, true, true, algorithm).unwrap();
                let p = with_fake_pointers(p, &spec);
                // SAFETY: the check only reads `p` (pointer values included, never the memory
                // they point to).
                let status = unsafe { sys::mamba_ssu_selective_state_update_check(&p) };
                assert_eq!(
                    ffi::check(status).map_err(|e| e.to_string()),
                    Ok(()),
                    "{spec:?}"
                );
            }
        }
    }

    /// The fused chain's `seed_next`: aligned pointer and a whole draw position.
    #[test]
    fn launcher_check_of_seed_next() {
        let spec = base();
        let problem = validate(&spec).unwrap();
        let p = fill_params(&spec, &problem, 0, true, true, Algorithm::Auto).unwrap();
        let mut p = with_fake_pointers(p, &spec);
        let check = |p: &sys::mamba_ssu_params| {
            // SAFETY: the check only reads `p` (pointer values included, never the memory
            // they point to).
            ffi::check(unsafe { sys::mamba_ssu_selective_state_update_check(p) })
                .map_err(|e| e.to_string())
        };
        p.seed_next = 0x2000_0000usize as *mut i64;
        p.seed_offset = 8;
        assert_eq!(check(&p), Ok(()));
        p.seed_next = 0x2000_0004usize as *mut i64;
        assert!(check(&p).unwrap_err().contains("seed_next"), "misaligned");
        p.seed_next = 0x2000_0000usize as *mut i64;
        p.seed_offset = 6;
        assert!(check(&p).unwrap_err().contains("seed_offset"), "offset % 4");
    }

    #[test]
    fn params_carry_the_spec() {
        let spec = with(|s| s.seed = Some(SeedSpec::FromGenerator { offset: 40 }));
        let problem = validate(&spec).unwrap();
        let p = fill_params(&spec, &problem, 7, true, false, Algorithm::Vertical).unwrap();
        assert_eq!(
            (p.batch, p.nheads, p.dim, p.dstate, p.ngroups),
            (2, 4, 8, 64, 2)
        );
        assert_eq!(p.state_cache_size, SLOTS as i64);
        assert_eq!(p.state_stride_batch, SLOT_STRIDE as i64);
        assert_eq!(
            (p.x_stride_batch, p.dt_stride_batch, p.B_stride_batch),
            (32, 4, 128)
        );
        assert_eq!((p.pad_slot_id, p.dt_softplus, p.update_state), (7, 1, 0));
        assert_eq!(p.seed_source, sys::MAMBA_SSU_SEED_FROM_GENERATOR as i32);
        assert_eq!((p.seed_offset, p.philox_rounds), (40, 10));
        assert_eq!(p.algorithm, sys::MAMBA_SSU_ALGO_VERTICAL as i32);
        assert_eq!(
            (p.state_dtype, p.input_dtype),
            (DType::F16.ffi(), DType::BF16.ffi())
        );
        let spec = with(|s| {
            s.seed = Some(SeedSpec::FromValues {
                seed: 0xDEAD_BEEF_0123,
                offset: 96,
            })
        });
        let p = fill_params(
            &spec,
            &validate(&spec).unwrap(),
            0,
            true,
            true,
            Algorithm::Simple,
        )
        .unwrap();
        assert_eq!(p.seed_source, sys::MAMBA_SSU_SEED_FROM_VALUES as i32);
        assert_eq!((p.generator_seed, p.seed_offset), (0xDEAD_BEEF_0123, 96));
        // Rounds 0: the seed is ignored and not passed.
        let spec = with(|s| s.philox_rounds = 0);
        let p = fill_params(
            &spec,
            &validate(&spec).unwrap(),
            0,
            false,
            true,
            Algorithm::Auto,
        )
        .unwrap();
        assert_eq!(
            (p.philox_rounds, p.seed_source),
            (0, sys::MAMBA_SSU_SEED_POINTER as i32)
        );
    }
}
