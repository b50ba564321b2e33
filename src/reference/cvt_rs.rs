//! The hardware stochastic-rounding conversion of Blackwell's architecture-specific targets,
//! `cvt.rs.f16x2.f32` (sm_100a: B200, GB200; sm_103a: B300, GB300), modelled on the CPU from the
//! PTX ISA's description. The kernels built for those targets convert the stochastically
//! rounded state with it (`csrc/arch.h`, `csrc/sr.cuh`), as FlashInfer's kernels do there (0.7.2
//! and 0.7.4 alike); no Blackwell GPU runs in this project's tests, so this model, its edge tests
//! and its agreement with FlashInfer 0.7.4's software conversion are what the sm_100a path is
//! held to.
//!
//! What PTX documents: `cvt.rs.f16x2.f32 d, a, b, rbits` converts `a` into `d[31:16]` and `b`
//! into `d[15:0]`; the random bits of `a` are the 13 low bits of `rbits[31:16]` and those of `b`
//! the 13 low bits of `rbits[15:0]` (the 3 high bits of each half must be 0 and are ignored
//! here); `.rs` rounding adds the random bits to the bits that the conversion discards and then
//! truncates; without `.satfinite` a result beyond the largest finite fp16 value is an infinity,
//! infinities stay infinities, and a NaN converts to the canonical NaN.

/// The canonical fp16 NaN that PTX conversions produce (sign clear, every fraction bit set).
pub const CANONICAL_F16_NAN: u16 = 0x7FFF;

/// One element of `cvt.rs.f16x2.f32`: `x` stochastically rounded to fp16 with the 13 random
/// bits `r13 & 0x1FFF`, as fp16 bits.
///
/// For finite `x`, with `u` the fp16 spacing at `|x|` (`2^(e - 10)` for `|x| >= 2^-14` with `e`
/// its binary exponent, `2^-24` on the subnormal grid below) and `q = |x| / u` (exact in f64):
/// the kept magnitude is `floor(q)` units, the discarded part's 13 leading bits are
/// `f = floor((q - floor(q)) * 2^13)`, and the result is one unit larger iff `f + r >= 2^13`.
/// A result at or beyond `2^16` is Inf. The sign of `x` is kept (also for zeros). Inf stays Inf;
/// a NaN gives [`CANONICAL_F16_NAN`].
///
/// Written from that description alone (no bit trick shared with the software conversions), so
/// that the agreement test below compares two independent derivations.
pub fn cvt_rs_f16(x: f32, r13: u32) -> u16 {
    let r = u64::from(r13 & 0x1FFF);
    if x.is_nan() {
        return CANONICAL_F16_NAN;
    }
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    if x.is_infinite() {
        return sign | 0x7C00;
    }
    let m = f64::from(x.abs());
    // The fp16 spacing at m: 2^-24 below 2^-14, else 2^(e - 10).
    let e = if m >= f64::powi(2.0, -14) {
        m.log2().floor() as i32
    } else {
        -14
    };
    // log2 of a power-of-two boundary can round either way in f64: settle e exactly.
    let e = if m >= f64::powi(2.0, -14) && f64::powi(2.0, e + 1) <= m {
        e + 1
    } else if m >= f64::powi(2.0, -14) && f64::powi(2.0, e) > m {
        e - 1
    } else {
        e
    };
    let unit = f64::powi(2.0, e - 10);
    let q = m / unit; // exact: a division by a power of two
    let kept = q.floor();
    let f13 = ((q - kept) * 8192.0).floor() as u64;
    let units = kept as u64 + u64::from(f13 + r >= 8192);
    // Encode units of 2^(e - 10): on the subnormal grid (e = -14, below 2^-14) the bits are the
    // units themselves; in the normal range (units in [1024, 2048]) the exponent field is
    // e + 15 and the fraction units - 1024, so a carry to 2048 moves into the next binade.
    let bits = if e == -14 && units < 1024 {
        units
    } else {
        (((e + 15) as u64) << 10) + (units - 1024)
    };
    if bits >= 0x7C00 {
        sign | 0x7C00
    } else {
        sign | bits as u16
    }
}

