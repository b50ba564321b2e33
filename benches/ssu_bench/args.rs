//! `ssu_bench`'s command line (clap) and the variants it measures. Also compiled into
//! `tests/bench_programs.rs`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;
use mamba_ssu::ssu::Algorithm;

use super::rig::{DIM, DSTATE, MIN_CALLS};

/// The most `--calls` accepted (each call is one node of the captured graph).
pub const MAX_CALLS: usize = 1_000_000;

/// The largest `--dim` and `--dstate` accepted (the kernels' own limits are the library's to
/// check: dstate 64, 128 or 256).
pub const MAX_DIM: usize = 1 << 16;

/// The measured variants: Philox rounds (0: no SR), layout, and their names in the table and
/// on the command line. The horizontal ones (FlashInfer's horizontal mapping, head dims that
/// are a multiple of 64 up to 256; other dims skip them) only when asked for.
pub const VARIANTS: [(u32, Algorithm, &str, &str); 8] = [
    (0, Algorithm::Auto, "auto", "off"),
    (5, Algorithm::Simple, "simple", "5s"),
    (5, Algorithm::Vertical, "vertical", "5v"),
    (10, Algorithm::Simple, "simple", "10s"),
    (10, Algorithm::Vertical, "vertical", "10v"),
    (0, Algorithm::Horizontal, "horizontal", "offh"),
    (5, Algorithm::Horizontal, "horizontal", "5h"),
    (10, Algorithm::Horizontal, "horizontal", "10h"),
];

/// The variants measured without `--variants`: the first five.
pub const DEFAULT_VARIANTS: usize = 5;

/// What a run measures.
#[derive(Debug)]
pub struct Opts {
    pub nheads: Vec<usize>,
    pub batches: Vec<usize>,
    /// Head dimensions (`--dim`).
    pub dims: Vec<usize>,
    /// State sizes (`--dstate`).
    pub dstates: Vec<usize>,
    pub json: Option<PathBuf>,
    pub seed_sources: bool,
    /// Indices into VARIANTS.
    pub variants: Vec<usize>,
    pub min_calls: usize,
    /// `--soak SECS`: after each timing, a sustained-load phase of this many seconds.
    pub soak_s: Option<f64>,
}

/// Single-token SSU timings next to FlashInfer's recorded ones (needs a GPU; without one it
/// says so in one line).
#[derive(Parser, Debug)]
#[command(name = "ssu_bench", bin_name = "ssu_bench", args_override_self = true)]
struct Args {
    /// nheads 32, batches 1,16,256 (explicit --nheads/--batch still win)
    #[arg(long)]
    quick: bool,
    /// Head counts, comma-separated [default: 32,128]
    #[arg(long, value_name = "32,128", value_parser = parse_list)]
    nheads: Option<List>,
    /// Batch sizes, comma-separated [default: 1,2,4,..,256]
    #[arg(long, value_name = "1,2,4", value_parser = parse_list)]
    batch: Option<List>,
    /// Head dimensions, comma-separated (1..=65536) [default: 64]; FlashInfer's timings are
    /// recorded at dim 64 only (its columns show — elsewhere)
    #[arg(long, value_name = "64,80", value_parser = parse_size)]
    dim: Option<List>,
    /// State sizes, comma-separated (1..=65536; the kernels take 64, 128, 256) [default: 128];
    /// FlashInfer's timings are recorded at dstate 128 only
    #[arg(long, value_name = "128", value_parser = parse_size)]
    dstate: Option<List>,
    /// Variants among off (no SR), 5s, 5v, 10s, 10v, offh, 5h, 10h (rounds and layout; h:
    /// horizontal) [default: off,5s,5v,10s,10v]
    #[arg(long, value_name = "off,5s,..", value_parser = parse_variants)]
    variants: Option<List>,
    /// At least K calls in each graph [default: 32]
    #[arg(long, value_name = "K", value_parser = parse_calls)]
    calls: Option<usize>,
    /// After each timing, 1.5 s and then SECS seconds (0 < SECS <= 600) of back-to-back
    /// replays, between SOAK_STEADY and SOAK_END lines
    #[arg(long, value_name = "SECS", value_parser = parse_soak)]
    soak: Option<f64>,
    /// Write the records as JSON to PATH
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Compare seed sources instead (pointer, fused per call, chained fused; 5 rounds, auto)
    #[arg(long)]
    seed_sources: bool,
    /// Passed by `cargo bench`; ignored
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Debug)]
pub struct List(pub Vec<usize>);

/// Variant names (`off,10s`) as indices into [`VARIANTS`].
pub fn parse_variants(s: &str) -> Result<List, String> {
    s.split(',')
        .map(|t| {
            VARIANTS
                .iter()
                .position(|v| v.3 == t.trim())
                .ok_or_else(|| {
                    format!("unknown variant {t:?} (off, 5s, 5v, 10s, 10v, offh, 5h, 10h)")
                })
        })
        .collect::<Result<_, _>>()
        .map(List)
}

/// A comma-separated list of positive numbers.
fn parse_list(s: &str) -> Result<List, String> {
    s.split(',')
        .map(|t| match t.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            Ok(_) => Err("sizes must be >= 1".to_string()),
            Err(e) => Err(format!("bad number {t:?}: {e}")),
        })
        .collect::<Result<_, _>>()
        .map(List)
}

/// A comma-separated list of numbers in 1..=[`MAX_DIM`].
fn parse_size(s: &str) -> Result<List, String> {
    let l = parse_list(s)?;
    match l.0.iter().find(|&&n| n > MAX_DIM) {
        Some(n) => Err(format!("{n}: expected 1..={MAX_DIM}")),
        None => Ok(l),
    }
}

fn parse_calls(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(k) if (1..=MAX_CALLS).contains(&k) => Ok(k),
        _ => Err(format!("expected one number in 1..={MAX_CALLS}")),
    }
}

fn parse_soak(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(v > 0.0 && v <= 600.0) {
        return Err("expected seconds in (0, 600]".into());
    }
    Ok(v)
}

/// Parses a command line (program name first, as `std::env::args_os()` gives it).
pub fn parse_from<I, T>(args: I) -> Result<Opts, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let a = Args::try_parse_from(args)?;
    let (nheads, batches) = if a.quick {
        (vec![32], vec![1, 16, 256])
    } else {
        (vec![32, 128], vec![1, 2, 4, 8, 16, 32, 64, 128, 256])
    };
    Ok(Opts {
        nheads: a.nheads.map_or(nheads, |l| l.0),
        batches: a.batch.map_or(batches, |l| l.0),
        dims: a.dim.map_or_else(|| vec![DIM], |l| l.0),
        dstates: a.dstate.map_or_else(|| vec![DSTATE], |l| l.0),
        json: a.json,
        seed_sources: a.seed_sources,
        variants: a
            .variants
            .map_or_else(|| (0..DEFAULT_VARIANTS).collect(), |l| l.0),
        min_calls: a.calls.unwrap_or(MIN_CALLS),
        soak_s: a.soak,
    })
}
