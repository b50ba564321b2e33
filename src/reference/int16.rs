//! FlashInfer's int16 block-scaled state (`state_scale`) on host arrays: the dequantised state
//! the f64 references take, and the int16 state and float32 decode scales FlashInfer writes from
//! an updated state (docs/flashinfer-ssu.md, "int16 block-scaled state"): the model the crate's
//! int16 kernels are held to (`tests/ssu_int16.rs`).
//!
//! - Read: element `(slot, h, d, n)` is `rn(float(q) · scale[slot, h, d])` in fp32
//!   ([`dequantize`]; a pad reads zeros, as in the f64 references).
//! - Write, per dstate row of a written slot: `m = max |s'|` over the row's fp32 values (NaN
//!   ignored), encode factor `e = 32767 · rcp(m)` (1 when `m` is 0), `q = rni(clamp(s' · e,
//!   ±32767))`, decode scale `rcp(e)` stored at the write slot ([`quantize_row`]).
//!
//! FlashInfer's build (`-use_fast_math`) computes both reciprocals with the approximate
//! hardware instruction (`MUFU.RCP`; the encode factor is `FMUL.FTZ(MUFU.RCP(m), 32767)`, PTX
//! `div.approx.ftz.f32`), flushes subnormals to zero and rounds the product to int16 with
//! `F2I` (round to nearest even). The reciprocal is therefore a parameter ([`ScaleOps`]): the
//! correctly rounded one by default, the GPU's where a test has probed it; everything else here
//! is exact fp32.
//!
//! [`predict_int16_state`] and [`predict_int16_mtp`] quantise the written rows of the f64
//! references ([`SsuReference`], [`MtpReference`]) after rounding them to f32, so, as
//! [`predict_sr_state_f16`](crate::reference::predict_sr_state_f16), they may differ from the GPU
//! where its fp32 values differ from that rounding; [`quantize_row`] on the GPU's own fp32 row is
//! exact.

use crate::error::{Error, Result};
use crate::reference::mtp::{MtpReference, MtpTarget};
use crate::reference::ssu::{HostTensor, SsuReference};

/// The largest int16 FlashInfer writes, and the numerator of its encode factor
/// (`std::numeric_limits<int16_t>::max()`; -32768 is never written).
pub const INT16_SCALE_MAX: f32 = 32767.0;

/// `v` with a subnormal flushed to a zero of its sign (fp32 arithmetic under `-ftz=true`).
pub fn ftz(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

/// The correctly rounded reciprocal with subnormal inputs and results flushed to zero: 1 / ±0 =
/// ±Inf, 1 / ±Inf = ±0, NaN stays NaN. The GPU's `MUFU.RCP` agrees with it on those edges and
/// on powers of two, and is within one ulp elsewhere.
pub fn rcp_ftz_rn(v: f32) -> f32 {
    ftz(1.0 / ftz(v))
}

/// The instructions of the scale factors that the GPU computes approximately.
#[derive(Clone, Copy, Debug)]
pub struct ScaleOps {
    /// fp32 reciprocal (FlashInfer: `MUFU.RCP`, with FTZ).
    pub rcp: fn(f32) -> f32,
}

impl ScaleOps {
    /// [`rcp_ftz_rn`]: exact where the GPU's reciprocal is (zeros, infinities, powers of two).
    pub const CORRECTLY_ROUNDED: ScaleOps = ScaleOps { rcp: rcp_ftz_rn };
}

impl Default for ScaleOps {
    fn default() -> Self {
        Self::CORRECTLY_ROUNDED
    }
}

/// The fp32 state value FlashInfer reads: `rn(float(q) · decode_scale)` with FTZ.
pub fn dequantize(q: i16, decode_scale: f32) -> f32 {
    ftz(f32::from(q) * ftz(decode_scale))
}

/// `max |v|` over `values` as FlashInfer reduces it: `fmaxf` from the lowest finite fp32, so a
/// NaN is ignored, an all-NaN (or empty) row gives `f32::MIN`, and the order does not matter.
pub fn row_max_abs(values: &[f32]) -> f32 {
    values.iter().fold(f32::MIN, |m, &v| m.max(ftz(v).abs()))
}

/// The encode factor of a row whose largest magnitude is `max_abs`: 1 when `max_abs` is zero
/// (after FTZ), else `rn(rcp(max_abs) · 32767)` with FTZ. A row above 2^126 gets 0 (its
/// reciprocal flushes), a row of infinities 0, an all-NaN row (`f32::MIN`) -0, a row below
/// about 2^-113 +Inf.
pub fn encode_scale(max_abs: f32, ops: ScaleOps) -> f32 {
    if ftz(max_abs) == 0.0 {
        1.0
    } else {
        ftz(ftz((ops.rcp)(max_abs)) * INT16_SCALE_MAX)
    }
}

/// One value's int16: `rni(min(max(rn(v · encode), -32767), 32767))` with FTZ. `fmaxf` and
/// `fminf` drop a NaN product, so NaN (e.g. 0 · Inf) gives -32767.
pub fn quantize_value(v: f32, encode: f32) -> i16 {
    let p = ftz(ftz(v) * encode);
    // Not `clamp`: fmaxf then fminf send a NaN to -32767, `clamp` would keep it.
    #[allow(clippy::manual_clamp)]
    let c = p.max(-INT16_SCALE_MAX).min(INT16_SCALE_MAX);
    c.round_ties_even() as i16
}

/// A quantised dstate row.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedRow {
    /// The int16 values, in the row's order.
    pub values: Vec<i16>,
    /// `max |s'|` ([`row_max_abs`]).
    pub max_abs: f32,
    /// The encode factor ([`encode_scale`]).
    pub encode: f32,
    /// The decode scale written to `state_scale`: `rcp(encode)`.
    pub decode: f32,
}

