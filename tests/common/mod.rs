//! Shared support of the integration tests (each test file does `mod common;`).
//!
//! - [`gpu`]: the device or a skip (a panic under `MAMBA_SSU_REQUIRE_GPU=1`).
//! - [`Manifest`]: the FlashInfer reference data of `tests/data/flashinfer_ssu/` (README §3)
//!   and, same format, of the multi-token path in `tests/data/flashinfer_ssu_mtp/`
//!   ([`Manifest::embedded_mtp`]): cases, tensor descriptors, storages assembled from blocks
//!   (blocks without a `bin` are regenerated), SHA-256 helpers.
//! - [`gen`]: the integer input generator of the README §4, bit-exact.
//! - small numeric helpers (ulp distances, dtype sizes).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The embedded manifest of the FlashInfer reference data (xz-compressed).
pub const EMBEDDED_MANIFEST: &[u8] = include_bytes!("../data/flashinfer_ssu/manifest.json.xz");
/// The embedded bin of the FlashInfer reference data (xz-compressed).
pub const EMBEDDED_FIXTURES: &[u8] = include_bytes!("../data/flashinfer_ssu/fixtures.bin.xz");

// ---------------------------------------------------------------------------------------------
// Compressed data
// ---------------------------------------------------------------------------------------------

/// The bytes an xz stream holds (`tests/data` keeps its manifests and bins xz-compressed:
/// `scripts/compress_fixtures.sh`). Panics on a corrupt stream: the data is part of the test.
pub fn unxz(xz: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut std::io::Cursor::new(xz), &mut out)
        .unwrap_or_else(|e| panic!("an embedded xz stream does not decode: {e}"));
    out
}

/// [`unxz`] of a text file.
pub fn unxz_text(xz: &[u8]) -> String {
    String::from_utf8(unxz(xz)).expect("embedded text is UTF-8")
}

/// The file at `path` (decompressed when its name ends in `.xz`, as `merge.py --xz` writes
/// them), or the decompressed contents of `<path>.xz` when `path` is absent.
pub fn read_maybe_xz(path: &Path) -> Vec<u8> {
    match std::fs::read(path) {
        Ok(data) if path.extension().is_some_and(|e| e == "xz") => unxz(&data),
        Ok(data) => data,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut xz_path = path.as_os_str().to_owned();
            xz_path.push(".xz");
            let xz = std::fs::read(&xz_path).unwrap_or_else(|e2| {
                panic!(
                    "reading {} ({e}) or {}.xz: {e2}",
                    path.display(),
                    path.display()
                )
            });
            unxz(&xz)
        }
        Err(e) => panic!("reading {}: {e}", path.display()),
    }
}

// ---------------------------------------------------------------------------------------------
// GPU
// ---------------------------------------------------------------------------------------------

/// Whether this run must have a GPU (`MAMBA_SSU_REQUIRE_GPU=1`, set by `.gpu/run.sh`).
pub fn gpu_required() -> bool {
    std::env::var("MAMBA_SSU_REQUIRE_GPU").is_ok_and(|v| v.trim() == "1")
}

