//! The launch: [`selective_state_update_mtp`] checks the call first ([`validate_mtp`]), then
//! the devices, and enqueues it through the C ABI's `mamba_ssu_launch`; [`mtp_launch_plan`]
//! asks `mamba_ssu_plan` for the launch configuration of a call.

use cudarc::driver::CudaStream;

#[cfg(doc)]
use crate::device::DeviceProps;
use crate::error::{Error, Result};
use crate::reference::SrRule;
use crate::ssu::contract;

use super::args::{MtpArgs, MtpLaunchPlan, MtpSpec};
use super::validation::checked;

/// The launch configuration [`selective_state_update_mtp`] would use for a call of these
/// layouts on a device of the sm_90 family (H100, H200: [`DeviceProps::sm90`]'s per-SM limits)
/// with `num_sms` multiprocessors (`1..=i32::MAX`); on other GPUs the launch plans with their
/// own limits ([`DeviceProps::of`]). Validates `spec`
/// ([`validate_mtp`](super::validate_mtp)) and asks the C planner (`mamba_ssu_plan`). A pure
/// function: no device is touched. The plan of a call with a fused seed chain (a next link)
/// may hold one block more.
pub fn mtp_launch_plan(spec: &MtpSpec, num_sms: u32) -> Result<MtpLaunchPlan> {
    // The C planner queries the current device for a count <= 0: this function stays pure.
    let sms = i32::try_from(num_sms)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| {
            Error::invalid(
                "num_sms",
                format!(
                    "expected 1..={} (no device is queried), got {num_sms}",
                    i32::MAX
                ),
            )
        })?;
    let (call, _) = checked(spec)?;
    let plan = call.plan(spec.seed.as_ref(), spec.philox_rounds, SrRule::V072, sms)?;
    Ok(MtpLaunchPlan {
        grid_blocks: plan.grid_blocks.max(0) as u64,
        blocks_per_head: plan.blocks_per_head.max(0) as u64,
        threads_per_block: plan.threads_per_block.max(0) as u32,
        warps_per_block: plan.warps_per_block.max(0) as u32,
        rows_per_warp: plan.rows_per_warp.max(0) as u32,
        compiled_kernel: plan.compiled_kernel != 0,
        num_sms: plan.num_sms.max(0) as u32,
    })
}

