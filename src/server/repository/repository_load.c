/* sip — loading and unloading one repository model, on the loader thread.
 *
 * A (re)load brings the new versions' sessions to READY outside the
 * registry, checks that the pipelines whose stages run on the model still
 * fit them, then swaps them in and retires the versions they replace in one
 * registry step, then drains and frees the retired pools. So requests switch
 * to the new version at one instant, requests already admitted finish on
 * the old one, and a load that fails (or that a pipeline would not fit)
 * leaves what was serving in place. An unload is refused while a pipeline
 * runs a stage on the model. */
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "pipeline/pipeline.h"
#include "server/repository/repository_impl.h"
#include "session/residency.h"
#include "backend/backends.h"

/* Identity of the files a version was loaded from: a reload with nothing
 * changed keeps the running pool. */
static char *fingerprint(const char *model_file, const char *config_file,
                         const sip__model_override_t *config) {
  struct stat a, b;
  int ha = stat(model_file, &a) == 0, hb = config_file && stat(config_file, &b) == 0;
  return sip__asprintf("%ju:%ju:%jd:%jd.%09ld|%ju:%ju:%jd:%jd.%09ld|%s",
                       ha ? (uintmax_t)a.st_dev : 0, ha ? (uintmax_t)a.st_ino : 0,
                       ha ? (intmax_t)a.st_size : 0, ha ? (intmax_t)a.st_mtim.tv_sec : 0,
                       ha ? a.st_mtim.tv_nsec : 0L, hb ? (uintmax_t)b.st_dev : 0,
                       hb ? (uintmax_t)b.st_ino : 0, hb ? (intmax_t)b.st_size : 0,
                       hb ? (intmax_t)b.st_mtim.tv_sec : 0, hb ? b.st_mtim.tv_nsec : 0L,
                       sip__model_override_text(config));
}

/* The inputs and outputs a load's model config declares, against the
 * loaded version's. */
static sip_error_t *check_io(sip__pool_t *p, const sip__model_override_t *config,
                             const sip__repo_cfg_t *rc) {
  sip__model_io_t io;
  sip__model_t *m = sip__pool_model(p);
  if (!m->vt->describe_io(m, &io)) return NULL;
  const sip_io_desc_t *const d[2] = {io.inputs, io.outputs};
  const size_t n[2] = {io.n_inputs, io.n_outputs};
  sip_error_t *e = sip__repo_cfg_check_io(rc, d, n); /* what config.pbtxt declares */
  if (!e && config) e = sip__model_override_check_io(config, d, n, sip__pool_config(p)->max_batch_size > 0);
  return e;
}

/* Live repository pools of `name`, each with a reference. */
static sip__pool_t **model_pools(sip_server_t *s, const char *name, size_t *n) {
  size_t all = 0;
  sip__pool_t **v = sip__registry_snapshot(&s->eng, 1, &all);
  *n = 0;
  for (size_t i = 0; i < all; i++) {
    if (sip__pool_from_repo(v[i]) && !strcmp(sip__pool_name(v[i]), name))
      v[(*n)++] = v[i];
    else
      sip__pool_unref(v[i]);
  }
  return v;
}

/* What of the config file already has this name: "a session_pools entry",
 * "a pipeline (pipeline_sessions)", or NULL. Requests name pools and
 * pipelines alike, so a repository model may share neither name. */
const char *sip__repo_config_name_taken(sip_server_t *s, const char *name) {
  const sip__config_t *pools = atomic_load(&s->pools_cfg); /* the last reload's */
  for (size_t i = 0; i < pools->n_pools; i++)
    if (!strcmp(pools->pools[i].name, name)) return "a session_pools entry";
  for (size_t i = 0; i < s->cfg->n_pipelines; i++)
    if (!strcmp(s->cfg->pipelines[i].name, name)) return "a pipeline (pipeline_sessions)";
  return NULL;
}

/* Returns memory freed by the pools just released to the system: without
 * it glibc keeps freed heap pages, and a reload would look like a leak. */
static void give_back_memory(void) { malloc_trim(0); }

