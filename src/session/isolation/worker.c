/* sip — the worker process of a pool with `isolation: process`
 * (src/session/isolation/worker_proto.h; the server's side is isolation.c).
 *
 * The worker loads the pool's model once with the pool's real backend and
 * serves each bound session on a thread of its own: it reads an
 * execution, runs the backend on views of the inputs in the session's
 * shared-memory region, leaves the outputs in the same region and answers
 * with their offsets. Anything that goes wrong in here (a crash in the
 * backend, an abort, the OOM killer) ends this process only; the server
 * sees its channels close and its pidfd fire. */

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend/backends.h"
#include "core/core.h"
#include "core/fdsend.h"
#include "core/spin.h"
#include "session/engine.h"
#include "session/isolation/isolation.h"
#include "session/isolation/worker_proto.h"
#include "sip/worker.h"

#define ALIGN 64
#define ALIGN_UP(x) (((x) + (ALIGN - 1)) & ~(size_t)(ALIGN - 1))

/* ---- messages with a file descriptor ---- */

int sip__wk_send(int sock, const void *msg, size_t len, int fd) {
  return sip__send_with_fd(sock, msg, len, fd) == (ssize_t)len ? 0 : -1;
}


int64_t sip__wk_spin_us(int64_t pool_us) {
  int64_t env = sip__spin_us_env("SIP_WORKER_SPIN_US");
  return env >= 0 ? env : pool_us > 0 ? pool_us : 0;
}

ssize_t sip__wk_recv(int sock, void *buf, size_t cap, int *fd, int64_t spin_us) {
  struct iovec iov = {buf, cap};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                      .msg_controllen = sizeof u.buf};
  ssize_t n = -1;
  /* A message due soon (the answer to a short execution, the next request
   * of a client waiting for each answer) is caught without a sleep and a
   * wake-up on both sides of the channel: the executors' policy, polling
   * for at most the window. Yielding between polls gives the core to a
   * thread queued behind this one (the other end, the server's event loop,
   * the client). The poll used to run only while /proc/loadavg showed no
   * thread waiting for a CPU; on 2 cores the request's own pollers (client,
   * event loop, executor, worker) outnumber the cores, so the worker slept
   * on a quiet machine and paid the wake-up. Measured by bench/isolation.py
   * on 2 cores, 5 rounds each: process - thread p50 with the other core
   * idle +21 us gated, +6..+12 us ungated; with it busy +15..+20 us gated,
   * +14..+17 us ungated. */
  if (spin_us > 0) {
    uint64_t until = sip__now_us() + (uint64_t)spin_us;
    while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT)) < 0 &&
           (errno == EAGAIN || errno == EINTR) && sip__now_us() < until)
      sched_yield();
  }
  if (n < 0)
    while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
    }
  if (fd) *fd = -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); n >= 0 && c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int got;
    memcpy(&got, CMSG_DATA(c), sizeof got);
    if (fd && *fd < 0) *fd = got;
    else close(got); /* not expected: never kept */
  }
  if (n >= 0 && (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    if (fd && *fd >= 0) close(*fd), *fd = -1;
    errno = EMSGSIZE;
    return -1;
  }
  return n;
}

/* ---- the model ---- */

static const sip_backend_vtable_t *vt;
static int64_t chan_spin_us; /* polling for the next execution (LOAD) */
static void *model;
static const sip_io_desc_t *ins, *outs;
static size_t n_ins, n_outs;

typedef struct wregion {
  int fd;
  void *base;
  size_t size;
  sip_buf_t *buf; /* views of the mapping hold it (nothing to free) */
} wregion_t;

typedef struct wsess {
  int sock;
  void *ctx;
  wregion_t reg[SIP__WK_MAX_REGIONS];
} wsess_t;

static void no_release(void *ctx) { (void)ctx; }

size_t sip__wk_out_bytes(const sip_io_desc_t *d, int64_t rows) {
  if (d->rank < 0 || d->dtype == SIP_DTYPE_STRING) return 0;
  size_t count = 1;
  for (int k = 0; k < d->rank; k++) {
    int64_t n = d->dims[k] >= 0 ? d->dims[k] : k == 0 && rows > 0 ? rows : -1;
    if (n < 0 || (n && count > SIZE_MAX / 16 / (size_t)n)) return 0;
    count *= (size_t)n;
  }
  return count * sip_dtype_size(d->dtype);
}

