//! `decode_step`: the decode-step benchmark (the README's main job).
//!
//! Simulates a Nemotron-H decode step on the GPU (by default 40 layers, each a filler kernel
//! for the conv1d update plus the SSU at tensor-parallel-4 shapes: 32 heads, dim 64, dstate
//! 128, 8 groups, fp16 state with stochastic rounding, 5 Philox rounds; `--model NAME` takes
//! another model's shape from the one preset table, `mamba_ssu::decode::ModelPreset::ALL`:
//! nemotron-h-tp4 (the default), nemotron-h-tp2, nemotron-h, nemotron-nano-2,
//! nemotron-nano-2-tp2, nemotron-h-4b; `--help` lists their sizes) for each seed mode (stock,
//! prefetch, fused, fixed; and TensorRT-LLM's device counter: counter-stock, one increment
//! kernel per layer, and counter, one launch per step) and batch size, eagerly and as CUDA
//! graphs. Prints step-time medians, each mode's ratio to its stock and the seed overhead
//! removed, (stock - mode) / (stock - fixed) (counter against counter-stock); writes the figures
//! as JSON (`--json PATH`, the format of `decode_step/json.rs`). Before timing, it checks that
//! stock, prefetch and fused give bit-identical states and outputs, and counter and
//! counter-stock bit-identical states, outputs and final counters.
//!
//! ```text
//! decode_step [--model NAME] [--tokens T] [--batch 1,2,4,8,16,32,64] [--steps N]
//!             [--json PATH] [--quick] [--nvtx-only]
//!
//! cargo bench --bench decode_step -- ARGS    (here)
//! BIN ARGS      (BIN: the binary `cargo bench --no-run --bench decode_step` builds, copied
//!                to a GPU host without Rust)
//! ```
//! `--nvtx-only` runs one eager step per mode (for `ncu --nvtx` range checks). A bench with
//! `harness = false`: `cargo bench` passes `--bench`, which is ignored. Bad arguments: clap's
//! message and exit code 2; a failure while running: one line and 1. The argument parsing and
//! the JSON are tested in `tests/bench_programs.rs`.

#[path = "decode_step/args.rs"]
mod args;
#[path = "decode_step/json.rs"]
mod json;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaGraph, CudaStream};
use mamba_ssu::decode::{DecodeStep, SeedMode};
use mamba_ssu::prefetch::{CaptureLayout, Prefetcher};
use mamba_ssu::{device, Generator};

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

struct Timer {
    start: cudarc::driver::CudaEvent,
    stop: cudarc::driver::CudaEvent,
}

impl Timer {
    fn new(ctx: &Arc<CudaContext>) -> AnyResult<Self> {
        Ok(Self {
            start: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
            stop: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        })
    }

    /// Median microseconds of `steps` runs of `work` (after 5 warm-ups), each between events.
    fn median_us(
        &self,
        stream: &Arc<CudaStream>,
        steps: usize,
        mut before: impl FnMut() -> AnyResult<()>,
        mut work: impl FnMut() -> AnyResult<()>,
    ) -> AnyResult<f64> {
        for _ in 0..5 {
            before()?;
            work()?;
        }
        stream.synchronize()?;
        let mut samples = Vec::with_capacity(steps);
        for _ in 0..steps {
            before()?;
            self.start.record(stream)?;
            work()?;
            self.stop.record(stream)?;
            self.stop.synchronize()?;
            samples.push(f64::from(self.start.elapsed_ms(&self.stop)?) * 1000.0);
        }
        Ok(median(samples))
    }
}

/// Stock, prefetch and fused must produce bit-identical states and outputs from one generator
/// state, eagerly and in a graph replay; fixed is the lower bound only.
fn check_identical(
    step: &mut DecodeStep,
    prefetcher: &mut Prefetcher,
    stream: &Arc<CudaStream>,
) -> AnyResult<()> {
    let mut reference = None;
    for mode in [
        SeedMode::Stock,
        SeedMode::Prefetch,
        SeedMode::Fused,
        SeedMode::FusedPerCall,
    ] {
        step.reset_states()?;
        let mut gen = Generator::new(0xC0FFEE, 4096)?;
        step.run(mode, prefetcher, &mut gen)?;
        let got = step.download()?;
        match &reference {
            None => reference = Some(got),
            Some(r) if *r != got => {
                return Err(format!("{} differs from stock (eager)", mode.name()).into())
            }
            Some(_) => {}
        }
        // And in a CUDA graph: capture, replay once from the same generator state.
        step.reset_states()?;
        let mut gen = Generator::new(0xC0FFEE, 4096)?;
        let graph = capture(step, prefetcher, stream, mode, &mut gen)?;
        let inc = prefetcher.graph_increment();
        prefetcher.prepare_replay(stream, &mut gen, inc)?;
        graph.launch()?;
        if step.download()? != *reference.as_ref().unwrap() {
            return Err(format!("{} differs from stock (graph replay)", mode.name()).into());
        }
    }
    check_counter_identical(step, prefetcher, stream)?;
    stream.synchronize()?;
    Ok(())
}

