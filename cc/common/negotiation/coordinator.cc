#include "common/negotiation/coordinator.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "common/base/counts.h"

namespace tf_ring {

namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// "X on ranks 0, 2; Y on rank 1", grouping ranks by value in first-seen order.
std::string Disagreement(const std::vector<std::string>& values, const std::vector<int>& ranks) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks_of;
  for (size_t i = 0; i < values.size(); ++i) {
    auto& group = ranks_of[values[i]];
    if (group.empty()) order.push_back(values[i]);
    group.push_back(ranks[i]);
  }
  std::ostringstream os;
  for (size_t i = 0; i < order.size(); ++i) {
    os << (i ? "; " : "") << order[i] << " on " << RankList(ranks_of[order[i]]);
  }
  return os.str();
}

// Returns an empty string when every submitting rank has the same value,
// else the error text for `what`.
template <typename F>
std::string CheckSame(const std::vector<Request>& submitted, const char* what, F value_of) {
  std::vector<std::string> values;
  std::vector<int> ranks;
  for (const auto& r : submitted) {
    values.push_back(value_of(r));
    ranks.push_back(r.rank);
  }
  for (const auto& v : values) {
    if (v != values[0]) return std::string(what) + " differs: " + Disagreement(values, ranks);
  }
  return std::string();
}

