// A request as a rank would send it, for the C++ unit tests that feed the
// coordinator (engine_unit_test.cc, coordinator_unit_test.cc).
#ifndef TF_RING_TESTS_MAKE_REQUEST_H_
#define TF_RING_TESTS_MAKE_REQUEST_H_

#include <string>
#include <utility>
#include <vector>

#include "common/base/message.h"

static inline tf_ring::Request MakeRequest(int rank, const std::string& name,
                                           std::vector<int64_t> shape) {
  tf_ring::Request r;
  r.rank = rank;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

#endif  // TF_RING_TESTS_MAKE_REQUEST_H_
