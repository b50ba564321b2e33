//! Stochastic rounding of the fp16 SSM state, as FlashInfer 0.7.2 does it in software on the
//! H200 (no hardware `cvt.rs` there), and the mapping from a state element to its 13 random
//! bits. The contract: `docs/flashinfer-ssu.md`, "Stochastic rounding" and "Random bits of each element".

use crate::error::{Error, Result};
use crate::philox::{counter_of, key_of, philox4x32};
use crate::ssu::{Algorithm, SUPPORTED_DSTATE};

/// Mask of the 13 random bits one element uses.
pub const SR_BITS_MASK: u32 = 0x1FFF;

/// Stochastically rounds `x` to fp16 with the random number `r13` (its low 13 bits are used),
/// returning the fp16 bits.
///
/// With `a` the bits of `|x|`: `a += r` (a plain integer add whose carries propagate into the
/// exponent); `e = (a >> 23) & 0xFF`, `m = a & 0x7FFFFF`; `e == 255` gives NaN (`0x7E00`) when
/// `m != 0`, else Inf (`0x7C00`); `e > 142` gives Inf; `e < 113` gives zero (no fp16
/// subnormals); otherwise `((e - 112) << 10) | (m >> 13)`. The sign of `x` is ORed back in.
/// Over all 8192 values of `r` the mean of the result is exactly `x` (for finite `x` in the
/// normal fp16 range): it rounds up in magnitude with probability `(a & 0x1FFF) / 8192`.
pub fn sr_f16_bits(x: f32, r13: u32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let a = (bits & 0x7FFF_FFFF).wrapping_add(r13 & SR_BITS_MASK);
    let e = (a >> 23) & 0xFF;
    let m = a & 0x7F_FFFF;
    let mag: u16 = if e == 255 {
        if m != 0 {
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
    sign | mag
}

/// The stochastic-rounding conversion a FlashInfer release uses (`docs/flashinfer-ssu.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SrRule {
    /// FlashInfer 0.7.2 (what engines pin): [`sr_f16_bits`].
    #[default]
    V072,
    /// FlashInfer 0.7.4: [`sr_f16_bits_v074`] — Inf stays Inf, a NaN stays a canonical NaN,
    /// fp16 subnormals are rounded stochastically.
    V074,
}

impl SrRule {
    /// The fp16 bits this rule gives `x` with the random number `r13`.
    pub fn round(self, x: f32, r13: u32) -> u16 {
        match self {
            SrRule::V072 => sr_f16_bits(x, r13),
            SrRule::V074 => sr_f16_bits_v074(x, r13),
        }
    }
}

/// Stochastically rounds `x` to fp16 with `r13` (its low 13 bits) as FlashInfer 0.7.4 does,
/// returning the fp16 bits.
///
/// With `a` the bits of `|x|`, `e = a >> 23` and the full significand
/// `M = (a & 0x7FFFFF) | 0x800000`: `s = a - (112 << 23)` for `e >= 113` (the normal fp16
/// range: the same add-and-truncate as 0.7.2), `s = M >> (113 - e)` for `90 <= e < 113` (the
/// fp16 subnormal grid, spacing 2^-24, in the same units), `s = 0` for `e < 90`; the magnitude
/// is `min((s + r) >> 13, 0x7C00)`; then, from the input, a NaN gives `0x7E00` and an Inf
/// `0x7C00`; the sign of `x` is ORed back in. For finite `x` with `|x| >= 2^-14` it equals
/// [`sr_f16_bits`] (except within 2^13 ulps of `f32::MAX`, where 0.7.2's add can reach the
/// NaN encodings and gives a NaN, 0.7.4 Inf); it differs for Inf and NaN inputs (0.7.2 turns ±Inf into NaN whenever
/// `r != 0`) and below 2^-14 (0.7.2 flushes to zero; here the result is unbiased on the
/// subnormal grid as well).
pub fn sr_f16_bits_v074(x: f32, r13: u32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let a = bits & 0x7FFF_FFFF;
    if a > 0x7F80_0000 {
        return sign | 0x7E00;
    }
    if a == 0x7F80_0000 {
        return sign | 0x7C00;
    }
    let e = a >> 23;
    let s = if e >= 113 {
        a - (112 << 23)
    } else if e >= 90 {
        ((a & 0x7F_FFFF) | 0x80_0000) >> (113 - e)
    } else {
        0
    };
    let mag = ((s + (r13 & SR_BITS_MASK)) >> 13).min(0x7C00);
    sign | mag as u16
}

/// Which 13 random bits each state element gets, for one call's layout and seed.
///
/// With `base = read_slot * slot_stride + h * dim * dstate` (the READ slot; u64 wrapping
/// arithmetic throughout), key `(lo32(seed), hi32(seed))` and counter `(lo32(o), hi32(o), 0, 0)`:
/// - simple kernel: a lane owns runs of `c = min(8, dstate / 32)` consecutive columns (a 2-byte
///   state); column `n` of row `d`, at position `p = n % c` of its run, uses word `p % 4` of
///   Philox(`o = base + d * dstate + c * floor(n / c) + 4 * floor(p / 4)`): a call feeds up to
///   four columns of a run, and a run of 5 to 8 takes a second call at its position 4 (at
///   dstate 64, 128 and 256 this is word `n % G` of Philox(`... + G * floor(n / G)`) with
///   `G = min(4, dstate / 32)`; at dstate 96 a run of three columns is one call's words 0 to 2);
/// - vertical kernel: word `n % 2` of Philox(`o = base + d * dstate + 2 * floor(n / 2)`) (runs
///   of 2);
/// - horizontal kernel: columns in stages of 32 (`n = 32 k + c`); with `s = d & 14` (the rotation
///   of row `d`'s visits) and `u = (c - s) mod 32`, word `u % 4` of Philox(`o = base +
///   d * dstate + 32 k + ((u - u % 4 + s) mod 32)`): a call feeds four columns that are
///   consecutive in the thread's visiting order, which wrap around the stage for the groups that
///   start at column 30;
///
/// and `r = word & 0x1FFF`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrMapping {
    algorithm: Algorithm,
    slot_stride: u64,
    dim: u64,
    dstate: u64,
    key: [u32; 2],
    rounds: u32,
    group: u64,
    run: u64,
}

