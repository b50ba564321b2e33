//! Bit-exact GPU check of the multi-token SSU's stochastic rounding (SR) at edge values: both
//! conversions ([`SrRule::V072`], [`SrRule::V074`]), 5 and 10 Philox rounds, int32 and int64
//! indices, on three grids that reach different compiled kernels: batch 1 x 8 heads (a small
//! grid), batch 8 x 32 heads (256 (sequence, head) pairs, one row per group) and batch 40 x 32
//! heads (1280 pairs, two rows per group). Shapes: fp16 state, bf16 x/B/C/dt, fp32 A, dim 64,
//! dstate 128, 8 groups, T = 8 tokens, fixed length, every token's state written to the
//! intermediate buffer (`intermediate_state_indices`, cache_steps 8), read slots from
//! `state_batch_indices` (a permutation over more slots than sequences, slot stride padded),
//! the seed an int64 in device memory with bits above 32 set.
//!
//! Why the pre-rounding fp32 state is exactly computable here: A = 0 (dA = exp2(0) = 1
//! exactly), dt = 1, no dt_bias, no softplus, x = 1 everywhere, no D, no z. The kernel's update
//! of an even column, fma(dA, s, rn(B * dt * x)), and of an odd one, fma(B, dt * x,
//! rn(dA * s)), are then both rn(s + B): one IEEE fp32 addition, which plain Rust `f32`
//! addition reproduces. So with s_0 the fp16 initial state widened, s_t = s_{t-1} + B_t[n]
//! (B_t the bf16 row of token t for the head's group, shared by all rows d), and the state
//! written for token t is SR(s_t) with the element's 13 random bits (the same for every token of
//! the call). Two device facts are modelled: a NaN result is the canonical NaN 0x7FFFFFFF
//! (whatever NaN went in; under 0.7.2 its `+ r` carries into the sign bit), and the kernel
//! flushes fp32 subnormals, so every input here keeps each fp32 intermediate 0 or of magnitude
//! >= 2^-126 (all values are multiples of 2^-40).
//!
//! The inputs (fixed xorshift seed per grid) give each (sequence, group, column) a kind that
//! fixes its B per token and, for the rows picked as edge rows (a quarter), the initial state:
//! near 65504 with B of 8..600 of the same sign (the saturation window [65504, 65536) and
//! overflow), fp16 subnormals with tiny B (down to 2^-40; the results cross 2^-14), exact
//! cancellation (s_0 = x, B_0 = -x, then +y, -y), signed zeros (B = -0), initial +-Inf and NaN
//! states, and (in a quarter of the groups) a B of +-Inf or NaN at one token; every sign
//! mirrored. A quarter of the groups are ordinary only; the other rows are ordinary (s_0 in
//! [-4, 4], B in [-1, 1]), so the kernels' fast conversion paths and their exact fallbacks
//! both run within each row chunk. Every element of every token's buffer entry must match the
//! CPU conversion bit for bit; the unindexed buffer entries and the whole state storage must
//! keep their bytes. `out` is not checked.
//!
//! The CPU test (no GPU) builds the three problems, prints how many (element, token) states of
//! each value class each contains and checks the minimums, and passes their layouts through the
//! API's validation and launch plan.

mod common;
#[path = "common/mtp_dev.rs"]
mod mtp_dev;

use std::sync::Arc;

use common::DevBuf;
use cudarc::driver::CudaStream;
use half::{bf16, f16};
use mamba_ssu::philox;
use mamba_ssu::reference::{sr_f16_bits, sr_f16_bits_v074};
use mamba_ssu::ssu::{DType, SrRule};

