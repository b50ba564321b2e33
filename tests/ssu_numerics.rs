//! GPU numerics of the SSU kernel on inputs drawn fresh every run (the seed is printed; set
//! `MAMBA_SSU_TEST_SEED` to replay one):
//! 1. every dtype combination, sizes and option against an f64 reference computed from the same
//!    rounded inputs (FlashInfer's tolerance, atol 1e-3 / rtol 1e-2), both algorithms (and the
//!    horizontal one at the head dims it takes; its bits: `tests/ssu_horizontal.rs`);
//! 2. stochastic rounding is unbiased (z-score over many seeds) where round-to-nearest is not;
//! 3. poison: nothing outside the written state slots changes and `out` is fully written;
//! 4. the CPU-predicted SR bits (documented Philox mapping + software SR) agree with the
//!    kernel's for both layouts; under FlashInfer 0.7.4's conversion (`SrRule::V074`) and
//!    0.7.2's, bit for bit, on inputs whose fp32 state the CPU computes exactly and that reach
//!    every edge of the conversion (Inf, NaN, past 65504, fp16 subnormals, below them);
//! 5. invalid arguments are rejected by name and launch nothing.

mod common;
#[path = "common/ssu_dev.rs"]
mod ssu_dev;

use std::sync::Arc;

use common::{dtype_size, gen, run_seed, DevBuf, Rng};
use cudarc::driver::CudaStream;
use half::{bf16, f16};
use mamba_ssu::philox;
use mamba_ssu::ssu::SrRule;

// ---------------------------------------------------------------------------------------------
// Random problems
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Cfg {
    state: &'static str,
    input: &'static str,
    weight: &'static str,
    index: &'static str,
    batch: usize,
    nheads: usize,
    ngroups: usize,
    dim: usize,
    dstate: usize,
    z: bool,
    d: bool,
    dt_bias: bool,
    indices: bool,
    dst: bool,
    pad: bool,
    disable_state_update: bool,
    softplus: bool,
    rounds: u32,
    padded_strides: bool,
}

impl Cfg {
    fn base() -> Cfg {
        Cfg {
            state: "float16",
            input: "bfloat16",
            weight: "bfloat16",
            index: "int32",
            batch: 3,
            nheads: 8,
            ngroups: 2,
            dim: 64,
            dstate: 128,
            z: true,
            d: true,
            dt_bias: true,
            indices: true,
            dst: false,
            pad: false,
            disable_state_update: false,
            softplus: true,
            rounds: 0,
            padded_strides: false,
        }
    }
}

/// A problem on the host: storages as bytes plus the layout.
#[derive(Clone)]
struct Problem {
    cfg: Cfg,
    cache: usize,
    state_stride: usize,
    x_stride: usize,
    dt_stride: usize,
    bc_stride: usize,
    out_stride: usize,
    state: Vec<u8>,
    x: Vec<u8>,
    dt: Vec<u8>,
    a: Vec<u8>,
    b: Vec<u8>,
    c: Vec<u8>,
    d: Option<Vec<u8>>,
    z: Option<Vec<u8>>,
    dt_bias: Option<Vec<u8>>,
    read_slots: Vec<i64>,
    write_slots: Vec<i64>,
    pad_slot_id: i64,
    seed: i64,
}

fn pad16(es: usize) -> usize {
    16 / es
}

impl Problem {
    fn new(cfg: Cfg, rng: &mut Rng) -> Problem {
        let (sb, ib, wb) = (
            dtype_size(cfg.state),
            dtype_size(cfg.input),
            dtype_size(cfg.weight),
        );
        let head_block = cfg.nheads * cfg.dim * cfg.dstate;
        let extra = |es: usize, rng: &mut Rng| {
            if cfg.padded_strides {
                pad16(es) * (1 + rng.below(3) as usize)
            } else {
                0
            }
        };
        let cache = if cfg.indices {
            2 * cfg.batch + 2
        } else {
            cfg.batch + 1
        };
        let state_stride = head_block + extra(sb, rng);
        let x_stride = cfg.nheads * cfg.dim + extra(ib, rng);
        let out_stride = cfg.nheads * cfg.dim + extra(ib, rng);
        let bc_stride = cfg.ngroups * cfg.dstate + extra(ib, rng);
        let dt_stride = cfg.nheads + if cfg.padded_strides { 3 } else { 0 };
        let gseed = rng.next();
        let mk = |tag: u64, n: usize, dtype: &str| {
            gen::to_dtype_bytes(&gen::values_f32(gseed, tag, 0, n), dtype)
        };
        let nb = |stride: usize, inner: usize| (cfg.batch - 1) * stride + inner;
        // Permuted slots: reads first, disjoint writes after them (no read/write races).
        let mut slots: Vec<i64> = (0..cache as i64).collect();
        for i in (1..slots.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            slots.swap(i, j);
        }
        let pad_slot_id = -1;
        let mut read_slots: Vec<i64> = if cfg.indices {
            slots[..cfg.batch].to_vec()
        } else {
            (0..cfg.batch as i64).collect()
        };
        if cfg.pad {
            let k = rng.below(cfg.batch as u64) as usize;
            read_slots[k] = pad_slot_id;
        }
        let write_slots = if cfg.dst {
            slots[cfg.batch..2 * cfg.batch].to_vec()
        } else {
            read_slots.clone()
        };
        let seed = if rng.coin() {
            (rng.next() >> 1) as i64 // often above 2^32
        } else {
            (rng.next() >> 32) as i64
        };
        // A: zero-based tags make the generator's values; A values are fp32 always.
        Problem {
            state: mk(gen::TAG_STATE, cache * state_stride, cfg.state),
            x: mk(gen::TAG_X, nb(x_stride, cfg.nheads * cfg.dim), cfg.input),
            dt: mk(gen::TAG_DT, nb(dt_stride, cfg.nheads), cfg.weight),
            a: mk(gen::TAG_A, cfg.nheads, "float32"),
            b: mk(
                gen::TAG_B,
                nb(bc_stride, cfg.ngroups * cfg.dstate),
                cfg.input,
            ),
            c: mk(
                gen::TAG_C,
                nb(bc_stride, cfg.ngroups * cfg.dstate),
                cfg.input,
            ),
            d: cfg.d.then(|| mk(gen::TAG_D, cfg.nheads, cfg.weight)),
            z: cfg
                .z
                .then(|| mk(gen::TAG_Z, nb(x_stride, cfg.nheads * cfg.dim), cfg.input)),
            dt_bias: cfg
                .dt_bias
                .then(|| mk(gen::TAG_DT_BIAS, cfg.nheads, cfg.weight)),
            cache,
            state_stride,
            x_stride,
            dt_stride,
            bc_stride,
            out_stride,
            read_slots,
            write_slots,
            pad_slot_id,
            seed,
            cfg,
        }
        .check_sizes(sb, wb)
    }

    fn check_sizes(self, _sb: usize, _wb: usize) -> Self {
        assert_eq!(self.x.len(), self.z.as_ref().map_or(self.x.len(), Vec::len));
        self
    }

    /// The same problem with bf16 (or fp16) inputs and weights given as fp32 (each value exact):
    /// a call that the generic kernel serves, whose arithmetic is the compiled-in kernels'.
    fn widened(&self) -> Problem {
        let half = match (self.cfg.input, self.cfg.weight) {
            ("bfloat16", "bfloat16") => false,
            ("float16", "float16") => true,
            other => panic!("widened: bf16 or fp16 inputs and weights, got {other:?}"),
        };
        assert!(
            !self.cfg.padded_strides,
            "strides in elements of the narrow dtype"
        );
        let f32s = |v: &[u8]| -> Vec<u8> {
            common::as_u16(v)
                .into_iter()
                .flat_map(|b| {
                    let v = if half {
                        f16::from_bits(b).to_f32()
                    } else {
                        bf16::from_bits(b).to_f32()
                    };
                    v.to_le_bytes()
                })
                .collect()
        };
        let mut w = self.clone();
        (w.cfg.input, w.cfg.weight) = ("float32", "float32");
        w.x = f32s(&self.x);
        w.dt = f32s(&self.dt);
        w.b = f32s(&self.b);
        w.c = f32s(&self.c);
        w.d = self.d.as_deref().map(f32s);
        w.z = self.z.as_deref().map(f32s);
        w.dt_bias = self.dt_bias.as_deref().map(f32s);
        w
    }

    fn out_elems(&self) -> usize {
        (self.cfg.batch - 1) * self.out_stride + self.cfg.nheads * self.cfg.dim
    }

