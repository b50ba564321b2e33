//! The seed prefetcher: a forward's N stochastic-rounding seeds drawn in ONE launch on a side
//! stream, handed to the layers in call order, bit-identical to the stock per-layer
//! `torch.randint(0, 2**32, (1,))` draws — eagerly and under CUDA-graph capture.
//!
//! Safe layer over the C prefetcher of `csrc/prefetch.cu` (the same object C++ engines drive
//! through `mamba_ssu.h`). Ordering is by CUDA events only: a fork event recorded on the main
//! stream, the side stream waiting on it, the batched draw, a ready event that the main stream
//! waits on before the first consumer. No host synchronisation, no polling. Under CUDA-graph
//! capture the draw is by default one node on the main stream instead ([`CaptureLayout`]): in a
//! graph a side branch and its join cost more than one kernel boundary.
//!
//! The three seed paths for one Mamba-2 layer:
//! - stock: [`Prefetcher::seed`] outside a forward — one single-seed kernel on the stream;
//! - prefetch: [`Prefetcher::forward`] then [`Forward::seed`] per layer — pointers into the
//!   batched draw (layers beyond N, or a generator moved by someone else, fall back to stock);
//! - fused: [`Prefetcher::fused_seed`] — the SSU kernel derives the seed itself, so no seed
//!   kernel runs at all; inside a [`Prefetcher::fused_forward`] the layers' kernels are
//!   chained (layer 0 derives its seed, each kernel also stores the next layer's), so the
//!   10-round derivation is on the critical path once per forward. The seed is the C ABI's
//!   `mamba_ssu_seed` from `mamba_ssu_prefetcher_derive_seed`, and the SSU launches through
//!   `mamba_ssu_launch`, which tells the prefetcher that the next link was enqueued.
//!
//! ```no_run
//! # fn main() -> Result<(), mamba_ssu::Error> {
//! use mamba_ssu::{device, prefetch::Prefetcher, Generator};
//! let ctx = device::open(0)?;
//! let main = ctx.new_stream()?;
//! let mut gen = Generator::new(42, 0)?;
//! let mut prefetcher = Prefetcher::new(&ctx, 40)?;
//! let mut fwd = prefetcher.forward(&main, &mut gen)?; // draws 40 seeds on the side stream
//! for _layer in 0..40 {
//!     let seed = fwd.seed()?;            // device pointer to this layer's int64 seed
//!     let _ = seed.device_ptr();         // e.g. FlashInfer's rand_seed, or SeedSource::Prefetched
//! }
//! let summary = fwd.end()?;              // joins the side stream
//! assert_eq!(summary.prefetched, 40);
//! assert_eq!(gen.offset(), 160);          // advanced exactly like 40 stock draws
//! # Ok(()) }
//! ```

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{Error, Result};
use crate::ffi::{self, sys};
use crate::generator::Generator;

/// When the batched draw of a forward is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PrefetchPoint {
    /// At the start of the forward: the draw overlaps the main stream's work before the first
    /// stochastic-rounding layer (the default: it keeps the draw off the critical path).
    #[default]
    AtBegin,
    /// At the first seed request of the forward.
    AtFirstCall,
}

/// How a captured forward's batched draw enters the CUDA graph (eager forwards always use the
/// side stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CaptureLayout {
    /// As eagerly: the draw on the side stream, joined by events — in the graph a parallel
    /// branch and a join edge.
    Branch,
    /// The default: the draw as one node on the main stream at the fork point (no branch, no
    /// events): one kernel boundary on the critical path instead of a branch join, which
    /// measured cheaper on the H200 (BENCHMARKS.md, decode step).
    #[default]
    Inline,
}

/// A device pointer to one int64 seed, borrowed from the [`Prefetcher`] that handed it out (so
/// it cannot outlive its buffers). Its value is valid for work enqueued on the requesting stream
/// before the next forward's batched draw or 64 further inline draws (see [`Prefetcher::seed`]).
/// It is exactly what FlashInfer's SSU reads as `rand_seed`; pass it to this crate's SSU as
/// [`crate::ssu::SeedSource::Prefetched`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedPtr<'p> {
    ptr: u64,
    ordinal: usize,
    _prefetcher: PhantomData<&'p Prefetcher>,
}

impl SeedPtr<'_> {
    /// The raw device address (a `CUdeviceptr`) of the int64 seed.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// The device the seed lives on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
}

