// init/shutdown and where this process sits in the job.
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "common/engine.h"
#include "common/transport/mpi_context.h"
#include "python/binding.h"

namespace tf_ring {
namespace python {

namespace {

// The MPI_Comm behind an mpi4py communicator: its handle value (an int from
// MPI._handleof) read back as this MPI's MPI_Comm (a pointer in Open MPI,
// an int in MPICH: the low bytes either way on the little-endian hosts we build for).
MPI_Comm CommFromHandle(py::object comm) {
  py::object mpi = py::module_::import("mpi4py.MPI");
  const auto value = mpi.attr("_handleof")(comm).cast<uintptr_t>();
  static_assert(sizeof(MPI_Comm) <= sizeof(value), "MPI_Comm wider than a pointer");
  MPI_Comm handle;
  std::memcpy(&handle, &value, sizeof(handle));
  return handle;
}

void Init(py::object comm) {
  MPI_Comm handle{};
  const bool world = comm.is_none();
  if (!world) handle = CommFromHandle(comm);
  Status s;
  {
    py::gil_scoped_release release;  // every rank must arrive: other Python threads keep running
    s = Engine::Get().Init(world ? nullptr : &handle);
  }
  RaiseIfError(s, ErrorClass::kRuntime);
}

// At interpreter exit. MPI_Finalize waits for every rank, so a rank that left
// the job early (sys.exit mid-training) cannot exit before the ranks whose
// collectives its leaving failed; those then linger a moment after
// finalizing, so the early rank's exit code is the one mpirun reports first.
void FinalizeMpi() {
  Engine::Get().Shutdown();
  MpiContext::FinalizeIfOwned();
  if (Engine::Get().failed_by_peer()) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// None before init(); else a dict naming each value.
py::object TopologyDict() {
  if (!Engine::Get().started()) return py::none();
  const Topology t = Engine::Get().topology();
  py::dict d;
  d["rank"] = t.rank;
  d["size"] = t.size;
  d["local_rank"] = t.local_rank;
  d["local_size"] = t.local_size;
  d["cross_rank"] = t.cross_rank;
  d["cross_size"] = t.cross_size;
  d["homogeneous"] = t.homogeneous;
  return std::move(d);
}

}  // namespace

void RegisterLifecycle(py::module_& m) {
  m.def("init", &Init, py::arg("comm") = py::none(),
        "Starts the engine on MPI_COMM_WORLD, or on a duplicate of the mpi4py communicator given.");
  m.def("shutdown", [] { Engine::Get().Shutdown(); }, py::call_guard<py::gil_scoped_release>());
  m.def("finalize_mpi", &FinalizeMpi, py::call_guard<py::gil_scoped_release>(),
        "Shuts down and finalizes MPI when tf_ring initialized it (interpreter exit).");
  m.def("is_initialized", [] { return Engine::Get().running(); });
  m.def("topology", &TopologyDict,
        "rank, size, local_rank, local_size, cross_rank, cross_size, homogeneous; None before init().");
}

}  // namespace python
}  // namespace tf_ring
