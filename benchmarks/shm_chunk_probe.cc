// Why the shared-memory allreduce stages in 4 MiB chunks: a standalone probe
// (no tf_ring, MPI or Python) of the staged algorithm's memory traffic.
//
//   g++ -O3 -march=native -o /tmp/shm_chunk_probe benchmarks/shm_chunk_probe.cc
//   /tmp/shm_chunk_probe 10        # rounds; run it a few times
//   /tmp/shm_chunk_probe --one-way # only the core-to-core latency (shm_chunk_ab.py)
//
// Two processes pinned to CPUs 0 and 1 allreduce 64 MB of float32 through a
// shared mapping, as shm_allreduce.cc does (stage the peer's half, barrier,
// reduce own half, barrier, copy the peer's half out), with several chunk
// sizes, in rounds that interleave them. Each round starts and ends with a
// cache-line ping-pong between the two processes: about 30-70 ns one way
// means the cores share an L3, 150 ns or more that they sit on two
// chiplets. The last lines give each variant's median in both states.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace {
constexpr long kBytes = 64 << 20, kElems = kBytes / 4;
struct Shared {
  alignas(64) std::atomic<unsigned long> arrived[2];
  alignas(64) std::atomic<unsigned long> ball;
};
Shared* shared;
char* areas;  // per rank: 2 buffers x (staging + result) x the largest chunk
constexpr long kMaxChunk = 8 << 20;
int me;
unsigned long generation = 0;

void Barrier() {
  shared->arrived[me].store(++generation, std::memory_order_release);
  while (shared->arrived[1 - me].load(std::memory_order_acquire) < generation) {
  }
}

double OneWayNs() {
  Barrier();
  const int kTrips = 20000;
  const auto start = std::chrono::steady_clock::now();
  for (unsigned long i = 0; i < kTrips; ++i) {
    if (me == 0) {
      shared->ball.store(2 * i + 1, std::memory_order_release);
      while (shared->ball.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    } else {
      while (shared->ball.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      shared->ball.store(2 * i + 2, std::memory_order_release);
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  Barrier();
  if (me == 0) shared->ball.store(0);
  Barrier();
  return ns / kTrips / 2;
}

// one_sweep: the reduced half goes to the result area and the output in one
// loop (tf_ring since this change), else reduce, then copy (before).
void StagedAllreduce(const float* in, float* out, long chunk_bytes, bool one_sweep) {
  const long chunk = chunk_bytes / 4;
  for (long first = 0, c = 0; first < kElems; first += chunk, ++c) {
    const long len = std::min(chunk, kElems - first), half = len / 2;
    const long mine = me ? half : 0, mine_len = me ? len - half : half;
    const long theirs = me ? 0 : half, theirs_len = me ? half : len - half;
    auto area = [&](int rank, int part) {
      return reinterpret_cast<float*>(areas + (rank * 4 + (c & 1) * 2 + part) * kMaxChunk);
    };
    std::memcpy(area(me, 0) + theirs, in + first + theirs, theirs_len * 4);
    Barrier();
    const float* a = me ? area(0, 0) + mine : in + first + mine;
    const float* b = me ? in + first + mine : area(1, 0) + mine;
    float* result = area(me, 1) + mine;
    float* o = out + first + mine;
    if (one_sweep) {
      for (long i = 0; i < mine_len; ++i) result[i] = o[i] = a[i] + b[i];
    } else {
      for (long i = 0; i < mine_len; ++i) result[i] = a[i] + b[i];
      std::memcpy(o, result, mine_len * 4);
    }
    Barrier();
    std::memcpy(out + first + theirs, area(1 - me, 1) + theirs, theirs_len * 4);
  }
}
}  // namespace

int main(int argc, char** argv) {
  const bool only_latency = argc > 1 && std::strcmp(argv[1], "--one-way") == 0;
  const int rounds = argc > 1 && !only_latency ? std::atoi(argv[1]) : 10;
  void* map = mmap(nullptr, 4096 + 8 * kMaxChunk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  shared = new (map) Shared();
  areas = static_cast<char*>(map) + 4096;
  std::memset(areas, 0, 8 * kMaxChunk);
  me = fork() == 0 ? 1 : 0;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(me, &cpus);
  sched_setaffinity(0, sizeof(cpus), &cpus);
  if (only_latency) {
    const double ns = OneWayNs();
    if (me == 0) {
      std::printf("%.0f\n", ns);
      wait(nullptr);
    }
    return 0;
  }
  std::vector<float> in(kElems), out(kElems);
  for (long i = 0; i < kElems; ++i) in[i] = static_cast<float>(me + 1 + i % 7);
  struct Variant { const char* name; long chunk; bool one_sweep; };
  const Variant variants[] = {{"1 MiB, reduce then copy (before)", 1 << 20, false},
                              {"1 MiB, one sweep", 1 << 20, true},
                              {"4 MiB, one sweep (tf_ring now)", 4 << 20, true},
                              {"8 MiB, one sweep", 8 << 20, true}};
  const int n = sizeof(variants) / sizeof(variants[0]);
  std::vector<std::vector<double>> one_l3(n), two_l3(n);
  for (int r = 0; r < rounds; ++r) {
    const double before = OneWayNs();
    std::vector<double> ms(n);
    for (int v = 0; v < n; ++v) {
      Barrier();
      const auto start = std::chrono::steady_clock::now();
      StagedAllreduce(in.data(), out.data(), variants[v].chunk, variants[v].one_sweep);
      Barrier();
      ms[v] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      for (long i = 0; i < kElems; i += 4099) {
        if (out[i] != 3 + 2 * (i % 7)) { std::printf("wrong result: %s\n", variants[v].name); return 1; }
      }
    }
    const double after = OneWayNs();
    if (me == 0) {
      std::printf("round %2d, one way %3.0f/%3.0f ns:", r, before, after);
      for (double t : ms) std::printf(" %6.1f", t);
      std::printf(" ms\n");
    }
    const bool near = before < 100 && after < 100, far = before > 120 && after > 120;
    for (int v = 0; v < n && (near || far); ++v) (near ? one_l3 : two_l3)[v].push_back(ms[v]);  // a round that changed state counts for neither
  }
  if (me == 0) {
    auto median = [](std::vector<double> t) { std::sort(t.begin(), t.end()); return t.empty() ? 0.0 : t[t.size() / 2]; };
    std::printf("%-34s %12s %12s\n", "median ms", "one L3", "two L3s");
    for (int v = 0; v < n; ++v) std::printf("%-34s %12.1f %12.1f\n", variants[v].name, median(one_l3[v]), median(two_l3[v]));
    wait(nullptr);
  }
  return 0;
}
