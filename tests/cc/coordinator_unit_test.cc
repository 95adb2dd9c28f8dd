// Unit tests of the coordinator (no MPI, no TensorFlow): readiness and the
// order responses leave in, mismatch messages, allgather sizes and alltoall
// splits, static first dimensions, duplicates and stalls, join, and the
// count and GPU checks. Ranks out of step: out_of_step_unit_test.cc; the
// other engine pieces: engine_unit_test.cc. Built with g++ alone by
// tests/builds/test_engine_unit.py.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "common/base/counts.h"
#include "common/negotiation/agreed_settings.h"
#include "common/negotiation/coordinator.h"
#include "common/base/half.h"
#include "common/transport/hierarchical_choice.h"
#include "common/base/message.h"
#include "common/process_sets/process_set_change.h"
#include "make_request.h"
#include "unit_check.h"

using namespace tf_ring;

static void TestCoordinatorReadinessAndOrder() {
  Coordinator c(3);
  c.Add(MakeRequest(0, "a", {2}));
  c.Add(MakeRequest(1, "b", {2}));
  c.Add(MakeRequest(1, "a", {2}));
  CHECK(c.TakeReady().empty());  // "a" still misses rank 2
  c.Add(MakeRequest(0, "b", {2}));
  c.Add(MakeRequest(2, "b", {2}));  // "b" complete first
  c.Add(MakeRequest(2, "a", {2}));
  std::vector<Response> ready = c.TakeReady();
  CHECK(ready.size() == 2);
  CHECK(ready[0].names[0] == "b" && ready[1].names[0] == "a");
  CHECK(!ready[0].is_error() && !ready[1].is_error());
  CHECK(c.empty() && c.TakeReady().empty());
}

static void TestCoordinatorMismatchMessages() {
  Coordinator c(3);
  c.Add(MakeRequest(0, "w", {2, 3}));
  c.Add(MakeRequest(1, "w", {3, 3}));
  c.Add(MakeRequest(2, "w", {2, 3}));
  std::vector<Response> ready = c.TakeReady();
  CHECK(ready.size() == 1 && ready[0].is_error());
  const std::string& msg = ready[0].error;
  CHECK(Contains(msg, "'w'"));
  CHECK(Contains(msg, "[2, 3] on ranks 0, 2"));
  CHECK(Contains(msg, "[3, 3] on rank 1"));

  Request r0 = MakeRequest(0, "b", {4});
  r0.op = OpType::kBroadcast;
  r0.root_rank = 5;
  Request r1 = r0, r2 = r0;
  r1.rank = 1;
  r2.rank = 2;
  Coordinator c2(3);
  c2.Add(r0);
  c2.Add(r1);
  c2.Add(r2);
  ready = c2.TakeReady();
  CHECK(ready.size() == 1 && Contains(ready[0].error, "root rank 5 is out of range for 3 ranks"));
}

static void TestCoordinatorAllgatherSizesAndAlltoallSplits() {
  Coordinator c(2);
  Request a = MakeRequest(0, "g", {1, 5});
  a.op = OpType::kAllgather;
  Request b = MakeRequest(1, "g", {4, 5});
  b.op = OpType::kAllgather;
  c.Add(a);
  c.Add(b);
  std::vector<Response> ready = c.TakeReady();
  CHECK(ready.size() == 1 && !ready[0].is_error());
  CHECK((ready[0].sizes == std::vector<int64_t>{1, 4}));

  Request t0 = MakeRequest(0, "t", {3});
  t0.op = OpType::kAlltoall;
  t0.splits = {1, 1};  // sums to 2, first dim 3
  Request t1 = MakeRequest(1, "t", {3});
  t1.op = OpType::kAlltoall;
  t1.splits = {3, 0};
  Coordinator c2(2);
  c2.Add(t0);
  c2.Add(t1);
  ready = c2.TakeReady();
  CHECK(ready.size() == 1 && Contains(ready[0].error, "splits on rank 0 [1, 1] sum to 2"));
}

