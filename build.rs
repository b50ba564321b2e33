//! Build script: compiles every `.cu` under `csrc/` with nvcc (through `cc`) into the static
//! library `libmamba_ssu.a`, generates the Rust FFI from `csrc/include/mamba_ssu.h` with bindgen,
//! and links the C demo program that the C-ABI test runs.
//!
//! Environment (each one is a `rerun-if-env-changed`):
//! - `MAMBA_SSU_CUDA_ROOT`: the CUDA toolkit root (with `bin/nvcc`); checked first.
//! - `CUDA_PATH`, `CUDA_HOME`: the usual toolkit roots; then `nvcc` on `PATH`, `/usr/local/cuda`,
//!   and last the project's own cached install (`scripts/setup.sh`).
//! - `MAMBA_SSU_CUDA_ARCHS`: the GPU targets to build machine code (SASS) for, `;`, `,` or space
//!   separated (default [`DEFAULT_ARCHS`]: `80;86;89;90;100a;103a;120`). A narrower list builds
//!   faster (tests on one GPU: `90`); the published library is built with the default.
//! - `MAMBA_SSU_CUDA_PTX`: the target of the PTX embedded for forward compatibility (default
//!   [`DEFAULT_PTX`]: `90`), or `none`.
//! - `MAMBA_SSU_CUDA_CACHE`: where `scripts/setup.sh` installed the toolkit.
//! - `MAMBA_SSU_NVCC_FLAGS`: extra nvcc flags, space separated (tuning experiments, e.g.
//!   `-DMAMBA_SSU_RPW_WARPS_PER_SM=64`).
//! - `MAMBA_SSU_F16_INPUT_KERNELS`: unset or `1` (the default) builds the compiled-in kernels
//!   for fp16 inputs and weights over an fp16, bf16 or fp32 state
//!   (`csrc/ssu_with_f16_inputs.cu`), routes such calls to them, and sets the Rust cfg
//!   `f16_input_kernels` (the tests of those kernels); `0` leaves them out (a smaller library
//!   and a faster build): such calls then run the run-time kernels, 2–4x slower.
//! - `MAMBA_SSU_NVCC_CACHE`: a directory (absolute path) in which to keep built static libraries,
//!   one per key: the nvcc command line `cc` would run (targets, flags, `-D`s), the toolkit's
//!   `nvcc --version`, `NVCC_PREPEND_FLAGS`/`NVCC_APPEND_FLAGS`, the target triple and the
//!   contents of every file under `csrc/`. A build whose key is there copies that library instead
//!   of running nvcc; cargo's profiles (check, clippy, doc, test, release, `cargo package`'s
//!   verification) all compile the same nvcc command, so one compilation serves them all.
//!   Unset (the default): no cache, every build script run compiles. `scripts/test.sh` sets it
//!   to `target/nvcc-cache`. Entries are never pruned: remove the directory to clear it.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The architecture axis: the GPU targets the static library carries machine code (SASS) for.
/// One entry per family engines serve Mamba-2 models on; a cubin also runs on later minor
/// versions of its major (sm_86 on sm_87, sm_120 on sm_121), an `a` cubin only on its own.
/// - `80`: A100, A30 (no `max.NaN.xorsign.abs.f16x2`, no bulk L2 prefetch: `csrc/arch.h`).
/// - `86`, `89`: A10, A40, RTX 30 (sm_86), L4, L40S, RTX 40 (sm_89).
/// - `90`: H100, H200, GH200: the tuned target (`csrc/tuning.h`).
/// - `100a`, `103a`: B200, GB200 (sm_100) and B300, GB300 (sm_103), architecture-specific so
///   that stochastic rounding takes the hardware `cvt.rs` conversion, as FlashInfer does there.
/// - `120`: RTX PRO 6000 Blackwell, RTX 50 (sm_120), DGX Spark (sm_121).
///
/// Overridden by `MAMBA_SSU_CUDA_ARCHS`.
const DEFAULT_ARCHS: &str = "80;86;89;90;100a;103a;120";

/// The PTX target embedded beside the machine code: `compute_90`, which every family from sm_90
/// on can JIT-compile (Jetson Thor's sm_110, and families newer than the list), and which the
/// H200 runs when `CUDA_FORCE_PTX_JIT=1` (the test of that path). The families below sm_90 all
/// have machine code. Overridden by `MAMBA_SSU_CUDA_PTX` (`none`: no PTX).
const DEFAULT_PTX: &str = "90";

