#include "common/transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string>

#include "common/observability/logging.h"
#include "common/transport/cross_memory.h"
#include "common/transport/peer_failure.h"
#include "common/transport/peer_wait.h"

namespace tf_ring {

namespace {
// The counter, flag, abort word and identity, then the AND rounds' counter
// and two slots (ShmSegment::AllreduceAnd), on their own page.
constexpr size_t kCounterBytes = 4096;
constexpr size_t kTableBytes = 64 << 10;  // 8,192 addresses: 4,096 tensors' input and output
// Two staging buffers of small allreduces (shm_small_allreduce.h), apart
// from the large path's areas so neither overwrites what a peer still reads.
// Their size is also the largest response that takes that path: up to 64 KB
// one barrier less beats splitting the arithmetic.
constexpr size_t kSmallAreaBytes = 64 << 10;
constexpr size_t kHeaderBytes = kCounterBytes + kTableBytes + 2 * kSmallAreaBytes;  // data page-aligned
constexpr size_t kPageBytes = 4096;
constexpr int kNameBytes = 64;
// A sleeping waiter wakes this often whatever happens, to see the abort
// word, and checks its peer's process every few wakes: a dead peer is seen
// within milliseconds, and the check (reading /proc) costs nothing
// measurable at that rate.
constexpr std::chrono::microseconds kSleepSlice{1000};
constexpr int kSleepsPerLivenessCheck = 4;
// The abort word: 0 while the segment is usable; kAbortUnknown when a rank
// gave up without naming a dead peer; otherwise the dead peer's rank + 2.
constexpr uint64_t kAbortUnknown = 1;
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters need lock-free atomics");

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

size_t RoundUp(size_t bytes, size_t unit) { return (bytes + unit - 1) / unit * unit; }

// A name no other job or segment on this host uses (the creator's pid, a
// counter and the clock).
// For the tests of a rank lost inside a shared-memory collective, which
// cannot time a kill that precisely from outside: "R:N" makes the rank
// numbered R die (SIGKILL) on arriving at its segment's N-th barrier.
uint64_t DieAtBarrier(int owner_rank) {
  const char* value = std::getenv("TF_RING_TEST_DIE_AT_SHM_BARRIER");
  int rank = -1;
  unsigned long long barrier = 0;
  if (value == nullptr || std::sscanf(value, "%d:%llu", &rank, &barrier) != 2) return 0;
  return rank == owner_rank ? barrier : 0;
}

std::string UniqueName() {
  static std::atomic<uint64_t> sequence{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return "/tf_ring." + std::to_string(getpid()) + "." + std::to_string(sequence++) + "." +
         std::to_string(static_cast<uint64_t>(now) & 0xffffff);
}
}  // namespace

bool ShmSegment::WatchedEverywhere(MPI_Comm comm, const ShmSegment* shm) {
  int mine = shm == nullptr || shm->watches_peers() ? 1 : 0, everyone = 0;
  MPI_Allreduce(&mine, &everyone, 1, MPI_INT, MPI_MIN, comm);
  return everyone != 0;
}

size_t ShmSegment::address_slots() { return kTableBytes / sizeof(uint64_t); }
size_t ShmSegment::small_area_bytes() { return kSmallAreaBytes; }
char* ShmSegment::small_area(int rank, int buffer) const { return small_[rank] + buffer * kSmallAreaBytes; }

// Local rank 0 creates the object and reserves its memory (so a full
// /dev/shm is an error here, not a SIGBUS later), every rank maps it, and
// rank 0 unlinks the name once all have: nothing is left behind in
// /dev/shm however the ranks end.
Status ShmSegment::Map(MPI_Comm local_comm, size_t bytes) {
  char name[kNameBytes] = {0};
  int fd = -1;
  std::string error;
  if (rank_ == 0) {
    std::strncpy(name, UniqueName().c_str(), kNameBytes - 1);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      error = std::string("shm_open: ") + std::strerror(errno);
    } else {
      const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (rc != 0) error = "reserving " + std::to_string(bytes) + " bytes in /dev/shm: " + std::strerror(rc);
    }
    if (!error.empty()) name[0] = '\0';  // tells the others
  }
  MPI_Bcast(name, kNameBytes, MPI_CHAR, 0, local_comm);
  if (rank_ != 0 && name[0] != '\0') {
    fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) error = std::string("shm_open: ") + std::strerror(errno);
  }
  if (fd >= 0 && error.empty()) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      error = std::string("mmap: ") + std::strerror(errno);
    } else {
      base_ = static_cast<char*>(p);
      mapped_bytes_ = bytes;
    }
  }
  if (fd >= 0) close(fd);
  int ok = error.empty() ? 1 : 0, everyone = 0;
  MPI_Allreduce(&ok, &everyone, 1, MPI_INT, MPI_MIN, local_comm);  // every rank has mapped it
  if (rank_ == 0 && name[0] != '\0') shm_unlink(name);
  if (everyone) return Status::OK();
  Release();
  return Status::Unknown("tf_ring's shared-memory segment could not be set up on local rank " +
                         std::to_string(rank_) + (error.empty() ? " (another local rank failed)" : ": " + error) +
                         ". Free space in /dev/shm, or set TF_RING_SHM=0 to use MPI inside the host.");
}

