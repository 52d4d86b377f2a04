/* sip — what `sipd --check-config FILE [--load]` checks (sip/server.h):
 * the config's syntax and meaning, that every model file it names exists
 * and can be read, and with --load that every pool and pipeline loads. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backends.h"
#include "core/core.h"
#include "server/introspect.h"
#include "server/server.h"
#include "server/server_impl.h"

/* Appends one problem line to *list (owned); 0 on success. */
static int add(char **list, const char *line) {
  char *next = sip__asprintf("%s%s%s", *list ? *list : "", *list ? "\n" : "", line);
  if (!next) return -1;
  sip__free(*list);
  *list = next;
  return 0;
}

/* Every model file and directory the config names can be read. */
static sip_error_t *check_files(const sip__config_t *cfg) {
  char *problems = NULL, line[PATH_MAX + 300], eb[128];
  size_t n = 0;
  for (size_t i = 0; i < cfg->n_pools; i++) {
    const char *mp = cfg->pools[i].model_path;
    if (!mp) continue; /* a backend that needs no file (builtin) */
    struct stat st;
    const char *why = NULL;
    if (stat(mp, &st) != 0)
      why = strerror_r(errno, eb, sizeof eb);
    else if (access(mp, S_ISDIR(st.st_mode) ? R_OK | X_OK : R_OK) != 0)
      why = strerror_r(errno, eb, sizeof eb);
    if (!why) continue;
    snprintf(line, sizeof line, "pool '%s': model_path '%s': %s; expected a readable model file "
             "or model directory", cfg->pools[i].name, mp, why);
    n++;
    if (add(&problems, line)) break;
  }
  if (cfg->model_repository) {
    struct stat st;
    if (stat(cfg->model_repository, &st) != 0 || !S_ISDIR(st.st_mode)) {
      snprintf(line, sizeof line, "server.model_repository '%s' is not a directory; expected the "
               "directory of the model repository", cfg->model_repository);
      n++;
      add(&problems, line);
    }
  }
  if (!n) return NULL;
  sip_error_t *e = sip_error_new(SIP_NOT_FOUND, "%s: %zu model path%s cannot be read:\n%s",
                                 cfg->path ? cfg->path : "config", n, n == 1 ? "" : "s",
                                 problems ? problems : "(out of memory)");
  sip__free(problems);
  return e;
}

sip_error_t *sip_config_check_file(const char *path, char **summary) {
  *summary = NULL;
  sip__config_t *cfg = NULL;
  sip_error_t *e = sip__config_load_file(path, sip__backend_catalog(), &cfg);
  if (e) return e;
  e = check_files(cfg);
  if (!e)
    *summary = sip__asprintf("%zu pools, %zu pipelines, %zu endpoints%s%s%s%s%s%s", cfg->n_pools,
                             cfg->n_pipelines, cfg->n_endpoints, cfg->http ? ", http " : "",
                             cfg->http ? cfg->http : "", cfg->grpc ? ", grpc " : "",
                             cfg->grpc ? cfg->grpc : "",
                             cfg->model_repository ? ", model repository " : "",
                             cfg->model_repository ? cfg->model_repository : "");
  sip__config_free(cfg);
  return e ? e : *summary ? NULL : SIP__OOM();
}

sip_error_t *sip_config_check_load(const char *path, char **summary) {
  sip_error_t *e = sip_config_check_file(path, summary);
  if (e) return e;
  sip_free(*summary);
  *summary = NULL;
  sip_server_options_t *o = sip_server_options_new();
  if (!o) return SIP__OOM();
  sip_server_t *s = NULL;
  e = sip_server_options_set_config_file(o, path);
  sip_server_options_set_listen(o, 0);
  sip_server_options_set_wait_for_load(o, 1);
  /* The engine without front-ends: nothing listens while models load. */
  if (!e) e = sip__server_create(o, &s);
  if (!e) e = sip__server_start(s, o);
  sip_server_options_free(o);
  if (e) {
    sip_server_free(s);
    return e;
  }
  size_t n = 0, failed = 0, loaded = 0;
  char *problems = NULL, line[800];
  sip__model_view_t *v = sip__server_models(s, &n);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(v[i].state, "FAILED")) {
      loaded++;
      continue;
    }
    failed++;
    snprintf(line, sizeof line, "%s '%s'%s%s failed to load: %s",
             v[i].is_pipeline ? "pipeline" : "pool", v[i].name, v[i].version ? " version " : "",
             v[i].version ? v[i].version : "", v[i].error ? v[i].error : "no reason given");
    add(&problems, line);
  }
  sip__server_models_free(v, n);
  sip_server_free(s);
  if (failed) {
    e = sip_error_new(SIP_FAILED_PRECONDITION, "%s: %zu of %zu models failed to load:\n%s", path,
                      failed, failed + loaded, problems ? problems : "(out of memory)");
    sip__free(problems);
    return e;
  }
  *summary = sip__asprintf("%zu models loaded", loaded);
  return *summary ? NULL : SIP__OOM();
}
