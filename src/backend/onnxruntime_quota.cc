/* sip — the ONNX Runtime backend's memory quota (resource_quota.max_memory_mb
 * while serving): an accounting CPU allocator registered with the OrtEnv.
 *
 * ONNX Runtime has no per-session allocator in its C API: a CPU arena's
 * limit (OrtArenaCfg max_mem) applies only to an allocator registered with
 * the environment, shared by every session that opts in, so one limit for
 * every pool. So the backend registers one allocator of its own with the
 * environment, and a model loaded with a quota opts in
 * (session.use_env_allocators=1). Every block carries a small header naming
 * the account (one per model) it was charged to; the account is the one the
 * calling thread entered (sip__ort_quota_enter), around CreateSession and
 * Run. ONNX Runtime allocates a run's tensors on the thread that runs it
 * (the executor's); its intra-op workers compute into tensors allocated
 * before, so a block allocated on a thread that entered no account is not
 * charged (and never refused).
 *
 * A block that would take an account past its limit is refused by throwing,
 * as ONNX Runtime's own allocator does when malloc fails: its code expects
 * Alloc to throw, not to return NULL (a NULL is written through). The
 * exception unwinds to the kernel's executor, which fails the Run with a
 * status; the blocks the run held are freed on the way. The refusal is
 * recorded for the calling thread, so the backend reports it as
 * RESOURCE_EXHAUSTED naming the quota (onnxruntime_exec.c).
 *
 * This is C++ only for that throw; the interface is C
 * (onnxruntime_quota.h). */
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>

#include "backend/onnxruntime_quota.h"

struct sip__ort_quota {
  std::atomic<uint64_t> used{0};
  std::atomic<uint64_t> limit{0}; /* bytes; 0: no cap */
  /* the owner's reference and one per live block: blocks can outlive the
   * model (an output still being sent) */
  std::atomic<long> refs{1};
};

namespace {

/* 64 bytes: blocks keep ONNX Runtime's alignment (MLAS vector loads). */
constexpr size_t kHeader = 64;

struct header {
  sip__ort_quota_t *acc;
  size_t size;
};

thread_local sip__ort_quota_t *current = nullptr;
thread_local sip__ort_quota_refusal_t refusal = {0, 0, 0, 0};

/* Thrown for a refused block: what ONNX Runtime's executor catches and
 * turns into a failed Run. */
struct quota_refused : std::bad_alloc {
  const char *what() const noexcept override {
    return "the pool's memory quota (resource_quota.max_memory_mb) refused an allocation";
  }
};

void unref(sip__ort_quota_t *q) {
  if (q->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete q;
}

OrtMemoryInfo *info = nullptr;

void *ORT_API_CALL q_alloc(OrtAllocator *, size_t size) {
  sip__ort_quota_t *q = current;
  if (q) {
    uint64_t limit = q->limit.load(std::memory_order_relaxed);
    uint64_t before = q->used.fetch_add(size, std::memory_order_relaxed);
    if (limit && before + size > limit) {
      q->used.fetch_sub(size, std::memory_order_relaxed);
      refusal = {1, size, before, limit};
      throw quota_refused();
    }
    q->refs.fetch_add(1, std::memory_order_relaxed);
  }
  void *p = nullptr;
  /* ONNX Runtime's memory, not sip's: it fails as ONNX Runtime's own
   * allocator does (a throw), not through sip's allocation wrapper. */
  if (posix_memalign(&p, kHeader, kHeader + (size ? size : 1)) != 0) {
    if (q) {
      q->used.fetch_sub(size, std::memory_order_relaxed);
      unref(q);
    }
    throw std::bad_alloc();
  }
  header *h = static_cast<header *>(p);
  h->acc = q;
  h->size = size;
  return static_cast<char *>(p) + kHeader;
}

void ORT_API_CALL q_free(OrtAllocator *, void *p) {
  if (!p) return;
  header *h = reinterpret_cast<header *>(static_cast<char *>(p) - kHeader);
  if (sip__ort_quota_t *q = h->acc) {
    q->used.fetch_sub(h->size, std::memory_order_relaxed);
    unref(q);
  }
  free(h);
}

const OrtMemoryInfo *ORT_API_CALL q_info(const OrtAllocator *) { return info; }

OrtAllocator allocator;

}  // namespace

extern "C" {

sip__ort_quota_t *sip__ort_quota_new(uint64_t limit) {
  sip__ort_quota_t *q = new (std::nothrow) sip__ort_quota_t;
  if (q) q->limit.store(limit);
  return q;
}

void sip__ort_quota_unref(sip__ort_quota_t *q) {
  if (q) unref(q);
}

void sip__ort_quota_set_limit(sip__ort_quota_t *q, uint64_t limit) { q->limit.store(limit); }


sip__ort_quota_t *sip__ort_quota_enter(sip__ort_quota_t *q) {
  sip__ort_quota_t *prev = current;
  current = q;
  refusal.refused = 0;
  return prev;
}

void sip__ort_quota_leave(sip__ort_quota_t *prev) { current = prev; }

sip__ort_quota_refusal_t sip__ort_quota_refusal(void) { return refusal; }

OrtStatus *sip__ort_quota_register(OrtEnv *env) {
  /* One allocator for the process, as there is one OrtEnv: registered again
   * when an env is made anew (the last one released drops it). */
  static std::once_flag once;
  std::call_once(once, [] {
    OrtStatus *st = sip__ort->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &info);
    if (st) {
      sip__ort->ReleaseStatus(st);
      info = nullptr;
    }
    allocator.version = ORT_API_VERSION;
    allocator.Alloc = q_alloc;
    allocator.Free = q_free;
    allocator.Info = q_info;
  });
  if (!info) return sip__ort->CreateStatus(ORT_FAIL, "cannot describe CPU memory");
  OrtStatus *st = sip__ort->RegisterAllocator(env, &allocator);
  if (!st) return nullptr;
  /* Registered already: by an earlier init on this same env (ours), or by
   * an application embedding sip (then replaced, for sessions made from
   * now on: a pool's quota needs ours). */
  sip__ort->ReleaseStatus(st);
  st = sip__ort->UnregisterAllocator(env, info);
  if (st) return st;
  return sip__ort->RegisterAllocator(env, &allocator);
}

}  // extern "C"
