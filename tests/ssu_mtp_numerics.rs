//! GPU numerics of the multi-token SSU on inputs drawn fresh every run (the seed is printed;
//! set `MAMBA_SSU_TEST_SEED` to replay one), against the f64 multi-token reference
//! ([`selective_state_update_mtp_f64`]) computed from the same rounded inputs:
//!
//! 1. a sampled dtype table (state × input × weight, every value of every axis and every
//!    (state, input) pair, plus the hot F16/BF16/BF16 combination), dstate 64/128/256, head
//!    dims 1, 5, 64, 100, T 1..16, every write mode, varlen with zero-length sequences, pads
//!    (`pad_slot_id` -1 and 0), `num_accepted_tokens` with 2-D read indices (padded to T
//!    columns), `num_accepted_tokens` and `cu_seqlens` of another dtype than the slot indices',
//!    0/5/10 Philox rounds (SR only with an F16 state; 1 and 12 in the SR-bits test); and grids of the two-row kernels (1056 (sequence,
//!    head) pairs, hot dtypes) over every write mode, partial last row passes, two blocks per
//!    head and T up to 16, and of the four-row kernels (no SR, 4224 pairs);
//! 2. poison, in every run: the whole state storage keeps its bytes outside the slots the
//!    reference writes (the stride padding of every slot holds a known pattern, the other
//!    slots generated values), the intermediate buffer (0xFF bytes) keeps its bytes outside the
//!    written entries and steps, and `out` (0xFF bytes) is written exactly on the rows of the
//!    sequences' tokens (rows no sequence covers and the stride padding stay poisoned);
//! 3. the stochastic-rounding bits follow the documented mapping (`csrc/ssu_mtp.cuh`: column
//!    pairs, the Philox counter's offset truncated to 32 bits and sign-extended), predicted on
//!    the CPU from the f64 reference and checked statistically, also at a slot stride of
//!    2^31 - 4096 (a sparse state of 12 GiB of address space);
//! 4. bit for bit, with `A` = 0, no softplus and no `z` (every operation then an exactly rounded
//!    fp32 one): state, buffer and out equal an fp32 emulation of FlashInfer's multi-token
//!    kernel in its lane order (`emulate_fp32`: 4-column lane blocks with an fp32 state,
//!    8-column ones with a 2-byte state; SR by the documented bits), for every (state, input)
//!    pair at dstate 64/128/256 and for the compiled-in kernels' grid forms at each dstate.
//!
//! Tolerances (as `tests/mtp_reference.rs`, which holds the reference to FlashInfer's recorded
//! multi-token outputs, with some margin for T up to 16 and other dtypes):
//! - state and intermediate entries: `|got - ref| <= ulp(|ref|) + STATE_REL·|ref| + STATE_ABS`,
//!   `ulp` the spacing of the state dtype at `|ref|` (below 2^-14 with SR: 2^-14, the SR flushes
//!   fp16 subnormals); a reference beyond a 16-bit type's largest finite value must come out as
//!   an infinity of its sign;
//! - `out`: `|got - ref| <= OUT_REL · scale + out_sum_tol · magnitude`, `scale` the largest
//!   `|ref|` of the (token, head) row of `dim` elements, `magnitude` the element's sum of term
//!   magnitudes (`MtpReference::out_magnitude`: with cancellation an fp32 sum is off by ulps of
//!   its terms, not of its result).
//!
//! The CPU tests (no GPU) build every problem the GPU tests run, check that the reference and
//! the API's host validation accept each, and hold the checker itself to a kernel emulated
//! from the reference (round to nearest into the written places): it must pass, and a single
//! changed byte anywhere must fail it. The fp32 emulation must pass the f64 checker too, and
//! tell the two lane maps apart (`out` differs, the state does not).

mod common;
#[path = "common/mtp_dev.rs"]
mod mtp_dev;

use std::sync::Arc;

use common::{dtype_size, gen, run_seed, DevBuf, Rng};
use cudarc::driver::CudaStream;
use half::{bf16, f16};
use mamba_ssu::philox;
use mamba_ssu::reference::{
    selective_state_update_mtp_f64, sr_f16_bits, HostTensor, MtpHostArgs, MtpReference, MtpTarget,
};

/// Relative part of the state tolerance beyond one ulp of the state dtype.
const STATE_REL: f64 = 1.0 / 1024.0;
/// Absolute part of the state tolerance (fp32 errors of terms that cancel).
const STATE_ABS: f64 = 2e-6;
/// `out` tolerance relative to its row scale.
const OUT_REL: f64 = 1e-2;

/// The fp32 rounding of `out`'s sum, relative to the magnitude of its terms
/// (`MtpReference::out_magnitude`): at most one fp32 unit roundoff (2^-24) per addition of the
/// dstate terms and per token of the state's fp32 recurrence, with a margin of 8.
fn out_sum_tol(c: &Cfg) -> f64 {
    (c.dstate + 2 * c.tokens + 8) as f64 * f64::powi(2.0, -24)
}
/// The byte every stride-padding element of the state holds.
const STATE_PATTERN: u8 = 0xA5;

// ---------------------------------------------------------------------------------------------
// Random problems
// ---------------------------------------------------------------------------------------------

/// How the read slots are given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// No index: sequence b reads slot b.
    None,
    /// `state_batch_indices` (batch,).
    OneD,
    /// `state_batch_indices` (batch, W), the column picked by `num_accepted_tokens` when `nat`.
    TwoD { nat: bool },
}

/// The write mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    /// The intermediate buffer, with or without `intermediate_state_indices`.
    Inter { indices: bool },
    /// A 2-D `dst_state_batch_indices`; `in_place`: the (2-D) read index passed as dst too.
    Dst { in_place: bool },
    /// The last token to the read slot.
    Final,
}

#[derive(Clone, Debug)]
struct Cfg {
    state: &'static str,
    input: &'static str,
    weight: &'static str,
    index: &'static str,
    /// The dtype of num_accepted_tokens and cu_seqlens when it is not `index`'s (FlashInfer takes
    /// them independently of the slot indices': the run-time kernel reads them).
    aux_index: Option<&'static str>,
    batch: usize,
    nheads: usize,
    ngroups: usize,
    dim: usize,
    dstate: usize,
    /// T (fixed length) or `cache_steps` (varlen: the most tokens a sequence has).
    tokens: usize,
    varlen: bool,
    z: bool,
    d: bool,
    dt_bias: bool,
    softplus: bool,
    read: Read,
    write: Write,
    disable_state_update: bool,
    /// Some sequences are pads (their read slot is `pad_slot_id`) and some write targets are
    /// skipped (`pad_slot_id` in dst or in the buffer indices).
    pads: bool,
    pad_slot_id: i64,
    rounds: u32,
    padded_strides: bool,
    /// `A` all zeros (dA = ex2(0) = 1 exactly): with softplus off and no `z`, every operation
    /// of the kernel is an exactly rounded fp32 one, which [`emulate_fp32`] reproduces bit for
    /// bit.
    a_zero: bool,
}

impl Cfg {
    /// The hot combination (F16 state, BF16 inputs and weights), dstate 128, 4 sequences of 8
    /// tokens, 1-D read indices, the intermediate buffer with indices.
    fn base() -> Cfg {
        Cfg {
            state: "float16",
            input: "bfloat16",
            weight: "bfloat16",
            index: "int32",
            aux_index: None,
            batch: 4,
            nheads: 8,
            ngroups: 2,
            dim: 64,
            dstate: 128,
            tokens: 8,
            varlen: false,
            z: true,
            d: true,
            dt_bias: true,
            softplus: true,
            read: Read::OneD,
            write: Write::Inter { indices: true },
            disable_state_update: false,
            pads: false,
            pad_slot_id: -1,
            rounds: 0,
            padded_strides: false,
            a_zero: false,
        }
    }

    /// Makes the combination valid: a read index for in-place dst and for pad id 0 (slot b =
    /// 0 would be a pad), SR only with an F16 state.
    fn fixed(mut self) -> Cfg {
        if self.write == (Write::Dst { in_place: true }) && !matches!(self.read, Read::TwoD { .. })
        {
            self.read = Read::TwoD { nat: true };
        }
        if self.read == Read::None && (self.pad_slot_id == 0 || self.pads) {
            self.read = Read::OneD;
        }
        if self.state != "float16" {
            self.rounds = 0;
        }
        self
    }
}

/// A problem on the host: every storage as bytes, plus its layout.
struct Problem {
    cfg: Cfg,
    /// Slots of the state.
    slots: usize,
    state_stride: usize,
    /// Token rows of x (varlen) or T (fixed).
    rows: usize,
    /// Token and batch strides (fixed length; varlen: batch strides unused) of x/z, dt, B/C,
    /// out.
    x_st: (usize, usize),
    dt_st: (usize, usize),
    bc_st: (usize, usize),
    out_st: (usize, usize),
    state: Vec<u8>,
    x: Vec<u8>,
    z: Option<Vec<u8>>,
    dt: Vec<u8>,
    a: Vec<u8>,
    b: Vec<u8>,
    c: Vec<u8>,
    d: Option<Vec<u8>>,
    dt_bias: Option<Vec<u8>>,
    /// Read index values and its shape.
    sbi: Option<(Vec<i64>, Vec<usize>)>,
    dst: Option<(Vec<i64>, Vec<usize>)>,
    nat: Option<Vec<i64>>,
    cu: Option<Vec<i64>>,
    /// Buffer `(entries, cache_steps)`.
    inter: Option<(usize, usize)>,
    inter_idx: Option<Vec<i64>>,
    seed: i64,
}

fn pad16(es: usize) -> usize {
    16 / es
}

fn elems_of(shape: &[usize], strides: &[usize]) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    1 + shape
        .iter()
        .zip(strides)
        .map(|(n, s)| (n - 1) * s)
        .sum::<usize>()
}

