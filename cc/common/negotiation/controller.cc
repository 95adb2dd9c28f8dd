#include "common/negotiation/controller.h"

#include <algorithm>
#include <cstdio>

#include "common/observability/logging.h"
#include "common/transport/peer_failure.h"

namespace tf_ring {

namespace {
// Layout of the vector every rank ANDs together each cycle: hit bits, then
// inverted invalidation bits (AND of inverted = OR), then one inverted flag
// word, so a single MPI_BAND allreduce answers all three questions.
constexpr uint64_t kFlagHasUncached = 1;
constexpr uint64_t kFlagShutdown = 2;
constexpr std::chrono::milliseconds kStallPoll(500);

template <typename F>
void ForEachBit(uint64_t word, size_t word_index, F fn) {
  while (word) {
    int b = __builtin_ctzll(word);
    fn(static_cast<uint32_t>(word_index * 64 + b));
    word &= word - 1;
  }
}
}  // namespace

Status Controller::RunCycle(std::vector<Request> new_requests, bool shutdown, ResponseList* out,
                            CycleCounts* counts, uint64_t* busy_sets) {
  const uint64_t my_busy = busy_sets ? *busy_sets : 0;
  if (busy_sets) *busy_sets = ~0ULL;  // unless the cache round below says better
  out->responses.clear();
  out->shutdown = false;
  const auto now = Coordinator::Clock::now();
  for (Request& r : new_requests) {
    waiting_.push_back(std::move(r));
    waiting_since_.push_back(now);
  }
  auto stamp_wait = [&](size_t i) {
    waiting_[i].waited_us =
        std::chrono::duration_cast<std::chrono::microseconds>(now - waiting_since_[i]).count();
  };

  std::vector<Request> to_send;
  std::vector<Response> from_cache;
  bool negotiate = true;
  if (!joined_mode_ && cache_.capacity() > 0) {
    const size_t words = (cache_.capacity() + 63) / 64;
    // One more inverted word before the flags: the callers' busy bits.
    std::vector<uint64_t> vec(2 * words + 2, 0);
    std::fill(vec.begin() + words, vec.end(), ~0ULL);
    vec[2 * words] = ~my_busy;
    std::vector<ResponseCache::Lookup> lookups(waiting_.size());
    std::vector<uint32_t> bits(waiting_.size(), 0);
    for (size_t i = 0; i < waiting_.size(); ++i) {
      if (!waiting_[i].local_error.empty()) {
        // A refusal goes to rank 0, and its name leaves every rank's cache,
        // so every run of it is matched there (the refused one's match fails).
        if (cache_.Find(waiting_[i], &bits[i]) != ResponseCache::Lookup::kMiss) {
          vec[words + bits[i] / 64] &= ~(1ULL << (bits[i] % 64));
        }
        lookups[i] = ResponseCache::Lookup::kMiss;
      } else {
        lookups[i] = cache_.Find(waiting_[i], &bits[i]);
      }
      if (lookups[i] == ResponseCache::Lookup::kHit && now - waiting_since_[i] > demote_after_) {
        lookups[i] = ResponseCache::Lookup::kInvalid;
      }
      const uint64_t mask = 1ULL << (bits[i] % 64);
      if (lookups[i] == ResponseCache::Lookup::kHit) vec[bits[i] / 64] |= mask;
      if (lookups[i] == ResponseCache::Lookup::kInvalid) vec[words + bits[i] / 64] &= ~mask;
      if (lookups[i] == ResponseCache::Lookup::kMiss) vec.back() &= ~kFlagHasUncached;
    }
    // Rank 0 holding partly submitted tensors asks for a round trip now and
    // then, so its stall inspector runs even when every cycle hits the cache.
    if (mpi_->rank() == 0 && !coordinator_.empty() && now - last_negotiation_ > kStallPoll) {
      vec.back() &= ~kFlagHasUncached;
    }
    if (has_proposal_) vec.back() &= ~kFlagHasUncached;  // autotune has news for everyone
    if (shutdown) vec.back() &= ~kFlagShutdown;

    if (shm_round_ != nullptr && vec.size() <= ShmSegment::and_words_capacity()) {
      // A dead local peer: the engine stops for it, as below.
      if (!shm_round_->AllreduceAnd(vec.data(), vec.size())) return PeerLostStatus();
    } else {
      MPI_Request req;
      MPI_Iallreduce(MPI_IN_PLACE, vec.data(), static_cast<int>(vec.size()), MPI_UINT64_T, MPI_BAND,
                     mpi_->comm(), &req);
      // A lost rank (fault-tolerant mode only): the engine stops for it.
      if (MpiContext::Wait(&req) != MPI_SUCCESS) return PeerLostStatus();
    }
    if (busy_sets) *busy_sets = ~vec[2 * words];

    // Read the agreed bits straight from the vector: no per-slot arrays or
    // pass over the whole capacity, which a lone cache hit paid every cycle.
    auto invalidated = [&](uint32_t bit) { return !((vec[words + bit / 64] >> (bit % 64)) & 1); };
    auto ready = [&](uint32_t bit) {
      return ((vec[bit / 64] & vec[words + bit / 64]) >> (bit % 64)) & 1;
    };
    bool any_invalid = false;
    // Ready everywhere and still valid: run straight from the cache, in bit
    // order (the same on every rank).
    for (size_t w = 0; w < words; ++w) {
      ForEachBit(vec[w] & vec[words + w], w, [&](uint32_t bit) {
        from_cache.push_back(cache_.Get(bit));
        from_cache.back().from_cache = true;
        cache_.Touch(bit);
      });
    }
    for (size_t w = 0; w < words; ++w) {
      ForEachBit(~vec[words + w], w, [&](uint32_t bit) {
        if (bit < cache_.capacity()) {
          any_invalid = true;
          cache_.Erase(bit);
        }
      });
    }
    std::vector<Request> still_waiting;
    std::vector<Coordinator::Clock::time_point> still_since;
    for (size_t i = 0; i < waiting_.size(); ++i) {
      const bool hit = lookups[i] == ResponseCache::Lookup::kHit;
      if (hit && ready(bits[i])) continue;  // runs this cycle
      if (hit && !invalidated(bits[i])) {
        still_waiting.push_back(std::move(waiting_[i]));  // other ranks not there yet
        still_since.push_back(waiting_since_[i]);
      } else {
        stamp_wait(i);
        to_send.push_back(std::move(waiting_[i]));
      }
    }
    waiting_ = std::move(still_waiting);
    waiting_since_ = std::move(still_since);
    counts->cache_hits += static_cast<int64_t>(from_cache.size());
    negotiate = !(vec.back() & kFlagHasUncached) || !(vec.back() & kFlagShutdown) || any_invalid;
  } else {
    // Cache off, or some rank joined: joined ranks hold none of these
    // tensors, so the cache bits could never agree, and everything goes
    // through rank 0 until the join completes.
    for (size_t i = 0; i < waiting_.size(); ++i) stamp_wait(i);
    to_send = std::move(waiting_);
    waiting_.clear();
    waiting_since_.clear();
  }

  out->responses = std::move(from_cache);
  if (!negotiate) return Status::OK();

  RequestList mine;
  mine.shutdown = shutdown;
  for (const Request& r : to_send) {
    if (r.local_error.empty()) negotiating_[r.name] = r;
  }
  mine.requests = std::move(to_send);
  if (LogEnabled(LogLevel::kDebug)) {
    for (const Request& r : mine.requests) {
      Log(LogLevel::kDebug, std::string("negotiating ") + OpTypeName(r.op) + " of tensor '" + r.name +
                                "' (not in the response cache)");
    }
  }
  ResponseList agreed;
  Status status = Negotiate(mine, &agreed);
  if (status.code() == StatusCode::kUnavailable) return status;  // a lost rank: nothing agreed
  last_negotiation_ = now;
  counts->negotiations++;
  counts->cache_misses += static_cast<int64_t>(mine.requests.size());
  for (Response& resp : agreed.responses) {
    auto facts = arrivals_.find(resp.names[0]);
    if (facts != arrivals_.end()) {
      resp.arrived = std::move(facts->second.first);
      resp.waited_for = std::move(facts->second.second);
      arrivals_.erase(facts);
    }
    if (resp.is_error() || resp.uncached) {
      // Every rank drops the name from its cache alike, so a rank that holds
      // it as a cache hit, or submits it later, asks rank 0 (which may owe
      // it this error) instead of waiting for the others' bits.
      for (const std::string& name : resp.names) cache_.EraseName(name);
    }
    if (!resp.applies_to(mpi_->rank())) continue;  // another rank's error
    for (const std::string& name : resp.names) {
      auto it = negotiating_.find(name);
      if (it == negotiating_.end()) continue;
      // Joined-mode responses describe a moment, not a steady state: never cached.
      if (!resp.is_error() && !resp.uncached && resp.names.size() == 1 &&
          !resp.has_joined_ranks() && resp.op != OpType::kJoin) {
        cache_.Put(resp, it->second);
      }
      negotiating_.erase(it);
    }
    out->responses.push_back(std::move(resp));
  }
  if (cache_.thrashing()) AdaptCache();
  out->shutdown = agreed.shutdown;
  out->shutdown_reason = agreed.shutdown_reason;
  out->shutdown_ranks = agreed.shutdown_ranks;
  out->joined_mode = joined_mode_ = agreed.joined_mode;
  out->has_params = agreed.has_params;
  out->params_settled = agreed.params_settled;
  out->fusion_threshold = agreed.fusion_threshold;
  out->cycle_time_us = agreed.cycle_time_us;
  return status;
}

Status Controller::Negotiate(const RequestList& mine, ResponseList* out) {
  const MPI_Comm comm = mpi_->comm();
  const int size = mpi_->size();
  const bool is_root = mpi_->rank() == 0;

  std::vector<char> sent = mine.Serialize();
  int length = static_cast<int>(sent.size());
  std::vector<int> lengths(is_root ? size : 0);
  MPI_Request req;
  MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm, &req);
  if (MpiContext::Wait(&req) != MPI_SUCCESS) return PeerLostStatus();

