/* Unit tests of the pool as a model (src/session: pool.c, pool_model.c,
 * executor.c, registry.c): an engine is set up by hand from a config's
 * builtin pools, and requests go through the registry's lookups and the
 * model vtable (submit / describe_io / state / ref / unref), as the server
 * does. Covered: completion, typed inputs and outputs, LOADING → READY, a
 * load that fails, admission refusals and their codes, priorities, queue
 * limits, deadlines expiring in the queue, cancellation, lookups by name
 * and version, and references keeping a retired pool alive. */
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

static void note_deadline(void *ctx, uint64_t deadline_us) {
  eng_t *t = ctx;
  pthread_mutex_lock(&t->mu);
  t->n_deadlines++;
  t->last_deadline = deadline_us;
  pthread_mutex_unlock(&t->mu);
}

/* Parses `pools_yaml` (session_pools entries) and lists every pool in the
 * registry, LOADING; load_all() then loads them. */
static eng_t *eng_new(const char *pools_yaml) {
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

static void load_all(eng_t *t) {
  for (size_t i = 0; i < t->n; i++) sip__pool_load(t->pools[i]);
}

/* Drains and frees every pool still listed, then the engine. */
static void eng_free(eng_t *t) {
  for (;;) {
    pthread_rwlock_rdlock(&t->e.reg_lock);
    sip__pool_t *p = t->e.n_pools ? t->e.pools[0] : NULL;
    pthread_rwlock_unlock(&t->e.reg_lock);
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
static sip_error_t *vt_submit(eng_t *t, const char *name, sip_request_t *r, rec_t *rec) {
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

static void vt_submit_ok(eng_t *t, const char *name, sip_request_t *r, rec_t *rec) {
  sip_error_t *e = vt_submit(t, name, r, rec);
  if (e) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s: %s", sip_code_name(sip_error_code(e)), sip_error_message(e));
    sip_error_free(e);
    fail_msg("submit to '%s' refused: %s", name, msg);
  }
}

/* Expects `code` and every substring (NULL-terminated) in the message. */
static void vt_expect(eng_t *t, const char *name, sip_request_t *r, rec_t *rec, sip_code_t code,
                      ...) {
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

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits until session 0 of `p` runs and nothing is queued: the request
 * just submitted occupies it. */
static void wait_running(sip__pool_t *p) {
  for (int i = 0; i < 20000; i++) {
    if (atomic_load(&p->sessions[0].state) == SIP__SESSION_RUNNING && atomic_load(&p->queue.n) == 0)
      return;
    sleep_ms(1);
  }
  fail_msg("pool '%s' never started running its request", p->cfg->name);
}

/* Waits until the pool holds only the registry's reference. */
static void wait_refs(sip__pool_t *p, long want) {
  for (int i = 0; i < 20000 && atomic_load(&p->refs) != want; i++) sleep_ms(1);
  assert_int_equal(atomic_load(&p->refs), want);
}

static const entry_t *find_id(rec_t *r, uint64_t id) {
  for (int i = 0; i < r->n && i < MAXR; i++)
    if (r->e[i].id == id) return &r->e[i];
  fail_msg("no completion for request %llu", (unsigned long long)id);
  return NULL;
}

static void assert_echo(const entry_t *e) {
  if (e->code != SIP_OK)
    fail_msg("request %llu: %s %s", (unsigned long long)e->id, sip_code_name(e->code), e->msg);
  assert_string_equal(e->out_name, "output");
  assert_int_equal(e->rank, 1);
  assert_int_equal(e->dims[0], 2);
  assert_int_equal(e->nv, 2);
  assert_true(e->v[0] == (float)e->id);
  assert_true(e->v[1] == (float)e->id + 0.5f);
}

static int setup(void **state) {
  (void)state;
  sip__log_set_level(SIP__LOG_ERROR + 1); /* refusals and failed loads log: keep quiet */
  return 0;
}

/* ---- completion through the vtable ---------------------------------------- */

static void test_submit_and_complete(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: echo, backend: builtin, pool_size: 2}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  sip_error_t *e = NULL;
  sip__model_t *m = sip__registry_find_model(&t->e, "echo", NULL, &e);
  assert_null(e);
  assert_ptr_equal(m, &p->base);
  assert_string_equal(m->vt->kind, "pool");
  assert_ptr_equal(m->vt, &sip__pool_model_vt);
  assert_int_equal(atomic_load(&p->refs), 2); /* the registry's and ours */
  const char *why = "unset";
  assert_int_equal(m->vt->state(m, &why), SIP__MODEL_READY);
  assert_null(why);
  m->vt->unref(m);
  assert_int_equal(atomic_load(&p->refs), 1);

  rec_t rec;
  rec_init(&rec);
  for (uint64_t id = 1; id <= 6; id++) vt_submit_ok(t, "echo", make_req("echo", id, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 6, 10000), 6);
  for (uint64_t id = 1; id <= 6; id++) assert_echo(find_id(&rec, id));
  /* Every admitted request dropped its reference after its answer. */
  wait_refs(p, 1);
  assert_int_equal(atomic_load(&p->by_code[SIP_OK]), 6);
  assert_int_equal(atomic_load(&p->inference_count), 6);
  assert_int_equal(atomic_load(&p->execution_count), 6); /* no batching: one run each */
  assert_int_equal(atomic_load(&p->st_success.count), 6);
  assert_int_equal(atomic_load(&p->st_fail.count), 0);
  uint64_t per_session = atomic_load(&p->sessions[0].inferences) + atomic_load(&p->sessions[1].inferences);
  assert_int_equal(per_session, 6);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- availability (src/session/availability.c) --------------------------- */

/* Faults: a count hits the next executions of the pool (or of one session)
 * and then disarms; rate 1 hits every one; kind none clears; a session out
 * of range and a pool not serving are refused. */
static void test_fault_counts(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: a, backend: builtin, pool_size: 2}\n");
  sip__pool_t *p = t->pools[0];
  sip__fault_t f = {.kind = SIP__FAULT_CRASH, .session = -1, .count = 2};
  sip_error_t *e = sip__pool_set_fault(p, &f); /* LOADING */
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  sip_error_free(e);
  load_all(t);
  int64_t delay = -1;
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_NONE);
  assert_null(sip__pool_set_fault(p, &f));
  assert_int_equal(sip__fault_take(p, &p->sessions[1], &delay), SIP__FAULT_CRASH);
  assert_int_equal(delay, 0);
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_CRASH);
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_NONE);
  assert_int_equal(atomic_load(&p->fault_armed), 0);
  f = (sip__fault_t){.kind = SIP__FAULT_SLOW, .session = 1, .count = 1, .delay_ms = 7};
  assert_null(sip__pool_set_fault(p, &f));
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_NONE);
  assert_int_equal(sip__fault_take(p, &p->sessions[1], &delay), SIP__FAULT_SLOW);
  assert_int_equal(delay, 7);
  f = (sip__fault_t){.kind = SIP__FAULT_ERROR, .session = -1, .count = -1, .rate = 1.0};
  assert_null(sip__pool_set_fault(p, &f));
  for (int i = 0; i < 50; i++)
    assert_int_equal(sip__fault_take(p, &p->sessions[i % 2], &delay), SIP__FAULT_ERROR);
  f = (sip__fault_t){.kind = SIP__FAULT_NONE, .session = -1};
  assert_null(sip__pool_set_fault(p, &f));
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_NONE);
  f = (sip__fault_t){.kind = SIP__FAULT_HANG, .session = 2, .count = 1};
  assert_non_null(e = sip__pool_set_fault(p, &f));
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "sessions 0..1; got session 2"));
  sip_error_free(e);
  eng_free(t);
}

