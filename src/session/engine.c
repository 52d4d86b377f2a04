/* sip — the engine a server runs: registry, backends' process state,
 * execution-slot arbiter (src/session/engine.h). */
#include "core/core.h"
#include "session/engine.h"
#include "session/registry.h"
#include "session/observe/events.h"

void sip__engine_init(sip__engine_t *e, const sip_engine_settings_t *settings, int slots,
                      void (*note_deadline)(void *, uint64_t), void *note_ctx) {
  e->settings = settings;
  e->note_deadline = note_deadline;
  e->note_ctx = note_ctx;
  sip__arbiter_init(&e->arbiter, slots);
  pthread_mutex_init(&e->backend_mu, NULL);
  sip__store_init(&e->store);
  sip__registry_init(e);
  e->registry_inited = 1;
  e->events = sip__event_bus_new();
}

void sip__engine_destroy(sip__engine_t *e) {
  if (!e->registry_inited) return; /* never set up */
  sip__registry_destroy(e);
  sip__store_destroy(&e->store); /* every pool was freed: its entries were released */
  for (size_t i = 0; i < e->n_backends; i++)
    if (e->backends[i].inited && e->backends[i].vt->shutdown)
      e->backends[i].vt->shutdown(e->backends[i].state);
  pthread_mutex_destroy(&e->backend_mu);
  sip__arbiter_destroy(&e->arbiter);
  e->registry_inited = 0;
  sip__event_bus_free(e->events);
  e->events = NULL;
}

sip_error_t *sip__engine_backend_state(sip__engine_t *e, const sip_backend_vtable_t *vt,
                                       void **state) {
  sip_error_t *err = NULL;
  pthread_mutex_lock(&e->backend_mu);
  size_t i = 0;
  while (i < e->n_backends && e->backends[i].vt != vt) i++;
  if (i == e->n_backends) {
    if (i == SIP__MAX_BACKENDS) {
      pthread_mutex_unlock(&e->backend_mu);
      return sip_error_new(SIP_RESOURCE_EXHAUSTED, "%d backends are in use; at most %d are "
                           "supported", SIP__MAX_BACKENDS, SIP__MAX_BACKENDS);
    }
    e->backends[i].vt = vt;
    e->n_backends++;
  }
  if (!e->backends[i].inited) {
    if (vt->init) err = vt->init(e->settings, &e->backends[i].state);
    if (!err) e->backends[i].inited = 1;
  }
  *state = e->backends[i].state;
  pthread_mutex_unlock(&e->backend_mu);
  return err;
}
