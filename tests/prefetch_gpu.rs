//! GPU tests of the seed prefetcher: the seeds it hands out equal the stock sequence, eagerly
//! (with filler kernels interleaved, calls beyond N, calls outside a scope, back-to-back
//! forwards, two prefetchers on two streams) and under CUDA-graph capture and replay; the
//! under-capture scope error leaves the stream usable.

mod common;

use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut};
use mamba_ssu::philox::{torch_seed, torch_seeds};
use mamba_ssu::prefetch::{CaptureLayout, PrefetchPoint, Prefetcher, SeedPtr};
use mamba_ssu::{filler::filler, Error, Generator};

const N: usize = 40;

/// A small SSU problem (fp16 state, bf16 inputs, 4 heads of dim 64, dstate 128) that consumes
/// one fused seed with a real launch, as the fused chain's contract requires.
struct SsuRig {
    state: CudaSlice<half::f16>,
    x: CudaSlice<half::bf16>,
    dt: CudaSlice<half::bf16>,
    a: CudaSlice<f32>,
    bc: CudaSlice<half::bf16>,
    out: CudaSlice<half::bf16>,
}

impl SsuRig {
    const H: usize = 4;
    fn new(stream: &Arc<CudaStream>) -> Self {
        Self {
            state: stream.alloc_zeros(Self::H * 64 * 128).unwrap(),
            x: stream.alloc_zeros(Self::H * 64).unwrap(),
            dt: stream.alloc_zeros(Self::H).unwrap(),
            a: stream.alloc_zeros(Self::H).unwrap(),
            bc: stream.alloc_zeros(128).unwrap(),
            out: stream.alloc_zeros(Self::H * 64).unwrap(),
        }
    }

    fn consume(&mut self, stream: &CudaStream, seed: mamba_ssu::prefetch::FusedSeed<'_>) {
        self.launch(stream, seed, 64).unwrap();
    }

    /// One SSU launch (10 rounds) with `seed`, x viewed with head dim `x_dim` (64 is the
    /// state's; any other is an argument error the C check reports before launching).
    fn launch(
        &mut self,
        stream: &CudaStream,
        seed: mamba_ssu::prefetch::FusedSeed<'_>,
        x_dim: usize,
    ) -> mamba_ssu::Result<()> {
        use mamba_ssu::ssu::{selective_state_update, SeedSource, SsuArgs, Tensor, TensorMut};
        let h = Self::H;
        let mut args = SsuArgs::new(
            TensorMut::contiguous(&mut self.state, &[1, h, 64, 128])?,
            Tensor::contiguous(&self.x, &[1, h, x_dim])?,
            Tensor::new(&self.dt, &[1, h, 64], &[h, 1, 0])?,
            Tensor::new(&self.a, &[h, 64, 128], &[1, 0, 0])?,
            Tensor::contiguous(&self.bc, &[1, 1, 128])?,
            Tensor::contiguous(&self.bc, &[1, 1, 128])?,
            TensorMut::contiguous(&mut self.out, &[1, h, 64])?,
        )
        .stochastic_rounding(SeedSource::Fused(seed), 10);
        selective_state_update(stream, &mut args)
    }
}

/// Copies the int64 behind `seed` into `results[k]` on `stream` (a consumer on the stream, like
/// the SSU kernel reading `rand_seed`).
fn consume(stream: &CudaStream, seed: SeedPtr, results: &mut CudaSlice<i64>, k: usize) {
    let (dst, _g) = results.device_ptr_mut(stream);
    // SAFETY: `dst + 8k` is inside `results` (k < len, checked by the callers' sizes), `seed`
    // points to one int64 valid for work enqueued on `stream` now; both on the stream's device.
    unsafe {
        cudarc::driver::result::memcpy_dtod_async(
            dst + 8 * k as u64,
            seed.device_ptr(),
            8,
            stream.cu_stream(),
        )
        .unwrap();
    }
}

fn download(stream: &Arc<CudaStream>, results: &CudaSlice<i64>) -> Vec<u64> {
    stream
        .clone_dtoh(results)
        .unwrap()
        .iter()
        .map(|&v| v as u64)
        .collect()
}

struct Setup {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    filler_buf: CudaSlice<f32>,
    // Last: released after the buffers and streams above are dropped.
    _serial: std::sync::MutexGuard<'static, ()>,
}

