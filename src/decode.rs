//! A simulated Mamba-2 decode step (Nemotron-H class) for the benchmark binary and the tests:
//! L layers, each a filler kernel standing in for the conv1d update, then the SSU with an fp16
//! state and stochastic rounding, its seed taken by one of the [`SeedMode`]s: from torch's CUDA
//! generator (stock, prefetch, fused), from a device counter (TensorRT-LLM's form: counter-stock,
//! counter), or fixed. It is also a
//! worked example of wiring the prefetcher into an engine's layer loop.
//!
//! With [`DecodeShape::tokens`] > 1 the step is a speculative-decoding verify step: every layer
//! runs the multi-token SSU on `tokens` tokens per sequence in vLLM's form (varlen `x` with
//! `cu_seqlens`, a 2-D `(batch, tokens)` index used as both the read and the dst index,
//! `num_accepted_tokens` picking the read column, pad slot 0 = the null block), each token's
//! state written to its own slot.
//!
//! The sizes are a [`DecodeShape`], usually one of the model presets of [`ModelPreset::ALL`]
//! (Nemotron-H 8B, Nemotron Nano 2 and Nemotron 3 Nano 4B Mamba-2 layers, per GPU at their
//! tensor parallelism), the table behind `decode_step --model`.
//!
//! Every step is enqueued on one stream, asynchronously; NVTX ranges name the step (with its
//! mode and batch) and each layer, so an Nsight Systems timeline shows the paths.
//!
//! **Unstable benchmark and test scaffolding** (cargo feature `bench-support`): not part of the
//! library's API, without stability or semver guarantee; library users should not enable the
//! feature.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::filler::filler;
use crate::generator::Generator;
use crate::prefetch::{ForwardSummary, Prefetcher};
use crate::seeds::counter_seeds;
use crate::ssu::{
    selective_state_update, selective_state_update_mtp, Algorithm, MtpArgs, SeedSource, SsuArgs,
    Tensor, TensorMut,
};

/// Where each layer's stochastic-rounding seed comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SeedMode {
    /// A single-seed draw kernel on the main stream before each SSU (what engines do today).
    Stock,
    /// The prefetcher: one batched draw per step on a side stream, events only.
    Prefetch,
    /// Fused, chained ([`Prefetcher::fused_forward`]): no seed kernel at all; layer 0's SSU
    /// derives its seed and every SSU also stores the next layer's.
    Fused,
    /// Fused, per call ([`Prefetcher::fused_seed`] outside a forward): every SSU derives its
    /// own seed (10 Philox rounds on each layer's critical path).
    FusedPerCall,
    /// A fixed seed in device memory, no draw: the lower bound (not stock-identical).
    Fixed,
    /// A device int64 counter incremented by one kernel before every layer, whose new value is
    /// the layer's seed (TensorRT-LLM's `rand_seed.add_(1)` per layer; here one
    /// [`counter_seeds`] launch of one step per layer).
    CounterStock,
    /// The same counter and values from one [`counter_seeds`] launch per step: layer `k` reads
    /// the `k`-th value (bit-identical to [`SeedMode::CounterStock`]).
    Counter,
}

impl SeedMode {
    /// All modes, in table order.
    pub const ALL: [SeedMode; 7] = [
        SeedMode::Stock,
        SeedMode::Prefetch,
        SeedMode::Fused,
        SeedMode::FusedPerCall,
        SeedMode::Fixed,
        SeedMode::CounterStock,
        SeedMode::Counter,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            SeedMode::Stock => "stock",
            SeedMode::Prefetch => "prefetch",
            SeedMode::Fused => "fused",
            SeedMode::FusedPerCall => "fused-per-call",
            SeedMode::Fixed => "fixed",
            SeedMode::CounterStock => "counter-stock",
            SeedMode::Counter => "counter",
        }
    }
}