impl SrMapping {
    /// The mapping of a state with slot stride `slot_stride` (elements), `dim` rows and `dstate`
    /// columns per head, for `seed` and `rounds` Philox rounds, under `algorithm`.
    ///
    /// Errors: `algorithm` is [`Algorithm::Auto`] (resolve it first with
    /// [`Algorithm::resolve`]); `dstate` not in [`SUPPORTED_DSTATE`] (the multiples of 32 from
    /// 64 to 512);
    /// `rounds` 0 (any count >= 1 is taken: FlashInfer's `philox_rounds` has no upper bound).
    pub fn new(
        algorithm: Algorithm,
        slot_stride: usize,
        dim: usize,
        dstate: usize,
        seed: u64,
        rounds: u32,
    ) -> Result<Self> {
        let run = match algorithm {
            Algorithm::Auto => {
                return Err(Error::invalid(
                    "algorithm",
                    "expected Simple, Vertical or Horizontal (resolve Auto with \
                     Algorithm::resolve), got Auto",
                ))
            }
            Algorithm::Simple => (dstate / 32).min(8),
            Algorithm::Vertical => 2,
            Algorithm::Horizontal => 4,
        };
        if !SUPPORTED_DSTATE.contains(&dstate) {
            return Err(Error::invalid(
                "dstate",
                format!("expected a multiple of 32 from 64 to 512, got {dstate}"),
            ));
        }
        if rounds == 0 {
            return Err(Error::invalid("philox_rounds", "expected >= 1, got 0"));
        }
        Ok(Self {
            algorithm,
            slot_stride: slot_stride as u64,
            dim: dim as u64,
            dstate: dstate as u64,
            key: key_of(seed),
            rounds,
            group: run.min(4) as u64,
            run: run as u64,
        })
    }