    fn index_bytes(&self, v: &[i64]) -> Vec<u8> {
        match self.cfg.index {
            "int32" => v.iter().flat_map(|s| (*s as i32).to_le_bytes()).collect(),
            _ => v.iter().flat_map(|s| s.to_le_bytes()).collect(),
        }
    }

    /// The written head blocks: `(storage element offset, length)`.
    fn written(&self) -> Vec<(usize, usize)> {
        if self.cfg.disable_state_update {
            return vec![];
        }
        let hb = self.cfg.nheads * self.cfg.dim * self.cfg.dstate;
        (0..self.cfg.batch)
            .filter(|b| self.read_slots[*b] != self.pad_slot_id)
            .map(|b| (self.write_slots[b] as usize * self.state_stride, hb))
            .collect()
    }
}

fn decode(dtype: &str, bytes: &[u8]) -> Vec<f64> {
    match dtype {
        "float32" => common::as_u32(bytes)
            .into_iter()
            .map(|b| f64::from(f32::from_bits(b)))
            .collect(),
        "float16" => common::as_u16(bytes)
            .into_iter()
            .map(|b| f16::from_bits(b).to_f64())
            .collect(),
        "bfloat16" => common::as_u16(bytes)
            .into_iter()
            .map(|b| bf16::from_bits(b).to_f64())
            .collect(),
        other => panic!("decode {other}"),
    }
}

/// The f64 reference: (new state storage values, out values), from the rounded inputs.
/// The f64 reference: the new state, `out`, and per `out` element the magnitude of its terms,
/// Σ_n |C_n · s_n| + |D · x| (times the gate's magnitude): the scale of the fp32 summation's
/// rounding error where the terms cancel (a state grown by e^16 sums terms of 10^4 to a result
/// near 0.05; fp32 then keeps only a few bits of it, in the kernel as in FlashInfer).
fn reference(p: &Problem) -> Reference {
    let c = &p.cfg;
    let state = decode(c.state, &p.state);
    let x = decode(c.input, &p.x);
    let dt = decode(c.weight, &p.dt);
    let a = decode("float32", &p.a);
    let bm = decode(c.input, &p.b);
    let cm = decode(c.input, &p.c);
    let d = p.d.as_ref().map(|v| decode(c.weight, v));
    let z = p.z.as_ref().map(|v| decode(c.input, v));
    let dt_bias = p.dt_bias.as_ref().map(|v| decode(c.weight, v));
    let mut new_state = state.clone();
    let mut out = vec![0f64; p.out_elems()];
    let mut out_mag = vec![0f64; p.out_elems()];
    let hpg = c.nheads / c.ngroups;
    for b in 0..c.batch {
        let rs = p.read_slots[b];
        let pad = rs == p.pad_slot_id;
        let ws = p.write_slots[b];
        for h in 0..c.nheads {
            let g = h / hpg;
            let mut dtv = dt[b * p.dt_stride + h] + dt_bias.as_ref().map_or(0.0, |v| v[h]);
            if c.softplus && dtv <= 20.0 {
                dtv = dtv.exp().ln_1p();
            }
            let da = (a[h] * dtv).exp();
            for dd in 0..c.dim {
                let xv = x[b * p.x_stride + h * c.dim + dd];
                let mut y = d.as_ref().map_or(0.0, |v| v[h] * xv);
                let mut mag = y.abs();
                for n in 0..c.dstate {
                    let e = h * c.dim * c.dstate + dd * c.dstate + n;
                    let s = if pad {
                        0.0
                    } else {
                        state[rs as usize * p.state_stride + e]
                    };
                    let bn = bm[b * p.bc_stride + g * c.dstate + n];
                    let sn = da * s + xv * bn * dtv;
                    y += cm[b * p.bc_stride + g * c.dstate + n] * sn;
                    mag += (cm[b * p.bc_stride + g * c.dstate + n] * sn).abs();
                    if !c.disable_state_update && !pad {
                        new_state[ws as usize * p.state_stride + e] = sn;
                    }
                }
                if let Some(z) = &z {
                    let zv = z[b * p.x_stride + h * c.dim + dd];
                    let gate = zv / (1.0 + (-zv).exp());
                    y *= gate;
                    mag *= gate.abs();
                }
                out[b * p.out_stride + h * c.dim + dd] = y;
                out_mag[b * p.out_stride + h * c.dim + dd] = mag;
            }
        }
    }
    (new_state, out, out_mag)
}

/// What [`reference`] returns: the new state, `out`, and `out`'s term magnitudes.
type Reference = (Vec<f64>, Vec<f64>, Vec<f64>);

/// fp32 summation error allowed on top of the tolerance, per unit of term magnitude: dstate
/// (<= 256) additions of unit roundoff 2^-24 each, as a worst-case bound.
const SUM_ERROR_PER_MAGNITUDE: f64 = 256.0 / (1u64 << 24) as f64;

// ---------------------------------------------------------------------------------------------
// Device side
// ---------------------------------------------------------------------------------------------

struct Dev {
    state: DevBuf,
    x: DevBuf,
    dt: DevBuf,
    a: DevBuf,
    b: DevBuf,
    c: DevBuf,
    d: Option<DevBuf>,
    z: Option<DevBuf>,
    dt_bias: Option<DevBuf>,
    sbi: Option<DevBuf>,
    dsbi: Option<DevBuf>,
    seed: DevBuf,
    out: DevBuf,
}

fn upload(stream: &Arc<CudaStream>, p: &Problem, poison_out: u8) -> Dev {
    let c = &p.cfg;
    let up = |dtype: &str, bytes: &[u8]| DevBuf::from_bytes(stream, dtype, bytes);
    let mut out = DevBuf::alloc(stream, c.input, p.out_elems());
    out.fill_bytes(stream, 0, p.out_elems(), poison_out);
    Dev {
        state: up(c.state, &p.state),
        x: up(c.input, &p.x),
        dt: up(c.weight, &p.dt),
        a: up("float32", &p.a),
        b: up(c.input, &p.b),
        c: up(c.input, &p.c),
        d: p.d.as_ref().map(|v| up(c.weight, v)),
        z: p.z.as_ref().map(|v| up(c.input, v)),
        dt_bias: p.dt_bias.as_ref().map(|v| up(c.weight, v)),
        sbi: c
            .indices
            .then(|| up(c.index, &p.index_bytes(&p.read_slots))),
        dsbi: (c.indices && c.dst).then(|| up(c.index, &p.index_bytes(&p.write_slots))),
        seed: up("int64", &p.seed.to_le_bytes()),
        out,
    }
}

fn call<'a>(p: &Problem, dev: &'a mut Dev, algorithm: &'static str) -> ssu_dev::Call<'a> {
    let c = &p.cfg;
    let (nh, dim, ds, bt) = (c.nheads, c.dim, c.dstate, c.batch);
    let inp = |buf: &'a DevBuf, shape: Vec<usize>, strides: Vec<usize>| ssu_dev::In {
        buf,
        shape,
        strides,
    };
    let x_like = |buf: &'a DevBuf| inp(buf, vec![bt, nh, dim], vec![p.x_stride, dim, 1]);
    let head = |buf: &'a DevBuf| inp(buf, vec![nh, dim], vec![1, 0]);
    ssu_dev::Call {
        state_scale: None,
        state: ssu_dev::Out {
            buf: &mut dev.state,
            shape: vec![p.cache, nh, dim, ds],
            strides: vec![p.state_stride, dim * ds, ds, 1],
        },
        x: x_like(&dev.x),
        dt: inp(&dev.dt, vec![bt, nh, dim], vec![p.dt_stride, 1, 0]),
        a: inp(&dev.a, vec![nh, dim, ds], vec![1, 0, 0]),
        b: inp(&dev.b, vec![bt, c.ngroups, ds], vec![p.bc_stride, ds, 1]),
        c: inp(&dev.c, vec![bt, c.ngroups, ds], vec![p.bc_stride, ds, 1]),
        d: dev.d.as_ref().map(head),
        z: dev.z.as_ref().map(x_like),
        dt_bias: dev.dt_bias.as_ref().map(head),
        out: ssu_dev::Out {
            buf: &mut dev.out,
            shape: vec![bt, nh, dim],
            strides: vec![p.out_stride, dim, 1],
        },
        state_batch_indices: dev.sbi.as_ref().map(|b| inp(b, vec![bt], vec![1])),
        dst_state_batch_indices: dev.dsbi.as_ref().map(|b| inp(b, vec![bt], vec![1])),
        seed: (c.rounds > 0).then(|| inp(&dev.seed, vec![1], vec![1])),
        flags: ssu_dev::Flags {
            pad_slot_id: p.pad_slot_id,
            dt_softplus: c.softplus,
            disable_state_update: c.disable_state_update,
            philox_rounds: c.rounds,
            algorithm,
        },
    }
}

