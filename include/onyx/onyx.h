// <onyx/onyx.h>: the whole public API in one include (link onyx::onyx, or
// `pkg-config --cflags --libs onyx`).
//
//   onyx::Session             load an ONNX model once, run it from many threads
//   onyx::TrainingSession     train it: loss, backward graph, fused optimizer, checkpoints
//   onyx::Tensor, DataType    the values fed and returned
//   onyx::Error               what every bad input throws
//   onyx::Precision           bf16/fp16 mixed precision (SessionOptions, TrainingConfig)
//   onyx::dist::make_mpi_communicator(), make_nccl_communicator()   data-parallel training
#pragma once

#include "distributed/communicator.h"
#include "graph/error.h"
#include "graph/tensor.h"
#include "inference/session.h"
#include "training/training_session.h"
