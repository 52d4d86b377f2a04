/* Helpers shared by the unit tests of the pool as a model
 * (test_pool_model.c, test_pool_availability.c, test_pool_admission.c,
 * test_pool_registry.c): an engine set up by hand from a config's builtin
 * pools, requests submitted through the registry's lookups and the model
 * vtable (submit / describe_io / state / ref / unref) as the server does,
 * and bounded waits on the pool's state. */
#ifndef SIP_TEST_POOL_HELPERS_H
#define SIP_TEST_POOL_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backends.h"
#include "core/core.h"
#include "inproc.h"
#include "session/engine.h"
#include "session/pool_impl.h"
#include "sip/sip.h"

/* ---- an engine with the config's pools --------------------------------- */

#define MAXP 8

typedef struct eng {
  sip__engine_t e;
  sip__config_t *cfg;
  sip__pool_t *pools[MAXP];
  size_t n;
  /* note_deadline's calls */
  pthread_mutex_t mu;
  int n_deadlines;
  uint64_t last_deadline;
} eng_t;

static inline void note_deadline(void *ctx, uint64_t deadline_us) {
  eng_t *t = ctx;
  pthread_mutex_lock(&t->mu);
  t->n_deadlines++;
  t->last_deadline = deadline_us;
  pthread_mutex_unlock(&t->mu);
}

/* Parses `pools_yaml` (session_pools entries) and lists every pool in the
 * registry, LOADING; load_all() then loads them. */
static inline eng_t *eng_new(const char *pools_yaml) {
  eng_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  pthread_mutex_init(&t->mu, NULL);
  char yaml[4096];
  snprintf(yaml, sizeof yaml, "server: {log_level: error}\nsession_pools:\n%s", pools_yaml);
  sip_error_t *e =
      sip__config_load_string(yaml, strlen(yaml), "<test>", NULL, sip__backend_catalog(), &t->cfg);
  if (e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("config: %s\n%s", msg, yaml);
  }
  sip__engine_init(&t->e, &t->cfg->engine, 2, note_deadline, t);
  assert_true(t->cfg->n_pools <= MAXP);
  for (size_t i = 0; i < t->cfg->n_pools; i++) {
    sip__pool_t *p = sip__pool_new(&t->e, &t->cfg->pools[i], NULL, NULL);
    assert_non_null(p);
    assert_null(sip__registry_swap(&t->e, &p, 1, NULL, 0));
    t->pools[t->n++] = p;
  }
  return t;
}

static inline void load_all(eng_t *t) {
  for (size_t i = 0; i < t->n; i++) sip__pool_load(t->pools[i]);
}

/* Drains and frees every pool still listed, then the engine. */
static inline void eng_free(eng_t *t) {
  for (;;) {
    sip__pool_t *p = sip__registry_first_pool(&t->e);
    if (!p) break;
    sip__registry_drain_free(&t->e, p);
  }
  sip__engine_destroy(&t->e);
  sip__config_free(t->cfg);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* ---- requests ------------------------------------------------------------ */

/* Looks `name` up (a reference for the caller) and submits `r` through the
 * model vtable with the recorder as callback; returns the admission error
 * (the vtable takes r and the reference either way). */
static inline sip_error_t *vt_submit(eng_t *t, const char *name, sip_request_t *r, rec_t *rec) {
  sip_error_t *e = NULL;
  sip__model_t *m = sip__registry_find_model(&t->e, name, NULL, &e);
  if (!m) {
    sip_request_free(r);
    return e;
  }
  r->done = on_done;
  r->user = rec;
  return m->vt->submit(m, r);
}

static inline void vt_submit_ok(eng_t *t, const char *name, sip_request_t *r, rec_t *rec) {
  sip_error_t *e = vt_submit(t, name, r, rec);
  if (e) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s: %s", sip_code_name(sip_error_code(e)), sip_error_message(e));
    sip_error_free(e);
    fail_msg("submit to '%s' refused: %s", name, msg);
  }
}

/* Expects `code` and every substring (NULL-terminated) in the message. */
static inline void vt_expect(eng_t *t, const char *name, sip_request_t *r, rec_t *rec,
                             sip_code_t code, ...) {
  sip_error_t *e = vt_submit(t, name, r, rec);
  if (!e) fail_msg("submit to '%s' accepted; expected %s", name, sip_code_name(code));
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t got = sip_error_code(e);
  sip_error_free(e);
  if (got != code) fail_msg("code %s, want %s: %s", sip_code_name(got), sip_code_name(code), msg);
  va_list ap;
  va_start(ap, code);
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(msg, s)) fail_msg("message lacks \"%s\": %s", s, msg);
  va_end(ap);
}
#define VT_EXPECT(t, name, r, rec, code, ...) vt_expect(t, name, r, rec, code, __VA_ARGS__, NULL)

static inline void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits until session 0 of `p` runs and nothing is queued: the request
 * just submitted occupies it. */
static inline void wait_running(sip__pool_t *p) {
  for (int i = 0; i < 20000; i++) {
    if (atomic_load(&p->sessions[0].state) == SIP__SESSION_RUNNING && atomic_load(&p->queue.n) == 0)
      return;
    sleep_ms(1);
  }
  fail_msg("pool '%s' never started running its request", p->cfg->name);
}

/* Waits until the pool holds only the registry's reference. */
static inline void wait_refs(sip__pool_t *p, long want) {
  for (int i = 0; i < 20000 && atomic_load(&p->base.refs) != want; i++) sleep_ms(1);
  assert_int_equal(atomic_load(&p->base.refs), want);
}

static inline const entry_t *find_id(rec_t *r, uint64_t id) {
  for (int i = 0; i < r->n && i < MAXR; i++)
    if (r->e[i].id == id) return &r->e[i];
  fail_msg("no completion for request %llu", (unsigned long long)id);
  return NULL;
}

static inline void assert_echo(const entry_t *e) {
  if (e->code != SIP_OK)
    fail_msg("request %llu: %s %s", (unsigned long long)e->id, sip_code_name(e->code), e->msg);
  assert_string_equal(e->out_name, "output");
  assert_int_equal(e->rank, 1);
  assert_int_equal(e->dims[0], 2);
  assert_int_equal(e->nv, 2);
  assert_true(e->v[0] == (float)e->id);
  assert_true(e->v[1] == (float)e->id + 0.5f);
}

static inline int setup(void **state) {
  (void)state;
  sip__log_set_level(SIP__LOG_ERROR + 1); /* refusals and failed loads log: keep quiet */
  return 0;
}

#endif
