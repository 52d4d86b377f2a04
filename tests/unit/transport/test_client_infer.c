/* libsipclient against an in-process server listening on a temporary unix
 * socket and an ephemeral TCP port: sync and async infer, pipelining,
 * error codes, deadlines, introspection, batches, sequences, trace
 * context, and tensors in shared memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client_helpers.h"

static void sync_on(const char *ep) {
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(ep, &c));
  sip_tensor_t *t = vec3(1.5f, 4);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .request_id = 77};
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_infer(c, &req, &r);
  assert_null(e);
  assert_int_equal(r->request_id, 77);
  assert_true(r->latency_ms > 0);
  assert_true(r->total_us >= r->compute_us);
  check_echo(r, 1.5f, 4);
  sip_client_response_free(r);
  sip_tensor_free(t);
  sip_client_free(c);
}

static void test_sync_unix(void **state) {
  (void)state;
  sync_on(unix_ep);
}

static void test_sync_tcp(void **state) {
  sip_server_t *srv = *state;
  const char *tcp = sip_server_endpoint(srv, 1);
  assert_non_null(strstr(tcp, "tcp://127.0.0.1:"));
  sync_on(tcp);
}

typedef struct collect {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, ok, failed;
  uint64_t order[64];
} collect_t;

static void on_done(sip_client_response_t *r, sip_error_t *e, void *user) {
  collect_t *c = user;
  pthread_mutex_lock(&c->mu);
  if (r) {
    /* Each request i carried base i*100; check its own data came back. */
    const sip_tensor_t *t = sip_client_response_output(r, "output");
    const float *f = t->data;
    if (f[0] == (float)(r->request_id * 100)) c->ok++;
    c->order[c->done] = r->request_id;
  } else {
    c->failed++;
  }
  c->done++;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  sip_client_response_free(r);
  sip_error_free(e);
}

static void collect_init(collect_t *col) {
  memset(col, 0, sizeof *col);
  pthread_mutex_init(&col->mu, NULL);
  pthread_cond_init(&col->cv, NULL);
}

/* Waits (30 s at most) for n answers, then frees the client and the
 * collector. */
static void collect_finish(collect_t *col, int n, sip_client_t *c) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&col->mu);
  int rc = 0;
  while (col->done < n && rc == 0) rc = pthread_cond_timedwait(&col->cv, &col->mu, &until);
  int done = col->done;
  pthread_mutex_unlock(&col->mu);
  assert_int_equal(done, n);
  sip_client_free(c);
  pthread_mutex_destroy(&col->mu);
  pthread_cond_destroy(&col->cv);
}

static void test_async_pipelined(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  collect_t col;
  collect_init(&col);
  enum { N = 50 };
  for (uint64_t i = 1; i <= N; i++) {
    sip_tensor_t *t = vec3((float)(i * 100), 2);
    const sip_tensor_t *in[] = {t};
    sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .request_id = i};
    assert_null(sip_client_infer_async(c, &req, on_done, &col));
    sip_tensor_free(t); /* the request was encoded: inputs are not needed any more */
  }
  collect_finish(&col, N, c);
  assert_int_equal(col.ok, N);
  assert_int_equal(col.failed, 0);
}

static void test_errors(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(0, 1);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "nope", .inputs = in, .n_inputs = 1};
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_infer(c, &req, &r);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "nope"));
  sip_error_free(e);

  int64_t dims[1] = {3};
  float v[3] = {0};
  sip_tensor_t *bad = sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, dims, v, sizeof v);
  const sip_tensor_t *in2[] = {bad};
  req.pool = "echo";
  req.inputs = in2;
  e = sip_client_infer(c, &req, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "[3]"));
  assert_non_null(strstr(sip_error_message(e), "[-1,3]"));
  sip_error_free(e);

  /* The connection survived both errors. */
  req.inputs = in;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  sip_tensor_free(bad);
  sip_tensor_free(t);
  sip_client_free(c);
}

static void test_deadline(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  int64_t dims[1] = {1};
  float v = 1;
  sip_tensor_t *t = sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, dims, &v, sizeof v);
  const sip_tensor_t *in[] = {t};
  collect_t col;
  collect_init(&col);
  sip_client_request_t busy = {.pool = "slow", .inputs = in, .n_inputs = 1, .request_id = 0};
  assert_null(sip_client_infer_async(c, &busy, on_done, &col));
  sip_client_request_t late = {.pool = "slow", .inputs = in, .n_inputs = 1, .timeout_ms = 20};
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_infer(c, &late, &r);
  assert_int_equal(sip_error_code(e), SIP_DEADLINE_EXCEEDED);
  sip_error_free(e);
  collect_finish(&col, 1, c);
  sip_tensor_free(t);
}

