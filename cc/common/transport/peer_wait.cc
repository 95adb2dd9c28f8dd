#include "common/transport/peer_wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <string>

#include "common/observability/logging.h"

namespace tf_ring {

namespace {

static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4,
              "shared words are plain 64- and 32-bit words");

// The futex is the word's low half: a store of the whole word changes it
// (the waiter only ever waits for a larger value, and consecutive values
// differ in their low 32 bits).
uint32_t* FutexOf(std::atomic<uint64_t>* word) {
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "peer_wait.cc assumes little-endian words"
#endif
  return reinterpret_cast<uint32_t*>(word);
}

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
long Futex(uint32_t* address, int op, uint32_t value, const struct timespec* timeout) {
  return syscall(SYS_futex, address, op, value, timeout, nullptr, 0);
}

// 50 us: the spin the engine's other waits already used (the cache round's,
// MpiContext::Wait's). Measured quiet and loaded in benchmarks/README.md.
constexpr long kDefaultSpinMicros = 50;

std::chrono::microseconds ReadSpin() {
  const char* value = std::getenv("TF_RING_SPIN_US");
  if (value != nullptr && *value != '\0') {
    char* end = nullptr;
    const long parsed = std::strtol(value, &end, 10);
    if (end != value && *end == '\0' && parsed >= 0) return std::chrono::microseconds(parsed);
    Log(LogLevel::kWarning, std::string("TF_RING_SPIN_US=\"") + value +
                                "\" is not a whole number of microseconds; using the default.");
  }
  return std::chrono::microseconds(kDefaultSpinMicros);
}

}  // namespace

void Publish(const SharedWord& word, uint64_t v) {
  // seq_cst store, then the sleepers' count: a sleeper registers (seq_cst)
  // before it re-reads the word, so either it sees `v` or this sees it.
  word.value->store(v, std::memory_order_seq_cst);
  WakeSleepers(word);
}

void WakeSleepers(const SharedWord& word) {
  if (word.sleepers->load(std::memory_order_seq_cst) != 0) {
    Futex(FutexOf(word.value), FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void SleepWhile(const SharedWord& word, uint64_t seen, std::chrono::microseconds timeout) {
  word.sleepers->fetch_add(1, std::memory_order_seq_cst);
  if (word.value->load(std::memory_order_seq_cst) == seen) {
    struct timespec limit;
    limit.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
    limit.tv_nsec = static_cast<long>(timeout.count() % 1000000) * 1000;
    // Returns at a wake, a timeout, a signal, or at once (EAGAIN) when the
    // low half no longer reads `seen`: every case re-reads the word.
    Futex(FutexOf(word.value), FUTEX_WAIT, static_cast<uint32_t>(seen), &limit);
  }
  word.sleepers->fetch_sub(1, std::memory_order_seq_cst);
}

std::chrono::microseconds SpinBeforeSleep() {
  static const std::chrono::microseconds spin = ReadSpin();
  return spin;
}

}  // namespace tf_ring
