#include "common/collectives/shm/shm_single_copy_allreduce.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "common/reduction/reduce_kernels.h"
#include "common/reduction/scale.h"
#include "common/transport/cross_memory.h"
#include "common/transport/peer_failure.h"

namespace tf_ring {

namespace {

// Below this a batch stays staged: the extra barrier and the system calls
// would cost more than the copy they save (on the development VM staging
// won at every size, see benchmarks/shm_single_copy.py).
constexpr int64_t kMinSingleCopyBytes = 256 << 10;
// A peer's piece is read into scratch and reduced while it is still in cache.
constexpr int64_t kPieceBytes = 128 << 10;

// Calls fn(span_index, offset_in_span, offset_in_range, length) for each
// piece of [begin, begin + bytes) of the virtual buffer.
template <typename F>
void ForEachPiece(const std::vector<Span>& spans, int64_t begin, int64_t bytes, F fn) {
  int64_t span_start = 0;
  const int64_t end = begin + bytes;
  for (size_t i = 0; i < spans.size(); ++i) {
    const int64_t span_end = span_start + spans[i].bytes;
    if (span_end > begin && span_start < end) {
      const int64_t lo = std::max(begin, span_start), hi = std::min(end, span_end);
      fn(i, lo - span_start, lo - begin, hi - lo);
    }
    if (span_end >= end) break;
    span_start = span_end;
  }
}

// The engine thread's scratch pieces, kept between allreduces (allocated
// once, never zero-filled: every byte read was written first).
char* ScratchSlot(int slot, size_t bytes) {
  thread_local std::unique_ptr<char[]> buffers[3];
  thread_local size_t sizes[3] = {0, 0, 0};
  if (sizes[slot] < bytes) {
    buffers[slot].reset(new char[bytes]);
    sizes[slot] = bytes;
  }
  return buffers[slot].get();
}

// An operand of one reduction step over a piece.
struct Operand {
  enum Kind { kOwnInput, kOutput, kScratch } kind;
  const char* scratch = nullptr;  // kScratch: the piece, contiguous
};

class SingleCopyWalk {
 public:
  SingleCopyWalk(ShmSegment* shm, const std::vector<Span>& spans, const ReduceSpec& spec)
      : shm_(shm), spans_(spans), spec_(spec), me_(shm->rank()), n_(shm->size()),
        elem_(static_cast<int64_t>(DataTypeSize(spec.dtype))) {
    for (const Span& s : spans) total_ += s.bytes / elem_;
    for (const Span& s : spans) aliased_ |= s.in == s.out;
  }

  Status Run() {
    Publish();
    if (!shm_->Barrier()) return PeerLostStatus();  // every table is written
    Status status = ReduceMySlice();
    shm_->flag(me_)->store(status.ok() ? 0 : 1, std::memory_order_relaxed);
    if (!shm_->Barrier()) return PeerLostStatus();  // every slice is reduced
    if (status.ok()) status = GatherOtherSlices();
    if (!status.ok()) shm_->flag(me_)->store(1, std::memory_order_relaxed);
    if (!shm_->Barrier()) return PeerLostStatus();  // no peer reads this rank's tensors any more
    if (!status.ok()) return status;
    for (int q = 0; q < n_; ++q) {
      if (shm_->flag(q)->load(std::memory_order_relaxed) != 0) {
        return Status::Unknown("local rank " + std::to_string(q) +
                               " failed to read a peer's tensors in a single-copy allreduce; "
                               "TF_RING_SHM_SINGLE_COPY=0 stages through shared memory instead");
      }
    }
    return Status::OK();
  }

 private:
  int64_t SliceBegin(int q) const { return total_ * q / n_; }

  void Publish() {
    uint64_t* table = shm_->address_table(me_);
    for (size_t i = 0; i < spans_.size(); ++i) {
      table[2 * i] = reinterpret_cast<uintptr_t>(spans_[i].in);
      table[2 * i + 1] = reinterpret_cast<uintptr_t>(spans_[i].out);
    }
  }

  // Reads peer q's input (or output) bytes [begin, begin + bytes) into `local`
  // pieces: contiguous `into` when given, else this rank's output.
  Status ReadPeer(int q, bool peer_output, int64_t begin, int64_t bytes, char* into) {
    const uint64_t* table = shm_->address_table(q);
    local_.clear();
    remote_.clear();
    ForEachPiece(spans_, begin, bytes, [&](size_t i, int64_t at, int64_t rel, int64_t k) {
      char* dst = into ? into + rel : spans_[i].out + at;
      const uintptr_t base = static_cast<uintptr_t>(table[2 * i + (peer_output ? 1 : 0)]);
      local_.push_back(iovec{dst, static_cast<size_t>(k)});
      remote_.push_back(iovec{reinterpret_cast<void*>(base + at), static_cast<size_t>(k)});
    });
    return ReadPeerMemory(shm_->pid(q), local_, remote_);
  }

