//! The C ABI from C: `examples/c/seeds_demo.c`, linked by build.rs against `libmamba_ssu.a`
//! exactly as the README tells C users to, is embedded here and run. On a GPU host it must
//! print the torch-identical seeds; without a GPU it must say so (exit 77).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

use mamba_ssu::philox::torch_seeds;

const DEMO: &[u8] = include_bytes!(env!("MAMBA_SSU_C_DEMO"));

/// Writes the embedded program to a temporary file once per process.
fn demo_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mamba-ssu-c-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("seeds_demo");
        std::fs::write(&path, DEMO).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        path
    })
    .clone()
}

fn run(args: &[&str]) -> Output {
    Command::new(demo_path())
        .args(args)
        .output()
        .expect("running the C demo")
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
        match out.status.code() {
            Some(77) => {
                assert!(
                    !common::gpu_required(),
                    "MAMBA_SSU_REQUIRE_GPU=1 but the C demo found no CUDA device"
                );
                eprintln!("skipped: the C demo found no CUDA device");
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
                assert_eq!(draws, torch_seeds(seed, offset, n));
                assert_eq!(v["seed"].as_u64(), Some(seed));
                assert_eq!(v["offset_after"].as_u64(), Some(offset + 4 * n as u64));
            }
            other => panic!(
                "C demo exited {other:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}
