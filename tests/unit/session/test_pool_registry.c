/* Unit tests of pools in the registry (src/session/registry.c): lookups
 * by name and version, and references keeping a retired pool alive until
 * the last one is dropped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_helpers.h"

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
  assert_int_equal(atomic_load(&v[0]->base.refs), 3); /* registry + two snapshots */
  sip__registry_release(all, n_all);
  sip__registry_release(live, n_live);
  assert_int_equal(atomic_load(&v[0]->base.refs), 1);
  rec_destroy(&rec);
  eng_free(t);
  sip__config_pool_free(mc);
}

/* A model that is not a pool (a pipeline's place in the one list): found
 * by its identity's name before pools and whatever version is asked for;
 * plain pool lookups skip it. */
typedef struct fake_model {
  sip__model_t base;
  const char *name;
  atomic_int refs;
} fake_model_t;

static void fake_ref(sip__model_t *m) { atomic_fetch_add(&((fake_model_t *)m)->refs, 1); }
static void fake_unref(sip__model_t *m) { atomic_fetch_sub(&((fake_model_t *)m)->refs, 1); }
static void fake_identity(const sip__model_t *m, sip__model_id_t *id) {
  *id = (sip__model_id_t){.name = ((const fake_model_t *)m)->name, .version_num = -1};
}
static const sip__model_vt_t fake_vt = {
    .kind = "pipeline", .ref = fake_ref, .unref = fake_unref, .identity = fake_identity};

static void test_registry_named_first(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: x, backend: builtin}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  fake_model_t f = {.base = {.vt = &fake_vt}, .name = "x"};
  fake_model_t g = {.base = {.vt = &fake_vt}, .name = "y"};
  assert_false(sip__registry_is_named(&t->e, "x"));
  assert_null(sip__registry_add_model(&t->e, &f.base));
  assert_null(sip__registry_add_model(&t->e, &g.base));
  assert_true(sip__registry_is_named(&t->e, "x"));
  assert_true(sip__registry_is_named(&t->e, "y"));
  assert_false(sip__registry_is_named(&t->e, "z"));
  sip_error_t *e = NULL;
  sip__model_t *m = sip__registry_find_model(&t->e, "x", "7", &e);
  assert_null(e);
  assert_ptr_equal(m, &f.base);
  assert_int_equal(atomic_load(&f.refs), 1);
  assert_int_equal(atomic_load(&p->base.refs), 1); /* the pool "x" was not taken */
  m->vt->unref(m);
  m = sip__registry_find_model(&t->e, "y", NULL, &e);
  assert_ptr_equal(m, &g.base);
  m->vt->unref(m);
  /* Plain pool lookups and listings skip other models. */
  sip__pool_t *q = sip__registry_find(&t->e, "x", NULL, &e);
  assert_ptr_equal(q, p);
  sip__pool_unref(q);
  assert_null(sip__registry_find(&t->e, "x", "7", &e));
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_string_equal(sip_error_message(e),
                      "Request for unknown model: 'x' version 7 is not found; it serves an "
                      "unversioned model");
  sip_error_free(e);
  assert_null(sip__registry_find(&t->e, "y", NULL, &e));
  assert_string_equal(sip_error_message(e), "Request for unknown model: 'y' is not found");
  sip_error_free(e);
  assert_false(sip__registry_has(&t->e, "y"));
  size_t n = 0;
  sip__pool_t **v = sip__registry_snapshot(&t->e, 0, &n);
  assert_int_equal(n, 1);
  assert_ptr_equal(v[0], p);
  sip__registry_release(v, n);
  assert_int_equal(sip__registry_pool_count(&t->e), 1);
  /* Unlisted: gone from lookups. */
  sip__registry_remove_model(&t->e, &f.base);
  sip__registry_remove_model(&t->e, &g.base);
  assert_false(sip__registry_is_named(&t->e, "x"));
  assert_int_equal(atomic_load(&f.refs), 0);
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
  assert_true(atomic_load(&p->base.retired));
  sip_error_t *e = NULL;
  assert_null(sip__registry_find_model(&t->e, "r", NULL, &e));
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "Request for unknown model: 'r' is not found"));
  sip_error_free(e);
  assert_false(sip__registry_has(&t->e, "r"));
  assert_true(atomic_load(&p->base.refs) >= 2);
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
  assert_int_equal(sip__registry_pool_count(&t->e), 0);
  rec_destroy(&o.rec);
  eng_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_versions),
      cmocka_unit_test(test_registry_named_first),
      cmocka_unit_test(test_retired_pool_lives_until_last_ref),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
