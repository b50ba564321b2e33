//! The multi-token (speculative-decoding verify) selective-state-update of FlashInfer 0.7.2 in
//! f64 on host arrays: T tokens per sequence in one call, the state carried across the
//! sequence's steps, and per-step state writes.
//!
//! Sequences: with a 4-D `x` (batch, T, nheads, dim) sequence `b` is the T tokens `x[b, t]`;
//! with a 3-D `x` (total_tokens, nheads, dim) and `cu_seqlens` (batch + 1) it is the rows
//! `cu_seqlens[b] .. cu_seqlens[b + 1]` (possibly none).
//!
//! Read slot of sequence `b`: `state_batch_indices[b]` (1-D); with a 2-D index
//! `state_batch_indices[b, k]`, `k = max(num_accepted_tokens[b] - 1, 0)` when
//! `num_accepted_tokens` is given, else column 0; `b` without indices. A read slot equal to
//! `pad_slot_id` makes the sequence a pad: it starts from a zero state, its `out` rows are
//! computed, and it writes nothing. Any other read slot must lie inside the state (an error
//! otherwise). The state is read once per sequence from the state as given and carried in f64
//! across its steps; reads never see this call's writes.
//!
//! Write modes, exclusive (both an intermediate buffer and a dst index is an error):
//! - intermediate buffer: step `t` goes to buffer entry `e`, step `t` (buffer slot
//!   `e * cache_steps + t`), `e = intermediate_state_indices[b]` or the read slot when that
//!   tensor is absent; the main state is never written;
//! - `dst_state_batch_indices`: step `t` goes to state slot `dst[b, t]` (2-D) or `dst[b]` (1-D:
//!   every step to one slot, the last one's state remaining) unless that equals `pad_slot_id`;
//! - neither: the last step of the sequence goes to the read slot, unless
//!   `disable_state_update` (which matters only in this mode).
//!
//! A zero-length sequence writes nothing.

use crate::error::{Error, Result};
use crate::reference::ssu::{sigmoid, softplus, zeros, HostTensor};

/// The host inputs of [`selective_state_update_mtp_f64`]: FlashInfer's multi-token arguments as
/// f64 (indices as i64), same shapes and strides.
#[derive(Clone, Debug)]
pub struct MtpHostArgs<'a> {
    /// State (slots, nheads, dim, dstate).
    pub state: HostTensor<'a>,
    /// `x`: (batch, T, nheads, dim), or (total_tokens, nheads, dim) with `cu_seqlens`.
    pub x: HostTensor<'a>,
    /// `dt`, shaped like `x`.
    pub dt: HostTensor<'a>,
    /// `A` (nheads, dim, dstate).
    pub a: HostTensor<'a>,
    /// `B`: (batch, T, ngroups, dstate), or (total_tokens, ngroups, dstate).
    pub b: HostTensor<'a>,
    /// `C`, shaped like `B`.
    pub c: HostTensor<'a>,
    /// Optional `D` (nheads, dim); absent counts as 0.
    pub d: Option<HostTensor<'a>>,
    /// Optional gate `z`, shaped like `x`.
    pub z: Option<HostTensor<'a>>,
    /// Optional `dt_bias` (nheads, dim); absent counts as 0.
    pub dt_bias: Option<HostTensor<'a>>,
    /// Optional read slots, (batch,) or (batch, W) (padded: more rows are taken, not read).
    pub state_batch_indices: Option<HostTensor<'a, i64>>,
    /// Optional per-step write slots (batch, W), W at least the longest sequence, or (batch,)
    /// (every step to one slot); padded: more rows are taken, not read.
    pub dst_state_batch_indices: Option<HostTensor<'a, i64>>,
    /// Optional accepted-token counts (batch,) (or more, padded): pick the column of a 2-D read
    /// index.
    pub num_accepted_tokens: Option<HostTensor<'a, i64>>,
    /// Optional sequence offsets (batch + 1,): the varlen form (3-D `x`).
    pub cu_seqlens: Option<HostTensor<'a, i64>>,
    /// Optional intermediate state buffer (entries, cache_steps, nheads, dim, dstate).
    pub intermediate_states_buffer: Option<HostTensor<'a>>,
    /// Optional buffer entry per sequence (batch,); read only with the buffer.
    pub intermediate_state_indices: Option<HostTensor<'a, i64>>,
    /// Steps per buffer entry (the buffer's size(1)); only read with a buffer.
    pub cache_steps: usize,
    /// Slot value of a padded sequence (or of a skipped dst step).
    pub pad_slot_id: i64,
    /// Softplus on `dt + dt_bias` (when it is <= 20).
    pub dt_softplus: bool,
    /// Skip the final-only write (no effect in the other write modes).
    pub disable_state_update: bool,
}

/// Where one step's state went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MtpTarget {
    /// Main state slot.
    State(usize),
    /// Intermediate buffer entry and step (buffer slot `entry * cache_steps + step`).
    Intermediate {
        /// Buffer entry.
        entry: usize,
        /// Step within the entry.
        step: usize,
    },
}

/// One state write of the multi-token reference: every `(h, d, n)` of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtpWrite {
    /// Sequence.
    pub sequence: usize,
    /// Step of the sequence whose state was written.
    pub step: usize,
    /// Slot the sequence read its state from (the random bits of SR come from this slot).
    pub read_slot: usize,
    /// Where it went.
    pub target: MtpTarget,
}

/// The result of [`selective_state_update_mtp_f64`].
#[derive(Clone, Debug, PartialEq)]
pub struct MtpReference {
    /// The state after the call, unrounded: a copy of the input `state.data` (same indexing)
    /// with every written element replaced by its f64 value.
    pub state: Vec<f64>,
    /// The intermediate buffer after the call, likewise (a copy of its `data`), when given.
    pub intermediate: Option<Vec<f64>>,
    /// `out` as (token rows, nheads, dim), row-major, unrounded: rows `b * T + t` (fixed
    /// length) or the rows of `x` (varlen); varlen rows outside every sequence are NaN.
    pub out: Vec<f64>,
    /// The magnitude of each `out` element's terms, indexed as `out`: `|D · x| + Σ_n |C_n ·
    /// s_n|` (times the gate's `|z · sigmoid(z)|` with z). A kernel that sums in fp32 is off by
    /// a few fp32 ulps of this, not of `out`, which cancellation can make far smaller.
    pub out_magnitude: Vec<f64>,
    /// Read slot of each sequence (`None`: a pad).
    pub read_slots: Vec<Option<usize>>,
    /// Token rows of each sequence, `(first row, length)`.
    pub sequences: Vec<(usize, usize)>,
    /// The writes, by sequence, then step.
    pub writes: Vec<MtpWrite>,
    /// Heads.
    pub nheads: usize,
    /// Rows per head.
    pub dim: usize,
    /// Columns per row.
    pub dstate: usize,
    /// Strides of the state, in elements.
    pub state_strides: [usize; 4],
    /// Strides of the intermediate buffer, in elements (zeros without one).
    pub intermediate_strides: [usize; 5],
    /// Steps per intermediate buffer entry (the argument; 0 without a buffer).
    pub cache_steps: usize,
}

