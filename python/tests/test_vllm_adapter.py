"""CPU tests of ``mamba_ssu.vllm``: the backend against vLLM 0.33.0's own code.

Where vLLM is installed (``scripts/check-vllm.sh`` makes such an environment, and makes these
tests fail rather than skip without it): the class is a subclass of vLLM's ``MambaSSUBackend``
with the signature of vLLM's ``FlashInferSSUBackend.__call__``; vLLM's plugin loader finds the
package's entry point; vLLM's ``initialize_mamba_ssu_backend`` with a real ``MambaConfig`` builds
the crate's backend once ``MAMBA_SSU_VLLM`` is set, and logs its name; and for the arguments
vLLM's Mamba-2 mixer passes (decode and verify, several configurations) the kernel receives
exactly what vLLM's FlashInfer backend hands FlashInfer (the same tensors, the same values,
the same seed from the same generator state).

Everywhere: the arguments that reach the kernel (a recording stand-in), the configuration
read as vLLM's FlashInfer backend reads it, the seed drawn only with stochastic rounding, and the
meta-device path through the real ``selective_state_update``.
"""

import inspect
import json
import os
import subprocess
import sys
import types

import pytest
import torch

from engines import NUM_SPEC, Recorder, engine, same_call, vllm_config, vllm_decode, vllm_verify

CALL_SHAPES = {"decode": vllm_decode, "verify": vllm_verify}
CONFIGS = [
    dict(sr=True, rounds=0, algorithm=None),
    dict(sr=True, rounds=5, algorithm="simple"),
    dict(sr=True, rounds=10, algorithm="vertical"),
    dict(sr=False, rounds=0, algorithm=None),
    dict(sr=False, rounds=3, algorithm="auto"),
]


def _backend(cfg, seed_mode="stock"):
    from mamba_ssu.vllm import MambaSSUBackend

    b = MambaSSUBackend(vllm_config(**cfg), seed_mode=seed_mode)
    rec = Recorder()
    b._kernel = rec
    return b, rec


@pytest.mark.parametrize("shape", sorted(CALL_SHAPES))
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"sr{int(c['sr'])}-r{c['rounds']}-{c['algorithm']}")
def test_arguments_reach_the_kernel_as_vllm_means_them(shape, cfg):
    """The mixer's call (positional state..dt_bias, then keywords) reaches the kernel with the
    caller's own tensors, pad_slot_id = null_block_id (default: vLLM's null block 0),
    cache_steps = the index width with cu_seqlens (verify) else 0, the configured rounds (0 ->
    10) and algorithm (None -> "auto"), and one stock draw as rand_seed exactly with stochastic
    rounding (the CPU generator's next torch.randint(0, 2**32, (1,)))."""
    gen = torch.Generator().manual_seed(7)
    args, kwargs, _ = CALL_SHAPES[shape]("cpu", gen)
    b, rec = _backend(cfg)
    torch.manual_seed(1234)
    want_seed = torch.randint(0, 2**32, (1,))
    torch.manual_seed(1234)
    assert b(*args, **kwargs) is None
    after = torch.randint(0, 2**32, (1,))
    (call,) = rec.calls
    state, x, dt, A, B, C, D, dt_bias = args
    for name, t in dict(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, dt_bias=dt_bias).items():
        assert call[name] is t, name
    for name in ("state_batch_indices", "dst_state_batch_indices", "out", "num_accepted_tokens",
                 "cu_seqlens"):
        assert call[name] is kwargs[name], name
    assert call["z"] is None and call["dt_softplus"] is True
    assert call["pad_slot_id"] == 0
    assert call["cache_steps"] == (1 + NUM_SPEC if shape == "verify" else 0)
    assert call["philox_rounds"] == (cfg["rounds"] or 10)
    assert call["algorithm"] == (cfg["algorithm"] or "auto")
    # FlashInfer's defaults for what vLLM does not pass.
    assert call["disable_state_update"] is False and call["state_scale"] is None
    assert call["intermediate_states_buffer"] is None and call["intermediate_state_indices"] is None
    assert call["backend"] == "auto"
    if cfg["sr"]:
        assert torch.equal(call["rand_seed"], want_seed)
        assert not torch.equal(after, want_seed)  # the generator moved by that one draw
    else:
        assert call["rand_seed"] is None
        assert torch.equal(after, want_seed)  # no draw


def test_null_block_id_and_padded_rows_pass_through():
    """A caller's null_block_id becomes pad_slot_id; the padded index rows (null block) and
    the padded num_accepted_tokens entries reach the kernel untouched (the same tensors)."""
    gen = torch.Generator().manual_seed(3)
    args, kwargs, _ = vllm_verify("cpu", gen)
    b, rec = _backend(dict(sr=False))
    b(*args, **dict(kwargs, null_block_id=5))
    assert rec.calls[0]["pad_slot_id"] == 5
    idx = rec.calls[0]["state_batch_indices"]
    assert idx.dtype == torch.int32 and idx.stride(0) > idx.size(1)  # a block-table slice
    assert (idx[-2:] == 0).all() and rec.calls[0]["num_accepted_tokens"][-2:].tolist() == [1, 1]