/* Maps region `r` at `size` bytes (the memfd is that large already). */
static int region_map(wregion_t *r, size_t size) {
  if (r->base && r->size == size) return 0;
  sip_buf_unref(r->buf);
  r->buf = NULL;
  if (r->base) munmap(r->base, r->size);
  r->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  r->size = r->base == MAP_FAILED ? 0 : size;
  if (r->base == MAP_FAILED) {
    r->base = NULL;
    return -1;
  }
  r->buf = sip_buf_wrap(r->base, size, no_release, NULL);
  return r->buf ? 0 : -1;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static size_t fail_reply(char *reply, sip_code_t code, const char *msg) {
  sip__wk_done_t *d = (sip__wk_done_t *)reply;
  memset(d, 0, sizeof *d);
  d->op = SIP__WK_DONE;
  d->code = code ? (int32_t)code : SIP_INTERNAL;
  size_t len = strlen(msg);
  if (len > 1000) len = 1000;
  memcpy(reply + sizeof *d, msg, len);
  reply[sizeof *d + len] = '\0';
  d->msg_len = (int32_t)len + 1;
  return sizeof *d + len + 1;
}

/* An injected fault (sip fault) taken here, where a real one would
 * happen; 1 when the execution is to fail with "injected error". */
static int take_fault(const sip__wk_exec_t *x) {
  switch (x->fault) {
  case SIP__FAULT_CRASH: {
    /* A real crash: the server sees this process end on SIGSEGV. No core
     * file for an injected one. */
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl);
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    _exit(139); /* not reached */
  }
  case SIP__FAULT_HANG: sleep_ms(x->fault_delay_ms ? x->fault_delay_ms : 60000); return 0;
  case SIP__FAULT_SLOW: sleep_ms(x->fault_delay_ms); return 0;
  case SIP__FAULT_ERROR: return 1;
  default: return 0;
  }
}

/* Runs one execution in region `r`; fills `reply`, returns its length. */
static size_t run(wsess_t *s, const sip__wk_exec_t *x, const sip__wk_tensor_t *tin, wregion_t *r,
                  char *reply) {
  if (take_fault(x)) return fail_reply(reply, SIP_INTERNAL, "injected error");
  sip_tensor_t *in[SIP__WK_MAX_IO] = {0}, *out[SIP__WK_MAX_IO] = {0};
  const char *names[SIP__WK_MAX_IO];
  sip_out_dest_t dests[SIP__WK_MAX_IO];
  memset(dests, 0, sizeof dests);
  sip_error_t *e = NULL;
  for (int i = 0; i < x->n_in && !e; i++) {
    const sip__wk_tensor_t *t = &tin[i];
    if (t->index < 0 || (size_t)t->index >= n_ins || t->rank < 0 || t->rank > SIP_MAX_RANK ||
        t->off > r->size || t->nbytes > r->size - t->off)
      e = sip_error_new(SIP_INTERNAL, "worker: input %d lies outside its region", i);
    else if (!(in[i] = sip_tensor_new_view(ins[t->index].name, (sip_dtype_t)t->dtype, t->rank,
                                           t->dims, (char *)r->base + t->off, t->nbytes,
                                           r->buf)))
      e = SIP__OOM();
  }
  size_t at = ALIGN_UP(x->out_at);
  int64_t rows = x->n_in && tin[0].rank > 0 ? tin[0].dims[0] : -1;
  for (int j = 0; j < x->n_out && !e; j++) {
    if (x->out_index[j] < 0 || (size_t)x->out_index[j] >= n_outs) {
      e = sip_error_new(SIP_INTERNAL, "worker: no output %d", x->out_index[j]);
      break;
    }
    const sip_io_desc_t *d = &outs[x->out_index[j]];
    names[j] = d->name;
    /* An output whose size can be told before running (its dims fixed, or
     * only dim 0 dynamic: the batch) may be written into the region by the
     * backend itself, which checks the size it finds. */
    size_t bytes = vt->execute_into ? sip__wk_out_bytes(d, rows) : 0;
    if (bytes && at <= r->size && bytes <= r->size - at) {
      dests[j] = (sip_out_dest_t){(char *)r->base + at, bytes, r->buf};
      at = ALIGN_UP(at + bytes);
    }
  }
  if (!e) {
    const sip_tensor_t *const *cin = (const sip_tensor_t *const *)in;
    e = vt->execute_into ? vt->execute_into(s->ctx, cin, (size_t)x->n_in, names,
                                            (size_t)x->n_out, dests, out)
                         : vt->execute(s->ctx, cin, (size_t)x->n_in, names, (size_t)x->n_out, out);
  }
  size_t len = 0;
  if (!e) {
    /* Outputs already in the region (written there, or a view of an
     * input) stay where they are; the others are copied after them. */
    sip__wk_tensor_t *to = (sip__wk_tensor_t *)(reply + sizeof(sip__wk_done_t));
    size_t end = at;
    for (int j = 0; j < x->n_out; j++) {
      const sip_tensor_t *o = out[j];
      const char *d = o->data, *b = r->base;
      memset(&to[j], 0, sizeof to[j]);
      to[j].index = x->out_index[j];
      to[j].dtype = o->dtype;
      to[j].rank = o->rank;
      memcpy(to[j].dims, o->dims, sizeof to[j].dims);
      to[j].nbytes = o->nbytes;
      if (o->nbytes && d >= b && d + o->nbytes <= b + r->size) {
        to[j].off = (uint64_t)(d - b);
      } else {
        to[j].off = end;
        end = ALIGN_UP(end + o->nbytes);
      }
    }
    if (end > r->size) { /* grow the region (never shrunk: it is sealed so) */
      size_t size = r->size;
      while (size < end) size *= 2;
      if (ftruncate(r->fd, (off_t)size) != 0 || region_map(r, size) != 0)
        e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "worker: cannot grow a region to %zu bytes",
                          size);
    }
    for (int j = 0; j < x->n_out && !e; j++) {
      const char *d = out[j]->data, *b = r->base;
      if (out[j]->nbytes && (d < b || d + out[j]->nbytes > b + r->size || d != b + to[j].off))
        memcpy((char *)r->base + to[j].off, d, out[j]->nbytes);
    }
    if (!e) {
      sip__wk_done_t *done = (sip__wk_done_t *)reply;
      memset(done, 0, sizeof *done);
      done->op = SIP__WK_DONE;
      done->region_size = r->size;
      done->n_out = x->n_out;
      len = sizeof *done + (size_t)x->n_out * sizeof(sip__wk_tensor_t);
    }
  }
  if (e) len = fail_reply(reply, sip_error_code(e), sip_error_message(e));
  sip_error_free(e);
  for (int i = 0; i < SIP__WK_MAX_IO; i++) sip_tensor_free(in[i]), sip_tensor_free(out[i]);
  return len;
}

