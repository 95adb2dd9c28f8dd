#include "tensorflow/tensor_adapter.h"

#include "common/observability/stage_probe.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {
DeviceEntryHook g_device_entry_hook = nullptr;
}  // namespace

void SetDeviceEntryHook(DeviceEntryHook hook) { g_device_entry_hook = hook; }

absl::Status ToTfStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return absl::OkStatus();
    case StatusCode::kInvalidArgument: return absl::InvalidArgumentError(s.message());
    case StatusCode::kPrecondition: return absl::FailedPreconditionError(s.message());
    case StatusCode::kAborted: return absl::AbortedError(s.message());
    case StatusCode::kUnknown: return absl::UnknownError(s.message());
    case StatusCode::kResourceExhausted: return absl::ResourceExhaustedError(s.message());
    case StatusCode::kUnavailable: return absl::UnavailableError(s.message());
  }
  return absl::UnknownError(s.message());
}

bool ToEngineDtype(tf::DataType tf_dtype, DataType* out) {
  switch (tf_dtype) {
    case tf::DT_UINT8: *out = DataType::kUint8; return true;
    case tf::DT_INT8: *out = DataType::kInt8; return true;
    case tf::DT_INT32: *out = DataType::kInt32; return true;
    case tf::DT_INT64: *out = DataType::kInt64; return true;
    case tf::DT_HALF: *out = DataType::kFloat16; return true;
    case tf::DT_BFLOAT16: *out = DataType::kBFloat16; return true;
    case tf::DT_FLOAT: *out = DataType::kFloat32; return true;
    case tf::DT_DOUBLE: *out = DataType::kFloat64; return true;
    case tf::DT_BOOL: *out = DataType::kBool; return true;
    case tf::DT_UINT16: *out = DataType::kUint16; return true;
    case tf::DT_INT16: *out = DataType::kInt16; return true;
    default: return false;
  }
}

TensorEntry MakeEntry(tf::OpKernelContext* ctx, const std::string& name, OpType op,
                      tf::Tensor* output, tf::AsyncOpKernel::DoneCallback done) {
  return MakeEntryForInput(ctx, 0, name, op, output, std::move(done));
}

TensorEntry MakeEntryForInput(tf::OpKernelContext* ctx, int index, const std::string& name, OpType op,
                              tf::Tensor* output, tf::AsyncOpKernel::DoneCallback done) {
  const tf::Tensor& input = ctx->input(index);
  TensorEntry e;
  e.name = name;
  e.op = op;
  ToEngineDtype(input.dtype(), &e.dtype);
  for (int d = 0; d < input.dims(); ++d) e.shape.push_back(input.dim_size(d));
  e.input = input.tensor_data().data();
  e.output = output ? const_cast<char*>(output->tensor_data().data()) : nullptr;
  e.allocate_output = [ctx, index](int k, const std::vector<int64_t>& shape, void** data) {
    tf::TensorShape tf_shape;
    for (int64_t d : shape) tf_shape.AddDim(d);
    tf::Tensor* out = nullptr;
    absl::Status s = ctx->allocate_output(index + k, tf_shape, &out);
    if (!s.ok()) return Status::Unknown(std::string(s.message()));
    *data = const_cast<char*>(out->tensor_data().data());
    return Status::OK();
  };
  if (g_device_entry_hook) g_device_entry_hook(ctx, &e);
  // The engine stamps a host batch's completion itself (OperationManager::
  // Finish), before any hand-off to TensorFlow's threads.
  const bool on_device = e.device != kCpuDevice;
  e.done = [ctx, done, on_device](const Status& s) {
    if (on_device) StageProbe::Stamp(kProbeDone);
    if (!s.ok()) ctx->SetStatus(ToTfStatus(s));
    done();
  };
  return e;
}

}  // namespace tf_ring
