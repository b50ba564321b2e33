//! GPU conformance of the multi-token SSU (speculative-decoding verify) against FlashInfer
//! 0.7.2's own multi-token kernel: the recorded data of `tests/data/flashinfer_ssu_mtp/`
//! (embedded in the test binary), or the manifest named by `MAMBA_SSU_FLASHINFER_MTP_MANIFEST`
//! (a `manifest.json` whose bins are read from its directory).
//!
//! For every case and every recorded run: every input storage is rebuilt (stored blocks from
//! the bin, hash-only ones regenerated, every block checked by SHA-256) and uploaded whole with
//! the recorded strides (a storage above 8 GiB is mapped sparsely, only under its blocks);
//! `out` and the intermediate buffer are poisoned with 0xFF bytes as the recording rig did; the
//! crate's kernel runs through the safe API with the case's arguments, all taken from the
//! manifest's tensor descriptors and fields (fixed length or varlen, 1-D or 2-D read indices,
//! `num_accepted_tokens`, a 2-D destination index, the intermediate buffer with or without its
//! indices, `cache_steps`, `pad_slot_id`, `disable_state_update`, 0/5/10 Philox rounds with the
//! seed read from a device int64); then the whole state storage, the intermediate buffer and
//! `out` are compared with the recorded outputs block by block (bytes for stored blocks,
//! SHA-256 for hash-only ones), and every element outside the recorded blocks must keep its
//! initial bytes. Everything must be bit-identical; a table line per run gives, per tensor, the
//! differing elements and the largest ulp distance, and the first difference.
//!
//! The SR conversion is the recording release's (`common::recorded_sr_rule`: a case's `sr_rule`,
//! else the manifest's `environment.flashinfer`; 0.7.4 and later use 0.7.4's), so a manifest
//! recorded with FlashInfer 0.7.4 is checked by this binary unchanged.
//!
//! Every case runs at least twice (each recorded run once, a case with one recorded run twice)
//! and the runs must agree byte for byte (determinism). A case's `prefix_runs`, where the
//! manifest has any, run and compare the same way (see [`prefix_run_cases`]).
//!
//! The CPU tests here (no GPU) check the embedded data the GPU test reads: the bin's hash, every
//! input block (stored or regenerated) by SHA-256, and that every case has the fields and
//! tensors the GPU test maps onto the API.

mod common;
#[path = "common/mtp_dev.rs"]
mod mtp_dev;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{compare_elems, sha256_hex, Case, HostStorage, Manifest, SparseStorage};
use cudarc::driver::{CudaContext, CudaStream};
use serde_json::Value;

/// The embedded manifest of the multi-token reference data.
const EMBEDDED_MTP_MANIFEST: &[u8] = include_bytes!("data/flashinfer_ssu_mtp/manifest.json.xz");
/// The embedded bin of the multi-token reference data.
const EMBEDDED_MTP_FIXTURES: &[u8] = include_bytes!("data/flashinfer_ssu_mtp/fixtures.bin.xz");
/// The environment variable naming another multi-token manifest.
const MANIFEST_ENV: &str = "MAMBA_SSU_FLASHINFER_MTP_MANIFEST";

/// The embedded manifest, its one bin under the name the manifest gives it.
fn embedded() -> Manifest {
    let text = common::unxz_text(EMBEDDED_MTP_MANIFEST);
    let json: Value = serde_json::from_str(&text).expect("manifest is JSON");
    let bins = json["bins"].as_array().expect("`bins` is a list");
    assert_eq!(bins.len(), 1, "the embedded manifest has one bin");
    let file = bins[0]["file"].as_str().expect("bin file name");
    Manifest::from_text(&text, &[(file, &common::unxz(EMBEDDED_MTP_FIXTURES))])
}

/// `MAMBA_SSU_FLASHINFER_MTP_MANIFEST` when set, else the embedded data.
fn manifest() -> Manifest {
    Manifest::from_env_or(MANIFEST_ENV, embedded)
}

/// The manifest of the set embedded from `tests/data/<dir>/` (its manifest and its one bin,
/// `fixtures.bin`, both xz-compressed).
macro_rules! embedded_set {
    ($dir:literal) => {
        Manifest::from_xz(
            include_bytes!(concat!("data/", $dir, "/manifest.json.xz")),
            &[(
                "fixtures.bin",
                include_bytes!(concat!("data/", $dir, "/fixtures.bin.xz")),
            )],
        )
    };
}

/// FlashInfer 0.7.2.post1's multi-token kernel at head dim 128 (dstate 128, fp16 state, 0/5/10
/// rounds, T 4 and 8; `tools/flashinfer-recorder/cases/shape_cases.json`), recorded on an H200
/// and merged by `tools/flashinfer-recorder/merge.py` (large blocks by hash only).
fn embedded_shapes() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_shapes")
}

/// The shape cases at head dims 80 and 128 recorded from FlashInfer 0.7.4's multi-token kernel
/// (0.7.2.post1's does not compile at head dim 80; 0.7.4's stochastic-rounding rule, read from
/// the manifest by `common::recorded_sr_rule`).
fn embedded_shapes_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_shapes_074")
}

/// FlashInfer 0.7.2.post1's multi-token kernel on `tools/flashinfer-recorder/cases/
/// new_cases.json`'s cases the crate serves: head dim 128 with dstate 64 and 256 (fp16 state
/// with the intermediate buffer at 0/5/10 rounds; fp32 and bf16 state, varlen), 1/3/7/12 rounds
/// with a 2-D dst index, padded `num_accepted_tokens` and `cu_seqlens` of int32 and int64 with
/// int32 slot indices (`merge.py --exclude _ds96_ --exclude ds256_float32`; the head-dim-80
/// cases do not compile with 0.7.2.post1). Left out: `mtp_d128_ds256_float32_pr0_varlen`, whose
/// `out` differed from FlashInfer's in one element by 1 ulp on the H200 (2026-12-02; the state
/// was bit-identical): the run-time kernel then summed an fp32 state's row in the 2-byte
/// state's lane order; it now takes FlashInfer's 4-column blocks (`docs/flashinfer-ssu.md`),
/// held to the re-recording of that case in [`embedded_fp32`].
fn embedded_new_cases() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_new_cases")
}

/// FlashInfer 0.7.4's multi-token kernel at dstate 64 and 256 with head dims 80 and 128 (fp16
/// state, 0 and 10 rounds, T 8, 32 heads x batch 4; `tools/flashinfer-recorder/cases/
/// shape_ds_cases.json`).
fn embedded_ds_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_ds_074")
}

