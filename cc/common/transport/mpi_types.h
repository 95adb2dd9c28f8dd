// Maps engine dtypes and reduce ops to MPI handles. float16 and bfloat16
// travel as 16-bit words and reduce through user-defined MPI ops.
#ifndef TF_RING_COMMON_MPI_TYPES_H_
#define TF_RING_COMMON_MPI_TYPES_H_

#include <mpi.h>

#include "common/base/dtype.h"
#include "common/base/message.h"

namespace tf_ring {

MPI_Datatype MpiDatatype(DataType dtype);
// Average reduces as Sum; the division happens in the scaling step.
MPI_Op MpiReduceOp(ReduceOp op, DataType dtype);
// Creates/frees the user-defined ops; called by the engine around its loop.
void CreateCustomMpiOps();
void FreeCustomMpiOps();

}  // namespace tf_ring

#endif  // TF_RING_COMMON_MPI_TYPES_H_
