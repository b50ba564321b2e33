// device.cu — the GPU a launch is planned for: its properties (queried once per device and
// cached; the sm_90 family's when a caller gives only an SM count), and what the planners
// (ssu.cu, ssu_mtp.cu) derive from them: resident blocks per SM and the warps-per-SM
// thresholds of tuning.h on a device with another number of warp slots.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "checks.h"
#include "common.cuh"

namespace mamba_ssu {
namespace {

// Cached properties of devices 0..kMaxDevices-1 (a device beyond is queried on every call).
constexpr int kMaxDevices = 64;
struct Cache {
  std::atomic<bool> ready[kMaxDevices];
  mamba_ssu_device_props props[kMaxDevices];
  std::mutex lock;
};
Cache &cache() {
  static Cache c;  // zero-initialised: ready all false
  return c;
}

int query(int dev, mamba_ssu_device_props *out) {
  struct Attr {
    cudaDeviceAttr attr;
    int32_t *field;
    const char *name;
  };
  mamba_ssu_device_props d{};
  const Attr attrs[] = {
      {cudaDevAttrComputeCapabilityMajor, &d.cc_major, "ComputeCapabilityMajor"},
      {cudaDevAttrComputeCapabilityMinor, &d.cc_minor, "ComputeCapabilityMinor"},
      {cudaDevAttrMultiProcessorCount, &d.num_sms, "MultiProcessorCount"},
      {cudaDevAttrMaxThreadsPerMultiProcessor, &d.max_threads_per_sm,
       "MaxThreadsPerMultiProcessor"},
      {cudaDevAttrMaxBlocksPerMultiprocessor, &d.max_blocks_per_sm, "MaxBlocksPerMultiprocessor"},
      {cudaDevAttrMaxRegistersPerMultiprocessor, &d.regs_per_sm, "MaxRegistersPerMultiprocessor"},
      {cudaDevAttrMaxSharedMemoryPerMultiprocessor, &d.smem_per_sm,
       "MaxSharedMemoryPerMultiprocessor"},
      {cudaDevAttrMaxSharedMemoryPerBlock, &d.smem_per_block, "MaxSharedMemoryPerBlock"},
      {cudaDevAttrReservedSharedMemoryPerBlock, &d.reserved_smem_per_block,
       "ReservedSharedMemoryPerBlock"},
  };
  for (const Attr &a : attrs) {
    int v = 0;
    if (int s = check_cuda(cudaDeviceGetAttribute(&v, a.attr, dev), a.name)) return s;
    *a.field = v;
  }
  if (int s = check_props(&d)) return s;
  *out = d;
  return MAMBA_SSU_SUCCESS;
}

int device_props(int dev, mamba_ssu_device_props *out) {
  if (dev < 0) {
    if (int s = check_cuda(cudaGetDevice(&dev), "cudaGetDevice")) return s;
  }
  if (dev >= kMaxDevices) return query(dev, out);
  Cache &c = cache();
  if (!c.ready[dev].load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(c.lock);
    if (!c.ready[dev].load(std::memory_order_relaxed)) {
      if (int s = query(dev, &c.props[dev])) return s;
      c.ready[dev].store(true, std::memory_order_release);
    }
  }
  *out = c.props[dev];
  return MAMBA_SSU_SUCCESS;
}

}  // namespace

int check_props(const mamba_ssu_device_props *d) {
  if (d == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "props: null pointer");
  const int32_t counts[] = {d->cc_major,         d->num_sms,     d->max_threads_per_sm,
                            d->max_blocks_per_sm, d->regs_per_sm, d->smem_per_sm,
                            d->smem_per_block};
  for (int32_t v : counts)
    if (v < 1)
      return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                  "props: every count expected >= 1 (cc_major %d, num_sms %d, threads %d, "
                  "blocks %d, registers %d, shared memory %d and %d per block)",
                  d->cc_major, d->num_sms, d->max_threads_per_sm, d->max_blocks_per_sm,
                  d->regs_per_sm, d->smem_per_sm, d->smem_per_block);
  if (d->cc_minor < 0 || d->reserved_smem_per_block < 0 || d->reserved != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "props: expected cc_minor >= 0, reserved_smem_per_block >= 0, reserved 0");
  return MAMBA_SSU_SUCCESS;
}

int planning_props(int32_t given, mamba_ssu_device_props *out) {
  if (given > 0) {
    *out = mamba_ssu_device_props MAMBA_SSU_DEVICE_PROPS_SM90(given);
    return MAMBA_SSU_SUCCESS;
  }
  return device_props(-1, out);
}

int launch_props(int32_t given, mamba_ssu_device_props *out) {
  if (int s = device_props(-1, out)) return s;
  if (given > 0) out->num_sms = given;
  return MAMBA_SSU_SUCCESS;
}

int resident_blocks(const mamba_ssu_device_props &d, int floor, int threads, int64_t smem) {
  int64_t n = std::min<int64_t>(floor, d.max_blocks_per_sm);
  n = std::min<int64_t>(n, d.max_threads_per_sm / std::max(threads, 1));
  // The register floor holds on a 65536-register SM; scale it for a smaller register file.
  n = std::min<int64_t>(n, int64_t{floor} * d.regs_per_sm / 65536);
  const int64_t per_block = smem + d.reserved_smem_per_block;
  if (per_block > 0) n = std::min<int64_t>(n, d.smem_per_sm / per_block);
  return static_cast<int>(std::max<int64_t>(n, 1));
}

int64_t scaled_warps(const mamba_ssu_device_props &d, int64_t warps) {
  // The H200 has 64 warp slots per SM (2048 threads): there the thresholds are unchanged.
  return std::max<int64_t>(1, warps * (d.max_threads_per_sm / 32) / 64);
}

}  // namespace mamba_ssu

using namespace mamba_ssu;

extern "C" int mamba_ssu_device_props_sm90(int32_t num_sms, mamba_ssu_device_props *out) {
  clear_error();
  if (out == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "out: null pointer");
  if (num_sms < 1)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "num_sms: expected >= 1, got %d", num_sms);
  return planning_props(num_sms, out);
}

extern "C" int mamba_ssu_device_props_query(int32_t device, mamba_ssu_device_props *out) {
  clear_error();
  if (out == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "out: null pointer");
  return device_props(device, out);
}
