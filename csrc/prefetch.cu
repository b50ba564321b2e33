// prefetch.cu — the seed prefetcher: a forward's N stochastic-rounding seeds drawn in ONE
// launch on a side stream, handed to the layers in call order, bit-identical to the stock
// per-layer torch.randint draws, eagerly and under CUDA-graph capture.
//
// Ordering is by CUDA events only (no host synchronisation, no polling):
//   begin (or first request):  main --record(fork)--> side waits fork --> batched draw
//                               --> record(ready) on side
//   first request of the forward: main waits ready (once: every later request of the forward
//                               is on main too, so stream order covers it).
// Under CUDA-graph capture the default layout (MAMBA_SSU_CAPTURE_INLINE) puts the batched draw
// on main itself at the fork point: in a graph the side-stream branch and its join cost the
// executor more than one extra kernel boundary (on the H200 the branch removed 88-97 % of the
// stock seed overhead per decode step, inline 96-100 %: BENCHMARKS.md); stream order then
// covers every consumer. MAMBA_SSU_CAPTURE_BRANCH keeps the eager layout under capture.
//
// Fused forwards (begin_fused_forward) chain their calls through a links buffer (the
// prefetcher's own, or one the caller gives): call k's kernel stores call k+1's seed from one
// extra thread block, call k+1 reads it. Writer and reader are consecutive launches on main, so
// stream order covers them; the next forward's writes to the same slots come after this
// forward's readers on main as well. A link is handed out only when the launch that writes it
// was confirmed (mamba_ssu_launch tells the prefetcher named in its seed's `chain`, through
// prefetcher_link_enqueued).
//
// Why one seed buffer is enough (reuse argument): forward F+1's batched draw is enqueued on the
// side stream after a wait on F+1's fork event, which is recorded on main when F+1 begins. All
// consumers of F's seeds were enqueued on main before F ended (a forward's seeds must be used
// on its main stream, enforced by the stream check in mamba_ssu_prefetcher_seed), hence before
// F+1's fork was recorded; so the draw that overwrites the buffer runs after every consumer of
// F has completed. The same holds inside a captured graph, where the event record / wait pairs
// become graph edges. Inline (fallback) draws go to a ring of slots on the requesting stream;
// a slot is rewritten only 64 inline draws later, by then its consumer (enqueued on the same
// stream before the next request, per the documented contract) is ordered before the rewrite.
#include <cstdint>
#include <cstdio>
#include <new>

#include "common.cuh"
#include "launch.h"

namespace mamba_ssu {
namespace {
constexpr uint32_t kFallbackSlots = 64;
}  // namespace
}  // namespace mamba_ssu

using namespace mamba_ssu;

struct mamba_ssu_prefetcher {
  int device = 0;
  uint32_t n = 0;
  int32_t point = MAMBA_SSU_PREFETCH_AT_BEGIN;
  int32_t capture_layout = MAMBA_SSU_CAPTURE_INLINE;
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t ready = nullptr;
  int64_t *seeds = nullptr;     // n
  int64_t *chain = nullptr;     // n: the own links buffer (seed of call k, written by k-1)
  int64_t *fallback = nullptr;  // kFallbackSlots
  uint32_t fallback_next = 0;
  mamba_ssu_generator_state *dev_state = nullptr;

  // Capture bookkeeping: the intragraph offset runs per capture (identified by its id).
  unsigned long long capture_id = 0;
  bool capture_seen = false;
  uint64_t intragraph = 0;

