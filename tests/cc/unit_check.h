// The C++ unit tests' check macro and summary: each test binary is one
// file that includes this, counts its checks and exits non-zero on a failure.
#ifndef TF_RING_TESTS_UNIT_CHECK_H_
#define TF_RING_TESTS_UNIT_CHECK_H_

#include <cstdio>
#include <string>

static int g_failures = 0;
static int g_checks = 0;
#define CHECK(cond)                                                      \
  do {                                                                   \
    ++g_checks;                                                          \
    if (!(cond)) {                                                       \
      ++g_failures;                                                      \
      std::printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
    }                                                                    \
  } while (0)

static inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Prints "N checks, M failed" (tests/builds/test_engine_unit.py reads it); main's exit code.
static inline int Summary() {
  std::printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

#endif  // TF_RING_TESTS_UNIT_CHECK_H_
