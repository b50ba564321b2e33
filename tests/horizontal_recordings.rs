//! CPU check (no GPU) of the horizontal kernel's CPU model (`mamba_ssu::reference::horizontal`)
//! against recordings of FlashInfer's own horizontal kernel: the manifest named by
//! `MAMBA_SSU_FLASHINFER_MANIFEST` (its `horizontal` runs whose state and `out` are stored),
//! and the embedded sets of [`EMBEDDED`].
//!
//! The model is exact given the values the kernel computes with approximate instructions (dt'
//! and dA per (batch, head), the gate factor per row), which no CPU formula reproduces bit for
//! bit; they are fitted to the recording, few against many: per (batch, head) the (dt', dA) pair
//! among the f32 values nearest the f64 ones (17 x 25) whose updates s' = fma(x, rn(B dt'), rn(dA s))
//! give every recorded state element of the head exactly (fp32 bits, rounding to nearest, or
//! stochastic rounding with the horizontal random mapping under the recording release's rule),
//! and per row a gate factor among the 17 nearest the f64 one. Then:
//!
//! - the model's whole state storage with the fitted scalars equals the recorded one byte for
//!   byte (unwritten slots and padding included), and `out` too (every row's value by the
//!   horizontal visiting order, D x and the gate, rounded into the output dtype);
//! - the fit fails with the simple/vertical kernels' contraction s' = fma(dA, s, rn(x dB)) for
//!   an fp32 state (whose every bit is recorded), and stochastic rounding with the simple
//!   kernel's random mapping gives other bits: the check tells the forms apart.
//!
//! A pad entry (its state read as zeros) has no state to fit dA from: its dt' is fitted to its
//! `out` rows. Bf16 `out` keeps 8 bits, so the summation order is checked there only through
//! the rows whose rounding it changes; the GPU conformance test compares whole `out` blocks
//! (hashes of large timing cases included). Without any recording the synthetic check below
//! still runs the fit on the model's own output.

mod common;

use common::{dtype_size, gen, Manifest};
use half::{bf16, f16};
use mamba_ssu::reference::{
    predict_sr_state_f16_with_rule, selective_state_update_horizontal_f32, HorizontalScalars,
    HostTensor, SrMapping, SsuHostArgs,
};
use mamba_ssu::ssu::{Algorithm, SrRule};

/// Recordings of FlashInfer's horizontal kernel embedded in the binary (`tests/data/`): the
/// recorder's `cases/horizontal_cases.json` on an H200 (FlashInfer 0.7.2.post1, 2026-12-03),
/// whose case at head dim 64, dstate 64 and 10 rounds keeps its whole state (32 heads x batch 2,
/// one entry a pad, z); the others' states are hash only (the GPU conformance test's).
const EMBEDDED: &[(&str, &[u8], &[u8])] = &[(
    "flashinfer_ssu_horizontal",
    include_bytes!("data/flashinfer_ssu_horizontal/manifest.json.xz"),
    include_bytes!("data/flashinfer_ssu_horizontal/fixtures.bin.xz"),
)];

