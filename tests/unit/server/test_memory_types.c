/* Tensors with memory types: a backend registered with sip_backend_register
 * that wants its input in "device" memory (simulated here: blocks its own
 * alloc hands out, tagged) and returns its output there. The engine copies
 * the request's input there and the output back to host memory, through
 * the backend's alloc and copy hooks, and counts each copy in
 * sip_memory_copies_total / sip_memory_copy_bytes_total by direction; a
 * pool whose backend works in host memory copies nothing and counts 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inproc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/observe/prometheus.h"
#include "sip/sip.h"

/* ---- "device" memory: blocks tagged so execute can tell them apart ---- */

#define TAG 0x5eedULL
typedef struct block {
  uint64_t tag;
  int device;
  size_t size;
  _Alignas(16) unsigned char data[];
} block_t;

static int allocs, frees, copies_in, copies_out;

static block_t *block_of(const void *data) {
  return (block_t *)((unsigned char *)data - offsetof(block_t, data));
}

static void release(void *ctx) {
  frees++;
  free(ctx);
}

static sip_error_t *f_alloc(void *model, sip_memory_type_t type, int device, size_t size,
                            sip_buf_t **out) {
  (void)model;
  assert_int_equal(type, SIP_MEMORY_DEVICE);
  block_t *b = malloc(sizeof *b + size + 1);
  assert_non_null(b);
  b->tag = TAG;
  b->device = device;
  b->size = size;
  allocs++;
  *out = sip_buf_wrap(b->data, size, release, b);
  return NULL;
}

static sip_error_t *f_copy(void *model, void *dst, sip_memory_type_t dt, int dd, const void *src,
                           sip_memory_type_t st, int sd, size_t size) {
  (void)model;
  if (dt == SIP_MEMORY_DEVICE) {
    assert_int_equal(block_of(dst)->tag, TAG);
    assert_int_equal(block_of(dst)->device, dd);
    copies_in++;
  }
  if (st == SIP_MEMORY_DEVICE) {
    assert_int_equal(block_of(src)->tag, TAG);
    assert_int_equal(block_of(src)->device, sd);
    copies_out++;
  }
  memcpy(dst, src, size);
  return NULL;
}

/* ---- the backend: y = x + 1 over float32 [N], all in device 1's memory ---- */

static sip_io_desc_t in_desc = {.name = "x", .dtype = SIP_DTYPE_FLOAT32, .rank = 1, .dims = {-1}};
static sip_io_desc_t out_desc = {.name = "y", .dtype = SIP_DTYPE_FLOAT32, .rank = 1, .dims = {-1}};

static int model_loads, model_frees;

static sip_error_t *f_load(void *state, const char *path, const sip_kv_t *o, size_t n, void **m) {
  (void)state, (void)path, (void)o, (void)n;
  model_loads++;
  *m = &in_desc;
  return NULL;
}

static void f_describe(void *model, const sip_io_desc_t **in, size_t *ni,
                       const sip_io_desc_t **out, size_t *no) {
  (void)model;
  *in = &in_desc;
  *ni = 1;
  *out = &out_desc;
  *no = 1;
}

static sip_error_t *f_session_new(void *model, void **s) {
  *s = model;
  return NULL;
}

static sip_error_t *f_execute(void *session, const sip_tensor_t *const *in, size_t n_in,
                              const char *const *names, size_t n_out, sip_tensor_t **out) {
  (void)session, (void)names;
  assert_int_equal(n_in, 1);
  assert_int_equal(n_out, 1);
  /* The input arrives where the memory hook asked for it. */
  assert_int_equal(in[0]->memory_type, SIP_MEMORY_DEVICE);
  assert_int_equal(in[0]->device_id, 1);
  assert_int_equal(block_of(in[0]->data)->tag, TAG);
  sip_buf_t *b = NULL;
  assert_null(f_alloc(NULL, SIP_MEMORY_DEVICE, 1, in[0]->nbytes, &b));
  const float *x = in[0]->data;
  float *y = sip_buf_data(b);
  for (size_t i = 0; i < in[0]->nbytes / sizeof(float); i++) y[i] = x[i] + 1.0f;
  out[0] = sip_tensor_new_view("y", SIP_DTYPE_FLOAT32, 1, in[0]->dims, y, in[0]->nbytes, b);
  sip_buf_unref(b);
  out[0]->memory_type = SIP_MEMORY_DEVICE;
  out[0]->device_id = 1;
  return NULL;
}