// A compiled (XLA) allgather/alltoall sized its output from its own first
// dimension: different first dimensions fail on every rank, with the fix.
static void TestCoordinatorStaticFirstDim() {
  for (OpType op : {OpType::kAllgather, OpType::kAlltoall}) {
    Coordinator c(3);
    for (int r = 0; r < 3; ++r) {
      Request q = MakeRequest(r, "s", {r == 1 ? 4 : 2, 5});
      q.op = op;
      q.static_shape = r != 2;  // rank 2 runs the op outside XLA
      if (op == OpType::kAlltoall) q.splits = r == 1 ? std::vector<int64_t>{2, 1, 1}
                                                     : std::vector<int64_t>{1, 1, 0};
      c.Add(q);
    }
    std::vector<Response> ready = c.TakeReady();
    CHECK(ready.size() == 1 && ready[0].is_error());
    const std::string& msg = ready[0].error;
    CHECK(Contains(msg, "'s' inside jit_compile (XLA) on ranks 0, 1"));
    CHECK(Contains(msg, "2 on ranks 0, 2; 4 on rank 1"));
    CHECK(Contains(msg, "Pad to a common first dimension, or call " +
                            std::string(OpTypeName(op)) + " outside jit_compile"));
  }
  // The same first dimension everywhere: no error, the usual sizes.
  Coordinator c(2);
  for (int r = 0; r < 2; ++r) {
    Request q = MakeRequest(r, "same", {3, 5});
    q.op = OpType::kAllgather;
    q.static_shape = true;
    c.Add(q);
  }
  std::vector<Response> ready = c.TakeReady();
  CHECK(ready.size() == 1 && !ready[0].is_error());
  CHECK((ready[0].sizes == std::vector<int64_t>{3, 3}));
}

static void TestCoordinatorDuplicateAndStall() {
  Coordinator c(2);
  auto t0 = Coordinator::Clock::now();
  c.Add(MakeRequest(0, "d", {1}), t0);
  c.Add(MakeRequest(0, "d", {1}), t0);
  c.Add(MakeRequest(0, "s", {1}), t0);
  auto stalled = c.Stalled(std::chrono::seconds(5), t0 + std::chrono::seconds(6));
  CHECK(stalled.size() == 2);
  for (const auto& s : stalled) {
    CHECK((s.ready_ranks == std::vector<int>{0}) && (s.missing_ranks == std::vector<int>{1}));
    CHECK(s.waited_seconds >= 5.9);
  }
  CHECK(c.Stalled(std::chrono::seconds(10), t0 + std::chrono::seconds(6)).empty());
  c.Add(MakeRequest(1, "d", {1}), t0);
  std::vector<Response> ready = c.TakeReady();
  CHECK(ready.size() == 1 && Contains(ready[0].error, "submitted this name again"));
  std::vector<Response> failed = c.FailPending({"s"}, "stalled");
  CHECK(failed.size() == 1 && failed[0].error == "stalled" && c.empty());

  // A request that already waited on its rank (a demoted cache hit) counts
  // its stall from the submission: 4 s there + 2 s at rank 0 = stalled at 5 s.
  Request late = MakeRequest(0, "cached", {1});
  late.waited_us = 4000000;
  c.Add(late, t0);
  auto from_submission = c.Stalled(std::chrono::seconds(5), t0 + std::chrono::seconds(2));
  CHECK(from_submission.size() == 1 && from_submission[0].waited_seconds >= 5.9);
}

static Request JoinRequest(int rank) {
  Request r = MakeRequest(rank, "tf_ring.join", {});
  r.op = OpType::kJoin;
  return r;
}

static void TestCoordinatorJoin() {
  Coordinator c(3);
  c.Add(MakeRequest(0, "g", {2, 4}));
  c.Add(MakeRequest(2, "g", {2, 4}));
  CHECK(c.TakeReady().empty() && !c.joined_mode());
  c.Add(JoinRequest(1));  // rank 1 is out of data: "g" can run without it
  std::vector<Response> ready = c.TakeReady();
  CHECK(ready.size() == 1 && !ready[0].is_error() && c.joined_mode());
  CHECK(ready[0].contributors == 2);
  CHECK((ready[0].shapes == std::vector<int64_t>{2, 2, 4}));

  Request g0 = MakeRequest(0, "rows", {3, 2});
  g0.op = OpType::kAllgather;
  Request g2 = MakeRequest(2, "rows", {1, 2});
  g2.op = OpType::kAllgather;
  c.Add(g0);
  c.Add(g2);
  ready = c.TakeReady();
  CHECK(ready.size() == 1 && (ready[0].sizes == std::vector<int64_t>{3, 0, 1}));

  Request b = MakeRequest(0, "b", {2});
  b.op = OpType::kBroadcast;
  b.root_rank = 1;
  Request b2 = b;
  b2.rank = 2;
  c.Add(b);
  c.Add(b2);
  ready = c.TakeReady();
  CHECK(ready.size() == 1 && Contains(ready[0].error, "root rank 1, which already called join()"));

  Request t = MakeRequest(0, "t", {3});
  t.op = OpType::kAlltoall;
  t.splits = {1, 1, 1};
  Request t2 = t;
  t2.rank = 2;
  c.Add(t);
  c.Add(t2);
  ready = c.TakeReady();
  CHECK(ready.size() == 1 && Contains(ready[0].error, "cannot run after rank 1 called join()"));

  // A stall names only ranks that neither submitted nor joined.
  auto t0 = Coordinator::Clock::now();
  c.Add(MakeRequest(0, "s", {1}), t0);
  auto stalled = c.Stalled(std::chrono::seconds(1), t0 + std::chrono::seconds(2));
  CHECK(stalled.size() == 1 && (stalled[0].missing_ranks == std::vector<int>{2}));

  c.Add(JoinRequest(2));  // "s" now only lacks joined ranks
  c.Add(JoinRequest(0));
  ready = c.TakeReady();
  CHECK(ready.size() == 2 && ready[0].names[0] == "s" && ready[0].contributors == 1);
  CHECK(ready[1].op == OpType::kJoin && ready[1].root_rank == 0);  // rank 0 joined last
  CHECK(!c.joined_mode() && c.empty());

  // After the join completes, tensors need every rank again.
  c.Add(MakeRequest(0, "x", {1}));
  CHECK(c.TakeReady().empty());
}

