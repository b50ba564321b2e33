//! [`validate`]: the kernel's whole argument contract (the table in the [`crate::ssu`] docs)
//! checked as a pure function of the layouts, before anything touches a device.

use crate::error::{Error, Result};
use crate::tensor::{fmt_dims, DType, TensorLayout, VECTOR_ALIGN};

use super::args::{SeedSpec, SsuProblem, SsuSpec};

/// The `dstate` values the kernel supports.
pub const SUPPORTED_DSTATE: [usize; 3] = [64, 128, 256];

/// Most Philox rounds of stochastic rounding.
pub const MAX_PHILOX_ROUNDS: u32 = 10;

pub(super) fn expect_rank(
    name: &'static str,
    l: &TensorLayout,
    rank: usize,
    what: &str,
) -> Result<()> {
    if l.rank() != rank {
        return Err(Error::invalid(
            name,
            format!(
                "expected {rank} dimensions {what}, got {} with shape {}",
                l.rank(),
                fmt_dims(l.shape())
            ),
        ));
    }
    Ok(())
}

pub(super) fn expect_float(name: &'static str, l: &TensorLayout) -> Result<()> {
    if !l.dtype().is_float() {
        return Err(Error::invalid(
            name,
            format!("expected dtype F16, BF16 or F32, got {}", l.dtype()),
        ));
    }
    Ok(())
}

pub(super) fn expect_dtype(
    name: &'static str,
    l: &TensorLayout,
    dtype: DType,
    why: &str,
) -> Result<()> {
    if l.dtype() != dtype {
        return Err(Error::invalid(
            name,
            format!("expected dtype {dtype} ({why}), got {}", l.dtype()),
        ));
    }
    Ok(())
}

/// Checks `l.shape()[k] == expected[k]` for every `Some`, naming the dimension.
pub(super) fn expect_dim(
    name: &'static str,
    l: &TensorLayout,
    k: usize,
    dim_name: &str,
    expected: usize,
) -> Result<()> {
    let got = l.shape()[k];
    if got != expected {
        return Err(Error::invalid(
            name,
            format!(
                "expected size({k}) == {dim_name} ({expected}), got {got} (shape {})",
                fmt_dims(l.shape())
            ),
        ));
    }
    Ok(())
}

pub(super) fn expect_stride(
    name: &'static str,
    l: &TensorLayout,
    k: usize,
    what: &str,
    expected: usize,
) -> Result<()> {
    let got = l.strides()[k];
    if got != expected {
        return Err(Error::invalid(
            name,
            format!("expected stride({k}) == {what} ({expected}), got {got}"),
        ));
    }
    Ok(())
}

pub(super) fn expect_nonempty(name: &'static str, l: &TensorLayout) -> Result<()> {
    if l.shape().contains(&0) {
        return Err(Error::invalid(
            name,
            format!(
                "expected every dimension >= 1, got shape {}",
                fmt_dims(l.shape())
            ),
        ));
    }
    Ok(())
}

/// `stride(k)` in bytes must be a multiple of [`VECTOR_ALIGN`].
pub(super) fn expect_aligned_stride(name: &'static str, l: &TensorLayout, k: usize) -> Result<()> {
    let s = l.strides()[k];
    let bytes = l.dtype().size_bytes();
    if (s as u128 * bytes as u128) % VECTOR_ALIGN as u128 != 0 {
        return Err(Error::invalid(
            name,
            format!(
                "expected stride({k}) to be a multiple of {} elements ({VECTOR_ALIGN}-byte \
                 alignment of {} elements), got {s}",
                VECTOR_ALIGN / bytes,
                l.dtype()
            ),
        ));
    }
    Ok(())
}

/// The largest reachable element must lie inside the buffer.
pub(super) fn expect_in_bounds(name: &'static str, l: &TensorLayout) -> Result<()> {
    match l.max_offset() {
        Some(m) if m < l.len() => Ok(()),
        Some(m) => Err(Error::invalid(
            name,
            format!(
                "shape {} with strides {} reaches element {m}, but the buffer holds {} elements",
                fmt_dims(l.shape()),
                fmt_dims(l.strides()),
                l.len()
            ),
        )),
        None => Err(Error::invalid(
            name,
            format!(
                "shape {} with strides {} has no element or an extent that overflows",
                fmt_dims(l.shape()),
                fmt_dims(l.strides())
            ),
        )),
    }
}

