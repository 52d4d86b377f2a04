/* Unit tests for src/core/queue.h, the intrusive FIFO behind the pools'
 * priority queues, the pipeline workers' jobs, the repository loader's
 * operations and the arbiter's waiters: arrival order, removal from the
 * head, the middle and the tail, counts, and reuse of removed elements;
 * and for src/sched/queue.c, the pools' priority queues: the best level
 * first, then the oldest, ageing, the delayed queue last, counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/queue.h"
#include "sched/queue.h"

typedef struct item {
  int id;
  SIP__FIFO_LINK(struct item);
} item_t;

typedef struct box {
  int other; /* the queue shares its container with other fields */
  SIP__FIFO_FIELDS(item_t);
} box_t;

SIP__FIFO_DEFINE(box, box_t, item_t)

/* The queue's ids head to tail, checking the back links on the way. */
static size_t ids(const box_t *q, int *out, size_t cap) {
  size_t n = 0;
  const item_t *prev = NULL;
  for (const item_t *e = q->head; e; e = e->next) {
    assert_ptr_equal(e->prev, prev);
    assert_true(n < cap);
    out[n++] = e->id;
    prev = e;
  }
  assert_ptr_equal(q->tail, prev);
  assert_int_equal(n, q->count);
  return n;
}

static void fill(box_t *q, item_t *it, int n) {
  box_init(q);
  for (int i = 0; i < n; i++) {
    it[i].id = i;
    box_push(q, &it[i]);
  }
}

