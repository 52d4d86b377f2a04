/* sipd — the sip daemon: loads a YAML config of session pools and serves
 * them on the configured endpoints until SIGINT/SIGTERM, then drains
 * (server.drain_timeout_ms) and exits 0; SIGHUP reloads the file's pools.
 * Under a service manager ($NOTIFY_SOCKET) it reports its state with the
 * sd_notify protocol (service.h, docs/deploy.md). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "notify.h"
#include "service.h"
#include "sip/sip.h"

/* Internal: validation without starting anything. */

static void usage(FILE *f) {
  fprintf(f,
          "usage: sipd --config FILE       serve the pools and pipelines in FILE\n"
          "       sipd --check-config FILE [--load]\n"
          "                                validate FILE and that its model files can be read;\n"
          "                                --load: load every model too (0: valid, 1: invalid)\n"
          "       sipd --version\n"
          "Listening addresses (replace the config's; the command line wins over the environment):\n"
          "  --http HOST:PORT      server.http        (environment: SIP_HTTP)\n"
          "  --grpc HOST:PORT      server.grpc        (environment: SIP_GRPC)\n"
          "  --endpoint URL        server.endpoints, repeatable: ipc://PATH, unix:///PATH,\n"
          "                        tcp://HOST:PORT\n");
}

int main(int argc, char **argv) {
  /* A process-isolated pool's worker is this program run again. */
  int worker = sip_worker_main(argc, argv);
  if (worker >= 0) return worker;
  const char *config = NULL;
  int check = 0, load = 0;
  const char *http = getenv("SIP_HTTP"), *grpc = getenv("SIP_GRPC");
  const char *endpoints[64];
  int n_endpoints = 0;
  for (int i = 1; i < argc; i++) {
    if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0) && i + 1 < argc) {
      config = argv[++i];
    } else if (strcmp(argv[i], "--check-config") == 0 && i + 1 < argc) {
      config = argv[++i];
      check = 1;
    } else if (strcmp(argv[i], "--http") == 0 && i + 1 < argc) {
      http = argv[++i];
    } else if (strcmp(argv[i], "--grpc") == 0 && i + 1 < argc) {
      grpc = argv[++i];
    } else if (strcmp(argv[i], "--endpoint") == 0 && i + 1 < argc) {
      if (n_endpoints == (int)(sizeof endpoints / sizeof *endpoints)) {
        fprintf(stderr, "sipd: more than %d --endpoint arguments\n", n_endpoints);
        return 2;
      }
      endpoints[n_endpoints++] = argv[++i];
    } else if (strcmp(argv[i], "--load") == 0) {
      load = 1;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("sipd %s\n", sip_version());
      return 0;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "sipd: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!config || (load && !check)) {
    usage(stderr);
    return 2;
  }
  if (check) {
    char *summary = NULL;
    sip_error_t *e = load ? sip_config_check_load(config, &summary)
                          : sip_config_check_file(config, &summary);
    if (e) {
      fprintf(stderr, "%s\n", sip_error_message(e));
      sip_error_free(e);
      return 1;
    }
    printf("%s: OK (%s)\n", config, summary);
    sip_free(summary);
    return 0;
  }

  /* Read (and taken out of the environment) before any thread exists. */
  sipd_notify_t *notify = sipd_notify_open();

  /* Signals are taken synchronously by this thread only: block them before
   * any engine thread exists so they inherit the mask. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

  sip_server_options_t *o = sip_server_options_new();
  sip_error_t *e = o ? sip_server_options_set_config_file(o, config) : NULL;
  if (o && !e && http && *http) e = sip_server_options_set_http_address(o, http);
  if (o && !e && grpc && *grpc) e = sip_server_options_set_grpc_address(o, grpc);
  for (int k = 0; o && !e && k < n_endpoints; k++) e = sip_server_options_add_endpoint(o, endpoints[k]);
  sip_server_t *srv = NULL;
  if (o && !e) e = sip_server_new(o, &srv);
  sip_server_options_free(o);
  if (!o || e) {
    fprintf(stderr, "sipd: %s\n", e ? sip_error_message(e) : "out of memory");
    sip_error_free(e);
    sipd_notify_free(notify);
    return 1;
  }
  for (size_t i = 0; i < sip_server_endpoint_count(srv); i++)
    printf("sipd: listening on %s\n", sip_server_endpoint(srv, i));
  fflush(stdout);
  /* READY=1 once start-up loading is over, STATUS= lines, WATCHDOG=1. */
  sipd_service_t *service = sipd_service_start(srv, notify);

  int sig = 0;
  /* SIGHUP: the config file's pools are reloaded while serving; a config
   * that cannot be applied is refused (logged) and nothing changes. */
  while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
    fprintf(stderr, "sipd: SIGHUP received, reloading %s\n", config);
    sipd_service_reloading(service, config);
    sip_error_t *re = sip_server_reload_config(srv);
    if (re) fprintf(stderr, "sipd: reload refused: %s\n", sip_error_message(re));
    sipd_service_reloaded(service, re ? sip_error_message(re) : NULL);
    sip_error_free(re);
  }
  fprintf(stderr, "sipd: %s received, draining\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  sipd_service_stopping(service, sig == SIGINT ? "SIGINT" : "SIGTERM");
  /* Readiness turns false at once; requests are still served for
   * server.drain_delay_ms; then admitted requests get
   * server.drain_timeout_ms, then what is left is answered UNAVAILABLE. */
  sip_server_drain(srv, -1);
  sipd_service_stop(service);
  sip_server_free(srv);
  sipd_notify_free(notify);
  return 0;
}