/// FlashInfer 0.7.2.post1's multi-token kernel with an fp32 state (its 4-column lane blocks),
/// head dims 64 and 128 at dstate 64, 128 and 256, varlen with final-state writes
/// (`tools/flashinfer-recorder/cases/fp32_layout_cases.json`, the inputs of `new_cases.json`'s
/// fp32 cases). Before the fp32 lane map, three of the six differed in one `out` element by
/// 1 ulp on the H200 (2026-12-03).
fn embedded_fp32() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_fp32")
}

/// FlashInfer 0.7.2.post1's multi-token kernel with an int16 block-scaled state
/// (`tools/flashinfer-recorder/cases/int16_cases.json`, recorded on an H200 on 2026-12-03):
/// head dims 64 and 128 at dstate 64, 128 and 256, T 4 and 8, final-state writes, per-step dst
/// slots, the int16 intermediate buffer with `intermediate_state_scales` (an entry equal to
/// `pad_slot_id` 0 among them, which FlashInfer writes), vLLM's varlen form; `state_scale` and
/// `intermediate_state_scales` stored whatever their size (`merge.py --store-always`), the other
/// blocks up to 64 KiB (the rest by hash).
fn embedded_int16() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_int16")
}

/// FlashInfer 0.7.2.post1's multi-token kernel at dstate 96 (`tools/flashinfer-recorder/cases/
/// ds96_cases.json`, `--only ds96_`, recorded on an H200 on 2026-12-03): head dims 64 and 128,
/// fp16 state at 0, 5 and 10 rounds with the intermediate buffer (T 8), bf16 and fp32 states in
/// vLLM's varlen form with final-state writes; blocks over 64 KiB by hash.
fn embedded_ds96() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_ds96")
}

/// The cases of [`embedded_ds96`] recorded from FlashInfer 0.7.4's multi-token kernel (its
/// stochastic-rounding rule; recorded on an H200 on 2026-12-03).
fn embedded_ds96_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_ds96_074")
}

/// FlashInfer 0.7.2.post1's multi-token kernel at dstates 160, 192 and 224
/// (`tools/flashinfer-recorder/cases/dsx_cases.json`, recorded on an H200 on 2026-12-04): head
/// dim 64, fp16 state at 0 and 10 rounds with the intermediate buffer (T 8), bf16 and fp32
/// states in vLLM's varlen form with final-state writes; blocks over 64 KiB by hash.
fn embedded_dsx() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsx")
}

/// The cases of [`embedded_dsx`] recorded from FlashInfer 0.7.4's multi-token kernel (recorded
/// on an H200 on 2026-12-04).
fn embedded_dsx_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsx_074")
}

/// FlashInfer 0.7.2.post1's multi-token kernel with an fp32 state at 32, 48, 80, 144, 176, 208
/// and 240 (`tools/flashinfer-recorder/cases/dsf32_cases.json`, recorded on an H200 on
/// 2026-12-04): head dim 64, vLLM's varlen form with final-state writes and T 8 with the
/// intermediate buffer; blocks over 64 KiB by hash.
fn embedded_dsf32() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsf32")
}

/// The cases of [`embedded_dsf32`] recorded from FlashInfer 0.7.4's multi-token kernel
/// (recorded on an H200 on 2026-12-04).
fn embedded_dsf32_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsf32_074")
}

/// FlashInfer 0.7.2.post1's multi-token kernel with an int16 block-scaled state at dstates 96,
/// 160, 192 and 224 (`tools/flashinfer-recorder/cases/int16_uneven_cases.json`, recorded on an
/// H200 on 2026-12-04): head dim 64, T 4, final-state writes with a pad sequence, and the int16
/// intermediate buffer with its scales; the scales stored, other blocks over 64 KiB by hash.
fn embedded_int16_uneven() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_int16_uneven")
}

/// The cases of [`embedded_int16_uneven`] recorded from FlashInfer 0.7.4's multi-token kernel
/// (recorded on an H200 on 2026-12-04).
fn embedded_int16_uneven_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_int16_uneven_074")
}

/// The cases of [`embedded_int16`] recorded from FlashInfer 0.7.4's multi-token kernel
/// (recorded on an H200 on 2026-12-03); every output by hash, the inputs stored up to 64 KiB
/// (`state_scale` and `intermediate_state_scales` whatever their size).
fn embedded_int16_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_int16_074")
}

/// FlashInfer 0.7.4's multi-token kernel on the dtype forms beside bf16 inputs
/// (`tools/flashinfer-recorder/cases/dtype_forms_cases.json`: every input and weight dtype over
/// bf16, fp32 and int16 states; `f16in_states_cases.json`, `f16in_cases.json`: fp16 inputs over
/// fp16, bf16, fp32 and int16 states at head dims 64 and 128 and dstates 64, 128 and 256) and on
/// `mtp_d80_grid_cases.json` (head dim 80, 128 heads x batch 8 and 32, 0/5/10 rounds, dense and
/// varlen: the launch plans of head dim 80 at the sizes engines run). Recorded on an H100 on
/// 2026-12-06; blocks over 8 KiB by hash, the int16 scales stored whatever their size.
fn embedded_dtype_forms_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dtype_forms_074")
}

/// FlashInfer 0.7.4's multi-token kernel at head dim 80 with SR at dstates 64 and 256 on the
/// two-row SR plan's grid (one block of 80 rows per (sequence, head): `Tuning::kMtpSrPasses`):
/// `tools/flashinfer-recorder/cases/mtp_d80_ds_grid_cases.json`, 128 heads x batch 8 (a pad) and
/// 32, T 8, 5 and 10 rounds, final-state writes (dstate 128 is in `embedded_dtype_forms_074`).
/// Recorded on an H100 on 2026-12-06; every block by hash.
fn embedded_d80_ds_grid_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_d80_ds_grid_074")
}

/// FlashInfer 0.7.2.post1's multi-token kernel above dstate 256
/// (`tools/flashinfer-recorder/cases/dsbig_cases.json`, `dsbig_mtp_*`): dstates 288 and 512
/// (its tile of 512 columns with the blocks past dstate skipped), head dim 64, T 4, an fp16 state
/// at 0 and 5 rounds with the intermediate buffer. Recorded on an H100 on 2026-12-06.
fn embedded_dsbig() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsbig")
}

/// The cases of [`embedded_dsbig`] recorded from FlashInfer 0.7.4's multi-token kernel (recorded
/// on an H100 on 2026-12-06).
fn embedded_dsbig_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsbig_074")
}

/// FlashInfer 0.7.2.post1's multi-token kernel at more dstates above 256
/// (`tools/flashinfer-recorder/cases/dsbig_mtp_cases.json`): an fp16 state at 320 and 480 with
/// T 16 (B and C of 16 tokens over the 512-column tile, 64 KiB of shared memory: the long-row
/// kernel's opt-in) at 0 and 10 rounds with the intermediate buffer; head dim 128 at 416 with
/// fp32 and bf16 states, varlen; an fp32 state at 400; fp16 inputs and weights (the uniform pair
/// update) at 352 with 0 and 5 rounds. Recorded on an H100 on 2026-12-06.
fn embedded_dsbig_cases() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsbig_cases")
}

