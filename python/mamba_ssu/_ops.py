"""Fake (meta) implementations of the extension's torch ops, for torch.compile.

The ops only mutate tensors they are given (their schemas declare it: state and out, and the
multi-token op's intermediate_states_buffer), so their fake implementations have nothing to
compute: shape propagation sees the mutated arguments and no result. The real kernels are
registered for CUDA by the extension (`_C`).
"""

import torch


@torch.library.register_fake("mamba_ssu::selective_state_update")
def _selective_state_update_fake(
    state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
    dst_state_batch_indices, pad_slot_id, out, disable_state_update, rand_seed,
    philox_rounds, algorithm, sr_rule=0,
):
    return None


@torch.library.register_fake("mamba_ssu::selective_state_update_mtp")
def _selective_state_update_mtp_fake(
    state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
    dst_state_batch_indices, pad_slot_id, out, disable_state_update,
    intermediate_states_buffer, intermediate_state_indices, cache_steps, cu_seqlens,
    num_accepted_tokens, rand_seed, philox_rounds, sr_rule=0,
):
    return None


@torch.library.register_fake("mamba_ssu::draw_seeds")
def _draw_seeds_fake(out):
    return None
