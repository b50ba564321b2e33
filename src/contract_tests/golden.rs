//! The launch plans on the H200 (132 SMs) are the tuned ones: every plan of a grid of single- and
//! multi-token calls equals the one recorded in `h200_plans.txt` when the planning took
//! compile-time H200 constants (before it read the device's properties). A change to the
//! planning that moves an H200 plan fails here; re-record only with a same-run benchmark that
//! says the new plan is faster (BENCHMARKS.md), by running this test with
//! `MAMBA_SSU_WRITE_PLAN_GOLDEN=<path>`.

use super::plans::call;
use super::*;

/// A multi-token call: `t` tokens per sequence (fixed length), `nheads` heads of `dim` rows,
/// dstate `dstate`, fp16 (hot) or fp32 state, SR with `rounds` (0: off), z or not.
#[allow(clippy::too_many_arguments)]
pub(super) fn multi(
    batch: i64,
    t: i64,
    nheads: i64,
    dim: i64,
    dstate: i64,
    f32_state: bool,
    rounds: i32,
    z: bool,
) -> sys::mamba_ssu_args {
    let (sd, id) = (if f32_state { F32 } else { F16 }, BF16);
    // One group up to 64 heads; 128 heads in 2 (FlashInfer's multi-token kernel takes 1, 2, 4,
    // ..., 64 heads per group).
    let ng = (nheads / 64).max(1);
    let mut seed = pointer_seed();
    seed.rounds = rounds;
    if rounds == 0 {
        seed.mode = sys::MAMBA_SSU_SEED_MODE_NONE as i32;
    }
    sys::mamba_ssu_args {
        state: dense(1, sd, &[batch + 1, nheads, dim, dstate]),
        x: dense(2, id, &[batch, t, nheads, dim]),
        dt: tensor(3, id, &[batch, t, nheads, dim], &[t * nheads, nheads, 1, 0]),
        A: tensor(4, F32, &[nheads, dim, dstate], &[1, 0, 0]),
        B: dense(5, id, &[batch, t, ng, dstate]),
        C: dense(6, id, &[batch, t, ng, dstate]),
        D: tensor(7, id, &[nheads, dim], &[1, 0]),
        z: if z {
            dense(8, id, &[batch, t, nheads, dim])
        } else {
            absent()
        },
        dt_bias: tensor(9, id, &[nheads, dim], &[1, 0]),
        out: dense(10, id, &[batch, t, nheads, dim]),
        state_batch_indices: dense(11, I32, &[batch]),
        pad_slot_id: -1,
        seed,
        ..Default::default()
    }
}

fn line(what: &str, a: &sys::mamba_ssu_args) -> Option<String> {
    check(a).ok()?;
    let mut plan = sys::mamba_ssu_launch_plan::default();
    // SAFETY: valid pointers; with 132 SMs given the plan touches no device.
    let status = unsafe { sys::mamba_ssu_plan(a, 132, &mut plan) };
    assert_eq!(status, OK, "{what}");
    Some(format!(
        "{what}: grid {} tpb {} rpw {} bph {} alg {} hot {}",
        plan.grid_blocks,
        plan.threads_per_block,
        plan.rows_per_warp,
        plan.blocks_per_head,
        plan.algorithm,
        plan.compiled_kernel
    ))
}

/// The plans of the grid, one line each.
fn plans() -> String {
    let mut out = Vec::new();
    let hot = [F16, BF16, BF16];
    let f32s = [F32, BF16, BF16];
    for batch in [1usize, 2, 4, 8, 16, 32, 64, 128, 256, 512] {
        for nheads in [8usize, 32, 64, 128] {
            for dim in [64usize, 80, 128] {
                for dstate in [64usize, 128, 256] {
                    for (name, dtypes, rounds_set) in
                        [("f16", hot, &[0, 5, 10][..]), ("f32", f32s, &[0][..])]
                    {
                        for &rounds in rounds_set {
                            for algo in [0, 1, 2] {
                                for z in [false, true] {
                                    let a = call(
                                        batch, nheads, dim, dstate, dtypes, rounds, algo, z, None,
                                        false,
                                    );
                                    let what = format!("1 b{batch} h{nheads} d{dim} n{dstate} {name} R{rounds} a{algo} z{}", u8::from(z));
                                    out.extend(line(&what, &a));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    for batch in [1i64, 4, 16, 64, 256] {
        for t in [1i64, 2, 4, 8, 16] {
            for nheads in [32i64, 128] {
                for dim in [64i64, 80, 128] {
                    for dstate in [64i64, 128, 256] {
                        for (f32_state, rounds) in [(false, 0), (false, 5), (false, 10), (true, 0)]
                        {
                            for z in [false, true] {
                                let a = multi(batch, t, nheads, dim, dstate, f32_state, rounds, z);
                                let what = format!(
                                    "T b{batch} t{t} h{nheads} d{dim} n{dstate} {} R{rounds} z{}",
                                    if f32_state { "f32" } else { "f16" },
                                    u8::from(z)
                                );
                                out.extend(line(&what, &a));
                            }
                        }
                    }
                }
            }
        }
    }
    out.join("\n") + "\n"
}

/// FNV-1a over `text`: the recorded file keeps one digest per group of plans.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The plans grouped by call form, batch, heads and head dim (a line's first four words), as
/// `group lines digest` lines.
fn digests(plans: &str) -> Vec<(String, usize, u64)> {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for l in plans.lines() {
        let key = l.split(' ').take(4).collect::<Vec<_>>().join(" ");
        match groups.last_mut() {
            Some((k, v)) if *k == key => v.push(l),
            _ => groups.push((key, vec![l])),
        }
    }
    groups
        .into_iter()
        .map(|(k, v)| (k, v.len(), fnv1a(&v.join("\n"))))
        .collect()
}

#[test]
fn h200_plans_are_the_tuned_ones() {
    let now = plans();
    let now_d = digests(&now);
    // The whole plan text, for a diff of what moved (development aid).
    if let Ok(path) = std::env::var("MAMBA_SSU_WRITE_PLANS") {
        std::fs::write(&path, &now).expect("writing the plans");
    }
    if let Ok(path) = std::env::var("MAMBA_SSU_WRITE_PLAN_GOLDEN") {
        let text: String = now_d
            .iter()
            .map(|(k, n, h)| format!("{k} {n} {h:016x}\n"))
            .collect();
        std::fs::write(&path, text).expect("writing the plan golden file");
    }
    let golden: Vec<&str> = include_str!("h200_plans.txt").lines().collect();
    assert!(now.lines().count() > 5000, "the grid lost its coverage");
    assert_eq!(golden.len(), now_d.len(), "the grid's groups changed");
    let mut moved = Vec::new();
    for (g, (k, n, h)) in golden.iter().zip(&now_d) {
        if *g != format!("{k} {n} {h:016x}") {
            moved.push(format!(
                "recorded `{g}`, now `{k} {n} {h:016x}`; its plans now:"
            ));
            moved.extend(
                now.lines()
                    .filter(|l| l.starts_with(&format!("{k} ")))
                    .map(String::from),
            );
        }
    }
    assert!(moved.is_empty(), "H200 plans moved:\n{}", moved.join("\n"));
}
