//! The JSON that `decode_step --json PATH` writes (read by `scripts/plot_decode_step.py`).
//! Also compiled into `tests/bench_programs.rs`.

use std::collections::BTreeMap;

use mamba_ssu::decode::DecodeShape;
use serde::Serialize;

/// The whole file: the model preset and its shapes, then one row per batch size.
#[derive(Serialize)]
pub struct Report {
    pub device: String,
    /// The model preset (`decode_step --model`, `mamba_ssu::decode::ModelPreset`).
    pub model: String,
    pub steps: usize,
    pub layers: usize,
    pub nheads: usize,
    pub dim: usize,
    pub dstate: usize,
    pub ngroups: usize,
    pub philox_rounds: u32,
    /// Tokens per sequence (1: decode step; more: verify step, multi-token SSU).
    pub tokens: usize,
    pub rows: Vec<Row>,
}

impl Report {
    /// A report of `steps` timed steps per configuration at `shape`'s sizes (batch aside),
    /// those of the preset `model`.
    pub fn new(device: String, steps: usize, model: &str, shape: &DecodeShape) -> Self {
        Self {
            device,
            model: model.to_string(),
            steps,
            layers: shape.layers,
            nheads: shape.nheads,
            dim: shape.dim,
            dstate: shape.dstate,
            ngroups: shape.ngroups,
            philox_rounds: shape.philox_rounds,
            tokens: shape.tokens,
            rows: Vec::new(),
        }
    }
}

/// One batch size: step-time medians per variant (µs, 3 decimals) and the seed overhead
/// removed (%, 2 decimals).
#[derive(Serialize)]
pub struct Row {
    pub batch: usize,
    pub eager_us: BTreeMap<&'static str, f64>,
    pub graph_us: BTreeMap<&'static str, f64>,
    pub graph_overhead_removed_pct: Removed,
    pub graph_overhead_removed_paired_pct: Removed,
}

/// Seed overhead removed per variant, in %; `null` where undefined (stock not above fixed).
#[derive(Serialize)]
pub struct Removed {
    pub prefetch: f64,
    #[serde(rename = "prefetch-branch")]
    pub prefetch_branch: f64,
    pub fused: f64,
    #[serde(rename = "fused-per-call")]
    pub fused_per_call: f64,
    /// The counter mode, against counter-stock.
    pub counter: f64,
}

impl Removed {
    /// `pct(label)` for each variant, rounded to 2 decimals.
    pub fn from_fn(pct: impl Fn(&str) -> f64) -> Self {
        Self {
            prefetch: round(pct("prefetch"), 2),
            prefetch_branch: round(pct("prefetch-branch"), 2),
            fused: round(pct("fused"), 2),
            fused_per_call: round(pct("fused-per-call"), 2),
            counter: round(pct("counter"), 2),
        }
    }
}

/// `x` rounded to `decimals` decimals (NaN stays NaN and is written as `null`).
pub fn round(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

/// Every value of `m` rounded to `decimals` decimals.
pub fn rounded(m: &BTreeMap<&'static str, f64>, decimals: i32) -> BTreeMap<&'static str, f64> {
    m.iter().map(|(&k, &v)| (k, round(v, decimals))).collect()
}
