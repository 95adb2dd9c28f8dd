#include "common/negotiation/agreed_settings.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/base/wire.h"

namespace tf_ring {

namespace {

// How a variable's text is read, which decides when two texts mean the same.
enum class Kind {
  kNumber,        // atof; unset: the default
  kFlag,          // on when atof gives anything but 0
  kSwitch,        // off when "0", on otherwise; unset: the default
  kAutoSwitch,    // "0" off, "auto" or unset automatic, on otherwise
  kHierarchical,  // ParseHierarchicalMode
  kText,          // a path; unset: none
};

struct Setting {
  const char* name;
  Kind kind;
  double default_value;      // kNumber, kFlag, kSwitch (1 on, 0 off)
  const char* default_text;  // for the warning
};

// Positions in kSettings, which is also the wire order: add new ones at the end.
enum Index {
  kFusionThreshold, kCycleTime, kCacheCapacity, kShm, kShmChunkBytes, kHierarchical,
  kStallCheck, kStallShutdown, kAutotune, kAutotuneLog, kAutotuneWarmup, kAutotuneSamples,
  kAutotuneCycles, kTimeline, kTimelineMarkCycles, kDynamicProcessSets, kShmSingleCopy,
  kCrossedWait, kCount
};

const Setting kSettings[] = {
    {"TF_RING_FUSION_THRESHOLD", Kind::kNumber, 64 << 20, "67108864"},
    {"TF_RING_CYCLE_TIME", Kind::kNumber, 0, "0"},
    {"TF_RING_CACHE_CAPACITY", Kind::kNumber, 1024, "1024"},
    {"TF_RING_SHM", Kind::kSwitch, 1, "1"},
    {"TF_RING_SHM_CHUNK_BYTES", Kind::kNumber, -1, "4194304"},
    {"TF_RING_HIERARCHICAL", Kind::kHierarchical, 0, "auto"},
    {"TF_RING_STALL_CHECK_TIME_SECONDS", Kind::kNumber, 60, "60"},
    {"TF_RING_STALL_SHUTDOWN_TIME_SECONDS", Kind::kNumber, 0, "0"},
    {"TF_RING_AUTOTUNE", Kind::kFlag, 0, "0"},
    {"TF_RING_AUTOTUNE_LOG", Kind::kText, 0, "none"},
    {"TF_RING_AUTOTUNE_WARMUP_SAMPLES", Kind::kNumber, 1, "1"},
    {"TF_RING_AUTOTUNE_SAMPLES_PER_TRIAL", Kind::kNumber, 3, "3"},
    {"TF_RING_AUTOTUNE_CYCLES_PER_SAMPLE", Kind::kNumber, 10, "10"},
    {"TF_RING_TIMELINE", Kind::kText, 0, "none"},
    {"TF_RING_TIMELINE_MARK_CYCLES", Kind::kFlag, 0, "0"},
    {"TF_RING_DYNAMIC_PROCESS_SETS", Kind::kSwitch, 0, "0"},
    {"TF_RING_SHM_SINGLE_COPY", Kind::kAutoSwitch, 0, "auto"},
    {"TF_RING_CROSSED_WAIT_SECONDS", Kind::kNumber, 5, "5"},
};
static_assert(sizeof(kSettings) / sizeof(kSettings[0]) == kCount, "one entry per Index");

double Number(const Setting& s, const SettingText& t) {
  return t.set ? std::atof(t.value.c_str()) : s.default_value;
}

// A text's meaning as a string: two texts mean the same when these match.
std::string Meaning(const Setting& s, const SettingText& t) {
  switch (s.kind) {
    case Kind::kNumber: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.17g", Number(s, t));
      return buf;
    }
    case Kind::kFlag:
      return Number(s, t) != 0 ? "1" : "0";
    case Kind::kSwitch:
      return t.set ? (t.value == "0" ? "0" : "1") : (s.default_value != 0 ? "1" : "0");
    case Kind::kAutoSwitch:
      return !t.set || t.value == "auto" ? "auto" : t.value == "0" ? "0" : "1";
    case Kind::kHierarchical: {
      HierarchicalMode mode;
      if (!ParseHierarchicalMode(t.set ? t.value.c_str() : nullptr, &mode).ok()) {
        return "invalid " + t.value;
      }
      return std::to_string(static_cast<int>(mode));
    }
    case Kind::kText:
      return t.set ? t.value : std::string();
  }
  return std::string();
}

std::string Describe(const Setting& s, const SettingText& t) {
  return t.set ? "\"" + t.value + "\"" : std::string("unset (default ") + s.default_text + ")";
}

}  // namespace

