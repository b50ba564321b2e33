//! The single-token selective-state-update in f64 on host arrays: what the GPU kernel computes
//! before its fp32 rounding, plus the fp16 state stochastic rounding would produce from it.
//!
//! Slot rules are the kernel's: batch entry `b` reads slot `state_batch_indices[b, 0]` (or `b`
//! without indices); a read slot equal to `pad_slot_id` or outside `0..slots` is a pad (state
//! read as zeros, `out` still written, no state written); the write slot is
//! `dst_state_batch_indices[b, 0]` (or the read slot) and is written only when
//! `disable_state_update` is off, the entry is not a pad and the write slot is neither
//! `pad_slot_id` nor out of range.
//! Reads come from the state as given (a write slot of one entry that is the read slot of
//! another is a caller error on the GPU).

use crate::error::{Error, Result};
use crate::reference::sr::{SrMapping, SrRule};

/// A strided host tensor: element `[i0, i1, ..]` at `data[Σ i_k · strides_k]`.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor<'a, T = f64> {
    /// The elements.
    pub data: &'a [T],
    /// The sizes of the dimensions.
    pub shape: Vec<usize>,
    /// The strides, in elements.
    pub strides: Vec<usize>,
}

impl<'a, T: Copy> HostTensor<'a, T> {
    /// A tensor of `shape` with `strides` over `data`.
    pub fn new(data: &'a [T], shape: &[usize], strides: &[usize]) -> Self {
        Self {
            data,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        }
    }

    /// A row-major tensor of `shape` over `data`.
    pub fn contiguous(data: &'a [T], shape: &[usize]) -> Self {
        let mut strides = vec![0; shape.len()];
        let mut acc = 1usize;
        for k in (0..shape.len()).rev() {
            strides[k] = acc;
            acc = acc.saturating_mul(shape[k]);
        }
        Self::new(data, shape, &strides)
    }

    /// Checks rank, shape (`None`: any size >= 1) and that every element lies inside `data`.
    pub(crate) fn check(&self, name: &'static str, expected: &[Option<usize>]) -> Result<()> {
        self.check_sizes(name, expected, false)
    }

    /// As [`HostTensor::check`], with each size at least the expected one (FlashInfer's padded
    /// index tensors: only the first rows and columns are read).
    pub(crate) fn check_at_least(&self, name: &'static str, min: &[Option<usize>]) -> Result<()> {
        self.check_sizes(name, min, true)
    }

    fn check_sizes(
        &self,
        name: &'static str,
        expected: &[Option<usize>],
        at_least: bool,
    ) -> Result<()> {
        if self.shape.len() != expected.len() || self.strides.len() != expected.len() {
            return Err(Error::invalid(
                name,
                format!(
                    "expected {} dimensions with as many strides, got shape {:?} strides {:?}",
                    expected.len(),
                    self.shape,
                    self.strides
                ),
            ));
        }
        for (k, (&got, want)) in self.shape.iter().zip(expected).enumerate() {
            if got == 0 || want.is_some_and(|w| if at_least { got < w } else { w != got }) {
                return Err(Error::invalid(
                    name,
                    format!(
                        "expected size({k}) {} {}, got shape {:?}",
                        if at_least { ">=" } else { "==" },
                        want.map_or("any >= 1".to_string(), |w| w.to_string()),
                        self.shape
                    ),
                ));
            }
        }
        let mut max = 0usize;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            max = (n - 1)
                .checked_mul(s)
                .and_then(|v| max.checked_add(v))
                .ok_or_else(|| Error::invalid(name, "extent overflows usize"))?;
        }
        if max >= self.data.len() {
            return Err(Error::invalid(
                name,
                format!(
                    "shape {:?} strides {:?} reach element {max}, data holds {}",
                    self.shape,
                    self.strides,
                    self.data.len()
                ),
            ));
        }
        Ok(())
    }

    /// Element at `idx` (in bounds after [`HostTensor::check`]).
    pub(crate) fn at(&self, idx: &[usize]) -> T {
        let off: usize = idx.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
        self.data[off]
    }
}

/// The host inputs of [`selective_state_update_f64`]: the GPU API's tensors as f64 (indices as
/// i64), with the same shapes and strides, and its flags. See [`crate::ssu`] for the shapes.
#[derive(Clone, Debug)]
pub struct SsuHostArgs<'a> {
    /// State (slots, nheads, dim, dstate).
    pub state: HostTensor<'a>,
    /// `x` (batch, nheads, dim).
    pub x: HostTensor<'a>,
    /// `dt` (batch, nheads, dim).
    pub dt: HostTensor<'a>,
    /// `A` (nheads, dim, dstate).
    pub a: HostTensor<'a>,
    /// `B` (batch, ngroups, dstate).
    pub b: HostTensor<'a>,
    /// `C` (batch, ngroups, dstate).
    pub c: HostTensor<'a>,
    /// Optional `D` (nheads, dim).
    pub d: Option<HostTensor<'a>>,
    /// Optional gate `z` (batch, nheads, dim).
    pub z: Option<HostTensor<'a>>,
    /// Optional `dt_bias` (nheads, dim).
    pub dt_bias: Option<HostTensor<'a>>,
    /// Optional read slots (batch,) or (batch, T); column 0 is used.
    pub state_batch_indices: Option<HostTensor<'a, i64>>,
    /// Optional write slots, same form.
    pub dst_state_batch_indices: Option<HostTensor<'a, i64>>,
    /// Slot value of a padded entry.
    pub pad_slot_id: i64,
    /// Softplus on `dt + dt_bias` (when it is <= 20).
    pub dt_softplus: bool,
    /// FlashInfer's `disable_state_update`: leave the state untouched (only `out` is written).
    pub disable_state_update: bool,
}

