"""Test helpers: a call of ``mamba_ssu.selective_state_update`` in FlashInfer's keywords as the
positional arguments of the op ``mamba_ssu::selective_state_update`` (and of the extension's
``_C.check``), built the way the package's front door builds them."""

import torch

import mamba_ssu

# FlashInfer 0.7.2's defaults (the package's signature), sr_rule included.
DEFAULTS = dict(
    D=None, z=None, dt_bias=None, dt_softplus=False, state_batch_indices=None, pad_slot_id=-1,
    state_scale=None, out=None, disable_state_update=False, intermediate_states_buffer=None,
    intermediate_state_indices=None, intermediate_state_scales=None, rand_seed=None,
    philox_rounds=10, cache_steps=0, algorithm="auto", dst_state_batch_indices=None,
    cu_seqlens=None, num_accepted_tokens=None, sr_rule="0.7.2",
)

# The op's parameters, in its schema's order.
OP_ORDER = (
    "state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "dt_softplus",
    "state_batch_indices", "pad_slot_id", "state_scale", "out", "disable_state_update",
    "intermediate_states_buffer", "intermediate_state_indices", "intermediate_state_scales",
    "rand_seed", "philox_rounds", "cache_steps", "algorithm", "dst_state_batch_indices",
    "cu_seqlens", "num_accepted_tokens", "sr_rule",
)

# FlashInfer's tensor arguments (what a rejection may name, besides the options).
TENSOR_ARGS = (
    "state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "state_batch_indices", "state_scale",
    "out", "intermediate_states_buffer", "intermediate_state_indices",
    "intermediate_state_scales", "rand_seed", "dst_state_batch_indices", "cu_seqlens",
    "num_accepted_tokens",
)


def op_args(**kw):
    """The op's positional arguments for FlashInfer keywords (``out`` allocated like x when not
    given, as the front door does; names mapped to the C ABI's values)."""
    a = dict(DEFAULTS)
    a.update(kw)
    if a["out"] is None:
        a["out"] = torch.empty_like(a["x"])
    a["algorithm"] = mamba_ssu._ALGORITHMS[a["algorithm"]]
    a["sr_rule"] = mamba_ssu._SR_RULES[a["sr_rule"]]
    a["dt_softplus"] = bool(a["dt_softplus"])
    a["disable_state_update"] = bool(a["disable_state_update"])
    return tuple(a[n] for n in OP_ORDER)


def check(**kw):
    """The C contract's check of the call (``_C.check``): the problem dict, or it raises."""
    return mamba_ssu._C.check(*op_args(**kw))


def outcome(fn):
    """("ok", result) or (exception class, message) of fn()."""
    try:
        return "ok", fn()
    except Exception as e:  # the class is what is compared
        return type(e), str(e)


def to_meta(t):
    """A meta tensor with t's dtype, sizes, strides and storage offset (``t.to("meta")`` would
    make an expanded or overlapping view contiguous)."""
    if not isinstance(t, torch.Tensor):
        return t
    storage = t.untyped_storage().nbytes() // t.element_size()
    base = torch.empty(max(storage, 1), dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())
