/* sip — the condition language of pipelines: a hand-written lexer and
 * recursive-descent parser that type-checks as it builds a flat syntax
 * tree (src/ops/expr_impl.h); src/ops/expr_eval.c walks that tree over a
 * request's tensors. docs/expressions.md is the reference for the grammar
 * and semantics.
 *
 * Types are static: every node is a number, a tensor (only a reference is
 * one) or a tensor-vs-number comparison. The latter means an elementwise
 * mask as the argument of a reduction (any(x > 0.5)) and a comparison of
 * len(x) anywhere else (detection.boxes == 0). Everything that could not be
 * evaluated whatever the data (a tensor in arithmetic, two tensors compared,
 * a tensor as a condition) is rejected here, at parse time.
 */
#include "ops/expr.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/expr_impl.h"

const char *const sip__expr_fn_names[F_COUNT_] = {"len", "any", "all", "max", "min", "sum", "mean"};
static const char *const op_names[] = {"+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">="};

/* ---- lexer --------------------------------------------------------------- */

enum tok {
  TK_END,
  TK_NUM,
  TK_NAME, /* identifiers joined by dots, no spaces: det.boxes.shape */
  TK_LPAREN,
  TK_RPAREN,
  TK_LBRACK,
  TK_RBRACK,
  TK_COMMA,
  TK_OP, /* arithmetic or comparison: op */
};

typedef struct token {
  int kind;
  int op;
  size_t start, end;
  double num;
  int parts;       /* TK_NAME: number of dot-separated identifiers */
  size_t last_dot; /* TK_NAME with parts > 1: offset of the last '.' */
} token_t;

typedef struct parser {
  const char *s;
  size_t len;
  size_t pos; /* where the lexer continues */
  token_t tok;
  int depth;
  int multiline;
  size_t cap_nodes, cap_refs;
  sip__expr_t *e;
  sip_error_t *err;
} parser_t;

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_alnum(int c) { return is_alpha(c) || is_digit(c); }

/* 1-based column of byte offset `at` within its line. */
static size_t column(const parser_t *p, size_t at) {
  size_t bol = at;
  while (bol > 0 && p->s[bol - 1] != '\n') bol--;
  return at - bol + 1;
}

/* Sets the parse error (the first one wins) at byte offset `at`; returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(parser_t *p, size_t at, const char *fmt, ...) {
  if (p->err) return -1;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t line = 1;
  for (size_t i = 0; i < at && i < p->len; i++) line += p->s[i] == '\n';
  if (p->multiline)
    p->err = sip_error_new(SIP_INVALID_ARGUMENT, "line %zu, column %zu: %s", line, column(p, at), msg);
  else
    p->err = sip_error_new(SIP_INVALID_ARGUMENT, "column %zu: %s", at + 1, msg);
  return -1;
}

static int oom(parser_t *p) {
  if (!p->err) p->err = SIP__OOM();
  return -1;
}

/* `'text'` of a span, cut after 40 bytes. */
static void quote_span(const char *s, size_t start, size_t end, char *buf, size_t size) {
  size_t n = end - start;
  if (n > 40)
    snprintf(buf, size, "'%.40s...'", s + start);
  else
    snprintf(buf, size, "'%.*s'", (int)n, s + start);
}

/* What the current token is, for "found ..." (a byte that starts no token
 * is shown as such, so messages stay printable ASCII). */
static const char *found(const parser_t *p, char *buf, size_t size) {
  const token_t *t = &p->tok;
  if (t->kind == TK_END) return "the end of the expression";
  quote_span(p->s, t->start, t->end, buf, size);
  return buf;
}

static const char *describe_byte(int c, char *buf, size_t size) {
  if (c > 32 && c < 127)
    snprintf(buf, size, "'%c'", c);
  else
    snprintf(buf, size, "byte 0x%02x", (unsigned)(unsigned char)c);
  return buf;
}

/* Reads the next token into p->tok; -1 (error set) on a lexical error. */
static int next(parser_t *p) {
  const char *s = p->s;
  size_t i = p->pos;
  while (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') i++;
  token_t *t = &p->tok;
  memset(t, 0, sizeof *t);
  t->start = i;
  int c = (unsigned char)s[i];
  char b[16];
  if (!c) {
    t->kind = TK_END;
  } else if (is_alpha(c)) {
    t->kind = TK_NAME;
    t->parts = 1;
    while (is_alnum((unsigned char)s[i])) i++;
    while (s[i] == '.') {
      if (!is_alpha((unsigned char)s[i + 1]))
        return fail(p, i + 1, "expected a name after '.', found %s",
                    s[i + 1] ? describe_byte((unsigned char)s[i + 1], b, sizeof b) : "the end of the expression");
      t->last_dot = i++;
      t->parts++;
      while (is_alnum((unsigned char)s[i])) i++;
    }
  } else if (is_digit(c) || (c == '.' && is_digit((unsigned char)s[i + 1]))) {
    t->kind = TK_NUM;
    while (is_digit((unsigned char)s[i])) i++;
    if (s[i] == '.') {
      i++;
      while (is_digit((unsigned char)s[i])) i++;
    }
    if ((s[i] == 'e' || s[i] == 'E') &&
        (is_digit((unsigned char)s[i + 1]) ||
         ((s[i + 1] == '+' || s[i + 1] == '-') && is_digit((unsigned char)s[i + 2])))) {
      i += 2;
      while (is_digit((unsigned char)s[i])) i++;
    }
    if (is_alnum((unsigned char)s[i]) || s[i] == '.') {
      size_t e = i;
      while (is_alnum((unsigned char)s[e]) || s[e] == '.') e++;
      char q[64];
      quote_span(s, t->start, e, q, sizeof q);
      return fail(p, t->start, "malformed number %s (numbers are written 12, 0.5, .5 or 1e-3)", q);
    }
    char *end = NULL;
    t->num = strtod(s + t->start, &end);
    if (end != s + i || !isfinite(t->num)) {
      char q[64];
      quote_span(s, t->start, i, q, sizeof q);
      return fail(p, t->start, "number %s is out of range", q);
    }
  } else {
    i++;
    switch (c) {
    case '(': t->kind = TK_LPAREN; break;
    case ')': t->kind = TK_RPAREN; break;
    case '[': t->kind = TK_LBRACK; break;
    case ']': t->kind = TK_RBRACK; break;
    case ',': t->kind = TK_COMMA; break;
    case '+': t->kind = TK_OP, t->op = OP_ADD; break;
    case '-': t->kind = TK_OP, t->op = OP_SUB; break;
    case '*': t->kind = TK_OP, t->op = OP_MUL; break;
    case '/': t->kind = TK_OP, t->op = OP_DIV; break;
    case '%': t->kind = TK_OP, t->op = OP_MOD; break;
    case '<':
    case '>':
      t->kind = TK_OP;
      if (s[i] == '=') {
        i++;
        t->op = c == '<' ? OP_LE : OP_GE;
      } else {
        t->op = c == '<' ? OP_LT : OP_GT;
      }
      break;
    case '=':
      if (s[i] != '=') return fail(p, t->start, "'=' is not an operator (no assignment); compare with '=='");
      i++, t->kind = TK_OP, t->op = OP_EQ;
      break;
    case '!':
      if (s[i] != '=') return fail(p, t->start, "'!' is not an operator; negate with 'not'");
      i++, t->kind = TK_OP, t->op = OP_NE;
      break;
    case '&': return fail(p, t->start, "'&' is not an operator; use 'and'");
    case '|': return fail(p, t->start, "'|' is not an operator; use 'or'");
    case '"':
    case '\'': return fail(p, t->start, "strings are not supported");
    default: return fail(p, t->start, "unexpected character %s", describe_byte(c, b, sizeof b));
    }
  }
  t->end = i;
  p->pos = i;
  return 0;
}

static int tok_is_word(const parser_t *p, const char *w) {
  const token_t *t = &p->tok;
  size_t n = strlen(w);
  return t->kind == TK_NAME && t->parts == 1 && t->end - t->start == n && !memcmp(p->s + t->start, w, n);
}

static int tok_is_cmp(const parser_t *p) { return p->tok.kind == TK_OP && p->tok.op >= OP_EQ; }

/* ---- parser -------------------------------------------------------------- */

static int32_t new_node(parser_t *p, int kind, int type, size_t start, size_t end) {
  sip__expr_t *e = p->e;
  if (e->n_nodes >= SIP__EXPR_MAX_NODES)
    return fail(p, start, "the expression has more than %d values and operators", SIP__EXPR_MAX_NODES);
  if (e->n_nodes == p->cap_nodes) {
    size_t cap = p->cap_nodes ? p->cap_nodes * 2 : 16;
    sip__node_t *n = sip__reallocarray(e->nodes, cap, sizeof *n);
    if (!n) return oom(p);
    e->nodes = n;
    p->cap_nodes = cap;
  }
  sip__node_t *n = &e->nodes[e->n_nodes];
  memset(n, 0, sizeof *n);
  n->kind = (uint8_t)kind;
  n->type = (uint8_t)type;
  n->a = n->b = n->ref = -1;
  n->start = (uint32_t)start;
  n->end = (uint32_t)end;
  return (int32_t)e->n_nodes++;
}

static sip__node_t *N(parser_t *p, int32_t i) { return &p->e->nodes[i]; }

/* Index of the reference s[start, end) ("stage.output..."), added if new. */
static int32_t add_ref(parser_t *p, size_t start, size_t end) {
  sip__expr_t *e = p->e;
  size_t len = end - start;
  for (size_t i = 0; i < e->n_refs; i++)
    if (strlen(e->refs[i].full) == len && !memcmp(e->refs[i].full, p->s + start, len)) return (int32_t)i;
  if (e->n_refs == p->cap_refs) {
    size_t cap = p->cap_refs ? p->cap_refs * 2 : 4;
    sip__ref_t *r = sip__reallocarray(e->refs, cap, sizeof *r);
    if (!r) return oom(p);
    e->refs = r;
    const char **names = sip__reallocarray(e->names, cap, sizeof *names);
    if (!names) return oom(p);
    e->names = names;
    p->cap_refs = cap;
  }
  size_t stage_len = (size_t)((const char *)memchr(p->s + start, '.', len) - (p->s + start));
  char *full = sip__malloc(len + 1 + stage_len + 1);
  if (!full) return oom(p);
  memcpy(full, p->s + start, len);
  full[len] = '\0';
  memcpy(full + len + 1, p->s + start, stage_len);
  full[len + 1 + stage_len] = '\0';
  sip__ref_t *r = &e->refs[e->n_refs];
  r->full = full;
  r->stage = full + len + 1;
  r->output = full + stage_len + 1;
  e->names[e->n_refs] = full;
  return (int32_t)e->n_refs++;
}

/* Checks that node i can be used as a number (by `user`, e.g. "'+'").
 * A tensor cannot; a tensor-vs-number comparison can (it compares len()),
 * unless its number is a literal with a fraction: `cls.score > 0.9` means
 * elements, and len() is a whole number, so it is rejected with the fix. */
static int as_number(parser_t *p, int32_t i, const char *user) {
  if (i < 0) return -1;
  sip__node_t *n = N(p, i);
  char q[64], m[64];
  if (n->type == T_TENSOR) {
    quote_span(p->s, n->start, n->end, q, sizeof q);
    int w = (int)(n->end - n->start);
    if (w > 40) w = 40;
    const char *t = p->s + n->start;
    return fail(p, n->start,
                "%s is a tensor, not a number: %s needs numbers; use len(%.*s), any(%.*s), max(%.*s) or "
                "%.*s.shape[i]",
                q, user, w, t, w, t, w, t, w, t);
  }
  if (n->type == T_TCMP) {
    sip__node_t *num = N(p, n->b);
    if (num->kind == K_NUM && num->num != floor(num->num)) {
      sip__node_t *ref = N(p, n->a);
      quote_span(p->s, n->start, n->end, q, sizeof q);
      quote_span(p->s, num->start, num->end, m, sizeof m);
      int w = (int)(ref->end - ref->start), x = (int)(n->end - n->start);
      if (w > 40) w = 40;
      if (x > 60) x = 60;
      const char *t = p->s + ref->start, *c = p->s + n->start;
      return fail(p, n->start,
                  "%s would compare len(%.*s), the size of its first dimension, with %s, which is not a whole "
                  "number; to compare its elements write any(%.*s), all(%.*s), or compare max(%.*s) or min(%.*s)",
                  q, w, t, m, x, c, x, c, w, t, w, t);
    }
  }
  return 0;
}

static int32_t parse_or(parser_t *p);

/* Opens a nesting level (parenthesis, call, prefix operator). */
static int enter(parser_t *p, size_t at) {
  if (++p->depth > SIP__EXPR_MAX_DEPTH)
    return fail(p, at, "the expression is nested more than %d levels deep", SIP__EXPR_MAX_DEPTH);
  return 0;
}

/* fn '(' argument ')', the name being the current token. */
static int32_t parse_call(parser_t *p, int fn) {
  char b[64];
  size_t start = p->tok.start;
  if (next(p)) return -1;
  if (p->tok.kind != TK_LPAREN)
    return fail(p, p->tok.start, "expected '(' after %s, found %s", sip__expr_fn_names[fn], found(p, b, sizeof b));
  if (enter(p, p->tok.start) || next(p)) return -1;
  int32_t arg = parse_or(p);
  if (arg < 0) return -1;
  if (p->tok.kind != TK_RPAREN) {
    if (p->tok.kind == TK_COMMA)
      return fail(p, p->tok.start, "expected ')' after the argument of %s(), found ','; %s() takes one argument",
                  sip__expr_fn_names[fn], sip__expr_fn_names[fn]);
    return fail(p, p->tok.start, "expected ')' after the argument of %s(), found %s", sip__expr_fn_names[fn],
                found(p, b, sizeof b));
  }
  p->depth--;
  sip__node_t *a = N(p, arg);
  if (fn == F_LEN ? a->type != T_TENSOR : a->type == T_NUM) {
    quote_span(p->s, a->start, a->end, b, sizeof b);
    if (fn == F_LEN)
      return fail(p, a->start, "len() takes a tensor (stage.output, e.g. len(detection.boxes)), found %s", b);
    return fail(p, a->start,
                "%s() takes a tensor (stage.output) or a comparison of one with a number, e.g. %s(cls.label == 1); "
                "found %s, a number",
                sip__expr_fn_names[fn], sip__expr_fn_names[fn], b);
  }
  int32_t i = new_node(p, K_CALL, T_NUM, start, p->tok.end);
  if (i < 0) return -1;
  N(p, i)->fn = (uint8_t)fn;
  N(p, i)->a = arg;
  if (next(p)) return -1;
  return i;
}

/* stage.output[.shape[i]], the name being the current token. */
static int32_t parse_ref(parser_t *p) {
  char b[64];
  token_t name = p->tok;
  const char *s = p->s;
  int shape = name.parts >= 2 && name.end - name.last_dot == 6 && !memcmp(s + name.last_dot, ".shape", 6);
  if (next(p)) return -1;
  if (shape && p->tok.kind == TK_LBRACK) {
    if (name.parts == 2)
      return fail(p, name.start, "expected stage.output before .shape, e.g. detection.boxes.shape[0]");
    int32_t ref = add_ref(p, name.start, name.last_dot);
    if (ref < 0 || next(p)) return -1;
    size_t istart = p->tok.start;
    int neg = p->tok.kind == TK_OP && p->tok.op == OP_SUB;
    if (neg && next(p)) return -1;
    if (p->tok.kind != TK_NUM || p->tok.num != floor(p->tok.num) ||
        memchr(s + p->tok.start, '.', p->tok.end - p->tok.start))
      return fail(p, p->tok.start, "expected an integer index in .shape[...], found %s", found(p, b, sizeof b));
    double idx = neg ? -p->tok.num : p->tok.num;
    if (idx < -SIP_MAX_RANK || idx >= SIP_MAX_RANK)
      return fail(p, istart, "shape index %.0f is out of range: a tensor has at most %d dimensions", idx,
                  SIP_MAX_RANK);
    if (next(p)) return -1;
    if (p->tok.kind != TK_RBRACK)
      return fail(p, p->tok.start, "expected ']' after the shape index, found %s", found(p, b, sizeof b));
    int32_t i = new_node(p, K_SHAPE, T_NUM, name.start, p->tok.end);
    if (i < 0) return -1;
    N(p, i)->ref = ref;
    N(p, i)->index = (int32_t)idx;
    if (next(p)) return -1;
    return i;
  }
  if (shape && name.parts >= 3) {
    quote_span(s, name.start, name.end, b, sizeof b);
    return fail(p, name.end, "expected '[' after %s: a shape is used one dimension at a time, as .shape[i]", b);
  }
  int32_t ref = add_ref(p, name.start, name.end);
  if (ref < 0) return -1;
  int32_t i = new_node(p, K_REF, T_TENSOR, name.start, name.end);
  if (i < 0) return -1;
  N(p, i)->ref = ref;
  quote_span(s, name.start, name.end, b, sizeof b);
  if (p->tok.kind == TK_LPAREN)
    return fail(p, p->tok.start, "method calls are not supported (found '(' after %s); the functions are " FN_LIST
                ", written as len(stage.output)", b);
  if (p->tok.kind == TK_LBRACK)
    return fail(p, p->tok.start, "indexing is not supported (found '[' after %s); only stage.output.shape[i] is", b);
  return i;
}

static int32_t parse_primary(parser_t *p) {
  char b[64];
  token_t t = p->tok;
  switch (t.kind) {
  case TK_NUM: {
    int32_t i = new_node(p, K_NUM, T_NUM, t.start, t.end);
    if (i < 0) return -1;
    N(p, i)->num = t.num;
    return next(p) ? -1 : i;
  }
  case TK_LPAREN: {
    if (enter(p, t.start) || next(p)) return -1;
    int32_t i = parse_or(p);
    if (i < 0) return -1;
    if (p->tok.kind != TK_RPAREN)
      return fail(p, p->tok.start, "expected ')' to close the '(' at column %zu, found %s", column(p, t.start),
                  found(p, b, sizeof b));
    p->depth--;
    if (N(p, i)->kind != K_REF) { /* messages quote "(a - b)", references stay bare for the hints */
      N(p, i)->start = (uint32_t)t.start;
      N(p, i)->end = (uint32_t)p->tok.end;
    }
    return next(p) ? -1 : i;
  }
  case TK_NAME:
    if (t.parts > 1) return parse_ref(p);
    if (tok_is_word(p, "true") || tok_is_word(p, "false")) {
      int32_t i = new_node(p, K_NUM, T_NUM, t.start, t.end);
      if (i < 0) return -1;
      N(p, i)->num = tok_is_word(p, "true");
      return next(p) ? -1 : i;
    }
    for (int f = 0; f < F_COUNT_; f++)
      if (tok_is_word(p, sip__expr_fn_names[f])) return parse_call(p, f);
    if (tok_is_word(p, "and") || tok_is_word(p, "or") || tok_is_word(p, "not"))
      break;
    quote_span(p->s, t.start, t.end, b, sizeof b);
    if (next(p)) return -1; /* a lexical error right after the name comes first */
    if (p->tok.kind == TK_LPAREN)
      return fail(p, t.start, "unknown function %s; the functions are " FN_LIST, b);
    return fail(p, t.start, "unknown name %s; a tensor is named stage.output (e.g. detection.boxes)", b);
  default: break;
  }
  return fail(p, p->tok.start, "expected a value (a number, stage.output, a function call or '('), found %s",
              found(p, b, sizeof b));
}

static int32_t parse_unary(parser_t *p) {
  if (p->tok.kind == TK_OP && (p->tok.op == OP_SUB || p->tok.op == OP_ADD)) {
    size_t start = p->tok.start;
    int neg = p->tok.op == OP_SUB;
    if (enter(p, start) || next(p)) return -1;
    int32_t a = parse_unary(p);
    if (as_number(p, a, neg ? "unary '-'" : "unary '+'")) return -1;
    p->depth--;
    sip__node_t *n = N(p, a);
    if (!neg) {
      n->start = (uint32_t)start;
      return a;
    }
    if (n->kind == K_NUM) { /* fold: -3 is a literal (and a shape index can be one) */
      n->num = -n->num;
      n->start = (uint32_t)start;
      return a;
    }
    int32_t i = new_node(p, K_NEG, T_NUM, start, n->end);
    if (i < 0) return -1;
    N(p, i)->a = a;
    return i;
  }
  return parse_primary(p);
}

/* l op r; `at` (the operator) places a "too many nodes" error. */
static int32_t binary(parser_t *p, int kind, int op, int32_t l, int32_t r, size_t at) {
  int32_t i = new_node(p, kind, T_NUM, at, at);
  if (i < 0) return -1;
  N(p, i)->start = N(p, l)->start;
  N(p, i)->end = N(p, r)->end;
  N(p, i)->op = (uint8_t)op;
  N(p, i)->a = l;
  N(p, i)->b = r;
  return i;
}

static int32_t parse_term(parser_t *p) {
  int32_t l = parse_unary(p);
  while (l >= 0 && p->tok.kind == TK_OP && (p->tok.op == OP_MUL || p->tok.op == OP_DIV || p->tok.op == OP_MOD)) {
    int op = p->tok.op;
    size_t at = p->tok.start;
    char user[8];
    snprintf(user, sizeof user, "'%s'", op_names[op]);
    if (as_number(p, l, user) || next(p)) return -1;
    int32_t r = parse_unary(p);
    if (as_number(p, r, user)) return -1;
    l = binary(p, K_ARITH, op, l, r, at);
  }
  return l;
}

static int32_t parse_sum(parser_t *p) {
  int32_t l = parse_term(p);
  while (l >= 0 && p->tok.kind == TK_OP && (p->tok.op == OP_ADD || p->tok.op == OP_SUB)) {
    int op = p->tok.op;
    size_t at = p->tok.start;
    char user[8];
    snprintf(user, sizeof user, "'%s'", op_names[op]);
    if (as_number(p, l, user) || next(p)) return -1;
    int32_t r = parse_term(p);
    if (as_number(p, r, user)) return -1;
    l = binary(p, K_ARITH, op, l, r, at);
  }
  return l;
}

static int mirror(int op) {
  switch (op) {
  case OP_LT: return OP_GT;
  case OP_LE: return OP_GE;
  case OP_GT: return OP_LT;
  case OP_GE: return OP_LE;
  default: return op;
  }
}

static int32_t parse_cmp(parser_t *p) {
  int32_t l = parse_sum(p);
  if (l < 0 || !tok_is_cmp(p)) return l;
  int op = p->tok.op;
  size_t at = p->tok.start;
  char user[8], b[64], c[64];
  snprintf(user, sizeof user, "'%s'", op_names[op]);
  if (next(p)) return -1;
  int32_t r = parse_sum(p);
  if (r < 0) return -1;
  int lt = N(p, l)->type, rt = N(p, r)->type;
  int32_t i;
  if (lt == T_TENSOR && rt == T_TENSOR) {
    quote_span(p->s, N(p, l)->start, N(p, l)->end, b, sizeof b);
    quote_span(p->s, N(p, r)->start, N(p, r)->end, c, sizeof c);
    return fail(p, at,
                "cannot compare two tensors (%s and %s); compare numbers such as len(), max() or .shape[i] of each",
                b, c);
  } else if (lt == T_TENSOR || rt == T_TENSOR) {
    int32_t t = lt == T_TENSOR ? l : r, num = lt == T_TENSOR ? r : l;
    if (as_number(p, num, user)) return -1;
    i = binary(p, K_TCMP, lt == T_TENSOR ? op : mirror(op), t, num, at);
    if (i < 0) return -1;
    N(p, i)->type = T_TCMP;
    N(p, i)->start = N(p, l)->start;
    N(p, i)->end = N(p, r)->end;
  } else {
    if (as_number(p, l, user) || as_number(p, r, user)) return -1;
    i = binary(p, K_CMP, op, l, r, at);
    if (i < 0) return -1;
  }
  if (tok_is_cmp(p))
    return fail(p, p->tok.start, "comparisons do not chain; write (a < b) and (b < c)");
  return i;
}

static int32_t parse_not(parser_t *p) {
  if (!tok_is_word(p, "not")) return parse_cmp(p);
  size_t start = p->tok.start;
  if (enter(p, start) || next(p)) return -1;
  int32_t a = parse_not(p);
  if (as_number(p, a, "'not'")) return -1;
  p->depth--;
  int32_t i = new_node(p, K_NOT, T_NUM, start, N(p, a)->end);
  if (i < 0) return -1;
  N(p, i)->a = a;
  return i;
}

/* Left-associative `operand (word operand)*` for and/or. */
static int32_t parse_logic(parser_t *p, const char *word, const char *quoted, int kind,
                           int32_t (*operand)(parser_t *)) {
  int32_t l = operand(p);
  while (l >= 0 && tok_is_word(p, word)) {
    size_t at = p->tok.start;
    if (as_number(p, l, quoted) || next(p)) return -1;
    int32_t r = operand(p);
    if (as_number(p, r, quoted)) return -1;
    l = binary(p, kind, 0, l, r, at);
  }
  return l;
}

static int32_t parse_and(parser_t *p) { return parse_logic(p, "and", "'and'", K_AND, parse_not); }

static int32_t parse_or(parser_t *p) { return parse_logic(p, "or", "'or'", K_OR, parse_and); }

void sip__expr_free(sip__expr_t *e) {
  if (!e) return;
  for (size_t i = 0; i < e->n_refs; i++) sip__free(e->refs[i].full);
  sip__free(e->refs);
  sip__free(e->names);
  sip__free(e->nodes);
  sip__free(e->text);
  sip__free(e);
}

sip_error_t *sip__expr_parse(const char *text, sip__expr_t **out) {
  *out = NULL;
  if (!text) return sip_error_new(SIP_INVALID_ARGUMENT, "column 1: expected an expression, found nothing");
  parser_t p = {0};
  p.s = text;
  p.len = strnlen(text, SIP__EXPR_MAX_LEN + 1);
  p.multiline = memchr(text, '\n', p.len) != NULL;
  if (p.len > SIP__EXPR_MAX_LEN) {
    fail(&p, SIP__EXPR_MAX_LEN, "the expression is longer than the limit of %d bytes", SIP__EXPR_MAX_LEN);
    return p.err;
  }
  p.e = sip__calloc(1, sizeof *p.e);
  if (!p.e) return SIP__OOM();
  p.e->text = sip__strndup(text, p.len);
  if (!p.e->text) oom(&p);
  int32_t root = -1;
  if (!p.err && !next(&p)) {
    root = parse_or(&p);
    char b[64];
    if (root >= 0 && !as_number(&p, root, "a condition") && p.tok.kind != TK_END)
      fail(&p, p.tok.start, "expected an operator or the end of the expression, found %s", found(&p, b, sizeof b));
  }
  if (p.err) {
    sip__expr_free(p.e);
    return p.err;
  }
  p.e->root = root;
  *out = p.e;
  return NULL;
}

size_t sip__expr_refs(const sip__expr_t *e, const char *const **refs) {
  if (refs) *refs = e->names;
  return e->n_refs;
}

const char *sip__expr_text(const sip__expr_t *e) { return e->text; }
