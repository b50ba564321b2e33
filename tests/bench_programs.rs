//! The command lines, JSON files, byte counts and model shapes of the benchmark programs
//! `benches/decode_step.rs`, `benches/ssu_bench.rs` and `benches/mtp_bench.rs`. They are
//! `harness = false` benches, whose own `#[test]`s would never run, so their argument, JSON and
//! rig modules are compiled in here as well.

// The modules as the programs have them (`ssu_bench`'s `args` and `json` read `super::rig`).
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
#[path = "../benches/mtp_bench/rig.rs"]
mod mtp_rig;
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

    /// `nheads` x `batch` at the default dim 64 / dstate 128.
    fn sizes(nheads: usize, batch: usize) -> rig::Sizes {
        rig::Sizes {
            nheads,
            batch,
            dim: rig::DIM,
            dstate: rig::DSTATE,
        }
    }

    #[test]
    fn reads_flashinfer_timings() {
        let fi = json::Recorded::embedded().unwrap();
        let (us, pct) = fi.flashinfer(0, &sizes(32, 1), "simple").unwrap();
        assert_eq!(us, 2.6753);
        assert!((pct - 9.441191870150888).abs() < 1e-12);
        let (us, _) = fi.flashinfer(10, &sizes(128, 256), "vertical").unwrap();
        assert!((us - 808.91).abs() < 0.01, "{us}");
        assert!(fi.flashinfer(10, &sizes(64, 1), "simple").is_none());
        assert_eq!(fi.records.len(), 180);
        assert_eq!(fi.copy_gbps, Some(4201.8));
        assert_eq!((fi.shapes.dim, fi.shapes.dstate), (64, 128));
    }

    #[test]
    fn flashinfer_columns_are_empty_off_the_recorded_shape() {
        let fi = json::Recorded::embedded().unwrap();
        // Every recorded configuration has a figure at dim 64 / dstate 128 and none at any
        // other dim or dstate.
        let mut at_recorded = 0;
        for r in fi
            .records
            .iter()
            .filter(|r| r.implementation.starts_with("flashinfer"))
        {
            let (h, b) = (r.nheads, r.batch);
            let alg = r.algorithm.as_str();
            assert!(fi.flashinfer(r.philox_rounds, &sizes(h, b), alg).is_some());
            at_recorded += 1;
            for (dim, dstate) in [(80, 128), (64, 256), (64, 64), (80, 256), (128, 128)] {
                let off = rig::Sizes {
                    nheads: h,
                    batch: b,
                    dim,
                    dstate,
                };
                assert_eq!(
                    fi.flashinfer(r.philox_rounds, &off, alg),
                    None,
                    "{dim} {dstate}"
                );
            }
        }
        assert_eq!(at_recorded, 162);
        assert_eq!((fi.missing(64, 128), fi.missing(80, 128)), ("-", "—"));
        // The tables' headings: none for a run of the recorded shape only (the output of a run
        // without --dim/--dstate is unchanged); elsewhere the shape, and off it the reason for
        // the empty columns.
        assert_eq!(fi.shape_heading(&[(64, 128)], 64, 128), None);
        let both = [(64, 128), (80, 128)];
        assert_eq!(
            fi.shape_heading(&both, 64, 128).unwrap(),
            "dim 64, dstate 128, ngroups 8:"
        );
        for shapes in [&both[..], &[(80, 128)][..]] {
            assert_eq!(
                fi.shape_heading(shapes, 80, 128).unwrap(),
                "dim 80, dstate 128, ngroups 8: FlashInfer's timings are recorded at dim 64 and \
                 dstate 128 only, so its columns show — (none recorded):"
            );
        }
    }

    #[test]
    fn bytes_per_call_at_the_measured_shape() {
        // The recorded byte counts (state read + write, small tensors; FlashInfer's and
        // Triton's) at dim 64 / dstate 128 are the rig's.
        let v: Value = serde_json::from_str(json::FI_TIMINGS).unwrap();
        let mut n = 0;
        for r in v["records"].as_array().unwrap() {
            let h = r["nheads"].as_u64().unwrap() as usize;
            let b = r["batch"].as_u64().unwrap() as usize;
            let sz = sizes(h, b);
            // (The Triton records write the state bytes as a float.)
            let rw = r["bytes_state_rw"].as_f64().unwrap() as usize;
            let small = r["bytes_small"].as_f64().unwrap() as usize;
            assert_eq!(
                (2 * sz.state_bytes(), sz.small_bytes()),
                (rw, small),
                "{h} x {b}"
            );
            assert_eq!(sz.bytes_per_call(), rw + small);
            n += 1;
        }
        assert_eq!(n, 180);
        // dim 80, dstate 256, 32 heads, batch 4, by hand: a slot is 32 * 80 * 256 = 655360
        // fp16 elements; x and out 2 * 4 * 32 * 80 * 2, B and C 2 * 4 * 8 * 256 * 2, dt
        // 4 * 32 * 2, A 32 * 4, D and dt_bias 2 * 32 * 2, indices 4 * 4.
        let sz = rig::Sizes {
            nheads: 32,
            batch: 4,
            dim: 80,
            dstate: 256,
        };
        assert_eq!(sz.head_block(), 655_360);
        assert_eq!(sz.state_bytes(), 4 * 655_360 * 2);
        assert_eq!(sz.small_bytes(), 40_960 + 32_768 + 256 + 128 + 128 + 16);
        assert_eq!(sz.bytes_per_call(), 2 * 5_242_880 + 74_256);
        // The rotation follows: floor(192 MiB / 5 MiB) + 2 = 40 copies, one rotation of 40.
        assert_eq!(rig::rotation(&sz, rig::MIN_CALLS), (40, 40));
    }

    #[test]
    fn rotation_touches_192_mib_between_reuses() {
        // Same rule as FlashInfer's rig: copies = floor(192 MiB / S) + 2, whole rotations of
        // at least 32 calls (checked against its recorded copies and calls).
        for (b, h, copies, calls) in [(1, 32, 386, 386), (16, 32, 26, 52), (256, 32, 3, 33)] {
            let per_call = b * h * rig::DIM * rig::DSTATE * 2;
            assert_eq!(rig::rotation(&sizes(h, b), rig::MIN_CALLS), (copies, calls));
            assert!((copies - 1) * per_call >= rig::COLD_BYTES);
        }
        assert_eq!(rig::rotation(&sizes(32, 256), 128), (3, 129));
    }

    #[test]
    fn parses_dim_and_dstate() {
        let o = parse("").unwrap();
        assert_eq!((o.dims, o.dstates), (vec![64], vec![128]));
        let o = parse("--dim 64,80 --dstate 128,256 --quick").unwrap();
        assert_eq!((o.dims, o.dstates), (vec![64, 80], vec![128, 256]));
        // The last of a repeated option wins; --quick leaves the shapes alone.
        let o = parse("--quick --dim 80 --dim 96").unwrap();
        assert_eq!((o.dims, o.dstates), (vec![96], vec![128]));
        for bad in [
            "--dim 0",
            "--dim x",
            "--dim 64,",
            "--dim",
            "--dstate 0",
            "--dstate 128,-1",
            "--dstate 65537",
            "--dim 99999999999999999999",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
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
        assert_eq!(
            args::parse_variants("offh,5h,10h").unwrap().0,
            vec![5, 6, 7]
        );
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
                dim: 64,
                dstate: 128,
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
                {"nheads": 32, "dim": 64, "dstate": 128, "philox_rounds": 0,
                 "algorithm": "auto", "batch": 1,
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
    use mamba_ssu::decode::{DecodeShape, ModelPreset};

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
    fn parses_model_presets() {
        // The default is the step of every recorded run.
        assert_eq!(parse("").unwrap().model, &ModelPreset::NEMOTRON_H_TP4);
        for p in &ModelPreset::ALL {
            let o = parse(&format!("--model {} --tokens 8 --quick", p.name)).unwrap();
            assert_eq!((o.model, o.tokens), (p, 8));
            assert_eq!(ModelPreset::find(p.name), Some(p));
        }
        // The last --model wins.
        let o = parse("--model nemotron-h --model nemotron-nano-2").unwrap();
        assert_eq!(o.model.name, "nemotron-nano-2");
        for bad in [
            "--model",
            "--model bogus",
            "--model NEMOTRON-H",
            "--model nemotron-h,nemotron-nano-2",
            "--model ''",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
        assert!(ModelPreset::find("bogus").is_none());
    }

    #[test]
    fn preset_table_shapes() {
        // (name, Mamba-2 layers, heads per GPU, head dim): the published configurations'
        // (Nemotron-H 8B: 24 Mamba-2 layers of 128 x 64; Nemotron Nano 2 9B: 27 of 128 x 80;
        // Nemotron 3 Nano 4B: 21 of 96 x 80), and the recorded runs' 40 layers for the default.
        let want = [
            ("nemotron-h-tp4", 40, 32, 64),
            ("nemotron-h-tp2", 24, 64, 64),
            ("nemotron-h", 24, 128, 64),
            ("nemotron-nano-2", 27, 128, 80),
            ("nemotron-nano-2-tp2", 27, 64, 80),
            ("nemotron-h-4b", 21, 96, 80),
        ];
        let got: Vec<_> = ModelPreset::ALL
            .iter()
            .map(|p| (p.name, p.layers, p.nheads, p.dim))
            .collect();
        assert_eq!(got, want);
        for p in &ModelPreset::ALL {
            assert_eq!((p.dstate, p.ngroups), (128, 8), "{}", p.name);
            for (batch, tokens) in [(1, 1), (64, 1), (3, 8)] {
                let s = p.shape(batch, tokens);
                let conv_dim = p.nheads * p.dim + 2 * p.ngroups * p.dstate;
                assert_eq!(
                    s,
                    DecodeShape {
                        layers: p.layers,
                        batch,
                        nheads: p.nheads,
                        dim: p.dim,
                        dstate: p.dstate,
                        ngroups: p.ngroups,
                        philox_rounds: 5,
                        filler_elems_per_seq: conv_dim * 4,
                        tokens,
                    }
                );
            }
        }
        // The default is the step that decode_step always measured: 40 layers of 32 x 64 x 128,
        // the filler a conv1d state of 4096 channels x 4.
        let d = DecodeShape::nemotron_h_tp4(7);
        assert_eq!(d, ModelPreset::NEMOTRON_H_TP4.shape(7, 1));
        assert_eq!(
            (
                d.layers,
                d.nheads,
                d.dim,
                d.dstate,
                d.ngroups,
                d.filler_elems_per_seq
            ),
            (40, 32, 64, 128, 8, 4096 * 4)
        );
        assert_eq!(
            DecodeShape::nemotron_h_tp4_verify(2, 8),
            ModelPreset::NEMOTRON_H_TP4.shape(2, 8)
        );
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
            "--model x",
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
        let mut report = json::Report::new(
            "NVIDIA H200".into(),
            300,
            "nemotron-h-tp4",
            &DecodeShape::nemotron_h_tp4(1),
        );
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
            r#"{"device": "NVIDIA H200", "model": "nemotron-h-tp4", "steps": 300, "layers": 40,
                "nheads": 32, "dim": 64,
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
    use super::mtp_rig as rig;
    use serde_json::Value;

    fn parse(s: &str) -> Result<args::Cli, clap::Error> {
        args::parse_from(argv("mtp_bench", s))
    }

    #[test]
    fn defaults_and_lists() {
        let c = parse("").unwrap();
        assert_eq!(c.nheads, vec![32, 128]);
        assert_eq!(c.batch, vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!((c.dim, c.dstate), (vec![64], vec![128]));
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
        let c = parse("--dim 64,80 --dstate 256 --quick").unwrap();
        assert_eq!((c.dim, c.dstate, c.quick), (vec![64, 80], vec![256], true));
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
            "--dim 0",
            "--dim x",
            "--dim 80,",
            "--dim",
            "--dstate -128",
            "--dstate 65537",
            "--dstate 1e3",
            "--bogus",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
    }

    fn timings() -> Value {
        serde_json::from_str(rig::TIMINGS).unwrap()
    }

    fn sizes(nheads: usize, batch: usize, dim: usize, dstate: usize) -> rig::Sizes {
        rig::Sizes {
            nheads,
            batch,
            dim,
            dstate,
        }
    }

    #[test]
    fn flashinfer_columns_are_empty_off_the_recorded_shape() {
        let t = timings();
        let recorded = rig::recorded_shape(&t).unwrap();
        assert_eq!(recorded, (64, 128));
        let us = rig::flashinfer_us(&t, 0, &sizes(32, 1, 64, 128)).unwrap();
        assert_eq!(us, 5.4327);
        assert!(rig::flashinfer_us(&t, 0, &sizes(64, 1, 64, 128)).is_none());
        let mut n = 0;
        for r in t["records"].as_array().unwrap() {
            let rounds = r["philox_rounds"].as_u64().unwrap() as u32;
            let (h, b) = (r["nheads"].as_u64().unwrap(), r["batch"].as_u64().unwrap());
            let (h, b) = (h as usize, b as usize);
            assert!(rig::flashinfer_us(&t, rounds, &sizes(h, b, 64, 128)).is_some());
            for (dim, dstate) in [(80, 128), (64, 256), (80, 256), (64, 64)] {
                let off = sizes(h, b, dim, dstate);
                assert_eq!(rig::flashinfer_us(&t, rounds, &off), None, "{dim} {dstate}");
            }
            n += 1;
        }
        assert_eq!(n, 42);
        // A file without its shapes anchors nothing.
        let mut bare = t.clone();
        bare.as_object_mut().unwrap().remove("shapes");
        assert_eq!(rig::flashinfer_us(&bare, 0, &sizes(32, 1, 64, 128)), None);
        assert_eq!(rig::missing(recorded, 64, 128), "-");
        assert_eq!(rig::missing(recorded, 80, 128), "—");
        assert_eq!(rig::shape_heading(recorded, &[(64, 128)], 64, 128), None);
        let both = [(64, 128), (64, 256)];
        assert_eq!(
            rig::shape_heading(recorded, &both, 64, 128).unwrap(),
            "dim 64, dstate 128:"
        );
        assert_eq!(
            rig::shape_heading(recorded, &both, 64, 256).unwrap(),
            "dim 64, dstate 256: FlashInfer's timings are recorded at dim 64 and dstate 128 \
             only, so its columns show — (none recorded):"
        );
    }

    #[test]
    fn bytes_per_call_at_the_measured_shape() {
        // FlashInfer's recorded state traffic (one read, T = 8 writes to the buffer) at dim 64
        // / dstate 128 is the rig's.
        let t = timings();
        for r in t["records"].as_array().unwrap() {
            let (h, b) = (r["nheads"].as_u64().unwrap(), r["batch"].as_u64().unwrap());
            let sz = sizes(h as usize, b as usize, 64, 128);
            let read = r["bytes_state_read"].as_u64().unwrap() as usize;
            let write = r["bytes_intermediate_write"].as_u64().unwrap() as usize;
            assert_eq!(sz.state_write_bytes(), write);
            assert_eq!(sz.state_bytes(), read + write);
        }
        // dim 80, dstate 256, 32 heads, batch 4, by hand: a slot is 32 * 80 * 256 = 655360
        // fp16 elements, read once and written 8 times per sequence; x and out
        // 2 * 4 * 8 * 32 * 80 * 2, B and C 2 * 4 * 8 * 8 * 256 * 2, dt 4 * 8 * 32 * 2, A 32 * 4,
        // D and dt_bias 2 * 32 * 2, the 2-D index 4 * 8 * 4.
        let sz = sizes(32, 4, 80, 256);
        assert_eq!(sz.head_block(), 655_360);
        assert_eq!(sz.state_write_bytes(), 8 * 4 * 655_360 * 2);
        assert_eq!(sz.state_bytes(), 9 * 4 * 655_360 * 2);
        assert_eq!(
            sz.small_bytes(),
            327_680 + 262_144 + 2_048 + 128 + 128 + 128
        );
        assert_eq!(sz.bytes_per_call(), 47_185_920 + 592_256);
        // ceil(192 MiB / 45 MiB) + 1 = 6 copies; at least 16 calls.
        assert_eq!(rig::rotation(&sz, 16), (6, 16));
        assert_eq!(rig::rotation(&sz, 4), (6, 6));
        // At the recorded shape: FlashInfer's rotation (44 copies at 32 heads x batch 1).
        let r0 = &t["records"][0];
        assert_eq!(
            (r0["nheads"].as_u64(), r0["batch"].as_u64()),
            (Some(32), Some(1))
        );
        let copies = r0["state_copies_rotated"].as_u64().unwrap() as usize;
        assert_eq!(rig::rotation(&sizes(32, 1, 64, 128), 16).0, copies);
    }
}
