/* sip — process isolation of a pool, the server's side: the supervisor
 * (isolation.h, docs/availability.md; the forwarding backend the pool
 * executes through is isolation_exec.c, the worker is worker.c).
 *
 * A supervisor thread per pool starts the worker (this program again,
 * /proc/self/exe, with a control channel as fd 3), loads the model there,
 * watches its pidfd, pings it every heartbeat period and restarts it when
 * it ends: at once when it had been serving, with a growing delay when it
 * keeps dying young; crashes (a signal other than SIGKILL, a bad exit, a
 * failed load) five times within 60 s mark the pool FAILED. With
 * hot_standby a second worker is kept loaded and takes over at once. */

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
#include "core/spin.h"
#include "session/observe/events.h"
#include "session/isolation/isolation.h"
#include "session/isolation/worker_proto.h"
#include "session/isolation/isolation_impl.h"
#include "session/pool_impl.h"
#include "sip/worker.h"

extern char **environ;

/* ---- worker processes ---- */

static int ms_until(uint64_t at_us) {
  uint64_t now = sip__now_us();
  return at_us <= now ? 0 : (int)((at_us - now + 999) / 1000);
}

/* One request and its answer on a worker's control channel; the answer's
 * length, or -1 with errno ETIMEDOUT when the worker did not answer in
 * time (timeout_ms < 0: waits as long as it lives), ESRCH when it ended. */
ssize_t sip__iso_ctl_call(sip__iso_worker_t *k, const void *msg, size_t len, int fd, void *reply,
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
static int spawn(sip__iso_t *w, sip__iso_worker_t *k) {
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
static int finish_worker(sip__iso_worker_t *k) {
  int st = 0;
  if (k->pid <= 0) return 0;
  kill(k->pid, SIGKILL);
  while (waitpid(k->pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (k->ctl >= 0) close(k->ctl);
  if (k->pidfd >= 0) close(k->pidfd);
  *k = (sip__iso_worker_t){0, -1, -1, 0};
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
static sip_error_t *start_worker(sip__iso_t *w, sip__iso_worker_t *k) {
  if (spawn(w, k) != 0)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start a worker process (%s): %s",
                         w->exe, strerror(errno));
  char *reply = sip__malloc(SIP__WK_MAX_MSG);
  ssize_t n = reply ? sip__iso_ctl_call(k, w->load_msg, w->load_len, -1, reply, SIP__WK_MAX_MSG, -1,
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

static void publish(sip__iso_t *w, const sip__iso_worker_t *k, uint64_t now) {
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
static int ping(sip__iso_worker_t *k) {
  sip__wk_hdr_t h = {SIP__WK_PING, 0}, r;
  ssize_t n = sip__iso_ctl_call(k, &h, sizeof h, -1, &r, sizeof r, PING_TIMEOUT_MS, -1);
  return n < 0 && errno == ETIMEDOUT ? -1 : 0;
}

void sip__iso_kill_for(sip__iso_t *w, sip__iso_worker_t *k, const char *why) {
  if (k->pid <= 0) return;
  w->kill_pid = k->pid;
  snprintf(w->kill_why, sizeof w->kill_why, "%s", why);
  kill(k->pid, SIGKILL);
}

/* Starts a worker with w->mu released; installs it as `slot` (the serving
 * one when `serving`). */
static void start_into(sip__iso_t *w, int serving) {
  sip__iso_worker_t k = {0, -1, -1, 0};
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
    sip__iso_worker_t k = {0, -1, -1, 0};
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
      sip__iso_worker_t k = w->sb;
      w->sb = (sip__iso_worker_t){0, -1, -1, 0};
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
    sip__iso_worker_t *ended[2] = {pf[1].revents && w->act.pid > 0 ? &w->act : NULL,
                          pf[2].revents && w->sb.pid > 0 ? &w->sb : NULL};
    for (int i = 0; i < 2; i++) {
      if (!ended[i]) continue;
      sip__iso_worker_t k = *ended[i];
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
      if (w->act.pid > 0 && ping(&w->act) != 0) sip__iso_kill_for(w, &w->act, why);
      if (w->sb.pid > 0 && ping(&w->sb) != 0) sip__iso_kill_for(w, &w->sb, why);
    }
  }
  pthread_mutex_unlock(&w->mu);
  finish_worker(&w->act);
  finish_worker(&w->sb);
  atomic_store(&p->worker_pid, 0);
  atomic_store(&p->standby_pid, 0);
  return NULL;
}

void sip__iso_model_free(void *model) {
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

int sip__iso_lost(void *ctx) { return ctx && ((sip__iso_sess_t *)ctx)->lost; }

void sip__iso_fault(void *ctx, int kind, int64_t delay_ms) {
  sip__iso_sess_t *s = ctx;
  s->fault = kind;
  s->fault_delay_ms = delay_ms;
}

void sip__iso_kill(sip__iso_t *w, const char *why) {
  pthread_mutex_lock(&w->mu);
  char text[192];
  snprintf(text, sizeof text, "worker killed: %s", why);
  sip__iso_kill_for(w, &w->act, text);
  pthread_mutex_unlock(&w->mu);
}

/* The LOAD message: settings, backend, path, options. */
static int build_load(sip__iso_t *w, const char *path, const sip_kv_t *opts, size_t n_opts) {
  const sip_engine_settings_t *st = w->p->eng->settings;
  size_t len = sizeof(sip__wk_load_t) + strlen(w->real->name) + 1 + (path ? strlen(path) : 0) + 1;
  for (size_t i = 0; i < n_opts; i++) len += strlen(opts[i].key) + strlen(opts[i].value) + 2;
  if (len > SIP__WK_MAX_MSG || n_opts > 64) return -1;
  char *m = sip__calloc(1, len);
  if (!m) return -1;
  sip__wk_load_t *h = (sip__wk_load_t *)m;
  h->op = SIP__WK_LOAD;
  if (st) {
    h->intra_op_threads = st->intra_op_threads;
    h->inter_op_threads = st->inter_op_threads;
    h->allow_spinning = st->allow_spinning;
  }
  h->n_options = (uint32_t)n_opts;
  h->spin_us = (int32_t)w->spin_us;
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
  w->act = w->sb = (sip__iso_worker_t){0, -1, -1, 0};
  int64_t ping_ms = p->cfg->health_check_interval_ms ? p->cfg->health_check_interval_ms
                    : p->cfg->standby_health_ms       ? p->cfg->standby_health_ms
                                                      : DEFAULT_PING_MS;
  w->ping_us = (uint64_t)ping_ms * 1000;
  /* The executors' idle policy on both ends of each session's channel:
   * poll this long, then sleep (docs/availability.md). */
  w->spin_us = sip__wk_spin_us(sip__spin_window_us(p->cfg->idle_spin_us));
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
    sip__iso_model_free(w);
    return e;
  }
  p->iso = w;
  p->iso_vt = sip__iso_forwarding;
  p->iso_vt.name = real->name;
  p->iso_vt.platform = real->platform;
  p->iso_vt.flags = real->flags;
  *model = w;
  return NULL;
}
