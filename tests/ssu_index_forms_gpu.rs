//! GPU tests of FlashInfer's index forms that the kernels serve since its argument rules were
//! adopted (FlashInfer 0.7.2.post1 / 0.7.4: index tensors longer than the batch, a 2-D index
//! wider than T, `num_accepted_tokens` and `cu_seqlens` of another dtype than the slot indices,
//! a 1-D dst index in the multi-token form). Each form is run next to an equivalent form the
//! kernels served before, from the same state, and both must leave every state and `out` bit
//! the same: padding rows and columns are never read, a 1-D dst index is a 2-D one repeating
//! its slot, and the run-time kernel that reads an index dtype other than the slot indices'
//! gives the compiled-in kernel's bits (both are FlashInfer's). The shapes are the hot ones
//! (F16 state, BF16 inputs, dim 64, dstate 128, 10 Philox rounds), so that the mixed-dtype run
//! is the run-time kernel and its pair a compiled-in one (checked with the launch plan).

mod common;

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use half::{bf16, f16};
use mamba_ssu::ssu::{
    mtp_launch_plan, selective_state_update, selective_state_update_mtp, MtpArgs, SeedSource,
    SsuArgs, Tensor, TensorMut,
};

const SLOTS: usize = 12;
const BATCH: usize = 2;
const T: usize = 4;
const NH: usize = 4;
const DIM: usize = 64;
const DS: usize = 128;
const ROW: usize = NH * DIM;
const ROUNDS: u32 = 10;

fn bf(n: usize, k: usize) -> Vec<bf16> {
    (0..n)
        .map(|i| bf16::from_f32(((i * 7 + k) % 23) as f32 / 32.0 - 0.3))
        .collect()
}

/// The inputs of every run (T tokens per sequence, or the same rows as varlen tokens).
struct Inputs {
    state: Vec<f16>,
    x: CudaSlice<bf16>,
    dt: CudaSlice<bf16>,
    a: CudaSlice<f32>,
    b: CudaSlice<bf16>,
    c: CudaSlice<bf16>,
    seed: CudaSlice<i64>,
}

fn inputs(stream: &Arc<CudaStream>) -> Inputs {
    Inputs {
        state: (0..SLOTS * NH * DIM * DS)
            .map(|i| f16::from_f32(((i * 5) % 31) as f32 / 16.0 - 1.0))
            .collect(),
        x: stream.clone_htod(&bf(BATCH * T * ROW, 1)).unwrap(),
        dt: stream.clone_htod(&bf(BATCH * T * NH, 2)).unwrap(),
        a: stream.clone_htod(&vec![-1.25f32; NH]).unwrap(),
        b: stream.clone_htod(&bf(BATCH * T * DS, 3)).unwrap(),
        c: stream.clone_htod(&bf(BATCH * T * DS, 4)).unwrap(),
        seed: stream.clone_htod(&[0x5EED_1234i64]).unwrap(),
    }
}

/// Index values on the device, as i32 or i64.
enum Idx {
    I32(CudaSlice<i32>),
    I64(CudaSlice<i64>),
}

impl Idx {
    fn new(stream: &Arc<CudaStream>, values: &[i64], wide: bool) -> Idx {
        if wide {
            Idx::I64(stream.clone_htod(values).unwrap())
        } else {
            let v: Vec<i32> = values.iter().map(|&v| v as i32).collect();
            Idx::I32(stream.clone_htod(&v).unwrap())
        }
    }

    fn tensor(&self, shape: &[usize]) -> Tensor<'_> {
        match self {
            Idx::I32(b) => Tensor::contiguous(b, shape).unwrap(),
            Idx::I64(b) => Tensor::contiguous(b, shape).unwrap(),
        }
    }
}

/// The state and out bits a run leaves.
type Bits = (Vec<u16>, Vec<u16>);

fn bits(stream: &Arc<CudaStream>, state: &CudaSlice<f16>, out: &CudaSlice<bf16>) -> Bits {
    (
        stream
            .clone_dtoh(state)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        stream
            .clone_dtoh(out)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
    )
}

/// The index tensors of a multi-token run.
#[derive(Default)]
struct Ix<'x> {
    read: Option<Tensor<'x>>,
    dst: Option<Tensor<'x>>,
    counts: Option<Tensor<'x>>,
}

