//! `mamba-ssu`: the crate's command-line program.
//!
//! ```text
//! mamba-ssu seeds --seed S --offset O --count N [--device]   one JSON object of N draws
//! mamba-ssu demo                                            draw seeds on the GPU, check, time
//! mamba-ssu bench-seeds [--json PATH] [--replays N]          batched vs single-seed draws
//! ```
//! Bad arguments: one line on stderr and exit code 2.

use std::process::ExitCode;
use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaStream};
use mamba_ssu::philox::torch_seeds;
use mamba_ssu::{device, seeds, Generator, GraphSeedState};

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "usage: mamba-ssu seeds --seed S --offset O --count N [--device] | \
mamba-ssu demo | mamba-ssu bench-seeds [--json PATH] [--replays N]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("seeds") => cmd_seeds(&args[1..]),
        Some("demo") | None => cmd_demo(),
        Some("bench-seeds") => cmd_bench_seeds(&args[1..]),
        Some("-h") | Some("--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(CliError::Usage(format!("unknown command `{other}`"))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(msg)) => {
            eprintln!("mamba-ssu: {msg} (see mamba-ssu --help)");
            ExitCode::from(2)
        }
        Err(CliError::Failed(msg)) => {
            eprintln!("mamba-ssu: {msg}");
            ExitCode::from(1)
        }
    }
}

enum CliError {
    /// Bad arguments: exit code 2.
    Usage(String),
    /// A failure while running: exit code 1.
    Failed(String),
}

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::Failed(e.to_string())
    }
}

/// Parses a u64 given in decimal or as 0x-prefixed hex.
fn parse_u64(name: &str, s: &str) -> Result<u64, CliError> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse::<u64>(),
    };
    parsed.map_err(|_| {
        CliError::Usage(format!(
            "{name}: expected a u64 (decimal or 0x-hex), got `{s}`"
        ))
    })
}

/// Options of the form `--name value` and `--flag`.
struct Opts {
    pairs: Vec<(String, Option<String>)>,
}

impl Opts {
    fn parse(args: &[String], flags: &[&str], valued: &[&str]) -> Result<Self, CliError> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if flags.contains(&a.as_str()) {
                pairs.push((a.clone(), None));
            } else if valued.contains(&a.as_str()) {
                let v = it
                    .next()
                    .ok_or_else(|| CliError::Usage(format!("{a}: missing value")))?;
                pairs.push((a.clone(), Some(v.clone())));
            } else {
                return Err(CliError::Usage(format!("unexpected argument `{a}`")));
            }
        }
        for (i, (k, _)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|(k2, _)| k2 == k) {
                return Err(CliError::Usage(format!("{k} given twice")));
            }
        }
        Ok(Self { pairs })
    }

    fn value(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }

    fn flag(&self, name: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == name)
    }
}

fn cmd_seeds(args: &[String]) -> Result<(), CliError> {
    let o = Opts::parse(args, &["--device"], &["--seed", "--offset", "--count"])?;
    let get = |name: &str| {
        o.value(name)
            .ok_or_else(|| CliError::Usage(format!("{name} is required")))
            .and_then(|v| parse_u64(name, v))
    };
    let seed = get("--seed")?;
    let offset = get("--offset")?;
    let count = get("--count")?;
    if count == 0 || count > seeds::MAX_SEEDS_PER_DRAW as u64 {
        return Err(CliError::Usage(format!(
            "--count: expected 1..={}, got {count}",
            seeds::MAX_SEEDS_PER_DRAW
        )));
    }
    let mut gen = Generator::new(seed, offset).map_err(|_| {
        CliError::Usage(format!("--offset: expected a multiple of 4, got {offset}"))
    })?;
    let n = count as usize;
    let draws: Vec<u64> = if o.flag("--device") {
        let ctx = device::open(0)?;
        let stream = ctx.new_stream()?;
        let mut out = stream.alloc_zeros::<i64>(n)?;
        seeds::draw_from(&stream, &mut gen, &mut out, n)?;
        stream.clone_dtoh(&out)?.iter().map(|&v| v as u64).collect()
    } else {
        gen.draw_cpu(n)
    };
    let list: Vec<String> = draws.iter().map(u64::to_string).collect();
    println!(
        "{{\"seed\":{seed},\"offset\":{offset},\"draws\":[{}],\"offset_after\":{}}}",
        list.join(","),
        gen.offset()
    );
    Ok(())
}