/// The cases of [`embedded_dsbig_cases`] recorded from FlashInfer 0.7.4's multi-token kernel.
fn embedded_dsbig_cases_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsbig_cases_074")
}

/// FlashInfer 0.7.2.post1's multi-token kernel above dstate 256 with fp32 inputs and weights
/// (`tools/flashinfer-recorder/cases/dsbig_f32in_cases.json`): an fp16 state at 320 and 480 with
/// T 16 and the intermediate buffer at 0 and 10 rounds; an fp32 state at 400 with T 8; a bf16
/// state at 416 with head dim 128, varlen. Recorded on an H100 on 2026-12-06.
fn embedded_dsbig_f32in() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsbig_f32in")
}

/// The cases of [`embedded_dsbig_f32in`] recorded from FlashInfer 0.7.4's multi-token kernel.
fn embedded_dsbig_f32in_074() -> Manifest {
    embedded_set!("flashinfer_ssu_mtp_dsbig_f32in_074")
}

/// Every embedded manifest: the reference data and the sets above.
fn all_embedded() -> [Manifest; 24] {
    [
        embedded(),
        embedded_shapes(),
        embedded_shapes_074(),
        embedded_new_cases(),
        embedded_ds_074(),
        embedded_fp32(),
        embedded_int16(),
        embedded_ds96(),
        embedded_ds96_074(),
        embedded_int16_074(),
        embedded_dsx(),
        embedded_dsx_074(),
        embedded_dsf32(),
        embedded_dsf32_074(),
        embedded_int16_uneven(),
        embedded_int16_uneven_074(),
        embedded_dtype_forms_074(),
        embedded_d80_ds_grid_074(),
        embedded_dsbig(),
        embedded_dsbig_074(),
        embedded_dsbig_cases(),
        embedded_dsbig_cases_074(),
        embedded_dsbig_f32in(),
        embedded_dsbig_f32in_074(),
    ]
}

fn usizes(v: &[u64]) -> Vec<usize> {
    v.iter().map(|x| *x as usize).collect()
}

/// The input storages of a case, every block checked by SHA-256 (stored blocks too).
fn host_inputs(m: &Manifest, case: &Case) -> BTreeMap<String, HostStorage> {
    case.inputs
        .iter()
        .map(|t| {
            for b in &t.blocks {
                let bytes = m.input_block(t, b);
                assert_eq!(
                    sha256_hex(&bytes),
                    b.sha256,
                    "{}/{} block @{}: SHA-256",
                    case.name,
                    t.name,
                    b.elem_offset
                );
            }
            (t.name.clone(), m.input_storage(t))
        })
        .collect()
}

/// `cache_steps` as the case passes it: `Some` where the call has an intermediate buffer or is
/// varlen and the manifest gives a positive value.
fn cache_steps(case: &Case) -> Option<usize> {
    let cs = case.json.get("cache_steps").and_then(Value::as_u64)?;
    let needs =
        case.input("intermediate_states_buffer").is_some() || case.input("cu_seqlens").is_some();
    (cs > 0 && needs).then_some(cs as usize)
}

