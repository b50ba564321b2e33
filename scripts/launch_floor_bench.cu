// launch_floor_bench.cu — the floor under the SSU's smallest call (32 heads x batch 1: 2 048
// state rows of 256 bytes, 512 blocks of 4 warps) inside a CUDA graph, and what the size of
// the kernel's parameter block costs there. The SSU passes a 320-byte Args struct by value;
// FlashInfer's kernel takes 2.68 us per call at that size, ours 2.73-2.84 us
// (docs/perf-notes.md, "Not tried yet"). Kernels, each with a parameter block of P bytes:
//   - empty: returns (the launch and dispatch floor);
//   - chain: one warp per row, as the one-row SSU kernel: lane 0's slot index (int32, L2
//     resident) -> the row's 256 bytes (from HBM: the slots rotate over > 192 MiB) -> a warp
//     sum -> the row stored back and one output value per row; no SSU math.
// Method as ssu_bench: a graph of K back-to-back launches (slot offsets rotating), 2 warm-up
// replays, the median of 15 timed with CUDA events, divided by K.
//
// Build and run (needs nvcc; the CUDA runtime is linked statically, so the binary runs on a
// host with only the driver):
//   nvcc -O3 -arch=sm_90 -std=c++17 scripts/launch_floor_bench.cu -o launch_floor_bench \
//        -L$CUDA/lib -lcudart_static -ldl -lpthread -lrt
//   ./launch_floor_bench
// Run on the H200 on 2026-11-30 (docs/gpu-runs/2026-11-30.md, the 20:03 UTC runs): empty kernel
// 0.806 us per launch, chain kernel 1.90 us, the same for parameter blocks of 32, 128, 336 and
// 1 024 bytes (two repetitions) — the SSU's 320-byte Args costs nothing; at 32 x 1 the SSU
// (2.71-2.78 us) spends ~0.8 us beyond the bare index -> row -> store chain.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                 \
                   cudaGetErrorString(e_));                                           \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kRows = 2048;        // 32 heads x 64 rows
constexpr int kRowBytes = 256;     // 128 fp16 columns
constexpr int kWarpsPerBlock = 4;  // as the SSU's one-row kernels
constexpr size_t kSlotBytes = size_t{kRows} * kRowBytes;  // 512 KiB

// A parameter block of P bytes: the pointers the chain kernel needs, then padding.
template <int P>
struct Params {
  const int32_t *index;   // slot of this launch
  uint16_t *state;        // slots of kSlotBytes
  uint16_t *out;          // one value per row
  uint64_t pad[(P - 24) / 8];
};

template <int P>
__global__ void empty_kernel(const Params<P> p) {
  // Keeps the parameters live without doing anything: pad[0] is 0.
  if (p.pad[0] == 0x5eed && threadIdx.x == 0) p.out[0] = 1;
}

template <int P>
__global__ void chain_kernel(const Params<P> p) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t slot = *p.index;  // every lane: one L2 hit, as the SSU's slot-index load
  uint2 *r = reinterpret_cast<uint2 *>(reinterpret_cast<char *>(p.state) +
                                       slot * kSlotBytes + static_cast<size_t>(row) * kRowBytes) +
             lane;
  uint2 v = *r;
  float s = __uint_as_float(v.x << 16) + __uint_as_float(v.y << 16);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  v.x += 1;
  *r = v;
  if (lane == 0) p.out[row] = static_cast<uint16_t>(__float_as_uint(s) >> 16);
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Buffers {
  int32_t *index;  // one slot per launch of the graph
  uint16_t *state;
  uint16_t *out;
  int slots;
};

// µs per launch of a graph of `calls` launches of kernel `k` with parameter block P.
template <int P>
float time_graph(void (*k)(Params<P>), const Buffers &b, int calls, cudaStream_t st) {
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) {
    Params<P> p{};
    p.index = b.index + i;
    p.state = b.state;
    p.out = b.out;
    k<<<kRows / kWarpsPerBlock, 32 * kWarpsPerBlock, 0, st>>>(p);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaStreamEndCapture(st, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphUpload(exec, st));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 2; ++i) CHECK(cudaGraphLaunch(exec, st));
  std::vector<float> ms;
  for (int i = 0; i < 15; ++i) {
    CHECK(cudaEventRecord(e0, st));
    CHECK(cudaGraphLaunch(exec, st));
    CHECK(cudaEventRecord(e1, st));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return median(ms) * 1e3f / static_cast<float>(calls);
}

template <int P>
void row(const char *name, void (*k)(Params<P>), const Buffers &b, int calls, cudaStream_t st) {
  std::printf("| %s | %d | %d | %.3f |\n", name, P, calls, time_graph<P>(k, b, calls, st));
}

}  // namespace

int main() {
  int dev = 0;
  CHECK(cudaSetDevice(dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  // Slots: >= 192 MiB of other state between two uses of one (as ssu_bench), plus 2.
  const int slots = static_cast<int>((size_t{192} << 20) / kSlotBytes) + 2;
  const int calls = slots;
  Buffers b{};
  b.slots = slots;
  CHECK(cudaMalloc(&b.index, sizeof(int32_t) * calls));
  CHECK(cudaMalloc(&b.state, kSlotBytes * slots));
  CHECK(cudaMalloc(&b.out, sizeof(uint16_t) * kRows));
  CHECK(cudaMemset(b.state, 0, kSlotBytes * slots));
  std::vector<int32_t> idx(calls);
  for (int i = 0; i < calls; ++i) idx[i] = i % slots;
  CHECK(cudaMemcpy(b.index, idx.data(), sizeof(int32_t) * calls, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  std::printf("%s, %d SMs; graph of back-to-back launches, 512 blocks x 128 threads; us per launch\n\n",
              prop.name, prop.multiProcessorCount);
  std::printf("| kernel | parameter bytes | launches per graph | us per launch |\n|---|---|---|---|\n");
  for (int rep = 0; rep < 2; ++rep) {
    row<32>("empty", empty_kernel<32>, b, calls, st);
    row<128>("empty", empty_kernel<128>, b, calls, st);
    row<336>("empty", empty_kernel<336>, b, calls, st);
    row<1024>("empty", empty_kernel<1024>, b, calls, st);
    row<32>("chain", chain_kernel<32>, b, calls, st);
    row<128>("chain", chain_kernel<128>, b, calls, st);
    row<336>("chain", chain_kernel<336>, b, calls, st);
    row<1024>("chain", chain_kernel<1024>, b, calls, st);
  }
  CHECK(cudaStreamSynchronize(st));
  CHECK(cudaFree(b.index));
  CHECK(cudaFree(b.state));
  CHECK(cudaFree(b.out));
  return 0;
}
