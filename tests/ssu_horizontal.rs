//! GPU checks of the single-token HORIZONTAL kernel (FlashInfer's horizontal mapping) against
//! the CPU model of that kernel, bit for bit (`mamba_ssu::reference::horizontal`), on inputs
//! drawn fresh every run (the seed is printed; set `MAMBA_SSU_TEST_SEED` to replay one).
//!
//! The model is exact given the values the kernel computes with approximate instructions
//! (dt' and dA per (batch, head), the gate factor per row). Those are read from the GPU first
//! by a probe call of the same kernel family on an fp32 state and fp32 inputs with the
//! problem's weights (x = 1, D = 1, C = 0, B = 0 except column 1, state 1 in column 0 and 0
//! elsewhere): then column 0's new state is dA, column 1's is dt' and `out` is the gate factor.
//! Every element of the state storage (written slots, unwritten slots and padding) and of `out`
//! (its row padding keeps the 0xFF poison) must then equal the model's rounding of its fp32
//! values: to nearest for F32, BF16 and F16 states without stochastic rounding, by the call's
//! stochastic-rounding rule with the horizontal random mapping (`SrMapping` of
//! `Algorithm::Horizontal`) otherwise.
//!
//! Covered: head dims 64, 128, 192, 256; dstate 64, 128, 256; F16 (0, 5, 10 and 3 Philox
//! rounds, FlashInfer 0.7.2's and 0.7.4's conversion), BF16 and F32 states; BF16, F16 and F32
//! inputs and weights (fp16 ones run the compiled-in fp16-input kernels in a build with
//! `MAMBA_SSU_F16_INPUT_KERNELS=1`, the run-time kernel otherwise); z, D, dt_bias, softplus on
//! and off; read and write indices, pads, padded strides, disabled state updates; large grids
//! (the kernel's 64-row warps) and small ones (16); states that reach the conversion's edges
//! (past 65504, below 2^-14, infinities). Also: calls HORIZONTAL refuses launch nothing, and a
//! fused seed gives the bits of the same seed by pointer.

mod common;
#[path = "common/ssu_dev.rs"]
mod ssu_dev;

use std::sync::Arc;

use common::{dtype_size, gen, run_seed, DevBuf, Rng};
use cudarc::driver::CudaStream;
use half::{bf16, f16};
use mamba_ssu::reference::{
    predict_sr_state_f16_with_rule, selective_state_update_horizontal_f32, HorizontalScalars,
    HostTensor, SrMapping, SsuHostArgs,
};
use mamba_ssu::ssu::{Algorithm, SrRule};

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
    rounds: u32,
    rule: SrRule,
    z: bool,
    d: bool,
    dt_bias: bool,
    softplus: bool,
    indices: bool,
    dst: bool,
    pad: bool,
    disable_state_update: bool,
    padded_strides: bool,
    /// Scale some rows of the initial state to reach the SR conversion's edges.
    edges: bool,
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
            rounds: 10,
            rule: SrRule::V072,
            z: false,
            d: true,
            dt_bias: true,
            softplus: true,
            indices: true,
            dst: false,
            pad: false,
            disable_state_update: false,
            padded_strides: false,
            edges: false,
        }
    }
}

/// A problem: storages as bytes of their dtypes, plus the layout.
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

/// An edge value of the state for element `i`: past 65504 after the update, below 2^-14, or
/// an infinity.
fn edge_value(i: usize, v: f32) -> f32 {
    match i % 7 {
        0 => v * 4096.0,
        1 => v * 2f32.powi(-12),
        2 => 65500.0f32.copysign(v),
        3 if i % 1001 == 3 => f32::INFINITY.copysign(v),
        _ => v,
    }
}

