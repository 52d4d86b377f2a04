/* sip — alert webhooks: JSON bodies POSTed to the URLs of alerts.webhooks
 * (docs/sla.md), each URL with a delivery thread and a bounded queue of its
 * own, so a dead or slow receiver delays nothing but its own deliveries. */
#ifndef SIP_SERVER_WEBHOOK_H
#define SIP_SERVER_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

typedef struct sip__webhooks sip__webhooks_t;

/* Starts a delivery thread per URL of `a` (copied). NULL when there are no
 * URLs, or when out of memory or threads (logged: alerts then go to the
 * log and the event stream only). */
sip__webhooks_t *sip__webhooks_new(const sip__alerts_config_t *a);
/* Stops the threads and frees everything. Alerts still queued get one
 * attempt each, all of them within min(timeout_ms, 2 s); what is left is
 * dropped. NULL is a no-op. */
void sip__webhooks_free(sip__webhooks_t *w);
/* Queues `body` (a JSON document, copied) for every URL. Never blocks:
 * one short lock per URL; a full queue drops the body and counts it. */
void sip__webhooks_post(sip__webhooks_t *w, const char *body);

typedef struct sip__webhook_stats {
  uint64_t delivered; /* answered 2xx */
  uint64_t failed;    /* every attempt failed */
  uint64_t dropped;   /* not attempted: queue full, or left at shutdown */
  uint64_t attempts;  /* POSTs made, retries included */
  uint64_t queued;    /* waiting now (the one being delivered included) */
} sip__webhook_stats_t;
/* Number of URLs (0 for NULL), and the i-th URL with its counters. */
size_t sip__webhooks_count(const sip__webhooks_t *w);
const char *sip__webhooks_read(sip__webhooks_t *w, size_t i, sip__webhook_stats_t *out);

#endif