/// The counter modes (TensorRT-LLM's device counter): one batched launch per step gives the
/// states, outputs and final counter of one increment per layer, eagerly and in a graph replay.
fn check_counter_identical(
    step: &mut DecodeStep,
    prefetcher: &mut Prefetcher,
    stream: &Arc<CudaStream>,
) -> AnyResult<()> {
    const START: i64 = 0x7FFF_FFFF_FFFF_FFF0; // wraps past i64::MAX within the step
    let mut gen = Generator::new(0xC0FFEE, 4096)?;
    let mut reference = None;
    for mode in [SeedMode::CounterStock, SeedMode::Counter] {
        step.reset_states()?;
        step.set_counter(START)?;
        step.run(mode, prefetcher, &mut gen)?;
        let got = (step.download()?, step.counter()?);
        match &reference {
            None => reference = Some(got),
            Some(r) if *r != got => {
                return Err(format!("{} differs from counter-stock (eager)", mode.name()).into())
            }
            Some(_) => {}
        }
        step.reset_states()?;
        step.set_counter(START)?;
        let graph = capture(step, prefetcher, stream, mode, &mut gen)?;
        graph.launch()?;
        if (step.download()?, step.counter()?) != *reference.as_ref().unwrap() {
            return Err(
                format!("{} differs from counter-stock (graph replay)", mode.name()).into(),
            );
        }
    }
    Ok(())
}

fn capture(
    step: &mut DecodeStep,
    prefetcher: &mut Prefetcher,
    stream: &Arc<CudaStream>,
    mode: SeedMode,
    gen: &mut Generator,
) -> AnyResult<CudaGraph> {
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let r = step.run(mode, prefetcher, gen);
    let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
    r?;
    let graph = graph.ok_or("capture produced no graph")?;
    graph.upload()?;
    Ok(graph)
}

/// One measured configuration: a seed mode and, for prefetch, the capture layout.
#[derive(Clone, Copy)]
struct Variant {
    label: &'static str,
    mode: SeedMode,
    branch: bool,
}

const VARIANTS: [Variant; 8] = [
    Variant {
        label: "stock",
        mode: SeedMode::Stock,
        branch: false,
    },
    Variant {
        label: "prefetch",
        mode: SeedMode::Prefetch,
        branch: false,
    },
    Variant {
        label: "prefetch-branch",
        mode: SeedMode::Prefetch,
        branch: true,
    },
    Variant {
        label: "fused",
        mode: SeedMode::Fused,
        branch: false,
    },
    Variant {
        label: "fused-per-call",
        mode: SeedMode::FusedPerCall,
        branch: false,
    },
    Variant {
        label: "fixed",
        mode: SeedMode::Fixed,
        branch: false,
    },
    Variant {
        label: "counter-stock",
        mode: SeedMode::CounterStock,
        branch: false,
    },
    Variant {
        label: "counter",
        mode: SeedMode::Counter,
        branch: false,
    },
];

#[derive(Default)]
struct Row {
    eager: BTreeMap<&'static str, f64>,
    graph: BTreeMap<&'static str, f64>,
    /// Graph mode, paired within each round: median over rounds of (stock - mode), in µs.
    graph_paired_saving: BTreeMap<&'static str, f64>,
}

