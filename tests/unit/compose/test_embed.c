/* Embedding sip through the public API only: a backend defined here and
 * registered with sip_backend_register serves a pool named in a YAML
 * config; a front-end defined here is attached with sip_server_add_frontend,
 * listed among the server's endpoints and connection counts, and stopped
 * when the server is freed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "sip/frontend.h"
#include "sip/sip.h"

/* ---- a backend: y = 2x over float32 [N, 3] ---- */

static sip_io_desc_t in_desc = {.name = "x", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 3}};
static sip_io_desc_t out_desc = {.name = "y", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 3}};
static int loads, executions;
static char seen_option[32];

static sip_error_t *d_load(void *state, const char *path, const sip_kv_t *opts, size_t n,
                           void **model) {
  (void)state;
  assert_null(path); /* it needs no file, and says so by its flags */
  for (size_t i = 0; i < n; i++)
    if (!strcmp(opts[i].key, "factor")) snprintf(seen_option, sizeof seen_option, "%s", opts[i].value);
  loads++;
  *model = &in_desc;
  return NULL;
}

static void d_describe(void *model, const sip_io_desc_t **in, size_t *ni, const sip_io_desc_t **out,
                       size_t *no) {
  (void)model;
  *in = &in_desc;
  *ni = 1;
  *out = &out_desc;
  *no = 1;
}

static sip_error_t *d_session_new(void *model, void **session) {
  *session = model;
  return NULL;
}

static sip_error_t *d_execute(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                              const char *const *out_names, size_t n_out, sip_tensor_t **outputs) {
  (void)session;
  assert_int_equal(n_inputs, 1);
  assert_int_equal(n_out, 1);
  const sip_tensor_t *x = inputs[0];
  float v[64];
  size_t n = x->nbytes / sizeof(float);
  assert_true(n <= 64);
  for (size_t i = 0; i < n; i++) v[i] = 2.0f * ((const float *)x->data)[i];
  sip_tensor_t *y = sip_tensor_new_copy(out_names[0], SIP_DTYPE_FLOAT32, x->rank, x->dims, v,
                                        n * sizeof(float));
  if (!y) return sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory");
  outputs[0] = y;
  executions++;
  return NULL;
}

static void d_session_free(void *session) { (void)session; }
static void d_model_free(void *model) { (void)model; }

static const sip_backend_vtable_t doubler = {
    .name = "doubler",
    .load = d_load,
    .describe = d_describe,
    .session_new = d_session_new,
    .execute = d_execute,
    .session_free = d_session_free,
    .model_free = d_model_free,
};

/* ---- a front-end that only counts ---- */

typedef struct fe_state {
  int started, stopped;
  char address[64];
} fe_state_t;

static fe_state_t fe;

static sip_error_t *fe_start(sip_server_t *s, const void *options, void **state) {
  (void)s;
  snprintf(fe.address, sizeof fe.address, "test://%s", (const char *)options);
  fe.started++;
  *state = &fe;
  return NULL;
}
static void fe_stop(void *state) { ((fe_state_t *)state)->stopped++; }
static size_t fe_count(void *state) {
  (void)state;
  return 1;
}
static const char *fe_address(void *state, size_t i) {
  return i == 0 ? ((fe_state_t *)state)->address : NULL;
}
static void fe_connections(void *state, sip_frontend_count_fn emit, void *ctx) {
  (void)state;
  emit(ctx, "test", 7);
}

static const sip_frontend_vtable_t counting_frontend = {
    .name = "test",
    .start = fe_start,
    .stop = fe_stop,
    .address_count = fe_count,
    .address = fe_address,
    .connections = fe_connections,
};

static sip_server_t *new_server(const char *yaml) {
  sip_server_options_t *o = sip_server_options_new();
  assert_non_null(o);
  sip_server_options_set_listen(o, 0);
  sip_server_options_set_wait_for_load(o, 1);
  sip_error_t *e = sip_server_options_set_config_string(o, yaml, ".");
  sip_server_t *s = NULL;
  if (!e) e = sip_server_new(o, &s);
  sip_server_options_free(o);
  if (e) fail_msg("server: %s", sip_error_message(e));
  return s;
}

