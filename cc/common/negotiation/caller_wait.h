// How long a caller may wait on its own thread for a small collective it
// submitted, instead of sleeping until the engine's callback wakes it (see
// tensorflow/eager_completion.h, the one user). Local to each rank: it
// changes when a rank's caller learns of the result, not what any rank sends.
#ifndef TF_RING_COMMON_NEGOTIATION_CALLER_WAIT_H_
#define TF_RING_COMMON_NEGOTIATION_CALLER_WAIT_H_

#include <cstdint>

namespace tf_ring {

// TF_RING_EAGER_WAIT_US when set to a whole number (0: never wait);
// otherwise 50, or 0 when this host runs more local ranks than the calling
// thread may use CPUs.
int64_t CallerWaitMicros(int local_size);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_NEGOTIATION_CALLER_WAIT_H_