/* Failover decisions: a crashed execution's request is retried up to
 * max_retries, then goes to the fallback pool once; an injected error is
 * answered as is; a drained session takes nothing until resumed. */
static void test_failover_paths(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: a, backend: builtin, pool_size: 2,\n"
                     "     failover: {strategy: immediate_retry, max_retries: 2, fallback_pool: b}}\n"
                     "  - {name: b, backend: builtin}\n"
                     "  - {name: n, backend: builtin}\n");
  load_all(t);
  sip__pool_t *a = t->pools[0], *b = t->pools[1], *n = t->pools[2];
  rec_t rec;
  rec_init(&rec);
  sip__fault_t f = {.kind = SIP__FAULT_CRASH, .session = -1, .count = 2};
  assert_null(sip__pool_set_fault(a, &f));
  vt_submit_ok(t, "a", make_req("a", 1, 0, 0), &rec); /* two crashes, answered by a */
  assert_int_equal(rec_wait(&rec, 1, 10000), 1);
  assert_echo(find_id(&rec, 1));
  assert_int_equal(atomic_load(&a->n_retries), 2);
  assert_int_equal(atomic_load(&a->n_fallbacks), 0);
  assert_int_equal(atomic_load(&a->n_session_failures), 2);
  f.count = 3;
  assert_null(sip__pool_set_fault(a, &f));
  vt_submit_ok(t, "a", make_req("a", 2, 0, 0), &rec); /* three: answered by b */
  assert_int_equal(rec_wait(&rec, 2, 10000), 2);
  assert_echo(find_id(&rec, 2));
  assert_int_equal(atomic_load(&a->n_fallbacks), 1);
  assert_int_equal(atomic_load(&b->by_code[SIP_OK]), 1);
  for (int i = 0; i < 2; i++) assert_non_null(a->sessions[i].ctx);
  f = (sip__fault_t){.kind = SIP__FAULT_ERROR, .session = -1, .count = 1};
  assert_null(sip__pool_set_fault(a, &f));
  vt_submit_ok(t, "a", make_req("a", 3, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 3, 10000), 3);
  assert_int_equal(find_id(&rec, 3)->code, SIP_INTERNAL);
  assert_int_equal(atomic_load(&a->n_retries), 4); /* 2 + 2 before the fallback, none more */
  f = (sip__fault_t){.kind = SIP__FAULT_CRASH, .session = -1, .count = 1};
  assert_null(sip__pool_set_fault(n, &f)); /* no failover: answered UNAVAILABLE */
  vt_submit_ok(t, "n", make_req("n", 4, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 4, 10000), 4);
  assert_int_equal(find_id(&rec, 4)->code, SIP_UNAVAILABLE);
  assert_non_null(strstr(find_id(&rec, 4)->msg, "injected crash"));
  assert_int_equal(atomic_load(&n->sessions[0].state), SIP__SESSION_READY);

  /* Drain: session 0 of n (its only one) takes nothing until resumed. */
  assert_null(sip__session_drain(n, 0, 1));
  for (int i = 0; i < 2000 && atomic_load(&n->sessions[0].state) != SIP__SESSION_SUSPENDED; i++)
    sleep_ms(1);
  assert_int_equal(atomic_load(&n->sessions[0].state), SIP__SESSION_SUSPENDED);
  vt_submit_ok(t, "n", make_req("n", 5, 0, 0), &rec);
  /* Queued behind the suspended session, and not run. */
  for (int i = 0; i < 20000 && atomic_load(&n->queue.n) != 1; i++) sleep_ms(1);
  assert_int_equal(atomic_load(&n->queue.n), 1);
  assert_int_equal(rec_count(&rec), 4);
  assert_null(sip__session_drain(n, 0, 0));
  assert_int_equal(rec_wait(&rec, 5, 10000), 5);
  assert_echo(find_id(&rec, 5));
  sip_error_t *e = sip__session_drain(n, 1, 1);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- describe_io ---------------------------------------------------------- */

