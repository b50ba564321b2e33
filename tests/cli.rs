//! The `mamba-ssu seeds` command line: torch's values, JSON shape, exit codes.

mod common;

use std::path::PathBuf;
use std::process::Command;

use mamba_ssu::philox::torch_seeds;
use serde_json::Value;

/// The binary: cargo's path here; on a GPU host that runs bundled test binaries, the bundled
/// copy (`.gpu/bin/mamba-ssu`, from `gpu-bundle --bin mamba-ssu`) or `$MAMBA_SSU_BIN`.
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("MAMBA_SSU_BIN") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_mamba-ssu"));
    if built.exists() {
        return built;
    }
    let bundled = PathBuf::from(".gpu/bin/mamba-ssu");
    assert!(
        bundled.exists(),
        "mamba-ssu binary not found ({built:?}, {bundled:?})"
    );
    bundled
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .output()
        .expect("running mamba-ssu")
}

fn json(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), 1, "one JSON object on one line");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn seeds_match_torch_golden_and_accept_hex() {
    let golden: Value =
        serde_json::from_str(include_str!("data/torch_randint/golden.json")).unwrap();
    for case in golden["cases"].as_array().unwrap() {
        let seed = case["seed"].as_u64().unwrap();
        let offset = case["offset"].as_u64().unwrap();
        let v = json(&cli(&[
            "seeds",
            "--seed",
            &format!("{seed:#x}"),
            "--offset",
            &offset.to_string(),
            "--count",
            "48",
        ]));
        assert_eq!(v["seed"].as_u64(), Some(seed));
        assert_eq!(v["offset"].as_u64(), Some(offset));
        assert_eq!(v["draws"], case["draws"]);
        assert_eq!(v["offset_after"], case["offset_after"]);
    }
}

#[test]
fn seeds_at_extreme_seed_and_offset() {
    let v = json(&cli(&[
        "seeds",
        "--seed",
        "18446744073709551615",
        "--offset",
        "0xFFFFFFFFFFFFFFF8",
        "--count",
        "3",
    ]));
    let draws: Vec<u64> = v["draws"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(draws, torch_seeds(u64::MAX, u64::MAX - 7, 3));
    assert_eq!(
        v["offset_after"].as_u64(),
        Some(4),
        "the offset wraps like torch's"
    );
}

#[test]
fn bad_arguments_exit_2_with_one_line() {
    for args in [
        &["seeds", "--seed", "1", "--offset", "6", "--count", "1"][..],
        &["seeds", "--seed", "1", "--count", "1"][..],
        &["seeds", "--seed", "x", "--offset", "0", "--count", "1"][..],
        &[
            "seeds",
            "--seed",
            "18446744073709551616",
            "--offset",
            "0",
            "--count",
            "1",
        ][..],
        &["seeds", "--seed", "1", "--offset", "0", "--count", "0"][..],
        &[
            "seeds", "--seed", "1", "--offset", "0", "--count", "1", "--bogus",
        ][..],
        &[
            "seeds", "--seed", "1", "--seed", "2", "--offset", "0", "--count", "1",
        ][..],
        &["nonsense"][..],
    ] {
        let out = cli(args);
        assert_eq!(out.status.code(), Some(2), "args {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn device_flag_prints_the_same_object_or_fails_cleanly() {
    let args = [
        "seeds",
        "--seed",
        "0xDEADBEEF",
        "--offset",
        "17179869176",
        "--count",
        "40",
    ];
    let cpu = json(&cli(&args));
    let mut dev_args = args.to_vec();
    dev_args.push("--device");
    let out = cli(&dev_args);
    if common::gpu().is_some() {
        assert_eq!(json(&out), cpu);
    } else {
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "one line, no stack trace: {err}"
        );
    }
}

#[test]
fn demo_runs_without_a_gpu() {
    let out = cli(&["demo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if common::gpu().is_none() {
        assert!(text.lines().next().unwrap().starts_with("no CUDA GPU here"));
    } else {
        assert!(text.contains("all equal to torch's formula"), "{text}");
    }
}
