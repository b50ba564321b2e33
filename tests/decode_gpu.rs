//! GPU tests of the three seed paths through the SSU: after a 40-layer decode step the states
//! and outputs are bit-identical across stock, prefetch and fused (chained: the forward's
//! summary counts 39 chained layers), eagerly and in CUDA-graph
//! replays (each replay equal to an eager stock step at that replay's generator offset), with
//! both capture layouts of the prefetcher — for the decode step (single-token SSU) and for the
//! verify step of speculative decoding (8 tokens per sequence, the multi-token SSU in vLLM's
//! varlen in-place form); and the same identity, eagerly, at every model preset of
//! `decode_step --model` (dim 64 and 80, 32 to 128 heads), decode and verify step.

mod common;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use mamba_ssu::decode::{DecodeShape, DecodeStep, ModelPreset, SeedMode, StepSnapshot};
use mamba_ssu::prefetch::{CaptureLayout, ForwardSummary, Prefetcher};
use mamba_ssu::Generator;

type Snapshot = StepSnapshot;

/// The prefetcher's summary of a 40-layer step: every seed of a prefetching forward comes from
/// the batched draw; a fused forward chains its layers (layer 0 derives its seed, layers 1..39
/// read the link their predecessor stored).
fn check_summary(mode: SeedMode, summary: Option<ForwardSummary>, captured: bool) {
    let counts = summary.map(|s| (s.requested, s.prefetched, s.fallback, s.captured));
    let want = match mode {
        SeedMode::Prefetch => Some((40, 40, 0, captured)),
        SeedMode::Fused => Some((40, 39, 1, captured)),
        _ => None,
    };
    assert_eq!(counts, want, "{mode:?}");
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn stock_prefetch_and_fused_are_bit_identical_eagerly() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    // SAFETY: all buffers are used on `stream`; the prefetcher orders its side stream itself.
    unsafe { ctx.disable_event_tracking() };
    let mut p = Prefetcher::new(&ctx, 40).unwrap();
    for (batch, tokens) in [(1usize, 1usize), (5, 1), (1, 8), (5, 8)] {
        let shape = DecodeShape::nemotron_h_tp4_verify(batch, tokens);
        let mut step = DecodeStep::new(&stream, shape).unwrap();
        let mut snaps: Vec<Snapshot> = Vec::new();
        let runs = [
            SeedMode::Stock,
            SeedMode::Prefetch,
            SeedMode::Fused,
            SeedMode::FusedPerCall,
        ];
        for mode in runs {
            step.reset_states().unwrap();
            let mut gen = Generator::new(0xDEAD_BEEF_CAFE, 1 << 34).unwrap();
            // Two steps back to back: the second forward's seeds continue the sequence.
            for _ in 0..2 {
                let summary = step.run(mode, &mut p, &mut gen).unwrap();
                check_summary(mode, summary, false);
            }
            assert_eq!(gen.offset(), (1 << 34) + 2 * 160, "{mode:?}");
            snaps.push(step.download().unwrap());
        }
        for (i, mode) in runs.iter().enumerate().skip(1) {
            assert!(
                snaps[0] == snaps[i],
                "{mode:?} differs from stock (batch {batch}, {tokens} tokens)"
            );
        }
        // The fixed seed is a different sequence: the comparison can fail.
        step.reset_states().unwrap();
        let mut gen = Generator::new(0xDEAD_BEEF_CAFE, 1 << 34).unwrap();
        step.run(SeedMode::Fixed, &mut p, &mut gen).unwrap();
        step.run(SeedMode::Fixed, &mut p, &mut gen).unwrap();
        assert!(
            step.download().unwrap() != snaps[0],
            "a different seed changes the state"
        );
    }
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn captured_steps_replay_like_eager_stock_at_each_offset() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    // SAFETY: as above.
    unsafe { ctx.disable_event_tracking() };
    let mut p = Prefetcher::new(&ctx, 40).unwrap();
    for tokens in [1usize, 8] {
        let mut step =
            DecodeStep::new(&stream, DecodeShape::nemotron_h_tp4_verify(3, tokens)).unwrap();
        let configs = [
            (SeedMode::Stock, CaptureLayout::Inline),
            (SeedMode::Prefetch, CaptureLayout::Inline),
            (SeedMode::Prefetch, CaptureLayout::Branch),
            (SeedMode::Fused, CaptureLayout::Inline),
            (SeedMode::FusedPerCall, CaptureLayout::Inline),
        ];
        for (mode, layout) in configs {
            p.set_capture_layout(layout).unwrap();
            let mut gen = Generator::new(2024, 12).unwrap();
            stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .unwrap();
            let r = step.run(mode, &mut p, &mut gen);
            let graph = stream
                .end_capture(CUgraphInstantiate_flags(0))
                .unwrap()
                .expect("a graph");
            check_summary(mode, r.unwrap(), true);
            assert_eq!(gen.offset(), 12, "capture leaves the host generator");
            let inc = p.graph_increment();
            assert_eq!(inc, 160, "{mode:?}");
            let mut previous: Option<Snapshot> = None;
            for _ in 0..3 {
                // Replay from the initial states at the generator's current offset...
                let before = gen;
                step.reset_states().unwrap();
                p.prepare_replay(&stream, &mut gen, inc).unwrap();
                graph.launch().unwrap();
                let replayed = step.download().unwrap();
                // ...equals an eager stock step from the same generator state.
                step.reset_states().unwrap();
                let mut eager_gen = before;
                step.run(SeedMode::Stock, &mut p, &mut eager_gen).unwrap();
                assert_eq!(eager_gen, gen);
                let eager = step.download().unwrap();
                assert!(
                    replayed == eager,
                    "{mode:?} {layout:?} ({tokens} tokens): replay from {} differs",
                    before.offset()
                );
                assert!(
                    Some(&replayed) != previous.as_ref(),
                    "{mode:?} {layout:?}: replays must differ"
                );
                previous = Some(replayed);
                gen.next_cpu(); // the host moves on between replays
            }
        }
    }
}

