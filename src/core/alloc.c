/* sip — the one allocation wrapper (so tests can fail the Nth allocation). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* < 0: never fail. Otherwise the number of allocations still allowed. */
static atomic_long fail_countdown = -1;

static int should_fail(void) {
  long v = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
  if (v < 0) return 0;
  while (v > 0) {
    if (atomic_compare_exchange_weak(&fail_countdown, &v, v - 1)) return 0;
    if (v < 0) return 0;
  }
  return 1;
}

void sip__alloc_fail_after(long n) { atomic_store(&fail_countdown, n); }

void *sip__malloc(size_t n) { return should_fail() ? NULL : malloc(n ? n : 1); }

void *sip__calloc(size_t count, size_t size) {
  if (should_fail()) return NULL;
  return calloc(count ? count : 1, size ? size : 1);
}

void *sip__realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n ? n : 1); }

void *sip__reallocarray(void *p, size_t count, size_t size) {
  if (size && count > SIZE_MAX / size) return NULL;
  return sip__realloc(p, count * size);
}

char *sip__strdup(const char *s) {
  if (!s) return NULL;
  return sip__strndup(s, strlen(s));
}

char *sip__strndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *d = sip__malloc(len + 1);
  if (!d) return NULL;
  memcpy(d, s, len);
  d[len] = '\0';
  return d;
}

void sip__free(void *p) { free(p); }

char *sip__asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *s = sip__malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}