/// Sizes of the simulated step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeShape {
    /// Stochastic-rounding (Mamba-2) layers per step.
    pub layers: usize,
    /// Sequences in the batch (one token each).
    pub batch: usize,
    /// SSM heads per GPU.
    pub nheads: usize,
    /// Head dimension.
    pub dim: usize,
    /// State size.
    pub dstate: usize,
    /// B/C groups.
    pub ngroups: usize,
    /// Philox rounds of the stochastic rounding.
    pub philox_rounds: u32,
    /// f32 elements the filler kernel rewrites per layer per sequence.
    pub filler_elems_per_seq: usize,
    /// Tokens per sequence: 1 for a decode step (single-token SSU), 2..=16 for a verify step
    /// (multi-token SSU, vLLM's varlen in-place form).
    pub tokens: usize,
}

/// Conv1d kernel width of the Nemotron-H class models (`conv_kernel` in their configs).
pub const CONV_KERNEL: usize = 4;

/// A model shape the simulated step takes (`decode_step --model NAME`): one row of
/// [`ModelPreset::ALL`], the only table of them.
///
/// Sizes are per GPU: a tensor-parallel preset (`-tp2`, `-tp4`) divides the model's Mamba heads
/// among the GPUs and keeps the 8 B/C groups on each, as the step always has. The layer count
/// is the model's Mamba-2 layers (the `M` entries of its published `hybrid_override_pattern`),
/// except for [`ModelPreset::NEMOTRON_H_TP4`], which keeps the 40 layers of every recorded
/// decode-step run so that those stay comparable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelPreset {
    /// The name on the command line and in the JSON (`nemotron-h-tp4`).
    pub name: &'static str,
    /// The model and its tensor parallelism, as printed above the tables.
    pub title: &'static str,
    /// Mamba-2 layers per step.
    pub layers: usize,
    /// Mamba heads per GPU.
    pub nheads: usize,
    /// Head dimension (`mamba_head_dim`).
    pub dim: usize,
    /// State size (`ssm_state_size`).
    pub dstate: usize,
    /// B/C groups (`n_groups`).
    pub ngroups: usize,
}

impl ModelPreset {
    /// Nemotron-H 8B's Mamba-2 layer (128 heads x 64, dstate 128, 8 groups) at tensor
    /// parallelism 4 (32 heads per GPU), 40 layers: the step of every recorded decode-step run
    /// (the 8B has 24 Mamba-2 layers, the 56B 54). The default.
    pub const NEMOTRON_H_TP4: ModelPreset = ModelPreset {
        name: "nemotron-h-tp4",
        title: "Nemotron-H TP4",
        layers: 40,
        nheads: 32,
        dim: 64,
        dstate: 128,
        ngroups: 8,
    };

    /// Every preset, the default first: Nemotron-H 8B (52 layers, 24 of them Mamba-2;
    /// 128 heads x 64) at TP4, TP2 and on one GPU; Nemotron Nano 2 9B (56 layers, 27 Mamba-2;
    /// 128 heads x 80; the 12B has 28 Mamba-2 layers of that shape) on one GPU and at TP2; and
    /// `nemotron-h-4b`, the 4B of the Nemotron-H architecture with 96 heads x 80: Nemotron 3
    /// Nano 4B (42 layers, 21 Mamba-2; the older Nemotron-H 4B Base has 112 heads x 64).
    /// All dstate 128, 8 groups.
    pub const ALL: [ModelPreset; 6] = [
        Self::NEMOTRON_H_TP4,
        ModelPreset {
            name: "nemotron-h-tp2",
            title: "Nemotron-H 8B TP2",
            layers: 24,
            nheads: 64,
            dim: 64,
            dstate: 128,
            ngroups: 8,
        },
        ModelPreset {
            name: "nemotron-h",
            title: "Nemotron-H 8B",
            layers: 24,
            nheads: 128,
            dim: 64,
            dstate: 128,
            ngroups: 8,
        },
        ModelPreset {
            name: "nemotron-nano-2",
            title: "Nemotron Nano 2 9B",
            layers: 27,
            nheads: 128,
            dim: 80,
            dstate: 128,
            ngroups: 8,
        },
        ModelPreset {
            name: "nemotron-nano-2-tp2",
            title: "Nemotron Nano 2 9B TP2",
            layers: 27,
            nheads: 64,
            dim: 80,
            dstate: 128,
            ngroups: 8,
        },
        ModelPreset {
            name: "nemotron-h-4b",
            title: "Nemotron 3 Nano 4B",
            layers: 21,
            nheads: 96,
            dim: 80,
            dstate: 128,
            ngroups: 8,
        },
    ];