/* A session's thread: executions until the server closes the channel. */
static void *serve(void *arg) {
  wsess_t *s = arg;
  /* Polls for the next execution only after an answer: a client waiting
   * for each answer sends its next request soon after. */
  int64_t spin_us = 0;
  static _Thread_local union {
    char buf[sizeof(sip__wk_exec_t) + SIP__WK_MAX_IO * sizeof(sip__wk_tensor_t)];
    sip__wk_exec_t x;
  } msg;
  static _Thread_local char reply[sizeof(sip__wk_done_t) + SIP__WK_MAX_IO * sizeof(sip__wk_tensor_t) + 1024];
  for (;;) {
    int fd = -1;
    ssize_t n = sip__wk_recv(s->sock, msg.buf, sizeof msg.buf, &fd, spin_us);
    spin_us = chan_spin_us;
    if (n <= 0) break;
    const sip__wk_exec_t *x = &msg.x;
    size_t len;
    if (sip__wk_check_exec(msg.buf, (size_t)n, n_ins, n_outs) != 0) {
      if (fd >= 0) close(fd);
      len = fail_reply(reply, SIP_INTERNAL, "worker: malformed execution message");
    } else {
      wregion_t *r = &s->reg[x->region];
      if (fd >= 0) { /* a new region for this slot */
        sip_buf_unref(r->buf);
        if (r->base) munmap(r->base, r->size);
        if (r->fd >= 0) close(r->fd);
        *r = (wregion_t){.fd = fd};
      }
      if (r->fd < 0 || region_map(r, x->region_size) != 0)
        len = fail_reply(reply, SIP_INTERNAL, "worker: cannot map the session's region");
      else
        len = run(s, x, (const sip__wk_tensor_t *)(msg.buf + sizeof *x), r, reply);
    }
    if (sip__wk_send(s->sock, reply, len, -1) != 0) break;
  }
  for (int i = 0; i < SIP__WK_MAX_REGIONS; i++) {
    wregion_t *r = &s->reg[i];
    sip_buf_unref(r->buf);
    if (r->base) munmap(r->base, r->size);
    if (r->fd >= 0) close(r->fd);
  }
  vt->session_free(s->ctx);
  close(s->sock);
  sip__free(s);
  return NULL;
}

