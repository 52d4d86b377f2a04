/* Engine events (src/session/observe/events.c, src/server/observe/events.c): the bounded
 * ring (order kept, overflow dropped and counted, close wakes a reader),
 * the JSON form, and the bus through the in-process API with builtin
 * pools: per-pool filtering, the order of a request's events, ERROR for a
 * failed execution, and that nothing arrives after unsubscribing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "inproc.h"
#include "sip/sip.h"

static sip_event_t ev_n(int i) {
  sip_event_t ev = {.type = SIP_EVENT_INFERENCE_COMPLETE, .request_id = (uint64_t)i};
  snprintf(ev.pool, sizeof ev.pool, "p");
  return ev;
}

static void test_ring_order_and_drops(void **state) {
  (void)state;
  sip_event_ring_t *r = sip_event_ring_new(4);
  assert_non_null(r);
  int kept = 0;
  for (int i = 0; i < 10; i++) {
    sip_event_t ev = ev_n(i);
    kept += sip_event_ring_push(r, &ev);
  }
  assert_int_equal(kept, 4);
  assert_int_equal(sip_event_ring_dropped_total(r), 6);
  sip_event_t ev;
  uint64_t dropped;
  for (int i = 0; i < 4; i++) {
    assert_int_equal(sip_event_ring_pop(r, &ev, &dropped, 0), 1);
    assert_int_equal(ev.request_id, (uint64_t)i); /* oldest first: the newest were dropped */
    assert_int_equal(dropped, i == 0 ? 6 : 0);   /* told once */
  }
  assert_int_equal(sip_event_ring_pop(r, &ev, &dropped, 0), 0);
  assert_int_equal(sip_event_ring_pop(r, &ev, &dropped, 20), 0); /* times out */
  /* Room again: kept, in order, across the wrap. */
  for (int i = 10; i < 13; i++) {
    sip_event_t e2 = ev_n(i);
    assert_int_equal(sip_event_ring_push(r, &e2), 1);
  }
  for (int i = 10; i < 13; i++) {
    assert_int_equal(sip_event_ring_pop(r, &ev, &dropped, 0), 1);
    assert_int_equal(ev.request_id, (uint64_t)i);
    assert_int_equal(dropped, 0);
  }
  sip_event_ring_free(r);
  sip_event_ring_free(NULL);
}

static void *close_later(void *r) {
  /* Not synchronisation: a pause so that the reader is likely blocked in
   * pop when the ring closes (a ring closed first answers 0 just the same). */
  usleep(50 * 1000);
  sip_event_ring_close(r);
  return NULL;
}

static void test_ring_close_wakes_reader(void **state) {
  (void)state;
  sip_event_ring_t *r = sip_event_ring_new(0);
  assert_non_null(r);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, close_later, r), 0);
  sip_event_t ev;
  uint64_t dropped;
  assert_int_equal(sip_event_ring_pop(r, &ev, &dropped, -1), 0); /* returns once closed */
  pthread_join(t, NULL);
  sip_event_t e2 = ev_n(1);
  assert_int_equal(sip_event_ring_push(r, &e2), 0); /* closed: dropped */
  sip_event_ring_free(r);
}

static void test_event_json(void **state) {
  (void)state;
  sip_event_t ev = {.type = SIP_EVENT_STATE_CHANGE};
  snprintf(ev.pool, sizeof ev.pool, "img");
  snprintf(ev.session, sizeof ev.session, "img/0");
  snprintf(ev.old_state, sizeof ev.old_state, "READY");
  snprintf(ev.new_state, sizeof ev.new_state, "RUNNING");
  snprintf(ev.text, sizeof ev.text, "execution started");
  char *txt = sip_event_json(&ev, 3);
  assert_non_null(txt);
  json_t *o = json_loads(txt, 0, NULL);
  sip_free(txt);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(o, "event")), "STATE_CHANGE");
  assert_string_equal(json_string_value(json_object_get(o, "session")), "img/0");
  assert_string_equal(json_string_value(json_object_get(o, "old_state")), "READY");
  assert_string_equal(json_string_value(json_object_get(o, "new_state")), "RUNNING");
  assert_int_equal(json_integer_value(json_object_get(o, "dropped")), 3);
  json_decref(o);
  ev.type = SIP_EVENT_ERROR;
  ev.code = SIP_INTERNAL;
  ev.request_id = 42;
  txt = sip_event_json(&ev, 0);
  o = json_loads(txt, 0, NULL);
  sip_free(txt);
  assert_string_equal(json_string_value(json_object_get(o, "code")), "INTERNAL");
  assert_int_equal(json_integer_value(json_object_get(o, "request_id")), 42);
  assert_null(json_object_get(o, "old_state"));
  json_decref(o);
  assert_string_equal(sip_event_type_name((sip_event_type_t)99), "UNKNOWN");
}

