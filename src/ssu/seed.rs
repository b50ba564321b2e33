//! The stochastic-rounding seed of a call: where it comes from ([`SeedSource`]), how validation
//! sees it ([`SeedSpec`]), and their one conversion into the C ABI's `mamba_ssu_seed` (mode,
//! pointer, position, next link, chain; then the call's rounds and SR rule), which the C check
//! judges like every other argument.

use std::fmt;

use cudarc::driver::CudaStream;

use crate::device::{check_ordinal, check_same_device};
use crate::error::{Error, Result};
use crate::ffi::sys;
use crate::generator::GraphSeedState;
use crate::prefetch::{FusedSeed, SeedPtr};
use crate::reference::SrRule;
use crate::tensor::{fmt_dims, DType, Tensor, TensorLayout};

use super::contract::{PLACEHOLDER_GENERATOR, PLACEHOLDER_SEED};

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
    /// under capture), or, chained inside a fused forward, reads the seed the previous call
    /// stored and stores the next call's.
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

/// The seed as [`validate`](super::validate) sees it: the source without its device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedSpec {
    /// [`SeedSource::Pointer`]: the layout of the seed tensor (also a prefetched seed and a
    /// chained fused seed: one int64).
    Pointer(TensorLayout),
    /// [`SeedSource::FromGenerator`] with this offset (also a captured fused seed).
    FromGenerator {
        /// The offset added to the device generator state's offset.
        offset: u64,
    },
    /// [`SeedSource::FromValues`] (also an eager fused seed).
    FromValues {
        /// The generator's seed.
        seed: u64,
        /// The draw's generator offset.
        offset: u64,
    },
}

/// A seed read from device memory at `pointer`.
fn pointer_seed(pointer: u64) -> sys::mamba_ssu_seed {
    sys::mamba_ssu_seed {
        mode: sys::MAMBA_SSU_SEED_MODE_POINTER as i32,
        pointer: pointer as *const i64,
        ..Default::default()
    }
}

/// A seed the kernel derives at `position`.
fn derived_seed(position: sys::mamba_ssu_position) -> sys::mamba_ssu_seed {
    sys::mamba_ssu_seed {
        mode: sys::MAMBA_SSU_SEED_MODE_DERIVED as i32,
        position,
        ..Default::default()
    }
}

/// The position of a device generator state at `state` (a `mamba_ssu_generator_state`: its
/// seed, then its offset, two 8-byte words) plus `offset`.
fn device_position(state: u64, offset: u64) -> sys::mamba_ssu_position {
    sys::mamba_ssu_position {
        seed_ptr: state as *const i64,
        offset_ptr: (state + 8) as *const i64,
        offset,
        ..Default::default()
    }
}

/// The position `(seed, offset)` by value.
fn value_position(seed: u64, offset: u64) -> sys::mamba_ssu_position {
    sys::mamba_ssu_position {
        seed,
        offset,
        ..Default::default()
    }
}

