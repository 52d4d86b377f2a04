/* sip — the condition language of pipelines (`when:` on a stage,
 * `early_exit_condition` per pipeline or per request). docs/expressions.md
 * is the reference; in short:
 *
 *   len(detection.boxes) == 0
 *   any(cls.label == 1) and max(cls.score) > 0.9
 *   not (det.scores.shape[0] > 3)
 *
 * An expression is compiled once (at config load, or when a request brings
 * its own) and evaluated many times, from any number of threads at once,
 * against the tensors of one request. Parsing checks names and types, so an
 * expression that parses can only fail at run time because of the data: a
 * missing output, an empty tensor for max(), a division by zero...
 */
#ifndef SIP_PIPELINE_EXPR_H
#define SIP_PIPELINE_EXPR_H

#include <stddef.h>

#include "sip/error.h"
#include "sip/tensor.h"

/* Limits, checked by sip__expr_parse. */
#define SIP__EXPR_MAX_LEN 4096   /* bytes of text */
#define SIP__EXPR_MAX_DEPTH 64   /* nested parentheses, calls and prefix operators */
#define SIP__EXPR_MAX_NODES 1024 /* values and operators in the syntax tree */

typedef struct sip__expr sip__expr_t;

/* Compiles `text` (NUL-terminated). On success *out is the expression (free
 * it with sip__expr_free) and NULL is returned. On failure *out is NULL and
 * the error is INVALID_ARGUMENT with a message that starts with
 * "column C: " (or "line L, column C: " when the text has several lines;
 * columns count bytes from 1) and says what was expected and what was found,
 * or RESOURCE_EXHAUSTED when out of memory. */
sip_error_t *sip__expr_parse(const char *text, sip__expr_t **out);

/* The distinct references the expression uses, as "stage.output" strings, in
 * order of first appearance (`pipeline.<input>` for pipeline inputs). The
 * first '.' separates the stage from the output (output names may contain
 * dots). Sets *refs (when refs is not NULL) to an array owned by the
 * expression and returns its length. */
size_t sip__expr_refs(const sip__expr_t *e, const char *const **refs);

/* The text the expression was compiled from. */
const char *sip__expr_text(const sip__expr_t *e);

/* Returns the tensor `stage`.`output` of the request being evaluated, or
 * NULL when it does not exist (the stage did not run: skipped, not reached,
 * or it has no such output). The tensor must stay valid and unchanged during
 * the evaluation; it may be asked for more than once. */
typedef const sip_tensor_t *(*sip__expr_lookup_fn)(void *ctx, const char *stage, const char *output);

/* Evaluates the expression; on success *result is 1 (true) or 0 (false) and
 * NULL is returned. Errors are FAILED_PRECONDITION with a message naming the
 * part of the expression and the tensor involved (a missing reference, a
 * string tensor, max() of an empty tensor, a shape index out of range, a
 * division by zero, NaN used as a condition...), or RESOURCE_EXHAUSTED when
 * the error itself cannot be allocated. `and`/`or` short-circuit: the right
 * side is not evaluated (nor its references looked up) when the left side
 * decides. Evaluation does not allocate unless it fails. Thread-safe for
 * concurrent evaluations of one expression. */
sip_error_t *sip__expr_eval(const sip__expr_t *e, sip__expr_lookup_fn lookup, void *ctx, int *result);

/* Frees an expression; NULL is a no-op. */
void sip__expr_free(sip__expr_t *e);

#endif
