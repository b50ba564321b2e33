//! The JSON of `ssu_bench`: FlashInfer's recorded timings, which it reads
//! (`tests/data/flashinfer_ssu/timings.json`, embedded), and the records it writes with
//! `--json PATH` (read by `scripts/ssu_table.py`). Also compiled into `tests/bench_programs.rs`.

use serde::{Deserialize, Serialize};

/// FlashInfer's recorded timings, embedded.
pub const FI_TIMINGS: &str = include_str!("../../tests/data/flashinfer_ssu/timings.json");

/// The part of timings.json that is read.
#[derive(Deserialize)]
pub struct Recorded {
    /// The copy bandwidth (GB/s, read + write) measured in FlashInfer's run.
    #[serde(rename = "copy_bandwidth_GBps_reference")]
    pub copy_gbps: Option<f64>,
    pub records: Vec<RecordedRun>,
}

/// One recorded configuration (other fields of the file are ignored).
#[derive(Deserialize)]
pub struct RecordedRun {
    /// `flashinfer-<version>` or another implementation.
    #[serde(rename = "impl")]
    pub implementation: String,
    pub philox_rounds: u32,
    pub nheads: usize,
    pub batch: usize,
    pub algorithm: String,
    pub us_median: f64,
    pub pct_of_copy_bw: f64,
}

impl Recorded {
    /// The embedded timings.json.
    pub fn embedded() -> serde_json::Result<Self> {
        serde_json::from_str(FI_TIMINGS)
    }

    /// FlashInfer's recorded (µs, % of copy bandwidth) for a configuration.
    pub fn flashinfer(
        &self,
        rounds: u32,
        nheads: usize,
        batch: usize,
        alg: &str,
    ) -> Option<(f64, f64)> {
        self.records
            .iter()
            .find(|r| {
                r.implementation.starts_with("flashinfer")
                    && r.philox_rounds == rounds
                    && r.nheads == nheads
                    && r.batch == batch
                    && r.algorithm == alg
            })
            .map(|r| (r.us_median, r.pct_of_copy_bw))
    }
}

/// The file `--json PATH` writes.
#[derive(Serialize)]
pub struct Report {
    /// This run's copy bandwidth, GB/s (1 decimal).
    #[serde(rename = "copy_bandwidth_GBps")]
    pub copy_gbps: f64,
    pub replays: usize,
    pub records: Vec<Record>,
}

/// One measured configuration, next to FlashInfer's recorded one (`null` where none).
#[derive(Serialize)]
pub struct Record {
    pub nheads: usize,
    pub philox_rounds: u32,
    pub algorithm: &'static str,
    pub batch: usize,
    pub state_copies_rotated: usize,
    pub calls_per_graph: usize,
    /// µs per call (4 decimals).
    pub us_median: f64,
    pub bytes: usize,
    /// 1 decimal.
    #[serde(rename = "GBps")]
    pub gbps: f64,
    /// 3 decimals.
    pub pct_of_copy_bw: f64,
    /// 4 decimals.
    pub fi_us_median: Option<f64>,
    /// 3 decimals.
    pub fi_pct_of_copy_bw: Option<f64>,
}

/// `x` rounded to `decimals` decimals.
pub fn round(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}
