"""CPU tests of ``mamba_ssu_plugins``, the engines' plugin entry points: the opt-in variables,
the deferred registration (right after the engine's dispatch module is imported, or at once
where it already is), that loading a plugin imports nothing but the standard library, and the
entry points an installed wheel declares (``MAMBA_SSU_EXPECT_WHEEL=1``, which the CI's wheel
check sets, makes that test fail rather than skip where the package is not installed).
"""

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

import mamba_ssu_plugins as plugins


@pytest.mark.parametrize("var", [plugins.VLLM_ENV, plugins.SGLANG_ENV])
def test_opt_in_values(var, monkeypatch):
    monkeypatch.delenv(var, raising=False)
    assert plugins.seed_mode_from_env(var) is None
    for value, mode in (("", None), ("0", None), (" 0 ", None), ("1", "next_seed"),
                        ("next_seed", "next_seed"), ("FUSED", "fused"), ("stock", "stock")):
        monkeypatch.setenv(var, value)
        assert plugins.seed_mode_from_env(var) == mode, value
    monkeypatch.setenv(var, "true")
    with pytest.raises(ValueError, match=var):
        plugins.seed_mode_from_env(var)


@pytest.mark.parametrize("register,var", [(plugins.register_vllm, plugins.VLLM_ENV),
                                          (plugins.register_sglang, plugins.SGLANG_ENV)])
def test_not_opted_in_does_nothing(register, var, monkeypatch):
    monkeypatch.delenv(var, raising=False)
    before = list(sys.meta_path)
    register()
    assert sys.meta_path == before


def _package(tmp_path, name):
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "dispatch.py").write_text(textwrap.dedent("""\
        REGISTRY = {"flashinfer": "theirs"}


        def build(name):
            return REGISTRY[name]
    """))
    return f"{name}.dispatch"


def test_registration_right_after_the_import(tmp_path, monkeypatch):
    """Before the module is imported nothing runs; its import runs the callback once, after the
    module's code (the registry exists), before the importer sees the module; the finder then
    leaves sys.meta_path and the module keeps its real loader (its source is readable)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(tmp_path, "fake_engine_a")
    seen = []

    def install(module):
        seen.append(dict(module.REGISTRY))
        module.REGISTRY["flashinfer"] = "ours"

    plugins._when_imported(name, install)
    plugins._when_imported(name, install)  # a second registration adds no second finder
    hooks = [f for f in sys.meta_path if isinstance(f, plugins._AfterImport)]
    assert len(hooks) == 1 and seen == []
    try:
        import importlib
        import inspect

        module = importlib.import_module(name)
        assert seen == [{"flashinfer": "theirs"}]
        assert module.build("flashinfer") == "ours"
        assert not any(isinstance(f, plugins._AfterImport) for f in sys.meta_path)
        assert "REGISTRY" in inspect.getsource(module)
        assert "exec_module" not in vars(module.__loader__)
        # Already imported: at once.
        plugins._when_imported(name, lambda m: seen.append("again"))
        assert seen[-1] == "again"
    finally:
        for f in [f for f in sys.meta_path if isinstance(f, plugins._AfterImport)]:
            sys.meta_path.remove(f)
        for m in [m for m in sys.modules if m.startswith("fake_engine_a")]:
            del sys.modules[m]


def test_a_failing_registration_fails_the_import(tmp_path, monkeypatch):
    """An opted-in process whose registration fails (e.g. the extension does not load) fails
    loudly at the engine's import of its dispatch module, not silently later."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(tmp_path, "fake_engine_b")

    def install(module):
        raise RuntimeError("extension does not load")

    plugins._when_imported(name, install)
    try:
        import importlib

        with pytest.raises(RuntimeError, match="extension does not load"):
            importlib.import_module(name)
        assert name not in sys.modules
    finally:
        for f in [f for f in sys.meta_path if isinstance(f, plugins._AfterImport)]:
            sys.meta_path.remove(f)
        for m in [m for m in sys.modules if m.startswith("fake_engine_b")]:
            del sys.modules[m]


def test_plugin_load_imports_only_the_standard_library():
    """What the engines' loaders run in every process: importing the entry points' module and
    calling them opted in, with no engine installed, imports neither torch nor the package."""
    script = (
        "import sys, mamba_ssu_plugins as p\n"
        "p.register_vllm(); p.register_sglang()\n"
        "print(sorted(m for m in ('torch', 'mamba_ssu', 'mamba_ssu._C') if m in sys.modules))\n"
    )
    env = dict(os.environ, MAMBA_SSU_VLLM="1", MAMBA_SSU_SGLANG="fused")
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(plugins.__file__)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    )
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_installed_wheel_declares_the_entry_points():
    """The installed distribution (the wheel) declares both entry points, pointing at this
    module, and the package imports from the installed files."""
    try:
        dist = importlib.metadata.distribution("mamba-ssu")
    except importlib.metadata.PackageNotFoundError:
        if os.environ.get("MAMBA_SSU_EXPECT_WHEEL") == "1" or os.environ.get("MAMBA_SSU_EXPECT_ENGINE"):
            pytest.fail("the mamba-ssu distribution is not installed here")
        pytest.skip("the mamba-ssu distribution is not installed (an in-place build)")
    eps = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert eps[("vllm.general_plugins", "mamba_ssu")] == "mamba_ssu_plugins:register_vllm"
    assert eps[("sglang.srt.plugins", "mamba_ssu")] == "mamba_ssu_plugins:register_sglang"
    import mamba_ssu

    files = {str(dist.locate_file(f)) for f in dist.files}
    assert os.path.realpath(mamba_ssu.__file__) in {os.path.realpath(f) for f in files}
    assert os.path.realpath(plugins.__file__) in {os.path.realpath(f) for f in files}
    assert any(f.name.startswith("_C.") and f.name.endswith(".so") for f in dist.files)
    torch_req = [r for r in dist.requires if r.startswith("torch")]
    assert len(torch_req) == 1, dist.requires
