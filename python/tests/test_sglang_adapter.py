"""CPU tests of ``mamba_ssu.sglang``: the backend against sglang 0.5.23's own code.

Where sglang is installed (``scripts/check-sglang.sh`` makes such an environment, and makes these
tests fail rather than skip without it): the class is a subclass of sglang's ``MambaSSUBackend``
with the signature of sglang's ``FlashInferSSUBackend.__call__``; sglang's plugin loader finds
the package's entry point; sglang's ``initialize_mamba_selective_state_update_backend`` builds the
crate's backend from the server arguments once ``MAMBA_SSU_SGLANG`` is set; and for the
arguments sglang's Mamba-2 mixer passes (decode, target verify) the kernel receives exactly what
sglang's FlashInfer backend hands FlashInfer.

Everywhere: the arguments that reach the kernel (a recording stand-in), the configuration read
as sglang's FlashInfer backend reads it, ``retrieve_parent_token`` refused, and the meta-device
path through the real ``selective_state_update``.
"""

import inspect
import json
import os
import subprocess
import sys
import types

import pytest
import torch

from engines import NUM_SPEC, Recorder, engine, same_call, sglang_decode, sglang_verify

CALL_SHAPES = {"decode": sglang_decode, "verify": sglang_verify}
CONFIGS = [dict(sr=True, rounds=0), dict(sr=True, rounds=5), dict(sr=False, rounds=0), dict(sr=False, rounds=7)]


def _backend(cfg, seed_mode="stock"):
    from mamba_ssu.sglang import MambaSSUBackend

    b = MambaSSUBackend(enable_stochastic_rounding=cfg["sr"], cache_philox_rounds=cfg["rounds"],
                        seed_mode=seed_mode)
    rec = Recorder()
    b._kernel = rec
    return b, rec


@pytest.mark.parametrize("shape", sorted(CALL_SHAPES))
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"sr{int(c['sr'])}-r{c['rounds']}")
def test_arguments_reach_the_kernel_as_sglang_means_them(shape, cfg):
    """The mixer's call reaches the kernel with the caller's own tensors, its pad_slot_id
    (default -1), cache_steps (None -> 0; the draft length at verify), disable_state_update,
    the intermediate buffer and its indices, the configured rounds (0 -> 10), FlashInfer's
    default algorithm, and one stock draw exactly with stochastic rounding."""
    gen = torch.Generator().manual_seed(17)
    args, kwargs, _ = CALL_SHAPES[shape]("cpu", gen)
    b, rec = _backend(cfg)
    torch.manual_seed(4321)
    want_seed = torch.randint(0, 2**32, (1,))
    torch.manual_seed(4321)
    assert b(*args, **kwargs) is None
    after = torch.randint(0, 2**32, (1,))
    (call,) = rec.calls
    for name, t in zip(("state", "x", "dt", "A", "B", "C", "D"), args):
        assert call[name] is t, name
    for name in ("dt_bias", "state_batch_indices", "out"):
        assert call[name] is kwargs[name], name
    assert call["z"] is None and call["dt_softplus"] is True and call["pad_slot_id"] == -1
    if shape == "verify":
        assert call["disable_state_update"] is True and call["cache_steps"] == 1 + NUM_SPEC
        assert call["intermediate_states_buffer"] is kwargs["intermediate_states_buffer"]
        assert call["intermediate_state_indices"] is kwargs["intermediate_state_indices"]
    else:
        assert call["disable_state_update"] is False and call["cache_steps"] == 0
        assert call["intermediate_states_buffer"] is None and call["intermediate_state_indices"] is None
    assert call["philox_rounds"] == (cfg["rounds"] or 10)
    assert call["algorithm"] == "auto" and call["backend"] == "auto"
    for name in ("dst_state_batch_indices", "cu_seqlens", "num_accepted_tokens", "state_scale"):
        assert call[name] is None, name
    if cfg["sr"]:
        assert torch.equal(call["rand_seed"], want_seed)
        assert not torch.equal(after, want_seed)
    else:
        assert call["rand_seed"] is None
        assert torch.equal(after, want_seed)


