//! `mamba-ssu`: the crate's command-line program (an example, so that its argument and JSON
//! crates are dev-dependencies only).
//!
//! ```text
//! cargo run --release --example mamba-ssu -- seeds --seed S --offset O --count N [--device]
//! cargo run --release --example mamba-ssu -- demo
//! cargo run --release --example mamba-ssu -- bench-seeds [--json PATH] [--replays N]
//! target/release/examples/mamba-ssu ARGS   (the built program, e.g. copied to a GPU host)
//! ```
//! - `seeds`: one JSON object of N torch-identical draws,
//!   `{"seed","offset","draws","offset_after"}` (on the CPU, or on the GPU with `--device`).
//!   S and O: u64s in decimal or 0x-hex, O a multiple of 4; N: 1..=16777216.
//! - `demo` (also with no command): draws seeds on the GPU, checks them against the CPU
//!   reference and times them; without a GPU, says so in one line and runs the CPU reference.
//! - `bench-seeds`: one batched draw of 40 against 40 single-seed launches, eagerly and as CUDA
//!   graphs (median of N replays, 1..=1000000, default 1000); `--json PATH` writes the figures.
//!
//! Exit codes: 0 success; 2 bad arguments (one line on stderr); 1 a failure while running (one
//! line on stderr). A closed stdout (broken pipe) ends the program with 1 and no message.

use std::error::Error;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaStream};
use mamba_ssu::philox::torch_seeds;
use mamba_ssu::{device, seeds, Generator, GraphSeedState};
use serde::Serialize;

type AnyResult<T> = std::result::Result<T, Box<dyn Error>>;

/// The most replays `bench-seeds` accepts (its samples are kept in memory).
const MAX_REPLAYS: usize = 1_000_000;

#[derive(Parser)]
#[command(
    name = "mamba-ssu",
    bin_name = "mamba-ssu",
    version,
    about = "Torch-identical batched seed draws on the GPU: print, check, time"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print one JSON object of N draws: {"seed","offset","draws","offset_after"}
    Seeds(SeedsArgs),
    /// Draw seeds on the GPU, check them against the CPU reference, time them (the default)
    Demo,
    /// Time one batched draw of 40 against 40 single-seed launches, eager and CUDA graph
    BenchSeeds(BenchSeedsArgs),
}

#[derive(Args)]
struct SeedsArgs {
    /// The generator's seed (decimal or 0x-hex)
    #[arg(long, value_parser = parse_u64)]
    seed: u64,
    /// The generator's offset (decimal or 0x-hex, a multiple of 4)
    #[arg(long, value_parser = parse_offset)]
    offset: u64,
    /// How many seeds to draw (1..=16777216)
    #[arg(long, value_parser = parse_count)]
    count: usize,
    /// Draw on the GPU (device 0) instead of the CPU
    #[arg(long)]
    device: bool,
}

#[derive(Args)]
struct BenchSeedsArgs {
    /// Write the figures as one JSON object to PATH
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Timed runs per mode, after 10 warm-ups (1..=1000000)
    #[arg(long, value_name = "N", default_value = "1000", value_parser = parse_replays)]
    replays: usize,
}

/// A u64 in decimal or as 0x-prefixed hex: digits only (no sign, no spaces, no `_`).
fn parse_u64(s: &str) -> Result<u64, String> {
    let (digits, radix) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (s, 10),
    };
    // `u64::from_str_radix` alone would take a leading `+`.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err("expected a u64 (decimal digits, or 0x and hex digits)".into());
    }
    u64::from_str_radix(digits, radix).map_err(|_| format!("more than a u64 holds ({})", u64::MAX))
}

fn parse_offset(s: &str) -> Result<u64, String> {
    let offset = parse_u64(s)?;
    if offset % 4 != 0 {
        return Err(format!("expected a multiple of 4, got {offset}"));
    }
    Ok(offset)
}

/// A whole number in `1..=max`.
fn parse_bounded(s: &str, max: usize) -> Result<usize, String> {
    let n = parse_u64(s).map_err(|_| format!("expected a whole number in 1..={max}"))?;
    match usize::try_from(n) {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("expected 1..={max}, got {n}")),
    }
}

