/* bench_pingpong — the floor of a round trip over a unix socket on this
 * machine: a client thread writes a message and blocks reading the answer;
 * a server thread waits in epoll (as sipd's transport does), reads the
 * message and writes it back. No decoding, no engine.
 *
 *   bench_pingpong BYTES N [SPIN_US]   -> {"p50_us", "p99_us", "mean_us", "spin_us"}
 *
 * SPIN_US > 0: after each answer the server thread polls the socket for the
 * next message for up to SPIN_US microseconds before it sleeps in epoll, as
 * sip's session threads poll their queue after work (SIP_IDLE_SPIN_US): the
 * floor under the same idle policy as the server it is compared with.
 *
 * Results are JSON on stdout. */

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static size_t msg_size;
static long spin_us;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Reads exactly n bytes (blocking or after epoll said readable). */
static int read_all(int fd, char *p, size_t n) {
  while (n) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void *server(void *arg) {
  int fd = *(int *)arg;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  char *buf = malloc(msg_size);
  for (;;) {
    if (spin_us > 0) { /* poll for the next message before sleeping */
      uint64_t until = now_ns() + (uint64_t)spin_us * 1000u;
      ssize_t k = -1;
      char c;
      while ((k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT)) < 0 && now_ns() < until)
        for (int i = 0; i < 32; i++) relax();
      if (k == 0) break;
      if (k > 0) {
        if (read_all(fd, buf, msg_size) || write_all(fd, buf, msg_size)) break;
        continue;
      }
    }
    struct epoll_event got;
    int n = epoll_wait(ep, &got, 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || read_all(fd, buf, msg_size) || write_all(fd, buf, msg_size)) break;
  }
  free(buf);
  close(ep);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: bench_pingpong BYTES N [SPIN_US]\n");
    return 2;
  }
  msg_size = strtoul(argv[1], NULL, 10);
  long n = strtol(argv[2], NULL, 10);
  spin_us = argc == 4 ? strtol(argv[3], NULL, 10) : 0;
  if (!msg_size || n < 10 || spin_us < 0 || spin_us > 1000000) {
    fprintf(stderr, "bench_pingpong: BYTES > 0, N >= 10 and SPIN_US 0..1000000 expected\n");
    return 2;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
    perror("socketpair");
    return 1;
  }
  pthread_t t;
  pthread_create(&t, NULL, server, &sv[1]);
  char *buf = calloc(1, msg_size);
  uint64_t *lat = malloc((size_t)n * sizeof *lat);
  long warm = n / 10;
  for (long i = -warm; i < n; i++) {
    uint64_t t0 = now_ns();
    if (write_all(sv[0], buf, msg_size) || read_all(sv[0], buf, msg_size)) {
      fprintf(stderr, "bench_pingpong: the socket failed\n");
      return 1;
    }
    if (i >= 0) lat[i] = now_ns() - t0;
  }
  shutdown(sv[0], SHUT_RDWR);
  pthread_join(t, NULL);
  close(sv[0]);
  close(sv[1]);
  double sum = 0;
  for (long i = 0; i < n; i++) sum += (double)lat[i];
  qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
  printf("{\"p50_us\": %.2f, \"p99_us\": %.2f, \"mean_us\": %.2f, \"spin_us\": %ld}\n",
         lat[n / 2] / 1000.0, lat[n * 99 / 100] / 1000.0, sum / (double)n / 1000.0, spin_us);
  free(buf);
  free(lat);
  return 0;
}
