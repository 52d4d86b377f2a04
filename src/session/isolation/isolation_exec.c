/* sip — process isolation, the server's side: the forwarding backend
 * (isolation.h; the supervisor is isolation.c, the worker worker.c).
 *
 * Each session context of the pool is a channel to a session context in
 * the worker, bound lazily on its first execution after a (re)start, and
 * up to 8 shared-memory regions the answers may hold: an execution copies
 * its inputs into a free region, the worker leaves the outputs there, and
 * the output tensors handed to the engine view the region, which is not
 * reused until the last of them is freed. With all 8 held, a ninth region
 * is used and its outputs are copied out. The hot path takes no lock: a
 * session compares its bound generation with the worker's. */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "session/observe/events.h"
#include "session/isolation/isolation_impl.h"
#include "session/pool_impl.h"

static void describe(void *model, const sip_io_desc_t **in, size_t *n_in,
                     const sip_io_desc_t **out, size_t *n_out) {
  sip__iso_t *w = model;
  *in = w->ins;
  *n_in = w->n_in;
  *out = w->outs;
  *n_out = w->n_out;
}

static const char *batch_problem(void *model) { return ((sip__iso_t *)model)->batch_problem; }

static sip_error_t *session_new(void *model, void **session) {
  sip__iso_t *w = model;
  sip__iso_sess_t *s = sip__calloc(1, sizeof *s);
  if (!s) return SIP__OOM();
  s->w = w;
  s->sock = -1;
  s->id = atomic_fetch_add(&w->next_id, 1);
  *session = s;
  return NULL;
}

static void region_unref(sip__iso_region_t *r) {
  if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
  if (r->base) munmap(r->base, r->size);
  if (r->fd >= 0) close(r->fd);
  sip__free(r);
}

static void region_release(void *ctx) { region_unref(ctx); }

static void session_free(void *session) {
  sip__iso_sess_t *s = session;
  if (!s) return;
  if (s->sock >= 0) close(s->sock);
  for (int i = 0; i < SIP__WK_MAX_REGIONS; i++) region_unref(s->reg[i]);
  sip__free(s);
}

/* Binds `s` to the serving worker, waiting for one when none serves. */
static sip_error_t *bind_session(sip__iso_sess_t *s) {
  sip__iso_t *w = s->w;
  const char *pool = w->p->cfg->name;
  pthread_mutex_lock(&w->mu);
  uint64_t until = sip__now_us() + (uint64_t)WAIT_UP_MS * 1000;
  while (!w->stopping && !w->failed && !atomic_load(&w->gen) && sip__now_us() < until) {
    struct timespec ts;
    uint64_t t = sip__now_us() + 100000;
    ts.tv_sec = (time_t)(t / 1000000);
    ts.tv_nsec = (long)(t % 1000000) * 1000;
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
  sip_error_t *e = NULL;
  uint64_t gen = atomic_load(&w->gen);
  if (w->failed || w->stopping || !gen) {
    e = sip_error_new(SIP_UNAVAILABLE, "no worker of pool '%s' is running: %s", pool,
                      w->failed ? w->fail_why : w->stopping ? "the pool is stopping"
                                                            : w->down_why);
    pthread_mutex_unlock(&w->mu);
    return e;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    pthread_mutex_unlock(&w->mu);
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "pool '%s': no socket for a session: %s", pool,
                         strerror(errno));
  }
  sip__wk_bind_t b = {SIP__WK_BIND, s->id};
  char reply[1024];
  ssize_t n = sip__iso_ctl_call(&w->act, &b, sizeof b, sv[1], reply, sizeof reply, BIND_TIMEOUT_MS, -1);
  int err = errno;
  close(sv[1]);
  if (n < 0 || (size_t)n < sizeof(sip__wk_hdr_t) || ((sip__wk_hdr_t *)reply)->op != SIP__WK_BOUND) {
    close(sv[0]);
    if (n < 0) {
      char why[128];
      snprintf(why, sizeof why, "worker did not answer within %d ms", BIND_TIMEOUT_MS);
      if (err == ETIMEDOUT && atomic_load(&w->gen) == gen) sip__iso_kill_for(w, &w->act, why);
      s->lost = 1;
      e = sip_error_new(SIP_UNAVAILABLE, "the worker of pool '%s' ended while a session was "
                        "being bound", pool);
    } else {
      e = sip_error_new(SIP_INTERNAL, "pool '%s': the worker refused a session: %.*s", pool,
                        (int)((size_t)n > sizeof(sip__wk_error_t) ? (size_t)n - sizeof(sip__wk_error_t) : 0),
                        reply + sizeof(sip__wk_error_t));
    }
    pthread_mutex_unlock(&w->mu);
    return e;
  }
  pthread_mutex_unlock(&w->mu);
  if (s->sock >= 0) close(s->sock);
  s->sock = sv[0];
  s->gen = gen;
  return NULL;
}