static void f_session_free(void *s) { (void)s; }
static void f_model_free(void *m) {
  (void)m;
  model_frees++;
}

static void f_memory(void *model, int is_input, size_t index, sip_memory_type_t *type, int *dev) {
  (void)model, (void)is_input, (void)index;
  *type = SIP_MEMORY_DEVICE;
  *dev = 1;
}

static const sip_backend_vtable_t devsim = {
    .name = "devsim",
    .load = f_load,
    .describe = f_describe,
    .session_new = f_session_new,
    .execute = f_execute,
    .session_free = f_session_free,
    .model_free = f_model_free,
    .memory = f_memory,
    .alloc = f_alloc,
    .copy = f_copy,
};

/* The value of one sample line "<name>{pool="<pool>",...direction="<dir>"} V". */
static double sample(const char *text, const char *name, const char *pool, const char *dir) {
  char head[256];
  snprintf(head, sizeof head, "%s{pool=\"%s\",", name, pool);
  for (const char *p = strstr(text, head); p; p = strstr(p + 1, head)) {
    const char *eol = strchr(p, '\n');
    char want[64];
    snprintf(want, sizeof want, "direction=\"%s\"}", dir);
    const char *d = strstr(p, want);
    if (d && (!eol || d < eol)) return strtod(d + strlen(want), NULL);
  }
  fail_msg("no sample %s pool=%s direction=%s", name, pool, dir);
  return -1;
}

static void infer(sip_server_t *s, const char *pool, const char *in_name, int n) {
  for (int k = 0; k < n; k++) {
    sip_request_t *r = sip_request_new(pool);
    int64_t dims[1] = {4};
    float xv[4] = {0.5f, -1, 2, (float)k};
    assert_null(sip_request_add_input(r, sip_tensor_new_copy(in_name, SIP_DTYPE_FLOAT32, 1, dims,
                                                             xv, sizeof xv)));
    sip_response_t *resp = NULL;
    assert_null(sip_server_infer(s, r, &resp));
    if (sip_response_code(resp) != SIP_OK) fail_msg("%s", sip_response_message(resp));
    const sip_tensor_t *y = sip_response_output(resp, 0);
    assert_non_null(y);
    /* The answer is in host memory, whatever the backend returned. */
    assert_int_equal(y->memory_type, SIP_MEMORY_CPU);
    const float *yv = y->data;
    if (strcmp(pool, "host")) /* the devsim pools */
      for (int i = 0; i < 4; i++) assert_true(yv[i] == xv[i] + 1.0f);
    else
      for (int i = 0; i < 4; i++) assert_true(yv[i] == xv[i]);
    sip_response_free(resp);
  }
}

static void test_copies_counted(void **state) {
  (void)state;
  assert_null(sip_backend_register(&devsim));
  sip_server_t *s = new_server_yaml("session_pools:\n"
                               "  - {name: dev, backend: devsim}\n"
                               "  - {name: host, backend: builtin, backend_options: {shape: '-1'}}\n");
  infer(s, "dev", "x", 3);
  infer(s, "host", "input", 2);
  assert_int_equal(copies_in, 3);
  assert_int_equal(copies_out, 3);
  char *text = sip__prometheus_text(s);
  assert_non_null(text);
  assert_true(sample(text, "sip_memory_copies_total", "dev", "host_to_device") == 3);
  assert_true(sample(text, "sip_memory_copies_total", "dev", "device_to_host") == 3);
  assert_true(sample(text, "sip_memory_copy_bytes_total", "dev", "host_to_device") == 3 * 16);
  assert_true(sample(text, "sip_memory_copy_bytes_total", "dev", "device_to_host") == 3 * 16);
  /* Host memory end to end: nothing copied, nothing counted. */
  assert_true(sample(text, "sip_memory_copies_total", "host", "host_to_device") == 0);
  assert_true(sample(text, "sip_memory_copies_total", "host", "device_to_host") == 0);
  assert_true(sample(text, "sip_memory_copy_bytes_total", "host", "device_to_host") == 0);
  sip_free(text);
  sip_server_free(s);
  /* Every "device" block was released: the copies' and the outputs'. */
  assert_int_equal(allocs, frees);
  assert_int_equal(allocs, 3 * 2);
}