static void expect(const box_t *q, const int *want, size_t n) {
  int got[16];
  assert_int_equal(ids(q, got, 16), n);
  for (size_t i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

static void test_empty(void **state) {
  (void)state;
  box_t q = {.other = 7};
  box_init(&q);
  assert_null(q.head);
  assert_null(q.tail);
  assert_int_equal(q.count, 0);
  assert_null(box_pop(&q));
  assert_int_equal(q.other, 7);
}

static void test_fifo_order(void **state) {
  (void)state;
  box_t q;
  item_t it[5];
  fill(&q, it, 5);
  expect(&q, (int[]){0, 1, 2, 3, 4}, 5);
  for (int i = 0; i < 5; i++) {
    item_t *e = box_pop(&q);
    assert_non_null(e);
    assert_int_equal(e->id, i);
    assert_null(e->next);
    assert_null(e->prev);
    assert_int_equal(q.count, (size_t)(4 - i));
  }
  assert_null(box_pop(&q));
  assert_null(q.head);
  assert_null(q.tail);
}

static void test_remove_middle_head_tail(void **state) {
  (void)state;
  box_t q;
  item_t it[5];
  fill(&q, it, 5);
  box_remove(&q, &it[2]); /* middle */
  expect(&q, (int[]){0, 1, 3, 4}, 4);
  assert_null(it[2].next);
  assert_null(it[2].prev);
  box_remove(&q, &it[0]); /* head */
  expect(&q, (int[]){1, 3, 4}, 3);
  box_remove(&q, &it[4]); /* tail */
  expect(&q, (int[]){1, 3}, 2);
  box_remove(&q, &it[3]);
  box_remove(&q, &it[1]); /* the last one */
  expect(&q, NULL, 0);
  assert_null(q.head);
  assert_null(q.tail);
}

static void test_reuse_after_remove(void **state) {
  (void)state;
  box_t q;
  item_t it[3];
  fill(&q, it, 3);
  box_remove(&q, &it[0]);
  box_push(&q, &it[0]); /* back in line, now last */
  expect(&q, (int[]){1, 2, 0}, 3);
  item_t *e = box_pop(&q);
  assert_int_equal(e->id, 1);
  box_push(&q, e);
  expect(&q, (int[]){2, 0, 1}, 3);
}

static void test_two_queues(void **state) {
  (void)state;
  box_t a, b;
  item_t it[4];
  fill(&a, it, 4);
  box_init(&b);
  /* Moving elements from one queue to another, as a pool moves expired
   * requests to its delayed queue. */
  box_remove(&a, &it[1]);
  box_push(&b, &it[1]);
  box_remove(&a, &it[3]);
  box_push(&b, &it[3]);
  expect(&a, (int[]){0, 2}, 2);
  expect(&b, (int[]){1, 3}, 2);
}

/* ---- src/sched/queue.c ---- */

static void item(sip__sched_item_t *it, int level, uint64_t arrival_us) {
  it->level = level;
  it->arrival_us = arrival_us;
}

static void test_sched_level_then_oldest(void **state) {
  (void)state;
  sip__sched_queue_t sq;
  sip__sched_queue_init(&sq);
  sip__sched_item_t low, med_old, med_new, high;
  item(&low, SIP__PRIO_LOW, 10);
  item(&med_new, SIP__PRIO_MEDIUM, 40);
  item(&high, SIP__PRIO_HIGH, 30);
  item(&med_old, SIP__PRIO_MEDIUM, 20);
  sip__sched_push(&sq, low.level, &low);
  sip__sched_push(&sq, med_old.level, &med_old);
  sip__sched_push(&sq, med_new.level, &med_new);
  sip__sched_push(&sq, high.level, &high);
  assert_int_equal(sip__sched_count(&sq), 4);
  assert_int_equal(atomic_load(&sq.n), 4);
  /* No ageing: strictly by level, FIFO within a level. */
  assert_ptr_equal(sip__sched_pop(&sq, 50, 0), &high);
  assert_ptr_equal(sip__sched_pop(&sq, 50, 0), &med_old);
  assert_ptr_equal(sip__sched_pop(&sq, 50, 0), &med_new);
  assert_ptr_equal(sip__sched_pop(&sq, 50, 0), &low);
  assert_null(sip__sched_pop(&sq, 50, 0));
  assert_int_equal(sip__sched_count(&sq), 0);
  assert_int_equal(atomic_load(&sq.n), 0);
}

static void test_sched_ageing(void **state) {
  (void)state;
  sip__sched_queue_t sq;
  sip__sched_queue_init(&sq);
  sip__sched_item_t low, high;
  item(&low, SIP__PRIO_LOW, 0);      /* waited 2 ageing steps at t=200: effective 0 */
  item(&high, SIP__PRIO_HIGH, 150);  /* level 0, but arrived later */
  sip__sched_push(&sq, low.level, &low);
  sip__sched_push(&sq, high.level, &high);
  assert_int_equal(sip__sched_effective_level(&low, 0, 100), SIP__PRIO_LOW);
  assert_int_equal(sip__sched_effective_level(&low, 100, 100), SIP__PRIO_LOW - 1);
  assert_int_equal(sip__sched_effective_level(&low, 200, 100), 0);
  assert_int_equal(sip__sched_effective_level(&low, 10000, 100), 0);
  assert_int_equal(sip__sched_effective_level(&low, 10000, 0), SIP__PRIO_LOW);
  /* At t=150 the low request has aged one level only: high wins. */
  assert_ptr_equal(sip__sched_pop(&sq, 150, 100), &high);
  sip__sched_push(&sq, high.level, &high);
  /* At t=200 both are level 0: the older wins. */
  assert_ptr_equal(sip__sched_pop(&sq, 200, 100), &low);
  assert_ptr_equal(sip__sched_pop(&sq, 200, 100), &high);
}

static void test_sched_delayed_last_and_remove(void **state) {
  (void)state;
  sip__sched_queue_t sq;
  sip__sched_queue_init(&sq);
  sip__sched_item_t late, a, b, c;
  item(&late, SIP__PRIO_HIGH, 0); /* the oldest, but delayed */
  item(&a, SIP__PRIO_LOW, 10);
  item(&b, SIP__PRIO_LOW, 20);
  item(&c, SIP__PRIO_LOW, 30);
  sip__sched_push(&sq, SIP__SCHED_DELAYED, &late);
  sip__sched_push(&sq, a.level, &a);
  sip__sched_push(&sq, b.level, &b);
  sip__sched_push(&sq, c.level, &c);
  sip__sched_remove(&sq, b.level, &b); /* taken into a batch, or cancelled */
  assert_int_equal(sip__sched_count(&sq), 3);
  assert_int_equal(sq.q[SIP__PRIO_LOW].count, 2);
  assert_ptr_equal(sip__sched_pop(&sq, 100, 0), &a);
  assert_ptr_equal(sip__sched_pop(&sq, 100, 0), &c);
  assert_ptr_equal(sip__sched_pop(&sq, 100, 0), &late);
  assert_null(sip__sched_pop(&sq, 100, 0));
  assert_int_equal(atomic_load(&sq.n), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty),
      cmocka_unit_test(test_fifo_order),
      cmocka_unit_test(test_remove_middle_head_tail),
      cmocka_unit_test(test_reuse_after_remove),
      cmocka_unit_test(test_two_queues),
      cmocka_unit_test(test_sched_level_then_oldest),
      cmocka_unit_test(test_sched_ageing),
      cmocka_unit_test(test_sched_delayed_last_and_remove),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
