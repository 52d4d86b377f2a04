/* sip — the CLI's operator commands (cli.h): fault, session, pool,
 * profile (ADMIN_REQUEST) and the model repository's models, load,
 * unload; and how a failed call becomes an exit status. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

int sip_cli_fail(sip_error_t *e) {
  fprintf(stderr, "sip: %s: %s\n", sip_code_name(sip_error_code(e)), sip_error_message(e));
  int code = (int)sip_error_code(e);
  sip_error_free(e);
  return code ? 10 + code : 1;
}

/* ---- operator requests on sessions (ADMIN_REQUEST) ---- */

/* A JSON number or integer argument, or -1 after a message. */
static int admin_arg(json_t *req, const char *key, const char *val, int real) {
  char *end;
  double d = strtod(val, &end);
  if (!*val || *end || (!real && d != (double)(long long)d)) {
    fprintf(stderr, "sip: %s takes %s; got '%s'\n", key, real ? "a number" : "an integer", val);
    return -1;
  }
  json_object_set_new(req, key, real ? json_real(d) : json_integer((json_int_t)d));
  return 0;
}

/* A profile's answer: the operators' table (or the JSON with --json), and
 * its trace written to `trace_file`. */
static int print_profile(const char *answer, const char *trace_file, int json_out) {
  json_t *a = json_loads(answer, 0, NULL);
  if (!a) {
    fprintf(stderr, "sip: server sent invalid JSON\n");
    return 1;
  }
  int rc = 0;
  if (trace_file) {
    json_t *trace = json_object_get(a, "trace");
    if (!trace || json_dump_file(trace, trace_file, JSON_COMPACT) != 0) {
      fprintf(stderr, "sip: cannot write the trace to %s\n", trace_file);
      rc = 1;
    }
    json_object_del(a, "trace");
  }
  if (json_out) {
    char *t = json_dumps(a, JSON_INDENT(2));
    printf("%s\n", t ? t : "{}");
    free(t);
    json_decref(a);
    return rc;
  }
  printf("pool %s session %lld: %lld executions in %.1f s\n",
         json_string_value(json_object_get(a, "pool")),
         (long long)json_integer_value(json_object_get(a, "session")),
         (long long)json_integer_value(json_object_get(a, "executions")),
         json_number_value(json_object_get(a, "seconds")));
  printf("%-24s %8s %12s %10s %10s %7s\n", "OPERATOR", "COUNT", "TOTAL_MS", "MEAN_US", "P99_US",
         "SHARE");
  size_t i;
  json_t *o;
  json_array_foreach(json_object_get(a, "operators"), i, o) {
    printf("%-24s %8lld %12.3f %10.1f %10.1f %6.1f%%\n",
           json_string_value(json_object_get(o, "op")),
           (long long)json_integer_value(json_object_get(o, "count")),
           json_number_value(json_object_get(o, "total_us")) / 1000.0,
           json_number_value(json_object_get(o, "mean_us")),
           json_number_value(json_object_get(o, "p99_us")),
           100.0 * json_number_value(json_object_get(o, "share")));
  }
  if (trace_file) printf("trace: %s (open it in Perfetto or chrome://tracing)\n", trace_file);
  json_decref(a);
  return rc;
}

