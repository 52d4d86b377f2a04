/* sip — process isolation of a pool, the server's side (isolation.h,
 * docs/availability.md; the worker is worker.c).
 *
 * A supervisor thread per pool starts the worker (this program again,
 * /proc/self/exe, with a control channel as fd 3), loads the model there,
 * watches its pidfd, pings it every heartbeat period and restarts it when
 * it ends: at once when it had been serving, with a growing delay when it
 * keeps dying young; crashes (a signal other than SIGKILL, a bad exit, a
 * failed load) five times within 60 s mark the pool FAILED. With
 * hot_standby a second worker is kept loaded and takes over at once.
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
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "session/events.h"
#include "session/isolation.h"
#include "session/worker_proto.h"
#include "sip/worker.h"

extern char **environ;

#define CRASH_LOOP 5             /* crashes ... */
#define CRASH_WINDOW_US 60000000 /* ... within this long: the pool is FAILED */
#define YOUNG_US 1000000         /* a worker dying younger restarts after a delay */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 5000
#define PING_TIMEOUT_MS 1000
#define BIND_TIMEOUT_MS 2000
#define WAIT_UP_MS 30000 /* an execution waits this long for a worker */
#define DEFAULT_PING_MS 1000
#define LEASED 8 /* regions an answer may hold; one more is copied out */
#define ALIGN 64
#define ALIGN_UP(x) (((x) + (ALIGN - 1)) & ~(size_t)(ALIGN - 1))

typedef struct worker {
  pid_t pid; /* 0: none */
  int pidfd, ctl;
  uint64_t started_us;
} worker_t;

struct sip__iso {
  sip__pool_t *p;
  const sip_backend_vtable_t *real;
  char exe[PATH_MAX];
  char *load_msg;
  size_t load_len;
  sip_io_desc_t *ins, *outs;
  size_t n_in, n_out;
  char *batch_problem;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: a worker up, down, the load done */
  worker_t act, sb;  /* the serving worker and the standby */
  _Atomic uint64_t gen; /* the serving worker's generation; 0: none serving */
  uint64_t gen_next;
  int failed, stopping, loaded;
  sip_error_t *load_err;
  char down_why[192];  /* why the last worker ended */
  char fail_why[320];  /* why the pool failed (crash loop) */
  pid_t kill_pid;      /* killed by us, for kill_why */
  char kill_why[192];
  uint64_t crash_us[CRASH_LOOP];
  int n_crash;
  uint64_t backoff_ms, restart_at_us, sb_restart_at_us;
  uint64_t ping_us, next_ping_us;
  int evfd;
  pthread_t sup;
  atomic_uint next_id;
};

typedef struct region {
  atomic_long refs; /* the session's + one per answer viewing it */
  int fd;
  void *base;
  size_t size;
  uint64_t sent_gen; /* the worker generation that has its fd */
} region_t;

typedef struct isess {
  sip__iso_t *w;
  uint32_t id;
  int sock; /* -1: not bound */
  uint64_t gen;
  region_t *reg[SIP__WK_MAX_REGIONS];
  int lost;
  int fault;
  int64_t fault_delay_ms;
} isess_t;

/* ---- worker processes ---- */

static int ms_until(uint64_t at_us) {
  uint64_t now = sip__now_us();
  return at_us <= now ? 0 : (int)((at_us - now + 999) / 1000);
}

/* One request and its answer on a worker's control channel; the answer's
 * length, or -1 with errno ETIMEDOUT when the worker did not answer in
 * time (timeout_ms < 0: waits as long as it lives), ESRCH when it ended. */