/// One recorded horizontal run on the host.
struct Recording {
    name: String,
    state_dtype: String,
    input_dtype: String,
    rounds: u32,
    seed: u64,
    rule: SrRule,
    slots: usize,
    nheads: usize,
    dim: usize,
    dstate: usize,
    batch: usize,
    ngroups: usize,
    state_stride: usize,
    x_strides: [usize; 3],
    out_strides: [usize; 3],
    dt_stride: usize,
    bc_stride: usize,
    z_strides: Option<[usize; 3]>,
    state: Vec<f64>,
    state_bytes: Vec<u8>,
    x: Vec<f64>,
    dt: Vec<f64>,
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<f64>,
    d: Option<Vec<f64>>,
    z: Option<Vec<f64>>,
    dt_bias: Option<Vec<f64>>,
    sbi: Option<Vec<i64>>,
    dsbi: Option<Vec<i64>>,
    pad_slot_id: i64,
    softplus: bool,
    disable: bool,
    /// The recorded outputs: the whole state storage and `out` storage.
    want_state: Vec<u8>,
    want_out: Vec<u8>,
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

fn ints(dtype: &str, bytes: &[u8]) -> Vec<i64> {
    match dtype {
        "int32" => bytes
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        _ => bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    }
}

impl Recording {
    fn args(&self) -> SsuHostArgs<'_> {
        let (nh, dim, ds, bt) = (self.nheads, self.dim, self.dstate, self.batch);
        fn idx(v: &Option<Vec<i64>>, bt: usize) -> Option<HostTensor<'_, i64>> {
            v.as_ref().map(|v| HostTensor::new(v, &[bt], &[1]))
        }
        SsuHostArgs {
            state: HostTensor::new(
                &self.state,
                &[self.slots, nh, dim, ds],
                &[self.state_stride, dim * ds, ds, 1],
            ),
            x: HostTensor::new(&self.x, &[bt, nh, dim], &self.x_strides),
            dt: HostTensor::new(&self.dt, &[bt, nh, dim], &[self.dt_stride, 1, 0]),
            a: HostTensor::new(&self.a, &[nh, dim, ds], &[1, 0, 0]),
            b: HostTensor::new(&self.b, &[bt, self.ngroups, ds], &[self.bc_stride, ds, 1]),
            c: HostTensor::new(&self.c, &[bt, self.ngroups, ds], &[self.bc_stride, ds, 1]),
            d: self
                .d
                .as_ref()
                .map(|v| HostTensor::new(v, &[nh, dim], &[1, 0])),
            z: self
                .z
                .as_ref()
                .map(|v| HostTensor::new(v, &[bt, nh, dim], self.z_strides.as_ref().unwrap())),
            dt_bias: self
                .dt_bias
                .as_ref()
                .map(|v| HostTensor::new(v, &[nh, dim], &[1, 0])),
            state_batch_indices: idx(&self.sbi, bt),
            dst_state_batch_indices: idx(&self.dsbi, bt),
            pad_slot_id: self.pad_slot_id,
            dt_softplus: self.softplus,
            disable_state_update: self.disable,
        }
    }

    fn read_slot(&self, b: usize) -> i64 {
        self.sbi.as_ref().map_or(b as i64, |v| v[b])
    }

    fn is_pad(&self, b: usize) -> bool {
        let s = self.read_slot(b);
        s == self.pad_slot_id || s < 0 || s as usize >= self.slots
    }
}

/// The recording of `case`'s horizontal run, when its inputs and outputs are all available.
fn recording(m: &Manifest, case: &common::Case) -> Option<Recording> {
    let r = case
        .results
        .iter()
        .find(|r| r.algorithm_requested == "horizontal")?;
    let stored = |t: &common::TensorDesc| -> Option<Vec<u8>> {
        if !t.dense() {
            return None;
        }
        let mut v = vec![0u8; t.storage_bytes() as usize];
        let es = t.elem_size();
        for b in &t.blocks {
            let bytes = m.block_bytes(b)?;
            let s = b.elem_offset as usize * es;
            v[s..s + bytes.len()].copy_from_slice(bytes);
        }
        Some(v)
    };
    let want_state = stored(r.output("state"))?;
    let want_out = stored(r.output("out"))?;
    let input = |name: &str| {
        case.input(name).map(|t| {
            let bytes = m.input_storage(t).to_dense();
            (t.clone(), bytes)
        })
    };
    let (st, st_bytes) = input("state")?;
    if st.shape.len() != 4 {
        return None;
    }
    let strides3 = |t: &common::TensorDesc| {
        [
            t.strides[0] as usize,
            t.strides[1] as usize,
            t.strides[2] as usize,
        ]
    };
    let (x, xb) = input("x")?;
    let (dt, dtb) = input("dt")?;
    let (a, ab) = input("A")?;
    let (b, bb) = input("B")?;
    let (c, cb) = input("C")?;
    let out = r.output("out");
    if x.shape.len() != 3 || a.dtype != "float32" {
        return None;
    }
    let idx = |name: &str| input(name).map(|(t, bytes)| ints(&t.dtype, &bytes));
    let z = input("z");
    Some(Recording {
        name: case.name.clone(),
        state_dtype: case.state_dtype.clone(),
        input_dtype: case.input_dtype.clone(),
        rounds: case.philox_rounds,
        seed: case.seed.unwrap_or(0) as u64,
        rule: common::recorded_sr_rule(&m.json, &case.json),
        slots: st.shape[0] as usize,
        nheads: case.nheads as usize,
        dim: case.dim as usize,
        dstate: case.dstate as usize,
        batch: case.batch as usize,
        ngroups: case.ngroups as usize,
        state_stride: st.strides[0] as usize,
        x_strides: strides3(&x),
        out_strides: strides3(out),
        dt_stride: dt.strides[0] as usize,
        bc_stride: b.strides[0] as usize,
        z_strides: z.as_ref().map(|(t, _)| strides3(t)),
        state: decode(&st.dtype, &st_bytes),
        state_bytes: st_bytes,
        x: decode(&x.dtype, &xb),
        dt: decode(&dt.dtype, &dtb),
        a: decode("float32", &ab),
        b: decode(&b.dtype, &bb),
        c: decode(&c.dtype, &cb),
        d: input("D").map(|(t, v)| decode(&t.dtype, &v)),
        z: z.map(|(t, v)| decode(&t.dtype, &v)),
        dt_bias: input("dt_bias").map(|(t, v)| decode(&t.dtype, &v)),
        sbi: idx("state_batch_indices"),
        dsbi: idx("dst_state_batch_indices"),
        pad_slot_id: case.pad_slot_id,
        softplus: case.dt_softplus,
        disable: case.disable_state_update,
        want_state,
        want_out,
    })
}