/// `cvt.rs.f16x2.f32 d, a, b, rbits`: `a` into the upper half with `rbits[28:16]`, `b` into the
/// lower half with `rbits[12:0]`.
pub fn cvt_rs_f16x2(a: f32, b: f32, rbits: u32) -> u32 {
    (u32::from(cvt_rs_f16(a, rbits >> 16)) << 16) | u32::from(cvt_rs_f16(b, rbits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::sr::{sr_f16_bits, sr_f16_bits_v074};

    const RS: [u32; 8] = [0, 1, 2, 0x0FFF, 0x1000, 0x1001, 0x1FFE, 0x1FFF];

    fn f(bits: u32) -> f32 {
        f32::from_bits(bits)
    }

    /// Zeros, fp32 subnormals and values far below the fp16 grid: a signed zero for every r
    /// (their discarded part is below 2^-13 of a unit).
    #[test]
    fn zeros_and_tiny_values_give_signed_zeros() {
        for r in RS {
            assert_eq!(cvt_rs_f16(0.0, r), 0x0000);
            assert_eq!(cvt_rs_f16(-0.0, r), 0x8000);
            assert_eq!(cvt_rs_f16(f(1), r), 0x0000, "smallest fp32 subnormal");
            assert_eq!(cvt_rs_f16(f(0x8000_0001), r), 0x8000);
            assert_eq!(cvt_rs_f16(f32::MIN_POSITIVE, r), 0x0000);
            // 2^-38: one 2^13-th of the smallest fp16 subnormal unit is 2^-37.
            assert_eq!(cvt_rs_f16(2f32.powi(-38), r), 0x0000);
        }
        // 2^-37 is exactly one discarded 2^-13 unit: rounds up only with r = 0x1FFF.
        assert_eq!(cvt_rs_f16(2f32.powi(-37), 0x1FFE), 0x0000);
        assert_eq!(cvt_rs_f16(2f32.powi(-37), 0x1FFF), 0x0001);
        assert_eq!(cvt_rs_f16(-(2f32.powi(-37)), 0x1FFF), 0x8001);
    }

    /// The fp16 subnormal grid (spacing 2^-24): exact points stay, halves round up for r >= 2^12,
    /// the top subnormal carries into the smallest normal 2^-14 (0x0400).
    #[test]
    fn subnormal_grid() {
        let unit = 2f32.powi(-24);
        for k in [1u16, 2, 3, 100, 1023] {
            for r in RS {
                assert_eq!(cvt_rs_f16(f32::from(k) * unit, r), k, "exact {k}");
            }
            let half = (f32::from(k) + 0.5) * unit;
            assert_eq!(cvt_rs_f16(half, 0x0FFF), k);
            assert_eq!(cvt_rs_f16(half, 0x1000), k + 1);
        }
        let below_normal = 1023.75 * unit;
        assert_eq!(cvt_rs_f16(below_normal, 0x07FF), 0x03FF);
        assert_eq!(cvt_rs_f16(below_normal, 0x0800), 0x0400);
        assert_eq!(cvt_rs_f16(2f32.powi(-14), 0x1FFF), 0x0400);
    }

    /// Normal values: exact fp16 values stay; a quarter unit above rounds up from r = 0x1800;
    /// the carry out of the fraction moves into the next binade.
    #[test]
    fn normal_range_and_binade_carry() {
        for (v, bits) in [(1.0f32, 0x3C00u16), (-2.5, 0xC100), (65504.0, 0x7BFF)] {
            for r in RS {
                assert_eq!(cvt_rs_f16(v, r), bits, "{v}");
            }
        }
        let ulp1 = 2f32.powi(-10);
        let x = 1.0 + 0.25 * ulp1;
        assert_eq!(cvt_rs_f16(x, 0x17FF), 0x3C00);
        assert_eq!(cvt_rs_f16(x, 0x1800), 0x3C01);
        // 2 - ulp/2 rounds to 0x3FFF or carries into 2.0 = 0x4000.
        let y = 2.0 - 0.5 * ulp1;
        assert_eq!(cvt_rs_f16(y, 0x0FFF), 0x3FFF);
        assert_eq!(cvt_rs_f16(y, 0x1000), 0x4000);
        // The random bits' upper part (bits 13..) is ignored.
        assert_eq!(cvt_rs_f16(x, 0xFFFF_E000 | 0x1800), 0x3C01);
    }

    /// Overflow without .satfinite: at 65504 plus a fraction, rounding up gives Inf; from 2^16 on
    /// every result is Inf; Inf stays Inf; NaN gives the canonical NaN whatever its sign or
    /// payload.
    #[test]
    fn overflow_infinities_and_nans() {
        let top = 65504.0f32 + 16.0; // half a unit (32) above the largest finite value
        assert_eq!(cvt_rs_f16(top, 0x0FFF), 0x7BFF);
        assert_eq!(cvt_rs_f16(top, 0x1000), 0x7C00);
        assert_eq!(cvt_rs_f16(-top, 0x1000), 0xFC00);
        for r in RS {
            assert_eq!(cvt_rs_f16(65536.0, r), 0x7C00);
            assert_eq!(cvt_rs_f16(f32::MAX, r), 0x7C00);
            assert_eq!(cvt_rs_f16(f32::MIN, r), 0xFC00);
            assert_eq!(cvt_rs_f16(f32::INFINITY, r), 0x7C00);
            assert_eq!(cvt_rs_f16(f32::NEG_INFINITY, r), 0xFC00);
            for nan in [0x7FC0_0000, 0xFFC0_0000, 0x7F80_0001, 0xFFFF_FFFF] {
                assert_eq!(cvt_rs_f16(f(nan), r), CANONICAL_F16_NAN, "{nan:#x}");
            }
        }
    }

    /// The pair form: operand a to the upper half with rbits[28:16], b to the lower with
    /// rbits[12:0]; how the kernels call it (csrc/sr.cuh, sr_pair_hw: v1 as a, v0 as b,
    /// rbits = (r1 << 16) | r0) gives v0's conversion in the low half.
    #[test]
    fn pair_layout() {
        let (v0, v1) = (1.0 + 0.25 * 2f32.powi(-10), -3.0 - 0.75 * 2f32.powi(-9));
        let (r0, r1) = (0x1800u32, 0x0400u32);
        let d = cvt_rs_f16x2(v1, v0, (r1 << 16) | r0);
        assert_eq!(d & 0xFFFF, u32::from(cvt_rs_f16(v0, r0)));
        assert_eq!(d >> 16, u32::from(cvt_rs_f16(v1, r1)));
        assert_eq!(d & 0xFFFF, 0x3C01);
    }

    /// The values the sweep below visits: every fp32 exponent with fractions at the fp16 rounding
    /// boundaries and pseudo-random ones, both signs.
    fn sweep() -> impl Iterator<Item = f32> {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        (0u32..=255).flat_map(move |e| {
            let mut fracs: Vec<u32> = vec![
                0, 1, 0x1FFF, 0x2000, 0x0FFF, 0x1000, 0x1001, 0x7F_E000, 0x7F_FFFF, 0x40_0000,
            ];
            for _ in 0..24 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                fracs.push((state >> 41) as u32 & 0x7F_FFFF);
            }
            fracs
                .into_iter()
                .flat_map(move |m| [f((e << 23) | m), f(0x8000_0000 | (e << 23) | m)])
        })
    }

    /// Where they agree by design, the model equals FlashInfer 0.7.4's software conversion (the
    /// one its sm_90 kernels run, written to match the hardware): every finite value and both
    /// infinities, for every r tried. They differ only for NaN inputs (0.7.4 keeps the sign and
    /// gives 0x7E00; the hardware's canonical NaN is 0x7FFF). And the model equals 0.7.2's
    /// conversion wherever 0.7.2's result is finite and at least 2^-14 in magnitude.
    #[test]
    fn agrees_with_flashinfer_074_except_nan_payloads() {
        let (mut finite, mut nans) = (0usize, 0usize);
        for x in sweep() {
            for r in RS.iter().copied().chain([0x0ABC, 0x1555]) {
                let hw = cvt_rs_f16(x, r);
                let v074 = sr_f16_bits_v074(x, r);
                if x.is_nan() {
                    nans += 1;
                    assert_eq!(hw, CANONICAL_F16_NAN);
                    assert_eq!(v074 & 0x7FFF, 0x7E00);
                    continue;
                }
                finite += 1;
                assert_eq!(hw, v074, "x = {x:e} ({:#010x}), r = {r:#x}", x.to_bits());
                let v072 = sr_f16_bits(x, r);
                if x.is_finite() && (v072 & 0x7FFF) >= 0x0400 && (v072 & 0x7FFF) < 0x7C00 {
                    assert_eq!(hw, v072, "0.7.2, x = {x:e}, r = {r:#x}");
                }
            }
        }
        assert!(
            finite > 150_000 && nans > 500,
            "{finite} finite, {nans} NaN cases"
        );
    }

    /// Unbiased: over all 8192 random values the mean of the result is x, for values on the
    /// normal and the subnormal grid.
    #[test]
    fn the_mean_over_every_r_is_x() {
        for x in [
            1.0f32 + 0.3 * 2f32.powi(-10),
            1000.123,
            3.7e-6,
            6.1e-5,
            -0.0123,
        ] {
            let sum: f64 = (0..8192u32)
                .map(|r| f64::from(half::f16::from_bits(cvt_rs_f16(x, r)).to_f32()))
                .sum();
            let mean = sum / 8192.0;
            // Exact up to the discarded bits beyond the 13 random ones.
            let unit = if x.abs() >= 2f32.powi(-14) {
                2f64.powi(x.abs().log2().floor() as i32 - 10)
            } else {
                2f64.powi(-24)
            };
            assert!(
                (mean - f64::from(x)).abs() <= unit / 8192.0,
                "{x}: mean {mean}"
            );
        }
    }
}
