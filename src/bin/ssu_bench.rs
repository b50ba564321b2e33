//! `ssu_bench`: single-token SSU timings, measured like FlashInfer's recorded ones
//! (tests/data/flashinfer_ssu/timings.json, embedded) and printed side by side with them.
//!
//! Shapes (vLLM's Nemotron-H decode): fp16 state, bf16 x/B/C/dt/D/dt_bias, fp32 A, dim 64,
//! dstate 128, ngroups 8, no z, softplus, int32 indices; nheads 32 and 128; batch 1..256.
//! Variants: SR off (auto), SR with 5 and 10 Philox rounds (simple and vertical).
//!
//! Method: a CUDA graph of K back-to-back calls whose `state_batch_indices` rotate over enough
//! disjoint state copies that >= 192 MiB of other state is touched between two uses of a copy
//! (state from HBM); 2 warm-up replays, then the median of 15 replays timed with CUDA events,
//! divided by K. Bytes = state read + write + x, out, B, C, dt, A, D, dt_bias, indices;
//! bandwidth as % of a device-to-device copy of 1 GiB timed in the same run.
//!
//! Usage: `ssu_bench [--quick] [--nheads 32,128] [--batch 1,2,4] [--variants off,5s,10v]
//! [--calls K] [--soak SECS] [--json PATH] [--seed-sources]`. `--variants` picks among off (no SR), 5s, 5v,
//! 10s and 10v (rounds and layout; default all five); `--calls K` puts at least K calls in each
//! graph instead of 32 (the per-call time of a long graph includes any clock the GPU lowers
//! under sustained load). `--soak SECS` follows each timing with a sustained-load phase
//! (1.5 s, then SECS seconds of back-to-back replays, marked by `SOAK_STEADY` / `SOAK_END`
//! lines) and prints its µs per call: the steady time on a GPU that reaches its power limit;
//! `scripts/energy_soak.py` runs the binary and adds the board's energy per call.
//! `--seed-sources` instead compares, with 5 rounds and the auto layout, the seed read from a
//! pointer against the fused seed derived per call from a device generator state (as in a CUDA
//! graph) and against the chained fused path (a fused forward over the graph's calls).
//! Without a GPU it prints one line and exits 0.

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use half::{bf16, f16};
use mamba_ssu::prefetch::Prefetcher;
use mamba_ssu::ssu::{self, Algorithm, SeedSource, SsuArgs, Tensor, TensorMut};
use mamba_ssu::{Generator, GraphSeedState};

type Res<T> = Result<T, Box<dyn Error>>;

const FI_TIMINGS: &str = include_str!("../../tests/data/flashinfer_ssu/timings.json");
const DIM: usize = 64;
const DSTATE: usize = 128;
const NGROUPS: usize = 8;
const COLD_BYTES: usize = 192 << 20;
const MIN_CALLS: usize = 32;
const REPLAYS: usize = 15;
const WARMUPS: usize = 2;

// ---------------------------------------------------------------------------------------------
// A minimal JSON reader (serde_json is a dev-dependency only)
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool,
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn num(&self) -> Option<f64> {
        match self {
            Json::Num(n) => Some(*n),
            _ => None,
        }
    }
    fn str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Res<()> {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("json: expected '{}' at byte {}", c as char, self.i).into())
        }
    }
    fn value(&mut self) -> Res<Json> {
        self.ws();
        match self.s.get(self.i).copied() {
            Some(b'{') => {
                self.i += 1;
                let mut kv = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(kv));
                }
                loop {
                    self.ws();
                    let Json::Str(k) = self.value()? else {
                        return Err("json: object key".into());
                    };
                    self.eat(b':')?;
                    kv.push((k, self.value()?));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(kv));
                        }
                        _ => return Err(format!("json: bad object at {}", self.i).into()),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut v = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(v));
                }
                loop {
                    v.push(self.value()?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(v));
                        }
                        _ => return Err(format!("json: bad array at {}", self.i).into()),
                    }
                }
            }
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let c = *self.s.get(self.i).ok_or("json: open string")?;
                    self.i += 1;
                    match c {
                        b'"' => return Ok(Json::Str(out)),
                        b'\\' => {
                            let e = *self.s.get(self.i).ok_or("json: escape")?;
                            self.i += 1;
                            match e {
                                b'n' => out.push('\n'),
                                b't' => out.push('\t'),
                                b'u' => {
                                    let h = std::str::from_utf8(&self.s[self.i..self.i + 4])?;
                                    out.push(
                                        char::from_u32(u32::from_str_radix(h, 16)?).unwrap_or('?'),
                                    );
                                    self.i += 4;
                                }
                                other => out.push(other as char),
                            }
                        }
                        _ => {
                            // Copy a UTF-8 run verbatim.
                            let start = self.i - 1;
                            while self.i < self.s.len() && !matches!(self.s[self.i], b'"' | b'\\') {
                                self.i += 1;
                            }
                            out.push_str(std::str::from_utf8(&self.s[start..self.i])?);
                        }
                    }
                }
            }
            Some(b't') if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Json::Bool)
            }
            Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Json::Bool)
            }
            Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(Json::Null)
            }
            Some(_) => {
                let start = self.i;
                while self.i < self.s.len()
                    && matches!(
                        self.s[self.i],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i])?;
                Ok(Json::Num(
                    t.parse()
                        .map_err(|_| format!("json: number {t:?} at {start}"))?,
                ))
            }
            None => Err("json: unexpected end".into()),
        }
    }
}