/* A region of at least `size` bytes in slot i (free: only the session
 * holds it). */
static sip__iso_region_t *region_get(sip__iso_sess_t *s, int i, size_t size) {
  sip__iso_region_t *r = s->reg[i];
  size_t want = 65536;
  while (want < size) want *= 2;
  if (r && r->size >= size) return r;
  if (!r) {
    r = sip__calloc(1, sizeof *r);
    if (!r) return NULL;
    atomic_init(&r->refs, 1);
    r->fd = memfd_create("sip-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (r->fd < 0 || ftruncate(r->fd, (off_t)want) != 0 ||
        fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
      region_unref(r);
      return NULL;
    }
    s->reg[i] = r;
  } else {
    munmap(r->base, r->size);
    r->base = NULL;
    r->size = 0;
    /* The worker may have grown the file past what is mapped here. */
    struct stat st;
    if (fstat(r->fd, &st) == 0 && (size_t)st.st_size > want) want = (size_t)st.st_size;
    if (ftruncate(r->fd, (off_t)want) != 0) return NULL;
  }
  r->base = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (r->base == MAP_FAILED) {
    r->base = NULL;
    r->size = 0;
    return NULL;
  }
  r->size = want;
  return r;
}

/* Maps `r` again when the worker grew it. */
static int region_follow(sip__iso_region_t *r, uint64_t size) {
  if (size <= r->size) return 0;
  struct stat st;
  if (fstat(r->fd, &st) != 0 || (uint64_t)st.st_size < size) return -1;
  munmap(r->base, r->size);
  r->base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  r->size = r->base == MAP_FAILED ? 0 : (size_t)size;
  if (r->base == MAP_FAILED) r->base = NULL;
  return r->base ? 0 : -1;
}

static int index_of(const sip_io_desc_t *d, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return (int)i;
  return -1;
}

/* The execution failed because the worker ended: waits briefly for the
 * supervisor to say why. */