  // The open forward.
  bool in_forward = false;
  bool fused = false;           // opened by begin_fused_forward
  int64_t *links = nullptr;     // the fused forward's links: `chain` or the caller's buffer
  bool link_ready = false;      // the previous fused request handed out the next link
  bool link_confirmed = false;  // and the launch that writes it was enqueued
  const int64_t *link_next = nullptr;  // that link
  // Where the link's draw is: the position that follows the previous request's.
  bool link_captured = false;
  const int64_t *link_seed_ptr = nullptr, *link_offset_ptr = nullptr;  // captured
  unsigned long long link_capture = 0;                                  // captured
  uint64_t link_seed = 0;       // eager: the generator seed
  uint64_t link_position = 0;   // the offset (eager) or intragraph offset (captured)
  cudaStream_t main = nullptr;
  bool captured = false;
  bool drawn = false;
  bool joined = false;
  uint64_t base = 0;  // eager: host offset of seed 0; captured: its intragraph offset
  uint64_t seed = 0;  // eager: the generator seed the batch was drawn with
  mamba_ssu_forward_summary summary{};
};

namespace {

// Whether `stream` is capturing, and its capture's id (0 when not).
int query_capture(cudaStream_t stream, bool *capturing, unsigned long long *id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  *id = 0;
  if (int s = check_cuda(cudaStreamGetCaptureInfo(stream, &status, id), "stream capture info"))
    return s;
  if (status == cudaStreamCaptureStatusInvalidated)
    return fail(MAMBA_SSU_ERROR_CUDA, "stream: its capture has been invalidated");
  *capturing = status == cudaStreamCaptureStatusActive;
  if (!*capturing) *id = 0;
  return MAMBA_SSU_SUCCESS;
}

// Whether `stream` is capturing; updates the intragraph counter on a new capture.
int capture_state(mamba_ssu_prefetcher *p, cudaStream_t stream, bool *capturing) {
  unsigned long long id = 0;
  if (int s = query_capture(stream, capturing, &id)) return s;
  if (*capturing && (!p->capture_seen || id != p->capture_id)) {
    p->capture_seen = true;
    p->capture_id = id;
    p->intragraph = 0;
  }
  return MAMBA_SSU_SUCCESS;
}

int check_generator(const mamba_ssu_generator_state *g) {
  if (g == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "generator: null pointer");
  if (g->offset % 4 != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "generator: offset must be a multiple of 4, got %llu",
                static_cast<unsigned long long>(g->offset));
  return MAMBA_SSU_SUCCESS;
}

// Makes the prefetcher's device current for one entry point and restores the caller's current
// device when it returns (a library call must not move the caller's device).
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;
  int set(int device) {
    if (int s = check_cuda(cudaGetDevice(&previous_), "cudaGetDevice")) return s;
    if (previous_ == device) return MAMBA_SSU_SUCCESS;
    if (int s = check_cuda(cudaSetDevice(device), "cudaSetDevice")) return s;
    restore_ = true;
    return MAMBA_SSU_SUCCESS;
  }
  ~DeviceGuard() {
    if (restore_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// Forks the side stream off main and enqueues the batched draw of the forward.
int issue_batched_draw(mamba_ssu_prefetcher *p, const mamba_ssu_generator_state *g) {
  if (p->captured && p->capture_layout == MAMBA_SSU_CAPTURE_INLINE) {
    // One node on main at the fork point: stream order alone covers every consumer of this
    // forward, and the next forward's draw is ordered after them on main as well.
    p->base = p->intragraph;
    if (int s = mamba_ssu_draw_seeds_graphsafe(reinterpret_cast<mamba_ssu_stream_t>(p->main),
                                               p->seeds, p->n, p->dev_state, p->base))
      return s;
    p->drawn = true;
    p->joined = true;  // nothing to join
    p->summary.drawn = p->n;
    return MAMBA_SSU_SUCCESS;
  }
  if (int s = check_cuda(cudaEventRecord(p->fork, p->main), "record fork event")) return s;
  if (int s = check_cuda(cudaStreamWaitEvent(p->side, p->fork, 0), "side waits fork")) return s;
  const auto side = reinterpret_cast<mamba_ssu_stream_t>(p->side);
  int s = MAMBA_SSU_SUCCESS;
  if (p->captured) {
    p->base = p->intragraph;  // the forward's first seed is the next intragraph draw
    s = mamba_ssu_draw_seeds_graphsafe(side, p->seeds, p->n, p->dev_state, p->base);
  } else {
    p->base = g->offset;
    p->seed = g->seed;
    s = mamba_ssu_draw_seeds(side, p->seeds, p->n, g->seed, g->offset);
  }
  if (s) return s;
  if (int s = check_cuda(cudaEventRecord(p->ready, p->side), "record ready event")) return s;
  p->drawn = true;
  p->summary.drawn = p->n;
  return MAMBA_SSU_SUCCESS;
}

int join(mamba_ssu_prefetcher *p) {
  if (p->drawn && !p->joined) {
    if (int s = check_cuda(cudaStreamWaitEvent(p->main, p->ready, 0), "main waits ready"))
      return s;
    p->joined = true;
  }
  return MAMBA_SSU_SUCCESS;
}

// The stock draw inline on `stream`, into the next fallback slot.
int inline_draw(mamba_ssu_prefetcher *p, cudaStream_t stream, mamba_ssu_generator_state *g,
                bool capturing, const int64_t **out) {
  int64_t *slot = p->fallback + (p->fallback_next++ % kFallbackSlots);
  const auto s_ = reinterpret_cast<mamba_ssu_stream_t>(stream);
  if (capturing) {
    if (int s = mamba_ssu_draw_seeds_graphsafe(s_, slot, 1, p->dev_state, p->intragraph))
      return s;
    p->intragraph += 4;
  } else {
    if (int s = mamba_ssu_draw_seeds(s_, slot, 1, g->seed, g->offset)) return s;
    g->offset += 4;
  }
  *out = slot;
  return MAMBA_SSU_SUCCESS;
}

// Common front of seed() and fused_seed(): checks, and whether this request is served by the
// batched draw (then returns its index in *k and advances the generator).
int take_request(mamba_ssu_prefetcher *p, cudaStream_t stream, mamba_ssu_generator_state *g,
                 uint32_t layer, bool *capturing, bool *prefetched, uint32_t *k) {
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher: null pointer");
  if (int s = check_generator(g)) return s;
  if (int s = capture_state(p, stream, capturing)) return s;
  *prefetched = false;
  if (!p->in_forward) return MAMBA_SSU_SUCCESS;
  if (stream != p->main)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "stream: a forward's seeds must be requested on the stream given to "
                "begin_forward");
  if (*capturing != p->captured)
    return fail(MAMBA_SSU_ERROR_SCOPE,
                "stream: capture began or ended inside a forward; end the forward first");
  if (p->fused)
    return fail(MAMBA_SSU_ERROR_SCOPE,
                "seed: this forward is a fused one (begin_fused_forward); request fused seeds");
  if (layer != p->summary.requested)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "layer: expected %u (the number of seeds requested so far in this forward), "
                "got %u",
                p->summary.requested, layer);
  p->summary.requested++;
  const uint32_t idx = layer;
  if (idx >= p->n) return MAMBA_SSU_SUCCESS;  // beyond N: stock fallback
  if (!p->drawn) {
    if (int s = issue_batched_draw(p, g)) return s;
  }
  // Eagerly the batch is valid only while the generator is exactly where stock would be:
  // someone else drawing from it in between moves the sequence, and stock values follow it.
  if (!p->captured && (g->seed != p->seed || g->offset != p->base + 4ull * idx))
    return MAMBA_SSU_SUCCESS;
  if (p->captured && p->intragraph != p->base + 4ull * idx) return MAMBA_SSU_SUCCESS;
  if (int s = join(p)) return s;
  if (p->captured) {
    p->intragraph += 4;
  } else {
    g->offset += 4;
  }
  *prefetched = true;
  *k = idx;
  p->summary.prefetched++;
  return MAMBA_SSU_SUCCESS;
}

bool aligned8(const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 8 == 0; }

// A fused request's draw position: where the kernel derives its seed, and the capture it
// belongs to (0 eagerly).
struct Position {
  mamba_ssu_position at{};
  bool captured = false;  // a device position (seed_ptr, offset_ptr) plus an intragraph offset
  unsigned long long capture = 0;
};

// The scope of a fused request: a prefetcher, and no prefetching forward open.
int check_fused_request(const mamba_ssu_prefetcher *p) {
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher: null pointer");
  if (p->in_forward && !p->fused)
    return fail(MAMBA_SSU_ERROR_SCOPE,
                "derive_seed: a prefetching forward is open (its seeds come from seed()); fused "
                "seeds are requested outside a forward or in a fused one");
  return MAMBA_SSU_SUCCESS;
}

// A request inside the open fused forward: on its main stream, captured as the forward is.
int check_forward_stream(const mamba_ssu_prefetcher *p, cudaStream_t stream, bool capturing) {
  if (stream != p->main)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "stream: a forward's seeds must be requested on the stream given to "
                "begin_fused_forward");
  if (capturing != p->captured)
    return fail(MAMBA_SSU_ERROR_SCOPE,
                "stream: capture began or ended inside a forward; end the forward first");
  return MAMBA_SSU_SUCCESS;
}