def test_retrieve_parent_token_refused_before_any_draw():
    """EAGLE tree verification is refused with ValueError, as sglang's FlashInfer backend
    refuses it, before the seed draw and the kernel."""
    gen = torch.Generator().manual_seed(2)
    args, kwargs, _ = sglang_verify("cpu", gen)
    b, rec = _backend(dict(sr=True, rounds=0))
    torch.manual_seed(8)
    with pytest.raises(ValueError, match="retrieve_parent_token"):
        b(*args, **dict(kwargs, retrieve_parent_token=torch.zeros(5, 1 + NUM_SPEC, dtype=torch.int32)))
    assert rec.calls == []
    after = torch.randint(0, 2**32, (1,))
    torch.manual_seed(8)
    assert torch.equal(after, torch.randint(0, 2**32, (1,)))


def test_configuration_and_seed_mode(monkeypatch):
    from mamba_ssu.sglang import MambaSSUBackend

    with pytest.raises(ValueError, match="^philox_rounds: expected >= 1"):
        MambaSSUBackend(enable_stochastic_rounding=True, cache_philox_rounds=-1)
    MambaSSUBackend(enable_stochastic_rounding=False, cache_philox_rounds=-1)
    MambaSSUBackend(enable_stochastic_rounding=True, cache_philox_rounds=11)  # any count >= 1
    with pytest.raises(ValueError, match="seed_mode"):
        MambaSSUBackend(seed_mode="randint")
    with pytest.raises(TypeError):
        MambaSSUBackend(True, 5)  # keyword-only, as sglang's backends
    monkeypatch.setenv("MAMBA_SSU_SGLANG", "fused")
    assert MambaSSUBackend().seed_mode == "fused"
    monkeypatch.setenv("MAMBA_SSU_SGLANG", "1")
    assert MambaSSUBackend().seed_mode == "next_seed"
    monkeypatch.setenv("MAMBA_SSU_SGLANG", "yes")
    with pytest.raises(ValueError, match="MAMBA_SSU_SGLANG"):
        MambaSSUBackend()
    assert MambaSSUBackend(seed_mode="stock").name == "mamba-ssu"


@pytest.mark.parametrize("shape", sorted(CALL_SHAPES))
def test_meta_tensors_through_the_real_entry_point(shape):
    """The mixer's tensors (same shapes, strides, dtypes) on the meta device through the real
    selective_state_update: accepted, nothing returned."""
    gen = torch.Generator().manual_seed(13)
    args, kwargs, _ = CALL_SHAPES[shape]("cpu", gen)

    def meta(t):
        if not isinstance(t, torch.Tensor):
            return t
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")

    from mamba_ssu.sglang import MambaSSUBackend

    b = MambaSSUBackend(enable_stochastic_rounding=True, cache_philox_rounds=5, seed_mode="stock")
    assert b(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()}) is None


# ---- against sglang's own code -----------------------------------------------------------


def test_is_an_sglang_backend_with_sglangs_signature():
    dispatch = engine("sglang.kernels.ops.mamba.triton_ops.ssu_dispatch")
    from mamba_ssu.sglang import SGLANG_IMPORTABLE, MambaSSUBackend

    assert SGLANG_IMPORTABLE
    assert issubclass(MambaSSUBackend, dispatch.MambaSSUBackend)
    assert inspect.signature(MambaSSUBackend.__call__) == inspect.signature(
        dispatch.FlashInferSSUBackend.__call__
    )
    # sglang's constructor arguments are a prefix of ours (keyword-only, same defaults).
    theirs = inspect.signature(dispatch.FlashInferSSUBackend.__init__).parameters
    ours = inspect.signature(MambaSSUBackend.__init__).parameters
    assert list(ours)[: len(theirs)] == list(theirs)
    for name, p in theirs.items():
        assert ours[name] == p, name