/* ---- the bus, through a server ---- */

#define MAXE 256
typedef struct seen {
  pthread_mutex_t mu;
  int n;
  sip_event_t ev[MAXE];
} seen_t;

static void record(const sip_event_t *ev, void *user) {
  seen_t *s = user;
  pthread_mutex_lock(&s->mu);
  if (s->n < MAXE) s->ev[s->n] = *ev;
  s->n++;
  pthread_mutex_unlock(&s->mu);
}

static int seen_count(seen_t *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->n;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static void test_bus_through_server(void **state) {
  (void)state;
  sip_server_t *s = new_server_ex("", "  - {name: a, backend: builtin, pool_size: 1}\n"
                                      "  - {name: b, backend: builtin, pool_size: 1}\n"
                                      "  - {name: f, backend: builtin, pool_size: 1, "
                                      "backend_options: {fail_every: 1}}\n");
  seen_t sa = {.mu = PTHREAD_MUTEX_INITIALIZER}, sall = {.mu = PTHREAD_MUTEX_INITIALIZER};
  sip_event_sub_t *sub_a = NULL, *sub_all = NULL;
  assert_null(sip_server_subscribe_events(s, "a", record, &sa, &sub_a));
  assert_null(sip_server_subscribe_events(s, NULL, record, &sall, &sub_all));
  sip_event_sub_t *bad = NULL;
  sip_error_t *e = sip_server_subscribe_events(s, "a", NULL, NULL, &bad);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  assert_null(bad);

  rec_t rec;
  rec_init(&rec);
  for (uint64_t id = 1; id <= 3; id++) {
    submit(s, make_req("a", id, 0, 0), &rec);
    assert_true(rec_wait(&rec, (int)id, 5000));
  }
  submit(s, make_req("b", 7, 0, 0), &rec);
  submit(s, make_req("f", 9, 0, 0), &rec);
  assert_true(rec_wait(&rec, 5, 5000));

  /* Pool a: per request READY->RUNNING, RUNNING->READY, then its completion. */
  assert_int_equal(seen_count(&sa), 9);
  for (int i = 0; i < 3; i++) {
    const sip_event_t *ev = &sa.ev[3 * i];
    assert_int_equal(ev[0].type, SIP_EVENT_STATE_CHANGE);
    assert_string_equal(ev[0].old_state, "READY");
    assert_string_equal(ev[0].new_state, "RUNNING");
    assert_string_equal(ev[0].session, "a/0");
    assert_int_equal(ev[1].type, SIP_EVENT_STATE_CHANGE);
    assert_string_equal(ev[1].old_state, "RUNNING");
    assert_string_equal(ev[1].new_state, "READY");
    assert_int_equal(ev[2].type, SIP_EVENT_INFERENCE_COMPLETE);
    assert_int_equal(ev[2].request_id, (uint64_t)i + 1);
    assert_int_equal(ev[2].batch_size, 1);
    assert_string_equal(ev[2].session, "a/0");
    assert_true(ev[2].latency_ms >= ev[2].queue_ms && ev[2].queue_ms >= 0);
  }
  /* Everything: a's 9, b's 3, and f's failure as ERROR. */
  assert_int_equal(seen_count(&sall), 15);
  int errors = 0, of_b = 0;
  for (int i = 0; i < 15; i++) {
    of_b += !strcmp(sall.ev[i].pool, "b");
    if (sall.ev[i].type != SIP_EVENT_ERROR) continue;
    errors++;
    assert_string_equal(sall.ev[i].pool, "f");
    assert_int_equal(sall.ev[i].request_id, 9);
    assert_int_equal(sall.ev[i].code, SIP_INTERNAL);
    assert_non_null(strstr(sall.ev[i].text, "f"));
  }
  assert_int_equal(errors, 1);
  assert_int_equal(of_b, 3);

  /* After unsubscribing nothing more arrives. */
  sip_server_unsubscribe_events(s, sub_a);
  submit(s, make_req("a", 11, 0, 0), &rec);
  assert_true(rec_wait(&rec, 6, 5000));
  assert_int_equal(seen_count(&sa), 9);
  assert_int_equal(seen_count(&sall), 18);
  sip_server_unsubscribe_events(s, sub_all);
  sip_server_unsubscribe_events(s, NULL);
  sip_server_free(s);
  rec_destroy(&rec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_order_and_drops),
      cmocka_unit_test(test_ring_close_wakes_reader),
      cmocka_unit_test(test_event_json),
      cmocka_unit_test(test_bus_through_server),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