    /// The preset called `name`, if any.
    pub fn find(name: &str) -> Option<&'static ModelPreset> {
        Self::ALL.iter().find(|p| p.name == name)
    }

    /// The step at this preset's sizes with `batch` sequences of `tokens` tokens each (1: a
    /// decode step; 2..=16: a verify step), 5 Philox rounds; the filler rewrites a conv1d
    /// state's worth of data per sequence and layer: (nheads * dim + 2 * ngroups * dstate)
    /// channels x [`CONV_KERNEL`].
    pub fn shape(&self, batch: usize, tokens: usize) -> DecodeShape {
        DecodeShape {
            layers: self.layers,
            batch,
            nheads: self.nheads,
            dim: self.dim,
            dstate: self.dstate,
            ngroups: self.ngroups,
            philox_rounds: 5,
            filler_elems_per_seq: (self.nheads * self.dim + 2 * self.ngroups * self.dstate)
                * CONV_KERNEL,
            tokens,
        }
    }
}

impl DecodeShape {
    /// Nemotron-H at tensor parallelism 4 ([`ModelPreset::NEMOTRON_H_TP4`]): 40 layers,
    /// 32 heads, dim 64, dstate 128, 8 groups, 5 Philox rounds; the filler touches a conv1d
    /// state's worth of data (conv_dim 4096 x 4).
    pub fn nemotron_h_tp4(batch: usize) -> Self {
        ModelPreset::NEMOTRON_H_TP4.shape(batch, 1)
    }

    /// The verify step of speculative decoding with `tokens` tokens per sequence (1 + the
    /// draft tokens; the seed's MTP serving uses 8) at the same sizes as
    /// [`DecodeShape::nemotron_h_tp4`].
    pub fn nemotron_h_tp4_verify(batch: usize, tokens: usize) -> Self {
        ModelPreset::NEMOTRON_H_TP4.shape(batch, tokens)
    }
}

struct Layer {
    state: CudaSlice<f16>,
    out: CudaSlice<bf16>,
}

/// Every layer's state and output as raw 16-bit patterns (fp16 state, bf16 output), layer by
/// layer: what bit-exact comparisons between seed modes compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepSnapshot {
    /// Per layer, the state cache's fp16 bits.
    pub states: Vec<Vec<u16>>,
    /// Per layer, the output's bf16 bits.
    pub outs: Vec<Vec<u16>>,
}

/// The device buffers of a simulated decode step.
pub struct DecodeStep {
    shape: DecodeShape,
    stream: Arc<CudaStream>,
    layers: Vec<Layer>,
    initial_state: CudaSlice<f16>,
    x: CudaSlice<bf16>,
    dt: CudaSlice<bf16>,
    a: CudaSlice<f32>,
    b: CudaSlice<bf16>,
    c: CudaSlice<bf16>,
    d: CudaSlice<bf16>,
    dt_bias: CudaSlice<bf16>,
    indices: CudaSlice<i32>,
    /// Verify steps: `cu_seqlens` (batch + 1) and `num_accepted_tokens` (batch).
    cu_seqlens: CudaSlice<i32>,
    num_accepted: CudaSlice<i32>,
    fixed_seed: CudaSlice<i64>,
    /// The counter modes: the device counter and one seed per layer.
    counter: CudaSlice<i64>,
    counter_seeds: CudaSlice<i64>,
    filler: CudaSlice<f32>,
}

