/* sip — what the shared libraries export.
 *
 * libsip and libsipclient are built with -fvisibility=hidden: a symbol is
 * exported only when its declaration in include/sip/ carries SIP_API.
 * Everything else (the engine's sip__ internals, the generated protobuf-c
 * code) stays inside the library; programs linking the static library
 * still reach it. scripts/check_layers.py checks that the exported set is
 * exactly the public declarations. */
#ifndef SIP_EXPORT_H
#define SIP_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define SIP_API __attribute__((visibility("default")))
#else
#define SIP_API
#endif

#endif
