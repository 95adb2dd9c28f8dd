// Host arrays through the buffer protocol, CUDA arrays through DLPack.
#include "python/array_view.h"

#include <string>

namespace tf_ring {
namespace python {

namespace {

// The DLPack ABI (v0.x "dltensor" capsules), only the fields read here.
struct DlDevice {
  int32_t device_type;  // 1: CPU, 2: CUDA
  int32_t device_id;
};
struct DlDataType {
  uint8_t code, bits;
  uint16_t lanes;
};
struct DlTensor {
  void* data;
  DlDevice device;
  int32_t ndim;
  DlDataType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
};
struct DlManagedTensor {
  DlTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DlManagedTensor*);
};
constexpr int32_t kDlCuda = 2;

bool RowMajor(const DlTensor& t) {
  if (!t.strides) return true;
  // An empty array has no layout: frameworks report arbitrary strides for it.
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 0) return true;
  }
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

}  // namespace

ArrayView HostArray(py::handle array, bool writable) {
  if (!PyObject_CheckBuffer(array.ptr())) {
    throw py::type_error(std::string("tf_ring_engine: a host array must support the buffer protocol "
                                     "(a NumPy array), got ") + Py_TYPE(array.ptr())->tp_name);
  }
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(array).request(writable);
  int64_t expected = info.itemsize;
  const bool empty = info.size == 0;  // no layout to check
  for (int d = static_cast<int>(info.ndim) - 1; d >= 0 && !empty; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expected) {
      throw py::value_error("tf_ring_engine: the array must be C-contiguous (np.ascontiguousarray)");
    }
    expected *= info.shape[d];
  }
  ArrayView view;
  view.data = info.ptr;
  view.shape.assign(info.shape.begin(), info.shape.end());
  return view;
}

ArrayView DeviceArray(py::handle array) {
  // The capsule only borrows the array's memory, which the caller keeps
  // alive until the collective is done; dropping it unconsumed releases it.
  // A capsule itself comes from the module's PyTorch fast path (see
  // _Array.exported): exported without __dlpack__'s Python-level stream
  // handshake, which the caller found unneeded (the producer is on the
  // legacy default stream already).
  py::object capsule;
  if (PyCapsule_CheckExact(array.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(array);
  } else if (py::hasattr(array, "__dlpack__")) {
    capsule = array.attr("__dlpack__")(py::arg("stream") = 1);
  } else {
    throw py::type_error(std::string("tf_ring_engine: a CUDA array must support DLPack (__dlpack__), got ") +
                         Py_TYPE(array.ptr())->tp_name);
  }
  auto* managed = static_cast<DlManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!managed) throw py::error_already_set();
  const DlTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDlCuda) {
    throw py::value_error("tf_ring_engine: the DLPack array is not in CUDA device memory");
  }
  if (!RowMajor(t)) throw py::value_error("tf_ring_engine: the tensor must be contiguous");
  ArrayView view;
  view.data = static_cast<char*>(t.data) + t.byte_offset;
  view.shape.assign(t.shape, t.shape + t.ndim);
  view.device = t.device.device_id;
  return view;
}

}  // namespace python
}  // namespace tf_ring