impl SeedSource<'_> {
    /// The seed as validation sees it.
    pub(super) fn spec(&self) -> SeedSpec {
        match self {
            SeedSource::Pointer(t) => SeedSpec::Pointer(*t.layout()),
            SeedSource::FromGenerator { offset, .. } => SeedSpec::FromGenerator { offset: *offset },
            SeedSource::FromValues { seed, offset } => SeedSpec::FromValues {
                seed: *seed,
                offset: *offset,
            },
            SeedSource::Prefetched(_) => SeedSpec::Pointer(TensorLayout::one_i64()),
            SeedSource::Fused(f) => {
                let s = f.ffi();
                let p = s.position;
                if s.mode == sys::MAMBA_SSU_SEED_MODE_POINTER as i32 {
                    SeedSpec::Pointer(TensorLayout::one_i64())
                } else if !p.seed_ptr.is_null() {
                    SeedSpec::FromGenerator { offset: p.offset }
                } else {
                    SeedSpec::FromValues {
                        seed: p.seed,
                        offset: p.offset,
                    }
                }
            }
        }
    }

    /// The C seed of this source (mode, pointer, position, next link and chain; rounds and
    /// rule are the call's: [`call_seed`]). `memory` is the device address of the source's own
    /// memory, the [`SeedSource::Pointer`] tensor or the [`SeedSource::FromGenerator`] state
    /// (unused for the other sources).
    pub(super) fn ffi(&self, memory: u64) -> sys::mamba_ssu_seed {
        match self {
            SeedSource::Pointer(_) => pointer_seed(memory),
            SeedSource::FromGenerator { offset, .. } => {
                derived_seed(device_position(memory, *offset))
            }
            SeedSource::FromValues { seed, offset } => derived_seed(value_position(*seed, *offset)),
            SeedSource::Prefetched(p) => pointer_seed(p.device_ptr()),
            SeedSource::Fused(f) => f.ffi(),
        }
    }

    /// The device checks of the source's memory on `stream` (its device; a device generator
    /// state noted as used on `stream`, so that a captured graph keeps it alive).
    pub(super) fn check_device(&self, stream: &CudaStream) -> Result<()> {
        match self {
            SeedSource::Pointer(t) => check_same_device("rand_seed", stream, t.buffer_stream()),
            SeedSource::FromGenerator { state, .. } => {
                check_same_device("generator_state", stream, state.device_state().stream())?;
                state.note_use(stream)
            }
            SeedSource::Prefetched(p) => check_ordinal("rand_seed", stream, p.ordinal()),
            SeedSource::Fused(f) => check_ordinal("generator_state", stream, f.ordinal()),
            SeedSource::FromValues { .. } => Ok(()),
        }
    }
}

impl SeedSpec {
    /// [`SeedSource::ffi`] with placeholder device addresses (aligned, never dereferenced):
    /// what the pure check of [`validate`](super::validate) judges.
    pub(super) fn ffi(&self) -> sys::mamba_ssu_seed {
        match *self {
            SeedSpec::Pointer(_) => pointer_seed(PLACEHOLDER_SEED),
            SeedSpec::FromGenerator { offset } => {
                derived_seed(device_position(PLACEHOLDER_GENERATOR, offset))
            }
            SeedSpec::FromValues { seed, offset } => derived_seed(value_position(seed, offset)),
        }
    }

    /// What only the Rust layer sees of a seed: the kernel reads one int64 at the start of a
    /// [`SeedSource::Pointer`] tensor, so it must be one I64 element inside its buffer.
    pub(super) fn check_memory(&self) -> Result<()> {
        let SeedSpec::Pointer(l) = self else {
            return Ok(());
        };
        if l.dtype() != DType::I64 || l.numel() != Some(1) || l.is_empty() {
            return Err(Error::invalid(
                "rand_seed",
                format!(
                    "the kernel reads one int64: expected one I64 element in a non-empty \
                     buffer, got {} shape {} in {} elements",
                    l.dtype(),
                    fmt_dims(l.shape()),
                    l.len()
                ),
            ));
        }
        Ok(())
    }
}

/// The C seed of a call: the source's `seed` with the call's `rounds` and `rule`. With 0
/// rounds the state is rounded to nearest: the mode is `NONE` (a given seed is not read; a
/// fused seed keeps its position and next link, so a fused chain goes on). Rounds without a
/// source are FlashInfer's `rand_seed = None`: a seed pointer of NULL, which the C check
/// rejects.
pub(super) fn call_seed(
    seed: Option<sys::mamba_ssu_seed>,
    rounds: u32,
    rule: SrRule,
) -> Result<sys::mamba_ssu_seed> {
    let rounds = i32::try_from(rounds).map_err(|_| {
        Error::invalid(
            "philox_rounds",
            format!("{rounds} does not fit in the C ABI's int32"),
        )
    })?;
    let mut s = match seed {
        Some(s) => s,
        None if rounds > 0 => pointer_seed(0),
        None => sys::mamba_ssu_seed::default(),
    };
    if rounds == 0 {
        s.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32;
    }
    s.rounds = rounds;
    s.rule = sr_rule_ffi(rule);
    Ok(s)
}