// ---------------------------------------------------------------------------------------------
// The fit
// ---------------------------------------------------------------------------------------------

fn ftz(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else if v.is_nan() {
        f32::from_bits(0x7FFF_FFFF)
    } else {
        v
    }
}

/// The next f32 above (`dir` 1) or below (`dir` -1) a finite `v`.
fn step(v: f32, dir: i32) -> f32 {
    if v == 0.0 {
        return f32::from_bits(1) * dir as f32;
    }
    let bits = v.to_bits();
    // Away from zero adds one to the magnitude's bits, toward zero subtracts one.
    if (v > 0.0) == (dir > 0) {
        f32::from_bits(bits + 1)
    } else {
        f32::from_bits(bits - 1)
    }
}

/// The `k` f32 values on each side of `v` and `v` itself.
fn around(v: f32, k: i32) -> Vec<f32> {
    let mut out = vec![v];
    let (mut up, mut down) = (v, v);
    for _ in 0..k {
        up = step(up, 1);
        down = step(down, -1);
        out.push(up);
        out.push(down);
    }
    out
}

/// `v` rounded into `dtype` (to nearest), as its bits in the low bytes of a u32.
fn round_bits(dtype: &str, v: f32) -> u32 {
    match dtype {
        "float32" => v.to_bits(),
        "float16" => u32::from(f16::from_f32(v).to_bits()),
        _ => u32::from(bf16::from_f32(v).to_bits()),
    }
}

fn elem_bits(dtype: &str, bytes: &[u8], e: usize) -> u32 {
    let es = dtype_size(dtype);
    let mut w = [0u8; 4];
    w[..es].copy_from_slice(&bytes[e * es..(e + 1) * es]);
    u32::from_le_bytes(w)
}

/// How a candidate's new state values are rounded into the state dtype.
struct Rounding<'a> {
    dtype: &'a str,
    sr: Option<(&'a SrMapping, SrRule)>,
}

impl Rounding<'_> {
    fn bits(&self, v: f32, read_slot: i64, h: usize, d: usize, n: usize) -> u32 {
        match self.sr {
            Some((m, rule)) => u32::from(rule.round(v, m.random_bits(read_slot, h, d, n))),
            None => round_bits(self.dtype, v),
        }
    }
}

/// The window of the fit, in f32 ulps either side of the f64 value: dt' (softplus by the GPU's
/// ex2 and lg2: a few ulps) and dA (ex2 of rn(rn(A dt') log2 e): the rounding of an argument of
/// magnitude up to about 12 moves the result by up to about 4 ulps, the instruction by 2 more).
const DT_ULPS: i32 = 8;
const DA_ULPS: i32 = 12;