/// Checks that a case has what the GPU test maps onto the API: returns a description of the
/// first problem.
fn case_shape_problem(case: &Case) -> Option<String> {
    for name in ["state", "x", "dt", "A", "B", "C"] {
        if case.input(name).is_none() {
            return Some(format!("no input `{name}`"));
        }
    }
    // Every optional tensor the manifest says was passed is among the inputs, and no other.
    for (name, present) in &case.present {
        if *present != case.input(name).is_some() {
            return Some(format!(
                "`present.{name}` is {present} but the input is {}",
                if case.input(name).is_some() {
                    "there"
                } else {
                    "missing"
                }
            ));
        }
    }
    if case.philox_rounds > 0 {
        let Some(seed) = case.input("rand_seed") else {
            return Some("SR without a `rand_seed` input".into());
        };
        if seed.dtype != "int64" {
            return Some(format!("rand_seed is {}", seed.dtype));
        }
        let v = seed.values.as_ref().and_then(|v| v.first().copied());
        if v.is_none() || v != case.seed {
            return Some(format!(
                "rand_seed {v:?} differs from the case's seed {:?}",
                case.seed
            ));
        }
    }
    if case.results.is_empty() {
        return Some("no recorded runs".into());
    }
    for r in &case.results {
        for name in ["state", "out"] {
            if !r.outputs.iter().any(|o| o.name == name) {
                return Some(format!(
                    "run {} has no output `{name}`",
                    r.algorithm_requested
                ));
            }
        }
        let has_buf = r
            .outputs
            .iter()
            .any(|o| o.name == "intermediate_states_buffer");
        if has_buf != case.input("intermediate_states_buffer").is_some() {
            return Some(format!(
                "run {}: intermediate buffer output {has_buf}, input {}",
                r.algorithm_requested, !has_buf
            ));
        }
        for o in &r.outputs {
            let i = case.input(&o.name);
            if let Some(i) = i {
                if (i.dtype.as_str(), i.storage_elems) != (o.dtype.as_str(), o.storage_elems) {
                    return Some(format!("output {} is not its input's storage", o.name));
                }
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Device side
// ---------------------------------------------------------------------------------------------

/// A device storage for `t`, dense or (above 8 GiB) mapped under `ranges` (elements), every
/// mapped byte set to `fill`, then `pieces` written.
fn storage(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    t: &common::TensorDesc,
    ranges: &[(u64, u64)],
    fill: u8,
    pieces: &[(u64, Vec<u8>)],
) -> SparseStorage {
    let es = t.elem_size() as u64;
    let mut s = if t.storage_bytes() <= common::DENSE_LIMIT_BYTES {
        let empty = HostStorage {
            dtype: t.dtype.clone(),
            storage_elems: t.storage_elems,
            pieces: Vec::new(),
        };
        SparseStorage::upload(ctx, stream, t, &empty)
    } else {
        let bytes: Vec<(u64, u64)> = ranges.iter().map(|(lo, hi)| (lo * es, hi * es)).collect();
        SparseStorage::sparse(ctx, stream, &t.dtype, t.storage_elems, &bytes)
    };
    let mapped = s.mapped.clone();
    for (lo, hi) in mapped {
        s.buf_mut()
            .fill_bytes(stream, lo as usize, (hi - lo) as usize, fill);
    }
    for (off, bytes) in pieces {
        s.buf_mut().write_bytes(stream, *off as usize, bytes);
    }
    s
}

/// The element ranges of a storage's blocks.
fn block_ranges(t: &common::TensorDesc) -> Vec<(u64, u64)> {
    t.blocks
        .iter()
        .map(|b| (b.elem_offset, b.elem_offset + b.elems))
        .collect()
}

/// What one run left in the written tensors: downloaded pieces `(elem offset, bytes)`.
struct Got {
    state: Vec<(u64, Vec<u8>)>,
    inter: Option<Vec<(u64, Vec<u8>)>>,
    out: Vec<(u64, Vec<u8>)>,
    /// An int16 state's decode scales: `state_scale`, `intermediate_state_scales` (where given).
    scales: Vec<(&'static str, Pieces)>,
}

/// Downloaded pieces of a storage: `(elem offset, bytes)`.
type Pieces = Vec<(u64, Vec<u8>)>;

/// The decode-scale tensors of an int16 call, read and written like the state.
const SCALES: [&str; 2] = ["state_scale", "intermediate_state_scales"];

/// Runs the case's call once on freshly uploaded storages, with `out` laid out as `out_desc`.
fn run_case(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    case: &Case,
    hosts: &BTreeMap<String, HostStorage>,
    out_desc: &common::TensorDesc,
    sr_rule: mamba_ssu::ssu::SrRule,
) -> Result<Got, String> {
    let mut dev: BTreeMap<String, SparseStorage> = BTreeMap::new();
    for t in &case.inputs {
        let host = &hosts[&t.name];
        let ranges: Vec<(u64, u64)> = host
            .pieces
            .iter()
            .map(|(o, b)| (*o, o + (b.len() / t.elem_size()) as u64))
            .collect();
        // The intermediate buffer and its scales are poisoned whole, like the recording (their
        // blocks are too).
        let fill =
            if t.name == "intermediate_states_buffer" || t.name == "intermediate_state_scales" {
                0xFF
            } else {
                0
            };
        dev.insert(
            t.name.clone(),
            storage(ctx, stream, t, &ranges, fill, &host.pieces),
        );
    }
    let mut state = dev.remove("state").expect("state input");
    let mut inter = dev.remove("intermediate_states_buffer");
    let mut scale_bufs: Vec<(&'static str, SparseStorage)> = SCALES
        .iter()
        .filter_map(|&n| dev.remove(n).map(|s| (n, s)))
        .collect();
    let mut out = storage(ctx, stream, out_desc, &block_ranges(out_desc), 0xFF, &[]);

    let input = |name: &str| {
        case.input(name).map(|t| mtp_dev::In {
            buf: dev[name].buf(),
            shape: usizes(&t.shape),
            strides: usizes(&t.strides),
        })
    };
    let state_desc = case.input("state").unwrap();
    let inter_desc = case.input("intermediate_states_buffer");
    let mut call = mtp_dev::MtpCall {
        state: mtp_dev::Out {
            buf: state.buf_mut(),
            shape: usizes(&state_desc.shape),
            strides: usizes(&state_desc.strides),
        },
        x: input("x").unwrap(),
        dt: input("dt").unwrap(),
        a: input("A").unwrap(),
        b: input("B").unwrap(),
        c: input("C").unwrap(),
        d: input("D"),
        z: input("z"),
        dt_bias: input("dt_bias"),
        out: mtp_dev::Out {
            buf: out.buf_mut(),
            shape: usizes(&out_desc.shape),
            strides: usizes(&out_desc.strides),
        },
        state_batch_indices: input("state_batch_indices"),
        dst_state_batch_indices: input("dst_state_batch_indices"),
        num_accepted_tokens: input("num_accepted_tokens"),
        cu_seqlens: input("cu_seqlens"),
        intermediate_states: inter.as_mut().zip(inter_desc).map(|(s, t)| mtp_dev::Out {
            buf: s.buf_mut(),
            shape: usizes(&t.shape),
            strides: usizes(&t.strides),
        }),
        intermediate_state_indices: input("intermediate_state_indices"),
        state_scale: None,
        intermediate_state_scales: None,
        cache_steps: cache_steps(case),
        pad_slot_id: case.pad_slot_id,
        dt_softplus: case.dt_softplus,
        disable_state_update: case.disable_state_update,
        philox_rounds: case.philox_rounds,
        seed: if case.philox_rounds > 0 {
            input("rand_seed")
        } else {
            None
        },
        sr_rule,
    };
    for (name, buf) in scale_bufs.iter_mut() {
        let t = case.input(name).unwrap();
        let o = mtp_dev::Out {
            buf: buf.buf_mut(),
            shape: usizes(&t.shape),
            strides: usizes(&t.strides),
        };
        if *name == "state_scale" {
            call.state_scale = Some(o);
        } else {
            call.intermediate_state_scales = Some(o);
        }
    }
    mtp_dev::launch(stream, &mut call).map_err(|e| format!("LAUNCH ERROR: {e}"))?;
    drop(call);
    stream
        .synchronize()
        .map_err(|e| format!("KERNEL ERROR: {e}"))?;
    Ok(Got {
        state: state.download(),
        inter: inter.as_mut().map(SparseStorage::download),
        out: out.download(),
        scales: scale_bufs
            .iter_mut()
            .map(|(n, s)| (*n, s.download()))
            .collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------------------------

/// The bytes of storage elements `[off, off + n)` out of downloaded pieces, if one holds them.
fn piece_slice(pieces: &[(u64, Vec<u8>)], es: usize, off: u64, n: u64) -> Option<&[u8]> {
    pieces.iter().find_map(|(lo, bytes)| {
        let hi = lo + (bytes.len() / es) as u64;
        (off >= *lo && off + n <= hi).then(|| {
            let s = ((off - lo) as usize) * es;
            &bytes[s..s + n as usize * es]
        })
    })
}

/// One tensor's comparison with its recording.
#[derive(Default)]
struct Diff {
    /// Differing elements of stored blocks.
    elems: usize,
    /// Largest ulp distance among them.
    max_ulp: u32,
    /// Hash-only blocks that differ (or stored blocks not downloaded).
    blocks: usize,
    /// Elements outside every block that changed from their initial bytes.
    outside: usize,
    /// The first difference.
    first: String,
}

impl Diff {
    fn ok(&self) -> bool {
        self.elems == 0 && self.blocks == 0 && self.outside == 0
    }

    fn cell(&self) -> String {
        if self.ok() {
            return "ok".into();
        }
        let mut s = format!("{} el", self.elems);
        if self.elems > 0 {
            s.push_str(&format!(" (max {} ulp)", self.max_ulp));
        }
        if self.blocks > 0 {
            s.push_str(&format!(", {} blocks", self.blocks));
        }
        if self.outside > 0 {
            s.push_str(&format!(", {} outside", self.outside));
        }
        s
    }
}

/// Compares downloaded pieces against a recorded output: its blocks (bytes or SHA-256), and
/// every downloaded element outside them against `initial` (the input storage; gaps `gap`).
fn compare_output(
    m: &Manifest,
    t: &common::TensorDesc,
    pieces: &[(u64, Vec<u8>)],
    initial: Option<&HostStorage>,
    gap: u8,
) -> Diff {
    let es = t.elem_size();
    let mut d = Diff::default();
    for b in &t.blocks {
        let Some(got) = piece_slice(pieces, es, b.elem_offset, b.elems) else {
            d.blocks += 1;
            if d.first.is_empty() {
                d.first = format!("{} block @{} was not downloaded", t.name, b.elem_offset);
            }
            continue;
        };
        match m.block_bytes(b) {
            Some(want) => {
                let (n, u, f) = compare_elems(&t.dtype, got, want);
                if n > 0 && d.first.is_empty() {
                    let i = f.unwrap();
                    let at = |bytes: &[u8]| hex16(&bytes[i * es..(i + 1) * es]);
                    d.first = format!(
                        "{} storage element {}: got {} want {}",
                        t.name,
                        b.elem_offset + i as u64,
                        at(got),
                        at(want)
                    );
                }
                d.elems += n;
                d.max_ulp = d.max_ulp.max(u);
            }
            None => {
                if sha256_hex(got) != b.sha256 {
                    d.blocks += 1;
                    if d.first.is_empty() {
                        d.first = format!(
                            "{} block @{} ({} el, hash only) differs",
                            t.name, b.elem_offset, b.elems
                        );
                    }
                }
            }
        }
    }
    // Outside the blocks: unchanged, compared range by range.
    let mut covered = block_ranges(t);
    covered.sort();
    for (lo, bytes) in pieces {
        let hi = lo + (bytes.len() / es) as u64;
        for (a, b) in uncovered(*lo, hi, &covered) {
            let want = initial_bytes(initial, a, b, es, gap);
            let have = &bytes[((a - lo) as usize) * es..((b - lo) as usize) * es];
            if have != want.as_slice() {
                let n = have
                    .chunks_exact(es)
                    .zip(want.chunks_exact(es))
                    .filter(|(h, w)| h != w)
                    .count();
                d.outside += n;
                if d.first.is_empty() {
                    let k = have
                        .chunks_exact(es)
                        .zip(want.chunks_exact(es))
                        .position(|(h, w)| h != w)
                        .unwrap();
                    d.first = format!(
                        "{} storage element {} (outside the blocks) changed",
                        t.name,
                        a + k as u64
                    );
                }
            }
        }
    }
    d
}

/// The sub-ranges of `[lo, hi)` that no range of `covered` (sorted) holds.
fn uncovered(lo: u64, hi: u64, covered: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut e = lo;
    for &(a, b) in covered {
        if b <= e || a >= hi {
            continue;
        }
        if a > e {
            out.push((e, a));
        }
        e = e.max(b);
        if e >= hi {
            break;
        }
    }
    if e < hi {
        out.push((e, hi));
    }
    out
}

/// The initial bytes of storage elements `[a, b)`: from `initial`'s pieces, `gap` elsewhere.
fn initial_bytes(initial: Option<&HostStorage>, a: u64, b: u64, es: usize, gap: u8) -> Vec<u8> {
    let mut v = vec![gap; ((b - a) as usize) * es];
    for (o, bytes) in initial.map_or(&[][..], |h| &h.pieces[..]) {
        let end = o + (bytes.len() / es) as u64;
        let (s, e) = ((*o).max(a), end.min(b));
        if s < e {
            v[((s - a) as usize) * es..((e - a) as usize) * es]
                .copy_from_slice(&bytes[((s - o) as usize) * es..((e - o) as usize) * es]);
        }
    }
    v
}

fn hex16(bytes: &[u8]) -> String {
    let mut v = bytes.to_vec();
    v.reverse();
    format!("0x{}", common::hex(&v))
}

/// Whether two runs left the same bytes everywhere.
fn same_bytes(a: &Got, b: &Got) -> Vec<&'static str> {
    let mut differ = Vec::new();
    if a.state != b.state {
        differ.push("state");
    }
    if a.inter != b.inter {
        differ.push("intermediate_states_buffer");
    }
    if a.out != b.out {
        differ.push("out");
    }
    if a.scales != b.scales {
        differ.push("decode scales");
    }
    differ
}

/// The cases a manifest case's `prefix_runs` stand for. An entry that is itself a case (with
/// `inputs` and `results`) runs as one; an entry with `outputs` only is a further recorded run
/// of the case's own inputs. Any other form is an error (so that recorded runs are never
/// silently left out).
fn prefix_run_cases(case: &Case) -> Vec<Case> {
    let Some(runs) = case.json.get("prefix_runs").and_then(Value::as_array) else {
        return Vec::new();
    };
    runs.iter()
        .enumerate()
        .map(|(k, r)| {
            let mut v = if r.get("inputs").is_some() && r.get("results").is_some() {
                let mut merged = case.json.clone();
                for (key, val) in r.as_object().unwrap() {
                    merged[key] = val.clone();
                }
                merged
            } else if r.get("outputs").is_some() {
                let mut merged = case.json.clone();
                let mut res = r.clone();
                if res.get("algorithm_requested").is_none() {
                    res["algorithm_requested"] = Value::from(format!("prefix_run{k}"));
                }
                merged["results"] = Value::Array(vec![res]);
                merged
            } else {
                let keys: Vec<&String> = r
                    .as_object()
                    .map(|o| o.keys().collect())
                    .unwrap_or_default();
                panic!(
                    "{}: prefix_runs[{k}] has neither `inputs`+`results` nor `outputs` (keys \
                     {keys:?}): this test does not know how to run it",
                    case.name
                );
            };
            v["prefix_runs"] = Value::Array(Vec::new());
            let name = format!("{}/prefix_run{k}", case.name);
            v["name"] = Value::from(name);
            common::parse_case_json(&v)
        })
        .collect()
}

/// Runs every recorded run of `case` (at least two runs), prints a line per run, returns the
/// failures.
fn check_case(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    m: &Manifest,
    case: &Case,
) -> Vec<String> {
    let mut failed = Vec::new();
    if let Some(p) = case_shape_problem(case) {
        println!("| {:<36} | - | MANIFEST: {p} |", case.name);
        return vec![format!("{}: {p}", case.name)];
    }
    let hosts = host_inputs(m, case);
    let mut runs: Vec<(String, Got)> = Vec::new();
    let mut plan: Vec<&common::ResultEntry> = case.results.iter().collect();
    if plan.len() == 1 {
        plan.push(plan[0]);
    }
    for (k, r) in plan.iter().enumerate() {
        let label = format!("| {:<36} | {:<8} |", case.name, r.algorithm_requested);
        let out_desc = r.output("out");
        let rule = common::recorded_sr_rule(&m.json, &case.json);
        let got = match run_case(ctx, stream, case, &hosts, out_desc, rule) {
            Ok(g) => g,
            Err(e) => {
                println!("{label} {e} |");
                failed.push(format!("{}/{}: {e}", case.name, r.algorithm_requested));
                continue;
            }
        };
        let sd = compare_output(m, r.output("state"), &got.state, hosts.get("state"), 0);
        let id = match (
            &got.inter,
            r.outputs
                .iter()
                .find(|o| o.name == "intermediate_states_buffer"),
        ) {
            (Some(p), Some(t)) => Some(compare_output(
                m,
                t,
                p,
                hosts.get("intermediate_states_buffer"),
                0xFF,
            )),
            _ => None,
        };
        let od = compare_output(m, out_desc, &got.out, None, 0xFF);
        // An int16 call's decode scales, each against its recorded output (a missing one is a
        // difference).
        let cds: Vec<(&str, Diff)> = got
            .scales
            .iter()
            .map(|(n, p)| {
                let gap = if *n == "intermediate_state_scales" {
                    0xFF
                } else {
                    0
                };
                let d = match r.outputs.iter().find(|o| o.name == *n) {
                    Some(t) => compare_output(m, t, p, hosts.get(*n), gap),
                    None => Diff {
                        blocks: 1,
                        first: format!("no recorded {n} output"),
                        ..Diff::default()
                    },
                };
                (*n, d)
            })
            .collect();
        let mut line = format!(
            "{label} {:<28} | {:<28} | {:<28} |",
            sd.cell(),
            id.as_ref().map_or("-".to_string(), Diff::cell),
            od.cell()
        );
        for (n, d) in &cds {
            line.push_str(&format!(" {n}: {} |", d.cell()));
        }
        for d in [Some(&sd), id.as_ref(), Some(&od)]
            .into_iter()
            .flatten()
            .chain(cds.iter().map(|(_, d)| d))
        {
            if !d.first.is_empty() {
                line.push_str(&format!(" first: {};", d.first));
            }
        }
        let ok = sd.ok()
            && id.as_ref().is_none_or(Diff::ok)
            && od.ok()
            && cds.iter().all(|(_, d)| d.ok());
        if !ok {
            failed.push(format!("{}/{} (run {k})", case.name, r.algorithm_requested));
        }
        // Determinism: every run of the case leaves the same bytes as the first (same out
        // layout only).
        if let Some((first_alg, first)) = runs.first() {
            if first.out.len() == got.out.len()
                && first
                    .out
                    .iter()
                    .map(|p| p.1.len())
                    .eq(got.out.iter().map(|p| p.1.len()))
            {
                let differ = same_bytes(first, &got);
                if !differ.is_empty() {
                    line.push_str(&format!(
                        " NOT DETERMINISTIC vs run {first_alg}: {differ:?};"
                    ));
                    failed.push(format!(
                        "{}/{}: runs differ in {differ:?}",
                        case.name, r.algorithm_requested
                    ));
                }
            }
        }
        println!("{line}");
        runs.push((r.algorithm_requested.clone(), got));
    }
    for p in prefix_run_cases(case) {
        failed.extend(check_case(ctx, stream, m, &p));
    }
    failed
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_reference_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    check_manifest(&ctx, &stream, &manifest());
}

/// The recorded shape cases (head dim 128), as [`flashinfer_mtp_reference_bit_exact`] checks
/// the reference data.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_shapes_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    check_manifest(&ctx, &stream, &embedded_shapes());
}

/// The shape cases at head dims 80 and 128 recorded from FlashInfer 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_shapes_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_shapes_074();
    assert_eq!(m.cases.len(), 12);
    check_manifest(&ctx, &stream, &m);
}

/// The new cases FlashInfer 0.7.2.post1 records and the crate serves (dstate 64 and 256, any
/// round count, FlashInfer's index forms).
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_new_cases_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_new_cases();
    assert_eq!(m.cases.len(), 17);
    check_manifest(&ctx, &stream, &m);
}

/// The dstate-64/256 cases recorded from FlashInfer 0.7.4 (head dims 80 and 128).
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_ds_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_ds_074();
    assert_eq!(m.cases.len(), 8);
    check_manifest(&ctx, &stream, &m);
}

/// The fp32-state cases (FlashInfer's 4-column lane blocks).
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_fp32_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_fp32();
    assert_eq!(m.cases.len(), 6);
    check_manifest(&ctx, &stream, &m);
}

/// The int16 block-scaled-state cases.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_int16_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_int16();
    assert_eq!(m.cases.len(), 25);
    check_manifest(&ctx, &stream, &m);
}

/// The dstate-96 cases (the run-time kernel over the 128-column tile).
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_ds96_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_ds96();
    assert_eq!(m.cases.len(), 10);
    check_manifest(&ctx, &stream, &m);
}

/// The dtype forms, the fp16-input cases and the head-dim-80 launch plans from FlashInfer 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dtype_forms_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_dtype_forms_074();
    assert_eq!(m.cases.len(), 84);
    check_manifest(&ctx, &stream, &m);
}

