//! [`validate_mtp`]: the multi-token contract (the table in the [`crate::ssu::mtp`] docs)
//! checked as a pure function of the layouts, before anything touches a device.

use crate::error::{Error, Result};
use crate::ssu::validation::{
    check_state, check_stochastic_rounding, expect_aligned_stride, expect_dim, expect_dtype,
    expect_float, expect_in_bounds, expect_nonempty, expect_rank, expect_stride,
};
use crate::tensor::{fmt_dims, DType, TensorLayout};

use super::args::{MtpProblem, MtpSpec};

/// Most tokens per sequence of one multi-token call (`MAMBA_SSU_MTP_MAX_TOKENS`).
pub const MTP_MAX_TOKENS: usize = 16;

/// In bounds, or a tensor with no element at all (a varlen call with no token rows).
fn expect_in_bounds_or_empty(name: &'static str, l: &TensorLayout) -> Result<()> {
    if l.numel() == Some(0) {
        return Ok(());
    }
    expect_in_bounds(name, l)
}

/// The leading (token) dimensions of `x`: (batch, T) or (total_tokens,).
#[derive(Clone, Copy)]
struct Form {
    varlen: bool,
    /// Rank of the token tensors (4 fixed length, 3 varlen).
    rank: usize,
    /// Number of leading dimensions (2 fixed length, 1 varlen).
    lead: usize,
}

/// A token tensor (`x`, `z`, `out`, `dt`, `B`, `C`): rank, leading sizes equal to `x`'s, the
/// two inner sizes and strides, in bounds.
#[allow(clippy::too_many_arguments)]
fn check_token_tensor(
    name: &'static str,
    l: &TensorLayout,
    form: Form,
    x: &TensorLayout,
    what: &str,
    inner: [(&str, usize); 2],
    inner_strides: [(&str, usize); 2],
) -> Result<()> {
    let shape = if form.varlen {
        format!("(total_tokens, {what})")
    } else {
        format!("(batch, T, {what})")
    };
    expect_rank(name, l, form.rank, &shape)?;
    for k in 0..form.lead {
        let dim_name = match (form.varlen, k) {
            (true, _) => "total_tokens",
            (false, 0) => "batch",
            _ => "T",
        };
        expect_dim(name, l, k, dim_name, x.shape()[k])?;
    }
    for (j, (dim_name, n)) in inner.iter().enumerate() {
        if !dim_name.is_empty() {
            expect_dim(name, l, form.lead + j, dim_name, *n)?;
        }
    }
    for (j, (what, s)) in inner_strides.iter().enumerate() {
        expect_stride(name, l, form.lead + j, what, *s)?;
    }
    expect_in_bounds_or_empty(name, l)
}

/// An index tensor: I32 or I64, the given rank (1 or 2), size(0) == `n`, non-empty.
fn check_index(name: &'static str, l: &TensorLayout, n: usize, n_name: &str) -> Result<()> {
    if !matches!(l.dtype(), DType::I32 | DType::I64) {
        return Err(Error::invalid(
            name,
            format!("expected dtype I32 or I64, got {}", l.dtype()),
        ));
    }
    if l.rank() == 0 {
        return Err(Error::invalid(
            name,
            "expected at least 1 dimension, got a scalar",
        ));
    }
    expect_dim(name, l, 0, n_name, n)?;
    expect_nonempty(name, l)?;
    expect_in_bounds(name, l)
}

