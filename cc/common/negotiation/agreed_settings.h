// Engine settings every rank must share. Each rank reads the TF_RING_*
// variables from its own environment, but anything that changes what a rank
// sends (fusion, the cache's bit vector, the transport, chunk sizes, which
// rank runs autotune) must be the same everywhere, so rank 0's texts are
// broadcast at init() and every rank parses those; a rank whose own differ
// gets one warning per variable. Pure logic (no MPI), unit tested alone.
#ifndef TF_RING_COMMON_AGREED_SETTINGS_H_
#define TF_RING_COMMON_AGREED_SETTINGS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/observability/autotune.h"
#include "common/transport/hierarchical_choice.h"
#include "common/transport/single_copy_mode.h"

namespace tf_ring {

// One variable as a rank read it. Empty counts as unset, as it always has.
struct SettingText {
  bool set = false;
  std::string value;
  bool operator==(const SettingText& o) const { return set == o.set && value == o.value; }
};
// In AgreedSettingNames() order.
using SettingTexts = std::vector<SettingText>;

// Every agreed variable, in a fixed order (the wire order).
const std::vector<std::string>& AgreedSettingNames();

// Reads each agreed variable through `lookup` (getenv by default).
SettingTexts ReadSettingTexts(
    const std::function<const char*(const char*)>& lookup = nullptr);

std::vector<char> SerializeSettingTexts(const SettingTexts& texts);
// False on a malformed buffer or a different number of variables (another build).
bool ParseSettingTexts(const char* data, size_t size, SettingTexts* texts);

// One warning per variable whose meaning on this rank (`mine`) differs from
// rank 0's: the variable, this rank's value and rank 0's. Texts that mean
// the same ("1024" and "1024.0"; unset and the default) are no difference.
std::vector<std::string> SettingDifferences(const SettingTexts& mine, const SettingTexts& rank0);

// What the engine runs with, parsed from rank 0's texts.
struct EngineSettings {
  int64_t fusion_threshold = 64 << 20;  // bytes
  int64_t cycle_time_us = 0;
  size_t cache_capacity = 1024;
  bool cache_capacity_set = false;  // the user chose it: the cache never grows
  bool shm = true;
  double shm_chunk_bytes = -1;  // < 0: the default of the path chosen
  // When to read peers' tensors directly (process_vm_readv) instead of staging.
  SingleCopyMode shm_single_copy = SingleCopyMode::kWhereCoresApart;
  HierarchicalMode hierarchical = HierarchicalMode::kAuto;
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;
  // How long ranks may wait crosswise (each in a collective another has
  // not reached, one of them blocking or in a loop) before both fail.
  double crossed_wait_seconds = 5;
  bool autotune = false;
  AutotuneConfig autotune_config;  // used by rank 0 only
  std::string timeline_path;       // rank 0 writes it; empty: none
  bool timeline_mark_cycles = false;
  bool dynamic_process_sets = false;  // read by the Python side
};

// Fails only on a value the engine cannot run with (TF_RING_HIERARCHICAL).
Status ParseSettings(const SettingTexts& texts, EngineSettings* out);

// "NAME=value" for each variable set, NUL-separated, for the Python side.
std::string DescribeSettingTexts(const SettingTexts& texts);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_AGREED_SETTINGS_H_
