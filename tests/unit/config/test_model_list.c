/* Unit tests for seed 003's model list (src/config/model_list.c): the list
 * verbatim as the whole document and as the models section, what each
 * entry becomes, the preprocess order it writes (src/config/preprocess.c:
 * steps adapt to the layout before them; letterbox: true; the seed's
 * normalize units), every error with its position, and the check of what
 * an entry declares against a loaded model. */
#include "config_helpers.h"

/* Seed 003, section 3.1, its quotes restored. */
static const char seed_list[] =
    "[\n"
    "  {\n"
    "    \"model_name\": \"face_detect\",\n"
    "    \"model_path\": \"./models/face_detect.om\",\n"
    "    \"model_type\": \"detection\",\n"
    "    \"input_shapes\": [\n"
    "      {\"name\": \"input\", \"shape\": [1, 3, 640, 640], \"format\": \"NCHW\", "
    "\"dtype\": \"float32\"}\n"
    "    ],\n"
    "    \"output_nums\": 3,\n"
    "    \"preprocess\": {\n"
    "      \"to_tensor\": true,\n"
    "      \"resize\": [640, 640],\n"
    "      \"normalize\": {\"mean\": [123.675, 116.28, 103.53], \"std\": [58.395, 57.12, "
    "57.375]},\n"
    "      \"letterbox\": true\n"
    "    },\n"
    "    \"max_batch_size\": 1\n"
    "  },\n"
    "  {\n"
    "    \"model_name\": \"face_quality\",\n"
    "    \"model_path\": \"./models/face_quality.om\",\n"
    "    \"model_type\": \"classification\",\n"
    "    \"input_shapes\": [\n"
    "      {\"name\": \"input\", \"shape\": [1, 3, 112, 112], \"format\": \"NCHW\", "
    "\"dtype\": \"float32\"}\n"
    "    ],\n"
    "    \"output_nums\": 1,\n"
    "    \"preprocess\": {\n"
    "      \"to_tensor\": true,\n"
    "      \"resize\": [112, 112],\n"
    "      \"normalize\": {\"mean\": [0.5, 0.5, 0.5], \"std\": [0.5, 0.5, 0.5]},\n"
    "      \"letterbox\": false\n"
    "    },\n"
    "    \"max_batch_size\": 1\n"
    "  }\n"
    "]\n";

static char dir[64];

/* A directory holding models/face_detect.onnx and models/face_quality.onnx
 * (the backend is chosen by extension; the files are not read here). */
static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/sip_model_list_XXXXXX");
  if (!mkdtemp(dir)) return -1;
  char p[256];
  snprintf(p, sizeof p, "%s/models", dir);
  if (mkdir(p, 0700)) return -1;
  const char *files[] = {"face_detect.onnx", "face_quality.onnx"};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/models/%s", dir, files[i]);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    fclose(f);
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char p[256];
  snprintf(p, sizeof p, "%s/models/face_detect.onnx", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/models/face_quality.onnx", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/models", dir);
  rmdir(p);
  rmdir(dir);
  return 0;
}

static sip__config_t *load_in_dir(const char *text) {
  sip__config_t *cfg = NULL;
  sip_error_t *err = sip__config_load_string(text, strlen(text), "models.json", dir,
                                             sip__backend_catalog(), &cfg);
  if (err) fail_msg("unexpected error: %s\n--- text:\n%s", sip_error_message(err), text);
  return cfg;
}

/* The error loading `text` in dir must contain every string given. */
static void expect_in_dir(const char *text, ...) {
  sip__config_t *cfg = NULL;
  sip_error_t *err = sip__config_load_string(text, strlen(text), "models.json", dir,
                                             sip__backend_catalog(), &cfg);
  if (!err) fail_msg("expected an error for:\n%s", text);
  char msg[4096];
  snprintf(msg, sizeof msg, "%s", sip_error_message(err));
  sip_code_t code = sip_error_code(err);
  sip_error_free(err);
  assert_int_equal(code, SIP_INVALID_ARGUMENT);
  va_list ap;
  va_start(ap, text);
  const char *missing = NULL;
  for (const char *sub; !missing && (sub = va_arg(ap, const char *));)
    if (!strstr(msg, sub)) missing = sub;
  va_end(ap);
  if (missing) fail_msg("message lacks \"%s\":\n  %s\n--- text:\n%s", missing, msg, text);
}
#define EXPECT_DIR_ERR(text, ...) expect_in_dir(text, __VA_ARGS__, NULL)

static const char *opt(const sip__preprocess_step_t *st, const char *key) {
  for (size_t i = 0; i < st->n_options; i++)
    if (!strcmp(st->options[i].key, key)) return st->options[i].value;
  return NULL;
}