/// The seed of an SSU call on the fused path (see [`Prefetcher::fused_seed`]); pass it as
/// [`crate::ssu::SeedSource::Fused`]. It holds the C ABI's `mamba_ssu_seed` that
/// `mamba_ssu_prefetcher_derive_seed` produced (the call adds its rounds and SR rule). Borrowed
/// from the prefetcher, whose device generator state a captured call reads, whose chain links
/// a chained call reads and writes, and which the launch tells that the link was enqueued.
#[derive(Clone, Copy, Debug)]
pub struct FusedSeed<'p> {
    seed: sys::mamba_ssu_seed,
    ordinal: usize,
    _prefetcher: PhantomData<&'p Prefetcher>,
}

impl PartialEq for FusedSeed<'_> {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.seed, &other.seed);
        let (p, q) = (&a.position, &b.position);
        (
            a.mode,
            a.rounds,
            a.rule,
            a.pointer,
            a.next,
            a.chain,
            self.ordinal,
        ) == (
            b.mode,
            b.rounds,
            b.rule,
            b.pointer,
            b.next,
            b.chain,
            other.ordinal,
        ) && (p.seed_ptr, p.offset_ptr, p.seed, p.offset)
            == (q.seed_ptr, q.offset_ptr, q.seed, q.offset)
    }
}

impl Eq for FusedSeed<'_> {}

impl FusedSeed<'_> {
    /// The stock value this call's seed equals, when it is known on the host (eager calls):
    /// `Some(torch_seed(seed, offset))` of its draw position; `None` under capture (the
    /// position is the device generator state, decided at replay).
    pub fn eager_value(&self) -> Option<u64> {
        let p = &self.seed.position;
        p.seed_ptr
            .is_null()
            .then(|| crate::philox::torch_seed(p.seed, p.offset))
    }

    /// In a chained fused forward, the device pointer to this call's seed as stored by the
    /// previous call (`None`: the kernel derives the seed itself).
    pub fn linked_seed(&self) -> Option<u64> {
        (self.seed.mode == sys::MAMBA_SSU_SEED_MODE_POINTER as i32)
            .then_some(self.seed.pointer as u64)
    }

    /// In a chained fused forward, the device pointer where this call's kernel stores the next
    /// call's seed (`None` for the last link of the forward, or outside a fused forward).
    pub fn seed_next(&self) -> Option<u64> {
        (!self.seed.next.is_null()).then_some(self.seed.next as u64)
    }

    /// The C seed `mamba_ssu_prefetcher_derive_seed` produced (mode, pointer, position, next
    /// link, chain; rounds and rule unset).
    pub(crate) fn ffi(&self) -> sys::mamba_ssu_seed {
        self.seed
    }

    /// The device of the prefetcher's memory the seed uses.
    pub(crate) fn ordinal(&self) -> usize {
        self.ordinal
    }
}

/// What a forward did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardSummary {
    /// Seed requests in the forward.
    pub requested: u32,
    /// Served from the batched draw.
    pub prefetched: u32,
    /// Served by an inline stock draw (layers beyond N, or the generator moved).
    pub fallback: u32,
    /// Seeds drawn by the batched launch (0 or N).
    pub drawn: u32,
    /// Whether the forward was captured in a CUDA graph.
    pub captured: bool,
}

/// One prefetcher per device: its side stream, events, seed buffer and device generator state.
///
/// Not `Sync`: drive it from one thread (its C object keeps per-forward state).
///
/// A CUDA graph captured with a prefetcher may be replayed after the prefetcher is dropped:
/// once used under capture, its device buffers stay allocated for the rest of the process, so
/// such a replay touches live memory (and draws from the state the last
/// [`Prefetcher::prepare_replay`] wrote) — safe Rust cannot make a captured graph dangle.
pub struct Prefetcher {
    raw: NonNull<sys::mamba_ssu_prefetcher>,
    ctx: Arc<CudaContext>,
    seeds_per_forward: u32,
    open: bool,
}

// SAFETY: the C object is owned exclusively by this value and only touched through `&mut self`
// (or `&self` for the read-only increment); moving it to another thread is fine since every call
// first binds the CUDA context of its device to the calling thread.
unsafe impl Send for Prefetcher {}

impl Prefetcher {
    /// A prefetcher on `ctx`'s device for forwards of `seeds_per_forward` stochastic-rounding
    /// layers (N in `1..=`[`MAX_SEEDS_PER_DRAW`](crate::seeds::MAX_SEEDS_PER_DRAW), else an
    /// [`Error::InvalidArgument`] naming `seeds_per_forward`), drawing at the start of each
    /// forward.
    pub fn new(ctx: &Arc<CudaContext>, seeds_per_forward: usize) -> Result<Self> {
        Self::with_point(ctx, seeds_per_forward, PrefetchPoint::AtBegin)
    }