const SETUP_HINT: &str = "run `bash scripts/setup.sh` (installs the pinned CUDA 13.0 compiler \
wheels into ~/.cache/mamba-ssu), or set MAMBA_SSU_CUDA_ROOT to a CUDA toolkit root";

fn main() {
    for var in [
        "MAMBA_SSU_CUDA_ROOT",
        "CUDA_PATH",
        "CUDA_HOME",
        "MAMBA_SSU_CUDA_ARCHS",
        "MAMBA_SSU_CUDA_PTX",
        "MAMBA_SSU_CUDA_CACHE",
        "MAMBA_SSU_NVCC_FLAGS",
        "MAMBA_SSU_F16_INPUT_KERNELS",
        "MAMBA_SSU_NVCC_CACHE",
        "NVCC_PREPEND_FLAGS",
        "NVCC_APPEND_FLAGS",
        "PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo::rustc-check-cfg=cfg(f16_input_kernels)");
    let f16_input_kernels = match env::var("MAMBA_SSU_F16_INPUT_KERNELS").as_deref() {
        Ok("1") | Ok("") | Err(_) => true,
        Ok("0") => false,
        Ok(other) => {
            eprintln!("error: MAMBA_SSU_F16_INPUT_KERNELS: expected 1 or 0, got {other:?}");
            std::process::exit(1);
        }
    };
    if f16_input_kernels {
        println!("cargo:rustc-cfg=f16_input_kernels");
    }

    let root = match find_cuda_root() {
        Some(r) => r,
        None => {
            eprintln!("error: no CUDA compiler (nvcc) found; {SETUP_HINT}");
            std::process::exit(1);
        }
    };
    let nvcc = root.join("bin").join("nvcc");
    let include = root.join("include");
    let lib_dir = ["lib64", "lib"]
        .iter()
        .map(|d| root.join(d))
        .find(|d| d.join("libcudart_static.a").exists())
        .unwrap_or_else(|| {
            eprintln!(
                "error: libcudart_static.a not found under {}/lib64 or /lib; {SETUP_HINT}",
                root.display()
            );
            std::process::exit(1);
        });

    let sources = cuda_sources(Path::new("csrc"));
    let archs = cuda_targets("MAMBA_SSU_CUDA_ARCHS", DEFAULT_ARCHS);
    let ptx = match env::var("MAMBA_SSU_CUDA_PTX").as_deref() {
        Ok("none") => Vec::new(),
        _ => cuda_targets("MAMBA_SSU_CUDA_PTX", DEFAULT_PTX),
    };

    // cc finds nvcc through NVCC (setting it as the compiler would make cc treat it as gcc).
    env::set_var("NVCC", &nvcc);
    let mut build = cc::Build::new();
    build
        .cuda(true)
        .cudart("static")
        .include("csrc")
        .include(&include)
        .flag("-std=c++17")
        .flag("-O3")
        // The SSU math pins every fp32 operation explicitly; flush-to-zero matches FlashInfer's
        // fast-math build, and no implicit contraction may change a rounding.
        .flag("-ftz=true")
        .flag("-fmad=false")
        .flag("-Xcompiler=-fPIC")
        // The targets' device compilations in parallel threads; every image in the fat binaries
        // (the objects' and the device link's) compressed.
        .flag("-t0")
        .flag("-Xfatbin=-compress-all")
        .warnings(false)
        .opt_level_str("3")
        .debug(false);
    for arch in &archs {
        build.flag(format!("-gencode=arch=compute_{arch},code=sm_{arch}"));
    }
    for arch in &ptx {
        build.flag(format!("-gencode=arch=compute_{arch},code=compute_{arch}"));
    }
    build.flag(if f16_input_kernels {
        "-DMAMBA_SSU_F16_INPUT_KERNELS=1"
    } else {
        "-DMAMBA_SSU_F16_INPUT_KERNELS=0"
    });
    if let Ok(extra) = env::var("MAMBA_SSU_NVCC_FLAGS") {
        for flag in extra.split_whitespace() {
            build.flag(flag);
        }
    }
    for src in &sources {
        if src.extension().is_some_and(|e| e == "cu") {
            build.file(src);
        }
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    compile_library(&build, &nvcc, &sources, &out_dir);

    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    for lib in ["dl", "rt", "pthread"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    // For crates that link the C library themselves (`links = "mamba_ssu"`):
    // DEP_MAMBA_SSU_LIB_DIR, DEP_MAMBA_SSU_INCLUDE, DEP_MAMBA_SSU_CUDART_DIR.
    println!("cargo:lib_dir={}", out_dir.display());
    println!(
        "cargo:include={}",
        Path::new("csrc/include").canonicalize().unwrap().display()
    );
    println!("cargo:cudart_dir={}", lib_dir.display());
    println!(
        "cargo:rustc-env=MAMBA_SSU_STATIC_LIB_DIR={}",
        out_dir.display()
    );
    println!(
        "cargo:rustc-env=MAMBA_SSU_CUDART_LIB_DIR={}",
        lib_dir.display()
    );

    generate_bindings(&out_dir);
    for (name, env_var) in [
        ("seeds_demo", "MAMBA_SSU_C_DEMO"),
        ("prefetch_demo", "MAMBA_SSU_C_PREFETCH_DEMO"),
    ] {
        link_c_demo(name, env_var, &out_dir, &include, &lib_dir);
    }
}

/// Builds `libmamba_ssu.a` into `out_dir` with `build`, or copies it from the cache of
/// `MAMBA_SSU_NVCC_CACHE` where that holds a library built from the same key (module docs), and
/// prints the link lines `cc` prints. A cache that cannot be read or written only costs the
/// compilation (a `cargo:warning` says why).
fn compile_library(build: &cc::Build, nvcc: &Path, sources: &[PathBuf], out_dir: &Path) {
    let entry = env::var_os("MAMBA_SSU_NVCC_CACHE")
        .filter(|d| !d.is_empty())
        .map(|dir| PathBuf::from(dir).join(format!("{}.a", cache_key(build, nvcc, sources))));
    let lib = out_dir.join("libmamba_ssu.a");
    if let Some(entry) = entry.as_ref().filter(|e| e.is_file()) {
        match std::fs::copy(entry, &lib) {
            Ok(_) => {
                // What `cc::Build::compile` prints for a CUDA build with a static cudart (the
                // toolkit's library directory is printed by the caller).
                println!("cargo:rustc-link-lib=static=mamba_ssu");
                println!("cargo:rustc-link-search=native={}", out_dir.display());
                println!("cargo:rustc-link-lib=stdc++");
                println!("cargo:rustc-link-lib=cudart_static");
                return;
            }
            Err(e) => println!(
                "cargo:warning=MAMBA_SSU_NVCC_CACHE: copying {} failed ({e}); compiling",
                entry.display()
            ),
        }
    }
    build.compile("mamba_ssu");
    if let Some(entry) = entry {
        // Written under a temporary name and renamed: a concurrent build never reads half a file.
        let tmp = entry.with_extension(format!("tmp{}", std::process::id()));
        let stored = entry
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::copy(&lib, &tmp))
            .and_then(|_| std::fs::rename(&tmp, &entry));
        if let Err(e) = stored {
            let _ = std::fs::remove_file(&tmp);
            println!(
                "cargo:warning=MAMBA_SSU_NVCC_CACHE: storing {} failed ({e})",
                entry.display()
            );
        }
    }
}

/// The cache key of a library build (module docs, `MAMBA_SSU_NVCC_CACHE`): 128 bits as hex.
fn cache_key(build: &cc::Build, nvcc: &Path, sources: &[PathBuf]) -> String {
    use std::hash::{DefaultHasher, Hasher};
    let version = Command::new(nvcc)
        .arg("--version")
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    let mut text: Vec<u8> = Vec::new();
    let mut field = |bytes: &[u8]| {
        text.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        text.extend_from_slice(bytes);
    };
    field(b"mamba-ssu nvcc cache 1");
    // The compiler and its arguments; not `to_command()`'s environment, which holds OUT_DIR.
    let tool = build.get_compiler();
    field(tool.path().as_os_str().as_encoded_bytes());
    for arg in tool.args() {
        field(arg.as_encoded_bytes());
    }
    field(&version);
    for var in ["NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "TARGET"] {
        field(env::var(var).unwrap_or_default().as_bytes());
    }
    for src in sources {
        field(src.to_string_lossy().as_bytes());
        field(&std::fs::read(src).unwrap_or_else(|e| panic!("reading {src:?}: {e}")));
    }
    // Two digests of the same bytes under different prefixes with std's DefaultHasher (fixed
    // keys; its algorithm may change between Rust releases, which can only miss the cache).
    let digest = |salt: u8| {
        let mut h = DefaultHasher::new();
        h.write_u8(salt);
        h.write(&text);
        h.finish()
    };
    format!("{:016x}{:016x}", digest(1), digest(2))
}

/// The first toolkit root with an executable `bin/nvcc`, in the documented order.
fn find_cuda_root() -> Option<PathBuf> {
    let has_nvcc = |p: &Path| p.join("bin").join("nvcc").is_file();
    let mut candidates: Vec<PathBuf> = Vec::new();
    for var in ["MAMBA_SSU_CUDA_ROOT", "CUDA_PATH", "CUDA_HOME"] {
        if let Some(v) = env::var_os(var).filter(|v| !v.is_empty()) {
            candidates.push(PathBuf::from(v));
        }
    }
    if let Some(path) = env::var_os("PATH") {
        for dir in env::split_paths(&path) {
            if dir.join("nvcc").is_file() {
                if let Some(root) = dir.parent() {
                    candidates.push(root.to_path_buf());
                }
            }
        }
    }
    candidates.push(PathBuf::from("/usr/local/cuda"));
    let cache = env::var_os("MAMBA_SSU_CUDA_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            env::var_os("XDG_CACHE_HOME")
                .map(|c| PathBuf::from(c).join("mamba-ssu/cuda-13.0"))
                .or_else(|| {
                    env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/mamba-ssu/cuda-13.0"))
                })
        });
    if let Some(cache) = cache {
        candidates.push(cache.join("site/nvidia/cu13"));
    }
    candidates.into_iter().find(|c| has_nvcc(c))
}

