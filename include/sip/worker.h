/* sip — the worker process of pools with `isolation: process`.
 *
 * A process-isolated pool executes in a worker process that the server
 * starts by running its own program again (/proc/self/exe) with the
 * arguments "--sip-worker FD PPID". sipd handles them; a program that
 * embeds libsip and serves such pools must hand its arguments to
 * sip_worker_main first thing in main(). */
#ifndef SIP_WORKER_H
#define SIP_WORKER_H

#include "sip/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The first argument that marks a worker's command line. */
#define SIP_WORKER_ARG "--sip-worker"

/* When argv is a worker's command line (argv[1] is SIP_WORKER_ARG), runs
 * the worker until the server closes its channel and returns the process's
 * exit status; otherwise returns -1 at once and touches nothing.
 * Call from main() before any other thread exists. */
SIP_API int sip_worker_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