    /// As [`Prefetcher::new`], choosing when the batched draw is issued.
    pub fn with_point(
        ctx: &Arc<CudaContext>,
        seeds_per_forward: usize,
        point: PrefetchPoint,
    ) -> Result<Self> {
        // The range (1..=MAMBA_SSU_MAX_SEEDS_PER_DRAW) is the C constructor's rule.
        let n = u32::try_from(seeds_per_forward).map_err(|_| {
            Error::invalid(
                "seeds_per_forward",
                format!(
                    "{seeds_per_forward} does not fit the C ABI's uint32 (at most {})",
                    crate::seeds::MAX_SEEDS_PER_DRAW
                ),
            )
        })?;
        ctx.bind_to_thread()?;
        let mut raw = std::ptr::null_mut();
        let point = match point {
            PrefetchPoint::AtBegin => sys::MAMBA_SSU_PREFETCH_AT_BEGIN,
            PrefetchPoint::AtFirstCall => sys::MAMBA_SSU_PREFETCH_AT_FIRST_CALL,
        } as i32;
        // SAFETY: `raw` is a valid out-pointer; the context is current on this thread, so the
        // runtime allocates on the same device (primary context) as cudarc.
        ffi::check(unsafe { sys::mamba_ssu_prefetcher_create(&mut raw, n, point) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::Launcher {
            status: -1,
            message: "prefetcher_create returned no object".into(),
            detail: String::new(),
        })?;
        Ok(Self {
            raw,
            ctx: ctx.clone(),
            seeds_per_forward: n,
            open: false,
        })
    }

    /// Chooses how captured forwards place their batched draw. Returns [`Error::Scope`] while
    /// a forward is open.
    pub fn set_capture_layout(&mut self, layout: CaptureLayout) -> Result<()> {
        let layout = match layout {
            CaptureLayout::Branch => sys::MAMBA_SSU_CAPTURE_BRANCH,
            CaptureLayout::Inline => sys::MAMBA_SSU_CAPTURE_INLINE,
        } as i32;
        // SAFETY: `self.raw` is a live prefetcher; the call only stores the value.
        ffi::check(unsafe {
            sys::mamba_ssu_prefetcher_set_capture_layout(self.raw.as_ptr(), layout)
        })
    }

    /// N, the seeds drawn per forward.
    pub fn seeds_per_forward(&self) -> usize {
        self.seeds_per_forward as usize
    }

    fn check_stream(&self, argument: &'static str, stream: &CudaStream) -> Result<()> {
        crate::device::check_ordinal(argument, stream, self.ctx.ordinal())
    }

    /// Opens a forward on `main` (explicit form of [`Prefetcher::forward`]): with
    /// [`PrefetchPoint::AtBegin`] the N seeds are drawn now on the side stream, from `gen`'s
    /// current state eagerly or from the device state under capture.
    pub fn begin_forward(&mut self, main: &CudaStream, gen: &Generator) -> Result<()> {
        self.check_stream("main", main)?;
        self.ctx.bind_to_thread()?;
        let mut g = gen.to_raw();
        // SAFETY: `self.raw` is a live prefetcher; `g` is a valid generator state; the stream
        // handle comes from a live cudarc stream of the same device.
        ffi::check(unsafe {
            sys::mamba_ssu_prefetcher_begin_forward(
                self.raw.as_ptr(),
                ffi::stream_handle(main),
                &mut g,
            )
        })?;
        self.open = true;
        Ok(())
    }

    /// The seed of the next stochastic-rounding layer, requested on `stream`.
    ///
    /// Inside a forward: `layer` must equal the number of seeds requested so far in it, and
    /// `stream` must be the forward's main stream; layers `< N` are served from the batched draw,
    /// others by an inline stock draw. Outside a forward: an inline stock draw on `stream`.
    /// Either way `gen` advances by 4 (not under capture, where the device state is used), and
    /// the value equals the stock draw of this call. Consume the pointer on `stream`.
    pub fn seed(
        &mut self,
        stream: &CudaStream,
        gen: &mut Generator,
        layer: u32,
    ) -> Result<SeedPtr<'_>> {
        self.check_stream("stream", stream)?;
        self.ctx.bind_to_thread()?;
        let mut g = gen.to_raw();
        let mut out: *const i64 = std::ptr::null();
        // SAFETY: live prefetcher, valid generator and out-pointers, stream of the same device.
        let status = unsafe {
            sys::mamba_ssu_prefetcher_seed(
                self.raw.as_ptr(),
                ffi::stream_handle(stream),
                &mut g,
                layer,
                &mut out,
            )
        };
        ffi::check(status)?;
        gen.set_from_raw(&g);
        Ok(SeedPtr {
            ptr: out as u64,
            ordinal: self.ctx.ordinal(),
            _prefetcher: PhantomData,
        })
    }

