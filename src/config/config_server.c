/* sip — the config's server section: process-wide settings, the endpoints
 * the server listens on and the HTTP and gRPC front-ends' addresses. */
#include "config/parse.h"

#include <stdio.h>
#include <string.h>

#include "core/core.h"

_Static_assert(SIP__LOG_DEBUG == 0 && SIP__LOG_INFO == 1 && SIP__LOG_WARN == 2 && SIP__LOG_ERROR == 3,
               "log_level_names[] follows the enum order");

static int parse_endpoints(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_memory_budget(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static bool valid_http_address(const char *s, size_t len);

static const char *const log_level_names[] = {"debug", "info", "warn", "error", NULL};
static const char *const log_format_names[] = {"text", "json", NULL};
static const char *const model_control_names[] = {"startup", "explicit", NULL};

#define ENDPOINT_EXPECT                                                                          \
  "ipc://PATH, unix:///ABSOLUTE/PATH (at most 107 bytes) or tcp://HOST:PORT (port 0..65535, 0 = " \
  "ephemeral; IPv6 hosts in brackets)"
#define HTTP_EXPECT "HOST:PORT (port 0..65535, 0 = ephemeral; IPv6 hosts in brackets)"
#define BUDGET_MAX_MB 16777216 /* 16 TiB */
#define BUDGET_EXPECT "a whole number of MiB, 1..16777216, or auto"

enum { S_ENDPOINTS, S_INTRA, S_INTER, S_SPIN, S_FRAME, S_LOG, S_HTTP, S_HTTP_BODY, S_HTTP_THREADS,
       S_SLOTS, S_REPO, S_CONTROL, S_GRPC, S_GRPC_MSG, S_GRPC_THREADS, S_DRAIN, S_DRAIN_DELAY, S_STATE,
       S_UNSENT, S_FAULTS, S_CONNS, S_FRAME_TIMEOUT, S_RECV_TOTAL, S_RECV_CONN,
       S_HTTP_CONNS, S_HTTP_PER_IP, S_HTTP_HEADER_TIMEOUT, S_AUTH, S_TLS, S_SOCK_MODE,
       S_SOCK_OWNER, S_SOCK_GROUP, S_HOSTS, S_DASHBOARD, S_STRICT, S_LOG_FORMAT, S_RCACHE, S_BUDGET, S_COUNT };
static const sip__field_t server_fields[S_COUNT] = {
    [S_ENDPOINTS] = {.name = "endpoints", .type = F_CUSTOM, .parse = parse_endpoints,
                     .expect = "a non-empty list of endpoints: " ENDPOINT_EXPECT,
                     .doc = "Addresses to listen on; default [" DEFAULT_ENDPOINT "]."},
    [S_INTRA] = {.name = "intra_op_threads", .type = F_INT,
                 .offset = offsetof(sip__config_t, engine.intra_op_threads),
                 .def = 0, .min = 0, .max = 256,
                 .doc = "Threads of the shared intra-op pool; 0 = number of cores."},
    [S_INTER] = {.name = "inter_op_threads", .type = F_INT,
                 .offset = offsetof(sip__config_t, engine.inter_op_threads),
                 .def = 0, .min = 0, .max = 256,
                 .doc = "Threads of the shared inter-op pool; 0 = 1."},
    [S_SPIN] = {.name = "allow_spinning", .type = F_BOOL,
                .offset = offsetof(sip__config_t, engine.allow_spinning), .def = 0,
                .doc = "Let idle engine threads spin instead of sleeping."},
    [S_FRAME] = {.name = "max_frame_bytes", .type = F_SIZE,
                 .offset = offsetof(sip__config_t, max_frame_bytes),
                 .def = (int64_t)256 << 20, .min = 1024, .max = (int64_t)4 << 30,
                 .doc = "Largest request or response frame."},
    [S_UNSENT] = {.name = "max_unsent_bytes", .type = F_SIZE,
                  .offset = offsetof(sip__config_t, max_unsent_bytes),
                  .def = (int64_t)16 << 20, .min = 4096, .max = (int64_t)4 << 30,
                  .doc = "Native protocol backpressure: a connection whose answers not yet "
                         "sent pass this many bytes is not read from until the client has "
                         "taken half of them."},
    [S_CONNS] = {.name = "max_connections", .type = F_INT,
                 .offset = offsetof(sip__config_t, max_connections), .def = 1024, .min = 1,
                 .max = 1048576,
                 .doc = "Native protocol connections open at once (unix and tcp together); one "
                        "more is answered RESOURCE_EXHAUSTED and closed."},
    [S_FRAME_TIMEOUT] = {.name = "frame_timeout_ms", .type = F_INT,
                         .offset = offsetof(sip__config_t, frame_timeout_ms), .def = 30000,
                         .min = 0, .max = 3600000,
                         .doc = "Native protocol: a connection in the middle of a frame whose "
                                "bytes stop coming for this long is closed (a frame header must "
                                "be complete this long after its first byte), also while it is "
                                "not read from because its client does not read its answers; so "
                                "is a connection closing after an ERROR frame whose client has "
                                "not taken its last bytes this long after; 0 = never."},
    [S_RECV_TOTAL] = {.name = "max_receive_bytes", .type = F_SIZE,
                      .offset = offsetof(sip__config_t, max_receive_bytes),
                      .def = (int64_t)1 << 30, .min = 4096, .max = (int64_t)1 << 40,
                      .doc = "Native protocol: bytes of request frames all connections together "
                             "hold (being received, or received and not yet released by their "
                             "requests); a frame that would pass it is answered "
                             "RESOURCE_EXHAUSTED and its bytes skipped."},
    [S_RECV_CONN] = {.name = "max_connection_receive_bytes", .type = F_SIZE,
                     .offset = offsetof(sip__config_t, max_connection_receive_bytes),
                     .def = (int64_t)512 << 20, .min = 4096, .max = (int64_t)1 << 40,
                     .doc = "The same budget for one connection."},
    [S_HTTP_CONNS] = {.name = "http_max_connections", .type = F_INT,
                      .offset = offsetof(sip__config_t, http_max_connections), .def = 1000,
                      .min = 1, .max = 1048576,
                      .doc = "HTTP connections open at once; at the limit a new one closes "
                             "the connection waiting longest for a request's headers, or is "
                             "answered 503 and closed when every connection has a request in "
                             "progress."},
    [S_HTTP_PER_IP] = {.name = "http_max_connections_per_ip", .type = F_INT,
                       .offset = offsetof(sip__config_t, http_max_connections_per_ip),
                       .def = 256, .min = 0, .max = 1048576,
                       .doc = "HTTP connections open at once from one client address, held "
                              "to half of http_max_connections; one more is answered 503 and "
                              "closed; 0 = no per-address limit (e.g. behind a proxy)."},
    [S_HTTP_HEADER_TIMEOUT] = {.name = "http_header_timeout_ms", .type = F_INT,
                               .offset = offsetof(sip__config_t, http_header_timeout_ms),
                               .def = 30000, .min = 100, .max = 3600000,
                               .doc = "An HTTP request's headers must be complete this long "
                                      "after the connection opened or its previous answer was "
                                      "sent, however fast bytes come; else the connection is "
                                      "closed (this also ends idle keep-alive connections)."},
    [S_LOG] = {.name = "log_level", .type = F_ENUM, .offset = offsetof(sip__config_t, log_level),
               .names = log_level_names, .def = SIP__LOG_INFO, .doc = "Least severe level logged."},
    [S_LOG_FORMAT] = {.name = "log_format", .type = F_ENUM,
                      .offset = offsetof(sip__config_t, log_format), .names = log_format_names,
                      .def = SIP__LOG_TEXT,
                      .doc = "How log lines are written on stderr: text (logfmt: ts=... level=... "
                             "msg=\"...\" key=value ...) or json (one JSON object per line with the "
                             "same keys, values as strings)."},
    /* KServe v2 HTTP/REST front-end (src/http/). */
    [S_HTTP] = {.name = "http", .type = F_STRING, .offset = offsetof(sip__config_t, http),
                .valid = valid_http_address, .expect = HTTP_EXPECT,
                .doc = "Address of the KServe v2 HTTP/REST front-end and /metrics; absent = off."},
    [S_HTTP_BODY] = {.name = "http_max_body_bytes", .type = F_SIZE,
                     .offset = offsetof(sip__config_t, http_max_body_bytes),
                     .def = (int64_t)64 << 20, .min = 1024, .max = (int64_t)4 << 30,
                     .doc = "Largest HTTP request body; larger ones get 413 before being read."},
    [S_HTTP_THREADS] = {.name = "http_threads", .type = F_INT,
                        .offset = offsetof(sip__config_t, http_threads),
                        .def = 2, .min = 1, .max = 64,
                        .doc = "HTTP event-loop threads (they never wait for inference)."},
    [S_SLOTS] = {.name = "execution_slots", .type = F_INT,
                 .offset = offsetof(sip__config_t, execution_slots), .def = 0, .min = 0,
                 .max = 1024,
                 .doc = "Executions running at once across all pools (more wait, ordered by "
                        "pool priority and compute share); 0 = number of cores."},
    [S_REPO] = {.name = "model_repository", .type = F_STRING,
                .offset = offsetof(sip__config_t, model_repository),
                .expect = "a directory of <model>/<version>/<model file>",
                .doc = "Model repository: every <model> directory is a pool per served version; "
                       "relative to the config file."},
    [S_CONTROL] = {.name = "model_control", .type = F_ENUM,
                   .offset = offsetof(sip__config_t, model_control), .names = model_control_names,
                   .def = SIP__MODEL_CONTROL_STARTUP,
                   .doc = "startup: load every repository model at start; explicit: only on "
                          "request. Load/unload work in both."},
    /* KServe v2 gRPC front-end (src/grpc/). */
    [S_GRPC] = {.name = "grpc", .type = F_STRING, .offset = offsetof(sip__config_t, grpc),
                .valid = valid_http_address, .expect = HTTP_EXPECT,
                .doc = "Address of the KServe v2 gRPC front-end (and grpc.health.v1); absent = "
                       "off."},
    [S_GRPC_MSG] = {.name = "grpc_max_message_bytes", .type = F_SIZE,
                    .offset = offsetof(sip__config_t, grpc_max_message_bytes),
                    .def = (int64_t)64 << 20, .min = 1024, .max = ((int64_t)2 << 30) - 1,
                    .doc = "Largest gRPC message received or sent; larger ones get "
                           "RESOURCE_EXHAUSTED."},
    [S_GRPC_THREADS] = {.name = "grpc_threads", .type = F_INT,
                        .offset = offsetof(sip__config_t, grpc_threads),
                        .def = 1, .min = 1, .max = 64,
                        .doc = "gRPC completion-queue threads (they never wait for inference). "
                               "One is fastest unless it is saturated: gRPC core polls with one "
                               "thread at a time, so a second hands every event over."},
    [S_DRAIN] = {.name = "drain_timeout_ms", .type = F_INT,
                 .offset = offsetof(sip__config_t, drain_timeout_ms), .def = 30000, .min = 0,
                 .max = 3600000,
                 .doc = "On SIGTERM, how long requests already admitted may take to finish; "
                        "what is still queued then is answered UNAVAILABLE. Clients then get "
                        "about a second in all to take their last answers, however many stopped "
                        "reading, and the process exits."},
    [S_DRAIN_DELAY] = {.name = "drain_delay_ms", .type = F_INT,
                       .offset = offsetof(sip__config_t, drain_delay_ms), .def = 0, .min = 0,
                       .max = 600000,
                       .doc = "On SIGTERM, how long readiness is false while sipd still serves "
                              "every request, before the drain (drain_timeout_ms) begins: the "
                              "time a load balancer's health checks need to stop sending "
                              "(HAProxy: inter x fall and a margin; Kubernetes' preStop sleep "
                              "does the same). 0: the drain begins at once."},
    [S_STATE] = {.name = "state_dir", .type = F_STRING,
                 .offset = offsetof(sip__config_t, state_dir),
                 .expect = "a writable directory",
                 .doc = "Directory of the runtime state checkpoint (state.json: repository "
                        "loads and unloads, pools changed at run time) and of the idempotency "
                        "journal (answers kept for idempotency keys): they survive a restart; "
                        "relative to the config file; absent = not kept."},
    [S_FAULTS] = {.name = "allow_fault_injection", .type = F_BOOL,
                  .offset = offsetof(sip__config_t, allow_fault_injection), .def = 0,
                  .doc = "Accept fault injection requests (`sip fault`, POST /v2/admin; "
                         "docs/availability.md); for testing failover, never in production."},
    /* Security (docs/security.md; config_security.c). */
    [S_AUTH] = {.name = "auth", .type = F_SECTION, .section = &sip__cfg_auth_section,
                .doc = "Bearer tokens per API group (HTTP Authorization, gRPC authorization "
                       "metadata, the native AUTH message); absent = open, management from "
                       "local peers only."},
    [S_TLS] = {.name = "tls", .type = F_SECTION, .section = &sip__cfg_tls_section,
               .doc = "TLS for the HTTP and gRPC front-ends; absent = plain text."},
    [S_SOCK_MODE] = {.name = "socket_mode", .type = F_CUSTOM, .parse = sip__cfg_parse_socket_mode,
                     .expect = CFG_SOCKET_MODE_EXPECT,
                     .doc = "Permissions of unix socket endpoints, set before they accept "
                            "connections; default 0600."},
    [S_SOCK_OWNER] = {.name = "socket_owner", .type = F_STRING,
                      .offset = offsetof(sip__config_t, socket_owner),
                      .expect = "a user name or numeric uid",
                      .doc = "Owner of unix socket endpoints (changing it needs privilege); "
                             "absent = the server's user."},
    [S_SOCK_GROUP] = {.name = "socket_group", .type = F_STRING,
                      .offset = offsetof(sip__config_t, socket_group),
                      .expect = "a group name or numeric gid",
                      .doc = "Group of unix socket endpoints (with socket_mode 0660: who may "
                             "connect); absent = the server's group."},
    [S_HOSTS] = {.name = "allowed_hosts", .type = F_CUSTOM, .parse = sip__cfg_parse_allowed_hosts,
                 .expect = CFG_ALLOWED_HOSTS_EXPECT,
                 .doc = "Host header values the HTTP front-end answers; absent = localhost "
                        "names, the listen address, and any Host when listening on a wildcard "
                        "address with tokens set."},
    /* The live dashboard on a port of its own (src/http/dashboard*.c). */
    [S_DASHBOARD] = {.name = "dashboard", .type = F_STRING,
                     .offset = offsetof(sip__config_t, dashboard),
                     .valid = valid_http_address, .expect = HTTP_EXPECT,
                     .doc = "Address serving only the live dashboard (/dashboard) and the read-only "
                            "data it shows (docs/dashboard.md); the seed's port is 10200, e.g. "
                            "\"0.0.0.0:10200\". The dashboard is also on server.http. Absent = off."},
    [S_STRICT] = {.name = "strict_readiness", .type = F_BOOL,
                  .offset = offsetof(sip__config_t, strict_readiness), .def = 1,
                  .doc = "Server readiness (/v2/health/ready, gRPC ServerReady, sip ready, "
                         "sip_ready) only when every configured pool and pipeline is READY, as "
                         "Triton's default; false: ready once loading is over, serving the "
                         "models that loaded and skipping the failed ones (seed 003)."},
    [S_RCACHE] = {.name = "response_cache", .type = F_SECTION,
                  .section = &sip__cfg_response_cache_section,
                  .doc = "Where pools with response_cache: true keep their answers "
                         "(docs/response_cache.md); absent = memory, 64 MiB."},
    [S_BUDGET] = {.name = "memory_budget_mb", .type = F_CUSTOM, .parse = parse_memory_budget,
                  .expect = BUDGET_EXPECT,
                  .doc = "Memory the server's models may take, in MiB; auto = 80% of the "
                         "cgroup's memory limit, else of MemAvailable at start. Shown against "
                         "the models' measured memory (sip status, /v2/status, "
                         "sip_memory_budget_bytes) and ModelMesh's capacity; on_demand models "
                         "load within it, evicting idle ones (residency, docs/elastic.md). "
                         "Absent = none."},
};
const sip__section_t sip__cfg_server_section = {server_fields, S_COUNT};
_Static_assert(COUNT(server_fields) <= MAX_FIELDS, "raise MAX_FIELDS");

/* server.memory_budget_mb: MiB, or auto (stored as -1). */
static int parse_memory_budget(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__config_t *cfg = base;
  char shown[SHOW_MAX * 4 + 8];
  if (sip__cfg_want_scalar(c, v, key, BUDGET_EXPECT)) return -1;
  const char *s = text(v);
  size_t len = v->data.scalar.length;
  int64_t mb = 0;
  if (len == 4 && !memcmp(s, "auto", 4)) {
    cfg->memory_budget_mb = -1;
    return 0;
  }
  int r = is_plain(v) ? sip__cfg_parse_int(s, len, &mb) : -1;
  if (r == -1)
    return sip__cfg_fail(c, v->start_mark, key, "%s is not a number; expected %s",
                         sip__cfg_show(shown, sizeof shown, s, len), BUDGET_EXPECT);
  if (r == -2 || mb < 1 || mb > BUDGET_MAX_MB)
    return sip__cfg_fail(c, v->start_mark, key, "%s is out of range; expected %s",
                         sip__cfg_show(shown, sizeof shown, s, len), BUDGET_EXPECT);
  cfg->memory_budget_mb = mb;
  return 0;
}

/* Why `s` is not a valid endpoint, or NULL. */
static const char *endpoint_problem(const char *s, size_t len, char *why, size_t n) {
  if (memchr(s, '\0', len)) return "contains a NUL byte";
  if (len >= 6 && !strncmp(s, "ipc://", 6)) {
    if (len == 6) return "has an empty path";
    if (len - 6 > UNIX_PATH_MAX)
      return snprintf(why, n, "has a %zu-byte path, longer than a Unix socket path can be",
                      len - 6), why;
    return NULL;
  }
  if (len >= 7 && !strncmp(s, "unix://", 7)) {
    if (len == 7 || s[7] != '/') return "does not have an absolute path";
    if (len - 7 > UNIX_PATH_MAX)
      return snprintf(why, n, "has a %zu-byte path, longer than a Unix socket path can be",
                      len - 7), why;
    return NULL;
  }
  if (len >= 6 && !strncmp(s, "tcp://", 6)) {
    const char *h = s + 6, *end = s + len, *colon;
    if (h < end && *h == '[') {
      const char *rb = memchr(h, ']', (size_t)(end - h));
      if (!rb || rb == h + 1) return "has a malformed IPv6 host";
      for (const char *q = h + 1; q < rb; q++)
        if (!strchr("0123456789abcdefABCDEF:.", *q)) return "has a malformed IPv6 host";
      if (rb + 1 == end || rb[1] != ':') return "has no port";
      colon = rb + 1;
    } else {
      colon = NULL;
      for (const char *q = h; q < end; q++)
        if (*q == ':') colon = q;
      if (!colon) return "has no port";
      if (colon == h) return "has no host";
      for (const char *q = h; q < colon; q++) {
        if (*q == ':') return "has an IPv6 host without brackets";
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
              *q == '.' || *q == '-' || *q == '_'))
          return "has an invalid host";
      }
    }
    const char *port = colon + 1;
    size_t pl = (size_t)(end - port);
    int64_t pv = 0;
    if (pl == 0) return "has no port";
    if (pl > 5 || port[0] == '+' || port[0] == '-' || sip__cfg_parse_int(port, pl, &pv) || pv > 65535)
      return "has a port out of range";
    return NULL;
  }
  return "has an unknown scheme";
}

