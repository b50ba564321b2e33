//! GPU tests of the two SSU front doors of the safe API, `selective_state_update` and
//! `selective_state_update_mtp`, on malformed calls: a rejection of the C contract surfaces with
//! the argument named and the `Error` variant of its status (the pure check runs first), the
//! rules only the Rust layer sees (buffers, devices, the seed tensor's memory) are typed too, a
//! pointer only the launch sees (a misaligned view) is caught by the launch's own check, and a
//! rejected call leaves every buffer as it was (nothing launched). The rules themselves are
//! tested at the C level (`src/contract_tests.rs`).

mod common;

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use half::{bf16, f16};
use mamba_ssu::ssu::{
    selective_state_update, selective_state_update_mtp, MtpArgs, SeedSource, SsuArgs, Tensor,
    TensorMut,
};
use mamba_ssu::Error;

const SLOTS: usize = 4;
const BATCH: usize = 2;
const T: usize = 4;
const NH: usize = 4;
const DIM: usize = 64;
const DS: usize = 128;
const ROW: usize = NH * DIM;

/// The read-only buffers of a small call of either form (sized for T tokens per sequence).
struct Inputs {
    x: CudaSlice<bf16>,
    dt: CudaSlice<bf16>,
    a: CudaSlice<f32>,
    bc: CudaSlice<bf16>,
    slots: CudaSlice<i32>,
    dst: CudaSlice<i32>,
    seed: CudaSlice<i64>,
    seed32: CudaSlice<i32>,
}

/// The written buffers, filled with distinct values so that any write shows.
struct Outputs {
    state: CudaSlice<f16>,
    out: CudaSlice<bf16>,
    inter: CudaSlice<f16>,
}

fn bf(n: usize) -> Vec<bf16> {
    (0..n)
        .map(|i| bf16::from_f32((i % 13) as f32 / 16.0))
        .collect()
}

fn setup(stream: &Arc<CudaStream>) -> (Inputs, Outputs) {
    let state: Vec<f16> = (0..SLOTS * NH * DIM * DS)
        .map(|i| f16::from_f32((i % 29) as f32 / 32.0))
        .collect();
    let inputs = Inputs {
        x: stream.clone_htod(&bf(BATCH * T * ROW + 8)).unwrap(),
        dt: stream.clone_htod(&bf(BATCH * T * NH)).unwrap(),
        a: stream.clone_htod(&vec![-1.0f32; NH]).unwrap(),
        bc: stream.clone_htod(&bf(BATCH * T * DS + 8)).unwrap(),
        slots: stream.clone_htod(&[1i32, 2]).unwrap(),
        dst: stream.clone_htod(&[1i32; BATCH * T]).unwrap(),
        seed: stream.clone_htod(&[42i64]).unwrap(),
        seed32: stream.clone_htod(&[42i32]).unwrap(),
    };
    let outputs = Outputs {
        state: stream.clone_htod(&state).unwrap(),
        out: stream.clone_htod(&bf(BATCH * T * ROW)).unwrap(),
        inter: stream
            .alloc_zeros::<f16>(BATCH * T * NH * DIM * DS)
            .unwrap(),
    };
    (inputs, outputs)
}

/// Every written buffer as raw bits.
fn snapshot(stream: &Arc<CudaStream>, o: &Outputs) -> Vec<Vec<u16>> {
    vec![
        stream
            .clone_dtoh(&o.state)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        stream
            .clone_dtoh(&o.out)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        stream
            .clone_dtoh(&o.inter)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
    ]
}

/// A valid single-token call (SR from the seed pointer) over `i` and `o`.
fn single<'a>(i: &'a Inputs, o: &'a mut Outputs) -> SsuArgs<'a> {
    let n = BATCH * ROW;
    SsuArgs::new(
        TensorMut::contiguous(&mut o.state, &[SLOTS, NH, DIM, DS]).unwrap(),
        Tensor::contiguous(i.x.slice(..n), &[BATCH, NH, DIM]).unwrap(),
        Tensor::new(&i.dt, &[BATCH, NH, DIM], &[NH, 1, 0]).unwrap(),
        Tensor::new(&i.a, &[NH, DIM, DS], &[1, 0, 0]).unwrap(),
        Tensor::contiguous(i.bc.slice(..BATCH * DS), &[BATCH, 1, DS]).unwrap(),
        Tensor::contiguous(i.bc.slice(..BATCH * DS), &[BATCH, 1, DS]).unwrap(),
        TensorMut::contiguous(o.out.slice_mut(..n), &[BATCH, NH, DIM]).unwrap(),
    )
    .state_batch_indices(Tensor::contiguous(&i.slots, &[BATCH]).unwrap())
    .stochastic_rounding(
        SeedSource::Pointer(Tensor::contiguous(&i.seed, &[1]).unwrap()),
        10,
    )
}