// Whether `pos` is the draw right after the previous chained request's, in the same sequence:
// eagerly the same generator seed, under capture the same device state and capture, and the
// offset 4 further.
bool follows_link(const mamba_ssu_prefetcher *p, const Position &pos) {
  if (pos.captured != p->link_captured || pos.at.offset != p->link_position) return false;
  if (!pos.captured) return pos.at.seed == p->link_seed;
  return pos.at.seed_ptr == p->link_seed_ptr && pos.at.offset_ptr == p->link_offset_ptr &&
         pos.capture == p->link_capture;
}

// Fills *seed (mode, pointer, position, next, chain) for a fused request at `pos` on `stream`
// (capturing: whether the stream is being captured). Inside a fused forward the request is the
// forward's next one: request 0 derives its seed, request k < N reads link k when its
// predecessor handed link k out, that link's launch was confirmed, and `pos` follows the
// predecessor's; every request k + 1 < N hands out link k + 1 (seed->next, seed->chain). A
// request whose predecessor's link was handed out but never confirmed is refused (SCOPE) and
// the chain restarts: the next request derives its seed.
int fused_request(mamba_ssu_prefetcher *p, cudaStream_t stream, const Position &pos,
                  mamba_ssu_seed *seed, bool capturing) {
  if (p->in_forward) {
    if (int s = check_forward_stream(p, stream, capturing)) return s;
    const uint32_t k0 = p->summary.requested;
    if (k0 > 0 && k0 < p->n && p->link_ready && !p->link_confirmed) {
      p->link_ready = false;
      return fail(MAMBA_SSU_ERROR_SCOPE,
                  "derive_seed: the previous fused seed was not consumed by a successful "
                  "mamba_ssu_launch (its chain link was never written); request again to "
                  "derive this call's seed");
    }
  }
  seed->mode = MAMBA_SSU_SEED_MODE_DERIVED;
  seed->pointer = nullptr;
  seed->position = pos.at;
  seed->next = nullptr;
  seed->chain = nullptr;
  if (!p->in_forward) return MAMBA_SSU_SUCCESS;
  const uint32_t k = p->summary.requested++;
  if (k > 0 && k < p->n && p->link_ready && follows_link(p, pos)) {
    seed->mode = MAMBA_SSU_SEED_MODE_POINTER;
    seed->pointer = p->links + k;
    p->summary.prefetched++;
  } else {
    p->summary.fallback++;
  }
  p->link_ready = k + 1 < p->n;
  p->link_confirmed = false;
  p->link_next = nullptr;
  if (p->link_ready) {
    seed->next = p->links + k + 1;
    seed->chain = p;
    p->link_next = seed->next;
    p->link_captured = pos.captured;
    p->link_seed_ptr = pos.at.seed_ptr;
    p->link_offset_ptr = pos.at.offset_ptr;
    p->link_capture = pos.capture;
    p->link_seed = pos.at.seed;
    p->link_position = pos.at.offset + 4;
  }
  return MAMBA_SSU_SUCCESS;
}

}  // namespace

