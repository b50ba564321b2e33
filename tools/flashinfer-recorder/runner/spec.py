"""Case specs: the one list both the build (which instantiations to compile) and the runner
(what to record) read.

A spec file is JSON: {"defaults": {...}, "cases": [...]}. Each case is an object of the fields
below; a case with "expand": {field: [values...]} stands for the product of those values, and
its name is formatted with the fields (`"name": "stp_d{dim}_ds{dstate}_pr{philox_rounds}"`).
`expand_spec` turns a spec into manifest-form cases (the case objects of manifest.json without
`results`): sizes, flags and input tensor descriptors with their generator or inline values.
A reference manifest's cases are already in that form (`verify` mode).
"""

import copy
import itertools
import json

from gen import KINDS, TAGS

DT_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int16": "i16", "int32": "i32", "int64": "i64"}
CXX_TYPE = {
    "float16": "half",
    "bfloat16": "nv_bfloat16",
    "float32": "float",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
}
ALGORITHMS = {"auto": 0, "simple": 1, "vertical": 2, "horizontal": 3}

DEFAULTS = {
    "path": "stp",
    "note": "",
    "state_dtype": "float16",
    "input_dtype": "bfloat16",
    "weight_dtype": "bfloat16",
    "A_dtype": "float32",
    "index_dtype": "int32",
    "cu_seqlens_dtype": "int32",
    "num_accepted_tokens_dtype": "int32",
    "state_scale_dtype": None,
    "state_scale_stride_batch": None,
    "dim": 64,
    "dstate": 128,
    "nheads": 8,
    "ngroups": 2,
    "batch": 1,
    "philox_rounds": 10,
    "seed": 0xDEADBEEF,
    "z": True,
    "dt_bias": True,
    "dt_softplus": True,
    "disable_state_update": False,
    "pad_slot_id": -1,
    "state_cache_size": None,
    "state_stride_batch": None,
    "state_batch_indices": None,
    "dst_state_batch_indices": None,
    "algorithms": None,
    "store": True,
    # multi-token
    "T": None,
    "seqlens": None,
    "cache_steps": None,
    "ntokens_mtp": None,
    "num_accepted_tokens": None,
    "intermediate": None,
}

SPEC_KEYS = set(DEFAULTS) | {"name", "gen_seed", "expand"}


class SpecError(ValueError):
    pass


def group_key(case):
    """The instantiation a manifest-form case needs: everything FlashInfer's JIT makes a
    compile-time constant or type. Returns (group id, key dict)."""
    path = case.get("path", "stp")
    ins = {t["name"]: t for t in case["inputs"]}
    key = {
        "path": path,
        "state_dtype": case["state_dtype"],
        "input_dtype": case["input_dtype"],
        "weight_dtype": case["weight_dtype"],
        "A_dtype": case.get("A_dtype", "float32"),
        "index_dtype": case.get("index_dtype", "int32"),
        "cu_seqlens_dtype": ins["cu_seqlens"]["dtype"] if "cu_seqlens" in ins else "int32",
        "num_accepted_tokens_dtype": ins["num_accepted_tokens"]["dtype"] if "num_accepted_tokens" in ins else "int32",
        "state_scale_dtype": ins["state_scale"]["dtype"] if "state_scale" in ins else None,
        "dim": case["dim"],
        "dstate": case["dstate"],
        "ntokens_mtp": case.get("ntokens_mtp", 1) if path == "mtp" else 1,
        "philox_rounds": case["philox_rounds"],
    }
    s = DT_SHORT
    gid = (
        f"{path}_s{s[key['state_dtype']]}_i{s[key['input_dtype']]}_w{s[key['weight_dtype']]}"
        f"_a{s[key['A_dtype']]}_si{s[key['index_dtype']]}_d{key['dim']}_ds{key['dstate']}"
    )
    if path == "mtp":
        gid += f"_nt{key['ntokens_mtp']}_cs{s[key['cu_seqlens_dtype']]}_na{s[key['num_accepted_tokens_dtype']]}"
    if key["state_scale_dtype"]:
        gid += f"_sc{s[key['state_scale_dtype']]}"
    gid += f"_pr{key['philox_rounds']}"
    return gid, key


def _gen_tensor(name, dtype, shape, strides, storage, gen_seed, tag=None):
    tag = TAGS[name] if tag is None else tag
    return {
        "name": name,
        "dtype": dtype,
        "shape": list(shape),
        "strides": list(strides),
        "storage_elems": storage,
        "generator": {"gen_seed": gen_seed, "tag": tag, "kind": KINDS[tag]},
    }


def _flat(v):
    if v and isinstance(v[0], list):
        return [e for row in v for e in row]
    return list(v)


