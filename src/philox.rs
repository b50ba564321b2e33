//! CPU reference of Philox4x32-R and of torch's per-draw seed formula.
//!
//! Philox4x32 (Salmon et al., SC'11) with any round count >= 1 (FlashInfer's `philox_rounds` has
//! no upper bound); torch and cuRAND use 10.
//! One stock `torch.randint(0, 2**32, (1,), device='cuda')` draw from generator state
//! `(seed, offset)` is word 1 of Philox4x32-10 with key `(lo32(seed), hi32(seed))` and
//! counter `(lo32(offset/4), hi32(offset/4), 0, 0)`; the generator offset then advances by 4.
//! The GPU kernels are held to these functions bit for bit.

/// Multiplier of counter word 0.
pub const PHILOX_M0: u32 = 0xD251_1F53;
/// Multiplier of counter word 2.
pub const PHILOX_M1: u32 = 0xCD9E_8D57;
/// Key bump of key word 0 between rounds (golden ratio).
pub const PHILOX_W0: u32 = 0x9E37_79B9;
/// Key bump of key word 1 between rounds (sqrt(3) - 1).
pub const PHILOX_W1: u32 = 0xBB67_AE85;

/// The Philox rounds torch and cuRAND use (and FlashInfer's default `philox_rounds`).
pub const TORCH_ROUNDS: u32 = 10;

/// Formerly the most Philox rounds supported; any count >= 1 is now.
#[deprecated(note = "Philox rounds are not bounded above; torch's count is TORCH_ROUNDS")]
pub const MAX_ROUNDS: u32 = TORCH_ROUNDS;

/// Philox4x32 with `rounds` rounds (any count >= 1) of `counter` under `key`; returns the final
/// counter.
///
/// # Panics
/// If `rounds` is 0 (a programming error: callers check the count first).
pub fn philox4x32(counter: [u32; 4], key: [u32; 2], rounds: u32) -> [u32; 4] {
    assert!(rounds >= 1, "Philox rounds must be >= 1, got {rounds}");
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for _ in 0..rounds {
        let p0 = u64::from(PHILOX_M0) * u64::from(c0);
        let p1 = u64::from(PHILOX_M1) * u64::from(c2);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0);
        k0 = k0.wrapping_add(PHILOX_W0);
        k1 = k1.wrapping_add(PHILOX_W1);
    }
    [c0, c1, c2, c3]
}

