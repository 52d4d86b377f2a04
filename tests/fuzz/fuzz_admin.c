/* libFuzzer target for operator requests on sessions (sip_server_admin:
 * the JSON of ADMIN_REQUEST and POST /v2/admin; docs/availability.md).
 *
 * One in-process server with two builtin pools (fault injection allowed,
 * a watchdog on one) takes every input. Contract: exactly one of error and
 * answer; an error has a known code and a message; an answer is a JSON
 * object with "ok": true naming the pool asked for. After each input the
 * pools' faults are cleared and their sessions resumed, and a request is
 * run on each, which must succeed: no request, however malformed, leaves
 * a pool unable to serve. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sip/sip.h"

#define CHECK(cond) \
  do {              \
    if (!(cond)) abort(); \
  } while (0)

static sip_server_t *srv;

static const char *const yaml =
    "server: {allow_fault_injection: true}\n"
    "session_pools:\n"
    "  - {name: a, backend: builtin, pool_size: 2, hang_timeout_ms: 50,\n"
    "     failover: {strategy: immediate_retry, max_retries: 1, fallback_pool: b}}\n"
    "  - {name: b, backend: builtin, pool_size: 1}\n";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  sip_server_options_t *o = sip_server_options_new();
  CHECK(o && !sip_server_options_set_config_string(o, yaml, "/fuzz/base"));
  sip_server_options_set_listen(o, 0);
  sip_server_options_set_wait_for_load(o, 1);
  CHECK(!sip_server_new(o, &srv));
  sip_server_options_free(o);
  return 0;
}

static void admin_ok(const char *req) {
  char *answer = NULL;
  sip_error_t *e = sip_server_admin(srv, req, strlen(req), &answer);
  CHECK(!e && answer);
  sip_free(answer);
}

static void serves(const char *pool) {
  sip_request_t *r = sip_request_new(pool);
  float v[3] = {1, 2, 3};
  int64_t dims[1] = {3};
  CHECK(r && !sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, dims,
                                                           v, sizeof v)));
  sip_request_set_timeout_ms(r, 5000);
  sip_response_t *resp = NULL;
  CHECK(!sip_server_infer(srv, r, &resp));
  CHECK(sip_response_code(resp) == SIP_OK);
  sip_response_free(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *answer = NULL;
  sip_error_t *e = sip_server_admin(srv, (const char *)data, size, &answer);
  CHECK(!e != !answer);
  if (e) {
    CHECK((unsigned)sip_error_code(e) < SIP_CODE_COUNT_ && sip_error_message(e));
    sip_error_free(e);
  } else {
    json_t *a = json_loads(answer, 0, NULL);
    CHECK(json_is_object(a) && json_is_true(json_object_get(a, "ok")));
    const char *pool = json_string_value(json_object_get(a, "pool"));
    CHECK(pool && (!strcmp(pool, "a") || !strcmp(pool, "b")));
    json_decref(a);
    sip_free(answer);
  }
  static const char *const reset[] = {
      "{\"action\":\"fault\",\"pool\":\"a\",\"kind\":\"none\"}",
      "{\"action\":\"fault\",\"pool\":\"b\",\"kind\":\"none\"}",
      "{\"action\":\"resume\",\"pool\":\"a\",\"session\":0}",
      "{\"action\":\"resume\",\"pool\":\"a\",\"session\":1}",
      "{\"action\":\"resume\",\"pool\":\"b\",\"session\":0}"};
  for (size_t i = 0; i < sizeof reset / sizeof *reset; i++) admin_ok(reset[i]);
  serves("a");
  serves("b");
  return 0;
}