/* server.http is a tcp endpoint without the scheme: one grammar for both. */
static bool valid_http_address(const char *s, size_t len) {
  char buf[300], why[128];
  if (len > sizeof buf - 7 || memchr(s, '\0', len)) return false;
  memcpy(buf, "tcp://", 6);
  memcpy(buf + 6, s, len);
  return endpoint_problem(buf, len + 6, why, sizeof why) == NULL;
}

static int parse_endpoints(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__config_t *cfg = base;
  const char *exp = server_fields[S_ENDPOINTS].expect;
  char ikey[KEY_MAX], shown[SHOW_MAX * 4 + 8], why[128];

  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, exp);
  size_t n = seq_len(v);
  if (n == 0) return sip__cfg_fail(c, v->start_mark, key, "is empty; expected %s", exp);
  cfg->endpoints = sip__calloc(n, sizeof *cfg->endpoints);
  if (!cfg->endpoints) return sip__cfg_oom(c);
  cfg->n_endpoints = n;
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = seq_item(c, v, i);
    sip__cfg_key_index(ikey, key, i);
    if (!e) return sip__cfg_oom(c);
    if (sip__cfg_want_scalar(c, e, ikey, ENDPOINT_EXPECT)) return -1;
    const char *s = text(e);
    size_t len = e->data.scalar.length;
    const char *problem = endpoint_problem(s, len, why, sizeof why);
    if (problem)
      return sip__cfg_fail(c, e->start_mark, ikey, "%s %s; expected %s", sip__cfg_show(shown, sizeof shown, s, len),
                      problem, ENDPOINT_EXPECT);
    for (size_t j = 0; j < i; j++)
      if (strlen(cfg->endpoints[j]) == len && !memcmp(cfg->endpoints[j], s, len))
        return sip__cfg_fail(c, e->start_mark, ikey, "%s is listed twice (also [%zu]); expected each "
                        "endpoint once", sip__cfg_show(shown, sizeof shown, s, len), j);
    if (!(cfg->endpoints[i] = sip__strndup(s, len))) return sip__cfg_oom(c);
  }
  return 0;
}

