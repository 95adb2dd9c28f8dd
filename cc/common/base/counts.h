// Byte counts and offsets of the collectives in 64 bits, and whether they
// fit the int counts MPI takes (Open MPI 5.0 has no MPI-4 large-count
// calls). Pure arithmetic, no MPI, so it is unit tested alone. Every input
// is something all ranks know (agreed shapes, splits, row counts), so every
// rank reaches the same answer and raises, or runs, together.
#ifndef TF_RING_COMMON_BASE_COUNTS_H_
#define TF_RING_COMMON_BASE_COUNTS_H_

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace tf_ring {

constexpr int64_t kMaxMpiCount = INT_MAX;  // 2 GiB - 1 bytes (or elements)
// The piece size when a transfer is split into int-sized MPI calls.
constexpr int64_t kMpiChunkElements = int64_t{1} << 30;

inline bool FitsMpiCount(int64_t n) { return n >= 0 && n <= kMaxMpiCount; }

// Elements moved in piece `round` of a `total`-element transfer cut into
// `chunk`-element pieces (0 once the transfer is done).
inline int64_t ChunkAt(int64_t total, int64_t chunk, int64_t round) {
  const int64_t start = round * chunk;
  if (start >= total) return 0;
  return total - start < chunk ? total - start : chunk;
}

// How many pieces a `total`-element transfer takes.
inline int64_t ChunkRounds(int64_t total, int64_t chunk) { return (total + chunk - 1) / chunk; }

// Empty when MPI_Allgatherv can carry blocks of `counts[r]` bytes from every
// rank r back to back in rank order; otherwise the reason, naming the rank.
std::string AllgatherCountProblem(const std::vector<int64_t>& counts);

// Empty when MPI_Alltoallv can carry the agreed `splits` matrix (rank i
// sends splits[i * size + j] rows of `row_bytes` bytes to rank j): every
// per-peer count and every offset into a send or receive buffer fits int.
// Otherwise the reason, naming the ranks.
std::string AlltoallCountProblem(const std::vector<int64_t>& splits, int size, int64_t row_bytes);

// The hierarchical allgather's layout: blocks arrive host by host (in each
// host, local rank order). `host_of[r]` and `local_rank_of[r]` place rank
// r; counts[r] is its bytes.
struct HostBlocks {
  std::vector<int64_t> offsets;      // by rank: where its block lands
  std::vector<int64_t> host_counts;  // by host: its ranks' bytes together
  std::vector<int64_t> host_displs;  // by host: where its ranks' blocks start
  int64_t total = 0;
  bool fits_mpi = true;  // every count and offset handed to MPI fits int
};
HostBlocks PlanHostBlocks(const std::vector<int>& host_of, const std::vector<int>& local_rank_of,
                          int hosts, const std::vector<int64_t>& counts);

// Adasum's recursive halving: a rank keeps one half of its segment and
// gives the other to its peer; the left rank keeps the first half.
struct Segment {
  int64_t offset, count;
};
void HalveSegment(const Segment& mine, bool left, Segment* keep, Segment* give);
// On the way back: the part of `whole` that is not `mine` (its first or last part).
Segment OtherPart(const Segment& whole, const Segment& mine);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_BASE_COUNTS_H_