std::string Fmt(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

// Adasum runs as allreduce of float16/32/64 on 2^k ranks (its tree pairs ranks).
std::string CheckAdasum(const Request& r, int size) {
  if (r.op != OpType::kAllreduce) return "Adasum is a reduce op for allreduce only";
  if (r.dtype != DataType::kFloat16 && r.dtype != DataType::kFloat32 &&
      r.dtype != DataType::kFloat64)
    return std::string("Adasum is defined on float16, float32 and float64, not ") +
           DataTypeName(r.dtype);
  if (size & (size - 1))
    return "Adasum on the CPU needs a power-of-two number of ranks, and this job has " +
           std::to_string(size) + "; run on 2, 4, 8... ranks or use op=Sum or Average";
  return std::string();
}

// What NCCL cannot reduce is refused here, on every rank together, rather
// than by each rank's transport (which would abort the communicator): 16-bit
// integers (NCCL has no such type), and scale factors except with Sum and
// Average of floating-point tensors (NCCL folds them into one PreMulSum).
std::string CheckGpuReduction(const Request& r) {
  if (r.device < 0) return std::string();
  if (r.reduce_op == ReduceOp::kAdasum)  // NCCL would run it as a plain sum
    return "Adasum is implemented for CPU tensors only; use op=Sum or Average for GPU tensors, or "
           "copy the tensor to the CPU";
  if (r.dtype == DataType::kInt16 || r.dtype == DataType::kUint16)
    return std::string("NCCL has no 16-bit integer type, so ") + DataTypeName(r.dtype) +
           " GPU tensors cannot be reduced; cast to int32 (or a float type), or reduce on the CPU";
  if (r.prescale * r.postscale == 1.0) return std::string();
  if (r.reduce_op == ReduceOp::kMin || r.reduce_op == ReduceOp::kMax || r.reduce_op == ReduceOp::kProduct)
    return std::string("prescale/postscale factors with ") + ReduceOpName(r.reduce_op) +
           " are not supported for GPU tensors; scale the tensor before or after the collective";
  if (!IsFloatingPoint(r.dtype))
    return std::string("scale factors on integer GPU tensors (") + DataTypeName(r.dtype) +
           ") are not supported; use a floating-point tensor or scale it yourself";
  return std::string();
}

// MPI_Alltoallv takes int counts and offsets (NCCL's are 64-bit).
std::string CheckAlltoallCounts(const std::vector<Request>& by_rank, int size) {
  const Request& first = by_rank[0];
  if (first.device >= 0 || static_cast<int>(by_rank.size()) != size) return std::string();
  std::vector<int64_t> matrix;
  for (const auto& r : by_rank) matrix.insert(matrix.end(), r.splits.begin(), r.splits.end());
  int64_t row_bytes = static_cast<int64_t>(DataTypeSize(first.dtype));
  for (size_t d = 1; d < first.shape.size(); ++d) row_bytes *= first.shape[d];
  const std::string problem = AlltoallCountProblem(matrix, size, row_bytes);
  if (problem.empty()) return problem;
  return problem + "; exchange fewer rows at once";
}

std::string Validate(const std::vector<Request>& by_rank, int size) {
  std::string err = CheckSame(by_rank, "the operation",
                              [](const Request& r) { return std::string(OpTypeName(r.op)); });
  if (!err.empty()) return err;
  err = CheckSame(by_rank, "the dtype",
                  [](const Request& r) { return std::string(DataTypeName(r.dtype)); });
  if (!err.empty()) return err;
  // CPU and GPU tensors move over different transports; ranks may use
  // different GPU ordinals.
  err = CheckSame(by_rank, "the device",
                  [](const Request& r) { return std::string(r.device < 0 ? "CPU" : "GPU"); });
  if (!err.empty()) return err;

  const Request& first = by_rank[0];
  switch (first.op) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      err = CheckSame(by_rank, "the shape", [](const Request& r) { return ShapeString(r.shape); });
      if (err.empty())
        err = CheckSame(by_rank, "the reduce op",
                        [](const Request& r) { return std::string(ReduceOpName(r.reduce_op)); });
      if (err.empty())
        err = CheckSame(by_rank, "the prescale factor",
                        [](const Request& r) { return Fmt(r.prescale); });
      if (err.empty())
        err = CheckSame(by_rank, "the postscale factor",
                        [](const Request& r) { return Fmt(r.postscale); });
      if (err.empty() && first.op == OpType::kReducescatter && first.shape.empty())
        err = "reducescatter needs a tensor of rank 1 or more, got a scalar";
      if (err.empty() && !IsReducible(first.dtype))
        err = std::string("reductions are not defined on dtype ") + DataTypeName(first.dtype);
      if (err.empty() && first.reduce_op == ReduceOp::kAdasum) err = CheckAdasum(first, size);
      if (err.empty()) err = CheckGpuReduction(first);
      return err;
    case OpType::kAllgather:
    case OpType::kAlltoall: {
      err = CheckSame(by_rank, "the number of dimensions",
                      [](const Request& r) { return std::to_string(r.shape.size()); });
      if (!err.empty()) return err;
      if (first.shape.empty())
        return std::string(OpTypeName(first.op)) + " needs a tensor of rank 1 or more, got a scalar";
      err = CheckSame(by_rank, "the shape after the first dimension", [](const Request& r) {
        return ShapeString(std::vector<int64_t>(r.shape.begin() + 1, r.shape.end()));
      });
      if (!err.empty() || first.op == OpType::kAllgather) return err;
      for (const auto& r : by_rank) {
        // The kernel sends no splits when the rows do not divide evenly.
        if (r.splits.empty() && r.shape[0] % size != 0)
          return "the first dimension " + std::to_string(r.shape[0]) + " on rank " +
                 std::to_string(r.rank) + " does not divide by the " + std::to_string(size) +
                 " ranks; without splits every rank gets the same number of rows. Pass splits= "
                 "for an uneven exchange";
        if (static_cast<int>(r.splits.size()) != size)
          return "splits on rank " + std::to_string(r.rank) + " have " +
                 std::to_string(r.splits.size()) + " entries, expected one per rank (" +
                 std::to_string(size) + ")";
        int64_t total = 0;
        for (int64_t s : r.splits) {
          if (s < 0) return "splits on rank " + std::to_string(r.rank) + " contain a negative entry " +
                            ShapeString(r.splits);
          total += s;
        }
        if (total != r.shape[0])
          return "splits on rank " + std::to_string(r.rank) + " " + ShapeString(r.splits) +
                 " sum to " + std::to_string(total) + " but the first dimension is " +
                 std::to_string(r.shape[0]) + "; the splits must add up to the rows of the tensor";
      }
      return CheckAlltoallCounts(by_rank, size);
    }
    case OpType::kBroadcast:
      err = CheckSame(by_rank, "the root rank",
                      [](const Request& r) { return std::to_string(r.root_rank); });
      if (!err.empty()) return err;
      if (first.root_rank < 0 || first.root_rank >= size)
        return "root rank " + std::to_string(first.root_rank) + " is out of range for " +
               std::to_string(size) + " ranks (valid: 0 to " + std::to_string(size - 1) + ")";
      return CheckSame(by_rank, "the shape", [](const Request& r) { return ShapeString(r.shape); });
    case OpType::kJoin:
    case OpType::kBarrier:
      return std::string();
  }
  return std::string();
}

