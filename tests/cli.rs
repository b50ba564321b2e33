//! The `mamba-ssu` command line (`examples/mamba-ssu.rs`): torch's values, JSON shape, exit
//! codes, and no panic on odd input (non-UTF-8 arguments, a closed stdout, huge counts).

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use mamba_ssu::philox::torch_seeds;
use serde_json::Value;

/// The program: `$MAMBA_SSU_BIN`; else the example cargo built next to this test
/// (`<target>/<profile>/examples/mamba-ssu`; `cargo test` builds examples, `cargo test --test
/// cli` alone does not); else, on a GPU host that runs bundled test binaries, the bundled copy
/// (`.gpu/bin/mamba-ssu`, from `gpu-bundle --example mamba-ssu`).
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("MAMBA_SSU_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    // The test runs from <target>/<profile>/deps/.
    let built = exe.parent().and_then(|deps| deps.parent()).map(|profile| {
        profile
            .join("examples")
            .join(format!("mamba-ssu{}", std::env::consts::EXE_SUFFIX))
    });
    if let Some(built) = built.filter(|p| p.exists()) {
        return built;
    }
    let bundled = PathBuf::from(".gpu/bin/mamba-ssu");
    assert!(
        bundled.exists(),
        "mamba-ssu not found next to {exe:?} nor at {bundled:?}: build it with \
         `cargo build --example mamba-ssu` (plain `cargo test` does) or set MAMBA_SSU_BIN"
    );
    bundled
}

fn cli<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .output()
        .expect("running mamba-ssu")
}

/// Exit code 2, one line on stderr, nothing on stdout.
fn assert_usage_error<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let out = cli(args);
    assert_eq!(out.status.code(), Some(2), "args {args:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty());
    err
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
        assert_usage_error(args);
    }
}

#[test]
fn a_sign_is_not_a_number() {
    // `u64::from_str` (and so clap's u64 parser) would take `+5`.
    for args in [
        &["seeds", "--seed", "+5", "--offset", "0", "--count", "1"][..],
        &["seeds", "--seed", "0x+5", "--offset", "0", "--count", "1"][..],
        &["seeds", "--seed", "1", "--offset", "+4", "--count", "1"][..],
        &["seeds", "--seed", "1", "--offset", "0", "--count", "+5"][..],
        &["seeds", "--seed", " 5", "--offset", "0", "--count", "1"][..],
        &["seeds", "--seed", "-5", "--offset", "0", "--count", "1"][..],
        &["bench-seeds", "--replays", "+5"][..],
    ] {
        assert_usage_error(args);
    }
}

#[test]
fn huge_counts_are_refused_before_anything_runs() {
    for (args, names) in [
        (
            &["bench-seeds", "--replays", "18446744073709551615"][..],
            "--replays",
        ),
        (&["bench-seeds", "--replays", "1000001"][..], "--replays"),
        (&["bench-seeds", "--replays", "0"][..], "--replays"),
        (
            &[
                "seeds", "--seed", "1", "--offset", "0", "--count", "16777217",
            ][..],
            "--count",
        ),
        (
            &[
                "seeds",
                "--seed",
                "1",
                "--offset",
                "0",
                "--count",
                "18446744073709551615",
            ][..],
            "--count",
        ),
    ] {
        let err = assert_usage_error(args);
        assert!(err.contains(names), "names the option: {err}");
    }
}

#[cfg(unix)]
#[test]
fn non_utf8_arguments_are_usage_errors() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let bad = || OsString::from_vec(b"\xff\xfe".to_vec());
    let s = |v: &str| OsString::from(v);
    for args in [
        vec![bad()],
        vec![
            s("seeds"),
            s("--seed"),
            bad(),
            s("--offset"),
            s("0"),
            s("--count"),
            s("1"),
        ],
        vec![
            s("seeds"),
            s("--seed"),
            s("1"),
            s("--offset"),
            s("0"),
            s("--count"),
            s("1"),
            bad(),
        ],
        vec![s("bench-seeds"), s("--replays"), bad()],
    ] {
        assert_usage_error(&args);
    }
}

#[test]
fn a_closed_stdout_ends_quietly() {
    // 65536 draws are about 700 KB, more than a pipe holds: the write meets the closed end.
    let mut child = Command::new(binary())
        .args(["seeds", "--seed", "1", "--offset", "0", "--count", "65536"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running mamba-ssu");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.is_empty(), "no message, no panic: {err}");
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

#[test]
fn help_and_version_exit_0_on_stdout() {
    for args in [
        &["--help"][..],
        &["seeds", "--help"][..],
        &["--version"][..],
    ] {
        let out = cli(args);
        assert_eq!(out.status.code(), Some(0), "args {args:?}");
        assert!(
            !out.stdout.is_empty() && out.stderr.is_empty(),
            "args {args:?}"
        );
    }
}