/* Checks a request's model name against the repository (not its files). */
sip_error_t *sip__repo_check_request(sip_server_t *s, const char *name) {
  if (!s->repo->root)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "this server has no model repository (server.model_repository); models "
                         "cannot be loaded or unloaded");
  sip_error_t *e = sip__repo_check_name(name, strlen(name));
  if (e) return e;
  const char *taken = sip__repo_config_name_taken(s, name);
  if (taken)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "'%s' is %s of the config file; only models of the model repository are "
                         "loaded and unloaded, under names of their own",
                         name, taken);
  return NULL;
}

/* Loads or reloads one model: the versions its policy selects are brought
 * to READY, swapped in, and the versions they replace drained and freed.
 * When anything fails, what was serving stays (only versions that loaded
 * replace their old selves) and the failure is recorded for the index. */
sip_error_t *sip__repo_load_model(sip_server_t *s, const char *name,
                                  const sip__model_override_t *config) {
  sip__repo_t *R = s->repo;
  sip_error_t *e = sip__repo_check_request(s, name);
  if (e) return e;
  uint64_t t0 = sip__now_us();
  sip__failure_t *f = NULL;
  size_t nf = 0, nv = 0, n_old = 0, n_add = 0, n_retire = 0, n_sel = 0, n_missing = 0;
  sip__version_dir_t *v = NULL;
  char *dir = NULL;
  sip__repo_cfg_t rc = {0};
  sip__pool_config_t *tmpl = NULL;
  int64_t *sel = NULL, missing[SIP__MAX_SPECIFIC_VERSIONS], current = -1;
  sip__pool_t **add = NULL, **retire = NULL;
  int *keep = NULL;
  sip__pool_t **old = model_pools(s, name, &n_old);

  e = sip__repo_model_dir(R, name, &dir);
  if (e && !n_old && !sip__repo_rec_exists(R, name)) { /* not a model of this repository */
    sip__registry_release(old, n_old);
    return e;
  }
  sip__repo_rec_set_state(R, name, REC_LOADING);
  if (!e) e = sip__repo_cfg_find(R, name, dir, &rc); /* config.yaml or config.pbtxt */
  if (!e) e = sip__repo_cfg_load(&rc, name, NULL, &tmpl);
  if (!e) e = sip__model_override_apply(config, tmpl); /* refused before anything loads */
  if (!e) e = sip__repo_scan_versions(R, name, dir, &v, &nv, &f, &nf);
  /* Version directories that cannot be used (a link leaving the
   * repository...) are reported in the index but fail nothing by
   * themselves; the failures counted from here on do. */
  size_t nf_scan = nf;
  if (!e) e = sip__repo_current_version(name, dir, v, nv, &current);
  if (!e) {
    int64_t *nums = sip__calloc(nv + 1, sizeof *nums);
    sel = sip__calloc(nv + 1, sizeof *sel);
    if (!nums || !sel) {
      e = SIP__OOM();
    } else {
      for (size_t i = 0; i < nv; i++) nums[i] = v[i].num;
      n_sel = sip__repo_select_versions(tmpl, nums, nv, current, sel, missing, &n_missing);
    }
    sip__free(nums);
  }
  for (size_t i = 0; !e && i < n_missing; i++) {
    char ver[24];
    snprintf(ver, sizeof ver, "%lld", (long long)missing[i]);
    sip_error_t *me = sip_error_new(SIP_NOT_FOUND, "version %s is listed in "
                                    "version_policy.specific but %s/%s/%s does not exist",
                                    ver, dir, ver, sip__backend_file_name(tmpl->backend));
    if (sip__repo_add_failure(&f, &nf, ver, me)) e = SIP__OOM();
    sip_error_free(me);
  }
  if (!e && !n_sel && nf == nf_scan)
    e = sip_error_new(SIP_NOT_FOUND,
                      "model '%s' has no version to serve; expected %s/<version>/%s with a "
                      "numeric version",
                      name, dir, sip__backend_file_name(tmpl->backend));
  if (!e) {
    add = sip__calloc(n_sel + 1, sizeof *add);
    retire = sip__calloc(n_old + 1, sizeof *retire);
    keep = sip__calloc(n_old + 1, sizeof *keep);
    if (!add || !retire || !keep) e = SIP__OOM();
  }
  /* Each selected version: keep the running pool when its files did not
   * change, else load a new one beside it. */
  for (size_t i = 0; !e && i < n_sel; i++) {
    const sip__version_dir_t *ver = NULL;
    for (size_t k = 0; k < nv && !ver; k++)
      if (v[k].num == sel[i]) ver = &v[k];
    char *fp = fingerprint(ver->file, sip__repo_cfg_file(&rc), config);
    if (!fp) {
      e = SIP__OOM();
      break;
    }
    int kept = 0;
    for (size_t j = 0; j < n_old && !kept; j++) {
      sip__pool_info_t in;
      sip__pool_info(old[j], &in);
      if (in.version && !strcmp(in.version, ver->name) && in.fingerprint &&
          !strcmp(in.fingerprint, fp))
        kept = keep[j] = 1;
    }
    if (kept) {
      sip__free(fp);
      continue;
    }
    sip__pool_config_t *pc = NULL;
    sip_error_t *le = sip__repo_cfg_load(&rc, name, ver->file, &pc);
    if (!le) le = sip__model_override_apply(config, pc);
    if (le) sip__config_pool_free(pc);
    sip__pool_t *p = le ? NULL : sip__pool_new(&s->eng, pc, pc, ver->name);
    if (!le && !p) le = SIP__OOM();
    if (le) {
      sip__free(fp);
      e = le;
      break;
    }
    sip__pool_set_origin(p, ver->num == current, fp);
    if (sip__residency_on_demand(s, pc, 1)) { /* loads at its first request */
      sip__pool_set_on_demand(p, 0);
      add[n_add++] = p;
      continue;
    }
    sip__pool_load(p);
    sip__pool_info_t in;
    sip__pool_info(p, &in);
    sip_error_t *ie = in.state == SIP__POOL_READY ? check_io(p, config, &rc) : NULL;
    if (in.state == SIP__POOL_READY && !ie) {
      add[n_add++] = p;
    } else {
      if (sip__repo_add_failure(&f, &nf, ver->name, ie ? ie : in.load_error)) e = SIP__OOM();
      sip_error_free(ie);
      if (in.state == SIP__POOL_READY) sip__pool_shutdown(p);
      sip__pool_destroy(p);
    }
  }
  /* Pipelines whose stages run on this model follow its new versions only
   * if those still fit how the stages were wired. */
  for (size_t i = 0; !e && i < n_add; i++) {
    sip__model_io_t io;
    sip__model_t *am = sip__pool_model(add[i]);
    char *why = am->vt->describe_io(am, &io)
                    ? sip__pipelines_check_pool(s->pipelines, name, &io)
                    : NULL;
    if (why)
      e = sip_error_new(SIP_FAILED_PRECONDITION, "version '%s' does not fit %s; the versions "
                        "serving stay", sip__pool_version(add[i]) ? sip__pool_version(add[i]) : "-",
                        why);
    sip__free(why);
  }
  if (e) { /* nothing changes: the versions loaded for nothing go */
    for (size_t i = 0; i < n_add; i++) {
      sip__pool_shutdown(add[i]);
      sip__pool_destroy(add[i]);
    }
    n_add = 0;
  } else {
    for (size_t j = 0; j < n_old; j++) {
      if (keep[j]) continue;
      int replaced = 0;
      for (size_t i = 0; i < n_add && !replaced; i++)
        replaced = sip__pool_version(old[j]) &&
                   !strcmp(sip__pool_version(add[i]), sip__pool_version(old[j]));
      /* After a failure only versions with a working successor go. */
      if (nf == nf_scan || replaced) retire[n_retire++] = old[j];
    }
    /* The `current` link may have moved between versions that stay. */
    pthread_rwlock_wrlock(&s->eng.reg_lock);
    for (size_t j = 0; j < n_old; j++)
      if (keep[j]) {
        sip__pool_info_t in;
        sip__pool_info(old[j], &in);
        sip__pool_set_pinned(old[j], in.version_num == current);
      }
    pthread_rwlock_unlock(&s->eng.reg_lock);
    if (n_add || n_retire) {
      sip_error_t *se = sip__registry_swap(&s->eng, add, n_add, retire, n_retire);
      if (se) {
        for (size_t i = 0; i < n_add; i++) {
          sip__pool_shutdown(add[i]);
          sip__pool_destroy(add[i]);
        }
        n_add = n_retire = 0;
        e = se;
      }
    }
  }
  size_t n_live = n_old - n_retire + n_add;
  /* Our references go first: a drain waits for every other one. */
  sip__registry_release(old, n_old);
  for (size_t i = 0; i < n_retire; i++) {
    sip__log(SIP__LOG_INFO, "retiring model version", "model=%s version=%s", name,
             sip__pool_version(retire[i]) ? sip__pool_version(retire[i]) : "-");
    sip__registry_drain_free(&s->eng, retire[i]);
  }
  if (n_retire) give_back_memory();
  if (e) {
    sip__repo_add_failure(&f, &nf, NULL, e);
  } else if (nf > nf_scan) {
    const sip__failure_t *first = &f[nf_scan];
    e = sip_error_new(first->code, "model '%s'%s%s%s failed to load: %s%s", name,
                      first->version ? " version '" : "", first->version ? first->version : "",
                      first->version ? "'" : "", first->reason,
                      n_live ? " (the versions that were serving stay)" : "");
  }
  sip__log(e ? SIP__LOG_ERROR : SIP__LOG_INFO, e ? "model load failed" : "model loaded",
           "model=%s versions_new=%zu versions_retired=%zu versions_serving=%zu failures=%zu "
           "ms=%.1f%s%s%s",
           name, n_add, n_retire, n_live, nf, (double)(sip__now_us() - t0) / 1000.0,
           e ? " reason=\"" : "", e ? sip_error_message(e) : "", e ? "\"" : "");
  sip__repo_rec_finish(R, name, n_live ? REC_READY : REC_FAILED, f, nf);
  sip__version_dirs_free(v, nv);
  sip__free(sel);
  sip__free(add);
  sip__free(retire);
  sip__free(keep);
  sip__free(dir);
  sip__repo_cfg_clear(&rc);
  sip__config_pool_free(tmpl);
  return e;
}

