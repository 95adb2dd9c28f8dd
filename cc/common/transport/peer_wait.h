// Waiting for a word another process on this host writes in shared memory,
// without holding a core its writer may need.
//
// A waiter spins for a short while (a peer that is running arrives within
// microseconds), then sleeps in the kernel (a futex on the word) until the
// writer's store wakes it. Sleeping is what lets a descheduled peer run: on
// a machine with more runnable threads than cores, a waiter that spins or
// calls sched_yield() keeps its core busy, so the scheduler never moves the
// peer it waits for onto it, and every hand-off costs the peer a time
// slice behind whatever else runs on its own core (issue 51,
// benchmarks/README.md "Speed under load").
//
// The writer pays for the wake only when a sleeper has registered: each
// word has a count of sleepers beside it, and Publish() reads it after its
// store, in the order that guarantees one side sees the other (a sleeper
// registers, then re-reads the word before it sleeps; the kernel re-checks
// the word again as it puts it to sleep).
#ifndef TF_RING_COMMON_TRANSPORT_PEER_WAIT_H_
#define TF_RING_COMMON_TRANSPORT_PEER_WAIT_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tf_ring {

// A 64-bit word in memory shared between processes and the count of those
// asleep on it. The futex is the word's low 32 bits (little-endian).
struct SharedWord {
  std::atomic<uint64_t>* value = nullptr;
  std::atomic<uint32_t>* sleepers = nullptr;
};

// Stores `v` and wakes every process asleep on the word.
void Publish(const SharedWord& word, uint64_t v);

// Wakes every process asleep on the word, changing nothing (they re-read
// what else they watch: the abort word).
void WakeSleepers(const SharedWord& word);

// Sleeps while the word still reads `seen`, for at most `timeout`; returns
// at once when it already differs. Spurious returns are allowed: the caller
// re-reads the word.
void SleepWhile(const SharedWord& word, uint64_t seen, std::chrono::microseconds timeout);

// How long a waiter spins before it sleeps: long enough to catch a running
// peer's arrival without a wake-up (a futex wake costs the sleeper tens of
// microseconds on a VM), short enough that a descheduled peer loses little.
// TF_RING_SPIN_US overrides it on this rank (it changes nothing a rank
// sends, only when its own threads give up their cores); read once.
std::chrono::microseconds SpinBeforeSleep();

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TRANSPORT_PEER_WAIT_H_
