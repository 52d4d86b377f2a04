/* Unit tests for the pipeline condition language (src/ops/expr.c and expr_eval.c,
 * docs/expressions.md): what parses and what is rejected (with the column and
 * the message), the references, evaluation over tensors of every numeric
 * dtype (empty and scalar ones included), precedence, short-circuiting, run
 * time errors and allocation failures. Tensors are stack structs over static
 * arrays, so evaluation tests allocate nothing but the expression. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "ops/expr.h"
#include "sip/tensor.h"

/* ---- helpers ------------------------------------------------------------- */

/* Checks an error's code and that its message contains every string of the
 * NULL-terminated list; frees the error first so a failure does not leak. */
static void check_errv(sip_error_t *err, sip_code_t code, const char *what, va_list ap) {
  if (!err) fail_msg("%s: expected %s, got success", what, sip_code_name(code));
  char msg[4096];
  snprintf(msg, sizeof msg, "%s", sip_error_message(err));
  sip_code_t got = sip_error_code(err);
  sip_error_free(err);
  if (got != code) fail_msg("%s: code %s, want %s: %s", what, sip_code_name(got), sip_code_name(code), msg);
  for (const char *sub; (sub = va_arg(ap, const char *));)
    if (!strstr(msg, sub)) fail_msg("%s: message lacks \"%s\":\n  %s", what, sub, msg);
}

static void assert_ok(sip_error_t *err, const char *what) {
  if (err) {
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sip_error_message(err));
    sip_code_t c = sip_error_code(err);
    sip_error_free(err);
    fail_msg("%s: unexpected error %s: %s", what, sip_code_name(c), msg);
  }
}

static sip__expr_t *parse_ok(const char *text) {
  sip__expr_t *e = (sip__expr_t *)0x1;
  assert_ok(sip__expr_parse(text, &e), text);
  assert_non_null(e);
  return e;
}

/* Expects a parse error whose message starts with "column <col>: " and
 * contains each following string. */
static void expect_parse_err_(int line, const char *text, int col, ...) {
  sip__expr_t *e = (sip__expr_t *)0x1;
  sip_error_t *err = sip__expr_parse(text, &e);
  if (e) fail_msg("line %d: %s: *out not NULL on error", line, text);
  char what[256], prefix[32];
  snprintf(what, sizeof what, "line %d: parse \"%.200s\"", line, text);
  snprintf(prefix, sizeof prefix, "column %d: ", col);
  if (err && strncmp(sip_error_message(err), prefix, strlen(prefix))) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(err));
    sip_error_free(err);
    fail_msg("%s: message does not start with \"%s\": %s", what, prefix, msg);
  }
  va_list ap;
  va_start(ap, col);
  check_errv(err, SIP_INVALID_ARGUMENT, what, ap);
  va_end(ap);
}
#define EXPECT_PARSE_ERR(text, col, ...) expect_parse_err_(__LINE__, text, col, __VA_ARGS__, NULL)

/* ---- the tensors evaluation sees ---------------------------------------- */