static ssize_t ctl_call(worker_t *k, const void *msg, size_t len, int fd, void *reply,
                        size_t cap, int timeout_ms, int stop_fd) {
  errno = ESRCH;
  if (k->pid <= 0 || sip__wk_send(k->ctl, msg, len, fd) != 0) return errno = ESRCH, -1;
  /* stop_fd (the supervisor's wake-up, written only to stop it) readable:
   * the pool stops, nobody waits for this answer (ECANCELED). */
  struct pollfd pf[3] = {{k->ctl, POLLIN, 0}, {stop_fd, POLLIN, 0}, {k->pidfd, POLLIN, 0}};
  uint64_t until = timeout_ms < 0 ? 0 : sip__now_us() + (uint64_t)timeout_ms * 1000;
  for (;;) {
    int r = poll(pf, 3, timeout_ms < 0 ? -1 : ms_until(until));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno = ESRCH, -1;
    if (r == 0) return errno = ETIMEDOUT, -1;
    if (pf[0].revents) break;
    if (pf[1].revents) return errno = ECANCELED, -1;
    if (pf[2].revents) return errno = ESRCH, -1; /* ended */
  }
  int got = -1;
  ssize_t n = sip__wk_recv(k->ctl, reply, cap, &got, 0);
  if (got >= 0) close(got);
  return n > 0 ? n : (errno = ESRCH, -1);
}

/* Starts a worker process; -1 with errno when it could not. */
static int spawn(sip__iso_t *w, worker_t *k) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  /* dup2 onto itself would keep close-on-exec: make sure the child's end
   * is not fd 3 already. */
  if (sv[1] == 3) {
    int d = fcntl(sv[1], F_DUPFD_CLOEXEC, 4);
    close(sv[1]);
    sv[1] = d;
  }
  char ppid[24], *argv[6];
  snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
  argv[0] = w->exe;
  argv[1] = SIP_WORKER_ARG;
  argv[2] = "3";
  argv[3] = ppid;
  argv[4] = (char *)w->p->cfg->name; /* shown by ps */
  argv[5] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  posix_spawnattr_init(&at);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = sv[1] < 0 ? EMFILE : posix_spawn(&pid, w->exe, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (sv[1] >= 0) close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    errno = rc;
    return -1;
  }
  k->pid = pid;
  k->ctl = sv[0];
  k->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  k->started_us = sip__now_us();
  return 0;
}