extern "C" int mamba_ssu_prefetcher_create(mamba_ssu_prefetcher **out,
                                           uint32_t seeds_per_forward, int32_t prefetch_point) {
  clear_error();
  if (out == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "out: null pointer");
  *out = nullptr;
  if (seeds_per_forward == 0 || seeds_per_forward > MAMBA_SSU_MAX_SEEDS_PER_DRAW)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "seeds_per_forward: expected 1..=%u, got %u",
                MAMBA_SSU_MAX_SEEDS_PER_DRAW, seeds_per_forward);
  if (prefetch_point != MAMBA_SSU_PREFETCH_AT_BEGIN &&
      prefetch_point != MAMBA_SSU_PREFETCH_AT_FIRST_CALL)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetch_point: expected 0 or 1, got %d",
                prefetch_point);
  auto *p = new (std::nothrow) mamba_ssu_prefetcher();
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_CUDA, "out of host memory");
  p->n = seeds_per_forward;
  p->point = prefetch_point;
  int s = check_cuda(cudaGetDevice(&p->device), "cudaGetDevice");
  if (!s) s = check_cuda(cudaStreamCreateWithFlags(&p->side, cudaStreamNonBlocking), "side stream");
  if (!s) s = check_cuda(cudaEventCreateWithFlags(&p->fork, cudaEventDisableTiming), "fork event");
  if (!s) s = check_cuda(cudaEventCreateWithFlags(&p->ready, cudaEventDisableTiming), "ready event");
  if (!s) s = check_cuda(cudaMalloc(&p->seeds, sizeof(int64_t) * p->n), "seed buffer");
  if (!s) s = check_cuda(cudaMalloc(&p->chain, sizeof(int64_t) * p->n), "chain buffer");
  if (!s) s = check_cuda(cudaMalloc(&p->fallback, sizeof(int64_t) * kFallbackSlots), "fallback");
  if (!s) s = check_cuda(cudaMalloc(&p->dev_state, sizeof(mamba_ssu_generator_state)), "generator state buffer");
  if (!s) s = check_cuda(cudaMemset(p->dev_state, 0, sizeof(mamba_ssu_generator_state)), "generator state buffer");
  if (s) {
    char detail[512];
    std::snprintf(detail, sizeof(detail), "%s", mamba_ssu_last_error_detail());
    mamba_ssu_prefetcher_destroy(p);  // its own errors, if any, must not replace the first
    return fail(s, "%s", detail);
  }
  *out = p;
  return MAMBA_SSU_SUCCESS;
}