Status ShmSegment::Init(MPI_Comm local_comm, size_t area_bytes, SingleCopyMode single_copy, int owner_rank) {
  MPI_Comm_rank(local_comm, &rank_);
  MPI_Comm_size(local_comm, &size_);
  area_bytes_ = area_bytes;
  const size_t region_bytes = RoundUp(kHeaderBytes + 4 * area_bytes, kPageBytes);
  Status s = Map(local_comm, region_bytes * static_cast<size_t>(size_));
  if (!s.ok()) return s;
  data_.assign(size_, nullptr);
  counters_.assign(size_, nullptr);
  tables_.assign(size_, nullptr);
  small_.assign(size_, nullptr);
  for (int r = 0; r < size_; ++r) {
    char* region = base_ + static_cast<size_t>(r) * region_bytes;
    counters_[r] = reinterpret_cast<std::atomic<uint64_t>*>(region);
    tables_[r] = region + kCounterBytes;
    small_[r] = region + kCounterBytes + kTableBytes;
    data_[r] = region + kHeaderBytes;
  }
  // Each rank writes its own header first (its pages then live near it).
  new (counter(rank_)) std::atomic<uint64_t>(0);
  new (flag(rank_)) std::atomic<uint64_t>(0);
  new (and_counter(rank_)) std::atomic<uint64_t>(0);
  new (probe_word(rank_)) std::atomic<uint64_t>(0);
  for (std::atomic<uint64_t>* word : {counter(rank_), and_counter(rank_), probe_word(rank_)}) {
    new (sleepers_of(word)) std::atomic<uint32_t>(0);
  }
  if (rank_ == 0) new (abort_word()) std::atomic<uint64_t>(0);
  *identity(rank_) = ThisProcess();
  *owner_rank_of(rank_) = owner_rank;
  epoch_ = 0;
  and_epoch_ = 0;
  small_calls_ = 0;
  spin_ = SpinBeforeSleep();
  shared_cache_chunk_bytes_ = 0;  // until AllowSharedCacheChunks
  probe_epoch_ = 0;
  die_at_barrier_ = DieAtBarrier(owner_rank);
  single_copy_mode_ = single_copy;
  if (size_ > 1) ProbeCrossMemory(local_comm, single_copy != SingleCopyMode::kNever, &pids_);
  MPI_Barrier(local_comm);  // every header is written before first use
  int visible = 1, all_visible = 0;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && CheckLiveness(*identity(r)) != Liveness::kAlive) visible = 0;
  }
  MPI_Allreduce(&visible, &all_visible, 1, MPI_INT, MPI_MIN, local_comm);
  watches_peers_ = all_visible != 0;
  return Status::OK();
}

Status ShmSegment::InitEverywhere(MPI_Comm comm, MPI_Comm local_comm, size_t area_bytes,
                                  size_t fallback_bytes, SingleCopyMode single_copy, int owner_rank) {
  Status s = Init(local_comm, area_bytes, single_copy, owner_rank);
  if (fallback_bytes == 0 || fallback_bytes >= area_bytes) return s;
  int ok = s.ok() ? 1 : 0, everywhere = 0;
  MPI_Allreduce(&ok, &everywhere, 1, MPI_INT, MPI_MIN, comm);
  if (everywhere) return s;
  Release();
  int comm_rank = 0;
  MPI_Comm_rank(comm, &comm_rank);
  if (comm_rank == 0) {
    Log(LogLevel::kWarning, "shared memory: " + std::to_string(area_bytes >> 10) +
                                " KB chunks do not fit in some host's /dev/shm (" +
                                (s.ok() ? std::string("another host") : s.message()) + "); using " +
                                std::to_string(fallback_bytes >> 10) +
                                " KB chunks. A larger /dev/shm (docker --shm-size) restores the default.");
  }
  return Init(local_comm, fallback_bytes, single_copy, owner_rank);
}

