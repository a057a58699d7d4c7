#pragma once
// Element types. Half and BFloat16 are storage types: arithmetic converts to float.
#include <cstdint>
#include <cstring>
#include <string>

#include "kiln/error.h"

namespace kiln {

// Int8 comes last so that the values of the others (in files and tables) stay.
enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8, Bool, Int8 };
constexpr int kNumDTypes = 9;

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f);  // NOLINT: implicit, like a builtin float type
  operator float() const;
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) {  // round to nearest even; NaN stays NaN
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = 0x7fc0;
    } else {
      bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // "float32", "f32", "int64", ...
bool is_floating(DType t);
bool is_integral(DType t);  // int32, int64, uint8, int8 (not bool)
// The type two inputs are computed in: float beats int, wider beats narrower.
DType promote_types(DType a, DType b);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::Float64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::Float16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::Int8; };

}  // namespace kiln

// Runs BODY with `scalar_t` bound to the C++ type of DTYPE.
#define KILN_DISPATCH_CASE(DT, T, ...) \
  case DT: {                           \
    using scalar_t = T;                \
    __VA_ARGS__;                       \
    break;                             \
  }
#define KILN_DISPATCH_ALL(DTYPE, ...)                                           \
  switch (DTYPE) {                                                              \
    KILN_DISPATCH_CASE(::kiln::DType::Float32, float, __VA_ARGS__)             \
    KILN_DISPATCH_CASE(::kiln::DType::Float64, double, __VA_ARGS__)            \
    KILN_DISPATCH_CASE(::kiln::DType::Float16, ::kiln::Half, __VA_ARGS__)      \
    KILN_DISPATCH_CASE(::kiln::DType::BFloat16, ::kiln::BFloat16, __VA_ARGS__) \
    KILN_DISPATCH_CASE(::kiln::DType::Int32, int32_t, __VA_ARGS__)             \
    KILN_DISPATCH_CASE(::kiln::DType::Int64, int64_t, __VA_ARGS__)             \
    KILN_DISPATCH_CASE(::kiln::DType::UInt8, uint8_t, __VA_ARGS__)             \
    KILN_DISPATCH_CASE(::kiln::DType::Bool, bool, __VA_ARGS__)                 \
    KILN_DISPATCH_CASE(::kiln::DType::Int8, int8_t, __VA_ARGS__)               \
  }