fn run() -> AnyResult<()> {
    let opts = args::parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let ctx = match device::open(0) {
        Ok(c) => c,
        Err(e) if e.is_no_gpu() => {
            println!("no CUDA GPU here ({e}); the decode-step benchmark needs one");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    // SAFETY: every buffer is used on `stream` only (the prefetcher orders its side stream with
    // its own events), so cudarc's per-buffer event tracking is not needed; it would also break
    // stream capture.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    let timer = Timer::new(&ctx)?;
    // The default prefetcher (inline capture layout) and one that captures its draw as a
    // side-stream branch, for comparison.
    let model = opts.model;
    let mut inline = Prefetcher::new(&ctx, model.layers)?;
    let mut branch = Prefetcher::new(&ctx, model.layers)?;
    branch.set_capture_layout(CaptureLayout::Branch)?;
    let device_name = ctx.name()?;

    if opts.nvtx_only {
        let mut step = DecodeStep::new(&stream, model.shape(opts.batches[0], opts.tokens))?;
        let mut gen = Generator::new(1, 0)?;
        for mode in SeedMode::ALL {
            step.run(mode, &mut inline, &mut gen)?;
        }
        stream.synchronize()?;
        println!("one eager step per mode done (NVTX ranges: decode step / layer)");
        return Ok(());
    }

    let mut rows: Vec<(usize, Row)> = Vec::new();
    for &batch in &opts.batches {
        let shape = model.shape(batch, opts.tokens);
        let mut step = DecodeStep::new(&stream, shape)?;
        // The identity check downloads every layer's state 16 times: a verify step's cache
        // (batch * tokens + 1 slots per layer) makes that gigabytes past batch 8, so there it is
        // checked at batch <= 8 (tests/decode_gpu.rs checks it too).
        if opts.tokens == 1 || batch <= 8 {
            check_identical(&mut step, &mut inline, &stream)?;
            check_identical(&mut step, &mut branch, &stream)?;
        } else {
            eprintln!("batch {batch}: identity check skipped (verify step past batch 8)");
        }
        let mut row = Row::default();
        let mut gen = Generator::new(42, 0)?;
        for v in VARIANTS {
            let pf = if v.branch { &mut branch } else { &mut inline };
            let t = timer.median_us(
                &stream,
                opts.steps,
                || Ok(()),
                || {
                    step.run(v.mode, pf, &mut gen)?;
                    Ok(())
                },
            )?;
            row.eager.insert(v.label, t);
        }
        // Graphs: capture every variant, then time their replays interleaved (one replay of
        // each per round), so that clock and thermal drift hit all variants alike. Every replay,
        // fixed included, is preceded by the generator-state write (untimed), so that all
        // variants start from the same stream state.
        let mut graphs = Vec::new();
        for v in VARIANTS {
            let pf = if v.branch { &mut branch } else { &mut inline };
            let graph = capture(&mut step, pf, &stream, v.mode, &mut gen)?;
            // Fixed and the counter modes draw nothing from the generator.
            let inc = if matches!(
                v.mode,
                SeedMode::Fixed | SeedMode::CounterStock | SeedMode::Counter
            ) {
                0
            } else {
                pf.graph_increment()
            };
            graphs.push((v, graph, inc));
        }
        let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(opts.steps); graphs.len()];
        for round in 0..opts.steps + 5 {
            for (i, (v, graph, inc)) in graphs.iter().enumerate() {
                let pf = if v.branch { &mut branch } else { &mut inline };
                pf.prepare_replay(&stream, &mut gen, *inc)?;
                timer.start.record(&stream)?;
                graph.launch()?;
                timer.stop.record(&stream)?;
                timer.stop.synchronize()?;
                if round >= 5 {
                    samples[i].push(f64::from(timer.start.elapsed_ms(&timer.stop)?) * 1000.0);
                }
            }
        }
        // Paired estimate: the variants of one round ran back to back, so per-round differences
        // cancel slow drift that the difference of two medians keeps. Each variant against its
        // stock: the generator modes and fixed against stock, counter against counter-stock (and
        // fixed against counter-stock, the counter modes' lower bound, as "counter-fixed").
        let index = |label: &str| VARIANTS.iter().position(|v| v.label == label).unwrap();
        let paired = |base: usize, i: usize| -> f64 {
            median(
                samples[base]
                    .iter()
                    .zip(&samples[i])
                    .map(|(s, x)| s - x)
                    .collect(),
            )
        };
        for (i, (v, _, _)) in graphs.iter().enumerate() {
            let base = if v.label == "counter" {
                index("counter-stock")
            } else {
                index("stock")
            };
            row.graph_paired_saving.insert(v.label, paired(base, i));
        }
        row.graph_paired_saving.insert(
            "counter-fixed",
            paired(index("counter-stock"), index("fixed")),
        );
        for ((v, _, _), s) in graphs.iter().zip(samples) {
            row.graph.insert(v.label, median(s));
        }
        eprintln!("batch {batch}: done");
        rows.push((batch, row));
    }

    // (stock - mode) / (stock - fixed); for the counter mode against counter-stock.
    let removed = |m: &BTreeMap<&str, f64>, mode: &str| {
        let stock = if mode == "counter" {
            "counter-stock"
        } else {
            "stock"
        };
        let (s, f, x) = (m[stock], m["fixed"], m[mode]);
        if s > f {
            100.0 * (s - x) / (s - f)
        } else {
            f64::NAN
        }
    };
    let shape = model.shape(1, opts.tokens);
    let sizes = format!(
        "{} shapes ({} layers x [filler + SSU {}x{}x{}, fp16 SR, {} rounds])",
        model.title, shape.layers, shape.nheads, shape.dim, shape.dstate, shape.philox_rounds
    );
    if opts.tokens > 1 {
        println!(
            "\nVerify step ({} tokens per sequence: multi-token SSU, vLLM's varlen in-place form), {sizes} on {device_name}; median of {} steps (us)",
            opts.tokens, opts.steps
        );
    } else {
        println!(
            "\nDecode step, {sizes} on {device_name}; median of {} steps (us)",
            opts.steps
        );
    }
    // Removed from paired differences: median(stock - mode) / median(stock - fixed), the counter
    // mode against counter-stock.
    let removed_paired = |m: &BTreeMap<&str, f64>, mode: &str| {
        let lower = if mode == "counter" {
            "counter-fixed"
        } else {
            "fixed"
        };
        100.0 * m[mode] / m[lower]
    };
    println!("\nCUDA graph, seed overhead removed from paired per-round differences, median(stock - mode) / median(stock - fixed) (counter: against counter-stock):\n");
    println!(
        "| batch | stock - fixed (us) | prefetch | prefetch (branch) | fused | fused (per call) | counter-stock - fixed (us) | counter |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (batch, row) in &rows {
        let m = &row.graph_paired_saving;
        println!(
            "| {batch} | {:.1} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1} | {:.1}% |",
            m["fixed"],
            removed_paired(m, "prefetch"),
            removed_paired(m, "prefetch-branch"),
            removed_paired(m, "fused"),
            removed_paired(m, "fused-per-call"),
            m["counter-fixed"],
            removed_paired(m, "counter"),
        );
    }
    for (label, pick) in [("CUDA graph", true), ("eager", false)] {
        println!("\n{label}:\n");
        println!("| batch | stock | prefetch | prefetch (branch) | fused | fused (per call) | fixed | prefetch/stock | fused/stock | fused/fixed | removed: prefetch | prefetch (branch) | fused | fused (per call) | counter-stock | counter | counter/counter-stock | removed: counter |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for (batch, row) in &rows {
            let m = if pick { &row.graph } else { &row.eager };
            println!(
                "| {batch} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.3} | {:.3} | {:.3} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1} | {:.1} | {:.3} | {:.1}% |",
                m["stock"],
                m["prefetch"],
                m["prefetch-branch"],
                m["fused"],
                m["fused-per-call"],
                m["fixed"],
                m["prefetch"] / m["stock"],
                m["fused"] / m["stock"],
                m["fused"] / m["fixed"],
                removed(m, "prefetch"),
                removed(m, "prefetch-branch"),
                removed(m, "fused"),
                removed(m, "fused-per-call"),
                m["counter-stock"],
                m["counter"],
                m["counter"] / m["counter-stock"],
                removed(m, "counter"),
            );
        }
    }
    if let Some(path) = opts.json {
        let mut report = json::Report::new(device_name, opts.steps, model.name, &shape);
        for (batch, row) in &rows {
            report.rows.push(json::Row {
                batch: *batch,
                eager_us: json::rounded(&row.eager, 3),
                graph_us: json::rounded(&row.graph, 3),
                graph_overhead_removed_pct: json::Removed::from_fn(|mode| {
                    removed(&row.graph, mode)
                }),
                graph_overhead_removed_paired_pct: json::Removed::from_fn(|mode| {
                    removed_paired(&row.graph_paired_saving, mode)
                }),
            });
        }
        std::fs::write(&path, serde_json::to_string(&report)? + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("\nJSON written to {}", path.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("decode-step: {e}");
            ExitCode::from(1)
        }
    }
}
