/* sip — the command-line client: status, pools, ready, infer. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sip/client.h"
#include "tools/cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: sip [-e ENDPOINT] [--json] COMMAND [ARGS]   (sip --version, sip --help)\n"
          "  ENDPOINT: ipc:///path, unix:///path or tcp://host:port (bench and report: also\n"
          "            http://host:port; bench: also grpc://host:port)\n"
          "            (default: $SIP_ENDPOINT or ipc:///tmp/sip_service.sock)\n"
          "            $SIP_TOKEN: a bearer token of the server's server.auth (native AUTH;\n"
          "            Authorization: Bearer for bench over http:// and grpc://)\n"
          "commands:\n"
          "  status                 pools, their sessions and states, counters\n"
          "  pools                  each pool's inputs and outputs (-1: dynamic dim)\n"
          "  ready                  exit 0 when every pool has finished loading\n"
          "  models                 the model repository index: models, versions, states\n"
          "  load MODEL             load or reload a repository model (waits until it serves)\n"
          "  unload MODEL           unload a repository model (requests in flight finish)\n"
          "  infer POOL [options]   run one request\n"
          "     -i NAME:DTYPE:SHAPE=VALUES  an input; SHAPE like 1,3,48,192 (empty: scalar);\n"
          "                                 VALUES: zeros | ones | random | @FILE (raw\n"
          "                                 little-endian bytes) | v1,v2,... (numbers or strings)\n"
          "     -o NAME                     ask for this output only (repeatable)\n"
          "     --image FILE                send FILE's bytes (a PNG or JPEG) as the uint8 [N]\n"
          "                                 input of an image pipeline (e.g. ocr), and print\n"
          "                                 each text line with its box and score\n"
          "     --timeout-ms N  --priority high|medium|low  --repeat N\n"
          "     --sequence ID               the requests (one, or --repeat N) are one sequence\n"
          "                                 of a sequence_batching pool: START on the first,\n"
          "                                 END on the last (ID: a number or a string)\n"
          "  fault POOL --kind crash|hang|slow|error|none (--count N | --rate R)\n"
          "        [--session N] [--delay-ms D]\n"
          "                         inject a fault into the pool's next executions (needs\n"
          "                         server.allow_fault_injection; docs/availability.md)\n"
          "  session drain|resume POOL/N\n"
          "                         take session N of POOL out of service, or back\n"
          "  profile POOL [--seconds S] [--session N] [--trace FILE]\n"
          "                         run session N (0) under ONNX Runtime's profiler for S\n"
          "                         seconds (5): time per operator; --trace writes the\n"
          "                         Chrome trace (Perfetto) to FILE (docs/profiling.md)\n"
          "  pool update POOL [--size N] [--max-memory-mb M] [--max-compute-percent C]\n"
          "                         change a serving pool's size or quotas (kept in\n"
          "                         server.state_dir across restarts)\n"
          "  report --html FILE     the dashboard's self-contained HTML report of the server\n"
          "                         now (FILE - : standard output; from its server.http or\n"
          "                         server.dashboard address, or -e http://HOST:PORT)\n"
          "  import-triton DIR      print the config.yaml equivalent to a Triton model\n"
          "                         directory's config.pbtxt (no server needed)\n"
          "  bench POOL [options]   load generator: --concurrency N | --rate R\n"
          "                         [--distribution poisson] | --pattern spike ...\n"
          "                         (sip bench --help for all options)\n");
}

/* ---- infer ---- */

static int parse_dims(const char *s, int64_t *dims, int *rank) {
  *rank = 0;
  while (*s) {
    char *end;
    errno = 0;
    long long d = strtoll(s, &end, 10);
    if (end == s || errno || d < 0 || *rank == SIP_MAX_RANK) return -1;
    dims[(*rank)++] = d;
    s = end;
    if (*s == ',' || *s == 'x') s++;
    else if (*s) return -1;
  }
  return 0;
}

