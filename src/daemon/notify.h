/* sipd's side of systemd's service notification protocol (sd_notify(3)),
 * spoken directly: each message is one datagram of "KEY=VALUE" lines sent
 * to the unix socket named by $NOTIFY_SOCKET (a path, or "@name" for the
 * abstract namespace). No libsystemd is needed. Without $NOTIFY_SOCKET
 * every call is a no-op, so sipd behaves the same outside systemd. */
#ifndef SIP_DAEMON_NOTIFY_H
#define SIP_DAEMON_NOTIFY_H

#include <stdint.h>

typedef struct sipd_notify sipd_notify_t;

/* Reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID and removes them
 * from the environment (so that process-isolated workers, which are sipd run
 * again, do not speak for the service). Returns an owned notifier (free with
 * sipd_notify_free), never NULL: a missing or unusable socket gives a
 * notifier whose sends do nothing; a bad variable is reported on stderr
 * with what was expected. */
sipd_notify_t *sipd_notify_open(void);
void sipd_notify_free(sipd_notify_t *n);

/* 1 when $NOTIFY_SOCKET named a socket this process can send to. */
int sipd_notify_enabled(const sipd_notify_t *n);

/* Sends `text` (borrowed; "KEY=VALUE" lines separated by '\n') as one
 * datagram. Returns 0 on success or when disabled, -1 when the send failed
 * (reported on stderr once). */
int sipd_notify_send(sipd_notify_t *n, const char *text);

/* printf-style sipd_notify_send. */
int sipd_notify_sendf(sipd_notify_t *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "RELOADING=1\nMONOTONIC_USEC=<now>\nSTATUS=<status>": the form systemd
 * 253 and later expect for Type=notify-reload, accepted by older ones. */
int sipd_notify_reloading(sipd_notify_t *n, const char *status);

/* The watchdog period the service manager asked for ($WATCHDOG_USEC, for
 * this process per $WATCHDOG_PID), 0 when none: WATCHDOG=1 is due every
 * half of it. */
uint64_t sipd_notify_watchdog_usec(const sipd_notify_t *n);

/* CLOCK_MONOTONIC in microseconds. */
uint64_t sipd_notify_now_usec(void);

#endif