static void test_registered_backend_serves_a_pool(void **state) {
  (void)state;
  assert_null(sip_backend_register(&doubler));
  sip_server_t *s = new_server("session_pools:\n"
                               "  - name: twice\n"
                               "    backend: doubler\n"
                               "    backend_options: {factor: '2'}\n");
  assert_int_equal(loads, 1);
  assert_string_equal(seen_option, "2");
  sip_request_t *r = sip_request_new("twice");
  int64_t dims[2] = {2, 3};
  float xv[6];
  for (int i = 0; i < 6; i++) xv[i] = (float)i - 1.5f;
  sip_tensor_t *x = sip_tensor_new_copy("x", SIP_DTYPE_FLOAT32, 2, dims, xv, sizeof xv);
  assert_null(sip_request_add_input(r, x));
  sip_response_t *resp = NULL;
  assert_null(sip_server_infer(s, r, &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  const sip_tensor_t *y = sip_response_output_by_name(resp, "y");
  assert_non_null(y);
  for (int i = 0; i < 6; i++) assert_true(((float *)y->data)[i] == 2.0f * ((float)i - 1.5f));
  sip_response_free(resp);
  assert_int_equal(executions, 1);
  /* The introspection names the backend, and its platform is its name. */
  char *pools = sip_server_info_json(s, SIP_INFO_POOLS);
  assert_non_null(strstr(pools, "\"backend\":\"doubler\""));
  assert_non_null(strstr(pools, "\"platform\":\"doubler\""));
  sip_free(pools);
  sip_server_free(s);
}

static void test_register_refuses_bad_backends(void **state) {
  (void)state;
  sip_error_t *e = sip_backend_register(&doubler); /* registered by the test before */
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "exists already"));
  sip_error_free(e);
  sip_backend_vtable_t nameless = doubler;
  nameless.name = "";
  e = sip_backend_register(&nameless);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "needs a name"));
  sip_error_free(e);
  sip_backend_vtable_t spaced = doubler;
  spaced.name = "two words";
  e = sip_backend_register(&spaced);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "has ' '"));
  sip_error_free(e);
  sip_backend_vtable_t partial = doubler;
  partial.name = "partial";
  partial.execute = NULL;
  e = sip_backend_register(&partial);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "lacks one of"));
  sip_error_free(e);
}

static void test_unknown_backend_lists_the_table(void **state) {
  (void)state;
  sip_server_options_t *o = sip_server_options_new();
  sip_server_options_set_listen(o, 0);
  sip_error_t *e = sip_server_options_set_config_string(
      o, "session_pools:\n  - name: p\n    backend: nope\n", ".");
  sip_server_t *s = NULL;
  if (!e) e = sip_server_new(o, &s);
  sip_server_options_free(o);
  assert_null(s);
  assert_non_null(e);
  /* The config check and the engine read one table: the registered backend
   * is among the names offered. */
  assert_non_null(strstr(sip_error_message(e), "\"nope\""));
  assert_non_null(strstr(sip_error_message(e), "onnxruntime"));
  assert_non_null(strstr(sip_error_message(e), "doubler"));
  sip_error_free(e);
}

static void test_frontend_attaches_lists_and_stops(void **state) {
  (void)state;
  sip_server_t *s = new_server("session_pools:\n"
                               "  - name: b\n"
                               "    backend: builtin\n");
  size_t before = sip_server_endpoint_count(s);
  assert_null(sip_server_add_frontend(s, &counting_frontend, "here"));
  assert_int_equal(fe.started, 1);
  assert_int_equal(sip_server_endpoint_count(s), before + 1);
  assert_string_equal(sip_server_endpoint(s, before), "test://here");
  char *status = sip_server_info_json(s, SIP_INFO_STATUS);
  json_t *doc = json_loads(status, 0, NULL);
  sip_free(status);
  assert_non_null(doc);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "connections"), "test")),
                   7);
  json_decref(doc);
  /* A front-end without stop is refused. */
  sip_frontend_vtable_t broken = counting_frontend;
  broken.stop = NULL;
  sip_error_t *e = sip_server_add_frontend(s, &broken, "x");
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  assert_int_equal(fe.started, 1);
  assert_int_equal(fe.stopped, 0);
  sip_server_free(s);
  assert_int_equal(fe.stopped, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registered_backend_serves_a_pool),
      cmocka_unit_test(test_register_refuses_bad_backends),
      cmocka_unit_test(test_unknown_backend_lists_the_table),
      cmocka_unit_test(test_frontend_attaches_lists_and_stops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
