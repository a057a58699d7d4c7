#include "kiln/dtype.h"

#include <algorithm>
#include <cmath>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kiln {

namespace {
#if !defined(__F16C__)
uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
  }
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (mag < 0x38800000u) {  // subnormal half (or zero): round to nearest even
    float af;
    std::memcpy(&af, &mag, 4);
    float scaled = af * 16777216.0f;  // 2^24: one half-subnormal ulp becomes 1
    auto q = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t exp = ((mag >> 23) - 112) << 10;
  uint32_t mant = mag & 0x7fffffu;
  uint32_t h = exp | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    float f = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&out, &f, 4);
    out |= sign;
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}
#endif
}  // namespace

// With F16C, one instruction each way (the same rounding, to nearest even);
// the bit twiddling took a fifth of a float16 training step.
#if defined(__F16C__)
Half::Half(float f) : bits(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)) {}
Half::operator float() const { return _cvtsh_ss(bits); }
#else
Half::Half(float f) : bits(float_to_half_bits(f)) {}
Half::operator float() const { return half_bits_to_float(bits); }
#endif

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::UInt8: return 1;
    case DType::Bool: return 1;
    case DType::Int8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::Bool: return "bool";
    case DType::Int8: return "int8";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  static const std::pair<const char*, DType> kNames[] = {
      {"float32", DType::Float32}, {"f32", DType::Float32},  {"float", DType::Float32},
      {"float64", DType::Float64}, {"f64", DType::Float64},  {"double", DType::Float64},
      {"float16", DType::Float16}, {"f16", DType::Float16},  {"half", DType::Float16},
      {"bfloat16", DType::BFloat16}, {"bf16", DType::BFloat16}, {"int32", DType::Int32},
      {"int64", DType::Int64},     {"uint8", DType::UInt8},  {"bool", DType::Bool},
      {"int8", DType::Int8}};
  for (auto& [n, t] : kNames)
    if (name == n) return t;
  KILN_FAIL("unknown dtype '", name,
            "'; use one of float32, float64, float16, bfloat16, int32, int64, uint8, int8, bool");
}

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
bool is_integral(DType t) {
  return t == DType::Int32 || t == DType::Int64 || t == DType::UInt8 || t == DType::Int8;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool: return 0;
      case DType::UInt8: return 1;
      case DType::Int8: return 1;
      case DType::Int32: return 2;
      case DType::Int64: return 3;
      case DType::Float16: return 4;
      case DType::BFloat16: return 5;
      case DType::Float32: return 6;
      case DType::Float64: return 7;
    }
    return 0;
  };
  // int8 with uint8 has no common 8-bit type (Kiln has no int16): use int32.
  if ((a == DType::Int8 && b == DType::UInt8) || (a == DType::UInt8 && b == DType::Int8)) return DType::Int32;
  // float16 with bfloat16 has no exact common 16-bit type: use float32.
  if ((a == DType::Float16 && b == DType::BFloat16) || (a == DType::BFloat16 && b == DType::Float16))
    return DType::Float32;
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace kiln