/* ---- the control channel ---- */

static size_t error_msg(char *buf, sip_error_t *e) {
  sip__wk_error_t *h = (sip__wk_error_t *)buf;
  h->op = SIP__WK_ERROR;
  h->code = (int32_t)sip_error_code(e);
  int n = snprintf(buf + sizeof *h, SIP__WK_MAX_MSG - sizeof *h, "%s", sip_error_message(e));
  sip_error_free(e);
  size_t len = n < 0 ? 0 : (size_t)n;
  if (len >= SIP__WK_MAX_MSG - sizeof *h) len = SIP__WK_MAX_MSG - sizeof *h - 1;
  return sizeof *h + len + 1;
}

/* One execution on zeros of the model's own input shapes (dynamic dims
 * 1), so that the first request does not pay for first-run allocations. */
static void warm_up(void) {
  void *ctx = NULL;
  sip_tensor_t *in[SIP__WK_MAX_IO] = {0}, *out[SIP__WK_MAX_IO] = {0};
  const char *names[SIP__WK_MAX_IO];
  sip_error_t *e = n_ins > SIP__WK_MAX_IO || n_outs > SIP__WK_MAX_IO
                       ? sip_error_new(SIP_UNIMPLEMENTED, "more than %d inputs or outputs",
                                       SIP__WK_MAX_IO)
                       : vt->session_new(model, &ctx);
  for (size_t i = 0; !e && i < n_ins; i++) {
    int64_t dims[SIP_MAX_RANK];
    int rank = ins[i].rank < 0 ? 1 : ins[i].rank;
    size_t count = 1;
    for (int k = 0; k < rank; k++)
      count *= (size_t)(dims[k] = ins[i].rank < 0 || ins[i].dims[k] < 0 ? 1 : ins[i].dims[k]);
    sip_buf_t *zeros = ins[i].dtype == SIP_DTYPE_STRING
                           ? NULL
                           : sip_buf_new(count * sip_dtype_size(ins[i].dtype) + 1);
    if (!zeros)
      e = sip_error_new(SIP_UNIMPLEMENTED, "input '%s' cannot be made of zeros", ins[i].name);
    else if (!(in[i] = sip_tensor_new_view(ins[i].name, ins[i].dtype, rank, dims,
                                           sip_buf_data(zeros), sip_buf_len(zeros) - 1, zeros)))
      e = SIP__OOM();
    sip_buf_unref(zeros);
  }
  for (size_t j = 0; j < n_outs && j < SIP__WK_MAX_IO; j++) names[j] = outs[j].name;
  if (!e) e = vt->execute(ctx, (const sip_tensor_t *const *)in, n_ins, names, n_outs, out);
  if (e)
    sip__log(SIP__LOG_WARN, "worker not warmed", "reason=\"%s\"", sip_error_message(e));
  sip_error_free(e);
  for (size_t i = 0; i < SIP__WK_MAX_IO; i++) sip_tensor_free(in[i]), sip_tensor_free(out[i]);
  if (ctx) vt->session_free(ctx);
}

/* Loads the model the LOAD message names; the LOADED answer in `buf`. */
static size_t load(const char *msg, size_t n, char *buf) {
  static sip__wk_load_args_t a;
  if (sip__wk_parse_load(msg, n, &a) != 0)
    return error_msg(buf, sip_error_new(SIP_INTERNAL, "worker: malformed load message"));
  const char *name = a.backend;
  if (!(vt = sip__backend_find(name)))
    return error_msg(buf, sip_error_new(SIP_UNIMPLEMENTED, "worker: no backend '%s'", name));
  static sip_engine_settings_t settings;
  settings = a.settings;
  chan_spin_us = a.spin_us;
  void *state = NULL;
  sip_error_t *e = vt->init ? vt->init(&settings, &state) : NULL;
  if (!e) e = vt->load(state, a.path, a.n_opts ? a.opts : NULL, a.n_opts, &model);
  if (e) return error_msg(buf, e);
  vt->describe(model, &ins, &n_ins, &outs, &n_outs);
  if (a.warm) warm_up();
  sip__wk_loaded_t *l = (sip__wk_loaded_t *)buf;
  *l = (sip__wk_loaded_t){.op = SIP__WK_LOADED, .n_in = (uint32_t)n_ins, .n_out = (uint32_t)n_outs};
  size_t len = sizeof *l;
  for (size_t i = 0; i < n_ins + n_outs; i++) {
    const sip_io_desc_t *d = i < n_ins ? &ins[i] : &outs[i - n_ins];
    size_t nl = strlen(d->name) + 1, padded = (nl + 7) & ~(size_t)7;
    if (len + sizeof(sip__wk_desc_t) + padded + 1024 > SIP__WK_MAX_MSG)
      return error_msg(buf, sip_error_new(SIP_UNIMPLEMENTED, "worker: the model's inputs and "
                                          "outputs do not fit in one message"));
    sip__wk_desc_t *w = (sip__wk_desc_t *)(buf + len);
    memset(w, 0, sizeof *w);
    w->dtype = d->dtype;
    w->rank = d->rank;
    memcpy(w->dims, d->dims, sizeof w->dims);
    w->name_len = (uint32_t)padded;
    memset(buf + len + sizeof *w, 0, padded);
    memcpy(buf + len + sizeof *w, d->name, nl);
    len += sizeof *w + padded;
  }
  const char *why = vt->batch_problem ? vt->batch_problem(model) : NULL;
  int k = snprintf(buf + len, 1000, "%s", why ? why : "");
  return len + (k < 0 ? 0 : (size_t)k > 999 ? 999 : (size_t)k) + 1;
}

