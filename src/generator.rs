//! Generator state: torch's CUDA generator `(seed, offset)` on the host, and its
//! device-resident copy for CUDA graphs.
//!
//! Eagerly, every draw reads the host state and advances the offset by 4 per seed, exactly as
//! N consecutive `torch.randint(0, 2**32, (1,))` calls would. Under CUDA-graph capture torch's
//! RNG kernels instead read `(seed, offset)` from device memory plus an offset fixed at capture
//! ("intragraph" offset), and before every replay the host writes its current state there and
//! then advances by the graph's total; [`GraphSeedState`] implements that protocol.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};

use crate::error::{Error, Result};
use crate::ffi;
use crate::philox;

/// Host-side generator state `(seed, offset)`, like torch's CUDA generator.
///
/// `offset` is always a multiple of 4; each drawn seed advances it by 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Generator {
    seed: u64,
    offset: u64,
}

impl Generator {
    /// A generator at `(seed, offset)`. Errors if `offset` is not a multiple of 4.
    pub fn new(seed: u64, offset: u64) -> Result<Self> {
        if offset % 4 != 0 {
            return Err(Error::invalid(
                "offset",
                format!("expected a multiple of 4, got {offset}"),
            ));
        }
        Ok(Self { seed, offset })
    }

    /// The seed (the Philox key).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The current offset (the next draw's Philox offset).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reserves `n` draws: returns the offset of the first and advances by `4 * n`
    /// (wrapping modulo 2^64 like torch's unsigned offset).
    pub fn reserve(&mut self, n: u64) -> u64 {
        let start = self.offset;
        self.offset = self.offset.wrapping_add(n.wrapping_mul(4));
        start
    }

    /// The C ABI's form of this state.
    pub(crate) fn to_raw(self) -> ffi::sys::mamba_ssu_generator_state {
        ffi::sys::mamba_ssu_generator_state {
            seed: self.seed,
            offset: self.offset,
        }
    }

    /// Takes the offset (and seed) a C call advanced.
    pub(crate) fn set_from_raw(&mut self, raw: &ffi::sys::mamba_ssu_generator_state) {
        self.seed = raw.seed;
        self.offset = raw.offset;
    }

    /// Draws `n` seeds on the CPU (the reference), advancing the state like `n` stock calls.
    pub fn draw_cpu(&mut self, n: usize) -> Vec<u64> {
        let start = self.reserve(n as u64);
        philox::torch_seeds(self.seed, start, n)
    }

    /// Draws one seed on the CPU, advancing the offset by 4.
    pub fn next_cpu(&mut self) -> u64 {
        let start = self.reserve(1);
        philox::torch_seed(self.seed, start)
    }
}

/// The device-resident `(seed, offset)` that graph-safe draws read when they run, plus the
/// replay protocol of torch's generator under CUDA graphs.
///
/// Usage: capture work that draws through [`crate::seeds::draw_seeds_graphsafe`] with
/// intragraph offsets `0, 4n0, 4(n0+n1), ...` (a [`GraphSeedState::capture_offsets`] counter
/// hands them out); after capture, before every replay call [`GraphSeedState::prepare_replay`]
/// on the replay stream: it writes the host generator's current `(seed, offset)` to device
/// memory (as a kernel, so it is ordered with the replay) and advances the host generator by
/// the graph's total, so each replay draws fresh values equal to eager draws at that point.
///
/// Once a draw or an SSU reading it has been captured, dropping the state does not free its
/// 16-byte device buffer (it stays allocated for the process's life): a captured graph may
/// still be replayed, and it must not read freed or reused memory.
pub struct GraphSeedState {
    state: ManuallyDrop<CudaSlice<u64>>,
    intragraph: u64,
    captured: AtomicBool,
}

impl Drop for GraphSeedState {
    fn drop(&mut self) {
        if !self.captured.load(Ordering::Relaxed) {
            // SAFETY: dropped exactly once, here; no graph captured a pointer to it.
            unsafe { ManuallyDrop::drop(&mut self.state) };
        }
    }
}