static void ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  if (a < b || strcmp(s + a - b, tail)) fail_msg("\"%s\" does not end in \"%s\"", s, tail);
}

static void check_seed_pools(const sip__config_t *cfg, size_t first) {
  const sip__pool_config_t *d = &cfg->pools[first], *q = &cfg->pools[first + 1];
  assert_string_equal(d->name, "face_detect");
  ends_with(d->model_path, "/models/face_detect.onnx"); /* .om served from its .onnx */
  assert_string_equal(d->backend, "onnxruntime");
  assert_string_equal(d->model_type, "detection");
  assert_int_equal(d->n_declared_inputs, 1);
  assert_string_equal(d->declared_inputs[0].name, "input");
  assert_int_equal(d->declared_inputs[0].rank, 4);
  assert_int_equal(d->declared_inputs[0].dims[0], 1);
  assert_int_equal(d->declared_inputs[0].dims[1], 3);
  assert_int_equal(d->declared_inputs[0].dims[3], 640);
  assert_int_equal(d->declared_inputs[0].dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(d->declared_inputs[0].format, SIP__FORMAT_NCHW);
  assert_int_equal(d->output_nums, 3);
  assert_int_equal(d->max_batch_size, 0); /* 1: each request runs alone */
  /* to_tensor, the resize letterboxed (letterbox: true) on the NCHW
   * tensor, normalize in pixel units. */
  assert_int_equal(d->n_preprocess, 3);
  assert_string_equal(d->preprocess[0].op, "to_tensor");
  assert_null(opt(&d->preprocess[0], "scale"));
  assert_string_equal(d->preprocess[1].op, "letterbox");
  assert_string_equal(opt(&d->preprocess[1], "size"), "640,640");
  assert_string_equal(opt(&d->preprocess[1], "layout"), "nchw");
  assert_null(opt(&d->preprocess[1], "dtype")); /* float32: nchw's own */
  assert_null(opt(&d->preprocess[1], "pad_value")); /* 114 in pixel units: to_tensor scale 1 */
  assert_string_equal(d->preprocess[2].op, "normalize");
  assert_null(opt(&d->preprocess[2], "scale"));
  assert_true(d->preprocess_fixed);

  assert_string_equal(q->name, "face_quality");
  ends_with(q->model_path, "/models/face_quality.onnx");
  assert_string_equal(q->model_type, "classification");
  assert_int_equal(q->output_nums, 1);
  assert_int_equal(q->declared_inputs[0].dims[2], 112);
  assert_int_equal(q->n_preprocess, 3); /* letterbox: false is no step */
  assert_string_equal(q->preprocess[1].op, "resize");
  assert_string_equal(opt(&q->preprocess[1], "layout"), "nchw");
  assert_null(opt(&q->preprocess[1], "dtype"));
  /* mean/std in 0..1: read as (x / 255 - mean) / std */
  assert_string_equal(q->preprocess[2].op, "normalize");
  assert_string_equal(opt(&q->preprocess[2], "scale"), "1/255");
}

static void test_seed_list_verbatim(void **state) {
  (void)state;
  sip__config_t *cfg = load_in_dir(seed_list);
  assert_int_equal(cfg->n_pools, 2);
  check_seed_pools(cfg, 0);
  assert_int_equal(cfg->n_endpoints, 1); /* the server keeps its defaults */
  sip__config_free(cfg);
}

static void test_models_section(void **state) {
  (void)state;
  char text[8192];
  snprintf(text, sizeof text,
           "models: %s\nsession_pools:\n  - {name: other, model_path: x.onnx}\n", seed_list);
  sip__config_t *cfg = load_in_dir(text);
  assert_int_equal(cfg->n_pools, 3);
  assert_string_equal(cfg->pools[0].name, "other"); /* session_pools first, then models */
  check_seed_pools(cfg, 1);
  sip__config_free(cfg);
  /* models alone is enough */
  snprintf(text, sizeof text, "server: {log_level: warn}\nmodels: %s", seed_list);
  cfg = load_in_dir(text);
  assert_int_equal(cfg->n_pools, 2);
  sip__config_free(cfg);
  /* names are unique across both */
  EXPECT_DIR_ERR("session_pools:\n  - {name: face_detect, model_path: x.onnx}\n"
                 "models:\n  - {model_name: face_detect, model_path: y.onnx}\n",
                 "models.json:4:18: models[0].model_name: \"face_detect\" is already the name of "
                 "a pool (line 2)");
  EXPECT_DIR_ERR("models: {model_name: a}\n", "models: is a map; expected a list of models");
}

static void test_entry_errors(void **state) {
  (void)state;
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, model_format: om}]\n",
                 "models.json:1:38: [0].model_format: unknown key; expected one of: model_name, "
                 "model_path, model_type, input_shapes, output_nums, preprocess, max_batch_size");
  EXPECT_DIR_ERR("[{model_path: a.onnx}]\n", "[0].model_name: missing");
  EXPECT_DIR_ERR("[{model_name: a}]\n", "[0].model_path: missing");
  EXPECT_DIR_ERR("[{model_name: 'a b', model_path: a.onnx}]\n", "[0].model_name", "pool name");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, output_nums: 0}]\n",
                 "[0].output_nums", "1..4096");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, max_batch_size: many}]\n",
                 "[0].max_batch_size");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.xyz}]\n", "[0].model_path",
                 "unknown extension (.xyz)");
  /* a .om with no .onnx beside it: the error names both */
  EXPECT_DIR_ERR("[\n  {model_name: a,\n   model_path: models/absent.om}]\n",
                 "models.json:3:16: [0].model_path: \"models/absent.om\"",
                 "/models/absent.om does not exist", "no file beside it of the same name");
  /* input_shapes */
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, input_shapes: {name: x}}]\n",
                 "[0].input_shapes: is a map; expected a list of inputs");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, input_shapes: [{name: x, shape: [1], "
                 "layout: NCHW}]}]\n",
                 "[0].input_shapes[0].layout: unknown key; expected one of: name, shape, "
                 "format, dtype");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, input_shapes: [{shape: [1]}]}]\n",
                 "[0].input_shapes[0].name: missing");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, input_shapes: [{name: x}]}]\n",
                 "[0].input_shapes[0].shape: missing");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, input_shapes: [{name: x, shape: [1, -2]}]}]\n",
                 "[0].input_shapes[0].shape[1]: \"-2\" is not a dim");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, input_shapes: [{name: x, shape: [1], "
                 "format: CHW}]}]\n",
                 "[0].input_shapes[0].format: \"CHW\" is not a format; expected NCHW or NHWC");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, input_shapes: [{name: x, shape: [1], "
                 "dtype: float33}]}]\n",
                 "[0].input_shapes[0].dtype: \"float33\" is not a tensor dtype");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, input_shapes: [{name: x, shape: [1]}, "
                 "{name: x, shape: [2]}]}]\n",
                 "[0].input_shapes[1]: names input 'x' again");
  EXPECT_DIR_ERR("[{model_name: a, model_path: a.onnx, preprocess: {blur: 3}}]\n",
                 "[0].preprocess.blur: \"blur\" is not a preprocess step");
}

/* sip's own preprocess: the steps run in the order written. */
static void test_preprocess_order(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL("    preprocess: {to_tensor: {scale: 1/255}, resize: [32, 48], "
                                    "letterbox: [40, 40], color_convert: bgr2rgb}\n"));
  const sip__pool_config_t *p = &cfg->pools[0];
  assert_int_equal(p->n_preprocess, 4);
  assert_string_equal(opt(&p->preprocess[1], "layout"), "nchw");
  assert_null(opt(&p->preprocess[1], "dtype")); /* float32 is nchw's own */
  assert_string_equal(opt(&p->preprocess[2], "layout"), "nchw");
  /* pad 114 in the units to_tensor made: 114 / 255 */
  assert_float_equal(strtod(opt(&p->preprocess[2], "pad_value"), NULL), 114.0 / 255, 1e-6);
  assert_string_equal(opt(&p->preprocess[3], "layout"), "nchw");
  sip__config_free(cfg);
  /* an HWC normalize after an HWC resize; written layouts are kept */
  cfg = load_ok(POOL("    preprocess: {decode: true, resize: [8, 8], normalize: {mean: 1}, "
                     "to_tensor: true}\n"));
  p = &cfg->pools[0];
  assert_string_equal(opt(&p->preprocess[2], "layout"), "hwc");
  assert_null(opt(&p->preprocess[2], "dtype")); /* uint8 is hwc's own */
  assert_string_equal(opt(&p->preprocess[3], "dtype"), "float32"); /* float HWC -> NCHW */
  assert_null(opt(&p->preprocess[1], "layout"));                 /* hwc is resize's own */
  sip__config_free(cfg);
  /* sip's own preprocess never guesses the units of normalize */
  cfg = load_ok(POOL("    preprocess: {to_tensor: true, normalize: {mean: 0.5, std: 0.5}}\n"));
  assert_null(opt(&cfg->pools[0].preprocess[1], "scale"));
  sip__config_free(cfg);

  /* orders that cannot work */
  EXPECT_ERR(POOL("    preprocess: {to_tensor: true, cast: {to: int64}, resize: [8, 8]}\n"),
             "session_pools[0].preprocess.resize: resize takes uint8 of rank 3 but the step "
             "before (cast) gives int64 of any rank");
  EXPECT_ERR(POOL("    preprocess: {normalize: true, to_tensor: true}\n"),
             "preprocess.to_tensor: the step before (normalize) already gives a float32 nchw "
             "tensor; expected to_tensor once, on an HWC image");
  EXPECT_ERR(POOL("    preprocess: {to_tensor: true, letterbox: true}\n"),
             "preprocess.letterbox: true letterboxes the resize step, and there is none");
  EXPECT_ERR(POOL("    preprocess: {resize: {limit_side_len: 64}, letterbox: true}\n"),
             "preprocess.resize: letterbox: true makes this resize keep the aspect ratio");
  /* letterbox: true before the resize it changes, and target_size */
  cfg = load_ok(POOL("    preprocess: {letterbox: yes, resize: {target_size: [8, 8]}}\n"));
  assert_string_equal(cfg->pools[0].preprocess[0].op, "letterbox");
  assert_string_equal(opt(&cfg->pools[0].preprocess[0], "size"), "8,8");
  sip__config_free(cfg);
}