/// `x`, `z`, `out`: (batch, nheads, dim), input dtype, strides (16-byte multiple, dim, 1).
fn check_activation(
    name: &'static str,
    l: &TensorLayout,
    x: &TensorLayout,
    nheads: usize,
    dim: usize,
) -> Result<()> {
    expect_rank(name, l, 3, "(batch, nheads, dim)")?;
    if name != "x" {
        expect_dtype(name, l, x.dtype(), "the dtype of `x`")?;
        expect_dim(name, l, 0, "batch", x.shape()[0])?;
    }
    expect_nonempty(name, l)?;
    expect_dim(name, l, 1, "nheads", nheads)?;
    expect_dim(name, l, 2, "dim", dim)?;
    expect_stride(name, l, 2, "1", 1)?;
    expect_stride(name, l, 1, "dim", dim)?;
    expect_aligned_stride(name, l, 0)?;
    expect_in_bounds(name, l)
}

/// `D`, `dt_bias`: (nheads, dim), strides (1, 0), the dtype of `dt`.
fn check_per_head(
    name: &'static str,
    l: &TensorLayout,
    dt: &TensorLayout,
    nheads: usize,
    dim: usize,
) -> Result<()> {
    expect_rank(name, l, 2, "(nheads, dim)")?;
    expect_dtype(name, l, dt.dtype(), "the dtype of `dt`")?;
    expect_dim(name, l, 0, "nheads", nheads)?;
    expect_dim(name, l, 1, "dim", dim)?;
    expect_stride(name, l, 0, "1", 1)?;
    expect_stride(name, l, 1, "0", 0)?;
    expect_in_bounds(name, l)
}

/// `B`, `C`: (batch, ngroups, dstate), input dtype, strides (16-byte multiple, dstate, 1).
fn check_bc(
    name: &'static str,
    l: &TensorLayout,
    x: &TensorLayout,
    nheads: usize,
    dstate: usize,
) -> Result<usize> {
    expect_rank(name, l, 3, "(batch, ngroups, dstate)")?;
    expect_dtype(name, l, x.dtype(), "the dtype of `x`")?;
    expect_nonempty(name, l)?;
    expect_dim(name, l, 0, "batch", x.shape()[0])?;
    expect_dim(name, l, 2, "dstate", dstate)?;
    let ngroups = l.shape()[1];
    if nheads % ngroups != 0 {
        return Err(Error::invalid(
            name,
            format!("expected size(1) == ngroups dividing nheads ({nheads}), got {ngroups}"),
        ));
    }
    expect_stride(name, l, 2, "1", 1)?;
    expect_stride(name, l, 1, "dstate", dstate)?;
    expect_aligned_stride(name, l, 0)?;
    expect_in_bounds(name, l)?;
    Ok(ngroups)
}

fn check_indices(name: &'static str, l: &TensorLayout, batch: usize) -> Result<()> {
    if !matches!(l.dtype(), DType::I32 | DType::I64) {
        return Err(Error::invalid(
            name,
            format!("expected dtype I32 or I64, got {}", l.dtype()),
        ));
    }
    if l.rank() != 1 && l.rank() != 2 {
        return Err(Error::invalid(
            name,
            format!(
                "expected shape (batch,) or (batch, T), got {} dimensions {}",
                l.rank(),
                fmt_dims(l.shape())
            ),
        ));
    }
    expect_dim(name, l, 0, "batch", batch)?;
    expect_nonempty(name, l)?;
    expect_in_bounds(name, l)
}

