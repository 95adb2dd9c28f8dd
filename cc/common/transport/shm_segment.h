// A node-local shared-memory segment: one region per local rank, each with a
// barrier counter and double-buffered staging areas, so local ranks can
// exchange data with plain loads and stores; and two small things beside
// them: slots for the response cache's AND round, and two staging buffers
// for small allreduces.
//
// The memory is a POSIX shared-memory object mapped by every local rank (not
// an MPI shared window): releasing it is local, so a rank can let go of it
// after a peer died (fault-tolerant mode), where freeing an MPI window would
// wait for the dead peer. A rank waiting in Barrier() watches its peers'
// processes and the segment's abort word, so it never waits on a dead one.
#ifndef TF_RING_COMMON_SHM_SEGMENT_H_
#define TF_RING_COMMON_SHM_SEGMENT_H_

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <sys/types.h>

#include <vector>

#include "common/base/status.h"
#include "common/transport/cpu_placement.h"
#include "common/transport/process_liveness.h"
#include "common/transport/single_copy_mode.h"

namespace tf_ring {

class ShmSegment {
 public:
  // Collective over `local_comm`. Each region holds 2 buffers of
  // 2 * `area_bytes` (an input area and a result area), and a table where
  // its rank publishes tensor addresses for single-copy reads, which are
  // used when `single_copy` is true on every rank and the kernel allows
  // them (see cross_memory.h), as `single_copy` says. `owner_rank` is this
  // rank's number in the engine's communicator, for the message that names
  // a dead peer.
  Status Init(MPI_Comm local_comm, size_t area_bytes, SingleCopyMode single_copy = SingleCopyMode::kNever,
              int owner_rank = -1);
  // Init, collective over `comm` (all of the set's ranks, `local_comm` this
  // host's share of them): where some host cannot reserve areas of
  // `area_bytes` (a small /dev/shm), every host maps `fallback_bytes`
  // instead, so all hosts still cut a buffer into the same chunks. A
  // fallback of 0 (or no smaller) means none: the error stands.
  Status InitEverywhere(MPI_Comm comm, MPI_Comm local_comm, size_t area_bytes, size_t fallback_bytes,
                        SingleCopyMode single_copy, int owner_rank);
  // Local. `abort_waiters`: first tell every local rank waiting in Barrier()
  // to give up (this rank will not arrive any more).
  void Release(bool abort_waiters = false);
  bool ready() const { return base_ != nullptr; }
  // Whether Barrier() can tell a dead peer from a slow one (every peer's
  // process was visible in /proc at Init); without it a dead peer hangs it.
  bool watches_peers() const { return watches_peers_; }
  // Collective over `comm`: false when some rank's segment (null: none)
  // cannot watch its peers, so every rank decides the same.
  static bool WatchedEverywhere(MPI_Comm comm, const ShmSegment* shm);

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t area_bytes() const { return area_bytes_; }
  char* input_area(int rank, int buffer) const { return data_[rank] + buffer * 2 * area_bytes_; }
  char* result_area(int rank, int buffer) const { return input_area(rank, buffer) + area_bytes_; }

  // Single-copy reads: when they are used (kNever where the kernel forbids
  // them on some local rank), each rank's pid, and its table of up to
  // `address_slots()` addresses (published before a barrier, read after it).
  SingleCopyMode single_copy_mode() const { return pids_.empty() ? SingleCopyMode::kNever : single_copy_mode_; }
  pid_t pid(int rank) const { return pids_[rank]; }
  uint64_t* address_table(int rank) const { return reinterpret_cast<uint64_t*>(tables_[rank]); }
  static size_t address_slots();
  // Per rank, two staging buffers of small_area_bytes() for small
  // allreduces, apart from the areas above. Every rank takes them in turn,
  // in the same order: NextSmallBuffer() answers 0, 1, 0, ...
  static size_t small_area_bytes();
  char* small_area(int rank, int buffer) const;
  int NextSmallBuffer() { return static_cast<int>(small_calls_++ & 1); }

  // A word per rank that its peers read after a barrier (a failure flag).
  std::atomic<uint64_t>* flag(int rank) const { return counters_[rank] + 8; }

  // Every local rank waits until all have arrived. Spins briefly, then
  // yields, so an oversubscribed peer gets the CPU it needs to arrive.
  // Returns false, at once on every waiting rank, when a local rank's
  // process died or a rank gave up on the segment (Release with
  // abort_waiters): the collective cannot finish. A dead peer is also
  // reported as a lost rank (peer_failure.h), so the engine stops.
  bool Barrier();

  // Every local rank's `n` words ANDed together, in place: the response
  // cache's round, a few hundred bytes, in a fraction of an MPI allreduce's
  // time. Needs `n` <= and_words_capacity(); false as Barrier() (a dead
  // peer) or when `n` is too large. Its own count, apart from Barrier()'s.
  bool AllreduceAnd(uint64_t* words, size_t n);
  static size_t and_words_capacity();