  std::vector<int> displs(is_root ? size : 0);
  std::vector<char> gathered;
  if (is_root) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = total;
      total += lengths[r];
    }
    gathered.resize(total);
  }
  MPI_Igatherv(sent.data(), length, MPI_BYTE, gathered.data(), lengths.data(), displs.data(),
               MPI_BYTE, 0, comm, &req);
  if (MpiContext::Wait(&req) != MPI_SUCCESS) return PeerLostStatus();

  std::vector<char> reply;
  int reply_length = 0;
  Status status;
  if (is_root) {
    std::vector<RequestList> all(size);
    for (int r = 0; r < size && status.ok(); ++r) {
      if (!RequestList::Parse(gathered.data() + displs[r], lengths[r], &all[r])) {
        status = Status::Unknown("malformed negotiation message from rank " + std::to_string(r) +
                                 "; are all ranks running the same tf_ring build?");
      }
    }
    ResponseList responses;
    if (status.ok()) {
      responses = Coordinate(all);
    } else {
      responses.shutdown = true;  // cannot trust the exchange: stop everyone
    }
    reply = responses.Serialize();
    reply_length = static_cast<int>(reply.size());
  }
  MPI_Ibcast(&reply_length, 1, MPI_INT, 0, comm, &req);
  if (MpiContext::Wait(&req) != MPI_SUCCESS) return PeerLostStatus();
  reply.resize(reply_length);
  MPI_Ibcast(reply.data(), reply_length, MPI_BYTE, 0, comm, &req);
  if (MpiContext::Wait(&req) != MPI_SUCCESS) return PeerLostStatus();

  if (!ResponseList::Parse(reply.data(), reply.size(), out)) {
    return Status::Unknown("malformed response list from the coordinator");
  }
  return status;
}