/// The Philox key of a 64-bit seed: `(lo32(seed), hi32(seed))`.
pub fn key_of(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// The Philox counter of a 64-bit offset: `(lo32(o), hi32(o), 0, 0)`.
pub fn counter_of(o: u64) -> [u32; 4] {
    [o as u32, (o >> 32) as u32, 0, 0]
}

/// One stock draw: the value `torch.randint(0, 2**32, (1,), device='cuda')` returns when the
/// CUDA generator is at `(seed, offset)` (`offset` a multiple of 4; its low two bits are
/// ignored, as torch never produces them).
pub fn torch_seed(seed: u64, offset: u64) -> u64 {
    u64::from(philox4x32(counter_of(offset >> 2), key_of(seed), TORCH_ROUNDS)[1])
}

/// `n` consecutive stock draws from `(seed, offset)`: `torch_seed(seed, offset + 4k)` for
/// `k < n`, with wrap-around of the 64-bit offset as torch's unsigned arithmetic does.
pub fn torch_seeds(seed: u64, offset: u64, n: usize) -> Vec<u64> {
    (0..n as u64)
        .map(|k| torch_seed(seed, offset.wrapping_add(4 * k)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random123_known_answers() {
        assert_eq!(
            philox4x32([0; 4], [0; 2], 10),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32([u32::MAX; 4], [u32::MAX; 2], 10),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                10
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn flashinfer_primitive_check_seed42() {
        // FlashInfer's own device Philox, R = 10, seed 42, offset 0 (recorded on the H200).
        assert_eq!(
            philox4x32(counter_of(0), key_of(42), 10),
            [0x9ceaf053, 0x77f5493b, 0x12bf50ad, 0x5742b3d7]
        );
    }

    #[test]
    fn one_round_by_hand() {
        // Round 1 of counter (1, 2, 3, 4), key (5, 6): products 0xD2511F53 * 1 and
        // 0xCD9E8D57 * 3, then the xors, written out by hand.
        let p0 = 0xD251_1F53u64;
        let p1 = 0xCD9E_8D57u64 * 3;
        let expect = [
            ((p1 >> 32) as u32) ^ 2 ^ 5,
            p1 as u32,
            ((p0 >> 32) as u32) ^ 4 ^ 6,
            p0 as u32,
        ];
        assert_eq!(philox4x32([1, 2, 3, 4], [5, 6], 1), expect);
    }

    #[test]
    fn rounds_compose_with_bumped_keys() {
        // R rounds == one more round applied to the R-1 result with the key bumped R-1 times.
        let c = [0xdead_beef, 7, 0x1234_5678, 9];
        let k = [0xcafe_f00d, 0x0bad_c0de];
        for r in 2..=16u32 {
            let prev = philox4x32(c, k, r - 1);
            let kb = [
                k[0].wrapping_add(PHILOX_W0.wrapping_mul(r - 1)),
                k[1].wrapping_add(PHILOX_W1.wrapping_mul(r - 1)),
            ];
            assert_eq!(philox4x32(prev, kb, 1), philox4x32(c, k, r), "rounds {r}");
        }
    }

    /// Philox4x32-R written out independently of `philox4x32`: 128-bit products, the key of round
    /// r computed as k + r * W (not bumped in a loop), the output word order spelled out.
    fn philox_independent(c: [u32; 4], k: [u32; 2], rounds: u32) -> [u32; 4] {
        let mut x = c;
        for r in 0..rounds {
            let k0 = (u64::from(k[0]) + u64::from(r) * u64::from(PHILOX_W0)) as u32;
            let k1 = (u64::from(k[1]) + u64::from(r) * u64::from(PHILOX_W1)) as u32;
            let a = u128::from(0xD251_1F53u32) * u128::from(x[0]);
            let b = u128::from(0xCD9E_8D57u32) * u128::from(x[2]);
            x = [
                (b >> 32) as u32 ^ x[1] ^ k0,
                b as u32,
                (a >> 32) as u32 ^ x[3] ^ k1,
                a as u32,
            ];
        }
        x
    }

    /// For every count 1..=24 (12 included, past torch's 10) the independent formulation above
    /// over a spread of counters and keys (the 10-round published vectors are
    /// `random123_known_answers`).
    #[test]
    fn known_answers_for_any_round_count() {
        let mut v = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            v ^= v << 13;
            v ^= v >> 7;
            v ^= v << 17;
            v as u32
        };
        for rounds in 1..=24 {
            for _ in 0..64 {
                let c = [next(), next(), next(), next()];
                let k = [next(), next()];
                assert_eq!(
                    philox4x32(c, k, rounds),
                    philox_independent(c, k, rounds),
                    "rounds {rounds}, counter {c:x?}, key {k:x?}"
                );
            }
        }
        // 12 rounds are not 10 (the count reaches the kernel).
        assert_ne!(
            philox4x32([0; 4], [0; 2], 12),
            philox4x32([0; 4], [0; 2], 10)
        );
    }

    #[test]
    #[should_panic(expected = "Philox rounds must be >= 1")]
    fn zero_rounds_rejected() {
        philox4x32([0; 4], [0; 2], 0);
    }

    #[test]
    fn seed_sequence_is_offset_shift() {
        let s = torch_seeds(0xDEAD_BEEF, 4000, 10);
        for (k, v) in s.iter().enumerate() {
            assert_eq!(*v, torch_seed(0xDEAD_BEEF, 4000 + 4 * k as u64));
            assert!(*v < 1 << 32);
        }
    }
}
