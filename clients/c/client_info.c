/* sip — libsipclient: the calls answered by one INFO_RESPONSE (server,
 * pool and model information, the repository, admin requests, the bearer
 * token). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/core.h"
#include "sip/client.h"
#include "transport/frame.h"
#include "client_impl.h"

static void sync_info_done(char *json, sip_error_t *e, void *user) {
  sip__client_waiter_t *w = user;
  w->json = json;
  w->err = e;
  sip__client_signal_done(w);
}


/* Sends it and waits for its INFO_RESPONSE. */
sip_error_t *sip__client_info_call(sip_client_t *c, const sip__client_info_msg_t *m, char **json) {
  sip__client_pending_t *p = sip__calloc(1, sizeof *p);
  if (!p) return SIP__OOM();
  sip__client_waiter_t w = {.done = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  p->id = atomic_fetch_add(&c->next_id, 1);
  p->is_info = 1;
  p->info_done = sync_info_done;
  p->user = &w;
  sip__wbuf_t wb = {0};
  if (m->shm_type == SIP__MSG_SHM_REGISTER)
    sip__encode_shm_register(&wb, p->id, m->name, 0, m->byte_size);
  else if (m->shm_type)
    sip__encode_shm_name(&wb, m->shm_type, p->id, m->name);
  else if (m->repo)
    sip__encode_repo_request(&wb, p->id, m->repo, strlen(m->repo));
  else if (m->admin)
    sip__encode_json_request(&wb, SIP__MSG_ADMIN_REQUEST, p->id, m->admin, strlen(m->admin));
  else if (m->auth)
    sip__encode_json_request(&wb, SIP__MSG_AUTH, p->id, m->auth, strlen(m->auth));
  else
    sip__encode_info_request(&wb, p->id, (uint8_t)m->kind);
  sip_error_t *e = sip__client_send_frame(c, p, &wb, m->shm_type == SIP__MSG_SHM_REGISTER ? m->fd : -1);
  if (e) {
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return e;
  }
  sip__client_wait_done(&w);
  *json = w.json;
  return w.err;
}

sip_error_t *sip_client_info(sip_client_t *c, int kind, char **json) {
  *json = NULL;
  if (kind < 1 || kind > 3)
    return sip_error_new(SIP_INVALID_ARGUMENT, "info kind %d; expected 1..3", kind);
  return sip__client_info_call(c, &(sip__client_info_msg_t){.kind = kind}, json);
}

sip_error_t *sip_client_repository(sip_client_t *c, const char *request, char **json) {
  *json = NULL;
  if (!request) return sip_error_new(SIP_INVALID_ARGUMENT, "repository request is NULL");
  return sip__client_info_call(c, &(sip__client_info_msg_t){.repo = request}, json);
}

sip_error_t *sip_client_admin(sip_client_t *c, const char *request, char **json) {
  *json = NULL;
  if (!request) return sip_error_new(SIP_INVALID_ARGUMENT, "admin request is NULL");
  return sip__client_info_call(c, &(sip__client_info_msg_t){.admin = request}, json);
}

sip_error_t *sip_client_authenticate(sip_client_t *c, const char *token, char **json) {
  *json = NULL;
  if (!token || !*token) return sip_error_new(SIP_INVALID_ARGUMENT, "token is NULL or empty");
  char *copy = sip__strdup(token);
  if (!copy) return SIP__OOM();
  sip_error_t *e = sip__client_info_call(c, &(sip__client_info_msg_t){.auth = token}, json);
  pthread_mutex_lock(&c->wmu);
  char *old = c->token;
  c->token = e ? NULL : copy; /* kept only when the server took it */
  pthread_mutex_unlock(&c->wmu);
  sip__client_wipe_free(old);
  if (e) sip__client_wipe_free(copy);
  return e;
}

void sip_client_free_string(char *s) { sip__free(s); }

