/* Unit tests for the ONNX Runtime backend's threading
 * (src/backend/onnxruntime.c): sessions of one model running concurrently
 * on the shared OrtSession, and no threads started per model or session.
 *
 * The group setup makes the test models with python3-onnx (ort_helpers.h);
 * without /usr/bin/python3 + onnx every test is skipped. */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ort_helpers.h"

/* Sessions of one model run concurrently on the shared OrtSession. */
struct worker {
  void *model;
  int id;
  int failures;
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  void *s = NULL;
  sip_error_t *err = B.session_new(w->model, &s);
  if (err) {
    sip_error_free(err);
    w->failures++;
    return NULL;
  }
  const int64_t dims[2] = {4, 3};
  float a[12], b[12];
  const char *names[1] = {"c"};
  for (int it = 0; it < 200; it++) {
    for (int i = 0; i < 12; i++) a[i] = (float)(w->id * 1000 + it), b[i] = (float)i;
    sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, a, sizeof a);
    sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 2, dims, b, sizeof b);
    const sip_tensor_t *ins[2] = {&ta, &tb};
    sip_tensor_t *o = NULL;
    err = B.execute(s, ins, 2, names, 1, &o);
    if (err) {
      sip_error_free(err);
      w->failures++;
      continue;
    }
    const float *c = o->data;
    for (int i = 0; i < 12; i++)
      if (c[i] != a[i] + b[i]) w->failures++;
    sip_tensor_free(o);
  }
  B.session_free(s);
  return NULL;
}

static void test_concurrent_sessions(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.onnx");
  enum { NW = 4 };
  pthread_t th[NW];
  struct worker w[NW];
  for (int i = 0; i < NW; i++) {
    w[i] = (struct worker){m, i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < NW; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(w[i].failures, 0);
  }
  B.model_free(m);
}

static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* Models and sessions use the env's global pool: loading more of them must
 * not start threads (per-session pools would add intra_op_threads - 1 each). */
static void test_no_per_session_threads(void **state) {
  (void)state;
  NEED_MODELS();
  int before = count_threads();
  if (before < 0) skip();
  void *m[3], *s[3];
  for (int i = 0; i < 3; i++) {
    m[i] = must_load(i == 1 ? "types.onnx" : "add.onnx");
    s[i] = must_session(m[i]);
  }
  assert_int_equal(count_threads(), before);
  for (int i = 0; i < 3; i++) {
    B.session_free(s[i]);
    B.model_free(m[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_concurrent_sessions),
      cmocka_unit_test(test_no_per_session_threads),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