  // out = a op b over the piece [begin, begin + bytes).
  void Combine(int64_t begin, int64_t bytes, Operand a, Operand b) {
    ForEachPiece(spans_, begin, bytes, [&](size_t i, int64_t at, int64_t rel, int64_t k) {
      const Span& s = spans_[i];
      auto at_piece = [&](const Operand& o) -> const char* {
        switch (o.kind) {
          case Operand::kOwnInput: return s.in + at;
          case Operand::kOutput: return s.out + at;
          case Operand::kScratch: return o.scratch + rel;
        }
        return nullptr;
      };
      ReduceInto(s.out + at, at_piece(a), at_piece(b), k / elem_, spec_.dtype, spec_.op);
    });
  }

  // Operand for rank q's share of a piece: this rank's input in place, or
  // the peer's read into scratch slot `slot`.
  Status Source(int q, int64_t begin, int64_t bytes, int slot, Operand* out) {
    if (q == me_) {
      *out = own_;
      return Status::OK();
    }
    char* into = scratch_[slot];
    *out = Operand{Operand::kScratch, into};
    return ReadPeer(q, false, begin, bytes, into);
  }

  Status ReduceMySlice() {
    const int64_t first = SliceBegin(me_) * elem_;
    const int64_t end = SliceBegin(me_ + 1) * elem_;
    const int64_t piece = std::max<int64_t>(elem_, kPieceBytes / elem_ * elem_);
    for (int slot = 0; slot < (aliased_ && me_ >= 2 ? 3 : 2); ++slot) {
      scratch_[slot] = ScratchSlot(slot, static_cast<size_t>(piece));
    }
    for (int64_t begin = first; begin < end; begin += piece) {
      const int64_t bytes = std::min(piece, end - begin);
      own_ = Operand{Operand::kOwnInput};
      if (aliased_ && me_ >= 2) {
        // The output is written before this rank's turn in the order, and
        // some input is the output itself: keep the input's piece aside.
        ForEachPiece(spans_, begin, bytes, [&](size_t i, int64_t at, int64_t rel, int64_t k) {
          std::memcpy(scratch_[2] + rel, spans_[i].in + at, k);
        });
        own_ = Operand{Operand::kScratch, scratch_[2]};
      }
      // Always combine in rank order, as ShmAllreduce does.
      Operand a, b;
      Status s = Source(0, begin, bytes, 0, &a);
      if (s.ok()) s = Source(1, begin, bytes, 1, &b);
      if (!s.ok()) return s;
      Combine(begin, bytes, a, b);
      for (int q = 2; q < n_; ++q) {
        s = Source(q, begin, bytes, 0, &b);
        if (!s.ok()) return s;
        Combine(begin, bytes, Operand{Operand::kOutput}, b);
      }
      ForEachPiece(spans_, begin, bytes, [&](size_t i, int64_t at, int64_t, int64_t k) {
        char* out = spans_[i].out + at;
        if (spec_.integer_divisor > 1) DivideIntegers(out, k / elem_, spec_.dtype, spec_.integer_divisor);
        ScaleBuffer(out, k / elem_, spec_.dtype, spec_.postscale);
      });
    }
    return Status::OK();
  }

  Status GatherOtherSlices() {
    for (int q = 0; q < n_; ++q) {
      if (q == me_) continue;
      const int64_t begin = SliceBegin(q) * elem_, bytes = SliceBegin(q + 1) * elem_ - begin;
      if (bytes == 0) continue;
      Status s = ReadPeer(q, true, begin, bytes, nullptr);
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

  ShmSegment* shm_;
  const std::vector<Span>& spans_;
  const ReduceSpec& spec_;
  const int me_, n_;
  const int64_t elem_;
  int64_t total_ = 0;  // elements
  bool aliased_ = false;
  Operand own_{Operand::kOwnInput};
  char* scratch_[3] = {nullptr, nullptr, nullptr};
  std::vector<iovec> local_, remote_;
};

}  // namespace

bool UseSingleCopy(const ShmSegment& shm, size_t tensors, int64_t bytes, bool cores_apart) {
  const SingleCopyMode mode = shm.single_copy_mode();
  const bool wanted = mode == SingleCopyMode::kAlways || (mode == SingleCopyMode::kWhereCoresApart && cores_apart);
  return wanted && shm.size() > 1 && 2 * tensors <= ShmSegment::address_slots() && bytes >= kMinSingleCopyBytes;
}

Status ShmSingleCopyAllreduce(ShmSegment* shm, const std::vector<Span>& spans, const ReduceSpec& spec) {
  shm->CountSingleCopyRun();
  return SingleCopyWalk(shm, spans, spec).Run();
}

}  // namespace tf_ring
