/* Helpers of the unit tests that run in-process servers. The completion
 * recorder (test_scheduler.c, test_batching_*.c): on_done() is the sip_infer_done_fn
 * that records each answer (code, message, timings, the first output's
 * name, shape and float32 values) in completion order; submit() and
 * EXPECT_REJECT() send requests to it; new_server_ex() and status()
 * make and read in-process servers. Include after cmocka.h. */
#ifndef SIP_TEST_INPROC_H
#define SIP_TEST_INPROC_H

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "sip/sip.h"

#define MAXR 64
#define MAXV 64

typedef struct entry {
  uint64_t id;
  sip_code_t code; /* SIP_CODE_COUNT_: the callback got no response */
  uint64_t t_us;   /* sip__now_us() at completion */
  uint64_t queue_us, compute_us;
  char msg[512];
  size_t n_outputs;
  char out_name[32];
  int rank;
  int64_t dims[2];
  float v[MAXV]; /* the first output's values (float32) */
  size_t nv;
} entry_t;

typedef struct rec {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;
  entry_t e[MAXR];
} rec_t;

static inline void rec_init(rec_t *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
}

static inline void rec_destroy(rec_t *r) {
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
}

static inline void on_done(sip_response_t *resp, void *user) {
  rec_t *r = user;
  uint64_t now = sip__now_us();
  pthread_mutex_lock(&r->mu);
  if (r->n < MAXR) {
    entry_t *e = &r->e[r->n];
    memset(e, 0, sizeof *e);
    if (resp) {
      e->id = sip_response_request_id(resp);
      e->code = sip_response_code(resp);
      snprintf(e->msg, sizeof e->msg, "%s", sip_response_message(resp));
      sip_response_timings(resp, &e->queue_us, &e->compute_us, NULL);
      e->n_outputs = sip_response_output_count(resp);
      const sip_tensor_t *t = sip_response_output(resp, 0);
      if (t) {
        snprintf(e->out_name, sizeof e->out_name, "%s", t->name);
        e->rank = t->rank;
        for (int i = 0; i < t->rank && i < 2; i++) e->dims[i] = t->dims[i];
        if (t->dtype == SIP_DTYPE_FLOAT32) {
          e->nv = t->nbytes / sizeof(float);
          memcpy(e->v, t->data, (e->nv < MAXV ? e->nv : MAXV) * sizeof(float));
        }
      }
    } else {
      e->code = SIP_CODE_COUNT_;
    }
    e->t_us = now;
  }
  r->n++;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  sip_response_free(resp);
}

/* Waits until n completions are recorded; returns the count seen. */
static inline int rec_wait(rec_t *r, int n, int timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&r->mu);
  while (r->n < n)
    if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT) break;
  int got = r->n;
  pthread_mutex_unlock(&r->mu);
  return got;
}

static inline int rec_count(rec_t *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}

/* Submits r with on_done recording into rec; fails the test on an error. */
/* A request for `pool` with input "input" = [id, id + 0.5] (float32 [2]). */
static inline sip_request_t *make_req(const char *pool, uint64_t id, int prio, uint32_t timeout_ms) {
  sip_request_t *r = sip_request_new(pool);
  assert_non_null(r);
  sip_request_set_id(r, id);
  assert_null(sip_request_set_priority(r, prio));
  sip_request_set_timeout_ms(r, timeout_ms);
  float v[2] = {(float)id, (float)id + 0.5f};
  int64_t d[1] = {2};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, d, v,
                                                           sizeof v)));
  return r;
}

static inline void submit(sip_server_t *s, sip_request_t *r, rec_t *rec) {
  sip_error_t *e = sip_server_infer_async(s, r, on_done, rec);
  if (e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %s", sip_code_name(sip_error_code(e)), sip_error_message(e));
    sip_error_free(e);
    fail_msg("sip_server_infer_async: %s", msg);
  }
}

/* Expects an admission error with `code` whose message has every substring. */
static inline void expect_reject(sip_server_t *s, sip_request_t *r, rec_t *rec, sip_code_t code, ...) {
  sip_error_t *e = sip_server_infer_async(s, r, on_done, rec);
  if (!e) fail_msg("expected %s, the request was accepted", sip_code_name(code));
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t got = sip_error_code(e);
  sip_error_free(e);
  if (got != code) fail_msg("code %s, want %s: %s", sip_code_name(got), sip_code_name(code), msg);
  va_list ap;
  va_start(ap, code);
  for (const char *sub; (sub = va_arg(ap, const char *));)
    if (!strstr(msg, sub)) fail_msg("message lacks \"%s\": %s", sub, msg);
  va_end(ap);
}
#define EXPECT_REJECT(s, r, rec, code, ...) expect_reject(s, r, rec, code, __VA_ARGS__, NULL)

