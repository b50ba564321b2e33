//! Batched, torch-identical seed draws on the GPU.
//!
//! One launch writes `n` int64 seeds; seed `k` equals the `k`-th of `n` consecutive stock
//! `torch.randint(0, 2**32, (1,), device='cuda')` draws (see [`crate::philox::torch_seed`]).
//! Every function here is asynchronous on the stream it is given, checks what only Rust sees
//! (buffer lengths, devices), and leaves the rest to the C launchers, which check before they
//! launch; a rejection names its argument.

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice};

use crate::device::check_same_device;
use crate::error::{Error, Result};
use crate::ffi;
use crate::generator::{Generator, GraphSeedState};

/// Most seeds one launch draws (2^24).
pub const MAX_SEEDS_PER_DRAW: usize = ffi::sys::MAMBA_SSU_MAX_SEEDS_PER_DRAW as usize;

/// What only the Rust layer sees of an output of `n` seeds: `out` holds them, and `n` fits the
/// C ABI's `uint32_t` (the C launchers check its range, `1..=`[`MAX_SEEDS_PER_DRAW`]).
fn check_out<D: DeviceSlice<i64>>(out: &D, n: usize) -> Result<u32> {
    if out.len() < n {
        return Err(Error::invalid(
            "out",
            format!("buffer holds {} int64, {n} needed", out.len()),
        ));
    }
    u32::try_from(n).map_err(|_| {
        Error::invalid(
            "n",
            format!("{n} does not fit the C ABI's uint32 (at most {MAX_SEEDS_PER_DRAW})"),
        )
    })
}

/// Draws `n` seeds from generator state `(seed, offset)` into `out[..n]`:
/// `out[k] = torch_seed(seed, offset + 4k)`, as int64 in `[0, 2^32)`. One kernel on `stream`.
///
/// Errors (nothing launched): `out` is shorter than `n` or lives on another device than
/// `stream`; and what the C launcher `mamba_ssu_draw_seeds` rejects, naming the argument: `n`
/// outside `1..=`[`MAX_SEEDS_PER_DRAW`], an `offset` that is not a multiple of 4.
pub fn draw_seeds<D>(
    stream: &CudaStream,
    out: &mut D,
    n: usize,
    seed: u64,
    offset: u64,
) -> Result<()>
where
    D: DevicePtrMut<i64>,
{
    let n32 = check_out(out, n)?;
    check_same_device("out", stream, out.stream())?;
    // The launcher uses the thread's current context: make it the buffers' (== the stream's).
    stream.context().bind_to_thread()?;
    let (ptr, _guard) = out.device_ptr_mut(stream);
    // SAFETY: `ptr` addresses at least `n` int64 on the stream's device (checked above) and
    // stays allocated while `_guard` lives, i.e. until the kernel is enqueued; the launcher
    // checks its arguments before it launches and only writes out[0..n].
    let status = unsafe {
        ffi::sys::mamba_ssu_draw_seeds(
            ffi::stream_handle(stream),
            ptr as *mut i64,
            n32,
            seed,
            offset,
        )
    };
    ffi::check(status)
}

/// Draws the next `n` seeds of `gen` into `out[..n]` and advances `gen` by `4 n`, like `n`
/// consecutive stock calls. On error `gen` is left unchanged.
pub fn draw_from<D>(stream: &CudaStream, gen: &mut Generator, out: &mut D, n: usize) -> Result<()>
where
    D: DevicePtrMut<i64>,
{
    let mut next = *gen;
    let start = next.reserve(n as u64);
    draw_seeds(stream, out, n, gen.seed(), start)?;
    *gen = next;
    Ok(())
}