/// Deterministic pseudo-random values in [-1, 1) (SplitMix64).
fn values(n: usize, salt: u64) -> impl Iterator<Item = f32> {
    (0..n as u64).map(move |i| {
        let mut z = (i ^ salt.rotate_left(17))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(salt);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    })
}

impl DecodeStep {
    /// Allocates and fills the buffers on `stream` (inputs shared by the layers, one state cache
    /// of `batch` slots per layer).
    pub fn new(stream: &Arc<CudaStream>, shape: DecodeShape) -> Result<Self> {
        let DecodeShape {
            batch,
            nheads,
            dim,
            dstate,
            ngroups,
            ..
        } = shape;
        if shape.layers == 0 || batch == 0 {
            return Err(Error::invalid("shape", "layers and batch must be >= 1"));
        }
        let tokens = shape.tokens;
        if tokens == 0 || tokens > crate::ssu::mtp::MTP_MAX_TOKENS {
            return Err(Error::invalid(
                "shape",
                format!(
                    "tokens must be in 1..={}, got {tokens}",
                    crate::ssu::mtp::MTP_MAX_TOKENS
                ),
            ));
        }
        // Verify steps: slot 0 is the null block (pad), sequence b owns slots
        // 1 + b * tokens .. 1 + (b + 1) * tokens (token t writes the t-th).
        let slots = if tokens > 1 {
            1 + batch * tokens
        } else {
            batch
        };
        let rows = batch * tokens;
        let bf = |n, salt, scale: f32| -> Vec<bf16> {
            values(n, salt).map(|v| bf16::from_f32(v * scale)).collect()
        };
        let state_elems = slots * nheads * dim * dstate;
        let init: Vec<f16> = values(state_elems, 1)
            .map(|v| f16::from_f32(v * 0.5))
            .collect();
        let initial_state = stream.clone_htod(&init)?;
        let mut layers = Vec::with_capacity(shape.layers);
        for _ in 0..shape.layers {
            layers.push(Layer {
                state: stream.clone_dtod(&initial_state)?,
                out: stream.alloc_zeros::<bf16>(rows * nheads * dim)?,
            });
        }
        let a: Vec<f32> = values(nheads, 5).map(|v| -1.0 - 3.0 * v.abs()).collect();
        let dt: Vec<bf16> = values(rows * nheads, 3)
            .map(|v| bf16::from_f32(v - 1.0))
            .collect();
        let indices: Vec<i32> = if tokens > 1 {
            (1..=(batch * tokens) as i32).collect()
        } else {
            (0..batch as i32).collect()
        };
        let cu: Vec<i32> = (0..=batch).map(|b| (b * tokens) as i32).collect();
        // Accepted tokens of the previous verify step cycle through 1..=tokens.
        let accepted: Vec<i32> = (0..batch).map(|b| (b % tokens) as i32 + 1).collect();
        Ok(Self {
            shape,
            stream: stream.clone(),
            layers,
            initial_state,
            x: stream.clone_htod(&bf(rows * nheads * dim, 2, 1.0))?,
            dt: stream.clone_htod(&dt)?,
            a: stream.clone_htod(&a)?,
            b: stream.clone_htod(&bf(rows * ngroups * dstate, 6, 0.3))?,
            c: stream.clone_htod(&bf(rows * ngroups * dstate, 7, 0.3))?,
            d: stream.clone_htod(&bf(nheads, 8, 1.0))?,
            dt_bias: stream.clone_htod(&bf(nheads, 4, 0.25))?,
            indices: stream.clone_htod(&indices)?,
            cu_seqlens: stream.clone_htod(&cu)?,
            num_accepted: stream.clone_htod(&accepted)?,
            fixed_seed: stream.clone_htod(&[0x5EED_i64])?,
            counter: stream.clone_htod(&[0_i64])?,
            counter_seeds: stream.alloc_zeros::<i64>(shape.layers)?,
            filler: stream.alloc_zeros::<f32>(batch * shape.filler_elems_per_seq)?,
        })
    }