static void store(sip_dtype_t dt, void *p, size_t i, double v) {
  switch (dt) {
  case SIP_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; break;
  case SIP_DTYPE_FLOAT64: ((double *)p)[i] = v; break;
  case SIP_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
  case SIP_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case SIP_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case SIP_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
  case SIP_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case SIP_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
  case SIP_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case SIP_DTYPE_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
  case SIP_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  case SIP_DTYPE_FLOAT16: { /* round-to-nearest float → half, enough for test inputs */
    float f = (float)v;
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    int exp = (int)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    uint16_t h;
    if (exp <= 0) h = sign;
    else if (exp >= 31) h = sign | 0x7c00;
    else h = (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)((mant + 0x1000) >> 13));
    ((uint16_t *)p)[i] = h;
    break;
  }
  default: break;
  }
}

double sip_cli_value(sip_dtype_t dt, const void *p, size_t i) {
  switch (dt) {
  case SIP_DTYPE_FLOAT32: return ((const float *)p)[i];
  case SIP_DTYPE_FLOAT64: return ((const double *)p)[i];
  case SIP_DTYPE_INT8: return ((const int8_t *)p)[i];
  case SIP_DTYPE_UINT8: case SIP_DTYPE_BOOL: return ((const uint8_t *)p)[i];
  case SIP_DTYPE_INT16: return ((const int16_t *)p)[i];
  case SIP_DTYPE_UINT16: return ((const uint16_t *)p)[i];
  case SIP_DTYPE_INT32: return ((const int32_t *)p)[i];
  case SIP_DTYPE_UINT32: return ((const uint32_t *)p)[i];
  case SIP_DTYPE_INT64: return (double)((const int64_t *)p)[i];
  case SIP_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
  case SIP_DTYPE_FLOAT16: {
    uint16_t h = ((const uint16_t *)p)[i];
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0 ? ldexp(mant, -24) : exp == 31 ? INFINITY : ldexp(mant + 1024, exp - 25);
    return (h & 0x8000) ? -v : v;
  }
  default: return 0;
  }
}