/// A valid fixed-length multi-token call (T tokens, the read slots written) over `i`, `state`
/// and `out`.
fn multi<'a>(
    i: &'a Inputs,
    state: &'a mut CudaSlice<f16>,
    out: &'a mut CudaSlice<bf16>,
) -> MtpArgs<'a> {
    let n = BATCH * T * ROW;
    MtpArgs::new(
        TensorMut::contiguous(state, &[SLOTS, NH, DIM, DS]).unwrap(),
        Tensor::contiguous(i.x.slice(..n), &[BATCH, T, NH, DIM]).unwrap(),
        Tensor::new(&i.dt, &[BATCH, T, NH, DIM], &[T * NH, NH, 1, 0]).unwrap(),
        Tensor::new(&i.a, &[NH, DIM, DS], &[1, 0, 0]).unwrap(),
        Tensor::contiguous(i.bc.slice(..BATCH * T * DS), &[BATCH, T, 1, DS]).unwrap(),
        Tensor::contiguous(i.bc.slice(..BATCH * T * DS), &[BATCH, T, 1, DS]).unwrap(),
        TensorMut::contiguous(out, &[BATCH, T, NH, DIM]).unwrap(),
    )
    .state_batch_indices(Tensor::contiguous(&i.slots, &[BATCH]).unwrap())
    .stochastic_rounding(
        SeedSource::Pointer(Tensor::contiguous(&i.seed, &[1]).unwrap()),
        10,
    )
}