/* Two pools on one model file share one loaded model (the model store),
 * each through its own copying wrapper: copies are counted per pool, and
 * the model is freed once, with the last pool. */
static void test_shared_model_copies_per_pool(void **state) {
  (void)state;
  sip_error_free(sip_backend_register(&devsim)); /* registered by an earlier test, or now */
  char path[] = "/tmp/sip_devsim_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "model", 5), 5);
  close(fd);
  char yaml[512];
  snprintf(yaml, sizeof yaml,
           "session_pools:\n  - {name: d1, backend: devsim, model_path: %s}\n"
           "  - {name: d2, backend: devsim, model_path: %s, pool_size: 2}\n", path, path);
  model_loads = model_frees = 0;
  copies_in = copies_out = 0;
  sip_server_t *s = new_server_yaml(yaml);
  assert_int_equal(model_loads, 1);
  infer(s, "d1", "x", 2);
  infer(s, "d2", "x", 3);
  assert_int_equal(copies_in, 5);
  char *text = sip__prometheus_text(s);
  assert_non_null(text);
  assert_true(sample(text, "sip_memory_copies_total", "d1", "host_to_device") == 2);
  assert_true(sample(text, "sip_memory_copies_total", "d2", "host_to_device") == 3);
  sip_free(text);
  sip_server_free(s);
  assert_int_equal(model_frees, 1);
  unlink(path);
}

/* A pool whose backend reads its inputs on the CPU refuses device memory
 * at admission instead of reading a device pointer. */
static void test_device_input_to_host_pool_refused(void **state) {
  (void)state;
  sip_server_t *s = new_server_yaml("session_pools:\n"
                                    "  - {name: host, backend: builtin, backend_options: {shape: '-1'}}\n");
  sip_request_t *r = sip_request_new("host");
  int64_t dims[1] = {4};
  float xv[4] = {1, 2, 3, 4};
  sip_tensor_t *t = sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, dims, xv, sizeof xv);
  t->memory_type = SIP_MEMORY_DEVICE;
  assert_null(sip_request_add_input(r, t));
  sip_response_t *resp = NULL;
  sip_error_t *e = sip_server_infer(s, r, &resp);
  sip_code_t code = e ? sip_error_code(e) : sip_response_code(resp);
  const char *msg = e ? sip_error_message(e) : sip_response_message(resp);
  assert_int_equal(code, SIP_INVALID_ARGUMENT);
  if (!strstr(msg, "input 'input' of pool 'host' is in device memory; expected host memory"))
    fail_msg("message: %s", msg);
  sip_error_free(e);
  sip_response_free(resp);
  sip_server_free(s);
}

static void test_register_wants_copy_hooks(void **state) {
  (void)state;
  sip_backend_vtable_t half = devsim;
  half.name = "half";
  half.copy = NULL;
  sip_error_t *e = sip_backend_register(&half);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "memory hook but lacks alloc or copy"));
  sip_error_free(e);
}

static void test_memory_type_names(void **state) {
  (void)state;
  assert_string_equal(sip_memory_type_name(SIP_MEMORY_CPU), "cpu");
  assert_string_equal(sip_memory_type_name(SIP_MEMORY_CPU_PINNED), "cpu_pinned");
  assert_string_equal(sip_memory_type_name(SIP_MEMORY_DEVICE), "device");
  int64_t dims[1] = {1};
  sip_tensor_t *t = sip_tensor_new_copy("s", SIP_DTYPE_STRING, 1, dims, "\1\0\0\0a", 5);
  assert_null(sip_tensor_validate(t));
  t->memory_type = SIP_MEMORY_DEVICE;
  sip_error_t *e = sip_tensor_validate(t);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "string tensor in device memory"));
  sip_error_free(e);
  sip_tensor_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_copies_counted),
      cmocka_unit_test(test_shared_model_copies_per_pool),
      cmocka_unit_test(test_device_input_to_host_pool_refused),
      cmocka_unit_test(test_register_wants_copy_hooks),
      cmocka_unit_test(test_memory_type_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
