/* sip — an HTTP request's framing headers checked as RFC 9112 asks, where
 * libmicrohttpd (Debian 12's 0.9.75) lets a request through: it takes the
 * first of differing Content-Length fields, takes chunked over a
 * Content-Length it should refuse, accepts an HTTP/1.1 request without
 * Host, skips its own 413 for a Content-Length between 2^63 and 2^64-1, and
 * waits forever for the body of a Transfer-Encoding it does not know.
 * Checked once the headers are in, before any route sees the request.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http/http_impl.h"

/* The next comma-separated element of a field value, trimmed of spaces
 * and tabs, at *p (advanced past it); 0 when there is none left. */
static int next_element(const char **p, const char **s, size_t *n) {
  const char *q = *p;
  while (*q == ' ' || *q == '\t' || *q == ',') q++;
  if (!*q) return 0;
  const char *e = q + strcspn(q, ",");
  *p = e;
  while (e > q && (e[-1] == ' ' || e[-1] == '\t')) e--;
  *s = q;
  *n = (size_t)(e - q);
  return 1;
}

/* A Content-Length value: digits only. 0 with *v (saturated at
 * UINT64_MAX: larger than any limit), or -1 when it is not a number. */
static int parse_length(const char *s, uint64_t *v) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  if (!n) return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    unsigned d = (unsigned)(s[i] - '0');
    x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
  }
  *v = x;
  return 0;
}

#define FAIL(status, ...) (snprintf(msg, msg_n, __VA_ARGS__), (unsigned)(status))

unsigned sip__http_framing_check(const char *version, const sip__http_field_t *f, size_t n,
                                 uint64_t max_body, char *msg, size_t msg_n) {
  size_t hosts = 0, lengths = 0, codings = 0, chunked_at = 0, chunked = 0;
  uint64_t length = 0;
  const char *first_length = NULL, *unknown = NULL;
  size_t unknown_n = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strcasecmp(f[i].name, "Host")) {
      hosts++;
    } else if (!strcasecmp(f[i].name, "Content-Length")) {
      uint64_t v;
      if (parse_length(f[i].value, &v))
        return FAIL(400, "Content-Length '%.40s' is not a byte count; expected digits only",
                    f[i].value);
      if (lengths++ && v != length)
        return FAIL(400, "Content-Length is given twice with different values ('%.40s' and "
                    "'%.40s'); expected one length (RFC 9112 6.3)", first_length, f[i].value);
      length = v;
      first_length = f[i].value;
    } else if (!strcasecmp(f[i].name, "Transfer-Encoding")) {
      const char *p = f[i].value, *s;
      size_t len;
      while (next_element(&p, &s, &len)) {
        codings++;
        if (len == 7 && !strncasecmp(s, "chunked", 7)) {
          chunked++;
          chunked_at = codings;
        } else if (!unknown) {
          unknown = s;
          unknown_n = len;
        }
      }
      if (!codings)
        return FAIL(400, "Transfer-Encoding is empty; expected chunked");
    }
  }
  if (version && !strcmp(version, "HTTP/1.1") && hosts == 0)
    return FAIL(400, "an HTTP/1.1 request without a Host header; expected one (RFC 9112 3.2)");
  if (hosts > 1)
    return FAIL(400, "Host is given %zu times; expected one (RFC 9112 3.2)", hosts);
  if (codings && lengths)
    return FAIL(400, "both Transfer-Encoding and Content-Length are given; expected one of "
                "them (RFC 9112 6.3)");
  if (codings && (chunked > 1 || (chunked && chunked_at != codings)))
    return FAIL(400, "chunked is not the final transfer coding once; expected "
                "'Transfer-Encoding: chunked' (RFC 9112 6.3)");
  if (unknown)
    return FAIL(501, "Transfer-Encoding '%.*s' is not supported; expected chunked (a "
                "compressed body is sent with Content-Encoding: gzip or deflate)",
                (int)(unknown_n < 40 ? unknown_n : 40), unknown);
  if (lengths && length > max_body) {
    if (length == UINT64_MAX)
      return FAIL(413, "request body of %.40s bytes is larger than the server's limit of %llu "
                  "bytes (server.http_max_body_bytes)", first_length,
                  (unsigned long long)max_body);
    return FAIL(413, "request body of %llu bytes is larger than the server's limit of %llu "
                "bytes (server.http_max_body_bytes)", (unsigned long long)length,
                (unsigned long long)max_body);
  }
  return 0;
}

/* MHD's header iterator: keeps the framing fields, up to what fits. */
typedef struct collect {
  sip__http_field_t f[SIP__HTTP_FRAMING_FIELDS];
  size_t n;
  int overflow;
} collect_t;

static enum MHD_Result collect_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value) {
  (void)kind;
  collect_t *c = cls;
  if (strcasecmp(key, "Host") && strcasecmp(key, "Content-Length") &&
      strcasecmp(key, "Transfer-Encoding"))
    return MHD_YES;
  if (c->n == SIP__HTTP_FRAMING_FIELDS) {
    c->overflow = 1;
    return MHD_NO;
  }
  c->f[c->n++] = (sip__http_field_t){key, value ? value : ""};
  return MHD_YES;
}

unsigned sip__http_framing_problem(struct MHD_Connection *c, const char *version,
                                   uint64_t max_body, char *msg, size_t msg_n) {
  collect_t fields = {.n = 0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, collect_field, &fields);
  if (fields.overflow)
    return FAIL(400, "more than %d Host, Content-Length and Transfer-Encoding fields; expected "
                "one of each at most", SIP__HTTP_FRAMING_FIELDS);
  return sip__http_framing_check(version, fields.f, fields.n, max_body, msg, msg_n);
}