/// Head dim 80 with SR at dstates 64 and 256 on the two-row SR plan's grid, from FlashInfer
/// 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_d80_ds_grid_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_d80_ds_grid_074();
    assert_eq!(m.cases.len(), 8);
    check_manifest(&ctx, &stream, &m);
}

/// dstates 288 and 512 (above 256) from FlashInfer 0.7.2.post1.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dsbig_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_dsbig();
    assert_eq!(m.cases.len(), 4);
    check_manifest(&ctx, &stream, &m);
}

/// dstates 288 and 512 from FlashInfer 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dsbig_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_dsbig_074();
    assert_eq!(m.cases.len(), 4);
    check_manifest(&ctx, &stream, &m);
}

/// More dstates above 256 (T 16, varlen, fp32, fp16 inputs) from FlashInfer 0.7.2.post1 and
/// 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dsbig_cases_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    for m in [embedded_dsbig_cases(), embedded_dsbig_cases_074()] {
        assert_eq!(m.cases.len(), 9);
        check_manifest(&ctx, &stream, &m);
    }
}

/// fp32 inputs above dstate 256 (T 16 with the intermediate buffer, T 8 with an fp32 state,
/// varlen with a bf16 state) from FlashInfer 0.7.2.post1 and 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dsbig_f32in_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    for m in [embedded_dsbig_f32in(), embedded_dsbig_f32in_074()] {
        assert_eq!(m.cases.len(), 6);
        check_manifest(&ctx, &stream, &m);
    }
}