sip_error_t *sip__repo_unload_model(sip_server_t *s, const char *name) {
  sip__repo_t *R = s->repo;
  sip_error_t *e = sip__repo_check_request(s, name);
  if (e) return e;
  size_t n_old = 0;
  sip__pool_t **old = model_pools(s, name, &n_old);
  if (!n_old) {
    sip__registry_release(old, n_old);
    char *dir = NULL;
    e = sip__repo_rec_exists(R, name) ? NULL : sip__repo_model_dir(R, name, &dir);
    sip__free(dir);
    if (!e) sip__repo_rec_finish(R, name, REC_UNLOADED, NULL, 0); /* already unloaded: done */
    return e;
  }
  char *why = sip__pipelines_check_pool(s->pipelines, name, NULL);
  if (why) {
    e = sip_error_new(SIP_FAILED_PRECONDITION, "model '%s' cannot be unloaded: %s; change or "
                      "remove that pipeline first", name, why);
    sip__free(why);
    sip__registry_release(old, n_old);
    return e;
  }
  sip__repo_rec_set_state(R, name, REC_UNLOADING);
  e = sip__registry_swap(&s->eng, NULL, 0, old, n_old);
  if (e) {
    sip__registry_release(old, n_old);
    sip__repo_rec_set_state(R, name, REC_READY);
    return e;
  }
  /* Our references go first (a drain waits for every other one); the pools
   * stay valid, since only sip__registry_drain_free frees them. */
  for (size_t i = 0; i < n_old; i++) sip__pool_unref(old[i]);
  for (size_t i = 0; i < n_old; i++) sip__registry_drain_free(&s->eng, old[i]);
  sip__free(old);
  give_back_memory();
  sip__repo_rec_finish(R, name, REC_UNLOADED, NULL, 0);
  sip__log(SIP__LOG_INFO, "model unloaded", "model=%s versions=%zu", name, n_old);
  return NULL;
}

