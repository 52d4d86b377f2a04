/* sip CLI — `sip import-triton DIR`: a Triton model directory's config.pbtxt
 * as the config.yaml a sip repository model takes, on standard output, each
 * field sip does not act on as a comment above it (and counted on stderr).
 * Needs no server: the engine library reads the file (sip_import_triton). */
#include <stdio.h>
#include <string.h>

#include "sip/server.h"
#include "tools/cli.h"

int sip_cli_import_triton(int argc, char **argv) {
  if (argc != 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
    FILE *f = argc == 1 ? stdout : stderr;
    fprintf(f, "usage: sip import-triton DIR\n"
               "  prints the config.yaml equivalent to DIR/config.pbtxt (a Triton model\n"
               "  directory; the model is named by DIR), with the fields sip does not act on\n"
               "  as comments. A repository model directory with config.pbtxt and no\n"
               "  config.yaml loads with exactly these settings (docs/triton.md).\n");
    return argc == 1 ? 0 : 2;
  }
  char *yaml = NULL, *warnings = NULL;
  sip_error_t *e = sip_import_triton(argv[0], &yaml, &warnings);
  if (e) return sip_cli_fail(e);
  printf("# config.yaml from %s/config.pbtxt (sip import-triton)\n", argv[0]);
  int n = 0;
  for (const char *w = warnings; w && *w; n++) {
    const char *nl = strchr(w, '\n');
    int len = nl ? (int)(nl - w) : (int)strlen(w);
    printf("# not used: %.*s\n", len, w);
    w = nl ? nl + 1 : NULL;
  }
  fputs(yaml, stdout);
  if (n) fprintf(stderr, "sip: %d field(s) of config.pbtxt not used (listed as comments)\n", n);
  sip_free(yaml);
  sip_free(warnings);
  return 0;
}
