// Vision transforms as plain loops over one image: they run in the
// pipeline's worker threads, where dispatching ops (and their OpenMP teams)
// would only add overhead and oversubscribe the cores.
#include "kiln/data/vision.h"

#include <cmath>
#include <cstring>

#include "kiln/caller_language.h"
#include "kiln/data/image.h"

namespace kiln::data::vision {
namespace {

double uniform(Generator& g) { return static_cast<double>(g.next() >> 11) * 0x1.0p-53; }
int64_t uniform_int(Generator& g, int64_t lo, int64_t hi) {  // [lo, hi]
  return lo + static_cast<int64_t>(g.next() % static_cast<uint64_t>(hi - lo + 1));
}

// Height, width and channels of an image and where pixel (c, y, x) lives.
struct Geometry {
  int64_t h, w, c;
  Layout layout;
  int64_t at(int64_t ch, int64_t y, int64_t x) const {
    return layout == Layout::HWC ? (y * w + x) * c + ch : (ch * h + y) * w + x;
  }
  Shape shape() const { return layout == Layout::HWC ? Shape{h, w, c} : Shape{c, h, w}; }
};

Geometry geometry(const Tensor& image, Layout layout, const char* what) {
  KILN_CHECK(image.dim() == 3 || (image.dim() == 2),
             what, ": needs an image [H, W, C] or [C, H, W] (or [H, W]), got ", image.meta_str());
  KILN_CHECK(image.dtype() == DType::UInt8 || image.dtype() == DType::Float32, what,
             ": needs a uint8 or float32 image, got ", image.meta_str());
  const Shape& s = image.shape();
  if (image.dim() == 2) return {s[0], s[1], 1, Layout::HWC};
  return layout == Layout::HWC ? Geometry{s[0], s[1], s[2], layout} : Geometry{s[1], s[2], s[0], layout};
}

template <typename F>
Tensor with_dtype(const Tensor& image, F&& fn) {
  if (image.dtype() == DType::UInt8) return fn(uint8_t{});
  return fn(float{});
}

template <typename T>
T to_pixel(double v) {
  if constexpr (std::is_same_v<T, uint8_t>) return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
  else return static_cast<T>(v);
}

// Crops [top, top + h) x [left, left + w); pixels outside the image get `fill`.
Tensor crop(const Tensor& image, const Geometry& g, int64_t top, int64_t left, int64_t h, int64_t w, double fill) {
  Tensor src = image.contiguous();
  Geometry og{h, w, g.c, g.layout};
  Tensor out = Tensor::empty(image.dim() == 2 ? Shape{h, w} : og.shape(), image.dtype());
  return with_dtype(image, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(src.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    T f = to_pixel<T>(fill);
    for (int64_t ch = 0; ch < g.c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          int64_t sy = y + top, sx = x + left;
          bool inside = sy >= 0 && sy < g.h && sx >= 0 && sx < g.w;
          o[og.at(ch, y, x)] = inside ? in[g.at(ch, sy, sx)] : f;
        }
    return out;
  });
}

// Bilinear sample of channel ch at (sy, sx); neighbours outside get `fill`.
template <typename T>
double bilinear(const T* in, const Geometry& g, int64_t ch, double sy, double sx, double fill) {
  int64_t y0 = static_cast<int64_t>(std::floor(sy)), x0 = static_cast<int64_t>(std::floor(sx));
  double fy = sy - static_cast<double>(y0), fx = sx - static_cast<double>(x0);
  auto px = [&](int64_t y, int64_t x) {
    return y >= 0 && y < g.h && x >= 0 && x < g.w ? static_cast<double>(in[g.at(ch, y, x)]) : fill;
  };
  return (1 - fy) * ((1 - fx) * px(y0, x0) + fx * px(y0, x0 + 1)) + fy * ((1 - fx) * px(y0 + 1, x0) + fx * px(y0 + 1, x0 + 1));
}

}  // namespace

Transform decode(int channels) {
  return {"decode", [channels](const Tensor& bytes, Generator&) {
            KILN_CHECK(bytes.dtype() == DType::UInt8 && bytes.dim() == 1,
                       "decode: needs the file's bytes as uint8 [n], got ", bytes.meta_str(),
                       " (is the image decoded already?)");
            Tensor c = bytes.contiguous();
            return decode_image(static_cast<const uint8_t*>(c.raw_data()), static_cast<size_t>(c.numel()), channels);
          }};
}

Transform resize(int64_t height, int64_t width, Layout layout) {
  KILN_CHECK(height > 0 && width > 0, "resize: size must be positive, got ", height, "x", width);
  return {"resize", [=](const Tensor& image, Generator&) {
            Geometry g = geometry(image, layout, "resize");
            Tensor src = image.contiguous();
            Geometry og{height, width, g.c, g.layout};
            Tensor out = Tensor::empty(image.dim() == 2 ? Shape{height, width} : og.shape(), image.dtype());
            double sy_scale = static_cast<double>(g.h) / static_cast<double>(height);
            double sx_scale = static_cast<double>(g.w) / static_cast<double>(width);
            return with_dtype(image, [&](auto tag) {
              using T = decltype(tag);
              const T* in = static_cast<const T*>(src.raw_data());
              T* o = static_cast<T*>(out.raw_data());
              for (int64_t y = 0; y < height; ++y) {
                double sy = std::clamp((static_cast<double>(y) + 0.5) * sy_scale - 0.5, 0.0, static_cast<double>(g.h - 1));
                for (int64_t x = 0; x < width; ++x) {
                  double sx = std::clamp((static_cast<double>(x) + 0.5) * sx_scale - 0.5, 0.0, static_cast<double>(g.w - 1));
                  for (int64_t ch = 0; ch < g.c; ++ch) o[og.at(ch, y, x)] = to_pixel<T>(bilinear(in, g, ch, sy, sx, 0));
                }
              }
              return out;
            });
          }};
}

Transform random_crop(int64_t height, int64_t width, int64_t padding, double fill, Layout layout) {
  KILN_CHECK(height > 0 && width > 0 && padding >= 0, "random_crop: need a positive size and padding >= 0");
  return {"random_crop", [=](const Tensor& image, Generator& gen) {
            Geometry g = geometry(image, layout, "random_crop");
            KILN_CHECK(height <= g.h + 2 * padding && width <= g.w + 2 * padding, "random_crop: a ", height, "x", width,
                       " crop does not fit in a ", g.h, "x", g.w, " image padded by ", padding);
            int64_t top = uniform_int(gen, 0, g.h + 2 * padding - height) - padding;
            int64_t left = uniform_int(gen, 0, g.w + 2 * padding - width) - padding;
            return crop(image, g, top, left, height, width, fill);
          }};
}

Transform center_crop(int64_t height, int64_t width, Layout layout) {
  KILN_CHECK(height > 0 && width > 0, "center_crop: size must be positive");
  return {"center_crop", [=](const Tensor& image, Generator&) {
            Geometry g = geometry(image, layout, "center_crop");
            // A crop larger than the image pads with zeros, as torchvision does.
            int64_t top = static_cast<int64_t>(std::lround(static_cast<double>(g.h - height) / 2.0));
            int64_t left = static_cast<int64_t>(std::lround(static_cast<double>(g.w - width) / 2.0));
            return crop(image, g, top, left, height, width, 0);
          }};
}

Transform random_horizontal_flip(double probability, Layout layout) {
  KILN_CHECK(probability >= 0 && probability <= 1, "random_horizontal_flip: probability must be in [0, 1]");
  return {"random_horizontal_flip", [=](const Tensor& image, Generator& gen) {
            Geometry g = geometry(image, layout, "random_horizontal_flip");
            if (uniform(gen) >= probability) return image;
            Tensor src = image.contiguous();
            Tensor out = Tensor::empty(image.shape(), image.dtype());
            size_t elem = image.element_size();
            const char* in = static_cast<const char*>(src.raw_data());
            char* o = static_cast<char*>(out.raw_data());
            for (int64_t ch = 0; ch < g.c; ++ch)
              for (int64_t y = 0; y < g.h; ++y)
                for (int64_t x = 0; x < g.w; ++x)
                  std::memcpy(o + g.at(ch, y, x) * elem, in + g.at(ch, y, g.w - 1 - x) * elem, elem);
            return out;
          }};
}

Transform random_rotation(double degrees, double fill, Layout layout) {
  KILN_CHECK(degrees >= 0, "random_rotation: degrees must be >= 0, got ", degrees);
  return {"random_rotation", [=](const Tensor& image, Generator& gen) {
            Geometry g = geometry(image, layout, "random_rotation");
            double angle = (uniform(gen) * 2 - 1) * degrees * M_PI / 180.0;
            double cs = std::cos(angle), sn = std::sin(angle);
            double cy = static_cast<double>(g.h - 1) / 2, cx = static_cast<double>(g.w - 1) / 2;
            Tensor src = image.contiguous();
            Tensor out = Tensor::empty(image.shape(), image.dtype());
            return with_dtype(image, [&](auto tag) {
              using T = decltype(tag);
              const T* in = static_cast<const T*>(src.raw_data());
              T* o = static_cast<T*>(out.raw_data());
              for (int64_t y = 0; y < g.h; ++y)
                for (int64_t x = 0; x < g.w; ++x) {
                  double dx = static_cast<double>(x) - cx, dy = static_cast<double>(y) - cy;
                  double sx = cx + cs * dx + sn * dy, sy = cy - sn * dx + cs * dy;  // inverse rotation
                  for (int64_t ch = 0; ch < g.c; ++ch) o[g.at(ch, y, x)] = to_pixel<T>(bilinear(in, g, ch, sy, sx, fill));
                }
              return out;
            });
          }};
}

Transform rescale(double scale, double shift) {
  return {"rescale", [=](const Tensor& image, Generator&) {
            Tensor src = image.contiguous();
            Tensor out = Tensor::empty(image.shape(), DType::Float32);
            float* o = out.data<float>();
            int64_t n = image.numel();
            if (image.dtype() == DType::UInt8) {
              const uint8_t* in = src.data<uint8_t>();
              for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(in[i] * scale + shift);
            } else {
              Tensor f = src.dtype() == DType::Float32 ? src : src.to(DType::Float32);
              const float* in = f.data<float>();
              for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(in[i] * scale + shift);
            }
            return out;
          }};
}

Transform normalize(std::vector<double> mean, std::vector<double> std, Layout layout) {
  KILN_CHECK(!mean.empty() && mean.size() == std.size(), "normalize: mean and std need the same, non-zero length");
  for (double s : std) KILN_CHECK(s > 0, "normalize: std values must be positive");
  return {"normalize", [=](const Tensor& image, Generator&) {
            KILN_CHECK(image.dtype() == DType::Float32, "normalize: needs a float32 image, got ", image.meta_str(),
                       "; put rescale(1.0 / 255) before it to turn bytes into [0, 1]");
            Geometry g = geometry(image, layout, "normalize");
            const auto channels = static_cast<int64_t>(mean.size());
            if (channels > 1 && channels != g.c && image.dim() == 3) {
              // The other layout's channel axis holds as many as there are means: the order of the transforms.
              const bool chw_given = layout == Layout::HWC && image.shape()[0] == channels;
              const bool hwc_given = layout == Layout::CHW && image.shape()[2] == channels;
              KILN_CHECK(!chw_given, "normalize: the image ", image.meta_str(), " is channels-first ([C, H, W]), but this "
                         "normalize is for [H, W, C] images: put it before ",
                         in_caller_language("hwc_to_chw()", "HWC2CHW()"), ", or make it for [C, H, W] images (",
                         in_caller_language("Layout::CHW", "is_hwc=False"), ")");
              KILN_CHECK(!hwc_given, "normalize: the image ", image.meta_str(), " is channels-last ([H, W, C]), but this "
                         "normalize is for [C, H, W] images: put it after ",
                         in_caller_language("hwc_to_chw()", "HWC2CHW()"), ", or make it for [H, W, C] images (",
                         in_caller_language("Layout::HWC", "is_hwc=True"), ")");
            }
            KILN_CHECK(channels == 1 || channels == g.c, "normalize: ", mean.size(), " means for an image of ", g.c,
                       " channels (", image.meta_str(), "); give one mean and std per channel");
            Tensor src = image.contiguous();
            Tensor out = Tensor::empty(image.shape(), DType::Float32);
            const float* in = src.data<float>();
            float* o = out.data<float>();
            for (int64_t ch = 0; ch < g.c; ++ch) {
              size_t k = mean.size() == 1 ? 0 : static_cast<size_t>(ch);
              float m = static_cast<float>(mean[k]), inv = static_cast<float>(1.0 / std[k]);
              for (int64_t y = 0; y < g.h; ++y)
                for (int64_t x = 0; x < g.w; ++x) {
                  int64_t i = g.at(ch, y, x);
                  o[i] = (in[i] - m) * inv;
                }
            }
            return out;
          }};
}

Transform hwc_to_chw() {
  return {"hwc_to_chw", [](const Tensor& image, Generator&) {
            KILN_CHECK(image.dim() == 3, "hwc_to_chw: needs an image [H, W, C], got ", image.meta_str());
            return image.permute({2, 0, 1}).contiguous();
          }};
}

Transform random_erasing(double probability, std::pair<double, double> scale, std::pair<double, double> ratio,
                         double value, Layout layout) {
  KILN_CHECK(probability >= 0 && probability <= 1 && scale.first > 0 && scale.first <= scale.second &&
                 ratio.first > 0 && ratio.first <= ratio.second,
             "random_erasing: need probability in [0, 1], 0 < scale.first <= scale.second and 0 < ratio.first <= "
             "ratio.second");
  return {"random_erasing", [=](const Tensor& image, Generator& gen) {
            Geometry g = geometry(image, layout, "random_erasing");
            if (uniform(gen) >= probability) return image;
            double area = static_cast<double>(g.h * g.w);
            double log_lo = std::log(ratio.first), log_hi = std::log(ratio.second);
            for (int attempt = 0; attempt < 10; ++attempt) {  // as torchvision: give up after 10 misses
              double target = area * (scale.first + (scale.second - scale.first) * uniform(gen));
              double aspect = std::exp(log_lo + (log_hi - log_lo) * uniform(gen));
              int64_t h = std::lround(std::sqrt(target * aspect)), w = std::lround(std::sqrt(target / aspect));
              if (h < 1 || w < 1 || h >= g.h || w >= g.w) continue;
              int64_t top = uniform_int(gen, 0, g.h - h), left = uniform_int(gen, 0, g.w - w);
              Tensor out = image.contiguous().clone();
              with_dtype(out, [&](auto tag) {
                using T = decltype(tag);
                T* o = static_cast<T*>(out.raw_data());
                for (int64_t ch = 0; ch < g.c; ++ch)
                  for (int64_t y = top; y < top + h; ++y)
                    for (int64_t x = left; x < left + w; ++x) o[g.at(ch, y, x)] = to_pixel<T>(value);
                return out;
              });
              return out;
            }
            return image;
          }};
}

}  // namespace kiln::data::vision
