#include "xla_ops/ffi_collective.h"

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/engine.h"
#include "common/transport/device_transport.h"
#include "xla_ops/backend_config.h"

namespace tf_ring {
namespace xla_ops {

namespace ffi = ::xla::ffi;

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Waits for n engine callbacks and keeps the first error.
struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  int remaining;
  Status status = Status::OK();
  explicit Completion(int n) : remaining(n) {}
  void Done(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok() && status.ok()) status = s;
    if (--remaining == 0) cv.notify_all();
  }
  Status Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return remaining == 0; });
    return status;
  }
};

// The engine's error as the same TensorFlow error class the non-XLA kernels
// raise (an InvalidArgumentError stays one inside jit_compile).
ffi::Error ToFfiError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return ffi::Error::Success();
    case StatusCode::kInvalidArgument: return ffi::Error(ffi::ErrorCode::kInvalidArgument, s.message());
    case StatusCode::kPrecondition: return ffi::Error(ffi::ErrorCode::kFailedPrecondition, s.message());
    case StatusCode::kAborted: return ffi::Error(ffi::ErrorCode::kAborted, s.message());
    case StatusCode::kResourceExhausted:
      return ffi::Error(ffi::ErrorCode::kResourceExhausted, s.message());
    case StatusCode::kUnavailable: return ffi::Error(ffi::ErrorCode::kUnavailable, s.message());
    case StatusCode::kUnknown: break;
  }
  return ffi::Error(ffi::ErrorCode::kUnknown, s.message());
}

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// For outputs XLA sized at compile time: the engine's agreed shape must be
// the compiled one (the coordinator checked the ranks agree on it), and
// alltoall's received splits (output 1) go to `splits`, since the compiled
// program has them as a constant.
decltype(TensorEntry::allocate_output) StaticOutput(const std::string& name, OpType op, void* data,
                                     std::vector<int64_t> dims, std::vector<int32_t>* splits) {
  return [name, op, data, dims, splits](int index, const std::vector<int64_t>& shape,
                                        void** out) {
    if (index == 1 && op == OpType::kAlltoall && shape.size() == 1) {
      splits->assign(shape[0], 0);
      *out = splits->data();
      return Status::OK();
    }
    if (index != 0 || shape != dims) {
      return Status::InvalidArgument(
          std::string(OpTypeName(op)) + " of tensor '" + name + "' inside jit_compile: the engine's " +
          "output shape " + DimsText(shape) + " is not the " + DimsText(dims) + " XLA compiled " +
          "(did a rank join(), or the process set change size, after compiling?). Call " +
          OpTypeName(op) + " outside jit_compile for this case.");
    }
    *out = data;
    return Status::OK();
  };
}

}  // namespace

ffi::Error RunCollective(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view text,
                         const XlaDevice* device) {
  BackendConfig config;
  std::string error;
  if (!DecodeBackendConfig(std::string(text), &config, &error))
    return ffi::Error::InvalidArgument(error);
  // The last operand and result are the call chain (xla_kernels.cc), no tensor.
  const int n = static_cast<int>(args.size()) - 1;
  if (n < 0 || rets.size() != args.size())
    return ffi::Error::InvalidArgument("tf_ring: custom call without its chain operand");
  auto chain_out = rets.get<ffi::AnyBuffer>(n);
  if (chain_out.has_error()) return chain_out.error();
  if (device) {
    Status cleared = device->clear_chain((*chain_out)->untyped_data());
    if (!cleared.ok()) return ToFfiError(cleared);
  } else {
    *static_cast<int32_t*>((*chain_out)->untyped_data()) = 0;
  }
  if (n == 0) return ffi::Error::Success();
  const OpType op = static_cast<OpType>(std::atoi(config["op"].c_str()));
  const std::vector<std::string> dtypes = Split(config["dtypes"]);
  if (static_cast<int>(dtypes.size()) != n)
    return ffi::Error::InvalidArgument("tf_ring: custom call for '" + config["name"] +
                                       "' has mismatched operand/result/dtype counts");
  const bool static_shape = config["static"] == "1";
  Completion completion(n);
  std::vector<std::vector<int32_t>> splits(n);  // alltoall's received splits, unused by XLA
  std::vector<TensorEntry> entries;
  std::vector<Request> requests;
  for (int i = 0; i < n; ++i) {
    auto in = args.get<ffi::AnyBuffer>(i);
    auto out = rets.get<ffi::AnyBuffer>(i);
    if (in.has_error()) return in.error();
    if (out.has_error()) return out.error();
    const std::string name = n == 1 && config["grouped"] != "1"
                                 ? config["name"]
                                 : config["name"] + "." + std::to_string(i);
    TensorEntry e;
    e.name = name;
    e.op = op;
    e.dtype = static_cast<DataType>(std::atoi(dtypes[i].c_str()));
    for (int64_t d : in->dimensions()) e.shape.push_back(d);
    e.input = in->untyped_data();
    if (static_shape) {
      std::vector<int64_t> dims((*out)->dimensions().begin(), (*out)->dimensions().end());
      e.allocate_output = StaticOutput(name, op, (*out)->untyped_data(), dims, &splits[i]);
    } else {
      e.output = (*out)->untyped_data();
    }
    if (device) {
      // The engine's NCCL stream waits for XLA's stream to have produced
      // the input; the call returns once the collective finished, so XLA's
      // later work on its stream sees the output.
      e.device = device->ordinal;
      Status ready = RecordReadyEvent(device->ordinal, device->stream, &e.ready_event);
      if (!ready.ok()) return ToFfiError(ready);
    }
    e.done = [&completion](const Status& s) { completion.Done(s); };
    Request r;
    r.op = op;
    r.name = name;
    r.dtype = e.dtype;
    r.shape = e.shape;
    r.device = e.device;
    r.reduce_op = static_cast<ReduceOp>(std::atoi(config["reduce_op"].c_str()));
    r.prescale = std::strtof(config["prescale"].c_str(), nullptr);
    r.postscale = std::strtof(config["postscale"].c_str(), nullptr);
    if (config.count("root")) r.root_rank = std::atoi(config["root"].c_str());
    r.static_shape = static_shape;
    r.blocks = true;  // this call returns only when the collective is done
    if (op == OpType::kAlltoall) {
      // The kernel compiled only an equal split.
      const int size = static_cast<int>(std::atoi(config["set_size"].c_str()));
      if (size > 0 && !r.shape.empty()) r.splits.assign(size, r.shape[0] / size);
    }
    entries.push_back(std::move(e));
    requests.push_back(std::move(r));
  }
  Status s = Engine::Get().EnqueueGroup(std::move(entries), std::move(requests),
                                        std::atoi(config["process_set"].c_str()));
  if (!s.ok()) return ToFfiError(s);
  return ToFfiError(completion.Wait());
}


}  // namespace xla_ops
}  // namespace tf_ring