/// `r` is an `Unsupported` (`unsupported`) or `InvalidArgument` error naming `argument`, its
/// message holding `needle`.
fn assert_rejected(r: mamba_ssu::Result<()>, unsupported: bool, argument: &str, needle: &str) {
    let (kind, got, message) = match r {
        Err(Error::InvalidArgument { argument, message }) => (false, argument, message),
        Err(Error::Unsupported { argument, message }) => (true, argument, message),
        other => panic!("expected a rejection naming {argument}, got {other:?}"),
    };
    assert_eq!((kind, got), (unsupported, argument), "{message}");
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn single_token_rejections_are_typed_and_launch_nothing() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let (i, mut o) = setup(&stream);
    let before = snapshot(&stream, &o);
    let n = BATCH * ROW;

    // The C contract: each status as its variant, the argument named.
    let mut a = single(&i, &mut o);
    a.philox_rounds = u32::MAX;
    assert_rejected(
        selective_state_update(&stream, &mut a),
        false,
        "philox_rounds",
        "does not fit in the C ABI's int32",
    );
    let mut a = single(&i, &mut o);
    a.x = Tensor::new(i.x.slice(..n), &[BATCH, NH, DIM], &[ROW, DIM, 2]).unwrap();
    assert_rejected(
        selective_state_update(&stream, &mut a),
        false,
        "x",
        "expected stride(2) == 1",
    );
    let mut a = single(&i, &mut o);
    a.x = Tensor::new(i.x.slice(..n), &[BATCH, NH, DIM], &[1 << 61, DIM, 1]).unwrap();
    assert_rejected(
        selective_state_update(&stream, &mut a),
        true,
        "x",
        "extent above 2^60 bytes",
    );
    let mut a = single(&i, &mut o);
    a.seed = None;
    assert_rejected(
        selective_state_update(&stream, &mut a),
        false,
        "seed.pointer",
        "null pointer",
    );
    // The Rust-only rules: a buffer one element short, a seed tensor that is not one int64.
    let mut a = single(&i, &mut o);
    a.x = Tensor::contiguous(i.x.slice(..n - 1), &[BATCH, NH, DIM]).unwrap();
    assert_rejected(
        selective_state_update(&stream, &mut a),
        false,
        "x",
        "but the buffer holds",
    );
    let mut a = single(&i, &mut o);
    a.seed = Some(SeedSource::Pointer(
        Tensor::contiguous(&i.seed32, &[1]).unwrap(),
    ));
    assert_rejected(
        selective_state_update(&stream, &mut a),
        false,
        "rand_seed",
        "one I64 element",
    );
    // What only the launch sees: a view one element in is 2 bytes off the 16-byte alignment.
    let mut a = single(&i, &mut o);
    a.x = Tensor::contiguous(i.x.slice(1..n + 1), &[BATCH, NH, DIM]).unwrap();
    assert_rejected(
        selective_state_update(&stream, &mut a),
        false,
        "x",
        "16-byte aligned",
    );
    // A buffer of another device (with two devices).
    if mamba_ssu::device::device_count().unwrap_or(0) >= 2 {
        let other = mamba_ssu::device::open(1).unwrap().new_stream().unwrap();
        let dt = other.clone_htod(&bf(BATCH * NH)).unwrap();
        let mut a = single(&i, &mut o);
        a.dt = Tensor::new(&dt, &[BATCH, NH, DIM], &[NH, 1, 0]).unwrap();
        match selective_state_update(&stream, &mut a) {
            Err(Error::WrongDevice {
                argument: "dt",
                expected: 0,
                got: 1,
            }) => {}
            other => panic!("expected WrongDevice(dt), got {other:?}"),
        }
    }
    assert!(snapshot(&stream, &o) == before, "a rejected call wrote");
    // The same call, valid, writes the state (the comparison above can fail).
    selective_state_update(&stream, &mut single(&i, &mut o)).unwrap();
    assert!(snapshot(&stream, &o) != before);
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn multi_token_rejections_are_typed_and_launch_nothing() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let (i, mut o) = setup(&stream);
    let before = snapshot(&stream, &o);
    let n = BATCH * T * DS;

    // The C contract: a cu_seqlens with a 4-D x, a dst index narrower than T.
    let mut a = multi(&i, &mut o.state, &mut o.out);
    a.cu_seqlens = Some(Tensor::contiguous(i.slots.slice(..BATCH), &[BATCH]).unwrap());
    assert_rejected(
        selective_state_update_mtp(&stream, &mut a),
        false,
        "cu_seqlens",
        "got a 4-D x",
    );
    let mut a = multi(&i, &mut o.state, &mut o.out);
    a.dst_state_batch_indices =
        Some(Tensor::contiguous(i.dst.slice(..BATCH), &[BATCH, 1]).unwrap());
    assert_rejected(
        selective_state_update_mtp(&stream, &mut a),
        false,
        "dst_state_batch_indices",
        "expected size(1) >= T",
    );
    // Rust-only: the dst index's buffer one element short.
    let mut a = multi(&i, &mut o.state, &mut o.out);
    a.dst_state_batch_indices = Some(
        Tensor::contiguous(i.dst.slice(..BATCH * T - 1), &[BATCH, T])
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_rejected(
        selective_state_update_mtp(&stream, &mut a),
        false,
        "dst_state_batch_indices",
        "but the buffer holds",
    );
    // The launch's check: B one bf16 in is off its 16-byte alignment.
    let mut a = multi(&i, &mut o.state, &mut o.out);
    a.b = Tensor::contiguous(i.bc.slice(1..n + 1), &[BATCH, T, 1, DS]).unwrap();
    assert_rejected(
        selective_state_update_mtp(&stream, &mut a),
        false,
        "B",
        "16-byte aligned",
    );
    assert!(snapshot(&stream, &o) == before, "a rejected call wrote");
    selective_state_update_mtp(&stream, &mut multi(&i, &mut o.state, &mut o.out)).unwrap();
    assert!(snapshot(&stream, &o) != before);
}

/// The intermediate buffer and a dst index at once: two write modes, C's INVALID_VALUE, an
/// `InvalidArgument` naming the dst index; nothing written to the buffer either.
#[test]
#[ignore = "requires a CUDA GPU"]
fn two_write_modes_are_an_invalid_argument() {
    let Some((_ctx, stream)) = common::gpu() else {
        return;
    };
    let (i, mut o) = setup(&stream);
    let before = snapshot(&stream, &o);
    {
        let Outputs { state, out, inter } = &mut o;
        let mut a = multi(&i, state, out)
            .dst_state_batch_indices(Tensor::contiguous(&i.dst, &[BATCH, T]).unwrap())
            .intermediate_states(TensorMut::contiguous(inter, &[BATCH, T, NH, DIM, DS]).unwrap());
        assert_rejected(
            selective_state_update_mtp(&stream, &mut a),
            false,
            "dst_state_batch_indices",
            "two write modes at once",
        );
    }
    assert!(snapshot(&stream, &o) == before, "a rejected call wrote");
}
