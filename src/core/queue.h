/* sip — one intrusive FIFO for every hand-written queue of the engine.
 *
 * The queue lives in a container struct (SIP__FIFO_FIELDS: head, tail and
 * count) and its elements carry the links themselves (SIP__FIFO_LINK: next
 * and prev), so pushing and removing never allocate and an element can
 * leave from anywhere in O(1) (a cancelled request, a ticket taken out of
 * line). SIP__FIFO_DEFINE(prefix, container, elem) generates, for a
 * container type and an element type:
 *
 *   void  prefix_init(container *q)             empty queue
 *   void  prefix_push(container *q, elem *e)    append at the tail
 *   elem *prefix_pop(container *q)              take the head; NULL when empty
 *   void  prefix_remove(container *q, elem *e)  take e, which is in q
 *
 * An element is in at most one queue of a given link at a time; once out,
 * its next and prev are NULL (free for other uses). No locking: callers
 * hold whatever guards the container.
 */
#ifndef SIP_CORE_QUEUE_H
#define SIP_CORE_QUEUE_H

#include <stddef.h>

#define SIP__FIFO_FIELDS(elem) \
  elem *head, *tail;           \
  size_t count

#define SIP__FIFO_LINK(elem) elem *next, *prev

#define SIP__FIFO_DEFINE(prefix, container, elem)                                          \
  static inline __attribute__((unused)) void prefix##_init(container *q) {                 \
    q->head = q->tail = NULL;                                                               \
    q->count = 0;                                                                           \
  }                                                                                         \
  static inline __attribute__((unused)) void prefix##_push(container *q, elem *e) {        \
    e->next = NULL;                                                                         \
    e->prev = q->tail;                                                                      \
    if (q->tail)                                                                            \
      q->tail->next = e;                                                                    \
    else                                                                                    \
      q->head = e;                                                                          \
    q->tail = e;                                                                            \
    q->count++;                                                                             \
  }                                                                                         \
  static inline __attribute__((unused)) void prefix##_remove(container *q, elem *e) {      \
    if (e->prev)                                                                            \
      e->prev->next = e->next;                                                              \
    else                                                                                    \
      q->head = e->next;                                                                    \
    if (e->next)                                                                            \
      e->next->prev = e->prev;                                                              \
    else                                                                                    \
      q->tail = e->prev;                                                                    \
    e->next = e->prev = NULL;                                                               \
    q->count--;                                                                             \
  }                                                                                         \
  static inline __attribute__((unused)) elem *prefix##_pop(container *q) {                 \
    elem *e = q->head;                                                                      \
    if (e) prefix##_remove(q, e);                                                           \
    return e;                                                                               \
  }

#endif