/// The dstate-96 cases from FlashInfer 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_ds96_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_ds96_074();
    assert_eq!(m.cases.len(), 10);
    check_manifest(&ctx, &stream, &m);
}

/// The dstate 160, 192 and 224 cases (the run-time kernel over the 256-column tile).
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dsx_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_dsx();
    assert_eq!(m.cases.len(), 12);
    check_manifest(&ctx, &stream, &m);
}

/// The dstate 160, 192 and 224 cases from FlashInfer 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dsx_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_dsx_074();
    assert_eq!(m.cases.len(), 12);
    check_manifest(&ctx, &stream, &m);
}

/// The fp32-state cases at 32, 48, 80, 144, 176, 208 and 240.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dsf32_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_dsf32();
    assert_eq!(m.cases.len(), 14);
    check_manifest(&ctx, &stream, &m);
}

/// The fp32-state cases from FlashInfer 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_dsf32_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_dsf32_074();
    assert_eq!(m.cases.len(), 14);
    check_manifest(&ctx, &stream, &m);
}

/// The int16 cases at dstates 96, 160, 192 and 224.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_int16_uneven_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_int16_uneven();
    assert_eq!(m.cases.len(), 8);
    check_manifest(&ctx, &stream, &m);
}

/// The int16 cases at dstates 96, 160, 192 and 224 from FlashInfer 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_int16_uneven_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_int16_uneven_074();
    assert_eq!(m.cases.len(), 8);
    check_manifest(&ctx, &stream, &m);
}