fn parse_json(text: &str) -> Res<Json> {
    Parser {
        s: text.as_bytes(),
        i: 0,
    }
    .value()
}

/// FlashInfer's recorded (µs, % of copy bandwidth) for a configuration.
fn fi_record(fi: &Json, rounds: u32, nheads: usize, batch: usize, alg: &str) -> Option<(f64, f64)> {
    let Json::Arr(records) = fi.get("records")? else {
        return None;
    };
    records.iter().find_map(|r| {
        let ok = r.get("impl")?.str()?.starts_with("flashinfer")
            && r.get("philox_rounds")?.num()? as u32 == rounds
            && r.get("nheads")?.num()? as usize == nheads
            && r.get("batch")?.num()? as usize == batch
            && r.get("algorithm")?.str()? == alg;
        ok.then(|| Some((r.get("us_median")?.num()?, r.get("pct_of_copy_bw")?.num()?)))
            .flatten()
    })
}

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
    nheads: usize,
    batch: usize,
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

impl Setup {
    fn head_block(&self) -> usize {
        self.nheads * DIM * DSTATE
    }
    fn state_bytes_per_call(&self) -> usize {
        self.batch * self.head_block() * 2
    }
    fn small_bytes(&self) -> usize {
        let (b, h) = (self.batch, self.nheads);
        2 * (b * h * DIM * 2) // x, out
            + 2 * (b * NGROUPS * DSTATE * 2) // B, C
            + b * h * 2 // dt
            + h * 4 // A
            + 2 * (h * 2) // D, dt_bias
            + b * 4 // indices
    }
}

fn fill_bf16(n: usize, f: impl Fn(usize) -> f32) -> Vec<bf16> {
    (0..n).map(|i| bf16::from_f32(f(i))).collect()
}