    /// The shape.
    pub fn shape(&self) -> &DecodeShape {
        &self.shape
    }

    /// Restores every layer's state to the initial values (on the stream).
    pub fn reset_states(&mut self) -> Result<()> {
        for layer in &mut self.layers {
            self.stream
                .memcpy_dtod(&self.initial_state, &mut layer.state)?;
        }
        Ok(())
    }

    /// Sets the device counter of the counter modes (on the stream).
    pub fn set_counter(&mut self, value: i64) -> Result<()> {
        self.stream.memcpy_htod(&[value], &mut self.counter)?;
        Ok(())
    }

    /// Reads the device counter of the counter modes (synchronises the stream).
    pub fn counter(&self) -> Result<i64> {
        Ok(self.stream.clone_dtoh(&self.counter)?[0])
    }

    /// Downloads every layer's state and output (raw bits), for bit-exact comparisons.
    pub fn download(&self) -> Result<StepSnapshot> {
        let mut states = Vec::new();
        let mut outs = Vec::new();
        for layer in &self.layers {
            states.push(
                self.stream
                    .clone_dtoh(&layer.state)?
                    .iter()
                    .map(|v| v.to_bits())
                    .collect(),
            );
            outs.push(
                self.stream
                    .clone_dtoh(&layer.out)?
                    .iter()
                    .map(|v| v.to_bits())
                    .collect(),
            );
        }
        Ok(StepSnapshot { states, outs })
    }

