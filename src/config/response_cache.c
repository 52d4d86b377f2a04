/* sip — the config's server.response_cache block: where the response cache
 * keeps answers (docs/response_cache.md). Pools opt in with
 * session_pools[].response_cache (pools.c). */
#include "config/parse.h"

#include <stdlib.h>
#include <string.h>

#define REDIS_ADDRESS_EXPECT "HOST:PORT (port 1..65535; IPv6 hosts in brackets)"

static const char *const backend_names[] = {"memory", "redis", NULL};

/* HOST:PORT, the host [IPv6] in brackets, no spaces or controls. */
static bool valid_redis_address(const char *s, size_t len) {
  const char *colon = NULL;
  for (size_t i = 0; i < len; i++) {
    if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f) return false;
    if (s[i] == ':') colon = s + i;
  }
  if (!colon || colon == s || colon + 1 == s + len || len > 255) return false;
  size_t hl = (size_t)(colon - s);
  if (s[0] == '[' ? hl < 3 || s[hl - 1] != ']' : memchr(s, ':', hl) != NULL) return false;
  int64_t port = 0;
  size_t pl = len - hl - 1;
  if (pl > 5 || colon[1] == '+' || colon[1] == '-' || sip__cfg_parse_int(colon + 1, pl, &port))
    return false;
  return port >= 1 && port <= 65535;
}

enum { R_ADDRESS, R_TTL, R_TIMEOUT, R_COUNT };
static const sip__field_t redis_fields[R_COUNT] = {
    [R_ADDRESS] = {.name = "address", .type = F_STRING,
                   .offset = offsetof(sip__config_t, response_cache.redis_address),
                   .valid = valid_redis_address, .expect = REDIS_ADDRESS_EXPECT,
                   .doc = "The Redis server's address; default 127.0.0.1:6379."},
    [R_TTL] = {.name = "ttl_s", .type = F_INT,
               .offset = offsetof(sip__config_t, response_cache.redis_ttl_s), .def = 3600,
               .min = 0, .max = 31536000,
               .doc = "Seconds Redis keeps an answer (SET ... EX); 0 = until Redis evicts it."},
    [R_TIMEOUT] = {.name = "timeout_ms", .type = F_INT,
                   .offset = offsetof(sip__config_t, response_cache.redis_timeout_ms),
                   .def = 50, .min = 1, .max = 10000,
                   .doc = "Longest a connect or a command may take; past it (or when Redis "
                          "fails) the request runs uncached, the error is counted, and Redis is "
                          "not tried again for 100 ms, doubling up to 5 s while it fails."},
};
static const sip__section_t redis_section = {redis_fields, R_COUNT};

enum { C_BACKEND, C_BYTES, C_REDIS, C_COUNT };
static const sip__field_t rcache_fields[C_COUNT] = {
    [C_BACKEND] = {.name = "backend", .type = F_ENUM,
                   .offset = offsetof(sip__config_t, response_cache.backend),
                   .names = backend_names, .def = SIP__RCACHE_MEMORY,
                   .doc = "memory: answers kept in this process (LRU within max_bytes); redis: "
                          "in a Redis server, shared by every server that uses it."},
    [C_BYTES] = {.name = "max_bytes", .type = F_SIZE,
                 .offset = offsetof(sip__config_t, response_cache.max_bytes),
                 .def = (int64_t)64 << 20, .min = 1024, .max = (int64_t)1 << 40,
                 .doc = "memory: bytes of kept answers at most; the least recently used go "
                        "first."},
    [C_REDIS] = {.name = "redis", .type = F_SECTION, .section = &redis_section,
                 .doc = "The redis backend's server, TTL and timeouts."},
};
const sip__section_t sip__cfg_response_cache_section = {rcache_fields, C_COUNT};
_Static_assert(COUNT(rcache_fields) <= MAX_FIELDS && COUNT(redis_fields) <= MAX_FIELDS,
               "raise MAX_FIELDS");
