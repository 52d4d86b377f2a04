/* bench_torchscript_inproc — the in-process baseline of bench/torchscript.py:
 * a TorchScript model called straight through libtorch (torch::jit::load,
 * forward under c10::InferenceMode), with no sip at all.
 *
 *   bench_torchscript_inproc latency MODEL DIMS N THREADS
 *       -> {"p50_us", "p99_us", "mean_us"}   N calls one after another
 *   bench_torchscript_inproc throughput MODEL DIMS SECONDS THREADS CALLERS
 *       -> {"items_per_s", "calls"}          CALLERS threads calling the one
 *                                            module for SECONDS
 * DIMS like 1,64 (dim 0 is the batch); the float32 input holds a fixed
 * pattern; THREADS is libtorch's intra-op thread count. JSON on stdout. */
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/script.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_dims(const char *s) {
  std::vector<int64_t> d;
  for (char *p = const_cast<char *>(s); *p;) {
    d.push_back(strtoll(p, &p, 10));
    if (*p == ',') p++;
  }
  return d;
}

at::Tensor make_input(const std::vector<int64_t> &dims) {
  at::Tensor t = at::empty(dims, at::kFloat);
  float *p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); i++) p[i] = (float)(i % 255) / 255.0f;
  return t;
}

/* One call as a server makes it: an input over caller memory, forward, the
 * output made contiguous and read. */
double call(torch::jit::Module &m, const at::Tensor &x) {
  c10::InferenceMode guard;
  std::vector<c10::IValue> args{at::from_blob(x.data_ptr(), x.sizes(), at::kFloat)};
  at::Tensor y = m.forward(std::move(args)).toTensor().contiguous();
  return (double)y.data_ptr<float>()[0];
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: bench_torchscript_inproc latency MODEL DIMS N THREADS\n"
                    "       bench_torchscript_inproc throughput MODEL DIMS SECONDS THREADS CALLERS\n");
    return 2;
  }
  const char *mode = argv[1];
  at::set_num_threads(atoi(argv[5]) > 0 ? atoi(argv[5]) : 1);
  torch::jit::Module m;
  try {
    m = torch::jit::load(argv[2], c10::Device(c10::kCPU));
    m.eval();
  } catch (const std::exception &e) {
    fprintf(stderr, "bench_torchscript_inproc: cannot load %s: %s\n", argv[2], e.what());
    return 1;
  }
  at::Tensor x = make_input(parse_dims(argv[3]));
  double sink = 0;
  for (int i = 0; i < 200; i++) sink += call(m, x); /* warm: the executor's profiling runs */

  if (!strcmp(mode, "latency")) {
    long n = atol(argv[4]);
    std::vector<double> us((size_t)n);
    for (long i = 0; i < n; i++) {
      auto t0 = Clock::now();
      sink += call(m, x);
      us[(size_t)i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
    double mean = 0;
    for (double v : us) mean += v;
    mean /= (double)n;
    std::sort(us.begin(), us.end());
    printf("{\"p50_us\": %.3f, \"p99_us\": %.3f, \"mean_us\": %.3f, \"sink\": %g}\n",
           us[(size_t)n / 2], us[(size_t)n * 99 / 100], mean, sink);
    return 0;
  }
  if (!strcmp(mode, "throughput") && argc >= 7) {
    double seconds = atof(argv[4]);
    int callers = std::max(1, atoi(argv[6]));
    std::atomic<long> calls{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> ts;
    auto t0 = Clock::now();
    for (int c = 0; c < callers; c++)
      ts.emplace_back([&] {
        double s = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          s += call(m, x);
          calls.fetch_add(1, std::memory_order_relaxed);
        }
        (void)s;
      });
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (std::thread &t : ts) t.join();
    double el = std::chrono::duration<double>(Clock::now() - t0).count();
    printf("{\"items_per_s\": %.1f, \"calls\": %ld, \"batch\": %lld, \"sink\": %g}\n",
           (double)calls.load() * (double)x.size(0) / el, calls.load(), (long long)x.size(0), sink);
    return 0;
  }
  fprintf(stderr, "bench_torchscript_inproc: unknown mode '%s'\n", mode);
  return 2;
}
