#include "common/base/message.h"

#include "common/base/wire.h"

namespace tf_ring {

namespace {
// Bumped whenever a field changes so that mixed builds fail loudly.
constexpr uint32_t kWireVersion = 9;

void WriteRequest(const Request& r, ByteWriter* w) {
  w->Put<int32_t>(r.rank);
  w->Put<uint8_t>(static_cast<uint8_t>(r.op));
  w->Put<uint8_t>(static_cast<uint8_t>(r.reduce_op));
  w->Put<uint8_t>(static_cast<uint8_t>(r.dtype));
  w->PutString(r.name);
  w->PutVector(r.shape);
  w->Put<int32_t>(r.root_rank);
  w->Put<double>(r.prescale);
  w->Put<double>(r.postscale);
  w->PutVector(r.splits);
  w->Put<int64_t>(r.waited_us);
  w->Put<int32_t>(r.device);
  w->Put<uint8_t>(r.static_shape ? 1 : 0);
  w->PutString(r.local_error);
  w->Put<uint8_t>(static_cast<uint8_t>((r.blocks ? 1 : 0) | (r.in_loop ? 2 : 0)));
}

bool ReadRequest(ByteReader* rd, Request* r) {
  r->rank = rd->Get<int32_t>();
  uint8_t op = rd->Get<uint8_t>();
  uint8_t reduce_op = rd->Get<uint8_t>();
  uint8_t dtype = rd->Get<uint8_t>();
  r->name = rd->GetString();
  r->shape = rd->GetVector<int64_t>();
  r->root_rank = rd->Get<int32_t>();
  r->prescale = rd->Get<double>();
  r->postscale = rd->Get<double>();
  r->splits = rd->GetVector<int64_t>();
  r->waited_us = rd->Get<int64_t>();
  r->device = rd->Get<int32_t>();
  r->static_shape = rd->Get<uint8_t>() != 0;
  r->local_error = rd->GetString();
  const uint8_t flags = rd->Get<uint8_t>();
  r->blocks = (flags & 1) != 0;
  r->in_loop = (flags & 2) != 0;
  if (op > static_cast<uint8_t>(OpType::kBarrier) ||
      reduce_op > static_cast<uint8_t>(ReduceOp::kAdasum) || !IsValidDataType(dtype)) {
    return false;
  }
  r->op = static_cast<OpType>(op);
  r->reduce_op = static_cast<ReduceOp>(reduce_op);
  r->dtype = static_cast<DataType>(dtype);
  return rd->ok();
}

void WriteResponse(const Response& r, ByteWriter* w) {
  w->Put<uint8_t>(static_cast<uint8_t>(r.op));
  w->Put<uint8_t>(static_cast<uint8_t>(r.reduce_op));
  w->Put<uint8_t>(static_cast<uint8_t>(r.dtype));
  w->Put<uint32_t>(static_cast<uint32_t>(r.names.size()));
  for (const auto& n : r.names) w->PutString(n);
  w->PutString(r.error);
  w->Put<int32_t>(r.root_rank);
  w->Put<double>(r.prescale);
  w->Put<double>(r.postscale);
  w->PutVector(r.sizes);
  w->Put<int32_t>(r.contributors);
  w->PutVector(r.shapes);
  w->Put<uint8_t>(static_cast<uint8_t>((r.gpu ? 1 : 0) | (r.uncached ? 2 : 0)));
  w->PutVector(r.only_ranks);
}

bool ReadResponse(ByteReader* rd, Response* r) {
  uint8_t op = rd->Get<uint8_t>();
  uint8_t reduce_op = rd->Get<uint8_t>();
  uint8_t dtype = rd->Get<uint8_t>();
  uint32_t n = rd->Get<uint32_t>();
  for (uint32_t i = 0; i < n && rd->ok(); ++i) r->names.push_back(rd->GetString());
  r->error = rd->GetString();
  r->root_rank = rd->Get<int32_t>();
  r->prescale = rd->Get<double>();
  r->postscale = rd->Get<double>();
  r->sizes = rd->GetVector<int64_t>();
  r->contributors = rd->Get<int32_t>();
  r->shapes = rd->GetVector<int64_t>();
  const uint8_t flags = rd->Get<uint8_t>();
  r->gpu = (flags & 1) != 0;
  r->uncached = (flags & 2) != 0;
  r->only_ranks = rd->GetVector<int32_t>();
  if (op > static_cast<uint8_t>(OpType::kBarrier) ||
      reduce_op > static_cast<uint8_t>(ReduceOp::kAdasum) || !IsValidDataType(dtype)) {
    return false;
  }
  r->op = static_cast<OpType>(op);
  r->reduce_op = static_cast<ReduceOp>(reduce_op);
  r->dtype = static_cast<DataType>(dtype);
  return rd->ok();
}
}  // namespace

const char* OpTypeName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kJoin: return "join";
    case OpType::kBarrier: return "barrier";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kAverage: return "Average";
    case ReduceOp::kMin: return "Min";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kProduct: return "Product";
    case ReduceOp::kAdasum: return "Adasum";
  }
  return "unknown";
}