// A compiled (XLA) allgather or alltoall sized its output from its own first
// dimension, assuming every rank has the same one. Returns the whole error
// text (its own fix), or an empty string.
std::string CheckStaticFirstDim(const std::vector<Request>& by_rank) {
  const Request& first = by_rank[0];
  if (first.op != OpType::kAllgather && first.op != OpType::kAlltoall) return std::string();
  std::vector<int> compiled;
  for (const auto& r : by_rank) {
    if (r.static_shape) compiled.push_back(r.rank);
  }
  if (compiled.empty()) return std::string();
  std::vector<std::string> dims;
  std::vector<int> ranks;
  for (const auto& r : by_rank) {
    dims.push_back(std::to_string(r.shape[0]));
    ranks.push_back(r.rank);
  }
  for (const auto& d : dims) {
    if (d != dims[0]) {
      const std::string op = OpTypeName(first.op);
      return op + " of tensor '" + first.name + "' inside jit_compile (XLA) on " +
             RankList(compiled) + ": the first dimension differs: " + Disagreement(dims, ranks) +
             ". XLA fixes the output shape at compile time from this rank's first dimension, so "
             "every rank must have the same one. Pad to a common first dimension, or call " +
             op + " outside jit_compile.";
    }
  }
  return std::string();
}

}  // namespace

std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}


Response BuildResponse(const std::vector<Request>& by_rank, int size) {
  const Request& first = by_rank[0];
  Response resp;
  resp.op = first.op;
  resp.reduce_op = first.reduce_op;
  resp.dtype = first.dtype;
  resp.names.push_back(first.name);
  resp.root_rank = first.root_rank;
  resp.prescale = first.prescale;
  resp.postscale = first.postscale;
  resp.gpu = first.device >= 0;

  std::string err = Validate(by_rank, size);
  if (!err.empty()) {
    // Disagreements start with "the <property> differs"; anything else is an
    // argument that is wrong on its own (bad splits, root out of range).
    const bool disagreement = err.find(" differs: ") != std::string::npos;
    resp.error = std::string(OpTypeName(first.op)) + " of tensor '" + first.name +
                 (disagreement ? "' " + std::string(Response::kMismatchPhrase) + ": "
                               : std::string("' has invalid arguments: ")) +
                 err +
                 (disagreement ? ". Every rank must submit the same kind of request for a tensor "
                                 "name (or give different tensors different names)."
                               : ". Fix the arguments passed on the ranks named above.");
    return resp;
  }
  resp.error = CheckStaticFirstDim(by_rank);
  if (resp.is_error()) return resp;
  if (first.op == OpType::kAllgather) {
    for (const auto& r : by_rank) resp.sizes.push_back(r.shape[0]);
  } else if (first.op == OpType::kAlltoall) {
    for (const auto& r : by_rank) resp.sizes.insert(resp.sizes.end(), r.splits.begin(), r.splits.end());
  }
  return resp;
}

Response BuildResponse(const std::vector<Request>& by_rank, const std::vector<bool>& present,
                       int size) {
  std::vector<Request> submitted;
  std::vector<int> joined;
  for (int r = 0; r < size; ++r) {
    if (present[r]) {
      submitted.push_back(by_rank[r]);
    } else {
      joined.push_back(r);
    }
  }
  if (joined.empty()) return BuildResponse(by_rank, size);

  // Some ranks joined instead of submitting: they take part with no data.
  const Request& first = submitted[0];
  const std::string who = RankList(joined);
  Response resp;
  if (first.op == OpType::kAlltoall || first.op == OpType::kReducescatter) {
    resp = BuildResponse(std::vector<Request>{first}, size);
    resp.error = std::string(OpTypeName(first.op)) + " of tensor '" + first.name +
                 "' cannot run after " + who + " called join(): it needs every rank's data. "
                 "Run the last " + OpTypeName(first.op) + " before any rank joins.";
    return resp;
  }
  resp = BuildResponse(submitted, size);
  if (resp.is_error()) return resp;
  if (resp.gpu && first.reduce_op == ReduceOp::kAverage && !IsFloatingPoint(first.dtype) &&
      first.op == OpType::kAllreduce) {
    // NCCL's ncclAvg divides by every rank; a PreMulSum needs a float.
    resp.error = "allreduce of tensor '" + first.name + "': Average while " + who +
                 " joined is not supported on integer GPU tensors (" + DataTypeName(first.dtype) +
                 "); use a floating-point tensor or Sum and divide yourself.";
    return resp;
  }
  if (first.op == OpType::kBroadcast && !present[first.root_rank]) {
    resp.error = "broadcast of tensor '" + first.name + "' has root rank " +
                 std::to_string(first.root_rank) + ", which already called join() and has no data "
                 "to send. Broadcast from a rank that is still training.";
    return resp;
  }
  if (first.op == OpType::kAllgather) {
    resp.sizes.clear();
    for (int r = 0; r < size; ++r) resp.sizes.push_back(present[r] ? by_rank[r].shape[0] : 0);
  }
  resp.contributors = static_cast<int32_t>(submitted.size());
  resp.shapes.push_back(static_cast<int64_t>(first.shape.size()));
  resp.shapes.insert(resp.shapes.end(), first.shape.begin(), first.shape.end());
  return resp;
}

