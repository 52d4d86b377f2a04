/* sip — a repository model's settings file: <model>/config.yaml, or else
 * Triton's <model>/config.pbtxt read as the config.yaml it amounts to
 * (config/triton.h), with a warning logged for every field sip does not act
 * on and the inputs and outputs it declares checked against the loaded
 * model. Also sip_import_triton, which prints that config.yaml (sip
 * import-triton). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backends.h"
#include "config/triton.h"
#include "core/core.h"
#include "server/repository/repository_impl.h"

/* Reads <dir>/config.pbtxt for `model` into `c` (warnings logged). */
static sip_error_t *read_pbtxt(sip__repo_cfg_t *c, const char *model) {
  sip_error_t *e =
      sip__triton_import_file(c->pbtxt_file, model, sip__backend_catalog(), &c->tri);
  if (!e && c->tri.io_json)
    e = sip__model_override_parse(c->tri.io_json, strlen(c->tri.io_json), model, &c->io);
  if (e) return e;
  for (const char *w = c->tri.warnings; w && *w;) {
    const char *nl = strchr(w, '\n');
    int n = nl ? (int)(nl - w) : (int)strlen(w);
    char line[1024];
    snprintf(line, sizeof line, "%.*s", n, w);
    for (char *q = line; *q; q++)
      if (*q == '"') *q = '\''; /* the parser quotes names; logfmt values are in "" */
    sip__log(SIP__LOG_WARN, "config.pbtxt field not used", "model=%s detail=\"%s\"", model, line);
    w = nl ? nl + 1 : NULL;
  }
  return NULL;
}

sip_error_t *sip__repo_cfg_find(sip__repo_t *R, const char *model, const char *dir,
                                sip__repo_cfg_t *c) {
  memset(c, 0, sizeof *c);
  struct stat st;
  char *yaml = sip__asprintf("%s/config.yaml", dir), *pbtxt = sip__asprintf("%s/config.pbtxt", dir);
  sip_error_t *e = !yaml || !pbtxt ? SIP__OOM() : NULL;
  int has_yaml = !e && lstat(yaml, &st) == 0, has_pbtxt = !e && lstat(pbtxt, &st) == 0;
  if (has_yaml) {
    e = sip__repo_inside(R, yaml, "model config", &c->yaml_file);
    if (!e && has_pbtxt)
      sip__log(SIP__LOG_WARN, "config.pbtxt not read: config.yaml beside it wins", "model=%s",
               model);
  } else if (has_pbtxt) {
    e = sip__repo_inside(R, pbtxt, "Triton model config", &c->pbtxt_file);
    if (!e) e = read_pbtxt(c, model);
  }
  sip__free(yaml);
  sip__free(pbtxt);
  if (e) sip__repo_cfg_clear(c);
  return e;
}

sip_error_t *sip__repo_cfg_load(const sip__repo_cfg_t *c, const char *model,
                                const char *model_path, sip__pool_config_t **out) {
  if (c->pbtxt_file) {
    /* Messages cite the config.yaml it amounts to (sip import-triton prints it). */
    char *src = sip__asprintf("%s, read as config.yaml", c->pbtxt_file);
    sip_error_t *e = src ? sip__config_load_model_text(c->tri.yaml, strlen(c->tri.yaml), src,
                                                       model, model_path, sip__backend_catalog(), out)
                         : SIP__OOM();
    sip__free(src);
    return e;
  }
  return sip__config_load_model(c->yaml_file, model, model_path, sip__backend_catalog(), out);
}

const char *sip__repo_cfg_file(const sip__repo_cfg_t *c) {
  return c->yaml_file ? c->yaml_file : c->pbtxt_file;
}

sip_error_t *sip__repo_cfg_check_io(const sip__repo_cfg_t *c, const sip_io_desc_t *const d[2],
                                    const size_t n[2]) {
  return c->io ? sip__model_override_check_io(c->io, d, n, c->tri.batched) : NULL;
}

void sip__repo_cfg_clear(sip__repo_cfg_t *c) {
  sip__free(c->yaml_file);
  sip__free(c->pbtxt_file);
  sip__triton_import_clear(&c->tri);
  sip__model_override_free(c->io);
  memset(c, 0, sizeof *c);
}

sip_error_t *sip_import_triton(const char *model_dir, char **yaml, char **warnings) {
  *yaml = NULL;
  if (warnings) *warnings = NULL;
  if (!model_dir || !*model_dir)
    return sip_error_new(SIP_INVALID_ARGUMENT, "no model directory given; expected the "
                         "directory of a Triton model (holding config.pbtxt)");
  size_t len = strlen(model_dir);
  while (len > 1 && model_dir[len - 1] == '/') len--;
  const char *base = model_dir + len;
  while (base > model_dir && base[-1] != '/') base--;
  char *model = sip__strndup(base, (size_t)(model_dir + len - base));
  char *path = sip__asprintf("%.*s/config.pbtxt", (int)len, model_dir);
  sip__triton_import_t t;
  memset(&t, 0, sizeof t);
  sip_error_t *e = !model || !path ? SIP__OOM()
                                   : sip__triton_import_file(path, model, sip__backend_catalog(), &t);
  if (!e) {
    *yaml = t.yaml;
    t.yaml = NULL;
    if (warnings) {
      *warnings = t.warnings;
      t.warnings = NULL;
    }
  }
  sip__triton_import_clear(&t);
  sip__free(path);
  sip__free(model);
  return e;
}
