#include "common/transport/hierarchical_choice.h"

namespace tf_ring {

Status ParseHierarchicalMode(const char* value, HierarchicalMode* mode) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "auto") {
    *mode = HierarchicalMode::kAuto;
  } else if (v == "1") {
    *mode = HierarchicalMode::kOn;
  } else if (v == "0") {
    *mode = HierarchicalMode::kOff;
  } else {
    return Status::InvalidArgument("TF_RING_HIERARCHICAL='" + v +
                                   "' is not valid: use 1 (on), 0 (off) or leave it unset "
                                   "(automatic: on when ranks span hosts and share them).");
  }
  return Status::OK();
}

HierarchicalChoice ChooseHierarchical(HierarchicalMode mode, const HostCounts& c) {
  const std::string forced = mode == HierarchicalMode::kOn ? " although TF_RING_HIERARCHICAL=1" : "";
  const std::string layout = std::to_string(c.hosts) + " host" + (c.hosts == 1 ? "" : "s");
  if (mode == HierarchicalMode::kOff) {
    return {false, "collectives run flat across " + layout + ": TF_RING_HIERARCHICAL=0"};
  }
  if (c.hosts <= 1) {
    return {false, "collectives run flat" + forced + ": all ranks are on one host"};
  }
  if (c.max_local_size <= 1) {
    return {false, "collectives run flat" + forced + ": " + layout + " with one rank each"};
  }
  if (c.min_local_size != c.max_local_size) {
    return {false, "collectives run flat" + forced + ": the " + layout + " hold different rank "
                       "counts (" + std::to_string(c.min_local_size) + " to " +
                       std::to_string(c.max_local_size) + "); hierarchical needs the same on each"};
  }
  if (!c.shm_allowed) {
    return {false, "collectives run flat" + forced + ": TF_RING_SHM=0 turns off the shared "
                       "memory the in-host step uses"};
  }
  return {true, "collectives run hierarchical: " + layout + " x " + std::to_string(c.max_local_size) +
                    " ranks, crossing the network once per host"};
}

}  // namespace tf_ring