extern "C" int mamba_ssu_prefetcher_set_capture_layout(mamba_ssu_prefetcher *p, int32_t layout) {
  clear_error();
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher: null pointer");
  if (layout != MAMBA_SSU_CAPTURE_BRANCH && layout != MAMBA_SSU_CAPTURE_INLINE)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "layout: expected MAMBA_SSU_CAPTURE_BRANCH (0) or MAMBA_SSU_CAPTURE_INLINE (1), "
                "got %d",
                layout);
  if (p->in_forward)
    return fail(MAMBA_SSU_ERROR_SCOPE, "set_capture_layout: a forward is open; end it first");
  p->capture_layout = layout;
  return MAMBA_SSU_SUCCESS;
}

extern "C" int mamba_ssu_prefetcher_destroy(mamba_ssu_prefetcher *p) {
  if (p == nullptr) return MAMBA_SSU_SUCCESS;
  DeviceGuard guard;
  int s = guard.set(p->device);
  if (p->side != nullptr && !s) s = check_cuda(cudaStreamSynchronize(p->side), "sync side");
  // A CUDA graph captured with this prefetcher keeps raw pointers to its device buffers and
  // may be replayed after this call: once the prefetcher has been used under capture, its
  // buffers (a few hundred bytes) are left allocated for the rest of the process instead of
  // freed, so that such a replay reads and writes live memory (it then draws from the last
  // state prepare_replay wrote) rather than freed or reused memory.
  if (!p->capture_seen) {
    if (p->seeds) cudaFree(p->seeds);
    if (p->chain) cudaFree(p->chain);
    if (p->fallback) cudaFree(p->fallback);
    if (p->dev_state) cudaFree(p->dev_state);
  }
  if (p->fork) cudaEventDestroy(p->fork);
  if (p->ready) cudaEventDestroy(p->ready);
  if (p->side) cudaStreamDestroy(p->side);
  delete p;
  return s;
}

