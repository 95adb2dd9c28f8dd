// Whether collectives go hierarchical: reduce or gather inside each host,
// cross the network once per host, share the result inside the host.
// A pure function of the layout and TF_RING_HIERARCHICAL, so it is unit
// tested without MPI and every rank, seeing the same layout, agrees.
#ifndef TF_RING_COMMON_HIERARCHICAL_CHOICE_H_
#define TF_RING_COMMON_HIERARCHICAL_CHOICE_H_

#include <string>

#include "common/base/status.h"

namespace tf_ring {

enum class HierarchicalMode { kAuto, kOn, kOff };

// TF_RING_HIERARCHICAL: unset, empty or "auto" -> kAuto, "1" -> kOn, "0" -> kOff.
Status ParseHierarchicalMode(const char* value, HierarchicalMode* mode);

struct HostCounts {
  int hosts = 1;           // distinct hosts (nodes sharing memory) in the job
  int min_local_size = 1;  // fewest ranks on any host
  int max_local_size = 1;  // most ranks on any host
  bool shm_allowed = true; // TF_RING_SHM is not 0 (the in-host step needs it)
};

struct HierarchicalChoice {
  bool hierarchical = false;
  std::string why;  // one line for the log: what was chosen and why
};

// Hierarchical only pays (and only works) with several hosts, more than one
// rank on some host, and the same rank count on every host; kOn cannot
// override those, kOff always wins.
HierarchicalChoice ChooseHierarchical(HierarchicalMode mode, const HostCounts& counts);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_HIERARCHICAL_CHOICE_H_