sip_error_t *sip__config_set_addresses(sip__config_t *cfg, const char *http, const char *grpc,
                                       const char *const *endpoints, size_t n) {
  char why[128];
  const char *addr[2] = {http, grpc}, *flag[2] = {"--http / SIP_HTTP", "--grpc / SIP_GRPC"};
  for (int k = 0; k < 2; k++)
    if (addr[k] && !valid_http_address(addr[k], strlen(addr[k])))
      return sip_error_new(SIP_INVALID_ARGUMENT, "%s address '%.200s' is not one; expected %s",
                           flag[k], addr[k], HTTP_EXPECT);
  for (size_t i = 0; i < n; i++) {
    const char *problem = endpoint_problem(endpoints[i], strlen(endpoints[i]), why, sizeof why);
    if (problem)
      return sip_error_new(SIP_INVALID_ARGUMENT, "--endpoint '%.200s' %s; expected %s",
                           endpoints[i], problem, ENDPOINT_EXPECT);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(endpoints[i], endpoints[j]))
        return sip_error_new(SIP_INVALID_ARGUMENT, "--endpoint '%.200s' is given twice; expected "
                             "each endpoint once", endpoints[i]);
  }
  char *nh = http ? sip__strdup(http) : NULL, *ng = grpc ? sip__strdup(grpc) : NULL;
  char **ne = n ? sip__calloc(n, sizeof *ne) : NULL;
  int oom = (http && !nh) || (grpc && !ng) || (n && !ne);
  for (size_t i = 0; !oom && i < n; i++) oom = !(ne[i] = sip__strdup(endpoints[i]));
  if (oom) {
    sip__free(nh);
    sip__free(ng);
    for (size_t i = 0; ne && i < n; i++) sip__free(ne[i]);
    sip__free(ne);
    return SIP__OOM();
  }
  if (nh) sip__free(cfg->http), cfg->http = nh;
  if (ng) sip__free(cfg->grpc), cfg->grpc = ng;
  if (ne) {
    for (size_t i = 0; i < cfg->n_endpoints; i++) sip__free(cfg->endpoints[i]);
    sip__free(cfg->endpoints);
    cfg->endpoints = ne;
    cfg->n_endpoints = n;
  }
  return NULL;
}
