"""Reads the nvcc flags of FlashInfer's sm_90 mamba JIT module from the files of its wheel.

FlashInfer builds its selective-state-update module at run time (JIT). The flags come from four
places of the Python package, which this module reads statically (with `ast`, nothing of
FlashInfer is imported or executed):

* `jit/core.py`, `gen_jit_spec`: the CUDA flag list every JIT module gets (C++ standard, fast
  math, fatbin compression, the dtype defines) and the flags of its non-debug branch;
* `jit/cpp_ext.py`, `build_cuda_cflags`: the flags nvcc always gets (-fPIC, relaxed constexpr,
  the template-stub flag of CUDA >= 12.8);
* `compilation_context.py`, `CompilationContext.COMMON_NVCC_FLAGS`: defines added with the
  architecture flags;
* `jit/mamba/selective_state_update.py`, `gen_selective_state_update_sm90_module`: the module's
  supported major architecture (9, which FlashInfer compiles as sm_90a) and its extra defines.

When a release moves these, `extract` raises with the place it could not find, so a changed
build is noticed instead of silently recorded with other flags.
"""

import ast
import os


class FlagsError(RuntimeError):
    pass


def _parse(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


def _func(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise FlagsError(f"function {name} not found")


def _strings(node):
    """String constants of a list literal (starred or non-string items are skipped)."""
    if isinstance(node, ast.List):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _strings(node.left) + _strings(node.right)
    return []


def _mentions(node, name):
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _list_flags(stmts, var, skip_if_names=()):
    """Flags put into list `var` by the statements (assignments, +=, insert, append), following
    every branch except the bodies of `if` tests that mention one of `skip_if_names` (their
    `else` branch is followed)."""
    out = []
    for st in stmts:
        if isinstance(st, ast.If):
            if any(_mentions(st.test, n) for n in skip_if_names):
                out += _list_flags(st.orelse, var, skip_if_names)
            else:
                out += _list_flags(st.body, var, skip_if_names)
                out += _list_flags(st.orelse, var, skip_if_names)
            continue
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in st.targets):
            out += _strings(st.value)
        elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name) and st.target.id == var:
            out += _strings(st.value)
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            call = st.value
            f = call.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == var:
                for a in call.args:
                    if isinstance(a, ast.Constant) and isinstance(a.value, str):
                        out.append(a.value)
    return out


def extract(pkg_dir):
    """Returns (flags, provenance) for the sm_90 selective-state-update module of the
    FlashInfer package extracted at pkg_dir (the directory holding `jit/`)."""
    prov = {}
    core = _parse(os.path.join(pkg_dir, "jit", "core.py"))
    spec = _func(core, "gen_jit_spec")
    # Branches on `debug` and on environment opt-ins (`os.environ`) are off by default.
    base = _list_flags(spec.body, "cuda_cflags", skip_if_names=("debug", "os"))
    if "-use_fast_math" not in base or "-O3" not in base:
        raise FlagsError("jit/core.py gen_jit_spec: no -use_fast_math/-O3 in the CUDA flags")
    prov["jit/core.py:gen_jit_spec"] = base

    cpp = _parse(os.path.join(pkg_dir, "jit", "cpp_ext.py"))
    bcf = _func(cpp, "build_cuda_cflags")
    always = [f for f in _list_flags(bcf.body, "cuda_cflags", skip_if_names=("cc_env",)) if not f.startswith("$")]
    if "--expt-relaxed-constexpr" not in always:
        raise FlagsError("jit/cpp_ext.py build_cuda_cflags: flags not found")
    prov["jit/cpp_ext.py:build_cuda_cflags"] = always

    cc = _parse(os.path.join(pkg_dir, "compilation_context.py"))
    common = None
    for node in ast.walk(cc):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMMON_NVCC_FLAGS" for t in node.targets
        ):
            common = _strings(node.value)
    if common is None:
        raise FlagsError("compilation_context.py: COMMON_NVCC_FLAGS not found")
    prov["compilation_context.py:COMMON_NVCC_FLAGS"] = common

    ssu = _parse(os.path.join(pkg_dir, "jit", "mamba", "selective_state_update.py"))
    sm90 = _func(ssu, "gen_selective_state_update_sm90_module")
    majors = None
    for node in ast.walk(sm90):
        if isinstance(node, ast.keyword) and node.arg == "supported_major_versions":
            majors = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    if majors != [9]:
        raise FlagsError(f"gen_selective_state_update_sm90_module: supported majors {majors}, expected [9]")
    extra = _list_flags(sm90.body, "nvcc_flags")
    if not any("SM90" in f for f in extra):
        raise FlagsError("gen_selective_state_update_sm90_module: no SM90 define")
    # FlashInfer compiles major 9 as the architecture-specific target 9.0a.
    arch = ["-gencode=arch=compute_90a,code=sm_90a"]
    prov["jit/mamba/selective_state_update.py:gen_selective_state_update_sm90_module"] = arch + extra

    flags = []
    for f in base + always + common + arch + common + extra:
        if f not in flags:
            flags.append(f)
    return flags, prov


if __name__ == "__main__":
    import json
    import sys

    fl, pv = extract(sys.argv[1])
    print(json.dumps({"flags": fl, "from": pv}, indent=1))
