/* Helpers shared by the libsipclient unit tests (test_client_infer.c,
 * test_client_connect.c, test_client_subscribe.c): the group's in-process
 * server listening on a temporary unix socket and an ephemeral TCP port
 * (setup / teardown, which checks the socket file is removed), and the
 * float32 [rows, 3] requests the builtin echo pool returns as they are. */
#ifndef SIP_TEST_CLIENT_HELPERS_H
#define SIP_TEST_CLIENT_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sip/client.h"
#include "sip/sip.h"

static char sock_path[64];
static char unix_ep[96];

/* An in-process server of `yaml`, its pools loaded. */
static inline sip_server_t *start_yaml(const char *yaml) {
  sip_server_options_t *o = sip_server_options_new();
  assert_null(sip_server_options_set_config_string(o, yaml, "."));
  sip_server_options_set_wait_for_load(o, 1);
  sip_server_t *srv = NULL;
  sip_error_t *e = sip_server_new(o, &srv);
  sip_server_options_free(o);
  if (e) fprintf(stderr, "%s\n", sip_error_message(e));
  assert_null(e);
  return srv;
}

static inline int setup(void **state) {
  snprintf(sock_path, sizeof sock_path, "/tmp/sip_test_client_%d.sock", (int)getpid());
  snprintf(unix_ep, sizeof unix_ep, "ipc://%s", sock_path);
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "server: {endpoints: ['%s', 'tcp://127.0.0.1:0'], log_level: error}\n"
           "session_pools:\n"
           "  - {name: echo, backend: builtin, pool_size: 2, backend_options: {shape: '-1,3'}}\n"
           "  - {name: slow, backend: builtin, pool_size: 1,\n"
           "     backend_options: {shape: '-1', delay_ms: 100}}\n"
           "  - {name: seq, backend: builtin, backend_options: {shape: '-1,3'},\n"
           "     sequence_batching: {}}\n",
           unix_ep);
  sip_server_t *srv = start_yaml(yaml);
  assert_int_equal(sip_server_endpoint_count(srv), 2);
  *state = srv;
  return 0;
}

static inline int teardown(void **state) {
  sip_server_free(*state);
  assert_int_equal(access(sock_path, F_OK), -1); /* the socket file is removed */
  return 0;
}

static inline sip_tensor_t *vec3(float base, int64_t rows) {
  float v[64 * 3];
  for (int i = 0; i < rows * 3; i++) v[i] = base + (float)i;
  int64_t dims[2] = {rows, 3};
  return sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, dims, v,
                             (size_t)rows * 3 * sizeof(float));
}

static inline void check_echo(const sip_client_response_t *r, float base, int64_t rows) {
  const sip_tensor_t *t = sip_client_response_output(r, "output");
  assert_non_null(t);
  assert_int_equal(t->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->dims[0], rows);
  assert_int_equal(t->dims[1], 3);
  const float *f = t->data;
  for (int i = 0; i < rows * 3; i++) assert_true(f[i] == base + (float)i);
}

#endif
