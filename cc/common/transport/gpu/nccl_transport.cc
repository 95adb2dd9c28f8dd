// NCCL transport: bootstraps the communicator over MPI on the first GPU
// collective (every rank reaches it in the same response), queues each
// response on the engine's stream after the producers' events, and hands
// the batch to the completion watcher.
//
// Failure: any NCCL/CUDA error fails the batch's tensors with the error text
// and aborts the communicator, so peers blocked in the same collective see
// it fail too instead of hanging; later GPU collectives then fail at once
// with the first error. A dead peer surfaces as NCCL's asynchronous error,
// polled by the watcher, which aborts the same way.
#include "common/transport/gpu/nccl_transport.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "common/collectives/nccl/nccl_collectives.h"
#include "common/transport/gpu/completion_watcher.h"
#include "common/transport/gpu/cuda_check.h"
#include "common/transport/gpu/device_buffer.h"
#include "common/observability/logging.h"

namespace tf_ring {

namespace {

// How long a clean shutdown lets GPU work in flight finish.
std::chrono::milliseconds DrainGrace() {
  const char* v = std::getenv("TF_RING_GPU_DRAIN_SECONDS");
  const double seconds = v && *v ? std::atof(v) : 10.0;
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::string Describe(const Response& resp) {
  std::string text = std::string(OpTypeName(resp.op)) + " of tensor '" + resp.names[0] + "'";
  if (resp.names.size() > 1) {
    text += " (fused with " + std::to_string(resp.names.size() - 1) + " more: '" + resp.names[1] + "'" +
            (resp.names.size() > 2 ? ", ..." : "") + ")";
  }
  return text;
}

class NcclTransport : public DeviceTransport {
 public:
  explicit NcclTransport(const MpiContext* mpi) : mpi_(mpi) {}
  ~NcclTransport() override { Stop(true, "tf_ring's engine was destroyed"); }

  void Start(const Response& resp, std::vector<TensorEntry> entries, PhaseMarks*) override {
    auto batch = std::make_unique<DeviceBatch>();
    batch->description = Describe(resp);
    batch->entries = std::move(entries);
    Status s = Enqueue(resp, batch.get());
    if (!s.ok()) {
      Log(LogLevel::kError, batch->description + ": " + s.message());
      // Peers may be inside the same collective: abort so they fail too.
      Abort(s);
      batch->failure = s;
      // Work already queued may still touch the buffers: when an event can
      // mark its end, the watcher fails the batch once the stream gets there.
      if (batch->event == nullptr && stream_ != nullptr &&
          cudaEventCreateWithFlags(&batch->event, cudaEventDisableTiming) == cudaSuccess &&
          cudaEventRecord(batch->event, stream_) != cudaSuccess) {
        cudaEventDestroy(batch->event);
        batch->event = nullptr;
      }
      if (batch->event == nullptr || !watcher_.running()) {
        CompletionWatcher::Finish(batch.get(), s, false);
        return;
      }
    }
    watcher_.Add(std::move(batch));
  }

  void Stop(bool abort, const std::string& reason) override {
    if (device_ < 0) return;  // never used a GPU (or already stopped)
    cudaSetDevice(device_);
    const auto grace = abort ? std::chrono::milliseconds(0) : DrainGrace();
    watcher_.Stop(grace, [this, &reason] { Abort(Status::Aborted(reason)); }, reason);
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (comm_ != nullptr) {
        // Abort does not wait for peers; destroy lets in-flight work finish.
        if (abort) {
          ncclCommAbort(comm_);
        } else {
          ncclCommDestroy(comm_);
        }
        comm_ = nullptr;
      }
    }
    fusion_.Release();
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
    device_ = -1;
  }

 private:
  Status Enqueue(const Response& resp, DeviceBatch* batch) {
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (!broken_.empty()) {
        return Status::Aborted("the NCCL communicator was aborted after an earlier error (" + broken_ +
                               "); call shutdown() and init() to start a new one");
      }
    }
    Status s = EnsureCommunicator(batch->entries);
    if (!s.ok()) return s;
    for (TensorEntry& e : batch->entries) {
      if (e.device == kCpuDevice) {
        s = MoveStandInToDevice(&e, batch);  // a joined rank's placeholder
      } else if (e.device != device_) {
        s = Status::InvalidArgument(std::string(OpTypeName(resp.op)) + " of tensor '" + e.name +
                                    "' is on GPU " + std::to_string(e.device) + " but this rank's NCCL "
                                    "communicator uses GPU " + std::to_string(device_) +
                                    "; tf_ring supports one GPU per rank.");
      } else if (e.ready_event) {
        s = CudaStatus(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(e.ready_event.get()), 0),
                       "cudaStreamWaitEvent on the producer's event", e.name);
      }
      if (!s.ok()) return s;
    }
    NcclContext ctx{comm_, stream_, mpi_->rank(), mpi_->size(), &fusion_};
    switch (resp.op) {
      case OpType::kAllreduce: s = NcclAllreduce(ctx, resp, batch->entries); break;
      case OpType::kAllgather: s = NcclAllgather(ctx, resp, batch->entries); break;
      case OpType::kBroadcast: s = NcclBroadcast(ctx, resp, batch->entries); break;
      case OpType::kReducescatter: s = NcclReducescatter(ctx, resp, batch->entries); break;
      case OpType::kAlltoall: s = NcclAlltoall(ctx, resp, batch->entries); break;
      default:
        s = Status::InvalidArgument(std::string(OpTypeName(resp.op)) + " has no GPU implementation");
    }
    if (!s.ok()) return s;
    s = CudaStatus(cudaEventCreateWithFlags(&batch->event, cudaEventDisableTiming), "cudaEventCreate",
                   resp.names[0]);
    if (!s.ok()) return s;
    return CudaStatus(cudaEventRecord(batch->event, stream_), "cudaEventRecord", resp.names[0]);
  }

