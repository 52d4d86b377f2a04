/* sip — the builtin test backend: identity from input "input" to output
 * "output", with a configurable delay and injected failures, so scheduler
 * behaviour can be tested deterministically without a real model.
 *
 * backend_options: dtype (default float32), shape ("-1,4"; default "-1":
 * any 1-d), delay_ms (default 0), fail_every (N: every Nth execution of the
 * model fails with INTERNAL; default 0 = never), record_file (a path: each
 * execution that succeeds appends its float32 input's values as one line,
 * so tests can count what ran across restarts of the server), session_memory_mb
 * (MiB each session allocates and writes, so a session's measured memory is
 * known to tests of memory caps; default 0). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "sip/backend.h"

typedef struct model {
  sip_io_desc_t in, out;
  long delay_ms;
  long fail_every;
  long session_mb; /* memory each session holds (touched), for tests of memory caps */
  atomic_long runs;
  int record_fd; /* record_file, O_APPEND; -1: none */
} model_t;

/* Sleeps ms milliseconds (0: not at all), through signals. */
static void sleep_ms(long ms) {
  struct timespec ts = {(time_t)(ms / 1000), (ms % 1000) * 1000000L};
  while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static sip_error_t *parse_long(const char *key, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < lo || n > hi)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "builtin backend option %s: '%s'; expected an integer %ld..%ld", key, v,
                         lo, hi);
  *out = n;
  return NULL;
}

static sip_error_t *parse_shape(const char *v, sip_io_desc_t *d) {
  d->rank = 0;
  const char *p = v;
  while (*p == ' ' || *p == '[') p++;
  while (*p && *p != ']') {
    char *end;
    errno = 0;
    long long n = strtoll(p, &end, 10);
    if (end == p || errno || n < -1 || d->rank == SIP_MAX_RANK)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "builtin backend option shape: '%s'; expected comma-separated dims "
                           "(-1 for dynamic), at most %d",
                           v, SIP_MAX_RANK);
    d->dims[d->rank++] = n;
    p = end;
    while (*p == ' ' || *p == ',') p++;
  }
  return NULL;
}