static void test_describe_io(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: f, backend: builtin}\n"
                     "  - {name: i, backend: builtin, backend_options: {dtype: int64, shape: '-1,3'}}\n"
                     "  - {name: u, backend: builtin, backend_options: {dtype: uint8, shape: '2,3,4'}}\n");
  load_all(t);
  static const struct {
    const char *name;
    sip_dtype_t dtype;
    int rank;
    int64_t dims[3];
  } want[] = {
      {"f", SIP_DTYPE_FLOAT32, 1, {-1}},
      {"i", SIP_DTYPE_INT64, 2, {-1, 3}},
      {"u", SIP_DTYPE_UINT8, 3, {2, 3, 4}},
  };
  for (size_t k = 0; k < 3; k++) {
    sip_error_t *e = NULL;
    sip__model_t *m = sip__registry_find_model(&t->e, want[k].name, NULL, &e);
    assert_non_null(m);
    sip__model_io_t io;
    memset(&io, 0, sizeof io);
    assert_int_equal(m->vt->describe_io(m, &io), 1);
    assert_int_equal(io.n_inputs, 1);
    assert_int_equal(io.n_outputs, 1);
    assert_string_equal(io.inputs[0].name, "input");
    assert_string_equal(io.outputs[0].name, "output");
    for (int side = 0; side < 2; side++) {
      const sip_io_desc_t *d = side ? &io.outputs[0] : &io.inputs[0];
      assert_int_equal(d->dtype, want[k].dtype);
      assert_int_equal(d->rank, want[k].rank);
      for (int j = 0; j < want[k].rank; j++) assert_int_equal(d->dims[j], want[k].dims[j]);
    }
    /* The pool's own copies, not the backend's. */
    sip__pool_t *p = (sip__pool_t *)m;
    assert_ptr_equal(io.inputs, p->inputs);
    assert_ptr_equal(io.outputs, p->outputs);
    m->vt->unref(m);
  }
  /* The shapes are enforced at admission. */
  rec_t rec;
  rec_init(&rec);
  sip_request_t *r = sip_request_new("i");
  int64_t d2[2] = {2, 4};
  int64_t v[8] = {0};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_INT64, 2, d2, v, sizeof v)));
  VT_EXPECT(t, "i", r, &rec, SIP_INVALID_ARGUMENT, "input 'input' of pool 'i'",
            "received shape [2,4]", "expected [-1,3]");
  r = sip_request_new("i");
  int64_t d3[2] = {2, 3};
  int64_t v6[6] = {1, -2, 3, -4, 5, -6};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_INT64, 2, d3, v6, sizeof v6)));
  vt_submit_ok(t, "i", r, &rec);
  assert_int_equal(rec_wait(&rec, 1, 10000), 1);
  assert_int_equal(rec.e[0].code, SIP_OK);
  assert_int_equal(rec.e[0].rank, 2);
  assert_int_equal(rec.e[0].dims[0], 2);
  assert_int_equal(rec.e[0].dims[1], 3);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- states ----------------------------------------------------------------- */

