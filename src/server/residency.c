/* sip — residency under the memory budget (docs/elastic.md "Residency"): an
 * on-demand pool is listed UNLOADED; its first request queues and asks for a
 * load (session/residency.h), which runs here on the loader thread. Before
 * it, idle on-demand models are evicted least recently used first until the
 * budget holds what the model is expected to take (its last measured
 * memory, else its file's size); a model with requests queued or running,
 * or a pinned one, is never evicted. The room a load needs is what the model
 * keeps plus how far its load rises above that (the parsing buffers and
 * copies of the weights a backend makes while loading: measured at its last
 * load, else estimated from the loads measured so far: its file's size times
 * the largest rise seen as a share of that model's file, and at least what
 * it is expected to keep), so that the models in memory and a
 * load in progress stay within the budget together. An evicted pool is replaced by a new
 * UNLOADED one of the same model, which loads again at its next request. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "server/repository/repository_impl.h"
#include "server/server_impl.h"
#include "session/observe/events.h"
#include "session/residency.h"

/* 1 when a pipeline of the config file runs a stage on model `name`: a
 * pipeline is built once from its stages' loaded inputs and outputs, so the
 * model stays pinned. */
static int staged(const sip__config_t *cfg, const char *name) {
  for (size_t i = 0; i < cfg->n_pipelines; i++)
    for (size_t k = 0; k < cfg->pipelines[i].n_stages; k++) {
      const sip__stage_config_t *st = &cfg->pipelines[i].stages[k];
      if (!st->is_transform && st->pool && !strcmp(st->pool, name)) return 1;
    }
  return 0;
}

int sip__residency_on_demand(const sip_server_t *s, const sip__pool_config_t *pc, int from_repo) {
  if (pc->residency == SIP__RESIDENCY_ON_DEMAND) return 1; /* the config refuses it as a stage */
  return pc->residency == SIP__RESIDENCY_DEFAULT && from_repo && s->memory_budget &&
         !pc->sequence_batching && !staged(s->cfg, pc->name);
}

static void op_done(sip_error_t *e, void *user) {
  (void)user;
  sip_error_free(e); /* logged where it happened; the requests got it */
}