extern "C" int mamba_ssu_prefetcher_begin_forward(mamba_ssu_prefetcher *p,
                                                  mamba_ssu_stream_t main_stream,
                                                  mamba_ssu_generator_state *generator) {
  clear_error();
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher: null pointer");
  if (p->in_forward)
    return fail(MAMBA_SSU_ERROR_SCOPE, "begin_forward: a forward is already open; end it first");
  if (int s = check_generator(generator)) return s;
  DeviceGuard guard;
  if (int s = guard.set(p->device)) return s;
  const cudaStream_t main = reinterpret_cast<cudaStream_t>(main_stream);
  bool capturing = false;
  if (int s = capture_state(p, main, &capturing)) return s;
  p->in_forward = true;
  p->fused = false;
  p->link_ready = false;
  p->main = main;
  p->captured = capturing;
  p->drawn = false;
  p->joined = false;
  p->summary = mamba_ssu_forward_summary{};
  p->summary.captured = capturing ? 1 : 0;
  if (p->point == MAMBA_SSU_PREFETCH_AT_BEGIN) {
    if (int s = issue_batched_draw(p, generator)) {
      p->in_forward = false;
      return s;
    }
  }
  return MAMBA_SSU_SUCCESS;
}

extern "C" int mamba_ssu_prefetcher_begin_fused_forward_links(
    mamba_ssu_prefetcher *p, mamba_ssu_stream_t main_stream,
    const mamba_ssu_generator_state *generator, int64_t *links) {
  clear_error();
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher: null pointer");
  if (p->in_forward)
    return fail(MAMBA_SSU_ERROR_SCOPE,
                "begin_fused_forward: a forward is already open; end it first");
  if (generator != nullptr) {
    if (int s = check_generator(generator)) return s;
  }
  if (links != nullptr && !aligned8(links))
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "links: expected a 8-byte aligned pointer");
  DeviceGuard guard;
  if (int s = guard.set(p->device)) return s;
  const cudaStream_t main = reinterpret_cast<cudaStream_t>(main_stream);
  bool capturing = false;
  if (int s = capture_state(p, main, &capturing)) return s;
  p->in_forward = true;
  p->fused = true;
  p->links = links != nullptr ? links : p->chain;
  p->link_ready = false;
  p->link_confirmed = false;
  p->link_next = nullptr;
  p->main = main;
  p->captured = capturing;
  p->drawn = false;
  p->joined = true;  // no side stream in a fused forward
  p->summary = mamba_ssu_forward_summary{};
  p->summary.captured = capturing ? 1 : 0;
  return MAMBA_SSU_SUCCESS;
}

extern "C" int mamba_ssu_prefetcher_begin_fused_forward(mamba_ssu_prefetcher *p,
                                                        mamba_ssu_stream_t main_stream,
                                                        mamba_ssu_generator_state *generator) {
  clear_error();
  if (generator == nullptr)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "generator: null pointer");
  return mamba_ssu_prefetcher_begin_fused_forward_links(p, main_stream, generator, nullptr);
}