/* Ends a worker (whatever its state) and reaps it; the exit status. */
static int finish_worker(worker_t *k) {
  int st = 0;
  if (k->pid <= 0) return 0;
  kill(k->pid, SIGKILL);
  while (waitpid(k->pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (k->ctl >= 0) close(k->ctl);
  if (k->pidfd >= 0) close(k->pidfd);
  *k = (worker_t){0, -1, -1, 0};
  return st;
}

/* Reads the LOADED answer: the first one sets the pool's descriptions
 * (a restart loads the same files). */
static sip_error_t *take_loaded(sip__iso_t *w, const char *msg, size_t n) {
  sip_io_desc_t *d;
  size_t n_in, n_out;
  char *why;
  sip_error_t *e = sip__wk_parse_loaded(msg, n, &d, &n_in, &n_out, &why);
  if (e) return e;
  if (!w->ins) {
    w->n_in = n_in;
    w->n_out = n_out;
    w->ins = sip__io_descs_copy(d, n_in);
    w->outs = sip__io_descs_copy(d + n_in, n_out);
    w->batch_problem = why;
    why = NULL;
    if (!w->ins || !w->outs) e = SIP__OOM();
  }
  sip__io_descs_free(d, n_in + n_out);
  sip__free(why);
  return e;
}

/* Spawns a worker and loads the model there (caller holds no lock). */
static sip_error_t *start_worker(sip__iso_t *w, worker_t *k) {
  if (spawn(w, k) != 0)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start a worker process (%s): %s",
                         w->exe, strerror(errno));
  char *reply = sip__malloc(SIP__WK_MAX_MSG);
  ssize_t n = reply ? ctl_call(k, w->load_msg, w->load_len, -1, reply, SIP__WK_MAX_MSG, -1,
                               w->evfd)
                    : -1;
  sip_error_t *e = NULL;
  if (n < 0) {
    int st = finish_worker(k);
    e = WIFSIGNALED(st) ? sip_error_new(SIP_INTERNAL, "the worker exited on signal %d while "
                                        "loading the model", WTERMSIG(st))
                        : sip_error_new(SIP_INTERNAL, "the worker exited with status %d while "
                                        "loading the model", WEXITSTATUS(st));
  } else if ((e = take_loaded(w, reply, (size_t)n))) {
    finish_worker(k);
  }
  sip__free(reply);
  return e;
}

static void publish(sip__iso_t *w, const worker_t *k, uint64_t now) {
  sip__pool_t *p = w->p;
  w->act = *k;
  w->next_ping_us = now + w->ping_us;
  atomic_store(&w->gen, ++w->gen_next);
  atomic_store(&p->worker_pid, (int)k->pid);
  pthread_cond_broadcast(&w->cv);
}

/* The crash loop: the pool is FAILED with `why`. Caller holds w->mu. */
static void fail_pool(sip__iso_t *w, const char *why) {
  sip__pool_t *p = w->p;
  w->failed = 1;
  snprintf(w->fail_why, sizeof w->fail_why, "the pool failed: %s", why);
  pthread_cond_broadcast(&w->cv);
  if (atomic_load(&p->state) != SIP__POOL_READY) return;
  char *err = sip__asprintf("UNAVAILABLE: %s", why);
  sip_error_t *e = sip_error_new(SIP_UNAVAILABLE, "%s", why);
  pthread_mutex_lock(&p->mu);
  if (!p->error) p->error = err, err = NULL;
  if (!p->load_error) p->load_error = e, e = NULL;
  pthread_mutex_unlock(&p->mu);
  sip__free(err);
  sip_error_free(e);
  atomic_store(&p->state, SIP__POOL_FAILED);
  sip__log(SIP__LOG_ERROR, "pool failed", "pool=%s reason=\"%s\"", p->cfg->name, why);
  sip__events_pool(p, SIP_EVENT_POOL_FAILED, why);
}

/* A worker ended (or could not start): why, and whether it counts as a
 * crash. Caller holds w->mu. */
static void note_end(sip__iso_t *w, pid_t pid, int st, const char *load_error, uint64_t started) {
  sip__pool_t *p = w->p;
  uint64_t now = sip__now_us();
  int crash = 1;
  char why[192];
  if (load_error) {
    snprintf(why, sizeof why, "worker failed to load the model: %s", load_error);
  } else if (pid == w->kill_pid && w->kill_why[0]) {
    snprintf(why, sizeof why, "%s", w->kill_why);
    crash = 0;
  } else if (WIFSIGNALED(st)) {
    snprintf(why, sizeof why, "worker exited on signal %d", WTERMSIG(st));
    crash = WTERMSIG(st) != SIGKILL; /* an operator, the OOM killer */
  } else {
    snprintf(why, sizeof why, "worker exited with status %d", WEXITSTATUS(st));
  }
  w->kill_pid = 0;
  w->kill_why[0] = '\0';
  snprintf(w->down_why, sizeof w->down_why, "%s", why);
  atomic_fetch_add(&p->worker_restarts, 1);
  pthread_mutex_lock(&p->mu);
  snprintf(p->worker_exit, sizeof p->worker_exit, "%s", why);
  pthread_mutex_unlock(&p->mu);
  sip__log(SIP__LOG_WARN, "worker ended", "pool=%s pid=%ld reason=\"%s\"", p->cfg->name,
           (long)pid, why);
  /* A worker that had been serving for a while restarts at once; one that
   * keeps dying young waits longer each time. */
  if (now - started < YOUNG_US || load_error)
    w->backoff_ms = w->backoff_ms ? (w->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                                          : w->backoff_ms * 2)
                                  : BACKOFF_MIN_MS;
  else
    w->backoff_ms = 0;
  w->restart_at_us = now + w->backoff_ms * 1000;
  if (!crash) return;
  memmove(w->crash_us + 1, w->crash_us, sizeof w->crash_us - sizeof *w->crash_us);
  w->crash_us[0] = now;
  if (w->n_crash < CRASH_LOOP) w->n_crash++;
  if (w->n_crash == CRASH_LOOP && now - w->crash_us[CRASH_LOOP - 1] <= CRASH_WINDOW_US) {
    char reason[256];
    snprintf(reason, sizeof reason, "%s %d times in %d s", why, CRASH_LOOP,
             CRASH_WINDOW_US / 1000000);
    fail_pool(w, reason);
  }
}

/* Pings a worker; -1 only when it is alive and did not answer in time
 * (one that ended is the pidfd's news). Caller holds w->mu. */
static int ping(worker_t *k) {
  wk_hdr_t h = {SIP__WK_PING, 0}, r;
  ssize_t n = ctl_call(k, &h, sizeof h, -1, &r, sizeof r, PING_TIMEOUT_MS, -1);
  return n < 0 && errno == ETIMEDOUT ? -1 : 0;
}

static void kill_for(sip__iso_t *w, worker_t *k, const char *why) {
  if (k->pid <= 0) return;
  w->kill_pid = k->pid;
  snprintf(w->kill_why, sizeof w->kill_why, "%s", why);
  kill(k->pid, SIGKILL);
}

/* Starts a worker with w->mu released; installs it as `slot` (the serving
 * one when `serving`). */
static void start_into(sip__iso_t *w, int serving) {
  worker_t k = {0, -1, -1, 0};
  pthread_mutex_unlock(&w->mu);
  uint64_t t0 = sip__now_us();
  sip_error_t *e = start_worker(w, &k);
  pthread_mutex_lock(&w->mu);
  if (w->stopping) {
    finish_worker(&k);
  } else if (e) {
    note_end(w, 0, 0, sip_error_message(e), t0);
    if (!serving) w->sb_restart_at_us = w->restart_at_us;
  } else if (serving) {
    publish(w, &k, sip__now_us());
    sip__log(SIP__LOG_INFO, "worker started", "pool=%s pid=%ld", w->p->cfg->name, (long)k.pid);
  } else {
    w->sb = k;
    atomic_store(&w->p->standby_pid, (int)k.pid);
  }
  sip_error_free(e);
}

static void *supervise(void *arg) {
  sip__iso_t *w = arg;
  sip__pool_t *p = w->p;
  pthread_setname_np(pthread_self(), "sip-supervisor");
  int want_sb = p->cfg->standby_enabled && p->cfg->standby_count > 0;
  pthread_mutex_lock(&w->mu);
  {
    worker_t k = {0, -1, -1, 0};
    pthread_mutex_unlock(&w->mu);
    sip_error_t *e = start_worker(w, &k);
    pthread_mutex_lock(&w->mu);
    w->load_err = e;
    if (!e) publish(w, &k, sip__now_us());
    w->loaded = 1;
    pthread_cond_broadcast(&w->cv);
    if (e) w->stopping = 1;
  }
  while (!w->stopping) {
    uint64_t now = sip__now_us();
    if (want_sb && !w->failed && w->sb.pid <= 0 && now >= w->sb_restart_at_us) {
      start_into(w, 0);
      continue;
    }
    if (!w->failed && w->act.pid <= 0 && w->sb.pid > 0) { /* the standby takes over */
      worker_t k = w->sb;
      w->sb = (worker_t){0, -1, -1, 0};
      atomic_store(&p->standby_pid, 0);
      publish(w, &k, now);
      sip__log(SIP__LOG_INFO, "standby worker took over", "pool=%s pid=%ld", p->cfg->name,
               (long)k.pid);
      w->sb_restart_at_us = w->restart_at_us;
      continue;
    }
    if (!w->failed && w->act.pid <= 0 && now >= w->restart_at_us) {
      start_into(w, 1);
      continue;
    }
    int timeout = ms_until(w->next_ping_us);
    if (w->act.pid <= 0 && !w->failed) {
      int t = ms_until(w->restart_at_us);
      if (t < timeout) timeout = t;
    }
    if (want_sb && w->sb.pid <= 0 && !w->failed) {
      int t = ms_until(w->sb_restart_at_us);
      if (t < timeout) timeout = t;
    }
    /* A worker's end shows on its pidfd, and on its control channel
     * hanging up (for kernels without pidfds). */
    struct pollfd pf[5] = {{w->evfd, POLLIN, 0},     {w->act.pidfd, POLLIN, 0},
                           {w->sb.pidfd, POLLIN, 0}, {w->act.ctl, 0, 0},
                           {w->sb.ctl, 0, 0}};
    pthread_mutex_unlock(&w->mu);
    int r = poll(pf, 5, timeout);
    pthread_mutex_lock(&w->mu);
    pf[1].revents |= pf[3].revents;
    pf[2].revents |= pf[4].revents;
    if (r > 0 && pf[0].revents) {
      uint64_t v;
      if (read(w->evfd, &v, sizeof v) < 0) { /* nothing to do: only a wake-up */
      }
    }
    worker_t *ended[2] = {pf[1].revents && w->act.pid > 0 ? &w->act : NULL,
                          pf[2].revents && w->sb.pid > 0 ? &w->sb : NULL};
    for (int i = 0; i < 2; i++) {
      if (!ended[i]) continue;
      worker_t k = *ended[i];
      if (i == 0) {
        atomic_store(&w->gen, 0);
        atomic_store(&p->worker_pid, 0);
      } else {
        atomic_store(&p->standby_pid, 0);
      }
      int st = finish_worker(ended[i]);
      note_end(w, k.pid, st, NULL, k.started_us);
      if (i == 1) w->sb_restart_at_us = w->restart_at_us;
      pthread_cond_broadcast(&w->cv);
    }
    if (!w->stopping && sip__now_us() >= w->next_ping_us) {
      w->next_ping_us = sip__now_us() + w->ping_us;
      char why[128];
      snprintf(why, sizeof why, "worker did not answer a heartbeat within %d ms",
               PING_TIMEOUT_MS);
      if (w->act.pid > 0 && ping(&w->act) != 0) kill_for(w, &w->act, why);
      if (w->sb.pid > 0 && ping(&w->sb) != 0) kill_for(w, &w->sb, why);
    }
  }
  pthread_mutex_unlock(&w->mu);
  finish_worker(&w->act);
  finish_worker(&w->sb);
  atomic_store(&p->worker_pid, 0);
  atomic_store(&p->standby_pid, 0);
  return NULL;
}

/* ---- the forwarding backend ---- */

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
  isess_t *s = sip__calloc(1, sizeof *s);
  if (!s) return SIP__OOM();
  s->w = w;
  s->sock = -1;
  s->id = atomic_fetch_add(&w->next_id, 1);
  *session = s;
  return NULL;
}