static sip_error_t *load(void *state, const char *path, const sip_kv_t *opts, size_t n_opts,
                         void **out) {
  (void)state;
  (void)path;
  model_t *m = sip__calloc(1, sizeof *m);
  if (!m) return SIP__OOM();
  m->in.dtype = SIP_DTYPE_FLOAT32;
  m->in.rank = 1;
  m->in.dims[0] = -1;
  m->record_fd = -1;
  sip_error_t *e = NULL;
  long load_delay_ms = 0;
  for (size_t i = 0; i < n_opts && !e; i++) {
    const char *k = opts[i].key, *v = opts[i].value;
    if (strcmp(k, "delay_ms") == 0)
      e = parse_long(k, v, 0, 3600000, &m->delay_ms);
    else if (strcmp(k, "load_delay_ms") == 0) /* a slow load, for tests of LOADING */
      e = parse_long(k, v, 0, 3600000, &load_delay_ms);
    else if (strcmp(k, "fail_every") == 0)
      e = parse_long(k, v, 0, 1000000000, &m->fail_every);
    else if (strcmp(k, "session_memory_mb") == 0)
      e = parse_long(k, v, 0, 4096, &m->session_mb);
    else if (strcmp(k, "dtype") == 0) {
      m->in.dtype = sip_dtype_from_name(v);
      if (m->in.dtype == SIP_DTYPE_INVALID)
        e = sip_error_new(SIP_INVALID_ARGUMENT,
                          "builtin backend option dtype: '%s'; expected a numpy dtype name such "
                          "as float32, int64, string",
                          v);
    } else if (strcmp(k, "shape") == 0) {
      e = parse_shape(v, &m->in);
    } else if (strcmp(k, "record_file") == 0) {
      if (m->record_fd >= 0) close(m->record_fd);
      m->record_fd = open(v, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (m->record_fd < 0)
        e = sip_error_new(SIP_INVALID_ARGUMENT, "builtin backend option record_file: cannot "
                          "open '%s': %s; expected a writable file path", v, strerror(errno));
    } else
      e = sip_error_new(SIP_INVALID_ARGUMENT,
                        "builtin backend has no option '%s'; expected one of: dtype, shape, "
                        "delay_ms, fail_every, load_delay_ms, record_file, session_memory_mb",
                        k);
  }
  if (!e) sleep_ms(load_delay_ms);
  m->out = m->in;
  m->in.name = sip__strdup("input");
  m->out.name = sip__strdup("output");
  if (!e && (!m->in.name || !m->out.name)) e = SIP__OOM();
  if (e) {
    if (m->record_fd >= 0) close(m->record_fd);
    sip__free(m->in.name);
    sip__free(m->out.name);
    sip__free(m);
    return e;
  }
  *out = m;
  return NULL;
}

static void describe(void *model, const sip_io_desc_t **in, size_t *n_in,
                     const sip_io_desc_t **out, size_t *n_out) {
  model_t *m = model;
  *in = &m->in;
  *n_in = 1;
  *out = &m->out;
  *n_out = 1;
}

/* A session: the model, and what session_memory_mb makes it hold. */
typedef struct session {
  model_t *m;
  char *held;
} session_t;

static sip_error_t *session_new(void *model, void **session) {
  model_t *m = model;
  session_t *s = sip__calloc(1, sizeof *s);
  if (!s) return SIP__OOM();
  s->m = m;
  if (m->session_mb) {
    size_t n = (size_t)m->session_mb << 20;
    /* Written, so the pages are resident and measured. */
    if (!(s->held = sip__malloc(n))) {
      sip__free(s);
      return SIP__OOM();
    }
    memset(s->held, 1, n);
  }
  *session = s;
  return NULL;
}

/* One line of the input's values; one write, so lines never interleave. */
static void record(int fd, const sip_tensor_t *in) {
  size_t n = in->nbytes / sizeof(float), cap = n * 16 + 2, len = 0;
  char *line = sip__malloc(cap);
  if (!line) return;
  const float *v = in->data;
  for (size_t i = 0; i < n; i++)
    len += (size_t)snprintf(line + len, cap - len, i ? " %g" : "%g", (double)v[i]);
  line[len++] = '\n';
  if (write(fd, line, len) < 0) { /* a test's file: nothing to do but go on */
  }
  sip__free(line);
}

static sip_error_t *execute(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                            const char *const *out_names, size_t n_outputs,
                            sip_tensor_t **outputs) {
  model_t *m = ((session_t *)session)->m;
  (void)out_names;
  sleep_ms(m->delay_ms);
  long run = atomic_fetch_add(&m->runs, 1) + 1;
  if (m->fail_every && run % m->fail_every == 0)
    return sip_error_new(SIP_INTERNAL, "injected failure (builtin fail_every=%ld, run %ld)",
                         m->fail_every, run);
  if (n_inputs != 1 || n_outputs != 1)
    return sip_error_new(SIP_INTERNAL, "builtin identity expects one input and one output");
  const sip_tensor_t *in = inputs[0];
  if (m->record_fd >= 0 && in->dtype == SIP_DTYPE_FLOAT32) record(m->record_fd, in);
  /* A view sharing the input's buffer when it has one: identity costs no copy. */
  outputs[0] = in->owner ? sip_tensor_new_view("output", in->dtype, in->rank, in->dims, in->data,
                                               in->nbytes, in->owner)
                         : sip_tensor_new_copy("output", in->dtype, in->rank, in->dims, in->data,
                                               in->nbytes);
  return outputs[0] ? NULL : SIP__OOM();
}

static void session_free(void *session) {
  session_t *s = session;
  if (!s) return;
  sip__free(s->held);
  sip__free(s);
}

static void model_free(void *model) {
  model_t *m = model;
  if (m->record_fd >= 0) close(m->record_fd);
  sip__free(m->in.name);
  sip__free(m->out.name);
  sip__free(m);
}

static const sip_backend_option_t options[] = {
    {.name = "dtype", .type = SIP_OPTION_STRING, .def = "float32",
     .doc = "The input's (and output's) dtype, a numpy name (float32, int64, string...)."},
    {.name = "shape", .type = SIP_OPTION_STRING, .def = "-1",
     .doc = "The input's dims, comma-separated (-1: dynamic)."},
    {.name = "delay_ms", .type = SIP_OPTION_INT, .def = "0", .min = 0, .max = 3600000,
     .doc = "Milliseconds each execution sleeps."},
    {.name = "load_delay_ms", .type = SIP_OPTION_INT, .def = "0", .min = 0, .max = 3600000,
     .doc = "Milliseconds the load sleeps (a slow load)."},
    {.name = "fail_every", .type = SIP_OPTION_INT, .def = "0", .min = 0, .max = 1000000000,
     .doc = "Every N-th execution fails (0: none)."},
    {.name = "session_memory_mb", .type = SIP_OPTION_INT, .def = "0", .min = 0, .max = 4096,
     .doc = "MiB each session allocates and writes (a session's measured memory, for tests)."},
    {.name = "record_file", .type = SIP_OPTION_STRING,
     .doc = "A file each successful execution appends its float32 input's values to, one line each."},
};

const sip_backend_vtable_t sip__backend_builtin = {
    .name = "builtin",
    .load = load,
    .describe = describe,
    .session_new = session_new,
    .execute = execute,
    .session_free = session_free,
    .model_free = model_free,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
};
