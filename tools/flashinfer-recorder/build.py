#!/usr/bin/env python3
"""Builds the FlashInfer reference recorder for one FlashInfer release (runs on the build host,
which needs no GPU).

  python3 tools/flashinfer-recorder/build.py --flashinfer 0.7.2.post1 [-j N]

1. downloads the `flashinfer-python` wheel of the release with `pip download --no-deps` into
   ~/.cache/mamba-ssu/flashinfer/<release>/ (kept; a second run downloads nothing);
2. extracts the wheel's C++ headers (include/, the vendored CCCL) and its JIT build scripts
   there (nothing of FlashInfer enters the repository);
3. reads the nvcc flags of FlashInfer's sm_90 mamba module from the JIT scripts
   (extract_flags.py) and detects which parameters the release's launchers take;
4. collects the instantiation groups the case specs and the reference manifests need (one
   group = one set of FlashInfer's compile-time types and constants), writes one translation
   unit per group and compiles them in parallel with the project's pinned nvcc
   (`eval "$(bash scripts/setup.sh)"` provides it) and links one shared library;
5. assembles the self-contained directory to carry to the GPU host:
   target/flashinfer-recorder/<release>/dist/ (libfirec.so with the CUDA runtime linked
   statically, the runner, the specs, the reference manifests, build.json).
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "runner"))

import extract_flags  # noqa: E402
import spec as specmod  # noqa: E402
from record import read_maybe_xz  # noqa: E402

DEFAULT_SPECS = [os.path.join(HERE, "cases", "new_cases.json")]
DEFAULT_REFERENCES = [
    os.path.join(REPO, "tests", "data", "flashinfer_ssu", "manifest.json"),
    os.path.join(REPO, "tests", "data", "flashinfer_ssu_mtp", "manifest.json"),
]


def log(msg):
    print(f"build: {msg}", file=sys.stderr, flush=True)


def cache_dir(release):
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mamba-ssu", "flashinfer", release)


def fetch_wheel(release, cache):
    wheel_dir = os.path.join(cache, "wheel")
    os.makedirs(wheel_dir, exist_ok=True)
    want = "flashinfer_python-" + release + "-"
    have = [f for f in os.listdir(wheel_dir) if f.startswith(want) and f.endswith(".whl")]
    if not have:
        log(f"downloading flashinfer-python=={release} (pip download --no-deps)")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
             f"flashinfer-python=={release}", "-d", wheel_dir],
            check=True,
        )
        have = [f for f in os.listdir(wheel_dir) if f.startswith(want) and f.endswith(".whl")]
    if len(have) != 1:
        raise SystemExit(f"build: expected one wheel of {release} in {wheel_dir}, found {have}")
    return os.path.join(wheel_dir, have[0])


def extract_wheel(wheel, cache):
    """Extracts the headers, the vendored CCCL and the JIT scripts (idempotent)."""
    dest = os.path.join(cache, "extract")
    stamp = os.path.join(dest, ".complete-" + hashlib.sha256(wheel.encode()).hexdigest()[:12])
    if os.path.exists(stamp):
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    prefixes = (
        "flashinfer/data/include/",
        "flashinfer/data/cccl/",
        "flashinfer/jit/",
        "flashinfer/compilation_context.py",
        "flashinfer/data/csrc/selective_state_update",
    )
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith(prefixes)]
        log(f"extracting {len(names)} files of {os.path.basename(wheel)}")
        z.extractall(dest, names)
    open(stamp, "w").close()
    return dest


def detect_features(inc):
    """Which parameters this release's launchers take (FIREC_HAS_* macros)."""
    mamba = os.path.join(inc, "flashinfer", "mamba")
    with open(os.path.join(mamba, "selective_state_update.cuh"), encoding="utf-8") as f:
        params = f.read()
    stp_path = os.path.join(mamba, "kernel_selective_state_update_stp.cuh")
    with open(stp_path, encoding="utf-8") as f:
        stp = f.read()
    conv = os.path.join(mamba, "conversion.cuh")
    conv_text = open(conv, encoding="utf-8").read() if os.path.exists(conv) else ""
    launcher = re.search(r"void\s+invokeSelectiveStateUpdate\s*\(", stp)
    head = stp[max(0, launcher.start() - 300) : launcher.start()] if launcher else ""
    return {
        "FIREC_HAS_STATE_SCALE": int("state_scale_stride_batch" in params),
        "FIREC_HAS_INTERMEDIATE_SCALES": int("intermediate_state_scales" in params),
        "FIREC_HAS_INDEX_STRIDE_T": int("state_batch_indices_stride_T" in params),
        "FIREC_HAS_CU_SEQLENS": int("cu_seqlens" in params and "num_accepted_tokens" in params),
        "FIREC_HAS_HORIZONTAL": int("kHorizontal" in params),
        "FIREC_LAUNCHER_HAS_SCALE_T": int("state_scale_t" in head),
        "FIREC_HAS_PRIMITIVES": int("philox_randint4x" in conv_text and "cvt_rs_f16_f32" in conv_text),
    }


