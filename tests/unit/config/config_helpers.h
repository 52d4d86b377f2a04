/* What the config parser's unit tests share (test_config*.c): loading a
 * YAML text that must parse, and checking every piece of an error. */
#ifndef SIP_TEST_CONFIG_HELPERS_H
#define SIP_TEST_CONFIG_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "core/core.h"
#include "backend/backends.h"

#define NAME "cfg.yaml"
#define BASE "/base"

static inline sip__config_t *load_ok(const char *yaml) {
  sip__config_t *cfg = NULL;
  sip_error_t *err = sip__config_load_string(yaml, strlen(yaml), NAME, BASE, sip__backend_catalog(), &cfg);
  if (err) fail_msg("unexpected error: %s\n--- yaml:\n%s", sip_error_message(err), yaml);
  assert_non_null(cfg);
  return cfg;
}

/* Loads `yaml` (length len), expects an error with `code` whose message
 * contains every string of the NULL-terminated list. */
static inline void expect_errn(const char *yaml, size_t len, sip_code_t code, ...) {
  sip__config_t *cfg = (sip__config_t *)1;
  sip_error_t *err = sip__config_load_string(yaml, len, NAME, BASE, sip__backend_catalog(), &cfg);
  if (!err) fail_msg("expected an error for:\n%s", yaml);
  assert_null(cfg);
  /* Copied so the error is freed before a failure longjmps out (LSan). */
  char msg[4096];
  snprintf(msg, sizeof msg, "%s", sip_error_message(err));
  sip_code_t got = sip_error_code(err);
  sip_error_free(err);
  if (got != code) fail_msg("code %s, want %s: %s", sip_code_name(got), sip_code_name(code), msg);
  va_list ap;
  va_start(ap, code);
  const char *missing = NULL;
  for (const char *sub; !missing && (sub = va_arg(ap, const char *));)
    if (!strstr(msg, sub)) missing = sub;
  va_end(ap);
  if (missing) fail_msg("message lacks \"%s\":\n  %s\n--- yaml:\n%s", missing, msg, yaml);
}

#define EXPECT_ERR(yaml, ...) expect_errn(yaml, strlen(yaml), SIP_INVALID_ARGUMENT, __VA_ARGS__, NULL)

/* One pool around a fragment of pool keys (indented 4). */
#define POOL(extra) "session_pools:\n  - name: p\n    model_path: m.onnx\n" extra

#endif