static sip_error_t *lost(sip__iso_sess_t *s, pid_t pid) {
  sip__iso_t *w = s->w;
  s->lost = 1;
  close(s->sock);
  s->sock = -1;
  pthread_mutex_lock(&w->mu);
  uint64_t until = sip__now_us() + 200000;
  while (atomic_load(&w->gen) == s->gen && !w->stopping && sip__now_us() < until) {
    struct timespec ts;
    uint64_t t = sip__now_us() + 10000;
    ts.tv_sec = (time_t)(t / 1000000);
    ts.tv_nsec = (long)(t % 1000000) * 1000;
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
  sip_error_t *e = sip_error_new(SIP_UNAVAILABLE, "the worker process of pool '%s' (pid %ld) "
                                 "ended during the execution: %s", w->p->cfg->name, (long)pid,
                                 atomic_load(&w->gen) == s->gen ? "no reason known yet"
                                                                : w->down_why);
  pthread_mutex_unlock(&w->mu);
  return e;
}

static sip_error_t *execute(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                            const char *const *out_names, size_t n_outputs,
                            sip_tensor_t **outputs) {
  sip__iso_sess_t *s = session;
  sip__iso_t *w = s->w;
  s->lost = 0;
  int fault = s->fault;
  s->fault = 0;
  sip_error_t *e;
  if (n_inputs > SIP__WK_MAX_IO || n_outputs > SIP__WK_MAX_IO)
    return sip_error_new(SIP_UNIMPLEMENTED, "more than %d inputs or outputs", SIP__WK_MAX_IO);
  if (s->sock < 0 || s->gen != atomic_load(&w->gen)) {
    if ((e = bind_session(s))) return e;
  }
  /* A region no answer holds; the last one when all are held (copied out). */
  int slot = -1;
  for (int i = 0; i < LEASED && slot < 0; i++)
    if (!s->reg[i] || atomic_load(&s->reg[i]->refs) == 1) slot = i;
  int copy_out = slot < 0;
  if (copy_out) slot = LEASED;
  union {
    char buf[sizeof(sip__wk_exec_t) + SIP__WK_MAX_IO * sizeof(sip__wk_tensor_t)];
    sip__wk_exec_t x;
  } m;
  sip__wk_exec_t *x = &m.x;
  memset(x, 0, sizeof *x);
  sip__wk_tensor_t *tin = (sip__wk_tensor_t *)(m.buf + sizeof *x);
  size_t at = 0;
  for (size_t i = 0; i < n_inputs; i++) {
    const sip_tensor_t *t = inputs[i];
    memset(&tin[i], 0, sizeof tin[i]);
    /* An unnamed tensor is the model's input at its position. */
    tin[i].index = t->name ? index_of(w->ins, w->n_in, t->name) : (int)i;
    tin[i].dtype = t->dtype;
    tin[i].rank = t->rank;
    memcpy(tin[i].dims, t->dims, sizeof tin[i].dims);
    tin[i].off = at;
    tin[i].nbytes = t->nbytes;
    at = ALIGN_UP(at + t->nbytes);
    if (tin[i].index < 0)
      return sip_error_new(SIP_INVALID_ARGUMENT, "the model has no input '%s'",
                           t->name ? t->name : "(unnamed)");
  }
  size_t out_guess = 0;
  int64_t rows = n_inputs && inputs[0]->rank > 0 ? inputs[0]->dims[0] : -1;
  for (size_t j = 0; j < n_outputs; j++) {
    x->out_index[j] = index_of(w->outs, w->n_out, out_names[j]);
    if (x->out_index[j] < 0)
      return sip_error_new(SIP_INVALID_ARGUMENT, "the model has no output '%s'", out_names[j]);
    size_t bytes = sip__wk_out_bytes(&w->outs[x->out_index[j]], rows);
    out_guess += ALIGN_UP(bytes ? bytes : at);
  }
  sip__iso_region_t *r = region_get(s, slot, at + out_guess);
  if (!r)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "pool '%s': no shared memory for %zu bytes: %s",
                         w->p->cfg->name, at + out_guess, strerror(errno));
  /* The one copy of the inputs: into memory the worker sees. */
  for (size_t i = 0; i < n_inputs; i++)
    if (inputs[i]->nbytes) memcpy((char *)r->base + tin[i].off, inputs[i]->data, inputs[i]->nbytes);
  x->op = SIP__WK_EXEC;
  x->region = slot;
  x->region_size = r->size;
  x->out_at = at;
  x->fault = fault;
  x->fault_delay_ms = s->fault_delay_ms;
  x->n_in = (int32_t)n_inputs;
  x->n_out = (int32_t)n_outputs;
  pid_t pid = atomic_load(&w->p->worker_pid);
  int send_fd = r->sent_gen != s->gen ? r->fd : -1;
  if (sip__wk_send(s->sock, m.buf, sizeof *x + n_inputs * sizeof(sip__wk_tensor_t), send_fd) != 0)
    return lost(s, pid);
  r->sent_gen = s->gen;
  union {
    char buf[sizeof(sip__wk_done_t) + SIP__WK_MAX_IO * sizeof(sip__wk_tensor_t) + 1024];
    sip__wk_done_t d;
  } a;
  ssize_t n = sip__wk_recv(s->sock, a.buf, sizeof a.buf, NULL, w->spin_us);
  if (n <= 0) return lost(s, pid);
  const sip__wk_done_t *d = &a.d;
  int32_t code;
  const char *text;
  int text_len;
  if (sip__wk_check_done(a.buf, (size_t)n, n_outputs, &code, &text, &text_len) != 0 ||
      (!code && region_follow(r, d->region_size) != 0))
    return sip_error_new(SIP_INTERNAL, "pool '%s': a malformed answer from the worker",
                         w->p->cfg->name);
  if (code) return sip_error_new((sip_code_t)code, "%.*s", text_len, text);
  const sip__wk_tensor_t *to = (const sip__wk_tensor_t *)(a.buf + sizeof *d);
  sip_buf_t *owner = NULL;
  if (!copy_out) {
    atomic_fetch_add(&r->refs, 1);
    if (!(owner = sip_buf_wrap(r->base, r->size, region_release, r))) return SIP__OOM();
  }
  e = NULL;
  for (size_t j = 0; j < n_outputs && !e; j++) {
    const sip__wk_tensor_t *t = &to[j];
    if (t->rank < 0 || t->rank > SIP_MAX_RANK || t->off > r->size ||
        t->nbytes > r->size - t->off) {
      e = sip_error_new(SIP_INTERNAL, "pool '%s': the worker put output '%s' outside its region",
                        w->p->cfg->name, out_names[j]);
      break;
    }
    const void *data = (const char *)r->base + t->off;
    outputs[j] = copy_out ? sip_tensor_new_copy(out_names[j], (sip_dtype_t)t->dtype, t->rank,
                                                t->dims, data, t->nbytes)
                          : sip_tensor_new_view(out_names[j], (sip_dtype_t)t->dtype, t->rank,
                                                t->dims, data, t->nbytes, owner);
    if (!outputs[j]) e = SIP__OOM();
  }
  sip_buf_unref(owner);
  if (e)
    for (size_t j = 0; j < n_outputs; j++) sip_tensor_free(outputs[j]), outputs[j] = NULL;
  return e;
}

const sip_backend_vtable_t sip__iso_forwarding = {
    .describe = describe,
    .session_new = session_new,
    .execute = execute,
    .session_free = session_free,
    .model_free = sip__iso_model_free,
    .batch_problem = batch_problem,
};

