// Negotiation messages. Every rank sends a RequestList to the coordinator each
// cycle; the coordinator answers every rank with the same ResponseList, whose
// order is the order in which all ranks run the collectives.
#ifndef TF_RING_COMMON_MESSAGE_H_
#define TF_RING_COMMON_MESSAGE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/dtype.h"

namespace tf_ring {

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kJoin = 5,
  kBarrier = 6,
};

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  kAdasum = 5,  // allreduce of float16/32/64 only; see collectives/adasum/adasum.cc
};

const char* OpTypeName(OpType op);
const char* ReduceOpName(ReduceOp op);

// One rank's wish to run one collective on one named tensor.
struct Request {
  int32_t rank = 0;
  OpType op = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  std::string name;
  std::vector<int64_t> shape;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  int32_t device = -1;          // -1 host memory, else this rank's GPU ordinal
  // The output was sized when the program was compiled (XLA), before any
  // rank's shape was known: allgather and alltoall then need the same first
  // dimension on every rank (checked by the coordinator, so all ranks fail alike).
  bool static_shape = false;
  // How long it had already waited on its rank before this negotiation (a
  // cache hit the other ranks left waiting), so stall times count from the
  // submission, not from when rank 0 first heard of it.
  int64_t waited_us = 0;
  // Set when this rank refused the collective before it could run (its name
  // was already in flight here): a report, not a request. The coordinator
  // fails the other ranks' matching run of it, which can never pair.
  std::string local_error;
  // Its caller's thread blocks until it is done (an XLA custom call): two
  // such waits that cross (each rank blocked in a tensor the other has not
  // reached) can never finish, and the coordinator fails them.
  bool blocks = false;
  // One iteration of a graph loop (the name ends in "/iter<i>@<frame>"):
  // a rank that waits in it while another has gone elsewhere ran the loop
  // a different number of times, and the coordinator fails both.
  bool in_loop = false;
  // Local only (never sent): when the framework enqueued it, for the timeline.
  std::chrono::steady_clock::time_point enqueued_at;

  int64_t NumElements() const;
};

struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;  // this rank asks every rank to stop

  std::vector<char> Serialize() const;
  // Returns false on a malformed buffer.
  static bool Parse(const char* data, size_t size, RequestList* out);
};

// What every rank runs next. A response may cover several tensors (fusion);
// a non-empty error fails all of them on every rank.
struct Response {
  OpType op = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  std::vector<std::string> names;
  std::string error;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  // Allgather: first dimension of every tensor on every rank,
  // laid out [tensor][rank]. Alltoall: rows rank i sends to rank j, [i][j].
  std::vector<int64_t> sizes;
  // Set only while some rank has joined (see join()): the number of ranks
  // that submitted the tensor (the Average divisor), and per tensor its
  // shape as [ndims, dims...] so joined ranks can stand in with no data.
  int32_t contributors = 0;
  std::vector<int64_t> shapes;
  // The tensors live in GPU memory on every rank (NCCL moves them).
  bool gpu = false;
  // An error for these ranks only (those that hold the tensor now, or one
  // that submits a failed name later); empty: every rank holding it.
  std::vector<int32_t> only_ranks;
  // Never cached: a rank refused a run of this name, so its next run must
  // reach the coordinator, which fails the matching one.
  bool uncached = false;

  // Local only (never sent), for the timeline: how the ranks agreed on it,
  // and on rank 0 the ranks in arrival order and those it waited for.
  bool from_cache = false;
  std::vector<int> arrived;
  std::vector<int> waited_for;

  bool is_error() const { return !error.empty(); }
  // False when the response is an error meant for other ranks only.
  bool applies_to(int rank) const;
  // Ranks disagreeing about a tensor (as opposed to one rank's bad argument):
  // adapters raise it as a failed precondition, as Horovod does.
  bool is_mismatch() const { return error.find(kMismatchPhrase) != std::string::npos; }
  bool has_joined_ranks() const { return contributors > 0; }

  // The coordinator writes this into every cross-rank disagreement.
  static constexpr const char* kMismatchPhrase = "does not match across ranks";
};

struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;
  std::string shutdown_reason;  // set when the engine stops for an error (a stall)
  std::vector<int32_t> shutdown_ranks;  // the ranks that asked to stop, for error texts
  // Some rank has joined and not all have: every rank skips the response
  // cache and negotiates through rank 0 until the join completes.
  bool joined_mode = false;
  // Autotune: new engine parameters every rank applies after this cycle.
  bool has_params = false;
  bool params_settled = false;  // the last change autotune will make
  int64_t fusion_threshold = 0;
  int64_t cycle_time_us = 0;

  std::vector<char> Serialize() const;
  static bool Parse(const char* data, size_t size, ResponseList* out);
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_MESSAGE_H_