// Decided by the coordinator, so every rank raises together.
static void TestCoordinatorCountAndGpuChecks() {
  const int64_t g = int64_t{1} << 30;
  for (int device : {-1, 0}) {
    Coordinator c(3);
    for (int r = 0; r < 3; ++r) {
      Request t = MakeRequest(r, "big", {r == 0 ? g + 2 : 3, 2});
      t.op = OpType::kAlltoall;
      t.dtype = DataType::kInt8;
      t.device = device;
      t.splits = r == 0 ? std::vector<int64_t>{0, g + 1, 1} : std::vector<int64_t>{1, 1, 1};
      c.Add(t);
    }
    std::vector<Response> ready = c.TakeReady();
    // MPI (CPU) takes int counts; NCCL (GPU) 64-bit ones.
    CHECK(ready.size() == 1 && ready[0].is_error() == (device < 0));
    CHECK(device >= 0 || Contains(ready[0].error, "alltoall of tensor 'big' has invalid arguments: "
                                                  "rank 0 sends 2147483650 bytes to rank 1"));
  }
  struct Case { ReduceOp op; DataType dtype; int device; bool refused; };
  for (const Case& k : {Case{ReduceOp::kMin, DataType::kFloat32, 0, true},
                        Case{ReduceOp::kSum, DataType::kInt32, 0, true},
                        Case{ReduceOp::kSum, DataType::kFloat32, 0, false},
                        Case{ReduceOp::kMin, DataType::kFloat32, -1, false}}) {
    Coordinator c(2);
    for (int r = 0; r < 2; ++r) {
      Request q = MakeRequest(r, "scaled", {4});
      q.reduce_op = k.op;
      q.dtype = k.dtype;
      q.device = k.device;
      q.prescale = 2.0;
      c.Add(q);
    }
    std::vector<Response> ready = c.TakeReady();
    CHECK(ready.size() == 1 && ready[0].is_error() == k.refused);
    CHECK(!k.refused || Contains(ready[0].error, "'scaled' has invalid arguments"));
  }
  // 16-bit integers: reduced on the CPU, refused on GPUs (no NCCL type).
  for (DataType dtype : {DataType::kInt16, DataType::kUint16}) {
    for (int device : {-1, 0}) {
      Coordinator c(2);
      for (int r = 0; r < 2; ++r) {
        Request q = MakeRequest(r, "short", {4});
        q.dtype = dtype;
        q.device = device;
        c.Add(q);
      }
      std::vector<Response> ready = c.TakeReady();
      CHECK(ready.size() == 1 && ready[0].is_error() == (device >= 0));
      CHECK(device < 0 || Contains(ready[0].error, "NCCL has no 16-bit integer type"));
    }
  }
  // Adasum of GPU tensors is refused (NCCL would sum them).
  Coordinator adasum(2);
  for (int r = 0; r < 2; ++r) {
    Request q = MakeRequest(r, "ada", {4});
    q.reduce_op = ReduceOp::kAdasum;
    q.dtype = DataType::kFloat32;
    q.device = 0;
    adasum.Add(q);
  }
  std::vector<Response> refused = adasum.TakeReady();
  CHECK(refused.size() == 1 && Contains(refused[0].error, "Adasum is implemented for CPU tensors only"));
}

int main() {
  TestCoordinatorReadinessAndOrder();
  TestCoordinatorMismatchMessages();
  TestCoordinatorAllgatherSizesAndAlltoallSplits();
  TestCoordinatorStaticFirstDim();
  TestCoordinatorDuplicateAndStall();
  TestCoordinatorJoin();
  TestCoordinatorCountAndGpuChecks();
  return Summary();
}