/// Every `.cu`, `.cuh` and `.h` under `dir`, sorted; each one is a `rerun-if-changed`.
fn cuda_sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        println!("cargo:rerun-if-changed={}", d.display());
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("reading {d:?}: {e}"));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .extension()
                .is_some_and(|e| e == "cu" || e == "cuh" || e == "h" || e == "c")
            {
                println!("cargo:rerun-if-changed={}", path.display());
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The targets in environment variable `var` (unset or empty: `default`): compute capabilities such as
/// `90` or `100a` (an optional `sm_` / `compute_` prefix is dropped), validated.
fn cuda_targets(var: &str, default: &str) -> Vec<String> {
    let spec = env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_string());
    let archs: Vec<String> = spec
        .split([';', ',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_start_matches("sm_")
                .trim_start_matches("compute_")
                .to_string()
        })
        .collect();
    let valid = |a: &String| {
        let digits = a.trim_end_matches(['a', 'f']);
        digits.len() >= 2
            && digits.len() + 1 >= a.len()
            && digits.chars().all(|c| c.is_ascii_digit())
    };
    if archs.is_empty() || !archs.iter().all(valid) {
        eprintln!("error: {var}={spec:?}: expected targets such as `90` or `80;90;100a`");
        std::process::exit(1);
    }
    archs
}

