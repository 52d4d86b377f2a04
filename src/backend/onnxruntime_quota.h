/* sip — the ONNX Runtime backend's memory quota: the accounting allocator
 * of src/backend/onnxruntime_quota.cc, for onnxruntime.c (load) and
 * onnxruntime_exec.c (execute). A C header that C++ includes too. */
#ifndef SIP_BACKEND_ONNXRUNTIME_QUOTA_H
#define SIP_BACKEND_ONNXRUNTIME_QUOTA_H

#include <stdint.h>

#include "onnxruntime_c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* src/backend/onnxruntime.c's OrtApi table. */
extern const OrtApi *sip__ort;

/* One model's account: the bytes its blocks hold, against a limit. */
typedef struct sip__ort_quota sip__ort_quota_t;
/* What the calling thread's last refused block asked for. */
typedef struct sip__ort_quota_refusal {
  int refused;
  uint64_t asked, used, limit; /* bytes */
} sip__ort_quota_refusal_t;
/* A new account (owned: sip__ort_quota_unref) capped at `limit` bytes (0:
 * no cap); NULL when out of memory. */
sip__ort_quota_t *sip__ort_quota_new(uint64_t limit);
void sip__ort_quota_unref(sip__ort_quota_t *q);
/* A new cap, for the next blocks (any thread). */
void sip__ort_quota_set_limit(sip__ort_quota_t *q, uint64_t limit);
/* Charges the calling thread's blocks to q (NULL: none) until leave;
 * returns the account entered before, for leave. Clears the thread's
 * refusal. */
sip__ort_quota_t *sip__ort_quota_enter(sip__ort_quota_t *q);
void sip__ort_quota_leave(sip__ort_quota_t *prev);
/* The calling thread's refusal since it entered its account. */
sip__ort_quota_refusal_t sip__ort_quota_refusal(void);
/* Registers the accounting allocator with the environment (init). */
OrtStatus *sip__ort_quota_register(OrtEnv *env);

#ifdef __cplusplus
}
#endif
#endif