impl Problem {
    fn new(cfg: Cfg, rng: &mut Rng) -> Problem {
        let extra = |es: usize, rng: &mut Rng| {
            if cfg.padded_strides {
                16 / es * (1 + rng.below(3) as usize)
            } else {
                0
            }
        };
        let (sb, ib) = (dtype_size(cfg.state), dtype_size(cfg.input));
        let cache = if cfg.indices {
            2 * cfg.batch + 2
        } else {
            cfg.batch
        };
        let state_stride = cfg.nheads * cfg.dim * cfg.dstate + extra(sb, rng);
        let x_stride = cfg.nheads * cfg.dim + extra(ib, rng);
        let out_stride = cfg.nheads * cfg.dim + extra(ib, rng);
        let bc_stride = cfg.ngroups * cfg.dstate + extra(ib, rng);
        let dt_stride = cfg.nheads + if cfg.padded_strides { 3 } else { 0 };
        let gseed = rng.next();
        let values = |tag: u64, n: usize| gen::values_f32(gseed, tag, 0, n);
        let mk = |tag: u64, n: usize, dtype: &str| gen::to_dtype_bytes(&values(tag, n), dtype);
        let nb = |stride: usize, inner: usize| (cfg.batch - 1) * stride + inner;
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
            (rng.next() >> 1) as i64
        } else {
            (rng.next() >> 32) as i64
        };
        let mut state = values(gen::TAG_STATE, cache * state_stride);
        if cfg.edges {
            for (i, v) in state.iter_mut().enumerate() {
                *v = edge_value(i, *v);
            }
        }
        Problem {
            state: gen::to_dtype_bytes(&state, cfg.state),
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

/// Device buffers of a call.
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

/// A call's storages on the device, with the dtypes `dtypes` (state, input) of the storages.
#[allow(clippy::too_many_arguments)]
fn upload(
    stream: &Arc<CudaStream>,
    p: &Problem,
    state: (&str, &[u8]),
    input: &str,
    x: &[u8],
    b: &[u8],
    c: &[u8],
    d: Option<&[u8]>,
    z: Option<&[u8]>,
) -> Dev {
    let cfg = &p.cfg;
    let up = |dtype: &str, bytes: &[u8]| DevBuf::from_bytes(stream, dtype, bytes);
    let mut out = DevBuf::alloc(stream, input, p.out_elems());
    out.fill_bytes(stream, 0, p.out_elems(), 0xFF);
    Dev {
        state: up(state.0, state.1),
        x: up(input, x),
        dt: up(cfg.weight, &p.dt),
        a: up("float32", &p.a),
        b: up(input, b),
        c: up(input, c),
        d: d.map(|v| up(cfg.weight, v)),
        z: z.map(|v| up(input, v)),
        dt_bias: p.dt_bias.as_ref().map(|v| up(cfg.weight, v)),
        sbi: cfg
            .indices
            .then(|| up(cfg.index, &p.index_bytes(&p.read_slots))),
        dsbi: (cfg.indices && cfg.dst).then(|| up(cfg.index, &p.index_bytes(&p.write_slots))),
        seed: up("int64", &p.seed.to_le_bytes()),
        out,
    }
}

fn call<'a>(p: &Problem, dev: &'a mut Dev, rounds: u32, disable: bool) -> ssu_dev::Call<'a> {
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
        seed: (rounds > 0).then(|| inp(&dev.seed, vec![1], vec![1])),
        flags: ssu_dev::Flags {
            pad_slot_id: p.pad_slot_id,
            dt_softplus: c.softplus,
            disable_state_update: disable,
            philox_rounds: rounds,
            algorithm: "horizontal",
        },
    }
}