/// Graph-safe draw: reads `(seed, offset)` from `state`'s device memory when the kernel runs
/// and draws `out[k] = torch_seed(seed, offset + intragraph_offset + 4k)`. Captured in a CUDA
/// graph, each replay draws from whatever state the host wrote before it
/// ([`GraphSeedState::prepare_replay`]), exactly like torch's RNG kernels under capture.
///
/// Errors (nothing launched): as [`draw_seeds`] (`state` on the stream's device too), with
/// `intragraph_offset` a multiple of 4 (the C launcher's rule).
pub fn draw_seeds_graphsafe<D>(
    stream: &CudaStream,
    out: &mut D,
    n: usize,
    state: &GraphSeedState,
    intragraph_offset: u64,
) -> Result<()>
where
    D: DevicePtrMut<i64>,
{
    let n32 = check_out(out, n)?;
    check_same_device("out", stream, out.stream())?;
    check_same_device("state", stream, state.device_state().stream())?;
    state.note_use(stream)?;
    // The launcher uses the thread's current context: make it the buffers' (== the stream's).
    stream.context().bind_to_thread()?;
    let (state_ptr, _state_guard) = state.device_state().device_ptr(stream);
    let (ptr, _guard) = out.device_ptr_mut(stream);
    // SAFETY: `ptr` addresses at least `n` int64 and `state_ptr` two u64 (the
    // `mamba_ssu_generator_state` layout: seed, offset), both on the stream's device and alive
    // until the guards drop after the launch is enqueued.
    let status = unsafe {
        ffi::sys::mamba_ssu_draw_seeds_graphsafe(
            ffi::stream_handle(stream),
            ptr as *mut i64,
            n32,
            state_ptr as *const ffi::sys::mamba_ssu_generator_state,
            intragraph_offset,
        )
    };
    ffi::check(status)
}

/// Counter seeds, for engines that keep a device int64 counter and increment it by one before
/// every stochastic-rounding layer, passing it to the SSU as its seed (TensorRT-LLM's Mamba-2
/// mixer: `rand_seed.add_(1)` per layer, one tiny kernel each). One launch does `n` of those
/// steps: `out[k] = counter + k + 1` for `k < n`, then `counter += n` (int64 wrap-around), the
/// values and the final counter of `n` stock increment-then-read steps; layer `k` then uses
/// `out[k]` as its seed ([`crate::ssu::SeedSource::Pointer`] on a one-element view). The counter
/// is read on the device when the kernel runs, so a launch captured in a CUDA graph continues from
/// the counter's value at every replay.
///
/// Errors (nothing launched): `counter` is empty or `out` holds fewer than `n` values; a buffer
/// lives on another device than `stream`; and what the C launcher `mamba_ssu_counter_seeds`
/// rejects, naming the argument (`n` outside `1..=`[`MAX_SEEDS_PER_DRAW`]).
pub fn counter_seeds<C, D>(
    stream: &CudaStream,
    counter: &mut C,
    out: &mut D,
    n: usize,
) -> Result<()>
where
    C: DevicePtrMut<i64>,
    D: DevicePtrMut<i64>,
{
    if counter.len() == 0 {
        return Err(Error::invalid(
            "counter",
            "expected one int64, got an empty buffer",
        ));
    }
    let n32 = check_out(out, n)?;
    check_same_device("counter", stream, counter.stream())?;
    check_same_device("out", stream, out.stream())?;
    // The launcher uses the thread's current context: make it the buffers' (== the stream's).
    stream.context().bind_to_thread()?;
    let (counter_ptr, _counter_guard) = counter.device_ptr_mut(stream);
    let (out_ptr, _out_guard) = out.device_ptr_mut(stream);
    // SAFETY: `counter_ptr` addresses at least one int64 and `out_ptr` at least `n`, both on the
    // stream's device and alive until the guards drop after the launch is enqueued; the two are
    // distinct mutable borrows, and the launcher rejects a counter inside out[0..n).
    let status = unsafe {
        ffi::sys::mamba_ssu_counter_seeds(
            ffi::stream_handle(stream),
            counter_ptr as *mut i64,
            out_ptr as *mut i64,
            n32,
        )
    };
    ffi::check(status)
}