/// A multi-token call: fixed length, or (`varlen`) the same rows as BATCH sequences of at most
/// T tokens with `cu` as offsets; `ix` its index tensors. Returns the bits and whether the
/// compiled-in kernel ran.
fn run_mtp(stream: &Arc<CudaStream>, i: &Inputs, varlen: Option<&Idx>, ix: Ix<'_>) -> (Bits, bool) {
    let mut state = stream.clone_htod(&i.state).unwrap();
    let mut out = stream.alloc_zeros::<bf16>(BATCH * T * ROW).unwrap();
    let compiled;
    {
        let n = BATCH * T;
        let (lead, dt_strides): (Vec<usize>, Vec<usize>) = if varlen.is_some() {
            (vec![n], vec![NH, 1, 0])
        } else {
            (vec![BATCH, T], vec![T * NH, NH, 1, 0])
        };
        let shape = |inner: &[usize]| [&lead[..], inner].concat();
        let mut a = MtpArgs::new(
            TensorMut::contiguous(&mut state, &[SLOTS, NH, DIM, DS]).unwrap(),
            Tensor::contiguous(&i.x, &shape(&[NH, DIM])).unwrap(),
            Tensor::new(&i.dt, &shape(&[NH, DIM]), &dt_strides).unwrap(),
            Tensor::new(&i.a, &[NH, DIM, DS], &[1, 0, 0]).unwrap(),
            Tensor::contiguous(&i.b, &shape(&[1, DS])).unwrap(),
            Tensor::contiguous(&i.c, &shape(&[1, DS])).unwrap(),
            TensorMut::contiguous(&mut out, &shape(&[NH, DIM])).unwrap(),
        )
        .stochastic_rounding(
            SeedSource::Pointer(Tensor::contiguous(&i.seed, &[1]).unwrap()),
            ROUNDS,
        );
        if let Some(cu) = varlen {
            a = a.cu_seqlens(cu.tensor(&[BATCH + 1])).cache_steps(T);
        }
        if let Some(t) = ix.read {
            a = a.state_batch_indices(t);
        }
        if let Some(t) = ix.dst {
            a = a.dst_state_batch_indices(t);
        }
        if let Some(t) = ix.counts {
            a = a.num_accepted_tokens(t);
        }
        compiled = mtp_launch_plan(&a.spec(), 132).unwrap().compiled_kernel;
        selective_state_update_mtp(stream, &mut a).unwrap();
    }
    (bits(stream, &state, &out), compiled)
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn multi_token_index_forms_give_the_served_forms_bits() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let i = inputs(&stream);
    let read = Idx::new(&stream, &[1, 2], false);
    let padded_read = Idx::new(&stream, &[1, 2, 7, 7, 7], false);

    // A 1-D dst index: every token of sequence b to slot dst[b], as a 2-D index repeating it.
    let dst1 = Idx::new(&stream, &[3, 4], false);
    let dst2 = Idx::new(&stream, &[3, 3, 3, 3, 4, 4, 4, 4], false);
    let (one_d, _) = run_mtp(
        &stream,
        &i,
        None,
        Ix {
            read: Some(read.tensor(&[BATCH])),
            dst: Some(dst1.tensor(&[BATCH])),
            ..Ix::default()
        },
    );
    let (two_d, _) = run_mtp(
        &stream,
        &i,
        None,
        Ix {
            read: Some(read.tensor(&[BATCH])),
            dst: Some(dst2.tensor(&[BATCH, T])),
            ..Ix::default()
        },
    );
    assert!(one_d == two_d, "a 1-D dst index differs from its 2-D form");

    // Padded rows and columns: a (5,) read index and a (3, T + 2) dst index whose first rows and
    // columns are the (2,) and (2, T) ones.
    // (The two sequences write disjoint slots: blocks of different sequences run in no fixed
    // order, so a slot written by both would hold either's state.)
    let dst = Idx::new(&stream, &[3, 4, 5, 6, 8, 9, 10, 11], false);
    let padded_dst = Idx::new(
        &stream,
        &[3, 4, 5, 6, 7, 7, 8, 9, 10, 11, 7, 7, 7, 7, 7, 7, 7, 7],
        false,
    );
    let (plain, _) = run_mtp(
        &stream,
        &i,
        None,
        Ix {
            read: Some(read.tensor(&[BATCH])),
            dst: Some(dst.tensor(&[BATCH, T])),
            ..Ix::default()
        },
    );
    let (padded, _) = run_mtp(
        &stream,
        &i,
        None,
        Ix {
            read: Some(padded_read.tensor(&[BATCH + 3])),
            dst: Some(padded_dst.tensor(&[BATCH + 1, T + 2])),
            ..Ix::default()
        },
    );
    assert!(
        plain == padded,
        "padded index tensors differ from the unpadded ones"
    );

    // num_accepted_tokens as I64 with I32 slot indices (the run-time kernel) and as I32 (the
    // compiled-in one): a 2-D read index, counts 2 and 3 (read slots 5 and 4).
    let read2 = Idx::new(&stream, &[1, 5, 6, 7, 2, 3, 4, 6], false);
    let counts32 = Idx::new(&stream, &[2, 3], false);
    let counts64 = Idx::new(&stream, &[2, 3], true);
    let (r32, hot32) = run_mtp(
        &stream,
        &i,
        None,
        Ix {
            read: Some(read2.tensor(&[BATCH, T])),
            counts: Some(counts32.tensor(&[BATCH])),
            ..Ix::default()
        },
    );
    let (r64, hot64) = run_mtp(
        &stream,
        &i,
        None,
        Ix {
            read: Some(read2.tensor(&[BATCH, T])),
            counts: Some(counts64.tensor(&[BATCH])),
            ..Ix::default()
        },
    );
    assert!((hot32, hot64) == (true, false), "{hot32} {hot64}");
    assert!(r32 == r64, "I64 num_accepted_tokens differs from I32");

    // Varlen: I64 cu_seqlens with I32 slot indices, and I32 (sequences of 3 and 4 tokens).
    let cu32 = Idx::new(&stream, &[0, 3, 7], false);
    let cu64 = Idx::new(&stream, &[0, 3, 7], true);
    let (v32, vhot32) = run_mtp(
        &stream,
        &i,
        Some(&cu32),
        Ix {
            read: Some(read.tensor(&[BATCH])),
            ..Ix::default()
        },
    );
    let (v64, vhot64) = run_mtp(
        &stream,
        &i,
        Some(&cu64),
        Ix {
            read: Some(read.tensor(&[BATCH])),
            ..Ix::default()
        },
    );
    assert!((vhot32, vhot64) == (true, false), "{vhot32} {vhot64}");
    assert!(v32 == v64, "I64 cu_seqlens differs from I32");
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn single_token_padded_indices_give_the_unpadded_bits() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let i = inputs(&stream);
    let run = |sbi: &Idx, sbi_shape: &[usize], dst: &Idx, dst_shape: &[usize]| -> Bits {
        let mut state = stream.clone_htod(&i.state).unwrap();
        let mut out = stream.alloc_zeros::<bf16>(BATCH * ROW).unwrap();
        {
            let n = BATCH * ROW;
            let mut a = SsuArgs::new(
                TensorMut::contiguous(&mut state, &[SLOTS, NH, DIM, DS]).unwrap(),
                Tensor::contiguous(i.x.slice(..n), &[BATCH, NH, DIM]).unwrap(),
                Tensor::new(&i.dt, &[BATCH, NH, DIM], &[NH, 1, 0]).unwrap(),
                Tensor::new(&i.a, &[NH, DIM, DS], &[1, 0, 0]).unwrap(),
                Tensor::contiguous(i.b.slice(..BATCH * DS), &[BATCH, 1, DS]).unwrap(),
                Tensor::contiguous(i.c.slice(..BATCH * DS), &[BATCH, 1, DS]).unwrap(),
                TensorMut::contiguous(&mut out, &[BATCH, NH, DIM]).unwrap(),
            )
            .state_batch_indices(sbi.tensor(sbi_shape))
            .dst_state_batch_indices(dst.tensor(dst_shape))
            .stochastic_rounding(
                SeedSource::Pointer(Tensor::contiguous(&i.seed, &[1]).unwrap()),
                ROUNDS,
            );
            selective_state_update(&stream, &mut a).unwrap();
        }
        bits(&stream, &state, &out)
    };
    for wide in [false, true] {
        let sbi = Idx::new(&stream, &[1, 2], wide);
        let dst = Idx::new(&stream, &[3, 4], wide);
        let padded_sbi = Idx::new(&stream, &[1, 2, 7, 7, 7, 7], wide);
        let padded_dst = Idx::new(&stream, &[3, 9, 4, 9, 7, 7], wide);
        let plain = run(&sbi, &[BATCH], &dst, &[BATCH]);
        let padded = run(&padded_sbi, &[BATCH + 4], &padded_dst, &[BATCH + 1, 2]);
        assert!(plain == padded, "wide {wide}: padded indices differ");
    }
}