/// The kernel's dt', dA and gate factors for `p`, read from a probe call on an fp32 state
/// and fp32 inputs with p's weights (see the module doc).
fn probe(stream: &Arc<CudaStream>, p: &Problem) -> HorizontalScalars {
    let c = &p.cfg;
    let (nh, dim, ds, bt) = (c.nheads, c.dim, c.dstate, c.batch);
    let f32b = |v: &[f32]| gen::to_dtype_bytes(v, "float32");
    // State: column 0 of every row 1, the rest 0, in every slot (no indices: slot b).
    let mut st = vec![0f32; p.cache * p.state_stride];
    for (i, v) in st.iter_mut().enumerate() {
        if (i % p.state_stride) % ds == 0 {
            *v = 1.0;
        }
    }
    let x = vec![1f32; (bt - 1) * p.x_stride + nh * dim];
    let mut bm = vec![0f32; (bt - 1) * p.bc_stride + c.ngroups * ds];
    for (i, v) in bm.iter_mut().enumerate() {
        if (i % p.bc_stride) % ds == 1 {
            *v = 1.0;
        }
    }
    let cm = vec![0f32; bm.len()];
    let one = gen::to_dtype_bytes(&vec![1f32; nh], c.weight);
    let z = p.z.as_ref().map(|v| {
        f32b(
            &decode(c.input, v)
                .iter()
                .map(|x| *x as f32)
                .collect::<Vec<_>>(),
        )
    });
    let mut q = Problem {
        cfg: Cfg {
            indices: false,
            dst: false,
            pad: false,
            ..c.clone()
        },
        cache: p.cache,
        state_stride: p.state_stride,
        x_stride: p.x_stride,
        dt_stride: p.dt_stride,
        bc_stride: p.bc_stride,
        out_stride: p.out_stride,
        state: Vec::new(),
        x: Vec::new(),
        dt: p.dt.clone(),
        a: p.a.clone(),
        b: Vec::new(),
        c: Vec::new(),
        d: None,
        z: None,
        dt_bias: p.dt_bias.clone(),
        read_slots: (0..bt as i64).collect(),
        write_slots: (0..bt as i64).collect(),
        pad_slot_id: -1,
        seed: 0,
    };
    q.cfg.input = "float32";
    let mut dev = upload(
        stream,
        &q,
        ("float32", &f32b(&st)),
        "float32",
        &f32b(&x),
        &f32b(&bm),
        &f32b(&cm),
        Some(&one),
        z.as_deref(),
    );
    {
        let mut cl = call(&q, &mut dev, 0, false);
        ssu_dev::launch(stream, &mut cl).expect("probe launch");
    }
    stream.synchronize().expect("probe kernel");
    let state = common::as_u32(&dev.state.download_all(stream));
    let out = common::as_u32(&dev.out.download_all(stream));
    let (mut dt, mut da) = (Vec::new(), Vec::new());
    for b in 0..bt {
        for h in 0..nh {
            let row = b * p.state_stride + h * dim * ds;
            da.push(f32::from_bits(state[row]));
            dt.push(f32::from_bits(state[row + 1]));
        }
    }
    let gate = c.z.then(|| {
        (0..bt)
            .flat_map(|b| (0..nh * dim).map(move |i| (b, i)))
            .map(|(b, i)| f32::from_bits(out[b * p.out_stride + i]))
            .collect()
    });
    HorizontalScalars { dt, da, gate }
}

/// The state and `out` bytes the kernel must produce for `p`, from the CPU model with the
/// kernel's own scalars.
fn predict(p: &Problem, scalars: &HorizontalScalars) -> (Vec<u8>, Vec<u8>) {
    let c = &p.cfg;
    let (nh, dim, ds, bt) = (c.nheads, c.dim, c.dstate, c.batch);
    let state = decode(c.state, &p.state);
    let x = decode(c.input, &p.x);
    let dt = decode(c.weight, &p.dt);
    let a = decode("float32", &p.a);
    let bm = decode(c.input, &p.b);
    let cm = decode(c.input, &p.c);
    let d = p.d.as_ref().map(|v| decode(c.weight, v));
    let z = p.z.as_ref().map(|v| decode(c.input, v));
    let bias = p.dt_bias.as_ref().map(|v| decode(c.weight, v));
    let read: Vec<i64> = p.read_slots.clone();
    let write: Vec<i64> = p.write_slots.clone();
    let args = SsuHostArgs {
        state: HostTensor::new(
            &state,
            &[p.cache, nh, dim, ds],
            &[p.state_stride, dim * ds, ds, 1],
        ),
        x: HostTensor::new(&x, &[bt, nh, dim], &[p.x_stride, dim, 1]),
        dt: HostTensor::new(&dt, &[bt, nh, dim], &[p.dt_stride, 1, 0]),
        a: HostTensor::new(&a, &[nh, dim, ds], &[1, 0, 0]),
        b: HostTensor::new(&bm, &[bt, c.ngroups, ds], &[p.bc_stride, ds, 1]),
        c: HostTensor::new(&cm, &[bt, c.ngroups, ds], &[p.bc_stride, ds, 1]),
        d: d.as_ref().map(|v| HostTensor::new(v, &[nh, dim], &[1, 0])),
        z: z.as_ref()
            .map(|v| HostTensor::new(v, &[bt, nh, dim], &[p.x_stride, dim, 1])),
        dt_bias: bias
            .as_ref()
            .map(|v| HostTensor::new(v, &[nh, dim], &[1, 0])),
        state_batch_indices: c.indices.then(|| HostTensor::contiguous(&read, &[bt])),
        dst_state_batch_indices: (c.indices && c.dst)
            .then(|| HostTensor::contiguous(&write, &[bt])),
        pad_slot_id: p.pad_slot_id,
        dt_softplus: c.softplus,
        disable_state_update: c.disable_state_update,
    };
    let sb = dtype_size(c.state);
    let r = selective_state_update_horizontal_f32(&args, sb, scalars).expect("model");
    let written: Vec<bool> = {
        let mut w = vec![false; state.len()];
        for wr in &r.writes {
            for h in 0..nh {
                for dd in 0..dim {
                    for n in 0..ds {
                        w[r.state_index(wr.write_slot, h, dd, n)] = true;
                    }
                }
            }
        }
        w
    };
    let state_bytes: Vec<u8> = if c.state == "float16" && c.rounds > 0 {
        let initial = common::as_u16(&p.state);
        let m = SrMapping::new(
            Algorithm::Horizontal,
            p.state_stride,
            dim,
            ds,
            p.seed as u64,
            c.rounds,
        )
        .expect("mapping");
        predict_sr_state_f16_with_rule(&initial, &r, &m, c.rule)
            .expect("SR prediction")
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect()
    } else {
        (0..state.len())
            .flat_map(|e| {
                if written[e] {
                    round_to(c.state, r.state[e] as f32)
                } else {
                    p.state[e * sb..(e + 1) * sb].to_vec()
                }
            })
            .collect()
    };
    let ib = dtype_size(c.input);
    let mut out = vec![0xFFu8; p.out_elems() * ib];
    for b in 0..bt {
        for i in 0..nh * dim {
            let e = b * p.out_stride + i;
            out[e * ib..(e + 1) * ib]
                .copy_from_slice(&round_to(c.input, r.out[b * nh * dim + i] as f32));
        }
    }
    (state_bytes, out)
}

