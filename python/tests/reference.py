"""CPU references the GPU tests hold the package to, and the vLLM-shaped SSU layer they run.

`torch_seed(seed, offset)` is the value of one stock ``torch.randint(0, 2**32, (1,))`` draw from
CUDA generator state (seed, offset): word 1 of Philox4x32-10 with key (lo32(seed), hi32(seed))
and counter (lo32(offset/4), hi32(offset/4), 0, 0) (docs/torch-binding.md of this repository).
"""

import torch

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox4x32(counter, key, rounds=10):
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(rounds):
        p0 = M0 * c0
        p1 = M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
        k0 = (k0 + W0) & MASK
        k1 = (k1 + W1) & MASK
    return c0, c1, c2, c3


def torch_seed(seed: int, offset: int) -> int:
    block = offset >> 2
    return philox4x32((block & MASK, block >> 32, 0, 0), (seed & MASK, (seed >> 32) & MASK))[1]


# Nemotron-H Mamba-2 layer at tensor parallel 4 (the shapes vLLM passes at decode).
NHEADS, DIM, DSTATE, NGROUPS = 32, 64, 128, 2


class VllmLayer:
    """One Mamba-2 layer's SSU inputs as vLLM 0.33's mixer passes them at decode: x (N, nheads,
    dim) bf16; B, C (N, ngroups, dstate); A/dt/D/dt_bias expanded from per-head values; 2-D
    (N, 1) int32 indices used as read and destination; pad_slot_id 0 (vLLM's null block, slot
    0 of the cache); an fp16 state cache of batch + 1 slots with a padded slot stride."""

    def __init__(self, batch, device, gen, pad_entries=1):
        f = dict(device=device)
        slots = batch + 1
        # A page-sized slot stride larger than one slot's state (vLLM's layout).
        slot_elems = NHEADS * DIM * DSTATE
        store = torch.randn(slots, slot_elems + 256, generator=gen, **f).to(torch.float16)
        self.state = store[:, :slot_elems].view(slots, NHEADS, DIM, DSTATE)
        self.x = torch.randn(batch, NHEADS, DIM, generator=gen, **f).to(torch.bfloat16)
        self.B = torch.randn(batch, NGROUPS, DSTATE, generator=gen, **f).to(torch.bfloat16)
        self.C = torch.randn(batch, NGROUPS, DSTATE, generator=gen, **f).to(torch.bfloat16)
        dt = (torch.rand(batch, NHEADS, generator=gen, **f) * 0.5 - 1.0).to(torch.bfloat16)
        self.dt = dt[:, :, None].expand(-1, -1, DIM)
        a = -torch.rand(NHEADS, generator=gen, **f) - 0.5
        self.A = a[:, None, None].expand(-1, DIM, DSTATE).float()
        d = torch.randn(NHEADS, generator=gen, **f).to(torch.bfloat16)
        self.D = d[:, None].expand(-1, DIM)
        bias = (torch.rand(NHEADS, generator=gen, **f) * 0.1).to(torch.bfloat16)
        self.dt_bias = bias[:, None].expand(-1, DIM)
        # Slots 1..batch, a random permutation; the last pad_entries are padded (null block 0).
        perm = torch.randperm(batch, generator=gen, device=device).to(torch.int32) + 1
        if pad_entries:
            perm[-pad_entries:] = 0
        self.indices = perm[:, None].contiguous()
        self.out = torch.empty_like(self.x)

    def clone(self):
        c = object.__new__(VllmLayer)
        c.__dict__.update(self.__dict__)
        store = self.state.as_strided(
            (self.state.size(0), self.state.stride(0)), (self.state.stride(0), 1)
        ).clone()
        c.state = store[:, : NHEADS * DIM * DSTATE].view_as(self.state)
        c.out = torch.empty_like(self.out)
        return c

    def call(self, ssu, rand_seed, rounds):
        ssu(
            self.state, self.x, self.dt, self.A, self.B, self.C, self.D, z=None,
            dt_bias=self.dt_bias, dt_softplus=True, state_batch_indices=self.indices,
            dst_state_batch_indices=self.indices, pad_slot_id=0, out=self.out,
            rand_seed=rand_seed, philox_rounds=rounds, algorithm="auto",
        )

    def state_bytes(self):
        return self.state.as_strided(
            (self.state.size(0), self.state.stride(0)), (self.state.stride(0), 1)
        ).view(torch.int16).clone()