/// The (dt', dA) pair of (b, h) whose updates give every recorded state element of the head
/// (its write slot), or None. `horizontal_form`: the horizontal kernel's contraction, else
/// the simple and vertical kernels'.
fn fit_head(
    rec: &Recording,
    rounding: &Rounding<'_>,
    b: usize,
    h: usize,
    horizontal_form: bool,
) -> Option<(f32, f32)> {
    let (dim, ds) = (rec.dim, rec.dstate);
    let g = h / (rec.nheads / rec.ngroups);
    let rs = rec.read_slot(b);
    let ws = rec.dsbi.as_ref().map_or(rs, |v| v[b]) as usize;
    let mut dt = rec.dt[b * rec.dt_stride + h] as f32;
    if let Some(bias) = &rec.dt_bias {
        dt = ftz(dt + bias[h] as f32);
    }
    let dt64 = if rec.softplus && dt <= 20.0 {
        f64::from(dt).exp().ln_1p()
    } else {
        f64::from(dt)
    };
    let a = rec.a[h] as f32;
    for dtc in around(dt64 as f32, DT_ULPS) {
        let da64 = f64::from(ftz(a * dtc)).exp();
        'candidate: for dac in around(da64 as f32, DA_ULPS) {
            for d in 0..dim {
                let x = rec.x[b * rec.x_strides[0] + h * rec.x_strides[1] + d] as f32;
                for n in 0..ds {
                    let s =
                        rec.state[rs as usize * rec.state_stride + (h * dim + d) * ds + n] as f32;
                    let bdt = ftz(rec.b[b * rec.bc_stride + g * ds + n] as f32 * dtc);
                    let v = if horizontal_form {
                        ftz(x.mul_add(bdt, ftz(dac * s)))
                    } else {
                        ftz(dac.mul_add(s, ftz(x * bdt)))
                    };
                    let e = ws * rec.state_stride + (h * dim + d) * ds + n;
                    if rounding.bits(v, rs, h, d, n)
                        != elem_bits(&rec.state_dtype, &rec.want_state, e)
                    {
                        continue 'candidate;
                    }
                }
            }
            return Some((dtc, dac));
        }
    }
    None
}

/// What checking one recording found.
#[derive(Debug, Default)]
struct Report {
    heads_fitted: usize,
    pad_heads: usize,
    state_elems: usize,
    out_rows: usize,
    /// Rows whose gate factor is not the f32 rounding of the f64 one.
    gate_refits: usize,
    /// Heads the simple/vertical contraction also fits (counted for an fp32 state, where every
    /// bit of s' is recorded).
    other_form_fits: usize,
    /// Elements the simple kernel's random mapping rounds otherwise (SR).
    other_mapping_diffs: usize,
}