/// `v` rounded to nearest into `dtype`, as bytes.
fn round_to(dtype: &str, v: f32) -> Vec<u8> {
    gen::to_dtype_bytes(&[v], dtype)
}

/// Whether two elements of `dtype` are equal bit for bit, or both NaN.
fn same(dtype: &str, a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    let v = |x: &[u8]| decode(dtype, x)[0];
    v(a).is_nan() && v(b).is_nan()
}

/// Runs `p` with HORIZONTAL and compares every byte with the model; a failure description.
fn check(stream: &Arc<CudaStream>, p: &Problem) -> Option<String> {
    let scalars = probe(stream, p);
    let (want_state, want_out) = predict(p, &scalars);
    let mut dev = upload(
        stream,
        p,
        (p.cfg.state, &p.state),
        p.cfg.input,
        &p.x,
        &p.b,
        &p.c,
        p.d.as_deref(),
        p.z.as_deref(),
    );
    {
        let mut cl = call(p, &mut dev, p.cfg.rounds, p.cfg.disable_state_update);
        if let Err(e) = ssu_dev::launch_with_rule(stream, &mut cl, p.cfg.rule) {
            return Some(format!("{:?}: launch failed: {e}", p.cfg));
        }
    }
    stream.synchronize().expect("kernel");
    let got_state = dev.state.download_all(stream);
    let got_out = dev.out.download_all(stream);
    let mut bad = Vec::new();
    for (what, dtype, got, want) in [
        ("state", p.cfg.state, &got_state, &want_state),
        ("out", p.cfg.input, &got_out, &want_out),
    ] {
        let es = dtype_size(dtype);
        let n = got.len() / es;
        let mut diffs = 0;
        for e in 0..n {
            let (g, w) = (&got[e * es..(e + 1) * es], &want[e * es..(e + 1) * es]);
            if !same(dtype, g, w) {
                if diffs < 3 {
                    bad.push(format!(
                        "{what}[{e}] = {} vs {} (bits {g:02x?} vs {w:02x?})",
                        decode(dtype, g)[0],
                        decode(dtype, w)[0]
                    ));
                }
                diffs += 1;
            }
        }
        if diffs > 0 {
            bad.push(format!("{what}: {diffs} of {n} elements differ"));
        }
    }
    (!bad.is_empty()).then(|| format!("{:?}: {}", p.cfg, bad.join("; ")))
}

