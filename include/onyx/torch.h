// <onyx/torch.h>: onyx for libtorch programs (link onyx::torch from
// find_package(onyx COMPONENTS torch); the headers need libtorch's, which onyx::torch brings).
//
//   onyx::torch::from_torch, to_torch   zero-copy tensor exchange (interop/torch_tensor.h)
//   onyx::torch::OnnxModule             an ONNX model as a torch::nn::Module whose forward and
//                                       backward onyx runs (interop/onnx_module.h)
//   torch.classes.onyx.Model, onyx::run the same for TorchScript and the dispatcher, registered
//                                       when libonyx_torch.so loads (interop/torch_ops.h)
#pragma once

#include "interop/onnx_module.h"
#include "interop/torch_ops.h"
#include "interop/torch_tensor.h"