static void test_info(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  char *json = NULL;
  assert_null(sip_client_info(c, 1, &json));
  assert_non_null(strstr(json, "\"ready\":true"));
  sip_client_free_string(json);
  assert_null(sip_client_info(c, 2, &json));
  assert_non_null(strstr(json, "\"name\":\"echo\""));
  assert_non_null(strstr(json, "\"shape\":[-1,3]"));
  sip_client_free_string(json);
  assert_null(sip_client_info(c, 3, &json));
  assert_non_null(strstr(json, "\"sessions\""));
  sip_client_free_string(json);
  sip_error_t *e = sip_client_info(c, 9, &json);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  sip_client_free(c);
}

/* A client-side batch of 7 rows in chunks of 3: the answer has the 7 rows
 * in order, the padding of the last chunk removed. */
static void test_batch_infer(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(10.0f, 7);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1};
  for (int padding = 0; padding <= 2; padding++) {
    sip_client_response_t *r = NULL;
    sip_error_t *e = sip_client_batch_infer(c, &req, 3, padding, &r);
    assert_null(e);
    check_echo(r, 10.0f, 7);
    sip_client_response_free(r);
  }
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_batch_infer(c, &req, 3, 7, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  req.pool = "nope";
  e = sip_client_batch_infer(c, &req, 3, 1, &r);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  sip_error_free(e);
  sip_tensor_free(t);
  sip_client_free(c);
}

/* Sequence ids travel in the request's parameters (numbers and strings,
 * with pipeline_config alongside). */
static void test_sequence(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(2, 1);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "seq", .inputs = in, .n_inputs = 1};
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_infer(c, &req, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "needs a sequence id"));
  sip_error_free(e);
  req.sequence_start = 1;
  e = sip_client_infer(c, &req, &r); /* refused before sending */
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);

  req.sequence_id = 31;
  req.pipeline_config = "{}"; /* ignored by pools, sent alongside */
  assert_null(sip_client_infer(c, &req, &r));
  check_echo(r, 2, 1);
  sip_client_response_free(r);
  req.sequence_start = 0;
  req.sequence_end = 1;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  e = sip_client_infer(c, &req, &r); /* it ended */
  assert_int_equal(sip_error_code(e), SIP_FAILED_PRECONDITION);
  assert_non_null(strstr(sip_error_message(e), "sequence 31 is not active"));
  sip_error_free(e);

  req.sequence_id_str = "say \"hi\"";
  e = sip_client_infer(c, &req, &r);
  assert_int_equal(sip_error_code(e), SIP_FAILED_PRECONDITION);
  assert_non_null(strstr(sip_error_message(e), "sequence 'say \"hi\"' is not active"));
  sip_error_free(e);
  req.sequence_start = 1;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  sip_tensor_free(t);
  sip_client_free(c);
}

/* The W3C trace context travels in the request's parameters: the server
 * takes a valid traceparent (with tracestate, and beside other parameters)
 * and ignores an invalid one; neither is an error. */
static void test_traceparent(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(4, 2);
  const sip_tensor_t *in[] = {t};
  static const char *const tps[] = {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                                    "not a traceparent"};
  for (size_t i = 0; i < 3; i++) {
    sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1,
                                .traceparent = tps[i], .tracestate = i ? NULL : "rojo=1",
                                .pipeline_config = i == 2 ? "{}" : NULL};
    sip_client_response_t *r = NULL;
    sip_error_t *e = sip_client_infer(c, &req, &r);
    if (e) fail_msg("traceparent '%s': %s", tps[i], sip_error_message(e));
    check_echo(r, 4, 2);
    sip_client_response_free(r);
  }
  /* A tracestate without a traceparent is not sent; a traceparent that is
   * not UTF-8 is refused before sending. */
  sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .tracestate = "x=1"};
  sip_client_response_t *r = NULL;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  req.traceparent = "\xff\xfe";
  sip_error_t *e = sip_client_infer(c, &req, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "traceparent is not valid UTF-8"));
  sip_error_free(e);
  sip_tensor_free(t);
  sip_client_free(c);
}

/* Shared memory: the input read from a region by reference, the output
 * written into the same region and viewed there; the response outlives
 * the region's destruction. */
