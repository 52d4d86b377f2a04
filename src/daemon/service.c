/* sipd's health loop for the service manager (service.h). */
#include "service.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often the health loop looks at the server: while start-up loads run
 * (READY=1 follows their end by at most this), and afterwards (a STATUS
 * line follows a change of readiness by at most this). */
#define LOADING_POLL_US 50000u
#define SERVING_POLL_US 1000000u

struct sipd_service {
  sip_server_t *srv;
  sipd_notify_t *n;
  uint64_t watchdog_half_us; /* 0: no watchdog */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;          /* under mu */
  int ready_sent;    /* READY=1 sent for start-up; under mu */
  int reloading;     /* between RELOADING=1 and its READY=1; under mu */
  int draining;      /* STOPPING=1 sent; under mu */
  char status[512];  /* the last STATUS sent by the loop; under mu */
};

/* What the server says of itself (native INFO "ready"), summarised:
 * *live 1 when it answered, *loading 1 while start-up loads run, and a
 * one-line status. */
static void look(sip_server_t *srv, int *live, int *loading, char *status, size_t cap) {
  *live = 0;
  *loading = 1;
  char *txt = sip_server_info_json(srv, SIP_INFO_READY);
  json_t *root = txt ? json_loads(txt, 0, NULL) : NULL;
  sip_free(txt);
  if (!root) {
    snprintf(status, cap, "not answering its live check");
    return;
  }
  *live = json_is_true(json_object_get(root, "live"));
  *loading = json_is_true(json_object_get(root, "loading"));
  int ready = json_is_true(json_object_get(root, "ready"));
  json_t *pools = json_object_get(root, "pools");
  size_t total = json_object_size(pools), n_ready = 0, n_failed = 0;
  char failed[256] = "";
  const char *name;
  json_t *state;
  json_object_foreach(pools, name, state) {
    const char *st = json_string_value(state);
    if (st && !strcmp(st, "READY")) {
      n_ready++;
    } else if (st && !strcmp(st, "FAILED")) {
      size_t used = strlen(failed);
      if (used + strlen(name) + 3 < sizeof failed)
        snprintf(failed + used, sizeof failed - used, "%s%s", n_failed ? ", " : "", name);
      n_failed++;
    }
  }
  if (sip_server_draining(srv))
    snprintf(status, cap, "draining: %zu of %zu pools READY", n_ready, total);
  else if (*loading)
    snprintf(status, cap, "loading: %zu of %zu pools READY", n_ready, total);
  else if (ready)
    snprintf(status, cap, "ready: %zu of %zu pools READY%s%s", n_ready, total,
             n_failed ? ", FAILED: " : "", failed);
  else
    snprintf(status, cap, "not ready: %zu of %zu pools READY%s%s", n_ready, total,
             n_failed ? ", FAILED: " : "", failed);
  json_decref(root);
}

static void deadline_after(struct timespec *ts, uint64_t us) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  uint64_t ns = (uint64_t)ts->tv_nsec + (us % 1000000u) * 1000u;
  ts->tv_sec += (time_t)(us / 1000000u + ns / 1000000000u);
  ts->tv_nsec = (long)(ns % 1000000000u);
}