/// Quantises one dstate row of fp32 values as FlashInfer's kernels do (module doc).
pub fn quantize_row(values: &[f32], ops: ScaleOps) -> QuantizedRow {
    let max_abs = row_max_abs(values);
    let encode = encode_scale(max_abs, ops);
    QuantizedRow {
        values: values.iter().map(|&v| quantize_value(v, encode)).collect(),
        max_abs,
        encode,
        decode: ftz((ops.rcp)(encode)),
    }
}

/// Checks an int16 state (slots, nheads, dim, dstate) and its scales (slots, nheads, dim);
/// returns the scales' strides.
fn check_pair(state: &HostTensor<'_, i16>, scale: &HostTensor<'_, f32>) -> Result<[usize; 3]> {
    state.check("state", &[None, None, None, None])?;
    let s = &state.shape;
    scale.check("state_scale", &[Some(s[0]), Some(s[1]), Some(s[2])])?;
    Ok([scale.strides[0], scale.strides[1], scale.strides[2]])
}

/// The state an int16 `state` with decode scales `scale` stands for, as the f64 input of
/// [`selective_state_update_f64`](crate::reference::selective_state_update_f64) and
/// [`selective_state_update_mtp_f64`](crate::reference::selective_state_update_mtp_f64):
/// indexed as `state.data`, each element of the view [`dequantize`]d (exact as f64), every
/// other storage element 0.
///
/// Errors: shapes that disagree or a tensor reaching outside its data (argument named).
pub fn dequantize_state(
    state: &HostTensor<'_, i16>,
    scale: &HostTensor<'_, f32>,
) -> Result<Vec<f64>> {
    check_pair(state, scale)?;
    let s = &state.shape;
    let mut out = crate::reference::ssu::zeros(state.data.len(), "state")?;
    for slot in 0..s[0] {
        for h in 0..s[1] {
            for d in 0..s[2] {
                let f = scale.at(&[slot, h, d]);
                for n in 0..s[3] {
                    let idx = slot * state.strides[0]
                        + h * state.strides[1]
                        + d * state.strides[2]
                        + n * state.strides[3];
                    out[idx] = f64::from(dequantize(state.data[idx], f));
                }
            }
        }
    }
    Ok(out)
}

/// An int16 state with its decode scales after a call.
#[derive(Clone, Debug, PartialEq)]
pub struct Int16Prediction {
    /// The int16 state, indexed as the input's data.
    pub state: Vec<i16>,
    /// The decode scales, indexed as the input's data.
    pub scale: Vec<f32>,
}