/// The int16 cases from FlashInfer 0.7.4.
#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_mtp_int16_074_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = embedded_int16_074();
    assert_eq!(m.cases.len(), 25);
    check_manifest(&ctx, &stream, &m);
}

/// Every run of every case of `m` on the GPU, bit-identical to FlashInfer's; a table row per run.
fn check_manifest(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, m: &Manifest) {
    println!("{} cases", m.cases.len());
    println!(
        "| {:<36} | {:<8} | {:<28} | {:<28} | {:<28} |",
        "case", "run", "state", "intermediate", "out"
    );
    println!("|---|---|---|---|---|");
    let mut failed = Vec::new();
    for case in &m.cases {
        failed.extend(check_case(ctx, stream, m, case));
    }
    assert!(!m.cases.is_empty(), "no cases");
    assert!(
        failed.is_empty(),
        "{} runs differ from FlashInfer or from each other: {failed:#?} (table above)",
        failed.len()
    );
}

// ---------------------------------------------------------------------------------------------
// CPU checks of the data the GPU test reads
// ---------------------------------------------------------------------------------------------

#[test]
fn the_sr_rule_follows_the_recorded_release() {
    use mamba_ssu::ssu::SrRule;
    let m = embedded(); // 0.7.2.post1 data (a manifest named by the environment may be of any release)
    for case in &m.cases {
        assert_eq!(
            common::recorded_sr_rule(&m.json, &case.json),
            SrRule::V072,
            "{}",
            case.name
        );
    }
    let env = |v: &str| serde_json::json!({"environment": {"flashinfer": v}});
    let none = serde_json::json!({});
    for (v, want) in [
        ("0.7.2.post1 (headers from the PyPI wheel)", SrRule::V072),
        ("0.7.3", SrRule::V072),
        ("0.7.4", SrRule::V074),
        ("0.7.4.post2", SrRule::V074),
        ("0.8.0", SrRule::V074),
        ("1.0", SrRule::V074),
        ("", SrRule::V072),
    ] {
        assert_eq!(common::recorded_sr_rule(&env(v), &none), want, "{v:?}");
    }
    // A case's own field wins.
    let case = serde_json::json!({"sr_rule": "0.7.4"});
    assert_eq!(common::recorded_sr_rule(&env("0.7.2"), &case), SrRule::V074);
    assert_eq!(common::recorded_sr_rule(&none, &none), SrRule::V072);
}

#[test]
fn embedded_bin_matches_its_manifest() {
    for m in all_embedded() {
        assert_eq!(m.bins.len(), 1);
        for (file, bytes, sha) in &m.bins {
            let data = &m.bin_data[file];
            assert_eq!(data.len() as u64, *bytes, "{file}: size");
            assert_eq!(&sha256_hex(data), sha, "{file}: SHA-256");
        }
    }
}

/// Every input block of every case (stored, regenerated from the generator or from inline
/// values) has its SHA-256, and every case has the tensors and fields the GPU test maps onto
/// the API (its `prefix_runs` too).
#[test]
fn embedded_cases_rebuild_and_map_onto_the_api() {
    for m in all_embedded() {
        rebuild_and_map(&m);
    }
}

/// The largest input (elements of its storage) [`rebuild_and_map`] regenerates.
const MAX_REGENERATED_ELEMS: u64 = 1 << 22;

/// The body of [`embedded_cases_rebuild_and_map_onto_the_api`] for one manifest.
fn rebuild_and_map(m: &Manifest) {
    assert!(!m.cases.is_empty());
    let mut regenerated = 0usize;
    for case in &m.cases {
        assert_eq!(case.json["path"], "mtp", "{}", case.name);
        if let Some(p) = case_shape_problem(case) {
            panic!("{}: {p}", case.name);
        }
        // Cases with an input over MAX_REGENERATED_ELEMS elements (the head-dim-80 grids' states,
        // 42 Mi elements) regenerate on the GPU test's host only: here, in a debug build, they
        // would take minutes.
        let small = case
            .inputs
            .iter()
            .all(|t| t.storage_elems <= MAX_REGENERATED_ELEMS);
        let hosts = small.then(|| host_inputs(m, case));
        regenerated += case
            .inputs
            .iter()
            .flat_map(|t| &t.blocks)
            .filter(|b| b.bin.is_none())
            .count();
        for t in &case.inputs {
            assert!(
                t.dense(),
                "{}/{}: blocks do not cover the storage",
                case.name,
                t.name
            );
            assert!(
                t.view_span() <= t.storage_elems,
                "{}/{}: the view reaches past its storage",
                case.name,
                t.name
            );
            if let Some(hosts) = &hosts {
                assert_eq!(hosts[&t.name].storage_elems, t.storage_elems);
            }
        }
        // The poisoned intermediate buffer regenerates as 0xFF bytes.
        if let Some(h) = hosts
            .as_ref()
            .and_then(|h| h.get("intermediate_states_buffer"))
        {
            assert!(h.pieces.iter().all(|(_, b)| b.iter().all(|x| *x == 0xFF)));
        }
        for p in prefix_run_cases(case) {
            assert!(case_shape_problem(&p).is_none(), "{}", p.name);
        }
    }
    assert!(regenerated > 0, "no hash-only input block was regenerated");
}

fn dtype(name: &str) -> mamba_ssu::ssu::DType {
    use mamba_ssu::ssu::DType;
    match name {
        "float16" => DType::F16,
        "bfloat16" => DType::BF16,
        "float32" => DType::F32,
        "int16" => DType::I16,
        "int32" => DType::I32,
        "int64" => DType::I64,
        other => panic!("no dtype {other}"),
    }
}

