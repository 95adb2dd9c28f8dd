// Graph-level definitions of the tf_ring ops: attributes, dtypes and shapes.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

// Every collective is stateful: Grappler must never constant-fold it (that
// would run it at optimization time on one rank), merge two of them, or
// prune one that other ranks still run. tf_ring/_library.py keeps
// tf.function's automatic control dependencies from serializing them.

namespace tf_ring {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {
// Output shape: same rank as the input, first dimension unknown.
absl::Status FirstDimUnknown(InferenceContext* c) {
  ShapeHandle in = c->input(0);
  if (!c->RankKnown(in)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  ShapeHandle rest;
  TF_RETURN_IF_ERROR(c->Subshape(in, 1, &rest));
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(c->UnknownDim()), rest, &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

// FirstDimUnknown for every input of a list op, output i from input i.
absl::Status EachFirstDimUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) {
    ShapeHandle in = c->input(i);
    if (!c->RankKnown(in)) {
      c->set_output(i, c->UnknownShape());
      continue;
    }
    ShapeHandle rest, out;
    TF_RETURN_IF_ERROR(c->Subshape(in, 1, &rest));
    TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(c->UnknownDim()), rest, &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}
}  // namespace

REGISTER_OP("TfRingAllreduce")
    .Attr("T: {uint8, int8, uint16, int16, float16, bfloat16, float32, float64, int32, int64}")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("Reduces `tensor` across all ranks (tf_ring).");

REGISTER_OP("TfRingAllgather")
    .Attr("T: {uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64, bool}")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Output("gathered: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown)
    .Doc("Concatenates `tensor` from all ranks along the first dimension, in rank order.");

REGISTER_OP("TfRingBroadcast")
    .Attr("T: {uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64, bool}")
    .Attr("root_rank: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("Returns the root rank's `tensor` on every rank.");

REGISTER_OP("TfRingGroupedAllreduce")
    .Attr("T: list({uint8, int8, uint16, int16, float16, bfloat16, float32, float64, int32, int64}) >= 0")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("eager: bool = false")
    .Input("tensors: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Reduces every tensor of the list across all ranks in one negotiation (tf_ring).");

REGISTER_OP("TfRingGroupedAllgather")
    .Attr("T: list({uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64, "
          "bool}) >= 0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("eager: bool = false")
    .Input("tensors: T")
    .Output("gathered: T")
    .SetIsStateful()
    .SetShapeFn(EachFirstDimUnknown)
    .Doc("Allgathers every tensor of the list in one negotiation (tf_ring).");

REGISTER_OP("TfRingGroupedReducescatter")
    .Attr("T: list({uint8, int8, uint16, int16, float16, bfloat16, float32, float64, int32, "
          "int64}) >= 0")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("eager: bool = false")
    .Input("tensors: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(EachFirstDimUnknown)
    .Doc("Reducescatters every tensor of the list in one negotiation (tf_ring).");

REGISTER_OP("TfRingAlltoall")
    .Attr("T: {uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64, bool}")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("received: T")
    .Output("received_splits: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(FirstDimUnknown(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Sends splits[j] rows of `tensor` to rank j; returns the rows received, in rank "
         "order, and how many came from each rank. Empty splits split evenly.");

REGISTER_OP("TfRingReducescatter")
    .Attr("T: {uint8, int8, uint16, int16, float16, bfloat16, float32, float64, int32, int64}")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("eager: bool = false")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown)
    .Doc("Reduces `tensor` across ranks and returns this rank's block of rows "
         "(earlier ranks get the extra rows when they do not divide evenly).");

REGISTER_OP("TfRingTopology")
    .Attr("which: {'rank', 'size', 'local_rank', 'local_size', 'process_set_included'}")
    .Attr("process_set_id: int = 0")
    .Output("value: int32")
    .SetIsStateful()  // read when run, never folded into a constant at graph build
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("This process's rank, size, local rank or local size, or whether it belongs to "
         "the process set (size and inclusion of `process_set_id`), read when the op runs.");

REGISTER_OP("TfRingBarrier")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Finishes once every rank has reached the barrier.");

REGISTER_OP("TfRingJoin")
    .Output("last_joined_rank: int32")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Tells the other ranks this one has no more data; returns, once every rank has "
         "joined, the rank that joined last.");

}  // namespace tf_ring