const DIM: usize = 64;
const DSTATE: usize = 128;
const NGROUPS: usize = 8;
/// Tokens per sequence (and the buffer's cache_steps).
const T: usize = 8;
/// Extra elements after each state slot (the slot stride is not the slot's size).
const SLOT_PAD: usize = 256;
/// The fp32 NaN every device operation returns.
const CANONICAL_NAN: u32 = 0x7FFF_FFFF;
/// The (rule, rounds, index dtype, seed) of the cases every grid runs.
const CASES: [(SrRule, u32, &str, u64); 4] = [
    (SrRule::V072, 5, "int32", 0x0000_0001_2345_6789),
    (SrRule::V072, 10, "int64", 0x8000_0000_DEAD_BEEF),
    (SrRule::V074, 5, "int64", 0x7FFF_FFFF_FFFF_FFF1),
    (SrRule::V074, 10, "int32", 0xD1B5_4A32_D192_ED03),
];

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1), a multiple of 2^-23.
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1 << 23) as f32 - 1.0
    }
    fn sign(&mut self) -> f32 {
        [1.0, -1.0][(self.next() & 1) as usize]
    }
    fn shuffle<X>(&mut self, v: &mut [X]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// What a (sequence, group, column) holds: B per token, and the edge rows' initial state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// B in [-1, 1]; every row ordinary.
    Plain,
    /// B = sign * {8, 16, 32, 48, 400, 600}; edge rows start at sign * [64000, 65504].
    Big,
    /// B = sign * {0, k 2^-26, bf16(3e-6), 2^-30, 2^-40}; edge rows start fp16-subnormal.
    Tiny,
    /// Edge rows start at x, B_0 = -x, then +y, -y pairs: exact zeros every other token.
    Cancel,
    /// B = -0; edge rows start at +-0.
    Zero,
    /// B in [-1, 1]; edge rows start at +-Inf or an fp16 NaN.
    Special,
    /// B = +-Inf at one token, else in [-1, 1]; edge rows start at the opposite Inf (NaN then).
    InfB,
    /// B = a bf16 NaN at one token, else in [-1, 1]; edge rows start at +-Inf.
    NanB,
}

fn bf(v: f32) -> u16 {
    bf16::from_f32(v).to_bits()
}

fn hf(v: f32) -> u16 {
    f16::from_f32(v).to_bits()
}

/// A value with 8 significant bits, exact in fp16 and bf16: sign * k * 2^e, |.| in
/// [2^-12, 4080].
fn exact_value(rng: &mut Rng) -> f32 {
    rng.sign() * (1 + rng.below(255)) as f32 * 2f32.powi(rng.below(17) as i32 - 12)
}

/// One grid's inputs (x = 1, dt = 1, A = 0 implied).
struct Problem {
    batch: usize,
    nheads: usize,
    slots: usize,
    entries: usize,
    /// The whole state storage (fp16 bits), slot stride [`Problem::stride`].
    state: Vec<u16>,
    /// B and C (bf16 bits), (batch, T, NGROUPS, DSTATE) contiguous.
    b: Vec<u16>,
    c: Vec<u16>,
    /// Read slot and buffer entry per sequence.
    sbi: Vec<i64>,
    inter_idx: Vec<i64>,
}

