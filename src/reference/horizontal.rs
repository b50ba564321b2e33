//! FlashInfer's "horizontal" single-token kernel in fp32 on host arrays: its visiting order, its
//! summation order and its operation forms, bit for bit given the few values it computes with
//! approximate hardware instructions (dt' and dA per head, the gate factor per row).
//!
//! The kernel gives each state row `d` two threads, members `m = 0, 1`. A row's columns are
//! processed in stages of 64 bytes (32 columns of a 2-byte state, 16 of an fp32 one), 16
//! four-byte words each; member `m` visits the words `(j + 8 m + (d mod 16) / 2) mod 16`,
//! `j = 0..7`, stage after stage (a 2-byte word: its low column, then its high one)
//! ([`horizontal_visits`]). Per element, in fp32 with subnormals flushed to zero:
//!
//! - `s' = fma(x, rn(B · dt'), rn(dA · s))` (`s` = 0 for a pad);
//! - each member: `acc = fma(C, s', acc)` from `acc = +0` over its columns in visiting order;
//! - `y = fma(D, x, rn(acc_0 + acc_1))` (`D` = 0 when absent); with `z`: `y = rn(y · g)`, `g` the
//!   kernel's `z · sigmoid(z)` of the row;
//!
//! a NaN result is the GPU's canonical NaN (`0x7FFFFFFF`).
//!
//! `dt'` (`dt + dt_bias`, softplus), `dA = ex2(rn(rn(A · dt') · log2 e))` and `g` use the GPU's
//! approximate `ex2`, `lg2` and `rcp` instructions, which no CPU formula reproduces bit for bit:
//! [`HorizontalScalars`] takes them as given (from the kernel itself, or fitted to a recording),
//! and [`HorizontalScalars::approximate`] computes them in f64 for a result within a few ulps.
//! Everything else is exact: with the kernel's scalars [`selective_state_update_horizontal_f32`]
//! gives the kernel's fp32 state and `y` bit for bit, and the stochastically rounded fp16 state
//! follows from [`predict_sr_state_f16_with_rule`](super::ssu::predict_sr_state_f16_with_rule)
//! with an [`SrMapping`](super::SrMapping) of [`Algorithm::Horizontal`](crate::ssu::Algorithm).

use crate::error::{Error, Result};
use crate::reference::ssu::{zeros, HostTensor, SsuHostArgs, SsuReference, StateWrite};

/// The columns member `member` (0 or 1) of row `d` visits, in order, for a state of
/// `state_bytes` bytes per element (2 or 4) and `dstate` columns (a multiple of the stage width,
/// 32 or 16 columns).
pub fn horizontal_visits(d: usize, member: usize, dstate: usize, state_bytes: usize) -> Vec<usize> {
    let per_word = 4 / state_bytes;
    let stage_cols = 16 * per_word;
    let rot = 8 * member + (d % 16) / 2;
    let mut cols = Vec::with_capacity(dstate / 2);
    for k in 0..dstate / stage_cols {
        for j in 0..8 {
            let w = (j + rot) % 16;
            for e in 0..per_word {
                cols.push(k * stage_cols + w * per_word + e);
            }
        }
    }
    cols
}

/// The values the kernel computes with approximate instructions, per batch entry `b` and head
/// `h` (index `b * nheads + h`) and per row (index `(b * nheads + h) * dim + d`).
#[derive(Clone, Debug, PartialEq)]
pub struct HorizontalScalars {
    /// `dt'`: `dt + dt_bias`, with softplus where the call asks for it.
    pub dt: Vec<f32>,
    /// `dA = ex2(rn(rn(A · dt') · log2 e))`.
    pub da: Vec<f32>,
    /// The gate factor `z · sigmoid(z)` of each row, `rn(z · rcp(rn(ex2(rn(-z · log2 e)) + 1)))`
    /// in the kernel (needed with `z` only).
    pub gate: Option<Vec<f32>>,
}

/// The GPU's fp32 results: subnormal values flushed to zero of the same sign (the kernels'
/// `.ftz`), a NaN as the canonical NaN the GPU's arithmetic produces (`0x7FFFFFFF`).
fn ftz(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else if v.is_nan() {
        f32::from_bits(0x7FFF_FFFF)
    } else {
        v
    }
}
fn mul(a: f32, b: f32) -> f32 {
    ftz(ftz(a) * ftz(b))
}
fn add(a: f32, b: f32) -> f32 {
    ftz(ftz(a) + ftz(b))
}
fn fma(a: f32, b: f32, c: f32) -> f32 {
    ftz(ftz(a).mul_add(ftz(b), ftz(c)))
}