static void test_shared_memory(void **state) {
  sip_server_t *srv = *state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_client_shm_t *r = NULL;
  assert_null(sip_client_shm_create(c, "buf", 4096, &r));
  assert_int_equal(sip_client_shm_size(r), 4096);
  float *base = sip_client_shm_data(r);
  for (int i = 0; i < 12; i++) base[i] = 0.5f + (float)i;
  sip_error_t *e = sip_client_shm_create(c, "buf", 64, &(sip_client_shm_t *){NULL});
  assert_int_equal(sip_error_code(e), SIP_ALREADY_EXISTS);
  sip_error_free(e);

  int64_t dims[2] = {4, 3};
  sip_tensor_t *in = sip_tensor_new_view("input", SIP_DTYPE_FLOAT32, 2, dims, NULL, 48, NULL);
  const sip_tensor_t *ins[] = {in};
  const char *outs[] = {"output"};
  sip_client_shm_ref_t in_ref[] = {{"buf", 0, 48}}, out_ref[] = {{"buf", 1024, 1024}};
  sip_client_request_t req = {.pool = "echo", .inputs = ins, .n_inputs = 1, .outputs = outs,
                              .n_outputs = 1, .input_shm = in_ref, .output_shm = out_ref};
  sip_client_response_t *resp = NULL;
  assert_null(sip_client_infer(c, &req, &resp));
  check_echo(resp, 0.5f, 4);
  const sip_tensor_t *o = sip_client_response_output(resp, "output");
  assert_ptr_equal(o->data, (uint8_t *)base + 1024); /* a view of the region */

  char *json = NULL;
  assert_null(sip_client_shm_status(c, NULL, &json));
  assert_non_null(strstr(json, "\"name\":\"buf\""));
  assert_non_null(strstr(json, "\"byte_size\":4096"));
  sip_client_free_string(json);
  assert_null(sip_client_shm_destroy(c, r));
  check_echo(resp, 0.5f, 4); /* the response keeps the mapping */
  sip_client_response_free(resp);
  assert_null(sip_client_shm_status(c, NULL, &json));
  assert_string_equal(json, "{\"regions\":[]}");
  sip_client_free_string(json);

  /* The region is gone on the server: NOT_FOUND, and the connection stays. */
  e = sip_client_infer(c, &req, &resp);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "no shared memory region named 'buf'"));
  sip_error_free(e);
  /* Batches do not take shared memory. */
  e = sip_client_batch_infer(c, &req, 0, 0, &resp);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  sip_tensor_free(in);
  /* A region left registered is released with the client. */
  assert_null(sip_client_shm_create(c, "left", 8192, &r));
  sip_client_free(c);

  /* Over TCP no descriptor can travel. */
  assert_null(sip_client_connect(sip_server_endpoint(srv, 1), &c));
  e = sip_client_shm_create(c, "t", 4096, &r);
  assert_int_equal(sip_error_code(e), SIP_FAILED_PRECONDITION);
  assert_non_null(strstr(sip_error_message(e), "unix socket"));
  sip_error_free(e);
  sip_client_free(c);
}

/* Answers of many sizes back to back on one connection: small ones that
 * arrive several to a read, ones that cross the client's read-ahead buffer
 * and ones read straight into their tensor (1 row to 1.2 MB). Each comes
 * back whole, to its own request. */
/* Around 8 KiB (682 rows) answers go from the buffer to direct reads;
 * around 16 KiB (1365) they fill it. */
static const int64_t size_rows[] = {1, 2, 500, 680, 681, 682, 683, 684, 700,
                                    1365, 1366, 1400, 4000, 100000};
#define N_SIZES (sizeof size_rows / sizeof size_rows[0])

static sip_tensor_t *rows_of(uint64_t id, int64_t rows) {
  size_t n = (size_t)rows * 3;
  float *v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = (float)(id * 1000003 + i);
  int64_t dims[2] = {rows, 3};
  sip_tensor_t *t = sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, dims, v, n * sizeof *v);
  free(v);
  return t;
}

static void on_sized(sip_client_response_t *r, sip_error_t *e, void *user) {
  collect_t *s = user;
  int good = 0;
  if (r && !e) {
    int64_t rows = size_rows[r->request_id % N_SIZES];
    const sip_tensor_t *t = sip_client_response_output(r, "output");
    good = t && t->rank == 2 && t->dims[0] == rows && t->dims[1] == 3;
    const float *f = good ? t->data : NULL;
    for (size_t i = 0; good && i < (size_t)rows * 3; i++)
      good = f[i] == (float)(r->request_id * 1000003 + i);
  }
  pthread_mutex_lock(&s->mu);
  s->ok += good;
  s->done++;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  sip_client_response_free(r);
  sip_error_free(e);
}

static void test_answers_of_every_size(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  collect_t s;
  collect_init(&s);
  enum { N = 4 * N_SIZES };
  for (uint64_t i = 1; i <= N; i++) {
    sip_tensor_t *t = rows_of(i, size_rows[i % N_SIZES]);
    const sip_tensor_t *in[] = {t};
    sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .request_id = i};
    assert_null(sip_client_infer_async(c, &req, on_sized, &s));
    sip_tensor_free(t);
  }
  collect_finish(&s, N, c);
  assert_int_equal(s.ok, N);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sync_unix),
      cmocka_unit_test(test_sync_tcp),
      cmocka_unit_test(test_async_pipelined),
      cmocka_unit_test(test_answers_of_every_size),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_info),
      cmocka_unit_test(test_batch_infer),
      cmocka_unit_test(test_sequence),
      cmocka_unit_test(test_traceparent),
      cmocka_unit_test(test_shared_memory),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
