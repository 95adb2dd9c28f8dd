#include "tensorflow/warm_outputs.h"

#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/base/warm_memory.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

// A TensorFlow allocator over warm blocks. Blocks are matched by their
// mapped size (WarmMappedBytes), so the same tensor shape, step after step,
// gets a block whose pages are already faulted in.
class WarmOutputAllocator : public tf::Allocator {
 public:
  std::string Name() override { return "tf_ring_warm_outputs"; }

  void* AllocateRaw(size_t alignment, size_t num_bytes) override {
    const size_t size = WarmMappedBytes(num_bytes);
    if (alignment > kHugePageBytes) return nullptr;  // a page-aligned block serves any TF alignment
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {  // the most recently freed first
        if (it->first != size) continue;
        void* block = it->second;
        idle_bytes_ -= size;
        idle_.erase(std::next(it).base());
        in_use_[block] = size;
        return block;
      }
    }
    void* block = MapWarm(size);
    if (block == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    in_use_[block] = size;
    return block;
  }

  void DeallocateRaw(void* ptr) override {
    if (ptr == nullptr) return;
    std::list<std::pair<size_t, void*>> released;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = in_use_.find(ptr);
      if (found == in_use_.end()) return;
      const size_t size = found->second;
      in_use_.erase(found);
      if (size > kMaxIdleWarmBytes) {
        released.emplace_back(size, ptr);
      } else {
        idle_.emplace_back(size, ptr);
        idle_bytes_ += size;
        while (idle_bytes_ > kMaxIdleWarmBytes) {  // the least recently used go
          idle_bytes_ -= idle_.front().first;
          released.splice(released.end(), idle_, idle_.begin());
        }
      }
    }
    for (const auto& block : released) UnmapWarm(block.second, block.first);  // outside the lock
  }

  size_t idle_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return idle_bytes_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, size_t> in_use_;  // block -> mapped size
  std::list<std::pair<size_t, void*>> idle_;  // (mapped size, block), least recently freed first
  size_t idle_bytes_ = 0;
};

// Never destroyed: tensors holding its blocks may outlive every static.
WarmOutputAllocator* Warm() {
  static WarmOutputAllocator* allocator = new WarmOutputAllocator;
  return allocator;
}

}  // namespace

absl::Status AllocateCollectiveOutput(tf::OpKernelContext* ctx, int input_index, int output_index,
                                      bool on_host, tf::Tensor** output, OutputMemory* how) {
  const tf::Tensor& input = ctx->input(input_index);
  if (ctx->forward_input_to_output_with_shape(input_index, output_index, input.shape(), output)) {
    *how = OutputMemory::kInput;
    return absl::OkStatus();
  }
  // Only plain host memory: an output TensorFlow wants for a GPU or a NIC
  // (pinned, registered), or from a scoped allocator, is TensorFlow's to allocate.
  const tf::AllocatorAttributes attr = ctx->output_alloc_attr(output_index);
  const bool plain = !attr.gpu_compatible() && !attr.nic_compatible() && !attr.use_pjrt_allocator() &&
                     attr.scope_id == 0;
  if (on_host && plain && input.TotalBytes() >= kMinWarmOutputBytes) {
    tf::Tensor warm(Warm(), input.dtype(), input.shape());
    if (warm.IsInitialized() && warm.tensor_data().data() != nullptr) {
      ctx->set_output(output_index, std::move(warm));
      *output = ctx->mutable_output(output_index);
      *how = OutputMemory::kWarm;
      return absl::OkStatus();
    }
  }
  *how = OutputMemory::kFresh;
  return ctx->allocate_output(output_index, input.shape(), output);
}

size_t IdleWarmOutputBytes() { return Warm()->idle_bytes(); }

}  // namespace tf_ring
