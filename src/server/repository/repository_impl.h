/* sip — the model repository's private state, shared by its files. Only
 * src/server/repository/repository*.c include this.
 *
 *   repository_versions.c  names and paths: model names checked, paths kept
 *                          inside the repository, version directories and
 *                          the `current` link read, version_policy applied
 *   repository_load.c      loading and unloading one model: versions brought
 *                          up beside the serving ones, pipelines re-checked,
 *                          the registry swap, the retired versions drained
 *   repository.c           the loader thread and its queue, the records of
 *                          what each model's last load did, the public
 *                          load/unload calls and the repository index
 *   repository_import.c    models imported from files outside the
 *                          repository (linked in, loaded; removed again) */
#ifndef SIP_SERVER_REPOSITORY_IMPL_H
#define SIP_SERVER_REPOSITORY_IMPL_H

#include "core/queue.h"
#include "server/repository/repository.h"
#include "config/triton.h"
#include "server/server_impl.h"

enum { REC_LOADING, REC_READY, REC_UNLOADING, REC_UNLOADED, REC_FAILED };

typedef struct sip__failure {
  char *version; /* NULL: the model as a whole */
  sip_code_t code;
  char *reason; /* "CODE: message", as the status shows it */
} sip__failure_t;

/* What the repository knows about one model beyond its pools. */
typedef struct sip__model_rec {
  char *name;
  int state;
  sip__failure_t *failed; /* what the last load could not serve */
  size_t n_failed;
  struct sip__model_rec *next;
} sip__model_rec_t;

typedef struct sip__repo_op {
  int unload;
  int reload; /* the config file's pools (reload.c), not a model */
  int remove; /* unload, then delete an imported model's files ("": every one) */
  int residency; /* load an on-demand pool (src/server/residency.c); source: its version */
  char *name;
  char *source; /* import: the files outside the repository (resolved); else NULL */
  sip__model_override_t *config; /* load with a Triton model config; NULL: none */
  char *config_text;             /* its text, for the state checkpoint */
  sip_repo_done_fn done;
  void *user;
  SIP__FIFO_LINK(struct sip__repo_op);
} sip__repo_op_t;

/* The loader's queue of operations (src/core/queue.h). */
typedef struct sip__repo_op_queue {
  SIP__FIFO_FIELDS(sip__repo_op_t);
} sip__repo_op_queue_t;

struct sip__repo {
  char *root; /* realpath of server.model_repository; NULL: none */
  size_t root_len;
  pthread_mutex_t mu; /* ops, stop, models */
  pthread_cond_t cv;
  sip__repo_op_queue_t ops;
  int stop;
  pthread_t thread;
  int started;
  sip__model_rec_t *models;
  /* server.state_dir's checkpoint (src/server/state/state.c); NULL: none. The
   * loader records the loads and unloads asked for, operator requests the
   * pools they change; under state_mu. */
  struct sip__state *state;
  pthread_mutex_t state_mu;
};

/* ---- records (repository.c) ---- */

/* Sets the state of `name`'s record, creating it. Takes mu. */
void sip__repo_rec_set_state(sip__repo_t *R, const char *name, int state);
/* Sets the outcome of a load: its state and failures (taken). Takes mu. */
void sip__repo_rec_finish(sip__repo_t *R, const char *name, int state, sip__failure_t *f, size_t n);
/* 1 when the repository has a record of `name`. Takes mu. */
int sip__repo_rec_exists(sip__repo_t *R, const char *name);
/* Records what could not be served: `e` (borrowed) for version `version`
 * (NULL: the model). -1 when out of memory. */
int sip__repo_add_failure(sip__failure_t **f, size_t *n, const char *version, const sip_error_t *e);

/* ---- names, paths and versions (repository_versions.c) ---- */

/* realpath of `path` into *out (owned) when it lies inside the repository.
 * Errors: NOT_FOUND (missing), INVALID_ARGUMENT (resolves outside). */
sip_error_t *sip__repo_inside(sip__repo_t *R, const char *path, const char *what, char **out);
/* The model's directory (resolved, owned). Errors: NOT_FOUND. */
sip_error_t *sip__repo_model_dir(sip__repo_t *R, const char *name, char **out);
/* The model's usable versions in `dir` (sorted; each file resolved inside
 * the repository and a regular file); versions that cannot be used are
 * added to the failures. Free *out with sip__version_dirs_free. */