def group_source(gid, key, features):
    t = specmod.CXX_TYPE
    lines = [
        f"// Instantiation group {gid} (generated by tools/flashinfer-recorder/build.py).",
        "// The types and constants FlashInfer's JIT configuration defines before its header.",
        "#include <cuda_bf16.h>",
        "#include <cuda_fp16.h>",
        "#include <cstdint>",
        f"using state_t = {t[key['state_dtype']]};",
        f"using input_t = {t[key['input_dtype']]};",
        f"using weight_t = {t[key['weight_dtype']]};",
        f"using matrixA_t = {t[key['A_dtype']]};",
        f"using stateIndex_t = {t[key['index_dtype']]};",
        f"using cuSeqlensIndex_t = {t[key['cu_seqlens_dtype']]};",
        f"using numAcceptedIndex_t = {t[key['num_accepted_tokens_dtype']]};",
        f"using state_scale_t = {t[key['state_scale_dtype']] if key['state_scale_dtype'] else 'void'};",
        f"constexpr int DIM = {key['dim']};",
        f"constexpr int DSTATE = {key['dstate']};",
        f"constexpr int NTOKENS_MTP = {key['ntokens_mtp']};",
        f"constexpr int PHILOX_ROUNDS = {key['philox_rounds']};",
        "#include <flashinfer/mamba/selective_state_update.cuh>",
    ]
    for k, v in features.items():
        lines.append(f"#define {k} {v}")
    lines += [
        f"#define FIREC_ENTRY firec_{gid}",
        f"#define FIREC_PATH_MTP {1 if key['path'] == 'mtp' else 0}",
        '#include "group_body.inc"',
        "",
    ]
    return "\n".join(lines)


def nvcc_path():
    root = os.environ.get("MAMBA_SSU_CUDA_ROOT") or os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
        return os.path.join(root, "bin", "nvcc")
    found = shutil.which("nvcc")
    if not found:
        raise SystemExit('build: nvcc not found; run `eval "$(bash scripts/setup.sh)"` first')
    return found