fn run_all(stream: &Arc<CudaStream>, cfgs: Vec<Cfg>, rng: &mut Rng) {
    let mut failures = Vec::new();
    let runs = cfgs.len();
    for cfg in cfgs {
        let p = Problem::new(cfg, rng);
        if let Some(f) = check(stream, &p) {
            eprintln!("FAIL {f}");
            failures.push(f);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs differ from the model: {failures:?}",
        failures.len()
    );
}

/// Every dtype combination, head dim, dstate, round count, SR rule and option, on small grids,
/// bit for bit against the model.
#[test]
#[ignore = "requires a CUDA GPU"]
fn horizontal_matches_the_model_bit_for_bit() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let floats = ["bfloat16", "float16", "float32"];
    let mut cfgs = Vec::new();
    let mut k = 0usize;
    for state in floats {
        for dim in [64usize, 128, 192, 256] {
            for dstate in [64usize, 128, 256] {
                let rounds: &[u32] = if state == "float16" {
                    &[0, 5, 10, 3]
                } else {
                    &[0]
                };
                for &rounds in rounds {
                    let mut c = Cfg::base();
                    c.state = state;
                    (c.dim, c.dstate, c.rounds) = (dim, dstate, rounds);
                    c.input = floats[k % 3];
                    c.weight = floats[(k / 3) % 3];
                    if k % 4 == 0 {
                        // The compiled-in kernels: BF16 inputs and weights.
                        (c.input, c.weight) = ("bfloat16", "bfloat16");
                    } else if k % 4 == 2 {
                        // FP16 ones: compiled-in in a build with the fp16-input kernels.
                        (c.input, c.weight) = ("float16", "float16");
                    }
                    c.rule = if rounds > 0 && k % 2 == 1 {
                        SrRule::V074
                    } else {
                        SrRule::V072
                    };
                    c.index = if rng.coin() { "int32" } else { "int64" };
                    c.batch = 1 + rng.below(4) as usize;
                    c.ngroups = [1, 2, 4][k % 3];
                    c.nheads = c.ngroups * (1 + rng.below(3) as usize);
                    c.z = rng.coin();
                    c.d = rng.below(4) != 0;
                    c.dt_bias = rng.coin();
                    c.softplus = rng.below(4) != 0;
                    c.indices = rng.below(4) != 0;
                    c.dst = c.indices && rng.coin();
                    c.pad = c.indices && rng.below(3) == 0;
                    c.disable_state_update = rng.below(8) == 0;
                    c.padded_strides = rng.coin();
                    cfgs.push(c);
                    k += 1;
                }
            }
        }
    }
    run_all(&stream, cfgs, &mut rng);
}

/// The kernel's 64-row warps and large grids (Nemotron-H's 128 heads at batch 32, and 32
/// heads at batch 256), with and without SR, bit for bit; the grouped copies (no SR, >= 64 MiB
/// of state, and in rows of 512 bytes below it) with bf16 and with fp16 inputs, and with SR
/// (>= 128 MiB) at 5 and 10 rounds with bf16 inputs and at 5 with fp16 ones.
#[test]
#[ignore = "requires a CUDA GPU"]
fn horizontal_large_grids_match_the_model() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let mut cfgs = Vec::new();
    for (nheads, batch, dim, dstate, rounds, input) in [
        (128usize, 32usize, 64usize, 128usize, 10u32, "bfloat16"),
        (128, 32, 128, 128, 0, "bfloat16"),
        (128, 32, 128, 128, 0, "float16"),
        (32, 256, 64, 128, 5, "bfloat16"),
        (32, 256, 64, 128, 5, "float16"),
        (128, 8, 128, 256, 10, "bfloat16"),
        (128, 8, 64, 64, 10, "bfloat16"),
        (128, 32, 128, 128, 5, "bfloat16"),
        (128, 32, 64, 256, 10, "bfloat16"),
        (128, 32, 64, 256, 5, "float16"),
        // Rows of 512 bytes below 64 MiB without SR: 32-row warps, grouped copies.
        (128, 8, 64, 256, 0, "bfloat16"),
        (128, 8, 64, 256, 0, "float16"),
    ] {
        let mut c = Cfg::base();
        (c.nheads, c.batch, c.dim, c.dstate, c.rounds) = (nheads, batch, dim, dstate, rounds);
        (c.input, c.weight) = (input, input);
        c.ngroups = 8;
        c.pad = true;
        cfgs.push(c);
    }
    // ... and an fp32 state's rows of 512 bytes (dstate 128).
    let mut c = Cfg::base();
    (c.nheads, c.batch, c.dim, c.dstate, c.rounds) = (128, 8, 64, 128, 0);
    c.state = "float32";
    c.ngroups = 8;
    c.pad = true;
    cfgs.push(c);
    run_all(&stream, cfgs, &mut rng);
}

