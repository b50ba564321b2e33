"""Fake (meta) implementations of the extension's torch ops, for torch.compile.

The ops only mutate tensors they are given (their schemas declare it: the SSU's state, out and
intermediate_states_buffer; draw_seeds' out; counter_seeds' counter and out), so their fake
implementations compute nothing: shape propagation sees the mutated arguments and no result.
The SSU's fake implementation runs the crate's C check on the call (``_C.check``: the tensors'
dtypes, shapes and strides with placeholder data pointers), so that tracing rejects, with the
same exception class and message, what the kernel would; with symbolic sizes it checks nothing
(the kernel still does). draw_seeds' and counter_seeds' fake implementations run their kernels'
checks of the tensors likewise (``_C.check_draw_seeds``, ``_C.check_counter_seeds``; the C
launcher's own rules on counter_seeds need the device). The real kernels are registered for CUDA
by the extension (``_C``).
"""

import torch

from . import _C


@torch.library.register_fake("mamba_ssu::selective_state_update")
def _selective_state_update_fake(
    state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, pad_slot_id,
    state_scale, out, disable_state_update, intermediate_states_buffer,
    intermediate_state_indices, intermediate_state_scales, rand_seed, philox_rounds,
    cache_steps, algorithm, dst_state_batch_indices, cu_seqlens, num_accepted_tokens, sr_rule=0,
):
    _C.check(
        state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, pad_slot_id,
        state_scale, out, disable_state_update, intermediate_states_buffer,
        intermediate_state_indices, intermediate_state_scales, rand_seed, philox_rounds,
        cache_steps, algorithm, dst_state_batch_indices, cu_seqlens, num_accepted_tokens, sr_rule,
    )
    return None


@torch.library.register_fake("mamba_ssu::draw_seeds")
def _draw_seeds_fake(out):
    _C.check_draw_seeds(out)
    return None


@torch.library.register_fake("mamba_ssu::counter_seeds")
def _counter_seeds_fake(counter, n, out):
    _C.check_counter_seeds(counter, n, out)
    return None
