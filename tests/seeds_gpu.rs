//! GPU tests of the batched seed draw: equal to the CPU reference (and so to torch) for any
//! seed and offset, graph-safe replays, and argument validation. Run on a GPU host with
//! `--include-ignored`; with `MAMBA_SSU_REQUIRE_GPU=1` a missing GPU fails them.

mod common;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use mamba_ssu::philox::torch_seeds;
use mamba_ssu::{seeds, Error, Generator, GraphSeedState};
use serde_json::Value;

const POISON: i64 = 0x5A5A_5A5A_5A5A_5A5A;

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

fn time_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("random inputs from seed {t:#x}");
    t
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn kernel_equals_cpu_reference_for_any_seed_and_offset() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut rng = Rng(time_seed());
    let seeds_to_try = [
        0u64,
        42,
        u64::MAX,
        u64::MAX - 1,
        1 << 32,
        0xDEAD_BEEF,
        rng.next(),
        rng.next(),
    ];
    let offsets = [
        0u64,
        4,
        (1 << 62) - 4 * 40,
        1 << 62,
        (1 << 34) - 4 * 20, // blocks crossing 2^32 within one draw
        1 << 34,
        (1 << 34) + 4,
        u64::MAX - 3 - 4 * 100, // ends just below 2^64
        rng.next() & !3,
        rng.next() & !3,
    ];
    let counts = [1usize, 2, 40, 1000, 65536];
    let extra = 17;
    let mut checked = 0usize;
    for &n in &counts {
        let mut out = stream.clone_htod(&vec![POISON; n + extra]).unwrap();
        for &seed in &seeds_to_try {
            for &offset in &offsets {
                // Large N only for a few combinations, to keep the test short.
                if n == 65536 && offset % 3 != 0 && seed != u64::MAX {
                    continue;
                }
                stream
                    .memcpy_htod(&vec![POISON; n + extra], &mut out)
                    .unwrap();
                seeds::draw_seeds(&stream, &mut out, n, seed, offset).unwrap();
                let got = stream.clone_dtoh(&out).unwrap();
                let want = torch_seeds(seed, offset, n);
                for k in 0..n {
                    assert_eq!(
                        got[k] as u64, want[k],
                        "seed {seed:#x} offset {offset:#x} n {n} k {k}"
                    );
                }
                assert!(got[n..].iter().all(|&v| v == POISON), "wrote past n");
                checked += n;
            }
        }
    }
    eprintln!("{checked} seeds equal to the CPU reference");
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn draw_from_generator_advances_like_stock_calls() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut gen = Generator::new(0xFEED, 1 << 34).unwrap();
    let mut cpu = gen;
    let mut out = stream.alloc_zeros::<i64>(64).unwrap();
    for n in [1usize, 40, 64] {
        seeds::draw_from(&stream, &mut gen, &mut out, n).unwrap();
        let got = stream.clone_dtoh(&out).unwrap();
        let want = cpu.draw_cpu(n);
        assert_eq!(got[..n].iter().map(|&v| v as u64).collect::<Vec<_>>(), want);
        assert_eq!(gen, cpu);
    }
}

/// The torch record: 40 draws captured at offset 12 with seed 2024, replayed three times; our
/// graph-safe draw captured once and replayed with the host state advanced between replays
/// gives exactly torch's values per replay.
#[test]
#[ignore = "requires a CUDA GPU"]
fn graphsafe_draw_replays_like_torch() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    // SAFETY: every buffer below is used on `stream` only, so cudarc's per-buffer event
    // tracking (which cannot cross a capture boundary) is not needed.
    unsafe { ctx.disable_event_tracking() };
    let golden: Value =
        serde_json::from_str(include_str!("data/torch_randint/golden.json")).unwrap();
    let gc = &golden["graph_capture"];
    let seed = gc["seed"].as_u64().unwrap();
    let mut gen = Generator::new(seed, gc["offset_before_capture"].as_u64().unwrap()).unwrap();

    let mut state = GraphSeedState::new(&stream).unwrap();
    let mut out = stream.clone_htod(&vec![POISON; 48]).unwrap();
    // Two draws in one graph (24 + 16 seeds) exercise the intragraph offsets.
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let first = state.capture_offsets(24);
    seeds::draw_seeds_graphsafe(&stream, &mut out.slice_mut(0..24), 24, &state, first).unwrap();
    let second = state.capture_offsets(16);
    seeds::draw_seeds_graphsafe(&stream, &mut out.slice_mut(24..40), 16, &state, second).unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph");
    assert_eq!(state.graph_increment(), 160);
    assert_eq!(gen.offset(), 12, "capture does not move the host generator");

    let replays = gc["replays"].as_array().unwrap();
    let mut previous: Option<Vec<u64>> = None;
    for replay in replays {
        let before = gen.offset();
        assert_eq!(before, replay["offset_before"].as_u64().unwrap());
        state.prepare_replay(&stream, &mut gen).unwrap();
        graph.launch().unwrap();
        let got = stream.clone_dtoh(&out).unwrap();
        let got: Vec<u64> = got[..40].iter().map(|&v| v as u64).collect();
        let torch: Vec<u64> = replay["draws"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(got, torch, "replay from offset {before}");
        assert_eq!(got, torch_seeds(seed, before, 40));
        assert_eq!(gen.offset(), replay["offset_after"].as_u64().unwrap());
        assert_ne!(Some(&got), previous.as_ref());
        previous = Some(got);
    }
    // Eager draws after the replays continue the same sequence.
    let mut eager = stream.alloc_zeros::<i64>(4).unwrap();
    let mut cpu = gen;
    seeds::draw_from(&stream, &mut gen, &mut eager, 4).unwrap();
    let got: Vec<u64> = stream
        .clone_dtoh(&eager)
        .unwrap()
        .iter()
        .map(|&v| v as u64)
        .collect();
    assert_eq!(got, cpu.draw_cpu(4));
    let tail = stream.clone_dtoh(&out).unwrap();
    assert!(tail[40..].iter().all(|&v| v == POISON));
}