static void region_unref(region_t *r) {
  if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
  if (r->base) munmap(r->base, r->size);
  if (r->fd >= 0) close(r->fd);
  sip__free(r);
}

static void region_release(void *ctx) { region_unref(ctx); }

static void session_free(void *session) {
  isess_t *s = session;
  if (!s) return;
  if (s->sock >= 0) close(s->sock);
  for (int i = 0; i < SIP__WK_MAX_REGIONS; i++) region_unref(s->reg[i]);
  sip__free(s);
}

/* Binds `s` to the serving worker, waiting for one when none serves. */
static sip_error_t *bind_session(isess_t *s) {
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
  wk_bind_t b = {SIP__WK_BIND, s->id};
  char reply[1024];
  ssize_t n = ctl_call(&w->act, &b, sizeof b, sv[1], reply, sizeof reply, BIND_TIMEOUT_MS, -1);
  int err = errno;
  close(sv[1]);
  if (n < 0 || (size_t)n < sizeof(wk_hdr_t) || ((wk_hdr_t *)reply)->op != SIP__WK_BOUND) {
    close(sv[0]);
    if (n < 0) {
      char why[128];
      snprintf(why, sizeof why, "worker did not answer within %d ms", BIND_TIMEOUT_MS);
      if (err == ETIMEDOUT && atomic_load(&w->gen) == gen) kill_for(w, &w->act, why);
      s->lost = 1;
      e = sip_error_new(SIP_UNAVAILABLE, "the worker of pool '%s' ended while a session was "
                        "being bound", pool);
    } else {
      e = sip_error_new(SIP_INTERNAL, "pool '%s': the worker refused a session: %.*s", pool,
                        (int)((size_t)n > sizeof(wk_error_t) ? (size_t)n - sizeof(wk_error_t) : 0),
                        reply + sizeof(wk_error_t));
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
static region_t *region_get(isess_t *s, int i, size_t size) {
  region_t *r = s->reg[i];
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
static int region_follow(region_t *r, uint64_t size) {
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
static sip_error_t *lost(isess_t *s, pid_t pid) {
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
  isess_t *s = session;
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
    char buf[sizeof(wk_exec_t) + SIP__WK_MAX_IO * sizeof(wk_tensor_t)];
    wk_exec_t x;
  } m;
  wk_exec_t *x = &m.x;
  memset(x, 0, sizeof *x);
  wk_tensor_t *tin = (wk_tensor_t *)(m.buf + sizeof *x);
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
  region_t *r = region_get(s, slot, at + out_guess);
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
  if (sip__wk_send(s->sock, m.buf, sizeof *x + n_inputs * sizeof(wk_tensor_t), send_fd) != 0)
    return lost(s, pid);
  r->sent_gen = s->gen;
  union {
    char buf[sizeof(wk_done_t) + SIP__WK_MAX_IO * sizeof(wk_tensor_t) + 1024];
    wk_done_t d;
  } a;
  ssize_t n = sip__wk_recv(s->sock, a.buf, sizeof a.buf, NULL, sip__wk_spin_us());
  if (n <= 0) return lost(s, pid);
  const wk_done_t *d = &a.d;
  int32_t code;
  const char *text;
  int text_len;
  if (sip__wk_check_done(a.buf, (size_t)n, n_outputs, &code, &text, &text_len) != 0 ||
      (!code && region_follow(r, d->region_size) != 0))
    return sip_error_new(SIP_INTERNAL, "pool '%s': a malformed answer from the worker",
                         w->p->cfg->name);
  if (code) return sip_error_new((sip_code_t)code, "%.*s", text_len, text);
  const wk_tensor_t *to = (const wk_tensor_t *)(a.buf + sizeof *d);
  sip_buf_t *owner = NULL;
  if (!copy_out) {
    atomic_fetch_add(&r->refs, 1);
    if (!(owner = sip_buf_wrap(r->base, r->size, region_release, r))) return SIP__OOM();
  }
  e = NULL;
  for (size_t j = 0; j < n_outputs && !e; j++) {
    const wk_tensor_t *t = &to[j];
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

static void model_free(void *model) {
  sip__iso_t *w = model;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stopping = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  uint64_t one = 1;
  if (write(w->evfd, &one, sizeof one) < 0) { /* the thread also sees stopping at its next wake */
  }
  pthread_join(w->sup, NULL);
  if (w->p->iso == w) w->p->iso = NULL;
  close(w->evfd);
  sip__io_descs_free(w->ins, w->n_in);
  sip__io_descs_free(w->outs, w->n_out);
  sip__free(w->batch_problem);
  sip__free(w->load_msg);
  sip_error_free(w->load_err);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  sip__free(w);
}

static const sip_backend_vtable_t forwarding = {
    .describe = describe,
    .session_new = session_new,
    .execute = execute,
    .session_free = session_free,
    .model_free = model_free,
    .batch_problem = batch_problem,
};

int sip__iso_lost(void *ctx) { return ctx && ((isess_t *)ctx)->lost; }

void sip__iso_fault(void *ctx, int kind, int64_t delay_ms) {
  isess_t *s = ctx;
  s->fault = kind;
  s->fault_delay_ms = delay_ms;
}

void sip__iso_kill(sip__iso_t *w, const char *why) {
  pthread_mutex_lock(&w->mu);
  char text[192];
  snprintf(text, sizeof text, "worker killed: %s", why);
  kill_for(w, &w->act, text);
  pthread_mutex_unlock(&w->mu);
}

/* The LOAD message: settings, backend, path, options. */
static int build_load(sip__iso_t *w, const char *path, const sip_kv_t *opts, size_t n_opts) {
  const sip_engine_settings_t *st = w->p->eng->settings;
  size_t len = sizeof(wk_load_t) + strlen(w->real->name) + 1 + (path ? strlen(path) : 0) + 1;
  for (size_t i = 0; i < n_opts; i++) len += strlen(opts[i].key) + strlen(opts[i].value) + 2;
  if (len > SIP__WK_MAX_MSG || n_opts > 64) return -1;
  char *m = sip__calloc(1, len);
  if (!m) return -1;
  wk_load_t *h = (wk_load_t *)m;
  h->op = SIP__WK_LOAD;
  if (st) {
    h->intra_op_threads = st->intra_op_threads;
    h->inter_op_threads = st->inter_op_threads;
    h->allow_spinning = st->allow_spinning;
  }
  h->n_options = (uint32_t)n_opts;
  /* With hot_standby every worker is warmed before it serves or stands by. */
  h->warm = w->p->cfg->standby_enabled && w->p->cfg->standby_count > 0;
  char *at = m + sizeof *h;
  at = stpcpy(at, w->real->name) + 1;
  at = stpcpy(at, path ? path : "") + 1;
  for (size_t i = 0; i < n_opts; i++) {
    at = stpcpy(at, opts[i].key) + 1;
    at = stpcpy(at, opts[i].value) + 1;
  }
  w->load_msg = m;
  w->load_len = len;
  return 0;
}

sip_error_t *sip__iso_load(sip__pool_t *p, const sip_backend_vtable_t *real, const char *path,
                           const sip_kv_t *opts, size_t n_opts, void **model) {
  if (!sip__wk_program_ok())
    return sip_error_new(SIP_FAILED_PRECONDITION, "isolation: process runs the pool in this "
                         "program started again as a worker, and this program does not call "
                         "sip_worker_main(argc, argv) at the start of main() (sipd does); "
                         "expected isolation: thread here");
  sip__iso_t *w = sip__calloc(1, sizeof *w);
  if (!w) return SIP__OOM();
  w->p = p;
  w->real = real;
  w->act = w->sb = (worker_t){0, -1, -1, 0};
  int64_t ping_ms = p->cfg->health_check_interval_ms ? p->cfg->health_check_interval_ms
                    : p->cfg->standby_health_ms       ? p->cfg->standby_health_ms
                                                      : DEFAULT_PING_MS;
  w->ping_us = (uint64_t)ping_ms * 1000;
  ssize_t n = readlink("/proc/self/exe", w->exe, sizeof w->exe - 1);
  if (n <= 0 || build_load(w, path, opts, n_opts) != 0) {
    sip__free(w->load_msg);
    sip__free(w);
    return n <= 0 ? sip_error_new(SIP_INTERNAL, "isolation: process: cannot find this "
                                  "program (/proc/self/exe): %s", strerror(errno))
                  : sip_error_new(SIP_INVALID_ARGUMENT, "isolation: process: the model path "
                                  "and backend_options take more than %d bytes",
                                  SIP__WK_MAX_MSG);
  }
  w->exe[n] = '\0';
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &a);
  pthread_condattr_destroy(&a);
  w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->evfd < 0 || pthread_create(&w->sup, NULL, supervise, w) != 0) {
    if (w->evfd >= 0) close(w->evfd);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    sip__free(w->load_msg);
    sip__free(w);
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "isolation: process: cannot start the "
                         "supervisor of pool '%s'", p->cfg->name);
  }
  pthread_mutex_lock(&w->mu);
  while (!w->loaded) pthread_cond_wait(&w->cv, &w->mu);
  sip_error_t *e = w->load_err;
  w->load_err = NULL;
  pthread_mutex_unlock(&w->mu);
  if (e) {
    model_free(w);
    return e;
  }
  p->iso = w;
  p->iso_vt = forwarding;
  p->iso_vt.name = real->name;
  p->iso_vt.platform = real->platform;
  p->iso_vt.flags = real->flags;
  *model = w;
  return NULL;
}