fn generate_bindings(out_dir: &Path) {
    let bindings = bindgen::Builder::default()
        .header("csrc/include/mamba_ssu.h")
        .allowlist_function("mamba_ssu_.*")
        .allowlist_type("mamba_ssu_.*")
        .allowlist_var("MAMBA_SSU_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| {
            eprintln!("error: bindgen over csrc/include/mamba_ssu.h failed: {e}");
            std::process::exit(1);
        });
    bindings
        .write_to_file(out_dir.join("mamba_ssu_bindings.rs"))
        .expect("writing the bindings");
}

/// Links `examples/c/<name>.c` against the static library exactly as the README tells C users
/// to, so the documented link line is exercised by every build; `tests/c_api.rs` embeds and
/// runs the result (its path is in the env var `env_var` at compile time).
fn link_c_demo(name: &str, env_var: &str, out_dir: &Path, cuda_include: &Path, cudart_dir: &Path) {
    let src = PathBuf::from(format!("examples/c/{name}.c"));
    println!("cargo:rerun-if-changed={}", src.display());
    let exe = out_dir.join(name);
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let status = Command::new(compiler.path())
        .arg("-std=c11")
        .arg("-O2")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-Icsrc/include")
        .arg(format!("-I{}", cuda_include.display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", out_dir.display()))
        .arg(format!("-L{}", cudart_dir.display()))
        .args([
            "-lmamba_ssu",
            "-lcudart_static",
            "-lstdc++",
            "-ldl",
            "-lpthread",
            "-lrt",
        ])
        .status()
        .expect("running the C compiler for the C demos");
    if !status.success() {
        eprintln!(
            "error: linking {} against libmamba_ssu.a failed",
            src.display()
        );
        std::process::exit(1);
    }
    println!("cargo:rustc-env={env_var}={}", exe.display());
}