/// Enqueues one multi-token selective-state-update on `stream`.
///
/// As [`selective_state_update`](crate::ssu::selective_state_update): first the pure check
/// ([`validate_mtp`](super::validate_mtp)), before any device work; then every buffer must
/// live on the stream's device ([`Error::WrongDevice`]); the C launcher checks the call again
/// with the device pointers (their alignment included) and enqueues it.
///
/// Asynchronous on `stream`: it returns once the kernel is enqueued; `out`, `state` and the
/// intermediate buffer are written when the kernel runs. Nothing is launched when an error is
/// returned; a CUDA failure of the launch is [`Error::Launcher`] with the launcher's detail.
pub fn selective_state_update_mtp(stream: &CudaStream, args: &mut MtpArgs<'_>) -> Result<()> {
    let spec = args.spec();
    let (call, _) = checked(&spec)?;
    contract::launch_args!(
        stream,
        call,
        args,
        [
            (
                contract::NUM_ACCEPTED_TOKENS,
                args.num_accepted_tokens.as_ref()
            ),
            (contract::CU_SEQLENS, args.cu_seqlens.as_ref()),
            (
                contract::INTERMEDIATE_STATE_INDICES,
                args.intermediate_state_indices.as_ref()
            ),
        ],
        [
            (
                contract::INTERMEDIATE_STATES,
                args.intermediate_states_buffer.as_mut()
            ),
            (contract::STATE_SCALE, args.state_scale.as_mut()),
            (
                contract::INTERMEDIATE_STATE_SCALES,
                args.intermediate_state_scales.as_mut()
            ),
        ]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssu::mtp::fixtures::*;
    use crate::ssu::mtp::validate_mtp;
    use crate::ssu::SeedSpec;
    use crate::tensor::DType;

    /// The plan comes from the C planner for a checked call: no device is queried (a count of
    /// 0 is refused rather than passed on), and an invalid call fails as `validate_mtp` does.
    #[test]
    fn launch_plan_of_a_call() {
        assert!(matches!(
            mtp_launch_plan(&base(), 0),
            Err(Error::InvalidArgument {
                argument: "num_sms",
                ..
            })
        ));
        let bad = with(|s| s.x.strides[3] = 2);
        assert_eq!(
            mtp_launch_plan(&bad, 132).unwrap_err().to_string(),
            validate_mtp(&bad).unwrap_err().to_string()
        );
        for spec in [base(), base_varlen()] {
            let plan = mtp_launch_plan(&spec, 132).unwrap();
            assert!(plan.grid_blocks >= (BATCH * NH) as u64, "{plan:?}");
            assert_eq!(
                plan.threads_per_block,
                32 * plan.warps_per_block,
                "{plan:?}"
            );
            assert_eq!(plan.num_sms, 132);
        }
    }

    /// A dense call at a model's shape: `batch` sequences of 8 tokens, `nheads` heads of `dim`
    /// rows in 8 groups, FlashInfer's expanded dt/A/D layouts, an intermediate-free call with a
    /// seed pointer when `rounds` > 0.
    fn model_call(batch: usize, nheads: usize, dim: usize, dstate: usize, rounds: u32) -> MtpSpec {
        let (t, ng) = (8, 8);
        MtpSpec {
            state: contiguous(DType::F16, &[batch, nheads, dim, dstate]),
            x: contiguous(DType::BF16, &[batch, t, nheads, dim]),
            dt: lay(
                DType::BF16,
                &[batch, t, nheads, dim],
                &[t * nheads, nheads, 1, 0],
            ),
            a: lay(DType::F32, &[nheads, dim, dstate], &[1, 0, 0]),
            b: contiguous(DType::BF16, &[batch, t, ng, dstate]),
            c: contiguous(DType::BF16, &[batch, t, ng, dstate]),
            d: Some(lay(DType::BF16, &[nheads, dim], &[1, 0])),
            z: None,
            dt_bias: Some(lay(DType::BF16, &[nheads, dim], &[1, 0])),
            state_batch_indices: Some(contiguous(DType::I32, &[batch])),
            dst_state_batch_indices: None,
            out: contiguous(DType::BF16, &[batch, t, nheads, dim]),
            philox_rounds: rounds,
            seed: (rounds > 0).then(|| SeedSpec::Pointer(contiguous(DType::I64, &[1]))),
            ..base()
        }
    }

    /// The plans of head dim 80 (Nemotron Nano 2: 128 heads, dstate 128; the 4B models: 96
    /// heads) at 1024 and more (sequence, head) pairs, where the plan takes two-row groups:
    /// with SR at dstates 64 and 256 one block of all 80 rows per pair (three passes of the 16
    /// row groups, the fewest: `Tuning::kMtpSrPasses`), at dstate 128 two blocks of 40 rows;
    /// without SR one-row groups on blocks of 16 rows (`Tuning::kMtpFullPasses`); head dim 64
    /// keeps one 64-row block per pair.
    #[test]
    fn head_dim_80_plans() {
        for (nheads, batch) in [(128, 8), (128, 32), (96, 16)] {
            for dstate in [64, 128, 256] {
                for rounds in [5, 10] {
                    let plan = mtp_launch_plan(&model_call(batch, nheads, 80, dstate, rounds), 132)
                        .unwrap();
                    let what = format!("{nheads} x {batch}, dstate {dstate}, {rounds} rounds");
                    assert!(plan.compiled_kernel, "{what}: {plan:?}");
                    let (bph, rpw) = if dstate == 128 { (2, 12) } else { (1, 20) };
                    assert_eq!(plan.blocks_per_head, bph, "{what}: {plan:?}");
                    assert_eq!(plan.rows_per_warp, rpw, "{what}: {plan:?}");
                    let dim64 =
                        mtp_launch_plan(&model_call(batch, nheads, 64, dstate, rounds), 132)
                            .unwrap();
                    assert_eq!(dim64.blocks_per_head, 1, "{what}, dim 64: {dim64:?}");
                }
                let plan = mtp_launch_plan(&model_call(batch, nheads, 80, dstate, 0), 132).unwrap();
                assert_eq!(
                    plan.blocks_per_head, 5,
                    "{nheads} x {batch}, no SR: {plan:?}"
                );
            }
        }
    }
}