  // The chunk a large allreduce inside this host stages (shm_cache_probe.cc).
  // After AllowSharedCacheChunks(local_comm, bytes), collective over the
  // local ranks: an allreduce of more than one full area first measures how
  // fast a cache line moves from local rank 0's core to each peer's, and
  // stages `bytes` at a time where every peer's core shares a cache with
  // rank 0's (small chunks stay in it), the whole area otherwise (a line
  // staged again while a peer's core still holds it would cross between
  // caches twice). Every local rank gets the same answer; 0 means a local
  // rank died during the measurement. Without the call: always the area.
  // `cores_apart`, when given, tells whether the measurement found some
  // peer's core clearly on another cache (not merely no shared one: a
  // measurement a descheduled peer spoiled answers neither).
  void AllowSharedCacheChunks(MPI_Comm local_comm, size_t bytes);
  // The default of `bytes`: 1 MiB chunks stay in a cache two cores share,
  // and took 64 MB 9-12% faster than 4 MiB ones there (benchmarks/README.md).
  static constexpr size_t kSharedCacheChunkBytes = 1 << 20;
  size_t ChunkBytesFor(int64_t total_bytes, bool* cores_apart = nullptr);
  // Where this rank's engine thread keeps to during such an allreduce, so
  // the local ranks' threads cannot be stacked on one CPU (cpu_placement.h);
  // chosen by AllowSharedCacheChunks().
  const CpuHome& cpu_home() const { return cpu_home_; }
  // How many allreduces ChunkBytesFor() gave the small chunks, and how many
  // read their peers' tensors directly (for stats()).
  int64_t shared_cache_runs() const { return shared_cache_runs_; }
  int64_t single_copy_runs() const { return single_copy_runs_; }
  void CountSingleCopyRun() { ++single_copy_runs_; }
  // How many allreduces kept the engine thread on cpu_home() (for stats()).
  int64_t kept_on_cpu_runs() const { return kept_on_cpu_runs_; }
  void CountKeptOnCpuRun() { ++kept_on_cpu_runs_; }

 private:
  // The AND rounds' count and slots share the counter page, each on lines
  // of its own, away from the barrier counter its peers poll.
  static constexpr size_t kAndCounterWord = 64;  // byte 512
  static constexpr size_t kAndSlotWord = 128;    // byte 1024
  static constexpr size_t kAndSlotWords = 192;   // two slots up to byte 4096
  std::atomic<uint64_t>* and_counter(int rank) const { return counters_[rank] + kAndCounterWord; }
  uint64_t* and_slot(int rank, int slot) const {
    return reinterpret_cast<uint64_t*>(counters_[rank] + kAndSlotWord) + slot * kAndSlotWords;
  }

  // Wait until a peer's `word` reaches `target`; false when the segment
  // was aborted or the peer's process died meanwhile. Spins for
  // SpinBeforeSleep(), then sleeps until the peer's Publish() wakes it
  // (peer_wait.h): a waiter that kept its core would starve a descheduled
  // peer of it.
  bool WaitForPeer(int r, std::atomic<uint64_t>* word, uint64_t target);
  // Stores a word peers wait on, waking those asleep on it.
  void PublishWord(std::atomic<uint64_t>* word, uint64_t value);
  // The count of processes asleep on a word peers wait on: the next word,
  // on the same cache line (the counter, AND counter and probe words).
  static std::atomic<uint32_t>* sleepers_of(std::atomic<uint64_t>* word) {
    return reinterpret_cast<std::atomic<uint32_t>*>(word + 1);
  }
  bool PeerAborted();  // the abort word is set: notes the lost peer
  // The cache probe's word per rank, on a line of its own in the counter page.
  std::atomic<uint64_t>* probe_word(int rank) const { return counters_[rank] + 48; }
  // The measurement's answers.
  enum CacheAnswer { kCacheUnknown = 0, kCacheShared = 1, kCacheApart = 2 };
  int LeadCacheProbe();    // local rank 0: a CacheAnswer
  int FollowCacheProbe();  // the others: rank 0's answer, -1 when it died
  std::atomic<uint64_t>* counter(int rank) const { return counters_[rank]; }
  std::atomic<uint64_t>* abort_word() const { return counters_[0] + 16; }
  ProcessIdentity* identity(int rank) const { return reinterpret_cast<ProcessIdentity*>(counters_[rank] + 24); }
  int32_t* owner_rank_of(int rank) const { return reinterpret_cast<int32_t*>(counters_[rank] + 32); }
  bool PeerGone(int rank);
  void WakeAllSleepers();  // after setting the abort word
  Status Map(MPI_Comm local_comm, size_t bytes);

  char* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  bool watches_peers_ = false;
  uint64_t die_at_barrier_ = 0;  // tests only: TF_RING_TEST_DIE_AT_SHM_BARRIER
  int rank_ = 0, size_ = 1;
  size_t area_bytes_ = 0;
  uint64_t epoch_ = 0;
  uint64_t and_epoch_ = 0;
  uint64_t small_calls_ = 0;
  std::chrono::microseconds spin_{0};  // SpinBeforeSleep(), read at Init
  size_t shared_cache_chunk_bytes_ = 0;  // 0: no probe, always the area
  uint64_t probe_epoch_ = 0;
  int forced_answer_ = -1;  // tests only: TF_RING_TEST_SHM_SHARED_CACHE, or -1
  int64_t shared_cache_runs_ = 0;
  int64_t single_copy_runs_ = 0;
  CpuHome cpu_home_;
  int64_t kept_on_cpu_runs_ = 0;
  SingleCopyMode single_copy_mode_ = SingleCopyMode::kNever;
  std::vector<char*> data_;
  std::vector<std::atomic<uint64_t>*> counters_;
  std::vector<char*> tables_;
  std::vector<char*> small_;
  std::vector<pid_t> pids_;  // empty: no single-copy reads
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_SHM_SEGMENT_H_
