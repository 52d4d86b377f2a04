/* libFuzzer target for the pipeline condition language (src/ops/expr.c).
 *
 * Parses the input (as a NUL-terminated copy) and, when it parses, evaluates
 * it twice against a fixed set of tensors (every kind evaluation must cope
 * with: empty, scalar, string, NaN, bool, float16, too few bytes, and names
 * that are missing). Beyond "no crash, no leak", it checks the contract:
 * exactly one of error and expression, parse errors are INVALID_ARGUMENT
 * with a located message, references are distinct "stage.output" strings,
 * evaluation gives 0 or 1 or a FAILED_PRECONDITION error, and gives the same
 * answer twice.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/expr.h"

#define CHECK(cond) \
  do {              \
    if (!(cond)) abort(); \
  } while (0)

static const float f3[3] = {0.25f, 0.75f, 1.0f};
static const float fnan[2] = {NAN, 1.0f};
static const int64_t i4[4] = {0, 1, 2, 3};
static const uint8_t b2[2] = {1, 0};
static const uint16_t h1 = 0x3C00; /* 1.0 */
static const uint8_t str[5] = {1, 0, 0, 0, 'x'};

#define T(dt, rk, ptr, nb, ...) {.name = (char *)"t", .dtype = dt, .rank = rk, .dims = {__VA_ARGS__}, .data = ptr, .nbytes = nb}

static const struct {
  const char *stage, *output;
  sip_tensor_t t;
} tensors[] = {
    {"a", "x", T(SIP_DTYPE_FLOAT32, 2, f3, sizeof f3, 1, 3)},
    {"a", "e", T(SIP_DTYPE_FLOAT32, 2, NULL, 0, 0, 4)},
    {"a", "s", T(SIP_DTYPE_FLOAT16, 0, &h1, 2, 0)},
    {"a", "n", T(SIP_DTYPE_FLOAT32, 1, fnan, sizeof fnan, 2)},
    {"b", "i", T(SIP_DTYPE_INT64, 2, i4, sizeof i4, 2, 2)},
    {"b", "m", T(SIP_DTYPE_BOOL, 1, b2, sizeof b2, 2)},
    {"b", "str", T(SIP_DTYPE_STRING, 1, str, sizeof str, 1)},
    {"b", "short", T(SIP_DTYPE_INT64, 1, i4, 8, 4)},
    {"det", "boxes", T(SIP_DTYPE_FLOAT32, 2, NULL, 0, 0, 4)},
    {"pipeline", "input_0", T(SIP_DTYPE_INT64, 4, i4, sizeof i4, 1, 1, 2, 2)},
};

static const sip_tensor_t *lookup(void *ctx, const char *stage, const char *output) {
  (void)ctx;
  for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
    if (!strcmp(tensors[i].stage, stage) && !strcmp(tensors[i].output, output)) return &tensors[i].t;
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  sip__expr_t *e = (sip__expr_t *)&e;
  sip_error_t *err = sip__expr_parse(text, &e);
  if (err) {
    CHECK(!e);
    const char *msg = sip_error_message(err);
    CHECK(msg);
    CHECK(sip_error_code(err) == SIP_RESOURCE_EXHAUSTED ||
          (sip_error_code(err) == SIP_INVALID_ARGUMENT && (!strncmp(msg, "column ", 7) || !strncmp(msg, "line ", 5))));
    sip_error_free(err);
    free(text);
    return 0;
  }
  CHECK(e);
  CHECK(!strcmp(sip__expr_text(e), text));
  const char *const *refs = NULL;
  size_t n = sip__expr_refs(e, &refs);
  for (size_t i = 0; i < n; i++) {
    CHECK(refs[i] && strchr(refs[i], '.') && refs[i][0] != '.');
    CHECK(strstr(text, refs[i]));
    for (size_t j = 0; j < i; j++) CHECK(strcmp(refs[i], refs[j]) != 0);
  }
  int r1 = -1, r2 = -1;
  sip_error_t *e1 = sip__expr_eval(e, lookup, NULL, &r1);
  sip_error_t *e2 = sip__expr_eval(e, lookup, NULL, &r2);
  CHECK(!e1 == !e2);
  if (e1) {
    CHECK(sip_error_code(e1) == SIP_FAILED_PRECONDITION || sip_error_code(e1) == SIP_RESOURCE_EXHAUSTED);
    CHECK(sip_error_code(e1) == sip_error_code(e2));
    CHECK(!strcmp(sip_error_message(e1), sip_error_message(e2)));
    CHECK(r1 == -1 && r2 == -1);
  } else {
    CHECK((r1 == 0 || r1 == 1) && r1 == r2);
  }
  sip_error_free(e1);
  sip_error_free(e2);
  sip__expr_free(e);
  free(text);
  return 0;
}
