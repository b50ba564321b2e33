//! The single-token launch plan (`mamba_ssu_plan`) at the C level, over a dense grid of checked
//! calls: every call the check accepts gets a valid grid, and FlashInfer 0.7.4's SR conversion
//! runs (and is planned on) the generic kernel.

use super::*;

/// A single-token call of these sizes that the check accepts whenever its sizes and dtypes do:
/// contiguous tensors (rows rounded up to 16 bytes), ngroups 1, placeholder pointers, an
/// optional z and read index, a seed pointer with `rounds`, a fused chain's next link.
#[allow(clippy::too_many_arguments)]
pub(super) fn call(
    batch: usize,
    nheads: usize,
    dim: usize,
    dstate: usize,
    dtypes: [i32; 3],
    rounds: i32,
    algorithm: i32,
    z: bool,
    index: Option<i32>,
    next: bool,
) -> sys::mamba_ssu_args {
    let [b, h, d, n] = [batch, nheads, dim, dstate].map(|v| v as i64);
    let [state, input, weight] = dtypes;
    let row = (h * d + 7) / 8 * 8;
    let bsd = [b, h, d];
    sys::mamba_ssu_args {
        state: dense(1, state, &[b + 1, h, d, n]),
        x: tensor(2, input, &bsd, &[row, d, 1]),
        dt: tensor(3, weight, &bsd, &[h, 1, 0]),
        A: tensor(4, F32, &[h, d, n], &[1, 0, 0]),
        B: dense(5, input, &[b, 1, n]),
        C: dense(6, input, &[b, 1, n]),
        D: tensor(7, weight, &[h, d], &[1, 0]),
        z: if z {
            tensor(8, input, &bsd, &[row, d, 1])
        } else {
            absent()
        },
        dt_bias: tensor(9, weight, &[h, d], &[1, 0]),
        out: tensor(10, input, &bsd, &[row, d, 1]),
        state_batch_indices: index.map_or_else(absent, |t| dense(11, t, &[b])),
        pad_slot_id: -1,
        algorithm,
        seed: sys::mamba_ssu_seed {
            mode: if rounds > 0 {
                sys::MAMBA_SSU_SEED_MODE_POINTER as i32
            } else {
                sys::MAMBA_SSU_SEED_MODE_NONE as i32
            },
            rounds,
            pointer: ph(40) as *const i64,
            next: if next {
                ph(41) as *mut i64
            } else {
                std::ptr::null_mut()
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

fn plan_of(a: &sys::mamba_ssu_args, sms: i32) -> (i32, sys::mamba_ssu_launch_plan) {
    let mut plan = sys::mamba_ssu_launch_plan::default();
    // SAFETY: valid pointers; with sms > 0 the plan touches no device.
    let status = unsafe { sys::mamba_ssu_plan(a, sms, &mut plan) };
    (status, plan)
}

/// Every call the check accepts gets a valid launch configuration (no division by zero, no
/// empty or oversized grid, every row of a head covered), over a dense grid of shapes — dim
/// 1..=256, nheads up to 8192, batch up to 512 — with every dtype, dstate, round count,
/// algorithm, z, index and fused-chain combination, on three SM counts. Among them the shapes
/// that once crashed the host (dim 8 × 1024 heads × batch 4, dim 4 × 512 × 64, dim 1 × batch
/// 2): the grid rule divided by zero there.
#[test]
fn every_accepted_call_has_a_valid_launch_plan() {
    let f = [F32, F16, BF16];
    let hot = [F16, BF16, BF16];
    let algos = [0, 1, 2, 3];
    let heads = [1usize, 2, 3, 8, 32, 128, 512, 1024, 8192];
    let batches = [1usize, 2, 4, 7, 64, 256, 512];
    let (mut accepted, mut k) = (0usize, 0usize);
    for dim in 1..=256usize {
        for &nheads in &heads {
            for &batch in &batches {
                let mut cases = Vec::new();
                for rounds in [0, 5, 10] {
                    for algo in algos {
                        cases.push((128, hot, rounds, algo, k % 2 == 0, None, k % 5 == 0));
                    }
                }
                // One generic combination per shape, cycling through all of them.
                let dtypes = [f[k % 3], f[(k / 3) % 3], f[(k / 9) % 3]];
                let dstate = [64, 128, 256][(k / 27) % 3];
                let rounds = if dtypes[0] == F16 {
                    [0, 1, 5, 10][(k / 81) % 4]
                } else {
                    0
                };
                let index = [None, Some(I32), Some(I64)][(k / 7) % 3];
                let generic = (
                    dstate,
                    dtypes,
                    rounds,
                    algos[k % 4],
                    k % 2 == 1,
                    index,
                    k % 3 == 0,
                );
                cases.push(generic);
                let sms = [132, 1, 78][k % 3];
                k += 1;
                for (dstate, dtypes, rounds, algo, z, index, next) in cases {
                    let a = call(
                        batch, nheads, dim, dstate, dtypes, rounds, algo, z, index, next,
                    );
                    if check(&a).is_err() {
                        continue;
                    }
                    accepted += 1;
                    let (st, plan) = plan_of(&a, sms);
                    let what = format!("b={batch} h={nheads} dim={dim} dstate={dstate} {dtypes:?} R={rounds} alg={algo} z={z} next={next} sms={sms}");
                    assert_eq!(st, OK, "{what}");
                    assert_covering(&what, &plan, (batch * nheads) as i64, dim as i64);
                    assert_hot_tiling(&what, &plan, dim as i64);
                    assert_eq!(plan.num_sms, sms, "{what}");
                }
            }
        }
    }
    assert!(
        accepted > 100_000,
        "only {accepted} accepted calls: the grid lost its coverage"
    );
}

/// FlashInfer 0.7.4's SR conversion runs the generic kernel (the hot kernels implement
/// 0.7.2's) and the plan reports it; without SR the rule changes nothing; the layout is
/// resolved the same way for both rules.
#[test]
fn the_v074_rule_runs_the_generic_kernel_and_the_plan_says_so() {
    let hot = [F16, BF16, BF16];
    let (v072, v074) = (sys::MAMBA_SSU_SR_V072 as i32, sys::MAMBA_SSU_SR_V074 as i32);
    for rounds in [0, 5, 10] {
        for algo in [0, 1, 2] {
            for (batch, nheads, z) in [(1, 32, false), (4, 32, true), (256, 128, false)] {
                let mut plans = Vec::new();
                for rule in [v072, v074] {
                    let mut a = call(batch, nheads, 64, 128, hot, rounds, algo, z, None, false);
                    a.seed.rule = rule;
                    let (st, plan) = plan_of(&a, 132);
                    assert_eq!(st, OK);
                    let generic = rounds > 0 && rule == v074;
                    assert_eq!(
                        plan.compiled_kernel,
                        i32::from(!generic),
                        "R={rounds} alg={algo} b={batch} h={nheads} rule={rule}"
                    );
                    plans.push(plan.algorithm);
                }
                assert_eq!(plans[0], plans[1]);
            }
        }
    }
}

/// A BF16, F32 or I16 state without SR, with BF16 inputs and weights, runs the compiled-in
/// kernels (the F16 ones' code with the state converted from and to bf16, in fp32, or int16 with
/// decode scales) at every head dim and dstate they take, in both layouts, on small and large
/// grids, tiling the head as the F16 ones do; with FP32 inputs and weights (what
/// `tests/ssu_numerics.rs` and `tests/ssu_int16.rs` compare it with) the generic kernel.
#[test]
fn bf16_f32_and_i16_states_without_sr_plan_the_compiled_in_kernels() {
    let simple = sys::MAMBA_SSU_ALGO_SIMPLE as i32;
    let vertical = sys::MAMBA_SSU_ALGO_VERTICAL as i32;
    for state in [BF16, F32, I16] {
        for dim in [64, 80, 128, 256] {
            for dstate in [64, 128, 256] {
                for algo in [simple, vertical] {
                    for (batch, nheads, z) in [(1, 8, false), (16, 128, true), (40, 128, false)] {
                        let what = format!(
                            "state {state} dim {dim} dstate {dstate} alg {algo} b{batch} h{nheads}"
                        );
                        let narrow = [state, BF16, BF16];
                        let a = call(batch, nheads, dim, dstate, narrow, 0, algo, z, None, false);
                        let (st, plan) = plan_of(&a, 132);
                        assert_eq!(st, OK, "{what}");
                        assert_eq!(plan.compiled_kernel, 1, "{what}");
                        assert_hot_tiling(&what, &plan, dim as i64);
                        let wide = [state, F32, F32];
                        let a = call(batch, nheads, dim, dstate, wide, 0, algo, z, None, false);
                        let (st, plan) = plan_of(&a, 132);
                        assert_eq!(st, OK, "{what}, fp32 inputs");
                        assert_eq!(plan.compiled_kernel, 0, "{what}, fp32 inputs");
                    }
                }
            }
        }
    }
}

/// fp16 inputs and weights (an fp16 model) run the compiled-in kernels in a build with them
/// (`MAMBA_SSU_F16_INPUT_KERNELS=1`: cfg `f16_input_kernels`) at every head dim and dstate the
/// bf16-input ones take: over an fp16 state with 0, 5 and 10 rounds, over a bf16 or an fp32
/// state without SR; the simple and vertical layouts and the horizontal mapping (its head dims,
/// and dstate 96 too), small and large grids, tiling the head as the bf16-input ones do, in
/// their grid; without them, and in every build for fp16 inputs with bf16 weights, the generic
/// kernel; an SR call under 0.7.4's rule the generic kernel but in the horizontal mapping (whose
/// kernels take the rule at run time).
#[test]
fn fp16_inputs_plan_the_compiled_in_kernels_where_the_build_has_them() {
    let built = cfg!(f16_input_kernels);
    let simple = sys::MAMBA_SSU_ALGO_SIMPLE as i32;
    let vertical = sys::MAMBA_SSU_ALGO_VERTICAL as i32;
    let horizontal = sys::MAMBA_SSU_ALGO_HORIZONTAL as i32;
    for dim in [64, 80, 128, 256] {
        for dstate in [64, 96, 128, 256] {
            for algo in [simple, vertical, horizontal] {
                // HORIZONTAL takes head dims that are multiples of 64; the uneven dstate 96 runs
                // compiled-in kernels only there (its any-stage-count kernels).
                if (algo == horizontal && dim % 64 != 0) || (algo != horizontal && dstate == 96) {
                    continue;
                }
                for rounds in [0, 5, 10] {
                    for (batch, nheads, z) in [(1, 8, false), (16, 128, true), (40, 128, false)] {
                        let what = format!(
                            "dim {dim} dstate {dstate} alg {algo} R={rounds} b{batch} h{nheads}"
                        );
                        let plan_with = |dtypes: [i32; 3], rule: i32| {
                            let mut a = call(
                                batch, nheads, dim, dstate, dtypes, rounds, algo, z, None, false,
                            );
                            a.seed.rule = rule;
                            let (st, plan) = plan_of(&a, 132);
                            assert_eq!(st, OK, "{what} {dtypes:?}");
                            plan
                        };
                        let v072 = sys::MAMBA_SSU_SR_V072 as i32;
                        let plan = plan_with([F16, F16, F16], v072);
                        assert_eq!(plan.algorithm, algo, "{what}");
                        assert_eq!(plan.compiled_kernel, i32::from(built), "{what}");
                        assert_hot_tiling(&what, &plan, dim as i64);
                        if built {
                            // The bf16-input kernels' grid.
                            let bf16 = plan_with([F16, BF16, BF16], v072);
                            let grid = |p: &sys::mamba_ssu_launch_plan| {
                                (p.rows_per_warp, p.warps_per_block, p.blocks_per_head)
                            };
                            assert_eq!(grid(&plan), grid(&bf16), "{what}");
                        }
                        let mixed = plan_with([F16, F16, BF16], v072);
                        assert_eq!(mixed.compiled_kernel, 0, "{what}, bf16 weights");
                        // The horizontal kernels (and the uneven dstate's) take 0.7.4's rule
                        // at run time: compiled-in there too.
                        let v074_compiled = algo == horizontal && built;
                        if rounds == 0 {
                            // Over a bf16 or an fp32 state: the compiled-in kernels of those
                            // states (no SR) with fp16 inputs, in their bf16-input twins' grid.
                            for state in [BF16, F32] {
                                let f16in = plan_with([state, F16, F16], v072);
                                let twin = plan_with([state, BF16, BF16], v072);
                                assert_eq!(twin.compiled_kernel, 1, "{what}, state {state}");
                                assert_eq!(
                                    f16in.compiled_kernel,
                                    i32::from(built),
                                    "{what}, state {state}"
                                );
                                if built {
                                    assert_eq!(
                                        (f16in.rows_per_warp, f16in.warps_per_block),
                                        (twin.rows_per_warp, twin.warps_per_block),
                                        "{what}, state {state}"
                                    );
                                    assert_eq!(
                                        f16in.blocks_per_head, twin.blocks_per_head,
                                        "{what}, state {state}"
                                    );
                                }
                            }
                        } else {
                            let v074 = plan_with([F16, F16, F16], sys::MAMBA_SSU_SR_V074 as i32);
                            assert_eq!(
                                v074.compiled_kernel,
                                i32::from(v074_compiled),
                                "{what}, 0.7.4's rule"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The per-SM limits of the GPU families the library ships machine code for (compute
/// capabilities 8.0, 8.6, 8.9, 9.0, 10.0 and 12.0, from the CUDA C++ Programming Guide's table
/// of technical specifications per compute capability), each with the SM count of one part
/// (A100, A10, L40S, H200, B200, RTX PRO 6000 Blackwell), and a one-SM device.
pub(super) fn families() -> Vec<(&'static str, sys::mamba_ssu_device_props)> {
    let props = |cc: (i32, i32), sms, threads, blocks, smem_sm| sys::mamba_ssu_device_props {
        cc_major: cc.0,
        cc_minor: cc.1,
        num_sms: sms,
        max_threads_per_sm: threads,
        max_blocks_per_sm: blocks,
        regs_per_sm: 65536,
        smem_per_sm: smem_sm,
        smem_per_block: 49152,
        reserved_smem_per_block: 1024,
        reserved: 0,
    };
    vec![
        ("sm_80 A100", props((8, 0), 108, 2048, 32, 167_936)),
        ("sm_86 A10", props((8, 6), 72, 1536, 16, 102_400)),
        ("sm_89 L40S", props((8, 9), 142, 1536, 24, 102_400)),
        ("sm_90 H200", props((9, 0), 132, 2048, 32, 233_472)),
        ("sm_100 B200", props((10, 0), 148, 2048, 32, 233_472)),
        (
            "sm_120 RTX PRO 6000",
            props((12, 0), 188, 1536, 32, 102_400),
        ),
        ("one SM", props((8, 6), 1, 1536, 16, 102_400)),
    ]
}

fn plan_for(
    a: &sys::mamba_ssu_args,
    d: &sys::mamba_ssu_device_props,
) -> (i32, sys::mamba_ssu_launch_plan) {
    let mut plan = sys::mamba_ssu_launch_plan::default();
    // SAFETY: valid pointers; planning for given properties touches no device.
    let status = unsafe { sys::mamba_ssu_plan_for_device(a, d, &mut plan) };
    (status, plan)
}

/// FlashInfer's ALGO_AUTO (the crate's resolution of it): below sm_90 SIMPLE; SIMPLE below the
/// SM-count switch; VERTICAL on the sm_90 family; from sm_100 on VERTICAL for an F32 state and
/// HORIZONTAL for a 2-byte one whose head dim HORIZONTAL takes (VERTICAL for the others,
/// FlashInfer 0.7.4's fallback).
fn expected_auto(d: &sys::mamba_ssu_device_props, below: bool, dim: usize, state: i32) -> i32 {
    let horizontal_dim = dim % 64 == 0 && (64..=256).contains(&dim);
    // FlashInfer 0.7.4: a head dim its vertical kernel does not take runs simple.
    let vertical_dim = dim % 16 == 0 && dim >= 48;
    if d.cc_major < 9 || below || !vertical_dim {
        sys::MAMBA_SSU_ALGO_SIMPLE as i32
    } else if d.cc_major >= 10 && state != F32 && horizontal_dim {
        sys::MAMBA_SSU_ALGO_HORIZONTAL as i32
    } else {
        sys::MAMBA_SSU_ALGO_VERTICAL as i32
    }
}

/// A valid covering grid: blocks for every (batch, head), every row of a head served. A
/// HORIZONTAL plan's blocks are 4 warps of rows_per_warp rows, a multiple of 16 that divides
/// the head dim, one (batch, head) per warp (a block may serve several heads): the warps of
/// the grid (less a fused chain's extra block) cover every row once.
fn assert_covering(what: &str, plan: &sys::mamba_ssu_launch_plan, heads: i64, dim: i64) {
    if plan.algorithm == sys::MAMBA_SSU_ALGO_HORIZONTAL as i32 {
        let rpw = i64::from(plan.rows_per_warp);
        assert!(
            rpw % 16 == 0 && dim % rpw == 0 && plan.warps_per_block == 4,
            "{what}: {plan:?}"
        );
        assert_eq!(plan.threads_per_block, 128, "{what}: {plan:?}");
        let warps = heads * (dim / rpw);
        let blocks = (warps + 3) / 4;
        assert!(
            (blocks..=blocks + 1).contains(&plan.grid_blocks),
            "{what}: {plan:?}: {warps} warps"
        );
        assert_eq!(
            plan.blocks_per_head,
            (dim / rpw + 3) / 4,
            "{what}: {plan:?}"
        );
        return;
    }
    assert!(
        (heads..=i64::from(i32::MAX)).contains(&plan.grid_blocks),
        "{what}: {plan:?}"
    );
    assert!(
        (32..=1024).contains(&plan.threads_per_block)
            && plan.threads_per_block == 32 * plan.warps_per_block,
        "{what}: {plan:?}"
    );
    assert!(
        plan.rows_per_warp >= 1 && plan.blocks_per_head >= 1,
        "{what}: {plan:?}"
    );
    let covered =
        i64::from(plan.warps_per_block) * i64::from(plan.rows_per_warp) * plan.blocks_per_head;
    assert!(
        covered >= dim,
        "{what}: {plan:?} covers {covered} of {dim} rows"
    );
}

/// A single-token compiled-in (hot) kernel's grid tiles the head exactly: its chunks are full
/// (every warp has rows_per_warp rows, a multiple of the 4-row chunk or a 1- or 2-row small-grid
/// warp) and a block's first row is its index in the head times its warps' rows (blocks of 4
/// warps, 8 for the 2-row kernels without SR, or one block per head); at head dim 64 and at
/// the others the run-time head_dim kernels (HotDimConfig) serve.
fn assert_hot_tiling(what: &str, plan: &sys::mamba_ssu_launch_plan, dim: i64) {
    // HORIZONTAL's grid: assert_covering.
    if plan.compiled_kernel == 0 || plan.algorithm == sys::MAMBA_SSU_ALGO_HORIZONTAL as i32 {
        return;
    }
    let rpw = i64::from(plan.rows_per_warp);
    let covered = i64::from(plan.warps_per_block) * rpw * plan.blocks_per_head;
    assert_eq!(
        covered, dim,
        "{what}: {plan:?} does not tile the head exactly"
    );
    assert!(rpw <= 2 || rpw % 4 == 0, "{what}: {plan:?}: partial chunks");
    assert!(
        plan.blocks_per_head == 1 || matches!(plan.warps_per_block, 4 | 8),
        "{what}: {plan:?}: partial blocks"
    );
}

/// On every GPU family's properties, every accepted single- and multi-token call gets a valid
/// covering grid; ALGO_AUTO resolves to SIMPLE below sm_90 (FlashInfer's kernels for those GPUs
/// have that layout only) and by the SM-count rule from sm_90 on; the plan is for the given SM
/// count; the multi-token hot dtypes plan a compiled-in kernel at dstate 64, 128 and 256.
#[test]
fn every_gpu_family_gets_a_valid_covering_grid() {
    let f = [F32, F16, BF16];
    let hot = [F16, BF16, BF16];
    let dims = [
        1usize, 2, 3, 7, 8, 16, 31, 48, 63, 64, 65, 80, 96, 127, 128, 129, 192, 256,
    ];
    let heads = [1usize, 3, 8, 32, 128, 1024];
    let batches = [1usize, 2, 7, 64, 512];
    let mut accepted = 0usize;
    for (name, d) in families() {
        let mut k = 0usize;
        for &dim in &dims {
            for &nheads in &heads {
                for &batch in &batches {
                    let mut cases = Vec::new();
                    for rounds in [0, 5, 10] {
                        for algo in [0, 1, 2, 3] {
                            cases.push((128, hot, rounds, algo, k % 2 == 0, k % 5 == 0));
                        }
                    }
                    let dtypes = [f[k % 3], f[(k / 3) % 3], f[(k / 9) % 3]];
                    let rounds = if dtypes[0] == F16 {
                        [0, 1, 5, 10][(k / 27) % 4]
                    } else {
                        0
                    };
                    cases.push((
                        [64, 128, 256][k % 3],
                        dtypes,
                        rounds,
                        k % 4,
                        k % 2 == 1,
                        false,
                    ));
                    k += 1;
                    for (dstate, dtypes, rounds, algo, z, next) in cases {
                        let a = call(
                            batch,
                            nheads,
                            dim,
                            dstate,
                            dtypes,
                            rounds,
                            algo as i32,
                            z,
                            None,
                            next,
                        );
                        if check(&a).is_err() {
                            continue;
                        }
                        accepted += 1;
                        let what = format!("{name}: b={batch} h={nheads} dim={dim} dstate={dstate} {dtypes:?} R={rounds} alg={algo}");
                        let (st, plan) = plan_for(&a, &d);
                        assert_eq!(st, OK, "{what}");
                        assert_covering(&what, &plan, (batch * nheads) as i64, dim as i64);
                        assert_hot_tiling(&what, &plan, dim as i64);
                        assert_eq!(plan.num_sms, d.num_sms, "{what}");
                        if algo == 0 {
                            let below = ((batch * nheads) as i64) < 2 * i64::from(d.num_sms);
                            let expect = expected_auto(&d, below, dim, dtypes[0]);
                            assert_eq!(plan.algorithm, expect, "{what}");
                        } else {
                            assert_eq!(plan.algorithm, algo as i32, "{what}");
                        }
                    }
                }
            }
        }
        for batch in [1i64, 3, 64, 512] {
            for t in [1i64, 2, 5, 8, 16] {
                for nheads in [1i64, 8, 128] {
                    for dim in [16i64, 48, 64, 80, 128, 256] {
                        for dstate in [64i64, 128, 256] {
                            for (f32_state, rounds) in [(false, 0), (false, 10), (true, 0)] {
                                let a = super::golden::multi(
                                    batch,
                                    t,
                                    nheads,
                                    dim,
                                    dstate,
                                    f32_state,
                                    rounds,
                                    t % 2 == 0,
                                );
                                if check(&a).is_err() {
                                    continue;
                                }
                                accepted += 1;
                                let what = format!("{name}: multi b={batch} T={t} h={nheads} dim={dim} dstate={dstate} f32={f32_state} R={rounds}");
                                let (st, plan) = plan_for(&a, &d);
                                assert_eq!(st, OK, "{what}");
                                assert_covering(&what, &plan, batch * nheads, dim);
                                // F16 state, BF16 inputs, 0 or 10 rounds: compiled in at every
                                // dstate (also where shared memory takes rows per group away).
                                assert_eq!(plan.compiled_kernel, i32::from(!f32_state), "{what}");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(accepted > 50_000, "only {accepted} accepted calls");
}

/// The properties a planner gives are checked: a zero count or a reserved field is refused with
/// the argument named; the SM90 template is what mamba_ssu_plan plans for with an SM count.
#[test]
fn device_properties_are_checked_and_the_sm90_template_is_mamba_ssu_plans() {
    let a = call(
        64,
        128,
        64,
        128,
        [F16, BF16, BF16],
        10,
        0,
        false,
        None,
        false,
    );
    let h200 = families()[3].1;
    for bad in [
        sys::mamba_ssu_device_props { num_sms: 0, ..h200 },
        sys::mamba_ssu_device_props {
            max_threads_per_sm: 0,
            ..h200
        },
        sys::mamba_ssu_device_props {
            smem_per_block: -1,
            ..h200
        },
        sys::mamba_ssu_device_props {
            reserved: 1,
            ..h200
        },
    ] {
        let (st, _) = plan_for(&a, &bad);
        assert_eq!(st, sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT as i32, "{bad:?}");
        // SAFETY: a NUL-terminated string valid until the next call on this thread.
        let arg = unsafe { std::ffi::CStr::from_ptr(sys::mamba_ssu_last_error_argument()) };
        assert_eq!(arg.to_string_lossy(), "props");
    }
    // SAFETY: a null props pointer is rejected, never read.
    let st =
        unsafe { sys::mamba_ssu_plan_for_device(&a, std::ptr::null(), &mut Default::default()) };
    assert_eq!(st, sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT as i32);
    for sms in [1, 78, 132] {
        let (_, by_count) = plan_of(&a, sms);
        let (st, by_props) = plan_for(
            &a,
            &sys::mamba_ssu_device_props {
                num_sms: sms,
                ..h200
            },
        );
        assert_eq!(st, OK);
        assert_eq!(
            format!("{by_count:?}"),
            format!("{by_props:?}"),
            "{sms} SMs"
        );
    }
}

/// ALGO_AUTO on given properties (`mamba_ssu_resolve_algorithm_for_device`): SIMPLE below sm_90
/// whatever the grid, the SM-count rule from sm_90 on; the sm_90 template
/// (`mamba_ssu_device_props_sm90`) resolves as `mamba_ssu_resolve_algorithm` with an SM count;
/// bad properties and a null pointer are refused.
#[test]
fn auto_resolves_per_device_family() {
    let auto = sys::MAMBA_SSU_ALGO_AUTO as i32;
    let (simple, vertical) = (
        sys::MAMBA_SSU_ALGO_SIMPLE as i32,
        sys::MAMBA_SSU_ALGO_VERTICAL as i32,
    );
    for (name, d) in families() {
        for (batch, nheads) in [(1i64, 1i64), (8, 32), (64, 128), (512, 8192)] {
            // SAFETY: `d` is valid; no device is touched.
            let r = unsafe { sys::mamba_ssu_resolve_algorithm_for_device(auto, batch, nheads, &d) };
            let below = batch * nheads < 2 * i64::from(d.num_sms);
            let expect = if d.cc_major < 9 || below {
                simple
            } else {
                vertical
            };
            assert_eq!(r, expect, "{name}: {batch} x {nheads}");
            // SAFETY: as above.
            let fixed =
                unsafe { sys::mamba_ssu_resolve_algorithm_for_device(vertical, batch, nheads, &d) };
            assert_eq!(fixed, vertical, "{name}");
        }
    }
    for sms in [1, 78, 132] {
        let mut t = sys::mamba_ssu_device_props::default();
        // SAFETY: valid output; no device is touched.
        assert_eq!(unsafe { sys::mamba_ssu_device_props_sm90(sms, &mut t) }, OK);
        assert_eq!(
            format!("{t:?}"),
            format!(
                "{:?}",
                sys::mamba_ssu_device_props {
                    num_sms: sms,
                    ..families()[3].1
                }
            )
        );
        for (batch, nheads) in [(1i64, 1i64), (8, 32), (64, 128)] {
            // SAFETY: valid arguments; with an SM count given no device is touched.
            let (a, b) = unsafe {
                (
                    sys::mamba_ssu_resolve_algorithm_for_device(auto, batch, nheads, &t),
                    sys::mamba_ssu_resolve_algorithm(auto, batch, nheads, sms),
                )
            };
            assert_eq!(a, b, "{sms} SMs, {batch} x {nheads}");
        }
    }
    let bad = sys::mamba_ssu_device_props {
        num_sms: 0,
        ..families()[3].1
    };
    let invalid = -(sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT as i32);
    // SAFETY: `bad` is valid memory; a null pointer is refused, never read.
    unsafe {
        assert_eq!(
            sys::mamba_ssu_resolve_algorithm_for_device(auto, 1, 1, &bad),
            invalid
        );
        assert_eq!(
            sys::mamba_ssu_resolve_algorithm_for_device(auto, 1, 1, std::ptr::null()),
            invalid
        );
        assert_eq!(
            sys::mamba_ssu_device_props_sm90(0, &mut Default::default()),
            sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT as i32
        );
    }
}

/// ALGO_AUTO per architecture with the state dtype and head dim
/// (`mamba_ssu_resolve_algorithm_for_state`, and the plan of a checked call on the same
/// properties): FlashInfer's rule, SIMPLE for a head dim its vertical kernel does not take (not
/// a multiple of 16 or below 48: 0.7.4's rule), HORIZONTAL from sm_100 on for an F16 or BF16 state whose head
/// dim is a multiple of 64 up to 256 above the SM-count switch; VERTICAL for an F32 state and for
/// other head dims (FlashInfer 0.7.4's fallback; 0.7.2 runs its horizontal kernel out of bounds
/// there); never HORIZONTAL below sm_100. Explicit choices resolve to themselves, HORIZONTAL
/// with a head dim it does not take is refused, as are bad arguments.
#[test]
fn auto_follows_flashinfer_per_architecture() {
    let auto = sys::MAMBA_SSU_ALGO_AUTO as i32;
    let (simple, vertical, horizontal) = (
        sys::MAMBA_SSU_ALGO_SIMPLE as i32,
        sys::MAMBA_SSU_ALGO_VERTICAL as i32,
        sys::MAMBA_SSU_ALGO_HORIZONTAL as i32,
    );
    let resolve = |algo: i32, batch: i64, nheads: i64, dim: i64, state: i32, d| {
        // SAFETY: valid arguments; a pure function (no device is touched).
        unsafe { sys::mamba_ssu_resolve_algorithm_for_state(algo, batch, nheads, dim, state, d) }
    };
    let mut seen = std::collections::BTreeSet::new();
    for (name, d) in families() {
        for (batch, nheads) in [(1i64, 32i64), (8, 32), (64, 128), (512, 8192)] {
            let below = batch * nheads < 2 * i64::from(d.num_sms);
            for dim in [8i64, 48, 64, 80, 96, 128, 192, 256, 320] {
                for state in [F16, BF16, F32] {
                    let want = expected_auto(&d, below, dim as usize, state);
                    let what = format!("{name}: {batch} x {nheads}, dim {dim}, state {state}");
                    assert_eq!(resolve(auto, batch, nheads, dim, state, &d), want, "{what}");
                    seen.insert((d.cc_major >= 10, want));
                    for fixed in [simple, vertical] {
                        assert_eq!(resolve(fixed, batch, nheads, dim, state, &d), fixed);
                    }
                    let h = resolve(horizontal, batch, nheads, dim, state, &d);
                    if dim % 64 == 0 && dim <= 256 {
                        assert_eq!(h, horizontal, "{what}");
                    } else {
                        assert_eq!(h, -INV, "{what}");
                    }
                    // The plan of a checked call on these properties agrees.
                    if batch * nheads <= 4096 {
                        let dtypes = [state, BF16, BF16];
                        let a = call(
                            batch as usize,
                            nheads as usize,
                            dim as usize,
                            128,
                            dtypes,
                            0,
                            auto,
                            false,
                            None,
                            false,
                        );
                        let (st, plan) = plan_for(&a, &d);
                        assert_eq!((st, plan.algorithm), (OK, want), "{what}");
                    }
                }
            }
        }
    }
    // Every outcome occurs, HORIZONTAL only from sm_100 on.
    assert!(seen.contains(&(true, horizontal)) && seen.contains(&(true, vertical)));
    assert!(seen.contains(&(false, vertical)) && !seen.contains(&(false, horizontal)));
    let d = families()[4].1;
    // SAFETY: `d` is valid; a null pointer is refused, never read.
    unsafe {
        assert_eq!(
            resolve(auto, 1, 1, 64, I32, &d),
            -INV,
            "an integer state dtype"
        );
        assert_eq!(resolve(auto, 1, 1, 0, F16, &d), -INV, "dim 0");
        assert_eq!(
            resolve(7, 1, 1, 64, F16, &d),
            -VAL,
            "an algorithm outside the enumeration"
        );
        assert_eq!(
            sys::mamba_ssu_resolve_algorithm_for_state(auto, 1, 1, 64, F16, std::ptr::null()),
            -INV
        );
    }
    // The resolvers without the state answer as for an F32 state: never HORIZONTAL, and
    // HORIZONTAL resolves to itself.
    // SAFETY: valid arguments; no device is touched.
    unsafe {
        assert_eq!(
            sys::mamba_ssu_resolve_algorithm_for_device(auto, 512, 8192, &d),
            vertical
        );
        assert_eq!(
            sys::mamba_ssu_resolve_algorithm_for_device(horizontal, 1, 1, &d),
            horizontal
        );
        assert_eq!(
            sys::mamba_ssu_resolve_algorithm(horizontal, 1, 1, 132),
            horizontal
        );
    }
}

/// Above dstate 256 (to 512) SIMPLE and HORIZONTAL plan the run-time kernels; AUTO plans SIMPLE
/// below FlashInfer's switch, and above it (where FlashInfer's AUTO takes its vertical kernel,
/// whose launcher refuses these dstates) is INVALID_ARGUMENT, as an explicit VERTICAL.
#[test]
fn dstates_above_256_plan_run_time_kernels_and_refuse_auto_vertical() {
    let hot = [F16, BF16, BF16];
    let [auto, simple, horizontal] = [
        sys::MAMBA_SSU_ALGO_AUTO,
        sys::MAMBA_SSU_ALGO_SIMPLE,
        sys::MAMBA_SSU_ALGO_HORIZONTAL,
    ]
    .map(|v| v as i32);
    for ds in [288usize, 512] {
        for rounds in [0, 5] {
            let what = format!("dstate {ds} R={rounds}");
            // Batch 1 x 8 heads: below the switch at 132 SMs.
            for (algo, want) in [(auto, simple), (simple, simple), (horizontal, horizontal)] {
                let a = call(1, 8, 64, ds, hot, rounds, algo, true, None, false);
                let (st, plan) = plan_of(&a, 132);
                assert_eq!(st, OK, "{what} {algo}");
                // The horizontal kernel of any stage count has the dtypes and rounds compiled in.
                let compiled = i32::from(want == horizontal);
                assert_eq!(
                    (plan.algorithm, plan.compiled_kernel),
                    (want, compiled),
                    "{what} {algo}"
                );
                assert_covering(&what, &plan, 8, 64);
            }
            // Batch 256 x 128 heads: above it.
            let a = call(256, 128, 64, ds, hot, rounds, auto, false, None, false);
            assert_eq!(plan_of(&a, 132).0, INV, "{what}");
        }
    }
}

/// HORIZONTAL's rows per warp at 132 SMs, 128 heads: up to 64, halved while the grid has fewer
/// than 32 warps per SM; calls without SR on a compiled-in kernel in rows of 512 bytes under
/// 64 MiB of state up to 32, halved below 8 warps per SM (ssu_single_hz.cu, `kWideRowStages`).
#[test]
fn horizontal_rows_per_warp_follow_the_row_bytes_and_the_state_size() {
    let horizontal = sys::MAMBA_SSU_ALGO_HORIZONTAL as i32;
    let hot = [F16, BF16, BF16];
    let f32s = [F32, BF16, BF16];
    // (batch, dim, dstate, dtypes, rounds, rows per warp)
    let cases = [
        // 512-byte rows under 64 MiB without SR: 32 rows.
        (8, 64, 256, hot, 0, 32),
        (8, 64, 128, f32s, 0, 32),
        (4, 128, 256, hot, 0, 32),
        // ... with SR, in rows of 256 bytes or 1 KiB, or from 64 MiB on: the general rule.
        (8, 64, 256, hot, 5, 16),
        (8, 64, 128, hot, 0, 16),
        (8, 128, 256, hot, 0, 16),
        (4, 64, 256, f32s, 0, 16),
        // ... or on a run-time kernel (fp32 inputs).
        (8, 64, 256, [F16, F32, F32], 0, 16),
        (32, 64, 256, hot, 0, 32),
        (64, 64, 256, hot, 0, 64),
        // A small grid: 32 rows halve to 16 below 8 warps per SM (8 x 132 = 1056 warps).
        (1, 64, 256, hot, 0, 16),
    ];
    for (batch, dim, dstate, dtypes, rounds, rpw) in cases {
        let what = format!("b{batch} d{dim} n{dstate} {dtypes:?} R{rounds}");
        let a = call(
            batch, 128, dim, dstate, dtypes, rounds, horizontal, false, None, false,
        );
        let (st, plan) = plan_of(&a, 132);
        assert_eq!(st, OK, "{what}");
        assert_eq!(plan.rows_per_warp, rpw, "{what}");
        assert_covering(&what, &plan, (batch * 128) as i64, dim as i64);
    }
}