/// Graph-safe replays at large offsets and seeds (state written between replays).
#[test]
#[ignore = "requires a CUDA GPU"]
fn graphsafe_replays_at_extreme_state() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    // SAFETY: all buffers are used on `stream` only.
    unsafe { ctx.disable_event_tracking() };
    let mut state = GraphSeedState::new(&stream).unwrap();
    let mut out = stream.alloc_zeros::<i64>(1000).unwrap();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let o = state.capture_offsets(1000);
    seeds::draw_seeds_graphsafe(&stream, &mut out, 1000, &state, o).unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .unwrap();
    let mut gen = Generator::new(u64::MAX, (1 << 34) - 4 * 500).unwrap();
    for _ in 0..3 {
        let before = gen.offset();
        state.prepare_replay(&stream, &mut gen).unwrap();
        graph.launch().unwrap();
        let got: Vec<u64> = stream
            .clone_dtoh(&out)
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect();
        assert_eq!(got, torch_seeds(u64::MAX, before, 1000));
        assert_eq!(gen.offset(), before + 4000);
    }
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn invalid_arguments_are_typed_errors_and_launch_nothing() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let mut out = stream.clone_htod(&vec![POISON; 8]).unwrap();
    let arg = |r: Result<(), Error>| match r {
        Err(Error::InvalidArgument { argument, .. }) => argument,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    assert_eq!(arg(seeds::draw_seeds(&stream, &mut out, 0, 1, 0)), "n");
    // Above the launcher's maximum, over a buffer long enough (the buffer is Rust's rule, the
    // range the launcher's).
    let mut big = stream
        .alloc_zeros::<i64>(seeds::MAX_SEEDS_PER_DRAW + 1)
        .unwrap();
    assert_eq!(
        arg(seeds::draw_seeds(
            &stream,
            &mut big,
            seeds::MAX_SEEDS_PER_DRAW + 1,
            1,
            0
        )),
        "n"
    );
    assert_eq!(arg(seeds::draw_seeds(&stream, &mut out, 9, 1, 0)), "out");
    assert_eq!(arg(seeds::draw_seeds(&stream, &mut out, 4, 1, 6)), "offset");
    let state = GraphSeedState::new(&stream).unwrap();
    assert_eq!(
        arg(seeds::draw_seeds_graphsafe(&stream, &mut out, 4, &state, 2)),
        "intragraph_offset"
    );
    let mut gen = Generator::new(5, 16).unwrap();
    assert_eq!(arg(seeds::draw_from(&stream, &mut gen, &mut out, 9)), "out");
    assert_eq!(
        gen.offset(),
        16,
        "a failed draw leaves the generator unchanged"
    );
    let err = seeds::draw_seeds(&stream, &mut out, 4, 1, 6)
        .unwrap_err()
        .to_string();
    assert!(err.contains("multiple of 4"), "{err}");
    stream.synchronize().unwrap();
    assert!(stream
        .clone_dtoh(&out)
        .unwrap()
        .iter()
        .all(|&v| v == POISON));
}