void sip__residency_want_load(void *ctx, const char *name, const char *version) {
  sip_server_t *s = ctx;
  /* A server not started has no loader: its deadline answers the request. */
  sip_error_t *e =
      !s->repo ? sip_error_new(SIP_UNAVAILABLE, "the server is not started (no loader thread)")
               : sip__repo_queue_op(s, name, SIP__REPO_OP_RESIDENCY, NULL, version, op_done, NULL);
  if (e) { /* shutting down: the drain answers what is queued */
    sip__log(SIP__LOG_WARN, "on-demand load not queued", "pool=%s reason=\"%s\"", name,
             sip_error_message(e));
    sip_error_free(e);
  }
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

/* "a 20.0 MiB (pinned), b 18.2 MiB (busy)": the models holding memory. */
static void holders(sip__pool_t *const *v, size_t n, const sip__pool_t *self, char *buf,
                    size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && used < cap; i++) {
    sip__residency_info_t in;
    sip__pool_residency(v[i], &in);
    if (v[i] == self || !in.held_bytes) continue;
    const char *why = !in.on_demand ? "pinned" : "busy: requests queued or running";
    int w = snprintf(buf + used, cap - used, "%s'%s' %.1f MiB (%s)", used ? ", " : "",
                     sip__pool_name(v[i]), mib(in.held_bytes), why);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (!buf[0]) snprintf(buf, cap, "none");
}

/* Unloads idle on-demand `victim` (the caller's reference is taken): a new
 * UNLOADED pool of the same model replaces it, then it is drained and
 * freed. */
static sip_error_t *evict(sip_server_t *s, sip__pool_t *victim, const char *for_name) {
  sip__residency_info_t in;
  sip__pool_residency(victim, &in);
  sip__pool_t *nv = sip__pool_renew_unloaded(victim);
  sip_error_t *e = nv ? sip__registry_swap(&s->eng, &nv, 1, &victim, 1) : SIP__OOM();
  if (e) {
    sip__pool_destroy(nv);
    sip__pool_unref(victim);
    return e;
  }
  sip__pool_take_config(nv, victim);
  char name[256];
  snprintf(name, sizeof name, "%s", sip__pool_name(victim));
  sip__pool_unref(victim);
  sip__registry_drain_free(&s->eng, victim);
  atomic_fetch_add(&s->eng.res_evictions, 1);
  char text[256];
  snprintf(text, sizeof text, "evicted to make room for '%s'; it held %.1f MiB", for_name,
           mib(in.held_bytes));
  sip__events_pool(nv, SIP_EVENT_MODEL_EVICTED, text);
  sip__log(SIP__LOG_INFO, "model evicted", "pool=%s memory_bytes=%llu for=%s", name,
           (unsigned long long)in.held_bytes, for_name);
  return NULL;
}

/* What the pools of a snapshot hold: each pool's own bytes, and each
 * model the store shares counted once (docs/elastic.md "One model store"). */
static uint64_t held_once(const sip__residency_info_t *in, size_t n) {
  uint64_t held = 0;
  for (size_t i = 0; i < n; i++) {
    int seen = 0;
    for (size_t j = 0; j < i && in[i].store_key && !seen; j++)
      seen = in[j].store_key == in[i].store_key;
    uint64_t own = in[i].held_bytes > in[i].store_bytes ? in[i].held_bytes - in[i].store_bytes : 0;
    held += seen ? own : in[i].held_bytes;
  }
  return held;
}

/* 1 when pool i may be evicted: idle on_demand and READY, and its model,
 * when the store shares it, is held by no pool that stays (evicting it
 * would give back only its sessions while the model stays held). */
static int evictable(sip__pool_t *const *v, const sip__residency_info_t *in, size_t n, size_t i,
                     const sip__pool_t *self) {
  if (v[i] == self || !in[i].on_demand || in[i].state != SIP__POOL_READY ||
      !sip__pool_idle(v[i]))
    return 0;
  if (!in[i].store_key) return 1;
  long going = 0; /* the pools on that model that could go too */
  for (size_t j = 0; j < n; j++)
    going += in[j].store_key == in[i].store_key && v[j] != self && in[j].on_demand &&
             in[j].state == SIP__POOL_READY && (j == i || sip__pool_idle(v[j]));
  return going >= in[i].store_pools;
}

/* The largest rise above what it kept that a load of an unmeasured model
 * is expected to make, as a share of its file: a higher figure comes from
 * other work running during the load (the peak is the process's) or from a
 * file whose weights live elsewhere, not from the load itself. */
#define MAX_EXTRA_RATIO 4.0

/* What loading `p` needs under the budget (`in`: its residency, read now):
 * what it keeps, plus how far its load rises above that — nothing when the
 * store holds its model already (it is not parsed again), else its last
 * load's measured rise, else its file times the largest share measured so
 * far, at least what it keeps. */
static uint64_t load_need(const sip_server_t *s, const sip__residency_info_t *in) {
  if (in->model_held) return in->expected_bytes;
  uint64_t extra = in->load_extra_bytes;
  if (!extra) {
    extra = (uint64_t)((double)in->file_bytes * s->load_extra_ratio);
    if (extra < in->expected_bytes) extra = in->expected_bytes;
  }
  return in->expected_bytes + extra;
}

/* Evicts until the budget holds what loading `p` needs beside what the
 * models in service hold (read again after each eviction: evicting the
 * last other pool on the model `p` would share makes `p` load it itself).
 * Errors: RESOURCE_EXHAUSTED naming what holds the memory. */
static sip_error_t *make_room(sip_server_t *s, sip__pool_t *p) {
  uint64_t budget = s->memory_budget;
  if (!budget) return NULL;
  for (;;) {
    sip__residency_info_t self;
    sip__pool_residency(p, &self);
    uint64_t need = load_need(s, &self);
    size_t n = 0;
    sip__pool_t **v = sip__registry_snapshot(&s->eng, 1, &n);
    sip__residency_info_t *in = n ? sip__calloc(n, sizeof *in) : NULL;
    if (n && !in) {
      sip__registry_release(v, n);
      return SIP__OOM();
    }
    uint64_t oldest = 0;
    sip__pool_t *victim = NULL;
    for (size_t i = 0; i < n; i++) sip__pool_residency(v[i], &in[i]);
    uint64_t held = held_once(in, n);
    for (size_t i = 0; i < n; i++) {
      if (!evictable(v, in, n, i, p)) continue;
      if (!victim || in[i].last_used_us < oldest) {
        victim = v[i];
        oldest = in[i].last_used_us;
      }
    }
    sip__free(in);
    if (held + need <= budget) {
      sip__registry_release(v, n);
      return NULL;
    }
    if (!victim) {
      char who[1024];
      holders(v, n, p, who, sizeof who);
      sip_error_t *e = sip_error_new(
          SIP_RESOURCE_EXHAUSTED,
          "no room to load model '%s' (%.1f MiB expected while it loads): "
          "server.memory_budget_mb is %.1f MiB "
          "and the models in memory hold %.1f MiB: %s; none of them can be evicted (only idle "
          "on_demand models are, and only when no other pool keeps their model loaded); retry when one is idle, unload one, or raise the budget",
          sip__pool_name(p), mib(need), mib(budget), mib(held), who);
      sip__registry_release(v, n);
      return e;
    }
    sip__pool_ref(victim);
    sip__registry_release(v, n);
    sip_error_t *e = evict(s, victim, sip__pool_name(p));
    if (e) return e;
  }
}

sip_error_t *sip__residency_load(sip_server_t *s, const char *name, const char *version) {
  sip_error_t *e = NULL;
  sip__pool_t *p = sip__registry_find(&s->eng, name, version, &e);
  if (!p) { /* unloaded or replaced meanwhile: its drain answered the queue */
    sip_error_free(e);
    return NULL;
  }
  sip__residency_info_t in;
  sip__pool_residency(p, &in);
  if (in.state != SIP__POOL_UNLOADED) {
    sip__pool_unref(p);
    return NULL;
  }
  uint64_t t0 = sip__now_us();
  if ((e = make_room(s, p))) {
    sip__log(SIP__LOG_WARN, "on-demand load refused", "pool=%s reason=\"%s\"", name,
             sip_error_message(e));
    sip__pool_load_refused(p);
    sip__pool_fail_queued(p, sip_error_code(e), sip_error_message(e));
    sip__pool_unref(p);
    return e;
  }
  sip__pool_residency(p, &in); /* evictions may have freed the model it would share */
  if (!sip__pool_begin_load(p)) {
    sip__pool_unref(p);
    return NULL;
  }
  int peak_known = sip__resident_peak_reset();
  sip__pool_load(p);
  uint64_t peak = peak_known ? sip__resident_peak() : 0, now = sip__resident_bytes();
  if (peak > now && !in.model_held) {
    sip__pool_set_load_extra(p, peak - now);
    double r = in.file_bytes ? (double)(peak - now) / (double)in.file_bytes : 0.0;
    if (r > MAX_EXTRA_RATIO) r = MAX_EXTRA_RATIO;
    if (r > s->load_extra_ratio) s->load_extra_ratio = r;
  }
  sip__pool_info_t pi;
  sip__pool_info(p, &pi);
  if (pi.state == SIP__POOL_READY) {
    char text[256];
    snprintf(text, sizeof text, "loaded on demand in %.1f ms; it holds %.1f MiB",
             (double)(sip__now_us() - t0) / 1000.0, mib(pi.memory_bytes));
    sip__events_pool(p, SIP_EVENT_MODEL_LOADED, text);
  } else {
    char msg[512];
    snprintf(msg, sizeof msg, "model '%s' failed to load on demand: %s", name,
             pi.error ? pi.error : "unknown reason");
    sip__pool_fail_queued(p, SIP_UNAVAILABLE, msg);
  }
  sip__pool_unref(p);
  return NULL;
}
