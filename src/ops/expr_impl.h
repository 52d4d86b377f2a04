/* sip — the condition language's syntax tree, shared by the parser
 * (src/ops/expr.c) and the evaluator (src/ops/expr_eval.c). Internal to
 * those two files. */
#ifndef SIP_OPS_EXPR_IMPL_H
#define SIP_OPS_EXPR_IMPL_H

#include <stdint.h>

#include "ops/expr.h"

/* ---- the tree ------------------------------------------------------------ */

enum kind {
  K_NUM,   /* literal: num */
  K_REF,   /* a tensor: ref */
  K_SHAPE, /* ref.shape[index] */
  K_CALL,  /* fn(a) */
  K_NEG,   /* -a */
  K_NOT,   /* not a */
  K_ARITH, /* a op b, numbers */
  K_CMP,   /* a op b, numbers */
  K_TCMP,  /* a (a K_REF) op b (a number) */
  K_AND,
  K_OR,
};

enum type { T_NUM, T_TENSOR, T_TCMP };

enum fn { F_LEN, F_ANY, F_ALL, F_MAX, F_MIN, F_SUM, F_MEAN, F_COUNT_ };
/* "len", "any"... by enum fn (defined in expr.c). */
extern const char *const sip__expr_fn_names[F_COUNT_];
#define FN_LIST "len, any, all, max, min, sum, mean"

enum op { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

typedef struct sip__node {
  uint8_t kind, type, op, fn;
  int32_t a, b;        /* children (node indices), -1 when unused */
  int32_t ref;         /* K_REF, K_SHAPE: index into refs */
  int32_t index;       /* K_SHAPE */
  uint32_t start, end; /* source span [start, end) */
  double num;          /* K_NUM */
} sip__node_t;

typedef struct sip__ref {
  char *full;         /* "stage.output", then NUL, then "stage" NUL: one block */
  const char *stage;  /* inside full */
  const char *output; /* inside full */
} sip__ref_t;

struct sip__expr {
  char *text;
  sip__node_t *nodes;
  size_t n_nodes;
  int32_t root;
  sip__ref_t *refs;
  const char **names; /* refs[i].full, for sip__expr_refs */
  size_t n_refs;
};

#endif