/* NAME:DTYPE:SHAPE=VALUES → a tensor, or NULL with a message on stderr. */
sip_tensor_t *sip_cli_parse_input(const char *spec) {
  char *s = strdup(spec), *eq = strchr(s, '='), *c1 = strchr(s, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
  sip_tensor_t *t = NULL;
  if (!eq || !c1 || !c2 || c2 > eq) {
    fprintf(stderr, "sip: input '%s'; expected NAME:DTYPE:SHAPE=VALUES\n", spec);
    goto out;
  }
  *c1 = *c2 = *eq = '\0';
  sip_dtype_t dt = sip_dtype_from_name(c1 + 1);
  int64_t dims[SIP_MAX_RANK];
  int rank;
  if (dt == SIP_DTYPE_INVALID) {
    fprintf(stderr, "sip: input '%s': unknown dtype '%s'\n", s, c1 + 1);
    goto out;
  }
  if (parse_dims(c2 + 1, dims, &rank) != 0) {
    fprintf(stderr, "sip: input '%s': shape '%s'; expected dims like 1,3,48,192\n", s, c2 + 1);
    goto out;
  }
  size_t count = 1;
  for (int i = 0; i < rank; i++) count *= (size_t)dims[i];
  const char *vals = eq + 1;
  if (vals[0] == '@') {
    FILE *f = fopen(vals + 1, "rb");
    if (!f) {
      fprintf(stderr, "sip: input '%s': cannot open %s: %s\n", s, vals + 1, strerror(errno));
      goto out;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    t = sip_tensor_new_copy(s, dt, rank, dims, buf, got);
    free(buf);
    goto out;
  }
  if (dt == SIP_DTYPE_STRING) {
    /* Comma-separated elements, packed as u32 length + bytes. */
    size_t cap = strlen(vals) + 4 * (count + 1), len = 0, n = 0;
    unsigned char *buf = malloc(cap);
    const char *p = vals;
    while (n < count) {
      const char *e = strchr(p, ',');
      size_t l = e ? (size_t)(e - p) : strlen(p);
      uint32_t l32 = (uint32_t)l;
      memcpy(buf + len, &l32, 4);
      memcpy(buf + len + 4, p, l);
      len += 4 + l;
      n++;
      if (!e) break;
      p = e + 1;
    }
    t = n == count ? sip_tensor_new_copy(s, dt, rank, dims, buf, len) : NULL;
    if (!t) fprintf(stderr, "sip: input '%s': %zu strings given, shape needs %zu\n", s, n, count);
    free(buf);
    goto out;
  }
  size_t es = sip_dtype_size(dt);
  void *buf = calloc(count ? count : 1, es);
  if (strcmp(vals, "zeros") == 0) {
  } else if (strcmp(vals, "ones") == 0) {
    for (size_t i = 0; i < count; i++) store(dt, buf, i, 1);
  } else if (strcmp(vals, "random") == 0) {
    srand(42);
    for (size_t i = 0; i < count; i++) store(dt, buf, i, (double)rand() / RAND_MAX);
  } else {
    const char *p = vals;
    size_t i = 0;
    for (; i < count && *p; i++) {
      char *end;
      double v = strtod(p, &end);
      if (end == p) break;
      store(dt, buf, i, v);
      p = *end == ',' ? end + 1 : end;
    }
    if (i != count || *p) {
      fprintf(stderr, "sip: input '%s': values '%s' do not give %zu %s numbers\n", s, vals, count,
              sip_dtype_name(dt));
      free(buf);
      goto out;
    }
  }
  t = sip_tensor_new_copy(s, dt, rank, dims, buf, count * es);
  free(buf);
out:
  free(s);
  return t;
}

static void print_tensor(const sip_tensor_t *t) {
  printf("%s: %s [", t->name, sip_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++) printf("%s%lld", i ? ", " : "", (long long)t->dims[i]);
  printf("]");
  int64_t n = sip_tensor_count(t);
  if (t->dtype == SIP_DTYPE_STRING) {
    const unsigned char *p = t->data;
    size_t off = 0;
    printf(" =");
    for (int64_t i = 0; i < n && i < 10; i++) {
      uint32_t l;
      memcpy(&l, p + off, 4);
      printf(" \"%.*s\"", (int)l, (const char *)p + off + 4);
      off += 4 + l;
    }
    printf("%s\n", n > 10 ? " ..." : "");
    return;
  }
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  printf(" =");
  for (int64_t i = 0; i < n; i++) {
    double v = sip_cli_value(t->dtype, t->data, (size_t)i);
    if (i < 8) printf(" %g", v);
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    sum += v;
  }
  if (n > 8) printf(" ...");
  if (n > 0) printf("  (min %g, max %g, mean %g)", mn, mx, sum / (double)n);
  printf("\n");
}

/* ---- infer --image ---- */

/* The pool's or pipeline's entry in the pools introspection (owned), or NULL. */
static json_t *describe(sip_client_t *c, const char *name) {
  char *txt = NULL;
  sip_error_t *e = sip_client_info(c, 2, &txt);
  if (e) {
    sip_error_free(e);
    return NULL;
  }
  json_t *root = json_loads(txt, 0, NULL), *found = NULL;
  sip_client_free_string(txt);
  const char *lists[] = {"pipelines", "pools"};
  for (int l = 0; l < 2 && !found; l++) {
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(root, lists[l]), i, p) {
      const char *n = json_string_value(json_object_get(p, "name"));
      if (n && !strcmp(n, name)) {
        found = json_incref(p);
        break;
      }
    }
  }
  json_decref(root);
  return found;
}

/* Output names of an introspection entry: pipelines list plain names,
 * pools {name, dtype, shape} objects. */
static int has_output(json_t *info, const char *name) {
  size_t i;
  json_t *o;
  json_array_foreach(json_object_get(info, "outputs"), i, o) {
    const char *n = json_is_string(o) ? json_string_value(o)
                                      : json_string_value(json_object_get(o, "name"));
    if (n && !strcmp(n, name)) return 1;
  }
  return 0;
}

/* The image input's name: the only input there is, else "image". */
static const char *image_input(json_t *info) {
  json_t *ins = json_object_get(info, "inputs");
  if (json_array_size(ins) == 1) {
    json_t *o = json_array_get(ins, 0);
    const char *n = json_is_string(o) ? json_string_value(o)
                                      : json_string_value(json_object_get(o, "name"));
    if (n) return n;
  }
  return "image";
}

static sip_tensor_t *read_image(const char *input, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "sip: --image %s: %s\n", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    unsigned char *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf || err) {
    fprintf(stderr, "sip: --image %s: cannot read the file\n", path);
    free(buf);
    return NULL;
  }
  int64_t dim = (int64_t)n;
  sip_tensor_t *t = sip_tensor_new_copy(input, SIP_DTYPE_UINT8, 1, &dim, buf, n);
  free(buf);
  return t;
}