def test_configuration_errors_at_construction():
    """What the crate cannot serve fails when vLLM builds the backend, not at the first step."""
    from mamba_ssu.vllm import MambaSSUBackend

    MambaSSUBackend(vllm_config(sr=True, algorithm="horizontal"))  # FlashInfer's horizontal kernel
    with pytest.raises(ValueError, match="^algorithm: expected"):
        MambaSSUBackend(vllm_config(sr=True, algorithm="diagonal"))
    with pytest.raises(ValueError, match="^philox_rounds: expected >= 1"):
        MambaSSUBackend(vllm_config(sr=True, rounds=-1))
    MambaSSUBackend(vllm_config(sr=False, rounds=-1))  # rounds unused without SR
    MambaSSUBackend(vllm_config(sr=True, rounds=12))  # any count >= 1, as FlashInfer
    with pytest.raises(ValueError, match="seed_mode"):
        MambaSSUBackend(vllm_config(sr=True), seed_mode="prefetch")
    with pytest.raises(ValueError, match="num_layers"):
        MambaSSUBackend(vllm_config(sr=True), num_layers=0)


def test_seed_mode_from_the_environment(monkeypatch):
    """Without seed_mode the backend uses the mode MAMBA_SSU_VLLM names ("1": next_seed)."""
    from mamba_ssu.vllm import MambaSSUBackend

    cfg = vllm_config(sr=True)
    for value, mode in (("1", "next_seed"), ("fused", "fused"), ("stock", "stock"), ("0", "next_seed")):
        monkeypatch.setenv("MAMBA_SSU_VLLM", value)
        assert MambaSSUBackend(cfg).seed_mode == mode
    monkeypatch.delenv("MAMBA_SSU_VLLM")
    assert MambaSSUBackend(cfg).seed_mode == "next_seed"
    assert MambaSSUBackend(cfg).name == "mamba-ssu"


@pytest.mark.parametrize("shape", sorted(CALL_SHAPES))
def test_meta_tensors_through_the_real_entry_point(shape):
    """The mixer's tensors on the meta device through the real selective_state_update (its
    Python checks, the path choice and the op's schema): accepted, nothing returned."""
    gen = torch.Generator().manual_seed(11)
    args, kwargs, _ = CALL_SHAPES[shape]("cpu", gen)

    def meta(t):  # the same shape, strides (expanded, sliced views) and dtype, on meta
        if not isinstance(t, torch.Tensor):
            return t
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")

    margs = [meta(a) for a in args]
    mkw = {k: meta(v) for k, v in kwargs.items()}
    from mamba_ssu.vllm import MambaSSUBackend

    b = MambaSSUBackend(vllm_config(sr=True, rounds=5), seed_mode="stock")
    assert b(*margs, **mkw) is None


# ---- against vLLM's own code -------------------------------------------------------------


def test_is_a_vllm_backend_with_vllms_signature():
    dispatch = engine("vllm.model_executor.layers.mamba.ops.ssu_dispatch")
    from mamba_ssu.vllm import VLLM_IMPORTABLE, MambaSSUBackend

    assert VLLM_IMPORTABLE
    assert issubclass(MambaSSUBackend, dispatch.MambaSSUBackend)
    assert inspect.signature(MambaSSUBackend.__call__) == inspect.signature(
        dispatch.FlashInferSSUBackend.__call__
    )
    # Built as vLLM builds backends: backend_cls(mamba_config).
    cfg = vllm_config(sr=True, rounds=5, algorithm="simple")
    b = MambaSSUBackend(cfg)
    assert b._mamba_config is cfg and isinstance(b.name, str)


def _vllm_stock(cfg, monkeypatch):
    """vLLM's FlashInferSSUBackend with a recording stand-in for FlashInfer's function."""
    dispatch = engine("vllm.model_executor.layers.mamba.ops.ssu_dispatch")
    rec = Recorder()
    fake = types.ModuleType("flashinfer.mamba")
    fake.selective_state_update = rec
    monkeypatch.setitem(sys.modules, "flashinfer.mamba", fake)
    return dispatch.FlashInferSSUBackend(cfg), rec


@pytest.mark.parametrize("shape", sorted(CALL_SHAPES))
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"sr{int(c['sr'])}-r{c['rounds']}-{c['algorithm']}")
def test_kernel_call_equals_vllms_flashinfer_backend(shape, cfg, monkeypatch):
    """The same mixer call through vLLM's FlashInfer backend and through the crate's (seed mode
    "stock"), from the same CPU generator state: every argument FlashInfer's function would
    receive is the same — tensors by identity, the seed by value."""
    mamba_config = vllm_config(**cfg)
    stock, want = _vllm_stock(mamba_config, monkeypatch)
    from mamba_ssu.vllm import MambaSSUBackend

    ours = MambaSSUBackend(mamba_config, seed_mode="stock")
    got = Recorder()
    ours._kernel = got
    gen = torch.Generator().manual_seed(5)
    args, kwargs, _ = CALL_SHAPES[shape]("cpu", gen)
    for backend in (stock, ours):
        torch.manual_seed(99)
        assert backend(*args, **kwargs) is None
    same_call(got.calls[0], want.calls[0])


