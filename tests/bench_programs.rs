//! The command lines and JSON files of the benchmark programs `benches/decode_step.rs`,
//! `benches/ssu_bench.rs` and `benches/mtp_bench.rs`. They are `harness = false` benches, whose own `#[test]`s would never
//! run, so their argument and JSON modules are compiled in here as well.

// The modules as the programs have them (`ssu_bench`'s `args` reads `super::rig`).
#[allow(dead_code)]
#[path = "../benches/decode_step/args.rs"]
mod decode_args;
#[allow(dead_code)]
#[path = "../benches/decode_step/json.rs"]
mod decode_json;
#[allow(dead_code)]
#[path = "../benches/mtp_bench/args.rs"]
mod mtp_args;
#[allow(dead_code)]
#[path = "../benches/ssu_bench/rig.rs"]
mod rig;
#[allow(dead_code)]
#[path = "../benches/ssu_bench/args.rs"]
mod ssu_args;
#[allow(dead_code)]
#[path = "../benches/ssu_bench/json.rs"]
mod ssu_json;

use std::collections::BTreeMap;

use serde_json::Value;

/// `s` split at whitespace, after the program name.
fn argv(name: &str, s: &str) -> Vec<String> {
    std::iter::once(name)
        .chain(s.split_whitespace())
        .map(String::from)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// ssu_bench
// ---------------------------------------------------------------------------------------------

mod ssu {
    use super::*;
    use super::{rig, ssu_args as args, ssu_json as json};

    fn parse(s: &str) -> Result<args::Opts, clap::Error> {
        args::parse_from(argv("ssu_bench", s))
    }

    #[test]
    fn reads_flashinfer_timings() {
        let fi = json::Recorded::embedded().unwrap();
        let (us, pct) = fi.flashinfer(0, 32, 1, "simple").unwrap();
        assert_eq!(us, 2.6753);
        assert!((pct - 9.441191870150888).abs() < 1e-12);
        let (us, _) = fi.flashinfer(10, 128, 256, "vertical").unwrap();
        assert!((us - 808.91).abs() < 0.01, "{us}");
        assert!(fi.flashinfer(10, 64, 1, "simple").is_none());
        assert_eq!(fi.records.len(), 180);
        assert_eq!(fi.copy_gbps, Some(4201.8));
    }

    #[test]
    fn rotation_touches_192_mib_between_reuses() {
        // Same rule as FlashInfer's rig: copies = floor(192 MiB / S) + 2, whole rotations of
        // at least 32 calls (checked against its recorded copies and calls).
        for (b, h, copies, calls) in [(1, 32, 386, 386), (16, 32, 26, 52), (256, 32, 3, 33)] {
            let per_call = b * h * rig::DIM * rig::DSTATE * 2;
            assert_eq!(rig::rotation(b, h, rig::MIN_CALLS), (copies, calls));
            assert!((copies - 1) * per_call >= rig::COLD_BYTES);
        }
        assert_eq!(rig::rotation(256, 32, 128), (3, 129));
    }

    #[test]
    fn parses_soak_and_calls() {
        let o = parse("--soak 4.5 --calls 128 --variants 10s").unwrap();
        assert_eq!(o.soak_s, Some(4.5));
        assert_eq!(o.min_calls, 128);
        assert_eq!(o.variants, vec![3]);
        assert_eq!(parse("").unwrap().soak_s, None);
        for bad in [
            "--soak 0",
            "--soak -1",
            "--soak x",
            "--soak",
            "--soak 601",
            "--soak NaN",
            "--calls 0",
            "--calls 1,2",
            "--calls 1000001",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_variant_names() {
        assert_eq!(args::parse_variants("off,10s,5v").unwrap().0, vec![0, 3, 2]);
        assert!(args::parse_variants("10x").is_err());
        assert!(args::parse_variants("").is_err());
    }

    #[test]
    fn defaults_quick_and_lists() {
        let o = parse("").unwrap();
        assert_eq!(o.nheads, vec![32, 128]);
        assert_eq!(o.batches, vec![1, 2, 4, 8, 16, 32, 64, 128, 256]);
        assert_eq!(o.variants, vec![0, 1, 2, 3, 4]);
        assert_eq!(o.min_calls, 32);
        assert!(!o.seed_sources && o.json.is_none());
        let o = parse("--quick").unwrap();
        assert_eq!((o.nheads, o.batches), (vec![32], vec![1, 16, 256]));
        // Explicit lists win over --quick, in either order; the last of a repeated option wins.
        let o = parse("--batch 8,64 --quick --nheads 128 --nheads 32,128").unwrap();
        assert_eq!((o.nheads, o.batches), (vec![32, 128], vec![8, 64]));
        let o = parse("--seed-sources --json out.json").unwrap();
        assert!(o.seed_sources);
        assert_eq!(o.json.unwrap(), std::path::Path::new("out.json"));
        for bad in ["--batch 0", "--nheads 32,x", "--batch", "--bogus", "extra"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn accepts_cargo_bench_flag_and_help() {
        // `cargo bench --bench ssu_bench -- ARGS` appends `--bench`.
        assert_eq!(parse("--calls 8 --bench").unwrap().min_calls, 8);
        let e = parse("--help").unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        assert_eq!(e.exit_code(), 0);
        assert_eq!(parse("--soak 0").unwrap_err().exit_code(), 2);
    }

    #[test]
    fn writes_what_ssu_table_reads() {
        let report = json::Report {
            copy_gbps: json::round(4239.26, 1),
            replays: rig::REPLAYS,
            records: vec![json::Record {
                nheads: 32,
                philox_rounds: 0,
                algorithm: "auto",
                batch: 1,
                state_copies_rotated: 386,
                calls_per_graph: 386,
                us_median: json::round(2.520_61, 4),
                bytes: 1_061_188,
                gbps: json::round(421.04, 1),
                pct_of_copy_bw: json::round(9.9313, 3),
                fi_us_median: None,
                fi_pct_of_copy_bw: None,
            }],
        };
        let v: Value =
            serde_json::from_str(&serde_json::to_string_pretty(&report).unwrap()).unwrap();
        let want: Value = serde_json::from_str(
            r#"{"copy_bandwidth_GBps": 4239.3, "replays": 15, "records": [
                {"nheads": 32, "philox_rounds": 0, "algorithm": "auto", "batch": 1,
                 "state_copies_rotated": 386, "calls_per_graph": 386, "us_median": 2.5206,
                 "bytes": 1061188, "GBps": 421.0, "pct_of_copy_bw": 9.931,
                 "fi_us_median": null, "fi_pct_of_copy_bw": null}]}"#,
        )
        .unwrap();
        assert_eq!(v, want);
    }
}

// ---------------------------------------------------------------------------------------------
// decode_step
// ---------------------------------------------------------------------------------------------

mod decode {
    use super::*;
    use super::{decode_args as args, decode_json as json};
    use mamba_ssu::decode::DecodeShape;

    fn parse(s: &str) -> Result<args::Opts, clap::Error> {
        args::parse_from(argv("decode_step", s))
    }

    #[test]
    fn defaults_and_quick() {
        let o = parse("").unwrap();
        assert_eq!(o.batches, vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(o.steps, 200);
        assert!(o.json.is_none() && !o.nvtx_only);
        let o = parse("--quick").unwrap();
        assert_eq!((o.batches, o.steps), (vec![1, 8, 64], 50));
        // Explicit values win over --quick, in either order.
        let o = parse("--steps 300 --quick --batch 1,16").unwrap();
        assert_eq!((o.batches, o.steps), (vec![1, 16], 300));
        // One argument with spaces, as a shell passes "1, 8".
        let o = args::parse_from(["decode_step", "--batch", "1, 8"]).unwrap();
        assert_eq!(o.batches, vec![1, 8]);
        let o = parse("--nvtx-only --batch 8 --json d.json --bench").unwrap();
        assert!(o.nvtx_only);
        assert_eq!(o.batches, vec![8]);
        assert_eq!(o.json.unwrap(), std::path::Path::new("d.json"));
        assert_eq!(parse("").unwrap().tokens, 1);
        assert_eq!(parse("--tokens 8").unwrap().tokens, 8);
    }

    #[test]
    fn refuses_bad_values() {
        for bad in [
            "--steps 0",
            "--steps 1000001",
            "--steps x",
            "--steps",
            "--batch 0",
            "--batch 1,0",
            "--batch 1,x",
            "--tokens 0",
            "--tokens 17",
            "--tokens +5",
            "--bogus",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
        assert_eq!(
            parse("--help").unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelp
        );
    }

    #[test]
    fn writes_what_plot_decode_step_reads() {
        let mut report =
            json::Report::new("NVIDIA H200".into(), 300, &DecodeShape::nemotron_h_tp4(1));
        let times: BTreeMap<&'static str, f64> = [("stock", 202.4804), ("fixed", 156.1281)]
            .into_iter()
            .collect();
        report.rows.push(json::Row {
            batch: 1,
            eager_us: json::rounded(&times, 3),
            graph_us: json::rounded(&times, 3),
            graph_overhead_removed_pct: json::Removed::from_fn(|m| {
                if m == "fused" {
                    f64::NAN
                } else {
                    97.314
                }
            }),
            graph_overhead_removed_paired_pct: json::Removed::from_fn(|_| 95.0),
        });
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(text.lines().count(), 1);
        let v: Value = serde_json::from_str(&text).unwrap();
        let want: Value = serde_json::from_str(
            r#"{"device": "NVIDIA H200", "steps": 300, "layers": 40, "nheads": 32, "dim": 64,
                "dstate": 128, "ngroups": 8, "philox_rounds": 5, "tokens": 1, "rows": [{"batch": 1,
                "eager_us": {"fixed": 156.128, "stock": 202.48},
                "graph_us": {"fixed": 156.128, "stock": 202.48},
                "graph_overhead_removed_pct": {"prefetch": 97.31, "prefetch-branch": 97.31,
                    "fused": null, "fused-per-call": 97.31, "counter": 97.31},
                "graph_overhead_removed_paired_pct": {"prefetch": 95.0,
                    "prefetch-branch": 95.0, "fused": 95.0, "fused-per-call": 95.0,
                    "counter": 95.0}}]}"#,
        )
        .unwrap();
        assert_eq!(v, want);
    }
}

// ---------------------------------------------------------------------------------------------
// mtp_bench
// ---------------------------------------------------------------------------------------------

mod mtp {
    use super::argv;
    use super::mtp_args::{self as args, Form};

    fn parse(s: &str) -> Result<args::Cli, clap::Error> {
        args::parse_from(argv("mtp_bench", s))
    }

    #[test]
    fn defaults_and_lists() {
        let c = parse("").unwrap();
        assert_eq!(c.nheads, vec![32, 128]);
        assert_eq!(c.batch, vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(c.rounds, vec![0, 5, 10]);
        assert_eq!(c.forms, vec![Form::Dense, Form::Varlen]);
        assert_eq!((c.calls, c.quick, c.json.is_none()), (16, false, true));
        let c =
            parse("--nheads 64 --batch 3,5 --rounds 10 --forms varlen --calls 4 --json j --bench")
                .unwrap();
        assert_eq!(
            (c.nheads, c.batch, c.rounds),
            (vec![64], vec![3, 5], vec![10])
        );
        assert_eq!(
            (c.forms, c.calls, c.json.as_deref()),
            (vec![Form::Varlen], 4, Some("j"))
        );
        assert!(parse("--quick").unwrap().quick);
    }

    #[test]
    fn refuses_bad_values() {
        for bad in [
            "--nheads 0",
            "--nheads +4",
            "--batch 1,x",
            "--batch -1",
            "--rounds 11",
            "--rounds 5,-1",
            "--forms bogus",
            "--calls 0",
            "--bogus",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
    }
}
