//! The JSON of `ssu_bench`: FlashInfer's recorded timings, which it reads
//! (`tests/data/flashinfer_ssu/timings.json`, embedded), and the records it writes with
//! `--json PATH` (read by `scripts/ssu_table.py`). Also compiled into `tests/bench_programs.rs`
//! (with `rig.rs`, whose [`Sizes`] the lookup takes).

use serde::{Deserialize, Serialize};

use super::rig::{Sizes, NGROUPS};

/// FlashInfer's recorded timings, embedded.
pub const FI_TIMINGS: &str = include_str!("../../tests/data/flashinfer_ssu/timings.json");

/// The part of timings.json that is read.
#[derive(Deserialize)]
pub struct Recorded {
    /// The copy bandwidth (GB/s, read + write) measured in FlashInfer's run.
    #[serde(rename = "copy_bandwidth_GBps_reference")]
    pub copy_gbps: Option<f64>,
    /// The sizes every record was measured at.
    pub shapes: RecordedShapes,
    pub records: Vec<RecordedRun>,
}

/// The part of timings.json's `shapes` that is read: the one dim and dstate of every record.
#[derive(Deserialize)]
pub struct RecordedShapes {
    pub dim: usize,
    pub dstate: usize,
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

    /// Whether FlashInfer's timings were recorded at this dim and dstate.
    pub fn recorded_at(&self, dim: usize, dstate: usize) -> bool {
        (self.shapes.dim, self.shapes.dstate) == (dim, dstate)
    }

    /// The line above the table of one (dim, dstate) of a run measuring `shapes`; `None` when
    /// the run measures FlashInfer's recorded shape only, so that a run without `--dim` and
    /// `--dstate` prints what earlier versions printed.
    pub fn shape_heading(
        &self,
        shapes: &[(usize, usize)],
        dim: usize,
        dstate: usize,
    ) -> Option<String> {
        let recorded = self.recorded_at(dim, dstate);
        if recorded && shapes.len() == 1 {
            return None;
        }
        Some(if recorded {
            format!("dim {dim}, dstate {dstate}, ngroups {NGROUPS}:")
        } else {
            format!(
                "dim {dim}, dstate {dstate}, ngroups {NGROUPS}: FlashInfer's timings are recorded \
                 at dim {} and dstate {} only, so its columns show {} (none recorded):",
                self.shapes.dim,
                self.shapes.dstate,
                self.missing(dim, dstate)
            )
        })
    }

    /// What a FlashInfer cell shows without a recorded figure: "—" at a dim or dstate that
    /// FlashInfer's timings do not cover, "-" at a size of the recorded shape that they lack.
    pub fn missing(&self, dim: usize, dstate: usize) -> &'static str {
        if self.recorded_at(dim, dstate) {
            "-"
        } else {
            "—"
        }
    }

    /// FlashInfer's recorded (µs, % of copy bandwidth) for a configuration; `None` where none
    /// was recorded, which is every configuration at another dim or dstate than the file's.
    pub fn flashinfer(&self, rounds: u32, sizes: &Sizes, alg: &str) -> Option<(f64, f64)> {
        if !self.recorded_at(sizes.dim, sizes.dstate) {
            return None;
        }
        let (nheads, batch) = (sizes.nheads, sizes.batch);
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

/// One measured configuration, next to FlashInfer's recorded one (`null` where none, which is
/// every record at another dim or dstate than FlashInfer's 64 and 128).
#[derive(Serialize)]
pub struct Record {
    pub nheads: usize,
    pub dim: usize,
    pub dstate: usize,
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
