#include "common/process_sets/process_set_change.h"

#include <string>

namespace tf_ring {

namespace {
std::string Show(const std::vector<int64_t>& ask) {
  // [length, kind, body...] -> "add [[0, 1], [2]]" / "remove set 3"
  if (ask.size() < 3) return "(malformed)";
  if (ask[1] == ProcessSetChange::kRemove) return "remove set " + std::to_string(ask[2]);
  const bool at_ids = ask[1] == ProcessSetChange::kAddAt;
  std::string s = "add [";
  size_t at = 3;
  for (int64_t n = 0; n < ask[2] && at < ask.size(); ++n) {
    s += n ? ", " : "";
    if (at_ids) s += std::to_string(ask[at++]) + ": ";
    if (at >= ask.size()) break;
    const int64_t len = ask[at++];
    s += "[";
    for (int64_t i = 0; i < len && at < ask.size(); ++i) s += (i ? ", " : "") + std::to_string(ask[at++]);
    s += "]";
  }
  return s + "]";
}

Status CheckRanks(const std::vector<int>& ranks, int size) {
  std::string shown;
  for (size_t i = 0; i < ranks.size(); ++i) shown += (i ? ", " : "") + std::to_string(ranks[i]);
  const std::string what = "process set [" + shown + "]: ";
  if (ranks.empty()) return Status::InvalidArgument(what + "a process set needs at least one rank.");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size) {
      return Status::InvalidArgument(what + "rank " + std::to_string(ranks[i]) +
                                     " is out of range; this job has ranks 0 to " +
                                     std::to_string(size - 1) + ".");
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return Status::InvalidArgument(what + "ranks must be distinct and ascending; rank " +
                                     std::to_string(ranks[i]) + " repeats or is out of order.");
    }
  }
  return Status::OK();
}
}  // namespace

std::vector<int64_t> EncodeProcessSetChange(const ProcessSetChange& change) {
  std::vector<int64_t> out = {0, change.kind};
  if (change.kind == ProcessSetChange::kRemove) {
    out.push_back(change.remove_id);
  } else {
    out.push_back(static_cast<int64_t>(change.sets.size()));
    for (size_t i = 0; i < change.sets.size(); ++i) {
      const auto& set = change.sets[i];
      if (change.kind == ProcessSetChange::kAddAt) out.push_back(change.ids[i]);
      out.push_back(static_cast<int64_t>(set.size()));
      out.insert(out.end(), set.begin(), set.end());
    }
    if (change.kind == ProcessSetChange::kAddAt) out.push_back(change.next_id);
  }
  out[0] = static_cast<int64_t>(out.size());
  return out;
}

Status AgreedProcessSetChange(const std::vector<int64_t>& data, int size, ProcessSetChange* out) {
  std::vector<std::vector<int64_t>> asks;
  for (size_t at = 0; asks.size() < static_cast<size_t>(size);) {
    if (at >= data.size() || data[at] < 3 || at + data[at] > data.size()) {
      return Status::Unknown("malformed process set change; are all ranks running the same tf_ring build?");
    }
    asks.emplace_back(data.begin() + at, data.begin() + at + data[at]);
    at += data[at];
  }
  for (int r = 1; r < size; ++r) {
    if (asks[r] != asks[0]) {
      std::string all;
      for (int q = 0; q < size; ++q) all += (q ? "; " : "") + std::string("rank ") + std::to_string(q) + ": " + Show(asks[q]);
      return Status::InvalidArgument(
          "process sets do not match across ranks (" + all + "). Every rank must pass the same "
          "process sets, in the same order, to init(process_sets=...), add_process_set() and "
          "remove_process_set().");
    }
  }
  const std::vector<int64_t>& ask = asks[0];
  out->kind = static_cast<ProcessSetChange::Kind>(ask[1]);
  out->sets.clear();
  out->ids.clear();
  if (out->kind == ProcessSetChange::kRemove) {
    out->remove_id = static_cast<int32_t>(ask[2]);
    return Status::OK();
  }
  const bool at_ids = out->kind == ProcessSetChange::kAddAt;
  size_t at = 3;
  for (int64_t n = 0; n < ask[2]; ++n) {
    if (at_ids) {
      if (at >= ask.size() || ask[at] < 1) return Status::Unknown("malformed process set change");
      out->ids.push_back(static_cast<int32_t>(ask[at++]));
    }
    if (at >= ask.size() || at + 1 + ask[at] > ask.size()) return Status::Unknown("malformed process set change");
    std::vector<int> ranks(ask.begin() + at + 1, ask.begin() + at + 1 + ask[at]);
    at += 1 + ask[at];
    Status s = CheckRanks(ranks, size);
    if (!s.ok()) return s;
    out->sets.push_back(std::move(ranks));
  }
  if (at_ids) {
    if (at >= ask.size()) return Status::Unknown("malformed process set change");
    out->next_id = static_cast<int32_t>(ask[at]);
  }
  return Status::OK();
}

}  // namespace tf_ring