const std::vector<std::string>& AgreedSettingNames() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>();
    for (const Setting& s : kSettings) v->push_back(s.name);
    return v;
  }();
  return *names;
}

SettingTexts ReadSettingTexts(const std::function<const char*(const char*)>& lookup) {
  SettingTexts texts(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    const char* v = lookup ? lookup(kSettings[i].name) : std::getenv(kSettings[i].name);
    if (v && *v) texts[i] = SettingText{true, v};
  }
  return texts;
}

std::vector<char> SerializeSettingTexts(const SettingTexts& texts) {
  ByteWriter w;
  w.Put<uint32_t>(static_cast<uint32_t>(texts.size()));
  for (const SettingText& t : texts) {
    w.Put<uint8_t>(t.set ? 1 : 0);
    w.PutString(t.value);
  }
  return std::move(w.bytes());
}

bool ParseSettingTexts(const char* data, size_t size, SettingTexts* texts) {
  ByteReader r(data, size);
  const uint32_t n = r.Get<uint32_t>();
  if (!r.ok() || n != kCount) return false;
  texts->assign(n, SettingText());
  for (SettingText& t : *texts) {
    t.set = r.Get<uint8_t>() != 0;
    t.value = r.GetString();
  }
  return r.ok() && r.at_end();
}

std::vector<std::string> SettingDifferences(const SettingTexts& mine, const SettingTexts& rank0) {
  std::vector<std::string> out;
  for (size_t i = 0; i < kCount && i < mine.size() && i < rank0.size(); ++i) {
    const Setting& s = kSettings[i];
    if (Meaning(s, mine[i]) == Meaning(s, rank0[i])) continue;
    out.push_back(std::string(s.name) + " is " + Describe(s, mine[i]) + " on this rank but " +
                  Describe(s, rank0[i]) + " on rank 0; this rank uses rank 0's value, as every "
                  "rank must run with the same engine settings.");
  }
  return out;
}

Status ParseSettings(const SettingTexts& texts, EngineSettings* out) {
  if (texts.size() != kCount) return Status::Unknown("engine settings of another tf_ring build");
  auto number = [&](Index i) { return Number(kSettings[i], texts[i]); };
  auto whole = [&](Index i) { return static_cast<int>(number(i)); };
  auto on = [&](Index i) { return Meaning(kSettings[i], texts[i]) == "1"; };
  EngineSettings s;
  s.fusion_threshold = static_cast<int64_t>(number(kFusionThreshold));
  s.cycle_time_us = static_cast<int64_t>(number(kCycleTime) * 1000.0);
  s.cache_capacity = static_cast<size_t>(number(kCacheCapacity));
  s.cache_capacity_set = texts[kCacheCapacity].set;
  s.shm = on(kShm);
  s.shm_chunk_bytes = number(kShmChunkBytes);
  const std::string single_copy = Meaning(kSettings[kShmSingleCopy], texts[kShmSingleCopy]);
  s.shm_single_copy = single_copy == "auto" ? SingleCopyMode::kWhereCoresApart
                      : single_copy == "1"  ? SingleCopyMode::kAlways
                                            : SingleCopyMode::kNever;
  const SettingText& mode = texts[kHierarchical];
  Status st = ParseHierarchicalMode(mode.set ? mode.value.c_str() : nullptr, &s.hierarchical);
  if (!st.ok()) return st;
  s.stall_check_seconds = number(kStallCheck);
  s.stall_shutdown_seconds = number(kStallShutdown);
  s.crossed_wait_seconds = number(kCrossedWait);
  s.autotune = on(kAutotune);
  s.autotune_config.log_path = texts[kAutotuneLog].value;
  s.autotune_config.warmup_samples = whole(kAutotuneWarmup);
  s.autotune_config.samples_per_trial = std::max(1, whole(kAutotuneSamples));
  s.autotune_config.cycles_per_sample = std::max(1, whole(kAutotuneCycles));
  s.timeline_path = texts[kTimeline].value;
  s.timeline_mark_cycles = on(kTimelineMarkCycles);
  s.dynamic_process_sets = on(kDynamicProcessSets);
  *out = std::move(s);
  return Status::OK();
}

std::string DescribeSettingTexts(const SettingTexts& texts) {
  std::string out;
  for (size_t i = 0; i < kCount && i < texts.size(); ++i) {
    if (i) out.push_back('\0');
    out += kSettings[i].name;
    if (texts[i].set) out += "=" + texts[i].value;
  }
  return out;
}

}  // namespace tf_ring