/// Fits the scalars to `rec` and checks the model's state and `out` against it; a failure
/// description.
fn verify(rec: &Recording) -> Result<Report, String> {
    let (nh, dim, ds, bt) = (rec.nheads, rec.dim, rec.dstate, rec.batch);
    let sr = rec.state_dtype == "float16" && rec.rounds > 0;
    let mapping = SrMapping::new(
        Algorithm::Horizontal,
        rec.state_stride,
        dim,
        ds,
        rec.seed,
        rec.rounds.max(1),
    )
    .map_err(|e| e.to_string())?;
    let rounding = Rounding {
        dtype: &rec.state_dtype,
        sr: sr.then_some((&mapping, rec.rule)),
    };
    let args = rec.args();
    let mut scalars = HorizontalScalars::approximate(&args).map_err(|e| e.to_string())?;
    let mut report = Report::default();
    let writes = !rec.disable;
    let mut pads = Vec::new();
    for b in 0..bt {
        for h in 0..nh {
            if rec.is_pad(b) || !writes {
                pads.push((b, h));
                continue;
            }
            let (dt, da) = fit_head(rec, &rounding, b, h, true).ok_or_else(|| {
                format!(
                    "{}: no (dt', dA) near the f64 values gives (b {b}, h {h})'s recorded state",
                    rec.name
                )
            })?;
            scalars.dt[b * nh + h] = dt;
            scalars.da[b * nh + h] = da;
            report.heads_fitted += 1;
            if rec.state_dtype == "float32" && fit_head(rec, &rounding, b, h, false).is_some() {
                report.other_form_fits += 1;
            }
        }
    }
    report.pad_heads = pads.len();
    let sb = dtype_size(&rec.state_dtype);
    // The model's y before the gate (gate factors 1), for the pad heads' candidate dt' k.
    let run = |scalars: &HorizontalScalars| -> Result<mamba_ssu::reference::SsuReference, String> {
        let mut s = scalars.clone();
        if s.gate.is_some() {
            s.gate = Some(vec![1.0; bt * nh * dim]);
        }
        selective_state_update_horizontal_f32(&args, sb, &s).map_err(|e| e.to_string())
    };
    let gate64 = |b: usize, h: usize, d: usize| -> Option<f64> {
        rec.z.as_ref().map(|z| {
            let s = rec.z_strides.unwrap();
            let zv = z[b * s[0] + h * s[1] + d];
            zv / (1.0 + (-zv).exp())
        })
    };
    // A row's recorded out matches y (rounded by its gate, fitted among the nearest factors).
    let row_matches = |y: f32, b: usize, h: usize, d: usize| -> Option<bool> {
        let e = b * rec.out_strides[0] + h * rec.out_strides[1] + d;
        let want = elem_bits(&rec.input_dtype, &rec.want_out, e);
        match gate64(b, h, d) {
            None => (round_bits(&rec.input_dtype, y) == want).then_some(false),
            Some(g) => around(g as f32, 8)
                .into_iter()
                .enumerate()
                .find(|(_, gc)| round_bits(&rec.input_dtype, ftz(y * gc)) == want)
                .map(|(k, _)| k > 0),
        }
    };
    // Heads without a written state: dt' (and, when the state was read, dA) from their out
    // rows.
    for &(b, h) in &pads {
        let (dt0, da0) = (scalars.dt[b * nh + h], scalars.da[b * nh + h]);
        let das = if rec.is_pad(b) {
            vec![da0]
        } else {
            around(da0, DA_ULPS)
        };
        let mut found = false;
        'search: for dtc in around(dt0, DT_ULPS) {
            for &dac in &das {
                let mut s = scalars.clone();
                s.dt[b * nh + h] = dtc;
                s.da[b * nh + h] = dac;
                let r = run(&s)?;
                if (0..dim).all(|d| row_matches(r.out_at(b, h, d) as f32, b, h, d).is_some()) {
                    scalars.dt[b * nh + h] = dtc;
                    scalars.da[b * nh + h] = dac;
                    found = true;
                    break 'search;
                }
            }
        }
        if !found {
            return Err(format!(
                "{}: no dt' (dA) gives (b {b}, h {h})'s recorded out (no state written)",
                rec.name
            ));
        }
    }
    let r = run(&scalars)?;
    // The whole state storage.
    let want_state = &rec.want_state;
    let got_state: Vec<u8> = if sr {
        let initial = common::as_u16(&rec.state_bytes);
        predict_sr_state_f16_with_rule(&initial, &r, &mapping, rec.rule)
            .map_err(|e| e.to_string())?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    } else {
        let mut v = rec.state_bytes.clone();
        for w in &r.writes {
            for h in 0..nh {
                for d in 0..dim {
                    for n in 0..ds {
                        let i = r.state_index(w.write_slot, h, d, n);
                        let bits = round_bits(&rec.state_dtype, r.state[i] as f32).to_le_bytes();
                        v[i * sb..(i + 1) * sb].copy_from_slice(&bits[..sb]);
                    }
                }
            }
        }
        v
    };
    if let Some(e) = (0..want_state.len() / sb)
        .find(|&e| got_state[e * sb..(e + 1) * sb] != want_state[e * sb..(e + 1) * sb])
    {
        return Err(format!(
            "{}: state element {e} differs from the recording",
            rec.name
        ));
    }
    report.state_elems = want_state.len() / sb;
    // Every out row.
    for b in 0..bt {
        for h in 0..nh {
            for d in 0..dim {
                match row_matches(r.out_at(b, h, d) as f32, b, h, d) {
                    Some(refit) => report.gate_refits += usize::from(refit),
                    None => {
                        return Err(format!(
                            "{}: out (b {b}, h {h}, d {d}) = {} differs from the recording",
                            rec.name,
                            r.out_at(b, h, d)
                        ))
                    }
                }
                report.out_rows += 1;
            }
        }
    }
    // The simple kernel's random mapping rounds other elements otherwise.
    if sr {
        let simple = SrMapping::new(
            Algorithm::Simple,
            rec.state_stride,
            dim,
            ds,
            rec.seed,
            rec.rounds,
        )
        .map_err(|e| e.to_string())?;
        let initial = common::as_u16(&rec.state_bytes);
        let other = predict_sr_state_f16_with_rule(&initial, &r, &simple, rec.rule)
            .map_err(|e| e.to_string())?;
        report.other_mapping_diffs = other
            .iter()
            .enumerate()
            .filter(|(e, v)| v.to_le_bytes() != want_state[e * 2..e * 2 + 2])
            .count();
    }
    Ok(report)
}