static const sip_tensor_t *output_named(const sip_client_response_t *r, const char *name) {
  for (size_t i = 0; i < r->n_outputs; i++)
    if (!strcmp(r->outputs[i]->name, name)) return r->outputs[i];
  return NULL;
}

/* OCR-style answers: one line per text, with its 4-point box and score. */
static int print_lines(const sip_client_response_t *r) {
  const sip_tensor_t *text = output_named(r, "text"), *boxes = output_named(r, "boxes"),
                     *scores = output_named(r, "scores");
  if (!text && boxes && boxes->rank >= 1 && boxes->dims[0] == 0) {
    printf("0 lines\n"); /* no text: the pipeline ended after detection */
    return 1;
  }
  if (!text || text->dtype != SIP_DTYPE_STRING) return 0;
  int64_t n = sip_tensor_count(text);
  int box_ok = boxes && boxes->dtype == SIP_DTYPE_FLOAT32 && boxes->rank == 3 &&
               boxes->dims[0] == n && boxes->dims[1] == 4 && boxes->dims[2] == 2;
  int score_ok = scores && scores->dtype == SIP_DTYPE_FLOAT32 && sip_tensor_count(scores) == n;
  const unsigned char *p = text->data;
  size_t off = 0;
  printf("%lld line%s\n", (long long)n, n == 1 ? "" : "s");
  for (int64_t i = 0; i < n; i++) {
    uint32_t l;
    memcpy(&l, p + off, 4);
    printf("%3lld  \"%.*s\"", (long long)i + 1, (int)l, (const char *)p + off + 4);
    off += 4 + l;
    if (score_ok) printf("  score %.3f", ((const float *)scores->data)[i]);
    if (box_ok) {
      const float *b = (const float *)boxes->data + i * 8;
      printf("  box");
      for (int k = 0; k < 4; k++) printf(" (%.0f,%.0f)", b[2 * k], b[2 * k + 1]);
    }
    printf("\n");
  }
  return 1;
}

