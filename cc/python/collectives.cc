// Collectives on NumPy (host) and DLPack CUDA arrays, for the engine-only
// module (tf_ring_engine: no TensorFlow). Outputs whose shape only the
// negotiation knows are allocated here and live as long as their Handle.
// The engine's entry holds its Handle, and the Handle holds the arrays it was
// given, so nothing the engine reads or writes is freed before it is done,
// whatever Python drops.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "common/engine.h"
#include "common/transport/device_transport.h"
#include "python/array_view.h"
#include "python/binding.h"

namespace tf_ring {
namespace python {

namespace {

// Python objects released on the engine's thread (which never holds the
// GIL) wait here until a thread with the GIL lets them go.
std::mutex g_released_mu;
std::vector<PyObject*> g_released;

void ReleaseLater(std::vector<PyObject*>* objects) {
  if (objects->empty()) return;
  if (Py_IsInitialized() && PyGILState_Check()) {
    for (PyObject* o : *objects) Py_DECREF(o);
  } else {
    std::lock_guard<std::mutex> lock(g_released_mu);
    g_released.insert(g_released.end(), objects->begin(), objects->end());
  }
  objects->clear();
}

// Called with the GIL held.
void DrainReleased() {
  std::vector<PyObject*> objects;
  {
    std::lock_guard<std::mutex> lock(g_released_mu);
    objects.swap(g_released);
  }
  for (PyObject* o : objects) Py_DECREF(o);
}

struct Output {
  void* data = nullptr;
  std::vector<int64_t> shape;
  bool on_device = false;
  std::vector<char> host;  // backing store of a host output
};

// One submitted collective.
class Handle {
 public:
  explicit Handle(int device) : device_(device) {}
  ~Handle() {
    // The last holder may be the engine's entry, destroyed on its thread.
    ReleaseLater(&kept_);
    // Only an entry the engine dropped unfinished (it never does) leaks here.
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) return;
    for (auto& kv : outputs_) {
      if (kv.second.on_device) FreeDeviceMemory(device_, kv.second.data);
    }
  }

  // True when done (raising RuntimeError with the engine's message when it
  // failed), False when not done within `timeout_s` (None: wait for ever).
  bool Wait(py::object timeout_s) {
    const bool forever = timeout_s.is_none();
    const double seconds = forever ? 0.0 : timeout_s.cast<double>();  // read while holding the GIL
    Status status;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mu_);
      if (forever) {
        cv_.wait(lock, [&] { return done_; });
      } else if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done_; })) {
        return false;
      }
      status = status_;
    }
    DrainReleased();
    RaiseIfError(status, ErrorClass::kRuntime);
    return true;
  }

  // Output `index` allocated by the engine: (bytes, shape) for host memory,
  // (device pointer, shape) for device memory; None when there is none.
  py::object GetOutput(int index) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = outputs_.find(index);
    if (it == outputs_.end() || !done_) return py::none();
    const Output& out = it->second;
    py::tuple shape = py::cast(out.shape);
    if (out.on_device) return py::make_tuple(reinterpret_cast<uintptr_t>(out.data), shape);
    return py::make_tuple(py::bytes(out.host.data(), out.host.size()), shape);
  }

  Status Allocate(int index, const std::vector<int64_t>& shape, int64_t bytes, bool host, void** data) {
    std::lock_guard<std::mutex> lock(mu_);
    Output& out = outputs_[index];
    out.shape = shape;
    if (host) {
      out.host.assign(static_cast<size_t>(bytes > 0 ? bytes : 0), 0);
      out.data = out.host.data();
      *data = out.data;
      return Status::OK();
    }
    out.on_device = true;
    Status s = AllocateDeviceMemory(device_, bytes, &out.data);
    *data = out.data;
    return s;
  }

  // Holds `array` (the caller's input or output, or its DLPack export) until
  // this handle goes. Called with the GIL held.
  void Keep(py::handle array) {
    if (array.is_none()) return;
    kept_.push_back(array.inc_ref().ptr());
  }

  void Finish(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  int device_;
  std::map<int, Output> outputs_;
  std::vector<PyObject*> kept_;
};

// Between group_begin and group_end, submissions collect here (per thread)
// and enter the engine together, like grouped_allreduce.
thread_local bool t_grouping = false;
thread_local int32_t t_group_set = 0;  // the process set of the group being built
thread_local std::vector<TensorEntry> t_group_entries;
thread_local std::vector<Request> t_group_requests;

ArrayView View(py::handle array, int device, bool writable) {
  return device < 0 ? HostArray(array, writable) : DeviceArray(array);
}