/// Quantises row `(h, d)` of a written target into `q` / `scale`: `values(n)` gives the f64
/// value of column `n`, `state_idx(n)` its index in `q`, `scale_idx` the scale's index.
#[allow(clippy::too_many_arguments)]
fn write_row(
    q: &mut [i16],
    scale: &mut [f32],
    dstate: usize,
    values: impl Fn(usize) -> Option<f64>,
    state_idx: impl Fn(usize) -> usize,
    scale_idx: usize,
    ops: ScaleOps,
    what: &'static str,
) -> Result<()> {
    let row: Vec<f32> = (0..dstate)
        .map(|n| values(n).map(|v| ftz(v as f32)))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            Error::invalid("reference", format!("a written {what} row lies outside it"))
        })?;
    let qr = quantize_row(&row, ops);
    for (n, v) in qr.values.iter().enumerate() {
        let slot = q.get_mut(state_idx(n)).ok_or_else(|| {
            Error::invalid(what, "a written row lies outside the int16 data given")
        })?;
        *slot = *v;
    }
    let name = if what == "state" {
        "state_scale"
    } else {
        "intermediate_state_scales"
    };
    *scale.get_mut(scale_idx).ok_or_else(|| {
        Error::invalid(
            name,
            format!("row {scale_idx} is written past the scales given"),
        )
    })? = qr.decode;
    Ok(())
}

/// The int16 state and decode scales after a single-token call: `state` and `scale` as before
/// the call, with every row of each write of `reference` (computed from
/// [`dequantize_state`]'s values) replaced by [`quantize_row`] of its f32-rounded values, and
/// the row's decode scale stored at the WRITE slot. Rows not written keep their values and
/// scales (pads, `disable_state_update`).
///
/// Errors: `state` or `scale` of another shape than the reference's, or a tensor reaching
/// outside its data.
pub fn predict_int16_state(
    state: &HostTensor<'_, i16>,
    scale: &HostTensor<'_, f32>,
    reference: &SsuReference,
    ops: ScaleOps,
) -> Result<Int16Prediction> {
    let ss = check_pair(state, scale)?;
    check_geometry(
        state,
        reference.nheads,
        reference.dim,
        reference.dstate,
        reference.state_strides,
    )?;
    let mut q = state.data.to_vec();
    let mut sc = scale.data.to_vec();
    for w in &reference.writes {
        for h in 0..reference.nheads {
            for d in 0..reference.dim {
                let at = |n| reference.state_index(w.write_slot, h, d, n);
                write_row(
                    &mut q,
                    &mut sc,
                    reference.dstate,
                    |n| reference.state.get(at(n)).copied(),
                    at,
                    w.write_slot * ss[0] + h * ss[1] + d * ss[2],
                    ops,
                    "state",
                )?;
            }
        }
    }
    Ok(Int16Prediction {
        state: q,
        scale: sc,
    })
}

fn check_geometry(
    state: &HostTensor<'_, i16>,
    nheads: usize,
    dim: usize,
    dstate: usize,
    strides: [usize; 4],
) -> Result<()> {
    let s = &state.shape;
    if (s[1], s[2], s[3]) != (nheads, dim, dstate) || state.strides[..] != strides[..] {
        return Err(Error::invalid(
            "state",
            format!(
                "expected (nheads, dim, dstate) = {:?} and strides {strides:?} (the reference's), got shape {:?} strides {:?}",
                (nheads, dim, dstate),
                s,
                state.strides
            ),
        ));
    }
    Ok(())
}

/// The int16 intermediate buffer and its scales of a multi-token call.
#[derive(Clone, Debug)]
pub struct Int16Intermediate<'a> {
    /// The buffer (entries, cache_steps, nheads, dim, dstate) before the call, indexed as
    /// [`MtpReference::intermediate`].
    pub buffer: &'a [i16],
    /// `intermediate_state_scales` before the call, contiguous (batch, cache_steps, nheads,
    /// dim): FlashInfer writes step `t` of buffer entry `e` at row `e · cache_steps + t`.
    pub scales: &'a [f32],
}

/// [`predict_int16_mtp`]'s result.
#[derive(Clone, Debug, PartialEq)]
pub struct Int16MtpPrediction {
    /// The state and `state_scale`.
    pub state: Int16Prediction,
    /// The intermediate buffer and its scales, when given.
    pub intermediate: Option<(Vec<i16>, Vec<f32>)>,
}