static void test_loading_then_ready(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: slow, backend: builtin, pool_size: 2}\n");
  sip__pool_t *p = t->pools[0];
  sip__model_t *m = &p->base;
  const char *why = "unset";
  assert_int_equal(m->vt->state(m, &why), SIP__MODEL_LOADING);
  assert_null(why);
  sip__model_io_t io;
  assert_int_equal(m->vt->describe_io(m, &io), 0);
  assert_int_equal(p->n_sessions, 0);
  /* Listed while loading: found, but it refuses work. */
  rec_t rec;
  rec_init(&rec);
  VT_EXPECT(t, "slow", make_req("slow", 1, 0, 0), &rec, SIP_UNAVAILABLE, "pool 'slow' is still loading");
  assert_int_equal(atomic_load(&p->refs), 1); /* the refused request's reference was dropped */
  assert_int_equal(atomic_load(&p->by_code[SIP_UNAVAILABLE]), 1);

  sip__pool_load(p);
  assert_int_equal(m->vt->state(m, &why), SIP__MODEL_READY);
  assert_null(why);
  assert_int_equal(atomic_load(&p->state), SIP__POOL_READY);
  assert_string_equal(sip__pool_state_name(SIP__POOL_READY), "READY");
  assert_int_equal(p->n_sessions, 2);
  for (int i = 0; i < 2; i++) {
    int st = atomic_load(&p->sessions[i].state);
    assert_true(st == SIP__SESSION_READY || st == SIP__SESSION_RUNNING);
  }
  assert_string_equal(p->sessions[1].id, "slow/1");
  assert_int_equal(m->vt->describe_io(m, &io), 1);
  assert_null(p->error);
  assert_null(p->load_error);
  vt_submit_ok(t, "slow", make_req("slow", 2, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 1, 10000), 1);
  assert_echo(&rec.e[0]);
  rec_destroy(&rec);
  eng_free(t);
  /* (eng_free stopped it: STOPPED is what the vtable then reports; checked
   * on a pool of its own below.) */
}

static void test_stopped_after_shutdown(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: s, backend: builtin}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  sip__pool_shutdown(p); /* by hand: the pool stays listed */
  const char *why = "unset";
  assert_int_equal(p->base.vt->state(&p->base, &why), SIP__MODEL_STOPPED);
  assert_null(why);
  sip__model_io_t io;
  assert_int_equal(p->base.vt->describe_io(&p->base, &io), 0);
  for (int i = 0; i < p->n_sessions; i++)
    assert_int_equal(atomic_load(&p->sessions[i].state), SIP__SESSION_DESTROYED);
  rec_t rec;
  rec_init(&rec);
  VT_EXPECT(t, "s", make_req("s", 1, 0, 0), &rec, SIP_UNAVAILABLE, "pool 's' is shutting down");
  rec_destroy(&rec);
  eng_free(t); /* drain_free of a stopped pool: shutdown again is harmless */
}

static void test_failed_load(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: bad_dtype, backend: builtin, pool_size: 3, backend_options: {dtype: nope}}\n"
                     "  - {name: bad_key, backend: builtin, backend_options: {colour: red}}\n"
                     "  - {name: bad_shape, backend: builtin, backend_options: {shape: 'a,b'}}\n"
                     "  - {name: ok, backend: builtin}\n");
  load_all(t);
  static const struct {
    const char *name, *frag1, *frag2;
  } want[] = {
      {"bad_dtype", "builtin backend option dtype: 'nope'", "expected a numpy dtype name"},
      {"bad_key", "builtin backend has no option 'colour'", "expected one of: dtype, shape"},
      {"bad_shape", "builtin backend option shape: 'a,b'", "comma-separated dims"},
  };
  rec_t rec;
  rec_init(&rec);
  for (size_t k = 0; k < 3; k++) {
    sip_error_t *e = NULL;
    sip__model_t *m = sip__registry_find_model(&t->e, want[k].name, NULL, &e);
    assert_null(e);
    assert_non_null(m);
    sip__pool_t *p = (sip__pool_t *)m;
    const char *why = NULL;
    assert_int_equal(m->vt->state(m, &why), SIP__MODEL_FAILED);
    assert_non_null(why);
    assert_ptr_equal(why, p->error);
    /* "CODE: message", and the same typed. */
    assert_true(strncmp(why, "INVALID_ARGUMENT: ", 18) == 0);
    assert_non_null(strstr(why, want[k].frag1));
    assert_non_null(strstr(why, want[k].frag2));
    assert_non_null(p->load_error);
    assert_int_equal(sip_error_code(p->load_error), SIP_INVALID_ARGUMENT);
    assert_string_equal(sip_error_message(p->load_error), why + 18);
    sip__model_io_t io;
    assert_int_equal(m->vt->describe_io(m, &io), 0);
    assert_int_equal(p->n_sessions, 0); /* nothing started, nothing held */
    assert_null(p->model);
    m->vt->unref(m);
    VT_EXPECT(t, want[k].name, make_req(want[k].name, 1, 0, 0), &rec, SIP_UNAVAILABLE,
              "failed to load", want[k].frag1);
    assert_int_equal(atomic_load(&p->by_code[SIP_UNAVAILABLE]), 1);
    assert_int_equal(atomic_load(&p->refs), 1);
  }
  /* A neighbour's failure is not its problem. */
  vt_submit_ok(t, "ok", make_req("ok", 9, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 1, 10000), 1);
  assert_echo(&rec.e[0]);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- admission ------------------------------------------------------------- */

