// The engine name of a collective run inside a loop of a graph. TensorFlow
// runs a lowered while loop's iterations in parallel (parallel_iterations),
// so one op can be in flight several times at once; each run gets the name
// of its op joined to its loop frame and iteration. Both are the same on
// every rank: the frame id is TensorFlow's hash of the loop's frame name and
// its parents' iterations, and loop_frames.cc names each frame after the
// collectives inside it (not after where TensorFlow inlined the loop), and
// iterations count from 0 in each frame.
#ifndef TF_RING_TENSORFLOW_LOOP_NAME_H_
#define TF_RING_TENSORFLOW_LOOP_NAME_H_

#include <cstdio>
#include <string>

#include "tensorflow/core/framework/control_flow.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_ring {

// The op runs in an iteration of a graph loop.
inline bool InLoop(const ::tensorflow::OpKernelContext* ctx) {
  const ::tensorflow::FrameAndIter at = ctx->frame_iter();
  return at.frame_id != 0 && at.frame_id != ::tensorflow::kIllegalFrameId;
}

// `base` outside loops (and eagerly); "base/iter<i>@<frame>" inside one.
inline std::string NameInLoop(const std::string& base, const ::tensorflow::OpKernelContext* ctx) {
  if (!InLoop(ctx)) return base;
  const ::tensorflow::FrameAndIter at = ctx->frame_iter();
  char frame[17];
  std::snprintf(frame, sizeof(frame), "%016llx", static_cast<unsigned long long>(at.frame_id));
  return base + "/iter" + std::to_string(at.iter_id) + "@" + frame;
}

}  // namespace tf_ring

#endif  // TF_RING_TENSORFLOW_LOOP_NAME_H_