void ShmSegment::Release(bool abort_waiters) {
  if (base_ != nullptr) {
    if (abort_waiters) {
      uint64_t none = 0;
      abort_word()->compare_exchange_strong(none, kAbortUnknown);
      WakeAllSleepers();  // they see the abort word now, not at their next wake
    }
    munmap(base_, mapped_bytes_);
  }
  base_ = nullptr;
  mapped_bytes_ = 0;
  watches_peers_ = false;
  data_.clear();
  counters_.clear();
  tables_.clear();
  small_.clear();
  pids_.clear();
}

void ShmSegment::WakeAllSleepers() {
  for (int r = 0; r < size_; ++r) {
    for (std::atomic<uint64_t>* word : {counter(r), and_counter(r), probe_word(r)}) {
      WakeSleepers(SharedWord{word, sleepers_of(word)});
    }
  }
}

bool ShmSegment::PeerGone(int rank) {
  if (!watches_peers_ || CheckLiveness(*identity(rank)) != Liveness::kGone) return false;
  const int32_t dead = *owner_rank_of(rank);
  Log(LogLevel::kWarning, "local rank " + std::to_string(rank) + " (rank " + std::to_string(dead) +
                              ", pid " + std::to_string(identity(rank)->pid) +
                              ") died while the others waited for it in shared memory");
  uint64_t none = 0;
  abort_word()->compare_exchange_strong(none, dead >= 0 ? static_cast<uint64_t>(dead) + 2 : kAbortUnknown);
  WakeAllSleepers();
  return true;
}

bool ShmSegment::PeerAborted() {
  const uint64_t why = abort_word()->load(std::memory_order_acquire);
  if (why == 0) return false;
  NotePeerLost(why >= 2 ? static_cast<int>(why - 2) : -1);
  return true;
}

bool ShmSegment::WaitForPeer(int r, std::atomic<uint64_t>* word, uint64_t target) {
  using Clock = std::chrono::steady_clock;
  if (word->load(std::memory_order_acquire) >= target) return true;
  const auto spin_until = Clock::now() + spin_;
  int polls = 0;
  for (;;) {
    if (word->load(std::memory_order_acquire) >= target) return true;
    if (PeerAborted()) return false;
    // The clock is read rarely: each read delays seeing the peer's store.
    if (++polls % 64 == 0 && Clock::now() >= spin_until) break;
    CpuRelax();
  }
  const SharedWord shared{word, sleepers_of(word)};
  for (int sleeps = 1;; ++sleeps) {
    const uint64_t seen = word->load(std::memory_order_acquire);
    if (seen >= target) return true;
    if (PeerAborted()) return false;
    SleepWhile(shared, seen, kSleepSlice);
    if (sleeps % kSleepsPerLivenessCheck == 0) PeerGone(r);  // sets the abort word
  }
}

void ShmSegment::PublishWord(std::atomic<uint64_t>* word, uint64_t value) {
  Publish(SharedWord{word, sleepers_of(word)}, value);
}

bool ShmSegment::Barrier() {
  ++epoch_;
  if (epoch_ == die_at_barrier_) raise(SIGKILL);
  PublishWord(counter(rank_), epoch_);
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && !WaitForPeer(r, counter(r), epoch_)) return false;
  }
  return true;
}

size_t ShmSegment::and_words_capacity() {
  static_assert((kAndSlotWord + 2 * kAndSlotWords) * sizeof(uint64_t) <= kCounterBytes,
                "the AND slots end inside the counter page");
  return kAndSlotWords;
}

// Two slots per rank, used in turn: a rank can only write round k+2's slot
// after every peer arrived at round k+1, that is after each of them read
// its round-k slot, so one count per round is all the waiting needed.
bool ShmSegment::AllreduceAnd(uint64_t* words, size_t n) {
  if (n > kAndSlotWords) return false;
  ++and_epoch_;
  const int slot = static_cast<int>(and_epoch_ & 1);
  std::memcpy(and_slot(rank_, slot), words, n * sizeof(uint64_t));
  PublishWord(and_counter(rank_), and_epoch_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (!WaitForPeer(r, and_counter(r), and_epoch_)) return false;
    const uint64_t* theirs = and_slot(r, slot);
    for (size_t i = 0; i < n; ++i) words[i] &= theirs[i];
  }
  return true;
}

}  // namespace tf_ring