static int cmd_infer(sip_client_t *c, int argc, char **argv) {
  if (argc < 1) {
    usage(stderr);
    return 2;
  }
  sip_client_request_t req = {.pool = argv[0]};
  sip_tensor_t *inputs[64];
  const char *outputs[64];
  size_t n_in = 0, n_out = 0;
  int repeat = 1, rc = 0, lines = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "sip: %s needs a value\n", a);
      rc = 2;
      goto done;
    }
    i++;
    if (strcmp(a, "-i") == 0 || strcmp(a, "--input") == 0) {
      sip_tensor_t *t = n_in < 64 ? sip_cli_parse_input(v) : NULL;
      if (!t) {
        rc = 2;
        goto done;
      }
      inputs[n_in++] = t;
    } else if ((strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) && n_out < 64) {
      outputs[n_out++] = v;
    } else if (strcmp(a, "--image") == 0 && n_in < 64) {
      /* The file's bytes go as they are: the server decodes them. An OCR-like
       * answer (text, boxes, scores) is asked for alone, not with every
       * stage's tensors, and printed line by line. */
      json_t *info = describe(c, argv[0]);
      sip_tensor_t *t = read_image(image_input(info), v);
      if (t && has_output(info, "text")) {
        lines = 1;
        static const char *const want[] = {"text", "scores", "boxes"};
        for (size_t k = 0; k < 3 && n_out < 64; k++)
          if (has_output(info, want[k])) outputs[n_out++] = want[k];
      }
      json_decref(info);
      if (!t) {
        rc = 2;
        goto done;
      }
      inputs[n_in++] = t;
    } else if (strcmp(a, "--timeout-ms") == 0) {
      req.timeout_ms = (uint32_t)strtoul(v, NULL, 10);
    } else if (strcmp(a, "--sequence") == 0) {
      char *end;
      unsigned long long id = strtoull(v, &end, 10);
      req.sequence_id = *end || v[0] == '-' ? 0 : id;
      req.sequence_id_str = req.sequence_id ? NULL : v;
    } else if (strcmp(a, "--repeat") == 0) {
      repeat = atoi(v) > 0 ? atoi(v) : 1;
    } else if (strcmp(a, "--priority") == 0) {
      req.priority = strcasecmp(v, "high") == 0     ? 1
                     : strcasecmp(v, "medium") == 0 ? 2
                     : strcasecmp(v, "low") == 0    ? 3
                                                    : atoi(v);
    } else {
      fprintf(stderr, "sip: unknown infer option '%s'\n", a);
      rc = 2;
      goto done;
    }
  }
  req.inputs = (const sip_tensor_t *const *)inputs;
  req.n_inputs = n_in;
  req.outputs = outputs;
  req.n_outputs = n_out;
  for (int r = 0; r < repeat; r++) {
    sip_client_response_t *resp = NULL;
    req.sequence_start = r == 0;
    req.sequence_end = r == repeat - 1;
    if (!req.sequence_id && !req.sequence_id_str) req.sequence_start = req.sequence_end = 0;
    sip_error_t *e = sip_client_infer(c, &req, &resp);
    if (e) {
      rc = sip_cli_fail(e);
      goto done;
    }
    if (r == repeat - 1) {
      if (!lines || !print_lines(resp))
        for (size_t i = 0; i < resp->n_outputs; i++) print_tensor(resp->outputs[i]);
      printf("request %llu: latency %.3f ms (server: queue %llu us, compute %llu us, total %llu "
             "us)\n",
             (unsigned long long)resp->request_id, resp->latency_ms,
             (unsigned long long)resp->queue_us, (unsigned long long)resp->compute_us,
             (unsigned long long)resp->total_us);
    }
    sip_client_response_free(resp);
  }
done:
  for (size_t i = 0; i < n_in; i++) sip_tensor_free(inputs[i]);
  return rc;
}

