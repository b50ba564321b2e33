//! The proof under load: a captured 40-layer decode step (Nemotron-H TP4 shapes, batch 1)
//! replayed `MAMBA_SSU_SOAK_REPLAYS` times (default 100 000) for each stock-identical seed path
//! — prefetch and chained fused — next to a stock twin, on one stream. Every 1000th replay the
//! three generators must sit at `start + 160 · replays` and the batched draw at that offset must
//! equal the CPU formula; every 10 000th (and after the last) every layer's state and output
//! must be bit-identical to the stock twin's. A drift of one draw anywhere shows in both.

mod common;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use mamba_ssu::decode::{DecodeShape, DecodeStep, SeedMode};
use mamba_ssu::philox::torch_seeds;
use mamba_ssu::prefetch::Prefetcher;
use mamba_ssu::{seeds, Generator};

const SEED: u64 = 0x005E_ED0F_5AA6;
const START: u64 = 1 << 33;

#[test]
#[ignore = "requires a CUDA GPU"]
fn captured_steps_never_drift_from_stock_over_a_long_soak() {
    let _serial = common::serial(); // captures: see common::serial
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    // SAFETY: every buffer is used on `stream`; the prefetchers order their side streams.
    unsafe { ctx.disable_event_tracking() };
    let replays: u64 = std::env::var("MAMBA_SSU_SOAK_REPLAYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let shape = DecodeShape::nemotron_h_tp4(1);
    let modes = [SeedMode::Stock, SeedMode::Prefetch, SeedMode::Fused];
    let mut steps = Vec::new();
    let mut prefetchers = Vec::new();
    let mut graphs = Vec::new();
    let mut gens = Vec::new();
    for mode in modes {
        let mut step = DecodeStep::new(&stream, shape).unwrap();
        let mut p = Prefetcher::new(&ctx, shape.layers).unwrap();
        let mut gen = Generator::new(SEED, START).unwrap();
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .unwrap();
        let r = step.run(mode, &mut p, &mut gen);
        let graph = stream
            .end_capture(CUgraphInstantiate_flags(0))
            .unwrap()
            .expect("a graph");
        r.unwrap();
        assert_eq!(p.graph_increment(), 160, "{mode:?}");
        step.reset_states().unwrap();
        steps.push(step);
        prefetchers.push(p);
        graphs.push(graph);
        gens.push(gen);
    }
    let mut probe = stream.alloc_zeros::<i64>(shape.layers).unwrap();
    let (mut seed_checks, mut state_checks) = (0u64, 0u64);
    for r in 1..=replays {
        for i in 0..modes.len() {
            prefetchers[i]
                .prepare_replay(&stream, &mut gens[i], 160)
                .unwrap();
            graphs[i].launch().unwrap();
        }
        if r % 1000 == 0 || r == replays {
            let want = START + 160 * r;
            for (i, mode) in modes.iter().enumerate() {
                assert_eq!(gens[i].offset(), want, "{mode:?} after {r} replays");
            }
            // The next replay's draws, from the generator's position now: the CPU formula.
            let mut g = gens[0];
            seeds::draw_from(&stream, &mut g, &mut probe, shape.layers).unwrap();
            let got: Vec<u64> = stream
                .clone_dtoh(&probe)
                .unwrap()
                .iter()
                .map(|&v| v as u64)
                .collect();
            assert_eq!(
                got,
                torch_seeds(SEED, want, shape.layers),
                "after {r} replays"
            );
            seed_checks += 1;
        }
        if r % 10_000 == 0 || r == replays {
            let stock = steps[0].download().unwrap();
            for (i, mode) in modes.iter().enumerate().skip(1) {
                assert!(
                    steps[i].download().unwrap() == stock,
                    "{mode:?}: state or output differs from the stock twin after {r} replays"
                );
            }
            state_checks += 1;
        }
    }
    eprintln!(
        "soak: {replays} replays of each of stock, prefetch, fused; {seed_checks} offset and \
         seed checks, {state_checks} bit-exact state comparisons: no drift"
    );
}