/// The stochastic-rounding rules shared by both forms: `philox_rounds` in 0..=10, rounds > 0
/// need an F16 state (else [`Error::Unsupported`]) and a seed (a one-element int64 tensor, or
/// a fused source whose offset is a multiple of 4). Returns whether the state is rounded
/// stochastically. A seed given with 0 rounds is ignored.
pub(super) fn check_stochastic_rounding(
    philox_rounds: u32,
    state_dtype: DType,
    seed: Option<&SeedSpec>,
) -> Result<bool> {
    if philox_rounds > MAX_PHILOX_ROUNDS {
        return Err(Error::invalid(
            "philox_rounds",
            format!("expected 0..={MAX_PHILOX_ROUNDS}, got {}", philox_rounds),
        ));
    }
    let sr = philox_rounds > 0;
    if sr {
        if state_dtype != DType::F16 {
            return Err(Error::unsupported(
                "philox_rounds",
                format!(
                    "stochastic rounding ({} rounds) needs an F16 state, got a {} state",
                    philox_rounds, state_dtype
                ),
            ));
        }
        match seed {
            None => {
                return Err(Error::invalid(
                    "rand_seed",
                    format!("philox_rounds = {} needs a seed, got none", philox_rounds),
                ))
            }
            Some(SeedSpec::Pointer(s)) => {
                expect_dtype("rand_seed", s, DType::I64, "one int64 seed")?;
                if s.numel() != Some(1) {
                    return Err(Error::invalid(
                        "rand_seed",
                        format!("expected one element, got shape {}", fmt_dims(s.shape())),
                    ));
                }
                expect_in_bounds("rand_seed", s)?;
            }
            Some(SeedSpec::FromGenerator { offset } | SeedSpec::FromValues { offset, .. }) => {
                if offset % 4 != 0 {
                    return Err(Error::invalid(
                        "seed_offset",
                        format!("expected a multiple of 4, got {offset}"),
                    ));
                }
            }
        }
    }
    Ok(sr)
}

/// The state's layout, the same for the single- and multi-token calls: (slots, nheads, dim,
/// dstate) of a float dtype, the inner three dims contiguous, dstate supported, the slot stride at
/// least a slot and 16-byte aligned, every element inside the buffer. Returns the four sizes.
pub(super) fn check_state(st: &TensorLayout) -> Result<[usize; 4]> {
    expect_rank("state", st, 4, "(slots, nheads, dim, dstate)")?;
    expect_float("state", st)?;
    expect_nonempty("state", st)?;
    let [slots, nheads, dim, dstate] = [st.shape[0], st.shape[1], st.shape[2], st.shape[3]];
    if !SUPPORTED_DSTATE.contains(&dstate) {
        return Err(Error::unsupported(
            "state",
            format!("expected size(3) == dstate in {{64, 128, 256}}, got {dstate}"),
        ));
    }
    expect_stride("state", st, 3, "1", 1)?;
    expect_stride("state", st, 2, "dstate", dstate)?;
    let head_block = dim
        .checked_mul(dstate)
        .ok_or_else(|| Error::invalid("state", "dim * dstate overflows"))?;
    expect_stride("state", st, 1, "dim * dstate", head_block)?;
    let slot_block = nheads
        .checked_mul(head_block)
        .ok_or_else(|| Error::invalid("state", "nheads * dim * dstate overflows"))?;
    if st.strides[0] < slot_block {
        return Err(Error::invalid(
            "state",
            format!(
                "expected stride(0) >= nheads * dim * dstate ({slot_block}), got {}",
                st.strides[0]
            ),
        ));
    }
    expect_aligned_stride("state", st, 0)?;
    expect_in_bounds("state", st)?;
    Ok([slots, nheads, dim, dstate])
}