static void test_admission_refusals(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: a, backend: builtin, backend_options: {shape: '-1'}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  int64_t d1[1] = {2}, d2[2] = {1, 2};
  float f2[2] = {1, 2};
  int32_t i2[2] = {1, 2};

  sip_request_t *r = sip_request_new("a");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("nope", SIP_DTYPE_FLOAT32, 1, d1, f2, sizeof f2)));
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "pool 'a' has no input 'nope'",
            "expected one of: 'input'");

  r = sip_request_new("a");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_INT32, 1, d1, i2, sizeof i2)));
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "input 'input' of pool 'a'",
            "received dtype int32", "expected float32");

  r = sip_request_new("a");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d2, f2, sizeof f2)));
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "received shape [1,2]", "expected [-1]");

  r = sip_request_new("a");
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "missing input 'input' of pool 'a'",
            "expected float32 [-1]");

  r = make_req("a", 1, 0, 0);
  assert_null(sip_request_add_output(r, "logits"));
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "pool 'a' has no output 'logits'");

  /* A token cancelled before submission. */
  sip_cancel_token_t *tok = sip_cancel_token_new();
  atomic_store(&tok->cancelled, 1);
  r = make_req("a", 2, 0, 0);
  sip_request_set_cancel_token(r, tok);
  VT_EXPECT(t, "a", r, &rec, SIP_CANCELLED, "request was cancelled");
  sip_cancel_token_free(tok);

  /* Unknown names never reach a pool. */
  sip_error_t *e = vt_submit(t, "zz", make_req("zz", 3, 0, 0), &rec);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "Request for unknown model: 'zz' is not found"));
  sip_error_free(e);

  /* Every refusal was counted with its code, none answered by callback. */
  assert_int_equal(atomic_load(&p->by_code[SIP_INVALID_ARGUMENT]), 5);
  assert_int_equal(atomic_load(&p->by_code[SIP_CANCELLED]), 1);
  assert_int_equal(atomic_load(&p->by_code[SIP_OK]), 0);
  assert_int_equal(atomic_load(&p->st_fail.count), 6);
  assert_int_equal(rec_count(&rec), 0);
  assert_int_equal(atomic_load(&p->refs), 1);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- priorities --------------------------------------------------------------- */