int sip_cli_admin(sip_client_t *c, const char *cmd, int argc, char **argv, int json_out) {
  json_t *req = json_object();
  int bad = !req;
  const char *trace_file = NULL;
  if (!strcmp(cmd, "fault")) {
    bad = bad || argc < 1;
    if (!bad) json_object_set_new(req, "action", json_string("fault")),
              json_object_set_new(req, "pool", json_string(argv[0]));
    for (int k = 1; !bad && k < argc; k += 2) {
      const char *o = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;
      if (!v) bad = 1;
      else if (!strcmp(o, "--kind")) json_object_set_new(req, "kind", json_string(v));
      else if (!strcmp(o, "--count")) bad = admin_arg(req, "count", v, 0) != 0;
      else if (!strcmp(o, "--rate")) bad = admin_arg(req, "rate", v, 1) != 0;
      else if (!strcmp(o, "--session")) bad = admin_arg(req, "session", v, 0) != 0;
      else if (!strcmp(o, "--delay-ms")) bad = admin_arg(req, "delay_ms", v, 0) != 0;
      else bad = 1;
    }
  } else if (!strcmp(cmd, "profile")) { /* profile POOL [--seconds S] [--session N] [--trace F] */
    bad = bad || argc < 1 || argc % 2 == 0;
    if (!bad) json_object_set_new(req, "action", json_string("profile")),
              json_object_set_new(req, "pool", json_string(argv[0]));
    for (int k = 1; !bad && k + 1 < argc; k += 2) {
      const char *o = argv[k], *v = argv[k + 1];
      if (!strcmp(o, "--seconds")) bad = admin_arg(req, "seconds", v, 1) != 0;
      else if (!strcmp(o, "--session")) bad = admin_arg(req, "session", v, 0) != 0;
      else if (!strcmp(o, "--trace")) trace_file = v;
      else bad = 1;
    }
    if (!bad && !trace_file && !json_out) json_object_set_new(req, "trace", json_false());
  } else if (!strcmp(cmd, "pool")) { /* pool update POOL --size N ... */
    bad = bad || argc < 2 || strcmp(argv[0], "update") || argc % 2;
    if (!bad) json_object_set_new(req, "action", json_string("update")),
              json_object_set_new(req, "pool", json_string(argv[1]));
    for (int k = 2; !bad && k + 1 < argc; k += 2) {
      const char *o = argv[k], *v = argv[k + 1];
      if (!strcmp(o, "--size")) bad = admin_arg(req, "pool_size", v, 0) != 0;
      else if (!strcmp(o, "--max-memory-mb")) bad = admin_arg(req, "max_memory_mb", v, 0) != 0;
      else if (!strcmp(o, "--max-compute-percent"))
        bad = admin_arg(req, "max_compute_percent", v, 0) != 0;
      else bad = 1;
    }
  } else { /* session drain|resume POOL/N */
    const char *slash = argc == 2 ? strrchr(argv[1], '/') : NULL;
    bad = bad || !slash || (strcmp(argv[0], "drain") && strcmp(argv[0], "resume"));
    if (!bad) {
      json_object_set_new(req, "action", json_string(argv[0]));
      json_object_set_new(req, "pool", json_stringn(argv[1], (size_t)(slash - argv[1])));
      bad = admin_arg(req, "session", slash + 1, 0) != 0;
    }
  }
  if (bad) {
    json_decref(req);
    fprintf(stderr, "sip: usage: sip fault POOL --kind K (--count N | --rate R) [--session N] "
                    "[--delay-ms D] | sip session drain|resume POOL/N | sip pool update POOL "
                    "[--size N] [--max-memory-mb M] [--max-compute-percent C] | sip profile "
                    "POOL [--seconds S] [--session N] [--trace FILE]\n");
    return 2;
  }
  char *txt = json_dumps(req, JSON_COMPACT), *answer = NULL;
  json_decref(req);
  if (!txt) {
    fprintf(stderr, "sip: out of memory\n");
    return 1;
  }
  sip_error_t *e = sip_client_admin(c, txt, &answer);
  free(txt);
  if (e) return sip_cli_fail(e);
  int rc = 0;
  if (!strcmp(cmd, "profile") && (trace_file || !json_out)) rc = print_profile(answer, trace_file, json_out);
  else printf("%s\n", json_out ? answer : "ok");
  sip_client_free_string(answer);
  return rc;
}

/* ---- model repository ---- */

int sip_cli_repo(sip_client_t *c, const char *action, const char *model, int json_out) {
  json_t *req = model ? json_pack("{s:s,s:s}", "action", action, "model", model)
                      : json_pack("{s:s}", "action", action);
  char *txt = req ? json_dumps(req, JSON_COMPACT) : NULL, *answer = NULL;
  json_decref(req);
  if (!txt) {
    fprintf(stderr, "sip: out of memory\n");
    return 1;
  }
  sip_error_t *e = sip_client_repository(c, txt, &answer);
  free(txt);
  if (e) return sip_cli_fail(e);
  json_t *root = json_loads(answer, 0, NULL);
  sip_client_free_string(answer);
  if (!root) {
    fprintf(stderr, "sip: server sent invalid JSON\n");
    return 1;
  }
  if (json_out) {
    char *pretty = json_dumps(root, JSON_INDENT(2));
    printf("%s\n", pretty);
    free(pretty);
  } else if (!strcmp(action, "index")) {
    printf("%-24s %-8s %-12s %-8s %s\n", "MODEL", "VERSION", "STATE", "DEFAULT", "REASON");
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(root, "models"), i, m) {
      const char *v = json_string_value(json_object_get(m, "version"));
      json_t *d = json_object_get(m, "default");
      printf("%-24s %-8s %-12s %-8s %s\n", json_string_value(json_object_get(m, "name")),
             v ? v : "-", json_string_value(json_object_get(m, "state")),
             json_is_true(d) ? "yes" : "", json_string_value(json_object_get(m, "reason")));
    }
  } else {
    printf("%s: %sed\n", model, action);
  }
  json_decref(root);
  return 0;
}