/// TensorRT-LLM's device counter: one counter-seed launch per step gives the states, outputs and
/// final counter of one increment kernel per layer, over two steps, eagerly and in CUDA-graph
/// replays (the counter continues on the device from replay to replay).
#[test]
#[ignore = "requires a CUDA GPU"]
fn counter_seeds_equal_one_increment_per_layer() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    // SAFETY: as above.
    unsafe { ctx.disable_event_tracking() };
    let mut p = Prefetcher::new(&ctx, 40).unwrap();
    const START: i64 = i64::MAX - 50; // the second step wraps past i64::MAX
    for tokens in [1usize, 8] {
        let mut step =
            DecodeStep::new(&stream, DecodeShape::nemotron_h_tp4_verify(3, tokens)).unwrap();
        let mut gen = Generator::new(7, 0).unwrap();
        let mut eager = Vec::new();
        for mode in [SeedMode::CounterStock, SeedMode::Counter] {
            step.reset_states().unwrap();
            step.set_counter(START).unwrap();
            step.run(mode, &mut p, &mut gen).unwrap();
            step.run(mode, &mut p, &mut gen).unwrap();
            assert_eq!(step.counter().unwrap(), START.wrapping_add(80), "{mode:?}");
            eager.push(step.download().unwrap());
        }
        assert_eq!(
            gen.offset(),
            0,
            "the counter modes leave the generator alone"
        );
        assert!(
            eager[0] == eager[1],
            "counter differs from counter-stock ({tokens} tokens)"
        );

        // The fixed seed is another sequence: the comparison can fail.
        step.reset_states().unwrap();
        step.run(SeedMode::Fixed, &mut p, &mut gen).unwrap();
        step.run(SeedMode::Fixed, &mut p, &mut gen).unwrap();
        assert!(step.download().unwrap() != eager[0]);

        // Captured once, replayed twice from the initial states: replay r equals eager step r.
        for mode in [SeedMode::CounterStock, SeedMode::Counter] {
            step.reset_states().unwrap();
            step.set_counter(START).unwrap();
            stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .unwrap();
            let r = step.run(mode, &mut p, &mut gen);
            let graph = stream
                .end_capture(CUgraphInstantiate_flags(0))
                .unwrap()
                .expect("a graph");
            r.unwrap();
            assert_eq!(step.counter().unwrap(), START, "capture runs nothing");
            graph.launch().unwrap();
            graph.launch().unwrap();
            assert_eq!(step.counter().unwrap(), START.wrapping_add(80), "{mode:?}");
            assert!(
                step.download().unwrap() == eager[0],
                "{mode:?} ({tokens} tokens): two replays differ from two eager steps"
            );
        }
    }
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn every_model_preset_steps_bit_identically_across_seed_paths() {
    let _serial = common::serial(); // as above
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    // SAFETY: all buffers are used on `stream`; the prefetcher orders its side stream itself.
    unsafe { ctx.disable_event_tracking() };
    for preset in &ModelPreset::ALL {
        let layers = preset.layers;
        let mut p = Prefetcher::new(&ctx, layers).unwrap();
        for tokens in [1usize, 8] {
            let mut step = DecodeStep::new(&stream, preset.shape(2, tokens)).unwrap();
            let mut snaps: Vec<Snapshot> = Vec::new();
            for mode in [SeedMode::Stock, SeedMode::Prefetch, SeedMode::Fused] {
                step.reset_states().unwrap();
                let mut gen = Generator::new(0x5EED, 64).unwrap();
                let summary = step.run(mode, &mut p, &mut gen).unwrap();
                let counts = summary.map(|s| (s.requested, s.prefetched, s.fallback));
                let n = u32::try_from(layers).unwrap();
                let want = match mode {
                    SeedMode::Prefetch => Some((n, n, 0)),
                    SeedMode::Fused => Some((n, n - 1, 1)),
                    _ => None,
                };
                assert_eq!(counts, want, "{} {mode:?}", preset.name);
                assert_eq!(gen.offset(), 64 + 4 * layers as u64, "{}", preset.name);
                snaps.push(step.download().unwrap());
            }
            assert_eq!(snaps[0].states.len(), layers);
            let elems = (if tokens > 1 { 1 + 2 * tokens } else { 2 })
                * preset.nheads
                * preset.dim
                * preset.dstate;
            assert_eq!(snaps[0].states[0].len(), elems, "{}", preset.name);
            for (i, mode) in ["prefetch", "fused"].iter().enumerate() {
                assert!(
                    snaps[0] == snaps[i + 1],
                    "{}: {mode} differs from stock ({tokens} tokens)",
                    preset.name
                );
            }
        }
    }
}