impl GraphSeedState {
    /// Allocates the device state on `stream`'s device (initialised to `(0, 0)`).
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self> {
        let state = stream.alloc_zeros::<u64>(2)?;
        Ok(Self {
            state: ManuallyDrop::new(state),
            intragraph: 0,
            captured: AtomicBool::new(false),
        })
    }

    /// Records that work enqueued on `stream` now reads this state; when `stream` is being
    /// captured the buffer is kept past drop (see the type's docs).
    pub(crate) fn note_use(&self, stream: &CudaStream) -> Result<()> {
        let status = stream.capture_status()?;
        if status != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            self.captured.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The device state: two u64, `[seed, offset]` (a `mamba_ssu_generator_state`).
    pub fn device_state(&self) -> &CudaSlice<u64> {
        &self.state
    }

    /// Reserves `n` draws inside the graph being captured: returns their intragraph offset.
    pub fn capture_offsets(&mut self, n: u64) -> u64 {
        let start = self.intragraph;
        self.intragraph = self.intragraph.wrapping_add(4 * n);
        start
    }

    /// The total offset increment of one replay (4 × the draws reserved during capture).
    pub fn graph_increment(&self) -> u64 {
        self.intragraph
    }

    /// Resets the intragraph counter (before capturing a new graph).
    pub fn reset_capture(&mut self) {
        self.intragraph = 0;
    }

    /// Writes `gen`'s current `(seed, offset)` into the device state on `stream`, then advances
    /// `gen` by this graph's increment. Call before each replay, on the replay stream.
    pub fn prepare_replay(&mut self, stream: &CudaStream, gen: &mut Generator) -> Result<()> {
        self.write(stream, gen.seed(), gen.offset())?;
        gen.reserve(self.intragraph / 4);
        Ok(())
    }

    /// Writes `(seed, offset)` into the device state with a kernel on `stream`.
    pub fn write(&mut self, stream: &CudaStream, seed: u64, offset: u64) -> Result<()> {
        crate::device::check_same_device("generator_state", stream, self.state.stream())?;
        // The launcher uses the thread's current context: make it the state's (== the stream's).
        stream.context().bind_to_thread()?;
        let (ptr, _guard) = self.state.device_ptr_mut(stream);
        // SAFETY: `ptr` is a live allocation of two u64 (16 bytes, 8-byte aligned) on the
        // stream's device, kept alive by `_guard` until the kernel is enqueued; the launcher
        // validates the offset and launches nothing on error.
        let status = unsafe {
            ffi::sys::mamba_ssu_set_generator_state(
                ffi::stream_handle(stream),
                ptr as *mut ffi::sys::mamba_ssu_generator_state,
                seed,
                offset,
            )
        };
        ffi::check(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_must_be_multiples_of_four() {
        assert!(Generator::new(1, 6).is_err());
        let e = Generator::new(1, 6).unwrap_err().to_string();
        assert!(e.contains("offset") && e.contains("multiple of 4"), "{e}");
        assert!(Generator::new(1, 8).is_ok());
    }

    #[test]
    fn reserve_advances_by_four_per_draw_and_wraps() {
        let mut g = Generator::new(3, u64::MAX - 3).unwrap();
        assert_eq!(g.reserve(1), u64::MAX - 3);
        assert_eq!(g.offset(), 0);
        let mut g = Generator::new(3, 12).unwrap();
        assert_eq!(g.reserve(40), 12);
        assert_eq!(g.offset(), 172);
    }

    #[test]
    fn draw_cpu_equals_consecutive_single_draws() {
        let mut a = Generator::new(0xDEAD_BEEF, 8).unwrap();
        let mut b = a;
        let batch = a.draw_cpu(5);
        let singles: Vec<u64> = (0..5).map(|_| b.next_cpu()).collect();
        assert_eq!(batch, singles);
        assert_eq!(a, b);
        assert_eq!(a.offset(), 28);
    }
}