ResponseList Controller::Coordinate(const std::vector<RequestList>& all) {
  ResponseList out;
  // One timestamp per negotiation: ranks that arrive together tie.
  const auto now = Coordinator::Clock::now();
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].shutdown) {
      out.shutdown = true;
      out.shutdown_ranks.push_back(static_cast<int32_t>(r));
    }
    for (Request req : all[r].requests) {
      req.rank = static_cast<int32_t>(r);  // trust the transport, not the payload
      coordinator_.Add(req, now);
    }
  }
  out.responses = coordinator_.TakeReady();
  // Failed names owed to ranks that submitted them late, and the runs a
  // refusal leaves without a partner; then ranks that wait crosswise.
  for (Response& r : coordinator_.TakeDecidedFailures()) out.responses.push_back(std::move(r));
  if (stall_.crossed_seconds > 0) {
    const std::chrono::duration<double> after(stall_.crossed_seconds);
    for (Response& r : coordinator_.TakeCrossedWaits(after, now)) out.responses.push_back(std::move(r));
  }
  for (const Response& resp : out.responses) {
    arrivals_[resp.names[0]] = std::make_pair(resp.arrived, resp.waited_for);
    // A stall that ended: a later stall of the same name warns afresh.
    if (!last_warned_.empty()) last_warned_.erase(resp.names[0]);
  }
  out.joined_mode = coordinator_.joined_mode();
  if (has_proposal_) {
    out.has_params = true;
    out.params_settled = proposal_settled_;
    out.fusion_threshold = proposal_.fusion_threshold;
    out.cycle_time_us = proposal_.cycle_time_us;
    has_proposal_ = false;
  }
  InspectStalls(&out);
  return out;
}