    /// The fused path: the seed of one SSU call whose kernel derives this call's stock seed
    /// itself (pass it as [`crate::ssu::SeedSource::Fused`]); `gen` advances like one stock
    /// draw (eagerly; under capture the device generator state is read, see
    /// [`Prefetcher::prepare_replay`]). Inside a fused forward ([`Prefetcher::begin_fused_forward`])
    /// the first N requests are chained: request 0 derives its seed, each request's kernel also
    /// stores the next request's seed, which that request reads. Through
    /// `mamba_ssu_prefetcher_derive_seed`; inside a prefetching forward it is a scope error.
    ///
    /// The chain's contract: every fused seed of a fused forward is consumed by exactly one
    /// successful SSU launch on the forward's main stream before the next one is requested
    /// (that launch writes the next link). A request whose predecessor was not launched
    /// (dropped, or rejected before the C launch, e.g. [`Error::WrongDevice`]) is an
    /// [`Error::Scope`] that draws nothing; requesting again derives the seed and the chain
    /// resumes.
    pub fn fused_seed(
        &mut self,
        stream: &CudaStream,
        gen: &mut Generator,
    ) -> Result<FusedSeed<'_>> {
        self.check_stream("stream", stream)?;
        self.ctx.bind_to_thread()?;
        let mut g = gen.to_raw();
        let mut seed = sys::mamba_ssu_seed::default();
        // SAFETY: live prefetcher, valid generator and seed pointers, a stream of the same
        // device; the call fills `seed`, whose pointers (the prefetcher's links and device state,
        // the prefetcher itself as `chain`) stay valid while the returned borrow of `self` lives.
        ffi::check(unsafe {
            sys::mamba_ssu_prefetcher_derive_seed(
                self.raw.as_ptr(),
                ffi::stream_handle(stream),
                &mut g,
                &mut seed,
            )
        })?;
        gen.set_from_raw(&g);
        Ok(FusedSeed {
            seed,
            ordinal: self.ctx.ordinal(),
            _prefetcher: PhantomData,
        })
    }

    /// Opens a FUSED forward on `main` (explicit form of [`Prefetcher::fused_forward`]): no
    /// batched draw; the first N [`Prefetcher::fused_seed`] requests of the forward are
    /// chained — request 0 derives its seed in the kernel, and each request's kernel also
    /// stores the next request's seed from one extra thread block, which the next request
    /// reads — so the 10-round seed derivation runs once per forward on the critical path
    /// instead of once per layer. Requests beyond N, or after someone else moved the generator,
    /// derive their own seed. Values are the stock sequence. Every fused seed of the forward
    /// must be consumed by one SSU launch on `main` before the next is requested (see
    /// [`Prefetcher::fused_seed`]).
    pub fn begin_fused_forward(&mut self, main: &CudaStream, gen: &Generator) -> Result<()> {
        self.check_stream("main", main)?;
        self.ctx.bind_to_thread()?;
        let mut g = gen.to_raw();
        // SAFETY: `self.raw` is a live prefetcher; `g` is a valid generator state; the stream
        // handle comes from a live cudarc stream of the same device.
        ffi::check(unsafe {
            sys::mamba_ssu_prefetcher_begin_fused_forward(
                self.raw.as_ptr(),
                ffi::stream_handle(main),
                &mut g,
            )
        })?;
        self.open = true;
        Ok(())
    }

    /// Ends the open forward: joins the side stream into the main stream and returns what the
    /// forward did. Under capture, a forward that drew N seeds but consumed fewer returns
    /// [`Error::Scope`] (the streams are joined, the capture can be ended normally); eagerly
    /// that case is allowed.
    pub fn end_forward(&mut self) -> Result<ForwardSummary> {
        self.ctx.bind_to_thread()?;
        let mut s = sys::mamba_ssu_forward_summary::default();
        // SAFETY: live prefetcher, valid summary pointer.
        let status = unsafe { sys::mamba_ssu_prefetcher_end_forward(self.raw.as_ptr(), &mut s) };
        self.open = false;
        ffi::check(status)?;
        Ok(ForwardSummary {
            requested: s.requested,
            prefetched: s.prefetched,
            fallback: s.fallback,
            drawn: s.drawn,
            captured: s.captured != 0,
        })
    }

    /// Opens a forward and returns its scope guard (ended on drop if not ended explicitly).
    pub fn forward<'a>(
        &'a mut self,
        main: &'a CudaStream,
        gen: &'a mut Generator,
    ) -> Result<Forward<'a>> {
        self.begin_forward(main, gen)?;
        Ok(Forward {
            prefetcher: self,
            main,
            gen,
            layer: 0,
            ended: false,
        })
    }

    /// Opens a fused forward and returns its scope guard (see
    /// [`Prefetcher::begin_fused_forward`]; ended on drop if not ended explicitly).
    pub fn fused_forward<'a>(
        &'a mut self,
        main: &'a CudaStream,
        gen: &'a mut Generator,
    ) -> Result<FusedForward<'a>> {
        self.begin_fused_forward(main, gen)?;
        Ok(FusedForward {
            prefetcher: self,
            main,
            gen,
            ended: false,
        })
    }

    /// The generator increment of one replay of the most recently captured graph that used
    /// this prefetcher (4 per seed the graph draws).
    pub fn graph_increment(&self) -> u64 {
        let mut inc = 0u64;
        // SAFETY: live prefetcher, valid out-pointer; the call only reads host state.
        let status =
            unsafe { sys::mamba_ssu_prefetcher_graph_increment(self.raw.as_ptr(), &mut inc) };
        debug_assert_eq!(status, 0);
        inc
    }

    /// Before each replay of a captured graph, on the replay stream: writes `gen`'s state to the
    /// device state (a kernel) and advances `gen` by `graph_increment`.
    pub fn prepare_replay(
        &mut self,
        stream: &CudaStream,
        gen: &mut Generator,
        graph_increment: u64,
    ) -> Result<()> {
        self.check_stream("stream", stream)?;
        self.ctx.bind_to_thread()?;
        let mut g = gen.to_raw();
        // SAFETY: live prefetcher, valid generator, stream of the same device.
        ffi::check(unsafe {
            sys::mamba_ssu_prefetcher_prepare_replay(
                self.raw.as_ptr(),
                ffi::stream_handle(stream),
                &mut g,
                graph_increment,
            )
        })?;
        gen.set_from_raw(&g);
        Ok(())
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        if self.open {
            let _ = self.end_forward();
        }
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `raw` came from prefetcher_create and is destroyed exactly once, here.
        let _ = unsafe { sys::mamba_ssu_prefetcher_destroy(self.raw.as_ptr()) };
    }
}