/// One state write of the reference: batch entry `batch` read `read_slot` and wrote every
/// `(h, d, n)` of `write_slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateWrite {
    /// Batch entry.
    pub batch: usize,
    /// Slot the state was read from (its random bits come from this slot).
    pub read_slot: usize,
    /// Slot written.
    pub write_slot: usize,
}

/// The result of [`selective_state_update_f64`].
#[derive(Clone, Debug, PartialEq)]
pub struct SsuReference {
    /// The state buffer after the call, unrounded: a copy of the input `state.data` (same
    /// indexing) with every written element replaced by its f64 value.
    pub state: Vec<f64>,
    /// `out` as (batch, nheads, dim), row-major, unrounded.
    pub out: Vec<f64>,
    /// The state writes in batch order.
    pub writes: Vec<StateWrite>,
    /// Batch entries.
    pub batch: usize,
    /// Heads.
    pub nheads: usize,
    /// Rows per head.
    pub dim: usize,
    /// Columns per row.
    pub dstate: usize,
    /// Strides of the state, in elements.
    pub state_strides: [usize; 4],
}

impl SsuReference {
    /// Index into [`SsuReference::state`] of element `(slot, h, d, n)` (wrapping arithmetic:
    /// for coordinates outside the reference's shape the index is meaningless, never a panic).
    pub fn state_index(&self, slot: usize, h: usize, d: usize, n: usize) -> usize {
        let s = self.state_strides;
        slot.wrapping_mul(s[0])
            .wrapping_add(h.wrapping_mul(s[1]))
            .wrapping_add(d.wrapping_mul(s[2]))
            .wrapping_add(n.wrapping_mul(s[3]))
    }

    /// `out[b, h, d]`.
    ///
    /// # Panics
    /// If `(b, h, d)` lies outside `out` (an indexing error of the caller, like a slice's).
    pub fn out_at(&self, b: usize, h: usize, d: usize) -> f64 {
        self.out[b
            .wrapping_mul(self.nheads)
            .wrapping_add(h)
            .wrapping_mul(self.dim)
            .wrapping_add(d)]
    }
}

/// Most f64 elements the reference allocates for one output (2^34, 128 GiB): far above any
/// problem it is used for, and below what would only fail (or swap) on a host.
const MAX_HOST_ELEMS: usize = 1 << 34;

/// `n` zeros, or an error naming `name` when `n` is above [`MAX_HOST_ELEMS`] or the host cannot
/// allocate them.
pub(crate) fn zeros(n: usize, name: &'static str) -> Result<Vec<f64>> {
    if n > MAX_HOST_ELEMS {
        return Err(Error::invalid(
            name,
            format!("cannot allocate {n} f64 on the host (limit {MAX_HOST_ELEMS})"),
        ));
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::invalid(name, format!("cannot allocate {n} f64 on the host")))?;
    v.resize(n, 0.0);
    Ok(v)
}

pub(crate) fn softplus(v: f64) -> f64 {
    v.exp().ln_1p()
}

pub(crate) fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// Column 0 of an index tensor at batch entry `b`.
fn index_at(t: &HostTensor<'_, i64>, b: usize) -> i64 {
    if t.shape.len() == 2 {
        t.at(&[b, 0])
    } else {
        t.at(&[b])
    }
}

/// An index tensor of `batch` (or more: padded) rows, 1-D or 2-D.
fn check_index(name: &'static str, t: &HostTensor<'_, i64>, batch: usize) -> Result<()> {
    match t.shape.len() {
        1 => t.check_at_least(name, &[Some(batch)]),
        _ => t.check_at_least(name, &[Some(batch), None]),
    }
}

