//! GPU test of what the launch planning reads of the device (`mamba_ssu_device_props_query`,
//! `mamba_ssu::device::DeviceProps`): the values equal the driver's attributes read through
//! cudarc, a second query returns the same (cached) values, an ordinal beyond the devices is
//! refused with a typed error, and on an H200 (compute capability 9.0, 132 SMs) the properties
//! are the sm_90 template the planner assumes when it is given only an SM count.

mod common;

use cudarc::driver::sys::CUdevice_attribute as A;
use mamba_ssu::device::DeviceProps;
use mamba_ssu::Error;

#[test]
#[ignore = "requires a CUDA GPU"]
fn device_properties_are_the_drivers_and_cached() {
    let Some((ctx, _stream)) = common::gpu() else {
        return;
    };
    let ordinal = ctx.ordinal();
    let p = DeviceProps::of(ordinal).expect("querying the device's properties");
    let attr = |a| ctx.attribute(a).expect("a driver attribute");
    assert_eq!(
        p.compute_capability,
        (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        )
    );
    assert_eq!(p.num_sms, attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
    assert_eq!(
        p.max_threads_per_sm,
        attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
    );
    assert_eq!(
        p.max_blocks_per_sm,
        attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)
    );
    assert_eq!(
        p.regs_per_sm,
        attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)
    );
    assert_eq!(
        p.smem_per_sm,
        attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
    );
    assert_eq!(
        p.smem_per_block,
        attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
    );
    assert_eq!(
        p.reserved_smem_per_block,
        attr(A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)
    );
    assert_eq!(DeviceProps::of(ordinal).unwrap(), p, "the cached values");
    println!("device {ordinal}: {p:?}");
    if p.compute_capability == (9, 0) && p.num_sms == 132 {
        assert_eq!(
            p,
            DeviceProps::sm90(132).unwrap(),
            "an H200 is the sm_90 template"
        );
    }
    let count = mamba_ssu::device::device_count().unwrap();
    assert!(matches!(
        DeviceProps::of(count),
        Err(Error::NoDevice { ordinal, .. }) if ordinal == count
    ));
}
