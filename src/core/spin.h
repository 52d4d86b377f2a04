/* sip — polling before sleeping: the window a thread polls for work,
 * from the pool's config or the environment, and the CPU's pause hint. */
#ifndef SIP_CORE_SPIN_H
#define SIP_CORE_SPIN_H

#include <stdatomic.h>
#include <stdint.h>

/* Microseconds from environment variable `var` when it holds an integer
 * 0..1000, else -1 (not set, or not a window); read every call. */
int64_t sip__spin_us_env(const char *var);

/* The window a pool's threads poll for work after work when its config
 * gives none: SIP_IDLE_SPIN_US, else this. */
#define SIP__IDLE_SPIN_US_DEFAULT 50

/* A pool's poll window: `configured` (its idle_spin_us; < 0: absent), else
 * SIP_IDLE_SPIN_US from the environment, else SIP__IDLE_SPIN_US_DEFAULT. */
int64_t sip__spin_window_us(int64_t configured);

/* Tells the CPU this thread is spinning (x86 pause, arm yield). */
static inline void sip__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