/// The selective-state-update in f64, per batch entry `b`, head `h`, row `d`, column `n`
/// (group `g = h / (nheads / ngroups)`):
///
/// - `dt' = dt[b,h,d] + dt_bias[h,d]`; with `dt_softplus` and `dt' <= 20`:
///   `dt' = log1p(exp(dt'))` (a NaN skips it);
/// - `dA = exp(A[h,d,n] · dt')`, `s'[n] = dA · s[n] + x[b,h,d] · B[b,g,n] · dt'` with `s` the
///   read slot's state (zeros for a pad);
/// - `y = D[h,d] · x[b,h,d] + Σ_n C[b,g,n] · s'[n]`; with `z`: `y *= z · sigmoid(z)`.
///
/// Absent `D` and `dt_bias` count as 0. Slots as in the module doc. Errors (argument named)
/// when shapes are inconsistent or a tensor reaches outside its data.
pub fn selective_state_update_f64(args: &SsuHostArgs<'_>) -> Result<SsuReference> {
    let st = &args.state;
    st.check("state", &[None, None, None, None])?;
    let (slots, nheads, dim, dstate) = (st.shape[0], st.shape[1], st.shape[2], st.shape[3]);
    args.x.check("x", &[None, Some(nheads), Some(dim)])?;
    let batch = args.x.shape[0];
    args.dt
        .check("dt", &[Some(batch), Some(nheads), Some(dim)])?;
    args.a
        .check("A", &[Some(nheads), Some(dim), Some(dstate)])?;
    args.b.check("B", &[Some(batch), None, Some(dstate)])?;
    let ngroups = args.b.shape[1];
    if nheads % ngroups != 0 {
        return Err(Error::invalid(
            "B",
            format!("expected ngroups dividing nheads ({nheads}), got {ngroups}"),
        ));
    }
    args.c
        .check("C", &[Some(batch), Some(ngroups), Some(dstate)])?;
    if let Some(d) = &args.d {
        d.check("D", &[Some(nheads), Some(dim)])?;
    }
    if let Some(bias) = &args.dt_bias {
        bias.check("dt_bias", &[Some(nheads), Some(dim)])?;
    }
    if let Some(z) = &args.z {
        z.check("z", &[Some(batch), Some(nheads), Some(dim)])?;
    }
    if let Some(t) = &args.state_batch_indices {
        check_index("state_batch_indices", t, batch)?;
    }
    if let Some(t) = &args.dst_state_batch_indices {
        check_index("dst_state_batch_indices", t, batch)?;
    }

    let heads_per_group = nheads / ngroups;
    let state_strides = [st.strides[0], st.strides[1], st.strides[2], st.strides[3]];
    let mut new_state = st.data.to_vec();
    // Broadcast (stride-0) inputs can describe an output far larger than any input: its size
    // is checked and allocated fallibly (an error, not an overflow panic or an allocation abort).
    let out_len = batch
        .checked_mul(nheads)
        .and_then(|v| v.checked_mul(dim))
        .ok_or_else(|| Error::invalid("x", "batch * nheads * dim overflows usize"))?;
    let mut out = zeros(out_len, "x")?;
    let mut writes = Vec::new();
    let in_range = |slot: i64| slot >= 0 && (slot as u64) < slots as u64;
    let mut s_new = zeros(dstate, "state")?;

    for b in 0..batch {
        let read_slot = args
            .state_batch_indices
            .as_ref()
            .map_or(b as i64, |t| index_at(t, b));
        let pad = read_slot == args.pad_slot_id || !in_range(read_slot);
        let write_slot = args
            .dst_state_batch_indices
            .as_ref()
            .map_or(read_slot, |t| index_at(t, b));
        let write = !args.disable_state_update
            && !pad
            && write_slot != args.pad_slot_id
            && in_range(write_slot);
        if write {
            writes.push(StateWrite {
                batch: b,
                read_slot: read_slot as usize,
                write_slot: write_slot as usize,
            });
        }
        for h in 0..nheads {
            let g = h / heads_per_group;
            for d in 0..dim {
                let mut dt = args.dt.at(&[b, h, d]);
                if let Some(bias) = &args.dt_bias {
                    dt += bias.at(&[h, d]);
                }
                if args.dt_softplus && dt <= 20.0 {
                    dt = softplus(dt);
                }
                let x = args.x.at(&[b, h, d]);
                let mut y = args.d.as_ref().map_or(0.0, |t| t.at(&[h, d])) * x;
                for (n, s_out) in s_new.iter_mut().enumerate() {
                    let s = if pad {
                        0.0
                    } else {
                        st.at(&[read_slot as usize, h, d, n])
                    };
                    let da = (args.a.at(&[h, d, n]) * dt).exp();
                    let s2 = da * s + x * (args.b.at(&[b, g, n]) * dt);
                    y += args.c.at(&[b, g, n]) * s2;
                    *s_out = s2;
                }
                if write {
                    let w = write_slot as usize;
                    for (n, &v) in s_new.iter().enumerate() {
                        let idx = w * state_strides[0]
                            + h * state_strides[1]
                            + d * state_strides[2]
                            + n * state_strides[3];
                        new_state[idx] = v;
                    }
                }
                if let Some(z) = &args.z {
                    let zv = z.at(&[b, h, d]);
                    y *= zv * sigmoid(zv);
                }
                out[(b * nheads + h) * dim + d] = y;
            }
        }
    }

    Ok(SsuReference {
        state: new_state,
        out,
        writes,
        batch,
        nheads,
        dim,
        dstate,
        state_strides,
    })
}

