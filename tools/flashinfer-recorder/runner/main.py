"""Command line of the recorder on the GPU host (run.sh calls it)."""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gen  # noqa: E402
import record  # noqa: E402
import spec as specmod  # noqa: E402

REFERENCE_TEXT = {
    "stp": "FlashInfer {v} invokeSelectiveStateUpdate (single-token STP path), compiled with the flags of its sm90 JIT module",
    "mtp": "FlashInfer {v} mtp::invokeSelectiveStateUpdateMTP (multi-token / speculative-decoding verify path), compiled with the flags of its sm90 JIT module",
}


def load_driver(dist):
    # FlashInfer's TMA descriptors call the driver API (cuTensorMapEncodeTiled); libfirec.so
    # resolves it from the driver library loaded here first.
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise SystemExit(f"run: no NVIDIA driver library on this host ({e}); run.sh needs a GPU host") from None
    import device

    return device.Driver(os.path.join(dist, "lib", "libfirec.so"))


def driver_version():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def header(build, info, path):
    env = {
        "gpu": info["gpu"],
        "sms": info["sms"],
        "cc": info["cc"],
        "l2_bytes": info["l2_bytes"],
        "driver": driver_version() or f"CUDA driver API {info['cuda_driver_api']}",
        "nvcc": build["nvcc"],
        "host_cxx": build["host_cxx"],
        "flashinfer": f"{build['flashinfer']} (headers from the PyPI wheel {build['wheel']})",
        "nvcc_flags": build["nvcc_flags"],
        "recorder": "tools/flashinfer-recorder (libfirec, CUDA runtime linked statically)",
    }
    return {
        "format": "flashinfer-ssu-golden",
        "format_version": 1,
        "reference": REFERENCE_TEXT[path].format(v=build["flashinfer"]),
        "byte_order": "little",
        "environment": env,
    }


def compare(rec, ref):
    """Block-by-block SHA-256 comparison. Returns (compared, [mismatch descriptions])."""
    bad, n = [], 0

    def cmp_tensor(where, a, b):
        nonlocal n
        if a is None:
            bad.append(f"{where}: not re-recorded")
            return
        if len(a["blocks"]) != len(b["blocks"]):
            bad.append(f"{where}: {len(a['blocks'])} blocks, reference {len(b['blocks'])}")
            return
        for i, (x, y) in enumerate(zip(a["blocks"], b["blocks"])):
            n += 1
            if x["sha256"] != y["sha256"]:
                bad.append(f"{where} block {i}: sha256 differs")

    ins = {t["name"]: t for t in rec["inputs"]}
    for t in ref["inputs"]:
        cmp_tensor(f"input {t['name']}", ins.get(t["name"]), t)
    results = {r["algorithm_requested"]: r for r in rec["results"]}
    for r in ref["results"]:
        alg = r["algorithm_requested"]
        got = results.get(alg)
        if got is None:
            rej = [x["message"] for x in rec.get("rejected_algorithms", []) if x["algorithm"] == alg]
            bad.append(f"{alg}: no result" + (f" (rejected: {rej[0]})" if rej else ""))
            continue
        if not got["run_to_run_identical"]:
            bad.append(f"{alg}: run to run not identical")
        outs = {t["name"]: t for t in got["outputs"]}
        for t in r["outputs"]:
            cmp_tensor(f"{alg} {t['name']}", outs.get(t["name"]), t)
    return n, bad


def groups_for(cases, build):
    """The entry symbol of each case's group; None for a group that did not compile."""
    out = []
    for c in cases:
        gid, _ = specmod.group_key(c)
        if gid in build.get("failed_groups", {}):
            out.append(None)
            continue
        if gid not in build["groups"]:
            raise SystemExit(f"run: case {c['name']} needs group {gid}, which this build lacks; "
                             "rebuild with its spec (build.py --spec)")
        out.append(build["groups"][gid]["symbol"])
    return out