impl Problem {
    fn new(batch: usize, nheads: usize) -> Problem {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ ((batch as u64) << 32) ^ nheads as u64);
        let (slots, entries) = (batch + 3, batch + 2);
        let mut sbi: Vec<i64> = (0..slots as i64).collect();
        rng.shuffle(&mut sbi);
        sbi.truncate(batch);
        let mut inter_idx: Vec<i64> = (0..entries as i64).collect();
        rng.shuffle(&mut inter_idx);
        inter_idx.truncate(batch);
        let mut p = Problem {
            batch,
            nheads,
            slots,
            entries,
            state: Vec::new(),
            b: vec![0; batch * T * NGROUPS * DSTATE],
            c: vec![0; batch * T * NGROUPS * DSTATE],
            sbi,
            inter_idx,
        };
        // Per (sequence, group, column): the kind, B for every token, the edge rows' sign / x.
        let mut cols = Vec::with_capacity(batch * NGROUPS * DSTATE);
        for b in 0..batch {
            for g in 0..NGROUPS {
                let profile = (b * NGROUPS + g) % 4;
                for n in 0..DSTATE {
                    let kind = match (profile, rng.below(18)) {
                        (0, _) | (_, 0..=7) => Kind::Plain,
                        (_, 8 | 9) => Kind::Big,
                        (_, 10 | 11) => Kind::Tiny,
                        (_, 12) => Kind::Cancel,
                        (_, 13) => Kind::Zero,
                        (_, 14 | 15) => Kind::Special,
                        (3, 16) => Kind::InfB,
                        (3, _) => Kind::NanB,
                        _ => Kind::Plain,
                    };
                    let (sigma, x) = (rng.sign(), exact_value(&mut rng));
                    let at = 2 + rng.below(5) as usize; // InfB, NanB: the token
                    let mut y = 0.0;
                    for t in 0..T {
                        let v = match kind {
                            Kind::Big => {
                                bf(sigma * [8., 16., 32., 48., 400., 600.][rng.below(6) as usize])
                            }
                            Kind::Tiny => {
                                let m = match rng.below(5) {
                                    0 => 0.0,
                                    1 => (1 + rng.below(255)) as f32 * 2f32.powi(-26),
                                    2 => 3e-6,
                                    3 => 2f32.powi(-30),
                                    _ => 2f32.powi(-40),
                                };
                                bf(rng.sign() * m)
                            }
                            Kind::Cancel if t == 0 => bf(-x),
                            Kind::Cancel if t % 2 == 1 => {
                                y = if rng.below(4) == 0 {
                                    rng.sign() * 0.0
                                } else {
                                    exact_value(&mut rng)
                                };
                                bf(y)
                            }
                            Kind::Cancel => bf(-y),
                            Kind::Zero => 0x8000,
                            Kind::InfB if t == at => bf(sigma * f32::INFINITY),
                            Kind::NanB if t == at => {
                                [0x7FC0, 0xFFC1, 0x7F81][rng.below(3) as usize]
                            }
                            _ => bf(rng.unit()),
                        };
                        let e = p.bc_index(b, t, g, n);
                        p.b[e] = v;
                        p.c[e] = if rng.below(8) == 0 { 0 } else { bf(rng.unit()) };
                    }
                    cols.push((kind, sigma, x));
                }
            }
        }
        // Every state element ordinary, then the edge rows' edge columns.
        p.state = (0..slots * p.stride())
            .map(|_| hf(4.0 * rng.unit()))
            .collect();
        for b in 0..batch {
            let slot = p.sbi[b] as usize;
            for h in 0..nheads {
                let g = h / (nheads / NGROUPS);
                for d in 0..DIM {
                    if rng.below(4) != 0 {
                        continue;
                    }
                    for n in 0..DSTATE {
                        let (kind, sigma, x) = cols[(b * NGROUPS + g) * DSTATE + n];
                        let neg = if rng.next() & 1 == 0 { 0 } else { 0x8000 };
                        let s0 = match kind {
                            Kind::Plain => continue,
                            Kind::Big => hf(sigma * (64000 + 32 * rng.below(48)) as f32),
                            Kind::Tiny => neg | rng.below(1024) as u16,
                            Kind::Cancel => hf(x),
                            Kind::Zero => neg,
                            Kind::Special => {
                                [0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x7C01][rng.below(5) as usize]
                            }
                            Kind::InfB => hf(-sigma * f32::INFINITY),
                            Kind::NanB => neg | 0x7C00,
                        };
                        let e = p.state_index(slot, h, d, n);
                        p.state[e] = s0;
                    }
                }
            }
        }
        p
    }

    fn stride(&self) -> usize {
        self.nheads * DIM * DSTATE + SLOT_PAD
    }
    fn state_index(&self, slot: usize, h: usize, d: usize, n: usize) -> usize {
        slot * self.stride() + (h * DIM + d) * DSTATE + n
    }
    fn bc_index(&self, b: usize, t: usize, g: usize, n: usize) -> usize {
        ((b * T + t) * NGROUPS + g) * DSTATE + n
    }
    fn inter_index(&self, e: usize, t: usize, h: usize, d: usize, n: usize) -> usize {
        (((e * T + t) * self.nheads + h) * DIM + d) * DSTATE + n
    }

    /// The fp32 states s_1..s_T of element (b, h, d, n), as the kernel computes them.
    fn states(&self, b: usize, h: usize, d: usize, n: usize) -> [f32; T] {
        let g = h / (self.nheads / NGROUPS);
        let mut s =
            f16::from_bits(self.state[self.state_index(self.sbi[b] as usize, h, d, n)]).to_f32();
        std::array::from_fn(|t| {
            s += bf16::from_bits(self.b[self.bc_index(b, t, g, n)]).to_f32();
            if s.is_nan() {
                s = f32::from_bits(CANONICAL_NAN);
            }
            s
        })
    }

    // Layouts (shape, strides) of the call's tensors.
    fn state_layout(&self) -> Layout {
        let shape = vec![self.slots, self.nheads, DIM, DSTATE];
        (shape, vec![self.stride(), DIM * DSTATE, DSTATE, 1])
    }
    fn x_layout(&self) -> Layout {
        let (b, h) = (self.batch, self.nheads);
        (vec![b, T, h, DIM], vec![T * h * DIM, h * DIM, DIM, 1])
    }
    fn dt_layout(&self) -> Layout {
        let (b, h) = (self.batch, self.nheads);
        (vec![b, T, h, DIM], vec![T * h, h, 1, 0])
    }
    fn a_layout(&self) -> Layout {
        (vec![self.nheads, DIM, DSTATE], vec![1, 0, 0])
    }
    fn bc_layout(&self) -> Layout {
        let shape = vec![self.batch, T, NGROUPS, DSTATE];
        (
            shape,
            vec![T * NGROUPS * DSTATE, NGROUPS * DSTATE, DSTATE, 1],
        )
    }
    fn inter_layout(&self) -> Layout {
        let h = self.nheads;
        let shape = vec![self.entries, T, h, DIM, DSTATE];
        let hb = h * DIM * DSTATE;
        (shape, vec![T * hb, hb, DIM * DSTATE, DSTATE, 1])
    }
    fn inter_elems(&self) -> usize {
        self.entries * T * self.nheads * DIM * DSTATE
    }
}