int main(int argc, char **argv) {
  const char *ep = getenv("SIP_ENDPOINT");
  if (!ep || !*ep) ep = "ipc:///tmp/sip_service.sock";
  int json_out = 0, i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if ((strcmp(argv[i], "-e") == 0 || strcmp(argv[i], "--endpoint") == 0) && i + 1 < argc)
      ep = argv[++i];
    else if (strcmp(argv[i], "--json") == 0)
      json_out = 1;
    else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
      printf("sip %s\n", SIP_CLI_VERSION);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (i >= argc) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[i];
  if (!strcmp(cmd, "import-triton")) /* offline: reads a model directory */
    return sip_cli_import_triton(argc - i - 1, argv + i + 1);
  int kind = strcmp(cmd, "status") == 0 ? 3 : strcmp(cmd, "pools") == 0 ? 2
             : strcmp(cmd, "ready") == 0 ? 1 : 0;
  int repo = !strcmp(cmd, "models") || !strcmp(cmd, "load") || !strcmp(cmd, "unload");
  if (repo && strcmp(cmd, "models") && i + 2 != argc) {
    fprintf(stderr, "sip: %s takes one MODEL\n", cmd);
    return 2;
  }
  int admin = !strcmp(cmd, "fault") || !strcmp(cmd, "session") || !strcmp(cmd, "pool") ||
              !strcmp(cmd, "profile");
  int report = !strcmp(cmd, "report");
  if (!kind && !repo && !admin && !report && strcmp(cmd, "infer") != 0 &&
      strcmp(cmd, "bench") != 0) {
    fprintf(stderr, "sip: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
  }
  /* A command's --help needs no server. */
  for (int k = i + 1; k < argc; k++)
    if (!strcmp(argv[k], "-h") || !strcmp(argv[k], "--help")) {
      if (!strcmp(cmd, "bench")) return sip_cli_bench(NULL, ep, json_out, 1, argv + k);
      usage(stdout);
      return 0;
    }
  sip_client_t *c = NULL;
  if (!strcmp(cmd, "bench") && (!strncmp(ep, "http://", 7) || !strncmp(ep, "grpc://", 7)))
    /* bench speaks HTTP and gRPC itself */
    return sip_cli_bench(NULL, ep, json_out, argc - i - 1, argv + i + 1);
  if (report && !strncmp(ep, "http://", 7)) /* straight from the HTTP address */
    return sip_cli_report(NULL, ep, argc - i - 1, argv + i + 1);
  sip_error_t *e = sip_client_connect(ep, &c);
  if (e) return sip_cli_fail(e);
  const char *token = getenv("SIP_TOKEN"); /* a token of server.auth (docs/security.md) */
  if (token && *token) {
    char *ok = NULL;
    e = sip_client_authenticate(c, token, &ok);
    sip_client_free_string(ok);
    if (e) {
      sip_client_free(c);
      return sip_cli_fail(e);
    }
  }
  int rc = 0;
  if (report) {
    rc = sip_cli_report(c, ep, argc - i - 1, argv + i + 1);
  } else if (admin) {
    rc = sip_cli_admin(c, cmd, argc - i - 1, argv + i + 1, json_out);
  } else if (repo) {
    rc = sip_cli_repo(c, !strcmp(cmd, "models") ? "index" : cmd,
                  !strcmp(cmd, "models") ? NULL : argv[i + 1], json_out);
  } else if (!strcmp(cmd, "bench")) {
    rc = sip_cli_bench(c, ep, json_out, argc - i - 1, argv + i + 1);
  } else if (!kind) {
    rc = cmd_infer(c, argc - i - 1, argv + i + 1);
  } else {
    char *txt = NULL;
    e = sip_client_info(c, kind, &txt);
    if (e) {
      rc = sip_cli_fail(e);
    } else {
      json_error_t je;
      json_t *root = json_loads(txt, 0, &je);
      if (!root) {
        fprintf(stderr, "sip: server sent invalid JSON: %s\n", je.text);
        rc = 1;
      } else if (json_out) {
        char *pretty = json_dumps(root, JSON_INDENT(2));
        printf("%s\n", pretty);
        free(pretty);
      } else if (kind == 1) {
        int ready = json_is_true(json_object_get(root, "ready"));
        printf("%s\n", ready ? "ready" : "not ready");
        rc = ready ? 0 : 1;
      } else {
        rc = kind == 2 ? sip_cli_pools(root) : sip_cli_status(root);
      }
      json_decref(root);
    }
    sip_client_free_string(txt);
  }
  sip_client_free(c);
  return rc;
}