/// Serializes the GPU tests of one test binary: a stream capture in one test thread is
/// invalidated by stream creation or allocation in another, so tests that capture (and those
/// running next to them) hold this lock for their whole body.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Device 0 and a fresh stream, or `None` (with a skip line on stderr) where there is no GPU.
///
/// # Panics
/// When `MAMBA_SSU_REQUIRE_GPU=1` and no device answers: on the GPU host a GPU test must fail,
/// never skip.
pub fn gpu() -> Option<(Arc<CudaContext>, Arc<CudaStream>)> {
    match mamba_ssu::device::open(0) {
        Ok(ctx) => {
            let stream = ctx.new_stream().expect("creating a CUDA stream");
            Some((ctx, stream))
        }
        Err(e) => {
            if gpu_required() {
                panic!("MAMBA_SSU_REQUIRE_GPU=1 but no GPU answered: {e}");
            }
            eprintln!("skipped: no GPU ({e})");
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SHA-256 and byte helpers
// ---------------------------------------------------------------------------------------------

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes per element of a manifest dtype name.
pub fn dtype_size(dtype: &str) -> usize {
    match dtype {
        "float16" | "bfloat16" | "int16" => 2,
        "float32" | "int32" => 4,
        "int64" => 8,
        other => panic!("unknown dtype {other}"),
    }
}

/// The elements of a little-endian byte buffer as `u16`.
pub fn as_u16(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// The elements of a little-endian byte buffer as `u32`.
pub fn as_u32(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Distance in units in the last place between two 16-bit floats (fp16 or bf16) given by their
/// bits (monotone sign-magnitude order; +0 and -0 are 0 apart). NaN against anything: u32::MAX.
pub fn ulp_distance_16(a: u16, b: u16, bf16: bool) -> u32 {
    let nan = |x: u16| {
        if bf16 {
            (x & 0x7F80) == 0x7F80 && (x & 0x7F) != 0
        } else {
            (x & 0x7C00) == 0x7C00 && (x & 0x3FF) != 0
        }
    };
    if a == b {
        return 0;
    }
    if nan(a) || nan(b) {
        return u32::MAX;
    }
    let key = |x: u16| -> i64 {
        let m = i64::from(x & 0x7FFF);
        if x & 0x8000 != 0 {
            -m
        } else {
            m
        }
    };
    (key(a) - key(b)).unsigned_abs() as u32
}

/// Distance in ulps between two fp32 values given by their bits (as [`ulp_distance_16`]).
pub fn ulp_distance_32(a: u32, b: u32) -> u32 {
    if a == b {
        return 0;
    }
    if f32::from_bits(a).is_nan() || f32::from_bits(b).is_nan() {
        return u32::MAX;
    }
    let key = |x: u32| -> i64 {
        let m = i64::from(x & 0x7FFF_FFFF);
        if x & 0x8000_0000 != 0 {
            -m
        } else {
            m
        }
    };
    (key(a) - key(b)).unsigned_abs().min(u64::from(u32::MAX)) as u32
}

/// Element-wise comparison of two equally long byte buffers of `dtype`: (number of differing
/// elements, max ulp distance among them, first differing element index).
pub fn compare_elems(dtype: &str, got: &[u8], want: &[u8]) -> (usize, u32, Option<usize>) {
    assert_eq!(got.len(), want.len(), "compare_elems: lengths differ");
    let mut count = 0;
    let mut max_ulp = 0;
    let mut first = None;
    match dtype_size(dtype) {
        2 => {
            let bf = dtype == "bfloat16";
            for (i, (g, w)) in as_u16(got).into_iter().zip(as_u16(want)).enumerate() {
                if g != w {
                    count += 1;
                    max_ulp = max_ulp.max(ulp_distance_16(g, w, bf));
                    first.get_or_insert(i);
                }
            }
        }
        4 => {
            let float = dtype == "float32";
            for (i, (g, w)) in as_u32(got).into_iter().zip(as_u32(want)).enumerate() {
                if g != w {
                    count += 1;
                    let d = if float {
                        ulp_distance_32(g, w)
                    } else {
                        g.abs_diff(w)
                    };
                    max_ulp = max_ulp.max(d);
                    first.get_or_insert(i);
                }
            }
        }
        _ => {
            for (i, (g, w)) in got.chunks_exact(8).zip(want.chunks_exact(8)).enumerate() {
                if g != w {
                    count += 1;
                    max_ulp = u32::MAX;
                    first.get_or_insert(i);
                }
            }
        }
    }
    (count, max_ulp, first)
}

// ---------------------------------------------------------------------------------------------
// The input generator (README §4)
// ---------------------------------------------------------------------------------------------

/// The integer input generator of the reference data (README §4), bit-exact.
pub mod gen {
    use half::{bf16, f16};

    /// Multiplier of the generator seed in the stream seed.
    pub const SEED_MUL: u64 = 0x632B_E59B_D9B4_E019;
    /// Multiplier of the tag in the stream seed.
    pub const TAG_MUL: u64 = 0xD1B5_4A32_D192_ED03;
    /// Per-element increment (golden ratio).
    pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

    /// Tags of the generated tensors.
    pub const TAG_STATE: u64 = 1;
    /// `x`.
    pub const TAG_X: u64 = 2;
    /// `dt`.
    pub const TAG_DT: u64 = 3;
    /// `dt_bias`.
    pub const TAG_DT_BIAS: u64 = 4;
    /// `A`.
    pub const TAG_A: u64 = 5;
    /// `B`.
    pub const TAG_B: u64 = 6;
    /// `C`.
    pub const TAG_C: u64 = 7;
    /// `D`.
    pub const TAG_D: u64 = 8;
    /// `z`.
    pub const TAG_Z: u64 = 9;
    /// The multi-token path's `intermediate_states_buffer` poison: every element's bits are
    /// all ones (no value formula; see [`block_bytes`]).
    pub const TAG_INTERMEDIATE: u64 = 10;
    /// An int16 (block-scaled) state: `(r % 65535) - 32767`, every int16 but -32768.
    pub const TAG_STATE_INT16: u64 = 11;
    /// `state_scale`, the float32 decode scales of an int16 state: `(1024 + (r & 1023)) ·
    /// 2^(((r >> 10) % 6) - 31)`, in [2^-21, 2^-15).
    pub const TAG_STATE_SCALE: u64 = 12;
    /// The multi-token path's `intermediate_state_scales` poison: every byte 0xFF.
    pub const TAG_INTERMEDIATE_SCALES: u64 = 13;

    /// The SplitMix64 finaliser.
    pub fn mix64(mut z: u64) -> u64 {
        z ^= z >> 30;
        z = z.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z ^= z >> 27;
        z = z.wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Stream seed of tensor `tag` under generator seed `gen_seed`.
    pub fn stream_seed(gen_seed: u64, tag: u64) -> u64 {
        gen_seed
            .wrapping_mul(SEED_MUL)
            .wrapping_add(tag.wrapping_mul(TAG_MUL))
    }

    /// The raw 64-bit word of storage element `i`.
    pub fn raw(s0: u64, i: u64) -> u64 {
        mix64(s0.wrapping_add(i.wrapping_add(1).wrapping_mul(GOLDEN)))
    }

    /// Sum of the four 16-bit fields of `r`, centred: in [-131070, 131070].
    pub fn gauss_int(r: u64) -> i64 {
        ((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48)) as i64 - 131_070
    }

    /// The exact fp32 value of element word `r` for tensor `tag`.
    pub fn value(tag: u64, r: u64) -> f32 {
        let g = gauss_int(r) as f32; // |g| < 2^24: exact
        match tag {
            TAG_STATE => g * 2f32.powi(-16),
            TAG_X | TAG_Z => g * 2f32.powi(-15),
            TAG_B | TAG_C => g * 2f32.powi(-17),
            TAG_DT => ((r % 97) as f32 - 64.0) / 32.0,
            TAG_DT_BIAS => ((r % 33) as f32 - 16.0) / 64.0,
            TAG_D => 1.0 + ((r % 33) as f32 - 16.0) / 64.0,
            TAG_A => {
                let m = (512 + (r & 511)) as f32;
                let e = ((r >> 9) % 5) as i32 - 2 - 9;
                -m * 2f32.powi(e)
            }
            TAG_STATE_INT16 => ((r % 65535) as i64 - 32767) as f32,
            TAG_STATE_SCALE => {
                let m = (1024 + (r & 1023)) as f32;
                let e = ((r >> 10) % 6) as i32 - 31;
                m * 2f32.powi(e)
            }
            other => panic!("unknown generator tag {other}"),
        }
    }

    /// The `kind` string the manifest gives for `tag`.
    pub fn kind_of(tag: u64) -> &'static str {
        match tag {
            TAG_STATE => "gauss_int*2^-16",
            TAG_X | TAG_Z => "gauss_int*2^-15",
            TAG_B | TAG_C => "gauss_int*2^-17",
            TAG_DT => "((r%97)-64)/32",
            TAG_DT_BIAS => "((r%33)-16)/64",
            TAG_D => "1+((r%33)-16)/64",
            TAG_A => "-(512+(r&511))*2^(((r>>9)%5)-2-9)",
            TAG_INTERMEDIATE => "const_bits_0xFFFF",
            TAG_STATE_INT16 => "(r%65535)-32767",
            TAG_STATE_SCALE => "(1024+(r&1023))*2^(((r>>10)%6)-31)",
            TAG_INTERMEDIATE_SCALES => "const_bits_0xFF",
            other => panic!("unknown generator tag {other}"),
        }
    }

    /// The fp32 values of storage elements `[start, start + n)` of tensor `tag`.
    pub fn values_f32(gen_seed: u64, tag: u64, start: u64, n: usize) -> Vec<f32> {
        let s0 = stream_seed(gen_seed, tag);
        (0..n as u64)
            .map(|k| value(tag, raw(s0, start + k)))
            .collect()
    }

    /// Rounds fp32 values to `dtype` (round-to-nearest-even, fp16 subnormals kept) and returns
    /// the little-endian bytes.
    pub fn to_dtype_bytes(values: &[f32], dtype: &str) -> Vec<u8> {
        match dtype {
            "float32" => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            "float16" => values
                .iter()
                .flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes())
                .collect(),
            "bfloat16" => values
                .iter()
                .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
                .collect(),
            other => panic!("the generator makes no {other} values"),
        }
    }

    /// Storage elements `[start, start + n)` of tensor `tag` as bytes of `dtype`.
    pub fn block_bytes(gen_seed: u64, tag: u64, dtype: &str, start: u64, n: usize) -> Vec<u8> {
        if tag == TAG_INTERMEDIATE || tag == TAG_INTERMEDIATE_SCALES {
            return vec![0xFF; n * super::dtype_size(dtype)];
        }
        assert_eq!(
            dtype == "int16",
            tag == TAG_STATE_INT16,
            "the generator makes int16 values with tag {TAG_STATE_INT16} only (tag {tag}, {dtype})"
        );
        if tag == TAG_STATE_INT16 {
            // Every value is an integer in [-32767, 32767]: exact in fp32 and in int16.
            return values_f32(gen_seed, tag, start, n)
                .iter()
                .flat_map(|v| (*v as i16).to_le_bytes())
                .collect();
        }
        to_dtype_bytes(&values_f32(gen_seed, tag, start, n), dtype)
    }
}

// ---------------------------------------------------------------------------------------------
// The manifest (README §3)
// ---------------------------------------------------------------------------------------------

/// One materialised piece of a storage.
#[derive(Clone, Debug)]
pub struct Block {
    /// First storage element.
    pub elem_offset: u64,
    /// Number of elements.
    pub elems: u64,
    /// Byte count.
    pub nbytes: u64,
    /// SHA-256 of the bytes.
    pub sha256: String,
    /// The bin file, or `None` for a hash-only block.
    pub bin: Option<String>,
    /// Byte offset in the bin.
    pub byte_offset: Option<u64>,
}

/// A tensor descriptor: a strided view over a flat storage.
#[derive(Clone, Debug)]
pub struct TensorDesc {
    /// `state`, `x`, `out`...
    pub name: String,
    /// `float16`, `bfloat16`, `float32`, `int32`, `int64`.
    pub dtype: String,
    /// Shape.
    pub shape: Vec<u64>,
    /// Strides in elements.
    pub strides: Vec<u64>,
    /// Elements of the whole storage.
    pub storage_elems: u64,
    /// `(gen_seed, tag, kind)` when the storage comes from the generator.
    pub generator: Option<(u64, u64, String)>,
    /// Inline values (index tensors, seeds).
    pub values: Option<Vec<i64>>,
    /// The materialised blocks.
    pub blocks: Vec<Block>,
}

impl TensorDesc {
    /// Bytes per element.
    pub fn elem_size(&self) -> usize {
        dtype_size(&self.dtype)
    }

    /// Bytes of the whole storage.
    pub fn storage_bytes(&self) -> u64 {
        self.storage_elems * self.elem_size() as u64
    }

    /// Whether the blocks cover the whole storage.
    pub fn dense(&self) -> bool {
        let mut covered = 0u64;
        let mut blocks: Vec<&Block> = self.blocks.iter().collect();
        blocks.sort_by_key(|b| b.elem_offset);
        for b in blocks {
            if b.elem_offset > covered {
                return false;
            }
            covered = covered.max(b.elem_offset + b.elems);
        }
        covered >= self.storage_elems
    }

    /// One past the largest storage element the view reaches.
    pub fn view_span(&self) -> u64 {
        if self.shape.contains(&0) {
            return 0;
        }
        1 + self
            .shape
            .iter()
            .zip(&self.strides)
            .map(|(n, s)| (n - 1) * s)
            .sum::<u64>()
    }
}

/// One algorithm run of a case.
#[derive(Clone, Debug)]
pub struct ResultEntry {
    /// `simple`, `vertical` or `auto`.
    pub algorithm_requested: String,
    /// FlashInfer's rule on this case.
    pub algorithm_used_by_rule: String,
    /// `bit_identical_to`.
    pub bit_identical_to: Vec<String>,
    /// Outputs: `state` (the whole storage after the call) and `out`.
    pub outputs: Vec<TensorDesc>,
}

impl ResultEntry {
    /// The output descriptor `name`.
    pub fn output(&self, name: &str) -> &TensorDesc {
        self.outputs
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("result has no output {name}"))
    }
}

/// One case of the manifest.
#[derive(Clone, Debug)]
pub struct Case {
    /// Identifier.
    pub name: String,
    /// 0 = SR off; otherwise the Philox rounds.
    pub philox_rounds: u32,
    /// Dtypes.
    pub state_dtype: String,
    /// x, z, B, C, out.
    pub input_dtype: String,
    /// dt, dt_bias, D.
    pub weight_dtype: String,
    /// A.
    pub a_dtype: String,
    /// Index tensors.
    pub index_dtype: String,
    /// Sizes.
    pub batch: u64,
    /// Heads.
    pub nheads: u64,
    /// Head dim.
    pub dim: u64,
    /// State size.
    pub dstate: u64,
    /// Groups.
    pub ngroups: u64,
    /// state.size(0).
    pub state_cache_size: u64,
    /// state.stride(0).
    pub state_stride_batch: u64,
    /// Flags.
    pub dt_softplus: bool,
    /// Whether the state is written.
    pub update_state: bool,
    /// `disable_state_update` as passed (the negation of `update_state`).
    pub disable_state_update: bool,
    /// The pad slot id.
    pub pad_slot_id: i64,
    /// The seed (as the int64 in the `rand_seed` tensor), when SR is on.
    pub seed: Option<i64>,
    /// Optional tensors passed.
    pub present: BTreeMap<String, bool>,
    /// Generator seed.
    pub gen_seed: u64,
    /// SMs of the recording device.
    pub num_sms: u64,
    /// Input descriptors.
    pub inputs: Vec<TensorDesc>,
    /// Algorithm runs.
    pub results: Vec<ResultEntry>,
    /// The case's JSON as given (fields of the multi-token path: `expected`, `cu_seqlens`...).
    pub json: Value,
}

impl Case {
    /// The input descriptor `name`, if present.
    pub fn input(&self, name: &str) -> Option<&TensorDesc> {
        self.inputs.iter().find(|t| t.name == name)
    }

    /// Whether optional tensor `name` was passed.
    pub fn is_present(&self, name: &str) -> bool {
        self.present.get(name).copied().unwrap_or(false)
    }
}

/// A parsed manifest plus its bins.
pub struct Manifest {
    /// The raw JSON.
    pub json: Value,
    /// Cases.
    pub cases: Vec<Case>,
    /// `(file, bytes, sha256)` of each bin.
    pub bins: Vec<(String, u64, String)>,
    /// Bin contents by file name.
    pub bin_data: BTreeMap<String, Arc<Vec<u8>>>,
}

fn get<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key)
        .unwrap_or_else(|| panic!("manifest: missing field `{key}` in {}", brief(v)))
}

fn brief(v: &Value) -> String {
    let s = v.to_string();
    s.chars().take(160).collect()
}

fn get_u64(v: &Value, key: &str) -> u64 {
    get(v, key)
        .as_u64()
        .unwrap_or_else(|| panic!("manifest: `{key}` is not a u64 in {}", brief(v)))
}

fn get_i64(v: &Value, key: &str) -> i64 {
    get(v, key)
        .as_i64()
        .unwrap_or_else(|| panic!("manifest: `{key}` is not an i64 in {}", brief(v)))
}

fn get_str(v: &Value, key: &str) -> String {
    get(v, key)
        .as_str()
        .unwrap_or_else(|| panic!("manifest: `{key}` is not a string in {}", brief(v)))
        .to_string()
}

fn get_bool(v: &Value, key: &str) -> bool {
    get(v, key)
        .as_bool()
        .unwrap_or_else(|| panic!("manifest: `{key}` is not a bool in {}", brief(v)))
}

fn u64_list(v: &Value, key: &str) -> Vec<u64> {
    get(v, key)
        .as_array()
        .unwrap_or_else(|| panic!("manifest: `{key}` is not a list"))
        .iter()
        .map(|x| x.as_u64().expect("manifest: list of u64"))
        .collect()
}

/// Parses a seed value that may be stored as an integer (i64 or u64) or a hex string.
fn parse_seed(c: &Value) -> Option<i64> {
    let v = c.get("seed")?;
    if v.is_null() {
        return None;
    }
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    if let Some(u) = v.as_u64() {
        return Some(u as i64);
    }
    let hex = c.get("seed_hex").and_then(Value::as_str)?;
    Some(u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()? as i64)
}

fn parse_tensor(v: &Value) -> TensorDesc {
    let generator = v.get("generator").filter(|g| !g.is_null()).map(|g| {
        (
            get_u64(g, "gen_seed"),
            get_u64(g, "tag"),
            g.get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        )
    });
    let values = v.get("values").filter(|x| !x.is_null()).map(|x| {
        x.as_array()
            .expect("manifest: `values` is a list")
            .iter()
            .map(|e| {
                e.as_i64()
                    .or_else(|| e.as_u64().map(|u| u as i64))
                    .expect("manifest: integer values")
            })
            .collect()
    });
    let blocks = get(v, "blocks")
        .as_array()
        .expect("manifest: `blocks` is a list")
        .iter()
        .map(|b| Block {
            elem_offset: get_u64(b, "elem_offset"),
            elems: get_u64(b, "elems"),
            nbytes: get_u64(b, "nbytes"),
            sha256: get_str(b, "sha256"),
            bin: b.get("bin").and_then(Value::as_str).map(str::to_string),
            byte_offset: b.get("byte_offset").and_then(Value::as_u64),
        })
        .collect();
    TensorDesc {
        name: get_str(v, "name"),
        dtype: get_str(v, "dtype"),
        shape: u64_list(v, "shape"),
        strides: u64_list(v, "strides"),
        storage_elems: get_u64(v, "storage_elems"),
        generator,
        values,
        blocks,
    }
}

/// Parses one case object of a manifest (as [`Manifest`] does for its `cases`).
pub fn parse_case_json(c: &Value) -> Case {
    parse_case(c)
}

fn parse_case(c: &Value) -> Case {
    let present = get(c, "present")
        .as_object()
        .expect("manifest: `present` is an object")
        .iter()
        // The multi-token manifest gives index tensors as "1d" / "2d": present.
        .map(|(k, v)| (k.clone(), v.as_bool().unwrap_or_else(|| v.is_string())))
        .collect();
    let results = get(c, "results")
        .as_array()
        .expect("manifest: `results` is a list")
        .iter()
        .map(|r| ResultEntry {
            algorithm_requested: get_str(r, "algorithm_requested"),
            algorithm_used_by_rule: r
                .get("algorithm_used_by_rule")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            bit_identical_to: r
                .get("bit_identical_to")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            outputs: get(r, "outputs")
                .as_array()
                .expect("manifest: `outputs` is a list")
                .iter()
                .map(parse_tensor)
                .collect(),
        })
        .collect();
    let update_state = c
        .get("update_state")
        .and_then(Value::as_bool)
        .unwrap_or_else(|| !get_bool(c, "disable_state_update"));
    Case {
        name: get_str(c, "name"),
        philox_rounds: get_u64(c, "philox_rounds") as u32,
        state_dtype: get_str(c, "state_dtype"),
        input_dtype: get_str(c, "input_dtype"),
        weight_dtype: get_str(c, "weight_dtype"),
        a_dtype: c
            .get("A_dtype")
            .and_then(Value::as_str)
            .unwrap_or("float32")
            .to_string(),
        index_dtype: c
            .get("index_dtype")
            .and_then(Value::as_str)
            .unwrap_or("int32")
            .to_string(),
        batch: get_u64(c, "batch"),
        nheads: get_u64(c, "nheads"),
        dim: get_u64(c, "dim"),
        dstate: get_u64(c, "dstate"),
        ngroups: get_u64(c, "ngroups"),
        state_cache_size: get_u64(c, "state_cache_size"),
        state_stride_batch: get_u64(c, "state_stride_batch"),
        dt_softplus: get_bool(c, "dt_softplus"),
        update_state,
        disable_state_update: c
            .get("disable_state_update")
            .and_then(Value::as_bool)
            .unwrap_or(!update_state),
        pad_slot_id: get_i64(c, "pad_slot_id"),
        seed: parse_seed(c),
        present,
        gen_seed: get_u64(c, "gen_seed"),
        num_sms: c.get("num_sms").and_then(Value::as_u64).unwrap_or(0),
        inputs: get(c, "inputs")
            .as_array()
            .expect("manifest: `inputs` is a list")
            .iter()
            .map(parse_tensor)
            .collect(),
        results,
        json: c.clone(),
    }
}

/// A storage assembled on the host: the materialised pieces, sorted by element offset
/// (a dense storage is one piece covering everything).
pub struct HostStorage {
    /// dtype name.
    pub dtype: String,
    /// Elements of the whole storage.
    pub storage_elems: u64,
    /// `(elem_offset, bytes)`, sorted, non-overlapping.
    pub pieces: Vec<(u64, Vec<u8>)>,
}

impl HostStorage {
    /// Bytes per element.
    pub fn elem_size(&self) -> usize {
        dtype_size(&self.dtype)
    }

    /// The whole storage as bytes, gaps zero (only for storages that fit in memory).
    pub fn to_dense(&self) -> Vec<u8> {
        let es = self.elem_size();
        let mut v = vec![0u8; self.storage_elems as usize * es];
        for (off, bytes) in &self.pieces {
            let s = *off as usize * es;
            v[s..s + bytes.len()].copy_from_slice(bytes);
        }
        v
    }
}

impl Manifest {
    /// The embedded manifest and bin.
    pub fn embedded() -> Self {
        Self::from_xz(EMBEDDED_MANIFEST, &[("fixtures.bin", EMBEDDED_FIXTURES)])
    }

    /// The multi-token path's data (`tests/data/flashinfer_ssu_mtp/`), embedded (only the
    /// binaries that call this carry it).
    pub fn embedded_mtp() -> Self {
        Self::from_xz(
            include_bytes!("../data/flashinfer_ssu_mtp/manifest.json.xz"),
            &[(
                "fixtures.bin",
                include_bytes!("../data/flashinfer_ssu_mtp/fixtures.bin.xz"),
            )],
        )
    }

    /// The manifest at `path`, with its bins read relative to the manifest's directory. A file
    /// that is absent is read from its xz-compressed copy (`<name>.xz`) when that exists, the
    /// form `tests/data` keeps.
    pub fn from_path(path: &Path) -> Self {
        let text = String::from_utf8(read_maybe_xz(path))
            .unwrap_or_else(|e| panic!("{}: not UTF-8: {e}", path.display()));
        let json: Value = serde_json::from_str(&text).expect("manifest is JSON");
        let dir: PathBuf = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut bins = BTreeMap::new();
        for b in get(&json, "bins").as_array().expect("`bins` is a list") {
            let file = get_str(b, "file");
            let data = read_maybe_xz(&dir.join(&file));
            bins.insert(file, Arc::new(data));
        }
        Self::from_parts(&text, bins)
    }

    /// `MAMBA_SSU_FLASHINFER_MANIFEST` when set, else the embedded copy.
    pub fn from_env_or_embedded() -> Self {
        match std::env::var_os("MAMBA_SSU_FLASHINFER_MANIFEST") {
            Some(p) if !p.is_empty() => {
                eprintln!("manifest: {}", PathBuf::from(&p).display());
                Self::from_path(Path::new(&p))
            }
            _ => Self::embedded(),
        }
    }

    /// A manifest given as text plus the contents of its bins (`(file name, bytes)`).
    pub fn from_text(text: &str, bins: &[(&str, &[u8])]) -> Self {
        let bin_data = bins
            .iter()
            .map(|(name, bytes)| (name.to_string(), Arc::new(bytes.to_vec())))
            .collect();
        Self::from_parts(text, bin_data)
    }

    /// A manifest embedded as `tests/data` keeps it: `manifest.json.xz` and its bins'
    /// `.xz` copies (`(file name the manifest gives, compressed bytes)`), for test binaries
    /// that embed their data with `include_bytes!`.
    pub fn from_xz(text_xz: &[u8], bins_xz: &[(&str, &[u8])]) -> Self {
        let bin_data = bins_xz
            .iter()
            .map(|(name, bytes)| (name.to_string(), Arc::new(unxz(bytes))))
            .collect();
        Self::from_parts(&unxz_text(text_xz), bin_data)
    }

    /// The manifest at the path in environment variable `var` when it is set and not empty
    /// (bins read from its directory), else `fallback()`.
    pub fn from_env_or(var: &str, fallback: impl FnOnce() -> Self) -> Self {
        match std::env::var_os(var) {
            Some(p) if !p.is_empty() => {
                eprintln!("manifest ({var}): {}", PathBuf::from(&p).display());
                Self::from_path(Path::new(&p))
            }
            _ => fallback(),
        }
    }

    fn from_parts(text: &str, bin_data: BTreeMap<String, Arc<Vec<u8>>>) -> Self {
        let json: Value = serde_json::from_str(text).expect("manifest is JSON");
        assert_eq!(
            json.get("format").and_then(Value::as_str),
            Some("flashinfer-ssu-golden"),
            "manifest format"
        );
        assert_eq!(
            json.get("byte_order").and_then(Value::as_str),
            Some("little"),
            "manifest byte order"
        );
        let bins = get(&json, "bins")
            .as_array()
            .expect("`bins` is a list")
            .iter()
            .map(|b| {
                (
                    get_str(b, "file"),
                    get_u64(b, "bytes"),
                    get_str(b, "sha256"),
                )
            })
            .collect();
        let cases = get(&json, "cases")
            .as_array()
            .expect("`cases` is a list")
            .iter()
            .map(parse_case)
            .collect();
        Self {
            json,
            cases,
            bins,
            bin_data,
        }
    }

    /// The bytes of a block that is stored in a bin (`None` for hash-only blocks).
    pub fn block_bytes(&self, b: &Block) -> Option<&[u8]> {
        let bin = b.bin.as_ref()?;
        let data = self
            .bin_data
            .get(bin)
            .unwrap_or_else(|| panic!("block refers to unknown bin {bin}"));
        let off = b.byte_offset.expect("a stored block has a byte_offset") as usize;
        let end = off + b.nbytes as usize;
        assert!(
            end <= data.len(),
            "block [{off}, {end}) beyond the end of {bin} ({} bytes)",
            data.len()
        );
        Some(&data[off..end])
    }

    /// The bytes of an input block: from the bin, else regenerated (generator, or the inline
    /// `values` of index and seed tensors). Panics when a regenerated block's SHA-256 differs
    /// from the manifest's.
    pub fn input_block(&self, t: &TensorDesc, b: &Block) -> Vec<u8> {
        if let Some(bytes) = self.block_bytes(b) {
            return bytes.to_vec();
        }
        let bytes = regenerate_block(t, b).unwrap_or_else(|| {
            panic!(
                "input {} block @{} has no bin and cannot be regenerated",
                t.name, b.elem_offset
            )
        });
        let sha = sha256_hex(&bytes);
        assert_eq!(
            sha, b.sha256,
            "regenerated block of {} @{} differs from the manifest's hash",
            t.name, b.elem_offset
        );
        bytes
    }

    /// The input storage of `t` assembled from its blocks.
    pub fn input_storage(&self, t: &TensorDesc) -> HostStorage {
        let mut pieces: Vec<(u64, Vec<u8>)> = t
            .blocks
            .iter()
            .map(|b| (b.elem_offset, self.input_block(t, b)))
            .collect();
        pieces.sort_by_key(|p| p.0);
        HostStorage {
            dtype: t.dtype.clone(),
            storage_elems: t.storage_elems,
            pieces,
        }
    }
}

/// Regenerates an input block: with the generator when the tensor has one, or from the inline
/// `values` (index tensors, seeds; elements beyond the values are zero).
pub fn regenerate_block(t: &TensorDesc, b: &Block) -> Option<Vec<u8>> {
    if let Some((gen_seed, tag, _)) = &t.generator {
        return Some(gen::block_bytes(
            *gen_seed,
            *tag,
            &t.dtype,
            b.elem_offset,
            b.elems as usize,
        ));
    }
    let values = t.values.as_ref()?;
    if t.storage_elems as usize != values.len() {
        return None;
    }
    let range = b.elem_offset as usize..(b.elem_offset + b.elems) as usize;
    let bytes = match t.dtype.as_str() {
        "int32" => values[range]
            .iter()
            .flat_map(|v| (*v as i32).to_le_bytes())
            .collect(),
        "int64" => values[range].iter().flat_map(|v| v.to_le_bytes()).collect(),
        _ => return None,
    };
    Some(bytes)
}

// ---------------------------------------------------------------------------------------------
// Device storages (cudarc only; the SSU launch adapter lives in `ssu_dev.rs`)
// ---------------------------------------------------------------------------------------------

/// A device buffer of one of the manifest's dtypes (typed, so it can back an SSU tensor).
pub enum DevBuf {
    /// fp16.
    F16(cudarc::driver::CudaSlice<half::f16>),
    /// bf16.
    BF16(cudarc::driver::CudaSlice<half::bf16>),
    /// fp32.
    F32(cudarc::driver::CudaSlice<f32>),
    /// int32.
    I32(cudarc::driver::CudaSlice<i32>),
    /// int64.
    I64(cudarc::driver::CudaSlice<i64>),
    /// int16 (FlashInfer's block-scaled state).
    I16(cudarc::driver::CudaSlice<i16>),
}

/// Applies `$body` to the typed slice inside a [`DevBuf`].
#[macro_export]
macro_rules! with_devbuf {
    ($buf:expr, $s:ident => $body:expr) => {
        match $buf {
            $crate::common::DevBuf::F16($s) => $body,
            $crate::common::DevBuf::BF16($s) => $body,
            $crate::common::DevBuf::F32($s) => $body,
            $crate::common::DevBuf::I32($s) => $body,
            $crate::common::DevBuf::I64($s) => $body,
            $crate::common::DevBuf::I16($s) => $body,
        }
    };
}

impl DevBuf {
    /// Allocates `elems` elements of `dtype` (contents undefined until written).
    pub fn alloc(stream: &Arc<CudaStream>, dtype: &str, elems: usize) -> DevBuf {
        let n = elems.max(1);
        match dtype {
            "float16" => DevBuf::F16(stream.alloc_zeros(n).expect("alloc")),
            "bfloat16" => DevBuf::BF16(stream.alloc_zeros(n).expect("alloc")),
            "float32" => DevBuf::F32(stream.alloc_zeros(n).expect("alloc")),
            "int32" => DevBuf::I32(stream.alloc_zeros(n).expect("alloc")),
            "int64" => DevBuf::I64(stream.alloc_zeros(n).expect("alloc")),
            "int16" => DevBuf::I16(stream.alloc_zeros(n).expect("alloc")),
            other => panic!("no device buffers of {other}"),
        }
    }

    /// Wraps `elems` elements of `dtype` at a device address this crate does not own
    /// (see [`SparseStorage`]); the slice must be leaked, never dropped.
    ///
    /// # Safety
    /// `ptr` must address `elems` elements of `dtype` (mapped or not) that outlive the slice.
    unsafe fn from_raw(stream: &Arc<CudaStream>, dtype: &str, ptr: u64, elems: usize) -> DevBuf {
        match dtype {
            "float16" => DevBuf::F16(stream.upgrade_device_ptr(ptr, elems)),
            "bfloat16" => DevBuf::BF16(stream.upgrade_device_ptr(ptr, elems)),
            "float32" => DevBuf::F32(stream.upgrade_device_ptr(ptr, elems)),
            "int32" => DevBuf::I32(stream.upgrade_device_ptr(ptr, elems)),
            "int64" => DevBuf::I64(stream.upgrade_device_ptr(ptr, elems)),
            "int16" => DevBuf::I16(stream.upgrade_device_ptr(ptr, elems)),
            other => panic!("no device buffers of {other}"),
        }
    }

    /// The buffer's dtype name.
    pub fn dtype(&self) -> &'static str {
        match self {
            DevBuf::F16(_) => "float16",
            DevBuf::BF16(_) => "bfloat16",
            DevBuf::F32(_) => "float32",
            DevBuf::I32(_) => "int32",
            DevBuf::I64(_) => "int64",
            DevBuf::I16(_) => "int16",
        }
    }

    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        with_devbuf!(self, s => s.len())
    }

    /// Bytes per element.
    pub fn elem_size(&self) -> usize {
        dtype_size(self.dtype())
    }

    /// The device address of element `elem`, for raw byte copies.
    fn raw_ptr(&mut self, stream: &CudaStream, elem: usize) -> u64 {
        use cudarc::driver::DevicePtrMut;
        let es = self.elem_size() as u64;
        // The guard only records an event for cudarc's tracking; the copies below are
        // enqueued on the same stream, so ordering is kept without it.
        let base = with_devbuf!(self, s => s.device_ptr_mut(stream).0);
        base + elem as u64 * es
    }

    /// Uploads `bytes` (little-endian elements) at element `elem` on `stream`.
    pub fn write_bytes(&mut self, stream: &CudaStream, elem: usize, bytes: &[u8]) {
        let es = self.elem_size();
        assert_eq!(bytes.len() % es, 0);
        assert!(
            elem + bytes.len() / es <= self.len(),
            "write past the buffer"
        );
        if bytes.is_empty() {
            return;
        }
        let dst = self.raw_ptr(stream, elem);
        // SAFETY: `dst..dst+len` lies inside this live allocation (checked above); the copy
        // is synchronous with respect to the host buffer (stream synchronised right after).
        unsafe {
            cudarc::driver::result::memcpy_htod_async(dst, bytes, stream.cu_stream())
                .expect("htod copy");
        }
        stream.synchronize().expect("sync after upload");
    }

    /// Downloads elements `[elem, elem + n)` as little-endian bytes.
    pub fn read_bytes(&mut self, stream: &CudaStream, elem: usize, n: usize) -> Vec<u8> {
        assert!(elem + n <= self.len(), "read past the buffer");
        let mut out = vec![0u8; n * self.elem_size()];
        if n == 0 {
            return out;
        }
        stream.synchronize().expect("sync before download");
        let src = self.raw_ptr(stream, elem);
        // SAFETY: `src..src+len` lies inside this live allocation; the stream is synchronised
        // before `out` is read.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut out, src, stream.cu_stream())
                .expect("dtoh copy");
        }
        stream.synchronize().expect("sync after download");
        out
    }

    /// Sets every byte of elements `[elem, elem + n)` to `byte`.
    pub fn fill_bytes(&mut self, stream: &CudaStream, elem: usize, n: usize, byte: u8) {
        assert!(elem + n <= self.len(), "fill past the buffer");
        if n == 0 {
            return;
        }
        let bytes = n * self.elem_size();
        let dst = self.raw_ptr(stream, elem);
        // SAFETY: `dst..dst+bytes` lies inside this live allocation.
        unsafe {
            cudarc::driver::result::memset_d8_async(dst, byte, bytes, stream.cu_stream())
                .expect("memset");
        }
        stream.synchronize().expect("sync after fill");
    }

    /// A buffer holding `bytes` (little-endian elements of `dtype`).
    pub fn from_bytes(stream: &Arc<CudaStream>, dtype: &str, bytes: &[u8]) -> DevBuf {
        let mut b = DevBuf::alloc(stream, dtype, bytes.len() / dtype_size(dtype));
        b.write_bytes(stream, 0, bytes);
        b
    }

    /// The whole buffer as bytes.
    pub fn download_all(&mut self, stream: &CudaStream) -> Vec<u8> {
        let n = self.len();
        self.read_bytes(stream, 0, n)
    }
}

