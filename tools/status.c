/* sip — the CLI's `status` and `pools` tables (cli.h). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"

static void print_shape(json_t *shape) {
  printf("[");
  size_t i;
  json_t *d;
  json_array_foreach(shape, i, d) printf("%s%lld", i ? ", " : "", (long long)json_integer_value(d));
  printf("]");
}

/* A pool's or pipeline's inputs and outputs, one per line. */
static void print_io(json_t *p) {
  const char *kinds[] = {"inputs", "outputs"};
  size_t j;
  json_t *io;
  for (int k = 0; k < 2; k++)
    json_array_foreach(json_object_get(p, kinds[k]), j, io) {
      const char *dt = json_string_value(json_object_get(io, "dtype"));
      printf("  %-7s %-24s %-8s ", k ? "output" : "input",
             json_string_value(json_object_get(io, "name")), dt ? dt : "(any)");
      json_t *shape = json_object_get(io, "shape");
      if (json_is_array(shape))
        print_shape(shape);
      else
        printf("(any)");
      printf("\n");
    }
}

int sip_cli_pools(json_t *root) {
  size_t i, j;
  json_t *p;
  json_array_foreach(json_object_get(root, "pools"), i, p) {
    const char *err = json_string_value(json_object_get(p, "error"));
    printf("%s  state=%s backend=%s version=%s sessions=%lld priority=%s\n",
           json_string_value(json_object_get(p, "name")),
           json_string_value(json_object_get(p, "state")),
           json_string_value(json_object_get(p, "backend")),
           json_is_string(json_object_get(p, "version"))
               ? json_string_value(json_object_get(p, "version"))
               : "-",
           (long long)json_integer_value(json_object_get(p, "pool_size")),
           json_string_value(json_object_get(p, "priority")));
    if (err) printf("  error: %s\n", err);
    print_io(p);
  }
  /* Pipelines: their stages in order, then their inputs and outputs. */
  json_array_foreach(json_object_get(root, "pipelines"), i, p) {
    const char *err = json_string_value(json_object_get(p, "error"));
    printf("%s  state=%s pipeline stages=", json_string_value(json_object_get(p, "name")),
           json_string_value(json_object_get(p, "state")));
    json_t *st;
    json_array_foreach(json_object_get(p, "stages"), j, st) {
      const char *pool = json_string_value(json_object_get(st, "pool"));
      const char *op = json_string_value(json_object_get(st, "operation"));
      printf("%s%s(%s)", j ? "," : "", json_string_value(json_object_get(st, "name")),
             pool ? pool : op ? op : "?");
    }
    printf("\n");
    if (err) printf("  error: %s\n", err);
    print_io(p);
  }
  return 0;
}

/* A pool's sla object (docs/sla.md) on one line. */
static void print_sla(json_t *sla) {
  if (!sla) return;
  json_t *c = json_object_get(sla, "compliance"), *lw = json_object_get(sla, "last_window");
  json_t *al = json_object_get(sla, "alert");
  printf("  sla: window %llds, compliance ", (long long)json_integer_value(json_object_get(sla, "window_s")));
  if (json_is_number(c))
    printf("%.1f%% (%lld/%lld windows)", json_number_value(c) * 100,
           (long long)json_integer_value(json_object_get(sla, "good_windows")),
           (long long)json_integer_value(json_object_get(sla, "windows")));
  else
    printf("-");
  if (json_is_object(lw)) {
    json_t *p99 = json_object_get(lw, "p99_ms"), *av = json_object_get(lw, "availability");
    printf(", last window %s", json_is_true(json_object_get(lw, "ok")) ? "ok" : "MISSED");
    if (json_is_number(p99)) printf(" p99 %.3f ms", json_number_value(p99));
    if (json_is_number(av)) printf(" availability %.2f%%", json_number_value(av) * 100);
    printf(" %.1f rps", json_number_value(json_object_get(lw, "throughput_rps")));
  }
  const char *level = json_string_value(json_object_get(al, "level"));
  const char *why = json_string_value(json_object_get(al, "reason"));
  printf(", alert %s", level ? level : "?");
  if (level && strcmp(level, "none") && why) printf(": %s", why);
  printf("\n");
}

#define MIB(o, k) ((double)json_integer_value(json_object_get((o), (k))) / 1048576.0)