static float boxes3[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
static float scores3[3] = {0.95f, 0.5f, 0.2f};
static int64_t labels3[3] = {1, 0, 1};
static uint16_t f16_scalar = 0x3A00; /* 0.75 */
static uint16_t f16v[3] = {0x3C00, 0xC000, 0x7BFF}; /* 1, -2, 65504 */
static uint8_t u8v[2] = {1, 2};
static uint8_t boolv[4] = {1, 0, 1, 1};
static uint8_t bool_true[2] = {1, 7};
static int8_t i8v[3] = {-3, 0, 5};
static uint16_t u16v[2] = {65535, 1};
static int16_t i16v[2] = {-32768, 7};
static int32_t i32v[4] = {1, 2, 3, 4};
static uint32_t u32v[1] = {4000000000u};
static uint64_t u64v[2] = {1ull << 40, 0};
static double f64v[3] = {1.5, -2.25, 1e300};
static float nanv[2] = {1, NAN};
static float big[1000]; /* 0..999, filled in main */
static int64_t i64_scalar = 5;
static uint8_t image[12];
static float one[1] = {0.25f};
static uint8_t text_data[] = {1, 0, 0, 0, 'a'};
static float zeros[8];

#define T(nm, dt, rk, ptr, nb, ...) \
  {.name = (char *)nm, .dtype = dt, .rank = rk, .dims = {__VA_ARGS__}, .data = ptr, .nbytes = nb}

static const struct fixture {
  const char *stage, *output;
  sip_tensor_t t;
} fixtures[] = {
    {"det", "boxes", T("boxes", SIP_DTYPE_FLOAT32, 2, boxes3, sizeof boxes3, 3, 4)},
    {"det", "scores", T("scores", SIP_DTYPE_FLOAT32, 1, scores3, sizeof scores3, 3)},
    {"det", "labels", T("labels", SIP_DTYPE_INT64, 1, labels3, sizeof labels3, 3)},
    {"det", "sigmoid_0.tmp_0", T("sigmoid_0.tmp_0", SIP_DTYPE_FLOAT32, 1, one, sizeof one, 1)},
    {"det", "shape", T("shape", SIP_DTYPE_FLOAT32, 1, one, sizeof one, 1)},
    {"none", "boxes", T("boxes", SIP_DTYPE_FLOAT32, 2, NULL, 0, 0, 4)},
    {"none", "scores", T("scores", SIP_DTYPE_FLOAT32, 1, NULL, 0, 0)},
    {"none", "padded", T("padded", SIP_DTYPE_FLOAT32, 2, zeros, sizeof zeros, 2, 4)},
    {"cls", "score", T("score", SIP_DTYPE_FLOAT16, 0, &f16_scalar, 2, 0)},
    {"cls", "label", T("label", SIP_DTYPE_UINT8, 1, u8v, sizeof u8v, 2)},
    {"m", "f16", T("f16", SIP_DTYPE_FLOAT16, 1, f16v, sizeof f16v, 3)},
    {"m", "mask", T("mask", SIP_DTYPE_BOOL, 1, boolv, sizeof boolv, 4)},
    {"m", "yes", T("yes", SIP_DTYPE_BOOL, 1, bool_true, sizeof bool_true, 2)},
    {"m", "i8", T("i8", SIP_DTYPE_INT8, 1, i8v, sizeof i8v, 3)},
    {"m", "u16", T("u16", SIP_DTYPE_UINT16, 1, u16v, sizeof u16v, 2)},
    {"m", "i16", T("i16", SIP_DTYPE_INT16, 1, i16v, sizeof i16v, 2)},
    {"m", "i32", T("i32", SIP_DTYPE_INT32, 2, i32v, sizeof i32v, 2, 2)},
    {"m", "u32", T("u32", SIP_DTYPE_UINT32, 1, u32v, sizeof u32v, 1)},
    {"m", "u64", T("u64", SIP_DTYPE_UINT64, 1, u64v, sizeof u64v, 2)},
    {"m", "f64", T("f64", SIP_DTYPE_FLOAT64, 1, f64v, sizeof f64v, 3)},
    {"m", "nan", T("nan", SIP_DTYPE_FLOAT32, 1, nanv, sizeof nanv, 2)},
    {"m", "big", T("big", SIP_DTYPE_FLOAT32, 3, big, sizeof big, 10, 10, 10)},
    {"m", "i64s", T("i64s", SIP_DTYPE_INT64, 0, &i64_scalar, 8, 0)},
    {"m", "text", T("text", SIP_DTYPE_STRING, 1, text_data, sizeof text_data, 1)},
    {"m", "short", T("short", SIP_DTYPE_FLOAT32, 1, one, sizeof one, 4)},
    {"m", "baddims", T("baddims", SIP_DTYPE_FLOAT32, 1, one, sizeof one, -1)},
    {"pipeline", "input_0", T("input_0", SIP_DTYPE_UINT8, 4, image, sizeof image, 1, 2, 2, 3)},
};

typedef struct lookups {
  int calls;
  char last[128];
} lookups_t;

static const sip_tensor_t *lookup(void *ctx, const char *stage, const char *output) {
  lookups_t *l = ctx;
  if (l) {
    l->calls++;
    snprintf(l->last, sizeof l->last, "%s.%s", stage, output);
  }
  for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
    if (!strcmp(fixtures[i].stage, stage) && !strcmp(fixtures[i].output, output)) return &fixtures[i].t;
  return NULL;
}

static void eval_is_(int line, const char *text, int want) {
  sip__expr_t *e = parse_ok(text);
  int got = -1;
  char what[256];
  snprintf(what, sizeof what, "line %d: eval \"%.200s\"", line, text);
  sip_error_t *err = sip__expr_eval(e, lookup, NULL, &got);
  sip__expr_free(e);
  assert_ok(err, what);
  if (got != want) fail_msg("%s: got %d, want %d", what, got, want);
}
#define EVAL_IS(text, want) eval_is_(__LINE__, text, want)
#define TRUE_(text) EVAL_IS(text, 1)
#define FALSE_(text) EVAL_IS(text, 0)

static void expect_eval_err_(int line, const char *text, ...) {
  sip__expr_t *e = parse_ok(text);
  int got = 42;
  sip_error_t *err = sip__expr_eval(e, lookup, NULL, &got);
  sip__expr_free(e);
  char what[256];
  snprintf(what, sizeof what, "line %d: eval \"%.200s\"", line, text);
  if (got != 42) fail_msg("%s: *result written on error", what);
  va_list ap;
  va_start(ap, text);
  check_errv(err, SIP_FAILED_PRECONDITION, what, ap);
  va_end(ap);
}
#define EXPECT_EVAL_ERR(text, ...) expect_eval_err_(__LINE__, text, __VA_ARGS__, NULL)

/* ---- parsing ------------------------------------------------------------- */

static void test_parse_accepts(void **state) {
  (void)state;
  static const char *const ok[] = {
      "detection.boxes == 0",
      "len(detection.boxes) == 0",
      "any(cls.label == 1) and max(cls.score) > 0.9",
      "not (det.scores.shape[0] > 3)",
      "x.y.shape[1] * 2 >= 10 or len(y.z) != 0",
      "true",
      "false or not true",
      "1",
      "0.5 < 1e-3",
      ".5 + 5. + 1E+3 + 2e-2",
      "  \t len ( det.boxes )  >  0  ",
      "det.boxes.shape[-1] == 4",
      "det.boxes.shape[ - 2 ] == 3",
      "sum(det.scores > 0.5) >= 2",
      "mean(m.mask) > 0.5 and min(m.i8) < 0 and all(m.yes)",
      "0 == det.boxes",
      "-(-len(det.boxes)) % 2 == 1",
      "+len(det.boxes) == 3",
      "not not true",
      "(1 + 2) * 3 == 9 and 7 / 2 == 3.5",
      "det.sigmoid_0.tmp_0 == 1",
      "pipeline.input_0.shape[3] == 3",
      "and.or == 0",          /* keywords may name stages and outputs */
      "det.shape == 1",       /* an output called shape */
      "det.shape.shape[0] == 1",
      "(det.boxes) != 0",
      "len(det.boxes) == 3.0",
      "any((det.scores > 0.9))",
      "det.boxes == (det.labels == 3)",
      "max(det.scores) > 0.9\n  and len(det.boxes) > 0",
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    sip__expr_t *e = parse_ok(ok[i]);
    assert_string_equal(sip__expr_text(e), ok[i]);
    sip__expr_free(e);
  }
  sip__expr_free(NULL);
}

static void test_parse_errors(void **state) {
  (void)state;
  /* The example message, exactly. */
  EXPECT_PARSE_ERR("len(det.boxes x) == 0", 15, "column 15: expected ')' after the argument of len(), found 'x'");
  EXPECT_PARSE_ERR("", 1, "expected a value", "found the end of the expression");
  EXPECT_PARSE_ERR("   ", 4, "expected a value", "found the end of the expression");
  EXPECT_PARSE_ERR("len(det.boxes) ==", 18, "expected a value", "found the end of the expression");
  EXPECT_PARSE_ERR("(len(det.boxes) == 0", 21, "expected ')' to close the '(' at column 1",
                   "found the end of the expression");
  EXPECT_PARSE_ERR("len(det.boxes) == 0)", 20, "expected an operator or the end of the expression, found ')'");
  EXPECT_PARSE_ERR("len(det.boxes) 0", 16, "expected an operator or the end of the expression, found '0'");
  /* functions */
  EXPECT_PARSE_ERR("count(det.boxes) > 1", 1, "unknown function 'count'",
                   "the functions are len, any, all, max, min, sum, mean");
  EXPECT_PARSE_ERR("abs (det.boxes) > 1", 1, "unknown function 'abs'");
  EXPECT_PARSE_ERR("len det.boxes", 5, "expected '(' after len, found 'det.boxes'");
  EXPECT_PARSE_ERR("len", 4, "expected '(' after len, found the end of the expression");
  EXPECT_PARSE_ERR("max(det.boxes, 1) > 0", 14, "expected ')' after the argument of max(), found ','",
                   "takes one argument");
  EXPECT_PARSE_ERR("len() == 0", 5, "expected a value", "found ')'");
  EXPECT_PARSE_ERR("len(3) == 0", 5, "len() takes a tensor", "found '3'");
  EXPECT_PARSE_ERR("len(det.boxes > 1) == 0", 5, "len() takes a tensor", "found 'det.boxes > 1'");
  EXPECT_PARSE_ERR("any(len(det.boxes))", 5, "any() takes a tensor (stage.output) or a comparison of one",
                   "found 'len(det.boxes)', a number");
  /* names */
  EXPECT_PARSE_ERR("boxes == 0", 1, "unknown name 'boxes'", "stage.output");
  EXPECT_PARSE_ERR("len(det.boxes) == 0 and x", 25, "unknown name 'x'");
  EXPECT_PARSE_ERR("True", 1, "unknown name 'True'");
  EXPECT_PARSE_ERR("det. boxes == 0", 5, "expected a name after '.', found byte 0x20");
  EXPECT_PARSE_ERR("det.", 5, "expected a name after '.', found the end of the expression");
  EXPECT_PARSE_ERR("det.1 == 0", 5, "expected a name after '.', found '1'");
  EXPECT_PARSE_ERR("det.boxes.size() == 0", 15, "method calls are not supported", "after 'det.boxes.size'");
  EXPECT_PARSE_ERR("det.boxes[0] == 0", 10, "indexing is not supported", "stage.output.shape[i]");
  EXPECT_PARSE_ERR("det.boxes.shape == 0", 16, "expected '[' after 'det.boxes.shape'", ".shape[i]");
  EXPECT_PARSE_ERR("det.shape[0] == 0", 1, "expected stage.output before .shape");
  EXPECT_PARSE_ERR("det.boxes.shape[x.y] == 0", 17, "expected an integer index in .shape[...], found 'x.y'");
  EXPECT_PARSE_ERR("det.boxes.shape[1.5] == 0", 17, "expected an integer index", "found '1.5'");
  EXPECT_PARSE_ERR("det.boxes.shape[1.0] == 0", 17, "expected an integer index");
  EXPECT_PARSE_ERR("det.boxes.shape[] == 0", 17, "expected an integer index", "found ']'");
  EXPECT_PARSE_ERR("det.boxes.shape[16] == 0", 17, "shape index 16 is out of range", "at most 16 dimensions");
  EXPECT_PARSE_ERR("det.boxes.shape[-17] == 0", 17, "shape index -17 is out of range");
  EXPECT_PARSE_ERR("det.boxes.shape[0 == 0", 19, "expected ']' after the shape index, found '=='");
  EXPECT_PARSE_ERR("det.boxes.shape[0][1] == 0", 19, "expected an operator", "found '['");
  /* keywords out of place */
  EXPECT_PARSE_ERR("and true", 1, "expected a value", "found 'and'");
  EXPECT_PARSE_ERR("true and or false", 10, "expected a value", "found 'or'");
  EXPECT_PARSE_ERR("true not false", 6, "expected an operator", "found 'not'");
  /* operators from other languages, assignment, strings */
  EXPECT_PARSE_ERR("len(det.boxes) = 0", 16, "'=' is not an operator (no assignment); compare with '=='");
  EXPECT_PARSE_ERR("!true", 1, "'!' is not an operator; negate with 'not'");
  EXPECT_PARSE_ERR("true && false", 6, "use 'and'");
  EXPECT_PARSE_ERR("true || false", 6, "use 'or'");
  EXPECT_PARSE_ERR("det.label == \"cat\"", 14, "strings are not supported");
  EXPECT_PARSE_ERR("det.label == 'cat'", 14, "strings are not supported");
  EXPECT_PARSE_ERR("2 ** 3 == 8", 4, "expected a value", "found '*'");
  EXPECT_PARSE_ERR("1 ; 2", 3, "unexpected character ';'");
  EXPECT_PARSE_ERR("1 == 1 # comment", 8, "unexpected character '#'");
  EXPECT_PARSE_ERR("1 ==\x01", 5, "unexpected character byte 0x01");
  EXPECT_PARSE_ERR("len(d\xc3\xa9t.x) > 0", 6, "unexpected character byte 0xc3");
  EXPECT_PARSE_ERR("[1] == 1", 1, "expected a value", "found '['");
  EXPECT_PARSE_ERR("1 < 2 < 3", 7, "comparisons do not chain", "(a < b) and (b < c)");
  /* numbers */
  EXPECT_PARSE_ERR("0x10 == 16", 1, "malformed number '0x10'");
  EXPECT_PARSE_ERR("1e == 1", 1, "malformed number '1e'");
  EXPECT_PARSE_ERR("1.2.3 == 1", 1, "malformed number '1.2.3'");
  EXPECT_PARSE_ERR("3abc == 1", 1, "malformed number '3abc'");
  EXPECT_PARSE_ERR("1e999 > 0", 1, "number '1e999' is out of range");
  /* types */
  EXPECT_PARSE_ERR("det.boxes", 1, "'det.boxes' is a tensor, not a number: a condition needs numbers",
                   "len(det.boxes), any(det.boxes), max(det.boxes) or det.boxes.shape[i]");
  EXPECT_PARSE_ERR("not det.boxes", 5, "'det.boxes' is a tensor", "'not' needs numbers");
  EXPECT_PARSE_ERR("true and det.boxes", 10, "'det.boxes' is a tensor", "'and' needs numbers");
  EXPECT_PARSE_ERR("det.boxes or true", 1, "'det.boxes' is a tensor", "'or' needs numbers");
  EXPECT_PARSE_ERR("det.scores * 2 > 1", 1, "'det.scores' is a tensor", "'*' needs numbers");
  EXPECT_PARSE_ERR("1 + det.scores > 1", 5, "'det.scores' is a tensor", "'+' needs numbers");
  EXPECT_PARSE_ERR("-det.scores > 1", 2, "'det.scores' is a tensor", "unary '-' needs numbers");
  EXPECT_PARSE_ERR("any(det.scores * 2 > 1)", 5, "'*' needs numbers");
  EXPECT_PARSE_ERR("det.scores == det.labels", 12, "cannot compare two tensors ('det.scores' and 'det.labels')");
  /* the len()-vs-elements trap: a tensor compared with a fraction */
  EXPECT_PARSE_ERR("cls.score > 0.9", 1,
                   "'cls.score > 0.9' would compare len(cls.score), the size of its first dimension, with '0.9'",
                   "not a whole number", "any(cls.score > 0.9), all(cls.score > 0.9), or compare max(cls.score)");
  EXPECT_PARSE_ERR("true and 0.5 <= det.scores", 10, "'0.5 <= det.scores' would compare len(det.scores)");
  EXPECT_PARSE_ERR("det.scores > -0.5 or true", 1, "with '-0.5'");
}

static void test_parse_multiline(void **state) {
  (void)state;
  sip__expr_t *e = (sip__expr_t *)0x1;
  sip_error_t *err = sip__expr_parse("len(det.boxes) > 0\n  and\n  len(x) > 0", &e);
  assert_null(e);
  assert_non_null(err);
  assert_int_equal(sip_error_code(err), SIP_INVALID_ARGUMENT);
  assert_string_equal(sip_error_message(err),
                      "line 3, column 7: unknown name 'x'; a tensor is named stage.output (e.g. detection.boxes)");
  sip_error_free(err);
  err = sip__expr_parse("true and\n  (1 == 1", &e);
  assert_non_null(err);
  assert_string_equal(sip_error_message(err),
                      "line 2, column 10: expected ')' to close the '(' at column 3, found the end of the expression");
  sip_error_free(err);
  err = sip__expr_parse(NULL, &e);
  assert_null(e);
  assert_int_equal(sip_error_code(err), SIP_INVALID_ARGUMENT);
  sip_error_free(err);
}

/* head, n1 copies of u1, mid, n2 copies of u2, tail: a fresh string. */
static char *build(const char *head, const char *u1, int n1, const char *mid, const char *u2, int n2,
                   const char *tail) {
  size_t len = strlen(head) + strlen(u1) * (size_t)n1 + strlen(mid) + strlen(u2) * (size_t)n2 + strlen(tail);
  char *buf = malloc(len + 1);
  assert_non_null(buf);
  char *o = stpcpy(buf, head);
  for (int i = 0; i < n1; i++) o = stpcpy(o, u1);
  o = stpcpy(o, mid);
  for (int i = 0; i < n2; i++) o = stpcpy(o, u2);
  stpcpy(o, tail);
  return buf;
}

/* `n` copies of `unit` between `head` and `tail`; freed by the next call
 * (a NULL head only frees). */
static const char *repeat(const char *head, const char *unit, int n, const char *tail) {
  static char *last;
  free(last);
  last = head ? build(head, unit, n, "", "", 0, tail) : NULL;
  return last;
}

static void test_parse_limits(void **state) {
  (void)state;
  /* length: 4096 bytes pass, 4097 do not */
  char text[SIP__EXPR_MAX_LEN + 2];
  memset(text, ' ', sizeof text);
  text[0] = '1';
  text[SIP__EXPR_MAX_LEN] = '\0';
  sip__expr_free(parse_ok(text));
  text[SIP__EXPR_MAX_LEN] = ' ';
  text[SIP__EXPR_MAX_LEN + 1] = '\0';
  EXPECT_PARSE_ERR(text, 4097, "the expression is longer than the limit of 4096 bytes");

  /* nesting: 64 levels pass, 65 do not, whatever nests */
  char *t = build("", "(", 64, "1", ")", 64, "");
  sip__expr_free(parse_ok(t));
  free(t);
  t = build("", "(", 65, "1", ")", 65, "");
  EXPECT_PARSE_ERR(t, 65, "nested more than 64 levels deep");
  free(t);
  sip__expr_free(parse_ok(repeat("", "not ", 64, "true")));
  EXPECT_PARSE_ERR(repeat("", "not ", 65, "true"), 257, "nested more than 64 levels deep");
  sip__expr_free(parse_ok(repeat("", "-", 64, "1")));
  EXPECT_PARSE_ERR(repeat("", "-", 65, "1"), 65, "nested more than 64 levels deep");
  EXPECT_PARSE_ERR(repeat("", "+", 65, "1"), 65, "nested more than 64 levels deep");
  t = build("", "(", 63, "len(det.boxes", ")", 64, " == 0");
  sip__expr_free(parse_ok(t)); /* 63 parentheses + the call */
  free(t);
  t = build("", "(", 64, "len(det.boxes", ")", 65, " == 0");
  EXPECT_PARSE_ERR(t, 68, "nested more than 64 levels deep");
  free(t);
  /* Wide is fine: depth counts nesting, not length. */
  sip__expr_free(parse_ok(repeat("(1)", " + (1)", 200, " > 0")));

  /* nodes: "1" then 511 x " + 1" is 1023 nodes; one more term is 1025. */
  sip__expr_free(parse_ok(repeat("1", "+1", 511, "")));
  EXPECT_PARSE_ERR(repeat("1", "+1", 512, ""), 1024, "more than 1024 values and operators");
  EXPECT_PARSE_ERR(repeat("1", "+1", 2000, ""), 1024, "more than 1024 values and operators");
  repeat(NULL, NULL, 0, NULL);
}

/* ---- references --------------------------------------------------------- */

static void test_refs(void **state) {
  (void)state;
  sip__expr_t *e = parse_ok(
      "len(det.boxes) > 0 and any(cls.label == 1) and max(cls.score) > 0.9 and det.boxes.shape[1] == 4 and "
      "pipeline.input_0.shape[0] == 1 and det.sigmoid_0.tmp_0 == 1 and len(det.boxes) < 100 and "
      "cls.score.shape[-1] == 1");
  const char *const *refs = NULL;
  size_t n = sip__expr_refs(e, &refs);
  assert_int_equal(n, 5);
  assert_string_equal(refs[0], "det.boxes");
  assert_string_equal(refs[1], "cls.label");
  assert_string_equal(refs[2], "cls.score");
  assert_string_equal(refs[3], "pipeline.input_0");
  assert_string_equal(refs[4], "det.sigmoid_0.tmp_0");
  assert_int_equal(sip__expr_refs(e, NULL), 5);
  sip__expr_free(e);

  e = parse_ok("1 + 2 == 3");
  assert_int_equal(sip__expr_refs(e, &refs), 0);
  sip__expr_free(e);

  /* The lookup gets the stage and the whole output name, dots included. */
  lookups_t l = {0};
  int r = -1;
  e = parse_ok("det.sigmoid_0.tmp_0 == 1 and det.shape.shape[0] == 1");
  assert_int_equal(sip__expr_refs(e, &refs), 2);
  assert_string_equal(refs[1], "det.shape");
  assert_ok(sip__expr_eval(e, lookup, &l, &r), "dotted");
  assert_int_equal(r, 1);
  assert_int_equal(l.calls, 2);
  assert_string_equal(l.last, "det.shape");
  sip__expr_free(e);
}

/* ---- evaluation ---------------------------------------------------------- */

static void test_eval_tensor_vs_number(void **state) {
  (void)state;
  /* A tensor compared with a number compares len(tensor), its first dim. */
  FALSE_("det.boxes == 0");
  TRUE_("none.boxes == 0");
  TRUE_("det.boxes != 0");
  FALSE_("none.boxes != 0");
  TRUE_("det.boxes == 3");
  TRUE_("det.boxes > 2 and det.boxes <= 3 and det.boxes >= 3 and det.boxes < 4");
  TRUE_("0 == none.boxes");
  TRUE_("2 < det.boxes");  /* mirrored: det.boxes > 2 */
  FALSE_("3 < det.boxes");
  TRUE_("4 >= det.boxes");
  FALSE_("none.padded == 0"); /* two rows of zeros are two rows, not "nothing" */
  TRUE_("any(none.padded == 0)");
  TRUE_("det.boxes == len(det.scores)");
  TRUE_("det.boxes == det.boxes.shape[0]");
  TRUE_("none.scores == 0 and not none.boxes != 0");
  TRUE_("pipeline.input_0 == 1");
  TRUE_("(det.boxes == 3) + 1 == 2"); /* a comparison is 0 or 1 */
  TRUE_("det.boxes == (none.boxes == 0) * 3");
  TRUE_("m.text == 1");               /* len() needs no numbers */
  TRUE_("len(m.text) == 1");
  TRUE_("det.scores == 3.0");         /* a whole number is fine */
  /* Elementwise inside a reduction. */
  TRUE_("any(det.labels == 0)");
  FALSE_("all(det.labels == 1)");
  TRUE_("all(det.labels <= 1)");
  TRUE_("sum(det.labels == 1) == 2");
  TRUE_("sum(det.scores > 0.3) == 2");
  TRUE_("sum(0.3 < det.scores) == 2");
  TRUE_("mean(det.labels == 1) * 3 == 2");
  TRUE_("max(det.scores < 0.5) == 1 and min(det.scores < 0.5) == 0");
  TRUE_("any(det.scores > max(det.scores) - 0.01)");
  /* A scalar has no length. */
  EXPECT_EVAL_ERR("m.i64s == 5", "m.i64s == 5 compares len(m.i64s), but m.i64s is a scalar (rank 0)",
                  "any(m.i64s == 5) or max(m.i64s)");
  EXPECT_EVAL_ERR("len(m.i64s) == 1", "len(m.i64s): m.i64s is a scalar (rank 0) and has no length");
  TRUE_("any(m.i64s == 5) and max(m.i64s) == 5");
}

static void test_eval_dtypes(void **state) {
  (void)state;
  /* float32, chunked (1000 elements > one chunk of 256) */
  TRUE_("sum(m.big) == 499500 and max(m.big) == 999 and min(m.big) == 0 and mean(m.big) == 499.5");
  TRUE_("sum(m.big >= 500) == 500 and any(m.big == 999) and not all(m.big > 0)");
  TRUE_("len(m.big) == 10 and m.big.shape[2] == 10");
  /* float16, scalar and vector */
  TRUE_("max(cls.score) == 0.75 and min(cls.score) == 0.75 and sum(cls.score) == 0.75 and mean(cls.score) == 0.75");
  TRUE_("any(cls.score > 0.5) and all(cls.score > 0.5)");
  TRUE_("sum(m.f16) == 65503 and max(m.f16) == 65504 and min(m.f16) == -2");
  /* bool */
  TRUE_("any(m.mask) and not all(m.mask) and sum(m.mask) == 3 and mean(m.mask) == 0.75");
  TRUE_("all(m.yes) and max(m.yes) == 1"); /* any non-zero byte is true */
  TRUE_("sum(m.mask == 0) == 1");
  /* integers */
  TRUE_("min(m.i8) == -3 and max(m.i8) == 5 and sum(m.i8) == 2 and not all(m.i8) and any(m.i8)");
  TRUE_("max(m.u16) == 65535 and sum(m.u16) == 65536");
  TRUE_("min(m.i16) == -32768 and sum(m.i16) == -32761");
  TRUE_("sum(m.i32) == 10 and m.i32.shape[-1] == 2 and len(m.i32) == 2");
  TRUE_("max(m.u32) == 4000000000");
  TRUE_("max(m.u64) == 1099511627776 and min(m.u64) == 0");
  TRUE_("any(det.labels) and sum(det.labels) == 2 and min(cls.label) == 1");
  /* float64 */
  TRUE_("max(m.f64) == 1e300 and min(m.f64) == -2.25 and any(m.f64 == 1.5)");
}

static void test_eval_empty_and_scalar(void **state) {
  (void)state;
  FALSE_("any(none.scores)");
  TRUE_("all(none.scores)");
  TRUE_("sum(none.scores) == 0");
  FALSE_("any(none.boxes > 0)");
  TRUE_("all(none.boxes > 0)");
  TRUE_("sum(none.boxes > 0) == 0");
  TRUE_("len(none.boxes) == 0 and none.boxes.shape[1] == 4");
  EXPECT_EVAL_ERR("max(none.scores) > 0", "max(none.scores): none.scores is empty (shape [0]); max() of no elements");
  EXPECT_EVAL_ERR("min(none.boxes) > 0", "min(none.boxes): none.boxes is empty (shape [0, 4])");
  EXPECT_EVAL_ERR("mean(none.boxes > 1) > 0", "mean(none.boxes > 1): none.boxes is empty");
  /* scalars: one element, no dims */
  TRUE_("sum(m.i64s) == 5 and all(m.i64s)");
  EXPECT_EVAL_ERR("m.i64s.shape[0] == 1", "m.i64s.shape[0]: index 0 is out of range for m.i64s of rank 0 (shape [])");
}

static void test_eval_shape(void **state) {
  (void)state;
  TRUE_("det.boxes.shape[0] == 3 and det.boxes.shape[1] == 4");
  TRUE_("det.boxes.shape[-1] == 4 and det.boxes.shape[-2] == 3");
  TRUE_("pipeline.input_0.shape[3] == 3 and pipeline.input_0.shape[-4] == 1");
  TRUE_("not (det.scores.shape[0] > 3)");
  TRUE_("det.boxes.shape[1] * 2 >= 8 or len(m.nope) != 0"); /* short-circuit skips m.nope */
  TRUE_("m.text.shape[0] == 1");
  EXPECT_EVAL_ERR("det.boxes.shape[2] == 0", "det.boxes.shape[2]: index 2 is out of range for det.boxes of rank 2",
                  "(shape [3, 4])");
  EXPECT_EVAL_ERR("det.boxes.shape[-3] == 0", "index -3 is out of range");
}

static void test_eval_arithmetic_and_precedence(void **state) {
  (void)state;
  TRUE_("1 + 2 * 3 == 7");
  TRUE_("(1 + 2) * 3 == 9");
  TRUE_("10 - 4 - 3 == 3"); /* left associative */
  TRUE_("12 / 3 / 2 == 2");
  TRUE_("7 / 2 == 3.5");
  TRUE_("7 % 3 == 1 and -7 % 3 == 2 and 7 % -3 == -2 and 7.5 % 2 == 1.5"); /* floored, like Python */
  TRUE_("-2 * -3 == 6 and - -2 == 2 and -len(det.boxes) == -3");
  TRUE_("2 * 3 > 5 and 2 + 3 == 5 and (1 < 2) == true"); /* comparison binds looser than arithmetic */
  TRUE_("1e-3 * 1000 == 1 and .5 == 0.5 and 5. == 5 and 2E2 == 200");
  TRUE_("true + true == 2 and false == 0");
  /* not binds looser than comparison, and tighter than and/or */
  TRUE_("not 1 == 2");
  FALSE_("not 1 == 1");
  TRUE_("not false and true");
  FALSE_("not (false or true)");
  TRUE_("true or false and false"); /* and binds tighter: true or (false and false) */
  FALSE_("(true or false) and false");
  TRUE_("false and false or true");
  /* numbers as conditions: non-zero is true */
  TRUE_("len(det.boxes)");
  FALSE_("len(none.boxes)");
  TRUE_("-0.5");
  FALSE_("0");
  TRUE_("max(det.scores) > 0.9 and len(det.boxes) > 0 or len(none.boxes) != 0");
  EXPECT_EVAL_ERR("1 / (len(det.boxes) - 3) > 0", "1 / (len(det.boxes) - 3): division by zero");
  EXPECT_EVAL_ERR("5 % 0 == 0", "5 % 0: division by zero");
  EXPECT_EVAL_ERR("1 / 0", "1 / 0: division by zero");
}

static void test_eval_short_circuit(void **state) {
  (void)state;
  /* An erroring right side is not evaluated when the left side decides. */
  FALSE_("false and 1 / 0 == 0");
  TRUE_("true or 1 / 0 == 0");
  FALSE_("len(none.boxes) > 0 and max(none.scores) > 0.5");
  TRUE_("len(none.boxes) == 0 or max(none.scores) > 0.5");
  EXPECT_EVAL_ERR("true and 1 / 0 == 0", "division by zero");
  EXPECT_EVAL_ERR("false or 1 / 0 == 0", "division by zero");
  /* ... nor its references looked up. */
  lookups_t l = {0};
  int r = -1;
  sip__expr_t *e = parse_ok("det.boxes == 0 and len(gone.boxes) > 0");
  assert_ok(sip__expr_eval(e, lookup, &l, &r), "short-circuit");
  assert_int_equal(r, 0);
  assert_int_equal(l.calls, 1);
  assert_string_equal(l.last, "det.boxes");
  sip__expr_free(e);
  l.calls = 0;
  e = parse_ok("det.boxes != 0 or max(gone.scores) > 1 or len(gone.x) > 0");
  assert_ok(sip__expr_eval(e, lookup, &l, &r), "short-circuit or");
  assert_int_equal(r, 1);
  assert_int_equal(l.calls, 1);
  sip__expr_free(e);
  /* The whole expression can be evaluated many times. */
  e = parse_ok("any(cls.label == 2) and max(det.scores) > 0.9");
  for (int i = 0; i < 3; i++) {
    r = -1;
    assert_ok(sip__expr_eval(e, lookup, NULL, &r), "again");
    assert_int_equal(r, 1);
  }
  sip__expr_free(e);
}

static void test_eval_errors(void **state) {
  (void)state;
  /* a missing reference: its stage did not run, or has no such output */
  EXPECT_EVAL_ERR("len(rec.text) > 0",
                  "rec.text is not available: stage 'rec' did not run (skipped or not reached) or has no output 'text'");
  EXPECT_EVAL_ERR("det.nope == 0", "det.nope is not available", "no output 'nope'");
  EXPECT_EVAL_ERR("any(det.nope > 1)", "det.nope is not available");
  EXPECT_EVAL_ERR("det.nope.shape[0] == 0", "det.nope is not available");
  /* numbers needed */
  EXPECT_EVAL_ERR("max(m.text) > 0", "max(m.text): m.text is a string tensor; max() needs numbers");
  EXPECT_EVAL_ERR("any(m.text == 1)", "any(m.text == 1): m.text is a string tensor; any() needs numbers");
  /* a tensor whose bytes do not match its shape */
  EXPECT_EVAL_ERR("sum(m.short) > 0", "m.short: 4 bytes do not hold a float32 tensor of shape [4]");
  EXPECT_EVAL_ERR("len(m.baddims) > 0", "m.baddims has an invalid shape (rank 1)");
  /* NaN: comparisons with it are false; max/min propagate it; as a condition it is an error */
  FALSE_("max(m.nan) > 0");
  FALSE_("max(m.nan) == max(m.nan)");
  TRUE_("max(m.nan) != 0");
  TRUE_("any(m.nan) and all(m.nan)"); /* NaN is non-zero */
  FALSE_("any(m.nan > 5)");
  EXPECT_EVAL_ERR("max(m.nan)", "max(m.nan) is NaN, which is neither true nor false");
  EXPECT_EVAL_ERR("not min(m.nan)", "min(m.nan) is NaN");
  EXPECT_EVAL_ERR("true and mean(m.nan)", "mean(m.nan) is NaN");
}

/* Every allocation of parsing fails in turn: each failure is clean. */
static void test_alloc_failures(void **state) {
  (void)state;
  static const char *const texts[] = {
      "any(cls.label == 1) and max(cls.score) > 0.9 or len(det.boxes) == 0 and det.boxes.shape[-1] == 4 and "
      "pipeline.input_0 != 0 and a.b.shape[0] + b.c.shape[0] + c.d.shape[1] + d.e.shape[2] + e.f.shape[3] > 0",
      "len(det.boxes) > 0\n and len(x) > 0", /* an error, allocated */
  };
  for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
    int done = 0;
    for (long n = 0; n < 1000 && !done; n++) {
      sip__expr_t *e = (sip__expr_t *)0x1;
      sip__alloc_fail_after(n);
      sip_error_t *err = sip__expr_parse(texts[k], &e);
      sip__alloc_fail_after(-1);
      if (err) {
        assert_null(e);
        sip_code_t c = sip_error_code(err);
        if (k == 1 && c == SIP_INVALID_ARGUMENT) done = 1;
        else assert_int_equal(c, SIP_RESOURCE_EXHAUSTED);
        sip_error_free(err);
      } else {
        assert_int_equal(k, 0);
        assert_non_null(e);
        const char *const *refs;
        assert_int_equal(sip__expr_refs(e, &refs), 9);
        sip__expr_free(e);
        done = 1;
      }
    }
    assert_true(done);
  }
  /* Evaluation allocates nothing on success, and an error it cannot
   * allocate is reported as out of memory. */
  sip__expr_t *e = parse_ok("max(det.scores) > 0.9 and len(det.boxes) == 3");
  sip__expr_t *bad = parse_ok("max(none.scores) > 0.9");
  int r = -1;
  sip__alloc_fail_after(0);
  sip_error_t *err = sip__expr_eval(e, lookup, NULL, &r);
  sip_error_t *err2 = sip__expr_eval(bad, lookup, NULL, &r);
  sip__alloc_fail_after(-1);
  assert_null(err);
  assert_int_equal(r, 1);
  assert_non_null(err2);
  assert_int_equal(sip_error_code(err2), SIP_RESOURCE_EXHAUSTED);
  sip_error_free(err2);
  sip__expr_free(e);
  sip__expr_free(bad);
}

int main(void) {
  for (int i = 0; i < 1000; i++) big[i] = (float)i;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_accepts),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_parse_multiline),
      cmocka_unit_test(test_parse_limits),
      cmocka_unit_test(test_refs),
      cmocka_unit_test(test_eval_tensor_vs_number),
      cmocka_unit_test(test_eval_dtypes),
      cmocka_unit_test(test_eval_empty_and_scalar),
      cmocka_unit_test(test_eval_shape),
      cmocka_unit_test(test_eval_arithmetic_and_precedence),
      cmocka_unit_test(test_eval_short_circuit),
      cmocka_unit_test(test_eval_errors),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