impl Problem {
    fn new(cfg: Cfg, rng: &mut Rng) -> Problem {
        let cfg = cfg.fixed();
        let (sb, ib, wb) = (
            dtype_size(cfg.state),
            dtype_size(cfg.input),
            dtype_size(cfg.weight),
        );
        let (bt, tk, nh, dim, ds) = (cfg.batch, cfg.tokens, cfg.nheads, cfg.dim, cfg.dstate);
        let hb = nh * dim * ds;
        let extra = |es: usize, rng: &mut Rng| {
            if cfg.padded_strides {
                pad16(es) * (1 + rng.below(3) as usize)
            } else {
                0
            }
        };
        let any_extra = |rng: &mut Rng| {
            if cfg.padded_strides {
                1 + rng.below(5) as usize
            } else {
                0
            }
        };
        // Sequences: varlen lengths in 0..=tokens with a zero-length one and a full one where
        // batch allows, and token rows past the last sequence that nobody reads.
        let (rows, cu) = if cfg.varlen {
            let mut lens: Vec<usize> = (0..bt).map(|_| rng.below(tk as u64 + 1) as usize).collect();
            if bt >= 2 {
                lens[0] = 0;
                lens[1] = tk;
                rng.shuffle(&mut lens);
            } else {
                // One sequence: at least one token (x has a token row for the reference).
                lens[0] = lens[0].max(1);
            }
            let mut cu = vec![0i64];
            for l in &lens {
                cu.push(cu.last().unwrap() + *l as i64);
            }
            let used = *cu.last().unwrap() as usize;
            (used + if cfg.padded_strides { 2 } else { 0 }, Some(cu))
        } else {
            (tk, None)
        };
        // Strides: token stride, then batch stride (fixed length).
        let tok_then_batch = |inner: usize, token_extra: usize, batch_extra: usize| {
            let st = inner + token_extra;
            (st, tk * st + batch_extra)
        };
        let x_st = tok_then_batch(nh * dim, any_extra(rng), any_extra(rng));
        let out_st = tok_then_batch(nh * dim, any_extra(rng), any_extra(rng));
        let dt_st = tok_then_batch(nh, any_extra(rng), any_extra(rng));
        let bc_st = tok_then_batch(cfg.ngroups * ds, extra(ib, rng), extra(ib, rng));
        let lead = |st: (usize, usize)| -> usize {
            if cfg.varlen {
                if rows == 0 {
                    0
                } else {
                    (rows - 1) * st.0
                }
            } else {
                (bt - 1) * st.1 + (tk - 1) * st.0
            }
        };

        // Slots: the pad id 0 makes slot 0 unusable; W columns of a 2-D index; distinct slots
        // for every read and every write (no slot written twice or read after another
        // sequence's write).
        let lo = usize::from(cfg.pad_slot_id == 0);
        // A dst index is at least T wide; a read-only 2-D index has fewer live columns (a buffer
        // entry per slot without buffer indices keeps the slot count small), padded to T.
        let width = match (cfg.read, cfg.write) {
            (_, Write::Dst { .. }) => tk + rng.below(2) as usize,
            (Read::TwoD { .. }, Write::Inter { indices: false }) => 1 + rng.below(2) as usize,
            (Read::TwoD { .. }, _) => 1 + rng.below(tk.min(4) as u64) as usize,
            _ => 1,
        };
        let need = match (cfg.read, cfg.write) {
            (Read::TwoD { .. }, Write::Dst { in_place: true }) => bt * width,
            (Read::TwoD { .. }, Write::Dst { .. }) => 2 * bt * width,
            (Read::TwoD { .. }, _) => bt * width,
            (_, Write::Dst { .. }) => bt + bt * width,
            _ => bt,
        };
        let slots = lo + need + 1; // one slot nobody references
                                   // Without a read index sequence b reads slot b: the others come after those.
        let first_free = if cfg.read == Read::None { bt } else { lo };
        let mut free: Vec<i64> = (first_free as i64..slots as i64).collect();
        rng.shuffle(&mut free);
        let mut take = |n: usize| -> Vec<i64> { free.drain(..n).collect() };
        let pad = cfg.pad_slot_id;
        let mut pad_rows: Vec<bool> = (0..bt).map(|_| cfg.pads && rng.below(3) == 0).collect();
        if cfg.pads && !pad_rows.iter().any(|p| *p) {
            pad_rows[rng.below(bt as u64) as usize] = true;
        }
        let (read_slots, sbi, nat) = match cfg.read {
            Read::None => ((0..bt as i64).collect::<Vec<_>>(), None, None),
            Read::OneD => {
                let mut v = take(bt);
                for (b, p) in pad_rows.iter().enumerate() {
                    if *p {
                        v[b] = pad;
                    }
                }
                (v.clone(), Some((v, vec![bt])), None)
            }
            Read::TwoD { nat } => {
                // `width` live columns (distinct slots), the row padded with pad_slot_id to at
                // least T columns (FlashInfer's size(1) >= T; the padding is never read).
                let cols = width.max(tk);
                let live = take(bt * width);
                let mut v = vec![pad; bt * cols];
                for b in 0..bt {
                    v[b * cols..b * cols + width].copy_from_slice(&live[b * width..][..width]);
                }
                let counts: Vec<i64> = (0..bt)
                    .map(|_| rng.below(width as u64 + 1) as i64)
                    .collect();
                let mut reads = Vec::new();
                for b in 0..bt {
                    let k = if nat {
                        (counts[b] - 1).max(0) as usize
                    } else {
                        0
                    };
                    if pad_rows[b] {
                        v[b * cols + k] = pad;
                    }
                    reads.push(v[b * cols + k]);
                }
                (reads, Some((v, vec![bt, cols])), nat.then_some(counts))
            }
        };
        let mut sbi = sbi;
        let dst = match cfg.write {
            Write::Dst { in_place: true } => {
                // One index for both: skipped steps are pads in columns other than the read
                // one (which the read never looks at).
                let (v, shape) = sbi.as_mut().expect("in place needs a 2-D read index");
                if cfg.pads {
                    for b in 0..bt {
                        let c = rng.below(width as u64) as usize;
                        if v[b * width + c] != read_slots[b] {
                            v[b * width + c] = pad;
                        }
                    }
                }
                Some((v.clone(), shape.clone()))
            }
            Write::Dst { in_place: false } => {
                let mut v = take(bt * width);
                if cfg.pads {
                    for b in 0..bt {
                        let c = rng.below(width as u64) as usize;
                        v[b * width + c] = pad;
                    }
                }
                Some((v, vec![bt, width]))
            }
            _ => None,
        };
        let (inter, inter_idx) = match cfg.write {
            Write::Inter { indices } => {
                let steps = tk + if cfg.varlen { 0 } else { rng.below(2) as usize };
                if indices {
                    // The last entry is never referenced (it stays poisoned).
                    let entries = bt + 1 + lo;
                    let mut e: Vec<i64> = (lo as i64..entries as i64 - 1).collect();
                    rng.shuffle(&mut e);
                    if cfg.pads {
                        // pad_slot_id as an entry: -1 is skipped; 0, an entry no other sequence
                        // uses, is written (FlashInfer's rule).
                        let b = rng.below(bt as u64) as usize;
                        e[b] = pad;
                    }
                    (Some((entries, steps)), Some(e))
                } else {
                    // The entry is the read slot: a buffer entry per slot.
                    (Some((slots, steps)), None)
                }
            }
            _ => (None, None),
        };

        let state_stride = hb + extra(sb, rng);
        let gseed = rng.next();
        let mk = |tag: u64, n: usize, dtype: &str| {
            gen::to_dtype_bytes(&gen::values_f32(gseed, tag, 0, n), dtype)
        };
        let mut state = mk(gen::TAG_STATE, slots * state_stride, cfg.state);
        for s in 0..slots {
            let lo = (s * state_stride + hb) * sb;
            let hi = (s + 1) * state_stride * sb;
            state[lo..hi].fill(STATE_PATTERN);
        }
        let x_len = lead(x_st) + nh * dim;
        let seed = if rng.coin() {
            (rng.next() >> 1) as i64
        } else {
            (rng.next() >> 32) as i64
        };
        Problem {
            slots,
            state_stride,
            rows,
            x_st,
            dt_st,
            bc_st,
            out_st,
            state,
            x: mk(gen::TAG_X, x_len, cfg.input),
            z: cfg.z.then(|| mk(gen::TAG_Z, x_len, cfg.input)),
            // Without softplus dt' = dt + dt_bias is used as is: non-negative values keep
            // dA = exp(A dt') <= 1 (A < 0), the model's domain; a growing state would amplify
            // the fp32 rounding of early tokens beyond any per-element tolerance.
            dt: non_negative(
                mk(gen::TAG_DT, lead(dt_st) + nh, cfg.weight),
                cfg.weight,
                !cfg.softplus,
            ),
            a: if cfg.a_zero {
                vec![0; 4 * nh]
            } else {
                mk(gen::TAG_A, nh, "float32")
            },
            b: mk(gen::TAG_B, lead(bc_st) + cfg.ngroups * ds, cfg.input),
            c: mk(gen::TAG_C, lead(bc_st) + cfg.ngroups * ds, cfg.input),
            d: cfg.d.then(|| mk(gen::TAG_D, nh, cfg.weight)),
            dt_bias: cfg.dt_bias.then(|| {
                non_negative(
                    mk(gen::TAG_DT_BIAS, nh, cfg.weight),
                    cfg.weight,
                    !cfg.softplus,
                )
            }),
            sbi,
            dst,
            nat,
            cu,
            inter,
            inter_idx,
            seed,
            cfg,
        }
        .checked(wb)
    }

    fn checked(self, wb: usize) -> Self {
        assert_eq!(self.dt.len() % wb, 0);
        self
    }

    /// Shapes and strides of the token tensors: `(shape, strides)` of x-like, dt, B/C.
    fn x_layout(&self) -> (Vec<usize>, Vec<usize>) {
        let c = &self.cfg;
        self.tok_layout(self.x_st, &[c.nheads, c.dim], &[c.dim, 1])
    }
    fn out_layout(&self) -> (Vec<usize>, Vec<usize>) {
        let c = &self.cfg;
        self.tok_layout(self.out_st, &[c.nheads, c.dim], &[c.dim, 1])
    }
    fn dt_layout(&self) -> (Vec<usize>, Vec<usize>) {
        let c = &self.cfg;
        self.tok_layout(self.dt_st, &[c.nheads, c.dim], &[1, 0])
    }
    fn bc_layout(&self) -> (Vec<usize>, Vec<usize>) {
        let c = &self.cfg;
        self.tok_layout(self.bc_st, &[c.ngroups, c.dstate], &[c.dstate, 1])
    }
    fn tok_layout(
        &self,
        st: (usize, usize),
        inner: &[usize],
        inner_strides: &[usize],
    ) -> (Vec<usize>, Vec<usize>) {
        let (mut shape, mut strides) = if self.cfg.varlen {
            (vec![self.rows], vec![st.0])
        } else {
            (vec![self.cfg.batch, self.cfg.tokens], vec![st.1, st.0])
        };
        shape.extend_from_slice(inner);
        strides.extend_from_slice(inner_strides);
        (shape, strides)
    }

    fn out_elems(&self) -> usize {
        let (s, t) = self.out_layout();
        elems_of(&s, &t).max(1)
    }

    fn state_shape(&self) -> (Vec<usize>, Vec<usize>) {
        let c = &self.cfg;
        (
            vec![self.slots, c.nheads, c.dim, c.dstate],
            vec![self.state_stride, c.dim * c.dstate, c.dstate, 1],
        )
    }

    fn inter_shape(&self) -> Option<(Vec<usize>, Vec<usize>)> {
        let c = &self.cfg;
        let (entries, steps) = self.inter?;
        let hb = c.nheads * c.dim * c.dstate;
        Some((
            vec![entries, steps, c.nheads, c.dim, c.dstate],
            vec![steps * hb, hb, c.dim * c.dstate, c.dstate, 1],
        ))
    }

    fn inter_elems(&self) -> usize {
        self.inter.map_or(0, |(e, s)| {
            e * s * self.cfg.nheads * self.cfg.dim * self.cfg.dstate
        })
    }

    /// `cache_steps` as passed: the buffer's steps, or the varlen T.
    fn cache_steps(&self) -> Option<usize> {
        match self.inter {
            Some((_, s)) => Some(s),
            None => self.cfg.varlen.then_some(self.cfg.tokens),
        }
    }

    fn index_bytes(&self, v: &[i64]) -> Vec<u8> {
        index_bytes_as(self.cfg.index, v)
    }

    /// The dtype of num_accepted_tokens and cu_seqlens.
    fn aux_index(&self) -> &'static str {
        self.cfg.aux_index.unwrap_or(self.cfg.index)
    }
}

