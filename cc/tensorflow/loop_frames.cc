// Names every loop frame that holds tf_ring collectives after the
// collectives inside it, so that a collective's run in a loop gets the same
// name on every rank running the same program (loop_name.h).
//
// TensorFlow's frame id hashes the frame's name, which a lowered loop takes
// from its While node: "while" called directly, "StatefulPartitionedCall/
// while" once an outer tf.function inlined it, "while_1" after another loop
// (one without collectives, on one rank only) took "while". So two ranks
// running the same collectives gave them different names and waited for
// each other for ever. This pass, run on every graph just before it is
// partitioned for execution, renames such a frame after (its depth and) the
// sorted names of the collectives in it and in the loops inside it, which
// depend on the program alone. Frames without collectives keep their name.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/observability/logging.h"
#include "tensorflow/core/common_runtime/optimization_registry.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/graph/control_flow.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

struct Frame {
  std::string parent;                 // "" at the top level
  std::set<std::string> collectives;  // in this frame and the frames inside it
};

// FNV-1a: the same on every rank and build (std::hash need not be).
uint64_t StableHash(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// "while_9" before "while_10": node names count up as loops are created.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      const std::string na = a.substr(i, ei - i), nb = b.substr(j, ej - j);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// The collective's engine name (before a loop adds its iteration), or "".
std::string CollectiveName(const tf::Node* n) {
  if (n->type_string().rfind("TfRing", 0) != 0) return std::string();
  const tf::AttrValue* attr = n->attrs().Find("tensor_name");
  if (attr == nullptr) return std::string();
  return attr->s().empty() ? n->name() : attr->s();
}

int Depth(const std::map<std::string, Frame>& frames, std::string name) {
  int depth = 0;
  while (!name.empty() && depth < 1000) {
    auto it = frames.find(name);
    if (it == frames.end()) break;
    name = it->second.parent;
    ++depth;
  }
  return depth;
}

class LoopFramesPass : public tf::GraphOptimizationPass {
 public:
  absl::Status Run(const tf::GraphOptimizationPassOptions& options) override {
    if (options.graph == nullptr) return absl::OkStatus();  // after partitioning: done before
    tf::Graph* g = options.graph->get();
    bool loops = false, collectives = false;
    for (tf::Node* n : g->op_nodes()) {
      loops = loops || n->IsEnter();
      collectives = collectives || !CollectiveName(n).empty();
    }
    if (!loops || !collectives) return absl::OkStatus();
    std::vector<tf::ControlFlowInfo> info;
    // A malformed graph is TensorFlow's to report; leave it as it is.
    if (!tf::BuildControlFlowInfo(g, &info).ok()) return absl::OkStatus();

    std::map<std::string, Frame> frames;
    for (tf::Node* n : g->op_nodes()) {
      if (!n->IsEnter() || n->id() >= static_cast<int>(info.size())) continue;
      const tf::Node* parent = info[n->id()].parent_frame;
      frames[info[n->id()].frame_name].parent =
          parent == nullptr || parent->IsSource() ? std::string() : info[parent->id()].frame_name;
    }
    for (tf::Node* n : g->op_nodes()) {
      const std::string name = CollectiveName(n);
      if (name.empty() || n->id() >= static_cast<int>(info.size())) continue;
      std::string frame = info[n->id()].frame_name;
      for (int hops = 0; !frame.empty() && hops < 1000; ++hops) {
        auto it = frames.find(frame);
        if (it == frames.end()) break;
        it->second.collectives.insert(name);
        frame = it->second.parent;
      }
    }

    // Frames with the same depth and collectives (one function inlined
    // twice) are told apart by their order among themselves.
    std::map<std::string, std::vector<std::string>> alike;
    for (const auto& kv : frames) {
      if (kv.second.collectives.empty()) continue;
      std::string content;
      for (const std::string& c : kv.second.collectives) content += c + '\n';
      char key[64];
      std::snprintf(key, sizeof(key), "tf_ring_loop_%016llx_d%d",
                    static_cast<unsigned long long>(StableHash(content)), Depth(frames, kv.first));
      alike[key].push_back(kv.first);
    }
    std::map<std::string, std::string> renamed;
    for (auto& kv : alike) {
      std::sort(kv.second.begin(), kv.second.end(), NaturalLess);
      for (size_t i = 0; i < kv.second.size(); ++i) {
        renamed[kv.second[i]] = kv.first + "_" + std::to_string(i);
      }
    }
    for (tf::Node* n : g->op_nodes()) {
      if (!n->IsEnter()) continue;
      std::string frame;
      if (!tf::GetNodeAttr(n->attrs(), "frame_name", &frame).ok()) continue;
      auto it = renamed.find(frame);
      if (it == renamed.end()) continue;
      n->ClearAttr("frame_name");
      n->AddAttr("frame_name", it->second);
    }
    if (LogEnabled(LogLevel::kDebug)) {
      for (const auto& kv : renamed) Log(LogLevel::kDebug, "loop frame '" + kv.first + "' is named '" + kv.second + "'");
    }
    return absl::OkStatus();
  }
};

}  // namespace

// Last of its group, after XLA's clustering, so no later pass renames frames.
REGISTER_OPTIMIZATION(tf::OptimizationPassRegistry::POST_REWRITE_FOR_EXEC, 90, LoopFramesPass);

}  // namespace tf_ring