/// The element's 13 random bits (the documented multi-token mapping, `csrc/ssu_mtp.cuh`): column
/// pairs; Philox counter (lo32(o), 0xFFFFFFFF if bit 31 of lo32(o) is set else 0, 0, 0), key the
/// seed, `o = read_slot * stride + h * dim * dstate + d * dstate + 4 * floor(n / 4)`; word
/// `(n mod 4) >> 1`, bits 12..0 for even `n`, 28..16 for odd `n`.
fn random_bits(
    seed: u64,
    rounds: u32,
    stride: usize,
    slot: usize,
    h: usize,
    d: usize,
    n: usize,
) -> u32 {
    let o = (slot as u64)
        .wrapping_mul(stride as u64)
        .wrapping_add(((h * DIM + d) * DSTATE + 4 * (n / 4)) as u64);
    let lo = o as u32;
    let counter = [lo, if lo & 0x8000_0000 != 0 { u32::MAX } else { 0 }, 0, 0];
    let w = philox::philox4x32(counter, philox::key_of(seed), rounds)[(n % 4) >> 1];
    (w >> (16 * (n & 1))) & 0x1FFF
}

fn sr(rule: SrRule, v: f32, r: u32) -> u16 {
    match rule {
        SrRule::V072 => sr_f16_bits(v, r),
        SrRule::V074 => sr_f16_bits_v074(v, r),
    }
}

/// The value classes of a pre-rounding state, as counted by the CPU test.
const CLASSES: [&str; 10] = [
    "NaN",
    "+-Inf",
    "finite >= 2^16 (overflow)",
    "[65504, 2^16) (saturation window)",
    "[2^15, 65504)",
    "(0, 2^-14) (fp16 subnormal range)",
    "+0",
    "-0",
    "other negative",
    "other positive",
];

fn class(s: f32) -> usize {
    let a = s.abs();
    match () {
        _ if s.is_nan() => 0,
        _ if s.is_infinite() => 1,
        _ if a >= 65536.0 => 2,
        _ if a >= 65504.0 => 3,
        _ if a >= 32768.0 => 4,
        _ if a > 0.0 && a < 2f32.powi(-14) => 5,
        _ if s.to_bits() == 0 => 6,
        _ if s.to_bits() == 0x8000_0000 => 7,
        _ if s < 0.0 => 8,
        _ => 9,
    }
}

/// (shape, strides) of a tensor, in elements.
type Layout = (Vec<usize>, Vec<usize>);

fn input(buf: &DevBuf, (shape, strides): Layout) -> mtp_dev::In<'_> {
    mtp_dev::In {
        buf,
        shape,
        strides,
    }
}

fn output(buf: &mut DevBuf, (shape, strides): Layout) -> mtp_dev::Out<'_> {
    mtp_dev::Out {
        buf,
        shape,
        strides,
    }
}