def main():
    ap = argparse.ArgumentParser(prog="run.sh")
    ap.add_argument("--dist", required=True)
    ap.add_argument("mode", choices=["verify", "record", "list", "primitives"])
    ap.add_argument("spec", nargs="?", help="spec file for record/list (default specs/new_cases.json)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "recorded", help="output directory (default $OUT)")
    ap.add_argument("--only", action="append", help="only cases whose name contains this (repeatable)")
    ap.add_argument("--skip", action="append", default=[],
                    help="leave out the case of this exact name (repeatable; record mode passes the cases "
                         "it has handled when it continues in a fresh process after a CUDA fault)")
    ap.add_argument("--cap", type=int, default=1 << 20,
                    help="blocks larger than this many bytes are stored by hash only (record mode; default 1 MiB)")
    a = ap.parse_args()
    with open(os.path.join(a.dist, "build.json")) as f:
        build = json.load(f)

    if a.mode in ("record", "list"):
        sp = a.spec or os.path.join(a.dist, "specs", "new_cases.json")
        cases = specmod.load_spec(sp)
        if a.only:
            cases = [c for c in cases if any(o in c["name"] for o in a.only)]
        cases = [c for c in cases if c["name"] not in set(a.skip)]
        if a.mode == "record" and not a.skip and os.path.exists(os.path.join(a.out, "faults.json")):
            os.remove(os.path.join(a.out, "faults.json"))  # a previous recording's
        if a.mode == "list":
            for c in cases:
                print(c["name"], specmod.group_key(c)[0], ",".join(c["algorithms"]))
            return 0
    drv = load_driver(a.dist)
    info = drv.info()
    print(f"run: {info['gpu']} ({info['sms']} SMs, cc {info['cc']}), FlashInfer {build['flashinfer']}, numpy: {gen.have_numpy()}",
          flush=True)
    if a.mode == "primitives":
        print(json.dumps(record.primitive_checks(drv), indent=1))
        return 0

    if a.mode == "record":
        lost = []
        rows = record_cases(drv, info, build, cases, a.out, a.cap, lost=lost)
        faults = os.path.join(a.out, "faults.json")
        if lost:
            # The CUDA context is gone: note the case and go on with the rest in a fresh process
            # (a new context), leaving out every case this one handled.
            os.makedirs(a.out, exist_ok=True)
            prev = json.load(open(faults)) if os.path.exists(faults) else []
            with open(faults, "w") as f:
                json.dump(prev + [{"case": lost[0], "error": lost[1]}], f, indent=1)
            done = [r[0] for r in rows]
            rest = [c for c in cases if c["name"] not in done]
            if rest:
                print(f"run: continuing with {len(rest)} cases in a fresh process", flush=True)
                argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
                for n in done:
                    argv += ["--skip", n]
                sys.stdout.flush()
                os.execv(sys.executable, argv)
        had_faults = os.path.exists(faults)
        return 0 if rows and all(r[3] for r in rows) and not had_faults else 1
    ncases, _, failures = verify(drv, info, build, a.dist, a.out, a.only)
    return 1 if failures or ncases == 0 else 0


def _log(*args):
    print(*args, flush=True)


def record_cases(drv, info, build, cases, out, cap, log=_log, lost=None):
    """Records each case into out/<case>/; returns (name, results, rejected, identical) rows.
    When a case leaves the CUDA context unusable it stops there and, given a list `lost`, puts
    the case's name and the error into it (main() continues in a fresh process)."""
    t0 = time.time()
    syms = groups_for(cases, build)
    rows = []
    for c, sym in zip(cases, syms):
        if sym is None:
            log(f"  {c['name']:<48} skipped: its group did not compile ({build['failed_groups'][specmod.group_key(c)[0]]['error'][:120]})")
            continue
        times = {}
        try:
            rec, data, store = record.run_case(drv, c, sym, info["sms"], timings=times)
        except Exception as e:  # a CUDA error that broke the context, or a failed second run
            log(f"  {c['name']:<48} ERROR: {e}")
            rows.append((c["name"], 0, 0, False))
            try:
                drv.free(drv.alloc(16))
            except Exception:
                log(f"run: the CUDA context is unusable after {c['name']}")
                if lost is not None:
                    lost[:] = [c["name"], str(e)]
                break
            continue
        h = header(build, info, c.get("path", "stp"))
        if c.get("path", "stp") == "stp":
            h["primitive_checks"] = record.primitive_checks(drv)
        d = os.path.join(out, c["name"])
        record.write_manifest(d, h, [rec], data, [store], cap)
        with open(os.path.join(d, "timings.json"), "w") as f:
            json.dump({"method": "CUDA events around 20 back-to-back calls on the same buffers after 3 warm-up "
                                 "calls (warm L2; not the cold-cache method of tests/data/flashinfer_ssu/timings.json)",
                       "method_queued": "the same calls enqueued behind a spin kernel, so that they run back to "
                                        "back on the GPU without the host's per-call cost (firec_time_queued)",
                       "method_cold": "the queued calls with the state rotated over cold_copies copies of it "
                                      "(together at least twice the L2 size): each call reads its state from HBM, "
                                      "as a decode step's layers do (firec_time_queued_rotating)",
                       "environment": h["environment"], "us_per_call": times.get("us_per_call", {}),
                       "us_per_call_queued": times.get("us_per_call_queued", {}),
                       "us_per_call_cold": times.get("us_per_call_cold", {}),
                       "cold_copies": times.get("cold_copies")}, f, indent=1)
        errs = [r for r in rec["rejected_algorithms"] if r["status"] == "cuda_error"]
        ok = all(r["run_to_run_identical"] for r in rec["results"]) and not errs
        for r in errs:
            log(f"  {c['name']:<48} CUDA error with {r['algorithm']}: {r['message'][:200]}")
        rows.append((c["name"], len(rec["results"]), len(rec["rejected_algorithms"]), ok))
        log(f"  {c['name']:<48} results {len(rec['results'])}  rejected {len(rec['rejected_algorithms'])}  "
            f"run-to-run {'identical' if ok else 'DIFFERENT'}")
    log(f"run: recorded {len(rows)} of {len(cases)} cases into {out} in {time.time() - t0:.0f} s")
    return rows


def verify(drv, info, build, dist, out, only=None, log=_log):
    """Re-records every case of the reference manifests and compares each block's SHA-256.
    Returns (cases, blocks compared, mismatches)."""
    t0 = time.time()
    total_blocks, failures, ncases = 0, 0, 0
    for name in build["references"]:
        path = os.path.join(dist, "reference", name + ".json")
        ref_m, cases = specmod.load_reference(path)
        if only:
            cases = [c for c in cases if any(o in c["name"] for o in only)]
        syms = groups_for(cases, build)
        if "primitive_checks" in ref_m:
            got = record.primitive_checks(drv)
            same = got == ref_m["primitive_checks"]
            n_prim = len(got["philox_randint4x"]) + len(got["cvt_rs_f16_f32_sw"])
            log(f"\n{name}: primitive_checks (FlashInfer's Philox and SR conversion): {n_prim} values, "
                f"{'identical' if same else 'MISMATCH'}")
            if not same:
                failures += 1
                log(f"      got {json.dumps(got)}")
        log(f"\n{name}: {len(cases)} cases")
        log(f"  {'case':<40} {'blocks':>6} {'mismatch':>8}  status")
        for c, sym in zip(cases, syms):
            ref_case = next(x for x in ref_m["cases"] if x["name"] == c["name"])
            if sym is None:
                raise SystemExit(f"run: the group of reference case {c['name']} is not built")
            rec, data, _ = record.run_case(drv, c, sym, info["sms"], ref_case=ref_case)
            h = header(build, info, c.get("path", "stp"))
            record.write_manifest(os.path.join(out, "verify", name, c["name"]), h, [rec], data, [True], 1 << 62)
            n, bad = compare(rec, ref_case)
            total_blocks += n
            ncases += 1
            failures += len(bad)
            log(f"  {c['name']:<40} {n:>6} {len(bad):>8}  {'ok' if not bad else 'MISMATCH'}")
            for b in bad:
                log(f"      {b}")
    log(f"\nverify: {ncases} cases, {total_blocks} blocks compared, {failures} mismatches "
        f"({time.time() - t0:.0f} s); re-recorded data in {os.path.join(out, 'verify')}")
    return ncases, total_blocks, failures

if __name__ == "__main__":
    sys.exit(main())
