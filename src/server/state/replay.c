/* sip — answers given without running a model (a kept idempotency answer,
 * a response cache hit) are queued here and delivered by the housekeeping
 * thread, never inside the call that submitted the request. */
#include "core/core.h"
#include "server/server_impl.h"

struct sip__replay {
  sip_infer_done_fn done;
  void *user;
  sip_response_t *resp;
  struct sip__replay *next;
};

/* Queues a kept answer for the housekeeping thread to deliver. */
void sip__server_queue_replay(sip_server_t *s, sip_infer_done_fn done, void *user,
                              sip_response_t *resp) {
  struct sip__replay *rp = sip__malloc(sizeof *rp);
  if (!rp) { /* out of memory: answer here rather than never */
    done(resp, user);
    return;
  }
  *rp = (struct sip__replay){done, user, resp, NULL};
  pthread_mutex_lock(&s->hk_mu);
  struct sip__replay **tail = s->replays ? s->replays_tail : &s->replays;
  *tail = rp;
  s->replays_tail = &rp->next;
  s->replaying++;
  pthread_cond_signal(&s->hk_cv);
  pthread_mutex_unlock(&s->hk_mu);
}

/* With hk_mu held: delivers what is queued (unlocking meanwhile). */
void sip__server_deliver_replays(sip_server_t *s) {
  while (s->replays) {
    struct sip__replay *rp = s->replays;
    s->replays = NULL;
    pthread_mutex_unlock(&s->hk_mu);
    size_t n = 0;
    for (struct sip__replay *next; rp; rp = next, n++) {
      next = rp->next;
      rp->done(rp->resp, rp->user);
      sip__free(rp);
    }
    pthread_mutex_lock(&s->hk_mu);
    s->replaying -= n;
    pthread_cond_broadcast(&s->idem_cv);
  }
}