/// Storages above this size are mapped sparsely (only the pages of their blocks).
pub const DENSE_LIMIT_BYTES: u64 = 8 << 30;

/// A device storage of a manifest tensor: a dense allocation of `storage_elems`, or for huge
/// sparse storages (a state with a slot stride near 2^32) a reserved virtual range of the whole
/// storage with physical memory mapped only under the materialised blocks (CUDA virtual memory
/// management), so the kernel sees the real addresses and strides without 8+ GiB allocations.
/// An access outside the mapped pages faults (and fails the test).
pub struct SparseStorage {
    /// The buffer (a leaked view over the reserved range when sparse).
    pub buf: Option<DevBuf>,
    /// The mapped element ranges (the whole storage when dense).
    pub mapped: Vec<(u64, u64)>,
    vmm: Option<Vmm>,
    stream: Arc<CudaStream>,
}

struct Vmm {
    base: u64,
    size: usize,
    maps: Vec<(
        u64,
        usize,
        cudarc::driver::sys::CUmemGenericAllocationHandle,
    )>,
}

fn cu(r: cudarc::driver::sys::CUresult, what: &str) {
    assert_eq!(
        r,
        cudarc::driver::sys::CUresult::CUDA_SUCCESS,
        "{what} failed: {r:?}"
    );
}