/// The C ABI's `mamba_ssu_sr_rule` of a rule.
pub(super) fn sr_rule_ffi(rule: SrRule) -> i32 {
    (match rule {
        SrRule::V072 => sys::MAMBA_SSU_SR_V072,
        SrRule::V074 => sys::MAMBA_SSU_SR_V074,
    }) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each source becomes the seed mode the C ABI names, with its position; the call's rounds
    /// and rule are added once; 0 rounds reads no seed; rounds without a seed are a NULL
    /// pointer (for the C check to reject).
    #[test]
    fn sources_become_one_c_seed() {
        let s = SeedSpec::FromGenerator { offset: 12 }.ffi();
        assert_eq!(s.mode, sys::MAMBA_SSU_SEED_MODE_DERIVED as i32);
        assert_eq!(
            (
                s.position.seed_ptr as u64,
                s.position.offset_ptr as u64,
                s.position.offset
            ),
            (PLACEHOLDER_GENERATOR, PLACEHOLDER_GENERATOR + 8, 12)
        );
        let s = SeedSpec::FromValues { seed: 7, offset: 8 }.ffi();
        assert_eq!(
            (s.mode, s.position.seed, s.position.offset),
            (sys::MAMBA_SSU_SEED_MODE_DERIVED as i32, 7, 8)
        );
        assert!(s.position.seed_ptr.is_null());
        let s = SeedSpec::Pointer(TensorLayout::one_i64()).ffi();
        assert_eq!(
            (s.mode, s.pointer as u64),
            (sys::MAMBA_SSU_SEED_MODE_POINTER as i32, PLACEHOLDER_SEED)
        );

        let v = SeedSource::FromValues { seed: 5, offset: 4 };
        let c = call_seed(Some(v.ffi(0)), 5, SrRule::V074).unwrap();
        assert_eq!(
            (c.mode, c.rounds, c.rule),
            (
                sys::MAMBA_SSU_SEED_MODE_DERIVED as i32,
                5,
                sys::MAMBA_SSU_SR_V074 as i32
            )
        );
        assert_eq!(v.spec(), SeedSpec::FromValues { seed: 5, offset: 4 });
        let c = call_seed(Some(v.ffi(0)), 0, SrRule::V072).unwrap();
        assert_eq!(
            (c.mode, c.position.offset),
            (sys::MAMBA_SSU_SEED_MODE_NONE as i32, 4)
        );
        let c = call_seed(None, 10, SrRule::V072).unwrap();
        assert_eq!(c.mode, sys::MAMBA_SSU_SEED_MODE_POINTER as i32);
        assert!(c.pointer.is_null());
        assert_eq!(
            call_seed(None, 0, SrRule::V072).unwrap().mode,
            sys::MAMBA_SSU_SEED_MODE_NONE as i32
        );
        let e = call_seed(None, u32::MAX, SrRule::V072).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    argument: "philox_rounds",
                    ..
                }
            ),
            "{e}"
        );
    }

    /// The seed tensor's memory: one I64 element inside its buffer (a Rust-only rule; the C
    /// ABI sees a pointer).
    #[test]
    fn a_seed_tensor_holds_one_int64() {
        let ok = TensorLayout::one_i64();
        SeedSpec::Pointer(ok).check_memory().unwrap();
        SeedSpec::Pointer(TensorLayout::new(DType::I64, &[], &[], 1).unwrap())
            .check_memory()
            .unwrap();
        for bad in [
            TensorLayout::new(DType::I32, &[1], &[1], 2).unwrap(),
            TensorLayout::new(DType::I64, &[2], &[1], 2).unwrap(),
            TensorLayout::new(DType::I64, &[1], &[1], 0).unwrap(),
        ] {
            let e = SeedSpec::Pointer(bad).check_memory().unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument {
                        argument: "rand_seed",
                        ..
                    }
                ),
                "{e}"
            );
        }
        SeedSpec::FromValues { seed: 1, offset: 2 }
            .check_memory()
            .unwrap();
    }
}