impl MtpReference {
    /// Index into [`MtpReference::state`] of `(slot, h, d, n)` (wrapping: meaningless, never
    /// a panic, outside the shape).
    pub fn state_index(&self, slot: usize, h: usize, d: usize, n: usize) -> usize {
        let s = self.state_strides;
        slot.wrapping_mul(s[0])
            .wrapping_add(h.wrapping_mul(s[1]))
            .wrapping_add(d.wrapping_mul(s[2]))
            .wrapping_add(n.wrapping_mul(s[3]))
    }

    /// Index into [`MtpReference::intermediate`] of `(entry, step, h, d, n)` (wrapping, as
    /// [`MtpReference::state_index`]).
    pub fn intermediate_index(
        &self,
        entry: usize,
        step: usize,
        h: usize,
        d: usize,
        n: usize,
    ) -> usize {
        let s = self.intermediate_strides;
        entry
            .wrapping_mul(s[0])
            .wrapping_add(step.wrapping_mul(s[1]))
            .wrapping_add(h.wrapping_mul(s[2]))
            .wrapping_add(d.wrapping_mul(s[3]))
            .wrapping_add(n.wrapping_mul(s[4]))
    }

    /// The main state slots written, sorted, without repeats.
    pub fn state_slots_written(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .writes
            .iter()
            .filter_map(|w| match w.target {
                MtpTarget::State(s) => Some(s),
                MtpTarget::Intermediate { .. } => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The intermediate buffer slots (`entry * cache_steps + step`) written, sorted, without
    /// repeats.
    pub fn intermediate_slots_written(&self) -> Vec<usize> {
        let cache_steps = self.cache_steps;
        let mut v: Vec<usize> = self
            .writes
            .iter()
            .filter_map(|w| match w.target {
                MtpTarget::Intermediate { entry, step } => {
                    Some(entry.wrapping_mul(cache_steps).wrapping_add(step))
                }
                MtpTarget::State(_) => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Checks a 1-D index tensor of `n` elements.
/// A 1-D index tensor of `n` or more (padded) entries.
fn check_1d(name: &'static str, t: &HostTensor<'_, i64>, n: usize) -> Result<()> {
    t.check_at_least(name, &[Some(n)])
}

/// The selective-state-update over T tokens per sequence, in f64. Per sequence `b`, step `t`
/// (token row `r`), head `h` (group `g = h / (nheads / ngroups)`), row `d`, column `n`:
///
/// - `dt' = dt[r,h,d] + dt_bias[h,d]`, softplus when `dt_softplus` and `dt' <= 20`;
/// - `s_t[n] = exp(A[h,d,n] · dt') · s_{t-1}[n] + x[r,h,d] · B[r,g,n] · dt'`, `s_{-1}` the
///   read slot's state (zeros for a pad), carried unrounded;
/// - `out[r,h,d] = D[h,d] · x[r,h,d] + Σ_n C[r,g,n] · s_t[n]`, times `z · sigmoid(z)` with
///   `z`.
///
/// Slots and write modes as in the module doc. Errors name the argument: inconsistent shapes
/// or a tensor reaching outside its data; both write modes at once; a 2-D index narrower than a
/// sequence it serves (or than the column `num_accepted_tokens` picks); a sequence longer than
/// `cache_steps` in intermediate mode; `cu_seqlens` with a 4-D `x`, missing with a 3-D one,
/// decreasing, negative or past the token count; a slot or entry used that is neither
/// `pad_slot_id` nor inside the state or buffer.
pub fn selective_state_update_mtp_f64(args: &MtpHostArgs<'_>) -> Result<MtpReference> {
    let st = &args.state;
    st.check("state", &[None, None, None, None])?;
    let (slots, nheads, dim, dstate) = (st.shape[0], st.shape[1], st.shape[2], st.shape[3]);

    // Sequences: (first token row, length) and the layout of the token tensors.
    let varlen = args.x.shape.len() == 3;
    if varlen {
        args.x.check("x", &[None, Some(nheads), Some(dim)])?;
    } else {
        args.x.check("x", &[None, None, Some(nheads), Some(dim)])?;
    }
    // `out` first: its (checked, fallible) allocation bounds the batch of a broadcast `x`.
    let out_len = args
        .x
        .shape
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .ok_or_else(|| Error::invalid("x", "tokens * nheads * dim overflows usize"))?;
    let mut out = zeros(out_len, "x")?;
    out.fill(f64::NAN);
    let mut out_magnitude = out.clone();
    let (batch, sequences, rows_per_seq) = if varlen {
        let total = args.x.shape[0];
        let Some(cu) = &args.cu_seqlens else {
            return Err(Error::invalid(
                "cu_seqlens",
                "a 3-D (varlen) x needs cu_seqlens",
            ));
        };
        cu.check("cu_seqlens", &[None])?;
        let n = cu.shape[0];
        if n < 2 {
            return Err(Error::invalid(
                "cu_seqlens",
                format!("expected at least 2 offsets (batch + 1), got {n}"),
            ));
        }
        let mut seqs = Vec::with_capacity(n - 1);
        for b in 0..n - 1 {
            let (lo, hi) = (cu.at(&[b]), cu.at(&[b + 1]));
            if lo < 0 || hi < lo || hi as u64 > total as u64 {
                return Err(Error::invalid(
                    "cu_seqlens",
                    format!(
                        "offsets must be non-decreasing within 0..={total} (the token count), \
                         got [{b}] = {lo}, [{}] = {hi}",
                        b + 1
                    ),
                ));
            }
            seqs.push((lo as usize, (hi - lo) as usize));
        }
        (n - 1, seqs, None)
    } else {
        if args.cu_seqlens.is_some() {
            return Err(Error::invalid(
                "cu_seqlens",
                "cu_seqlens needs a 3-D (varlen) x, got a 4-D x",
            ));
        }
        let (batch, t) = (args.x.shape[0], args.x.shape[1]);
        let seqs = (0..batch).map(|b| (b * t, t)).collect();
        (batch, seqs, Some(t))
    };
    let tok_shape = |last: usize, mid: Option<usize>| -> Vec<Option<usize>> {
        match rows_per_seq {
            Some(t) => vec![Some(batch), Some(t), mid, Some(last)],
            None => vec![Some(args.x.shape[0]), mid, Some(last)],
        }
    };
    args.dt.check("dt", &tok_shape(dim, Some(nheads)))?;
    if let Some(z) = &args.z {
        z.check("z", &tok_shape(dim, Some(nheads)))?;
    }
    args.b.check("B", &tok_shape(dstate, None))?;
    let ngroups = args.b.shape[args.b.shape.len() - 2];
    if nheads % ngroups != 0 {
        return Err(Error::invalid(
            "B",
            format!("expected ngroups dividing nheads ({nheads}), got {ngroups}"),
        ));
    }
    args.c.check("C", &tok_shape(dstate, Some(ngroups)))?;
    args.a
        .check("A", &[Some(nheads), Some(dim), Some(dstate)])?;
    if let Some(d) = &args.d {
        d.check("D", &[Some(nheads), Some(dim)])?;
    }
    if let Some(bias) = &args.dt_bias {
        bias.check("dt_bias", &[Some(nheads), Some(dim)])?;
    }
    let max_len = sequences.iter().map(|s| s.1).max().unwrap_or(0);

    // Index tensors.
    if let Some(na) = &args.num_accepted_tokens {
        check_1d("num_accepted_tokens", na, batch)?;
    }
    if let Some(t) = &args.state_batch_indices {
        match t.shape.len() {
            1 => check_1d("state_batch_indices", t, batch)?,
            _ => t.check_at_least("state_batch_indices", &[Some(batch), None])?,
        }
    }
    if let Some(t) = &args.dst_state_batch_indices {
        match t.shape.len() {
            1 => check_1d("dst_state_batch_indices", t, batch)?,
            _ => t.check_at_least("dst_state_batch_indices", &[Some(batch), None])?,
        }
    }
    if args.intermediate_states_buffer.is_some() && args.dst_state_batch_indices.is_some() {
        return Err(Error::invalid(
            "dst_state_batch_indices",
            "two write modes at once: an intermediate_states_buffer and a dst index",
        ));
    }
    // intermediate_state_indices without a buffer is not read (FlashInfer's kernels read it only
    // with the buffer).
    let mut intermediate_strides = [0usize; 5];
    let mut entries = 0;
    if let Some(buf) = &args.intermediate_states_buffer {
        buf.check(
            "intermediate_states_buffer",
            &[
                None,
                Some(args.cache_steps),
                Some(nheads),
                Some(dim),
                Some(dstate),
            ],
        )?;
        entries = buf.shape[0];
        intermediate_strides.copy_from_slice(&buf.strides);
        if let Some(t) = &args.intermediate_state_indices {
            t.check("intermediate_state_indices", &[Some(batch)])?;
        }
        if max_len > args.cache_steps {
            return Err(Error::invalid(
                "cache_steps",
                format!(
                    "a sequence of {max_len} tokens does not fit {} cache steps",
                    args.cache_steps
                ),
            ));
        }
    }

    // Plan: read slot and the targets of every step, all checked before any arithmetic.
    let in_range = |v: i64, n: usize| v >= 0 && (v as u64) < n as u64;
    let mut read_slots = Vec::with_capacity(batch);
    let mut writes = Vec::new();
    for (b, &(_, len)) in sequences.iter().enumerate() {
        let read = match &args.state_batch_indices {
            None => b as i64,
            Some(t) if t.shape.len() == 1 => t.at(&[b]),
            Some(t) => {
                let col = args
                    .num_accepted_tokens
                    .as_ref()
                    .map_or(0, |na| na.at(&[b]).saturating_sub(1).max(0));
                if !in_range(col, t.shape[1]) {
                    return Err(Error::invalid(
                        "state_batch_indices",
                        format!(
                            "sequence {b}: num_accepted_tokens picks column {col} of a \
                             2-D index of width {}",
                            t.shape[1]
                        ),
                    ));
                }
                t.at(&[b, col as usize])
            }
        };
        if read == args.pad_slot_id {
            read_slots.push(None);
            continue;
        }
        if !in_range(read, slots) {
            return Err(Error::invalid(
                "state_batch_indices",
                format!("sequence {b}: read slot {read} is neither pad_slot_id nor in 0..{slots}"),
            ));
        }
        let read = read as usize;
        read_slots.push(Some(read));
        if len == 0 {
            continue;
        }
        let mut push = |step: usize, target: MtpTarget| {
            writes.push(MtpWrite {
                sequence: b,
                step,
                read_slot: read,
                target,
            })
        };
        if args.intermediate_states_buffer.is_some() {
            let entry = args
                .intermediate_state_indices
                .as_ref()
                .map_or(read as i64, |t| t.at(&[b]));
            if !in_range(entry, entries) {
                return Err(Error::invalid(
                    "intermediate_state_indices",
                    format!("sequence {b}: buffer entry {entry} outside 0..{entries}"),
                ));
            }
            for step in 0..len {
                push(
                    step,
                    MtpTarget::Intermediate {
                        entry: entry as usize,
                        step,
                    },
                );
            }
        } else if let Some(dst) = &args.dst_state_batch_indices {
            // A 1-D index: every step goes to slot dst[b] (FlashInfer's token stride 0).
            let one_d = dst.shape.len() == 1;
            if !one_d && len > dst.shape[1] {
                return Err(Error::invalid(
                    "dst_state_batch_indices",
                    format!(
                        "sequence {b} has {len} tokens, the 2-D index only {} columns",
                        dst.shape[1]
                    ),
                ));
            }
            for step in 0..len {
                let w = if one_d {
                    dst.at(&[b])
                } else {
                    dst.at(&[b, step])
                };
                if w == args.pad_slot_id {
                    continue;
                }
                if !in_range(w, slots) {
                    return Err(Error::invalid(
                        "dst_state_batch_indices",
                        format!(
                            "sequence {b} step {step}: slot {w} is neither pad_slot_id nor \
                             in 0..{slots}"
                        ),
                    ));
                }
                push(step, MtpTarget::State(w as usize));
            }
        } else if !args.disable_state_update {
            push(len - 1, MtpTarget::State(read));
        }
    }

    // Arithmetic.
    let heads_per_group = nheads / ngroups;
    let state_strides = [st.strides[0], st.strides[1], st.strides[2], st.strides[3]];
    let mut new_state = st.data.to_vec();
    let mut new_inter = args
        .intermediate_states_buffer
        .as_ref()
        .map(|b| b.data.to_vec());
    let mut s = zeros(dstate, "state")?;
    // Token tensors are indexed by (b, t, ..) or (row, ..).
    let tok = |t: &HostTensor<'_>, b: usize, step: usize, row: usize, i: usize, j: usize| {
        if varlen {
            t.at(&[row, i, j])
        } else {
            t.at(&[b, step, i, j])
        }
    };
    let mut next_write = 0;
    for (b, &(first, len)) in sequences.iter().enumerate() {
        let my_writes: Vec<MtpWrite> = writes[next_write..]
            .iter()
            .take_while(|w| w.sequence == b)
            .copied()
            .collect();
        next_write += my_writes.len();
        for h in 0..nheads {
            let g = h / heads_per_group;
            for d in 0..dim {
                for (n, v) in s.iter_mut().enumerate() {
                    *v = read_slots[b].map_or(0.0, |slot| st.at(&[slot, h, d, n]));
                }
                for step in 0..len {
                    let row = first + step;
                    let mut dt = tok(&args.dt, b, step, row, h, d);
                    if let Some(bias) = &args.dt_bias {
                        dt += bias.at(&[h, d]);
                    }
                    if args.dt_softplus && dt <= 20.0 {
                        dt = softplus(dt);
                    }
                    let x = tok(&args.x, b, step, row, h, d);
                    let mut y = args.d.as_ref().map_or(0.0, |t| t.at(&[h, d])) * x;
                    let mut mag = y.abs();
                    for (n, v) in s.iter_mut().enumerate() {
                        let da = (args.a.at(&[h, d, n]) * dt).exp();
                        *v = da * *v + x * (tok(&args.b, b, step, row, g, n) * dt);
                        let term = tok(&args.c, b, step, row, g, n) * *v;
                        y += term;
                        mag += term.abs();
                    }
                    for w in my_writes.iter().filter(|w| w.step == step) {
                        for (n, &v) in s.iter().enumerate() {
                            match w.target {
                                MtpTarget::State(slot) => {
                                    let idx = slot * state_strides[0]
                                        + h * state_strides[1]
                                        + d * state_strides[2]
                                        + n * state_strides[3];
                                    new_state[idx] = v;
                                }
                                MtpTarget::Intermediate { entry, step } => {
                                    let is = intermediate_strides;
                                    let idx = entry * is[0]
                                        + step * is[1]
                                        + h * is[2]
                                        + d * is[3]
                                        + n * is[4];
                                    if let Some(buf) = new_inter.as_mut() {
                                        buf[idx] = v;
                                    }
                                }
                            }
                        }
                    }
                    if let Some(z) = &args.z {
                        let zv = tok(z, b, step, row, h, d);
                        y *= zv * sigmoid(zv);
                        mag *= (zv * sigmoid(zv)).abs();
                    }
                    out[(row * nheads + h) * dim + d] = y;
                    out_magnitude[(row * nheads + h) * dim + d] = mag;
                }
            }
        }
    }

    Ok(MtpReference {
        state: new_state,
        intermediate: new_inter,
        out,
        out_magnitude,
        read_slots,
        sequences,
        writes,
        nheads,
        dim,
        dstate,
        state_strides,
        intermediate_strides,
        cache_steps: if args.intermediate_states_buffer.is_some() {
            args.cache_steps
        } else {
            0
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 slots of (1 head, 1 row, 2 columns); 6 token rows of x, B, C (2 sequences of 3 in the
    /// fixed form); D = 0.5, A = [-1, -0.5], dt = 0.1 · (row + 1), no softplus.
    struct Mini {
        state: Vec<f64>,
        x: Vec<f64>,
        dt: Vec<f64>,
        a: Vec<f64>,
        bm: Vec<f64>,
        cm: Vec<f64>,
        d: Vec<f64>,
        z: Vec<f64>,
        buf: Vec<f64>,
    }

    const PAD: i64 = -1;

    impl Mini {
        fn new() -> Self {
            Self {
                state: vec![1.0, -2.0, 0.5, 0.25, -1.5, 3.0, 2.0, -0.75],
                x: vec![1.0, -0.5, 2.0, 0.25, -1.0, 1.5],
                dt: (0..6).map(|r| 0.1 * (r as f64 + 1.0)).collect(),
                a: vec![-1.0, -0.5],
                bm: vec![
                    1.0, 0.5, -1.0, 2.0, 0.25, -0.5, 1.5, 1.0, -2.0, 0.75, 0.5, 0.5,
                ],
                cm: vec![
                    0.5, 1.0, 2.0, -1.0, 1.0, 1.0, -0.5, 0.25, 1.0, -1.0, 0.75, 2.0,
                ],
                d: vec![0.5],
                z: vec![0.5, -1.0, 2.0, 1.0, 0.0, -0.5],
                buf: vec![-9.0; 3 * 3 * 2],
            }
        }

        /// Fixed length: x (2, 3, 1, 1).
        fn args(&self) -> MtpHostArgs<'_> {
            MtpHostArgs {
                state: HostTensor::contiguous(&self.state, &[4, 1, 1, 2]),
                x: HostTensor::contiguous(&self.x, &[2, 3, 1, 1]),
                dt: HostTensor::new(&self.dt, &[2, 3, 1, 1], &[3, 1, 1, 0]),
                a: HostTensor::new(&self.a, &[1, 1, 2], &[0, 0, 1]),
                b: HostTensor::contiguous(&self.bm, &[2, 3, 1, 2]),
                c: HostTensor::contiguous(&self.cm, &[2, 3, 1, 2]),
                d: Some(HostTensor::new(&self.d, &[1, 1], &[1, 0])),
                z: None,
                dt_bias: None,
                state_batch_indices: None,
                dst_state_batch_indices: None,
                num_accepted_tokens: None,
                cu_seqlens: None,
                intermediate_states_buffer: None,
                intermediate_state_indices: None,
                cache_steps: 0,
                pad_slot_id: PAD,
                dt_softplus: false,
                disable_state_update: false,
            }
        }

        /// Varlen: x (6, 1, 1) with `cu`.
        fn varlen<'a>(&'a self, cu: &'a [i64]) -> MtpHostArgs<'a> {
            MtpHostArgs {
                x: HostTensor::contiguous(&self.x, &[6, 1, 1]),
                dt: HostTensor::new(&self.dt, &[6, 1, 1], &[1, 1, 0]),
                b: HostTensor::contiguous(&self.bm, &[6, 1, 2]),
                c: HostTensor::contiguous(&self.cm, &[6, 1, 2]),
                cu_seqlens: Some(HostTensor::contiguous(cu, &[cu.len()])),
                ..self.args()
            }
        }

        /// The buffer (3 entries, 3 steps, 1, 1, 2).
        fn buffer(&self) -> HostTensor<'_> {
            HostTensor::contiguous(&self.buf, &[3, 3, 1, 1, 2])
        }

        /// Direct recurrence over token `rows` from slot `init` (zeros for `None`): the outs and
        /// the state after each step.
        fn direct(
            &self,
            rows: std::ops::Range<usize>,
            init: Option<usize>,
        ) -> (Vec<f64>, Vec<[f64; 2]>) {
            let mut s = init.map_or([0.0; 2], |k| [self.state[2 * k], self.state[2 * k + 1]]);
            let (mut outs, mut states) = (Vec::new(), Vec::new());
            for r in rows {
                let dt = self.dt[r];
                let mut y = 0.5 * self.x[r];
                for (n, v) in s.iter_mut().enumerate() {
                    *v = (self.a[n] * dt).exp() * *v + self.x[r] * self.bm[2 * r + n] * dt;
                    y += self.cm[2 * r + n] * *v;
                }
                outs.push(y);
                states.push(s);
            }
            (outs, states)
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-13 * b.abs().max(1.0)
    }

    fn run(args: &MtpHostArgs<'_>) -> MtpReference {
        selective_state_update_mtp_f64(args).unwrap()
    }

    fn targets(r: &MtpReference) -> Vec<(usize, usize, MtpTarget)> {
        r.writes
            .iter()
            .map(|w| (w.sequence, w.step, w.target))
            .collect()
    }

    fn assert_slot(r: &MtpReference, slot: usize, want: [f64; 2]) {
        for (n, &w) in want.iter().enumerate() {
            let got = r.state[r.state_index(slot, 0, 0, n)];
            assert!(close(got, w), "slot {slot} col {n}: {got} vs {w}");
        }
    }

    fn assert_out(r: &MtpReference, first: usize, want: &[f64]) {
        for (k, &w) in want.iter().enumerate() {
            assert!(
                close(r.out[first + k], w),
                "row {}: {} vs {w}",
                first + k,
                r.out[first + k]
            );
        }
    }

    #[test]
    fn hand_computed_single_step() {
        // Slot 0 = [1, -2], row 0: dt 0.1, x 1, B [1, 0.5], C [0.5, 1], D 0.5.
        let m = Mini::new();
        let (o, s) = m.direct(0..1, Some(0));
        let s0 = (-0.1f64).exp() + 0.1;
        let s1 = -2.0 * (-0.05f64).exp() + 0.05;
        assert!(close(s[0][0], s0) && close(s[0][1], s1));
        assert!(close(o[0], 0.5 + 0.5 * s0 + s1));
    }

    #[test]
    fn final_only_writes_the_last_step_to_the_read_slot() {
        let m = Mini::new();
        let sbi = [2i64, 0];
        let mut a = m.args();
        a.state_batch_indices = Some(HostTensor::contiguous(&sbi, &[2]));
        let r = run(&a);
        assert_eq!(r.read_slots, vec![Some(2), Some(0)]);
        assert_eq!(
            targets(&r),
            vec![(0, 2, MtpTarget::State(2)), (1, 2, MtpTarget::State(0))]
        );
        assert_eq!(r.writes[0].read_slot, 2);
        assert_eq!(r.state_slots_written(), vec![0, 2]);
        let (o0, s0) = m.direct(0..3, Some(2));
        let (o1, s1) = m.direct(3..6, Some(0));
        assert_slot(&r, 2, s0[2]);
        assert_slot(&r, 0, s1[2]);
        assert_out(&r, 0, &o0);
        assert_out(&r, 3, &o1);
        assert_eq!(&r.state[2..4], &m.state[2..4]);
        assert_eq!(&r.state[6..8], &m.state[6..8]);
        assert!(r.intermediate.is_none());

        // disable_state_update: the same out, nothing written.
        a.disable_state_update = true;
        let off = run(&a);
        assert!(off.writes.is_empty());
        assert_eq!(off.state, m.state);
        assert_eq!(off.out, r.out);

        // Without indices sequence b reads (and writes) slot b.
        let r = run(&m.args());
        assert_eq!(r.read_slots, vec![Some(0), Some(1)]);
        assert_eq!(r.state_slots_written(), vec![0, 1]);
        assert_slot(&r, 1, m.direct(3..6, Some(1)).1[2]);
    }

    #[test]
    fn gate_z_multiplies_out_only() {
        let m = Mini::new();
        let plain = run(&m.args());
        let mut a = m.args();
        a.z = Some(HostTensor::contiguous(&m.z, &[2, 3, 1, 1]));
        let gated = run(&a);
        assert_eq!(gated.state, plain.state);
        for (k, &zv) in m.z.iter().enumerate() {
            assert!(close(gated.out[k], plain.out[k] * zv * sigmoid(zv)));
        }
    }

    #[test]
    fn intermediate_buffer_gets_every_step_and_the_state_nothing() {
        let m = Mini::new();
        let sbi = [2i64, 0];
        let ent = [1i64, 0];
        let mut a = m.args();
        a.state_batch_indices = Some(HostTensor::contiguous(&sbi, &[2]));
        a.intermediate_states_buffer = Some(m.buffer());
        a.intermediate_state_indices = Some(HostTensor::contiguous(&ent, &[2]));
        a.cache_steps = 3;
        let r = run(&a);
        assert!(r.state_slots_written().is_empty());
        assert_eq!(r.state, m.state);
        assert_eq!(r.intermediate_slots_written(), vec![0, 1, 2, 3, 4, 5]);
        let (_, s0) = m.direct(0..3, Some(2));
        let (_, s1) = m.direct(3..6, Some(0));
        let buf = r.intermediate.as_ref().unwrap();
        for t in 0..3 {
            for n in 0..2 {
                assert!(close(buf[r.intermediate_index(1, t, 0, 0, n)], s0[t][n]));
                assert!(close(buf[r.intermediate_index(0, t, 0, 0, n)], s1[t][n]));
            }
        }
        assert!(buf[12..].iter().all(|&v| v == -9.0), "entry 2 untouched");
        // disable_state_update changes nothing in this mode.
        a.disable_state_update = true;
        assert_eq!(run(&a), r);

        // Without intermediate_state_indices the entry is the read slot.
        a.intermediate_state_indices = None;
        let r = run(&a);
        assert_eq!(
            targets(&r)
                .iter()
                .map(|w| w.2)
                .filter(|t| matches!(t, MtpTarget::Intermediate { step: 0, .. }))
                .collect::<Vec<_>>(),
            vec![
                MtpTarget::Intermediate { entry: 2, step: 0 },
                MtpTarget::Intermediate { entry: 0, step: 0 }
            ]
        );
        assert_eq!(r.intermediate_slots_written(), vec![0, 1, 2, 6, 7, 8]);
        let buf = r.intermediate.as_ref().unwrap();
        assert!(buf[6..12].iter().all(|&v| v == -9.0), "entry 1 untouched");
    }

    #[test]
    fn dst_per_step_skips_pad_entries() {
        let m = Mini::new();
        let sbi = [2i64, 3];
        let dst = [1i64, PAD, 0, 3, 2, PAD];
        let mut a = m.args();
        a.state_batch_indices = Some(HostTensor::contiguous(&sbi, &[2]));
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&dst, &[2, 3]));
        a.disable_state_update = true; // no effect here
        let r = run(&a);
        assert_eq!(
            targets(&r),
            vec![
                (0, 0, MtpTarget::State(1)),
                (0, 2, MtpTarget::State(0)),
                (1, 0, MtpTarget::State(3)),
                (1, 1, MtpTarget::State(2)),
            ]
        );
        let (_, s0) = m.direct(0..3, Some(2));
        let (_, s1) = m.direct(3..6, Some(3));
        assert_slot(&r, 1, s0[0]);
        assert_slot(&r, 0, s0[2]);
        assert_slot(&r, 3, s1[0]);
        assert_slot(&r, 2, s1[1]);
    }

    #[test]
    fn pads_compute_out_from_zero_and_write_nothing() {
        let m = Mini::new();
        let sbi = [PAD, 1];
        let ent = [2i64, 0];
        let mut a = m.args();
        a.state_batch_indices = Some(HostTensor::contiguous(&sbi, &[2]));
        for mode in 0..3 {
            let mut a = a.clone();
            let dst = [0i64, 0, 0, 2, 2, 2];
            if mode == 1 {
                a.dst_state_batch_indices = Some(HostTensor::contiguous(&dst, &[2, 3]));
            }
            if mode == 2 {
                a.intermediate_states_buffer = Some(m.buffer());
                a.intermediate_state_indices = Some(HostTensor::contiguous(&ent, &[2]));
                a.cache_steps = 3;
            }
            let r = selective_state_update_mtp_f64(&a).unwrap();
            assert_eq!(r.read_slots, vec![None, Some(1)]);
            assert!(r.writes.iter().all(|w| w.sequence == 1), "mode {mode}");
            assert_eq!(r.writes.len(), [1, 3, 3][mode]);
            assert_out(&r, 0, &m.direct(0..3, None).0);
            assert_out(&r, 3, &m.direct(3..6, Some(1)).0);
        }
        // Without indices, pad_slot_id still applies: sequence 0 reads "slot 0" = a pad id.
        let mut a = m.args();
        a.pad_slot_id = 0;
        let r = run(&a);
        assert_eq!(r.read_slots, vec![None, Some(1)]);
        assert_eq!(r.state_slots_written(), vec![1]);
    }

    #[test]
    fn varlen_rows_and_zero_length_sequences() {
        let m = Mini::new();
        let cu = [0i64, 3, 3, 5];
        let sbi = [1i64, 2, 0];
        let mut a = m.varlen(&cu);
        a.state_batch_indices = Some(HostTensor::contiguous(&sbi, &[3]));
        let r = run(&a);
        assert_eq!(r.sequences, vec![(0, 3), (3, 0), (3, 2)]);
        assert_eq!(
            targets(&r),
            vec![(0, 2, MtpTarget::State(1)), (2, 1, MtpTarget::State(0))]
        );
        let (o0, s0) = m.direct(0..3, Some(1));
        let (o2, s2) = m.direct(3..5, Some(0));
        assert_out(&r, 0, &o0);
        assert_out(&r, 3, &o2);
        assert!(r.out[5].is_nan(), "row 5 belongs to no sequence");
        assert_slot(&r, 1, s0[2]);
        assert_slot(&r, 0, s2[1]);
        assert_eq!(
            &r.state[4..6],
            &m.state[4..6],
            "zero-length: slot 2 unchanged"
        );

        // Intermediate mode: a zero-length sequence writes no entry; cache_steps bounds steps.
        let ent = [0i64, 1, 2];
        a.intermediate_states_buffer = Some(m.buffer());
        a.intermediate_state_indices = Some(HostTensor::contiguous(&ent, &[3]));
        a.cache_steps = 3;
        let r = run(&a);
        assert_eq!(r.intermediate_slots_written(), vec![0, 1, 2, 6, 7]);
        // dst mode: only as many columns as the sequences are long are needed.
        let dst = [3i64, 3, 3, 2, 2, 2, 1, 0, 9];
        let mut a = m.varlen(&cu);
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&dst, &[3, 3]));
        let r = run(&a);
        assert_eq!(
            targets(&r),
            vec![
                (0, 0, MtpTarget::State(3)),
                (0, 1, MtpTarget::State(3)),
                (0, 2, MtpTarget::State(3)),
                (2, 0, MtpTarget::State(1)),
                (2, 1, MtpTarget::State(0)),
            ]
        );
        // Fixed length and varlen agree on the same rows.
        let cu = [0i64, 3, 6];
        let v = run(&m.varlen(&cu));
        let f = run(&m.args());
        assert_eq!(v.out, f.out);
        assert_eq!(v.state, f.state);
        assert_eq!(v.writes, f.writes);
    }

    #[test]
    fn num_accepted_tokens_picks_the_read_column() {
        let m = Mini::new();
        let sbi = [0i64, 1, 2, 3, 2, 1];
        let mut a = m.args();
        a.state_batch_indices = Some(HostTensor::contiguous(&sbi, &[2, 3]));
        // Without num_accepted_tokens: column 0.
        assert_eq!(run(&a).read_slots, vec![Some(0), Some(3)]);
        for (na, want) in [
            ([0i64, 3], [0usize, 1]),
            ([1, 2], [0, 2]),
            ([3, 1], [2, 3]),
            ([-4, 0], [0, 3]),
        ] {
            let mut a = a.clone();
            a.num_accepted_tokens = Some(HostTensor::contiguous(&na, &[2]));
            let r = selective_state_update_mtp_f64(&a).unwrap();
            assert_eq!(r.read_slots, vec![Some(want[0]), Some(want[1])], "{na:?}");
            assert_eq!(r.state_slots_written(), {
                let mut v = want.to_vec();
                v.sort_unstable();
                v
            });
            assert_out(&r, 3, &m.direct(3..6, Some(want[1])).0);
        }
        // With a 1-D index num_accepted_tokens changes nothing.
        let s1 = [2i64, 0];
        let na = [3i64, 2];
        let mut a = m.args();
        a.state_batch_indices = Some(HostTensor::contiguous(&s1, &[2]));
        let plain = run(&a);
        a.num_accepted_tokens = Some(HostTensor::contiguous(&na, &[2]));
        assert_eq!(run(&a), plain);
    }

    #[test]
    fn in_place_verify_reads_before_writing() {
        // vLLM style: the 2-D read index is the dst index; sequence 0 accepted 2 tokens and
        // reads column 1 (slot 1), then writes slots 0, 1, 2 step by step.
        let m = Mini::new();
        let idx = [0i64, 1, 2, 3, PAD, PAD];
        let na = [2i64, 1];
        let mut a = m.args();
        a.state_batch_indices = Some(HostTensor::contiguous(&idx, &[2, 3]));
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&idx, &[2, 3]));
        a.num_accepted_tokens = Some(HostTensor::contiguous(&na, &[2]));
        let r = run(&a);
        assert_eq!(r.read_slots, vec![Some(1), Some(3)]);
        let (o0, s0) = m.direct(0..3, Some(1));
        let (_, s1) = m.direct(3..6, Some(3));
        assert_out(&r, 0, &o0);
        for (t, &st) in s0.iter().enumerate() {
            assert_slot(&r, t, st);
        }
        assert_slot(&r, 3, s1[0]);
        assert_eq!(
            targets(&r),
            vec![
                (0, 0, MtpTarget::State(0)),
                (0, 1, MtpTarget::State(1)),
                (0, 2, MtpTarget::State(2)),
                (1, 0, MtpTarget::State(3)),
            ]
        );
    }

    fn err_arg(a: &MtpHostArgs<'_>) -> &'static str {
        match selective_state_update_mtp_f64(a) {
            Err(Error::InvalidArgument { argument, .. }) => argument,
            other => panic!("expected an InvalidArgument, got {other:?}"),
        }
    }

    /// FlashInfer's index forms: padded index tensors (more rows, and a wider 2-D read index,
    /// than the call reads) give the unpadded call's result, and a 1-D dst index sends every
    /// step to one slot (a 2-D index repeating that slot in every column).
    #[test]
    fn padded_and_one_dimensional_indices() {
        let m = Mini::new();
        let base = m.args();
        let want = selective_state_update_mtp_f64(&base).unwrap();
        let sbi = [0i64, 1, 3, 2, 9, 9];
        let mut a = base.clone();
        a.state_batch_indices = Some(HostTensor::contiguous(&sbi[..4], &[4]));
        assert_eq!(
            selective_state_update_mtp_f64(&a).unwrap(),
            want,
            "padded 1-D"
        );
        // A padded 2-D read index (rows of width 3) whose column 0 holds the same slots.
        let wide = [0i64, 7, 7, 1, 7, 7, 3, 7, 7];
        let mut a = base.clone();
        a.state_batch_indices = Some(HostTensor::contiguous(&wide, &[3, 3]));
        assert_eq!(
            selective_state_update_mtp_f64(&a).unwrap(),
            want,
            "padded 2-D"
        );

        let one = [2i64, 3, 0];
        let repeated = [2i64, 2, 2, 3, 3, 3];
        let mut a = base.clone();
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&one, &[3]));
        let mut b = base.clone();
        b.dst_state_batch_indices = Some(HostTensor::contiguous(&repeated, &[2, 3]));
        let (ra, rb) = (
            selective_state_update_mtp_f64(&a).unwrap(),
            selective_state_update_mtp_f64(&b).unwrap(),
        );
        assert_eq!(ra, rb, "1-D dst");
        assert_ne!(
            ra, want,
            "the dst index writes other slots than the read slots"
        );
    }

    #[test]
    fn validation_errors_name_the_argument() {
        let m = Mini::new();
        let base = m.args();
        let ok_cu = [0i64, 3, 6];
        // Shapes.
        let mut a = base.clone();
        a.state = HostTensor::contiguous(&m.state, &[4, 1, 2]);
        assert_eq!(err_arg(&a), "state");
        let mut a = base.clone();
        a.x = HostTensor::contiguous(&m.x, &[2, 3, 1, 2]);
        assert_eq!(err_arg(&a), "x");
        let mut a = base.clone();
        a.x = HostTensor::contiguous(&m.x, &[6, 1]);
        assert_eq!(err_arg(&a), "x");
        let mut a = base.clone();
        a.dt = HostTensor::new(&m.dt, &[2, 2, 1, 1], &[3, 1, 1, 0]);
        assert_eq!(err_arg(&a), "dt");
        let mut a = base.clone();
        a.z = Some(HostTensor::contiguous(&m.z, &[6, 1, 1]));
        assert_eq!(err_arg(&a), "z");
        let mut a = base.clone();
        a.b = HostTensor::contiguous(&m.bm, &[2, 3, 1, 1]);
        assert_eq!(err_arg(&a), "B");
        let mut a = base.clone();
        a.c = HostTensor::contiguous(&m.cm, &[2, 3, 2, 1]);
        assert_eq!(err_arg(&a), "C");
        let mut a = base.clone();
        a.a = HostTensor::new(&m.a, &[2, 1, 2], &[0, 0, 1]);
        assert_eq!(err_arg(&a), "A");
        let mut a = base.clone();
        a.d = Some(HostTensor::contiguous(&m.d, &[1, 2]));
        assert_eq!(err_arg(&a), "D");
        let mut a = base.clone();
        a.dt_bias = Some(HostTensor::contiguous(&m.d, &[1, 1, 1]));
        assert_eq!(err_arg(&a), "dt_bias");
        // ngroups not dividing nheads: 2 heads, 3 groups... with one head, B with 2 groups.
        let st2 = vec![0.0; 4 * 2 * 2 * 2];
        let mut a = base.clone();
        a.state = HostTensor::contiguous(&st2, &[4, 2, 2, 1]);
        a.x = HostTensor::new(&m.x, &[2, 3, 2, 2], &[0, 0, 0, 0]);
        a.dt = a.x.clone();
        a.a = HostTensor::new(&m.a, &[2, 2, 1], &[0, 0, 0]);
        a.d = None;
        a.b = HostTensor::new(&m.bm, &[2, 3, 3, 1], &[0, 0, 0, 0]);
        a.c = a.b.clone();
        assert_eq!(err_arg(&a), "B");
        // A tensor reaching outside its data.
        let mut a = base.clone();
        a.x = HostTensor::new(&m.x, &[2, 3, 1, 1], &[4, 1, 1, 1]);
        assert_eq!(err_arg(&a), "x");

        // cu_seqlens: with a 4-D x, missing with 3-D, too short, decreasing, past the tokens,
        // negative.
        let mut a = base.clone();
        a.cu_seqlens = Some(HostTensor::contiguous(&ok_cu, &[3]));
        assert_eq!(err_arg(&a), "cu_seqlens");
        let mut a = m.varlen(&ok_cu);
        a.cu_seqlens = None;
        assert_eq!(err_arg(&a), "cu_seqlens");
        for cu in [
            &[0i64][..],
            &[0, 4, 3],
            &[0, 3, 7],
            &[-1, 3, 6],
            &[0, 2, 1, 6],
        ] {
            assert_eq!(err_arg(&m.varlen(cu)), "cu_seqlens", "{cu:?}");
        }

        // Index tensors.
        let three = [0i64, 1, 2];
        let two = [0i64, 1];
        let mut a = base.clone();
        a.state_batch_indices = Some(HostTensor::contiguous(&three[..1], &[1]));
        assert_eq!(
            err_arg(&a),
            "state_batch_indices",
            "fewer rows than sequences"
        );
        let mut a = base.clone();
        a.state_batch_indices = Some(HostTensor::contiguous(&[0i64, 4][..], &[2]));
        assert_eq!(err_arg(&a), "state_batch_indices", "slot out of range");
        let mut a = base.clone();
        a.state_batch_indices = Some(HostTensor::contiguous(&[0i64, -2][..], &[2]));
        assert_eq!(err_arg(&a), "state_batch_indices", "negative non-pad slot");
        let mut a = base.clone();
        a.state_batch_indices = Some(HostTensor::contiguous(&two, &[2, 1]));
        a.num_accepted_tokens = Some(HostTensor::contiguous(&[1i64, 2][..], &[2]));
        assert_eq!(err_arg(&a), "state_batch_indices", "column past the width");
        let mut a = base.clone();
        a.num_accepted_tokens = Some(HostTensor::contiguous(&three[..1], &[1]));
        assert_eq!(err_arg(&a), "num_accepted_tokens");
        let six = [0i64, 1, 2, 3, 0, 1];
        let mut a = base.clone();
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&two[..1], &[1]));
        assert_eq!(err_arg(&a), "dst_state_batch_indices", "1-D dst, too short");
        let mut a = base.clone();
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&six[..4], &[2, 2]));
        assert_eq!(err_arg(&a), "dst_state_batch_indices", "narrower than T");
        let mut a = base.clone();
        let bad = [0i64, 1, 5, 0, 1, 2];
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&bad, &[2, 3]));
        assert_eq!(
            err_arg(&a),
            "dst_state_batch_indices",
            "dst slot out of range"
        );
        // Narrower than the longest varlen sequence it serves (lengths 1 and 5, width 3).
        let cu = [0i64, 1, 6];
        let mut a = m.varlen(&cu);
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&six, &[2, 3]));
        assert_eq!(err_arg(&a), "dst_state_batch_indices");

        // Write modes and the intermediate buffer.
        let mut a = base.clone();
        a.intermediate_states_buffer = Some(m.buffer());
        a.cache_steps = 3;
        a.dst_state_batch_indices = Some(HostTensor::contiguous(&six, &[2, 3]));
        assert_eq!(err_arg(&a), "dst_state_batch_indices", "two write modes");
        // intermediate_state_indices without a buffer: not read (FlashInfer's rule).
        let mut a = base.clone();
        a.intermediate_state_indices = Some(HostTensor::contiguous(&two, &[2]));
        assert_eq!(
            selective_state_update_mtp_f64(&a).unwrap(),
            selective_state_update_mtp_f64(&base).unwrap(),
            "indices without buffer"
        );
        let mut a = base.clone();
        a.intermediate_states_buffer = Some(m.buffer());
        a.cache_steps = 2;
        assert_eq!(
            err_arg(&a),
            "intermediate_states_buffer",
            "size(1) != cache_steps"
        );
        let small = [0.0; 2 * 2 * 2];
        let mut a = base.clone();
        a.intermediate_states_buffer = Some(HostTensor::contiguous(&small, &[2, 2, 1, 1, 2]));
        a.cache_steps = 2;
        assert_eq!(err_arg(&a), "cache_steps", "T = 3 > 2 cache steps");
        let mut a = base.clone();
        a.intermediate_states_buffer = Some(m.buffer());
        a.cache_steps = 3;
        a.intermediate_state_indices = Some(HostTensor::contiguous(&[0i64, 3][..], &[2]));
        assert_eq!(
            err_arg(&a),
            "intermediate_state_indices",
            "entry out of range"
        );
        a.intermediate_state_indices = Some(HostTensor::contiguous(&three, &[3]));
        assert_eq!(err_arg(&a), "intermediate_state_indices", "wrong length");
        // Without indices the entry is the read slot: slot 3 has no entry in a 3-entry buffer.
        let mut a = base.clone();
        a.intermediate_states_buffer = Some(m.buffer());
        a.cache_steps = 3;
        a.state_batch_indices = Some(HostTensor::contiguous(&[0i64, 3][..], &[2]));
        assert_eq!(err_arg(&a), "intermediate_state_indices");
    }

    /// Broadcast inputs describing an output larger than any host holds: an error, no panic.
    #[test]
    fn oversized_outputs_are_errors() {
        let m = Mini::new();
        let mut a = m.args();
        let big = [1usize << 40, 1 << 20, 1, 1];
        a.x = HostTensor::new(&m.x, &big, &[0, 0, 0, 0]);
        a.dt = a.x.clone();
        a.b = HostTensor::new(&m.bm, &[1 << 40, 1 << 20, 1, 2], &[0, 0, 0, 1]);
        a.c = a.b.clone();
        let e = selective_state_update_mtp_f64(&a).unwrap_err().to_string();
        assert!(e.contains("cannot allocate"), "{e}");
        // An element count past usize: an overflow error.
        a.x = HostTensor::new(&m.x, &[1 << 40, 1 << 40, 1, 1], &[0, 0, 0, 0]);
        let e = selective_state_update_mtp_f64(&a).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");
    }
}
