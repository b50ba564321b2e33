//! `ssu_bench`: single-token SSU timings, measured like FlashInfer's recorded ones
//! (tests/data/flashinfer_ssu/timings.json, embedded) and printed side by side with them.
//!
//! Shapes (vLLM's Nemotron-H decode): fp16 state, bf16 x/B/C/dt/D/dt_bias, fp32 A, dim 64,
//! dstate 128, ngroups 8, no z, softplus, int32 indices; nheads 32 and 128; batch 1..256.
//! `--dim` and `--dstate` measure other head dimensions and state sizes (Nemotron Nano 2 and
//! Nemotron 3 Nano 4B: dim 80), one table per (dim, dstate). FlashInfer's timings were
//! recorded at dim 64 and dstate 128 only: at any other shape its columns show "—" (none
//! recorded), never the figure of another shape, and the table's heading says so.
//! Variants: SR off (auto), SR with 5 and 10 Philox rounds (simple and vertical).
//!
//! Method: a CUDA graph of K back-to-back calls whose `state_batch_indices` rotate over enough
//! disjoint state copies that >= 192 MiB of other state is touched between two uses of a copy
//! (state from HBM); 2 warm-up replays, then the median of 15 replays timed with CUDA events,
//! divided by K. Bytes = state read + write + x, out, B, C, dt, A, D, dt_bias, indices, at the
//! measured dim and dstate (`ssu_bench/rig.rs`); bandwidth as % of a device-to-device copy of
//! 1 GiB timed in the same run.
//!
//! Usage: `cargo bench --bench ssu_bench -- [--quick] [--nheads 32,128] [--batch 1,2,4]
//! [--dim 64,80] [--dstate 128] [--variants off,5s,10v] [--calls K] [--soak SECS]
//! [--json PATH] [--seed-sources]`, or
//! the binary `cargo bench --no-run --bench ssu_bench` builds, run by hand (e.g. on a GPU host
//! without Rust).
//! `--variants` picks among off (no SR), 5s, 5v, 10s and 10v (rounds and layout; default all
//! five) and offh, 5h, 10h (FlashInfer's horizontal mapping, head dims that are a multiple of 64
//! up to 256; other dims are skipped for them); `--calls K` puts at least K calls in each graph instead of 32 (the per-call time of
//! a long graph includes any clock the GPU lowers under sustained load). `--soak SECS` follows
//! each timing with a sustained-load phase (1.5 s, then SECS seconds of back-to-back replays,
//! marked by `SOAK_STEADY` / `SOAK_END` lines) and prints its µs per call: the steady time on a
//! GPU that reaches its power limit; `scripts/energy_soak.py` runs the program and adds the
//! board's energy per call. `--seed-sources` instead compares, with 5 rounds and the auto
//! layout, the seed read from a pointer against the fused seed derived per call from a device
//! generator state (as in a CUDA graph) and against the chained fused path (a fused forward
//! over the graph's calls).
//!
//! Without a GPU it prints one line and exits 0. A bench with `harness = false`: `cargo bench`
//! passes `--bench`, which is ignored. Bad arguments: clap's message and exit code 2; a failure
//! while running: one line and 1. `--json`'s format: `ssu_bench/json.rs`; the argument
//! parsing, the JSON, the byte counts and the rotation rule are tested in
//! `tests/bench_programs.rs`.

#[path = "ssu_bench/args.rs"]
mod args;
#[path = "ssu_bench/json.rs"]
mod json;
#[path = "ssu_bench/rig.rs"]
mod rig;

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use half::{bf16, f16};
use mamba_ssu::prefetch::Prefetcher;
use mamba_ssu::ssu::{self, Algorithm, SeedSource, SsuArgs, Tensor, TensorMut};
use mamba_ssu::{Generator, GraphSeedState};

use args::VARIANTS;
use json::Recorded;
use rig::{Sizes, DIM, DSTATE, NGROUPS, REPLAYS, WARMUPS};

type Res<T> = Result<T, Box<dyn Error>>;

