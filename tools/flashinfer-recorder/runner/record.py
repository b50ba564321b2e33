"""Records cases with FlashInfer's kernels and writes the conformance-data format
(format "flashinfer-ssu-golden", version 1: tests/data/flashinfer_ssu/README.md).

Per case and requested algorithm: upload the input storages, fill `out` with 0xFF bytes, call
the group's entry point, download the whole state storage, `out` and the intermediate buffer;
everything twice, from fresh uploads (`run_to_run_identical`). The write pattern is checked
against the rules the data documents (which slots each call may write).
"""

import hashlib

import gen

ALG_VALUE = {"auto": 0, "simple": 1, "vertical": 2, "horizontal": 3}


def read_maybe_xz(path):
    """The bytes of the file at `path`, or the decompressed bytes of `path + ".xz"` when `path`
    does not exist (tests/data keeps its manifests and bins xz-compressed)."""
    import lzma
    import os

    if not os.path.exists(path) and os.path.exists(path + ".xz"):
        with open(path + ".xz", "rb") as f:
            return lzma.decompress(f.read(), format=lzma.FORMAT_XZ)
    with open(path, "rb") as f:
        return f.read()


def compress_xz(path_dir, names=("manifest.json", "fixtures.bin")):
    """Replaces each named file of `path_dir` by its xz stream `<name>.xz` (preset 9, CRC64):
    the form tests/data keeps (the same as scripts/compress_fixtures.sh)."""
    import lzma
    import os

    for name in names:
        p = os.path.join(path_dir, name)
        with open(p, "rb") as f:
            raw = f.read()
        with open(p + ".xz", "wb") as f:
            f.write(lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9))
        os.remove(p)


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def elem_size(dtype):
    return gen.ELEM_SIZE[dtype]


# ------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------


def input_storage(t):
    """The whole storage of an input tensor as bytes (generator, or inline values)."""
    if t.get("generator"):
        g = t["generator"]
        return gen.block_bytes(g["gen_seed"], g["tag"], t["dtype"], 0, t["storage_elems"])
    if t.get("values") is not None:
        if len(t["values"]) != t["storage_elems"]:
            raise ValueError(f"{t['name']}: {len(t['values'])} inline values for {t['storage_elems']} elements")
        return gen.values_bytes(t["values"], t["dtype"])
    raise ValueError(f"input {t['name']} has neither a generator nor values")


def blocks_of(desc_blocks, storage_bytes, esize):
    """(block dict without bin placement, bytes) for each block range."""
    out = []
    for b in desc_blocks:
        lo, n = b["elem_offset"], b["elems"]
        data = storage_bytes[lo * esize : (lo + n) * esize]
        out.append(({"elem_offset": lo, "elems": n, "sha256": sha256(data), "nbytes": len(data)}, data))
    return out


def whole_block(t):
    return [{"elem_offset": 0, "elems": t["storage_elems"]}]