/// The headline program: draws seeds on the GPU, checks them against the CPU reference, and
/// times one batched draw of 40 against 40 single-seed launches. Without a GPU, says so in one
/// line and runs the CPU reference instead.
fn cmd_demo() -> Result<(), CliError> {
    let ctx = match device::open(0) {
        Ok(ctx) => ctx,
        Err(e) if e.is_no_gpu() => {
            println!("no CUDA GPU here ({e}); running the CPU reference only");
            let t = std::time::Instant::now();
            let mut gen = Generator::new(42, 0)?;
            let draws = gen.draw_cpu(40);
            println!(
                "CPU: 40 torch-identical seeds from (seed 42, offset 0) in {:.1} us; first {:?}; offset after {}",
                t.elapsed().as_secs_f64() * 1e6,
                &draws[..4],
                gen.offset()
            );
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let stream = ctx.new_stream()?;
    println!("device: {} ({} SMs)", ctx.name()?, sm_count(&ctx)?);
    let cases: [(u64, u64, usize); 6] = [
        (42, 0, 40),
        (0xDEAD_BEEF, 4000, 1000),
        (u64::MAX, (1 << 34) - 4 * 100, 65536),
        (1 << 32, 1 << 62, 40),
        (2024, 12, 40),
        (7, u64::MAX - 3 - 4 * 1000, 1000),
    ];
    let mut total = 0usize;
    for (seed, offset, n) in cases {
        let mut out = stream.alloc_zeros::<i64>(n)?;
        seeds::draw_seeds(&stream, &mut out, n, seed, offset)?;
        let got = stream.clone_dtoh(&out)?;
        let want = torch_seeds(seed, offset, n);
        let bad = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| **g as u64 != **w)
            .count();
        println!(
            "seed {seed:#018x} offset {offset:#018x} n {n:>6}: {} ",
            if bad == 0 {
                "equal to the CPU reference".to_string()
            } else {
                format!("{bad} MISMATCHES")
            }
        );
        if bad != 0 {
            return Err(CliError::Failed(format!(
                "{bad} seeds differ from the CPU reference"
            )));
        }
        total += n;
    }
    println!("{total} seeds checked on the GPU: all equal to torch's formula");
    let r = bench_seeds(&ctx, &stream, 200)?;
    r.print();
    Ok(())
}

fn sm_count(ctx: &Arc<CudaContext>) -> Result<i32, CliError> {
    Ok(ctx.attribute(
        cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    )?)
}

/// Medians of the seed benchmark, microseconds per forward of 40 seeds.
struct SeedBench {
    device: String,
    replays: usize,
    eager_single_us: f64,
    eager_batched_us: f64,
    graph_single_us: f64,
    graph_batched_us: f64,
}

impl SeedBench {
    fn print(&self) {
        println!(
            "\n40 seeds per forward on {} (median of {} runs, CUDA events):",
            self.device, self.replays
        );
        println!("| mode | 40 single-seed launches | one batched launch | ratio |");
        println!("|---|---|---|---|");
        println!(
            "| eager | {:.2} us | {:.2} us | {:.1}x |",
            self.eager_single_us,
            self.eager_batched_us,
            self.eager_single_us / self.eager_batched_us
        );
        println!(
            "| CUDA graph | {:.2} us | {:.2} us | {:.1}x |",
            self.graph_single_us,
            self.graph_batched_us,
            self.graph_single_us / self.graph_batched_us
        );
        println!(
            "(stock torch on an H200: about 70 us per graph replay of 40 single draws, 1.75 us per draw)"
        );
    }

    fn json(&self) -> String {
        format!(
            "{{\"device\":\"{}\",\"seeds_per_forward\":40,\"replays\":{},\"eager_single_us\":{:.3},\"eager_batched_us\":{:.3},\"graph_single_us\":{:.3},\"graph_batched_us\":{:.3}}}",
            self.device,
            self.replays,
            self.eager_single_us,
            self.eager_batched_us,
            self.graph_single_us,
            self.graph_batched_us
        )
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Times `work` between two timing events on `stream`, `runs` times after 10 warm-ups;
/// returns the median in microseconds.
fn time_us(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    runs: usize,
    mut work: impl FnMut() -> AnyResult<()>,
) -> AnyResult<f64> {
    let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let stop = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    for _ in 0..10 {
        work()?;
    }
    stream.synchronize()?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        start.record(stream)?;
        work()?;
        stop.record(stream)?;
        stop.synchronize()?;
        samples.push(f64::from(start.elapsed_ms(&stop)?) * 1000.0);
    }
    Ok(median(samples))
}

fn bench_seeds(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    runs: usize,
) -> Result<SeedBench, CliError> {
    const N: usize = 40;
    // SAFETY: all buffers below are used on `stream` only.
    unsafe { ctx.disable_event_tracking() };
    let mut out = stream.alloc_zeros::<i64>(N)?;
    let mut state = GraphSeedState::new(stream)?;
    let mut gen = Generator::new(42, 0)?;

    let eager_single = time_us(ctx, stream, runs, || {
        for k in 0..N {
            let offset = gen.reserve(1);
            seeds::draw_seeds(stream, &mut out.slice_mut(k..k + 1), 1, gen.seed(), offset)?;
        }
        Ok(())
    })
    .map_err(|e| CliError::Failed(e.to_string()))?;
    let eager_batched = time_us(ctx, stream, runs, || {
        seeds::draw_from(stream, &mut gen, &mut out, N)?;
        Ok(())
    })
    .map_err(|e| CliError::Failed(e.to_string()))?;

    // Graphs: 40 graph-safe single-seed draws vs one graph-safe batched draw. Each replay is
    // preceded (outside the timed region's graph) by the state write, as torch does.
    let capture = |state: &mut GraphSeedState,
                   out: &mut cudarc::driver::CudaSlice<i64>,
                   batched: bool|
     -> AnyResult<cudarc::driver::CudaGraph> {
        state.reset_capture();
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        if batched {
            let o = state.capture_offsets(N as u64);
            seeds::draw_seeds_graphsafe(stream, out, N, state, o)?;
        } else {
            for k in 0..N {
                let o = state.capture_offsets(1);
                seeds::draw_seeds_graphsafe(stream, &mut out.slice_mut(k..k + 1), 1, state, o)?;
            }
        }
        Ok(stream
            .end_capture(CUgraphInstantiate_flags(0))?
            .ok_or("capture produced no graph")?)
    };
    let single_graph =
        capture(&mut state, &mut out, false).map_err(|e| CliError::Failed(e.to_string()))?;
    single_graph.upload()?;
    let graph_single = time_us(ctx, stream, runs, || Ok(single_graph.launch()?))
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let batched_graph =
        capture(&mut state, &mut out, true).map_err(|e| CliError::Failed(e.to_string()))?;
    batched_graph.upload()?;
    let graph_batched = time_us(ctx, stream, runs, || Ok(batched_graph.launch()?))
        .map_err(|e| CliError::Failed(e.to_string()))?;

    // The replayed values are checked too: prepare, replay, compare with the CPU.
    state.prepare_replay(stream, &mut gen)?;
    let before = gen.offset() - 4 * N as u64;
    batched_graph.launch()?;
    let got: Vec<u64> = stream.clone_dtoh(&out)?.iter().map(|&v| v as u64).collect();
    if got != torch_seeds(gen.seed(), before, N) {
        return Err(CliError::Failed(
            "graph replay values differ from the CPU reference".into(),
        ));
    }
    Ok(SeedBench {
        device: ctx.name()?,
        replays: runs,
        eager_single_us: eager_single,
        eager_batched_us: eager_batched,
        graph_single_us: graph_single,
        graph_batched_us: graph_batched,
    })
}

fn cmd_bench_seeds(args: &[String]) -> Result<(), CliError> {
    let o = Opts::parse(args, &[], &["--json", "--replays"])?;
    let runs = match o.value("--replays") {
        Some(v) => parse_u64("--replays", v)? as usize,
        None => 1000,
    };
    if runs == 0 {
        return Err(CliError::Usage("--replays: expected at least 1".into()));
    }
    let ctx = match device::open(0) {
        Ok(c) => c,
        Err(e) if e.is_no_gpu() => {
            println!("no CUDA GPU here ({e}); the seed benchmark needs one");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let stream = ctx.new_stream()?;
    let r = bench_seeds(&ctx, &stream, runs)?;
    r.print();
    if let Some(path) = o.value("--json") {
        std::fs::write(path, r.json() + "\n")?;
    }
    Ok(())
}