  // A joined rank stands in with host buffers; NCCL needs device ones.
  Status MoveStandInToDevice(TensorEntry* e, DeviceBatch* batch) {
    const int64_t bytes = e->NumBytes();
    void* data = nullptr;
    Status s = CudaStatus(cudaMalloc(&data, bytes > 0 ? bytes : 1), "cudaMalloc for a joined rank", e->name);
    if (!s.ok()) return s;
    batch->device_temps.push_back(data);
    if (bytes > 0) {
      // From pageable memory this returns once the bytes are staged, so the
      // host stand-in may go away right after.
      s = CudaStatus(cudaMemcpyAsync(data, e->input, bytes, cudaMemcpyHostToDevice, stream_),
                     "copying a joined rank's stand-in", e->name);
      if (!s.ok()) return s;
    }
    e->input = data;
    e->output = data;
    e->device = device_;
    const std::string name = e->name;
    const int64_t element_bytes = static_cast<int64_t>(DataTypeSize(e->dtype));
    e->allocate_output = [batch, name, element_bytes](int, const std::vector<int64_t>& shape, void** out) {
      int64_t bytes = element_bytes;
      for (int64_t d : shape) bytes *= d;
      Status st = CudaStatus(cudaMalloc(out, bytes > 0 ? bytes : 1), "cudaMalloc for a joined rank", name);
      if (st.ok()) batch->device_temps.push_back(*out);
      return st;
    };
    return Status::OK();
  }

  Status EnsureCommunicator(const std::vector<TensorEntry>& entries) {
    if (device_ >= 0) return Status::OK();  // set up (an abort is reported via broken_)
    const std::string& name = entries.empty() ? std::string("?") : entries[0].name;
    device_ = -1;
    for (const TensorEntry& e : entries) {
      if (e.device != kCpuDevice) {
        device_ = e.device;
        break;
      }
    }
    if (device_ < 0) {  // only stand-ins here: pick this rank's GPU by local rank
      int count = 0;
      Status s = CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount", name);
      if (!s.ok()) return s;
      device_ = count > 0 ? mpi_->local_rank() % count : 0;
    }
    Status s = CudaStatus(cudaSetDevice(device_), "cudaSetDevice", name);
    if (s.ok()) {
      int low = 0, high = 0;  // NCCL traffic ahead of compute: highest priority
      cudaDeviceGetStreamPriorityRange(&low, &high);
      s = CudaStatus(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, high),
                     "creating tf_ring's CUDA stream", name);
    }
    // Rank 0 makes the id; everyone learns whether it succeeded, so a
    // failure there cannot leave the other ranks waiting in init.
    struct {
      int32_t ok;
      ncclUniqueId id;
    } boot;
    std::memset(&boot, 0, sizeof(boot));
    if (mpi_->rank() == 0) {
      boot.ok = s.ok() && ncclGetUniqueId(&boot.id) == ncclSuccess ? 1 : 0;
    }
    MPI_Bcast(&boot, sizeof(boot), MPI_BYTE, 0, mpi_->comm());
    if (!s.ok()) return s;
    if (!boot.ok) return Status::Unknown("rank 0 could not create the NCCL unique id (ncclGetUniqueId)");
    ncclComm_t comm = nullptr;
    s = NcclStatus(ncclCommInitRank(&comm, mpi_->size(), boot.id, mpi_->rank()), "ncclCommInitRank", name);
    if (!s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      comm_ = comm;
    }
    watcher_.Start(device_, [this] { return AsyncError(); }, [this](const Status& st) { Abort(st); });
    int version = 0;
    ncclGetVersion(&version);
    Log(LogLevel::kInfo, "NCCL " + std::to_string(version) + " communicator ready on GPU " +
                             std::to_string(device_) + " (" + std::to_string(mpi_->size()) + " ranks)");
    return Status::OK();
  }

  // Called from the watcher thread while work is pending.
  Status AsyncError() {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr) return Status::OK();
    ncclResult_t async = ncclSuccess;
    ncclResult_t res = ncclCommGetAsyncError(comm_, &async);
    if (res != ncclSuccess) return NcclStatus(res, "ncclCommGetAsyncError", "(communicator)");
    if (async == ncclSuccess || async == ncclInProgress) return Status::OK();
    return Status::Unknown(std::string("the NCCL communicator failed (a peer may have died): ") +
                           ncclGetErrorString(async));
  }

  // Aborts the communicator once, so kernels waiting on peers end.
  void Abort(const Status& why) {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (broken_.empty()) broken_ = why.message();
    if (comm_ == nullptr) return;
    Log(LogLevel::kError, "aborting the NCCL communicator: " + why.message());
    ncclCommAbort(comm_);  // frees it
    comm_ = nullptr;
  }

  const MpiContext* mpi_;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer fusion_;
  CompletionWatcher watcher_;
  std::mutex comm_mu_;  // guards comm_ and broken_ (watcher and engine threads)
  ncclComm_t comm_ = nullptr;  // null before the first GPU collective and after an abort
  std::string broken_;  // the first error that aborted the communicator
};

}  // namespace

std::unique_ptr<DeviceTransport> MakeNcclTransport(const MpiContext* mpi) {
  return std::make_unique<NcclTransport>(mpi);
}

}  // namespace tf_ring