/// `dt + dt_bias` with softplus (at or below 20), in f64, for entry `b` and head `h`.
fn dt_of(args: &SsuHostArgs<'_>, b: usize, h: usize) -> f64 {
    let mut dt = args.dt.at(&[b, h, 0]) as f32;
    if let Some(bias) = &args.dt_bias {
        dt = add(dt, bias.at(&[h, 0]) as f32);
    }
    let mut v = f64::from(dt);
    if args.dt_softplus && dt <= 20.0 {
        v = crate::reference::ssu::softplus(v);
    }
    v
}

impl HorizontalScalars {
    /// The scalars of `args` computed in f64 and rounded to f32: each within a few ulps of the
    /// kernel's (whose `ex2`, `lg2` and `rcp` are approximate), so that the model's results
    /// are close to the kernel's, not equal.
    ///
    /// Errors: the inputs' shapes, as [`selective_state_update_horizontal_f32`] checks them.
    pub fn approximate(args: &SsuHostArgs<'_>) -> Result<Self> {
        let (batch, nheads, dim) = shape(args)?;
        let mut dt = Vec::with_capacity(batch * nheads);
        let mut da = Vec::with_capacity(batch * nheads);
        for b in 0..batch {
            for h in 0..nheads {
                let v = dt_of(args, b, h) as f32;
                dt.push(v);
                let a = args.a.at(&[h, 0, 0]) as f32;
                da.push(f64::from(mul(a, v)).exp() as f32);
            }
        }
        let gate = args.z.as_ref().map(|z| {
            let mut g = Vec::with_capacity(batch * nheads * dim);
            for b in 0..batch {
                for h in 0..nheads {
                    for d in 0..dim {
                        let zv = z.at(&[b, h, d]);
                        g.push((zv / (1.0 + (-zv).exp())) as f32);
                    }
                }
            }
            g
        });
        Ok(Self { dt, da, gate })
    }
}

/// (batch, nheads, dim) of `args` after the checks the f64 reference makes.
fn shape(args: &SsuHostArgs<'_>) -> Result<(usize, usize, usize)> {
    let st = &args.state;
    st.check("state", &[None, None, None, None])?;
    let (nheads, dim, dstate) = (st.shape[1], st.shape[2], st.shape[3]);
    args.x.check("x", &[None, Some(nheads), Some(dim)])?;
    let batch = args.x.shape[0];
    args.dt
        .check("dt", &[Some(batch), Some(nheads), Some(dim)])?;
    args.a
        .check("A", &[Some(nheads), Some(dim), Some(dstate)])?;
    Ok((batch, nheads, dim))
}

/// Column 0 of an index tensor at batch entry `b`.
fn index_at(t: &HostTensor<'_, i64>, b: usize) -> i64 {
    if t.shape.len() == 2 {
        t.at(&[b, 0])
    } else {
        t.at(&[b])
    }
}