static size_t bind_session(int sock, size_t n, char *buf) {
  if (n < sizeof(sip__wk_bind_t) || sock < 0) {
    if (sock >= 0) close(sock);
    return error_msg(buf, sip_error_new(SIP_INTERNAL, "worker: malformed bind message"));
  }
  wsess_t *s = sip__calloc(1, sizeof *s);
  sip_error_t *e = s ? vt->session_new(model, &s->ctx) : SIP__OOM();
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (!e) {
    s->sock = sock;
    for (int i = 0; i < SIP__WK_MAX_REGIONS; i++) s->reg[i].fd = -1;
    if (pthread_create(&t, &a, serve, s) != 0) {
      vt->session_free(s->ctx);
      e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "worker: cannot start a session thread");
    }
  }
  pthread_attr_destroy(&a);
  if (e) {
    close(sock);
    sip__free(s);
    return error_msg(buf, e);
  }
  *(sip__wk_hdr_t *)buf = (sip__wk_hdr_t){SIP__WK_BOUND, 0};
  return sizeof(sip__wk_hdr_t);
}

static atomic_int worker_capable;

int sip__wk_program_ok(void) { return atomic_load(&worker_capable); }

int sip_worker_main(int argc, char **argv) {
  /* This program hands a worker's command line here: process isolation
   * may start it as a worker. */
  atomic_store(&worker_capable, 1);
  if (argc < 4 || strcmp(argv[1], SIP_WORKER_ARG) != 0) return -1;
  int ctl = atoi(argv[2]);
  pid_t parent = (pid_t)atol(argv[3]);
  /* The worker ends with the server, whatever way the server ends. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 1;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_IGN);
  /* Only the control channel (and stdio) is this process's. */
  if (close_range((unsigned)ctl + 1, ~0U, 0) != 0) {
    for (int fd = ctl + 1; fd < 1024; fd++) close(fd);
  }
  char *buf = sip__malloc(SIP__WK_MAX_MSG), *msg = sip__malloc(SIP__WK_MAX_MSG);
  if (!buf || !msg) return 1;
  for (;;) {
    int fd = -1;
    ssize_t n = sip__wk_recv(ctl, msg, SIP__WK_MAX_MSG, &fd, 0);
    if (n <= 0) break; /* the server closed the channel: the pool stops */
    size_t len;
    uint32_t op = (size_t)n >= sizeof(uint32_t) ? *(uint32_t *)msg : 0;
    if (op == SIP__WK_LOAD && !vt) {
      len = load(msg, (size_t)n, buf);
    } else if (op == SIP__WK_BIND && vt && model) {
      len = bind_session(fd, (size_t)n, buf);
      fd = -1;
    } else if (op == SIP__WK_PING) {
      *(sip__wk_hdr_t *)buf = (sip__wk_hdr_t){SIP__WK_PONG, 0};
      len = sizeof(sip__wk_hdr_t);
    } else {
      len = error_msg(buf, sip_error_new(SIP_INTERNAL, "worker: unexpected message %u", op));
    }
    if (fd >= 0) close(fd);
    if (sip__wk_send(ctl, buf, len, -1) != 0) break;
  }
  /* Session threads may be running: end without unwinding them. */
  _exit(0);
}