/// States that reach every edge of both SR conversions (past 65504 and Inf, below 2^-14,
/// infinities in the input state), with the compiled-in and the run-time round counts.
#[test]
#[ignore = "requires a CUDA GPU"]
fn horizontal_sr_edges_match_the_model() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    let mut cfgs = Vec::new();
    for rule in [SrRule::V072, SrRule::V074] {
        for (rounds, input) in [(10u32, "bfloat16"), (5, "bfloat16"), (7, "float16")] {
            let mut c = Cfg::base();
            (c.rounds, c.rule, c.input, c.weight) = (rounds, rule, input, input);
            c.edges = true;
            c.softplus = false;
            cfgs.push(c);
        }
    }
    run_all(&stream, cfgs, &mut rng);
}

/// HORIZONTAL refuses what FlashInfer's horizontal kernel refuses, as an `InvalidArgument`
/// (FlashInfer's RuntimeError), and launches nothing: head dims that are not a multiple of 64 or
/// above 256, and a multi-token call.
#[test]
#[ignore = "requires a CUDA GPU"]
fn horizontal_refusals_launch_nothing() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    for dim in [16usize, 80, 96, 320] {
        let mut c = Cfg::base();
        c.dim = dim;
        let p = Problem::new(c, &mut rng);
        let mut dev = upload(
            &stream,
            &p,
            (p.cfg.state, &p.state),
            p.cfg.input,
            &p.x,
            &p.b,
            &p.c,
            p.d.as_deref(),
            p.z.as_deref(),
        );
        let r = {
            let mut cl = call(&p, &mut dev, p.cfg.rounds, false);
            ssu_dev::launch(&stream, &mut cl)
        };
        match r {
            Err(mamba_ssu::Error::InvalidArgument { argument, message }) => {
                assert_eq!(argument, "algorithm", "dim {dim}");
                assert!(message.contains(&format!("got dim {dim}")), "{message}");
            }
            other => panic!("dim {dim}: {other:?}"),
        }
        stream.synchronize().unwrap();
        assert!(
            dev.state.download_all(&stream) == p.state,
            "dim {dim}: the state changed"
        );
        assert!(
            dev.out.download_all(&stream).iter().all(|b| *b == 0xFF),
            "dim {dim}: out was written"
        );
    }
}

/// A fused seed (the kernel derives the stock torch draw itself) rounds with the bits of that
/// draw given by pointer.
#[test]
#[ignore = "requires a CUDA GPU"]
fn horizontal_fused_seed_gives_the_pointer_seed_bits() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let (gseed, offset) = (0x1234_5678_9abc_u64, 40u64);
    let mut rng = Rng(run_seed());
    let mut c = Cfg::base();
    (c.dim, c.batch, c.nheads) = (128, 2, 8);
    let mut p = Problem::new(c, &mut rng);
    p.seed = mamba_ssu::philox::torch_seed(gseed, offset) as i64;
    let mut results = Vec::new();
    for fused in [false, true] {
        let mut dev = upload(
            &stream,
            &p,
            (p.cfg.state, &p.state),
            p.cfg.input,
            &p.x,
            &p.b,
            &p.c,
            p.d.as_deref(),
            p.z.as_deref(),
        );
        {
            let mut cl = call(&p, &mut dev, p.cfg.rounds, false);
            let r = if fused {
                ssu_dev::launch_fused(&stream, &mut cl, SrRule::V072, gseed, offset)
            } else {
                ssu_dev::launch(&stream, &mut cl)
            };
            r.expect("launch");
        }
        stream.synchronize().unwrap();
        results.push((
            dev.state.download_all(&stream),
            dev.out.download_all(&stream),
        ));
    }
    assert!(
        results[0] == results[1],
        "the fused seed's bits differ from the pointer seed's"
    );
    assert!(results[0].0 != p.state, "the state was not written");
}
