/* sip — the session state machine (the seeds' INIT → READY ⇄ RUNNING,
 * SUSPENDED, FAILED, DESTROYED). Transitions are checked against one table
 * so an illegal move is refused instead of silently corrupting state. */
#include "core/core.h"
#include "session/engine.h"
#include "session/observe/events.h"
#include "session/pool_impl.h"

static const char *state_names[SIP__SESSION_STATES_] = {"INIT",      "READY",  "RUNNING",
                                                       "SUSPENDED", "FAILED", "DESTROYED"};

/* allowed[from] is a bit set of legal targets. */
#define B(s) (1u << (s))
static const unsigned allowed[SIP__SESSION_STATES_] = {
    [SIP__SESSION_INIT] = B(SIP__SESSION_READY) | B(SIP__SESSION_FAILED) | B(SIP__SESSION_DESTROYED),
    [SIP__SESSION_READY] = B(SIP__SESSION_RUNNING) | B(SIP__SESSION_SUSPENDED) |
                          B(SIP__SESSION_FAILED) | B(SIP__SESSION_DESTROYED),
    [SIP__SESSION_RUNNING] = B(SIP__SESSION_READY) | B(SIP__SESSION_FAILED),
    [SIP__SESSION_SUSPENDED] = B(SIP__SESSION_READY) | B(SIP__SESSION_FAILED) |
                              B(SIP__SESSION_DESTROYED),
    [SIP__SESSION_FAILED] = B(SIP__SESSION_INIT) | B(SIP__SESSION_DESTROYED),
    [SIP__SESSION_DESTROYED] = 0,
};
#undef B

const char *sip__session_state_name(sip__session_state_t s) {
  return (unsigned)s < SIP__SESSION_STATES_ ? state_names[s] : "UNKNOWN";
}

int sip__session_transition_ok(sip__session_state_t from, sip__session_state_t to) {
  if ((unsigned)from >= SIP__SESSION_STATES_ || (unsigned)to >= SIP__SESSION_STATES_) return 0;
  return (allowed[from] >> to) & 1u;
}

int sip__session_set_state(sip__session_t *s, sip__session_state_t to) {
  int from = atomic_load(&s->state);
  do {
    if (!sip__session_transition_ok((sip__session_state_t)from, to)) {
      sip__log(SIP__LOG_ERROR, "illegal session transition", "session=%s from=%s to=%s", s->id,
               sip__session_state_name((sip__session_state_t)from), sip__session_state_name(to));
      return 0;
    }
  } while (!atomic_compare_exchange_weak(&s->state, &from, (int)to));
  atomic_store(&s->since_us, sip__wall_us());
  sip__events_state(s, from, (int)to);
  return 1;
}