    /// The kernel layout ([`Algorithm::Simple`], [`Algorithm::Vertical`] or
    /// [`Algorithm::Horizontal`]).
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Columns fed by one Philox call (`G`: `min(4, c)` for a run of `c` columns; 4 for the
    /// horizontal kernel). A simple run of 5 to 7 columns takes a second call for its last ones.
    pub fn group(&self) -> usize {
        self.group as usize
    }

    /// Rows per head.
    pub fn dim(&self) -> usize {
        self.dim as usize
    }

    /// Columns per row.
    pub fn dstate(&self) -> usize {
        self.dstate as usize
    }

    /// The state's slot stride in elements.
    pub fn slot_stride(&self) -> usize {
        self.slot_stride as usize
    }

    /// The Philox offset `o` and the output word index that element `(read_slot, h, d, n)` uses.
    pub fn philox_offset(&self, read_slot: i64, h: usize, d: usize, n: usize) -> (u64, usize) {
        let base = (read_slot as u64)
            .wrapping_mul(self.slot_stride)
            .wrapping_add((h as u64).wrapping_mul(self.dim).wrapping_mul(self.dstate));
        let n = n as u64;
        let row = base.wrapping_add((d as u64).wrapping_mul(self.dstate));
        if self.algorithm == Algorithm::Horizontal {
            let (stage, c) = (n / 32, n % 32);
            let s = (d as u64) & 14;
            let u = (c + 32 - s) % 32;
            let first = (u - u % 4 + s) % 32;
            return (row.wrapping_add(32 * stage + first), (u % 4) as usize);
        }
        let p = n % self.run;
        let o = row.wrapping_add(self.run * (n / self.run) + 4 * (p / 4));
        (o, (p % 4) as usize)
    }

    /// The 13-bit random number of element `(read_slot, h, d, n)` (`read_slot` is the slot the
    /// state is read from, not the destination slot).
    pub fn random_bits(&self, read_slot: i64, h: usize, d: usize, n: usize) -> u32 {
        let (o, word) = self.philox_offset(read_slot, h, d, n);
        philox4x32(counter_of(o), self.key, self.rounds)[word] & SR_BITS_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// 0.7.4's rule at every edge its description lists.
    #[test]
    fn v074_rule_at_its_edges() {
        let v = sr_f16_bits_v074;
        // Inf stays Inf and NaN a canonical NaN, for every r (0.7.2: NaN once r != 0).
        for r in [0, 1, 0x1000, 0x1FFF] {
            assert_eq!(v(f32::INFINITY, r), 0x7C00);
            assert_eq!(v(f32::NEG_INFINITY, r), 0xFC00);
            assert_eq!(v(f32::NAN, r), 0x7E00);
            assert_eq!(
                v(f32::from_bits(0xFF80_0001), r),
                0xFE00,
                "negative NaN payload"
            );
            assert_eq!(
                v(f32::from_bits(0x7FC1_2345), r),
                0x7E00,
                "NaN payload dropped"
            );
        }
        assert_eq!(
            sr_f16_bits(f32::INFINITY, 1),
            0x7E00,
            "0.7.2: Inf + r != 0 is NaN"
        );
        // Finite values rounding past 65504 saturate to Inf; 65504 itself stays with r = 0.
        assert_eq!(v(65504.0, 0), 0x7BFF);
        assert_eq!(
            v(65504.0, 0x1FFF),
            0x7BFF,
            "65504 is exact: no low bits to round"
        );
        assert_eq!(
            v(65519.0, 0x1FFF),
            0x7C00,
            "rounds up past the largest finite value"
        );
        assert_eq!(v(1.0e6, 0), 0x7C00);
        assert_eq!(v(-3.4e38, 0), 0xFC00);
        // The subnormal grid (2^-24 apart), rounded stochastically.
        let tiny = 2f32.powi(-24);
        assert_eq!(v(tiny, 0), 0x0001, "the smallest subnormal is exact");
        assert_eq!(v(-tiny, 0x1FFF), 0x8001);
        assert_eq!(v(2f32.powi(-14) - tiny, 0), 0x03FF, "the largest subnormal");
        assert_eq!(v(2f32.powi(-14), 0), 0x0400, "the smallest normal");
        let half = tiny / 2.0; // 2^-25: up with probability 1/2
        let ups = (0..8192u32).filter(|&r| v(half, r) == 1).count();
        assert_eq!(ups, 4096);
        assert_eq!(sr_f16_bits(half, 0x1FFF), 0, "0.7.2 flushes below 2^-14");
        // Exponent 90 is the last one that can round up; below it the result is zero.
        let e90 = f32::from_bits(90 << 23); // 2^-37: s = 1, up only when r == 8191
        assert_eq!(v(e90, 0x1FFF), 1);
        assert_eq!(v(e90, 0x1FFE), 0);
        let e89 = f32::from_bits((89 << 23) | 0x7F_FFFF);
        assert_eq!(v(e89, 0x1FFF), 0);
        assert_eq!(v(0.0, 0x1FFF), 0);
        assert_eq!(v(-0.0, 0x1FFF), 0x8000);
        // Unbiased on the subnormal grid: the mean over all r is x.
        for k in [3u32, 1000, 0x5555] {
            let x = tiny * (k as f32) / 8192.0 * 7.0;
            let mean = (0..8192u32)
                .map(|r| f64::from(f16::from_bits(v(x, r)).to_f32()))
                .sum::<f64>()
                / 8192.0;
            assert!((mean - f64::from(x)).abs() <= 1e-12, "{x}: mean {mean}");
        }
    }

    /// For finite inputs of magnitude >= 2^-14 the two rules give the same bits.
    #[test]
    fn v074_equals_v072_in_the_normal_range() {
        let mut state = 0x1234_5678_9ABC_DEF0u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 32) as u32
        };
        let mut checked = 0;
        for _ in 0..200_000 {
            let bits = next();
            let x = f32::from_bits(bits);
            if !x.is_finite() || x.abs() < 2f32.powi(-14) {
                continue;
            }
            let r = next() & SR_BITS_MASK;
            assert_eq!(sr_f16_bits_v074(x, r), sr_f16_bits(x, r), "{x:e} r={r}");
            assert_eq!(SrRule::V074.round(x, r), SrRule::V072.round(x, r));
            checked += 1;
        }
        assert!(checked > 10_000);
    }

    /// `cvt.rz.f16.f32` of the fp32 bits `a` (PTX: round toward zero, a finite value beyond
    /// 65504 gives 65504, Inf stays Inf, a NaN gives the canonical 0x7FFF; sign kept).
    fn cvt_rz_f16(a: u32) -> u32 {
        let sign = (a >> 16) & 0x8000;
        let mag = a & 0x7FFF_FFFF;
        let e = mag >> 23;
        let h = if mag > 0x7F80_0000 {
            return 0x7FFF;
        } else if mag == 0x7F80_0000 {
            0x7C00
        } else if e >= 143 {
            0x7BFF
        } else if e >= 113 {
            ((e - 112) << 10) | ((mag & 0x7F_FFFF) >> 13)
        } else if e >= 1 {
            // fp16 subnormal or zero: floor(|a| / 2^-24) = M * 2^(e - 126), truncated.
            let big = u64::from((mag & 0x7F_FFFF) | 0x80_0000);
            (big >> (126 - e).min(63)) as u32
        } else {
            0
        };
        sign | h
    }