_INIT_SCRIPT = r"""
import json, logging, sys
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.name, record.getMessage()))
from vllm.plugins import load_general_plugins, load_plugins_by_group
found = {name: f"{fn.__module__}:{fn.__qualname__}" for name, fn in
         load_plugins_by_group("vllm.general_plugins").items()}
load_general_plugins()
heavy = sorted(m for m in ("mamba_ssu", "mamba_ssu._C", "vllm.model_executor.layers.mamba.ops.ssu_dispatch")
               if m in sys.modules)
logging.getLogger("vllm").addHandler(Keep())
logging.getLogger("vllm").setLevel(logging.DEBUG)
from vllm.config.mamba import MambaBackendEnum, MambaConfig
from vllm.model_executor.layers.mamba.ops import ssu_dispatch
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec
import torch
cfg = MambaConfig(backend=MambaBackendEnum.FLASHINFER, ssu_algorithm="simple")
cfg.enable_stochastic_rounding = True
cfg.stochastic_rounding_philox_rounds = 5
spec = MambaSpec(block_size=16, shapes=((3, 4), (32, 64, 128)), dtypes=(torch.bfloat16, torch.float16),
                 mamba_type=MambaAttentionBackendEnum.MAMBA2)
kv = KVCacheConfig(num_blocks=4, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
ssu_dispatch.initialize_mamba_ssu_backend(cfg, kv)
b = ssu_dispatch.get_mamba_ssu_backend()
import mamba_ssu.vllm as adapter
print(json.dumps(dict(
    found=found, heavy_after_plugins=heavy, cls=f"{type(b).__module__}.{type(b).__qualname__}",
    is_adapter=type(b) is adapter.MambaSSUBackend, seed_mode=b.seed_mode, rounds=b.philox_rounds,
    algorithm=b.algorithm, sr=b.stochastic_rounding, log=records)))
"""


def _run_vllm_init(env_value):
    engine("vllm.plugins")
    env = dict(os.environ)
    env.pop("VLLM_PLUGINS", None)
    if env_value is None:
        env.pop("MAMBA_SSU_VLLM", None)
    else:
        env["MAMBA_SSU_VLLM"] = env_value
    r = subprocess.run([sys.executable, "-c", _INIT_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=600, cwd="/")
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_vllm_initialisation_builds_the_crates_backend():
    """In a fresh process, as a vLLM worker: vLLM's loader finds the entry point, loading the
    plugins imports neither the package nor vLLM's dispatch module (nothing heavy), and vLLM's
    initialize_mamba_ssu_backend with a real MambaConfig (flashinfer, SR, 5 rounds, "simple")
    and a Mamba-2 KV cache group builds the crate's backend, honouring the configuration; the
    plugin's line and vLLM's "Using mamba-ssu Mamba SSU backend." are logged."""
    got = _run_vllm_init("fused")
    assert got["found"].get("mamba_ssu") == "mamba_ssu_plugins:register_vllm", got["found"]
    assert got["heavy_after_plugins"] == [], got["heavy_after_plugins"]
    assert got["is_adapter"], got["cls"]
    assert (got["seed_mode"], got["rounds"], got["algorithm"], got["sr"]) == ("fused", 5, "simple", True)
    messages = [m for _, m in got["log"]]
    assert sum("mamba-ssu" in m and "is active" in m for m in messages) == 1, messages
    assert "Using mamba-ssu Mamba SSU backend." in messages, messages


def test_vllm_initialisation_without_opting_in_keeps_flashinfer():
    """Without MAMBA_SSU_VLLM the plugin leaves vLLM's registry alone: vLLM's FlashInfer
    backend stays registered."""
    engine("vllm.plugins")
    env = dict(os.environ)
    env.pop("MAMBA_SSU_VLLM", None)
    script = (
        "from vllm.plugins import load_general_plugins; load_general_plugins()\n"
        "from vllm.config.mamba import MambaBackendEnum\n"
        "from vllm.model_executor.layers.mamba.ops import ssu_dispatch as d\n"
        "print(d._BACKEND_REGISTRY[MambaBackendEnum.FLASHINFER] is d.FlashInferSSUBackend)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=600, cwd="/")
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip().splitlines()[-1] == "True"


def test_register_needs_vllm():
    from mamba_ssu import vllm as adapter

    if adapter.VLLM_IMPORTABLE:
        pytest.skip("vLLM is installed here (the subprocess tests cover register)")
    with pytest.raises(ImportError, match="vLLM"):
        adapter.register()
