// When a shared-memory allreduce reads its peers' tensors directly
// (process_vm_readv, cross_memory.h) instead of staging them: set by
// TF_RING_SHM_SINGLE_COPY, agreed by every rank.
#ifndef TF_RING_COMMON_TRANSPORT_SINGLE_COPY_MODE_H_
#define TF_RING_COMMON_TRANSPORT_SINGLE_COPY_MODE_H_

namespace tf_ring {

enum class SingleCopyMode {
  kNever,   // "0": always stage
  kAlways,  // "1": every allreduce of 256 KB and more
  // "auto", the default: an allreduce larger than one staging area whose
  // measurement found the local ranks' cores on different caches, where
  // staged lines cross between the caches and reading once costs less
  // (shm_cache_probe.cc). Where they share one, staging stays in it and wins.
  kWhereCoresApart,
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TRANSPORT_SINGLE_COPY_MODE_H_
