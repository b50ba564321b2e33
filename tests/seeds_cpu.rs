//! CPU reference of the seed draw against torch's recorded draws and an independent Philox.

use mamba_ssu::philox::{self, philox4x32, torch_seed, torch_seeds};
use mamba_ssu::Generator;
use serde_json::Value;

const GOLDEN: &str = include_str!("data/torch_randint/golden.json");

fn golden() -> Value {
    serde_json::from_str(GOLDEN).expect("golden.json parses")
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("u64"))
        .collect()
}

#[test]
fn every_golden_case_matches_torch() {
    let g = golden();
    let cases = g["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 9);
    for case in cases {
        let seed = case["seed"].as_u64().unwrap();
        let offset = case["offset"].as_u64().unwrap();
        let draws = u64s(&case["draws"]);
        assert_eq!(draws.len(), 48);
        assert_eq!(
            torch_seeds(seed, offset, 48),
            draws,
            "seed {seed} offset {offset}"
        );
        let mut gen = Generator::new(seed, offset).unwrap();
        let singles: Vec<u64> = (0..48).map(|_| gen.next_cpu()).collect();
        assert_eq!(singles, draws);
        assert_eq!(gen.offset(), case["offset_after"].as_u64().unwrap());
    }
}

/// One `torch.randint(0, 2**32, (8,))` call: 8 threads of one Philox block (thread index in
/// counter words 2..3), advancing the offset by 4 only. Recorded for contrast: it is NOT the
/// same as 8 single draws, which is why the batched kernel uses one block per seed.
#[test]
fn one_call_of_eight_is_not_eight_calls() {
    let g = golden();
    for case in g["cases"].as_array().unwrap() {
        let seed = case["seed"].as_u64().unwrap();
        let offset = case["offset"].as_u64().unwrap();
        let batch8 = u64s(&case["batch8"]);
        let block = offset / 4;
        let one_call: Vec<u64> = (0..8u32)
            .map(|t| {
                let c = [block as u32, (block >> 32) as u32, t, 0];
                u64::from(philox4x32(c, philox::key_of(seed), 10)[1])
            })
            .collect();
        assert_eq!(one_call, batch8);
        assert_eq!(case["offset_after_batch8"].as_u64().unwrap(), offset + 4);
        assert_eq!(batch8[0], torch_seed(seed, offset));
        assert_ne!(batch8[1..], torch_seeds(seed, offset, 8)[1..]);
    }
}

/// torch under CUDA-graph capture: 40 draws captured at offset 12; each replay reads the
/// generator's state at replay time and the host advances by 160 per replay.
#[test]
fn graph_replays_follow_the_generator() {
    let g = golden();
    let gc = &g["graph_capture"];
    let seed = gc["seed"].as_u64().unwrap();
    let per_replay = gc["draws_per_replay"].as_u64().unwrap() as usize;
    assert_eq!(
        gc["offset_before_capture"].as_u64(),
        gc["offset_after_capture"].as_u64(),
        "capture does not move the host offset"
    );
    let mut gen = Generator::new(seed, gc["offset_before_capture"].as_u64().unwrap()).unwrap();
    let replays = gc["replays"].as_array().unwrap();
    assert_eq!(replays.len(), 3);
    let mut previous: Option<Vec<u64>> = None;
    for replay in replays {
        assert_eq!(gen.offset(), replay["offset_before"].as_u64().unwrap());
        let draws = gen.draw_cpu(per_replay);
        assert_eq!(draws, u64s(&replay["draws"]));
        assert_eq!(gen.offset(), replay["offset_after"].as_u64().unwrap());
        assert_ne!(Some(&draws), previous.as_ref(), "replays draw fresh values");
        previous = Some(draws);
    }
}

/// SplitMix64, to draw test inputs (deterministic per test, printed on failure).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Philox written a second way: 128-bit arithmetic on (hi, lo) products and the key schedule
/// computed in closed form, to hold the reference to an independent formulation.
fn philox_independent(counter: [u32; 4], key: [u32; 2], rounds: u32) -> [u32; 4] {
    let mut c = counter.map(u128::from);
    for r in 0..u128::from(rounds) {
        let k0 = (u128::from(key[0]) + r * 0x9E37_79B9) % (1 << 32);
        let k1 = (u128::from(key[1]) + r * 0xBB67_AE85) % (1 << 32);
        let p0 = 0xD251_1F53u128 * c[0];
        let p1 = 0xCD9E_8D57u128 * c[2];
        c = [
            (p1 >> 32) ^ c[1] ^ k0,
            p1 % (1 << 32),
            (p0 >> 32) ^ c[3] ^ k1,
            p0 % (1 << 32),
        ];
    }
    c.map(|w| w as u32)
}

#[test]
fn property_random_counters_keys_and_rounds() {
    let mut rng = Rng(0x5EED_0001);
    for _ in 0..20_000 {
        let a = rng.next();
        let b = rng.next();
        let k = rng.next();
        let counter = [a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32];
        let key = [k as u32, (k >> 32) as u32];
        let rounds = 1 + (rng.next() % 10) as u32;
        assert_eq!(
            philox4x32(counter, key, rounds),
            philox_independent(counter, key, rounds),
            "counter {counter:x?} key {key:x?} rounds {rounds}"
        );
    }
}

#[test]
fn property_random_seeds_and_offsets_up_to_2_64_minus_4() {
    let mut rng = Rng(0x5EED_0002);
    let mut offsets: Vec<u64> = vec![
        0,
        u64::MAX - 3,     // 2^64 - 4: the last valid offset
        (1u64 << 34) - 4, // the last block below 2^32 blocks
        1u64 << 34,       // block 2^32: counter word 1 becomes 1
        (1u64 << 34) + 4,
        (1u64 << 62) - 4,
        1u64 << 62,
        ((1u64 << 32) - 1) * 4, // block 2^32 - 1
    ];
    for _ in 0..2000 {
        offsets.push(rng.next() & !3);
    }
    let seeds = [
        0u64,
        1,
        42,
        u64::MAX,
        1 << 32,
        (1 << 32) - 1,
        rng.next(),
        rng.next(),
    ];
    for &seed in &seeds {
        for &offset in &offsets {
            let block = offset / 4;
            let expect = philox_independent(
                [block as u32, (block >> 32) as u32, 0, 0],
                [seed as u32, (seed >> 32) as u32],
                10,
            )[1];
            assert_eq!(
                torch_seed(seed, offset),
                u64::from(expect),
                "seed {seed} offset {offset}"
            );
        }
    }
}

#[test]
fn blocks_crossing_2_pow_32_use_the_high_counter_word() {
    // A block sequence that crosses 2^32: the draw at block 2^32 must differ from the draw at
    // block 0 (a truncated 32-bit counter would make them equal).
    let seed = 0xDEAD_BEEF_u64;
    let start = (1u64 << 34) - 8; // blocks 2^32 - 2, 2^32 - 1, 2^32, 2^32 + 1
    let s = torch_seeds(seed, start, 4);
    assert_ne!(s[2], torch_seed(seed, 0));
    assert_ne!(s[3], torch_seed(seed, 4));
    let mut gen = Generator::new(seed, start).unwrap();
    assert_eq!(gen.draw_cpu(4), s);
    assert_eq!(gen.offset(), 1u64 << 34 | 8);
}

#[test]
fn sequence_wraps_at_2_pow_64() {
    let seed = 7;
    let s = torch_seeds(seed, u64::MAX - 3, 2);
    assert_eq!(s[0], torch_seed(seed, u64::MAX - 3));
    assert_eq!(s[1], torch_seed(seed, 0));
    let mut gen = Generator::new(seed, u64::MAX - 3).unwrap();
    assert_eq!(gen.draw_cpu(2), s);
    assert_eq!(gen.offset(), 4);
}
