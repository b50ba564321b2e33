//! The shapes and the method of `ssu_bench`, FlashInfer's rig's. Also compiled into
//! `tests/bench_programs.rs`.

pub const DIM: usize = 64;
pub const DSTATE: usize = 128;
pub const NGROUPS: usize = 8;
/// State touched between two uses of one state copy, so that every call reads it from HBM.
pub const COLD_BYTES: usize = 192 << 20;
/// Calls per graph at least (`--calls` changes it).
pub const MIN_CALLS: usize = 32;
pub const REPLAYS: usize = 15;
pub const WARMUPS: usize = 2;

/// The rotation of FlashInfer's rig: `(copies, calls)`, with copies = floor(192 MiB / S) + 2
/// disjoint state copies (S: the state one call reads) and whole rotations of at least
/// `min_calls` calls.
pub fn rotation(batch: usize, nheads: usize, min_calls: usize) -> (usize, usize) {
    let per_call = batch * nheads * DIM * DSTATE * 2;
    let copies = COLD_BYTES / per_call + 2;
    (copies, copies * min_calls.div_ceil(copies))
}
