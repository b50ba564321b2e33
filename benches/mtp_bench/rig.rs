//! The shapes of `mtp_bench`, the bytes a call moves, its rotation rule and the lookup of
//! FlashInfer's recorded timings (`tests/data/flashinfer_ssu_mtp/timings.json`). Also compiled
//! into `tests/bench_programs.rs`.

use serde_json::Value;

/// Tokens per sequence (1 + 7 draft tokens), and the intermediate buffer's `cache_steps`.
pub const T: usize = 8;
pub const NGROUPS: usize = 8;
pub const WARMUPS: usize = 2;
pub const REPLAYS: usize = 15;
/// Other traffic between two uses of a state copy.
pub const ROTATION_BYTES: usize = 192 << 20;

/// FlashInfer's recorded timings, embedded.
pub const TIMINGS: &str = include_str!("../../tests/data/flashinfer_ssu_mtp/timings.json");

/// One measured problem: T tokens for each of `batch` sequences, fp16 state slots of
/// (nheads, dim, dstate), bf16 x / out (batch * T, nheads, dim), B / C (batch * T, NGROUPS,
/// dstate), dt (batch * T, nheads), fp32 A and bf16 D, dt_bias (nheads), int32 indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    pub nheads: usize,
    pub batch: usize,
    pub dim: usize,
    pub dstate: usize,
}

impl Sizes {
    /// State elements of one slot: nheads * dim * dstate.
    pub fn head_block(&self) -> usize {
        self.nheads * self.dim * self.dstate
    }

    /// State bytes one call writes: T states per sequence (fp16), to the intermediate buffer
    /// (dense form) or to the token's own slot (varlen form).
    pub fn state_write_bytes(&self) -> usize {
        T * self.batch * self.head_block() * 2
    }

    /// State bytes one call touches: each sequence's state read once and T writes.
    pub fn state_bytes(&self) -> usize {
        (1 + T) * self.batch * self.head_block() * 2
    }

    /// Bytes of everything but the state: x, out, B, C, dt, A, D, dt_bias, indices.
    pub fn small_bytes(&self) -> usize {
        let (b, h) = (self.batch, self.nheads);
        2 * (b * T * h * self.dim * 2) // x, out
            + 2 * (b * T * NGROUPS * self.dstate * 2) // B, C
            + b * T * h * 2 // dt
            + h * 4 // A
            + 2 * (h * 2) // D, dt_bias
            + b * T * 4 // indices
    }

    /// Bytes one call moves.
    pub fn bytes_per_call(&self) -> usize {
        self.state_bytes() + self.small_bytes()
    }
}

/// `(copies, calls)`: enough disjoint state copies (and buffer entries) that a copy is reused
/// only after [`ROTATION_BYTES`] of other traffic, and at least `min_calls` calls (at least one
/// rotation).
pub fn rotation(sizes: &Sizes, min_calls: usize) -> (usize, usize) {
    let copies = ROTATION_BYTES.div_ceil(sizes.state_bytes()) + 1;
    (copies, min_calls.max(copies))
}

/// The (dim, dstate) of every record of `timings` (its `shapes`), if it says.
pub fn recorded_shape(timings: &Value) -> Option<(usize, usize)> {
    let shapes = timings.get("shapes")?;
    let dim = shapes.get("dim")?.as_u64()?;
    let dstate = shapes.get("dstate")?.as_u64()?;
    Some((usize::try_from(dim).ok()?, usize::try_from(dstate).ok()?))
}

/// FlashInfer's recorded µs (dense form) for `rounds` at `sizes`; `None` where none was
/// recorded, which is every size at another dim or dstate than the file's.
pub fn flashinfer_us(timings: &Value, rounds: u32, sizes: &Sizes) -> Option<f64> {
    if recorded_shape(timings)? != (sizes.dim, sizes.dstate) {
        return None;
    }
    timings.get("records")?.as_array()?.iter().find_map(|r| {
        (r.get("philox_rounds")?.as_u64()? == u64::from(rounds)
            && r.get("nheads")?.as_u64()? == sizes.nheads as u64
            && r.get("batch")?.as_u64()? == sizes.batch as u64)
            .then(|| r.get("us_median")?.as_f64())
            .flatten()
    })
}

/// The line above the table of one (dim, dstate) of a run measuring `shapes`, FlashInfer's
/// timings being recorded at `recorded`; `None` when the run measures that shape only, so that
/// a run without `--dim` and `--dstate` prints what earlier versions printed.
pub fn shape_heading(
    recorded: (usize, usize),
    shapes: &[(usize, usize)],
    dim: usize,
    dstate: usize,
) -> Option<String> {
    let at_recorded = (dim, dstate) == recorded;
    if at_recorded && shapes.len() == 1 {
        return None;
    }
    Some(if at_recorded {
        format!("dim {dim}, dstate {dstate}:")
    } else {
        format!(
            "dim {dim}, dstate {dstate}: FlashInfer's timings are recorded at dim {} and dstate \
             {} only, so its columns show {} (none recorded):",
            recorded.0,
            recorded.1,
            missing(recorded, dim, dstate)
        )
    })
}

/// What a FlashInfer cell of the dense form shows without a recorded figure: "—" at a dim or
/// dstate that FlashInfer's timings do not cover, "-" at a size of the recorded shape that they
/// lack. (The varlen form, never recorded, always shows "-".)
pub fn missing(recorded: (usize, usize), dim: usize, dstate: usize) -> &'static str {
    if (dim, dstate) == recorded {
        "-"
    } else {
        "—"
    }
}
