// The coordinator's memory of failures: a name that failed reaches every
// rank that held it then and every rank that submits it later, and a rank's
// refusal fails only the run that cannot pair (the other ranks' match of
// the refused one). Kept apart from coordinator.cc, which matches requests
// into responses; crossed waits are in coordinator_crossed.cc.
#include <algorithm>

#include "common/negotiation/coordinator.h"

namespace tf_ring {

namespace {

Response ErrorResponse(const std::string& name, OpType op, DataType dtype, const std::string& error,
                       std::vector<int32_t> ranks) {
  Response resp;
  resp.op = op;
  resp.dtype = dtype;
  resp.names.push_back(name);
  resp.error = error;
  resp.only_ranks = std::move(ranks);
  return resp;
}

bool Any(const std::vector<bool>& v) { return std::find(v.begin(), v.end(), true) != v.end(); }

}  // namespace

std::vector<Response> Coordinator::FailPending(const std::vector<std::string>& names,
                                               const std::string& reason) {
  std::vector<Response> out;
  const std::vector<bool> nowhere(size_, false);
  for (const auto& name : names) {
    if (table_.count(name)) out.push_back(FailOne(name, reason, nowhere));
  }
  return out;
}

Response Coordinator::FailOne(const std::string& name, const std::string& error,
                              const std::vector<bool>& elsewhere) {
  auto it = table_.find(name);
  const Pending& p = it->second;
  FailedName later;
  later.error = error;
  later.owed.assign(size_, false);
  later.refusers.assign(size_, false);
  std::vector<int32_t> holders;
  for (int r = 0; r < size_; ++r) {
    if (p.present[r]) {
      holders.push_back(r);
      later.op = p.by_rank[r].op;
      later.dtype = p.by_rank[r].dtype;
    } else {
      later.owed[r] = !joined_[r] && !elsewhere[r];
    }
  }
  // Only the ranks that submitted it: a rank that holds the name but whose
  // request is still on its way gets its own error when the request comes.
  Response resp = ErrorResponse(name, later.op, later.dtype, error, std::move(holders));
  table_.erase(it);
  if (failed_.count(name)) AfterRun(name, &resp);  // a refusal waited for this run
  if (Any(later.owed) && !failed_.count(name)) Remember(name, std::move(later));
  return resp;
}

bool Coordinator::DeliverIfOwed(const Request& request) {
  auto it = failed_.find(request.name);
  if (it == failed_.end()) return false;
  FailedName& f = it->second;
  const int r = request.rank;
  if (f.refusers[r]) {
    // The refusing rank runs the name again: its refused run is behind it,
    // and this run pairs as usual (whoever still owed the error is spared).
    if (f.armed) Forget(request.name);
    return false;
  }
  if (!f.armed || !f.owed[r]) return false;
  f.owed[r] = false;
  decided_.push_back(ErrorResponse(request.name, request.op, request.dtype, f.error, {r}));
  if (!Any(f.owed)) Forget(request.name);
  return true;
}

void Coordinator::Refused(const Request& report) {
  const int r = report.rank;
  const std::string& name = report.name;
  auto pending = table_.find(name);
  // Its first run of the name may still wait here; the refused one is the next.
  const bool first_waits = pending != table_.end() && pending->second.present[r];
  auto it = failed_.find(name);
  if (it == failed_.end()) {
    FailedName f;
    f.error = "rank " + std::to_string(r) + " refused " + OpTypeName(report.op) + " of tensor '" +
              name + "' (" + report.local_error + "); this run of it on another rank would pair " +
              "with the refused one, which never comes, so it fails too. Run a name once at a " +
              "time on every rank (give collectives in flight together distinct names).";
    f.op = report.op;
    f.dtype = report.dtype;
    f.owed.assign(size_, true);
    f.refusers.assign(size_, false);
    f.armed = !first_waits;
    Remember(name, std::move(f));
    it = failed_.find(name);
  } else {
    it->second.armed = it->second.armed && !first_waits;
  }
  FailedName& f = it->second;
  f.refusers[r] = true;
  // Ranks that refused too have no run to pair with this one.
  for (int q = 0; q < size_; ++q) f.owed[q] = f.owed[q] && !f.refusers[q] && !joined_[q];
  if (!first_waits && pending != table_.end() && !pending->second.queued) {
    // The others already wait in the run this rank refused: it fails now.
    for (int q = 0; q < size_; ++q) {
      if (pending->second.present[q]) f.owed[q] = false;
    }
    const std::string error = f.error;
    decided_.push_back(FailOne(name, error, std::vector<bool>(size_, true)));
  }
  if (failed_.count(name) && !Any(failed_[name].owed)) Forget(name);
}

void Coordinator::AfterRun(const std::string& name, Response* resp) {
  auto it = failed_.find(name);
  if (it == failed_.end()) return;
  if (Any(it->second.refusers)) {
    it->second.armed = true;
    // Ranks must send their next run of it here, not match it in the cache.
    resp->uncached = true;
  }
}

void Coordinator::Remember(const std::string& name, FailedName failed) {
  if (failed_.count(name) == 0) {
    failed_order_.push_back(name);
    if (failed_order_.size() > kFailedNamesKept) {
      // The oldest goes; a rank still owed its error would wait for a stall.
      failed_.erase(failed_order_.front());
      failed_order_.erase(failed_order_.begin());
    }
  }
  failed_[name] = std::move(failed);
}

void Coordinator::Forget(const std::string& name) {
  failed_.erase(name);
  failed_order_.erase(std::remove(failed_order_.begin(), failed_order_.end(), name),
                      failed_order_.end());
}

std::vector<Response> Coordinator::TakeDecidedFailures() {
  std::vector<Response> out;
  out.swap(decided_);
  return out;
}

}  // namespace tf_ring