extern "C" int mamba_ssu_prefetcher_seed(mamba_ssu_prefetcher *p, mamba_ssu_stream_t stream,
                                         mamba_ssu_generator_state *generator, uint32_t layer,
                                         const int64_t **seed_out) {
  clear_error();
  if (seed_out == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "seed_out: null pointer");
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher: null pointer");
  DeviceGuard guard;
  if (int s = guard.set(p->device)) return s;
  const cudaStream_t s_ = reinterpret_cast<cudaStream_t>(stream);
  bool capturing = false, prefetched = false;
  uint32_t k = 0;
  if (int s = take_request(p, s_, generator, layer, &capturing, &prefetched, &k)) return s;
  if (prefetched) {
    *seed_out = p->seeds + k;
    return MAMBA_SSU_SUCCESS;
  }
  if (p->in_forward) p->summary.fallback++;
  return inline_draw(p, s_, generator, capturing, seed_out);
}

extern "C" int mamba_ssu_prefetcher_derive_seed(mamba_ssu_prefetcher *p,
                                                mamba_ssu_stream_t stream,
                                                mamba_ssu_generator_state *generator,
                                                mamba_ssu_seed *seed) {
  clear_error();
  if (seed == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "seed: null pointer");
  if (int s = check_fused_request(p)) return s;
  if (int s = check_generator(generator)) return s;
  DeviceGuard guard;
  if (int s = guard.set(p->device)) return s;
  const cudaStream_t s_ = reinterpret_cast<cudaStream_t>(stream);
  bool capturing = false;
  if (int s = capture_state(p, s_, &capturing)) return s;
  // This call's draw position: under capture the prefetcher's device state (written before
  // each replay by prepare_replay) plus the intragraph offset, eagerly the host generator's.
  Position pos;
  pos.captured = capturing;
  if (capturing) {
    pos.at.seed_ptr = reinterpret_cast<const int64_t *>(&p->dev_state->seed);
    pos.at.offset_ptr = reinterpret_cast<const int64_t *>(&p->dev_state->offset);
    pos.at.offset = p->intragraph;
    pos.capture = p->capture_id;
  } else {
    pos.at.seed = generator->seed;
    pos.at.offset = generator->offset;
  }
  if (int s = fused_request(p, s_, pos, seed, capturing)) return s;
  if (capturing) {
    p->intragraph += 4;
  } else {
    generator->offset += 4;
  }
  return MAMBA_SSU_SUCCESS;
}

extern "C" int mamba_ssu_prefetcher_derive_seed_at(mamba_ssu_prefetcher *p,
                                                   mamba_ssu_stream_t stream,
                                                   const mamba_ssu_position *position,
                                                   mamba_ssu_seed *seed) {
  clear_error();
  if (seed == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "seed: null pointer");
  if (position == nullptr)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "position: null pointer");
  if ((position->seed_ptr == nullptr) != (position->offset_ptr == nullptr))
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "position: expected both seed_ptr and offset_ptr, or neither");
  if (position->offset % 4 != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "position: offset must be a multiple of 4, got %llu",
                static_cast<unsigned long long>(position->offset));
  if (int s = check_fused_request(p)) return s;
  DeviceGuard guard;
  if (int s = guard.set(p->device)) return s;
  const cudaStream_t s_ = reinterpret_cast<cudaStream_t>(stream);
  Position pos;
  pos.at = *position;
  bool capturing = false;
  if (int s = query_capture(s_, &capturing, &pos.capture)) return s;
  pos.captured = position->seed_ptr != nullptr;
  return fused_request(p, s_, pos, seed, capturing);
}