/* The status JSON (kind 3), parsed; the caller json_decref()s it. */
static inline json_t *status(sip_server_t *s) {
  char *txt = sip_server_info_json(s, SIP_INFO_STATUS);
  assert_non_null(txt);
  json_error_t err;
  json_t *root = json_loads(txt, 0, &err);
  sip_free(txt);
  if (!root) fail_msg("status JSON does not parse: %s", err.text);
  return root;
}

/* Borrowed from root. */
static inline json_t *pool_status(json_t *root, const char *name) {
  json_t *pools = json_object_get(root, "pools");
  for (size_t i = 0; i < json_array_size(pools); i++) {
    json_t *p = json_array_get(pools, i);
    if (strcmp(json_string_value(json_object_get(p, "name")), name) == 0) return p;
  }
  fail_msg("no pool '%s' in the status", name);
  return NULL;
}

static inline json_int_t jint(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? json_integer_value(v) : 0; /* absent counters are 0 */
}

/* An in-process server (no endpoints) from a whole config's text, loaded
 * and ready; fails the test when it cannot start. */
static inline sip_server_t *new_server_yaml(const char *yaml) {
  sip_server_options_t *o = sip_server_options_new();
  assert_non_null(o);
  assert_null(sip_server_options_set_config_string(o, yaml, NULL));
  sip_server_options_set_listen(o, 0);
  sip_server_options_set_wait_for_load(o, 1);
  sip_server_t *s = NULL;
  sip_error_t *e = sip_server_new(o, &s);
  sip_server_options_free(o);
  if (e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("sip_server_new: %s\n--- yaml:\n%s", msg, yaml);
  }
  /* Loaded: every pool READY or FAILED (a test's broken pool keeps a
   * strictly ready server unready, server.strict_readiness). */
  char *txt = sip_server_info_json(s, SIP_INFO_READY);
  assert_non_null(txt);
  json_t *doc = json_loads(txt, 0, NULL);
  sip_free(txt);
  assert_true(json_is_false(json_object_get(doc, "loading")));
  json_decref(doc);
  return s;
}

/* The same with `server_yaml` appended to the server map
 * (", execution_slots: 1") and these pools. */
static inline sip_server_t *new_server_ex(const char *server_yaml, const char *pools_yaml) {
  char yaml[8192];
  snprintf(yaml, sizeof yaml, "server: {log_level: error%s}\nsession_pools:\n%s", server_yaml,
           pools_yaml);
  return new_server_yaml(yaml);
}

/* A test that cannot run here (no python3-onnx to make its models): a skip,
 * but a failure in CI (CI set, not "0" or "false"): there every test must
 * run, and scripts/deps.sh installs what they need. */
#define SKIP_UNLESS_CI(why)                                                              \
  do {                                                                                   \
    const char *ci_ = getenv("CI");                                                      \
    if (ci_ && *ci_ && strcmp(ci_, "0") && strcmp(ci_, "false"))                         \
      fail_msg("%s: with CI set every test must run (scripts/deps.sh installs it)", why); \
    skip();                                                                              \
  } while (0)

/* Runs Python script `py` (python3-onnx) with a new temporary directory
 * /tmp/<prefix>_XXXXXX (written to dir, 64 bytes) as its argument, to
 * generate models there. 1: made; 0: no python3 + onnx (tests skip);
 * -1: it failed. */
static inline int gen_models(char *dir, const char *prefix, const char *py) {
  if (system("/usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") != 0) return 0;
  snprintf(dir, 64, "/tmp/%s_XXXXXX", prefix);
  if (!mkdtemp(dir)) return -1;
  char script[128], cmd[512];
  snprintf(script, sizeof script, "%s/gen.py", dir);
  FILE *f = fopen(script, "w");
  if (!f) return -1;
  fputs(py, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "model generation failed\n");
    return -1;
  }
  return 1;
}

/* Removes directory d and the files in it (one level: generated models). */
static inline void rm_tree(const char *d) {
  DIR *dp = opendir(d);
  if (!dp) return;
  struct dirent *e;
  while ((e = readdir(dp))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", d, e->d_name);
    unlink(p);
  }
  closedir(dp);
  rmdir(d);
}

#endif
