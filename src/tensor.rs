//! Type-erased device tensor views: a dtype, a shape and strides in elements over a borrowed
//! cudarc buffer, like torch tensors whose storage offset is the start of the buffer.
//!
//! Layer: safe API, below the kernels' argument types ([`crate::ssu`] takes these views).
//! Element `[i0, i1, ..]` of a tensor lives at `Σ i_k · stride_k` of its buffer (a stride may
//! be 0 for a broadcast dimension). [`TensorLayout`] is the host-side description (what
//! [`crate::ssu::validate`] checks, no device memory involved); [`Tensor`] and [`TensorMut`]
//! pair a layout with a borrowed buffer of one of the [`Element`] types and hand out the raw
//! device pointer only at launch.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop,
};
use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::ffi::sys;

/// Most dimensions a [`TensorLayout`] has.
pub const MAX_RANK: usize = 5;

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
    /// 16-bit signed integer: FlashInfer's int16 state (block-scaled with
    /// [`SsuArgs::state_scale`](crate::ssu::SsuArgs::state_scale); single token).
    I16,
}

impl DType {
    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::BF16 | DType::I16 => 2,
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
            DType::I16 => "I16",
        }
    }

    /// The C ABI's `mamba_ssu_dtype` value.
    pub(crate) fn ffi(self) -> i32 {
        (match self {
            DType::F32 => sys::MAMBA_SSU_F32,
            DType::F16 => sys::MAMBA_SSU_F16,
            DType::BF16 => sys::MAMBA_SSU_BF16,
            DType::I32 => sys::MAMBA_SSU_I32,
            DType::I64 => sys::MAMBA_SSU_I64,
            DType::I16 => sys::MAMBA_SSU_I16,
        }) as i32
    }

    /// Every variant.
    pub(crate) const ALL: [DType; 6] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::I16,
    ];

    /// The dtype of a C ABI `mamba_ssu_dtype` value (`None` for one this type has no variant
    /// for).
    pub(crate) fn from_ffi(v: i32) -> Option<DType> {
        Self::ALL.into_iter().find(|d| d.ffi() == v)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    use super::*;

    /// A borrowed device view of one of the six element types.
    pub enum AnyView<'a> {
        F32(CudaView<'a, f32>),
        F16(CudaView<'a, f16>),
        BF16(CudaView<'a, bf16>),
        I32(CudaView<'a, i32>),
        I64(CudaView<'a, i64>),
        I16(CudaView<'a, i16>),
    }

    /// A borrowed mutable device view of one of the six element types.
    pub enum AnyViewMut<'a> {
        F32(CudaViewMut<'a, f32>),
        F16(CudaViewMut<'a, f16>),
        BF16(CudaViewMut<'a, bf16>),
        I32(CudaViewMut<'a, i32>),
        I64(CudaViewMut<'a, i64>),
        I16(CudaViewMut<'a, i16>),
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
    sealed_impl!(i16, I16);

    macro_rules! each {
        ($e:expr, $enum:ident, $v:ident => $body:expr) => {
            match $e {
                $enum::F32($v) => $body,
                $enum::F16($v) => $body,
                $enum::BF16($v) => $body,
                $enum::I32($v) => $body,
                $enum::I64($v) => $body,
                $enum::I16($v) => $body,
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
impl Element for i16 {
    const DTYPE: DType = DType::I16;
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
/// the buffer it lives in (in elements). Rank 0..=[`MAX_RANK`]. What
/// [`validate`](crate::ssu::validate) checks.
//
// The fields other than `rank` are crate-visible: validation reads them directly, and its tests
// edit one field of a valid layout to build each invalid case. Entries past `rank` stay 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorLayout {
    pub(crate) dtype: DType,
    rank: usize,
    pub(crate) shape: [usize; MAX_RANK],
    pub(crate) strides: [usize; MAX_RANK],
    pub(crate) len: usize,
}

impl TensorLayout {
    /// One int64 (a seed in device memory).
    pub(crate) const fn one_i64() -> Self {
        Self {
            dtype: DType::I64,
            rank: 1,
            shape: [1, 0, 0, 0, 0],
            strides: [1, 0, 0, 0, 0],
            len: 1,
        }
    }

    /// A layout of the given shape and strides (elements) over a buffer of `len` elements.
    ///
    /// Errors: more than [`MAX_RANK`] dimensions (`shape`); `strides` of another length than
    /// `shape` (`strides`). Bounds are checked by [`validate`](crate::ssu::validate), which
    /// knows the argument name.
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

/// `(2, 3)`, `(1,)`: dimensions or strides as torch prints them, for messages.
pub(crate) fn fmt_dims(d: &[usize]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_construction() {
        let e = TensorLayout::new(DType::F32, &[1, 2, 3, 4, 5, 6], &[1; 6], 720).unwrap_err();
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
            (DType::I16, 2),
        ] {
            assert_eq!(t.size_bytes(), size);
            assert_eq!(t.to_string(), t.name());
        }
        assert_eq!(DType::F16.ffi(), sys::MAMBA_SSU_F16 as i32);
        assert_eq!(DType::I64.ffi(), 4);
        for t in DType::ALL {
            assert_eq!(DType::from_ffi(t.ffi()), Some(t));
        }
        assert_eq!(DType::I16.ffi(), sys::MAMBA_SSU_I16 as i32);
        assert_eq!(DType::from_ffi(sys::MAMBA_SSU_DTYPE_OTHER), None);
    }
}