/// Runs `p` with `algorithm`; returns (state storage bytes, out bytes) after the call.
fn run(stream: &Arc<CudaStream>, p: &Problem, algorithm: &'static str) -> (Vec<u8>, Vec<u8>) {
    run_rule(stream, p, algorithm, SrRule::V072)
}

/// [`run`] under the stochastic-rounding conversion `rule`.
fn run_rule(
    stream: &Arc<CudaStream>,
    p: &Problem,
    algorithm: &'static str,
    rule: SrRule,
) -> (Vec<u8>, Vec<u8>) {
    let mut dev = upload(stream, p, 0xFF);
    {
        let mut cl = call(p, &mut dev, algorithm);
        ssu_dev::launch_with_rule(stream, &mut cl, rule).unwrap_or_else(|e| {
            panic!("launch failed for {:?} ({algorithm}, {rule:?}): {e}", p.cfg)
        });
    }
    stream.synchronize().expect("kernel");
    (dev.state.download_all(stream), dev.out.download_all(stream))
}

/// `|g - r| <= atol + rtol |r|`, false for NaN.
fn within(g: f64, r: f64, atol: f64, rtol: f64) -> bool {
    (g - r).abs() <= atol + rtol * r.abs()
}

/// [`within`], except that a reference beyond the largest finite value of a 16-bit float
/// (no softplus and a negative dt make the state grow by up to e^16) must come out as an
/// infinity of the same sign: rounding to fp16 overflows there, in the kernel as in FlashInfer.
fn within_dtype(g: f64, r: f64, atol: f64, rtol: f64, dtype: &str) -> bool {
    let max = if dtype == "float16" {
        65504.0
    } else {
        f64::INFINITY
    };
    if r.abs() >= max && g.is_infinite() && g.signum() == r.signum() {
        return true;
    }
    within(g, r, atol, rtol)
}

fn in_written(written: &[(usize, usize)], e: usize) -> bool {
    written.iter().any(|(o, n)| e >= *o && e < o + n)
}

/// Checks one run against the reference; returns a failure description.
fn check_against_reference(
    p: &Problem,
    algorithm: &str,
    state_after: &[u8],
    out: &[u8],
) -> Option<String> {
    check_against(p, algorithm, state_after, out, &reference(p))
}

/// [`check_against_reference`] with the reference already computed.
fn check_against(
    p: &Problem,
    algorithm: &str,
    state_after: &[u8],
    out: &[u8],
    (ref_state, ref_out, ref_mag): &Reference,
) -> Option<String> {
    let c = &p.cfg;
    let got_state = decode(c.state, state_after);
    let written = p.written();
    let sb = dtype_size(c.state);
    let (atol, rtol) = (1e-3, 1e-2);
    let mut bad = Vec::new();
    for (e, (g, r)) in got_state.iter().zip(ref_state.iter()).enumerate() {
        if in_written(&written, e) {
            if !within_dtype(*g, *r, atol, rtol, c.state) {
                bad.push(format!("state[{e}] = {g} vs {r}"));
            }
        } else if state_after[e * sb..(e + 1) * sb] != p.state[e * sb..(e + 1) * sb] {
            bad.push(format!("state[{e}] changed outside the written slots"));
        }
        if bad.len() > 3 {
            break;
        }
    }
    let got_out = decode(c.input, out);
    let ib = dtype_size(c.input);
    for b in 0..c.batch {
        for i in 0..c.nheads * c.dim {
            let e = b * p.out_stride + i;
            let (g, r) = (got_out[e], ref_out[e]);
            if !within_dtype(
                g,
                r,
                atol + SUM_ERROR_PER_MAGNITUDE * ref_mag[e],
                rtol,
                c.input,
            ) {
                bad.push(format!("out[{b},{i}] = {g} vs {r}"));
            }
        }
    }
    // Row padding of out must keep the poison.
    for e in 0..got_out.len() {
        if e % p.out_stride >= c.nheads * c.dim
            && out[e * ib..(e + 1) * ib].iter().any(|x| *x != 0xFF)
        {
            bad.push(format!("out padding element {e} written"));
            break;
        }
    }
    (!bad.is_empty()).then(|| {
        format!(
            "{algorithm} {:?}: {}",
            p.cfg,
            bad.into_iter().take(4).collect::<Vec<_>>().join("; ")
        )
    })
}

// ---------------------------------------------------------------------------------------------
// 1. Against the f64 reference
// ---------------------------------------------------------------------------------------------

