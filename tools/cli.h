/* sip CLI — pieces shared by the commands. */
#ifndef SIP_TOOLS_CLI_H
#define SIP_TOOLS_CLI_H

#include "sip/client.h"

/* NAME:DTYPE:SHAPE=VALUES → an owned tensor, or NULL with a message on stderr. */
sip_tensor_t *sip_cli_parse_input(const char *spec);
/* Element i of numeric data of type dt as a double (float16 decoded). */
double sip_cli_value(sip_dtype_t dt, const void *p, size_t i);
/* `sip bench POOL ...`: argv[0] is the pool. Returns the exit status. */
int sip_cli_bench(sip_client_t *c, const char *endpoint, int json_out, int argc, char **argv);

/* `sip report --html FILE`: argv holds the options after "report"; `c`
 * may be NULL with an http:// endpoint. Returns the exit status. */
int sip_cli_report(sip_client_t *c, const char *endpoint, int argc, char **argv);

#endif
