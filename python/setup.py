"""Builds the mamba_ssu torch extension over the crate's static library.

Run through `bash python/build.sh` (an in-place build for the project's cached environments) or
`bash python/wheel.sh` (a wheel for one torch environment: `pip wheel --no-build-isolation`),
both of which first build the static library with cargo (`scripts/c-package.sh`). Torch's
shared CUDA runtime (libcudart.so.13 of the nvidia-cuda-runtime wheel torch depends on) is the
only CUDA runtime in the process: the static library's kernels register with it.

The extension is compiled against the torch of the building environment (its C++ API, not a
stable ABI), so the distribution is one per torch minor version: its version carries the torch
it was built for as a local label (0.1.0+torch2.11) and it requires that torch minor.
"""

import os
import pathlib
import shutil

from setuptools import setup

try:
    import torch
except ImportError:
    raise SystemExit(
        "setup.py: torch is not importable here; the extension is built against the torch of the "
        "environment that will run it: `pip wheel --no-build-isolation ./python` (or `pip install "
        "--no-build-isolation ./python`) from that environment"
    ) from None
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = pathlib.Path(__file__).resolve().parent


# Defaults: the C package that `bash scripts/c-package.sh` lays out in the repository, and the
# CUDA runtime wheel (nvidia/cu13) installed with torch.
torch_cu = pathlib.Path(torch.__file__).resolve().parent.parent / "nvidia" / "cu13"
c_package = here.parent / "target" / "c-package"
lib_dir = os.environ.get("MAMBA_SSU_LIB_DIR", str(c_package / "lib"))
include = os.environ.get("MAMBA_SSU_INCLUDE", str(c_package / "include"))


def find_cuda_include():
    """CUDA headers with crt/ (torch's runtime wheel ships cuda_runtime.h without it): the
    first of MAMBA_SSU_CUDA_INCLUDE, torch's nvidia/cu13, MAMBA_SSU_CUDA_ROOT, CUDA_HOME /
    CUDA_PATH, the nvcc on PATH, /usr/local/cuda and the toolkit cache of scripts/setup.sh."""
    if os.environ.get("MAMBA_SSU_CUDA_INCLUDE"):
        return os.environ["MAMBA_SSU_CUDA_INCLUDE"]
    roots = [str(torch_cu)]
    roots += [os.environ[v] for v in ("MAMBA_SSU_CUDA_ROOT", "CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(pathlib.Path(nvcc).resolve().parent.parent))
    cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    roots += ["/usr/local/cuda", os.path.join(cache, "mamba-ssu/cuda-13.0/site/nvidia/cu13")]
    for root in roots:
        if os.path.exists(os.path.join(root, "include", "crt", "host_config.h")):
            return os.path.join(root, "include")
    raise SystemExit("setup.py: no CUDA headers with crt/ found; run `bash scripts/setup.sh` "
                     "(installs the CUDA 13.0 compiler) or set MAMBA_SSU_CUDA_INCLUDE")


cuda_include = find_cuda_include()
cudart_dir = os.environ.get("MAMBA_SSU_CUDART_DIR", str(torch_cu / "lib"))
cudart = os.environ.get("MAMBA_SSU_CUDART", "cudart.so.13")
static_lib = os.path.join(lib_dir, "libmamba_ssu.a")
if not os.path.exists(static_lib):
    raise SystemExit(f"setup.py: {static_lib} not found; run `bash scripts/c-package.sh` first")

torch_release = torch.__version__.split("+")[0]
torch_minor = ".".join(torch_release.split(".")[:2])
next_minor = f"{torch_minor.split('.')[0]}.{int(torch_minor.split('.')[1]) + 1}"

setup(
    name="mamba-ssu",
    version=f"0.1.0+torch{torch_minor}",
    description="Torch binding of mamba-ssu: FlashInfer-compatible selective_state_update and "
    "torch-identical batched stochastic-rounding seeds",
    packages=["mamba_ssu"],
    # The engines' plugin entry points (stdlib only; each does nothing unless its variable is set).
    py_modules=["mamba_ssu_plugins"],
    entry_points={
        "vllm.general_plugins": ["mamba_ssu = mamba_ssu_plugins:register_vllm"],
        "sglang.srt.plugins": ["mamba_ssu = mamba_ssu_plugins:register_sglang"],
    },
    ext_modules=[
        CppExtension(
            name="mamba_ssu._C",
            sources=["mamba_ssu/binding/extension.cpp"],
            depends=[static_lib, os.path.join(include, "mamba_ssu.h")],
            include_dirs=[include, cuda_include],
            # The C++ standard is the one BuildExtension picks for this torch (17 for 2.11, 20 for 2.14).
            extra_compile_args=["-O2"],
            # The whole static library (its kernels register themselves at load), then torch's
            # CUDA runtime by its versioned name (the wheel ships no unversioned libcudart.so).
            extra_link_args=[
                f"-L{cudart_dir}",
                "-Wl,--whole-archive",
                static_lib,
                "-Wl,--no-whole-archive",
                f"-l:lib{cudart}",
                # The CUDA parts of torch used here (current stream, default CUDA generator).
                "-lc10_cuda",
                "-ltorch_cuda",
                # Debug info is 90 % of the module's size (and nothing the kernels need).
                "-Wl,--strip-debug",
            ],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    # The torch minor it was compiled against, from that release on: later patch releases of
    # the minor too (the 2.14 wheel, built against 2.14.0, runs on sglang's 2.14.1:
    # scripts/check-sglang.sh). It must be a CUDA 13 build of torch: the module links
    # libc10_cuda, libtorch_cuda and libcudart.so.13.
    install_requires=[f"torch>={torch_release},<{next_minor}"],
    python_requires=">=3.9",
)
