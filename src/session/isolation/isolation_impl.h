/* sip — process isolation, the server's side: what the supervisor
 * (isolation.c) and the forwarding backend (isolation_exec.c) share. */
#ifndef SIP_SESSION_ISOLATION_IMPL_H
#define SIP_SESSION_ISOLATION_IMPL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "session/isolation/isolation.h"
#include "session/isolation/worker_proto.h"

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

typedef struct sip__iso_worker {
  pid_t pid; /* 0: none */
  int pidfd, ctl;
  uint64_t started_us;
} sip__iso_worker_t;

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
  sip__iso_worker_t act, sb;  /* the serving worker and the standby */
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
  int64_t spin_us; /* both ends of a session's channel poll this long before sleeping */
};

typedef struct sip__iso_region {
  atomic_long refs; /* the session's + one per answer viewing it */
  int fd;
  void *base;
  size_t size;
  uint64_t sent_gen; /* the worker generation that has its fd */
} sip__iso_region_t;

typedef struct sip__iso_sess {
  sip__iso_t *w;
  uint32_t id;
  int sock; /* -1: not bound */
  uint64_t gen;
  sip__iso_region_t *reg[SIP__WK_MAX_REGIONS];
  int lost;
  int fault;
  int64_t fault_delay_ms;
} sip__iso_sess_t;

/* isolation.c: one request and its answer on a worker's control channel;
 * the answer's length, or -1 with errno ETIMEDOUT when the worker did not
 * answer in time (timeout_ms < 0: waits as long as it lives), ESRCH when it
 * ended, ECANCELED when stop_fd became readable. */
ssize_t sip__iso_ctl_call(sip__iso_worker_t *k, const void *msg, size_t len, int fd, void *reply, size_t cap,
                 int timeout_ms, int stop_fd);
/* Kills worker k (w->mu held), noting why for the pool's events. */
void sip__iso_kill_for(sip__iso_t *w, sip__iso_worker_t *k, const char *why);
/* Stops the supervisor, ends the workers and frees w (the backend's sip__iso_model_free). */
void sip__iso_model_free(void *model);

/* isolation_exec.c: the backend vtable that forwards to the worker. */
extern const sip_backend_vtable_t sip__iso_forwarding;

#endif