fn parse_count(s: &str) -> Result<usize, String> {
    parse_bounded(s, seeds::MAX_SEEDS_PER_DRAW)
}

fn parse_replays(s: &str) -> Result<usize, String> {
    parse_bounded(s, MAX_REPLAYS)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let mut out = io::stdout().lock();
    let result = match cli.command.unwrap_or(Command::Demo) {
        Command::Seeds(a) => cmd_seeds(&mut out, &a),
        Command::Demo => cmd_demo(&mut out),
        Command::BenchSeeds(a) => cmd_bench_seeds(&mut out, &a),
    }
    .and_then(|()| Ok(out.flush()?));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Whoever read stdout stopped reading: nothing to say, and nowhere to say it.
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::FAILURE,
        Err(e) => {
            let _ = writeln!(io::stderr(), "mamba-ssu: {}", one_line(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

/// `--help` and `--version` print and exit 0; any other argument error is one line and 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    // clap's message is its first paragraph (without the `error: ` prefix); usage and tips follow.
    let text = e.render().to_string();
    let paragraph: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let msg = paragraph.join(" ");
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    let _ = writeln!(io::stderr(), "mamba-ssu: {msg} (see mamba-ssu --help)");
    ExitCode::from(2)
}

fn one_line(msg: &str) -> String {
    let lines: Vec<&str> = msg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join("; ")
}

fn is_broken_pipe(e: &(dyn Error + 'static)) -> bool {
    e.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}

/// `seeds`' output line.
#[derive(Serialize)]
struct Draws {
    seed: u64,
    offset: u64,
    draws: Vec<u64>,
    offset_after: u64,
}

fn cmd_seeds(out: &mut impl Write, a: &SeedsArgs) -> AnyResult<()> {
    let mut gen = Generator::new(a.seed, a.offset)?;
    let n = a.count;
    let draws: Vec<u64> = if a.device {
        let ctx = device::open(0)?;
        let stream = ctx.new_stream()?;
        let mut buf = stream.alloc_zeros::<i64>(n)?;
        seeds::draw_from(&stream, &mut gen, &mut buf, n)?;
        stream.clone_dtoh(&buf)?.iter().map(|&v| v as u64).collect()
    } else {
        gen.draw_cpu(n)
    };
    let line = Draws {
        seed: a.seed,
        offset: a.offset,
        draws,
        offset_after: gen.offset(),
    };
    writeln!(out, "{}", serde_json::to_string(&line)?)?;
    Ok(())
}

/// The headline program: draws seeds on the GPU, checks them against the CPU reference, and
/// times one batched draw of 40 against 40 single-seed launches. Without a GPU, says so in one
/// line and runs the CPU reference instead.
fn cmd_demo(out: &mut impl Write) -> AnyResult<()> {
    let ctx = match device::open(0) {
        Ok(ctx) => ctx,
        Err(e) if e.is_no_gpu() => {
            writeln!(
                out,
                "no CUDA GPU here ({e}); running the CPU reference only"
            )?;
            let t = std::time::Instant::now();
            let mut gen = Generator::new(42, 0)?;
            let draws = gen.draw_cpu(40);
            writeln!(
                out,
                "CPU: 40 torch-identical seeds from (seed 42, offset 0) in {:.1} us; first {:?}; offset after {}",
                t.elapsed().as_secs_f64() * 1e6,
                &draws[..4],
                gen.offset()
            )?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let stream = ctx.new_stream()?;
    writeln!(out, "device: {} ({} SMs)", ctx.name()?, sm_count(&ctx)?)?;
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
        let mut buf = stream.alloc_zeros::<i64>(n)?;
        seeds::draw_seeds(&stream, &mut buf, n, seed, offset)?;
        let got = stream.clone_dtoh(&buf)?;
        let want = torch_seeds(seed, offset, n);
        let bad = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| **g as u64 != **w)
            .count();
        writeln!(
            out,
            "seed {seed:#018x} offset {offset:#018x} n {n:>6}: {} ",
            if bad == 0 {
                "equal to the CPU reference".to_string()
            } else {
                format!("{bad} MISMATCHES")
            }
        )?;
        if bad != 0 {
            return Err(format!("{bad} seeds differ from the CPU reference").into());
        }
        total += n;
    }
    writeln!(
        out,
        "{total} seeds checked on the GPU: all equal to torch's formula"
    )?;
    let r = bench_seeds(&ctx, &stream, 200)?;
    r.print(out)?;
    Ok(())
}

fn sm_count(ctx: &Arc<CudaContext>) -> AnyResult<i32> {
    Ok(ctx.attribute(
        cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    )?)
}

/// Writes an f64 rounded to 3 decimals (the precision of the timings).
fn three_decimals<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((x * 1e3).round() / 1e3)
}

/// Medians of the seed benchmark, microseconds per forward of 40 seeds; `--json`'s object.
#[derive(Serialize)]
struct SeedBench {
    device: String,
    seeds_per_forward: usize,
    replays: usize,
    #[serde(serialize_with = "three_decimals")]
    eager_single_us: f64,
    #[serde(serialize_with = "three_decimals")]
    eager_batched_us: f64,
    #[serde(serialize_with = "three_decimals")]
    graph_single_us: f64,
    #[serde(serialize_with = "three_decimals")]
    graph_batched_us: f64,
}

impl SeedBench {
    fn print(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(
            out,
            "\n40 seeds per forward on {} (median of {} runs, CUDA events):",
            self.device, self.replays
        )?;
        writeln!(
            out,
            "| mode | 40 single-seed launches | one batched launch | ratio |"
        )?;
        writeln!(out, "|---|---|---|---|")?;
        writeln!(
            out,
            "| eager | {:.2} us | {:.2} us | {:.1}x |",
            self.eager_single_us,
            self.eager_batched_us,
            self.eager_single_us / self.eager_batched_us
        )?;
        writeln!(
            out,
            "| CUDA graph | {:.2} us | {:.2} us | {:.1}x |",
            self.graph_single_us,
            self.graph_batched_us,
            self.graph_single_us / self.graph_batched_us
        )?;
        writeln!(
            out,
            "(stock torch on an H200: about 70 us per graph replay of 40 single draws, 1.75 us per draw)"
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
) -> AnyResult<SeedBench> {
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
    })?;
    let eager_batched = time_us(ctx, stream, runs, || {
        seeds::draw_from(stream, &mut gen, &mut out, N)?;
        Ok(())
    })?;

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
    let single_graph = capture(&mut state, &mut out, false)?;
    single_graph.upload()?;
    let graph_single = time_us(ctx, stream, runs, || Ok(single_graph.launch()?))?;
    let batched_graph = capture(&mut state, &mut out, true)?;
    batched_graph.upload()?;
    let graph_batched = time_us(ctx, stream, runs, || Ok(batched_graph.launch()?))?;

    // The replayed values are checked too: prepare, replay, compare with the CPU.
    state.prepare_replay(stream, &mut gen)?;
    let before = gen.offset() - 4 * N as u64;
    batched_graph.launch()?;
    let got: Vec<u64> = stream.clone_dtoh(&out)?.iter().map(|&v| v as u64).collect();
    if got != torch_seeds(gen.seed(), before, N) {
        return Err("graph replay values differ from the CPU reference".into());
    }
    Ok(SeedBench {
        device: ctx.name()?,
        seeds_per_forward: N,
        replays: runs,
        eager_single_us: eager_single,
        eager_batched_us: eager_batched,
        graph_single_us: graph_single,
        graph_batched_us: graph_batched,
    })
}

fn cmd_bench_seeds(out: &mut impl Write, a: &BenchSeedsArgs) -> AnyResult<()> {
    let ctx = match device::open(0) {
        Ok(c) => c,
        Err(e) if e.is_no_gpu() => {
            writeln!(out, "no CUDA GPU here ({e}); the seed benchmark needs one")?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let stream = ctx.new_stream()?;
    let r = bench_seeds(&ctx, &stream, a.replays)?;
    // The file first: a reader that closes stdout early does not lose it.
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string(&r)? + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    r.print(out)?;
    Ok(())
}