/// Checks a call's layouts and flags against the kernel's contract (the module doc's table);
/// a pure function of `spec`, no device involved. Returns the call's sizes and dtypes.
///
/// Every violation is an [`Error::InvalidArgument`] (or, for a valid combination the kernels
/// do not serve, an [`Error::Unsupported`]) naming the argument (`state`, `x`, `dt`, `A`, `B`,
/// `C`, `D`, `z`, `dt_bias`, `out`, `state_batch_indices`, `dst_state_batch_indices`,
/// `rand_seed`, `seed_offset`, `philox_rounds`) and saying what was expected and what was got.
/// The C ABI's check of the same call runs last, so the two front doors accept the same calls.
/// `sr_rule` needs no check here (every [`SrRule`](crate::reference::SrRule) is valid, with or
/// without stochastic rounding); the C check rejects a raw value outside the enumeration.
pub fn validate(spec: &SsuSpec) -> Result<SsuProblem> {
    // state: (slots, nheads, dim, dstate), inner three dims contiguous.
    let st = &spec.state;
    let [slots, nheads, dim, dstate] = check_state(st)?;

    // x, out, z.
    let x = &spec.x;
    expect_rank("x", x, 3, "(batch, nheads, dim)")?;
    expect_float("x", x)?;
    if x.shape[0] == 0 {
        return Err(Error::invalid(
            "x",
            format!(
                "expected size(0) == batch >= 1, got {}",
                fmt_dims(x.shape())
            ),
        ));
    }
    check_activation("x", x, x, nheads, dim)?;
    let batch = x.shape[0];
    check_activation("out", &spec.out, x, nheads, dim)?;
    let row = nheads * dim; // <= nheads * dim * dstate, no overflow
    if batch > 1 && spec.out.strides[0] < row {
        return Err(Error::invalid(
            "out",
            format!(
                "expected stride(0) >= nheads * dim ({row}) so rows of different batch entries \
                 do not overlap, got {}",
                spec.out.strides[0]
            ),
        ));
    }
    if let Some(z) = &spec.z {
        check_activation("z", z, x, nheads, dim)?;
    }

    // dt: (batch, nheads, dim), strides (any, 1, 0), the weight dtype.
    let dt = &spec.dt;
    expect_rank("dt", dt, 3, "(batch, nheads, dim)")?;
    expect_float("dt", dt)?;
    expect_dim("dt", dt, 0, "batch", batch)?;
    expect_dim("dt", dt, 1, "nheads", nheads)?;
    expect_dim("dt", dt, 2, "dim", dim)?;
    expect_stride("dt", dt, 1, "1", 1)?;
    expect_stride("dt", dt, 2, "0", 0)?;
    expect_in_bounds("dt", dt)?;

    // A: (nheads, dim, dstate), strides (1, 0, 0), F32.
    let a = &spec.a;
    expect_rank("A", a, 3, "(nheads, dim, dstate)")?;
    expect_dtype("A", a, DType::F32, "FlashInfer's A is fp32")?;
    expect_dim("A", a, 0, "nheads", nheads)?;
    expect_dim("A", a, 1, "dim", dim)?;
    expect_dim("A", a, 2, "dstate", dstate)?;
    expect_stride("A", a, 0, "1", 1)?;
    expect_stride("A", a, 1, "0", 0)?;
    expect_stride("A", a, 2, "0", 0)?;
    expect_in_bounds("A", a)?;

    if let Some(d) = &spec.d {
        check_per_head("D", d, dt, nheads, dim)?;
    }
    if let Some(bias) = &spec.dt_bias {
        check_per_head("dt_bias", bias, dt, nheads, dim)?;
    }

    // B, C.
    let ngroups = check_bc("B", &spec.b, x, nheads, dstate)?;
    check_bc("C", &spec.c, x, nheads, dstate)?;
    expect_dim("C", &spec.c, 1, "ngroups (size(1) of `B`)", ngroups)?;

    // Index tensors.
    let mut index_dtype = None;
    if let Some(idx) = &spec.state_batch_indices {
        check_indices("state_batch_indices", idx, batch)?;
        index_dtype = Some(idx.dtype());
    } else if batch > slots {
        return Err(Error::invalid(
            "state",
            format!(
                "without `state_batch_indices` batch entry b uses slot b: expected size(0) >= \
                 batch ({batch}), got {slots}"
            ),
        ));
    }
    if let Some(idx) = &spec.dst_state_batch_indices {
        check_indices("dst_state_batch_indices", idx, batch)?;
        if let Some(src) = index_dtype {
            expect_dtype(
                "dst_state_batch_indices",
                idx,
                src,
                "the dtype of `state_batch_indices`",
            )?;
        }
        index_dtype = Some(idx.dtype());
    }

    // Stochastic rounding.
    let sr = check_stochastic_rounding(spec.philox_rounds, st.dtype(), spec.seed.as_ref())?;

    let problem = SsuProblem {
        batch,
        nheads,
        dim,
        dstate,
        ngroups,
        cache_slots: slots,
        state_dtype: st.dtype(),
        input_dtype: x.dtype(),
        weight_dtype: dt.dtype(),
        index_dtype,
        stochastic_rounding: sr,
        sr_rule: spec.sr_rule,
    };
    // Last, the C ABI's own check of what the parameter block carries: one contract for both
    // front doors (what passes here passes the C launcher, and the other way round for every
    // call the Rust API can express: the property test in `launch.rs` checks both ways).
    super::launch::contract_check(spec, &problem)?;
    Ok(problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::SrRule;
    use crate::ssu::fixtures::*;

    fn shorter(l: TensorLayout) -> TensorLayout {
        TensorLayout::new(l.dtype(), l.shape(), l.strides(), l.max_offset().unwrap()).unwrap()
    }

    #[test]
    fn baseline_is_valid() {
        let p = validate(&base()).unwrap();
        assert_eq!(
            p,
            SsuProblem {
                batch: BATCH,
                nheads: NH,
                dim: DIM,
                dstate: DS,
                ngroups: NG,
                cache_slots: SLOTS,
                state_dtype: DType::F16,
                input_dtype: DType::BF16,
                weight_dtype: DType::BF16,
                index_dtype: Some(DType::I32),
                stochastic_rounding: true,
                sr_rule: SrRule::V072,
            }
        );
    }

    #[test]
    fn minimal_call_is_valid() {
        // No optional tensors, round to nearest, fp32 everywhere, dstate 256.
        let row = NH * DIM;
        let spec = SsuSpec {
            state: lay(
                DType::F32,
                &[BATCH, NH, DIM, 256],
                &[NH * DIM * 256, DIM * 256, 256, 1],
            ),
            x: lay(DType::F32, &[BATCH, NH, DIM], &[row, DIM, 1]),
            dt: lay(DType::F32, &[BATCH, NH, DIM], &[NH, 1, 0]),
            a: lay(DType::F32, &[NH, DIM, 256], &[1, 0, 0]),
            b: lay(DType::F32, &[BATCH, 1, 256], &[256, 256, 1]),
            c: lay(DType::F32, &[BATCH, 1, 256], &[256, 256, 1]),
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: None,
            dst_state_batch_indices: None,
            out: lay(DType::F32, &[BATCH, NH, DIM], &[row, DIM, 1]),
            philox_rounds: 0,
            sr_rule: SrRule::V074,
            seed: None,
        };
        let p = validate(&spec).unwrap();
        assert_eq!((p.ngroups, p.dstate, p.index_dtype), (1, 256, None));
        assert!(!p.stochastic_rounding);
    }

    /// A rule case: a change to the valid baseline, the argument the error must name and a
    /// piece of its message.
    type Rule = (fn(&mut SsuSpec), &'static str, &'static str);

    fn check_rules(rules: &[Rule]) {
        for (i, (change, argument, needle)) in rules.iter().enumerate() {
            let mut spec = base();
            change(&mut spec);
            match validate(&spec) {
                Err(
                    Error::InvalidArgument {
                        argument: got,
                        message,
                    }
                    | Error::Unsupported {
                        argument: got,
                        message,
                    },
                ) => {
                    assert_eq!(got, *argument, "case {i}: {message}");
                    assert!(
                        message.contains(needle),
                        "case {i}: {message:?} lacks {needle:?}"
                    );
                }
                other => panic!("case {i}: expected InvalidArgument({argument}), got {other:?}"),
            }
        }
    }

    #[rustfmt::skip]
    #[test]
    fn state_rules() {
        check_rules(&[
            (|s| s.state = lay(DType::F16, &[SLOTS, NH, DIM * DS], &[NH * DIM * DS, DIM * DS, 1]),
                "state", "expected 4 dimensions"),
            (|s| s.state.dtype = DType::I32, "state", "expected dtype F16, BF16 or F32, got I32"),
            (|s| s.state =
                    lay(DType::F16, &[SLOTS, NH, DIM, 32], &[NH * DIM * 32, DIM * 32, 32, 1]),
                "state", "dstate in {64, 128, 256}, got 32"),
            (|s| s.state.strides[3] = 2, "state", "expected stride(3) == 1 (1), got 2"),
            (|s| s.state.strides[2] = DS + 8, "state", "expected stride(2) == dstate (64), got 72"),
            (|s| s.state.strides[1] = DIM * DS + 8, "state",
                "expected stride(1) == dim * dstate (512), got 520"),
            (|s| s.state.strides[0] = NH * DIM * DS - 8, "state",
                "expected stride(0) >= nheads * dim * dstate (2048), got 2040"),
            // 16-byte alignment of the slot stride: 2052 fp16 = 4104 bytes.
            (|s| s.state.strides[0] = NH * DIM * DS + 4, "state", "multiple of 8 elements"),
            (|s| s.state = shorter(s.state), "state", "but the buffer holds"),
            (|s| s.state.shape[0] = 0, "state", "every dimension >= 1"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn x_rules() {
        check_rules(&[
            (|s| s.x = lay(DType::BF16, &[BATCH, NH * DIM], &[NH * DIM, 1]), "x",
                "expected 3 dimensions"),
            (|s| s.x.dtype = DType::I64, "x", "expected dtype F16, BF16 or F32, got I64"),
            (|s| s.x.shape[0] = 0, "x", "batch >= 1"),
            (|s| s.x.shape[1] = NH + 1, "x", "expected size(1) == nheads (4), got 5"),
            (|s| s.x.shape[2] = DIM * 2, "x", "expected size(2) == dim (8), got 16"),
            (|s| s.x.strides[2] = 2, "x", "expected stride(2) == 1 (1), got 2"),
            (|s| s.x.strides[1] = DIM + 1, "x", "expected stride(1) == dim (8), got 9"),
            (|s| { s.x.strides[0] = NH * DIM + 4; s.x.len = 1 << 20; }, "x",
                "multiple of 8 elements"),
            (|s| s.x = shorter(s.x), "x", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn out_rules() {
        check_rules(&[
            (|s| s.out.shape[0] = BATCH + 1, "out", "expected size(0) == batch (2), got 3"),
            (|s| s.out.dtype = DType::F16, "out",
                "expected dtype BF16 (the dtype of `x`), got F16"),
            (|s| s.out.strides[1] = 0, "out", "expected stride(1) == dim (8), got 0"),
            (|s| s.out.strides[2] = 0, "out", "expected stride(2) == 1"),
            (|s| { s.out.strides[0] = NH * DIM + 2; s.out.len = 1 << 20; }, "out",
                "16-byte alignment"),
            (|s| s.out.strides[0] = 0, "out", "do not overlap"),
            (|s| s.out = shorter(s.out), "out", "but the buffer holds"),
        ]);
        // A broadcast (stride 0) x is allowed; a single-entry out may have any batch stride.
        validate(&with(|s| s.x.strides[0] = 0)).unwrap();
        validate(&with(|s| {
            for t in [&mut s.x, &mut s.out, s.z.as_mut().unwrap(), &mut s.dt, &mut s.b,
                      &mut s.c] {
                t.shape[0] = 1;
            }
            for t in [&mut s.state_batch_indices, &mut s.dst_state_batch_indices] {
                t.as_mut().unwrap().shape[0] = 1;
            }
            s.out.strides[0] = 0;
        }))
        .unwrap();
    }

    #[rustfmt::skip]
    #[test]
    fn z_rules() {
        check_rules(&[
            (|s| s.z.as_mut().unwrap().shape[2] = 4, "z", "expected size(2) == dim (8), got 4"),
            (|s| s.z.as_mut().unwrap().dtype = DType::F32, "z", "the dtype of `x`"),
            (|s| s.z.as_mut().unwrap().strides[1] = 16, "z", "stride(1) == dim"),
            (|s| { let z = s.z.as_mut().unwrap(); z.strides[0] = 33; z.len = 1 << 20; }, "z",
                "16-byte alignment"),
            (|s| s.z = Some(shorter(s.z.unwrap())), "z", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn dt_rules() {
        check_rules(&[
            (|s| s.dt = lay(DType::BF16, &[BATCH, NH], &[NH, 1]), "dt", "expected 3 dimensions"),
            (|s| s.dt.dtype = DType::I32, "dt", "got I32"),
            (|s| s.dt.shape[0] = 1, "dt", "expected size(0) == batch (2), got 1"),
            (|s| s.dt.shape[2] = 1, "dt", "expected size(2) == dim (8), got 1"),
            (|s| s.dt.strides[1] = 2, "dt", "expected stride(1) == 1 (1), got 2"),
            (|s| s.dt.strides[2] = 1, "dt", "expected stride(2) == 0 (0), got 1"),
            (|s| s.dt = shorter(s.dt), "dt", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn a_rules() {
        check_rules(&[
            (|s| s.a.dtype = DType::BF16, "A", "expected dtype F32"),
            (|s| s.a.shape[2] = 128, "A", "expected size(2) == dstate (64), got 128"),
            (|s| s.a.strides[0] = 0, "A", "expected stride(0) == 1"),
            (|s| s.a.strides[1] = 1, "A", "expected stride(1) == 0"),
            (|s| s.a.strides[2] = 1, "A", "expected stride(2) == 0"),
            (|s| s.a = shorter(s.a), "A", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn d_and_dt_bias_rules() {
        check_rules(&[
            (|s| s.d.as_mut().unwrap().dtype = DType::F32, "D", "the dtype of `dt`"),
            (|s| s.d.as_mut().unwrap().shape[0] = 2, "D", "expected size(0) == nheads (4), got 2"),
            (|s| s.d.as_mut().unwrap().strides[1] = 1, "D", "expected stride(1) == 0"),
            (|s| s.d = Some(lay(DType::BF16, &[NH], &[1])), "D", "expected 2 dimensions"),
            (|s| s.dt_bias.as_mut().unwrap().dtype = DType::F16, "dt_bias", "the dtype of `dt`"),
            (|s| s.dt_bias.as_mut().unwrap().strides[0] = 2, "dt_bias", "expected stride(0) == 1"),
            (|s| s.dt_bias = Some(shorter(s.dt_bias.unwrap())), "dt_bias", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn b_and_c_rules() {
        check_rules(&[
            (|s| { s.b.strides[1] = 2 * DS; s.b.strides[0] = 4 * DS; s.b.len = 1 << 20; }, "B",
                "expected stride(1) == dstate (64), got 128"),
            (|s| s.b.strides[2] = 0, "B", "expected stride(2) == 1"),
            (|s| s.b.shape[0] = 1, "B", "expected size(0) == batch (2), got 1"),
            (|s| s.b.shape[2] = 128, "B", "expected size(2) == dstate (64), got 128"),
            (|s| { s.b.shape[1] = 3; s.b.len = 1 << 20; }, "B",
                "ngroups dividing nheads (4), got 3"),
            (|s| s.b.dtype = DType::F16, "B", "the dtype of `x`"),
            (|s| s.b.strides[0] = NG * DS + 1, "B", "16-byte alignment"),
            (|s| s.b = shorter(s.b), "B", "but the buffer holds"),
            (|s| s.c = lay(DType::BF16, &[BATCH, 1, DS], &[DS, DS, 1]), "C",
                "expected size(1) == ngroups (size(1) of `B`) (2), got 1"),
            (|s| s.c.dtype = DType::F32, "C", "the dtype of `x`"),
            (|s| s.c.strides[1] = 0, "C", "stride(1) == dstate"),
            (|s| s.c.strides[0] = 3, "C", "16-byte alignment"),
            (|s| s.c = shorter(s.c), "C", "but the buffer holds"),
        ]);
    }

    #[rustfmt::skip]
    #[test]
    fn index_rules() {
        check_rules(&[
            (|s| s.state_batch_indices.as_mut().unwrap().dtype = DType::F32,
                "state_batch_indices", "expected dtype I32 or I64, got F32"),
            (|s| s.state_batch_indices = Some(lay(DType::I32, &[BATCH, 2, 2], &[4, 2, 1])),
                "state_batch_indices", "(batch,) or (batch, T)"),
            (|s| s.state_batch_indices = Some(lay(DType::I32, &[BATCH + 1], &[1])),
                "state_batch_indices", "expected size(0) == batch (2), got 3"),
            (|s| s.state_batch_indices = Some(shorter(s.state_batch_indices.unwrap())),
                "state_batch_indices", "but the buffer holds"),
            (|s| s.dst_state_batch_indices.as_mut().unwrap().dtype = DType::I64,
                "dst_state_batch_indices",
                "expected dtype I32 (the dtype of `state_batch_indices`), got I64"),
            (|s| s.dst_state_batch_indices =
                    Some(TensorLayout::new(DType::I32, &[BATCH, 0], &[1, 1], 4).unwrap()),
                "dst_state_batch_indices", "every dimension >= 1"),
            // Without read indices batch entry b uses slot b: batch must not exceed the slots.
            (|s| { s.state_batch_indices = None; s.state.shape[0] = 1; }, "state",
                "expected size(0) >= batch (2), got 1"),
        ]);
        // (batch, T) indices, int64 both, and dst alone are accepted.
        let ok = with(|s| {
            s.state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[4, 1]));
            s.dst_state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[1, BATCH]));
        });
        assert_eq!(validate(&ok).unwrap().index_dtype, Some(DType::I64));
        validate(&with(|s| s.state_batch_indices = None)).unwrap();
    }

    #[rustfmt::skip]
    #[test]
    fn stochastic_rounding_rules() {
        check_rules(&[
            (|s| s.philox_rounds = 11, "philox_rounds", "expected 0..=10, got 11"),
            (|s| s.state.dtype = DType::BF16, "philox_rounds",
                "needs an F16 state, got a BF16 state"),
            (|s| s.seed = None, "rand_seed", "needs a seed, got none"),
            (|s| s.seed = Some(SeedSpec::Pointer(lay(DType::I32, &[1], &[1]))), "rand_seed",
                "expected dtype I64"),
            (|s| s.seed = Some(SeedSpec::Pointer(lay(DType::I64, &[2], &[1]))), "rand_seed",
                "expected one element, got shape (2,)"),
            (|s| s.seed = Some(SeedSpec::Pointer(
                    TensorLayout::new(DType::I64, &[1], &[1], 0).unwrap())),
                "rand_seed", "but the buffer holds 0"),
            (|s| s.seed = Some(SeedSpec::FromGenerator { offset: 6 }), "seed_offset",
                "multiple of 4, got 6"),
            (|s| s.seed = Some(SeedSpec::FromValues { seed: 1, offset: 2 }), "seed_offset",
                "multiple of 4, got 2"),
        ]);
        validate(&with(|s| s.seed = Some(SeedSpec::FromValues { seed: 1, offset: 4 }))).unwrap();
        validate(&with(|s| s.seed = Some(SeedSpec::FromGenerator { offset: 8 }))).unwrap();
        validate(&with(|s| s.seed = Some(SeedSpec::Pointer(lay(DType::I64, &[], &[]))))).unwrap();
        // A seed with philox_rounds == 0 is ignored, even a malformed one; bf16 state allowed.
        let p = validate(&with(|s| {
            s.philox_rounds = 0;
            s.state.dtype = DType::BF16;
            s.seed = Some(SeedSpec::Pointer(lay(DType::I32, &[3], &[1])));
        }))
        .unwrap();
        assert!(!p.stochastic_rounding);
        validate(&with(|s| { s.philox_rounds = 0; s.seed = None; })).unwrap();
    }
}
