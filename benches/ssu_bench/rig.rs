//! The shapes and the method of `ssu_bench`, FlashInfer's rig's, and the bytes a call moves.
//! Also compiled into `tests/bench_programs.rs`.

/// Head dimension when `--dim` is not given (FlashInfer's recorded runs').
pub const DIM: usize = 64;
/// State size when `--dstate` is not given (FlashInfer's recorded runs').
pub const DSTATE: usize = 128;
pub const NGROUPS: usize = 8;
/// State touched between two uses of one state copy, so that every call reads it from HBM.
pub const COLD_BYTES: usize = 192 << 20;
/// Calls per graph at least (`--calls` changes it).
pub const MIN_CALLS: usize = 32;
pub const REPLAYS: usize = 15;
pub const WARMUPS: usize = 2;

/// One measured problem: fp16 state (slots, nheads, dim, dstate), bf16 x / out (batch,
/// nheads, dim), B / C (batch, NGROUPS, dstate), dt (batch, nheads), fp32 A (nheads), bf16 D
/// and dt_bias (nheads), int32 indices (batch).
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

    /// State bytes one call reads (and writes again): batch slots of fp16.
    pub fn state_bytes(&self) -> usize {
        self.batch * self.head_block() * 2
    }

    /// Bytes of everything but the state: x, out, B, C, dt, A, D, dt_bias, indices.
    pub fn small_bytes(&self) -> usize {
        let (b, h) = (self.batch, self.nheads);
        2 * (b * h * self.dim * 2) // x, out
            + 2 * (b * NGROUPS * self.dstate * 2) // B, C
            + b * h * 2 // dt
            + h * 4 // A
            + 2 * (h * 2) // D, dt_bias
            + b * 4 // indices
    }

    /// Bytes one call moves: the state read and written, and the small tensors.
    pub fn bytes_per_call(&self) -> usize {
        2 * self.state_bytes() + self.small_bytes()
    }
}

/// The rotation of FlashInfer's rig: `(copies, calls)`, with copies = floor(192 MiB / S) + 2
/// disjoint state copies (S: the state one call reads) and whole rotations of at least
/// `min_calls` calls.
pub fn rotation(sizes: &Sizes, min_calls: usize) -> (usize, usize) {
    let copies = COLD_BYTES / sizes.state_bytes() + 2;
    (copies, copies * min_calls.div_ceil(copies))
}