static void *health_main(void *arg) {
  sipd_service_t *sv = arg;
  uint64_t next_wd = sipd_notify_now_usec();
  pthread_mutex_lock(&sv->mu);
  while (!sv->stop) {
    pthread_mutex_unlock(&sv->mu);
    int live, loading;
    char status[sizeof sv->status];
    look(sv->srv, &live, &loading, status, sizeof status);
    uint64_t now = sipd_notify_now_usec();
    /* The watchdog is fed only while the server answers its live check:
     * a server that stopped answering is restarted by the manager. */
    if (sv->watchdog_half_us && now >= next_wd) {
      if (live) sipd_notify_send(sv->n, "WATCHDOG=1");
      next_wd = now + sv->watchdog_half_us;
    }
    pthread_mutex_lock(&sv->mu);
    if (!sv->reloading && !sv->draining) {
      if (!sv->ready_sent && !loading) {
        sipd_notify_sendf(sv->n, "READY=1\nSTATUS=%s", status);
        sv->ready_sent = 1;
        snprintf(sv->status, sizeof sv->status, "%s", status);
      } else if (strcmp(status, sv->status) != 0) {
        sipd_notify_sendf(sv->n, "STATUS=%s", status);
        snprintf(sv->status, sizeof sv->status, "%s", status);
      }
    }
    uint64_t wait = sv->ready_sent ? SERVING_POLL_US : LOADING_POLL_US;
    if (sv->watchdog_half_us) {
      uint64_t to_wd = next_wd > now ? next_wd - now : 0;
      if (to_wd < wait) wait = to_wd;
    }
    struct timespec ts;
    deadline_after(&ts, wait);
    if (!sv->stop) pthread_cond_timedwait(&sv->cv, &sv->mu, &ts);
  }
  pthread_mutex_unlock(&sv->mu);
  return NULL;
}

sipd_service_t *sipd_service_start(sip_server_t *srv, sipd_notify_t *n) {
  if (!sipd_notify_enabled(n)) return NULL;
  sipd_service_t *sv = calloc(1, sizeof *sv);
  if (!sv) return NULL;
  sv->srv = srv;
  sv->n = n;
  sv->watchdog_half_us = sipd_notify_watchdog_usec(n) / 2;
  if (sipd_notify_watchdog_usec(n) && !sv->watchdog_half_us) sv->watchdog_half_us = 1;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&sv->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&sv->mu, NULL);
  int live, loading;
  look(srv, &live, &loading, sv->status, sizeof sv->status);
  sipd_notify_sendf(n, "STATUS=%s", sv->status);
  if (pthread_create(&sv->thread, NULL, health_main, sv) != 0) {
    fprintf(stderr, "sipd: cannot start the service health thread: READY=1 is sent now\n");
    sipd_notify_send(n, "READY=1");
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
    return NULL;
  }
  return sv;
}

void sipd_service_reloading(sipd_service_t *sv, const char *config) {
  if (!sv) return;
  pthread_mutex_lock(&sv->mu);
  sv->reloading = 1;
  char status[600];
  snprintf(status, sizeof status, "reloading %s", config);
  sipd_notify_reloading(sv->n, status);
  pthread_mutex_unlock(&sv->mu);
}

void sipd_service_reloaded(sipd_service_t *sv, const char *refused) {
  if (!sv) return;
  int live, loading;
  char status[sizeof sv->status];
  look(sv->srv, &live, &loading, status, sizeof status);
  char why[256] = "";
  if (refused) { /* one line: a newline would end the STATUS= assignment */
    snprintf(why, sizeof why, "%s", refused);
    for (char *p = why; *p; p++)
      if (*p == '\n' || *p == '\r') *p = ' ';
  }
  pthread_mutex_lock(&sv->mu);
  if (refused)
    sipd_notify_sendf(sv->n, "READY=1\nSTATUS=reload refused (%s); %s", why, status);
  else
    sipd_notify_sendf(sv->n, "READY=1\nSTATUS=reloaded; %s", status);
  /* The loop's next STATUS is a change from here. */
  snprintf(sv->status, sizeof sv->status, "%s", status);
  sv->reloading = 0;
  sv->ready_sent = 1;
  pthread_mutex_unlock(&sv->mu);
}

void sipd_service_stopping(sipd_service_t *sv, const char *signal_name) {
  if (!sv) return;
  pthread_mutex_lock(&sv->mu);
  sv->draining = 1;
  sipd_notify_sendf(sv->n, "STOPPING=1\nSTATUS=%s received, draining", signal_name);
  pthread_mutex_unlock(&sv->mu);
}

void sipd_service_stop(sipd_service_t *sv) {
  if (!sv) return;
  pthread_mutex_lock(&sv->mu);
  sv->stop = 1;
  pthread_cond_signal(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
  pthread_join(sv->thread, NULL);
  pthread_cond_destroy(&sv->cv);
  pthread_mutex_destroy(&sv->mu);
  free(sv);
}