extern "C" int mamba_ssu_prefetcher_fused_seed(mamba_ssu_prefetcher *p, mamba_ssu_stream_t stream,
                                               mamba_ssu_generator_state *generator,
                                               struct mamba_ssu_params *params) {
  clear_error();
  if (params == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  if (int s = check_fused_request(p)) return s;
  if (int s = check_generator(generator)) return s;
  DeviceGuard guard;
  if (int s = guard.set(p->device)) return s;
  const cudaStream_t s_ = reinterpret_cast<cudaStream_t>(stream);
  bool capturing = false;
  if (int s = capture_state(p, s_, &capturing)) return s;
  if (p->in_forward) {
    if (int s = check_forward_stream(p, s_, capturing)) return s;
    // Counted like a request that derives its own seed; it writes no link, so the chain
    // restarts at the next request.
    p->summary.requested++;
    p->summary.fallback++;
    p->link_ready = false;
  }
  // This call's draw position, derived in the kernel: the device state plus the intragraph
  // offset under capture, the host generator's values eagerly.
  params->rand_seed = nullptr;
  params->seed_next = nullptr;
  params->generator_seed_ptr = nullptr;
  params->generator_offset_ptr = nullptr;
  if (capturing) {
    params->seed_source = MAMBA_SSU_SEED_FROM_GENERATOR;
    params->generator_state = p->dev_state;
    params->generator_seed = 0;
    params->seed_offset = p->intragraph;
    p->intragraph += 4;
  } else {
    params->seed_source = MAMBA_SSU_SEED_FROM_VALUES;
    params->generator_state = nullptr;
    params->generator_seed = generator->seed;
    params->seed_offset = generator->offset;
    generator->offset += 4;
  }
  return MAMBA_SSU_SUCCESS;
}

extern "C" int mamba_ssu_prefetcher_end_forward(mamba_ssu_prefetcher *p,
                                                mamba_ssu_forward_summary *summary) {
  clear_error();
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher: null pointer");
  if (!p->in_forward) return fail(MAMBA_SSU_ERROR_SCOPE, "end_forward: no forward is open");
  DeviceGuard guard;
  int s = guard.set(p->device);
  // Always join the side stream into main: under capture an unjoined side stream would make
  // the capture fail; eagerly it keeps the next forward's ordering argument simple.
  if (!s) s = join(p);
  p->in_forward = false;
  p->fused = false;
  p->links = nullptr;
  p->link_ready = false;
  p->link_confirmed = false;
  p->link_next = nullptr;
  if (summary != nullptr) *summary = p->summary;
  if (s) return s;
  if (p->captured && p->drawn && p->summary.prefetched < p->n)
    return fail(MAMBA_SSU_ERROR_SCOPE,
                "end_forward: the captured forward consumed %u of the %u seeds it drew; every "
                "replay would advance the generator unlike stock (configure the prefetcher "
                "with the number of stochastic-rounding layers)",
                p->summary.prefetched, p->n);
  return MAMBA_SSU_SUCCESS;
}

extern "C" int mamba_ssu_prefetcher_graph_increment(const mamba_ssu_prefetcher *p,
                                                    uint64_t *increment) {
  clear_error();
  if (p == nullptr || increment == nullptr)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher/increment: null pointer");
  *increment = p->intragraph;
  return MAMBA_SSU_SUCCESS;
}

extern "C" int mamba_ssu_prefetcher_prepare_replay(mamba_ssu_prefetcher *p,
                                                   mamba_ssu_stream_t stream,
                                                   mamba_ssu_generator_state *generator,
                                                   uint64_t graph_increment) {
  clear_error();
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "prefetcher: null pointer");
  if (int s = check_generator(generator)) return s;
  if (graph_increment % 4 != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "graph_increment: expected a multiple of 4, got %llu",
                static_cast<unsigned long long>(graph_increment));
  DeviceGuard guard;
  if (int s = guard.set(p->device)) return s;
  if (int s = mamba_ssu_set_generator_state(stream, p->dev_state, generator->seed,
                                            generator->offset))
    return s;
  generator->offset += graph_increment;
  return MAMBA_SSU_SUCCESS;
}

namespace mamba_ssu {

void prefetcher_link_enqueued(mamba_ssu_prefetcher *p, const int64_t *next) {
  if (p != nullptr && p->in_forward && p->fused && p->link_ready && next != nullptr &&
      next == p->link_next)
    p->link_confirmed = true;
}

}  // namespace mamba_ssu
