#include "common/base/counts.h"

#include <algorithm>

namespace tf_ring {

namespace {
std::string PastLimit() {
  return ", past the " + std::to_string(kMaxMpiCount) +
         " bytes (2 GiB) that MPI's int counts and offsets can carry";
}

std::string Rank(int64_t r) { return "rank " + std::to_string(r); }
}  // namespace

std::string AllgatherCountProblem(const std::vector<int64_t>& counts) {
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (!FitsMpiCount(counts[r]))
      return Rank(r) + " sends " + std::to_string(counts[r]) + " bytes" + PastLimit();
    if (!FitsMpiCount(offset))
      return Rank(r) + "'s block would start at byte " + std::to_string(offset) +
             " of the gathered result" + PastLimit();
    offset += counts[r];
  }
  return std::string();
}

std::string AlltoallCountProblem(const std::vector<int64_t>& splits, int size, int64_t row_bytes) {
  // Sender i's offsets run along row i; receiver j's down column j.
  for (int i = 0; i < size; ++i) {
    int64_t sent = 0, received = 0;
    for (int j = 0; j < size; ++j) {
      const int64_t out = splits[static_cast<size_t>(i) * size + j] * row_bytes;
      const int64_t in = splits[static_cast<size_t>(j) * size + i] * row_bytes;
      if (!FitsMpiCount(out))
        return Rank(i) + " sends " + std::to_string(out) + " bytes to " + Rank(j) + PastLimit();
      if (!FitsMpiCount(sent))
        return Rank(i) + "'s rows for " + Rank(j) + " start at byte " + std::to_string(sent) +
               " of its tensor" + PastLimit();
      if (!FitsMpiCount(received))
        return Rank(i) + "'s rows from " + Rank(j) + " would land at byte " +
               std::to_string(received) + " of its output" + PastLimit();
      sent += out;
      received += in;
    }
  }
  return std::string();
}

HostBlocks PlanHostBlocks(const std::vector<int>& host_of, const std::vector<int>& local_rank_of,
                          int hosts, const std::vector<int64_t>& counts) {
  std::vector<int> order(counts.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = static_cast<int>(r);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (host_of[a] != host_of[b]) return host_of[a] < host_of[b];
    return local_rank_of[a] < local_rank_of[b];
  });
  HostBlocks plan;
  plan.offsets.assign(counts.size(), 0);
  plan.host_counts.assign(hosts, 0);
  plan.host_displs.assign(hosts, 0);
  std::vector<bool> seen(hosts, false);
  for (int r : order) {
    const int h = host_of[r];
    if (!seen[h]) plan.host_displs[h] = plan.total;
    seen[h] = true;
    plan.offsets[r] = plan.total;
    plan.host_counts[h] += counts[r];
    plan.total += counts[r];
    plan.fits_mpi = plan.fits_mpi && FitsMpiCount(counts[r]);
  }
  // Inside a host, offsets are relative to its block, so the host's sums bound them.
  for (int h = 0; h < hosts; ++h) {
    plan.fits_mpi = plan.fits_mpi && FitsMpiCount(plan.host_counts[h]) && FitsMpiCount(plan.host_displs[h]);
  }
  return plan;
}

void HalveSegment(const Segment& mine, bool left, Segment* keep, Segment* give) {
  const int64_t first = mine.count / 2, second = mine.count - first;
  const Segment lower{mine.offset, first}, upper{mine.offset + first, second};
  *keep = left ? lower : upper;
  *give = left ? upper : lower;
}

Segment OtherPart(const Segment& whole, const Segment& mine) {
  const int64_t rest = whole.count - mine.count;
  return mine.offset == whole.offset ? Segment{whole.offset + mine.count, rest}
                                     : Segment{whole.offset, rest};
}

}  // namespace tf_ring
