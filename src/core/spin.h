/* sip — polling before sleeping: the window a thread polls for work,
 * read once from an environment variable, and the CPU's pause hint. */
#ifndef SIP_CORE_SPIN_H
#define SIP_CORE_SPIN_H

#include <stdatomic.h>
#include <stdint.h>

/* Microseconds from environment variable `var` (an integer 0..1000; else
 * `def`), read once: *cache starts at -1 and keeps the value. */
int64_t sip__spin_us_setting(const char *var, long def, atomic_int *cache);

/* Tells the CPU this thread is spinning (x86 pause, arm yield). */
static inline void sip__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