    /// Enqueues one decode step on the stream with seeds from `mode`. `gen` advances by 4 per
    /// layer (eagerly) for the generator modes, exactly like stock; the counter modes advance
    /// the device counter by one per layer instead, and [`SeedMode::Fixed`] neither. Returns
    /// the summary of the prefetcher's forward for [`SeedMode::Prefetch`] and
    /// [`SeedMode::Fused`] (for the latter `prefetched` counts the chained layers).
    pub fn run(
        &mut self,
        mode: SeedMode,
        prefetcher: &mut Prefetcher,
        gen: &mut Generator,
    ) -> Result<Option<ForwardSummary>> {
        let DecodeShape {
            batch,
            nheads,
            dim,
            dstate,
            ngroups,
            philox_rounds,
            tokens,
            ..
        } = self.shape;
        let stream = self.stream.clone();
        nvtx::range_push!("decode step: {} b{}", mode.name(), batch);
        let result = (|| -> Result<Option<ForwardSummary>> {
            match mode {
                SeedMode::Prefetch => prefetcher.begin_forward(&stream, gen)?,
                SeedMode::Fused => prefetcher.begin_fused_forward(&stream, gen)?,
                SeedMode::Counter => {
                    counter_seeds(
                        &stream,
                        &mut self.counter,
                        &mut self.counter_seeds,
                        self.shape.layers,
                    )?;
                }
                _ => {}
            }
            for l in 0..self.shape.layers {
                nvtx::range_push!("layer {l} ({})", mode.name());
                let r = (|| -> Result<()> {
                    filler(&stream, &mut self.filler, 1)?;
                    let seed_ptr;
                    let fused;
                    let seed = match mode {
                        SeedMode::Stock | SeedMode::Prefetch => {
                            seed_ptr = prefetcher.seed(&stream, gen, l as u32)?;
                            SeedSource::Prefetched(seed_ptr)
                        }
                        SeedMode::Fused | SeedMode::FusedPerCall => {
                            fused = prefetcher.fused_seed(&stream, gen)?;
                            SeedSource::Fused(fused)
                        }
                        SeedMode::Fixed => {
                            SeedSource::Pointer(Tensor::contiguous(&self.fixed_seed, &[1])?)
                        }
                        SeedMode::CounterStock => {
                            counter_seeds(
                                &stream,
                                &mut self.counter,
                                &mut self.counter_seeds.slice_mut(l..l + 1),
                                1,
                            )?;
                            SeedSource::Pointer(Tensor::contiguous(
                                self.counter_seeds.slice(l..l + 1),
                                &[1],
                            )?)
                        }
                        SeedMode::Counter => SeedSource::Pointer(Tensor::contiguous(
                            self.counter_seeds.slice(l..l + 1),
                            &[1],
                        )?),
                    };
                    let layer = &mut self.layers[l];
                    if tokens > 1 {
                        let slots = layer.state.len() / (nheads * dim * dstate);
                        let rows = batch * tokens;
                        let index = Tensor::contiguous(&self.indices, &[batch, tokens])?;
                        let mut args = MtpArgs::new(
                            TensorMut::contiguous(&mut layer.state, &[slots, nheads, dim, dstate])?,
                            Tensor::contiguous(&self.x, &[rows, nheads, dim])?,
                            Tensor::new(&self.dt, &[rows, nheads, dim], &[nheads, 1, 0])?,
                            Tensor::new(&self.a, &[nheads, dim, dstate], &[1, 0, 0])?,
                            Tensor::contiguous(&self.b, &[rows, ngroups, dstate])?,
                            Tensor::contiguous(&self.c, &[rows, ngroups, dstate])?,
                            TensorMut::contiguous(&mut layer.out, &[rows, nheads, dim])?,
                        )
                        .d(Tensor::new(&self.d, &[nheads, dim], &[1, 0])?)
                        .dt_bias(Tensor::new(&self.dt_bias, &[nheads, dim], &[1, 0])?)
                        .state_batch_indices(index)
                        .dst_state_batch_indices(Tensor::contiguous(
                            &self.indices,
                            &[batch, tokens],
                        )?)
                        .num_accepted_tokens(Tensor::contiguous(&self.num_accepted, &[batch])?)
                        .cu_seqlens(Tensor::contiguous(&self.cu_seqlens, &[batch + 1])?)
                        .cache_steps(tokens)
                        .pad_slot_id(0)
                        .dt_softplus(true)
                        .stochastic_rounding(seed, philox_rounds);
                        return selective_state_update_mtp(&stream, &mut args);
                    }
                    let mut args = SsuArgs::new(
                        TensorMut::contiguous(&mut layer.state, &[batch, nheads, dim, dstate])?,
                        Tensor::contiguous(&self.x, &[batch, nheads, dim])?,
                        Tensor::new(&self.dt, &[batch, nheads, dim], &[nheads, 1, 0])?,
                        Tensor::new(&self.a, &[nheads, dim, dstate], &[1, 0, 0])?,
                        Tensor::contiguous(&self.b, &[batch, ngroups, dstate])?,
                        Tensor::contiguous(&self.c, &[batch, ngroups, dstate])?,
                        TensorMut::contiguous(&mut layer.out, &[batch, nheads, dim])?,
                    )
                    .d(Tensor::new(&self.d, &[nheads, dim], &[1, 0])?)
                    .dt_bias(Tensor::new(&self.dt_bias, &[nheads, dim], &[1, 0])?)
                    .state_batch_indices(Tensor::contiguous(&self.indices, &[batch])?)
                    .pad_slot_id(-1)
                    .dt_softplus(true)
                    .algorithm(Algorithm::Auto)
                    .stochastic_rounding(seed, philox_rounds);
                    selective_state_update(&stream, &mut args)
                })();
                nvtx::range_pop!();
                r?;
            }
            if matches!(mode, SeedMode::Prefetch | SeedMode::Fused) {
                return Ok(Some(prefetcher.end_forward()?));
            }
            Ok(None)
        })();
        nvtx::range_pop!();
        result
    }
}