bool Coordinator::IsReady(const Pending& p) const {
  for (int r = 0; r < size_; ++r) {
    if (!p.present[r] && !joined_[r]) return false;
  }
  return true;
}

void Coordinator::Join(const Request& request) {
  const int r = request.rank;
  if (joined_[r]) return;
  joined_[r] = true;
  ++joined_count_;
  last_joined_ = r;
  join_name_ = request.name;
  // Tensors that only this rank was missing can run now, without it.
  for (auto& kv : table_) {
    if (!kv.second.queued && IsReady(kv.second)) {
      kv.second.queued = true;
      ready_order_.push_back(kv.first);
    }
  }
}

void Coordinator::Add(const Request& request, Clock::time_point now) {
  if (request.rank < 0 || request.rank >= size_) return;
  if (!request.local_error.empty()) {
    Refused(request);
    return;
  }
  if (request.op == OpType::kJoin) {
    Join(request);
    return;
  }
  if (!failed_.empty() && DeliverIfOwed(request)) return;
  auto it = table_.find(request.name);
  if (it == table_.end()) {
    Pending p;
    p.by_rank.resize(size_);
    p.present.assign(size_, false);
    p.first_seen = now;
    p.stall_since = now;
    it = table_.emplace(request.name, std::move(p)).first;
  }
  Pending& p = it->second;
  p.stall_since = std::min(p.stall_since, now - std::chrono::microseconds(request.waited_us));
  const int r = request.rank;
  if (p.present[r]) {
    p.duplicate_error = std::string(OpTypeName(request.op)) + " of tensor '" + request.name +
                        "': rank " + std::to_string(r) +
                        " submitted this name again before the first request finished. "
                        "Give concurrent tensors different names.";
    return;
  }
  p.by_rank[r] = request;
  p.present[r] = true;
  p.arrival_order.push_back(r);
  p.arrived_at.push_back(now);
  ++p.count;
  if (!p.queued && IsReady(p)) {
    p.queued = true;
    ready_order_.push_back(request.name);
  }
}

std::vector<Response> Coordinator::TakeReady() {
  std::vector<Response> out;
  out.reserve(ready_order_.size());
  for (const auto& name : ready_order_) {
    auto it = table_.find(name);
    const Pending& p = it->second;
    Response resp = BuildResponse(p.by_rank, p.present, size_);
    if (!p.duplicate_error.empty()) resp.error = p.duplicate_error;
    resp.arrived = p.arrival_order;
    for (size_t i = 0; i < p.arrival_order.size(); ++i) {
      if (p.arrived_at[i] > p.first_seen) resp.waited_for.push_back(p.arrival_order[i]);
    }
    if (!failed_.empty()) AfterRun(name, &resp);
    out.push_back(std::move(resp));
    table_.erase(it);
  }
  ready_order_.clear();
  if (joined_count_ == size_) {
    // Everyone has joined: every rank's join() returns the last one to join.
    Response done;
    done.op = OpType::kJoin;
    done.dtype = DataType::kInt32;
    done.names.push_back(join_name_);
    done.root_rank = last_joined_;
    out.push_back(std::move(done));
    joined_.assign(size_, false);
    joined_count_ = 0;
  }
  return out;
}

std::vector<StalledTensor> Coordinator::Stalled(std::chrono::duration<double> after,
                                                Clock::time_point now) const {
  std::vector<StalledTensor> out;
  for (const auto& kv : table_) {
    const Pending& p = kv.second;
    if (p.queued || now - p.stall_since < after) continue;
    StalledTensor s;
    s.name = kv.first;
    s.waited_seconds = std::chrono::duration<double>(now - p.stall_since).count();
    for (int r = 0; r < size_; ++r) {
      if (p.present[r]) {
        s.ready_ranks.push_back(r);
      } else if (!joined_[r]) {
        s.missing_ranks.push_back(r);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tf_ring