fn check_manifest(m: &Manifest) -> usize {
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in &m.cases {
        let Some(rec) = recording(m, case) else {
            continue;
        };
        match verify(&rec) {
            Ok(rep) => {
                println!("{}: {rep:?}", rec.name);
                if rec.state_dtype == "float32" {
                    assert!(
                        rep.heads_fitted == 0 || rep.other_form_fits < rep.heads_fitted,
                        "{}: the other contraction fits every head too",
                        rec.name
                    );
                }
                if rec.rounds > 0 && rec.state_dtype == "float16" && rep.heads_fitted > 0 {
                    assert!(
                        rep.other_mapping_diffs > 0,
                        "{}: the simple mapping gives the same bits",
                        rec.name
                    );
                }
                checked += 1;
            }
            Err(e) => {
                eprintln!("FAIL {e}");
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} recordings differ from the model: {failures:?}",
        failures.len()
    );
    checked
}

/// The recordings named by `MAMBA_SSU_FLASHINFER_MANIFEST` and the embedded ones.
#[test]
fn model_reproduces_recorded_horizontal_runs() {
    let mut checked = 0;
    for (name, manifest, fixtures) in EMBEDDED {
        let m = Manifest::from_xz(manifest, &[("fixtures.bin", fixtures)]);
        let n = check_manifest(&m);
        assert!(n > 0, "{name}: no horizontal run with stored outputs");
        checked += n;
    }
    if let Some(p) = std::env::var_os("MAMBA_SSU_FLASHINFER_MANIFEST").filter(|p| !p.is_empty()) {
        let m = Manifest::from_path(std::path::Path::new(&p));
        checked += check_manifest(&m);
    }
    println!("{checked} recorded horizontal runs reproduced");
}

// ---------------------------------------------------------------------------------------------
// The fit on the model's own output (no recording needed)
// ---------------------------------------------------------------------------------------------

/// A recording made by the model itself, with scalars a few ulps off the f64 ones (as the
/// GPU's approximate instructions are): the fit must find them and reproduce every byte; made
/// with the other contraction (fp32 state) or the simple kernel's random mapping (SR), it must
/// not.
fn synthetic(state_dtype: &str, rounds: u32, z: bool, pad: bool, seed: u64) -> Recording {
    let (slots, nheads, dim, dstate, batch, ngroups) =
        (4usize, 4usize, 64usize, 128usize, 2usize, 2usize);
    let head = nheads * dim * dstate;
    let stride = head + 8;
    let vals = |tag: u64, n: usize| gen::values_f32(seed, tag, 0, n);
    let rt = |dtype: &str, v: Vec<f32>| decode(dtype, &gen::to_dtype_bytes(&v, dtype));
    let state_bytes = gen::to_dtype_bytes(&vals(gen::TAG_STATE, slots * stride), state_dtype);
    let mut rec = Recording {
        name: format!("synthetic {state_dtype} R={rounds} z={z} pad={pad}"),
        state_dtype: state_dtype.into(),
        input_dtype: "bfloat16".into(),
        rounds,
        seed: 0x1234_5678_9abc,
        rule: SrRule::V072,
        slots,
        nheads,
        dim,
        dstate,
        batch,
        ngroups,
        state_stride: stride,
        x_strides: [nheads * dim, dim, 1],
        out_strides: [nheads * dim, dim, 1],
        dt_stride: nheads,
        bc_stride: ngroups * dstate,
        z_strides: z.then_some([nheads * dim, dim, 1]),
        state: decode(state_dtype, &state_bytes),
        state_bytes,
        x: rt("bfloat16", vals(gen::TAG_X, batch * nheads * dim)),
        dt: rt("bfloat16", vals(gen::TAG_DT, batch * nheads)),
        a: vals(gen::TAG_A, nheads)
            .iter()
            .map(|v| f64::from(*v))
            .collect(),
        b: rt("bfloat16", vals(gen::TAG_B, batch * ngroups * dstate)),
        c: rt("bfloat16", vals(gen::TAG_C, batch * ngroups * dstate)),
        d: Some(rt("bfloat16", vals(gen::TAG_D, nheads))),
        z: z.then(|| rt("bfloat16", vals(gen::TAG_Z, batch * nheads * dim))),
        dt_bias: Some(rt("bfloat16", vals(gen::TAG_DT_BIAS, nheads))),
        sbi: Some(vec![if pad { -1 } else { 2 }, 1]),
        dsbi: Some(vec![0, 3]),
        pad_slot_id: -1,
        softplus: true,
        disable: false,
        want_state: Vec::new(),
        want_out: Vec::new(),
    };
    // The "GPU's" scalars: a few ulps off the f64 ones, and gate factors too.
    let args = rec.args();
    let mut s = HorizontalScalars::approximate(&args).unwrap();
    for (i, v) in s.dt.iter_mut().enumerate() {
        *v = around(*v, 2)[i % 5];
    }
    for (i, v) in s.da.iter_mut().enumerate() {
        let a = rec.a[i % nheads] as f32;
        *v = around(f64::from(ftz(a * s.dt[i])).exp() as f32, 3)[(i * 3) % 7];
    }
    if let Some(g) = s.gate.as_mut() {
        for (i, v) in g.iter_mut().enumerate() {
            *v = around(*v, 2)[i % 5];
        }
    }
    let r = selective_state_update_horizontal_f32(&args, dtype_size(state_dtype), &s).unwrap();
    let sb = dtype_size(state_dtype);
    let want_state = if state_dtype == "float16" && rounds > 0 {
        let m =
            SrMapping::new(Algorithm::Horizontal, stride, dim, dstate, rec.seed, rounds).unwrap();
        predict_sr_state_f16_with_rule(&common::as_u16(&rec.state_bytes), &r, &m, rec.rule)
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    } else {
        let mut v = rec.state_bytes.clone();
        for w in &r.writes {
            for h in 0..nheads {
                for d in 0..dim {
                    for n in 0..dstate {
                        let i = r.state_index(w.write_slot, h, d, n);
                        v[i * sb..(i + 1) * sb].copy_from_slice(
                            &round_bits(state_dtype, r.state[i] as f32).to_le_bytes()[..sb],
                        );
                    }
                }
            }
        }
        v
    };
    let want_out = r
        .out
        .iter()
        .flat_map(|v| bf16::from_f32(*v as f32).to_bits().to_le_bytes())
        .collect();
    drop(args);
    rec.want_state = want_state;
    rec.want_out = want_out;
    rec
}

#[test]
fn the_fit_recovers_the_model_and_tells_the_forms_apart() {
    for (state, rounds, z, pad) in [
        ("float16", 10u32, true, true),
        ("float16", 5, false, false),
        ("float16", 0, true, false),
        ("bfloat16", 0, false, true),
        ("float32", 0, true, false),
    ] {
        let rec = synthetic(state, rounds, z, pad, 77);
        let rep = verify(&rec).unwrap_or_else(|e| panic!("{e}"));
        println!("{}: {rep:?}", rec.name);
        assert_eq!(rep.heads_fitted + rep.pad_heads, rec.batch * rec.nheads);
        assert_eq!(rep.out_rows, rec.batch * rec.nheads * rec.dim);
        if state == "float32" {
            assert!(
                rep.other_form_fits < rep.heads_fitted,
                "{}: the other contraction fits",
                rec.name
            );
        }
        if rounds > 0 {
            assert!(rep.other_mapping_diffs > 0, "{}", rec.name);
        }
    }
    // A state changed in one element is refused.
    let mut rec = synthetic("float16", 10, true, false, 78);
    let e = rec.state_stride * 3 + 5;
    rec.want_state[2 * e] ^= 1;
    assert!(
        verify(&rec).is_err(),
        "a changed state element was accepted"
    );
    // out changed in one row is refused.
    let mut rec = synthetic("float32", 0, false, false, 79);
    rec.want_out[2 * 7] ^= 1;
    assert!(verify(&rec).is_err(), "a changed out element was accepted");
}