// ---------------------------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------------------------

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn event(ctx: &Arc<CudaContext>) -> Res<cudarc::driver::CudaEvent> {
    Ok(ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?)
}

/// Median device-to-device copy bandwidth (read + write, GB/s) of 1 GiB.
fn copy_bandwidth(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Res<f64> {
    let bytes = 1usize << 30;
    let src = stream.alloc_zeros::<u8>(bytes)?;
    let mut dst = stream.alloc_zeros::<u8>(bytes)?;
    let (start, end) = (event(ctx)?, event(ctx)?);
    let mut ms = Vec::new();
    for i in 0..(WARMUPS + REPLAYS) {
        start.record(stream)?;
        stream.memcpy_dtod(&src, &mut dst)?;
        end.record(stream)?;
        let t = start.elapsed_ms(&end)? as f64;
        if i >= WARMUPS {
            ms.push(t);
        }
    }
    Ok(2.0 * bytes as f64 / (median(ms) * 1e-3) / 1e9)
}

struct Setup {
    sz: Sizes,
    copies: usize,
    calls: usize,
    state: CudaSlice<f16>,
    x: CudaSlice<bf16>,
    b: CudaSlice<bf16>,
    c: CudaSlice<bf16>,
    dt: CudaSlice<bf16>,
    a: CudaSlice<f32>,
    d: CudaSlice<bf16>,
    dt_bias: CudaSlice<bf16>,
    out: CudaSlice<bf16>,
    seed: CudaSlice<i64>,
    indices: Vec<CudaSlice<i32>>,
    /// Device generator state for the fused variant (`Some`: the kernel derives its seed from
    /// it, as a captured fused call does).
    fused: Option<GraphSeedState>,
    /// A prefetcher whose fused forward chains the calls of the graph (`Some`: the chained
    /// fused path; call 0 derives, every call stores the next call's seed).
    chain: Option<(Prefetcher, Generator)>,
}

fn fill_bf16(n: usize, f: impl Fn(usize) -> f32) -> Vec<bf16> {
    (0..n).map(|i| bf16::from_f32(f(i))).collect()
}

fn setup(stream: &Arc<CudaStream>, sz: Sizes, min_calls: usize) -> Res<Setup> {
    let Sizes {
        nheads,
        batch,
        dim,
        dstate,
    } = sz;
    let (copies, calls) = rig::rotation(&sz, min_calls);
    let slots = copies * batch;
    let state_elems = slots * sz.head_block();
    let state_host: Vec<f16> = (0..state_elems)
        .map(|i| f16::from_f32(((i * 2_654_435_761) % 2001) as f32 / 2000.0 - 0.5))
        .collect();
    let wave = |i: usize| ((i * 40_503) % 1001) as f32 / 1000.0 - 0.5;
    let indices = (0..copies)
        .map(|k| {
            let v: Vec<i32> = (0..batch).map(|b| (k * batch + b) as i32).collect();
            stream.clone_htod(&v)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Setup {
        sz,
        copies,
        calls,
        state: stream.clone_htod(&state_host)?,
        x: stream.clone_htod(&fill_bf16(batch * nheads * dim, wave))?,
        b: stream.clone_htod(&fill_bf16(batch * NGROUPS * dstate, wave))?,
        c: stream.clone_htod(&fill_bf16(batch * NGROUPS * dstate, wave))?,
        dt: stream.clone_htod(&fill_bf16(batch * nheads, |i| wave(i) - 1.0))?,
        a: stream.clone_htod(
            &(0..nheads)
                .map(|i| -0.5 - wave(i).abs())
                .collect::<Vec<f32>>(),
        )?,
        d: stream.clone_htod(&fill_bf16(nheads, |i| 1.0 + wave(i) / 4.0))?,
        dt_bias: stream.clone_htod(&fill_bf16(nheads, |i| wave(i) / 4.0))?,
        out: stream.alloc_zeros(batch * nheads * dim)?,
        seed: stream.clone_htod(&[0x5DEA_DBEEF_i64])?,
        indices,
        fused: None,
        chain: None,
    })
}

/// Enqueues call `k` of the rotation.
fn enqueue(
    stream: &Arc<CudaStream>,
    s: &mut Setup,
    k: usize,
    rounds: u32,
    alg: Algorithm,
) -> Res<()> {
    let Sizes {
        nheads: h,
        batch: b,
        dim,
        dstate,
    } = s.sz;
    let slots = s.copies * b;
    let hb = s.sz.head_block();
    let fused_seed = match &mut s.chain {
        Some((pf, gen)) if rounds > 0 => Some(pf.fused_seed(stream, gen)?),
        _ => None,
    };
    let mut args = SsuArgs {
        state: TensorMut::new(
            &mut s.state,
            &[slots, h, dim, dstate],
            &[hb, dim * dstate, dstate, 1],
        )?,
        x: Tensor::new(&s.x, &[b, h, dim], &[h * dim, dim, 1])?,
        dt: Tensor::new(&s.dt, &[b, h, dim], &[h, 1, 0])?,
        a: Tensor::new(&s.a, &[h, dim, dstate], &[1, 0, 0])?,
        b: Tensor::new(&s.b, &[b, NGROUPS, dstate], &[NGROUPS * dstate, dstate, 1])?,
        c: Tensor::new(&s.c, &[b, NGROUPS, dstate], &[NGROUPS * dstate, dstate, 1])?,
        d: Some(Tensor::new(&s.d, &[h, dim], &[1, 0])?),
        z: None,
        dt_bias: Some(Tensor::new(&s.dt_bias, &[h, dim], &[1, 0])?),
        out: TensorMut::new(&mut s.out, &[b, h, dim], &[h * dim, dim, 1])?,
        state_scale: None,
        state_batch_indices: Some(Tensor::new(&s.indices[k % s.copies], &[b], &[1])?),
        dst_state_batch_indices: None,
        pad_slot_id: -1,
        dt_softplus: true,
        disable_state_update: false,
        philox_rounds: rounds,
        algorithm: alg,
        seed: if rounds > 0 {
            Some(match (&s.fused, fused_seed) {
                (_, Some(f)) => SeedSource::Fused(f),
                (Some(state), None) => SeedSource::FromGenerator {
                    state,
                    offset: 4 * k as u64,
                },
                (None, None) => SeedSource::Pointer(Tensor::new(&s.seed, &[1], &[1])?),
            })
        } else {
            None
        },
        sr_rule: ssu::SrRule::V072,
    };
    ssu::selective_state_update(stream, &mut args)?;
    Ok(())
}

/// µs per call (median over replays).
fn time_config(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    s: &mut Setup,
    rounds: u32,
    alg: Algorithm,
    soak_s: Option<f64>,
) -> Res<f64> {
    // One eager call first: argument errors surface here, outside the capture.
    enqueue(stream, s, 0, rounds, alg)?;
    stream.synchronize()?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let mut captured = match &mut s.chain {
        Some((pf, gen)) => pf.begin_fused_forward(stream, gen).map_err(Into::into),
        None => Ok(()),
    };
    for k in 0..s.calls {
        if captured.is_err() {
            break;
        }
        captured = enqueue(stream, s, k, rounds, alg);
    }
    if let Some((pf, _)) = &mut s.chain {
        let ended = pf.end_forward();
        if captured.is_ok() {
            captured = ended.map(|_| ()).map_err(Into::into);
        }
    }
    let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
    captured?;
    let graph = graph.ok_or("stream capture produced no graph")?;
    graph.upload()?;
    let (start, end) = (event(ctx)?, event(ctx)?);
    let mut ms = Vec::new();
    for i in 0..(WARMUPS + REPLAYS) {
        start.record(stream)?;
        graph.launch()?;
        end.record(stream)?;
        let t = start.elapsed_ms(&end)? as f64;
        if i >= WARMUPS {
            ms.push(t);
        }
    }
    stream.synchronize()?;
    if let Some(secs) = soak_s {
        soak(ctx, stream, &graph, s.calls, secs)?;
    }
    Ok(median(ms) * 1e3 / s.calls as f64)
}

/// Sustained load: replays `graph` back to back (a bounded queue, no host gaps) for about
/// 1.5 s of warm-up and then `secs` seconds, and prints the steady phase's µs per call.
/// The lines `SOAK_STEADY` and `SOAK_END` (flushed, the stream idle at each) mark the steady
/// phase for an outside power sampler (`scripts/energy_soak.py`).
fn soak(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    graph: &cudarc::driver::CudaGraph,
    calls: usize,
    secs: f64,
) -> Res<()> {
    use std::io::Write;
    // Replays per batch: about 20 ms of work, so that the host waits on a batch two behind.
    let replay = |n: usize| -> Res<()> {
        for _ in 0..n {
            graph.launch()?;
        }
        Ok(())
    };
    let run_for = |secs: f64| -> Res<(usize, f64)> {
        let (first, mut marks) = (event(ctx)?, vec![event(ctx)?, event(ctx)?, event(ctx)?]);
        first.record(stream)?;
        let begin = std::time::Instant::now();
        let (mut replays, mut i) = (0usize, 0usize);
        let per_batch = 4;
        while begin.elapsed().as_secs_f64() < secs {
            replay(per_batch)?;
            replays += per_batch;
            marks[i % 3].record(stream)?;
            // Wait for the batch two behind, so that two stay queued.
            if i >= 2 {
                marks[(i + 1) % 3].synchronize()?;
            }
            i += 1;
        }
        let last = &mut marks[(i + 2) % 3];
        last.record(stream)?;
        last.synchronize()?;
        let ms = first.elapsed_ms(last)? as f64;
        Ok((replays * calls, ms))
    };
    run_for(1.5)?;
    println!("SOAK_STEADY");
    std::io::stdout().flush()?;
    let (n, ms) = run_for(secs)?;
    println!(
        "SOAK_END calls={n} gpu_ms={ms:.3} us_per_call={:.3}",
        ms * 1e3 / n as f64
    );
    std::io::stdout().flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

fn main() {
    let opts = args::parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit());
    if let Err(e) = run(opts) {
        eprintln!("ssu_bench: error: {e}");
        std::process::exit(1);
    }
}

/// The (dim, dstate) pairs a run measures, `--dim` outer.
fn shapes(opts: &args::Opts) -> Vec<(usize, usize)> {
    opts.dims
        .iter()
        .flat_map(|&d| opts.dstates.iter().map(move |&s| (d, s)))
        .collect()
}

fn run(opts: args::Opts) -> Res<()> {
    let ctx = match mamba_ssu::device::open(0) {
        Ok(c) => c,
        Err(e) if e.is_no_gpu() => {
            println!("ssu_bench: no GPU ({e}); nothing to measure");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    // SAFETY: this binary uses one stream only and synchronises before reading any result;
    // cudarc's per-buffer event tracking would otherwise record events inside stream capture.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    let fi = Recorded::embedded()?;
    let fi_copy = fi.copy_gbps.unwrap_or(f64::NAN);
    let shapes = shapes(&opts);

    if opts.seed_sources {
        for (k, &(dim, dstate)) in shapes.iter().enumerate() {
            // The seed-source comparison has no FlashInfer columns: only the shape is named.
            if shapes != [(DIM, DSTATE)] {
                let gap = if k > 0 { "\n" } else { "" };
                println!("{gap}dim {dim}, dstate {dstate}, ngroups {NGROUPS}:\n");
            }
            println!("| nheads | batch | pointer µs | fused (per call) µs | fused (chained) µs | per call / pointer | chained / pointer |");
            println!("|---|---|---|---|---|---|---|");
            for &nheads in &opts.nheads {
                for &batch in &opts.batches {
                    let sz = Sizes {
                        nheads,
                        batch,
                        dim,
                        dstate,
                    };
                    let mut s = setup(&stream, sz, opts.min_calls)?;
                    let pointer = time_config(&ctx, &stream, &mut s, 5, Algorithm::Auto, None)?;
                    let mut state = GraphSeedState::new(&stream)?;
                    state.write(&stream, 0x5EED_1234_ABCD, 1 << 20)?;
                    s.fused = Some(state);
                    let fused = time_config(&ctx, &stream, &mut s, 5, Algorithm::Auto, None)?;
                    s.fused = None;
                    s.chain = Some((Prefetcher::new(&ctx, s.calls)?, Generator::new(7, 0)?));
                    let chained = time_config(&ctx, &stream, &mut s, 5, Algorithm::Auto, None)?;
                    s.chain = None;
                    // Pointer again, so drift between the runs shows up as a spread.
                    let pointer2 = time_config(&ctx, &stream, &mut s, 5, Algorithm::Auto, None)?;
                    let p = 0.5 * (pointer + pointer2);
                    println!(
                        "| {nheads} | {batch} | {pointer:.3} / {pointer2:.3} | {fused:.3} | {chained:.3} | {:.3} | {:.3} |",
                        fused / p,
                        chained / p
                    );
                }
            }
        }
        return Ok(());
    }
    let copy_gbps = copy_bandwidth(&ctx, &stream)?;
    println!(
        "device-to-device copy: {copy_gbps:.1} GB/s (read + write; FlashInfer's run: {fi_copy:.1})\n"
    );
    let mut rows = Vec::new();
    for (k, &(dim, dstate)) in shapes.iter().enumerate() {
        if let Some(h) = fi.shape_heading(&shapes, dim, dstate) {
            let gap = if k > 0 { "\n" } else { "" };
            println!("{gap}{h}\n");
        }
        let none = fi.missing(dim, dstate);
        println!("| nheads | SR | alg | batch | copies x calls | ours µs | ours % | FI µs | FI % | FI/ours |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for &nheads in &opts.nheads {
            for &(rounds, alg, alg_name, _) in opts.variants.iter().map(|&i| &VARIANTS[i]) {
                if alg == Algorithm::Horizontal && (dim % 64 != 0 || dim > 256) {
                    println!(
                        "| {nheads} | - | {alg_name} | - | head dim {dim}: not taken | | | | | |"
                    );
                    continue;
                }
                for &batch in &opts.batches {
                    let sz = Sizes {
                        nheads,
                        batch,
                        dim,
                        dstate,
                    };
                    let mut s = setup(&stream, sz, opts.min_calls)?;
                    let us = time_config(&ctx, &stream, &mut s, rounds, alg, opts.soak_s)?;
                    let bytes = sz.bytes_per_call();
                    let gbps = bytes as f64 / (us * 1e-6) / 1e9;
                    let pct = 100.0 * gbps / copy_gbps;
                    let fi_rec = fi.flashinfer(rounds, &sz, alg_name);
                    let (fi_us, fi_pct, ratio) = match fi_rec {
                        Some((u, p)) => (
                            format!("{u:.2}"),
                            format!("{p:.0}%"),
                            format!("{:.2}", u / us),
                        ),
                        None => (none.into(), none.into(), none.into()),
                    };
                    let sr = if rounds == 0 {
                        "off".to_string()
                    } else {
                        format!("R={rounds}")
                    };
                    println!(
                        "| {nheads} | {sr} | {alg_name} | {batch} | {} x {} | {us:.2} | {pct:.0}% | {fi_us} | {fi_pct} | {ratio} |",
                        s.copies, s.calls
                    );
                    rows.push(json::Record {
                        nheads,
                        dim,
                        dstate,
                        philox_rounds: rounds,
                        algorithm: alg_name,
                        batch,
                        state_copies_rotated: s.copies,
                        calls_per_graph: s.calls,
                        us_median: json::round(us, 4),
                        bytes,
                        gbps: json::round(gbps, 1),
                        pct_of_copy_bw: json::round(pct, 3),
                        fi_us_median: fi_rec.map(|r| json::round(r.0, 4)),
                        fi_pct_of_copy_bw: fi_rec.map(|r| json::round(r.1, 3)),
                    });
                }
            }
        }
    }
    if let Some(path) = opts.json {
        let report = json::Report {
            copy_gbps: json::round(copy_gbps, 1),
            replays: REPLAYS,
            records: rows,
        };
        std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}
