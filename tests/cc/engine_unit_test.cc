// Unit tests of the framework-free engine pieces: the wire format,
// float16/bfloat16 conversion, when collectives go hierarchical, the
// agreement on process set changes, the engine settings every rank takes
// from rank 0, and the collectives' 64-bit counts. The coordinator's
// readiness and agreement checks: coordinator_unit_test.cc; ranks out of
// step: out_of_step_unit_test.cc.
// Built with g++ alone (no TensorFlow, no MPI) by
// tests/builds/test_engine_unit.py, which also proves the engine needs neither.
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

static void TestRequestRoundTrip() {
  RequestList list;
  list.shutdown = true;
  Request r = MakeRequest(3, "grad/dense_1/kernel:0", {128, 64});
  r.op = OpType::kAlltoall;
  r.reduce_op = ReduceOp::kMax;
  r.dtype = DataType::kBFloat16;
  r.root_rank = 2;
  r.prescale = 0.25;
  r.postscale = 3.5;
  r.splits = {1, 0, 127};
  r.waited_us = 1234567;
  r.static_shape = true;
  r.local_error = "refused here";
  r.blocks = true;
  r.in_loop = true;
  list.requests.push_back(r);
  list.requests.push_back(MakeRequest(3, "", {}));  // empty name, scalar

  std::vector<char> bytes = list.Serialize();
  RequestList back;
  CHECK(RequestList::Parse(bytes.data(), bytes.size(), &back));
  CHECK(back.shutdown);
  CHECK(back.requests.size() == 2);
  const Request& b = back.requests[0];
  CHECK(b.rank == 3 && b.name == r.name && b.shape == r.shape);
  CHECK(b.op == OpType::kAlltoall && b.reduce_op == ReduceOp::kMax);
  CHECK(b.dtype == DataType::kBFloat16 && b.root_rank == 2);
  CHECK(b.prescale == 0.25 && b.postscale == 3.5 && b.splits == r.splits);
  CHECK(b.waited_us == 1234567 && b.static_shape);
  CHECK(b.local_error == "refused here" && b.blocks && b.in_loop);
  CHECK(!back.requests[1].static_shape);
  CHECK(back.requests[1].local_error.empty() && !back.requests[1].blocks && !back.requests[1].in_loop);
  CHECK(back.requests[1].name.empty() && back.requests[1].shape.empty());

  // Every truncation of a valid message must be rejected, never over-read.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    RequestList partial;
    CHECK(!RequestList::Parse(bytes.data(), cut, &partial));
  }
  // Trailing garbage is rejected too.
  bytes.push_back(0);
  CHECK(!RequestList::Parse(bytes.data(), bytes.size(), &back));
  // An out-of-range enum value is rejected.
  std::vector<char> bad = list.Serialize();
  bad[4 + 1 + 4 + 4] = 99;  // version, shutdown, count, rank -> op byte
  CHECK(!RequestList::Parse(bad.data(), bad.size(), &back));
}

static void TestResponseRoundTrip() {
  ResponseList list;
  Response a;
  a.op = OpType::kAllgather;
  a.dtype = DataType::kInt64;
  a.names = {"x", "y"};
  a.sizes = {1, 2, 3, 4};
  Response e;
  e.names = {"bad"};
  e.error = "shape differs";
  e.only_ranks = {1, 2};
  e.uncached = true;
  list.responses = {a, e};
  list.shutdown_ranks = {2, 0};
  std::vector<char> bytes = list.Serialize();
  ResponseList back;
  CHECK(ResponseList::Parse(bytes.data(), bytes.size(), &back));
  CHECK(!back.shutdown && back.responses.size() == 2);
  CHECK((back.shutdown_ranks == std::vector<int32_t>{2, 0}));
  CHECK(back.responses[0].names == a.names && back.responses[0].sizes == a.sizes);
  CHECK(back.responses[0].op == OpType::kAllgather && !back.responses[0].is_error());
  CHECK(back.responses[1].is_error() && back.responses[1].error == "shape differs");
  CHECK((back.responses[1].only_ranks == std::vector<int32_t>{1, 2}) && back.responses[1].uncached);
  CHECK(back.responses[1].applies_to(2) && !back.responses[1].applies_to(0));
  CHECK(back.responses[0].applies_to(0) && !back.responses[0].uncached);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    ResponseList partial;
    CHECK(!ResponseList::Parse(bytes.data(), cut, &partial));
  }
}