static void test_priority_order(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: p, backend: builtin, pool_size: 1, priority: low, "
                     "backend_options: {delay_ms: 100}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  vt_submit_ok(t, "p", make_req("p", 100, 2, 0), &rec); /* occupies the only session */
  wait_running(p);
  vt_submit_ok(t, "p", make_req("p", 1, 3, 0), &rec); /* low */
  vt_submit_ok(t, "p", make_req("p", 2, 0, 0), &rec); /* the pool's default: low */
  vt_submit_ok(t, "p", make_req("p", 3, 2, 0), &rec); /* medium */
  vt_submit_ok(t, "p", make_req("p", 4, 1, 0), &rec); /* high */
  vt_submit_ok(t, "p", make_req("p", 5, 3, 0), &rec); /* low */
  vt_submit_ok(t, "p", make_req("p", 6, 1, 0), &rec); /* high */
  if (rec_count(&rec) == 0) { /* still all queued: the levels they wait at */
    pthread_mutex_lock(&p->mu);
    size_t qh = p->queue.q[SIP__PRIO_HIGH].count, qm = p->queue.q[SIP__PRIO_MEDIUM].count,
           ql = p->queue.q[SIP__PRIO_LOW].count;
    pthread_mutex_unlock(&p->mu);
    assert_int_equal(qh, 2);
    assert_int_equal(qm, 1);
    assert_int_equal(ql, 3);
    assert_int_equal(atomic_load(&p->queue.n), 6);
    assert_int_equal(atomic_load(&p->refs), 1 + 7); /* each admitted request holds one */
  }
  assert_int_equal(rec_wait(&rec, 7, 20000), 7);
  static const uint64_t order[] = {100, 4, 6, 3, 1, 2, 5};
  for (int i = 0; i < 7; i++) {
    if (rec.e[i].id != order[i])
      fail_msg("completion %d is request %llu, want %llu", i, (unsigned long long)rec.e[i].id,
               (unsigned long long)order[i]);
    assert_echo(&rec.e[i]);
  }
  wait_refs(p, 1);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- queue limit ------------------------------------------------------------- */

static void test_queue_limit(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: q, backend: builtin, pool_size: 1, queue: {max_size: 2}, "
                     "backend_options: {delay_ms: 300}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  vt_submit_ok(t, "q", make_req("q", 1, 0, 0), &rec);
  wait_running(p); /* the running request is not in the queue */
  vt_submit_ok(t, "q", make_req("q", 2, 0, 0), &rec);
  vt_submit_ok(t, "q", make_req("q", 3, 0, 0), &rec);
  int refused = 0;
  if (atomic_load(&p->queue.n) == 2) { /* still full */
    VT_EXPECT(t, "q", make_req("q", 4, 1, 0), &rec, SIP_RESOURCE_EXHAUSTED,
              "the queue of pool 'q' is full (2 requests, queue.max_size)", "retry later");
    refused = 1;
    assert_int_equal(atomic_load(&p->by_code[SIP_RESOURCE_EXHAUSTED]), 1);
  }
  assert_int_equal(rec_wait(&rec, 3, 20000), 3);
  for (uint64_t id = 1; id <= 3; id++) assert_echo(find_id(&rec, id));
  /* Room again once it drained. */
  vt_submit_ok(t, "q", make_req("q", 5, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 4, 20000), 4);
  assert_echo(find_id(&rec, 5));
  wait_refs(p, 1);
  assert_int_equal(atomic_load(&p->by_code[SIP_OK]), 4);
  assert_int_equal(atomic_load(&p->st_fail.count), (uint64_t)refused);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- deadlines ----------------------------------------------------------------- */

static void test_deadline_in_queue(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: d, backend: builtin, pool_size: 1, backend_options: {delay_ms: 300}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  vt_submit_ok(t, "d", make_req("d", 1, 0, 0), &rec);
  wait_running(p);
  assert_int_equal(t->n_deadlines, 0); /* no deadline, nothing noted */
  uint64_t before = sip__now_us();
  vt_submit_ok(t, "d", make_req("d", 2, 0, 5), &rec); /* 5 ms */
  uint64_t after = sip__now_us();
  pthread_mutex_lock(&t->mu);
  assert_int_equal(t->n_deadlines, 1);
  assert_true(t->last_deadline >= before + 5000 && t->last_deadline <= after + 5000);
  pthread_mutex_unlock(&t->mu);
  vt_submit_ok(t, "d", make_req("d", 3, 0, 600000), &rec); /* 10 min: stays */
  /* Until request 2's deadline has passed (the condition is the clock). */
  while (sip__now_us() <= after + 5000) sleep_ms(1);
  uint64_t now = sip__now_us();
  uint64_t next = sip__pool_expire(p, now);
  /* Request 2 expired (here, or by its executor had it started first);
   * request 3's deadline is what is left. */
  assert_true(next > now + 500000000ULL);
  assert_int_equal(rec_wait(&rec, 3, 20000), 3);
  const entry_t *e2 = find_id(&rec, 2);
  assert_int_equal(e2->code, SIP_DEADLINE_EXCEEDED);
  assert_non_null(strstr(e2->msg, "in the queue of pool 'd', past its timeout of 5 ms"));
  assert_non_null(strstr(e2->msg, "it was not executed"));
  assert_int_equal(e2->n_outputs, 0);
  assert_true(e2->queue_us >= 5000);
  assert_echo(find_id(&rec, 1));
  assert_echo(find_id(&rec, 3));
  /* The expired one never ran and is counted as such. */
  assert_int_equal(atomic_load(&p->inference_count), 2);
  assert_int_equal(atomic_load(&p->by_code[SIP_DEADLINE_EXCEEDED]), 1);
  assert_int_equal(atomic_load(&p->by_code[SIP_OK]), 2);
  assert_int_equal(sip__pool_expire(p, sip__now_us()), 0); /* nothing queued */
  wait_refs(p, 1);
  rec_destroy(&rec);
  eng_free(t);
}

/* default_timeout_ms applies to requests without a timeout of their own. */
static void test_default_timeout(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: d, backend: builtin, pool_size: 1, queue: {default_timeout_ms: 100}, "
                     "backend_options: {delay_ms: 600}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  vt_submit_ok(t, "d", make_req("d", 1, 0, 60000), &rec); /* its own timeout wins */
  wait_running(p);
  vt_submit_ok(t, "d", make_req("d", 2, 0, 0), &rec); /* the default: 100 ms */
  assert_int_equal(rec_wait(&rec, 2, 20000), 2);
  /* The first runs 600 ms, far past the default, within its own timeout. */
  assert_echo(find_id(&rec, 1));
  const entry_t *e2 = find_id(&rec, 2);
  assert_int_equal(e2->code, SIP_DEADLINE_EXCEEDED);
  assert_non_null(strstr(e2->msg, "past its timeout of 100 ms"));
  assert_int_equal(t->n_deadlines, 2);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- cancellation ---------------------------------------------------------------- */

static void test_cancel_queued(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: c, backend: builtin, pool_size: 1, backend_options: {delay_ms: 500}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  sip_cancel_token_t *a = sip_cancel_token_new(), *b = sip_cancel_token_new();
  sip_request_t *r = make_req("c", 1, 0, 0);
  sip_request_set_cancel_token(r, a); /* runs: cancelling does not stop it */
  vt_submit_ok(t, "c", r, &rec);
  wait_running(p);
  for (uint64_t id = 2; id <= 5; id++) {
    r = make_req("c", id, 0, 0);
    sip_request_set_cancel_token(r, id % 2 ? b : a); /* 2, 4: a; 3, 5: b */
    vt_submit_ok(t, "c", r, &rec);
  }
  atomic_store(&a->cancelled, 1);
  sip__pool_cancel(p, a);
  /* Answered on this thread, before anything queued behind them ran. */
  pthread_mutex_lock(&rec.mu);
  int n = rec.n;
  entry_t c0 = rec.e[0], c1 = rec.e[1];
  pthread_mutex_unlock(&rec.mu);
  assert_true(n >= 2);
  assert_int_equal(c0.code, SIP_CANCELLED);
  assert_int_equal(c1.code, SIP_CANCELLED);
  assert_true((c0.id == 2 && c1.id == 4) || (c0.id == 4 && c1.id == 2));
  assert_non_null(strstr(c0.msg, "request was cancelled before it ran"));
  assert_int_equal(c0.n_outputs, 0);
  assert_int_equal(c1.n_outputs, 0);
  assert_int_equal(rec_wait(&rec, 5, 20000), 5);
  assert_echo(find_id(&rec, 1));
  assert_echo(find_id(&rec, 3));
  assert_echo(find_id(&rec, 5));
  assert_int_equal(atomic_load(&p->by_code[SIP_CANCELLED]), 2);
  assert_int_equal(atomic_load(&p->inference_count), 3);
  /* Later submissions carrying a cancelled token are refused. */
  r = make_req("c", 6, 0, 0);
  sip_request_set_cancel_token(r, a);
  VT_EXPECT(t, "c", r, &rec, SIP_CANCELLED, "cancelled");
  wait_refs(p, 1);
  sip_cancel_token_free(a);
  sip_cancel_token_free(b);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- registry: names and versions --------------------------------------------- */

static void test_registry_versions(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: other, backend: builtin}\n");
  load_all(t);
  /* Versions of model "m" share one config, as repository versions do. */
  sip__pool_config_t *mc = NULL;
  assert_null(sip__config_load_model(NULL, "m", NULL, sip__backend_catalog(), &mc));
  sip__free(mc->backend);
  mc->backend = sip__strdup("builtin");
  static const char *vers[] = {"9", "10", "2"};
  sip__pool_t *v[3];
  for (int i = 0; i < 3; i++) {
    v[i] = sip__pool_new(&t->e, mc, NULL, vers[i]);
    assert_non_null(v[i]);
    assert_int_equal(v[i]->version_num, atoll(vers[i]));
  }
  assert_null(sip__registry_swap(&t->e, v, 3, NULL, 0));
  for (int i = 0; i < 3; i++) {
    sip__pool_load(v[i]);
    assert_int_equal(atomic_load(&v[i]->state), SIP__POOL_READY);
  }
  sip_error_t *e = NULL;
  /* The default: the highest number (10 > 9 numerically). */
  sip__pool_t *p = sip__registry_find(&t->e, "m", NULL, &e);
  assert_null(e);
  assert_ptr_equal(p, v[1]);
  sip__pool_unref(p);
  for (int i = 0; i < 3; i++) {
    p = sip__registry_find(&t->e, "m", vers[i], &e);
    assert_ptr_equal(p, v[i]);
    assert_string_equal(p->version, vers[i]);
    sip__pool_unref(p);
  }
  /* A version it does not serve: NOT_FOUND listing those it does. */
  assert_null(sip__registry_find(&t->e, "m", "3", &e));
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "Request for unknown model: 'm' version 3 is not found"));
  assert_non_null(strstr(sip_error_message(e), "versions '9', '10', '2'"));
  sip_error_free(e);
  /* An unversioned pool asked for a version. */
  assert_null(sip__registry_find(&t->e, "other", "1", &e));
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "it serves an unversioned model"));
  sip_error_free(e);
  assert_null(sip__registry_find(&t->e, "nobody", NULL, &e));
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "Request for unknown model: 'nobody' is not found"));
  sip_error_free(e);
  assert_true(sip__registry_has(&t->e, "m"));
  assert_true(sip__registry_has(&t->e, "other"));
  assert_false(sip__registry_has(&t->e, "nobody"));

  /* A pinned version ('current') is the default whatever its number. */
  v[2]->pinned = 1;
  p = sip__registry_find(&t->e, "m", NULL, &e);
  assert_ptr_equal(p, v[2]);
  sip__pool_unref(p);
  pthread_rwlock_rdlock(&t->e.reg_lock);
  assert_true(sip__registry_is_default_locked(&t->e, v[2]));
  assert_false(sip__registry_is_default_locked(&t->e, v[1]));
  pthread_rwlock_unlock(&t->e.reg_lock);
  v[2]->pinned = 0;

  /* Requests by version reach that version. */
  rec_t rec;
  rec_init(&rec);
  for (int i = 0; i < 3; i++) {
    sip_request_t *r = make_req("m", (uint64_t)(i + 1), 0, 0);
    assert_null(sip_request_set_version(r, vers[i]));
    sip__model_t *m = sip__registry_find_model(&t->e, "m", vers[i], &e);
    assert_ptr_equal(m, &v[i]->base);
    r->done = on_done;
    r->user = &rec;
    assert_null(m->vt->submit(m, r));
  }
  assert_int_equal(rec_wait(&rec, 3, 10000), 3);
  for (int i = 0; i < 3; i++) {
    assert_echo(find_id(&rec, (uint64_t)(i + 1)));
    assert_int_equal(atomic_load(&v[i]->inference_count), 1);
  }
  for (int i = 0; i < 3; i++) wait_refs(v[i], 1);

  /* Retiring the default hands the name to the next highest. */
  assert_null(sip__registry_swap(&t->e, NULL, 0, &v[1], 1));
  p = sip__registry_find(&t->e, "m", NULL, &e);
  assert_ptr_equal(p, v[0]);
  sip__pool_unref(p);
  assert_null(sip__registry_find(&t->e, "m", "10", &e));
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  sip_error_free(e);
  /* Snapshots list retired pools unless asked for live ones only. */
  size_t n_all = 0, n_live = 0;
  sip__pool_t **all = sip__registry_snapshot(&t->e, 0, &n_all);
  sip__pool_t **live = sip__registry_snapshot(&t->e, 1, &n_live);
  assert_int_equal(n_all, 4);
  assert_int_equal(n_live, 3);
  assert_int_equal(atomic_load(&v[0]->refs), 3); /* registry + two snapshots */
  sip__registry_release(all, n_all);
  sip__registry_release(live, n_live);
  assert_int_equal(atomic_load(&v[0]->refs), 1);
  rec_destroy(&rec);
  eng_free(t);
  sip__config_pool_free(mc);
}

