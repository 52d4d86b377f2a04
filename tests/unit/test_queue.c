/* Unit tests for src/core/queue.h, the intrusive FIFO behind the pools'
 * priority queues, the pipeline workers' jobs, the repository loader's
 * operations and the arbiter's waiters: arrival order, removal from the
 * head, the middle and the tail, counts, and reuse of removed elements. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/queue.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty),
      cmocka_unit_test(test_fifo_order),
      cmocka_unit_test(test_remove_middle_head_tail),
      cmocka_unit_test(test_reuse_after_remove),
      cmocka_unit_test(test_two_queues),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
