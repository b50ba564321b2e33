//! GPU conformance against FlashInfer 0.7.2's own kernel (tests/data/flashinfer_ssu, or the
//! manifest named by `MAMBA_SSU_FLASHINFER_MANIFEST`, whose bins are read from its directory).
//!
//! For every case and every recorded algorithm run (simple, vertical, auto): the whole input
//! state storage (padding and unreferenced slots included) is uploaded with the recorded
//! strides, `out` is poisoned with 0xFF bytes like the reference rig, our kernel runs with the
//! case's flags, and the whole state storage and `out` are compared with the recorded outputs
//! byte for byte (by SHA-256 for hash-only blocks). Any state difference or any `out`
//! difference fails the test; a table line per run says where.

mod common;
#[path = "common/ssu_dev.rs"]
mod ssu_dev;

use std::collections::BTreeMap;

use common::{compare_elems, sha256_hex, Case, DevBuf, Manifest, ResultEntry, SparseStorage};
use cudarc::driver::sys::CUdevice_attribute;

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

fn usizes(v: &[u64]) -> Vec<usize> {
    v.iter().map(|x| *x as usize).collect()
}

/// FlashInfer's auto rule.
fn rule(batch: u64, nheads: u64, sms: u64) -> &'static str {
    if batch * nheads < 2 * sms {
        "simple"
    } else {
        "vertical"
    }
}

struct Outcome {
    line: String,
    failed: bool,
}

/// Compares a downloaded storage against a recorded output descriptor: (differing elements,
/// max ulp, hash-only blocks that differ, description of the first difference).
fn compare_output(
    m: &Manifest,
    t: &common::TensorDesc,
    pieces: &[(u64, Vec<u8>)],
) -> (usize, u32, usize, String) {
    let es = t.elem_size();
    let (mut diffs, mut max_ulp, mut hash_diffs) = (0usize, 0u32, 0usize);
    let mut first = String::new();
    for b in &t.blocks {
        let Some(got) = piece_slice(pieces, es, b.elem_offset, b.elems) else {
            hash_diffs += 1;
            first = format!("block @{} was not downloaded", b.elem_offset);
            continue;
        };
        match m.block_bytes(b) {
            Some(want) => {
                let (n, u, f) = compare_elems(&t.dtype, got, want);
                if n > 0 && first.is_empty() {
                    let i = f.unwrap();
                    first = format!(
                        "{} element {} (storage {})",
                        t.name,
                        i,
                        b.elem_offset + i as u64
                    );
                }
                diffs += n;
                max_ulp = max_ulp.max(u);
            }
            None => {
                if sha256_hex(got) != b.sha256 {
                    hash_diffs += 1;
                    if first.is_empty() {
                        first = format!("{} block @{} (hash only) differs", t.name, b.elem_offset);
                    }
                }
            }
        }
    }
    (diffs, max_ulp, hash_diffs, first)
}

/// Elements of the downloaded pieces that lie outside every block of `t` and differ from the
/// input (the recorded output leaves them unchanged by construction).
fn outside_blocks_changed(
    t: &common::TensorDesc,
    got: &[(u64, Vec<u8>)],
    input: &common::HostStorage,
) -> usize {
    let es = t.elem_size();
    let mut covered: Vec<(u64, u64)> = t
        .blocks
        .iter()
        .map(|b| (b.elem_offset, b.elem_offset + b.elems))
        .collect();
    covered.sort();
    let mut changed = 0;
    for (lo, bytes) in got {
        let n = (bytes.len() / es) as u64;
        let mut e = *lo;
        while e < lo + n {
            if let Some(&(_, hi)) = covered.iter().find(|(a, b)| *a <= e && e < *b) {
                e = hi;
                continue;
            }
            let want = input
                .pieces
                .iter()
                .find(|(o, b)| *o <= e && e < o + (b.len() / es) as u64)
                .map(|(o, b)| &b[((e - o) as usize) * es..((e - o) as usize + 1) * es]);
            let have = &bytes[((e - lo) as usize) * es..((e - lo) as usize + 1) * es];
            let zero = vec![0u8; es];
            if have != want.unwrap_or(&zero) {
                changed += 1;
            }
            e += 1;
        }
    }
    changed
}