def collect_cases(spec_paths, ref_paths):
    cases = []
    for p in spec_paths:
        cases += [("spec", os.path.basename(p), c) for c in specmod.load_spec(p)]
    for p in ref_paths:
        _, cs = specmod.load_reference(p)
        cases += [("reference", os.path.basename(os.path.dirname(p)), c) for c in cs]
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flashinfer", default="0.7.2.post1", help="FlashInfer release (PyPI version of flashinfer-python)")
    ap.add_argument("--spec", action="append", help="case spec file (repeatable; default cases/new_cases.json)")
    ap.add_argument("--reference", action="append", help="reference manifest re-recorded by `run.sh verify` (repeatable)")
    ap.add_argument("--out", help="build directory (default target/flashinfer-recorder/<release>)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--groups-only", action="store_true", help="list the instantiation groups and stop")
    ap.add_argument("--verify-only", action="store_true",
                    help="build only the groups the reference manifests need (for `run.sh verify`)")
    ap.add_argument("--group", action="append", help="build only groups whose id contains this (repeatable)")
    args = ap.parse_args()

    specs = [] if args.verify_only else (args.spec or DEFAULT_SPECS)
    refs = args.reference if args.reference is not None else DEFAULT_REFERENCES
    cases = collect_cases(specs, refs)
    groups = {}
    for origin, src, c in cases:
        gid, key = specmod.group_key(c)
        groups.setdefault(gid, {"key": key, "cases": []})["cases"].append(f"{src}:{c['name']}")
    if args.group:
        groups = {k: v for k, v in groups.items() if any(g in k for g in args.group)}
    log(f"{len(cases)} cases need {len(groups)} instantiation groups")
    if args.groups_only:
        for gid, g in sorted(groups.items()):
            print(gid, len(g["cases"]))
        return

    cache = cache_dir(args.flashinfer)
    wheel = fetch_wheel(args.flashinfer, cache)
    ext = extract_wheel(wheel, cache)
    pkg = os.path.join(ext, "flashinfer")
    inc = os.path.join(pkg, "data", "include")
    flags, provenance = extract_flags.extract(pkg)
    features = detect_features(inc)
    cccl = [os.path.join(pkg, "data", "cccl", d) for d in ("cub", os.path.join("libcudacxx", "include"), "thrust")]
    # As FlashInfer's JIT passes them: the vendored CCCL with -I (ahead of the toolkit's copy),
    # FlashInfer's own headers as a system include directory.
    includes = [f"-I{d}" for d in cccl if os.path.isdir(d)]
    includes += [f"-I{os.path.join(HERE, 'driver')}", "-isystem", inc]

    out = args.out or os.path.join(REPO, "target", "flashinfer-recorder", args.flashinfer)
    objdir = os.path.join(out, "obj")
    srcdir = os.path.join(out, "src")
    dist = os.path.join(out, "dist")
    os.makedirs(objdir, exist_ok=True)
    os.makedirs(srcdir, exist_ok=True)
    nvcc = nvcc_path()
    nvcc_version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    host_cxx = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    feat_defs = [f"-D{k}={v}" for k, v in features.items()]
    with open(os.path.join(HERE, "driver", "group_body.inc"), "rb") as f:
        body_hash = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(HERE, "driver", "firec.h"), "rb") as f:
        body_hash += hashlib.sha256(f.read()).hexdigest()

    # firec_timing.h is the driver's alone (libfirec.so): it stamps the common unit, not the groups.
    with open(os.path.join(HERE, "driver", "firec_timing.h"), "rb") as f:
        timing_hash = hashlib.sha256(f.read()).hexdigest()

    jobs = []
    for gid, g in sorted(groups.items()):
        src = os.path.join(srcdir, gid + ".cu")
        text = group_source(gid, g["key"], features)
        jobs.append((gid, src, text, includes + flags))
    common_src = os.path.join(srcdir, "common.cu")
    shutil.copyfile(os.path.join(HERE, "driver", "common.cu"), common_src)
    jobs.append(("common", common_src, None, includes + flags + feat_defs))

    def compile_one(job):
        gid, src, text, fl = job
        if text is not None:
            with open(src, "w") as f:
                f.write(text)
        with open(src, "rb") as f:
            extra = timing_hash.encode() if gid == "common" else b""
            stamp = hashlib.sha256(f.read() + json.dumps(fl).encode() + body_hash.encode() + nvcc_version.encode()
                                   + extra).hexdigest()
        obj = os.path.join(objdir, gid + ".o")
        stamp_file = obj + ".stamp"
        if os.path.exists(obj) and os.path.exists(stamp_file) and open(stamp_file).read() == stamp:
            return gid, 0.0, True
        failed_file = obj + ".failed"
        if os.path.exists(failed_file):  # the same source and flags failed before: don't retry
            with open(failed_file) as f:
                prev_stamp, _, prev_msg = f.read().partition("\n")
            if prev_stamp == stamp:
                return gid, 0.0, prev_msg
        cmd = [nvcc, "-c", src, "-o", obj] + fl
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            with open(obj + ".log", "w") as f:
                f.write(" ".join(cmd) + "\n" + r.stderr)
            errors = [ln.strip() for ln in r.stderr.splitlines() if "error" in ln]
            msg = "FAILED: " + (errors[0] if errors else r.stderr.strip()[-300:]).replace("\n", " ")
            with open(failed_file, "w") as f:
                f.write(stamp + "\n" + msg)
            return gid, time.time() - t0, msg
        with open(stamp_file, "w") as f:
            f.write(stamp)
        if os.path.exists(failed_file):
            os.remove(failed_file)
        return gid, time.time() - t0, False

    log(f"compiling {len(jobs)} translation units with {args.jobs} jobs ({nvcc})")
    failed = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        for gid, secs, cached in ex.map(compile_one, jobs):
            if isinstance(cached, str):
                failed[gid] = cached
                log(f"  {gid}: {cached} (log: obj/{gid}.o.log)")
            else:
                log(f"  {gid}: {'up to date' if cached else f'{secs:.0f} s'}")
    if "common" in failed:
        raise SystemExit("build: driver/common.cu failed to compile")
    ref_needed = {specmod.group_key(c)[0] for origin, _, c in cases if origin == "reference"}
    if ref_needed & set(failed):
        raise SystemExit(f"build: groups of the reference cases failed: {sorted(ref_needed & set(failed))}")
    jobs = [j for j in jobs if j[0] not in failed]

    # One shared object per group, beside libfirec.so (the driver's common functions). FlashInfer's
    # launchers and kernels are templates over the types only; DIM, DSTATE, PHILOX_ROUNDS and
    # NTOKENS_MTP are the translation unit's constants. Two groups of the same types therefore
    # define host functions of the same name with different bodies, and one linked library
    # would keep one of them for all (every call would run one group's head dim and rounds).
    # Each group links alone (its symbols bound inside it, -Bsymbolic) and the runner loads it
    # with RTLD_LOCAL.
    libdir = os.path.join(dist, "lib")
    shutil.rmtree(libdir, ignore_errors=True)
    os.makedirs(os.path.join(libdir, "groups"), exist_ok=True)
    arch = [f for f in flags if f.startswith("-gencode")]
    # The CUDA runtime is linked statically (into each library); the one driver-API call of
    # FlashInfer's headers (cuTensorMapEncodeTiled) is resolved at load time from libcuda.so.1,
    # which the runner loads first (no libcuda stub is needed on the build host).
    def link(job):
        gid = job[0]
        out = os.path.join(libdir, "libfirec.so") if gid == "common" else \
            os.path.join(libdir, "groups", gid + ".so")
        cmd = [nvcc, "-shared", "-o", out, os.path.join(objdir, gid + ".o")] + arch + \
            ["--cudart", "static", "-Xlinker", "-Bsymbolic"]
        subprocess.run(cmd, check=True)
        # The symbol tables are not needed by the runner (it looks up the exported entry only).
        subprocess.run(["strip", "--strip-unneeded", out], check=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        list(ex.map(link, jobs))

    # The runner and its inputs.
    for sub in ("runner",):
        dst = os.path.join(dist, sub)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(os.path.join(HERE, sub), dst, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(os.path.join(HERE, "run.sh"), os.path.join(dist, "run.sh"))
    shutil.copyfile(os.path.join(HERE, "README.md"), os.path.join(dist, "README.md"))
    os.chmod(os.path.join(dist, "run.sh"), 0o755)
    os.makedirs(os.path.join(dist, "specs"), exist_ok=True)
    for p in specs:
        shutil.copyfile(p, os.path.join(dist, "specs", os.path.basename(p)))
    os.makedirs(os.path.join(dist, "reference"), exist_ok=True)
    ref_names = []
    for p in refs:
        name = os.path.basename(os.path.dirname(p))
        # tests/data keeps the manifests xz-compressed: the dist gets them as plain JSON.
        with open(os.path.join(dist, "reference", name + ".json"), "wb") as f:
            f.write(read_maybe_xz(p))
        ref_names.append(name)
    build = {
        "flashinfer": args.flashinfer,
        "wheel": os.path.basename(wheel),
        "wheel_sha256": hashlib.sha256(open(wheel, "rb").read()).hexdigest(),
        "nvcc": nvcc_version,
        "host_cxx": host_cxx[0] if host_cxx else "",
        "nvcc_flags": flags,
        "nvcc_flags_from": provenance,
        "features": features,
        "groups": {gid: {"symbol": f"firec_{gid}", **g["key"]} for gid, g in sorted(groups.items()) if gid not in failed},
        "failed_groups": {gid: {"error": failed[gid], "cases": groups[gid]["cases"], **groups[gid]["key"]} for gid in sorted(failed)},
        "specs": [os.path.basename(p) for p in specs],
        "references": ref_names,
    }
    with open(os.path.join(dist, "build.json"), "w") as f:
        json.dump(build, f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(dist) for f in fs)
    log(f"done: {dist} ({size / 2**20:.1f} MiB); carry it to the GPU host and run `bash run.sh verify`")


if __name__ == "__main__":
    main()