/// A buffer of another device is refused. Needs two GPUs; with one it says so and checks the
/// same-device case only.
#[test]
#[ignore = "requires a CUDA GPU"]
fn foreign_device_buffer_is_refused() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let count = mamba_ssu::device::device_count().unwrap();
    if count < 2 {
        eprintln!("only {count} device: the foreign-device case needs two GPUs, not run");
        let mut out = stream.alloc_zeros::<i64>(1).unwrap();
        seeds::draw_seeds(&stream, &mut out, 1, 1, 0).unwrap();
        return;
    }
    let other = mamba_ssu::device::open(1).unwrap().new_stream().unwrap();
    let mut foreign = other.alloc_zeros::<i64>(4).unwrap();
    match seeds::draw_seeds(&stream, &mut foreign, 4, 1, 0) {
        Err(Error::WrongDevice { argument, .. }) => assert_eq!(argument, "out"),
        other => panic!("expected WrongDevice, got {other:?}"),
    }
}

/// Counter seeds equal the stock increment-then-read sequence (n launches that each add one to
/// the counter and hand out its new value), for counters across the int64 wrap-around, eagerly
/// and as a CUDA graph replayed three times (each replay continues from the device counter).
#[test]
#[ignore = "requires a CUDA GPU"]
fn counter_seeds_equal_the_stock_increment_then_read_sequence() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    // SAFETY: every buffer is used on `stream` only, so cudarc's per-buffer event tracking (which
    // cannot cross a capture boundary) is not needed.
    unsafe { ctx.disable_event_tracking() };
    let n = 40usize;
    let expect = |start: i64, steps: usize| -> Vec<i64> {
        (1..=steps as i64).map(|k| start.wrapping_add(k)).collect()
    };
    for start in [0i64, 7, i64::MAX - 20, -3, i64::MIN] {
        // The crate's one launch.
        let mut counter = stream.clone_htod(&[start]).unwrap();
        let mut out = stream.clone_htod(&vec![POISON; n + 1]).unwrap();
        seeds::counter_seeds(&stream, &mut counter, &mut out, n).unwrap();
        let got = stream.clone_dtoh(&out).unwrap();
        assert_eq!(&got[..n], &expect(start, n)[..], "start {start}");
        assert_eq!(got[n], POISON, "out[n] untouched");
        assert_eq!(
            stream.clone_dtoh(&counter).unwrap(),
            vec![start.wrapping_add(n as i64)]
        );

        // The stock sequence on the device: n launches of one increment each.
        let mut stock_counter = stream.clone_htod(&[start]).unwrap();
        let mut stock = stream.alloc_zeros::<i64>(n).unwrap();
        for k in 0..n {
            seeds::counter_seeds(
                &stream,
                &mut stock_counter,
                &mut stock.slice_mut(k..k + 1),
                1,
            )
            .unwrap();
        }
        assert_eq!(stream.clone_dtoh(&stock).unwrap(), got[..n].to_vec());
        assert_eq!(
            stream.clone_dtoh(&stock_counter).unwrap(),
            stream.clone_dtoh(&counter).unwrap()
        );
    }

    // Captured once, replayed three times: the values of three consecutive forwards.
    let start = 1234i64;
    let mut counter = stream.clone_htod(&[start]).unwrap();
    let mut out = stream.alloc_zeros::<i64>(n).unwrap();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    seeds::counter_seeds(&stream, &mut counter, &mut out, n).unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph");
    assert_eq!(
        stream.clone_dtoh(&counter).unwrap(),
        vec![start],
        "capture runs nothing"
    );
    let all = expect(start, 3 * n);
    for replay in 0..3 {
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        assert_eq!(
            stream.clone_dtoh(&out).unwrap(),
            all[replay * n..(replay + 1) * n].to_vec(),
            "replay {replay}"
        );
    }
    assert_eq!(
        stream.clone_dtoh(&counter).unwrap(),
        vec![start + 3 * n as i64]
    );

    // Refused before anything runs: n = 0, a short out, the counter inside out.
    let mut c = stream.clone_htod(&[5i64]).unwrap();
    let mut o = stream.alloc_zeros::<i64>(4).unwrap();
    for (r, arg) in [
        (seeds::counter_seeds(&stream, &mut c, &mut o, 0), "n"),
        (seeds::counter_seeds(&stream, &mut c, &mut o, 5), "out"),
    ] {
        match r {
            Err(Error::InvalidArgument { argument, .. }) => assert_eq!(argument, arg),
            Err(Error::Launcher { detail, .. }) => assert!(detail.starts_with(arg), "{detail}"),
            other => panic!("expected a rejection naming {arg}, got {other:?}"),
        }
    }
    assert_eq!(
        stream.clone_dtoh(&c).unwrap(),
        vec![5],
        "rejected calls ran nothing"
    );
}