fn run_one(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    m: &Manifest,
    case: &Case,
    hosts: &BTreeMap<String, common::HostStorage>,
    r: &ResultEntry,
    device_sms: u64,
) -> Outcome {
    let alg = r.algorithm_requested.as_str();
    let label = format!("| {:<28} | {:<8} |", case.name, alg);
    if alg == "auto" && rule(case.batch, case.nheads, device_sms) != r.algorithm_used_by_rule {
        return Outcome {
            line: format!(
                "{label} skipped: this device has {device_sms} SMs, auto would not pick {} |",
                r.algorithm_used_by_rule
            ),
            failed: false,
        };
    }
    let state_desc = case.input("state").unwrap();
    let mut state = SparseStorage::upload(ctx, stream, state_desc, &hosts["state"]);
    let mut bufs: BTreeMap<&str, DevBuf> = BTreeMap::new();
    for t in &case.inputs {
        if t.name != "state" {
            bufs.insert(
                t.name.as_str(),
                DevBuf::from_bytes(stream, &t.dtype, &hosts[&t.name].to_dense()),
            );
        }
    }
    let out_desc = r.output("out");
    let mut out = DevBuf::alloc(stream, &out_desc.dtype, out_desc.storage_elems as usize);
    out.fill_bytes(stream, 0, out_desc.storage_elems as usize, 0xFF);

    let input = |name: &str| {
        case.input(name).map(|t| ssu_dev::In {
            buf: &bufs[name],
            shape: usizes(&t.shape),
            strides: usizes(&t.strides),
        })
    };
    let mut call = ssu_dev::Call {
        state: ssu_dev::Out {
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
        out: ssu_dev::Out {
            buf: &mut out,
            shape: usizes(&out_desc.shape),
            strides: usizes(&out_desc.strides),
        },
        state_batch_indices: input("state_batch_indices"),
        dst_state_batch_indices: input("dst_state_batch_indices"),
        seed: if case.philox_rounds > 0 {
            input("rand_seed")
        } else {
            None
        },
        flags: ssu_dev::Flags {
            pad_slot_id: case.pad_slot_id,
            dt_softplus: case.dt_softplus,
            update_state: case.update_state,
            philox_rounds: case.philox_rounds,
            algorithm: match alg {
                "simple" => "simple",
                "vertical" => "vertical",
                _ => "auto",
            },
        },
    };
    if let Err(e) = ssu_dev::launch(stream, &mut call) {
        return Outcome {
            line: format!("{label} LAUNCH ERROR: {e} |"),
            failed: true,
        };
    }
    drop(call);
    if let Err(e) = stream.synchronize() {
        return Outcome {
            line: format!("{label} KERNEL ERROR: {e} |"),
            failed: true,
        };
    }
    let got_state = state.download();
    let got_out = vec![(0u64, out.download_all(stream))];

    let (sd, s_ulp, s_hash, s_first) = compare_output(m, r.output("state"), &got_state);
    let untouched = outside_blocks_changed(r.output("state"), &got_state, &hosts["state"]);
    let (od, o_ulp, o_hash, o_first) = compare_output(m, out_desc, &got_out);
    let state_ok = sd == 0 && s_hash == 0 && untouched == 0;
    let out_ok = od == 0 && o_hash == 0;
    let state_col = if state_ok {
        "ok".to_string()
    } else {
        format!(
            "DIFFERS {sd} el (max {s_ulp} ulp){}{}",
            if s_hash > 0 {
                format!(", {s_hash} hash-only blocks")
            } else {
                String::new()
            },
            if untouched > 0 {
                format!(", {untouched} outside blocks")
            } else {
                String::new()
            }
        )
    };
    let out_col = if o_hash > 0 {
        format!("hash differs ({o_hash} blocks)")
    } else {
        format!("{od}")
    };
    let mut line = format!(
        "{label} {:<40} | {:>10} | {:>7} |",
        state_col,
        out_col,
        if od > 0 {
            o_ulp.to_string()
        } else {
            "-".into()
        }
    );
    for f in [&s_first, &o_first] {
        if !f.is_empty() {
            line.push_str(&format!(" first: {f};"));
        }
    }
    Outcome {
        line,
        failed: !(state_ok && out_ok),
    }
}

#[test]
#[ignore = "requires a CUDA GPU"]
fn flashinfer_reference_bit_exact() {
    let Some((ctx, stream)) = common::gpu() else {
        return;
    };
    let m = Manifest::from_env_or_embedded();
    let device_sms = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .expect("SM count") as u64;
    println!("device SMs: {device_sms}; {} cases", m.cases.len());
    println!(
        "| {:<28} | {:<8} | {:<40} | {:>10} | {:>7} |",
        "case", "alg", "state", "out diffs", "max ulp"
    );
    println!("|---|---|---|---|---|");
    let mut failed = Vec::new();
    let mut runs = 0;
    for case in &m.cases {
        let hosts: BTreeMap<String, common::HostStorage> = case
            .inputs
            .iter()
            .map(|t| (t.name.clone(), m.input_storage(t)))
            .collect();
        for r in &case.results {
            let o = run_one(&ctx, &stream, &m, case, &hosts, r, device_sms);
            println!("{}", o.line);
            runs += 1;
            if o.failed {
                failed.push(format!("{}/{}", case.name, r.algorithm_requested));
            }
        }
    }
    assert!(runs > 0, "no runs");
    assert!(
        failed.is_empty(),
        "{} of {runs} runs differ from FlashInfer: {failed:?} (table above)",
        failed.len()
    );
}