/// A forward scope: hands out the layers' seeds in order; ends the forward on drop (errors are
/// then ignored — call [`Forward::end`] to see them).
pub struct Forward<'a> {
    prefetcher: &'a mut Prefetcher,
    main: &'a CudaStream,
    gen: &'a mut Generator,
    layer: u32,
    ended: bool,
}

impl Forward<'_> {
    /// The next layer's seed (see [`Prefetcher::seed`]).
    pub fn seed(&mut self) -> Result<SeedPtr<'_>> {
        let s = self.prefetcher.seed(self.main, self.gen, self.layer)?;
        self.layer += 1;
        Ok(s)
    }

    /// The generator (its offset follows the seeds handed out, eagerly).
    pub fn generator(&self) -> &Generator {
        self.gen
    }

    /// Ends the forward (see [`Prefetcher::end_forward`]).
    pub fn end(mut self) -> Result<ForwardSummary> {
        self.ended = true;
        self.prefetcher.end_forward()
    }
}

impl Drop for Forward<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.prefetcher.end_forward();
        }
    }
}

/// A fused forward scope: hands out chained fused seeds in order (see
/// [`Prefetcher::begin_fused_forward`]); ends the forward on drop (errors are then ignored —
/// call [`FusedForward::end`] to see them).
pub struct FusedForward<'a> {
    prefetcher: &'a mut Prefetcher,
    main: &'a CudaStream,
    gen: &'a mut Generator,
    ended: bool,
}

impl FusedForward<'_> {
    /// The next layer's fused seed, for one SSU launch on the forward's main stream.
    pub fn seed(&mut self) -> Result<FusedSeed<'_>> {
        self.prefetcher.fused_seed(self.main, self.gen)
    }

    /// The generator (its offset follows the seeds handed out, eagerly).
    pub fn generator(&self) -> &Generator {
        self.gen
    }

    /// Ends the forward (see [`Prefetcher::end_forward`]): `prefetched` counts the chained
    /// requests, `fallback` those that derived their own seed.
    pub fn end(mut self) -> Result<ForwardSummary> {
        self.ended = true;
        self.prefetcher.end_forward()
    }
}

impl Drop for FusedForward<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.prefetcher.end_forward();
        }
    }
}
