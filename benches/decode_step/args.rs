//! `decode_step`'s command line (clap). Also compiled into `tests/bench_programs.rs`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::Parser;
use mamba_ssu::decode::ModelPreset;

/// The most `--steps` accepted (every step's time is kept in memory).
pub const MAX_STEPS: usize = 1_000_000;

/// What a run measures.
#[derive(Debug)]
pub struct Opts {
    pub batches: Vec<usize>,
    pub steps: usize,
    pub json: Option<PathBuf>,
    pub nvtx_only: bool,
    /// Tokens per sequence: 1 = decode step, more = speculative-decoding verify step.
    pub tokens: usize,
    /// The model shape (`--model`).
    pub model: &'static ModelPreset,
}

/// The decode-step benchmark: stock, prefetch, fused and fixed seeds in a simulated Nemotron-H
/// decode step (needs a GPU; without one it says so in one line).
#[derive(Parser, Debug)]
#[command(
    name = "decode_step",
    bin_name = "decode_step",
    args_override_self = true
)]
struct Args {
    /// Batch sizes, comma-separated [default: 1,2,4,8,16,32,64; with --quick 1,8,64]
    #[arg(long, value_name = "1,2,..", value_parser = parse_batches)]
    batch: Option<Batches>,
    /// Timed steps per configuration [default: 200; with --quick 50]
    #[arg(long, value_name = "N", value_parser = parse_steps)]
    steps: Option<usize>,
    /// Write the figures as JSON to PATH
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Fewer batches and steps (explicit --batch/--steps still win)
    #[arg(long)]
    quick: bool,
    /// Run one eager step per mode only (for `ncu --nvtx` range checks)
    #[arg(long)]
    nvtx_only: bool,
    /// Tokens per sequence: 1 = the decode step; 2..=16 = the verify step of speculative
    /// decoding (multi-token SSU, vLLM's varlen in-place form; 8 = 7 draft tokens)
    #[arg(long, value_name = "T", default_value_t = 1, value_parser = parse_tokens)]
    tokens: usize,
    /// The model shape: one of the presets of `mamba_ssu::decode::ModelPreset::ALL`
    #[arg(long, value_name = "NAME", default_value = ModelPreset::NEMOTRON_H_TP4.name, value_parser = model_names())]
    model: String,
    /// Passed by `cargo bench`; ignored
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Debug)]
struct Batches(Vec<usize>);

fn parse_batches(s: &str) -> Result<Batches, String> {
    let v = s
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad batch size `{t}`"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if v.contains(&0) {
        return Err("sizes must be >= 1".into());
    }
    Ok(Batches(v))
}

/// The preset names, each with its sizes as help.
fn model_names() -> PossibleValuesParser {
    PossibleValuesParser::new(ModelPreset::ALL.iter().map(|p| {
        PossibleValue::new(p.name).help(format!(
            "{}: {} layers x SSU {}x{}x{}, {} groups",
            p.title, p.layers, p.nheads, p.dim, p.dstate, p.ngroups
        ))
    }))
}

fn parse_tokens(s: &str) -> Result<usize, String> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err("expected 1..=16".into());
    }
    match s.parse::<usize>() {
        Ok(n) if (1..=16).contains(&n) => Ok(n),
        _ => Err("expected 1..=16".into()),
    }
}

fn parse_steps(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_STEPS).contains(&n) => Ok(n),
        _ => Err(format!("expected 1..={MAX_STEPS}")),
    }
}

/// Parses a command line (program name first, as `std::env::args_os()` gives it).
pub fn parse_from<I, T>(args: I) -> Result<Opts, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let a = Args::try_parse_from(args)?;
    // The parser admits the table's names only.
    let model = ModelPreset::find(&a.model).ok_or_else(|| {
        clap::Error::raw(
            clap::error::ErrorKind::InvalidValue,
            format!("unknown model {:?}\n", a.model),
        )
    })?;
    let (batches, steps) = if a.quick {
        (vec![1, 8, 64], 50)
    } else {
        (vec![1, 2, 4, 8, 16, 32, 64], 200)
    };
    Ok(Opts {
        batches: a.batch.map_or(batches, |b| b.0),
        steps: a.steps.unwrap_or(steps),
        json: a.json,
        nvtx_only: a.nvtx_only,
        tokens: a.tokens,
        model,
    })
}