static void test_declared_io_check(void **state) {
  (void)state;
  sip__config_t *cfg = load_in_dir(seed_list);
  const sip__pool_config_t *d = &cfg->pools[0];
  sip_io_desc_t in = {.name = "input", .dtype = SIP_DTYPE_FLOAT32, .rank = 4,
                      .dims = {1, 3, 640, 640}};
  sip_io_desc_t outs[3] = {{.name = "a"}, {.name = "b"}, {.name = "c"}};
  assert_null(sip__config_check_declared_io(d, &in, 1, outs, 3));
  in.dims[0] = -1; /* a dynamic dim fits */
  assert_null(sip__config_check_declared_io(d, &in, 1, outs, 3));
  assert_null(sip__config_check_declared_io(d, &in, 1, NULL, 0)); /* outputs not checked */

  struct {
    sip_io_desc_t in;
    size_t n_out;
    const char *want;
  } bad[] = {
      {{.name = "input", .dtype = SIP_DTYPE_FLOAT32, .rank = 4, .dims = {1, 3, 320, 320}}, 3,
       "input_shapes[0]: input 'input' is declared with shape [1, 3, 640, 640] but the model "
       "takes [1, 3, 320, 320]"},
      {{.name = "input", .dtype = SIP_DTYPE_FLOAT32, .rank = 3, .dims = {3, 640, 640}}, 3,
       "but the model takes [3, 640, 640]"},
      {{.name = "input", .dtype = SIP_DTYPE_UINT8, .rank = 4, .dims = {1, 3, 640, 640}}, 3,
       "input 'input' is declared float32 but the model takes uint8"},
      {{.name = "images", .dtype = SIP_DTYPE_FLOAT32, .rank = 4, .dims = {1, 3, 640, 640}}, 3,
       "the model has no input 'input'; expected one of its inputs: 'images'"},
      {{.name = "input", .dtype = SIP_DTYPE_FLOAT32, .rank = 4, .dims = {1, 3, 640, 640}}, 2,
       "output_nums is 3 but the model has 2 outputs"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sip_error_t *e = sip__config_check_declared_io(d, &bad[i].in, 1, outs, bad[i].n_out);
    assert_non_null(e);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_code_t code = sip_error_code(e);
    sip_error_free(e);
    assert_int_equal(code, SIP_FAILED_PRECONDITION);
    if (!strstr(msg, bad[i].want)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, msg, bad[i].want);
  }
  /* a pool that declares nothing is not checked */
  sip__pool_config_t none = {0};
  assert_null(sip__config_check_declared_io(&none, &bad[0].in, 1, outs, 1));
  sip__config_free(cfg);
}

/* Reloading the same list keeps the pools; a changed declaration does not. */
static void test_same(void **state) {
  (void)state;
  sip__config_t *a = load_in_dir(seed_list), *b = load_in_dir(seed_list);
  assert_true(sip__config_pool_same(&a->pools[0], &b->pools[0]));
  b->pools[0].output_nums = 2;
  assert_false(sip__config_pool_same(&a->pools[0], &b->pools[0]));
  b->pools[0].output_nums = 3;
  b->pools[0].declared_inputs[0].dims[2] = 320;
  assert_false(sip__config_pool_same(&a->pools[0], &b->pools[0]));
  sip__config_free(a);
  sip__config_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_seed_list_verbatim), cmocka_unit_test(test_models_section),
      cmocka_unit_test(test_entry_errors),       cmocka_unit_test(test_preprocess_order),
      cmocka_unit_test(test_declared_io_check),  cmocka_unit_test(test_same),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
