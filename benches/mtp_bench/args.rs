//! `mtp_bench`'s command line (clap). Also compiled into `tests/bench_programs.rs`.

use std::ffi::OsString;

use clap::Parser;

/// The two call forms measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Form {
    /// FlashInfer's recorded form: fixed length, the intermediate buffer.
    Dense,
    /// vLLM's: varlen, the 2-D index as read and dst, `num_accepted_tokens`.
    Varlen,
}

/// The benchmark's arguments.
#[derive(Parser, Debug)]
#[command(
    name = "mtp_bench",
    about = "Multi-token SSU timings next to FlashInfer's"
)]
pub struct Cli {
    /// Fewer sizes: 32 heads x batch 1, 8 and 128 heads x 64.
    #[arg(long)]
    pub quick: bool,
    /// Head counts.
    #[arg(long, value_delimiter = ',', default_value = "32,128", value_parser = positive)]
    pub nheads: Vec<usize>,
    /// Batch sizes (sequences).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64", value_parser = positive)]
    pub batch: Vec<usize>,
    /// Head dimensions (1..=65536); FlashInfer's timings are recorded at 64 only (its columns
    /// show — elsewhere).
    #[arg(long, value_delimiter = ',', default_value = "64", value_parser = size)]
    pub dim: Vec<usize>,
    /// State sizes (1..=65536; the kernels take 64, 128, 256); FlashInfer's timings are
    /// recorded at 128 only.
    #[arg(long, value_delimiter = ',', default_value = "128", value_parser = size)]
    pub dstate: Vec<usize>,
    /// Philox rounds (0 = no SR).
    #[arg(long, value_delimiter = ',', default_value = "0,5,10", value_parser = rounds)]
    pub rounds: Vec<u32>,
    /// Forms: dense, varlen.
    #[arg(long, value_delimiter = ',', default_value = "dense,varlen")]
    pub forms: Vec<Form>,
    /// Calls per graph (at least; more when the rotation needs them).
    #[arg(long, default_value_t = 16, value_parser = positive)]
    pub calls: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<String>,
    /// Ignored (`cargo bench` passes it).
    #[arg(long, hide = true)]
    pub bench: bool,
}

/// A decimal integer >= 1 (digits only: no sign).
fn positive(s: &str) -> Result<usize, String> {
    match s.trim() {
        t if !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit()) => match t.parse::<usize>() {
            Ok(n) if (1..=1 << 20).contains(&n) => Ok(n),
            _ => Err("expected 1..=1048576".into()),
        },
        _ => Err("expected a positive integer".into()),
    }
}

/// A head dimension or state size: a decimal integer in 1..=65536.
fn size(s: &str) -> Result<usize, String> {
    match positive(s) {
        Ok(n) if n <= 1 << 16 => Ok(n),
        _ => Err("expected 1..=65536".into()),
    }
}

/// Philox rounds: 0 (no SR) or 1..=10.
fn rounds(s: &str) -> Result<u32, String> {
    match s.trim() {
        t if !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit()) => match t.parse::<u32>() {
            Ok(n) if n <= 10 => Ok(n),
            _ => Err("expected 0..=10".into()),
        },
        _ => Err("expected 0..=10".into()),
    }
}

/// Parses a command line (program name first, as `std::env::args_os()` gives it).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    Cli::try_parse_from(args)
}