/// A sample of the launch-plan test's shapes on the GPU: head dims below one warp's rows (1, 3,
/// 4, 5, 8) on large grids — the shapes whose grid rule once divided by zero in the host
/// process — and a dim that is no multiple of the block's rows, against the f64 reference with
/// every algorithm and 0, 5 and 10 rounds.
#[test]
#[ignore = "requires a CUDA GPU"]
fn small_head_dims_on_large_grids_match_f64_reference() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let shapes = [
        (8usize, 1024usize, 4usize, 8usize),
        (4, 512, 64, 8),
        (1, 8, 2, 2),
        (1, 2048, 8, 1),
        (3, 96, 16, 4),
        (5, 64, 33, 2),
        (100, 16, 3, 4),
    ];
    let mut failures = Vec::new();
    let mut runs = 0;
    for (k, (dim, nheads, batch, ngroups)) in shapes.into_iter().enumerate() {
        let mut cfg = Cfg::base();
        (cfg.dim, cfg.nheads, cfg.batch, cfg.ngroups) = (dim, nheads, batch, ngroups);
        cfg.rounds = [0, 5, 10][k % 3];
        cfg.z = k % 2 == 0;
        cfg.pad = k % 3 == 1;
        cfg.padded_strides = rng.coin();
        let p = Problem::new(cfg, &mut rng);
        for alg in ["simple", "vertical", "auto"] {
            let (s, o) = run(&stream, &p, alg);
            runs += 1;
            if let Some(f) = check_against_reference(&p, alg, &s, &o) {
                eprintln!("FAIL {f}");
                failures.push(f);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed: {failures:?}",
        failures.len()
    );
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn all_dtype_combinations_match_f64_reference() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let floats = ["float16", "bfloat16", "float32"];
    let mut failures = Vec::new();
    let mut runs = 0;
    let mut k = 0usize;
    let mut sr_runs = std::collections::BTreeSet::new();
    for state in floats {
        for input in floats {
            for weight in floats {
                for index in ["int32", "int64"] {
                    for dim in [64, 128] {
                        for dstate in [64, 128, 256] {
                            k += 1;
                            let mut cfg = Cfg::base();
                            cfg.state = state;
                            cfg.input = input;
                            cfg.weight = weight;
                            cfg.index = index;
                            cfg.dim = dim;
                            cfg.dstate = dstate;
                            // Options cycle through their combinations, plus random draws.
                            cfg.z = k % 2 == 0;
                            cfg.d = k % 3 != 0;
                            cfg.dt_bias = k % 4 != 1;
                            cfg.indices = k % 5 != 0;
                            cfg.dst = cfg.indices && k % 3 == 1;
                            cfg.pad = cfg.indices && k % 4 == 2;
                            cfg.disable_state_update = k % 7 == 3;
                            cfg.softplus = k % 6 != 5;
                            cfg.padded_strides = rng.coin();
                            cfg.batch = 1 + rng.below(5) as usize;
                            (cfg.nheads, cfg.ngroups) =
                                [(8, 2), (4, 1), (8, 8), (16, 4)][rng.below(4) as usize];
                            cfg.rounds = if state == "float16" {
                                1 + (k % 10) as u32
                            } else {
                                0
                            };
                            let p = Problem::new(cfg, &mut rng);
                            // Head dims 64 and 128: FlashInfer's horizontal kernel takes them.
                            for alg in ["simple", "vertical", "horizontal"] {
                                let (s, o) = run(&stream, &p, alg);
                                runs += 1;
                                if p.cfg.rounds > 0 {
                                    sr_runs.insert((p.cfg.rounds, alg));
                                }
                                if let Some(f) = check_against_reference(&p, alg, &s, &o) {
                                    eprintln!("FAIL {f}");
                                    failures.push(f);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // SR rounds 5 and 10 (the compiled-in kernels) and 12 and 16 (past torch's 10: FlashInfer
    // has no upper bound; the run-time kernel) with both layouts, explicitly.
    for rounds in [5, 10, 12, 16] {
        for dstate in [64, 128, 256] {
            let mut cfg = Cfg::base();
            cfg.rounds = rounds;
            cfg.dstate = dstate;
            cfg.dst = true;
            cfg.pad = true;
            let p = Problem::new(cfg, &mut rng);
            for alg in ["simple", "vertical", "auto"] {
                let (s, o) = run(&stream, &p, alg);
                runs += 1;
                sr_runs.insert((rounds, alg));
                if let Some(f) = check_against_reference(&p, alg, &s, &o) {
                    eprintln!("FAIL {f}");
                    failures.push(f);
                }
            }
        }
    }
    for r in (1..=10).chain([12, 16]) {
        assert!(
            sr_runs.iter().any(|(x, _)| *x == r),
            "SR with {r} rounds was not exercised"
        );
    }
    eprintln!("{runs} runs, {} failures", failures.len());
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

/// Pad slots through the hot kernels' 4-row chunks (a grid above the small-grid bounds: 32 heads
/// x 12 batch entries, 24 576 rows) and 2-row chunks (32 heads x batch 2: the SR kernels of the
/// simple layout and 5 vertical rounds), without SR and with 5 and 10 rounds, both layouts and
/// auto, with and without z (the hot kernels' two instantiations; also at batch 1, the one-row
/// SR kernels and the 2-row ones without SR, without pads; and 128 heads x batch 32 without SR
/// and with 10 rounds, both layouts, the large-grid forms of those 4-row kernels, whose grid is
/// tapered: the last heads in blocks of a part of a head each; their SR bits are checked too):
/// a pad's rows are read as zeros (a predicated load, or the zero page of the 5-round and the
/// large-grid 10-round kernels; no L2 prefetch), its output is written and its state slot is
/// left alone. All of it at head dims 64, 80 and 128 (the large grids at 80 and 128 without z).
#[test]
#[ignore = "requires a CUDA GPU"]
fn large_grids_with_pads_match_f64_reference() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let mut failures = Vec::new();
    let mut runs = 0;
    // Head dim 64 (HotConfig) and 80, 128 (HotDimConfig: the same kernels with the head dim at
    // run time, whose warps take a divisor of it as their rows).
    for (dim, rounds) in [64usize, 80, 128]
        .into_iter()
        .flat_map(|d| [0u32, 5, 10].map(|r| (d, r)))
    {
        // With and without z: the hot kernels are instantiated for each.
        // On 132 SMs: batch 1 (2 048 rows) runs the one-row SR kernels and the 2-row ones without
        // SR, batch 2 (4 096 rows) the 2-row SR kernels (simple, 5 rounds vertical) and 4-row
        // ones, batch 12 the 4-row ones.
        for (z, batch) in [
            (true, 12),
            (false, 12),
            (true, 2),
            (false, 2),
            (true, 1),
            (false, 1),
        ] {
            let mut cfg = Cfg::base();
            cfg.dim = dim;
            cfg.rounds = rounds;
            cfg.batch = batch;
            (cfg.nheads, cfg.ngroups) = (32, 8);
            cfg.pad = batch > 1;
            cfg.dst = rounds == 10;
            cfg.z = z;
            let p = Problem::new(cfg, &mut rng);
            assert!(batch == 1 || p.read_slots.contains(&p.pad_slot_id));
            for alg in ["simple", "vertical", "auto"] {
                let (s, o) = run(&stream, &p, alg);
                runs += 1;
                if let Some(f) = check_against_reference(&p, alg, &s, &o) {
                    eprintln!("FAIL {f}");
                    failures.push(f);
                }
            }
        }
    }
    // The large-grid forms of the 4-row kernels without SR and with 10 rounds (from 262 144
    // rows on: `kLargeGridRows` in csrc/tuning.h; 10 rounds read pads from the zero page
    // there): 128 heads x batch 32.
    // At head dims 80 and 128 without z (dim 128's 10-round grid is tapered, dim 80's warps
    // take 40 rows in 2-warp blocks).
    for (dim, rounds, alg) in [
        (64usize, 0u32, "simple"),
        (64, 0, "vertical"),
        (64, 10, "simple"),
        (64, 10, "vertical"),
        (80, 0, "simple"),
        (80, 10, "vertical"),
        (128, 0, "vertical"),
        (128, 10, "simple"),
    ] {
        for z in [false, true] {
            if dim != 64 && z {
                continue;
            }
            let mut cfg = Cfg::base();
            cfg.dim = dim;
            cfg.rounds = rounds;
            cfg.batch = 32;
            (cfg.nheads, cfg.ngroups) = (128, 8);
            cfg.pad = true;
            cfg.z = z;
            let p = Problem::new(cfg, &mut rng);
            assert!(p.read_slots.contains(&p.pad_slot_id));
            runs += 1;
            // The SR bits of every row, the tapered grid's tail blocks included (their warps
            // take a part of a head each: a wrong row or Philox offset there changes about a
            // third of their elements, ~8 % of the total).
            failures.extend(large_grid_failures(
                &stream,
                &p,
                alg,
                &format!("dim {dim} R{rounds} {alg} z={z}"),
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed: {failures:#?}",
        failures.len()
    );
}

/// One large-grid run of `p` with `alg` against the f64 reference and, with SR, the fraction of
/// its state elements whose bits equal the SR of the reference's value predicted from the
/// layout's random bits (must exceed 0.99); the failures, each named by `label`.
fn large_grid_failures(
    stream: &Arc<CudaStream>,
    p: &Problem,
    alg: &'static str,
    label: &str,
) -> Vec<String> {
    let (s, o) = run(stream, p, alg);
    let r = reference(p);
    let mut failures = Vec::new();
    if let Some(f) = check_against(p, alg, &s, &o, &r) {
        eprintln!("FAIL {label}: {f}");
        failures.push(format!("{label}: {f}"));
    }
    if p.cfg.rounds > 0 {
        let (f, _, total) = predicted_agreement(p, &r.0, &s, alg);
        eprintln!("large grid {label}: predicted SR bits agree on {f:.5} of {total}");
        if f <= 0.99 {
            failures.push(format!("{label}: SR bits agree on {f}"));
        }
    }
    failures
}

/// The compiled-in kernels at dstate 64 and 256 (HotDsConfig: lanes of 2 or 8 columns, in
/// FlashInfer's simple and vertical layouts) at head dims 64, 80 and 128 against the f64
/// reference: 32 heads x batch 1, 2 and 12 (the one-row SR and 2-row kernels, the 2-row SR
/// ones, the 4-row ones), 0, 5 and 10 rounds, every algorithm, pads from batch 2 on, z on
/// alternate batches; then 128 heads x batch 32 (the large-grid forms, with pads) with their SR
/// bits predicted from the reference.
#[test]
#[ignore = "requires a CUDA GPU"]
fn dstates_64_and_256_match_f64_reference() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let mut failures = Vec::new();
    let mut runs = 0;
    for dstate in [64usize, 256] {
        for dim in [64usize, 80, 128] {
            for rounds in [0u32, 5, 10] {
                for (z, batch) in [(true, 12), (false, 2), (true, 1)] {
                    let mut cfg = Cfg::base();
                    cfg.dim = dim;
                    cfg.dstate = dstate;
                    cfg.rounds = rounds;
                    cfg.batch = batch;
                    (cfg.nheads, cfg.ngroups) = (32, 8);
                    cfg.pad = batch > 1;
                    cfg.dst = rounds == 10;
                    cfg.z = z;
                    let p = Problem::new(cfg, &mut rng);
                    let algs: &[&'static str] = if dim % 64 == 0 {
                        &["simple", "vertical", "auto", "horizontal"]
                    } else {
                        &["simple", "vertical", "auto"]
                    };
                    for &alg in algs {
                        let (s, o) = run(&stream, &p, alg);
                        runs += 1;
                        if let Some(f) = check_against_reference(&p, alg, &s, &o) {
                            eprintln!("FAIL dstate {dstate}: {f}");
                            failures.push(format!("dstate {dstate}: {f}"));
                        }
                    }
                }
            }
        }
    }
    for (dstate, dim, rounds, alg) in [
        (64usize, 64usize, 0u32, "simple"),
        (64, 128, 10, "vertical"),
        (64, 80, 5, "simple"),
        (256, 64, 10, "simple"),
        (256, 128, 0, "vertical"),
        (256, 80, 10, "vertical"),
    ] {
        let mut cfg = Cfg::base();
        cfg.dim = dim;
        cfg.dstate = dstate;
        cfg.rounds = rounds;
        cfg.batch = 32;
        (cfg.nheads, cfg.ngroups) = (128, 8);
        cfg.pad = true;
        cfg.z = false;
        let p = Problem::new(cfg, &mut rng);
        runs += 1;
        failures.extend(large_grid_failures(
            &stream,
            &p,
            alg,
            &format!("dstate {dstate} dim {dim} R{rounds} {alg}"),
        ));
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed: {failures:#?}",
        failures.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 2. SR is unbiased, RN is not (on data built to be biased under RN)
// ---------------------------------------------------------------------------------------------

/// A bf16 or fp32 state without SR runs the compiled-in kernels (`src/contract_tests/plans.rs`
/// checks the plan); the same problem with its bf16 inputs and weights given as fp32 runs the
/// generic kernel, FlashInfer's arithmetic for any dtypes. Both must write the same state bits,
/// and the compiled-in kernel's bf16 `out` must be the generic kernel's fp32 `out` rounded to
/// nearest: both states, every head dim family (64; 80 and 128 at run time), dstate
/// 64/128/256, both layouts, small (2-row) and large grids (both grid-size forms), z, pads and
/// dst slots, int32/int64 indices.
#[test]
#[ignore = "requires a CUDA GPU"]
fn bf16_and_f32_state_compiled_kernels_match_the_generic_kernel_bit_for_bit() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let mut problems = Vec::new();
    for state in ["bfloat16", "float32"] {
        for (k, shape) in compiled_kernel_shapes().into_iter().enumerate() {
            let mut cfg = compiled_kernel_cfg(k, shape);
            cfg.state = state;
            problems.push((format!("{state} {}", shape_name(shape)), cfg));
        }
    }
    narrow_against_widened_set(&stream, &mut rng, "bf16/fp32 state", problems);
}

/// The shapes of the compiled-in kernels' bit-for-bit tests, `(dim, dstate, batch, nheads)`:
/// every head dim family (64; 80 and 128 at run time) at dstate 64/128/256 on small grids (the
/// 1- and 2-row kernels, 4-row kernels below the large-grid forms), and from
/// Tuning::kLargeGridRows (262144) rows on, the large-grid forms.
fn compiled_kernel_shapes() -> Vec<(usize, usize, usize, usize)> {
    let mut shapes = Vec::new();
    for dim in [64usize, 80, 128] {
        for dstate in [64usize, 128, 256] {
            for (batch, nheads) in [(1usize, 8usize), (3, 32), (16, 128)] {
                shapes.push((dim, dstate, batch, nheads));
            }
        }
    }
    shapes.extend([
        (64, 64, 40, 128),
        (64, 128, 40, 128),
        (80, 128, 26, 128),
        (128, 256, 17, 128),
    ]);
    shapes
}

/// `Cfg::base()` at the `k`-th shape of [`compiled_kernel_shapes`], z, pads, dst slots and the
/// index dtype varied with `k`.
fn compiled_kernel_cfg(
    k: usize,
    (dim, dstate, batch, nheads): (usize, usize, usize, usize),
) -> Cfg {
    let mut cfg = Cfg::base();
    (cfg.dim, cfg.dstate, cfg.batch, cfg.nheads) = (dim, dstate, batch, nheads);
    cfg.ngroups = if nheads >= 32 { 8 } else { 2 };
    cfg.z = k % 2 == 0;
    cfg.pad = batch > 1 && k % 3 != 2;
    cfg.dst = k % 4 == 1;
    cfg.index = if k % 2 == 1 { "int64" } else { "int32" };
    cfg
}

/// A shape of [`compiled_kernel_shapes`] as failure messages name it.
fn shape_name((dim, dstate, batch, nheads): (usize, usize, usize, usize)) -> String {
    format!("dim {dim} dstate {dstate} b{batch} h{nheads}")
}

/// Runs each named problem config and its [`Problem::widened`] form with both layouts
/// ([`narrow_against_widened`]) and fails with every difference.
fn narrow_against_widened_set(
    stream: &Arc<CudaStream>,
    rng: &mut Rng,
    what: &str,
    problems: Vec<(String, Cfg)>,
) {
    let mut failures = Vec::new();
    let mut runs = 0;
    for (name, cfg) in problems {
        let p = Problem::new(cfg, rng);
        let wide = p.widened();
        for alg in ["simple", "vertical"] {
            runs += 1;
            let what = format!("{name} {alg}");
            failures.extend(narrow_against_widened(stream, &p, &wide, alg, &what));
        }
    }
    eprintln!(
        "{what}, compiled-in vs generic: {runs} runs, {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Runs the narrow-input problem `p` and its [`Problem::widened`] form `wide` with `alg`: the
/// failure, if any, where the state bits differ, or where `p`'s 2-byte `out` is not `wide`'s
/// fp32 `out` rounded to nearest in `p`'s input dtype (elements neither call writes keep the
/// poison, 0xFF bytes, in both).
///
/// The exception: an fp32 state under VERTICAL. With fp32 inputs (the widened problem) that
/// call takes FlashInfer's vertical fp32-input update form, s' = fma(x, dB, rn(dA · s))
/// (docs/flashinfer-ssu.md), where FlashInfer's kernels for bf16 and fp16 inputs, and so the
/// compiled-in ones, take s' = fma(dA, s, rn(x · dB)), as every layout of the generic kernel
/// does without SR but that one. So there the state is held to the widened problem's SIMPLE
/// run, and `out` (computed from that state) is not compared: it is checked against
/// FlashInfer's recordings instead (`flashinfer_dtype_forms_074`, `flashinfer_f16in_074` in
/// `tests/ssu_conformance.rs`).
fn narrow_against_widened(
    stream: &Arc<CudaStream>,
    p: &Problem,
    wide: &Problem,
    alg: &'static str,
    what: &str,
) -> Option<String> {
    let vertical_f32_state = p.cfg.state == "float32" && alg == "vertical";
    let (s, o) = run(stream, p, alg);
    let (ws, wo) = run(
        stream,
        wide,
        if vertical_f32_state { "simple" } else { alg },
    );
    if let Some(e) = (0..s.len()).find(|&e| s[e] != ws[e]) {
        return Some(format!("{what}: state differs at byte {e}"));
    }
    if vertical_f32_state {
        return None;
    }
    let (o, wo) = (common::as_u16(&o), common::as_u32(&wo));
    assert_eq!(o.len(), wo.len());
    let half = p.cfg.input == "float16";
    let bad = (0..o.len())
        .filter(|&e| {
            let unwritten = o[e] == 0xFFFF && wo[e] == u32::MAX;
            let v = f32::from_bits(wo[e]);
            let rounded = if half {
                f16::from_f32(v).to_bits()
            } else {
                bf16::from_f32(v).to_bits()
            };
            !unwritten && rounded != o[e]
        })
        .count();
    (bad > 0).then(|| format!("{what}: {bad} out elements differ"))
}

/// fp16 inputs and weights (an fp16 model) run the compiled-in kernels in a build with them
/// (`MAMBA_SSU_F16_INPUT_KERNELS=1`; `src/contract_tests/plans.rs` checks the plan); the same
/// problem with its inputs and weights given as fp32 runs the generic kernel. Both must write
/// the same state bits — over an fp16 state with and without SR (5 and 10 rounds, the 0.7.2
/// rule the compiled-in kernels implement), over a bf16 and an fp32 state without — and the
/// compiled-in kernel's fp16 `out` must be the generic kernel's fp32 `out` rounded to nearest:
/// every head dim family (64; 80 and 128 at run time), dstate 64/128/256, both layouts, small
/// (1- and 2-row) and large grids (both grid-size forms), z, pads and dst slots, int32/int64
/// indices.
#[cfg(f16_input_kernels)]
#[test]
#[ignore = "requires a CUDA GPU"]
fn f16_input_compiled_kernels_match_the_generic_kernel_bit_for_bit() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let mut problems = Vec::new();
    for (k, shape) in compiled_kernel_shapes().into_iter().enumerate() {
        for rounds in [0u32, 5, 10] {
            let mut cfg = compiled_kernel_cfg(k, shape);
            (cfg.input, cfg.weight) = ("float16", "float16");
            cfg.rounds = rounds;
            cfg.z = (k + rounds as usize) % 2 == 0;
            problems.push((format!("{} R={rounds}", shape_name(shape)), cfg));
        }
        for state in ["bfloat16", "float32"] {
            let mut cfg = compiled_kernel_cfg(k, shape);
            (cfg.state, cfg.input, cfg.weight) = (state, "float16", "float16");
            cfg.z = k % 2 == 1;
            problems.push((format!("{} {state} state", shape_name(shape)), cfg));
        }
    }
    narrow_against_widened_set(&stream, &mut rng, "fp16 inputs", problems);
}

/// A problem whose exact new state is `s + 2^-12` with `s` in [1, 2) (fp16 ulp 2^-10): a
/// quarter ulp above a representable value, which round-to-nearest always rounds down.
fn biased_problem(rng: &mut Rng, rounds: u32, seed: i64) -> Problem {
    let mut cfg = Cfg::base();
    cfg.batch = 4;
    cfg.indices = false;
    cfg.z = false;
    cfg.d = false;
    cfg.dt_bias = false;
    cfg.softplus = false;
    cfg.rounds = rounds;
    let mut p = Problem::new(cfg, rng);
    let n_state = p.state.len() / 2;
    p.state = (0..n_state)
        .flat_map(|_| (0x3C00u16 + rng.below(1024) as u16).to_le_bytes())
        .collect();
    let one = bf16::from_f32(1.0).to_bits().to_le_bytes();
    let b_val = bf16::from_f32(2f32.powi(-12)).to_bits().to_le_bytes();
    p.x = p.x.chunks(2).flat_map(|_| one).collect();
    p.b = p.b.chunks(2).flat_map(|_| b_val).collect();
    p.dt = p.dt.chunks(2).flat_map(|_| one).collect();
    p.a = vec![0u8; p.a.len()]; // A = 0: dA = exp(0) = 1 exactly
    p.seed = seed;
    p
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn stochastic_rounding_is_unbiased_and_nearest_is_not() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let ulp = 2f64.powi(-10);
    for alg in ["simple", "vertical"] {
        // Round to nearest: every element rounds down by exactly a quarter ulp.
        let p = biased_problem(&mut rng, 0, 0);
        let (s, _) = run(&stream, &p, alg);
        let written = p.written();
        let before = decode("float16", &p.state);
        let after = decode("float16", &s);
        let mut rn_sum = 0.0;
        let mut rn_n = 0usize;
        for (e, (a, b)) in after.iter().zip(&before).enumerate() {
            if in_written(&written, e) {
                rn_sum += (a - (b + 2f64.powi(-12))) / ulp;
                rn_n += 1;
            }
        }
        let rn_mean = rn_sum / rn_n as f64;
        eprintln!("{alg}: RN mean error {rn_mean:+.5} ulp over {rn_n} elements");
        assert!(
            (rn_mean + 0.25).abs() < 1e-9,
            "{alg}: RN should be biased by -1/4 ulp, got {rn_mean}"
        );

        // SR over many seeds.
        let seeds = 64;
        let (mut sum, mut sum2, mut n, mut ups) = (0f64, 0f64, 0usize, 0usize);
        for _ in 0..seeds {
            let seed = (rng.next() >> 1) as i64;
            let p = biased_problem(&mut rng, 10, seed);
            let (s, _) = run(&stream, &p, alg);
            let written = p.written();
            let before = decode("float16", &p.state);
            let after = decode("float16", &s);
            for (e, (a, b)) in after.iter().zip(&before).enumerate() {
                if in_written(&written, e) {
                    let err = (a - (b + 2f64.powi(-12))) / ulp;
                    assert!(
                        (err + 0.25).abs() < 1e-9 || (err - 0.75).abs() < 1e-9,
                        "{alg}: SR result is not one of the two neighbours (error {err} ulp)"
                    );
                    sum += err;
                    sum2 += err * err;
                    n += 1;
                    ups += usize::from(err > 0.0);
                }
            }
        }
        let mean = sum / n as f64;
        let var = sum2 / n as f64 - mean * mean;
        let z = mean / (var / n as f64).sqrt();
        let up_frac = ups as f64 / n as f64;
        eprintln!(
            "{alg}: SR mean error {mean:+.6} ulp over {n} elements ({seeds} seeds), z = {z:+.2}, \
             rounded up {up_frac:.5} (expect 0.25)"
        );
        assert!(
            z.abs() < 5.0,
            "{alg}: SR is biased: mean {mean} ulp, z = {z}"
        );
        assert!(
            (up_frac - 0.25).abs() < 0.01,
            "{alg}: up fraction {up_frac}"
        );
        // The RN bias would be z = -0.25 / (sd / sqrt(n)): far outside noise.
        let z_rn = -0.25 / (var / n as f64).sqrt();
        assert!(
            z_rn.abs() > 100.0,
            "test cannot tell RN from SR (z_rn {z_rn})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Poison: nothing outside the written slots changes; out is fully written
// ---------------------------------------------------------------------------------------------

#[test]
#[ignore = "requires a CUDA GPU"]
fn writes_stay_inside_the_written_slots() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let mut cases = Vec::new();
    for state in ["float16", "bfloat16", "float32"] {
        for (dst, pad, update) in [
            (false, true, true),
            (true, true, true),
            (true, false, false),
            (false, false, false),
        ] {
            let mut cfg = Cfg::base();
            cfg.state = state;
            cfg.dst = dst;
            cfg.pad = pad;
            cfg.disable_state_update = !update;
            cfg.padded_strides = true;
            cfg.batch = 4;
            cfg.rounds = if state == "float16" { 10 } else { 0 };
            cases.push(cfg);
        }
    }
    for cfg in cases {
        let mut p = Problem::new(cfg, &mut rng);
        let sb = dtype_size(p.cfg.state);
        p.state = vec![0xA5; p.state.len()];
        for alg in ["simple", "vertical"] {
            let mut dev = upload(&stream, &p, 0x5A);
            {
                let mut cl = call(&p, &mut dev, alg);
                ssu_dev::launch(&stream, &mut cl).expect("launch");
            }
            stream.synchronize().expect("kernel");
            let s = dev.state.download_all(&stream);
            let o = dev.out.download_all(&stream);
            let written = p.written();
            let mut changed_outside = 0;
            let mut unchanged_inside = 0;
            for e in 0..s.len() / sb {
                let same = s[e * sb..(e + 1) * sb].iter().all(|x| *x == 0xA5);
                if in_written(&written, e) {
                    unchanged_inside += usize::from(same);
                } else if !same {
                    changed_outside += 1;
                }
            }
            let ib = dtype_size(p.cfg.input);
            let row = p.cfg.nheads * p.cfg.dim;
            let (mut poisoned, mut pad_written) = (0, 0);
            for e in 0..o.len() / ib {
                let poison = o[e * ib..(e + 1) * ib].iter().all(|x| *x == 0x5A);
                if e % p.out_stride < row {
                    poisoned += usize::from(poison);
                } else if !poison {
                    pad_written += 1;
                }
            }
            let label = format!("{alg} {:?}", p.cfg);
            assert_eq!(
                changed_outside, 0,
                "{label}: state changed outside the written slots"
            );
            assert_eq!(pad_written, 0, "{label}: out row padding written");
            assert_eq!(poisoned, 0, "{label}: out elements left unwritten");
            let total: usize = written.iter().map(|w| w.1).sum();
            assert!(
                unchanged_inside < total / 2 || total == 0,
                "{label}: the written slots were mostly not written ({unchanged_inside}/{total})"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Predicted SR bits
// ---------------------------------------------------------------------------------------------

/// Software SR of fp32 `x` to fp16 bits with 13 random bits `r` (docs/flashinfer-ssu.md).
fn sr_f16_bits(x: f32, r: u32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let a = (bits & 0x7FFF_FFFF).wrapping_add(r & 0x1FFF);
    let e = a >> 23;
    let m = a & 0x7F_FFFF;
    let mag = if (bits & 0x7FFF_FFFF) >> 23 == 255 || e == 255 {
        if (bits & 0x7F_FFFF) != 0 || m != 0 {
            0x7E00
        } else {
            0x7C00
        }
    } else if e > 142 {
        0x7C00
    } else if e < 113 {
        0
    } else {
        (((e - 112) << 10) | (m >> 13)) as u16
    };
    if mag == 0x7E00 {
        return 0x7E00;
    }
    sign | mag
}

/// The 13 random bits of element (slot, h, d, n) for a layout (`group` columns per Philox
/// call: simple min(4, dstate/32), vertical 2).
fn random_bits(p: &Problem, slot: i64, h: usize, d: usize, n: usize, group: usize) -> u32 {
    let c = &p.cfg;
    let base = slot as u64 * p.state_stride as u64 + (h * c.dim * c.dstate) as u64;
    let o = base + (d * c.dstate) as u64 + (group * (n / group)) as u64;
    let w = philox::philox4x32(
        philox::counter_of(o),
        philox::key_of(p.seed as u64),
        c.rounds,
    );
    w[n % group] & 0x1FFF
}

/// Philox words per call of a layout and of the other one: simple min(4, dstate/32), vertical 2.
fn layout_groups(p: &Problem, alg: &str) -> (usize, usize) {
    let simple = 4.min(p.cfg.dstate / 32);
    if alg == "simple" {
        (simple, 2)
    } else {
        (2, simple)
    }
}

/// The fraction of the written state elements (pads skipped) whose fp16 bits equal the software
/// SR of the f64 reference's value with the layout's random bits, the same with the other
/// layout's mapping, and the element count. Below 1 only where the f64 reference rounds to a
/// different fp32 value than the kernel's fp32 arithmetic (rare): a wrong Philox counter for a
/// row changes about a third of its elements.
fn predicted_agreement(p: &Problem, ref_state: &[f64], s: &[u8], alg: &str) -> (f64, f64, usize) {
    let got = common::as_u16(s);
    let c = &p.cfg;
    let (own, other) = layout_groups(p, alg);
    let (mut agree, mut agree_other, mut total) = (0usize, 0usize, 0usize);
    for b in 0..c.batch {
        let (rs, ws) = (p.read_slots[b], p.write_slots[b]);
        if rs == p.pad_slot_id {
            continue;
        }
        for h in 0..c.nheads {
            for d in 0..c.dim {
                for n in 0..c.dstate {
                    let e = ws as usize * p.state_stride + h * c.dim * c.dstate + d * c.dstate + n;
                    let x = ref_state[e] as f32;
                    let want = sr_f16_bits(x, random_bits(p, rs, h, d, n, own));
                    let alt = sr_f16_bits(x, random_bits(p, rs, h, d, n, other));
                    agree += usize::from(got[e] == want);
                    agree_other += usize::from(got[e] == alt);
                    total += 1;
                }
            }
        }
    }
    (
        agree as f64 / total as f64,
        agree_other as f64 / total as f64,
        total,
    )
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn predicted_sr_bits_match_for_both_layouts() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    for rounds in [5, 10] {
        for dstate in [64, 128, 256] {
            let mut cfg = Cfg::base();
            cfg.rounds = rounds;
            cfg.dstate = dstate;
            cfg.dst = true;
            cfg.padded_strides = true;
            let p = Problem::new(cfg, &mut rng);
            let (ref_state, _, _) = reference(&p);
            for alg in ["simple", "vertical"] {
                let (s, _) = run(&stream, &p, alg);
                let (f, f_other, total) = predicted_agreement(&p, &ref_state, &s, alg);
                let (own, other) = layout_groups(&p, alg);
                eprintln!(
                    "R{rounds} dstate {dstate} {alg}: predicted bits agree on {f:.5} of {total} \
                     (other layout's mapping: {f_other:.5})"
                );
                assert!(f > 0.99, "R{rounds} dstate {dstate} {alg}: agreement {f}");
                if own != other {
                    assert!(f_other < 0.97, "the other mapping agrees too: {f_other}");
                }
            }
        }
    }
}

/// A random value with 8 significant bits (exact in bf16, and in fp16 inside its normal range),
/// magnitude in [2^lo, 2^hi), random sign.
fn exact_value(rng: &mut Rng, lo: i32, hi: i32) -> f32 {
    let e = lo + rng.below((hi - lo) as u64) as i32;
    let m = 1.0 + rng.below(128) as f32 / 128.0;
    let v = m * 2f32.powi(e);
    if rng.coin() {
        -v
    } else {
        v
    }
}

/// Which edge of the SR conversion column `n` of a row exercises (see [`edge_problem`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edge {
    Ordinary,
    Special,
    PastMax,
    Subnormal,
    Tiny,
}

fn edge_of(n: usize) -> Edge {
    match n % 8 {
        0..=2 => Edge::Ordinary,
        3 => Edge::Special,
        4 => Edge::PastMax,
        5 | 6 => Edge::Subnormal,
        _ => Edge::Tiny,
    }
}

/// A problem whose new fp32 state the CPU computes exactly — A = 0 (dA = ex2(0) = 1), dt = 1,
/// no dt_bias or softplus, so s' = rn(s + x * B) with the product exact (8-bit significands)
/// and every value an fp32 normal, zero, Inf or NaN — and whose values reach every edge of the
/// SR conversion, by column (`edge_of`): ordinary values; Inf, -Inf, NaN and +-65504 as the
/// state with B = 0; +-65504 plus a product that rounds past the largest fp16 (or far past it);
/// results in the fp16 subnormal range [2^-37, 2^-14) (from zero or a subnormal state); tiny
/// results below 2^-37 (and zeros).
fn edge_problem(mut cfg: Cfg, rng: &mut Rng) -> Problem {
    cfg.z = false;
    cfg.d = false;
    cfg.dt_bias = false;
    cfg.softplus = false;
    cfg.dst = false;
    cfg.pad = false;
    cfg.disable_state_update = false;
    let mut p = Problem::new(cfg, rng);
    let c = p.cfg.clone();
    let n_state = p.state.len() / 2;
    let head = c.dim * c.dstate;
    let mut state = Vec::with_capacity(n_state);
    for e in 0..n_state {
        let n = (e % p.state_stride) % c.dstate;
        let d = ((e % p.state_stride) % head) / c.dstate;
        let sign = if rng.coin() { 0x8000u16 } else { 0 };
        let bits = match edge_of(n) {
            Edge::Ordinary => f16::from_f32(exact_value(rng, -4, 4)).to_bits(),
            Edge::Special => [0x7C00u16, 0xFC00, 0x7E00, 0x7BFF, 0xFBFF, 0x3C00][d % 6],
            Edge::PastMax => [0x7BFFu16, 0xFBFF][d % 2],
            Edge::Subnormal => {
                if rng.coin() {
                    sign | rng.below(0x400) as u16
                } else {
                    sign
                }
            }
            Edge::Tiny => sign,
        };
        state.push(bits);
    }
    p.state = state.iter().flat_map(|b| b.to_le_bytes()).collect();
    let nx = p.x.len() / dtype_size(c.input);
    let x: Vec<f32> = (0..nx).map(|_| exact_value(rng, -1, 1)).collect();
    p.x = gen::to_dtype_bytes(&x, c.input);
    let nb = p.b.len() / dtype_size(c.input);
    let b: Vec<f32> = (0..nb)
        .map(|e| match edge_of((e % p.bc_stride) % c.dstate) {
            Edge::Ordinary => exact_value(rng, -6, 2),
            Edge::Special => 0.0,
            // With |x| in [0.5, 2): 65504 + x * B from just past 65504 to far past 65536.
            Edge::PastMax => {
                if rng.below(4) == 0 {
                    exact_value(rng, 8, 12)
                } else {
                    exact_value(rng, 3, 5).abs()
                }
            }
            Edge::Subnormal => exact_value(rng, -37, -14),
            Edge::Tiny => exact_value(rng, -60, -37),
        })
        .collect();
    p.b = gen::to_dtype_bytes(&b, c.input);
    let ndt = p.dt.len() / dtype_size(c.weight);
    p.dt = gen::to_dtype_bytes(&vec![1.0; ndt], c.weight);
    p.a = vec![0u8; p.a.len()];
    p
}

/// The kernel's fp32 new state of element (b, h, d, n), exactly: rn(s + rn(x * B)) (the
/// product is exact); `None` for a NaN (its bits are the device's).
fn edge_new_state(p: &Problem, state: &[u16], x: &[f64], bm: &[f64], e: [usize; 4]) -> Option<f32> {
    let c = &p.cfg;
    let [b, h, d, n] = e;
    let rs = p.read_slots[b] as usize;
    let s = f16::from_bits(state[rs * p.state_stride + h * c.dim * c.dstate + d * c.dstate + n]);
    let g = h / (c.nheads / c.ngroups);
    let prod =
        x[b * p.x_stride + h * c.dim + d] as f32 * bm[b * p.bc_stride + g * c.dstate + n] as f32;
    let v = s.to_f32() + prod;
    (!v.is_nan()).then_some(v)
}

/// Runs an [`edge_problem`] under both rules and both layouts and checks the fp16 state bit for
/// bit: under 0.7.4 against `SrRule::V074` of the exact fp32 state with the layout's random
/// bits, under 0.7.2 against `SrRule::V072` (a NaN state value, whose fp32 bits are the
/// device's — canonical 0x7FFFFFFF, or the input's quiet NaN — may give either's 0.7.2
/// result); nothing outside the written slots changes; the two runs differ exactly where the
/// predictions do, and they do at edge elements only (Inf, NaN, fp16 subnormals).
fn check_edges_under_both_rules(stream: &Arc<CudaStream>, cfg: Cfg, rng: &mut Rng) {
    let p = edge_problem(cfg, rng);
    let c = p.cfg.clone();
    let before = common::as_u16(&p.state);
    let x = decode(c.input, &p.x);
    let bm = decode(c.input, &p.b);
    let written = p.written();
    for alg in ["simple", "vertical"] {
        let (own, _) = layout_groups(&p, alg);
        let got = [SrRule::V072, SrRule::V074]
            .map(|rule| common::as_u16(&run_rule(stream, &p, alg, rule).0));
        let label = format!("{alg} R{} {:?}", c.rounds, c);
        for (rule, g) in [SrRule::V072, SrRule::V074].iter().zip(&got) {
            for (e, (a, b)) in g.iter().zip(&before).enumerate() {
                if !in_written(&written, e) {
                    assert_eq!(
                        a, b,
                        "{label} {rule:?}: state[{e}] changed outside the written slots"
                    );
                }
            }
        }
        // Coverage: [edge][0: exponent field 0 (zero or subnormal), 1: Inf or NaN, 2: normal].
        let mut seen = [[false; 3]; 5];
        let (mut differ, mut checked) = (0usize, 0usize);
        for b in 0..c.batch {
            let (rs, ws) = (p.read_slots[b], p.write_slots[b] as usize);
            for h in 0..c.nheads {
                for d in 0..c.dim {
                    for n in 0..c.dstate {
                        let e = ws * p.state_stride + h * c.dim * c.dstate + d * c.dstate + n;
                        let r = random_bits(&p, rs, h, d, n, own);
                        let v = edge_new_state(&p, &before, &x, &bm, [b, h, d, n]);
                        let (want072, alt072, want074) = match v {
                            Some(v) => (SrRule::V072.round(v, r), None, SrRule::V074.round(v, r)),
                            None => (
                                SrRule::V072.round(f32::from_bits(0x7FFF_FFFF), r),
                                Some(SrRule::V072.round(f32::from_bits(0x7FC0_0000), r)),
                                0x7E00,
                            ),
                        };
                        let what = |rule: &str, g: u16, w: u16| {
                            format!(
                                "{label} {rule}: element (b {b}, h {h}, d {d}, n {n}, {:?}) \
                                 fp32 {v:?} r {r:#x}: got {g:#06x}, predicted {w:#06x}",
                                edge_of(n)
                            )
                        };
                        assert_eq!(got[1][e], want074, "{}", what("V074", got[1][e], want074));
                        assert!(
                            got[0][e] == want072 || Some(got[0][e]) == alt072,
                            "{}",
                            what("V072", got[0][e], want072)
                        );
                        let pred_differ = v.is_none_or(|_| want072 != want074);
                        if got[0][e] != got[1][e] {
                            assert!(
                                pred_differ,
                                "{}",
                                what("V072 vs V074", got[0][e], got[1][e])
                            );
                            // Only Inf, NaN and results below 2^-14 (or within 2^13 ulps of
                            // f32::MAX) may differ.
                            assert!(
                                v.is_none_or(|v| v.is_infinite()
                                    || v.abs() < 2f32.powi(-14)
                                    || v.abs() > f32::from_bits(0x7F7F_E000)),
                                "{}: the rules differ at an element that is no edge",
                                what("V072 vs V074", got[0][e], got[1][e])
                            );
                            differ += 1;
                        } else if v.is_some() {
                            assert!(!pred_differ, "{}", what("V072 = V074", got[0][e], want074));
                        }
                        let bucket = match want074 & 0x7C00 {
                            0 => 0,
                            0x7C00 => 1,
                            _ => 2,
                        };
                        seen[edge_of(n) as usize][bucket] = true;
                        checked += 1;
                    }
                }
            }
        }
        eprintln!("{label}: {checked} elements bit for bit under both rules, {differ} differ");
        assert!(
            differ > checked / 100,
            "{label}: too few edge elements differ ({differ})"
        );
        // Coverage: Inf and NaN state values, results past 65504, fp16 subnormals and zeros,
        // ordinary results.
        for (edge, bucket) in [
            (Edge::Special, 1),
            (Edge::PastMax, 1),
            (Edge::PastMax, 2),
            (Edge::Subnormal, 0),
            (Edge::Tiny, 0),
            (Edge::Ordinary, 2),
        ] {
            assert!(
                seen[edge as usize][bucket],
                "{label}: no {edge:?} result of kind {bucket}"
            );
        }
    }
}

/// FlashInfer 0.7.4's SR conversion (`SrRule::V074`, served by the generic kernel) on the hot
/// shape — fp16 state, bf16 inputs, dim 64, dstate 128, 5 and 10 rounds, on a grid small enough
/// for the one-row hot kernels and on a 4-row one for the 0.7.2 runs — bit for bit against the
/// CPU at every edge of the rule, and 0.7.2 on the same inputs bit for bit against its own.
#[test]
#[ignore = "requires a CUDA GPU"]
fn sr_rule_v074_hot_shape_matches_the_cpu_bit_for_bit_at_every_edge() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    for rounds in [5, 10] {
        for (batch, nheads, ngroups) in [(3usize, 8usize, 2usize), (16, 32, 8)] {
            let mut cfg = Cfg::base();
            cfg.rounds = rounds;
            cfg.batch = batch;
            cfg.nheads = nheads;
            cfg.ngroups = ngroups;
            check_edges_under_both_rules(&stream, cfg, &mut rng);
        }
    }
}

/// The same on shapes only the generic kernel serves (fp32 inputs and weights; dstate 64 with
/// a dim that is no multiple of the chunk rows, and dstate 256).
#[test]
#[ignore = "requires a CUDA GPU"]
fn sr_rule_v074_generic_shape_matches_the_cpu_bit_for_bit_at_every_edge() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    for rounds in [5, 10] {
        for (dim, dstate) in [(23usize, 64usize), (8, 256)] {
            let mut cfg = Cfg::base();
            cfg.input = "float32";
            cfg.weight = "float32";
            cfg.index = "int64";
            cfg.rounds = rounds;
            cfg.batch = 3;
            cfg.nheads = 4;
            cfg.dim = dim;
            cfg.dstate = dstate;
            check_edges_under_both_rules(&stream, cfg, &mut rng);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Validation
// ---------------------------------------------------------------------------------------------

#[test]
#[ignore = "requires a CUDA GPU"]
fn invalid_arguments_are_rejected_by_name_and_launch_nothing() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let mut cfg = Cfg::base();
    cfg.rounds = 10;
    let p = Problem::new(cfg, &mut rng);
    type Mutator = fn(&mut ssu_dev::Call<'_>);
    let cases: Vec<(&str, &[&str], Mutator)> = vec![
        ("rounds past the C ABI's int32", &["philox_rounds"], |c| {
            c.flags.philox_rounds = u32::MAX
        }),
        // FlashInfer's rand_seed = None: the C check names the seed's pointer.
        ("SR without a seed", &["seed.pointer"], |c| c.seed = None),
        ("B and C with 3 groups for 8 heads", &["B"], |c| {
            c.b.shape[1] = 3;
            c.c.shape[1] = 3;
        }),
        ("x batch differs from out", &["x", "out"], |c| {
            c.x.shape[0] = 2
        }),
        ("state rows not contiguous", &["state"], |c| {
            c.state.strides[3] = 2;
        }),
        ("dt not broadcast over dim", &["dt"], |c| {
            c.dt.strides[2] = 1
        }),
        ("A not broadcast", &["A", "a"], |c| {
            c.a.strides = vec![1, 1, 0]
        }),
        ("C dstate differs", &["C"], |c| c.c.shape[2] = 64),
    ];
    for (what, names, mutate) in cases {
        let mut dev = upload(&stream, &p, 0xFF);
        let result = {
            let mut cl = call(&p, &mut dev, "simple");
            mutate(&mut cl);
            ssu_dev::launch(&stream, &mut cl)
        };
        stream.synchronize().expect("sync");
        match result {
            Err(mamba_ssu::Error::InvalidArgument { argument, message }) => {
                eprintln!("{what}: `{argument}`: {message}");
                assert!(
                    names.contains(&argument),
                    "{what}: error names `{argument}`, expected one of {names:?}"
                );
            }
            other => panic!("{what}: expected InvalidArgument naming {names:?}, got {other:?}"),
        }
        assert!(
            dev.state.download_all(&stream) == p.state,
            "{what}: state changed"
        );
        assert!(
            dev.out.download_all(&stream).iter().all(|b| *b == 0xFF),
            "{what}: out written"
        );
    }
}