static void TestHalfConversions() {
  const float exact[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f /* min normal */,
                         5.960464477539063e-08f /* min subnormal */, 0.333251953125f};
  for (float f : exact) {
    CHECK(HalfToFloat(FloatToHalf(f)) == f);
    CHECK(std::signbit(HalfToFloat(FloatToHalf(f))) == std::signbit(f));
  }
  CHECK(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  CHECK(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  CHECK(FloatToHalf(1.0f + 1.0f / 4096) == 0x3c00);  // rounds to nearest even
  CHECK(FloatToHalf(2.98e-08f) == 0x0000);          // just below half the min subnormal
  CHECK(FloatToHalf(2.99e-08f) == 0x0001);
  CHECK(BFloat16ToFloat(FloatToBFloat16(3.0f)) == 3.0f);
  CHECK(FloatToBFloat16(1.0f) == 0x3f80);
  CHECK(std::isnan(BFloat16ToFloat(FloatToBFloat16(NAN))));
  // Every finite half value survives the round trip through float.
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    if (FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
}

static HostCounts Hosts(int hosts, int min_local, int max_local, bool shm = true) {
  HostCounts c;
  c.hosts = hosts;
  c.min_local_size = min_local;
  c.max_local_size = max_local;
  c.shm_allowed = shm;
  return c;
}

static void TestHierarchicalChoice() {
  HierarchicalMode mode = HierarchicalMode::kOff;
  CHECK(ParseHierarchicalMode(nullptr, &mode).ok() && mode == HierarchicalMode::kAuto);
  CHECK(ParseHierarchicalMode("", &mode).ok() && mode == HierarchicalMode::kAuto);
  CHECK(ParseHierarchicalMode("auto", &mode).ok() && mode == HierarchicalMode::kAuto);
  CHECK(ParseHierarchicalMode("1", &mode).ok() && mode == HierarchicalMode::kOn);
  CHECK(ParseHierarchicalMode("0", &mode).ok() && mode == HierarchicalMode::kOff);
  Status bad = ParseHierarchicalMode("yes", &mode);
  CHECK(!bad.ok() && Contains(bad.message(), "TF_RING_HIERARCHICAL='yes'") &&
        Contains(bad.message(), "use 1 (on), 0 (off)"));

  // Automatic: only several hosts with several ranks each, evenly.
  HierarchicalChoice c = ChooseHierarchical(HierarchicalMode::kAuto, Hosts(2, 2, 2));
  CHECK(c.hierarchical && Contains(c.why, "2 hosts x 2 ranks"));
  CHECK(ChooseHierarchical(HierarchicalMode::kAuto, Hosts(4, 3, 3)).hierarchical);
  c = ChooseHierarchical(HierarchicalMode::kAuto, Hosts(1, 4, 4));
  CHECK(!c.hierarchical && Contains(c.why, "one host"));
  c = ChooseHierarchical(HierarchicalMode::kAuto, Hosts(3, 1, 1));
  CHECK(!c.hierarchical && Contains(c.why, "3 hosts with one rank each"));
  c = ChooseHierarchical(HierarchicalMode::kAuto, Hosts(2, 1, 2));
  CHECK(!c.hierarchical && Contains(c.why, "different rank counts (1 to 2)"));
  c = ChooseHierarchical(HierarchicalMode::kAuto, Hosts(2, 2, 2, /*shm=*/false));
  CHECK(!c.hierarchical && Contains(c.why, "TF_RING_SHM=0"));
  // Forcing on cannot make an impossible layout hierarchical, and says so.
  c = ChooseHierarchical(HierarchicalMode::kOn, Hosts(1, 2, 2));
  CHECK(!c.hierarchical && Contains(c.why, "although TF_RING_HIERARCHICAL=1"));
  c = ChooseHierarchical(HierarchicalMode::kOn, Hosts(2, 1, 1));
  CHECK(!c.hierarchical && Contains(c.why, "although TF_RING_HIERARCHICAL=1"));
  CHECK(ChooseHierarchical(HierarchicalMode::kOn, Hosts(2, 2, 2)).hierarchical);
  c = ChooseHierarchical(HierarchicalMode::kOff, Hosts(2, 2, 2));
  CHECK(!c.hierarchical && Contains(c.why, "TF_RING_HIERARCHICAL=0"));
}

// Every rank's ask, concatenated in rank order as the allgather delivers them.
static std::vector<int64_t> Gathered(const std::vector<ProcessSetChange>& asks) {
  std::vector<int64_t> out;
  for (const auto& a : asks) {
    std::vector<int64_t> one = EncodeProcessSetChange(a);
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

static ProcessSetChange AddSets(std::vector<std::vector<int>> sets) {
  ProcessSetChange c;
  c.kind = ProcessSetChange::kAdd;
  c.sets = std::move(sets);
  return c;
}

static void TestProcessSetChangeAgreement() {
  ProcessSetChange out;
  const ProcessSetChange add = AddSets({{0, 1}, {1, 2}, {0}});
  CHECK(AgreedProcessSetChange(Gathered({add, add, add}), 3, &out).ok());
  CHECK(out.kind == ProcessSetChange::kAdd && out.sets.size() == 3 && out.sets[1] == std::vector<int>({1, 2}));

  ProcessSetChange remove;
  remove.kind = ProcessSetChange::kRemove;
  remove.remove_id = 7;
  CHECK(AgreedProcessSetChange(Gathered({remove, remove}), 2, &out).ok());
  CHECK(out.kind == ProcessSetChange::kRemove && out.remove_id == 7);

  // Ranks asking for different changes: every rank gets the same error, naming each ask.
  Status s = AgreedProcessSetChange(Gathered({AddSets({{0}}), AddSets({{1}}), remove}), 3, &out);
  CHECK(!s.ok() && Contains(s.message(), "do not match across ranks"));
  CHECK(Contains(s.message(), "rank 0: add [[0]]") && Contains(s.message(), "rank 1: add [[1]]") &&
        Contains(s.message(), "rank 2: remove set 7"));

  s = AgreedProcessSetChange(Gathered({AddSets({{0, 3}}), AddSets({{0, 3}})}), 2, &out);
  CHECK(!s.ok() && Contains(s.message(), "rank 3 is out of range; this job has ranks 0 to 1"));
  s = AgreedProcessSetChange(Gathered({AddSets({{1, 1}}), AddSets({{1, 1}})}), 2, &out);
  CHECK(!s.ok() && Contains(s.message(), "distinct and ascending"));
  s = AgreedProcessSetChange(Gathered({AddSets({{}}), AddSets({{}})}), 2, &out);
  CHECK(!s.ok() && Contains(s.message(), "at least one rank"));
  // A truncated buffer is reported, not read past.
  std::vector<int64_t> cut = Gathered({add, add});
  cut.resize(cut.size() - 3);
  CHECK(!AgreedProcessSetChange(cut, 2, &out).ok());

  // In-process recovery restores sets under their ids (equal ranks allowed
  // by the table, not here) and says which id later sets start from.
  ProcessSetChange restore = AddSets({{0, 1}, {0, 1}});
  restore.kind = ProcessSetChange::kAddAt;
  restore.ids = {2, 5};
  restore.next_id = 7;
  CHECK(AgreedProcessSetChange(Gathered({restore, restore}), 2, &out).ok());
  CHECK(out.kind == ProcessSetChange::kAddAt && out.ids == std::vector<int32_t>({2, 5}) &&
        out.next_id == 7 && out.sets.size() == 2 && out.sets[1] == std::vector<int>({0, 1}));
  ProcessSetChange other = restore;
  other.ids = {2, 4};
  s = AgreedProcessSetChange(Gathered({restore, other}), 2, &out);
  CHECK(!s.ok() && Contains(s.message(), "rank 0: add [2: [0, 1], 5: [0, 1]]") &&
        Contains(s.message(), "rank 1: add [2: [0, 1], 4: [0, 1]]"));
}

static SettingTexts Texts(const std::map<std::string, std::string>& env) {
  return ReadSettingTexts([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

static void TestAgreedSettings() {
  const SettingTexts rank0 = Texts({{"TF_RING_FUSION_THRESHOLD", "0"}, {"TF_RING_SHM", ""},
                                    {"TF_RING_TIMELINE", "/tmp/t.json"}});
  CHECK(rank0.size() == AgreedSettingNames().size());
  // The wire keeps set, unset and empty-as-unset apart; a cut buffer fails.
  std::vector<char> bytes = SerializeSettingTexts(rank0);
  SettingTexts back;
  CHECK(ParseSettingTexts(bytes.data(), bytes.size(), &back) && back == rank0);
  CHECK(!ParseSettingTexts(bytes.data(), bytes.size() - 1, &back));
  EngineSettings s;
  CHECK(ParseSettings(rank0, &s).ok());
  CHECK(s.fusion_threshold == 0 && s.shm && s.cache_capacity == 1024 && s.shm_chunk_bytes < 0);
  CHECK(s.timeline_path == "/tmp/t.json" && !s.autotune && !s.dynamic_process_sets);
  CHECK(Texts({}) == Texts({{"TF_RING_SHM", ""}}));
  // Same meaning, no warning: unset and the default, "1024" and "1024.0".
  CHECK(SettingDifferences(Texts({{"TF_RING_CACHE_CAPACITY", "1024.0"}, {"TF_RING_SHM", "1"}}),
                           Texts({})).empty());
  std::vector<std::string> w = SettingDifferences(
      Texts({{"TF_RING_FUSION_THRESHOLD", "0"}, {"TF_RING_SHM", "0"}}), Texts({}));
  CHECK(w.size() == 2);
  CHECK(w.size() == 2 && w[0].rfind("TF_RING_FUSION_THRESHOLD is \"0\" on this rank but unset "
                                    "(default 67108864) on rank 0; this rank uses rank 0's", 0) == 0);
  CHECK(w.size() == 2 && Contains(w[1], "TF_RING_SHM is \"0\" on this rank but unset (default 1)"));
  w = SettingDifferences(Texts({}), Texts({{"TF_RING_HIERARCHICAL", "1"}}));
  CHECK(w.size() == 1 && Contains(w[0], "is unset (default auto) on this rank but \"1\" on rank 0"));
  // An invalid value warns where it is not rank 0's, and fails everywhere where it is.
  CHECK(SettingDifferences(Texts({{"TF_RING_HIERARCHICAL", "x"}}), Texts({})).size() == 1);
  Status st = ParseSettings(Texts({{"TF_RING_HIERARCHICAL", "x"}}), &s);
  CHECK(!st.ok() && Contains(st.message(), "TF_RING_HIERARCHICAL='x' is not valid"));
  CHECK(ParseSettings(Texts({{"TF_RING_DYNAMIC_PROCESS_SETS", "1"}, {"TF_RING_AUTOTUNE", "1"},
                             {"TF_RING_AUTOTUNE_SAMPLES_PER_TRIAL", "0"}}), &s).ok());
  CHECK(s.dynamic_process_sets && s.autotune && s.autotune_config.samples_per_trial == 1);
  const std::string described = DescribeSettingTexts(rank0);
  CHECK(Contains(described, std::string("TF_RING_FUSION_THRESHOLD=0\0TF_RING_CYCLE_TIME\0", 46)));
}

// 64-bit counts (base/counts.h): values past 2^31 that an int sum would wrap.
static void TestCountArithmetic() {
  const int64_t g = int64_t{1} << 30, two_g = int64_t{1} << 31;
  CHECK(AllgatherCountProblem({g, g - 1, 10}).empty());  // the last block starts at 2^31 - 1
  CHECK(Contains(AllgatherCountProblem({g, g, 10}), "rank 2's block would start at byte 2147483648"));
  CHECK(Contains(AllgatherCountProblem({1, two_g}), "rank 1 sends 2147483648 bytes"));
  // Hierarchical allgather, 2 hosts dealt round robin: each block fits, a host's sum does not.
  HostBlocks p = PlanHostBlocks({0, 1, 0, 1}, {0, 0, 1, 1}, 2, {g + 5, g + 6, g + 7, g + 8});
  CHECK((p.offsets == std::vector<int64_t>{0, 2 * g + 12, g + 5, 3 * g + 18}));
  CHECK((p.host_counts == std::vector<int64_t>{2 * g + 12, 2 * g + 14}));
  CHECK((p.host_displs == std::vector<int64_t>{0, 2 * g + 12}));
  CHECK(p.total == 4 * g + 26 && !p.fits_mpi);
  p = PlanHostBlocks({0, 1, 0, 1}, {0, 0, 1, 1}, 2, {100, 200, 300, 400});
  CHECK((p.offsets == std::vector<int64_t>{0, 400, 100, 600}) && p.fits_mpi && p.total == 1000);
  // Alltoall on 3 ranks, 2-byte rows: rank 0 sends 2^31 + 2 bytes to rank 1.
  std::vector<int64_t> splits = {0, g + 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(Contains(AlltoallCountProblem(splits, 3, 2), "rank 0 sends 2147483650 bytes to rank 1"));
  splits[1] = g - 1;  // fits, but rank 1's rows from rank 2 then land at byte 2^31
  CHECK(Contains(AlltoallCountProblem(splits, 3, 2), "rank 1's rows from rank 2 would land at byte 2147483648"));
  splits[1] = g - 2;
  CHECK(AlltoallCountProblem(splits, 3, 2).empty());
  // Rank 2 receives 2^30 bytes from ranks 0 and 1: its third block lands at 2^31.
  CHECK(Contains(AlltoallCountProblem({0, 0, g, 0, 0, g, 0, 0, 1}, 3, 1),
                 "rank 2's rows from rank 2 would land at byte 2147483648"));
  // Transfers past 2^31 elements go in int-sized pieces that add up.
  const int64_t total = 8 * g + 3;
  int64_t sum = 0;
  bool fit = true;
  for (int64_t i = 0; i < ChunkRounds(total, kMpiChunkElements); ++i) {
    sum += ChunkAt(total, kMpiChunkElements, i);
    fit = fit && FitsMpiCount(ChunkAt(total, kMpiChunkElements, i));
  }
  CHECK(ChunkRounds(total, kMpiChunkElements) == 9 && sum == total && fit && ChunkRounds(0, 1) == 0);
  // Adasum's halving of 2^33 + 7 elements over 8 ranks, and the way back.
  const int64_t count = 8 * g + 7;
  int64_t covered = 0;
  bool halves = true, back = true;
  for (int rank = 0; rank < 8; ++rank) {
    Segment mine{0, count};
    std::vector<Segment> kept;
    for (int d = 1; d < 8; d *= 2) {
      Segment keep, give;
      HalveSegment(mine, (rank & d) == 0, &keep, &give);
      halves = halves && keep.count + give.count == mine.count && keep.count >= mine.count / 2 - 1 &&
               (keep.offset == mine.offset || give.offset == mine.offset);
      kept.push_back(mine);
      mine = keep;
    }
    covered += mine.count;
    for (int level = 2; level >= 0; --level) {
      const Segment other = OtherPart(kept[level], mine);
      back = back && other.count + mine.count == kept[level].count &&
             std::min(other.offset, mine.offset) == kept[level].offset;
      mine = kept[level];
    }
  }
  CHECK(halves && back && covered == count);
  Segment keep, give;
  HalveSegment({0, two_g + 3}, false, &keep, &give);
  CHECK(give.count == g + 1 && keep.offset == g + 1 && keep.count == g + 2);
}

int main() {
  TestRequestRoundTrip();
  TestResponseRoundTrip();
  TestHalfConversions();
  TestHierarchicalChoice();
  TestProcessSetChangeAgreement();
  TestAgreedSettings();
  TestCountArithmetic();
  return Summary();
}