impl SparseStorage {
    /// Allocates the storage of `t` and uploads `host` into it (gaps zero).
    pub fn upload(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        t: &TensorDesc,
        host: &HostStorage,
    ) -> SparseStorage {
        let es = t.elem_size() as u64;
        let mut s = if t.storage_bytes() <= DENSE_LIMIT_BYTES {
            let buf = DevBuf::alloc(stream, &t.dtype, t.storage_elems as usize);
            SparseStorage {
                buf: Some(buf),
                mapped: vec![(0, t.storage_elems)],
                vmm: None,
                stream: stream.clone(),
            }
        } else {
            let ranges: Vec<(u64, u64)> = host
                .pieces
                .iter()
                .map(|(o, b)| (*o * es, *o * es + b.len() as u64))
                .collect();
            Self::sparse(ctx, stream, &t.dtype, t.storage_elems, &ranges)
        };
        let ranges = s.mapped.clone();
        let buf = s.buf.as_mut().unwrap();
        for (lo, hi) in ranges {
            buf.fill_bytes(stream, lo as usize, (hi - lo) as usize, 0);
        }
        for (off, bytes) in &host.pieces {
            buf.write_bytes(stream, *off as usize, bytes);
        }
        s
    }

    /// A sparse storage of `elems` elements of `dtype` with physical memory under
    /// `byte_ranges` only (zero-filled by the caller).
    pub fn sparse(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        dtype: &str,
        elems: u64,
        byte_ranges: &[(u64, u64)],
    ) -> SparseStorage {
        use cudarc::driver::sys;
        ctx.bind_to_thread().expect("bind context");
        let es = dtype_size(dtype) as u64;
        // SAFETY: plain-data driver structs; all-zero is a valid starting value.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = ctx.ordinal() as i32;
        let mut gran = 0usize;
        // SAFETY: valid pointers to live locals.
        unsafe {
            cu(
                sys::cuMemGetAllocationGranularity(
                    &mut gran,
                    &prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
                ),
                "cuMemGetAllocationGranularity",
            );
        }
        let g = gran.max(1) as u64;
        let size = (elems * es).div_ceil(g) * g;
        let mut base = 0u64;
        // SAFETY: reserves address space only.
        unsafe {
            cu(
                sys::cuMemAddressReserve(&mut base, size as usize, g as usize, 0, 0),
                "cuMemAddressReserve",
            );
        }
        // Page-aligned ranges covering the blocks, merged.
        let mut pages: Vec<(u64, u64)> = byte_ranges
            .iter()
            .map(|(lo, hi)| (lo / g * g, hi.div_ceil(g) * g))
            .collect();
        pages.sort();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (lo, hi) in pages {
            match merged.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        let mut vmm = Vmm {
            base,
            size: size as usize,
            maps: Vec::new(),
        };
        // SAFETY: all-zero is a valid access descriptor to fill in.
        let mut access: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
        access.location = prop.location;
        access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        for (lo, hi) in &merged {
            let len = (hi - lo) as usize;
            let mut h: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: maps fresh physical memory into our own reserved range.
            unsafe {
                cu(sys::cuMemCreate(&mut h, len, &prop, 0), "cuMemCreate");
                cu(sys::cuMemMap(base + lo, len, 0, h, 0), "cuMemMap");
                cu(
                    sys::cuMemSetAccess(base + lo, len, &access, 1),
                    "cuMemSetAccess",
                );
            }
            vmm.maps.push((base + lo, len, h));
        }
        let mapped = merged
            .iter()
            .map(|(lo, hi)| (lo / es, (hi / es).min(elems)))
            .collect();
        eprintln!(
            "  sparse storage: {:.1} GiB reserved, {:.1} MiB mapped in {} ranges",
            size as f64 / (1u64 << 30) as f64,
            merged.iter().map(|(l, h)| h - l).sum::<u64>() as f64 / (1u64 << 20) as f64,
            merged.len()
        );
        // SAFETY: the reserved range holds `elems` elements; the slice is leaked in Drop.
        let buf = unsafe { DevBuf::from_raw(stream, dtype, base, elems as usize) };
        SparseStorage {
            buf: Some(buf),
            mapped,
            vmm: Some(vmm),
            stream: stream.clone(),
        }
    }

    /// Whether the storage is mapped sparsely.
    pub fn is_sparse(&self) -> bool {
        self.vmm.is_some()
    }

    /// The buffer.
    pub fn buf(&self) -> &DevBuf {
        self.buf.as_ref().unwrap()
    }

    /// The buffer, mutably.
    pub fn buf_mut(&mut self) -> &mut DevBuf {
        self.buf.as_mut().unwrap()
    }

    /// Downloads every mapped range: `(elem_offset, bytes)`.
    pub fn download(&mut self) -> Vec<(u64, Vec<u8>)> {
        let stream = self.stream.clone();
        let ranges = self.mapped.clone();
        let buf = self.buf_mut();
        ranges
            .into_iter()
            .map(|(lo, hi)| (lo, buf.read_bytes(&stream, lo as usize, (hi - lo) as usize)))
            .collect()
    }
}

impl Drop for SparseStorage {
    fn drop(&mut self) {
        let Some(vmm) = self.vmm.take() else {
            return;
        };
        let _ = self.stream.synchronize();
        if let Some(buf) = self.buf.take() {
            with_devbuf!(buf, s => { s.leak(); });
        }
        use cudarc::driver::sys;
        // SAFETY: unmaps and frees only what `sparse` mapped and reserved, after the stream
        // (the only user) finished and the non-owning slice was leaked.
        unsafe {
            for (ptr, len, h) in &vmm.maps {
                let _ = sys::cuMemUnmap(*ptr, *len);
                let _ = sys::cuMemRelease(*h);
            }
            let _ = sys::cuMemAddressFree(vmm.base, vmm.size);
        }
    }
}

/// The stochastic-rounding conversion a recorded case was made with: the case's `sr_rule`
/// field (`"0.7.2"` or `"0.7.4"`) when present, else the FlashInfer release in the manifest's
/// `environment.flashinfer` (its leading `X.Y.Z`): 0.7.4 and later use 0.7.4's conversion,
/// earlier ones (and a missing field) 0.7.2's. A manifest recorded with 0.7.4 is thus checked
/// by the same test binaries.
pub fn recorded_sr_rule(manifest: &Value, case: &Value) -> mamba_ssu::ssu::SrRule {
    use mamba_ssu::ssu::SrRule;
    let version = case
        .get("sr_rule")
        .and_then(Value::as_str)
        .or_else(|| {
            manifest
                .get("environment")
                .and_then(|e| e.get("flashinfer"))
                .and_then(Value::as_str)
        })
        .unwrap_or("");
    let nums: Vec<u64> = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|t| !t.is_empty())
        .take(3)
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    match nums.as_slice() {
        [a, b, c, ..] if (*a, *b, *c) >= (0, 7, 4) => SrRule::V074,
        [a, b] if (*a, *b) > (0, 7) => SrRule::V074,
        _ => SrRule::V072,
    }
}

/// The test problems' random source: a splitmix sequence over the input generator's mix.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(gen::GOLDEN);
        gen::mix64(self.0)
    }
    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// Shuffles `v` in place (Fisher-Yates, from the last element down).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// The seed of a randomised test run: `MAMBA_SSU_TEST_SEED` when set, else the clock; printed
/// so that a failure can be replayed.
pub fn run_seed() -> u64 {
    let seed = std::env::var("MAMBA_SSU_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("MAMBA_SSU_TEST_SEED={seed}");
    seed
}