/* A named model (a pipeline's place) is found before pools and whatever
 * version is asked for. */
static void test_registry_named_first(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: x, backend: builtin}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  /* List the pool's model under the name "x" as a named model too. */
  assert_false(sip__registry_is_named(&t->e, "x"));
  assert_null(sip__registry_add_named(&t->e, "x", &p->base));
  assert_true(sip__registry_is_named(&t->e, "x"));
  sip_error_t *e = NULL;
  sip__model_t *m = sip__registry_find_model(&t->e, "x", "7", &e);
  assert_null(e);
  assert_ptr_equal(m, &p->base);
  assert_int_equal(atomic_load(&p->refs), 2);
  m->vt->unref(m);
  /* Plain pool lookups ignore named models. */
  assert_null(sip__registry_find(&t->e, "x", "7", &e));
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  sip_error_free(e);
  eng_free(t);
}

/* ---- references keep a retired pool alive --------------------------------------- */

typedef struct drain_arg {
  eng_t *t;
  sip__pool_t *p;
  atomic_int returned;
} drain_arg_t;

static void *drain_main(void *arg) {
  drain_arg_t *d = arg;
  sip__registry_drain_free(&d->t->e, d->p);
  atomic_store(&d->returned, 1);
  return NULL;
}

typedef struct order_rec {
  rec_t rec;
  drain_arg_t *d;
  int drained_before[8];
} order_rec_t;

