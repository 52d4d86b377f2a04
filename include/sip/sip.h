/* sip — umbrella header for the engine (libsip). */
#ifndef SIP_SIP_H
#define SIP_SIP_H
#include "sip/error.h"
#include "sip/tensor.h"
#include "sip/backend.h"
#include "sip/server.h"
#include "sip/events.h"
#include "sip/worker.h"
#endif