/// Launches one case and returns (intermediate buffer, state storage) as fp16 bits.
fn run(
    stream: &Arc<CudaStream>,
    p: &Problem,
    case: (SrRule, u32, &str, u64),
) -> (Vec<u16>, Vec<u16>) {
    let (rule, rounds, index, seed) = case;
    let u16s = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let idx = |v: &[i64]| -> DevBuf {
        let bytes: Vec<u8> = if index == "int32" {
            v.iter().flat_map(|x| (*x as i32).to_le_bytes()).collect()
        } else {
            v.iter().flat_map(|x| x.to_le_bytes()).collect()
        };
        DevBuf::from_bytes(stream, index, &bytes)
    };
    let tok = p.batch * T * p.nheads;
    let mut state = DevBuf::from_bytes(stream, "float16", &u16s(&p.state));
    let x = DevBuf::from_bytes(stream, "bfloat16", &u16s(&vec![bf(1.0); tok * DIM]));
    let dt = DevBuf::from_bytes(stream, "bfloat16", &u16s(&vec![bf(1.0); tok]));
    let a = DevBuf::alloc(stream, "float32", p.nheads); // zeros
    let b = DevBuf::from_bytes(stream, "bfloat16", &u16s(&p.b));
    let c = DevBuf::from_bytes(stream, "bfloat16", &u16s(&p.c));
    let sbi = idx(&p.sbi);
    let ii = idx(&p.inter_idx);
    let seed_buf = DevBuf::from_bytes(stream, "int64", &seed.to_le_bytes());
    let mut out = DevBuf::alloc(stream, "bfloat16", tok * DIM);
    let mut inter = DevBuf::alloc(stream, "float16", p.inter_elems());
    inter.fill_bytes(stream, 0, p.inter_elems(), 0xFF);
    {
        let one = |buf| input(buf, (vec![p.batch], vec![1]));
        let mut call = mtp_dev::MtpCall {
            state: output(&mut state, p.state_layout()),
            x: input(&x, p.x_layout()),
            dt: input(&dt, p.dt_layout()),
            a: input(&a, p.a_layout()),
            b: input(&b, p.bc_layout()),
            c: input(&c, p.bc_layout()),
            d: None,
            z: None,
            dt_bias: None,
            out: output(&mut out, p.x_layout()),
            state_batch_indices: Some(one(&sbi)),
            dst_state_batch_indices: None,
            num_accepted_tokens: None,
            cu_seqlens: None,
            intermediate_states: Some(output(&mut inter, p.inter_layout())),
            intermediate_state_indices: Some(one(&ii)),
            state_scale: None,
            intermediate_state_scales: None,
            cache_steps: Some(T),
            pad_slot_id: -1,
            dt_softplus: false,
            disable_state_update: false,
            philox_rounds: rounds,
            seed: Some(input(&seed_buf, (vec![1], vec![1]))),
            sr_rule: rule,
        };
        mtp_dev::launch(stream, &mut call).unwrap_or_else(|e| panic!("launch failed: {e}"));
    }
    stream.synchronize().expect("kernel");
    (
        common::as_u16(&inter.download_all(stream)),
        common::as_u16(&state.download_all(stream)),
    )
}