/// The host-side description of the call the GPU test makes for `case` with `out_desc`: the
/// same tensors, layouts and flags as [`run_case`], over buffers of the storages' sizes.
fn case_spec(case: &Case, out_desc: &common::TensorDesc) -> mamba_ssu::ssu::MtpSpec {
    use mamba_ssu::ssu::{MtpSpec, SeedSpec, TensorLayout};
    let lay = |t: &common::TensorDesc| {
        TensorLayout::new(
            dtype(&t.dtype),
            &usizes(&t.shape),
            &usizes(&t.strides),
            t.storage_elems as usize,
        )
        .unwrap_or_else(|e| panic!("{}/{}: {e}", case.name, t.name))
    };
    let opt = |name: &str| case.input(name).map(lay);
    let need = |name: &str| lay(case.input(name).unwrap());
    MtpSpec {
        state: need("state"),
        x: need("x"),
        dt: need("dt"),
        a: need("A"),
        b: need("B"),
        c: need("C"),
        d: opt("D"),
        z: opt("z"),
        dt_bias: opt("dt_bias"),
        state_batch_indices: opt("state_batch_indices"),
        dst_state_batch_indices: opt("dst_state_batch_indices"),
        num_accepted_tokens: opt("num_accepted_tokens"),
        cu_seqlens: opt("cu_seqlens"),
        intermediate_states_buffer: opt("intermediate_states_buffer"),
        intermediate_state_indices: opt("intermediate_state_indices"),
        state_scale: opt("state_scale"),
        intermediate_state_scales: opt("intermediate_state_scales"),
        cache_steps: cache_steps(case),
        out: lay(out_desc),
        philox_rounds: case.philox_rounds,
        seed: (case.philox_rounds > 0).then(|| SeedSpec::Pointer(need("rand_seed"))),
    }
}

/// The API's host-side validation accepts every embedded case's call as the GPU test makes it,
/// and its sizes are the manifest's.
#[test]
fn embedded_cases_pass_the_api_validation() {
    let all = all_embedded();
    for case in all.iter().flat_map(|m| &m.cases) {
        for r in &case.results {
            let spec = case_spec(case, r.output("out"));
            let p = mamba_ssu::ssu::validate_mtp(&spec)
                .unwrap_or_else(|e| panic!("{}/{}: {e}", case.name, r.algorithm_requested));
            let n = &case.name;
            assert_eq!(p.batch as u64, case.batch, "{n}: batch");
            assert_eq!(p.nheads as u64, case.nheads, "{n}: nheads");
            assert_eq!(p.dim as u64, case.dim, "{n}: dim");
            assert_eq!(p.dstate as u64, case.dstate, "{n}: dstate");
            assert_eq!(p.ngroups as u64, case.ngroups, "{n}: ngroups");
            assert_eq!(p.cache_slots as u64, case.state_cache_size, "{n}: slots");
            assert_eq!(
                p.total_tokens.is_some(),
                case.input("cu_seqlens").is_some(),
                "{n}: form"
            );
            if let Some(t) = case.json.get("T").and_then(Value::as_u64) {
                assert_eq!(p.ntokens as u64, t, "{n}: T");
            }
            assert_eq!(p.stochastic_rounding, case.philox_rounds > 0, "{n}: SR");
        }
    }
}

#[test]
fn uncovered_ranges_and_initial_bytes() {
    assert_eq!(uncovered(0, 10, &[]), vec![(0, 10)]);
    assert_eq!(uncovered(0, 10, &[(0, 10)]), vec![]);
    assert_eq!(
        uncovered(0, 10, &[(2, 4), (6, 7)]),
        vec![(0, 2), (4, 6), (7, 10)]
    );
    assert_eq!(uncovered(5, 10, &[(0, 6), (8, 20)]), vec![(6, 8)]);
    let h = HostStorage {
        dtype: "float16".into(),
        storage_elems: 10,
        pieces: vec![(2, vec![1, 2, 3, 4])],
    };
    assert_eq!(
        initial_bytes(Some(&h), 1, 4, 2, 0xFF),
        vec![0xFF, 0xFF, 1, 2, 3, 4]
    );
    assert_eq!(initial_bytes(None, 0, 2, 2, 0), vec![0; 4]);
}

/// The comparison passes the recorded outputs themselves (where every block is stored) and
/// reports a single changed element, with its ulp distance, and a changed byte outside the
/// blocks.
#[test]
fn the_comparison_passes_the_recording_and_reports_a_changed_element() {
    let m = embedded();
    let mut checked = 0;
    for case in &m.cases {
        let hosts = host_inputs(&m, case);
        for r in &case.results {
            for o in &r.outputs {
                if o.blocks.iter().any(|b| b.bin.is_none()) {
                    continue;
                }
                let gap = if o.name == "state" { 0 } else { 0xFF };
                let mut pieces: Vec<(u64, Vec<u8>)> = o
                    .blocks
                    .iter()
                    .map(|b| (b.elem_offset, m.block_bytes(b).unwrap().to_vec()))
                    .collect();
                let d = compare_output(&m, o, &pieces, hosts.get(&o.name), gap);
                assert!(d.ok(), "{}/{}: {}", case.name, o.name, d.first);
                // The last bit of element 3: one ulp (an fp16/bf16/fp32 value of the same sign).
                pieces[0].1[3 * o.elem_size()] ^= 1;
                let d = compare_output(&m, o, &pieces, hosts.get(&o.name), gap);
                assert_eq!((d.elems, d.max_ulp), (1, 1), "{}/{}", case.name, o.name);
                assert!(
                    !d.ok() && d.first.contains("storage element 3"),
                    "{}",
                    d.first
                );
                checked += 1;
            }
        }
        // A byte outside the blocks: a downloaded piece reaching past the recorded blocks.
        let r = &case.results[0];
        let o = r.output("out");
        if o.blocks.iter().all(|b| b.bin.is_some()) {
            let es = o.elem_size();
            let mut bytes = m.block_bytes(&o.blocks[0]).unwrap().to_vec();
            bytes.extend(vec![0xFF; 2 * es]);
            let mut t = o.clone();
            t.storage_elems += 2;
            let mut pieces = vec![(o.blocks[0].elem_offset, bytes)];
            if o.blocks.len() == 1 && o.blocks[0].elem_offset == 0 {
                assert!(compare_output(&m, &t, &pieces, None, 0xFF).ok());
                let n = pieces[0].1.len();
                pieces[0].1[n - 1] = 0;
                let d = compare_output(&m, &t, &pieces, None, 0xFF);
                assert_eq!(d.outside, 1, "{}", case.name);
            }
        }
    }
    assert!(checked > 0);
}
