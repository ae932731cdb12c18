// NumPy .npy files <-> onyx tensors (format versions 1.0, 2.0 and 3.0; little-endian,
// C order). Every onyx dtype has a numpy spelling; those numpy lacks use a convention:
//
//   onyx dtype                         numpy dtype in the file
//   float, double, float16             <f4, <f8, <f2
//   int8..int64, uint8..uint64, bool   |i1 <i2 <i4 <i8, |u1 <u2 <u4 <u8, |b1
//   complex64, complex128              <c8, <c16
//   string (UTF-8 std::string)         <U{n} (UTF-32LE, n code points per element)
//   bfloat16                           <u2 holding the bit patterns
//   float8 types (all five)            |u1 holding the bit patterns
//   int4, int2                         |i1, one value per element
//   uint4, uint2, float4e2m1           |u1, one value (or 4-bit code) per element
//
// Reading for a model input applies the convention the input's declared dtype asks for
// (a <u2 file feeds a bfloat16 input); any other mismatch is an onyx::Error.
#pragma once

#include <string>

#include "graph/tensor.h"

namespace onyx::npy {

/// The numpy descr onyx writes for `t` ("<f4", "|u1", "<U" for strings without width).
std::string numpy_descr(DataType t);

/// Serializes `t` (CPU memory) as the bytes of a .npy file.
std::string encode(const Tensor& t);
/// Parses the bytes of a .npy file into the dtype numpy declares (e.g. <u2 -> uint16).
/// `source` names the data in error messages (a file path).
Tensor decode(const std::string& bytes, const std::string& source = "<memory>");

/// Writes `t` to `path`; onyx::Error when the file cannot be written.
void save(const Tensor& t, const std::string& path);
/// Reads `path` in the dtype numpy declares.
Tensor load(const std::string& path);
/// Reads `path` to feed the input `input_name` declared with dtype `expected`: accepts the
/// exact dtype or its convention above (checking sub-byte value ranges); otherwise throws an
/// onyx::Error naming the file, the input, the expected and the found dtype.
Tensor load_as(const std::string& path, DataType expected, const std::string& input_name);
/// As load_as, for a tensor already decoded from `path` in its file dtype.
Tensor convert_for_input(Tensor t, DataType expected, const std::string& path,
                         const std::string& input_name);

}  // namespace onyx::npy
