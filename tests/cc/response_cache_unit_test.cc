// Unit tests of the response cache's sizing: a job that cycles through more
// names than the cache holds (a loop's iterations are names of their own)
// is seen from the names that come back after eviction, and growing the
// cache ends it. Built with g++ alone by tests/builds/test_engine_unit.py.
#include <cstdio>
#include <string>

#include "common/negotiation/response_cache.h"
#include "unit_check.h"

using namespace tf_ring;

// One call of a function whose loop runs `names` collectives: each misses
// or hits; returns the hits.
static int RunLoop(ResponseCache* cache, int names) {
  int hits = 0;
  for (int i = 0; i < names; ++i) {
    Request r;
    r.name = "grad/iter" + std::to_string(i) + "@f";
    r.shape = {4};
    uint32_t bit = 0;
    if (cache->Find(r, &bit) == ResponseCache::Lookup::kHit) {
      cache->Touch(bit);
      ++hits;
      continue;
    }
    Response resp;
    resp.names = {r.name};
    cache->Put(resp, r);
  }
  return hits;
}

static void TestALoopLargerThanTheCacheThrashesUntilItGrows() {
  ResponseCache cache(16);
  RunLoop(&cache, 12);
  CHECK(RunLoop(&cache, 12) == 12 && !cache.thrashing());  // fits: every name hits
  ResponseCache small(16);
  RunLoop(&small, 17);
  CHECK(RunLoop(&small, 17) == 0);  // one name too many: each is evicted before its turn
  CHECK(small.thrashing());
  small.Grow(32);
  CHECK(!small.thrashing() && small.capacity() == 32);
  RunLoop(&small, 17);
  CHECK(RunLoop(&small, 17) == 17 && !small.thrashing());
  // One-off names (never coming back) fill and evict without thrashing.
  ResponseCache once(16);
  for (int call = 0; call < 10; ++call) {
    Request r;
    r.name = "once" + std::to_string(call);
    Response resp;
    resp.names = {r.name};
    once.Put(resp, r);
  }
  RunLoop(&once, 40);
  CHECK(!once.thrashing());
}

int main() {
  TestALoopLargerThanTheCacheThrashesUntilItGrows();
  return Summary();
}