/// Compares one case's outputs; returns a failure line, or `None`.
fn check(
    p: &Problem,
    case: (SrRule, u32, &str, u64),
    inter: &[u16],
    state: &[u16],
) -> Option<String> {
    let (rule, rounds, index, seed) = case;
    let name = format!("b{} h{} {rule:?} R{rounds} {index}", p.batch, p.nheads);
    let (mut bad, mut first) = (0usize, Vec::new());
    for b in 0..p.batch {
        let (slot, e) = (p.sbi[b] as usize, p.inter_idx[b] as usize);
        for h in 0..p.nheads {
            for d in 0..DIM {
                for n in 0..DSTATE {
                    let r = random_bits(seed, rounds, p.stride(), slot, h, d, n);
                    for (t, s) in p.states(b, h, d, n).into_iter().enumerate() {
                        let (got, want) = (inter[p.inter_index(e, t, h, d, n)], sr(rule, s, r));
                        if got != want {
                            bad += 1;
                            if first.len() < 8 {
                                first.push(format!(
                                    "(b {b} token {t} head {h} d {d} n {n}): got {got:#06x}, \
                                     expected {want:#06x}, s_t {:#010x}, r {r:#06x}",
                                    s.to_bits()
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    let written = p.batch * T * p.nheads * DIM * DSTATE;
    eprintln!("{name}: {written} states compared, {bad} mismatches");
    let hb = T * p.nheads * DIM * DSTATE;
    let unindexed: Vec<usize> = (0..p.entries)
        .filter(|e| !p.inter_idx.contains(&(*e as i64)))
        .filter(|e| inter[e * hb..(e + 1) * hb].iter().any(|v| *v != 0xFFFF))
        .collect();
    let state_changed = state.iter().zip(&p.state).filter(|(a, b)| a != b).count();
    (bad > 0 || !unindexed.is_empty() || state_changed > 0).then(|| {
        format!(
            "{name}: {bad} of {written} states differ, first: {first:#?}; unindexed buffer \
             entries written: {unindexed:?}; state elements changed: {state_changed}"
        )
    })
}

fn run_grid(batch: usize, nheads: usize) {
    let _serial = common::serial();
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let p = Problem::new(batch, nheads);
    let failures: Vec<String> = CASES
        .into_iter()
        .filter_map(|case| {
            let (inter, state) = run(&stream, &p, case);
            check(&p, case, &inter, &state)
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn sr_edges_bit_exact_small_grid_b1_h8() {
    run_grid(1, 8);
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn sr_edges_bit_exact_b8_h32_one_row_per_group() {
    run_grid(8, 32);
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn sr_edges_bit_exact_b40_h32_two_rows_per_group() {
    run_grid(40, 32);
}

/// The three problems cover every value class (printed per grid), and their layouts pass the
/// API's validation and plan a compiled-in kernel (132 SMs, as the H200).
#[test]
fn edge_inputs_cover_every_class_and_pass_validation() {
    use mamba_ssu::ssu::{mtp_launch_plan, validate_mtp, MtpSpec, SeedSpec, TensorLayout};
    for (batch, nheads) in [(1, 8), (8, 32), (40, 32)] {
        let p = Problem::new(batch, nheads);
        let mut counts = [0usize; CLASSES.len()];
        for b in 0..batch {
            for h in 0..nheads {
                for d in 0..DIM {
                    for n in 0..DSTATE {
                        for s in p.states(b, h, d, n) {
                            counts[class(s)] += 1;
                        }
                    }
                }
            }
        }
        eprintln!(
            "batch {batch} x {nheads} heads ({} states):",
            counts.iter().sum::<usize>()
        );
        for (name, k) in CLASSES.iter().zip(counts) {
            eprintln!("  {name:<36} {k}");
        }
        for (name, k) in CLASSES.iter().zip(counts) {
            assert!(
                k >= 16,
                "b{batch} h{nheads}: only {k} states in class {name}"
            );
        }
        for index in [DType::I32, DType::I64] {
            let lay = |dtype, (shape, strides): (Vec<usize>, Vec<usize>), len| {
                TensorLayout::new(dtype, &shape, &strides, len).unwrap()
            };
            let tok = batch * T * nheads;
            let idx = TensorLayout::contiguous(index, &[batch], batch).unwrap();
            let spec = MtpSpec {
                state: lay(DType::F16, p.state_layout(), p.state.len()),
                x: lay(DType::BF16, p.x_layout(), tok * DIM),
                dt: lay(DType::BF16, p.dt_layout(), tok),
                a: lay(DType::F32, p.a_layout(), nheads),
                b: lay(DType::BF16, p.bc_layout(), p.b.len()),
                c: lay(DType::BF16, p.bc_layout(), p.c.len()),
                d: None,
                z: None,
                dt_bias: None,
                state_batch_indices: Some(idx),
                dst_state_batch_indices: None,
                num_accepted_tokens: None,
                cu_seqlens: None,
                intermediate_states_buffer: Some(lay(
                    DType::F16,
                    p.inter_layout(),
                    p.inter_elems(),
                )),
                intermediate_state_indices: Some(idx),
                state_scale: None,
                intermediate_state_scales: None,
                cache_steps: Some(T),
                out: lay(DType::BF16, p.x_layout(), tok * DIM),
                philox_rounds: 10,
                seed: Some(SeedSpec::Pointer(
                    TensorLayout::contiguous(DType::I64, &[1], 1).unwrap(),
                )),
            };
            let prob = validate_mtp(&spec).unwrap_or_else(|e| panic!("b{batch} h{nheads}: {e}"));
            assert_eq!((prob.batch, prob.nheads, prob.ntokens), (batch, nheads, T));
            assert!(prob.stochastic_rounding);
            let plan = mtp_launch_plan(&spec, 132).expect("launch plan");
            assert!(
                plan.compiled_kernel,
                "b{batch} h{nheads}: not a compiled-in kernel"
            );
        }
    }
}