/// The fp16 state buffer stochastic rounding produces from `reference`: `initial` (the fp16
/// bits of the state buffer before the call, same indexing as [`SsuReference::state`]) with
/// every written element replaced by [`sr_f16_bits`](crate::reference::sr_f16_bits)`(value as
/// f32, r)`, `r` from `mapping` at the element's READ slot. The f64 value is rounded to f32
/// first (round to nearest), so an
/// element whose GPU fp32 value differs from that rounding may land one fp16 ulp away; use it
/// to check the random mapping statistically, not bit for bit.
///
/// FlashInfer 0.7.2's conversion; [`predict_sr_state_f16_with_rule`] takes the rule.
///
/// Errors: `initial` of another length than the state (`state`); `mapping` built for another
/// dim, dstate or slot stride (`mapping`).
pub fn predict_sr_state_f16(
    initial: &[u16],
    reference: &SsuReference,
    mapping: &SrMapping,
) -> Result<Vec<u16>> {
    predict_sr_state_f16_with_rule(initial, reference, mapping, SrRule::V072)
}

/// [`predict_sr_state_f16`] under the stochastic-rounding conversion `rule`
/// ([`SrRule::round`]: [`SrRule::V072`], or [`SrRule::V074`] for a call made with
/// `SsuArgs::sr_rule(SrRule::V074)`); the random bits are the same for both rules. The same
/// caveat: the f64 value is rounded to f32 first.
///
/// Errors: as [`predict_sr_state_f16`].
pub fn predict_sr_state_f16_with_rule(
    initial: &[u16],
    reference: &SsuReference,
    mapping: &SrMapping,
    rule: SrRule,
) -> Result<Vec<u16>> {
    if initial.len() != reference.state.len() {
        return Err(Error::invalid(
            "state",
            format!(
                "expected {} initial fp16 elements, got {}",
                reference.state.len(),
                initial.len()
            ),
        ));
    }
    let want = (reference.dim, reference.dstate, reference.state_strides[0]);
    let got = (mapping.dim(), mapping.dstate(), mapping.slot_stride());
    if want != got {
        return Err(Error::invalid(
            "mapping",
            format!("expected (dim, dstate, slot stride) = {want:?}, got {got:?}"),
        ));
    }
    let mut bits = initial.to_vec();
    for w in &reference.writes {
        for h in 0..reference.nheads {
            for d in 0..reference.dim {
                for n in 0..reference.dstate {
                    let idx = reference.state_index(w.write_slot, h, d, n);
                    let r = mapping.random_bits(w.read_slot as i64, h, d, n);
                    let (Some(bit), Some(&v)) = (bits.get_mut(idx), reference.state.get(idx))
                    else {
                        return Err(Error::invalid(
                            "reference",
                            format!("write {w:?} reaches element {idx} outside the state"),
                        ));
                    };
                    *bit = rule.round(v as f32, r);
                }
            }
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::sr::{sr_f16_bits, sr_f16_bits_v074};
    use crate::ssu::Algorithm;
    use half::f16;

    /// A tiny problem: 1 slot, batch 1, nheads 1, dim 1, dstate 2, ngroups 1.
    struct Tiny {
        state: Vec<f64>,
        x: Vec<f64>,
        dt: Vec<f64>,
        a: Vec<f64>,
        b: Vec<f64>,
        c: Vec<f64>,
        d: Vec<f64>,
        bias: Vec<f64>,
        z: Vec<f64>,
    }

    impl Tiny {
        fn new() -> Self {
            Self {
                state: vec![1.0, 2.0],
                x: vec![2.0],
                dt: vec![0.5],
                a: vec![-1.0],
                b: vec![1.0, -1.0],
                c: vec![0.5, 2.0],
                d: vec![3.0],
                bias: vec![0.25],
                z: vec![1.0],
            }
        }

        fn args(&self) -> SsuHostArgs<'_> {
            SsuHostArgs {
                state: HostTensor::contiguous(&self.state, &[1, 1, 1, 2]),
                x: HostTensor::contiguous(&self.x, &[1, 1, 1]),
                dt: HostTensor::new(&self.dt, &[1, 1, 1], &[1, 1, 0]),
                a: HostTensor::new(&self.a, &[1, 1, 2], &[1, 0, 0]),
                b: HostTensor::contiguous(&self.b, &[1, 1, 2]),
                c: HostTensor::contiguous(&self.c, &[1, 1, 2]),
                d: Some(HostTensor::new(&self.d, &[1, 1], &[1, 0])),
                z: None,
                dt_bias: Some(HostTensor::new(&self.bias, &[1, 1], &[1, 0])),
                state_batch_indices: None,
                dst_state_batch_indices: None,
                pad_slot_id: -1,
                dt_softplus: false,
                disable_state_update: false,
            }
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-13 * b.abs().max(1.0)
    }

    #[test]
    fn hand_computed_case() {
        let t = Tiny::new();
        let r = selective_state_update_f64(&t.args()).unwrap();
        // dt' = 0.75, dA = exp(-0.75) = 0.4723665527410147.
        // s0' = 0.47236655 * 1 + 2 * 1 * 0.75 = 1.9723665527410148
        // s1' = 0.47236655 * 2 + 2 * -1 * 0.75 = -0.5552668945179706
        // y = 3 * 2 + 0.5 * s0' + 2 * s1' = 5.875649487334567
        assert!(close(r.state[0], 1.9723665527410148), "{}", r.state[0]);
        assert!(close(r.state[1], -0.5552668945179706), "{}", r.state[1]);
        assert!(close(r.out[0], 5.875649487334567), "{}", r.out[0]);
        assert_eq!(
            r.writes,
            vec![StateWrite {
                batch: 0,
                read_slot: 0,
                write_slot: 0
            }]
        );
        // Gate z = 1: y * 1 * sigmoid(1) = y * 0.7310585786300049.
        let mut args = t.args();
        args.z = Some(HostTensor::contiguous(&t.z, &[1, 1, 1]));
        let g = selective_state_update_f64(&args).unwrap();
        assert!(close(g.out[0], 5.875649487334567 * 0.7310585786300049));
        assert_eq!(g.state, r.state);
        // Without D and dt_bias: dt' = 0.5, y = sum C * s' only.
        let mut args = t.args();
        args.d = None;
        args.dt_bias = None;
        let n = selective_state_update_f64(&args).unwrap();
        let da = (-0.5f64).exp();
        let (s0, s1) = (da + 1.0, 2.0 * da - 1.0);
        assert!(close(n.out[0], 0.5 * s0 + 2.0 * s1));
        assert!(close(n.state[0], s0) && close(n.state[1], s1));
    }

    /// out == dt' when x = B = C = 1, A = 0, state 0, no D.
    fn dt_effective(dt: f64, softplus_on: bool) -> f64 {
        let (state, x, dtv, a, b, c) = ([0.0; 64], [1.0], [dt], [0.0], [1.0; 64], {
            let mut c = [0.0; 64];
            c[0] = 1.0;
            c
        });
        let args = SsuHostArgs {
            state: HostTensor::contiguous(&state, &[1, 1, 1, 64]),
            x: HostTensor::contiguous(&x, &[1, 1, 1]),
            dt: HostTensor::new(&dtv, &[1, 1, 1], &[1, 1, 0]),
            a: HostTensor::new(&a, &[1, 1, 64], &[1, 0, 0]),
            b: HostTensor::contiguous(&b, &[1, 1, 64]),
            c: HostTensor::contiguous(&c, &[1, 1, 64]),
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: None,
            dst_state_batch_indices: None,
            pad_slot_id: -1,
            dt_softplus: softplus_on,
            disable_state_update: true,
        };
        selective_state_update_f64(&args).unwrap().out[0]
    }

    #[test]
    fn softplus_threshold() {
        assert!(close(dt_effective(0.0, true), std::f64::consts::LN_2));
        assert!(close(dt_effective(-3.0, true), (-3.0f64).exp().ln_1p()));
        // At 20 softplus still applies (log1p(e^20) = 20.000000002061153); above it does not.
        let at = dt_effective(20.0, true);
        assert!(at > 20.0 && close(at, 20.000000002061153), "{at}");
        assert_eq!(dt_effective(20.000001, true), 20.000001);
        assert_eq!(dt_effective(-3.0, false), -3.0);
        assert!(dt_effective(f64::NAN, true).is_nan());
    }

    /// 3 slots (slot stride 2 * 1 * 1 * 64 + 64 padding), batch 2, nheads 2, dim 1, dstate 64.
    struct Slots {
        state: Vec<f64>,
        x: Vec<f64>,
        dt: Vec<f64>,
        a: Vec<f64>,
        bc: Vec<f64>,
    }

    const SS: usize = 2 * 64 + 64;

    impl Slots {
        fn new() -> Self {
            Self {
                state: (0..3 * SS).map(|i| (i as f64) * 0.01 - 1.0).collect(),
                x: vec![0.5, -1.0, 2.0, 0.25],
                dt: vec![0.1, 0.2, 0.3, 0.4],
                a: vec![-0.5, -2.0],
                bc: (0..2 * 64).map(|i| ((i % 7) as f64) * 0.1 - 0.3).collect(),
            }
        }

        fn args<'a>(&'a self, src: Option<&'a [i64]>, dst: Option<&'a [i64]>) -> SsuHostArgs<'a> {
            SsuHostArgs {
                state: HostTensor::new(&self.state, &[3, 2, 1, 64], &[SS, 64, 64, 1]),
                x: HostTensor::contiguous(&self.x, &[2, 2, 1]),
                dt: HostTensor::new(&self.dt, &[2, 2, 1], &[2, 1, 0]),
                a: HostTensor::new(&self.a, &[2, 1, 64], &[1, 0, 0]),
                b: HostTensor::contiguous(&self.bc, &[2, 1, 64]),
                c: HostTensor::contiguous(&self.bc, &[2, 1, 64]),
                d: None,
                z: None,
                dt_bias: None,
                state_batch_indices: src.map(|s| HostTensor::contiguous(s, &[2])),
                dst_state_batch_indices: dst.map(|s| HostTensor::contiguous(s, &[2])),
                pad_slot_id: 0,
                dt_softplus: true,
                disable_state_update: false,
            }
        }
    }

    /// out and new state of entry (b, h) computed directly from the formulas, reading `slot`.
    fn direct(t: &Slots, b: usize, h: usize, slot: Option<usize>) -> (f64, Vec<f64>) {
        let dt = softplus(t.dt[b * 2 + h]);
        let da = (t.a[h] * dt).exp();
        let x = t.x[b * 2 + h];
        let mut y = 0.0;
        let mut s_new = Vec::new();
        for n in 0..64 {
            let s = slot.map_or(0.0, |s| t.state[s * SS + h * 64 + n]);
            let bn = t.bc[b * 64 + n];
            let v = da * s + x * (bn * dt);
            y += bn * v;
            s_new.push(v);
        }
        (y, s_new)
    }

    #[test]
    fn pads_and_destinations() {
        let t = Slots::new();
        // Entry 0 is a pad (slot 0 == pad_slot_id); entry 1 reads slot 2, writes slot 1.
        let r = selective_state_update_f64(&t.args(Some(&[0, 2]), Some(&[2, 1]))).unwrap();
        assert_eq!(
            r.writes,
            vec![StateWrite {
                batch: 1,
                read_slot: 2,
                write_slot: 1
            }]
        );
        for h in 0..2 {
            let (y0, _) = direct(&t, 0, h, None);
            assert!(close(r.out_at(0, h, 0), y0), "pad out h {h}");
            let (y1, s1) = direct(&t, 1, h, Some(2));
            assert!(close(r.out_at(1, h, 0), y1));
            for (n, &v) in s1.iter().enumerate() {
                assert!(close(r.state[r.state_index(1, h, 0, n)], v));
            }
        }
        // Slots 0 and 2 and the padding of slot 1 are untouched.
        for i in (0..SS).chain(2 * SS..3 * SS).chain(SS + 128..2 * SS) {
            assert_eq!(r.state[i], t.state[i], "element {i}");
        }

        // Without dst the read slot is written; a dst equal to the pad id is not written.
        let r = selective_state_update_f64(&t.args(Some(&[1, 2]), None)).unwrap();
        let slots: Vec<(usize, usize)> = r
            .writes
            .iter()
            .map(|w| (w.read_slot, w.write_slot))
            .collect();
        assert_eq!(slots, vec![(1, 1), (2, 2)]);
        let r = selective_state_update_f64(&t.args(Some(&[1, 2]), Some(&[0, 2]))).unwrap();
        assert_eq!(r.writes.len(), 1);
        assert_eq!(r.writes[0].write_slot, 2);

        // Out-of-range slots are pads (read) or skipped (write), as in the kernel.
        let r = selective_state_update_f64(&t.args(Some(&[7, -3]), None)).unwrap();
        assert!(r.writes.is_empty());
        assert_eq!(r.state, t.state);
        let (y, _) = direct(&t, 1, 1, None);
        assert!(close(r.out_at(1, 1, 0), y));
        let r = selective_state_update_f64(&t.args(Some(&[1, 2]), Some(&[1, 3]))).unwrap();
        assert_eq!(r.writes.len(), 1);

        // Without indices entry b uses slot b, and pad_slot_id still applies (0 here).
        let r = selective_state_update_f64(&t.args(None, None)).unwrap();
        assert_eq!(
            r.writes,
            vec![StateWrite {
                batch: 1,
                read_slot: 1,
                write_slot: 1
            }]
        );
        let (y, _) = direct(&t, 0, 0, None);
        assert!(close(r.out_at(0, 0, 0), y));
    }

    #[test]
    fn disable_state_update_writes_nothing_but_out() {
        let t = Slots::new();
        let on = selective_state_update_f64(&t.args(Some(&[1, 2]), None)).unwrap();
        let mut args = t.args(Some(&[1, 2]), None);
        args.disable_state_update = true;
        let off = selective_state_update_f64(&args).unwrap();
        assert!(off.writes.is_empty());
        assert_eq!(off.state, t.state);
        assert_eq!(off.out, on.out);
    }

    #[test]
    fn two_d_indices_use_column_zero() {
        let t = Slots::new();
        let one = selective_state_update_f64(&t.args(Some(&[1, 2]), Some(&[2, 1]))).unwrap();
        let src = [1i64, 9, 9, 2, 9, 9];
        let dst = [2i64, 1, 9, 9, 9, 9];
        let mut args = t.args(None, None);
        args.state_batch_indices = Some(HostTensor::new(&src, &[2, 3], &[3, 1]));
        args.dst_state_batch_indices = Some(HostTensor::new(&dst, &[2, 3], &[1, 2]));
        let two = selective_state_update_f64(&args).unwrap();
        assert_eq!(one, two);
    }

    #[test]
    fn groups_and_strides() {
        // nheads 4, ngroups 2: heads 0, 1 use group 0 (B = C = 0 there), heads 2, 3 group 1.
        let (batch, nheads, dstate) = (1, 4, 64);
        let state = vec![0.0; nheads * dstate];
        let x = vec![1.0, 2.0, 3.0, 4.0];
        let dt = vec![1.0; 4];
        let a = vec![0.0; 4];
        let mut bc = vec![0.0; 2 * dstate];
        bc[dstate..].fill(1.0);
        let args = SsuHostArgs {
            state: HostTensor::contiguous(&state, &[1, nheads, 1, dstate]),
            x: HostTensor::contiguous(&x, &[batch, nheads, 1]),
            dt: HostTensor::new(&dt, &[batch, nheads, 1], &[nheads, 1, 0]),
            a: HostTensor::new(&a, &[nheads, 1, dstate], &[1, 0, 0]),
            b: HostTensor::contiguous(&bc, &[batch, 2, dstate]),
            c: HostTensor::contiguous(&bc, &[batch, 2, dstate]),
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: None,
            dst_state_batch_indices: None,
            pad_slot_id: -1,
            dt_softplus: false,
            disable_state_update: false,
        };
        let r = selective_state_update_f64(&args).unwrap();
        // y = sum_n C * x * B * dt = 64 * x for group 1, 0 for group 0.
        assert_eq!(r.out, vec![0.0, 0.0, 192.0, 256.0]);

        // The same x laid out with a padded batch stride and 2 entries gives the same rows.
        let xs = vec![1.0, 2.0, 3.0, 4.0, -7.0, -7.0, 1.0, 2.0, 3.0, 4.0];
        let dts = vec![1.0, 1.0, 1.0, 1.0, -7.0, 1.0, 1.0, 1.0, 1.0];
        let bc2: Vec<f64> = bc.iter().chain(&bc).copied().collect();
        let state2 = vec![0.0; 2 * nheads * dstate];
        let mut args2 = args.clone();
        args2.state = HostTensor::contiguous(&state2, &[2, nheads, 1, dstate]);
        args2.x = HostTensor::new(&xs, &[2, nheads, 1], &[6, 1, 1]);
        args2.dt = HostTensor::new(&dts, &[2, nheads, 1], &[5, 1, 0]);
        args2.b = HostTensor::contiguous(&bc2, &[2, 2, dstate]);
        args2.c = HostTensor::contiguous(&bc2, &[2, 2, dstate]);
        let r2 = selective_state_update_f64(&args2).unwrap();
        assert_eq!(&r2.out[..4], &r.out[..]);
        assert_eq!(&r2.out[4..], &r.out[..]);
    }

    #[test]
    fn input_errors_name_the_argument() {
        let t = Tiny::new();
        let mut args = t.args();
        args.x = HostTensor::contiguous(&t.x, &[1, 2, 1]);
        let e = selective_state_update_f64(&args).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { argument: "x", .. }),
            "{e}"
        );
        let mut args = t.args();
        args.b = HostTensor::contiguous(&t.b, &[1, 1, 4]);
        let e = selective_state_update_f64(&args).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { argument: "B", .. }),
            "{e}"
        );
        let mut args = t.args();
        args.state = HostTensor::new(&t.state, &[1, 1, 1, 2], &[2, 2, 2, 2]);
        let e = selective_state_update_f64(&args).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    argument: "state",
                    ..
                }
            ),
            "{e}"
        );
        let idx = [0i64];
        let mut args = t.args();
        args.state_batch_indices = Some(HostTensor::contiguous(&idx, &[1, 1, 1]));
        let e = selective_state_update_f64(&args).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    argument: "state_batch_indices",
                    ..
                }
            ),
            "{e}"
        );
    }

    /// The f64 result of the SR tests' call (read slots 0, 2; write slots 2, 1) and the fp16 bits
    /// of its initial state.
    fn sr_problem() -> (SsuReference, Vec<u16>) {
        let t = Slots::new();
        let r = selective_state_update_f64(&t.args(Some(&[0, 2]), Some(&[2, 1]))).unwrap();
        let initial = t
            .state
            .iter()
            .map(|&v| f16::from_f64(v).to_bits())
            .collect();
        (r, initial)
    }

    #[test]
    fn predicted_sr_state() {
        let (r, initial) = sr_problem();
        let m = SrMapping::new(Algorithm::Vertical, SS, 1, 64, 0xC0FFEE, 10).unwrap();
        let bits = predict_sr_state_f16(&initial, &r, &m).unwrap();
        let mut rounded_up = 0;
        for (i, (&got, &init)) in bits.iter().zip(&initial).enumerate() {
            let slot = i / SS;
            let within = i % SS;
            if slot != 1 || within >= 128 {
                assert_eq!(got, init, "unwritten element {i}");
                continue;
            }
            // Written: one of the two fp16 neighbours of the f32 value, with the bits of the
            // READ slot (2), element (h, 0, n).
            let (h, n) = (within / 64, within % 64);
            let v = r.state[i] as f32;
            let rr = m.random_bits(2, h, 0, n);
            assert_eq!(got, sr_f16_bits(v, rr));
            let lo = sr_f16_bits(v, 0);
            assert!(
                got == lo || got == lo + 1,
                "element {i}: {got:#x} vs {lo:#x}"
            );
            rounded_up += usize::from(got != lo);
        }
        assert!(rounded_up > 0);
        // The rule: 0.7.2 is the default; 0.7.4 rounds each written element by its own formula
        // with the same random bits.
        assert_eq!(
            predict_sr_state_f16_with_rule(&initial, &r, &m, SrRule::V072).unwrap(),
            bits
        );
        let bits074 = predict_sr_state_f16_with_rule(&initial, &r, &m, SrRule::V074).unwrap();
        for (i, (&got, &init)) in bits074.iter().zip(&initial).enumerate() {
            let (slot, within) = (i / SS, i % SS);
            if slot != 1 || within >= 128 {
                assert_eq!(got, init, "unwritten element {i}");
                continue;
            }
            let (h, n) = (within / 64, within % 64);
            let rr = m.random_bits(2, h, 0, n);
            assert_eq!(got, sr_f16_bits_v074(r.state[i] as f32, rr), "element {i}");
        }
        let e = predict_sr_state_f16_with_rule(&initial[1..], &r, &m, SrRule::V074).unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidArgument {
                argument: "state",
                ..
            }
        ));
        // Mismatched inputs are errors, not panics.
        let e = predict_sr_state_f16(&initial[1..], &r, &m).unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidArgument {
                argument: "state",
                ..
            }
        ));
        let m2 = SrMapping::new(Algorithm::Vertical, SS + 8, 1, 64, 0xC0FFEE, 10).unwrap();
        let e = predict_sr_state_f16(&initial, &r, &m2).unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidArgument {
                argument: "mapping",
                ..
            }
        ));
    }

    /// The predicted stochastically rounded state at round counts other than torch's 10 (any
    /// count >= 1 is FlashInfer's): every written element is the 0.7.2 conversion of its f32
    /// value with the 13 bits of Philox4x32-R at the READ slot's offset, and the counts give
    /// different states.
    #[test]
    fn predicted_sr_state_at_any_round_count() {
        use crate::philox::{counter_of, key_of, philox4x32};
        let (r, initial) = sr_problem();
        let mut states = Vec::new();
        for rounds in [1u32, 3, 7, 12] {
            for algorithm in [Algorithm::Simple, Algorithm::Vertical] {
                let m = SrMapping::new(algorithm, SS, 1, 64, 0xC0FFEE, rounds).unwrap();
                let bits = predict_sr_state_f16(&initial, &r, &m).unwrap();
                for (i, (&got, &init)) in bits.iter().zip(&initial).enumerate() {
                    let (slot, within) = (i / SS, i % SS);
                    if slot != 1 || within >= 128 {
                        assert_eq!(got, init, "unwritten element {i}");
                        continue;
                    }
                    let (h, n) = (within / 64, within % 64);
                    let (o, word) = m.philox_offset(2, h, 0, n);
                    let rr = philox4x32(counter_of(o), key_of(0xC0FFEE), rounds)[word] & 0x1FFF;
                    assert_eq!(got, sr_f16_bits(r.state[i] as f32, rr), "rounds {rounds}");
                }
                if algorithm == Algorithm::Simple {
                    states.push(bits);
                }
            }
        }
        for (a, sa) in states.iter().enumerate() {
            for sb in &states[a + 1..] {
                assert_ne!(sa, sb, "two round counts gave one state");
            }
        }
    }

    /// Public fields can describe what no allocation holds: errors, never a panic or an abort.
    #[test]
    fn oversized_or_tampered_inputs_are_errors() {
        let t = Tiny::new();
        // Broadcast inputs (stride 0) with an output of 2^70 elements: an overflow error.
        let mut a = t.args();
        let big = [1usize << 40, 1, 1 << 30];
        a.state = HostTensor::new(&t.state, &[1, 1, 1 << 30, 2], &[0, 0, 0, 1]);
        a.x = HostTensor::new(&t.x, &big, &[0, 0, 0]);
        a.dt = HostTensor::new(&t.dt, &big, &[0, 0, 0]);
        a.a = HostTensor::new(&t.a, &[1, 1 << 30, 2], &[0, 0, 0]);
        a.b = HostTensor::new(&t.b, &[1 << 40, 1, 2], &[0, 0, 1]);
        a.c = HostTensor::new(&t.c, &[1 << 40, 1, 2], &[0, 0, 1]);
        a.d = None;
        a.dt_bias = None;
        let e = selective_state_update_f64(&a).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");
        // 2^42 f64 (32 TiB): an error, not an allocation abort.
        let big = [1usize << 22, 1, 1 << 20];
        a.state = HostTensor::new(&t.state, &[1, 1, 1 << 20, 2], &[0, 0, 0, 1]);
        a.x = HostTensor::new(&t.x, &big, &[0, 0, 0]);
        a.dt = HostTensor::new(&t.dt, &big, &[0, 0, 0]);
        a.a = HostTensor::new(&t.a, &[1, 1 << 20, 2], &[0, 0, 0]);
        a.b = HostTensor::new(&t.b, &[1 << 22, 1, 2], &[0, 0, 1]);
        a.c = HostTensor::new(&t.c, &[1 << 22, 1, 2], &[0, 0, 1]);
        let e = selective_state_update_f64(&a).unwrap_err().to_string();
        assert!(e.contains("cannot allocate"), "{e}");
        // A reference whose public fields were changed after the fact: an error naming it.
        let mut r = selective_state_update_f64(&t.args()).unwrap();
        r.writes[0].write_slot = usize::MAX;
        r.dstate = 64;
        let m = SrMapping::new(Algorithm::Simple, r.state_strides[0], r.dim, 64, 7, 10).unwrap();
        let e = predict_sr_state_f16(&[0u16; 2], &r, &m)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside the state"), "{e}");
        assert_eq!(
            r.state_index(usize::MAX, 1, 1, 1),
            r.state_index(usize::MAX, 1, 1, 1)
        );
    }
}