    /// The generic kernel's fast pair conversion (`sr_pair_fast` in `csrc/sr.cuh`) on the CPU:
    /// the truncated pair word and whether its flags send it to the exact path.
    fn pair_fast(v0: f32, v1: f32, r0: u32, r1: u32) -> (u32, bool) {
        let a0 = v0.to_bits().wrapping_add(r0);
        let a1 = v1.to_bits().wrapping_add(r1);
        let h = cvt_rz_f16(a0) | (cvt_rz_f16(a1) << 16);
        let m = h & 0x7fff_7fff;
        let flags = m.wrapping_add(0x0401_0401) | !m.wrapping_add(0x7c00_7c00);
        (h, flags & 0x8000_8000 != 0)
    }

    /// The argument written at `sr_pair_fast`: every pair it does not flag is exactly both
    /// rules' result (so the generic kernel's fast path serves 0.7.2 and 0.7.4 alike, and only
    /// its exact path depends on the rule), and every input where the rules differ — Inf, NaN
    /// (also with the add carrying into the sign bit), saturation, results below 2^-14 — is
    /// flagged. Inputs: all of fp32 at random, and dense near the edges (exponents around
    /// 2^-14 and 65504, the largest finite values, Inf and NaN up to 0xFFFFFFFF).
    #[test]
    fn fast_pair_path_is_exact_for_both_rules_where_it_is_not_flagged() {
        let mut state = 0x0DDB_1A5E_5BAD_5EEDu64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 32) as u32
        };
        let edge = |k: u32, w: u32| -> u32 {
            let sign = (w & 1) << 31;
            let low = w >> 1 & 0x7F_FFFF;
            match k % 8 {
                0 => w,                                            // anything
                1 => sign | ((110 + (w >> 24) % 4) << 23) | low,   // around 2^-14
                2 => sign | ((140 + (w >> 24) % 3) << 23) | low,   // around 65504
                3 => sign | (0x7F80_0000 - 1 - (w >> 8) % 0x4000), // the largest finite
                4 => sign | 0x7F80_0000 | (w >> 24),               // Inf, NaN of small payload
                5 => sign | (0x7FFF_FFFF - (w >> 8) % 0x4000),     // NaN whose add may carry
                6 => sign | ((89 + (w >> 24) % 24) << 23) | low,   // the 0.7.4 subnormal range
                _ => sign | (w >> 9),                              // small and fp32 subnormal
            }
        };
        let (mut unflagged, mut flagged, mut differ_flagged) = (0usize, 0usize, 0usize);
        for i in 0..400_000u32 {
            let (w0, w1, w2) = (next(), next(), next());
            let v0 = f32::from_bits(edge(i, w0));
            let v1 = if i % 2 == 0 {
                // An ordinary partner in [2^-10, 2^10), so that edge values are tested unflagged.
                f32::from_bits(((w1 & 1) << 31) | ((117 + (w1 >> 24) % 20) << 23) | (w1 >> 9))
            } else {
                f32::from_bits(edge(i / 8, w1))
            };
            let r0 = [0, 0x1FFF, w2 & 0x1FFF][(i % 3) as usize];
            let r1 = (w2 >> 13) & 0x1FFF;
            let (h, flag) = pair_fast(v0, v1, r0, r1);
            let differ = (SrRule::V072.round(v0, r0) != SrRule::V074.round(v0, r0))
                || (SrRule::V072.round(v1, r1) != SrRule::V074.round(v1, r1));
            if flag {
                flagged += 1;
                differ_flagged += usize::from(differ);
                continue;
            }
            unflagged += 1;
            assert!(
                !differ,
                "unflagged where the rules differ: {v0:e} {v1:e} r {r0} {r1}"
            );
            for rule in [SrRule::V072, SrRule::V074] {
                let want = u32::from(rule.round(v0, r0)) | (u32::from(rule.round(v1, r1)) << 16);
                assert_eq!(
                    h,
                    want,
                    "{rule:?}: {:#010x} {:#010x} r {r0} {r1}",
                    v0.to_bits(),
                    v1.to_bits()
                );
            }
        }
        assert!(
            unflagged > 50_000 && flagged > 50_000 && differ_flagged > 10_000,
            "coverage: {unflagged} unflagged, {flagged} flagged, {differ_flagged} differing"
        );
        // The cases by name: each one flagged.
        let flagged_alone = |v: f32, r: u32| pair_fast(v, 1.0, r, 0).1;
        assert!(flagged_alone(f32::INFINITY, 0) && flagged_alone(f32::NEG_INFINITY, 7));
        assert!(flagged_alone(f32::NAN, 0));
        assert!(
            flagged_alone(f32::from_bits(0x7FFF_FFFF), 1),
            "+NaN carrying into the sign"
        );
        assert!(
            flagged_alone(f32::from_bits(0xFFFF_FFFF), 1),
            "-NaN wrapping past 2^32"
        );
        assert!(flagged_alone(65504.0, 0) && flagged_alone(65519.0, 0x1FFF));
        assert!(flagged_alone(2f32.powi(-15), 0x1FFF) && flagged_alone(0.0, 0));
        assert!(!flagged_alone(2f32.powi(-14), 0) && !flagged_alone(65472.0, 0x1FFE));
        // Just below 2^-14, rounding up into it: unflagged, and 0x0400 under both rules.
        let y = f32::from_bits(0x387F_F000);
        assert_eq!(pair_fast(y, 1.0, 0x1000, 0), (0x3C00_0400, false));
        assert_eq!(sr_f16_bits_v074(y, 0x1000), 0x0400);
    }

    /// 0.7.4 agrees with 0.7.2 for every finite `|x| >= 2^-14`, exhaustively in `r` at the edges
    /// of that range (2^-14 itself, the top of each binade, 65504 and values that round past it
    /// to Inf under both).
    #[test]
    fn v074_equals_v072_at_the_edges_of_the_normal_range() {
        let xs = [
            2f32.powi(-14),
            f32::from_bits(0x3880_0001),
            f32::from_bits(0x38FF_FFFF),
            f32::from_bits(0x3FFF_FFFF),
            1.0,
            65504.0,
            65519.0,
            65520.0,
            65535.99,
            65536.0,
            f32::from_bits(0x7F7F_E000), // 2^13 ulps below f32::MAX: + r stays finite
        ];
        for x in xs {
            for r in 0..8192u32 {
                for v in [x, -x] {
                    assert_eq!(sr_f16_bits_v074(v, r), sr_f16_bits(v, r), "{v:e} r {r}");
                }
            }
        }
        // Saturation: both give Inf past 65504 (0.7.4's rule is a min with Inf).
        assert_eq!(sr_f16_bits_v074(65520.0, 0x1000), 0x7C00);
        assert_eq!(sr_f16_bits_v074(-f32::MAX, 0), 0xFC00);
        // The one finite exception: within 2^13 ulps of f32::MAX 0.7.2's add can reach the NaN
        // encodings (a NaN result), where 0.7.4 saturates to Inf.
        assert_eq!(sr_f16_bits(f32::MAX, 1), 0x7C00, "exactly the Inf encoding");
        assert_eq!(sr_f16_bits(f32::MAX, 2), 0x7E00);
        assert_eq!(sr_f16_bits(-f32::MAX, 0x1FFF), 0xFE00);
        assert_eq!(sr_f16_bits_v074(f32::MAX, 2), 0x7C00);
        assert_eq!(sr_f16_bits_v074(-f32::MAX, 0x1FFF), 0xFC00);
    }

    fn sr(x: f32, r: u32) -> u16 {
        sr_f16_bits(x, r)
    }

    #[test]
    fn primitive_checks() {
        // The doc's and FlashInfer's primitive checks.
        let one_plus = 1.0f32 + 2f32.powi(-11);
        assert_eq!(sr(one_plus, 4095), 0x3c00);
        assert_eq!(sr(one_plus, 4096), 0x3c01);
        assert_eq!(sr(3e-5, 0), 0);
        assert_eq!(sr(65519.0, 0), 0x7bff);
        assert_eq!(sr(65535.0, 8191), 0x7c00);
        assert_eq!(sr(f32::INFINITY, 1), 0x7e00);
        assert_eq!(sr(-0.1, 100), 0xae66);
        assert_eq!(sr(f32::NAN, 0), 0x7e00);
        assert_eq!(sr(f32::NAN, 8191), 0x7e00);
        assert_eq!(sr(2f32.powi(-14), 0), 0x0400);
        assert_eq!(sr(2f32.powi(-14), 8191), 0x0400);
    }

    #[test]
    fn infinity_and_nan() {
        assert_eq!(sr(f32::INFINITY, 0), 0x7c00);
        assert_eq!(sr(f32::NEG_INFINITY, 0), 0xfc00);
        // Any r != 0 turns +-Inf into NaN (the sign is kept).
        assert_eq!(sr(f32::NEG_INFINITY, 5), 0xfe00);
        assert_eq!(sr(-f32::NAN, 3), 0xfe00);
        // Only the low 13 bits of r count.
        assert_eq!(sr(f32::INFINITY, 0x2000), 0x7c00);
        // Values reaching 2^16 after the add overflow to Inf; the largest finite fp16 stays.
        assert_eq!(sr(65504.0, 0), 0x7bff);
        assert_eq!(sr(65504.0, 8191), 0x7bff);
        assert_eq!(sr(65520.0, 0x0FFF), 0x7bff);
        assert_eq!(sr(65520.0, 0x1000), 0x7c00);
        assert_eq!(sr(1e30, 0), 0x7c00);
        assert_eq!(sr(-1e30, 0), 0xfc00);
    }

    #[test]
    fn carry_into_the_exponent() {
        // fp16 mantissa all ones plus half an ulp (low 13 bits 0x1000).
        let x = f32::from_bits(0x3FFF_F000);
        assert_eq!(sr(x, 0x0FFF), 0x3fff);
        assert_eq!(sr(x, 0x1000), 0x4000); // carries into the exponent: 2.0
                                           // Just below 2^-14: rounds up into the smallest normal, or down to zero.
        let y = f32::from_bits(0x387F_F000);
        assert_eq!(sr(y, 0x0FFF), 0);
        assert_eq!(sr(y, 0x1000), 0x0400);
        assert_eq!(sr(-y, 0x1000), 0x8400);
    }

    #[test]
    fn below_the_smallest_normal_is_signed_zero() {
        assert_eq!(sr(3e-5, 8191), 0);
        assert_eq!(sr(-3e-5, 8191), 0x8000);
        assert_eq!(sr(1e-40, 8191), 0); // fp32 subnormal
        assert_eq!(sr(0.0, 8191), 0);
        assert_eq!(sr(-0.0, 0), 0x8000);
    }

    #[test]
    fn sign_is_symmetric() {
        for x in [0.1f32, 1.0, 3.75, 1234.567, 6.1e-5, 65519.0] {
            for r in [0u32, 1, 4095, 4096, 8191] {
                assert_eq!(sr(-x, r), sr(x, r) | 0x8000, "x {x} r {r}");
            }
        }
    }

    #[test]
    fn exact_values_never_move() {
        for bits in [0x3c00u16, 0x3555, 0x0400, 0x7bff, 0xc000, 0x1234] {
            let x = f16::from_bits(bits).to_f32();
            for r in [0u32, 1, 8191] {
                assert_eq!(sr(x, r), bits, "{bits:#x} r {r}");
            }
        }
    }

    #[test]
    fn unbiased_over_the_full_r_range() {
        // For each x the sum of the 8192 outcomes equals 8192 * x exactly (every term is an
        // fp16 value, the sum is exact in f64), i.e. the mean is x as a rational.
        let xs = [
            1.0f32 + 2f32.powi(-11),
            0.1,
            -0.1,
            -3.7,
            1000.3,
            2047.9,
            1.5 * 2f32.powi(-14),
            f32::from_bits(0x3FFF_F123),
            f32::from_bits(0x387F_F001), // just below 2^-14
            30000.7,
        ];
        for &x in &xs {
            let sum: f64 = (0..8192u32)
                .map(|r| f16::from_bits(sr(x, r)).to_f64())
                .sum();
            if x.abs() < 2f32.powi(-14) {
                // Below the smallest normal the lower neighbour is zero, not x truncated:
                // the rounding is biased there (no subnormals).
                assert_ne!(sum, 8192.0 * f64::from(x));
            } else {
                assert_eq!(sum, 8192.0 * f64::from(x), "x = {x:e}");
            }
        }
    }

    #[test]
    fn flashinfer_seed42_mapping() {
        // Element (slot 0, h 0, d 0, n 0..3), simple, dstate 128: one Philox call at o = 0;
        // FlashInfer's device Philox for seed 42, 10 rounds gives
        // [0x9ceaf053, 0x77f5493b, 0x12bf50ad, 0x5742b3d7].
        let m = SrMapping::new(Algorithm::Simple, 1 << 20, 64, 128, 42, 10).unwrap();
        let got: Vec<u32> = (0..4).map(|n| m.random_bits(0, 0, 0, n)).collect();
        assert_eq!(got, [0x1053, 0x093b, 0x10ad, 0x13d7]);
        // Vertical: columns 0 and 1 share o = 0 (words 0, 1); columns 2, 3 use o = 2.
        let v = SrMapping::new(Algorithm::Vertical, 1 << 20, 64, 128, 42, 10).unwrap();
        assert_eq!(v.random_bits(0, 0, 0, 0), 0x1053);
        assert_eq!(v.random_bits(0, 0, 0, 1), 0x093b);
        assert_eq!(v.philox_offset(0, 0, 0, 3), (2, 1));
    }

    #[test]
    fn offsets_by_hand() {
        let (slot_stride, dim, dstate) = (40_000usize, 64usize, 128usize);
        let seed = 0x1234_5678_9abc_def0u64;
        let s = SrMapping::new(Algorithm::Simple, slot_stride, dim, dstate, seed, 5).unwrap();
        let v = SrMapping::new(Algorithm::Vertical, slot_stride, dim, dstate, seed, 5).unwrap();
        assert_eq!((s.group(), v.group()), (4, 2));
        let base = 3 * slot_stride as u64 + 5 * (dim * dstate) as u64 + 7 * dstate as u64;
        assert_eq!(s.philox_offset(3, 5, 7, 0), (base, 0));
        assert_eq!(s.philox_offset(3, 5, 7, 6), (base + 4, 2));
        assert_eq!(s.philox_offset(3, 5, 7, 127), (base + 124, 3));
        assert_eq!(v.philox_offset(3, 5, 7, 6), (base + 6, 0));
        assert_eq!(v.philox_offset(3, 5, 7, 127), (base + 126, 1));
        let words = philox4x32(counter_of(base + 4), key_of(seed), 5);
        assert_eq!(s.random_bits(3, 5, 7, 5), words[1] & 0x1FFF);
        assert_eq!(s.random_bits(3, 5, 7, 7), words[3] & 0x1FFF);
        assert_eq!(v.random_bits(3, 5, 7, 5), words[1] & 0x1FFF);
        let words6 = philox4x32(counter_of(base + 6), key_of(seed), 5);
        assert_eq!(v.random_bits(3, 5, 7, 6), words6[0] & 0x1FFF);
        // dstate 64: the simple kernel's G is 2, the same mapping as vertical.
        let s64 = SrMapping::new(Algorithm::Simple, slot_stride, dim, 64, seed, 10).unwrap();
        let v64 = SrMapping::new(Algorithm::Vertical, slot_stride, dim, 64, seed, 10).unwrap();
        assert_eq!(s64.group(), 2);
        for n in 0..64 {
            assert_eq!(s64.random_bits(1, 2, 3, n), v64.random_bits(1, 2, 3, n));
        }
        // dstate 256: G stays 4.
        assert_eq!(
            SrMapping::new(Algorithm::Simple, 0, 1, 256, 0, 1)
                .unwrap()
                .group(),
            4
        );
    }

    /// dstate 96 (docs/flashinfer-ssu.md, "dstate 96 in FlashInfer's kernels"): simple lane l
    /// owns columns 3l..3l+2, one Philox call at the run's first column, words 0 to 2; vertical
    /// pairs as at every dstate; horizontal three stages of 32 columns, each as at dstate 64.
    #[test]
    fn offsets_at_dstate_96() {
        let (slot_stride, dim) = (3 * 8 * 96, 8);
        let s = SrMapping::new(Algorithm::Simple, slot_stride, dim, 96, 5, 10).unwrap();
        let v = SrMapping::new(Algorithm::Vertical, slot_stride, dim, 96, 5, 10).unwrap();
        assert_eq!(s.group(), 3);
        let base = 2 * slot_stride as u64 + 5 * 8 * 96 + 7 * 96;
        for n in 0..96usize {
            let lane_run = (n / 3) as u64 * 3;
            assert_eq!(
                s.philox_offset(2, 5, 7, n),
                (base + lane_run, n % 3),
                "simple {n}"
            );
            let pair = (n / 2) as u64 * 2;
            assert_eq!(
                v.philox_offset(2, 5, 7, n),
                (base + pair, n % 2),
                "vertical {n}"
            );
        }
        let h96 = SrMapping::new(Algorithm::Horizontal, slot_stride, dim, 96, 5, 10).unwrap();
        let h64 = SrMapping::new(Algorithm::Horizontal, slot_stride, dim, 64, 5, 10).unwrap();
        for n in 0..96usize {
            // Stage n / 32 of row 7 at dstate 96 is a stage of dstate 64's row at the same
            // in-stage offsets (both rows shifted to offset 0).
            let (o96, w96) = h96.philox_offset(0, 0, 7, n);
            let (o64, w64) = h64.philox_offset(0, 0, 7, n % 32);
            assert_eq!(
                (o96 - 7 * 96 - 32 * (n / 32) as u64, w96),
                (o64 - 7 * 64, w64),
                "horizontal {n}"
            );
        }
    }

    /// dstates 160, 192 and 224: simple lane l owns the run of c = 5, 6, 7 columns from c·l; the
    /// run's columns 0..3 take words 0..3 of one Philox call at the run's first column, columns
    /// 4.. words 0.. of a second call at the run's column 4 (the offset of that column); vertical
    /// pairs as at every dstate.
    #[test]
    fn offsets_at_runs_of_5_to_7() {
        for (ds, c) in [(160usize, 5u64), (192, 6), (224, 7)] {
            let (slot_stride, dim) = (3 * 8 * ds, 8);
            let s = SrMapping::new(Algorithm::Simple, slot_stride, dim, ds, 5, 10).unwrap();
            let v = SrMapping::new(Algorithm::Vertical, slot_stride, dim, ds, 5, 10).unwrap();
            assert_eq!(s.group(), 4);
            let base = (2 * slot_stride + 5 * 8 * ds + 7 * ds) as u64;
            for lane in 0..32u64 {
                let first = base + c * lane;
                for p in 0..c {
                    let n = (c * lane + p) as usize;
                    let want = if p < 4 {
                        (first, p as usize)
                    } else {
                        (first + 4, (p - 4) as usize)
                    };
                    assert_eq!(s.philox_offset(2, 5, 7, n), want, "dstate {ds} simple {n}");
                }
            }
            for n in 0..ds {
                let pair = (n / 2) as u64 * 2;
                assert_eq!(
                    v.philox_offset(2, 5, 7, n),
                    (base + pair, n % 2),
                    "vertical {n}"
                );
            }
        }
    }

    #[test]
    fn offsets_wrap_in_u64() {
        let m = SrMapping::new(Algorithm::Simple, usize::MAX, 64, 128, 1, 10).unwrap();
        let (o, _) = m.philox_offset(2, 0, 0, 0);
        assert_eq!(o, (usize::MAX as u64).wrapping_mul(2));
        let (o, _) = m.philox_offset(-1, 0, 1, 0); // never a written slot, but must not panic
        assert_eq!(o, (usize::MAX as u64).wrapping_neg().wrapping_add(128));
        assert!(m.random_bits(i64::MAX, 31, 63, 127) <= 0x1FFF);
    }

    #[test]
    fn mapping_rejects_bad_arguments() {
        let e = SrMapping::new(Algorithm::Auto, 0, 64, 128, 0, 10).unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidArgument {
                argument: "algorithm",
                ..
            }
        ));
        let e = SrMapping::new(Algorithm::Simple, 0, 64, 544, 0, 10).unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidArgument {
                argument: "dstate",
                ..
            }
        ));
        let e = SrMapping::new(Algorithm::Vertical, 0, 64, 128, 0, 0).unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidArgument {
                argument: "philox_rounds",
                ..
            }
        ));
        // Any count >= 1 (FlashInfer has no upper bound): the words are Philox4x32 with that
        // count, e.g. 12 rounds are two more rounds over 10 with the key bumped 10 times.
        for rounds in [1, 3, 7, 11, 12, 1000] {
            let m =
                SrMapping::new(Algorithm::Simple, 8192, 64, 128, 0x1234_5678_9ABC, rounds).unwrap();
            for (slot, h, d, n) in [(0, 0, 0, 0), (3, 1, 17, 5), (1, 0, 63, 127)] {
                let (o, word) = m.philox_offset(slot, h, d, n);
                let want = philox4x32(counter_of(o), key_of(0x1234_5678_9ABC), rounds)[word];
                assert_eq!(
                    m.random_bits(slot, h, d, n),
                    want & SR_BITS_MASK,
                    "rounds {rounds}"
                );
            }
        }
        let m10 = SrMapping::new(Algorithm::Simple, 8192, 64, 128, 7, 10).unwrap();
        let m12 = SrMapping::new(Algorithm::Simple, 8192, 64, 128, 7, 12).unwrap();
        let (o, word) = m12.philox_offset(2, 1, 3, 9);
        let k = key_of(7);
        let bumped = [
            k[0].wrapping_add(crate::philox::PHILOX_W0.wrapping_mul(10)),
            k[1].wrapping_add(crate::philox::PHILOX_W1.wrapping_mul(10)),
        ];
        let ten = philox4x32(counter_of(o), k, 10);
        assert_eq!(
            m12.random_bits(2, 1, 3, 9),
            philox4x32(ten, bumped, 2)[word] & SR_BITS_MASK
        );
        assert_eq!(m10.random_bits(2, 1, 3, 9), ten[word] & SR_BITS_MASK);
    }

    /// fp16 fused multiply-add, correctly rounded (the product and the sum of fp16 values are
    /// exact in f64, which is then rounded once to fp16, to nearest even).
    fn fma16(a: f16, b: f16, c: f16) -> f16 {
        f16::from_f64(a.to_f64() * b.to_f64() + c.to_f64())
    }

    /// The hot SR kernels' high-side check with a half-precision accumulator (`kHalfAcc` in
    /// `csrc/sr.cuh`, `sr_pair_fast_low`: `acc = fma(h, 2.0019531 (0x4001), acc)` per result
    /// `h`, one test per chunk): every result of magnitude 65504 or more, Inf or NaN makes the
    /// accumulator non-finite whatever finite value it held, and a non-finite accumulator stays
    /// so; the chunk test `((acc & 0x7FFF) + 0x0400) & 0x8000` is exactly "non-finite". With a
    /// scale of 2.0 the first claim fails, which is why the scale is one ulp above 2.
    #[test]
    fn fast_path_half_accumulator_flags_every_large_result() {
        assert_eq!(f16::from_f64(65519.99).to_bits(), 0x7bff);
        assert_eq!(f16::from_f64(65520.0).to_bits(), 0x7c00);
        let scale = f16::from_bits(0x4001);
        let flagged: Vec<f16> = [
            0x7bffu16, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00, 0xffff,
        ]
        .into_iter()
        .map(f16::from_bits)
        .collect();
        let finite: Vec<f16> = (0..=u16::MAX)
            .map(f16::from_bits)
            .filter(|v| v.is_finite())
            .collect();
        assert_eq!(finite.len(), 63_488);
        for &acc in &finite {
            for &h in &flagged {
                let r = fma16(h, scale, acc);
                assert!(
                    !r.is_finite(),
                    "h {:#06x} acc {:#06x} -> {:#06x}",
                    h.to_bits(),
                    acc.to_bits(),
                    r.to_bits()
                );
            }
        }
        for acc in [f16::INFINITY, f16::NEG_INFINITY, f16::NAN] {
            for &h in &finite {
                assert!(!fma16(h, scale, acc).is_finite());
            }
        }
        // A single moderate result is no false alarm; a scale of exactly 2 would miss 65504.
        assert!(fma16(f16::from_f32(16000.0), scale, f16::ZERO).is_finite());
        let two = f16::from_f32(2.0);
        assert!(fma16(f16::from_bits(0x7bff), two, f16::from_bits(0xfbff)).is_finite());
        for x in 0..=u16::MAX {
            let test = ((u32::from(x) & 0x7fff) + 0x0400) & 0x8000 != 0;
            assert_eq!(test, !f16::from_bits(x).is_finite(), "{x:#06x}");
        }
    }
}