fn setup() -> Option<Setup> {
    let serial = common::serial(); // captures: see common::serial
    let (ctx, stream) = common::gpu()?;
    // SAFETY: every buffer in these tests is used on the stream it was allocated on, or ordered
    // by the prefetcher's own events; cudarc's per-buffer tracking is not needed and would
    // interfere with capture.
    unsafe { ctx.disable_event_tracking() };
    // ~4 MB of filler work between layers: long enough that a race would show.
    let filler_buf = stream.alloc_zeros::<f32>(1 << 20).unwrap();
    Some(Setup {
        ctx,
        stream,
        filler_buf,
        _serial: serial,
    })
}

/// One forward of `layers` SR layers through the prefetcher, filler work before each layer.
fn run_forward(
    s: &mut Setup,
    p: &mut Prefetcher,
    gen: &mut Generator,
    layers: usize,
    results: &mut CudaSlice<i64>,
) -> mamba_ssu::prefetch::ForwardSummary {
    let stream = s.stream.clone();
    let mut fwd = p.forward(&stream, gen).unwrap();
    for k in 0..layers {
        filler(&stream, &mut s.filler_buf, 8).unwrap();
        let seed = fwd.seed().unwrap();
        consume(&stream, seed, results, k);
    }
    fwd.end().unwrap()
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn eager_prefetch_equals_stock_with_filler_between_layers() {
    let Some(mut s) = setup() else { return };
    for point in [PrefetchPoint::AtBegin, PrefetchPoint::AtFirstCall] {
        let mut p = Prefetcher::with_point(&s.ctx, N, point).unwrap();
        let mut gen = Generator::new(0xDEAD_BEEF, 4000).unwrap();
        let mut results = s.stream.alloc_zeros::<i64>(N).unwrap();
        let summary = run_forward(&mut s, &mut p, &mut gen, N, &mut results);
        assert_eq!(
            download(&s.stream, &results),
            torch_seeds(0xDEAD_BEEF, 4000, N)
        );
        assert_eq!(gen.offset(), 4000 + 4 * N as u64);
        assert_eq!(
            (summary.prefetched, summary.fallback, summary.drawn),
            (40, 0, 40)
        );
        assert!(!summary.captured);
    }
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn calls_beyond_n_and_outside_a_scope_fall_back_to_stock() {
    let Some(mut s) = setup() else { return };
    let mut p = Prefetcher::new(&s.ctx, N).unwrap();
    let mut gen = Generator::new(7, 1 << 34).unwrap();
    let start = gen.offset();
    let mut results = s.stream.alloc_zeros::<i64>(N + 5 + 3).unwrap();
    let summary = run_forward(&mut s, &mut p, &mut gen, N + 5, &mut results);
    assert_eq!((summary.prefetched, summary.fallback), (40, 5));
    // Three calls with no forward scope: stock draws inline.
    let stream = s.stream.clone();
    for k in 0..3 {
        filler(&stream, &mut s.filler_buf, 4).unwrap();
        let seed = p.seed(&stream, &mut gen, 0).unwrap();
        consume(&stream, seed, &mut results, N + 5 + k);
    }
    assert_eq!(download(&s.stream, &results), torch_seeds(7, start, N + 8));
    assert_eq!(gen.offset(), start + 4 * (N as u64 + 8));
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn back_to_back_forwards_and_a_moved_generator() {
    let Some(mut s) = setup() else { return };
    let mut p = Prefetcher::new(&s.ctx, N).unwrap();
    let mut gen = Generator::new(u64::MAX, 12).unwrap();
    let mut a = s.stream.alloc_zeros::<i64>(N).unwrap();
    let mut b = s.stream.alloc_zeros::<i64>(N).unwrap();
    // Forward 1 uses fewer layers than N (allowed eagerly), forward 2 all of them; no host sync
    // in between: forward 2's draw must wait for forward 1's consumers.
    let s1 = run_forward(&mut s, &mut p, &mut gen, 30, &mut a);
    assert_eq!((s1.prefetched, s1.drawn), (30, 40));
    let s2 = run_forward(&mut s, &mut p, &mut gen, N, &mut b);
    assert_eq!(s2.prefetched, 40);
    let all = torch_seeds(u64::MAX, 12, 70);
    assert_eq!(download(&s.stream, &a)[..30], all[..30]);
    assert_eq!(download(&s.stream, &b), all[30..]);
    // Someone else draws from the generator mid-forward (explicit scope API): stock follows
    // the moved generator, and so does the prefetcher, by falling back to inline draws.
    let stream = s.stream.clone();
    let start = gen.offset();
    let mut c = stream.alloc_zeros::<i64>(6).unwrap();
    p.begin_forward(&stream, &gen).unwrap();
    for k in 0..3u32 {
        let seed = p.seed(&stream, &mut gen, k).unwrap();
        consume(&stream, seed, &mut c, k as usize);
    }
    let other_consumer = gen.next_cpu(); // e.g. a sampler on the same generator
    for k in 3..6u32 {
        let seed = p.seed(&stream, &mut gen, k).unwrap();
        consume(&stream, seed, &mut c, k as usize);
    }
    let summary = p.end_forward().unwrap();
    assert_eq!((summary.prefetched, summary.fallback), (3, 3));
    let stock = torch_seeds(u64::MAX, start, 7);
    assert_eq!(other_consumer, stock[3]);
    let got = download(&stream, &c);
    assert_eq!(got[..3], stock[..3]);
    assert_eq!(got[3..], stock[4..]);
    assert_eq!(gen.offset(), start + 28);
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn two_prefetchers_on_two_streams() {
    let Some(mut s) = setup() else { return };
    let other = s.ctx.new_stream().unwrap();
    let mut p1 = Prefetcher::new(&s.ctx, N).unwrap();
    let mut p2 = Prefetcher::new(&s.ctx, N).unwrap();
    let mut g1 = Generator::new(1, 0).unwrap();
    let mut g2 = Generator::new(2, 400).unwrap();
    let mut r1 = s.stream.alloc_zeros::<i64>(N).unwrap();
    let mut r2 = other.alloc_zeros::<i64>(N).unwrap();
    let mut buf2 = other.alloc_zeros::<f32>(1 << 20).unwrap();
    let main = s.stream.clone();
    let mut f1 = p1.forward(&main, &mut g1).unwrap();
    let mut f2 = p2.forward(&other, &mut g2).unwrap();
    for k in 0..N {
        filler(&main, &mut s.filler_buf, 4).unwrap();
        filler(&other, &mut buf2, 4).unwrap();
        let a = f1.seed().unwrap();
        consume(&main, a, &mut r1, k);
        let b = f2.seed().unwrap();
        consume(&other, b, &mut r2, k);
    }
    f1.end().unwrap();
    f2.end().unwrap();
    assert_eq!(download(&main, &r1), torch_seeds(1, 0, N));
    assert_eq!(download(&other, &r2), torch_seeds(2, 400, N));
    // A forward's seeds must be requested on its main stream.
    let mut f = p1.forward(&main, &mut g1).unwrap();
    f.seed().unwrap();
    let err = p2.seed(&main, &mut g2, 0); // p2 has no forward: stock, allowed
    assert!(err.is_ok());
    drop(f);
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn captured_forward_replays_fresh_stock_seeds() {
    for layout in [CaptureLayout::Branch, CaptureLayout::Inline] {
        captured_forward_replays_fresh_stock_seeds_with(layout);
    }
}

fn captured_forward_replays_fresh_stock_seeds_with(layout: CaptureLayout) {
    let Some(mut s) = setup() else { return };
    let mut p = Prefetcher::new(&s.ctx, N).unwrap();
    p.set_capture_layout(layout).unwrap();
    let mut gen = Generator::new(2024, 12).unwrap();
    let mut results = s.stream.alloc_zeros::<i64>(N + 2).unwrap();
    let stream = s.stream.clone();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let summary = run_forward(&mut s, &mut p, &mut gen, N + 2, &mut results);
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph");
    assert!(summary.captured);
    assert_eq!((summary.prefetched, summary.fallback), (40, 2));
    assert_eq!(
        gen.offset(),
        12,
        "capture does not advance the host generator"
    );
    let inc = p.graph_increment();
    assert_eq!(inc, 4 * (N as u64 + 2));
    let mut previous = None;
    for _ in 0..3 {
        let before = gen.offset();
        p.prepare_replay(&stream, &mut gen, inc).unwrap();
        graph.launch().unwrap();
        let got = download(&stream, &results);
        assert_eq!(
            got,
            torch_seeds(2024, before, N + 2),
            "{layout:?}: replay from {before}"
        );
        assert_ne!(Some(&got), previous.as_ref());
        previous = Some(got);
        // The host moves between replays like torch (other draws happen eagerly).
        gen.next_cpu();
    }
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn captured_forward_consuming_fewer_than_n_is_a_typed_error() {
    for layout in [CaptureLayout::Branch, CaptureLayout::Inline] {
        captured_forward_consuming_fewer_than_n_is_a_typed_error_with(layout);
    }
}

fn captured_forward_consuming_fewer_than_n_is_a_typed_error_with(layout: CaptureLayout) {
    let Some(mut s) = setup() else { return };
    let mut p = Prefetcher::new(&s.ctx, N).unwrap();
    p.set_capture_layout(layout).unwrap();
    let mut gen = Generator::new(5, 0).unwrap();
    let stream = s.stream.clone();
    let mut results = stream.alloc_zeros::<i64>(N).unwrap();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let mut fwd = p.forward(&stream, &mut gen).unwrap();
    for k in 0..10 {
        filler(&stream, &mut s.filler_buf, 2).unwrap();
        let seed = fwd.seed().unwrap();
        consume(&stream, seed, &mut results, k);
    }
    match fwd.end() {
        Err(Error::Scope(msg)) => assert!(msg.contains("10 of the 40"), "{msg}"),
        other => panic!("expected a scope error, got {other:?}"),
    }
    // The side stream was joined: the capture ends cleanly and the graph runs.
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph");
    let inc = p.graph_increment();
    p.prepare_replay(&stream, &mut gen, inc).unwrap();
    graph.launch().unwrap();
    stream.synchronize().unwrap();
    // The stream is usable afterwards, eagerly.
    let mut g2 = Generator::new(5, 0).unwrap();
    let s1 = run_forward(&mut s, &mut p, &mut g2, N, &mut results);
    assert_eq!(s1.prefetched, 40);
    assert_eq!(download(&stream, &results), torch_seeds(5, 0, N));
    // Misuse of scopes is typed too.
    assert!(matches!(p.end_forward(), Err(Error::Scope(_))));
    p.begin_forward(&stream, &g2).unwrap();
    assert!(matches!(
        p.set_capture_layout(CaptureLayout::Branch),
        Err(Error::Scope(_))
    ));
    p.end_forward().unwrap();
}

/// The fused chain's bookkeeping (values through the SSU are checked in decode_gpu): call 0
/// derives its seed, calls 1..N-1 read the link their predecessor's SSU stored (through
/// `mamba_ssu_launch`, which confirms each link), calls beyond N and a call after someone else
/// moved the generator derive their own; every call's position is the stock one; the summary
/// counts the chained calls as `prefetched`; scope misuse is typed.
#[test]
#[ignore = "requires a CUDA GPU"]
fn fused_forward_chains_links_and_falls_back() {
    let Some(s) = setup() else { return };
    let mut p = Prefetcher::new(&s.ctx, N).unwrap();
    let stream = s.stream.clone();
    let mut gen = Generator::new(99, 400).unwrap();
    let mut expected_offset = 400;
    p.begin_fused_forward(&stream, &gen).unwrap();
    // A prefetching request inside a fused forward is a scope error.
    assert!(matches!(p.seed(&stream, &mut gen, 0), Err(Error::Scope(_))));
    let mut linked = Vec::new();
    let mut rig = SsuRig::new(&stream);
    for k in 0..N + 2 {
        if k == 11 {
            gen.next_cpu(); // someone else draws: the sequence moves
            expected_offset += 4;
        }
        let f = p.fused_seed(&stream, &mut gen).unwrap();
        assert_eq!(
            f.eager_value(),
            Some(torch_seed(99, expected_offset)),
            "call {k}: the stock draw at its position"
        );
        linked.push(f.linked_seed().is_some());
        assert_eq!(f.seed_next().is_some(), k + 1 < N, "call {k}");
        rig.consume(&stream, f); // the chain's contract: one SSU launch per fused seed
        expected_offset += 4;
    }
    assert_eq!(gen.offset(), expected_offset);
    let summary = p.end_forward().unwrap();
    let want: Vec<bool> = (0..N + 2).map(|k| k > 0 && k < N && k != 11).collect();
    assert_eq!(linked, want);
    assert_eq!(
        (
            summary.requested,
            summary.prefetched,
            summary.fallback,
            summary.drawn
        ),
        (N as u32 + 2, N as u32 - 2, 4, 0)
    );
    // A fused request inside a prefetching forward is a scope error; outside any forward each
    // call derives its own seed.
    p.begin_forward(&stream, &gen).unwrap();
    assert!(matches!(
        p.fused_seed(&stream, &mut gen),
        Err(Error::Scope(_))
    ));
    assert!(matches!(
        p.begin_fused_forward(&stream, &gen),
        Err(Error::Scope(_))
    ));
    p.end_forward().unwrap();
    let f = p.fused_seed(&stream, &mut gen).unwrap();
    assert!(f.linked_seed().is_none() && f.seed_next().is_none());
    stream.synchronize().unwrap();
}

/// A fused seed whose SSU was never launched — dropped, or rejected by the check before the
/// launch — leaves the next chain link unwritten: the next request is a scope error (not a
/// stale seed) that draws nothing, and the one after it derives its own seed; the chain then
/// resumes.
#[test]
#[ignore = "requires a CUDA GPU"]
fn fused_chain_detects_a_skipped_consumer() {
    let Some(s) = setup() else { return };
    let mut p = Prefetcher::new(&s.ctx, N).unwrap();
    let stream = s.stream.clone();
    let mut gen = Generator::new(7, 40).unwrap();
    let mut rig = SsuRig::new(&stream);
    p.begin_fused_forward(&stream, &gen).unwrap();
    let f0 = p.fused_seed(&stream, &mut gen).unwrap();
    rig.consume(&stream, f0);
    for skip in ["dropped", "rejected"] {
        let f1 = p.fused_seed(&stream, &mut gen).unwrap();
        assert!(
            f1.linked_seed().is_some(),
            "{skip}: the call reads the link its predecessor stored"
        );
        if skip == "rejected" {
            // x of head dim 32 against a state of 64: the check rejects the call before
            // anything is launched.
            let r = rig.launch(&stream, f1, 32);
            assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
        }
        let offset = gen.offset();
        assert!(
            matches!(p.fused_seed(&stream, &mut gen), Err(Error::Scope(_))),
            "{skip}"
        );
        assert_eq!(
            gen.offset(),
            offset,
            "{skip}: a refused request draws nothing"
        );
        let f2 = p.fused_seed(&stream, &mut gen).unwrap();
        assert!(
            f2.linked_seed().is_none(),
            "{skip}: after the error the call derives its own seed"
        );
        assert_eq!(f2.eager_value(), Some(torch_seed(7, offset)));
        rig.consume(&stream, f2);
    }
    let f3 = p.fused_seed(&stream, &mut gen).unwrap();
    assert!(f3.linked_seed().is_some(), "the chain resumes");
    rig.consume(&stream, f3);
    p.end_forward().unwrap();
    stream.synchronize().unwrap();
}

/// A graph captured with a prefetcher stays safe to replay after the prefetcher is dropped (its
/// device buffers are kept once it was used under capture): the replays run, and draw from the
/// device state the last prepare_replay wrote (compute-sanitizer memcheck runs this test).
#[test]
#[ignore = "requires a CUDA GPU"]
fn graph_replays_after_the_prefetcher_is_dropped_touch_live_memory() {
    let Some(mut s) = setup() else { return };
    let mut p = Prefetcher::new(&s.ctx, N).unwrap();
    let mut gen = Generator::new(77, 4 * 9).unwrap();
    let mut results = s.stream.alloc_zeros::<i64>(N).unwrap();
    let stream = s.stream.clone();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    run_forward(&mut s, &mut p, &mut gen, N, &mut results);
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph");
    let inc = p.graph_increment();
    let last = gen.offset();
    p.prepare_replay(&stream, &mut gen, inc).unwrap();
    graph.launch().unwrap();
    assert_eq!(download(&stream, &results), torch_seeds(77, last, N));
    drop(p);
    // The prefetcher is gone: two more replays, each drawing from the last prepared state.
    for _ in 0..2 {
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        assert_eq!(download(&stream, &results), torch_seeds(77, last, N));
    }
}

/// The filler writes exactly its `n` elements: a poisoned tail past them is untouched, and
/// each element is rewritten `rounds` times (`v = v * 0.5 + 1`).
#[test]
#[ignore = "requires a CUDA GPU"]
fn filler_writes_only_its_elements() {
    let Some(s) = setup() else { return };
    let stream = s.stream.clone();
    let (n, tail) = (1000usize, 64usize);
    let poison = f32::from_bits(0x7FA5_A5A5);
    let mut buf = stream.clone_htod(&vec![poison; n + tail]).unwrap();
    let mut head = buf.slice_mut(0..n);
    stream.memset_zeros(&mut head).unwrap();
    filler(&stream, &mut head, 3).unwrap();
    let got = stream.clone_dtoh(&buf).unwrap();
    assert!(got[..n].iter().all(|&v| v == 1.75), "0 -> 1 -> 1.5 -> 1.75");
    assert!(
        got[n..].iter().all(|v| v.to_bits() == poison.to_bits()),
        "wrote past n"
    );
}