void Controller::AdaptCache() {
  const size_t capacity = cache_.capacity();
  if (cache_limit_ > capacity) {
    const size_t grown = std::min(cache_limit_, 2 * capacity);
    cache_.Grow(grown);
    if (mpi_->rank() == 0) {
      Log(LogLevel::kInfo, scope_ + "the response cache grew from " + std::to_string(capacity) +
                               " to " + std::to_string(grown) + " entries: collectives evicted "
                               "from it came back (each iteration of a loop counts as a name). "
                               "TF_RING_CACHE_CAPACITY sets its size (and stops it growing).");
    }
    return;
  }
  cache_.Grow(capacity);  // same size: only forgets the thrashing, so this runs once
  if (cache_warned_ || mpi_->rank() != 0) return;
  cache_warned_ = true;
  Log(LogLevel::kWarning,
      scope_ + "the response cache (" + std::to_string(capacity) + " entries) is smaller than "
               "the collectives this job cycles through: collectives evicted from it came back, "
               "so each negotiates through rank 0 again. Each iteration of a loop counts as a "
               "name (a Keras steps_per_execution of K runs K names per gradient). Raise "
               "TF_RING_CACHE_CAPACITY to at least the collectives of one call of the function.");
}

void Controller::InspectStalls(ResponseList* out) {
  if (stall_.check_seconds <= 0 && stall_.shutdown_seconds <= 0) return;
  const auto now = Coordinator::Clock::now();
  auto ranks = [this](const std::vector<int>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
      const int r = rank_labels_.empty() ? v[i] : rank_labels_[v[i]];
      s += (i ? ", " : "") + std::to_string(r);
    }
    return s;
  };
  auto describe = [&](const StalledTensor& t) {
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%.1f", t.waited_seconds);
    return "tensor '" + t.name + "' has waited " + waited + " s: submitted by rank(s) " +
           ranks(t.ready_ranks) + ", missing on rank(s) " + ranks(t.missing_ranks);
  };
  if (stall_.check_seconds > 0) {
    const std::chrono::duration<double> period(stall_.check_seconds);
    for (const StalledTensor& t : coordinator_.Stalled(period, now)) {
      auto it = last_warned_.find(t.name);
      if (it != last_warned_.end() && now - it->second < period) continue;
      last_warned_[t.name] = now;
      Log(LogLevel::kWarning, scope_ + "stall: " + describe(t) +
                                  ". One or more ranks may have skipped this collective, "
                                  "be stuck, or have stopped early (see join()).");
    }
  }
  if (stall_.shutdown_seconds > 0) {
    std::vector<StalledTensor> stalled =
        coordinator_.Stalled(std::chrono::duration<double>(stall_.shutdown_seconds), now);
    if (stalled.empty()) return;
    std::string reason = scope_ + "stalled collective: " + describe(stalled[0]) +
                         (stalled.size() > 1 ? " (and " + std::to_string(stalled.size() - 1) +
                                                   " more)" : std::string()) +
                         ". TF_RING_STALL_SHUTDOWN_TIME_SECONDS turned the stall into this error "
                         "on every rank; make every rank run the same collectives.";
    std::vector<std::string> names;
    for (const auto& t : stalled) names.push_back(t.name);
    for (Response& r : coordinator_.FailPending(names, reason)) out->responses.push_back(std::move(r));
    out->shutdown = true;
    out->shutdown_reason = reason;
  }
}

}  // namespace tf_ring