static void on_done_order(sip_response_t *resp, void *user) {
  order_rec_t *o = user;
  pthread_mutex_lock(&o->rec.mu);
  int i = o->rec.n;
  if (i < 8) o->drained_before[i] = atomic_load(&o->d->returned);
  pthread_mutex_unlock(&o->rec.mu);
  on_done(resp, &o->rec);
}

static void test_retired_pool_lives_until_last_ref(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: r, backend: builtin, pool_size: 1, backend_options: {delay_ms: 150}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  drain_arg_t d = {t, p, 0};
  order_rec_t o;
  memset(&o, 0, sizeof o);
  rec_init(&o.rec);
  o.d = &d;
  for (uint64_t id = 1; id <= 3; id++) {
    sip_error_t *e = NULL;
    sip__model_t *m = sip__registry_find_model(&t->e, "r", NULL, &e);
    assert_non_null(m);
    sip_request_t *r = make_req("r", id, 0, 0);
    r->done = on_done_order;
    r->user = &o;
    assert_null(m->vt->submit(m, r));
  }
  wait_running(p);
  /* Retired: no longer found, but what was admitted is still served. */
  assert_null(sip__registry_swap(&t->e, NULL, 0, &p, 1));
  assert_true(atomic_load(&p->retired));
  sip_error_t *e = NULL;
  assert_null(sip__registry_find_model(&t->e, "r", NULL, &e));
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "Request for unknown model: 'r' is not found"));
  sip_error_free(e);
  assert_false(sip__registry_has(&t->e, "r"));
  assert_true(atomic_load(&p->refs) >= 2);
  /* An iterator's reference too: the drain waits for it after unlisting. */
  size_t n = 0;
  sip__pool_t **snap = sip__registry_snapshot(&t->e, 0, &n);
  assert_int_equal(n, 1);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, drain_main, &d), 0);
  assert_int_equal(rec_wait(&o.rec, 3, 20000), 3);
  /* Until the requests let go of the pool: only the drain's reference and
   * the snapshot's are left, so the drain would return now but for the
   * snapshot. */
  wait_refs(p, 2);
  /* Every request answered OK, each before the drain returned; the drain
   * still waits for the snapshot's reference. */
  for (uint64_t id = 1; id <= 3; id++) assert_echo(find_id(&o.rec, id));
  for (int i = 0; i < 3; i++) assert_int_equal(o.drained_before[i], 0);
  assert_int_equal(atomic_load(&d.returned), 0);
  assert_int_equal(atomic_load(&p->inference_count), 3);
  sip__registry_release(snap, n); /* the last reference but the registry's */
  pthread_join(th, NULL);
  assert_int_equal(atomic_load(&d.returned), 1);
  assert_int_equal(t->e.n_pools, 0);
  rec_destroy(&o.rec);
  eng_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_submit_and_complete),
      cmocka_unit_test(test_describe_io),
      cmocka_unit_test(test_loading_then_ready),
      cmocka_unit_test(test_stopped_after_shutdown),
      cmocka_unit_test(test_failed_load),
      cmocka_unit_test(test_admission_refusals),
      cmocka_unit_test(test_priority_order),
      cmocka_unit_test(test_queue_limit),
      cmocka_unit_test(test_deadline_in_queue),
      cmocka_unit_test(test_default_timeout),
      cmocka_unit_test(test_cancel_queued),
      cmocka_unit_test(test_registry_versions),
      cmocka_unit_test(test_registry_named_first),
      cmocka_unit_test(test_retired_pool_lives_until_last_ref),
      cmocka_unit_test(test_fault_counts), cmocka_unit_test(test_failover_paths),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
