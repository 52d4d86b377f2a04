/* What sipd tells its service manager, and when (docs/deploy.md): a health
 * thread sends READY=1 once start-up loading is over, a STATUS= line
 * whenever readiness changes, and WATCHDOG=1 every half watchdog period
 * while the server answers its live check; the signal thread reports
 * reloads (RELOADING=1 ... READY=1) and the drain (STOPPING=1). Outside a
 * service manager (no $NOTIFY_SOCKET) nothing is sent and no thread runs. */
#ifndef SIP_DAEMON_SERVICE_H
#define SIP_DAEMON_SERVICE_H

#include "notify.h"
#include "sip/sip.h"

typedef struct sipd_service sipd_service_t;

/* Starts reporting on `srv` through `n` (both borrowed; they must outlive
 * the service). Returns an owned service (sipd_service_stop), NULL when
 * notification is off or out of memory (every call below accepts NULL). */
sipd_service_t *sipd_service_start(sip_server_t *srv, sipd_notify_t *n);

/* SIGHUP taken: RELOADING=1 with MONOTONIC_USEC and a STATUS naming
 * `config` (borrowed). */
void sipd_service_reloading(sipd_service_t *sv, const char *config);
/* The reload is over: READY=1 and a STATUS saying whether it applied
 * (`refused`: the reason, borrowed; NULL when it applied). */
void sipd_service_reloaded(sipd_service_t *sv, const char *refused);
/* The drain begins: STOPPING=1 and a STATUS naming `signal_name`. */
void sipd_service_stopping(sipd_service_t *sv, const char *signal_name);
/* Ends the health thread and frees the service. NULL is a no-op. */
void sipd_service_stop(sipd_service_t *sv);

#endif