/// The int16 state, decode scales and (with a buffer) int16 intermediate buffer and its scales
/// after a multi-token call, from [`MtpReference`]: every written target row (a state slot, or
/// a buffer entry and step) quantised from the reference's value after the call (the last
/// write's when a target is written twice, as on the GPU), its decode scale stored at
/// `state_scale[slot, h, d]` or at `intermediate_state_scales` row `entry · cache_steps +
/// step`. The carried state is never re-quantised between steps (FlashInfer keeps it in fp32).
///
/// Errors: shapes that disagree with the reference's; a buffer write without
/// `intermediate` given; an intermediate scale row past `intermediate.scales` (FlashInfer's
/// kernel would write past its (batch, ...) tensor: entries at or above batch).
pub fn predict_int16_mtp(
    state: &HostTensor<'_, i16>,
    scale: &HostTensor<'_, f32>,
    intermediate: Option<&Int16Intermediate<'_>>,
    reference: &MtpReference,
    ops: ScaleOps,
) -> Result<Int16MtpPrediction> {
    let ss = check_pair(state, scale)?;
    check_geometry(
        state,
        reference.nheads,
        reference.dim,
        reference.dstate,
        reference.state_strides,
    )?;
    let mut q = state.data.to_vec();
    let mut sc = scale.data.to_vec();
    let mut inter = intermediate.map(|i| (i.buffer.to_vec(), i.scales.to_vec()));
    let (nh, dim) = (reference.nheads, reference.dim);
    let mut targets: Vec<MtpTarget> = reference.writes.iter().map(|w| w.target).collect();
    targets.sort_unstable();
    targets.dedup();
    for t in targets {
        for h in 0..nh {
            for d in 0..dim {
                match t {
                    MtpTarget::State(slot) => {
                        let at = |n| reference.state_index(slot, h, d, n);
                        write_row(
                            &mut q,
                            &mut sc,
                            reference.dstate,
                            |n| reference.state.get(at(n)).copied(),
                            at,
                            slot * ss[0] + h * ss[1] + d * ss[2],
                            ops,
                            "state",
                        )?;
                    }
                    MtpTarget::Intermediate { entry, step } => {
                        let (Some((buf, isc)), Some(vals)) =
                            (inter.as_mut(), reference.intermediate.as_ref())
                        else {
                            return Err(Error::invalid(
                                "intermediate_states_buffer",
                                "the reference writes the buffer: give its int16 data and scales",
                            ));
                        };
                        let at = |n| reference.intermediate_index(entry, step, h, d, n);
                        let row = entry * reference.cache_steps + step;
                        write_row(
                            buf,
                            isc,
                            reference.dstate,
                            |n| vals.get(at(n)).copied(),
                            at,
                            (row * nh + h) * dim + d,
                            ops,
                            "intermediate_states_buffer",
                        )?;
                    }
                }
            }
        }
    }
    Ok(Int16MtpPrediction {
        state: Int16Prediction {
            state: q,
            scale: sc,
        },
        intermediate: inter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::mtp::{selective_state_update_mtp_f64, MtpHostArgs};
    use crate::reference::ssu::{selective_state_update_f64, SsuHostArgs};

    const OPS: ScaleOps = ScaleOps::CORRECTLY_ROUNDED;

    #[test]
    fn zero_row_keeps_unit_scales() {
        let r = quantize_row(&[0.0, -0.0, 0.0, 0.0], OPS);
        assert_eq!(r.values, vec![0; 4]);
        assert_eq!((r.max_abs, r.encode, r.decode), (0.0, 1.0, 1.0));
        // A row of subnormals is a zero row under FTZ.
        let r = quantize_row(&[1e-40, -1e-41], OPS);
        assert_eq!((r.values, r.encode, r.decode), (vec![0, 0], 1.0, 1.0));
    }

    #[test]
    fn largest_magnitude_maps_to_32767_and_back() {
        // max 4 = 2^2: rcp exact, encode 32767 / 4 = 8191.75, decode 4 / 32767 rounded.
        let r = quantize_row(&[1.0, -4.0, 2.5, 0.001], OPS);
        assert_eq!(r.max_abs, 4.0);
        assert_eq!(r.encode, 8191.75);
        assert_eq!(r.decode, 1.0 / 8191.75f32);
        // The negative maximum gives -32767 (never -32768); the others round to nearest even.
        assert_eq!(r.values, vec![8192, -32767, 20479, 8]);
        // 2.5 * 8191.75 = 20479.375 -> 20479; 0.001 * 8191.75 = 8.19175 -> 8.
        // Reading back: within half a step of the row's scale.
        for (q, v) in r.values.iter().zip([1.0f32, -4.0, 2.5, 0.001]) {
            assert!((dequantize(*q, r.decode) - v).abs() <= 0.5 * r.decode * 1.0001);
        }
    }

    #[test]
    fn ties_round_to_even_and_products_saturate() {
        // encode 1 (max 32767): values are their own int16, x.5 to the even neighbour.
        let r = quantize_row(&[32767.0, 2.5, 3.5, -2.5, -0.5], OPS);
        assert_eq!(r.encode, 1.0f32 / 32767.0 * 32767.0); // rcp rounded, then the product
        assert_eq!(quantize_value(2.5, 1.0), 2);
        assert_eq!(quantize_value(3.5, 1.0), 4);
        assert_eq!(quantize_value(-2.5, 1.0), -2);
        assert_eq!(quantize_value(-0.5, 1.0), 0);
        // Saturation at +-32767: an encode factor above the row's (a stale or probed one).
        assert_eq!(quantize_value(5.0, 10000.0), 32767);
        assert_eq!(quantize_value(-5.0, 10000.0), -32767);
        assert_eq!(quantize_value(f32::INFINITY, 1.0), 32767);
        assert_eq!(quantize_value(f32::NEG_INFINITY, 1.0), -32767);
        // NaN (and 0 * Inf) fall through fmaxf to -32767.
        assert_eq!(quantize_value(f32::NAN, 1.0), -32767);
        assert_eq!(quantize_value(0.0, f32::INFINITY), -32767);
        assert!(r.values.iter().all(|&v| v != i16::MIN));
    }

    #[test]
    fn extreme_rows() {
        // Infinity in the row: encode 0, decode +Inf, finite values 0, the infinity -32767.
        let r = quantize_row(&[1.0, f32::INFINITY], OPS);
        assert_eq!((r.encode, r.decode), (0.0, f32::INFINITY));
        assert_eq!(r.values, vec![0, -32767]);
        // NaN is ignored by the max; an all-NaN row takes f32::MIN: encode -0, decode -Inf.
        let r = quantize_row(&[f32::NAN, 2.0], OPS);
        assert_eq!((r.max_abs, r.values[1]), (2.0, 32767));
        assert_eq!(r.values[0], -32767);
        let r = quantize_row(&[f32::NAN], OPS);
        assert_eq!(r.max_abs, f32::MIN);
        assert!(r.encode == 0.0 && r.encode.is_sign_negative());
        assert_eq!(r.decode, f32::NEG_INFINITY);
        // Above 2^126 the reciprocal flushes: encode 0.
        assert_eq!(encode_scale(2.0f32.powi(127), OPS), 0.0);
        // Below about 2^-113 the encode factor overflows to +Inf, decode 0.
        let r = quantize_row(&[2.0f32.powi(-120), 0.0], OPS);
        assert_eq!((r.encode, r.decode), (f32::INFINITY, 0.0));
        assert_eq!(r.values, vec![32767, -32767]);
        // The reciprocal is a parameter: a probed one changes the factors only.
        let ops = ScaleOps {
            rcp: |v| rcp_ftz_rn(v) * (1.0 + f32::EPSILON),
        };
        let r = quantize_row(&[3.0], ops);
        assert_eq!(r.values, vec![32767]);
        assert_ne!(r.encode, quantize_row(&[3.0], OPS).encode);
    }

    #[test]
    fn dequantize_is_one_fp32_product() {
        assert_eq!(dequantize(-32767, 0.5), -16383.5);
        assert_eq!(dequantize(3, 1.0 / 3.0), 1.0);
        assert_eq!(dequantize(1, 1e-40), 0.0); // subnormal scale flushed
        let q = [1i16, -2, 3, 4, 5, 6, 7, 8];
        let s = [0.25f32, 2.0];
        let st = HostTensor::contiguous(&q, &[2, 1, 1, 4]);
        let sc = HostTensor::contiguous(&s, &[2, 1, 1]);
        let v = dequantize_state(&st, &sc).unwrap();
        assert_eq!(v, vec![0.25, -0.5, 0.75, 1.0, 10.0, 12.0, 14.0, 16.0]);
        let bad = HostTensor::contiguous(&s[..1], &[1, 1, 1]);
        assert!(dequantize_state(&st, &bad).is_err());
    }

    /// Single token, batch 3 over 4 slots of 1 head x 2 rows x 4 columns: entry 0 reads slot 2
    /// and writes slot 3, entry 1 is a pad (slot 0), entry 2 updates slot 1 in place.
    #[test]
    fn single_token_writes_rows_and_scales_at_the_write_slot() {
        let (slots, dim, ds) = (4usize, 2usize, 4usize);
        let q: Vec<i16> = (0..(slots * dim * ds) as i16)
            .map(|i| i * 1000 - 15000)
            .collect();
        let s: Vec<f32> = (0..slots * dim)
            .map(|i| 2f32.powi(-10 - i as i32))
            .collect();
        let st = HostTensor::contiguous(&q, &[slots, 1, dim, ds]);
        let sc = HostTensor::contiguous(&s, &[slots, 1, dim]);
        let state = dequantize_state(&st, &sc).unwrap();
        let (x, dt, a) = (
            vec![0.5, -1.0, 2.0, 0.25, 1.0, -0.5],
            vec![0.5; 3],
            vec![-1.0],
        );
        let b: Vec<f64> = (0..3 * ds).map(|i| (i % 5) as f64 - 2.0).collect();
        let c = vec![1.0; 3 * ds];
        let sbi = vec![2i64, 0, 1];
        let dst = vec![3i64, 0, 1];
        let args = SsuHostArgs {
            state: HostTensor::contiguous(&state, &[slots, 1, dim, ds]),
            x: HostTensor::contiguous(&x, &[3, 1, dim]),
            dt: HostTensor::new(&dt, &[3, 1, dim], &[1, 1, 0]),
            a: HostTensor::new(&a, &[1, dim, ds], &[1, 0, 0]),
            b: HostTensor::contiguous(&b, &[3, 1, ds]),
            c: HostTensor::contiguous(&c, &[3, 1, ds]),
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: Some(HostTensor::contiguous(&sbi, &[3])),
            dst_state_batch_indices: Some(HostTensor::contiguous(&dst, &[3])),
            pad_slot_id: 0,
            dt_softplus: false,
            disable_state_update: false,
        };
        let r = selective_state_update_f64(&args).unwrap();
        assert_eq!(r.writes.len(), 2);
        let p = predict_int16_state(&st, &sc, &r, OPS).unwrap();
        // Slots 0 (the pad) and 2 (read only) keep their int16 values and scales.
        for slot in [0usize, 2] {
            let lo = slot * dim * ds;
            assert_eq!(p.state[lo..lo + dim * ds], q[lo..lo + dim * ds]);
            assert_eq!(
                p.scale[slot * dim..(slot + 1) * dim],
                s[slot * dim..(slot + 1) * dim]
            );
        }
        // Slots 3 and 1: each row quantised from the updated values, scale at the write slot.
        for (slot, read) in [(3usize, 2usize), (1, 1)] {
            for d in 0..dim {
                let row: Vec<f32> = (0..ds)
                    .map(|n| r.state[r.state_index(slot, 0, d, n)] as f32)
                    .collect();
                let want = quantize_row(&row, OPS);
                let lo = (slot * dim + d) * ds;
                assert_eq!(p.state[lo..lo + ds], want.values[..]);
                assert_eq!(p.scale[slot * dim + d], want.decode);
                assert!(want.values.iter().any(|v| v.abs() == 32767));
                // The update started from the READ slot's dequantised row.
                let s0 = f64::from(dequantize(q[(read * dim + d) * ds], s[read * dim + d]));
                let dt_eff: f64 = 0.5;
                let want0 = (-dt_eff).exp() * s0
                    + x[(if slot == 3 { 0 } else { 2 }) * dim + d]
                        * b[(if slot == 3 { 0 } else { 2 }) * ds]
                        * dt_eff;
                assert!((r.state[r.state_index(slot, 0, d, 0)] - want0).abs() < 1e-12);
            }
        }
        // The pad's out is computed from a zero state (its scale is not applied).
        let pad_out: f64 = (0..ds).map(|n| x[dim] * b[ds + n] * 0.5).sum();
        assert!((r.out_at(1, 0, 0) - pad_out).abs() < 1e-12);
        // Disabled updates write nothing.
        let r2 = selective_state_update_f64(&SsuHostArgs {
            disable_state_update: true,
            ..args.clone()
        })
        .unwrap();
        let p2 = predict_int16_state(&st, &sc, &r2, OPS).unwrap();
        assert_eq!((p2.state, p2.scale), (q.clone(), s.clone()));
        // A scale tensor of another shape is refused.
        let bad = HostTensor::contiguous(&s[..dim], &[1, 1, dim]);
        assert!(predict_int16_state(&st, &bad, &r, OPS).is_err());
    }

    /// Multi token, T 2, batch 2: sequence 0 reads slot 1 and writes both steps to the int16
    /// intermediate buffer entry 1; sequence 1 is a pad (nothing written).
    #[test]
    fn multi_token_intermediate_rows_and_scales() {
        let (slots, dim, ds, t) = (2usize, 1usize, 4usize, 2usize);
        let q: Vec<i16> = vec![0, 0, 0, 0, 32767, -16384, 100, 0];
        let s = vec![1.0f32, 2f32.powi(-12)];
        let st = HostTensor::contiguous(&q, &[slots, 1, dim, ds]);
        let sc = HostTensor::contiguous(&s, &[slots, 1, dim]);
        let state = dequantize_state(&st, &sc).unwrap();
        let x = vec![1.0, 2.0, 0.5, 0.5];
        let dt = vec![0.25; 4];
        let a = vec![-2.0];
        let b: Vec<f64> = (0..2 * t * ds).map(|i| (i % 3) as f64 * 0.5).collect();
        let c = vec![1.0; 2 * t * ds];
        let sbi = vec![1i64, 0];
        let ent = vec![1i64, 0];
        let buf_f64 = vec![-1.0; 2 * t * ds];
        let args = MtpHostArgs {
            state: HostTensor::contiguous(&state, &[slots, 1, dim, ds]),
            x: HostTensor::contiguous(&x, &[2, t, 1, dim]),
            dt: HostTensor::new(&dt, &[2, t, 1, dim], &[t, 1, 1, 0]),
            a: HostTensor::new(&a, &[1, dim, ds], &[1, 0, 0]),
            b: HostTensor::contiguous(&b, &[2, t, 1, ds]),
            c: HostTensor::contiguous(&c, &[2, t, 1, ds]),
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: Some(HostTensor::contiguous(&sbi, &[2])),
            dst_state_batch_indices: None,
            num_accepted_tokens: None,
            cu_seqlens: None,
            intermediate_states_buffer: Some(HostTensor::contiguous(&buf_f64, &[2, t, 1, dim, ds])),
            intermediate_state_indices: Some(HostTensor::contiguous(&ent, &[2])),
            cache_steps: t,
            pad_slot_id: 0,
            dt_softplus: false,
            disable_state_update: true,
        };
        let r = selective_state_update_mtp_f64(&args).unwrap();
        let buf = vec![-1i16; 2 * t * ds];
        let iscales = vec![f32::NAN; 2 * t * dim];
        let inter = Int16Intermediate {
            buffer: &buf,
            scales: &iscales,
        };
        let p = predict_int16_mtp(&st, &sc, Some(&inter), &r, OPS).unwrap();
        assert_eq!((&p.state.state, &p.state.scale), (&q, &s));
        let (pb, ps) = p.intermediate.unwrap();
        // Entry 0 (the pad's) untouched; entry 1 steps 0 and 1 written, scales at rows 2, 3.
        assert_eq!(pb[..t * ds], buf[..t * ds]);
        assert!(ps[0].is_nan() && ps[1].is_nan());
        for step in 0..t {
            let row: Vec<f32> = (0..ds)
                .map(|n| {
                    r.intermediate.as_ref().unwrap()[r.intermediate_index(1, step, 0, 0, n)] as f32
                })
                .collect();
            let want = quantize_row(&row, OPS);
            let lo = (t + step) * ds;
            assert_eq!(pb[lo..lo + ds], want.values[..]);
            assert_eq!(ps[t + step], want.decode);
        }
        // Step 1 continues from step 0's unquantised state: x = 2, B row 1, dA = exp(-0.5).
        let s1 = r.intermediate.as_ref().unwrap()[r.intermediate_index(1, 0, 0, 0, 0)];
        let want = (-0.5f64).exp() * s1 + 2.0 * b[ds] * 0.25;
        assert!(
            (r.intermediate.as_ref().unwrap()[r.intermediate_index(1, 1, 0, 0, 0)] - want).abs()
                < 1e-12
        );
        // Scales of (batch, cache_steps, ...) too short for entry 1: FlashInfer would write past them.
        let short = vec![0.0f32; t * dim];
        let inter = Int16Intermediate {
            buffer: &buf,
            scales: &short,
        };
        assert!(predict_int16_mtp(&st, &sc, Some(&inter), &r, OPS).is_err());
        assert!(predict_int16_mtp(&st, &sc, None, &r, OPS).is_err());
    }
}
