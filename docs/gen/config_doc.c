/* Prints docs/config.md, the configuration reference, from the config
 * parser's tables (`make docs` writes it; the ctest docs/config compares). */
#include <stdio.h>

#include "backend/backends.h"
#include "config/config.h"

int main(void) {
  if (sip__config_doc_markdown(stdout) ||
      sip__config_doc_backends(stdout, sip__backend_catalog()) || fflush(stdout)) {
    fputs("config_doc: writing the reference failed\n", stderr);
    return 1;
  }
  return 0;
}
