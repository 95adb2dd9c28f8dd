// C entry points that submit collectives on raw buffers, for bindings with
// no framework of their own (tf_ring_engine, the engine-only Python module
// used on machines without TensorFlow). Buffers are host memory (device -1)
// or CUDA device memory (device >= 0, with the producer's stream). Outputs
// whose shape only the negotiation knows are allocated here and freed by
// tf_ring_release.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/c_api/c_api_message.h"
#include "common/transport/device_transport.h"
#include "common/engine.h"

using tf_ring::CopyMessage;
using tf_ring::DataType;
using tf_ring::Engine;
using tf_ring::OpType;
using tf_ring::ReduceOp;
using tf_ring::Request;
using tf_ring::Status;
using tf_ring::TensorEntry;

namespace {

struct Output {
  void* data = nullptr;
  std::vector<int64_t> shape;
  bool on_device = false;
  std::vector<char> host;  // backing store of a host output
};

// One submitted collective, until Python releases it.
struct Handle {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  int device = tf_ring::kCpuDevice;
  std::map<int, Output> outputs;  // engine-allocated outputs by index
};

std::mutex g_mu;
std::map<int64_t, std::shared_ptr<Handle>> g_handles;
int64_t g_next_handle = 1;

// Between tf_ring_group_begin and _end, submissions collect here (per
// thread) and enter the engine together, like grouped_allreduce.
thread_local bool t_grouping = false;
thread_local std::vector<TensorEntry> t_group_entries;
thread_local std::vector<Request> t_group_requests;

std::shared_ptr<Handle> Find(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_handles.find(id);
  return it == g_handles.end() ? nullptr : it->second;
}

}  // namespace

extern "C" {

int tf_ring_device_support() { return tf_ring::DeviceSupportBuilt() ? 1 : 0; }

// Returns a handle (> 0), or 0 with the reason in `error`. `op`, `reduce_op`
// and `dtype` take the engine's enum values. `output` must be given for
// allreduce and broadcast (it may equal `input`) and join (an int32 on the
// host); allgather, reducescatter and alltoall allocate theirs. `stream` is
// the producer's cudaStream_t for device tensors (null: legacy stream).
int64_t tf_ring_submit(int op, int reduce_op, int dtype, const char* name, const int64_t* shape, int ndims,
                       const void* input, void* output, int device, void* stream, int root_rank,
                       double prescale, double postscale, const int64_t* splits, int nsplits, char* error,
                       int error_len) {
  if (op < 0 || op > static_cast<int>(OpType::kBarrier) || reduce_op < 0 ||
      reduce_op > static_cast<int>(ReduceOp::kProduct) || !tf_ring::IsValidDataType(static_cast<uint8_t>(dtype))) {
    CopyMessage("tf_ring_submit: op, reduce_op or dtype out of range", error, error_len);
    return 0;
  }
  auto handle = std::make_shared<Handle>();
  handle->device = device;
  Request req;
  req.op = static_cast<OpType>(op);
  req.reduce_op = static_cast<ReduceOp>(reduce_op);
  req.dtype = static_cast<DataType>(dtype);
  req.name = name ? name : "";
  req.shape.assign(shape, shape + ndims);
  req.root_rank = root_rank;
  req.prescale = prescale;
  req.postscale = postscale;
  if (splits && nsplits > 0) req.splits.assign(splits, splits + nsplits);
  req.device = device < 0 ? -1 : device;
  req.enqueued_at = std::chrono::steady_clock::now();

  TensorEntry e;
  e.name = req.name;
  e.op = req.op;
  e.dtype = req.dtype;
  e.shape = req.shape;
  e.input = input;
  e.output = output;
  e.device = device < 0 ? tf_ring::kCpuDevice : device;
  if (device >= 0) {
    Status s = tf_ring::RecordReadyEvent(device, stream, &e.ready_event);
    if (!s.ok()) {
      CopyMessage(s.message(), error, error_len);
      return 0;
    }
  }
  const size_t element = tf_ring::DataTypeSize(e.dtype);
  std::weak_ptr<Handle> weak = handle;
  const OpType kind = req.op;
  e.allocate_output = [weak, element, device, kind](int index, const std::vector<int64_t>& out_shape,
                                                    void** data) {
    auto h = weak.lock();
    if (!h) return Status::Unknown("the handle was released before its output was allocated");
    int64_t count = 1;
    for (int64_t d : out_shape) count *= d;
    Output& out = h->outputs[index];
    out.shape = out_shape;
    // Alltoall's received-splits output (index 1) is written by the host.
    const bool host = device < 0 || (kind == OpType::kAlltoall && index == 1);
    const int64_t bytes = count * static_cast<int64_t>(index == 1 && kind == OpType::kAlltoall ? 4 : element);
    if (host) {
      out.host.assign(static_cast<size_t>(bytes > 0 ? bytes : 1), 0);
      out.data = out.host.data();
      *data = out.data;
      return Status::OK();
    }
    out.on_device = true;
    Status s = tf_ring::AllocateDeviceMemory(device, bytes, &out.data);
    *data = out.data;
    return s;
  };
  e.done = [weak](const Status& s) {
    auto h = weak.lock();
    if (!h) return;
    std::lock_guard<std::mutex> lock(h->mu);
    h->status = s;
    h->done = true;
    h->cv.notify_all();
  };

  int64_t id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    id = g_next_handle++;
    g_handles[id] = handle;
  }
  if (t_grouping) {
    t_group_entries.push_back(std::move(e));
    t_group_requests.push_back(std::move(req));
    return id;
  }
  Status s = Engine::Get().Enqueue(std::move(e), std::move(req));
  if (!s.ok()) {
    CopyMessage(s.message(), error, error_len);
    std::lock_guard<std::mutex> lock(g_mu);
    g_handles.erase(id);
    return 0;
  }
  return id;
}