/// Index values as the bytes of `dtype` ("int32" or "int64").
fn index_bytes_as(dtype: &str, v: &[i64]) -> Vec<u8> {
    match dtype {
        "int32" => v.iter().flat_map(|s| (*s as i32).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|s| s.to_le_bytes()).collect(),
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

/// The f64 reference of `p` on its storages as given.
fn reference(p: &Problem) -> MtpReference {
    let c = &p.cfg;
    let f = |dtype: &str, bytes: &[u8]| decode(dtype, bytes);
    let state = f(c.state, &p.state);
    let x = f(c.input, &p.x);
    let z = p.z.as_ref().map(|v| f(c.input, v));
    let dt = f(c.weight, &p.dt);
    let a = f("float32", &p.a);
    let bm = f(c.input, &p.b);
    let cm = f(c.input, &p.c);
    let d = p.d.as_ref().map(|v| f(c.weight, v));
    let dt_bias = p.dt_bias.as_ref().map(|v| f(c.weight, v));
    let inter: Option<Vec<f64>> = p.inter.map(|_| vec![f64::NAN; p.inter_elems()]);
    let (xs, xt) = p.x_layout();
    let (ds, dtt) = p.dt_layout();
    let (bs, bst) = p.bc_layout();
    let (ss, sst) = p.state_shape();
    let head = [c.nheads, c.dim];
    let ints = |v: &Option<(Vec<i64>, Vec<usize>)>| v.clone();
    let sbi = ints(&p.sbi);
    let dst = ints(&p.dst);
    let cu = p.cu.clone();
    let nat = p.nat.clone();
    // The reference refuses a buffer entry outside the buffer (pad_slot_id -1), which the
    // kernel's contract skips (nothing written): such sequences get an entry no other sequence
    // uses, whose writes are dropped from the result below. An entry equal to pad_slot_id 0 is
    // written by both, as FlashInfer writes it.
    let spare = p.inter.map(|(entries, _)| entries as i64 - 1);
    let mut skipped_entry = None;
    let ii = p.inter_idx.clone().map(|mut v| {
        for e in v.iter_mut() {
            if *e < 0 {
                *e = spare.expect("a buffer");
                skipped_entry = spare;
            }
        }
        v
    });
    if let (Some(s), Some(v)) = (skipped_entry, &p.inter_idx) {
        assert!(!v.contains(&s), "the spare buffer entry is in use");
    }
    let ish = p.inter_shape();
    let args = MtpHostArgs {
        state: HostTensor::new(&state, &ss, &sst),
        x: HostTensor::new(&x, &xs, &xt),
        dt: HostTensor::new(&dt, &ds, &dtt),
        a: HostTensor::new(&a, &[c.nheads, c.dim, c.dstate], &[1, 0, 0]),
        b: HostTensor::new(&bm, &bs, &bst),
        c: HostTensor::new(&cm, &bs, &bst),
        d: d.as_ref().map(|v| HostTensor::new(v, &head, &[1, 0])),
        z: z.as_ref().map(|v| HostTensor::new(v, &xs, &xt)),
        dt_bias: dt_bias.as_ref().map(|v| HostTensor::new(v, &head, &[1, 0])),
        state_batch_indices: sbi.as_ref().map(|(v, s)| HostTensor::contiguous(v, s)),
        dst_state_batch_indices: dst.as_ref().map(|(v, s)| HostTensor::contiguous(v, s)),
        num_accepted_tokens: nat.as_ref().map(|v| HostTensor::contiguous(v, &[c.batch])),
        cu_seqlens: cu
            .as_ref()
            .map(|v| HostTensor::contiguous(v, &[c.batch + 1])),
        intermediate_states_buffer: inter
            .as_ref()
            .zip(ish.as_ref())
            .map(|(v, (s, t))| HostTensor::new(v, s, t)),
        intermediate_state_indices: ii.as_ref().map(|v| HostTensor::contiguous(v, &[c.batch])),
        cache_steps: p.inter.map_or(0, |i| i.1),
        pad_slot_id: c.pad_slot_id,
        dt_softplus: c.softplus,
        disable_state_update: c.disable_state_update,
    };
    let mut r = selective_state_update_mtp_f64(&args)
        .unwrap_or_else(|e| panic!("the reference refused {:?}: {e}", p.cfg));
    if let Some(s) = skipped_entry {
        r.writes.retain(
            |w| !matches!(w.target, MtpTarget::Intermediate { entry, .. } if entry as i64 == s),
        );
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Device side
// ---------------------------------------------------------------------------------------------

struct Dev {
    state: DevBuf,
    x: DevBuf,
    z: Option<DevBuf>,
    dt: DevBuf,
    a: DevBuf,
    b: DevBuf,
    c: DevBuf,
    d: Option<DevBuf>,
    dt_bias: Option<DevBuf>,
    sbi: Option<DevBuf>,
    dst: Option<DevBuf>,
    nat: Option<DevBuf>,
    cu: Option<DevBuf>,
    inter: Option<DevBuf>,
    inter_idx: Option<DevBuf>,
    seed: DevBuf,
    out: DevBuf,
}

fn upload(stream: &Arc<CudaStream>, p: &Problem) -> Dev {
    let c = &p.cfg;
    let up = |dtype: &str, bytes: &[u8]| DevBuf::from_bytes(stream, dtype, bytes);
    let idx = |v: &[i64]| up(c.index, &p.index_bytes(v));
    let aux = |v: &[i64]| up(p.aux_index(), &index_bytes_as(p.aux_index(), v));
    let mut out = DevBuf::alloc(stream, c.input, p.out_elems());
    out.fill_bytes(stream, 0, p.out_elems(), 0xFF);
    let inter = p.inter.map(|_| {
        let n = p.inter_elems();
        let mut b = DevBuf::alloc(stream, c.state, n);
        b.fill_bytes(stream, 0, n, 0xFF);
        b
    });
    Dev {
        state: up(c.state, &p.state),
        x: up(c.input, &p.x),
        z: p.z.as_ref().map(|v| up(c.input, v)),
        dt: up(c.weight, &p.dt),
        a: up("float32", &p.a),
        b: up(c.input, &p.b),
        c: up(c.input, &p.c),
        d: p.d.as_ref().map(|v| up(c.weight, v)),
        dt_bias: p.dt_bias.as_ref().map(|v| up(c.weight, v)),
        sbi: p.sbi.as_ref().map(|(v, _)| idx(v)),
        // In place: the read index is passed as dst (its own buffer here, same values).
        dst: p.dst.as_ref().map(|(v, _)| idx(v)),
        nat: p.nat.as_ref().map(|v| aux(v)),
        cu: p.cu.as_ref().map(|v| aux(v)),
        inter,
        inter_idx: p.inter_idx.as_ref().map(|v| idx(v)),
        seed: up("int64", &p.seed.to_le_bytes()),
        out,
    }
}

fn call<'a>(p: &'a Problem, dev: &'a mut Dev) -> mtp_dev::MtpCall<'a> {
    let c = &p.cfg;
    let inp = |buf: &'a DevBuf, (shape, strides): (Vec<usize>, Vec<usize>)| mtp_dev::In {
        buf,
        shape,
        strides,
    };
    let idx = |buf: &'a DevBuf, shape: &[usize]| mtp_dev::In {
        buf,
        shape: shape.to_vec(),
        strides: if shape.len() == 2 {
            vec![shape[1], 1]
        } else {
            vec![1]
        },
    };
    let head = |buf: &'a DevBuf| inp(buf, (vec![c.nheads, c.dim], vec![1, 0]));
    let (ss, sst) = p.state_shape();
    let (os, ost) = p.out_layout();
    let in_place = c.write == (Write::Dst { in_place: true });
    mtp_dev::MtpCall {
        state: mtp_dev::Out {
            buf: &mut dev.state,
            shape: ss,
            strides: sst,
        },
        x: inp(&dev.x, p.x_layout()),
        dt: inp(&dev.dt, p.dt_layout()),
        a: inp(&dev.a, (vec![c.nheads, c.dim, c.dstate], vec![1, 0, 0])),
        b: inp(&dev.b, p.bc_layout()),
        c: inp(&dev.c, p.bc_layout()),
        d: dev.d.as_ref().map(head),
        z: dev.z.as_ref().map(|b| inp(b, p.x_layout())),
        dt_bias: dev.dt_bias.as_ref().map(head),
        out: mtp_dev::Out {
            buf: &mut dev.out,
            shape: os,
            strides: ost,
        },
        state_batch_indices: dev
            .sbi
            .as_ref()
            .zip(p.sbi.as_ref())
            .map(|(b, (_, s))| idx(b, s)),
        // In place: the very read-index buffer is the destination index.
        dst_state_batch_indices: if in_place {
            dev.sbi
                .as_ref()
                .zip(p.dst.as_ref())
                .map(|(b, (_, s))| idx(b, s))
        } else {
            dev.dst
                .as_ref()
                .zip(p.dst.as_ref())
                .map(|(b, (_, s))| idx(b, s))
        },
        num_accepted_tokens: dev.nat.as_ref().map(|b| idx(b, &[c.batch])),
        cu_seqlens: dev.cu.as_ref().map(|b| idx(b, &[c.batch + 1])),
        intermediate_states: dev.inter.as_mut().zip(p.inter_shape()).map(|(b, (s, t))| {
            mtp_dev::Out {
                buf: b,
                shape: s,
                strides: t,
            }
        }),
        intermediate_state_indices: dev.inter_idx.as_ref().map(|b| idx(b, &[c.batch])),
        state_scale: None,
        intermediate_state_scales: None,
        cache_steps: p.cache_steps(),
        pad_slot_id: c.pad_slot_id,
        dt_softplus: c.softplus,
        disable_state_update: c.disable_state_update,
        philox_rounds: c.rounds,
        seed: (c.rounds > 0).then(|| idx(&dev.seed, &[1])),
        sr_rule: mamba_ssu::ssu::SrRule::V072,
    }
}

/// What a run left: state storage, intermediate buffer (if any) and out, as bytes.
struct After {
    state: Vec<u8>,
    inter: Option<Vec<u8>>,
    out: Vec<u8>,
}

fn run(stream: &Arc<CudaStream>, p: &Problem) -> After {
    let mut dev = upload(stream, p);
    {
        let mut cl = call(p, &mut dev);
        mtp_dev::launch(stream, &mut cl)
            .unwrap_or_else(|e| panic!("launch failed for {:?}: {e}", p.cfg));
    }
    stream
        .synchronize()
        .unwrap_or_else(|e| panic!("kernel failed for {:?}: {e}", p.cfg));
    After {
        state: dev.state.download_all(stream),
        inter: dev.inter.as_mut().map(|b| b.download_all(stream)),
        out: dev.out.download_all(stream),
    }
}

/// The in-place in-dst-mode in-place input: in place the read index is also the dst, so the
/// in-place problem's in-dst index must be the read index's values.
fn in_place_consistent(p: &Problem) -> bool {
    p.cfg.write != (Write::Dst { in_place: true })
        || p.sbi.as_ref().map(|s| &s.0) == p.dst.as_ref().map(|d| &d.0)
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// `bytes` (elements of `dtype`) with every sign bit cleared when `on`: the absolute values.
fn non_negative(mut bytes: Vec<u8>, dtype: &str, on: bool) -> Vec<u8> {
    if on {
        let es = common::dtype_size(dtype);
        for e in bytes.chunks_mut(es) {
            e[es - 1] &= 0x7F;
        }
    }
    bytes
}

/// Spacing of `dtype` at magnitude `a` (fp16 with `sr`: 2^-14 below 2^-14, the flush; also
/// just above it, where the kernel's fp32 value may lie below 2^-14 and flush to zero).
fn ulp(dtype: &str, a: f64, sr: bool) -> f64 {
    let a = a.abs();
    let (min_normal, mant, sub) = match dtype {
        "float16" => (
            2f64.powi(-14),
            10,
            if sr { 2f64.powi(-14) } else { 2f64.powi(-24) },
        ),
        "bfloat16" => (2f64.powi(-126), 7, 2f64.powi(-133)),
        _ => (2f64.powi(-126), 23, 2f64.powi(-149)),
    };
    let flush_edge = if dtype == "float16" && sr {
        min_normal * (1.0 + STATE_REL) + STATE_ABS
    } else {
        min_normal
    };
    if a < flush_edge {
        sub
    } else {
        2f64.powi(a.log2().floor() as i32 - mant)
    }
}

fn max_finite(dtype: &str) -> f64 {
    match dtype {
        "float16" => 65504.0,
        "bfloat16" => f64::from(bf16::MAX.to_f32()),
        _ => f64::from(f32::MAX),
    }
}

/// Whether a state value `g` (read back) agrees with the reference `r`.
fn state_ok(dtype: &str, g: f64, r: f64, sr: bool) -> bool {
    if r.abs() >= max_finite(dtype) * (1.0 - 1.0 / 4096.0) && g.is_infinite() {
        return g.signum() == r.signum();
    }
    let tol = ulp(dtype, r.abs().max(g.abs()), sr) + STATE_REL * r.abs() + STATE_ABS;
    (g - r).abs() <= tol
}

/// Storage indices (state or buffer) the reference writes.
fn written_mask(p: &Problem, r: &MtpReference) -> (Vec<bool>, Vec<bool>) {
    let c = &p.cfg;
    let hb = c.nheads * c.dim * c.dstate;
    let mut st = vec![false; p.slots * p.state_stride];
    let mut inter = vec![false; p.inter_elems()];
    for w in &r.writes {
        match w.target {
            MtpTarget::State(s) => {
                st[s * p.state_stride..s * p.state_stride + hb].fill(true);
            }
            MtpTarget::Intermediate { entry, step } => {
                let steps = p.inter.unwrap().1;
                let o = (entry * steps + step) * hb;
                inter[o..o + hb].fill(true);
            }
        }
    }
    (st, inter)
}

/// The storage offset of out element (reference row, h, d).
fn out_offset(p: &Problem, row: usize, h: usize, d: usize) -> usize {
    let c = &p.cfg;
    let tok = if c.varlen {
        row * p.out_st.0
    } else {
        (row / c.tokens) * p.out_st.1 + (row % c.tokens) * p.out_st.0
    };
    tok + h * c.dim + d
}

/// Keeps the first few problem descriptions.
fn note(bad: &mut Vec<String>, s: String) {
    if bad.len() < 6 {
        bad.push(s);
    }
}

/// Checks one run against the reference; returns the problems found (empty: pass).
fn check(p: &Problem, r: &MtpReference, got: &After) -> Vec<String> {
    let c = &p.cfg;
    let sr = c.rounds > 0;
    let mut bad = Vec::new();
    let (st_mask, in_mask) = written_mask(p, r);
    let sb = dtype_size(c.state);
    // State: written elements within tolerance, every other byte unchanged.
    let gs = decode(c.state, &got.state);
    let (mut n_bad, mut n_changed) = (0usize, 0usize);
    for (e, &w) in st_mask.iter().enumerate() {
        if w {
            if !state_ok(c.state, gs[e], r.state[e], sr) {
                n_bad += 1;
                note(
                    &mut bad,
                    format!("state[{e}] = {} vs reference {}", gs[e], r.state[e]),
                );
            }
        } else if got.state[e * sb..(e + 1) * sb] != p.state[e * sb..(e + 1) * sb] {
            n_changed += 1;
            note(
                &mut bad,
                format!("state[{e}] changed outside the written slots"),
            );
        }
    }
    if n_bad + n_changed > 0 {
        bad.push(format!(
            "state: {n_bad} elements off, {n_changed} changed outside the writes"
        ));
    }
    // Intermediate buffer likewise (initial bytes 0xFF).
    match (&got.inter, &r.intermediate) {
        (Some(bytes), Some(want)) => {
            let gi = decode(c.state, bytes);
            let (mut n_bad, mut n_changed) = (0usize, 0usize);
            for (e, &w) in in_mask.iter().enumerate() {
                if w {
                    if !state_ok(c.state, gi[e], want[e], sr) {
                        n_bad += 1;
                        note(
                            &mut bad,
                            format!("buffer[{e}] = {} vs reference {}", gi[e], want[e]),
                        );
                    }
                } else if bytes[e * sb..(e + 1) * sb].iter().any(|b| *b != 0xFF) {
                    n_changed += 1;
                    note(
                        &mut bad,
                        format!("buffer[{e}] written outside the reference's writes"),
                    );
                }
            }
            if n_bad + n_changed > 0 {
                bad.push(format!(
                    "buffer: {n_bad} elements off, {n_changed} changed outside the writes"
                ));
            }
        }
        (None, None) => {}
        _ => bad.push("buffer presence differs".into()),
    }
    // out: the sequences' rows within tolerance, every other element still poisoned.
    let ib = dtype_size(c.input);
    let go = decode(c.input, &got.out);
    let mut expected = vec![false; go.len()];
    let (mut n_bad, mut n_poison) = (0usize, 0usize);
    for &(first, len) in &r.sequences {
        for row in first..first + len {
            for h in 0..c.nheads {
                let want: Vec<f64> = (0..c.dim)
                    .map(|d| r.out[(row * c.nheads + h) * c.dim + d])
                    .collect();
                let scale = want.iter().fold(0f64, |a, v| a.max(v.abs()));
                for (d, &wv) in want.iter().enumerate() {
                    let e = out_offset(p, row, h, d);
                    expected[e] = true;
                    let g = go[e];
                    let mag = r.out_magnitude[(row * c.nheads + h) * c.dim + d];
                    let ok = if wv.abs() >= max_finite(c.input) && g.is_infinite() {
                        g.signum() == wv.signum()
                    } else {
                        (g - wv).abs() <= OUT_REL * scale + out_sum_tol(c) * mag + 1e-30
                    };
                    if !ok {
                        n_bad += 1;
                        note(
                            &mut bad,
                            format!("out row {row} head {h} col {d}: {g} vs {wv}"),
                        );
                    }
                }
            }
        }
    }
    for (e, &x) in expected.iter().enumerate() {
        if !x && got.out[e * ib..(e + 1) * ib].iter().any(|b| *b != 0xFF) {
            n_poison += 1;
            note(
                &mut bad,
                format!("out element {e} written (no token of any sequence)"),
            );
        }
    }
    if n_bad + n_poison > 0 {
        bad.push(format!(
            "out: {n_bad} elements off, {n_poison} written outside the rows"
        ));
    }
    bad
}

/// Runs `p` and checks it; returns a failure line.
fn run_and_check(stream: &Arc<CudaStream>, p: &Problem) -> Option<String> {
    let r = reference(p);
    let got = run(stream, p);
    let bad = check(p, &r, &got);
    (!bad.is_empty()).then(|| format!("{:?}: {}", p.cfg, bad.join("; ")))
}

// ---------------------------------------------------------------------------------------------
// The problem sets
// ---------------------------------------------------------------------------------------------

const FLOATS: [&str; 3] = ["float16", "bfloat16", "float32"];
const WRITES: [Write; 5] = [
    Write::Inter { indices: true },
    Write::Inter { indices: false },
    Write::Dst { in_place: false },
    Write::Dst { in_place: true },
    Write::Final,
];

/// The dtype table: every (state, input) pair with weight = the third axis shifted (each
/// weight three times), plus the hot combination three more times; dstate, dim, T, write mode
/// and options cycling and drawn.
fn dtype_table(rng: &mut Rng) -> Vec<Problem> {
    let mut combos = Vec::new();
    for (i, s) in FLOATS.iter().enumerate() {
        for (j, x) in FLOATS.iter().enumerate() {
            combos.push((*s, *x, FLOATS[(i + j) % 3]));
        }
    }
    for _ in 0..3 {
        combos.push(("float16", "bfloat16", "bfloat16"));
    }
    combos
        .into_iter()
        .enumerate()
        .map(|(k, (s, x, w))| {
            let mut cfg = Cfg::base();
            (cfg.state, cfg.input, cfg.weight) = (s, x, w);
            cfg.index = ["int32", "int64"][k % 2];
            // num_accepted_tokens and cu_seqlens of the other dtype in some problems.
            cfg.aux_index = (k % 5 == 1).then_some(["int64", "int32"][k % 2]);
            cfg.dstate = [64, 128, 256][k % 3];
            cfg.dim = [1, 5, 64, 100][k % 4];
            cfg.tokens = 1 + rng.below(16) as usize;
            cfg.write = WRITES[k % WRITES.len()];
            cfg.read = [
                Read::OneD,
                Read::TwoD { nat: true },
                Read::None,
                Read::TwoD { nat: false },
            ][k % 4];
            cfg.varlen = k % 3 == 1;
            cfg.pads = k % 2 == 1;
            cfg.pad_slot_id = if k % 5 == 2 { 0 } else { -1 };
            cfg.z = k % 3 != 2;
            cfg.d = k % 4 != 3;
            cfg.dt_bias = k % 5 != 4;
            cfg.softplus = k % 6 != 5;
            cfg.disable_state_update = k % 7 == 3;
            cfg.padded_strides = rng.coin();
            cfg.batch = 1 + rng.below(4) as usize;
            (cfg.nheads, cfg.ngroups) = [(8, 2), (4, 1), (8, 8), (16, 4)][rng.below(4) as usize];
            cfg.rounds = [0, 5, 10][k % 3];
            Problem::new(cfg, rng)
        })
        .collect()
}

/// Every write mode × fixed/varlen × pad id -1/0, with and without disable_state_update
/// (final-only: no write at all), hot dtypes, rounds cycling 0/5/10.
fn write_modes(rng: &mut Rng) -> Vec<Problem> {
    let mut v = Vec::new();
    let mut k = 0usize;
    for write in WRITES {
        for varlen in [false, true] {
            for pad_slot_id in [-1i64, 0] {
                let mut cfg = Cfg::base();
                cfg.write = write;
                cfg.varlen = varlen;
                cfg.pad_slot_id = pad_slot_id;
                cfg.pads = true;
                cfg.batch = 5;
                (cfg.nheads, cfg.ngroups) = (4, 2);
                cfg.tokens = [4, 8, 6, 16][k % 4];
                cfg.read = if k % 2 == 0 {
                    Read::TwoD { nat: true }
                } else {
                    Read::OneD
                };
                cfg.disable_state_update = k % 3 == 0;
                cfg.rounds = [0, 5, 10][k % 3];
                cfg.padded_strides = k % 2 == 1;
                cfg.index = ["int32", "int64"][(k / 2) % 2];
                k += 1;
                v.push(Problem::new(cfg, rng));
            }
        }
        if write == Write::Final {
            for disable in [false, true] {
                let mut cfg = Cfg::base();
                cfg.write = Write::Final;
                cfg.disable_state_update = disable;
                cfg.read = Read::None;
                cfg.rounds = 10;
                v.push(Problem::new(cfg, rng));
            }
        }
    }
    v
}

/// T = 1..16 (fixed length and varlen), dstate and dim cycling, 2-D read indices with
/// `num_accepted_tokens` on every other T.
fn token_counts(rng: &mut Rng) -> Vec<Problem> {
    (1..=16usize)
        .map(|t| {
            let mut cfg = Cfg::base();
            cfg.tokens = t;
            cfg.varlen = t % 4 == 3;
            cfg.dstate = [64, 128, 256][t % 3];
            cfg.dim = [64, 5, 100, 1][t % 4];
            cfg.read = if t % 2 == 0 {
                Read::TwoD { nat: true }
            } else {
                Read::OneD
            };
            cfg.write = WRITES[t % WRITES.len()];
            cfg.pads = t % 3 == 0;
            // Every dstate with each round count (t % 3 picks the dstate).
            cfg.rounds = [0, 5, 10][(t + t / 3) % 3];
            cfg.batch = 2 + t % 3;
            cfg.padded_strides = t % 2 == 1;
            Problem::new(cfg, rng)
        })
        .collect()
}

/// (sequence, head) pairs from which the launcher runs the two-row kernels, and (without SR) the
/// four-row kernels (`kMtpTwoRowPairs`, `kMtpFourRowPairs` in `csrc/tuning.h`).
const TWO_ROW_PAIRS: usize = 1024;
const FOUR_ROW_PAIRS: usize = 4096;
/// The four-row grids of [`large_grid_cfgs`] (no SR, from `FOUR_ROW_PAIRS` pairs).
const LARGE_FOUR_ROW: usize = 6;

/// Grids of the two-row kernels (batch 33 x 32 heads = 1056 pairs, hot dtypes): every write
/// mode, fixed and varlen, pads, dims 64, 40 and 100 (a last pass of 8 or 18 of its 32 rows)
/// and 128 (two blocks per head), T 3, 5, 8 and 16, 0/5/10 rounds; four grids of the four-row
/// kernels (no SR, 33 x 128 = 4224 pairs; dims 64, 40 and 100, and 50 at T 14 with z, where the
/// shared memory sends the call to two rows); and at dstate 64 and 256 three two-row grids
/// (0/5/10 rounds) and one four-row grid each (two rows at dstate 256).
fn large_grids(rng: &mut Rng) -> Vec<Problem> {
    large_grid_cfgs()
        .into_iter()
        .map(|cfg| Problem::new(cfg, rng))
        .collect()
}

/// The configurations of [`large_grids`].
fn large_grid_cfgs() -> Vec<Cfg> {
    let mut v: Vec<Cfg> = (0..10usize)
        .map(|k| {
            let mut cfg = Cfg::base();
            cfg.write = WRITES[k % WRITES.len()];
            cfg.varlen = (k / 5) % 2 == 1;
            cfg.dim = [64, 40, 100, 128][k % 4];
            cfg.tokens = [8, 16, 3, 8, 5][(k + k / 5) % 5];
            cfg.rounds = [0, 5, 10][k % 3];
            cfg.pads = k % 3 != 0;
            cfg.pad_slot_id = [-1, 0][k % 2];
            cfg.disable_state_update = k % 4 == 3;
            cfg.read = if k % 2 == 0 {
                Read::TwoD { nat: true }
            } else {
                Read::OneD
            };
            cfg.index = ["int32", "int64"][(k / 2) % 2];
            cfg.padded_strides = k % 3 == 1;
            cfg.batch = 33;
            (cfg.nheads, cfg.ngroups) = (32, 8);
            cfg
        })
        .collect();
    v.extend((0..3usize).map(|k| {
        // Without SR from FOUR_ROW_PAIRS on: four rows per group (33 x 128 = 4224 pairs).
        let mut cfg = Cfg::base();
        cfg.write = [
            Write::Inter { indices: true },
            Write::Dst { in_place: true },
            Write::Final,
        ][k];
        cfg.varlen = k == 1;
        cfg.dim = [64, 40, 100][k];
        cfg.tokens = [8, 16, 5][k];
        cfg.rounds = 0;
        cfg.pads = k != 0;
        cfg.pad_slot_id = [-1, 0, -1][k];
        cfg.read = Read::TwoD { nat: true };
        cfg.index = ["int32", "int64", "int32"][k];
        cfg.padded_strides = k == 2;
        cfg.batch = 33;
        (cfg.nheads, cfg.ngroups) = (128, 8);
        cfg
    }));
    // Four rows asked at T 14 with z and 50 rows per block: 49 120 bytes of dynamic shared
    // memory, within 48 KiB only without the kernel's static part; two rows run.
    let mut cfg = Cfg::base();
    cfg.write = Write::Final;
    cfg.dim = 50;
    cfg.tokens = 14;
    cfg.read = Read::OneD;
    cfg.batch = 33;
    (cfg.nheads, cfg.ngroups) = (128, 8);
    v.push(cfg);
    // The compiled-in kernels at dstate 64 and 256: two rows (1056 pairs, 0/5/10 rounds; at
    // dstate 256 T 16 with z is one row: shared memory) and four rows asked (4224 pairs, no SR;
    // at dstate 256 two: tuning.h). Final-state writes at dstate 256 (a buffer would be large).
    for (i, dstate) in [64usize, 256].into_iter().enumerate() {
        for (j, rounds) in [0u32, 5, 10].into_iter().enumerate() {
            let mut cfg = Cfg::base();
            cfg.dstate = dstate;
            cfg.rounds = rounds;
            cfg.write = if dstate == 64 {
                WRITES[[0, 3, 4][j]]
            } else {
                Write::Final
            };
            cfg.varlen = j == 1;
            cfg.dim = [64, 40, 100][j];
            cfg.tokens = [8, 5, 16][(i + j) % 3];
            cfg.pads = j != 0;
            cfg.pad_slot_id = [-1, 0][(i + j) % 2];
            cfg.read = Read::TwoD { nat: true };
            cfg.index = ["int32", "int64"][j % 2];
            cfg.padded_strides = j == 2;
            cfg.batch = 33;
            (cfg.nheads, cfg.ngroups) = (32, 8);
            v.push(cfg);
        }
        let mut cfg = Cfg::base();
        cfg.dstate = dstate;
        cfg.write = Write::Final;
        cfg.read = Read::OneD;
        cfg.pads = true;
        cfg.batch = 33;
        (cfg.nheads, cfg.ngroups) = (128, 8);
        v.push(cfg);
    }
    v
}

fn run_set(name: &str, problems: &[Problem]) {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut failures = Vec::new();
    for p in problems {
        assert!(in_place_consistent(p));
        if let Some(f) = run_and_check(&stream, p) {
            eprintln!("FAIL {f}");
            failures.push(f);
        }
    }
    report(name, problems.len(), &failures, "failed");
}

/// Prints a set's tally and fails with its first 8 failures, if any (`what`: how a run failed).
fn report(name: &str, runs: usize, failures: &[String], what: &str) {
    eprintln!("{name}: {runs} runs, {} failures", failures.len());
    assert!(
        failures.is_empty(),
        "{name}: {} of {runs} runs {what}: {:#?}",
        failures.len(),
        &failures[..failures.len().min(8)]
    );
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn dtype_table_matches_f64_reference() {
    let mut rng = Rng(run_seed());
    run_set("dtype table", &dtype_table(&mut rng));
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn every_write_mode_matches_f64_reference_and_writes_nothing_else() {
    let mut rng = Rng(run_seed());
    run_set("write modes", &write_modes(&mut rng));
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn token_counts_1_to_16_match_f64_reference() {
    let mut rng = Rng(run_seed());
    run_set("token counts", &token_counts(&mut rng));
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn two_row_kernel_grids_match_f64_reference_and_write_nothing_else() {
    let mut rng = Rng(run_seed());
    run_set("large grids", &large_grids(&mut rng));
}

/// The same problem twice gives the same bytes (SR and round to nearest).
#[test]
#[ignore = "requires a CUDA GPU"]
fn runs_are_deterministic() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    for (rounds, write) in [
        (10, Write::Inter { indices: true }),
        (5, Write::Dst { in_place: true }),
        (0, Write::Final),
    ] {
        let mut cfg = Cfg::base();
        cfg.rounds = rounds;
        cfg.write = write;
        cfg.batch = 6;
        cfg.tokens = 16;
        let p = Problem::new(cfg, &mut rng);
        let a = run(&stream, &p);
        let b = run(&stream, &p);
        assert!(
            a.state == b.state && a.inter == b.inter && a.out == b.out,
            "{:?}: two runs differ",
            p.cfg
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Bit for bit: FlashInfer's operations and lane order, emulated in fp32
// ---------------------------------------------------------------------------------------------

/// An fp32 value as the kernels' build treats it (`-ftz=true`): a subnormal is a zero of its
/// sign.
fn ftz(v: f32) -> f32 {
    if v.is_subnormal() {
        f32::from_bits(v.to_bits() & 0x8000_0000)
    } else {
        v
    }
}
fn fmul(a: f32, b: f32) -> f32 {
    ftz(ftz(a) * ftz(b))
}
fn fadd(a: f32, b: f32) -> f32 {
    ftz(ftz(a) + ftz(b))
}
fn ffma(a: f32, b: f32, c: f32) -> f32 {
    ftz(ftz(a).mul_add(ftz(b), ftz(c)))
}

/// The column of lane `m`'s element `e` (of `lane_tile(dstate) / 8`) in FlashInfer's multi-token
/// kernel: 16-byte blocks of the row, lane m taking every 8th: `64 (e / 8) + 8 m + e % 8` for a
/// 2-byte state, `32 (e / 4) + 4 m + e % 4` for an fp32 one (`f32_map`).
fn lane_col(f32_map: bool, m: usize, e: usize) -> usize {
    if f32_map {
        32 * (e / 4) + 4 * m + e % 4
    } else {
        64 * (e / 8) + 8 * m + e % 8
    }
}

/// The columns FlashInfer's multi-token kernel tiles a row over: dstate at 64, 128 and 256, else
/// the next power of two (512 above 256; `mtp_tile` in `csrc/ssu_mtp.cuh`), 64 below 64; a lane's
/// blocks at columns past dstate are skipped (not loaded, updated, summed nor stored).
fn lane_tile(dstate: usize) -> usize {
    dstate.next_power_of_two().max(64)
}

fn decode_f32(dtype: &str, bytes: &[u8]) -> Vec<f32> {
    decode(dtype, bytes).into_iter().map(|v| v as f32).collect()
}

/// `v` rounded to nearest (ties to even) into `dtype`, as little-endian bytes written to `out`.
fn put_rn(dtype: &str, v: f32, out: &mut [u8]) {
    match dtype {
        "float32" => out.copy_from_slice(&v.to_le_bytes()),
        "float16" => out.copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes()),
        _ => out.copy_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes()),
    }
}

/// The storage offset of token row `row` of a token tensor with strides `st` (token, batch).
fn tok_off(p: &Problem, st: (usize, usize), row: usize) -> usize {
    if p.cfg.varlen {
        row * st.0
    } else {
        (row / p.cfg.tokens) * st.1 + (row % p.cfg.tokens) * st.0
    }
}

/// What the kernel must leave for `p` (`A` zero, no softplus, no `z`: every operation an exactly
/// rounded fp32 one), computed on the CPU with FlashInfer's multi-token operations in its lane
/// order (`f32_map`: the lane map of an fp32 state, else of a 2-byte one; see [`lane_col`]; over
/// [`lane_tile`] columns, a lane's blocks past the row skipped):
/// per token dt' = rn(dt + dt_bias), dA = ex2(0) = 1, dtx = rn(dt' x); even columns
/// s = fma(dA, s, rn(B dtx)), odd s = fma(B, dtx, rn(dA s)) with bf16 inputs, every column the
/// odd one's with fp16 or fp32 inputs over any state (FlashInfer's kernels with those inputs
/// contract both columns that way, `mtp_step_pair` in `csrc/ssu_mtp.cuh`); per lane acc_even and acc_odd =
/// fma(s, C, acc) over its even and odd elements in order, partial = rn(acc_even + acc_odd);
/// y = ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)) (shuffle-down 4, 2, 1); out =
/// fma(D, x, y) rounded to nearest; the written states rounded to nearest, or with SR by the
/// documented bits ([`mtp_random_bits`]) and 0.7.2's conversion. Where and which rows are
/// written is the f64 reference's (`r`); everything else keeps its uploaded bytes (0xFF in the
/// buffer and out).
fn emulate_fp32(p: &Problem, r: &MtpReference, f32_map: bool) -> After {
    let c = &p.cfg;
    assert!(
        c.a_zero && !c.softplus && !c.z,
        "the fp32 emulation needs A = 0, no softplus, no z"
    );
    let (sb, ib) = (dtype_size(c.state), dtype_size(c.input));
    let (nh, dim, ds) = (c.nheads, c.dim, c.dstate);
    let hb = nh * dim * ds;
    let state0 = decode_f32(c.state, &p.state);
    let x = decode_f32(c.input, &p.x);
    let bm = decode_f32(c.input, &p.b);
    let cm = decode_f32(c.input, &p.c);
    let dt = decode_f32(c.weight, &p.dt);
    let dt_bias = p.dt_bias.as_ref().map(|v| decode_f32(c.weight, v));
    let dd = p.d.as_ref().map(|v| decode_f32(c.weight, v));
    let mut state = p.state.clone();
    let mut inter = p.inter.map(|_| vec![0xFF; p.inter_elems() * sb]);
    let mut out = vec![0xFF; p.out_elems() * ib];
    let steps = p.inter.map_or(0, |i| i.1);
    let mapping = Mapping {
        stride: p.state_stride as u64,
        dim,
        dstate: ds,
        seed: p.seed as u64,
        rounds: c.rounds,
        sign_extend: true,
    };
    let hpg = nh / c.ngroups;
    let uniform = c.input != "bfloat16";
    let mut s = vec![0f32; ds];
    for (b, &(first, len)) in r.sequences.iter().enumerate() {
        // The sequence's write target of each step.
        let mut target: Vec<Option<MtpTarget>> = vec![None; len];
        for w in r.writes.iter().filter(|w| w.sequence == b) {
            assert!(target[w.step].is_none(), "two writes of one step");
            target[w.step] = Some(w.target);
        }
        let read = r.read_slots[b];
        for h in 0..nh {
            let g = h / hpg;
            for d in 0..dim {
                let inner = (h * dim + d) * ds;
                for (n, v) in s.iter_mut().enumerate() {
                    *v = read.map_or(0.0, |slot| state0[slot * p.state_stride + inner + n]);
                }
                for (t, tgt) in target.iter().enumerate() {
                    let row = first + t;
                    let mut dtp = dt[tok_off(p, p.dt_st, row) + h];
                    if let Some(bias) = &dt_bias {
                        dtp = fadd(dtp, bias[h]);
                    }
                    let da = 1.0f32; // ex2(rn(rn(0 * dt') * L2E)) = ex2(0)
                    let xv = x[tok_off(p, p.x_st, row) + h * dim + d];
                    let dtx = fmul(dtp, xv);
                    let bc = tok_off(p, p.bc_st, row) + g * ds;
                    for (n, v) in s.iter_mut().enumerate() {
                        let bv = bm[bc + n];
                        *v = if n % 2 == 0 && !uniform {
                            ffma(da, *v, fmul(bv, dtx))
                        } else {
                            ffma(bv, dtx, fmul(da, *v))
                        };
                    }
                    let mut part = [0f32; 8];
                    for (m, pm) in part.iter_mut().enumerate() {
                        let (mut acc_e, mut acc_o) = (0f32, 0f32);
                        for e in 0..lane_tile(ds) / 8 {
                            let n = lane_col(f32_map, m, e);
                            if n >= ds {
                                continue;
                            }
                            if e % 2 == 0 {
                                acc_e = ffma(s[n], cm[bc + n], acc_e);
                            } else {
                                acc_o = ffma(s[n], cm[bc + n], acc_o);
                            }
                        }
                        *pm = fadd(acc_e, acc_o);
                    }
                    let y = fadd(
                        fadd(fadd(part[0], part[4]), fadd(part[2], part[6])),
                        fadd(fadd(part[1], part[5]), fadd(part[3], part[7])),
                    );
                    let y = ffma(dd.as_ref().map_or(0.0, |v| v[h]), xv, y);
                    let e = out_offset(p, row, h, d);
                    put_rn(c.input, y, &mut out[e * ib..(e + 1) * ib]);
                    let Some(tgt) = tgt else { continue };
                    let (buf, base) = match *tgt {
                        MtpTarget::State(slot) => (&mut state, slot * p.state_stride + inner),
                        MtpTarget::Intermediate { entry, step } => (
                            inter.as_mut().expect("a buffer"),
                            (entry * steps + step) * hb + inner,
                        ),
                    };
                    for (n, &v) in s.iter().enumerate() {
                        let o = &mut buf[(base + n) * sb..(base + n + 1) * sb];
                        if c.rounds > 0 {
                            let bits = mtp_random_bits(&mapping, read.unwrap() as u64, h, d, n);
                            o.copy_from_slice(&sr_f16_bits(v, bits).to_le_bytes());
                        } else {
                            put_rn(c.state, v, o);
                        }
                    }
                }
            }
        }
    }
    After { state, inter, out }
}

/// The differences between the kernel's bytes and the emulation's, per tensor (`None`: equal).
fn exact_diff(p: &Problem, want: &After, got: &After) -> Option<String> {
    let c = &p.cfg;
    let cmp = |name: &str, dtype: &str, g: &[u8], w: &[u8]| -> Option<String> {
        let (n, ulps, first) = common::compare_elems(dtype, g, w);
        let (es, f) = (dtype_size(dtype), first?);
        Some(format!(
            "{name}: {n} elements differ (largest {ulps} ulps; first [{f}] {} vs {})",
            common::hex(&g[f * es..(f + 1) * es]),
            common::hex(&w[f * es..(f + 1) * es])
        ))
    };
    let mut bad: Vec<String> = Vec::new();
    bad.extend(cmp("state", c.state, &got.state, &want.state));
    match (&got.inter, &want.inter) {
        (Some(g), Some(w)) => bad.extend(cmp("buffer", c.state, g, w)),
        (None, None) => {}
        _ => bad.push("buffer presence differs".into()),
    }
    bad.extend(cmp("out", c.input, &got.out, &want.out));
    (!bad.is_empty()).then(|| format!("{:?}: {}", p.cfg, bad.join("; ")))
}

/// `cfg` made exactly emulable: `A` zero, no softplus, no `z`.
fn exact(mut cfg: Cfg) -> Cfg {
    cfg.a_zero = true;
    cfg.softplus = false;
    cfg.z = false;
    cfg
}

/// Small grids for the fp32 emulation: every (state, input) dtype pair at dstate 64, 128 and
/// 256 (the weight dtype, T, head dim, write and read modes, varlen, pads, index dtypes drawn),
/// and the compiled-in combinations at each dstate with 0, 5 and 10 rounds (the small-grid
/// kernels): an fp16 state with bf16 inputs and weights, and with fp16 ones (the fp16-input
/// kernels in a build with them).
fn exact_small(rng: &mut Rng) -> Vec<Problem> {
    let mut cfgs = Vec::new();
    for s in FLOATS {
        for x in FLOATS {
            for dstate in [64, 128, 256] {
                let mut cfg = exact(Cfg::base());
                (cfg.state, cfg.input, cfg.weight) = (s, x, FLOATS[rng.below(3) as usize]);
                cfg.dstate = dstate;
                cfg.rounds = [0, 5, 10][rng.below(3) as usize];
                cfgs.push(cfg);
            }
        }
    }
    for dstate in [64, 128, 256] {
        for rounds in [0, 5, 10] {
            for half in [false, true] {
                let mut cfg = exact(Cfg::base());
                cfg.dstate = dstate;
                cfg.rounds = rounds;
                if half {
                    (cfg.input, cfg.weight) = ("float16", "float16");
                }
                cfgs.push(cfg);
            }
        }
    }
    cfgs.into_iter()
        .map(|mut cfg| {
            draw_small_fields(&mut cfg, rng, true);
            Problem::new(cfg, rng)
        })
        .collect()
}

/// The fields [`exact_small`] and [`exact_long`] draw at random, in this order: the head dim, the
/// token count (when `tokens`), the write and read modes, varlen, pads and the pad slot, D,
/// dt_bias, disabled state updates, padded strides, the index dtype, the batch and the heads.
fn draw_small_fields(cfg: &mut Cfg, rng: &mut Rng, tokens: bool) {
    cfg.dim = [1, 5, 16, 64, 100][rng.below(5) as usize];
    if tokens {
        cfg.tokens = 1 + rng.below(16) as usize;
    }
    cfg.write = WRITES[rng.below(WRITES.len() as u64) as usize];
    cfg.read = [
        Read::OneD,
        Read::TwoD { nat: true },
        Read::None,
        Read::TwoD { nat: false },
    ][rng.below(4) as usize];
    cfg.varlen = rng.coin();
    cfg.pads = rng.coin();
    cfg.pad_slot_id = if rng.below(4) == 0 { 0 } else { -1 };
    cfg.d = rng.below(4) != 0;
    cfg.dt_bias = rng.below(4) != 0;
    cfg.disable_state_update = rng.below(6) == 0;
    cfg.padded_strides = rng.coin();
    cfg.index = ["int32", "int64"][rng.below(2) as usize];
    cfg.batch = 1 + rng.below(4) as usize;
    (cfg.nheads, cfg.ngroups) = [(8, 2), (4, 1), (8, 8), (16, 4)][rng.below(4) as usize];
}

/// Long rows for the fp32 emulation (the long-row kernels, `kMtpLongRows` in `csrc/ssu_mtp.cuh`:
/// one kernel per state kind over FlashInfer's 512-column tile, the row's length at run time):
/// an fp16, bf16 and fp32 state with bf16 and fp16 inputs (fp32 inputs and an int16 state are
/// not served above 256) at dstate 288 and 512, and with an fp32 state also at 272 (a multiple
/// of 16, not of 32); rounds 0, 5 and 10 with an fp16 state; T cycling up to 16, where the
/// block's shared memory (B and C of every token over the tile: 4 KiB a token) passes 48 KiB
/// and the kernel opts in; the other fields drawn as in [`exact_small`].
fn exact_long(rng: &mut Rng) -> Vec<Problem> {
    let mut cfgs = Vec::new();
    for s in FLOATS {
        for x in ["bfloat16", "float16"] {
            let dstates: &[usize] = if s == "float32" {
                &[272, 288, 512]
            } else {
                &[288, 512]
            };
            for &dstate in dstates {
                let mut cfg = exact(Cfg::base());
                (cfg.state, cfg.input, cfg.weight) = (s, x, FLOATS[rng.below(3) as usize]);
                cfg.dstate = dstate;
                cfg.rounds = if s == "float16" {
                    [0, 5, 10][cfgs.len() % 3]
                } else {
                    0
                };
                cfg.tokens = [4, 16, 1 + rng.below(16) as usize][cfgs.len() % 3];
                cfgs.push(cfg);
            }
        }
    }
    cfgs.into_iter()
        .map(|mut cfg| {
            draw_small_fields(&mut cfg, rng, false);
            Problem::new(cfg, rng)
        })
        .collect()
}

/// Larger grids of the compiled-in combination for the fp32 emulation, at dstate 64, 128 and
/// 256 with 0, 5 and 10 rounds: one row per group past the small-grid sizes (24 x 32 = 768
/// (sequence, head) pairs), two rows (33 x 32 = 1056 pairs), and without SR four rows (33 x 128
/// = 4224 pairs); at 1056 pairs also T 16 at dstate 256 (shared memory: one row per group) and
/// T 13 (two rows); at 4224 pairs T 15 with 40 rows per block at dstate 128 (the four-row
/// kernel's shared memory with the static part just past 48 KiB: two rows); and a bf16 state
/// without SR (the compiled-in bf16-state kernels) at 768, 1056 and 4224 pairs at each dstate;
/// and fp16 inputs and weights over an fp16 state at the same grid forms, and over a bf16 state
/// without SR at one, two and four rows (the fp16-input kernels in a build with them).
fn exact_large(rng: &mut Rng) -> Vec<Problem> {
    let mut cfgs = Vec::new();
    for (i, dstate) in [64usize, 128, 256].into_iter().enumerate() {
        for (j, rounds) in [0u32, 5, 10].into_iter().enumerate() {
            for (batch, nheads) in [(24usize, 32usize), (33, 32)] {
                let k = i + j + batch;
                let mut cfg = exact(Cfg::base());
                cfg.dstate = dstate;
                cfg.rounds = rounds;
                (cfg.batch, cfg.nheads, cfg.ngroups) = (batch, nheads, 8);
                cfg.dim = [40, 64][k % 2];
                cfg.tokens = [5, 8][(k / 2) % 2];
                cfg.write = [
                    Write::Inter { indices: true },
                    Write::Dst { in_place: true },
                    Write::Final,
                ][k % 3];
                cfg.read = Read::TwoD { nat: true };
                cfg.varlen = k % 2 == 1;
                cfg.pads = true;
                cfg.pad_slot_id = [-1, 0][(k / 3) % 2];
                cfg.index = ["int32", "int64"][j % 2];
                cfg.padded_strides = k % 3 == 1;
                cfgs.push(cfg);
            }
        }
        // Four rows (no SR), final-state writes (the buffer of 4224 heads would be large).
        let mut cfg = exact(Cfg::base());
        cfg.dstate = dstate;
        (cfg.batch, cfg.nheads, cfg.ngroups) = (33, 128, 8);
        cfg.dim = 64;
        cfg.tokens = 8;
        cfg.write = Write::Final;
        cfg.read = Read::OneD;
        cfg.varlen = i == 1;
        cfg.pads = true;
        cfgs.push(cfg);
    }
    for tokens in [13, 16] {
        let mut cfg = exact(Cfg::base());
        cfg.dstate = 256;
        (cfg.batch, cfg.nheads, cfg.ngroups) = (33, 32, 8);
        cfg.dim = 64;
        cfg.tokens = tokens;
        cfg.write = Write::Final;
        cfg.read = Read::OneD;
        cfg.rounds = 10;
        cfgs.push(cfg);
    }
    let mut cfg = exact(Cfg::base());
    (cfg.batch, cfg.nheads, cfg.ngroups) = (33, 128, 8);
    cfg.dim = 40;
    cfg.tokens = 15;
    cfg.write = Write::Final;
    cfg.read = Read::OneD;
    cfgs.push(cfg);
    // A bf16 state (no SR) in the compiled-in kernels' grid forms: one row (mid grid), two
    // rows, four rows (two at dstate 256).
    for dstate in [64usize, 128, 256] {
        for (k, (batch, nheads)) in [(24usize, 32usize), (33, 32), (33, 128)]
            .into_iter()
            .enumerate()
        {
            let mut cfg = exact(Cfg::base());
            cfg.state = "bfloat16";
            cfg.dstate = dstate;
            (cfg.batch, cfg.nheads, cfg.ngroups) = (batch, nheads, 8);
            cfg.dim = [40, 64, 64][k];
            cfg.tokens = [5, 8, 8][k];
            cfg.write = [
                Write::Inter { indices: true },
                Write::Dst { in_place: true },
                Write::Final,
            ][k];
            cfg.read = [
                Read::TwoD { nat: true },
                Read::TwoD { nat: true },
                Read::OneD,
            ][k];
            cfg.varlen = k == 0;
            cfg.pads = true;
            cfg.padded_strides = k == 1;
            cfgs.push(cfg);
        }
    }
    // fp16 inputs and weights (an fp16 model) in the compiled-in kernels' grid forms: over an
    // fp16 state one row (mid grid) and two rows with 0, 5 and 10 rounds, four rows without SR;
    // over a bf16 state (no SR) one, two and four rows (the fp16-input kernels in a build with
    // them, `MAMBA_SSU_F16_INPUT_KERNELS=1`; the run-time kernel otherwise).
    let forms = [
        ("float16", 24usize, 32usize, 0u32),
        ("float16", 24, 32, 5),
        ("float16", 33, 32, 10),
        ("float16", 33, 32, 0),
        ("float16", 33, 32, 5),
        ("float16", 33, 128, 0),
        ("bfloat16", 24, 32, 0),
        ("bfloat16", 33, 32, 0),
        ("bfloat16", 33, 128, 0),
    ];
    for dstate in [64usize, 128, 256] {
        for (k, (state, batch, nheads, rounds)) in forms.into_iter().enumerate() {
            let mut cfg = exact(Cfg::base());
            (cfg.state, cfg.input, cfg.weight) = (state, "float16", "float16");
            cfg.dstate = dstate;
            cfg.rounds = rounds;
            (cfg.batch, cfg.nheads, cfg.ngroups) = (batch, nheads, 8);
            cfg.dim = [40, 64][k % 2];
            cfg.tokens = [5, 8, 3][k % 3];
            cfg.write = [
                Write::Inter { indices: true },
                Write::Dst { in_place: true },
                Write::Final,
            ][k % 3];
            cfg.read = if nheads == 128 {
                Read::OneD
            } else {
                Read::TwoD { nat: true }
            };
            cfg.varlen = k % 2 == 0;
            cfg.pads = true;
            cfg.pad_slot_id = [-1, 0][k % 2];
            cfg.index = ["int32", "int64"][(k / 2) % 2];
            cfg.padded_strides = k == 1;
            cfgs.push(cfg);
        }
    }
    cfgs.into_iter().map(|cfg| Problem::new(cfg, rng)).collect()
}

/// Runs `problems` and compares every byte with [`emulate_fp32`] in the lane map of each
/// problem's state dtype; also holds them to the f64 reference ([`check`]).
fn run_exact_set(name: &str, problems: &[Problem]) {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    // The f64 reference and the fp32 emulation are the test's cost (the kernel runs take
    // milliseconds): computed on the host's cores, a few problems at a time (a large problem's
    // reference holds every token's f64 state), then checked against the kernel in order.
    let width = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let mut failures = Vec::new();
    for chunk in problems.chunks(width) {
        let expected: Vec<(MtpReference, After)> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|p| {
                    s.spawn(move || {
                        let r = reference(p);
                        let want = emulate_fp32(p, &r, p.cfg.state == "float32");
                        (r, want)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("reference thread panicked"))
                .collect()
        });
        for (p, (r, want)) in chunk.iter().zip(&expected) {
            let got = run(&stream, p);
            let mut bad: Vec<String> = exact_diff(p, want, &got).into_iter().collect();
            let tol = check(p, r, &got);
            if !tol.is_empty() {
                bad.push(format!("{:?} (f64 reference): {}", p.cfg, tol.join("; ")));
            }
            if !bad.is_empty() {
                let f = bad.join(" | ");
                eprintln!("FAIL {f}");
                failures.push(f);
            }
        }
    }
    report(
        name,
        problems.len(),
        &failures,
        "differ from the fp32 emulation",
    );
}

/// Bit for bit: every state dtype in FlashInfer's lane map (4-column blocks with an fp32 state,
/// 8-column blocks with a 2-byte one), every (state, input) pair, dstate 64/128/256, the
/// compiled-in combination with 0/5/10 rounds on small grids: state, buffer and out equal the
/// fp32 emulation ([`emulate_fp32`]).
#[test]
#[ignore = "requires a CUDA GPU"]
fn lane_order_bit_exact_every_dtype_and_dstate() {
    let mut rng = Rng(run_seed());
    run_exact_set("exact, small grids", &exact_small(&mut rng));
}

/// Bit for bit above dstate 256 ([`exact_long`]): the long-row kernels, FlashInfer's 512-column
/// tile with a lane's blocks past the row skipped, every state and input dtype they serve.
#[test]
#[ignore = "requires a CUDA GPU"]
fn lane_order_bit_exact_long_dstates() {
    let mut rng = Rng(run_seed());
    run_exact_set("exact, long dstates", &exact_long(&mut rng));
}

/// Bit for bit on the grids of the compiled-in kernels' other forms (one, two and four rows per
/// group, the shared-memory fallbacks; fp16 and bf16 states) at dstate 64, 128 and 256
/// ([`exact_large`]).
#[test]
#[ignore = "requires a CUDA GPU"]
fn lane_order_bit_exact_compiled_kernel_grids() {
    let mut rng = Rng(run_seed());
    run_exact_set("exact, large grids", &exact_large(&mut rng));
}

/// The fp32 emulation is the kernel's computation: it passes the f64 reference's tolerance
/// check on every small exact problem; and the check can tell the lane maps apart: with the
/// other lane map `out` differs (at some elements of these problems) while the state, which
/// does not depend on the lane order, does not.
#[test]
fn the_fp32_emulation_passes_the_reference_and_tells_the_lane_maps_apart() {
    let mut rng = Rng(0x1A9E);
    let problems = exact_small(&mut rng);
    let (mut out_differs, mut f32_out_differs) = (0usize, 0usize);
    for p in &problems {
        let r = reference(p);
        let f32_map = p.cfg.state == "float32";
        let want = emulate_fp32(p, &r, f32_map);
        let bad = check(p, &r, &want);
        assert!(bad.is_empty(), "{:?}: {bad:?}", p.cfg);
        let other = emulate_fp32(p, &r, !f32_map);
        assert!(
            other.state == want.state && other.inter == want.inter,
            "{:?}: the state depends on the lane map",
            p.cfg
        );
        let n = common::compare_elems(p.cfg.input, &other.out, &want.out).0;
        out_differs += n;
        if f32_map {
            f32_out_differs += n;
        }
    }
    assert!(
        f32_out_differs > 0 && out_differs > f32_out_differs,
        "the lane maps give the same out ({out_differs}, fp32 state {f32_out_differs})"
    );
}

/// The fp32 emulation passes the f64 reference's tolerance check above dstate 256 too
/// ([`exact_long`]: its [`lane_tile`] of 512 columns, a lane's blocks past the row skipped).
#[test]
fn the_fp32_emulation_passes_the_reference_at_long_dstates() {
    let mut rng = Rng(0x104E);
    for p in &exact_long(&mut rng) {
        let r = reference(p);
        let want = emulate_fp32(p, &r, p.cfg.state == "float32");
        let bad = check(p, &r, &want);
        assert!(bad.is_empty(), "{:?}: {bad:?}", p.cfg);
    }
}

// ---------------------------------------------------------------------------------------------
// Stochastic-rounding bits
// ---------------------------------------------------------------------------------------------

/// The documented random number of element (read slot, h, d, n) (`csrc/ssu_mtp.cuh`): column
/// pairs; Philox counter (lo32(o), 0xFFFFFFFF when bit 31 of lo32(o) is set else 0, 0, 0) with
/// `o = read_slot · stride + h·dim·dstate + d·dstate + 4·floor(n / 4)`; word `(n mod 4) >> 1`,
/// bits 12..0 for even `n`, 28..16 for odd `n`.
fn mtp_random_bits(m: &Mapping, read_slot: u64, h: usize, d: usize, n: usize) -> u32 {
    let o = read_slot
        .wrapping_mul(m.stride)
        .wrapping_add((h * m.dim * m.dstate + d * m.dstate + 4 * (n / 4)) as u64);
    let counter = if m.sign_extend {
        let lo = o as u32;
        [lo, if lo & 0x8000_0000 != 0 { u32::MAX } else { 0 }, 0, 0]
    } else {
        philox::counter_of(o)
    };
    let w = philox::philox4x32(counter, philox::key_of(m.seed), m.rounds)[(n % 4) >> 1];
    (w >> (16 * (n & 1))) & 0x1FFF
}

/// A random mapping: the documented one (`sign_extend`), or the same with the full 64-bit
/// offset in the counter (the alternative the sign-extension checks tell apart).
struct Mapping {
    stride: u64,
    dim: usize,
    dstate: usize,
    seed: u64,
    rounds: u32,
    sign_extend: bool,
}

/// Whether fp32 `v` with random bits `r` lies within `margin` fp32 ulps of an SR decision
/// boundary (where the kernel's fp32 value and the f64 reference's may round differently).
fn near_boundary(v: f32, r: u32, margin: u32) -> bool {
    // The fp16 result is floor((bits + r) / 2^13): it changes with the fp32 value where
    // (bits + r) mod 2^13 is near 0.
    let m = ((v.to_bits() & 0x1FFF) + r) & 0x1FFF;
    m < margin || m > 0x2000 - margin
}

/// Over the written steps of every sequence: (agreeing, compared) of the kernel's fp16 bits
/// with the software SR of the reference value under `m`, skipping near-boundary elements.
/// `got(target, step, h, d, n)` reads the kernel's bits.
fn agreement(
    r: &MtpReference,
    m: &Mapping,
    value: impl Fn(&MtpTarget, usize, usize, usize) -> f64,
    got: impl Fn(&MtpTarget, usize, usize, usize) -> u16,
) -> (usize, usize) {
    let (mut agree, mut total) = (0usize, 0usize);
    for w in &r.writes {
        for h in 0..r.nheads {
            for d in 0..r.dim {
                for n in 0..r.dstate {
                    let v = value(&w.target, h, d, n) as f32;
                    let bits = mtp_random_bits(m, w.read_slot as u64, h, d, n);
                    if near_boundary(v, bits, 64) {
                        continue;
                    }
                    total += 1;
                    agree += usize::from(sr_f16_bits(v, bits) == got(&w.target, h, d, n));
                }
            }
        }
    }
    (agree, total)
}

/// Predicted SR bits agree with the kernel's for dstate 64/128/256, 1, 5, 10 and 12 rounds (1 and
/// 12: the run-time kernel; FlashInfer takes any count >= 1), in the
/// intermediate buffer (every step) and the final-only state; a mapping with the columns in
/// groups of four words instead of pairs must not.
#[test]
#[ignore = "requires a CUDA GPU"]
fn sr_bits_follow_the_documented_mapping() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(run_seed());
    for rounds in [1u32, 5, 10, 12] {
        for dstate in [64, 128, 256] {
            for write in [Write::Inter { indices: true }, Write::Final] {
                let mut cfg = Cfg::base();
                cfg.rounds = rounds;
                cfg.dstate = dstate;
                cfg.write = write;
                cfg.padded_strides = true;
                let p = Problem::new(cfg, &mut rng);
                let r = reference(&p);
                let got = run(&stream, &p);
                let gs = common::as_u16(&got.state);
                let gi = got.inter.as_ref().map(|b| common::as_u16(b));
                let steps = p.inter.map_or(0, |i| i.1);
                let hb = p.cfg.nheads * p.cfg.dim * dstate;
                let idx = |t: &MtpTarget, h: usize, d: usize, n: usize| -> (bool, usize) {
                    let inner = (h * p.cfg.dim + d) * dstate + n;
                    match *t {
                        MtpTarget::State(s) => (false, s * p.state_stride + inner),
                        MtpTarget::Intermediate { entry, step } => {
                            (true, (entry * steps + step) * hb + inner)
                        }
                    }
                };
                let value = |t: &MtpTarget, h, d, n| {
                    let (buf, e) = idx(t, h, d, n);
                    if buf {
                        r.intermediate.as_ref().unwrap()[e]
                    } else {
                        r.state[e]
                    }
                };
                let bits = |t: &MtpTarget, h, d, n| {
                    let (buf, e) = idx(t, h, d, n);
                    if buf {
                        gi.as_ref().unwrap()[e]
                    } else {
                        gs[e]
                    }
                };
                let m = Mapping {
                    stride: p.state_stride as u64,
                    dim: p.cfg.dim,
                    dstate,
                    seed: p.seed as u64,
                    rounds,
                    sign_extend: true,
                };
                let (a, n) = agreement(&r, &m, value, bits);
                // The alternative: the single-token simple layout's groups (word n % 4).
                let (mut wrong_agree, mut wrong_total) = (0usize, 0usize);
                for w in &r.writes {
                    for h in 0..r.nheads {
                        for d in 0..r.dim {
                            for c in 0..dstate {
                                let v = value(&w.target, h, d, c) as f32;
                                let o = (w.read_slot as u64) * m.stride
                                    + ((h * m.dim + d) * dstate + 4 * (c / 4)) as u64;
                                let word = philox::philox4x32(
                                    philox::counter_of(o),
                                    philox::key_of(m.seed),
                                    rounds,
                                )[c % 4]
                                    & 0x1FFF;
                                wrong_total += 1;
                                wrong_agree +=
                                    usize::from(sr_f16_bits(v, word) == bits(&w.target, h, d, c));
                            }
                        }
                    }
                }
                let f = a as f64 / n.max(1) as f64;
                let fw = wrong_agree as f64 / wrong_total.max(1) as f64;
                eprintln!(
                    "R{rounds} dstate {dstate} {write:?}: documented mapping agrees on {f:.5} of \
                     {n}; groups of four words: {fw:.5}"
                );
                assert!(n > 0, "nothing compared");
                assert!(
                    f >= 0.99,
                    "R{rounds} dstate {dstate} {write:?}: agreement {f}"
                );
                assert!(fw < 0.97, "the check cannot tell the mappings apart ({fw})");
            }
        }
    }
}

/// A state slot stride of 2^31 - 4096 elements (fp16; 3 slots: 12 GiB of address space, only
/// the two read slots' head blocks mapped): slot 1's offsets cross 2^31 inside head 0 (the
/// counter's word 1 becomes 0xFFFFFFFF), slot 2's start above 2^32 - 2^13 and wrap past 2^32
/// (the truncated offset drops back below 2^31). The kernel's fp16 buffer entries must follow
/// the documented (truncated, sign-extended) mapping on >= 99% of the elements away from a
/// rounding boundary, and the full 64-bit offset must be told apart; `out` is checked against
/// the reference; no mapped state byte may change (the intermediate buffer takes the writes).
#[test]
#[ignore = "requires a CUDA GPU"]
fn sr_offsets_sign_extend_past_2_pow_31_sparse_state() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let stride: u64 = (1 << 31) - 4096;
    let (nheads, dim, dstate, ngroups, batch, t) = (8usize, 64usize, 128usize, 2usize, 2, 4);
    let slots = 3usize;
    let hb = nheads * dim * dstate;
    let read_slots = [1i64, 2];
    let seed: i64 = 0x0123_4567_89AB_CDEF;
    let gseed = 0x5EED_2031u64;
    let bf = |tag, n| gen::to_dtype_bytes(&gen::values_f32(gseed, tag, 0, n), "bfloat16");
    let x = bf(gen::TAG_X, batch * t * nheads * dim);
    let dt = bf(gen::TAG_DT, batch * t * nheads);
    let dt_bias = bf(gen::TAG_DT_BIAS, nheads);
    let d = bf(gen::TAG_D, nheads);
    let b = bf(gen::TAG_B, batch * t * ngroups * dstate);
    let c = bf(gen::TAG_C, batch * t * ngroups * dstate);
    let a = gen::to_dtype_bytes(&gen::values_f32(gseed, gen::TAG_A, 0, nheads), "float32");
    // The read slots' blocks, generated at their real offsets, and a compact host copy.
    let mut compact = vec![0u8; slots * hb * 2];
    let mut blocks = Vec::new();
    for &s in &read_slots {
        let start = s as u64 * stride;
        let bytes = gen::to_dtype_bytes(
            &gen::values_f32(gseed, gen::TAG_STATE, start, hb),
            "float16",
        );
        compact[s as usize * hb * 2..(s as usize + 1) * hb * 2].copy_from_slice(&bytes);
        blocks.push((start, bytes));
    }
    // The reference on the compact layout: the offsets only matter to the random bits.
    let base = Problem {
        cfg: {
            let mut cfg = Cfg::base();
            (cfg.batch, cfg.tokens, cfg.nheads, cfg.ngroups, cfg.z) =
                (batch, t, nheads, ngroups, false);
            cfg.rounds = 10;
            cfg
        },
        slots,
        state_stride: hb,
        rows: t,
        x_st: (nheads * dim, t * nheads * dim),
        dt_st: (nheads, t * nheads),
        bc_st: (ngroups * dstate, t * ngroups * dstate),
        out_st: (nheads * dim, t * nheads * dim),
        state: compact,
        x: x.clone(),
        z: None,
        dt: dt.clone(),
        a: a.clone(),
        b: b.clone(),
        c: c.clone(),
        d: Some(d.clone()),
        dt_bias: Some(dt_bias.clone()),
        sbi: Some((read_slots.to_vec(), vec![batch])),
        dst: None,
        nat: None,
        cu: None,
        inter: Some((batch, t)),
        inter_idx: Some(vec![0, 1]),
        seed,
    };
    let r = reference(&base);

    let byte_ranges: Vec<(u64, u64)> = blocks
        .iter()
        .map(|(o, bytes)| (o * 2, o * 2 + bytes.len() as u64))
        .collect();
    let mut state = common::SparseStorage::sparse(
        &ctx,
        &stream,
        "float16",
        slots as u64 * stride,
        &byte_ranges,
    );
    assert!(state.is_sparse());
    for (lo, hi) in state.mapped.clone() {
        state
            .buf_mut()
            .fill_bytes(&stream, lo as usize, (hi - lo) as usize, STATE_PATTERN);
    }
    for (off, bytes) in &blocks {
        state.buf_mut().write_bytes(&stream, *off as usize, bytes);
    }
    let before = state.download();
    let mut dev = upload(&stream, &base);
    let mut cl = call(&base, &mut dev);
    cl.state = mtp_dev::Out {
        buf: state.buf_mut(),
        shape: vec![slots, nheads, dim, dstate],
        strides: vec![stride as usize, dim * dstate, dstate, 1],
    };
    mtp_dev::launch(&stream, &mut cl).expect("launch");
    drop(cl);
    stream.synchronize().expect("kernel");
    let after_state = state.download();
    assert!(
        before == after_state,
        "the state changed (intermediate-buffer mode)"
    );
    let gi = common::as_u16(&dev.inter.as_mut().unwrap().download_all(&stream));
    let out = dev.out.download_all(&stream);
    let want_buf = r.intermediate.as_ref().unwrap();
    let idx = |tg: &MtpTarget, h: usize, d: usize, n: usize| match *tg {
        MtpTarget::Intermediate { entry, step } => {
            (entry * t + step) * hb + (h * dim + d) * dstate + n
        }
        MtpTarget::State(_) => unreachable!("buffer mode"),
    };
    let mut results = Vec::new();
    for sign_extend in [true, false] {
        let m = Mapping {
            stride,
            dim,
            dstate,
            seed: seed as u64,
            rounds: 10,
            sign_extend,
        };
        let (a, n) = agreement(
            &r,
            &m,
            |tg, h, d, c| want_buf[idx(tg, h, d, c)],
            |tg, h, d, c| gi[idx(tg, h, d, c)],
        );
        results.push((a as f64 / n.max(1) as f64, n));
    }
    eprintln!(
        "stride 2^31 - 4096: documented mapping agrees on {:.5} of {}; full 64-bit offset: {:.5}",
        results[0].0, results[0].1, results[1].0
    );
    assert!(
        results[0].0 >= 0.99,
        "the documented mapping: {}",
        results[0].0
    );
    assert!(
        results[1].0 < 0.97,
        "the full 64-bit offset agrees too ({}): the case does not test sign extension",
        results[1].0
    );
    // Values and poison of the buffer and out, as everywhere.
    let got = After {
        state: base.state.clone(),
        inter: Some(gi.iter().flat_map(|v| v.to_le_bytes()).collect()),
        out,
    };
    let bad = check(&base, &r, &got);
    assert!(bad.is_empty(), "{bad:?}");
}

// ---------------------------------------------------------------------------------------------
// CPU: the problems and the checker
// ---------------------------------------------------------------------------------------------

/// Every problem of the GPU sets (two fixed seeds; the GPU tests draw theirs) is accepted
/// by the API's host validation with the sizes it was built with, and (one seed, the cheaper
/// problems) by the reference; its launch plan (132 SMs) runs a compiled-in kernel exactly for
/// the hot dtypes with 0, 5 or 10 rounds and one index dtype, which the sets have at dstate 64,
/// 128 and 256.
#[test]
fn every_problem_is_valid_for_the_reference_and_the_api() {
    for (k, seed) in [0x5EEDu64, 0xDEAD_BEEF].into_iter().enumerate() {
        problems_are_valid(seed, k == 0);
    }
}

fn problems_are_valid(seed: u64, run_reference: bool) {
    use mamba_ssu::ssu::{mtp_launch_plan, validate_mtp};
    let mut hot_dstates = std::collections::BTreeSet::new();
    let mut rng = Rng(seed);
    let mut all = dtype_table(&mut rng);
    all.extend(write_modes(&mut rng));
    all.extend(token_counts(&mut rng));
    all.extend(exact_small(&mut rng));
    all.extend(exact_long(&mut rng));
    let large = large_grid_cfgs();
    assert!(large.iter().all(|c| c.batch * c.nheads >= TWO_ROW_PAIRS));
    assert_eq!(
        large
            .iter()
            .filter(|c| c.batch * c.nheads >= FOUR_ROW_PAIRS && c.rounds == 0)
            .count(),
        LARGE_FOUR_ROW
    );
    // Their inputs (up to 10^8 elements) are generated and validated in optimised builds only
    // (the GPU tests run those); an unoptimised test build would spend minutes filling them.
    if !cfg!(debug_assertions) {
        all.extend(large_grids(&mut rng));
        all.extend(exact_large(&mut rng));
    }
    let mut seen_zero_len = false;
    for p in &all {
        let c = &p.cfg;
        assert!(in_place_consistent(p));
        let spec = spec_of(p);
        let prob = validate_mtp(&spec).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        // The compiled-in kernels serve the hot dtypes at dstate 64, 128 and 256 with 0, 5 or
        // 10 rounds (a bf16 state without SR) and one index dtype; the GPU tests of those
        // problems run them.
        // fp16 inputs and weights over an fp16 or a bf16 state: in a build with the fp16-input
        // kernels.
        let f16_inputs = cfg!(f16_input_kernels)
            && (c.input, c.weight) == ("float16", "float16")
            && (c.state == "float16" || c.state == "bfloat16");
        let hot = [64, 128, 256].contains(&c.dstate)
            && ((c.input, c.weight) == ("bfloat16", "bfloat16") || f16_inputs)
            && (c.state == "float16" || (c.state == "bfloat16" && c.rounds == 0))
            && [0, 5, 10].contains(&c.rounds)
            && (p.aux_index() == c.index || (p.nat.is_none() && p.cu.is_none()));
        let plan = mtp_launch_plan(&spec, 132).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        assert_eq!(plan.compiled_kernel, hot, "{c:?}");
        if hot {
            hot_dstates.insert(c.dstate);
        }
        assert_eq!(
            (prob.batch, prob.nheads, prob.dim, prob.dstate, prob.ngroups),
            (c.batch, c.nheads, c.dim, c.dstate, c.ngroups)
        );
        assert_eq!(prob.ntokens, c.tokens, "{c:?}");
        if let Some(cu) = &p.cu {
            seen_zero_len |= cu.windows(2).any(|w| w[0] == w[1]);
        }
    }
    assert!(seen_zero_len, "no zero-length sequence in the sets");
    assert_eq!(
        hot_dstates.into_iter().collect::<Vec<_>>(),
        [64, 128, 256],
        "compiled-in kernels at every dstate"
    );
    // The reference accepts each (the cheap ones: every write mode and token count).
    if !run_reference {
        return;
    }
    for p in all
        .iter()
        .filter(|p| p.cfg.batch * p.cfg.tokens * p.cfg.nheads * p.cfg.dim * p.cfg.dstate <= 1 << 21)
    {
        let _ = reference(p);
    }
}

/// The API's description of `p`'s call (layouts, dtypes, rounds), for validation and the launch
/// plan.
fn spec_of(p: &Problem) -> mamba_ssu::ssu::MtpSpec {
    use mamba_ssu::ssu::{DType, MtpSpec, SeedSpec, TensorLayout};
    let dt = |s: &str| match s {
        "float16" => DType::F16,
        "bfloat16" => DType::BF16,
        "float32" => DType::F32,
        "int32" => DType::I32,
        _ => DType::I64,
    };
    let c = &p.cfg;
    let lay = |dtype: &str, (s, t): (Vec<usize>, Vec<usize>), len: usize| {
        TensorLayout::new(dt(dtype), &s, &t, len).unwrap()
    };
    let es = |bytes: &[u8], dtype: &str| bytes.len() / dtype_size(dtype);
    let idx_lay_as = |dtype: &str, shape: &[usize]| {
        let n: usize = shape.iter().product();
        TensorLayout::contiguous(dt(dtype), shape, n).unwrap()
    };
    let idx_lay = |shape: &[usize]| idx_lay_as(c.index, shape);
    let head = |bytes: &[u8]| {
        lay(
            c.weight,
            (vec![c.nheads, c.dim], vec![1, 0]),
            es(bytes, c.weight),
        )
    };
    MtpSpec {
        state: lay(c.state, p.state_shape(), es(&p.state, c.state)),
        x: lay(c.input, p.x_layout(), es(&p.x, c.input)),
        dt: lay(c.weight, p.dt_layout(), es(&p.dt, c.weight)),
        a: lay(
            "float32",
            (vec![c.nheads, c.dim, c.dstate], vec![1, 0, 0]),
            c.nheads,
        ),
        b: lay(c.input, p.bc_layout(), es(&p.b, c.input)),
        c: lay(c.input, p.bc_layout(), es(&p.c, c.input)),
        d: p.d.as_ref().map(|v| head(v)),
        z: p.z
            .as_ref()
            .map(|v| lay(c.input, p.x_layout(), es(v, c.input))),
        dt_bias: p.dt_bias.as_ref().map(|v| head(v)),
        state_batch_indices: p.sbi.as_ref().map(|(_, s)| idx_lay(s)),
        dst_state_batch_indices: p.dst.as_ref().map(|(_, s)| idx_lay(s)),
        num_accepted_tokens: p
            .nat
            .as_ref()
            .map(|_| idx_lay_as(p.aux_index(), &[c.batch])),
        cu_seqlens: p
            .cu
            .as_ref()
            .map(|_| idx_lay_as(p.aux_index(), &[c.batch + 1])),
        intermediate_states_buffer: p.inter_shape().map(|l| lay(c.state, l, p.inter_elems())),
        intermediate_state_indices: p.inter_idx.as_ref().map(|_| idx_lay(&[c.batch])),
        state_scale: None,
        intermediate_state_scales: None,
        cache_steps: p.cache_steps(),
        out: lay(c.input, p.out_layout(), p.out_elems()),
        philox_rounds: c.rounds,
        seed: (c.rounds > 0).then(|| SeedSpec::Pointer(idx_lay_i64())),
    }
}

fn idx_lay_i64() -> mamba_ssu::ssu::TensorLayout {
    mamba_ssu::ssu::TensorLayout::contiguous(mamba_ssu::ssu::DType::I64, &[1], 1).unwrap()
}

/// The kernel emulated from the reference: the written state and buffer places and the out rows
/// rounded to nearest from the f64 values, everything else as uploaded.
fn emulate(p: &Problem, r: &MtpReference) -> After {
    let c = &p.cfg;
    let (st_mask, in_mask) = written_mask(p, r);
    let enc = |dtype: &str, v: f64| -> Vec<u8> { gen::to_dtype_bytes(&[v as f32], dtype) };
    let sb = dtype_size(c.state);
    let mut state = p.state.clone();
    for (e, w) in st_mask.iter().enumerate() {
        if *w {
            state[e * sb..(e + 1) * sb].copy_from_slice(&enc(c.state, r.state[e]));
        }
    }
    let inter = r.intermediate.as_ref().map(|want| {
        let mut b = vec![0xFF; p.inter_elems() * sb];
        for (e, w) in in_mask.iter().enumerate() {
            if *w {
                b[e * sb..(e + 1) * sb].copy_from_slice(&enc(c.state, want[e]));
            }
        }
        b
    });
    let ib = dtype_size(c.input);
    let mut out = vec![0xFF; p.out_elems() * ib];
    for &(first, len) in &r.sequences {
        for row in first..first + len {
            for h in 0..c.nheads {
                for d in 0..c.dim {
                    let e = out_offset(p, row, h, d);
                    let v = r.out[(row * c.nheads + h) * c.dim + d];
                    out[e * ib..(e + 1) * ib].copy_from_slice(&enc(c.input, v));
                }
            }
        }
    }
    After { state, inter, out }
}

/// The checker passes the emulated kernel and fails it after one changed byte: in a written
/// state slot's stride padding, an unwritten buffer step, an out row no sequence covers (or
/// its stride padding), and a written value.
#[test]
fn the_checker_passes_an_emulated_kernel_and_catches_stray_bytes() {
    let mut rng = Rng(0xC4EC);
    let mut problems = Vec::new();
    for write in WRITES {
        for varlen in [false, true] {
            let mut cfg = Cfg::base();
            cfg.write = write;
            cfg.varlen = varlen;
            cfg.pads = true;
            cfg.padded_strides = true;
            cfg.batch = 3;
            cfg.tokens = 5;
            cfg.dim = 5;
            cfg.dstate = 64;
            cfg.nheads = 4;
            cfg.read = if varlen {
                Read::TwoD { nat: true }
            } else {
                Read::OneD
            };
            cfg.pad_slot_id = if varlen { 0 } else { -1 };
            cfg.rounds = 10;
            problems.push(Problem::new(cfg, &mut rng));
        }
    }
    for p in &problems {
        let r = reference(p);
        let good = emulate(p, &r);
        let bad = check(p, &r, &good);
        assert!(
            bad.is_empty(),
            "{:?}: the emulated kernel fails: {bad:?}",
            p.cfg
        );
        let (st_mask, in_mask) = written_mask(p, &r);
        let sb = dtype_size(p.cfg.state);
        // A stray state byte (outside the writes).
        if let Some(e) = st_mask.iter().position(|w| !w) {
            let mut g = emulate(p, &r);
            g.state[e * sb] ^= 0x40;
            assert!(
                !check(p, &r, &g).is_empty(),
                "{:?}: stray state byte",
                p.cfg
            );
        }
        // A wrong written state value.
        if let Some(e) = st_mask.iter().position(|w| *w) {
            let mut g = emulate(p, &r);
            g.state[e * sb + sb - 1] ^= 0x20;
            assert!(
                !check(p, &r, &g).is_empty(),
                "{:?}: wrong state value",
                p.cfg
            );
        }
        // A stray buffer byte and a wrong buffer value.
        if let Some(e) = in_mask.iter().position(|w| !w) {
            let mut g = emulate(p, &r);
            g.inter.as_mut().unwrap()[e * sb] = 0;
            assert!(
                !check(p, &r, &g).is_empty(),
                "{:?}: stray buffer byte",
                p.cfg
            );
        }
        if let Some(e) = in_mask.iter().position(|w| *w) {
            let mut g = emulate(p, &r);
            g.inter.as_mut().unwrap()[e * sb + sb - 1] ^= 0x20;
            assert!(
                !check(p, &r, &g).is_empty(),
                "{:?}: wrong buffer value",
                p.cfg
            );
        }
        // A stray out byte: stride padding of the first row (padded strides).
        let mut g = emulate(p, &r);
        let ib = dtype_size(p.cfg.input);
        let pad_elem = p.cfg.nheads * p.cfg.dim; // first element past row 0's heads
        if pad_elem < p.out_elems() && p.out_st.0 > pad_elem {
            g.out[pad_elem * ib] = 0;
            assert!(!check(p, &r, &g).is_empty(), "{:?}: stray out byte", p.cfg);
        }
        // A wrong out value.
        if let Some(&(first, len)) = r.sequences.iter().find(|s| s.1 > 0) {
            let _ = len;
            let mut g = emulate(p, &r);
            let e = out_offset(p, first, 0, 0);
            g.out[e * ib + ib - 1] ^= 0x40;
            assert!(!check(p, &r, &g).is_empty(), "{:?}: wrong out value", p.cfg);
        }
    }
}
