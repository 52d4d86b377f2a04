/* sip — process isolation of a pool (isolation: process;
 * docs/availability.md). The pool's backend becomes a forwarding backend
 * whose model is a supervised worker process (src/session/isolation/worker.c) and
 * whose sessions are channels to session contexts there; the rest of the
 * engine (batching, scheduling, failover, events) sees an ordinary
 * backend. */
#ifndef SIP_SESSION_ISOLATION_H
#define SIP_SESSION_ISOLATION_H

#include <sys/types.h>

#include "session/engine.h"

typedef struct sip__iso sip__iso_t;

/* Starts the worker of `p` and loads the model there with backend `real`
 * (path and options as the pool's load passes them); blocks until it is
 * loaded. On success *model is the worker's handle (its sip__iso_t) and
 * p->iso_vt the forwarding vtable to use as p->backend; on failure nothing
 * is left running. */
sip_error_t *sip__iso_load(sip__pool_t *p, const sip_backend_vtable_t *real, const char *path,
                           const sip_kv_t *opts, size_t n_opts, void **model);
/* 1 when the last execution of session context `ctx` failed because its
 * worker process ended (a session failure: failed over, never the
 * request's fault). */
int sip__iso_lost(void *ctx);
/* Makes the next execution of `ctx` take an injected fault in the worker
 * (sip__fault_kind_t; a crash there ends the worker process). */
void sip__iso_fault(void *ctx, int kind, int64_t delay_ms);
/* Kills the worker (SIGKILL) for `why` ("session p/0 hung for 412 ms");
 * the supervisor restarts it. */
void sip__iso_kill(sip__iso_t *w, const char *why);

/* Messages with at most one file descriptor on a SOCK_SEQPACKET socket
 * (worker.c). send: 0 or -1. recv: the length, 0 at EOF, -1 on error;
 * *fd a received descriptor (close-on-exec) or -1; polls for up to
 * spin_us microseconds before it sleeps. */
int sip__wk_send(int sock, const void *msg, size_t len, int fd);
ssize_t sip__wk_recv(int sock, void *buf, size_t cap, int *fd, int64_t spin_us);
/* How long a channel is polled before sleeping: `pool_us` (the pool's
 * idle_spin_us window) unless SIP_WORKER_SPIN_US (0..1000 microseconds)
 * overrides it. */
int64_t sip__wk_spin_us(int64_t pool_us);
/* 1 once this program called sip_worker_main (it can run as a worker). */
int sip__wk_program_ok(void);
/* The bytes output `d` takes when its dims are fixed, or only dim 0 is
 * dynamic and taken as `rows` (> 0); 0 when not known before running. */
size_t sip__wk_out_bytes(const sip_io_desc_t *d, int64_t rows);

#endif