/* The server's memory line (docs/elastic.md "Memory"). */
static void print_memory(json_t *m) {
  if (!json_is_object(m)) return;
  printf("memory: resident %.1f MiB, models %.1f MiB, budget ", MIB(m, "resident_bytes"),
         MIB(m, "models_bytes"));
  if (json_is_integer(json_object_get(m, "budget_bytes")))
    printf("%.1f MiB (%s)\n", MIB(m, "budget_bytes"),
           json_string_value(json_object_get(m, "budget")));
  else
    printf("none\n");
}

int sip_cli_status(json_t *root) {
  printf("uptime %.1fs  ready=%s  version %s\n", json_real_value(json_object_get(root, "uptime_s")),
         json_is_true(json_object_get(root, "ready")) ? "yes" : "no",
         json_string_value(json_object_get(root, "version")));
  print_memory(json_object_get(root, "memory"));
  printf("%-20s %-8s %7s %7s %9s %9s %10s\n", "POOL", "STATE", "ACTIVE", "QUEUED", "OK", "FAILED",
         "MEAN_MS");
  size_t i, j;
  json_t *p, *s;
  json_array_foreach(json_object_get(root, "pools"), i, p) {
    json_t *req = json_object_get(p, "requests");
    long long ok = 0, failed = 0;
    const char *k;
    json_t *v;
    json_object_foreach(req, k, v) {
      if (strcmp(k, "OK") == 0)
        ok += json_integer_value(v);
      else
        failed += json_integer_value(v);
    }
    json_t *tot = json_object_get(json_object_get(p, "latency_us"), "total");
    long long cnt = json_integer_value(json_object_get(tot, "count"));
    double mean = cnt ? (double)json_integer_value(json_object_get(tot, "sum")) / (double)cnt / 1e3
                      : 0.0;
    printf("%-20s %-8s %7lld %7lld %9lld %9lld %10.3f\n",
           json_string_value(json_object_get(p, "name")),
           json_string_value(json_object_get(p, "state")),
           (long long)json_integer_value(json_object_get(p, "active_sessions")),
           (long long)json_integer_value(json_object_get(p, "queued_requests")), ok, failed, mean);
    const char *err = json_string_value(json_object_get(p, "error"));
    if (err) printf("  error: %s\n", err);
    print_sla(json_object_get(p, "sla"));
    json_t *cs = json_object_get(p, "compute_share");
    if (cs && json_real_value(json_object_get(cs, "share")) > 0) {
      json_t *quota = json_object_get(cs, "quota");
      printf("  compute share %.1f%% of the last %llds",
             100 * json_real_value(json_object_get(cs, "share")),
             (long long)json_integer_value(json_object_get(cs, "window_s")));
      if (json_is_real(quota)) printf(" (max_compute_percent %.0f%%)", 100 * json_real_value(quota));
      printf("\n");
    }
    if (json_is_integer(json_object_get(p, "memory_bytes")))
      printf("  memory %.1f MiB measured (model file %.1f MiB), %.3f MiB per session\n",
             MIB(p, "memory_bytes"), MIB(p, "model_bytes"), MIB(p, "session_memory_bytes"));
    json_t *store = json_object_get(p, "model_store"), *with = json_object_get(store, "shared_with");
    if (json_array_size(with)) { /* docs/elastic.md "One model store" */
      printf("  model %.1f MiB loaded once, shared with", MIB(store, "model_memory_bytes"));
      json_array_foreach(with, j, s) printf("%s %s", j ? "," : "", json_string_value(s));
      printf("\n");
    }
    json_array_foreach(json_object_get(p, "sessions"), j, s) {
      printf("  session %-16s %-10s inferences=%lld errors=%lld\n",
             json_string_value(json_object_get(s, "id")),
             json_string_value(json_object_get(s, "state")),
             (long long)json_integer_value(json_object_get(s, "inferences")),
             (long long)json_integer_value(json_object_get(s, "errors")));
    }
    if (failed) {
      printf("  failures:");
      json_object_foreach(req, k, v) if (strcmp(k, "OK")) printf(" %s=%lld", k,
                                                                 (long long)json_integer_value(v));
      printf("\n");
    }
  }
  return 0;
}