@pytest.mark.parametrize("shape", sorted(CALL_SHAPES))
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"sr{int(c['sr'])}-r{c['rounds']}")
def test_kernel_call_equals_sglangs_flashinfer_backend(shape, cfg, monkeypatch):
    """The same mixer call through sglang's FlashInfer backend (FlashInfer's function replaced
    by a recorder) and through the crate's (seed mode "stock"), from the same CPU generator
    state: every argument is the same — tensors by identity, the seed by value."""
    dispatch = engine("sglang.kernels.ops.mamba.triton_ops.ssu_dispatch")
    want = Recorder()
    fake = types.ModuleType("flashinfer.mamba")
    fake.selective_state_update = want
    monkeypatch.setitem(sys.modules, "flashinfer.mamba", fake)
    kw = dict(enable_stochastic_rounding=cfg["sr"], cache_philox_rounds=cfg["rounds"])
    stock = dispatch.FlashInferSSUBackend(**kw)
    from mamba_ssu.sglang import MambaSSUBackend

    ours = MambaSSUBackend(**kw, seed_mode="stock")
    got = Recorder()
    ours._kernel = got
    gen = torch.Generator().manual_seed(23)
    args, kwargs, _ = CALL_SHAPES[shape]("cpu", gen)
    for backend in (stock, ours):
        torch.manual_seed(77)
        assert backend(*args, **kwargs) is None
    same_call(got.calls[0], want.calls[0])


_INIT_SCRIPT = r"""
import json, logging, sys
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.name, record.getMessage()))
logging.getLogger().addHandler(Keep())
logging.getLogger().setLevel(logging.DEBUG)
from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins, load_plugins_by_group
found = {name: f"{fn.__module__}:{fn.__qualname__}" for name, (fn, _) in
         load_plugins_by_group(GENERAL_PLUGINS_GROUP).items()}
heavy_before = sorted(m for m in ("mamba_ssu", "mamba_ssu._C") if m in sys.modules)
if sys.argv[1] == "scheduler":
    # The scheduler process imports the dispatch module before it loads the plugins.
    from sglang.kernels.ops.mamba.triton_ops import ssu_dispatch
load_plugins()
heavy_after = sorted(m for m in ("mamba_ssu", "mamba_ssu._C") if m in sys.modules)
from sglang.kernels.ops.mamba.triton_ops import ssu_dispatch
from types import SimpleNamespace
args = SimpleNamespace(mamba_backend="flashinfer", enable_mamba_cache_stochastic_rounding=True,
                       mamba_cache_philox_rounds=5)
ssu_dispatch.initialize_mamba_selective_state_update_backend(args)
b = ssu_dispatch._mamba_ssu_backend
import mamba_ssu.sglang as adapter
print(json.dumps(dict(found=found, heavy_before=heavy_before, heavy_after=heavy_after,
    is_adapter=type(b) is adapter.MambaSSUBackend, cls=type(b).__qualname__,
    seed_mode=b.seed_mode, rounds=b.philox_rounds, sr=b.stochastic_rounding, log=records)))
"""


@pytest.mark.parametrize("process", ["scheduler", "other"])
def test_sglang_initialisation_builds_the_crates_backend(process):
    """In a fresh process: sglang's loader finds the entry point without importing the package;
    with MAMBA_SSU_SGLANG set, sglang's initialize_mamba_selective_state_update_backend (from
    --mamba-backend flashinfer, SR, 5 rounds) builds the crate's backend — whether the dispatch
    module was imported before the plugins (the scheduler process) or after — and the plugin
    logs one line."""
    engine("sglang.srt.plugins")
    env = dict(os.environ, MAMBA_SSU_SGLANG="next_seed")
    env.pop("SGLANG_PLUGINS", None)
    r = subprocess.run([sys.executable, "-c", _INIT_SCRIPT, process], env=env, capture_output=True,
                       text=True, timeout=600, cwd="/")
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["found"].get("mamba_ssu") == "mamba_ssu_plugins:register_sglang", got["found"]
    assert got["heavy_before"] == []
    if process == "other":
        assert got["heavy_after"] == [], "the plugin imported the package before it was needed"
    assert got["is_adapter"], got["cls"]
    assert (got["seed_mode"], got["rounds"], got["sr"]) == ("next_seed", 5, True)
    messages = [m for _, m in got["log"]]
    assert sum("mamba-ssu" in m and "is active" in m for m in messages) == 1, messages


def test_register_needs_sglang():
    from mamba_ssu import sglang as adapter

    if adapter.SGLANG_IMPORTABLE:
        pytest.skip("sglang is installed here (the subprocess tests cover register)")
    with pytest.raises(ImportError, match="sglang"):
        adapter.register()