void tf_ring_group_begin() {
  t_grouping = true;
  t_group_entries.clear();
  t_group_requests.clear();
}

// Enqueues everything submitted since tf_ring_group_begin in one step.
int tf_ring_group_end(char* error, int error_len) {
  t_grouping = false;
  Status s = Engine::Get().EnqueueGroup(std::move(t_group_entries), std::move(t_group_requests));
  t_group_entries.clear();
  t_group_requests.clear();
  if (!s.ok()) CopyMessage(s.message(), error, error_len);
  return s.ok() ? 0 : 1;
}

// 0: done and OK; 1: failed (reason in `error`); 2: not done within
// `timeout_s` (negative: wait forever); 3: no such handle.
int tf_ring_wait(int64_t id, double timeout_s, char* error, int error_len) {
  auto h = Find(id);
  if (!h) return 3;
  std::unique_lock<std::mutex> lock(h->mu);
  if (timeout_s < 0) {
    h->cv.wait(lock, [&] { return h->done; });
  } else if (!h->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return h->done; })) {
    return 2;
  }
  if (h->status.ok()) return 0;
  CopyMessage(h->status.message(), error, error_len);
  return 1;
}

// Output `index` allocated by the engine: its data pointer, shape (up to
// `max_dims`), and whether it is device memory. Returns the number of
// dimensions, or -1 when there is no such output.
int tf_ring_output(int64_t id, int index, void** data, int64_t* shape, int max_dims, int* on_device) {
  auto h = Find(id);
  if (!h) return -1;
  std::lock_guard<std::mutex> lock(h->mu);
  auto it = h->outputs.find(index);
  if (it == h->outputs.end()) return -1;
  *data = it->second.data;
  *on_device = it->second.on_device ? 1 : 0;
  const int n = static_cast<int>(it->second.shape.size());
  for (int d = 0; d < n && d < max_dims; ++d) shape[d] = it->second.shape[d];
  return n;
}

// Frees the handle and the outputs the engine allocated for it. Only
// after completion: the engine may still write them before.
void tf_ring_release(int64_t id) {
  std::shared_ptr<Handle> h;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_handles.find(id);
    if (it == g_handles.end()) return;
    h = it->second;
    g_handles.erase(it);
  }
  std::lock_guard<std::mutex> lock(h->mu);
  for (auto& kv : h->outputs) {
    if (kv.second.on_device) tf_ring::FreeDeviceMemory(h->device, kv.second.data);
  }
  h->outputs.clear();
}

}  // extern "C"