// `output` must be given for allreduce and broadcast (it may be `input`)
// and join (an int32 on the host); the other collectives allocate theirs.
std::shared_ptr<Handle> Submit(int op, int reduce_op, int dtype, const std::string& name, py::handle input,
                               py::handle output, int device, int root_rank, double prescale,
                               double postscale, const std::vector<int64_t>& splits, int32_t process_set) {
  if (op < 0 || op > static_cast<int>(OpType::kBarrier) || reduce_op < 0 ||
      reduce_op > static_cast<int>(ReduceOp::kProduct) || !IsValidDataType(static_cast<uint8_t>(dtype))) {
    throw py::value_error("tf_ring_engine.submit: op, reduce_op or dtype out of range");
  }
  if (device >= 0 && !DeviceSupportBuilt()) {
    // The device transport says so in its own words; DLPack is not needed to learn it.
    std::shared_ptr<void> unused;
    RaiseIfError(RecordReadyEvent(device, nullptr, &unused), ErrorClass::kRuntime);
  }
  const ArrayView in = View(input, device, false);
  // A device array in place (output is input): one DLPack export, not two
  // (each costs about 20 us). Host arrays still go through the writable check.
  const bool same_device_array = device >= 0 && output.is(input);
  void* out_data = output.is_none() ? nullptr : same_device_array ? in.data : View(output, device, true).data;
  DrainReleased();
  auto handle = std::make_shared<Handle>(device);
  handle->Keep(input);
  if (!output.is(input)) handle->Keep(output);

  Request req;
  req.op = static_cast<OpType>(op);
  req.reduce_op = static_cast<ReduceOp>(reduce_op);
  req.dtype = static_cast<DataType>(dtype);
  req.name = name;
  req.shape = in.shape;
  req.root_rank = root_rank;
  req.prescale = prescale;
  req.postscale = postscale;
  req.splits = splits;
  req.device = device < 0 ? -1 : device;
  req.enqueued_at = std::chrono::steady_clock::now();

  TensorEntry e;
  e.name = req.name;
  e.op = req.op;
  e.dtype = req.dtype;
  e.shape = req.shape;
  e.input = in.data;
  e.output = out_data;
  e.device = device < 0 ? kCpuDevice : device;
  if (device >= 0) {
    // DeviceArray asked the producer to order its work before the legacy stream.
    RaiseIfError(RecordReadyEvent(device, nullptr, &e.ready_event), ErrorClass::kRuntime);
  }
  const int64_t element = static_cast<int64_t>(DataTypeSize(e.dtype));
  // The entry owns the handle (and so the arrays and outputs) until the
  // engine destroys it: Python may drop its Pending at any time.
  const OpType kind = req.op;
  e.allocate_output = [handle, element, device, kind](int index, const std::vector<int64_t>& shape,
                                                      void** data) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    // Alltoall's received-splits output (index 1) is int32, written by the host.
    const bool splits_out = kind == OpType::kAlltoall && index == 1;
    return handle->Allocate(index, shape, count * (splits_out ? 4 : element), device < 0 || splits_out, data);
  };
  e.done = [handle](const Status& s) { handle->Finish(s); };

  if (t_grouping) {
    if (process_set != t_group_set) {
      throw py::value_error("tf_ring_engine: tensor '" + name + "' is for process set " +
                            std::to_string(process_set) + " but its group is for process set " +
                            std::to_string(t_group_set) + "; a group runs on one set");
    }
    t_group_entries.push_back(std::move(e));
    t_group_requests.push_back(std::move(req));
    return handle;
  }
  RaiseIfError(Engine::Get().Enqueue(std::move(e), std::move(req), process_set), ErrorClass::kRuntime);
  return handle;
}

void GroupBegin(int32_t process_set) {
  t_grouping = true;
  t_group_set = process_set;
  t_group_entries.clear();
  t_group_requests.clear();
}

// Enqueues everything submitted since group_begin in one step.
void GroupEnd() {
  t_grouping = false;
  Status s = Engine::Get().EnqueueGroup(std::move(t_group_entries), std::move(t_group_requests), t_group_set);
  t_group_entries.clear();
  t_group_requests.clear();
  RaiseIfError(s, ErrorClass::kRuntime);
}

}  // namespace

void RegisterCollectives(py::module_& m) {
  m.def("device_support", &DeviceSupportBuilt, "True when built with the CUDA/NCCL transport.");
  py::class_<Handle, std::shared_ptr<Handle>>(m, "Handle")
      .def("wait", &Handle::Wait, py::arg("timeout_s") = py::none())
      .def("output", &Handle::GetOutput, py::arg("index"));
  m.def("submit", &Submit, py::arg("op"), py::arg("reduce_op"), py::arg("dtype"), py::arg("name"),
        py::arg("input"), py::arg("output"), py::arg("device") = -1, py::arg("root_rank") = 0,
        py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
        py::arg("splits") = std::vector<int64_t>(), py::arg("process_set") = 0);
  m.def("group_begin", &GroupBegin, py::arg("process_set") = 0);
  m.def("group_end", &GroupEnd);
}

}  // namespace python
}  // namespace tf_ring