/// Checks a multi-token call's layouts and flags against the kernel's contract (the module
/// doc's table); a pure function of `spec`, no device involved. Returns the call's sizes.
///
/// Every violation is an [`Error::InvalidArgument`] (or, for a valid combination the kernel
/// does not serve, an [`Error::Unsupported`]) naming the argument and saying what was
/// expected and what was got. The C ABI's check of the same call
/// (`mamba_ssu_selective_state_update_mtp_check`) runs last, so both front doors accept the
/// same calls.
pub fn validate_mtp(spec: &MtpSpec) -> Result<MtpProblem> {
    // state: (slots, nheads, dim, dstate), inner three dims contiguous.
    let st = &spec.state;
    let [slots, nheads, dim, dstate] = check_state(st)?;

    // The form: fixed length (4-D x) or varlen (3-D x with cu_seqlens).
    let x = &spec.x;
    let form = match (x.rank(), spec.cu_seqlens.is_some()) {
        (4, false) => Form {
            varlen: false,
            rank: 4,
            lead: 2,
        },
        (3, true) => Form {
            varlen: true,
            rank: 3,
            lead: 1,
        },
        (4, true) => {
            return Err(Error::invalid(
                "cu_seqlens",
                "cu_seqlens needs a 3-D (varlen) x (total_tokens, nheads, dim), got a 4-D x",
            ))
        }
        (3, false) => {
            return Err(Error::invalid(
                "cu_seqlens",
                "a 3-D (varlen) x (total_tokens, nheads, dim) needs cu_seqlens",
            ))
        }
        (r, _) => {
            return Err(Error::invalid(
                "x",
                format!(
                    "expected 4 dimensions (batch, T, nheads, dim), or 3 (total_tokens, nheads, \
                     dim) with cu_seqlens, got {r} with shape {}",
                    fmt_dims(x.shape())
                ),
            ))
        }
    };
    expect_float("x", x)?;
    let buffer = spec.intermediate_states_buffer.as_ref();
    let buffer_steps = buffer.filter(|b| b.rank() >= 2).map(|b| b.shape()[1]);

    // Sequences and tokens.
    let (batch, ntokens, total_tokens) = if form.varlen {
        let cu = spec.cu_seqlens.as_ref().expect("varlen has cu_seqlens");
        if !matches!(cu.dtype(), DType::I32 | DType::I64) {
            return Err(Error::invalid(
                "cu_seqlens",
                format!("expected dtype I32 or I64, got {}", cu.dtype()),
            ));
        }
        expect_rank("cu_seqlens", cu, 1, "(batch + 1,)")?;
        if cu.shape[0] < 2 {
            return Err(Error::invalid(
                "cu_seqlens",
                format!(
                    "expected size(0) == batch + 1 >= 2, got {}",
                    fmt_dims(cu.shape())
                ),
            ));
        }
        expect_in_bounds("cu_seqlens", cu)?;
        let Some(ntokens) = spec.cache_steps.or(buffer_steps) else {
            return Err(Error::invalid(
                "cache_steps",
                "a varlen call needs cache_steps (the most tokens a sequence may have)",
            ));
        };
        if !(1..=MTP_MAX_TOKENS).contains(&ntokens) {
            return Err(Error::invalid(
                "cache_steps",
                format!(
                    "expected 1..={MTP_MAX_TOKENS} (the most tokens of a varlen sequence), got \
                     {ntokens}"
                ),
            ));
        }
        (cu.shape[0] - 1, ntokens, Some(x.shape[0]))
    } else {
        if x.shape[0] == 0 {
            return Err(Error::invalid(
                "x",
                format!(
                    "expected size(0) == batch >= 1, got shape {}",
                    fmt_dims(x.shape())
                ),
            ));
        }
        let t = x.shape[1];
        if !(1..=MTP_MAX_TOKENS).contains(&t) {
            return Err(Error::invalid(
                "x",
                format!("expected size(1) == T in 1..={MTP_MAX_TOKENS}, got {t}"),
            ));
        }
        (x.shape[0], t, None)
    };

    // x, out, z: (.., nheads, dim), strides (.., dim, 1).
    let act = [("nheads", nheads), ("dim", dim)];
    let act_strides = [("dim", dim), ("1", 1)];
    check_token_tensor("x", x, form, x, "nheads, dim", act, act_strides)?;
    let out = &spec.out;
    expect_rank(
        "out",
        out,
        form.rank,
        if form.varlen {
            "(total_tokens, nheads, dim)"
        } else {
            "(batch, T, nheads, dim)"
        },
    )?;
    expect_dtype("out", out, x.dtype(), "the dtype of `x`")?;
    check_token_tensor("out", out, form, x, "nheads, dim", act, act_strides)?;
    // Output rows may not overlap: see the C ABI's rule in `mamba_ssu.h`.
    let row = nheads * dim; // <= nheads * dim * dstate, no overflow
    let token_stride = out.strides[form.lead - 1];
    let rows = if form.varlen {
        x.shape[0]
    } else if ntokens > 1 {
        2
    } else {
        1
    };
    let k = form.lead - 1;
    if rows > 1 && token_stride < row {
        return Err(Error::invalid(
            "out",
            format!(
                "expected stride({k}) >= nheads * dim ({row}) so token rows do not overlap, got \
                 {token_stride}"
            ),
        ));
    }
    if !form.varlen && batch > 1 {
        let span = if ntokens > 1 {
            ntokens as u128 * token_stride as u128
        } else {
            row as u128
        };
        if (out.strides[0] as u128) < span {
            return Err(Error::invalid(
                "out",
                format!(
                    "expected stride(0) >= {} ({span}) so the rows of different sequences do not \
                     overlap, got {}",
                    if ntokens > 1 {
                        "T * stride(1)"
                    } else {
                        "nheads * dim"
                    },
                    out.strides[0]
                ),
            ));
        }
    }
    if let Some(z) = &spec.z {
        expect_rank("z", z, form.rank, "like `x`")?;
        expect_dtype("z", z, x.dtype(), "the dtype of `x`")?;
        check_token_tensor("z", z, form, x, "nheads, dim", act, act_strides)?;
    }

    // dt: like x, strides (.., 1, 0), the weight dtype.
    let dt = &spec.dt;
    expect_rank("dt", dt, form.rank, "like `x`")?;
    expect_float("dt", dt)?;
    check_token_tensor("dt", dt, form, x, "nheads, dim", act, [("1", 1), ("0", 0)])?;

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

    // D, dt_bias: (nheads, dim), strides (1, 0), the dtype of dt.
    for (name, l) in [("D", &spec.d), ("dt_bias", &spec.dt_bias)] {
        if let Some(l) = l {
            expect_rank(name, l, 2, "(nheads, dim)")?;
            expect_dtype(name, l, dt.dtype(), "the dtype of `dt`")?;
            expect_dim(name, l, 0, "nheads", nheads)?;
            expect_dim(name, l, 1, "dim", dim)?;
            expect_stride(name, l, 0, "1", 1)?;
            expect_stride(name, l, 1, "0", 0)?;
            expect_in_bounds(name, l)?;
        }
    }

    // B, C: (.., ngroups, dstate), strides (16-byte multiples.., dstate, 1).
    let b = &spec.b;
    expect_rank("B", b, form.rank, "like `x` with (ngroups, dstate) inner")?;
    expect_dtype("B", b, x.dtype(), "the dtype of `x`")?;
    let ngroups = b.shape[form.lead];
    if ngroups == 0 || nheads % ngroups != 0 {
        return Err(Error::invalid(
            "B",
            format!(
                "expected size({}) == ngroups dividing nheads ({nheads}), got {ngroups}",
                form.lead
            ),
        ));
    }
    for (name, l) in [("B", b), ("C", &spec.c)] {
        expect_rank(name, l, form.rank, "like `B`")?;
        expect_dtype(name, l, x.dtype(), "the dtype of `x`")?;
        let groups = if name == "B" {
            ""
        } else {
            "ngroups (that of `B`)"
        };
        check_token_tensor(
            name,
            l,
            form,
            x,
            "ngroups, dstate",
            [(groups, ngroups), ("dstate", dstate)],
            [("dstate", dstate), ("1", 1)],
        )?;
        for k in 0..form.lead {
            expect_aligned_stride(name, l, k)?;
        }
    }

    // Index tensors: one dtype for all of them.
    let mut index_dtype: Option<(DType, &'static str)> = None;
    let mut same_dtype = |name: &'static str, l: &TensorLayout| -> Result<()> {
        match index_dtype {
            Some((d, first)) if d != l.dtype() => Err(Error::invalid(
                name,
                format!(
                    "expected dtype {d} (the dtype of `{first}`: every index tensor has one \
                     dtype), got {}",
                    l.dtype()
                ),
            )),
            Some(_) => Ok(()),
            None => {
                index_dtype = Some((l.dtype(), name));
                Ok(())
            }
        }
    };
    if let Some(cu) = &spec.cu_seqlens {
        same_dtype("cu_seqlens", cu)?;
    }
    if let Some(idx) = &spec.state_batch_indices {
        check_index("state_batch_indices", idx, batch, "batch")?;
        if idx.rank() > 2 {
            return Err(Error::invalid(
                "state_batch_indices",
                format!(
                    "expected shape (batch,) or (batch, W), got {} dimensions {}",
                    idx.rank(),
                    fmt_dims(idx.shape())
                ),
            ));
        }
        same_dtype("state_batch_indices", idx)?;
    } else if batch > slots {
        return Err(Error::invalid(
            "state",
            format!(
                "without `state_batch_indices` sequence b uses slot b: expected size(0) >= \
                 batch ({batch}), got {slots}"
            ),
        ));
    }
    if let Some(idx) = &spec.dst_state_batch_indices {
        if idx.rank() != 2 {
            return Err(Error::invalid(
                "dst_state_batch_indices",
                format!(
                    "expected a 2-D index (batch, W), got {} dimensions {}",
                    idx.rank(),
                    fmt_dims(idx.shape())
                ),
            ));
        }
        check_index("dst_state_batch_indices", idx, batch, "batch")?;
        same_dtype("dst_state_batch_indices", idx)?;
        if idx.shape[1] < ntokens {
            return Err(Error::invalid(
                "dst_state_batch_indices",
                format!(
                    "a 2-D index narrower than the longest sequence it must serve: expected \
                     size(1) >= {ntokens} (tokens per sequence), got {}",
                    idx.shape[1]
                ),
            ));
        }
    }
    for (name, l) in [
        ("num_accepted_tokens", &spec.num_accepted_tokens),
        (
            "intermediate_state_indices",
            &spec.intermediate_state_indices,
        ),
    ] {
        if let Some(l) = l {
            expect_rank(name, l, 1, "(batch,)")?;
            check_index(name, l, batch, "batch")?;
            same_dtype(name, l)?;
        }
    }

    // Write modes and the intermediate buffer.
    if buffer.is_some() && spec.dst_state_batch_indices.is_some() {
        return Err(Error::invalid(
            "dst_state_batch_indices",
            "two write modes at once: an intermediate_states_buffer and a dst_state_batch_indices",
        ));
    }
    if spec.intermediate_state_indices.is_some() && buffer.is_none() {
        return Err(Error::invalid(
            "intermediate_state_indices",
            "given without an intermediate_states_buffer",
        ));
    }
    let mut intermediate = None;
    if let Some(buf) = buffer {
        let name = "intermediate_states_buffer";
        expect_rank(name, buf, 5, "(entries, cache_steps, nheads, dim, dstate)")?;
        expect_dtype(name, buf, st.dtype(), "the dtype of `state`")?;
        expect_nonempty(name, buf)?;
        let steps = buf.shape[1];
        if let Some(cs) = spec.cache_steps {
            if cs != steps {
                return Err(Error::invalid(
                    "cache_steps",
                    format!("expected == intermediate_states_buffer.size(1) ({steps}), got {cs}"),
                ));
            }
        }
        expect_dim(name, buf, 2, "nheads", nheads)?;
        expect_dim(name, buf, 3, "dim", dim)?;
        expect_dim(name, buf, 4, "dstate", dstate)?;
        let contiguous = TensorLayout::contiguous(buf.dtype(), buf.shape(), buf.len())
            .map_err(|_| Error::invalid(name, "element count overflows"))?;
        if buf.strides() != contiguous.strides() {
            return Err(Error::invalid(
                name,
                format!(
                    "expected contiguous strides {}, got {}",
                    fmt_dims(contiguous.strides()),
                    fmt_dims(buf.strides())
                ),
            ));
        }
        expect_in_bounds(name, buf)?;
        if steps < ntokens {
            return Err(Error::invalid(
                "cache_steps",
                format!("expected >= tokens per sequence ({ntokens}), got {steps}"),
            ));
        }
        intermediate = Some((buf.shape[0], steps));
    }

    // Stochastic rounding.
    let sr = check_stochastic_rounding(spec.philox_rounds, st.dtype(), spec.seed.as_ref())?;

    let problem = MtpProblem {
        batch,
        ntokens,
        total_tokens,
        nheads,
        dim,
        dstate,
        ngroups,
        cache_slots: slots,
        intermediate,
        state_dtype: st.dtype(),
        input_dtype: x.dtype(),
        weight_dtype: dt.dtype(),
        index_dtype: index_dtype.map(|(d, _)| d),
        stochastic_rounding: sr,
    };
    // Last, the C ABI's own check of what the parameter block carries: one contract for both
    // front doors (the property test in `launch.rs` checks both ways).
    super::launch::contract_check(spec, &problem)?;
    Ok(problem)
}