/// The horizontal kernel in fp32 on the host, for a state of `state_bytes` bytes per element
/// (2: F16 or BF16, 4: F32; it fixes the visiting order) whose values `args.state` holds: the
/// new state (every written element replaced by its fp32 value, before its rounding into the
/// state dtype) and `y` (after the gate, before its rounding into the output dtype), as f64
/// values that are exactly those fp32 values. Slots and writes as
/// [`selective_state_update_f64`](super::ssu::selective_state_update_f64); the inputs are taken as
/// f32 (they are the storage dtype's values). With the kernel's own `scalars` the result is the
/// kernel's bit for bit.
///
/// Errors (argument named): the shapes and extents of the f64 reference; `state_bytes` not 2
/// or 4, or `dstate` not a multiple of the stage width (`state`); `scalars` of the wrong
/// length, or without gate factors for a call with `z` (`scalars`).
pub fn selective_state_update_horizontal_f32(
    args: &SsuHostArgs<'_>,
    state_bytes: usize,
    scalars: &HorizontalScalars,
) -> Result<SsuReference> {
    // The shapes, extents and slots are the f64 reference's: it checks them, and its writes
    // and state layout are this model's too.
    let mut r = crate::reference::ssu::selective_state_update_f64(args)?;
    let (batch, nheads, dim, dstate) = (r.batch, r.nheads, r.dim, r.dstate);
    if state_bytes != 2 && state_bytes != 4 {
        return Err(Error::invalid(
            "state",
            format!("expected 2 or 4 bytes per element, got {state_bytes}"),
        ));
    }
    if dstate % (64 / state_bytes) != 0 {
        return Err(Error::invalid(
            "state",
            format!(
                "expected dstate a multiple of {} columns, got {dstate}",
                64 / state_bytes
            ),
        ));
    }
    let heads = batch * nheads;
    if scalars.dt.len() != heads || scalars.da.len() != heads {
        return Err(Error::invalid(
            "scalars",
            format!("expected {heads} values of dt' and dA"),
        ));
    }
    let gate = match (&args.z, &scalars.gate) {
        (None, _) => None,
        (Some(_), Some(g)) if g.len() == heads * dim => Some(g),
        (Some(_), _) => {
            return Err(Error::invalid(
                "scalars",
                format!("expected {} gate factors (the call has z)", heads * dim),
            ))
        }
    };
    let ngroups = args.b.shape[1];
    let heads_per_group = nheads / ngroups;
    let st = &args.state;
    let slots = st.shape[0];
    let in_range = |slot: i64| slot >= 0 && (slot as u64) < slots as u64;
    let visits: Vec<[Vec<usize>; 2]> = (0..16)
        .map(|d| {
            [
                horizontal_visits(d, 0, dstate, state_bytes),
                horizontal_visits(d, 1, dstate, state_bytes),
            ]
        })
        .collect();
    let mut s_new = zeros(dstate, "state")?;
    let writes: Vec<StateWrite> = r.writes.clone();
    for b in 0..batch {
        let read_slot = args
            .state_batch_indices
            .as_ref()
            .map_or(b as i64, |t| index_at(t, b));
        let pad = read_slot == args.pad_slot_id || !in_range(read_slot);
        let write = writes.iter().find(|w| w.batch == b).map(|w| w.write_slot);
        for h in 0..nheads {
            let g = h / heads_per_group;
            let (dt, da) = (scalars.dt[b * nheads + h], scalars.da[b * nheads + h]);
            let dv = args.d.as_ref().map_or(0.0, |t| t.at(&[h, 0]) as f32);
            for d in 0..dim {
                let x = args.x.at(&[b, h, d]) as f32;
                let mut acc = [0.0f32; 2];
                for (m, acc_m) in acc.iter_mut().enumerate() {
                    for &n in &visits[d % 16][m] {
                        let s = if pad {
                            0.0
                        } else {
                            st.at(&[read_slot as usize, h, d, n]) as f32
                        };
                        let bdt = mul(args.b.at(&[b, g, n]) as f32, dt);
                        let v = fma(x, bdt, mul(da, s));
                        *acc_m = fma(args.c.at(&[b, g, n]) as f32, v, *acc_m);
                        s_new[n] = f64::from(v);
                    }
                }
                let mut y = fma(dv, x, add(acc[0], acc[1]));
                if let Some(gv) = gate {
                    y = mul(y, gv[(b * nheads + h) * dim + d]);
                }
                r.out[(b * nheads + h) * dim + d] = f64::from(y);
                if let Some(w) = write {
                    for (n, &v) in s_new.iter().enumerate() {
                        let idx = r.state_index(w, h, d, n);
                        r.state[idx] = v;
                    }
                }
            }
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::sr::{SrMapping, SrRule};
    use crate::reference::ssu::predict_sr_state_f16_with_rule;
    use crate::ssu::Algorithm;

    /// Every column is visited once per row, each member half of them; the rotation and the
    /// order within a stage are FlashInfer's conflict-free column permutation.
    #[test]
    fn visits_cover_each_row_once() {
        for state_bytes in [2usize, 4] {
            for dstate in [64usize, 128, 256] {
                for d in 0..32 {
                    let a = horizontal_visits(d, 0, dstate, state_bytes);
                    let b = horizontal_visits(d, 1, dstate, state_bytes);
                    assert_eq!(a.len(), dstate / 2);
                    let mut all: Vec<usize> = a.iter().chain(&b).copied().collect();
                    all.sort_unstable();
                    assert_eq!(all, (0..dstate).collect::<Vec<_>>());
                }
            }
        }
        // fp16, row 2 (rotation 1 word): member 0 visits columns 2..17, member 1 18..31, 0, 1.
        let m0 = horizontal_visits(2, 0, 64, 2);
        let m1 = horizontal_visits(2, 1, 64, 2);
        assert_eq!(&m0[..16], &(2..18).collect::<Vec<_>>()[..]);
        assert_eq!(
            &m1[..16],
            &(18..32).chain(0..2).collect::<Vec<_>>()[..],
            "member 1 wraps around the stage"
        );
        assert_eq!(m0[16], 34, "the next stage starts at column 32 + 2");
        // fp32, row 15 (rotation 7 words = columns): member 1 starts at column 15.
        assert_eq!(
            horizontal_visits(15, 1, 16, 4),
            vec![15, 0, 1, 2, 3, 4, 5, 6]
        );
        assert_eq!(horizontal_visits(15, 0, 16, 4), (7..15).collect::<Vec<_>>());
    }

    /// The random word of each element: one Philox call per four consecutive visited columns
    /// (two words of the visiting order), at the element offset of the first of them.
    #[test]
    fn horizontal_random_mapping_follows_the_visits() {
        let (slot_stride, dim, dstate) = (3 * 64 * 128 + 64, 64, 128);
        let m = SrMapping::new(Algorithm::Horizontal, slot_stride, dim, dstate, 77, 10).unwrap();
        assert_eq!(m.group(), 4);
        for d in [0usize, 1, 2, 3, 6, 13, 14, 15, 16, 63] {
            for member in 0..2 {
                let cols = horizontal_visits(d, member, dstate, 2);
                for (i, &n) in cols.iter().enumerate() {
                    let first = cols[i - i % 4];
                    let base = (2 * slot_stride + 5 * dim * dstate + d * dstate) as u64;
                    assert_eq!(
                        m.philox_offset(2, 5, d, n),
                        (base + first as u64, i % 4),
                        "row {d} member {member} column {n}"
                    );
                }
            }
        }
    }

    /// A problem the model computes exactly without any approximate instruction: A = 0 (so
    /// dA = ex2(0) = 1), no softplus, no z. The model then equals a direct fp32 evaluation
    /// in the documented order, and differs from the natural column order in the last bits of
    /// some outputs.
    #[test]
    fn exact_model_matches_its_definition() {
        let (slots, batch, nheads, dim, dstate, ngroups) = (2usize, 2, 2, 64, 64, 1);
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Multiples of 1/128 in [-2, 2): exact in bf16 and fp16.
            (((rng >> 40) % 512) as f64 - 256.0) / 128.0
        };
        let state: Vec<f64> = (0..slots * nheads * dim * dstate).map(|_| next()).collect();
        let x: Vec<f64> = (0..batch * nheads * dim).map(|_| next()).collect();
        let dt: Vec<f64> = (0..batch * nheads).map(|_| next().abs() + 0.25).collect();
        let a = vec![0.0f64; nheads];
        let bc: Vec<f64> = (0..batch * ngroups * dstate).map(|_| next()).collect();
        let cc: Vec<f64> = (0..batch * ngroups * dstate).map(|_| next()).collect();
        let dd: Vec<f64> = (0..nheads).map(|_| next()).collect();
        let idx = [1i64, 0];
        let args = SsuHostArgs {
            state: HostTensor::contiguous(&state, &[slots, nheads, dim, dstate]),
            x: HostTensor::contiguous(&x, &[batch, nheads, dim]),
            dt: HostTensor::new(&dt, &[batch, nheads, dim], &[nheads, 1, 0]),
            a: HostTensor::new(&a, &[nheads, dim, dstate], &[1, 0, 0]),
            b: HostTensor::contiguous(&bc, &[batch, ngroups, dstate]),
            c: HostTensor::contiguous(&cc, &[batch, ngroups, dstate]),
            d: Some(HostTensor::new(&dd, &[nheads, dim], &[1, 0])),
            z: None,
            dt_bias: None,
            state_batch_indices: Some(HostTensor::contiguous(&idx, &[batch])),
            dst_state_batch_indices: None,
            pad_slot_id: -1,
            dt_softplus: false,
            disable_state_update: false,
        };
        let scalars = HorizontalScalars::approximate(&args).unwrap();
        assert!(scalars.da.iter().all(|&v| v == 1.0));
        let r = selective_state_update_horizontal_f32(&args, 2, &scalars).unwrap();
        let mut natural_differs = 0;
        for b in 0..batch {
            let slot = idx[b] as usize;
            for h in 0..nheads {
                let dtv = dt[b * nheads + h] as f32;
                for d in 0..dim {
                    let xv = x[(b * nheads + h) * dim + d] as f32;
                    let sv = |n: usize| state[((slot * nheads + h) * dim + d) * dstate + n] as f32;
                    let new = |n: usize| xv.mul_add(bc[b * dstate + n] as f32 * dtv, sv(n));
                    let dot = |cols: &[usize]| {
                        cols.iter().fold(0.0f32, |acc, &n| {
                            (cc[b * dstate + n] as f32).mul_add(new(n), acc)
                        })
                    };
                    let want = (dd[h] as f32).mul_add(
                        xv,
                        dot(&horizontal_visits(d, 0, dstate, 2))
                            + dot(&horizontal_visits(d, 1, dstate, 2)),
                    );
                    assert_eq!(r.out_at(b, h, d).to_bits(), f64::from(want).to_bits());
                    let natural = (dd[h] as f32).mul_add(
                        xv,
                        dot(&(0..dstate / 2).collect::<Vec<_>>())
                            + dot(&(dstate / 2..dstate).collect::<Vec<_>>()),
                    );
                    natural_differs += usize::from(natural != want);
                    for n in 0..dstate {
                        let i = r.state_index(slot, h, d, n);
                        assert_eq!(r.state[i], f64::from(new(n)), "state ({b}, {h}, {d}, {n})");
                    }
                }
            }
        }
        assert!(natural_differs > 0, "the order changes some fp32 sums");
        // Stochastic rounding of the model's fp32 state with the horizontal mapping: each
        // written element is the conversion of its exact fp32 value.
        let initial: Vec<u16> = state
            .iter()
            .map(|&v| half::f16::from_f64(v).to_bits())
            .collect();
        let m = SrMapping::new(
            Algorithm::Horizontal,
            nheads * dim * dstate,
            dim,
            dstate,
            5,
            10,
        )
        .unwrap();
        let bits = predict_sr_state_f16_with_rule(&initial, &r, &m, SrRule::V072).unwrap();
        let w = r.state_index(1, 1, 17, 33);
        assert_eq!(
            bits[w],
            crate::reference::sr_f16_bits(r.state[w] as f32, m.random_bits(1, 1, 17, 33))
        );
    }

    #[test]
    fn bad_arguments_are_errors() {
        let state = vec![0.0f64; 64];
        let one = [1.0f64];
        let args = SsuHostArgs {
            state: HostTensor::contiguous(&state, &[1, 1, 1, 64]),
            x: HostTensor::contiguous(&one, &[1, 1, 1]),
            dt: HostTensor::new(&one, &[1, 1, 1], &[1, 1, 0]),
            a: HostTensor::new(&one, &[1, 1, 64], &[1, 0, 0]),
            b: HostTensor::new(&state, &[1, 1, 64], &[64, 64, 1]),
            c: HostTensor::new(&state, &[1, 1, 64], &[64, 64, 1]),
            d: None,
            z: Some(HostTensor::contiguous(&one, &[1, 1, 1])),
            dt_bias: None,
            state_batch_indices: None,
            dst_state_batch_indices: None,
            pad_slot_id: -1,
            dt_softplus: true,
            disable_state_update: false,
        };
        let mut s = HorizontalScalars::approximate(&args).unwrap();
        assert!(selective_state_update_horizontal_f32(&args, 2, &s).is_ok());
        let e = selective_state_update_horizontal_f32(&args, 3, &s).unwrap_err();
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
        s.gate = None;
        let e = selective_state_update_horizontal_f32(&args, 2, &s).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    argument: "scalars",
                    ..
                }
            ),
            "{e}"
        );
        s.dt.clear();
        let e = selective_state_update_horizontal_f32(&args, 4, &s).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    argument: "scalars",
                    ..
                }
            ),
            "{e}"
        );
    }
}
