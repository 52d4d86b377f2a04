/* sip CLI — pieces shared by the commands. */
#ifndef SIP_TOOLS_CLI_H
#define SIP_TOOLS_CLI_H

#include <jansson.h>

#include "sip/client.h"

/* Prints `e` on stderr, frees it and returns the exit status for it
 * (10 + the error code). */
int sip_cli_fail(sip_error_t *e);
/* `sip pools` and `sip status` from the INFO document `root`. */
int sip_cli_pools(json_t *root);
int sip_cli_status(json_t *root);
/* `sip fault|session|pool|profile ...` (argv: the words after the command). */
int sip_cli_admin(sip_client_t *c, const char *cmd, int argc, char **argv, int json_out);
/* `sip models` (action "index", model NULL), `sip load|unload MODEL`. */
int sip_cli_repo(sip_client_t *c, const char *action, const char *model, int json_out);

/* `sip import-triton DIR` (argv: the words after the command). */
int sip_cli_import_triton(int argc, char **argv);

/* NAME:DTYPE:SHAPE=VALUES → an owned tensor, or NULL with a message on stderr. */
sip_tensor_t *sip_cli_parse_input(const char *spec);
/* Element i of numeric data of type dt as a double (float16 decoded). */
double sip_cli_value(sip_dtype_t dt, const void *p, size_t i);
/* `sip bench POOL ...`: argv[0] is the pool. Returns the exit status. */
int sip_cli_bench(sip_client_t *c, const char *endpoint, int json_out, int argc, char **argv);

/* sip bench's HTTP client (tools/bench_http.c): one request, encoded once,
 * sent over kept-alive plain sockets. */
typedef struct sip_cli_http sip_cli_http_t;
typedef struct sip_cli_http_conn sip_cli_http_conn_t;
/* Encodes `req` (borrowed) for endpoint http://HOST:PORT: KServe v2 with
 * JSON tensors (json) or the binary extension, or (body_file non-NULL) that
 * file's bytes as a JSON body. 0, or -1 with a message on stderr. */
int sip_cli_http_new(const char *endpoint, const sip_client_request_t *req, int json,
                     const char *body_file, sip_cli_http_t **out);
void sip_cli_http_free(sip_cli_http_t *h);
/* A connection (made at its first round trip); NULL when out of memory. */
sip_cli_http_conn_t *sip_cli_http_conn_new(const sip_cli_http_t *h);
void sip_cli_http_conn_free(sip_cli_http_conn_t *c);
/* Sends the request and reads the whole response: its HTTP status, or -1
 * when the connection failed (sip_cli_http_conn_error says how; the next
 * round trip connects again). */
int sip_cli_http_roundtrip(sip_cli_http_conn_t *c);
const char *sip_cli_http_conn_error(const sip_cli_http_conn_t *c);

/* SCHEME://HOST[:PORT][/REST] (an IPv6 host in brackets; the port may be
 * left out for http only): host and port copied, *rest pointing into
 * `endpoint` at the path (rest NULL: none may follow). 0, or -1 with a
 * message on stderr. */
int sip_cli_parse_hostport(const char *endpoint, const char *scheme, char *host, size_t host_size,
                           char *port, size_t port_size, const char **rest);
/* A TCP connection to host:port (TCP_NODELAY), added to epoll instance
 * `ep` for reading: its fd, or -1 with why in err. */
int sip_cli_connect(const char *host, const char *port, int ep, char *err, size_t err_size);
/* Sends all n bytes: 0, or -1 with why in err. */
int sip_cli_send_all(int fd, const void *data, size_t n, char *err, size_t err_size);
/* KServe v2's name of a datatype ("FP32", "BYTES"...). */
const char *sip_cli_kserve_type(sip_dtype_t dt);

/* sip bench's gRPC client (tools/bench_grpc.c): one ModelInfer call,
 * encoded once, over kept HTTP/2 connections (nghttp2). */
typedef struct sip_cli_grpc sip_cli_grpc_t;
typedef struct sip_cli_grpc_conn sip_cli_grpc_conn_t;
/* Encodes `req` (borrowed; numeric inputs, sent in raw_input_contents) for
 * endpoint grpc://HOST:PORT. 0, or -1 with a message on stderr. */
int sip_cli_grpc_new(const char *endpoint, const sip_client_request_t *req, sip_cli_grpc_t **out);
void sip_cli_grpc_free(sip_cli_grpc_t *g);
/* A connection (made at its first call); NULL when out of memory. */
sip_cli_grpc_conn_t *sip_cli_grpc_conn_new(const sip_cli_grpc_t *g);
void sip_cli_grpc_conn_free(sip_cli_grpc_conn_t *c);
/* Makes the call: its gRPC status (0 OK), or -1 when the connection failed
 * (sip_cli_grpc_conn_error says how; the next call connects again). After a
 * non-zero status, the error names the server's grpc-message. */
int sip_cli_grpc_call(sip_cli_grpc_conn_t *c);
const char *sip_cli_grpc_conn_error(const sip_cli_grpc_conn_t *c);

/* `sip report --html FILE`: argv holds the options after "report"; `c`
 * may be NULL with an http:// endpoint. Returns the exit status. */
int sip_cli_report(sip_client_t *c, const char *endpoint, int argc, char **argv);

#endif
