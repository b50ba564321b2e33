//! The C ABI from C: `examples/c/seeds_demo.c` and `examples/c/prefetch_demo.c`, linked by
//! build.rs against `libmamba_ssu.a` exactly as the README tells C users to, are embedded here
//! and run. On a GPU host they must print the torch-identical seeds; without a GPU they must say
//! so (exit 77).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

use mamba_ssu::philox::torch_seeds;

const DEMO: &[u8] = include_bytes!(env!("MAMBA_SSU_C_DEMO"));
const PREFETCH_DEMO: &[u8] = include_bytes!(env!("MAMBA_SSU_C_PREFETCH_DEMO"));

/// The embedded programs, written to a temporary folder once per process, both inside one
/// initialisation: no test spawns a process while a file is still open for writing (a child
/// forked meanwhile would inherit the descriptor and make the exec fail with ETXTBSY).
fn programs() -> &'static (PathBuf, PathBuf) {
    static PATHS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PATHS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mamba-ssu-c-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            path
        };
        (
            write("seeds_demo", DEMO),
            write("prefetch_demo", PREFETCH_DEMO),
        )
    })
}

/// Runs `program`, retrying briefly if the kernel still reports the file busy (another test
/// binary's fork may hold a descriptor for a moment).
fn spawn(program: &PathBuf, args: &[&str]) -> Output {
    for attempt in 0.. {
        match Command::new(program).args(args).output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && attempt < 50 => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.expect("running a C demo"),
        }
    }
    unreachable!()
}

fn run(args: &[&str]) -> Output {
    spawn(&programs().0, args)
}

/// A stale runtime error left on the thread before a launch (the demo's
/// MAMBA_SSU_DEMO_STALE_ERROR=1: cudaSetDevice of a missing device) does not turn the
/// successful draw into a reported failure: the output is exactly the draws.
#[test]
fn stale_runtime_error_is_not_reported_against_a_launch() {
    let out = Command::new(&programs().0)
        .args(["42", "0", "40"])
        .env("MAMBA_SSU_DEMO_STALE_ERROR", "1")
        .output()
        .expect("running the C demo");
    if let Some(v) = demo_json(&out, "the C demo with a stale error") {
        assert_eq!(draws_of(&v), torch_seeds(42, 0, 40));
    }
}

/// The demo's JSON on exit code 0; `None` when it found no CUDA device (77; a failure under
/// MAMBA_SSU_REQUIRE_GPU=1); a panic with its stderr on any other exit.
fn demo_json(out: &Output, what: &str) -> Option<serde_json::Value> {
    match out.status.code() {
        Some(77) => {
            assert!(
                !common::gpu_required(),
                "MAMBA_SSU_REQUIRE_GPU=1 but {what} found no CUDA device"
            );
            eprintln!("skipped: {what} found no CUDA device");
            None
        }
        Some(0) => Some(serde_json::from_slice(&out.stdout).unwrap()),
        other => panic!(
            "{what} exited {other:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The `draws` array of the demo's JSON.
fn draws_of(v: &serde_json::Value) -> Vec<u64> {
    v["draws"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn run_prefetch(args: &[&str]) -> Output {
    spawn(&programs().1, args)
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &[][..],
        &["1", "0"][..],
        &["x", "0", "4"][..],
        &["1", "0", "0"][..],
        &["1", "-4", "4"][..],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "args {args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
    }
}

#[test]
fn c_program_draws_torch_seeds_or_reports_no_gpu() {
    let cases: [(u64, u64, usize); 3] = [(42, 0, 40), (u64::MAX, (1 << 34) - 8, 5), (2024, 12, 1)];
    for (seed, offset, n) in cases {
        let out = run(&[&seed.to_string(), &format!("{offset:#x}"), &n.to_string()]);
        let Some(v) = demo_json(&out, "the C demo") else {
            return;
        };
        assert_eq!(draws_of(&v), torch_seeds(seed, offset, n));
        assert_eq!(v["seed"].as_u64(), Some(seed));
        assert_eq!(v["offset_after"].as_u64(), Some(offset + 4 * n as u64));
    }
}

/// The prefetcher driven from C: N = 40 layers prefetched, 3 more served inline, all equal to
/// 43 consecutive stock draws, the generator advanced by 4 per seed.
#[test]
fn c_program_drives_the_prefetcher() {
    for (seed, offset, n, layers) in [(42u64, 0u64, 40usize, 43usize), (u64::MAX, 1 << 34, 8, 8)] {
        let out = run_prefetch(&[
            &seed.to_string(),
            &offset.to_string(),
            &n.to_string(),
            &layers.to_string(),
        ]);
        match out.status.code() {
            Some(77) => {
                assert!(
                    !common::gpu_required(),
                    "MAMBA_SSU_REQUIRE_GPU=1 but the C prefetch demo found no CUDA device"
                );
                eprintln!("skipped: the C prefetch demo found no CUDA device");
                return;
            }
            Some(0) => {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let draws: Vec<u64> = v["draws"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect();
                assert_eq!(draws, torch_seeds(seed, offset, layers));
                assert_eq!(
                    v["offset_after"].as_u64(),
                    Some(offset.wrapping_add(4 * layers as u64))
                );
                assert_eq!(v["prefetched"].as_u64(), Some(n.min(layers) as u64));
                assert_eq!(
                    v["fallback"].as_u64(),
                    Some(layers.saturating_sub(n) as u64)
                );
            }
            other => panic!(
                "C prefetch demo exited {other:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}

/// A fused forward driven from C through the one contract: each layer's seed from
/// `mamba_ssu_prefetcher_derive_seed`, consumed by one `mamba_ssu_launch`, whose kernel stores
/// the next layer's seed in the program's own links buffer. The links hold the stock draws of
/// layers 1 .. min(N, LAYERS) - 1, those layers read them (the rest derive their own seed), the
/// generator advances 4 per layer; a request whose predecessor was never launched is refused.
#[test]
fn c_program_chains_fused_seeds_through_mamba_ssu_launch() {
    for (seed, offset, n, layers) in [(42u64, 8u64, 8usize, 11usize), (7, 1 << 34, 40, 5)] {
        let out = run_prefetch(&[
            &seed.to_string(),
            &offset.to_string(),
            &n.to_string(),
            &layers.to_string(),
            "fused",
        ]);
        let Some(v) = demo_json(&out, "the C prefetch demo (fused)") else {
            return;
        };
        let chained = n.min(layers) - 1;
        let links: Vec<u64> = v["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(links, torch_seeds(seed, offset + 4, chained));
        assert_eq!(v["offset_after"].as_u64(), Some(offset + 4 * layers as u64));
        assert_eq!(v["prefetched"].as_u64(), Some(chained as u64));
        assert_eq!(v["fallback"].as_u64(), Some((layers - chained) as u64));
        assert_eq!(v["scope_error"].as_bool(), Some(true));
    }
}

#[test]
fn c_prefetch_demo_bad_arguments_exit_2() {
    assert_eq!(run_prefetch(&["1", "0", "0", "4"]).status.code(), Some(2));
    assert_eq!(run_prefetch(&["1", "0", "4"]).status.code(), Some(2));
    assert_eq!(
        run_prefetch(&["1", "0", "4", "4", "chained"]).status.code(),
        Some(2)
    );
}