fn setup(stream: &Arc<CudaStream>, nheads: usize, batch: usize, min_calls: usize) -> Res<Setup> {
    let per_call = batch * nheads * DIM * DSTATE * 2;
    let copies = COLD_BYTES / per_call + 2;
    let calls = copies * min_calls.div_ceil(copies);
    let slots = copies * batch;
    let state_elems = slots * nheads * DIM * DSTATE;
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
        nheads,
        batch,
        copies,
        calls,
        state: stream.clone_htod(&state_host)?,
        x: stream.clone_htod(&fill_bf16(batch * nheads * DIM, wave))?,
        b: stream.clone_htod(&fill_bf16(batch * NGROUPS * DSTATE, wave))?,
        c: stream.clone_htod(&fill_bf16(batch * NGROUPS * DSTATE, wave))?,
        dt: stream.clone_htod(&fill_bf16(batch * nheads, |i| wave(i) - 1.0))?,
        a: stream.clone_htod(
            &(0..nheads)
                .map(|i| -0.5 - wave(i).abs())
                .collect::<Vec<f32>>(),
        )?,
        d: stream.clone_htod(&fill_bf16(nheads, |i| 1.0 + wave(i) / 4.0))?,
        dt_bias: stream.clone_htod(&fill_bf16(nheads, |i| wave(i) / 4.0))?,
        out: stream.alloc_zeros(batch * nheads * DIM)?,
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
    let (b, h) = (s.batch, s.nheads);
    let slots = s.copies * b;
    let hb = s.head_block();
    let fused_seed = match &mut s.chain {
        Some((pf, gen)) if rounds > 0 => Some(pf.fused_seed(stream, gen)?),
        _ => None,
    };
    let mut args = SsuArgs {
        state: TensorMut::new(
            &mut s.state,
            &[slots, h, DIM, DSTATE],
            &[hb, DIM * DSTATE, DSTATE, 1],
        )?,
        x: Tensor::new(&s.x, &[b, h, DIM], &[h * DIM, DIM, 1])?,
        dt: Tensor::new(&s.dt, &[b, h, DIM], &[h, 1, 0])?,
        a: Tensor::new(&s.a, &[h, DIM, DSTATE], &[1, 0, 0])?,
        b: Tensor::new(&s.b, &[b, NGROUPS, DSTATE], &[NGROUPS * DSTATE, DSTATE, 1])?,
        c: Tensor::new(&s.c, &[b, NGROUPS, DSTATE], &[NGROUPS * DSTATE, DSTATE, 1])?,
        d: Some(Tensor::new(&s.d, &[h, DIM], &[1, 0])?),
        z: None,
        dt_bias: Some(Tensor::new(&s.dt_bias, &[h, DIM], &[1, 0])?),
        out: TensorMut::new(&mut s.out, &[b, h, DIM], &[h * DIM, DIM, 1])?,
        state_batch_indices: Some(Tensor::new(&s.indices[k % s.copies], &[b], &[1])?),
        dst_state_batch_indices: None,
        pad_slot_id: -1,
        dt_softplus: true,
        update_state: true,
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

struct Opts {
    nheads: Vec<usize>,
    batches: Vec<usize>,
    json: Option<String>,
    seed_sources: bool,
    /// Indices into VARIANTS.
    variants: Vec<usize>,
    min_calls: usize,
    /// `--soak SECS`: after each timing, a sustained-load phase of this many seconds.
    soak_s: Option<f64>,
}

/// The measured variants: Philox rounds (0: no SR), layout, and their names in the table and
/// on the command line.
const VARIANTS: [(u32, Algorithm, &str, &str); 5] = [
    (0, Algorithm::Auto, "auto", "off"),
    (5, Algorithm::Simple, "simple", "5s"),
    (5, Algorithm::Vertical, "vertical", "5v"),
    (10, Algorithm::Simple, "simple", "10s"),
    (10, Algorithm::Vertical, "vertical", "10v"),
];

fn parse_variants(s: &str) -> Res<Vec<usize>> {
    s.split(',')
        .map(|t| {
            VARIANTS
                .iter()
                .position(|v| v.3 == t.trim())
                .ok_or_else(|| format!("unknown variant {t:?} (off, 5s, 5v, 10s, 10v)").into())
        })
        .collect()
}

fn parse_list(s: &str) -> Res<Vec<usize>> {
    s.split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .map_err(|e| format!("bad number {t:?}: {e}").into())
        })
        .collect()
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Res<Opts> {
    let mut o = Opts {
        nheads: vec![32, 128],
        batches: vec![1, 2, 4, 8, 16, 32, 64, 128, 256],
        json: None,
        seed_sources: false,
        variants: (0..VARIANTS.len()).collect(),
        min_calls: MIN_CALLS,
        soak_s: None,
    };
    let mut quick = false;
    let (mut nh, mut bt) = (None, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--nheads" => nh = Some(parse_list(&args.next().ok_or("--nheads needs a value")?)?),
            "--batch" => bt = Some(parse_list(&args.next().ok_or("--batch needs a value")?)?),
            "--json" => o.json = Some(args.next().ok_or("--json needs a path")?),
            "--seed-sources" => o.seed_sources = true,
            "--variants" => {
                o.variants = parse_variants(&args.next().ok_or("--variants needs a value")?)?
            }
            "--calls" => {
                let v = parse_list(&args.next().ok_or("--calls needs a value")?)?;
                match v[..] {
                    [k] if k > 0 => o.min_calls = k,
                    _ => return Err("--calls needs one positive number".into()),
                }
            }
            "--soak" => {
                let v: f64 = args
                    .next()
                    .ok_or("--soak needs a value")?
                    .parse()
                    .map_err(|e| format!("bad --soak value: {e}"))?;
                if !(v > 0.0 && v <= 600.0) {
                    return Err("--soak needs seconds in (0, 600]".into());
                }
                o.soak_s = Some(v);
            }
            "-h" | "--help" => {
                println!(
                    "usage: ssu_bench [--quick] [--nheads 32,128] [--batch 1,2,4] [--variants off,5s,5v,10s,10v] [--calls K] [--soak SECS] [--json PATH] [--seed-sources]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if quick {
        o.nheads = vec![32];
        o.batches = vec![1, 16, 256];
    }
    if let Some(v) = nh {
        o.nheads = v;
    }
    if let Some(v) = bt {
        o.batches = v;
    }
    Ok(o)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("ssu_bench: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let opts = parse_args(std::env::args().skip(1))?;
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
    let fi = parse_json(FI_TIMINGS)?;
    let fi_copy = fi
        .get("copy_bandwidth_GBps_reference")
        .and_then(Json::num)
        .unwrap_or(f64::NAN);

    if opts.seed_sources {
        println!("| nheads | batch | pointer µs | fused (per call) µs | fused (chained) µs | per call / pointer | chained / pointer |");
        println!("|---|---|---|---|---|---|---|");
        for &nheads in &opts.nheads {
            for &batch in &opts.batches {
                let mut s = setup(&stream, nheads, batch, opts.min_calls)?;
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
        return Ok(());
    }
    let copy_gbps = copy_bandwidth(&ctx, &stream)?;
    println!(
        "device-to-device copy: {copy_gbps:.1} GB/s (read + write; FlashInfer's run: {fi_copy:.1})\n"
    );
    println!("| nheads | SR | alg | batch | copies x calls | ours µs | ours % | FI µs | FI % | FI/ours |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for &nheads in &opts.nheads {
        for &(rounds, alg, alg_name, _) in opts.variants.iter().map(|&i| &VARIANTS[i]) {
            for &batch in &opts.batches {
                let mut s = setup(&stream, nheads, batch, opts.min_calls)?;
                let us = time_config(&ctx, &stream, &mut s, rounds, alg, opts.soak_s)?;
                let bytes = 2 * s.state_bytes_per_call() + s.small_bytes();
                let gbps = bytes as f64 / (us * 1e-6) / 1e9;
                let pct = 100.0 * gbps / copy_gbps;
                let fi_rec = fi_record(&fi, rounds, nheads, batch, alg_name);
                let (fi_us, fi_pct, ratio) = match fi_rec {
                    Some((u, p)) => (
                        format!("{u:.2}"),
                        format!("{p:.0}%"),
                        format!("{:.2}", u / us),
                    ),
                    None => ("-".into(), "-".into(), "-".into()),
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
                rows.push(format!(
                    "{{\"nheads\": {nheads}, \"philox_rounds\": {rounds}, \"algorithm\": \"{alg_name}\", \
                     \"batch\": {batch}, \"state_copies_rotated\": {}, \"calls_per_graph\": {}, \
                     \"us_median\": {us:.4}, \"bytes\": {bytes}, \"GBps\": {gbps:.1}, \
                     \"pct_of_copy_bw\": {pct:.3}, \"fi_us_median\": {}, \"fi_pct_of_copy_bw\": {}}}",
                    s.copies,
                    s.calls,
                    fi_rec.map_or("null".into(), |r| format!("{:.4}", r.0)),
                    fi_rec.map_or("null".into(), |r| format!("{:.3}", r.1)),
                ));
            }
        }
    }
    if let Some(path) = opts.json {
        let text = format!(
            "{{\n  \"copy_bandwidth_GBps\": {copy_gbps:.1},\n  \"replays\": {REPLAYS},\n  \"records\": [\n    {}\n  ]\n}}\n",
            rows.join(",\n    ")
        );
        std::fs::write(&path, text)?;
        println!("\nwrote {path}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flashinfer_timings() {
        let fi = parse_json(FI_TIMINGS).unwrap();
        let (us, pct) = fi_record(&fi, 0, 32, 1, "simple").unwrap();
        assert_eq!(us, 2.6753);
        assert!((pct - 9.441191870150888).abs() < 1e-12);
        let (us, _) = fi_record(&fi, 10, 128, 256, "vertical").unwrap();
        assert!((us - 808.91).abs() < 0.01, "{us}");
        assert!(fi_record(&fi, 10, 64, 1, "simple").is_none());
        let n = match fi.get("records") {
            Some(Json::Arr(r)) => r.len(),
            _ => 0,
        };
        assert_eq!(n, 180);
    }

    #[test]
    fn rotation_touches_192_mib_between_reuses() {
        // Same rule as FlashInfer's rig: copies = floor(192 MiB / S) + 2, whole rotations of
        // at least 32 calls (checked against its recorded copies and calls).
        for (b, h, copies, calls) in [(1, 32, 386, 386), (16, 32, 26, 52), (256, 32, 3, 33)] {
            let per_call = b * h * DIM * DSTATE * 2;
            let c = COLD_BYTES / per_call + 2;
            assert_eq!(c, copies);
            assert_eq!(c * MIN_CALLS.div_ceil(c), calls);
            assert!((c - 1) * per_call >= COLD_BYTES);
        }
    }

    #[test]
    fn parses_soak_and_calls() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let o = parse_args(args("--soak 4.5 --calls 128 --variants 10s").into_iter()).unwrap();
        assert_eq!(o.soak_s, Some(4.5));
        assert_eq!(o.min_calls, 128);
        assert_eq!(o.variants, vec![3]);
        assert_eq!(parse_args(args("").into_iter()).unwrap().soak_s, None);
        for bad in [
            "--soak 0",
            "--soak -1",
            "--soak x",
            "--soak",
            "--soak 601",
            "--calls 0",
        ] {
            assert!(parse_args(args(bad).into_iter()).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_variant_names() {
        assert_eq!(parse_variants("off,10s,5v").unwrap(), vec![0, 3, 2]);
        assert!(parse_variants("10x").is_err());
        assert!(parse_variants("").is_err());
    }
}