def _idx_tensor(name, dtype, values):
    if values and isinstance(values[0], list):
        rows, cols = len(values), len(values[0])
        if any(len(r) != cols for r in values):
            raise SpecError(f"{name}: ragged 2-D index list")
        shape, strides = [rows, cols], [cols, 1]
    else:
        shape, strides = [len(values)], [1]
    flat = _flat(values)
    return {"name": name, "dtype": dtype, "shape": shape, "strides": strides, "storage_elems": len(flat), "values": flat}


def _contig(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return list(reversed(st)), acc


def _check_slots_disjoint(c):
    """Refuses a case in which one sequence writes a state slot that another one reads or writes.

    FlashInfer's blocks of different sequences run concurrently, and a block reads its slot
    before it writes: with such a slot shared, what a sequence reads depends on the schedule
    (a race), so two calls can leave different bytes and no recording is a reference. Engines
    give every sequence a slot of its own. A row of a 2-D index counts whole; pads are left out;
    a sequence without dst indices writes where it reads (none with disable_state_update)."""
    batch, pad = c["batch"], c["pad_slot_id"]

    def rows(v):
        return [set(r if isinstance(r, list) else [r]) - {pad} for r in v[:batch]]

    sbi, dsbi = c["state_batch_indices"], c["dst_state_batch_indices"]
    reads = rows(sbi) if sbi is not None else [{i} for i in range(batch)]
    if c["disable_state_update"]:
        writes = [set() for _ in reads]
    else:
        writes = rows(dsbi) if dsbi is not None else reads
    for i, w in enumerate(writes):
        for j, (r, w_j) in enumerate(zip(reads, writes)):
            shared = w & (r | w_j) if i != j else None
            if shared:
                raise SpecError(f"{c['name']}: sequence {i} writes slot {min(shared)}, which sequence {j} reads "
                                f"or writes: the result would depend on the blocks' schedule (a race)")


def build_case(c):
    """A manifest-form case (inputs described, no results) from one expanded spec case."""
    unknown = set(c) - SPEC_KEYS
    if unknown:
        raise SpecError(f"case {c.get('name')}: unknown fields {sorted(unknown)}")
    c = {**DEFAULTS, **c}
    for req in ("name", "gen_seed"):
        if c.get(req) is None:
            raise SpecError(f"case without {req}: {c}")
    path = c["path"]
    if path not in ("stp", "mtp"):
        raise SpecError(f"{c['name']}: path must be stp or mtp")
    nh, dim, ds, ng, batch = c["nheads"], c["dim"], c["dstate"], c["ngroups"], c["batch"]
    if nh % ng:
        raise SpecError(f"{c['name']}: nheads must be a multiple of ngroups")
    pr = c["philox_rounds"]
    sdt, idt, wdt = c["state_dtype"], c["input_dtype"], c["weight_dtype"]
    gs = c["gen_seed"]
    ix = c["index_dtype"]
    sbi, dsbi = c["state_batch_indices"], c["dst_state_batch_indices"]
    referenced = [v for v in _flat(sbi or []) + _flat(dsbi or []) if v != c["pad_slot_id"]]
    _check_slots_disjoint(c)
    cache = c["state_cache_size"] or max([batch] + [v + 1 for v in referenced])
    head = nh * dim * ds
    sstride = c["state_stride_batch"] or head
    case = {
        "name": c["name"],
        "note": c["note"],
    }
    if path == "mtp":
        case["path"] = "mtp"
    case.update(
        {
            "philox_rounds": pr,
            "state_dtype": sdt,
            "input_dtype": idt,
            "weight_dtype": wdt,
            "A_dtype": c["A_dtype"],
            "index_dtype": ix,
        }
    )
    scdt = c["state_scale_dtype"]
    if scdt is not None:
        # FlashInfer's block-scaled state (docs/flashinfer-ssu.md, "int16 block-scaled state").
        if scdt != "float32":
            raise SpecError(f"{c['name']}: state_scale_dtype must be float32 (FlashInfer's multi-token kernel "
                            f"writes the scales as float whatever their type)")
        if sdt != "int16":
            raise SpecError(f"{c['name']}: a state_scale needs state_dtype int16")
        if pr:
            raise SpecError(f"{c['name']}: a state_scale takes no stochastic rounding (philox_rounds 0; FlashInfer's "
                            f"Python layer raises ValueError for rand_seed with state_scale)")
        pads = [v for v in _flat(sbi or []) if v == c["pad_slot_id"]]
        if path == "stp" and pads and not 0 <= c["pad_slot_id"] < cache:
            raise SpecError(f"{c['name']}: a pad's slot must lie in the state with a state_scale: FlashInfer's "
                            f"single-token kernels read the pad slot's scales (out of bounds otherwise)")
    elif c["state_scale_stride_batch"] is not None:
        raise SpecError(f"{c['name']}: state_scale_stride_batch without state_scale_dtype")
    if sdt == "int16" and pr:
        raise SpecError(f"{c['name']}: stochastic rounding needs an fp16 state (FlashInfer's static_assert)")
    state_tag = TAGS["state_int16"] if sdt == "int16" else TAGS["state"]
    inputs = [
        _gen_tensor("state", sdt, [cache, nh, dim, ds], [sstride, dim * ds, ds, 1], (cache - 1) * sstride + head, gs,
                    tag=state_tag)
    ]
    present = {"z": bool(c["z"]), "dt_bias": bool(c["dt_bias"]), "D": True}
    if path == "stp":
        lead = [batch]
        tok = batch
    else:
        if c["seqlens"] is not None:
            seqlens = c["seqlens"]
            if len(seqlens) != batch:
                raise SpecError(f"{c['name']}: seqlens must have batch entries")
            tok = sum(seqlens)
            lead = [tok]
            cache_steps = c["cache_steps"] or max(seqlens)
            T = None
        else:
            T = c["T"]
            if T is None:
                raise SpecError(f"{c['name']}: a multi-token case needs T or seqlens")
            lead = [batch, T]
            tok = batch * T
            cache_steps = c["cache_steps"] if c["cache_steps"] is not None else (T if c["intermediate"] else 0)
        ntok = c["ntokens_mtp"] or (T if T is not None else cache_steps)
    xs, xn = _contig(lead + [nh, dim])
    inputs.append(_gen_tensor("x", idt, lead + [nh, dim], xs, xn, gs))
    dts, dtn = _contig(lead + [nh])
    inputs.append(_gen_tensor("dt", wdt, lead + [nh, dim], dts + [0], dtn, gs))
    if c["dt_bias"]:
        inputs.append(_gen_tensor("dt_bias", wdt, [nh, dim], [1, 0], nh, gs))
    inputs.append(_gen_tensor("A", c["A_dtype"], [nh, dim, ds], [1, 0, 0], nh, gs))
    bs, bn = _contig(lead + [ng, ds])
    inputs.append(_gen_tensor("B", idt, lead + [ng, ds], bs, bn, gs))
    inputs.append(_gen_tensor("C", idt, lead + [ng, ds], bs, bn, gs))
    inputs.append(_gen_tensor("D", wdt, [nh, dim], [1, 0], nh, gs))
    if c["z"]:
        inputs.append(_gen_tensor("z", idt, lead + [nh, dim], xs, xn, gs))
    if path == "mtp" and c["seqlens"] is not None:
        cu = [0]
        for s in c["seqlens"]:
            cu.append(cu[-1] + s)
        inputs.append(_idx_tensor("cu_seqlens", c["cu_seqlens_dtype"], cu))
    if sbi is not None:
        inputs.append(_idx_tensor("state_batch_indices", ix, sbi))
    if dsbi is not None:
        inputs.append(_idx_tensor("dst_state_batch_indices", ix, dsbi))
    if path == "mtp" and c["num_accepted_tokens"] is not None:
        inputs.append(_idx_tensor("num_accepted_tokens", c["num_accepted_tokens_dtype"], c["num_accepted_tokens"]))
    if path == "mtp" and c["intermediate"]:
        inter = c["intermediate"]
        icache = inter.get("cache_size") if inter.get("cache_size") is not None else batch
        ish, _ = _contig([icache, cache_steps, nh, dim, ds])
        n_el = icache * cache_steps * head
        inputs.append(
            {
                "name": "intermediate_states_buffer",
                "dtype": sdt,
                "shape": [icache, cache_steps, nh, dim, ds],
                "strides": ish,
                "storage_elems": n_el,
                "generator": {"gen_seed": gs, "tag": 10, "kind": KINDS[10]},
            }
        )
        inter_idx = inter.get("indices") if inter.get("indices") is not None else list(range(batch))
        inputs.append(_idx_tensor("intermediate_state_indices", ix, inter_idx))
        if scdt is not None:
            # FlashInfer's shape (batch, cache_steps, nheads, dim), contiguous; its kernel writes
            # step t of entry e at row e * cache_steps + t, so an entry >= batch would write past it.
            if any(e >= batch or e < 0 for e in inter_idx):
                raise SpecError(f"{c['name']}: intermediate indices must lie in [0, batch) with an int16 buffer "
                                f"(FlashInfer writes entry e's scales at row e of a (batch, ...) tensor)")
            iss, isn = _contig([batch, cache_steps, nh, dim])
            inputs.append(
                {
                    "name": "intermediate_state_scales",
                    "dtype": scdt,
                    "shape": [batch, cache_steps, nh, dim],
                    "strides": iss,
                    "storage_elems": isn,
                    "generator": {"gen_seed": gs, "tag": TAGS["intermediate_state_scales"],
                                  "kind": KINDS[TAGS["intermediate_state_scales"]]},
                }
            )
    if scdt is not None:
        scstride = c["state_scale_stride_batch"] or nh * dim
        if scstride < nh * dim:
            raise SpecError(f"{c['name']}: state_scale_stride_batch below nheads * dim")
        inputs.append(_gen_tensor("state_scale", scdt, [cache, nh, dim], [scstride, dim, 1],
                                  (cache - 1) * scstride + nh * dim, gs))
    seed = c["seed"] if pr > 0 else None
    if seed is not None:
        inputs.append(_idx_tensor("rand_seed", "int64", [seed]))
    present.update(
        {
            "state_batch_indices": (("2d" if sbi and isinstance(sbi[0], list) else "1d") if path == "mtp" else True)
            if sbi is not None
            else False,
            "dst_state_batch_indices": (("2d" if dsbi and isinstance(dsbi[0], list) else "1d") if path == "mtp" else True)
            if dsbi is not None
            else False,
        }
    )
    if path == "mtp":
        present.update(
            {
                "num_accepted_tokens": c["num_accepted_tokens"] is not None,
                "cu_seqlens": c["seqlens"] is not None,
                "intermediate_states_buffer": bool(c["intermediate"]),
                "intermediate_state_indices": bool(c["intermediate"]),
            }
        )
    present["rand_seed"] = seed is not None
    if scdt is not None:
        present["state_scale"] = True
        if path == "mtp":
            present["intermediate_state_scales"] = bool(c["intermediate"])
    if path == "mtp":
        case.update(
            {
                "ntokens_mtp": ntok,
                "varlen": c["seqlens"] is not None,
                "T": T,
                "cache_steps": cache_steps,
            }
        )
        if c["seqlens"] is not None:
            case["seqlens"] = c["seqlens"]
            case["cu_seqlens"] = next(t for t in inputs if t["name"] == "cu_seqlens")["values"]
        case["total_tokens"] = tok
    case.update(
        {
            "batch": batch,
            "nheads": nh,
            "dim": dim,
            "dstate": ds,
            "ngroups": ng,
            "state_cache_size": cache,
            "state_stride_batch": sstride,
        }
    )
    if path == "mtp" and c["intermediate"]:
        case["intermediate_cache_size"] = icache
    case.update(
        {
            "dt_softplus": bool(c["dt_softplus"]),
            "update_state": not c["disable_state_update"],
            "disable_state_update": bool(c["disable_state_update"]),
            "pad_slot_id": c["pad_slot_id"],
            "seed": seed,
        }
    )
    if seed is not None:
        case["seed_hex"] = hex(seed)
    case["present"] = present
    case["gen_seed"] = gs
    if path == "mtp":
        case["stored_set"] = bool(c["store"])
    case["store"] = bool(c["store"])
    case["batch_times_nheads"] = batch * nh
    case["inputs"] = inputs
    algs = c["algorithms"] or (["simple", "vertical", "auto"] if path == "stp" else ["auto", "simple"])
    for a in algs:
        if a not in ALGORITHMS:
            raise SpecError(f"{c['name']}: unknown algorithm {a}")
    case["algorithms"] = algs
    return case


def expand_cases(spec):
    defaults = spec.get("defaults", {})
    out = []
    for raw in spec["cases"]:
        raw = {**defaults, **raw}
        exp = raw.pop("expand", None)
        if not exp:
            out.append(raw)
            continue
        keys = list(exp)
        for combo in itertools.product(*(exp[k] for k in keys)):
            c = copy.deepcopy(raw)
            c.update(dict(zip(keys, combo)))
            c["name"] = c["name"].format(**{**DEFAULTS, **c})
            out.append(c)
    names = [c["name"] for c in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SpecError(f"duplicate case names: {sorted(dup)}")
    return out


def load_spec(path):
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    return [build_case(c) for c in expand_cases(spec)]


def load_reference(path):
    """Cases of an existing manifest (or of its `.xz` copy, the form tests/data keeps), with
    the algorithms its results requested."""
    from record import read_maybe_xz  # record imports gen only: no cycle

    m = json.loads(read_maybe_xz(path))
    cases = []
    for c in m["cases"]:
        c = copy.deepcopy(c)
        c["algorithms"] = [r["algorithm_requested"] for r in c["results"]]
        cases.append(c)
    return m, cases