def _contig(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return list(reversed(st)), acc


# ------------------------------------------------------------------------------------------
# The call's parameters, as FlashInfer's host wrapper derives them from torch tensors
# ------------------------------------------------------------------------------------------


def make_args(Args, case, ins, out_desc, ptrs, algorithm):
    a = Args()
    mtp = case.get("path") == "mtp"
    x, st = ins["x"], ins["state"]
    varlen = mtp and "cu_seqlens" in ins
    a.nheads, a.dim, a.dstate = st["shape"][1], st["shape"][2], st["shape"][3]
    a.state_cache_size = st["shape"][0]
    if not mtp:
        a.batch = x["shape"][0]
        a.ngroups = ins["B"]["shape"][1]
    elif varlen:
        a.batch = len(ins["cu_seqlens"]["values"]) - 1
        a.ngroups = ins["B"]["shape"][1]
        a.ntokens_mtp = case["cache_steps"]
    else:
        a.batch = x["shape"][0]
        a.ntokens_mtp = x["shape"][1]
        a.ngroups = ins["B"]["shape"][2]
    a.cache_steps = case.get("cache_steps") or 0
    a.pad_slot_id = case["pad_slot_id"]
    a.dt_softplus = int(bool(case["dt_softplus"]))
    a.disable_state_update = int(bool(case.get("disable_state_update", not case.get("update_state", True))))
    a.algorithm = ALG_VALUE[algorithm]
    a.x_stride_batch = x["strides"][0]
    a.dt_stride_batch = ins["dt"]["strides"][0]
    a.B_stride_batch = ins["B"]["strides"][0]
    a.C_stride_batch = ins["C"]["strides"][0]
    a.out_stride_batch = out_desc["strides"][0]
    a.state_stride_batch = st["strides"][0]
    if "z" in ins:
        a.z_stride_batch = ins["z"]["strides"][0]
    if mtp and not varlen:
        a.x_stride_mtp = x["strides"][1]
        a.dt_stride_mtp = ins["dt"]["strides"][1]
        a.B_stride_mtp = ins["B"]["strides"][1]
        a.C_stride_mtp = ins["C"]["strides"][1]
        a.out_stride_mtp = out_desc["strides"][1]
        if "z" in ins:
            a.z_stride_mtp = ins["z"]["strides"][1]
    for name, sb, sT in (("state_batch_indices", "sbi_stride_batch", "sbi_stride_T"),
                         ("dst_state_batch_indices", "dsbi_stride_batch", "dsbi_stride_T")):
        if name in ins:
            t = ins[name]
            setattr(a, sb, t["strides"][0])
            setattr(a, sT, t["strides"][1] if len(t["shape"]) >= 2 else 0)
    if "intermediate_states_buffer" in ins:
        a.inter_stride_batch = ins["intermediate_states_buffer"]["strides"][0]
    if "state_scale" in ins:
        a.state_scale_stride_batch = ins["state_scale"]["strides"][0]
    if "intermediate_state_scales" in ins:
        a.inter_scales_stride_batch = ins["intermediate_state_scales"]["strides"][0]
    field = {
        "intermediate_states_buffer": "intermediate_states",
    }
    known = {f[0] for f in Args._fields_}
    for name, p in ptrs.items():
        attr = field.get(name, name)
        if attr not in known:  # a ctypes Structure would accept any attribute silently
            raise ValueError(f"input tensor {name} has no place in the driver's argument block")
        setattr(a, attr, p)
    return a


# ------------------------------------------------------------------------------------------
# The write pattern the documented rules predict
# ------------------------------------------------------------------------------------------


def _idx(ins, name):
    t = ins.get(name)
    if t is None:
        return None
    v = t["values"]
    if len(t["shape"]) == 2:
        rows, cols = t["shape"]
        s0, s1 = t["strides"]
        return [[v[r * s0 + c * s1] for c in range(cols)] for r in range(rows)]
    return [v[i * t["strides"][0]] for i in range(t["shape"][0])]


def expected_stp(case, ins, batch):
    sbi, dsbi = _idx(ins, "state_batch_indices"), _idx(ins, "dst_state_batch_indices")
    pad = case["pad_slot_id"]
    written = set()
    for b in range(batch):
        read = sbi[b] if sbi is not None else b
        if read == pad:
            continue
        dst = dsbi[b] if dsbi is not None else read
        if dst == pad:
            continue
        if not case.get("disable_state_update"):
            written.add(dst)
    return sorted(written)


def expected_mtp(case, ins, batch):
    sbi, dsbi = _idx(ins, "state_batch_indices"), _idx(ins, "dst_state_batch_indices")
    nat = _idx(ins, "num_accepted_tokens")
    pad = case["pad_slot_id"]
    cu = ins["cu_seqlens"]["values"] if "cu_seqlens" in ins else None
    inter = "intermediate_states_buffer" in ins
    inter_idx = _idx(ins, "intermediate_state_indices")
    cache_steps = case.get("cache_steps") or 0
    update = not case.get("disable_state_update")
    reads, state_w, inter_w = [], set(), set()
    for b in range(batch):
        if sbi is None:
            r = b
        elif isinstance(sbi[b], list):
            r = sbi[b][max(nat[b] - 1, 0)] if nat is not None else sbi[b][0]
        else:
            r = sbi[b]
        reads.append(r)
        if r == pad:
            continue
        L = (cu[b + 1] - cu[b]) if cu is not None else case["T"]
        if L == 0:
            continue
        if inter:
            base = (inter_idx[b] if inter_idx is not None else b) * cache_steps
            inter_w.update(base + t for t in range(L))
        elif dsbi is not None and isinstance(dsbi[b], list):
            if update:
                state_w.update(d for d in dsbi[b][:L] if d != pad)
        elif update:
            d = dsbi[b] if dsbi is not None else r
            if d != pad:
                state_w.add(d)
    return {"read_slots": reads, "state_slots_written": sorted(state_w), "intermediate_slots_written": sorted(inter_w)}


def write_mode(ins):
    if "intermediate_states_buffer" in ins:
        return "intermediate"
    d = ins.get("dst_state_batch_indices")
    if d is not None and len(d["shape"]) == 2:
        return "dst_per_step"
    return "final_only"


def slot_ranges(slots, stride, head, esize):
    return [((s * stride) * esize, (s * stride + head) * esize) for s in slots]


def unchanged_outside(before, after, ranges):
    pos = 0
    for lo, hi in sorted(ranges):
        if before[pos:lo] != after[pos:lo]:
            return False
        pos = max(pos, hi)
    return before[pos:] == after[pos:]


def changed_slots(before, after, nslots, stride, head, esize):
    out = []
    for s in range(nslots):
        lo, hi = s * stride * esize, (s * stride + head) * esize
        if before[lo:hi] != after[lo:hi]:
            out.append(s)
    return out


def view_offsets(shape, strides):
    offs = [0]
    for n, s in zip(shape, strides):
        offs = [o + i * s for o in offs for i in range(n)]
    return offs


def fully_written(data, desc):
    es = elem_size(desc["dtype"])
    poison = b"\xff" * es
    n = 1
    for d in desc["shape"]:
        n *= d
    if n == desc["storage_elems"]:
        mv = memoryview(data).cast({2: "H", 4: "I"}[es])
        return ({2: 0xFFFF, 4: 0xFFFFFFFF}[es]) not in mv
    return all(data[o * es : (o + 1) * es] != poison for o in view_offsets(desc["shape"], desc["strides"]))


# ------------------------------------------------------------------------------------------
# One case
# ------------------------------------------------------------------------------------------


def _variant(alg, bh, sms, dim):
    if alg == "simple":
        if bh < 2 * sms:
            return "tiled: grid (batch,nheads,DIM/4), 4 rows/block"
        return f"non-tiled: grid (batch,nheads), {dim} rows/block"
    if alg == "vertical":
        return "TMA producer/consumer: grid (batch,nheads), 3 stages x 16 rows"
    if alg == "horizontal":
        return "TMA producer/consumer over dstate columns: grid (batch,nheads)"
    return ""


def cold_copies(state_bytes, l2_bytes):
    """Copies of a state for the cold timing (firec_time_queued_rotating): at least 2, and
    together at least twice the L2 size, so that no call finds its copy in L2."""
    return max(2, -(-2 * l2_bytes // max(1, state_bytes)))


def run_case(drv, case, entry_symbol, sms, ref_case=None, progress=None, timings=None):
    """Records one manifest-form case. Returns (case dict with results, {sha: bytes}, whether
    the case's blocks are stored). When ref_case is given its block ranges and output
    descriptors are reused. When `timings` is a dict, each algorithm's mean time per call is put
    in it: under "us_per_call" CUDA events around 20 back-to-back calls on the same buffers, after
    3 warm-up calls; under "us_per_call_queued" the same calls enqueued behind a spin kernel
    (the GPU's time without the host's per-call cost); under "us_per_call_cold" the queued calls
    with the state rotated over copies of it (cold_copies: at least twice the L2 size in all), so
    that each call reads its state from HBM as a decode step's layers do."""
    mtp = case.get("path") == "mtp"
    ins = {t["name"]: t for t in case["inputs"]}
    ref_ins = {t["name"]: t for t in ref_case["inputs"]} if ref_case else {}
    st = ins["state"]
    head = st["shape"][1] * st["shape"][2] * st["shape"][3]
    sstride = st["strides"][0]
    ses = elem_size(st["dtype"])
    data = {}
    storage = {name: input_storage(t) for name, t in ins.items()}

    # Output descriptors.
    x = ins["x"]
    if ref_case:
        out_desc = next(t for t in ref_case["results"][0]["outputs"] if t["name"] == "out")
        out_desc = {k: out_desc[k] for k in ("name", "dtype", "shape", "strides", "storage_elems")}
        out_blocks = next(t for t in ref_case["results"][0]["outputs"] if t["name"] == "out")["blocks"]
    else:
        strides, n = _contig(x["shape"])
        out_desc = {"name": "out", "dtype": x["dtype"], "shape": list(x["shape"]), "strides": strides, "storage_elems": n}
        out_blocks = whole_block(out_desc)
    out_bytes = out_desc["storage_elems"] * elem_size(out_desc["dtype"])

    batch = len(ins["cu_seqlens"]["values"]) - 1 if (mtp and "cu_seqlens" in ins) else x["shape"][0]
    entry = drv.entry(entry_symbol)

    # Inputs with their blocks.
    in_descs = []
    for t in case["inputs"]:
        d = {k: v for k, v in t.items() if k != "blocks"}
        rng = ref_ins[t["name"]]["blocks"] if t["name"] in ref_ins else whole_block(t)
        bl = []
        for meta, b in blocks_of(rng, storage[t["name"]], elem_size(t["dtype"])):
            data[meta["sha256"]] = b
            bl.append(meta)
        d["blocks"] = bl
        if "values" in d:  # keep the key order of the recorded data: values after blocks
            d["values"] = d.pop("values")
        in_descs.append(d)

    def one_run(alg, time_it=False):
        ptrs, owned = {}, []
        try:
            for name, t in ins.items():
                p = drv.alloc(len(storage[name]))
                owned.append(p)
                drv.upload(p, storage[name])
                ptrs[name] = p
            po = drv.alloc(out_bytes)
            owned.append(po)
            drv.fill(po, 0xFF, out_bytes)
            ptrs["out"] = po
            args = make_args(drv_args, case, ins, out_desc, ptrs, alg)
            status, msg = drv.call(entry, args)
            if status != 0:
                return status, msg, None
            if time_it:
                eager, queued = drv.time(entry, args, 3, 20), drv.time_queued(entry, args, 3, 20)
                # The cold timing: n copies of the input state in a buffer of their own, call k
                # on copy k mod n.
                sbytes = len(storage["state"])
                n = cold_copies(sbytes, drv.l2_bytes())
                pc = drv.alloc(n * sbytes)
                owned.append(pc)
                for i in range(n):
                    drv.upload(pc + i * sbytes, storage["state"])
                args.state = pc
                cold = drv.time_queued(entry, args, 3, 20, copies=n, state_stride=sbytes)
                return 0, "", (eager, queued, cold, n)
            res = {"state": drv.download(ptrs["state"], len(storage["state"])), "out": drv.download(po, out_bytes)}
            if "intermediate_states_buffer" in ins:
                res["intermediate_states_buffer"] = drv.download(
                    ptrs["intermediate_states_buffer"], len(storage["intermediate_states_buffer"]))
            for name in ("state_scale", "intermediate_state_scales"):
                if name in ins:
                    res[name] = drv.download(ptrs[name], len(storage[name]))
            return 0, "", res
        finally:
            for p in owned:
                drv.free(p)

    from device import FirecArgs as drv_args  # noqa: E402  (the runner's ctypes layout)

    if mtp:
        expected = expected_mtp(case, ins, batch)
        written = expected["state_slots_written"]
    else:
        expected = None
        written = expected_stp(case, ins, batch)

    results, rejected, outs_by_alg = [], [], {}
    for alg in case["algorithms"]:
        if progress:
            progress(f"{case['name']} {alg}")
        s1, msg, r1 = one_run(alg)
        if s1 != 0:
            # 1: FlashInfer's launcher rejected the call (an argument check raised); 2: a CUDA
            # error (the next device call shows whether the context survived it).
            rejected.append({"algorithm": alg, "status": "rejected" if s1 == 1 else "cuda_error", "message": msg})
            continue
        s2, msg2, r2 = one_run(alg)
        if s2 != 0:
            raise RuntimeError(f"{case['name']} {alg}: the second run failed: {msg2}")
        if timings is not None:
            eager, queued, cold, copies = one_run(alg, time_it=True)[2]
            timings.setdefault("us_per_call", {})[alg] = round(eager, 3)
            timings.setdefault("us_per_call_queued", {})[alg] = round(queued, 3)
            timings.setdefault("us_per_call_cold", {})[alg] = round(cold, 3)
            timings["cold_copies"] = copies
        outs_by_alg[alg] = r1
        ranges = slot_ranges(written, sstride, head, ses)
        outside_ok = unchanged_outside(storage["state"], r1["state"], ranges)
        r = {"algorithm_requested": alg}
        if mtp:
            r["algorithm_used"] = "simple" if alg == "auto" else alg
        else:
            used = alg if alg != "auto" else ("simple" if batch * case["nheads"] < 2 * sms else "vertical")
            r["algorithm_used_by_rule"] = used
            r["kernel_variant"] = _variant(used, batch * case["nheads"], sms, case["dim"])
        r["status"] = "ok"
        r["run_to_run_identical"] = r1 == r2
        r["out_fully_written"] = fully_written(r1["out"], out_desc)
        if mtp:
            r["state_outside_expected_writes_unchanged"] = outside_ok
            r["state_slots_changed"] = changed_slots(storage["state"], r1["state"], st["shape"][0], sstride, head, ses)
            if "intermediate_states_buffer" in ins:
                ib = ins["intermediate_states_buffer"]
                nsl = ib["shape"][0] * ib["shape"][1]
                ff = b"\xff" * (head * ses)
                got = [s for s in range(nsl) if r1["intermediate_states_buffer"][s * head * ses : (s + 1) * head * ses] != ff]
                r["intermediate_written_exactly_expected"] = got == expected["intermediate_slots_written"]
                r["intermediate_slots_written"] = got
        else:
            r["state_outside_written_slots_unchanged"] = outside_ok
        if "state_scale" in ins:
            # The decode scales: written exactly where the state is (a row's scale at its
            # destination slot), untouched elsewhere.
            sc = ins["state_scale"]
            sc_head, sc_stride, sc_es = sc["shape"][1] * sc["shape"][2], sc["strides"][0], elem_size(sc["dtype"])
            r["state_scale_outside_written_slots_unchanged"] = unchanged_outside(
                storage["state_scale"], r1["state_scale"], slot_ranges(written, sc_stride, sc_head, sc_es))
            r["state_scale_slots_changed"] = changed_slots(storage["state_scale"], r1["state_scale"], sc["shape"][0],
                                                           sc_stride, sc_head, sc_es)
        if "intermediate_state_scales" in ins:
            isc = ins["intermediate_state_scales"]
            row = isc["shape"][2] * isc["shape"][3]
            ies = elem_size(isc["dtype"])
            nrows = isc["shape"][0] * isc["shape"][1]
            ff = b"\xff" * (row * ies)
            got = [s for s in range(nrows) if r1["intermediate_state_scales"][s * row * ies : (s + 1) * row * ies] != ff]
            r["intermediate_scales_slots_written"] = got
            r["intermediate_scales_written_exactly_expected"] = got == expected["intermediate_slots_written"]
        r["bit_identical_to"] = []
        outputs = []
        ref_outs = {}
        if ref_case:
            ref_r = next((x for x in ref_case["results"] if x["algorithm_requested"] == alg), ref_case["results"][0])
            ref_outs = {t["name"]: t for t in ref_r["outputs"]}
        for name in ("state", "out", "intermediate_states_buffer", "state_scale", "intermediate_state_scales"):
            if name not in r1:
                continue
            base = out_desc if name == "out" else ins[name]
            d = {k: base[k] for k in ("name", "dtype", "shape", "strides", "storage_elems")}
            rng = ref_outs[name]["blocks"] if name in ref_outs else (out_blocks if name == "out" else whole_block(d))
            bl = []
            for meta, b in blocks_of(rng, r1[name], elem_size(d["dtype"])):
                data[meta["sha256"]] = b
                bl.append(meta)
            d["blocks"] = bl
            outputs.append(d)
        r["outputs"] = outputs
        results.append(r)
    for r in results:
        mine = outs_by_alg[r["algorithm_requested"]]
        r["bit_identical_to"] = [
            o["algorithm_requested"] for o in results
            if o is not r and all(outs_by_alg[o["algorithm_requested"]].get(k) == v for k, v in mine.items())
        ]
    rec = {k: v for k, v in case.items() if k not in ("inputs", "results", "algorithms", "store", "expected",
                                                        "rejected_algorithms", "prefix_runs", "binary",
                                                        "num_sms", "ctas_per_head_by_rule", "batch_times_nheads")}
    rec["batch_times_nheads"] = batch * case["nheads"]
    rec["num_sms"] = sms
    if mtp:
        rows_per_pass = 16
        ctas = max(1, min(sms * 10 // max(batch * case["nheads"], 1), case["dim"] // rows_per_pass))
        rec["ctas_per_head_by_rule"] = next(c for c in (4, 2, 1) if c <= ctas and case["dim"] // c >= rows_per_pass)
        rec["expected"] = expected
        rec["state_write_mode"] = write_mode(ins)
    rec["inputs"] = in_descs
    rec["results"] = results
    rec["rejected_algorithms"] = rejected
    if mtp:
        rec["prefix_runs"] = []
        rec["binary"] = f"T{case.get('ntokens_mtp')}_pr{case['philox_rounds']}"
    store = case.get("store", case.get("stored_set", True))
    return rec, data, store


# ------------------------------------------------------------------------------------------
# The manifest and its bin
# ------------------------------------------------------------------------------------------


def write_manifest(path_dir, header, cases, data, store_flags, cap_bytes, ref_bins=None, always=()):
    """Writes manifest.json and fixtures.bin. A block is stored when its case is stored, it is
    at most cap_bytes long (whatever its length for a tensor named in `always`, e.g. the int16
    state's `state_scale`) and `data` has its bytes (keyed by SHA-256; merge.py passes only the
    bytes its recordings stored); identical blocks are stored once (64-byte-aligned offsets)."""
    import json
    import os

    os.makedirs(path_dir, exist_ok=True)
    placed = {}
    chunks, size = [], 0
    for case, store in zip(cases, store_flags):
        tensors = list(case["inputs"]) + [t for r in case["results"] for t in r["outputs"]]
        for t in tensors:
            for b in t["blocks"]:
                keep = store and (b["nbytes"] <= cap_bytes or t["name"] in always) and b["sha256"] in data
                if keep and b["sha256"] not in placed:
                    pad = (-size) % 64
                    if pad:
                        chunks.append(b"\0" * pad)
                        size += pad
                    placed[b["sha256"]] = size
                    chunks.append(data[b["sha256"]])
                    size += b["nbytes"]
                b["bin"] = "fixtures.bin" if keep else None
                b["byte_offset"] = placed[b["sha256"]] if keep else None
    blob = b"".join(chunks)
    with open(os.path.join(path_dir, "fixtures.bin"), "wb") as f:
        f.write(blob)
    m = dict(header)
    m["bins"] = [{"file": "fixtures.bin", "bytes": len(blob), "sha256": sha256(blob)}]
    m["cases"] = cases
    with open(os.path.join(path_dir, "manifest.json"), "w") as f:
        json.dump(m, f, indent=1)
    return m


def primitive_checks(drv):
    cases = [
        ("R10 seed=42 off=0", 10, 42, 0),
        ("R10 seed=42 off=1", 10, 42, 1),
        ("R5 seed=42 off=0", 5, 42, 0),
        ("R10 seed=123456789 off=2^32+5", 10, 123456789, 2**32 + 5),
        ("R10 seed=0 off=0", 10, 0, 0),
        ("R5 seed=0xDEADBEEF off=12345", 5, 0xDEADBEEF, 12345),
        ("R10 seed=0x5DEADBEEF off=12345", 10, 0x5DEADBEEF, 12345),
    ]
    ph = [{"case": n, "r": drv.philox4x(r, s, o)} for n, r, s, o in cases]
    cv = []
    for xb, rnd in [(0x3F801000, 4095), (0x3F801000, 4096), (0x37FBA882, 0), (0x477FEF00, 0), (0x477FFF00, 8191),
                    (0x7F800000, 1), (0xBDCCCCCD, 100), (0, 8191), (0x80000000, 8191), (0x7FC00000, 5),
                    (0x38800000, 0), (0x477FE000, 8191)]:
        cv.append({"x_bits": f"{xb:08x}", "rand13": rnd, "f16_bits": drv.cvt_rs_f16(xb, rnd)})
    return {"philox_randint4x": ph, "cvt_rs_f16_f32_sw": cv}