sip_error_t *sip__repo_scan_versions(sip__repo_t *R, const char *name, const char *dir,
                                     sip__version_dir_t **out, size_t *n_out, sip__failure_t **f,
                                     size_t *nf);
/* The version a `current` link names among `v` (*out -1: no link).
 * Errors: NOT_FOUND (a link to no usable version). */
sip_error_t *sip__repo_current_version(const char *name, const char *dir,
                                       const sip__version_dir_t *v, size_t n, int64_t *out);
/* Model directory names in the repository, sorted (hidden and invalid
 * names skipped); free with sip__repo_free_names. */
char **sip__repo_scan_models(sip__repo_t *R, size_t *n_out);
void sip__repo_free_names(char **v, size_t n);

/* ---- loading and unloading a model (repository_load.c) ---- */

/* What of the config file already has this name: "a session_pools entry",
 * "a pipeline (pipeline_sessions)", or NULL. */
const char *sip__repo_config_name_taken(sip_server_t *s, const char *name);
/* Checks a request's model name against the repository (not its files). */
sip_error_t *sip__repo_check_request(sip_server_t *s, const char *name);
/* Loads or reloads one model (with `config` applied over its config.yaml
 * when not NULL); on the loader thread. */
sip_error_t *sip__repo_load_model(sip_server_t *s, const char *name,
                                  const sip__model_override_t *config);
/* Unloads one model; on the loader thread. */
sip_error_t *sip__repo_unload_model(sip_server_t *s, const char *name);

/* ---- models imported from outside the repository (repository_import.c) ---- */

/* Links (or copies) the model at `source` into <repository>/<name>/ and
 * loads it; on the loader thread. */
sip_error_t *sip__repo_import(sip_server_t *s, const char *name, const char *source);
/* Unloads `name` and deletes its files when they were imported ("": every
 * imported model); on the loader thread. */
sip_error_t *sip__repo_remove(sip_server_t *s, const char *name);
/* Forgets the record of `name` (a removed import). Takes mu. */
void sip__repo_rec_drop(sip__repo_t *R, const char *name);

/* Queues an operation on the loader (repository.c). */
enum { SIP__REPO_OP_LOAD, SIP__REPO_OP_UNLOAD, SIP__REPO_OP_RELOAD, SIP__REPO_OP_IMPORT,
       SIP__REPO_OP_REMOVE, SIP__REPO_OP_RESIDENCY };
sip_error_t *sip__repo_queue_op(sip_server_t *s, const char *name, int kind, const char *config,
                                const char *source, sip_repo_done_fn done, void *user);

/* ---- a model's settings file (repository_triton.c) ---- */
/* <model>/config.yaml, or else Triton's config.pbtxt read as one. */
typedef struct sip__repo_cfg {
  char *yaml_file;  /* config.yaml (resolved), or NULL */
  char *pbtxt_file; /* config.pbtxt (resolved) when there is no config.yaml, or NULL */
  sip__triton_import_t tri;  /* what config.pbtxt amounts to */
  sip__model_override_t *io; /* the inputs and outputs it declares, or NULL */
} sip__repo_cfg_t;
/* Finds and reads the settings file of `model` in `dir` (config.pbtxt's
 * unused fields are logged as warnings). Clear `c` with sip__repo_cfg_clear
 * (also after an error). */
sip_error_t *sip__repo_cfg_find(sip__repo_t *R, const char *model, const char *dir,
                                sip__repo_cfg_t *c);
/* The settings of one version's pool (model_path: its file). */
sip_error_t *sip__repo_cfg_load(const sip__repo_cfg_t *c, const char *model,
                                const char *model_path, sip__pool_config_t **out);
/* The file the settings came from, or NULL (all defaults). */
const char *sip__repo_cfg_file(const sip__repo_cfg_t *c);
/* The declared inputs and outputs against a loaded version's. */
sip_error_t *sip__repo_cfg_check_io(const sip__repo_cfg_t *c, const sip_io_desc_t *const d[2],
                                    const size_t n[2]);
void sip__repo_cfg_clear(sip__repo_cfg_t *c);

#endif