bool Response::applies_to(int rank) const {
  if (only_ranks.empty()) return true;
  for (int32_t r : only_ranks) {
    if (r == rank) return true;
  }
  return false;
}

int64_t Request::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<char> RequestList::Serialize() const {
  ByteWriter w;
  w.Put<uint32_t>(kWireVersion);
  w.Put<uint8_t>(shutdown ? 1 : 0);
  w.Put<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const auto& r : requests) WriteRequest(r, &w);
  return std::move(w.bytes());
}

bool RequestList::Parse(const char* data, size_t size, RequestList* out) {
  ByteReader rd(data, size);
  if (rd.Get<uint32_t>() != kWireVersion) return false;
  out->shutdown = rd.Get<uint8_t>() != 0;
  uint32_t n = rd.Get<uint32_t>();
  out->requests.clear();
  for (uint32_t i = 0; i < n && rd.ok(); ++i) {
    Request r;
    if (!ReadRequest(&rd, &r)) return false;
    out->requests.push_back(std::move(r));
  }
  return rd.ok() && rd.at_end();
}

std::vector<char> ResponseList::Serialize() const {
  ByteWriter w;
  w.Put<uint32_t>(kWireVersion);
  w.Put<uint8_t>(shutdown ? 1 : 0);
  w.PutString(shutdown_reason);
  w.PutVector(shutdown_ranks);
  w.Put<uint8_t>(joined_mode ? 1 : 0);
  w.Put<uint8_t>(static_cast<uint8_t>((has_params ? 1 : 0) | (params_settled ? 2 : 0)));
  w.Put<int64_t>(fusion_threshold);
  w.Put<int64_t>(cycle_time_us);
  w.Put<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const auto& r : responses) WriteResponse(r, &w);
  return std::move(w.bytes());
}

bool ResponseList::Parse(const char* data, size_t size, ResponseList* out) {
  ByteReader rd(data, size);
  if (rd.Get<uint32_t>() != kWireVersion) return false;
  out->shutdown = rd.Get<uint8_t>() != 0;
  out->shutdown_reason = rd.GetString();
  out->shutdown_ranks = rd.GetVector<int32_t>();
  out->joined_mode = rd.Get<uint8_t>() != 0;
  const uint8_t params = rd.Get<uint8_t>();
  out->has_params = (params & 1) != 0;
  out->params_settled = (params & 2) != 0;
  out->fusion_threshold = rd.Get<int64_t>();
  out->cycle_time_us = rd.Get<int64_t>();
  uint32_t n = rd.Get<uint32_t>();
  out->responses.clear();
  for (uint32_t i = 0; i < n && rd.ok(); ++i) {
    Response r;
    if (!ReadResponse(&rd, &r)) return false;
    out->responses.push_back(std::move(r));
  }
  return rd.ok() && rd.at_end();
}

}  // namespace tf_ring
