#include "backends/cpu/passes/layout_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/blocked_batch_norm.h"
#include "backends/cpu/blocked_depthwise.h"
#include "backends/cpu/few_channel_conv.h"
#include "backends/cpu/interpolate_pixels.h"
#include "backends/cpu/patch_gemm_conv.h"
#include "backends/cpu/winograd_conv.h"
#include "kiln/error.h"
#include "kiln/parallel.h"

namespace kiln::graph {

namespace onednn = cpu::onednn;

namespace {

// The max-pool gradient whose inputs (gy, the pool's input, [mask]) start at in[first].
cpu::MaxPoolGrad pool_grad_of(const std::vector<Tensor>& in, size_t first, const cpu::PoolWindow& window, int block,
                              int gy_block) {
  const Shape &x = in[first + 1].shape(), &gy = in[first].shape();
  const float* mask = in.size() > first + 2 ? in[first + 2].data<float>() : nullptr;
  return {in[first].data<float>(), gy_block, in[first + 1].data<float>(), mask, x[0], x[1], x[2], x[3], gy[2], gy[3],
          block, window};
}

// A convolution with a residual accumulates into its output, which starts
// as the shortcut (already there when the output took over its buffer).
void copy_residual(const Tensor& r, float* y) {
  if (r.data<float>() != y) std::memcpy(y, r.data<float>(), static_cast<size_t>(r.numel()) * sizeof(float));
}

}  // namespace

onednn::LayoutCall at_batch(onednn::LayoutCall call, const Tensor& images) {
  call.shape.n = images.shape()[0];
  return call;
}

CustomKernel conv_kernel(const onednn::LayoutCall& call) {
  return [call](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    float* y = out[0].data<float>();
    if (call.residual) copy_residual(in.back(), y);
    const float* bias = call.bias ? in[2].data<float>() : nullptr;
    const float* w = call.prepared_weights ? static_cast<const float*>(in[1].raw_data()) : in[1].data<float>();
    bool ok = onednn::conv_forward_layout(at_batch(call, in[0]), in[0].data<float>(), w, bias, y);
    KILN_CHECK(ok, "oneDNN refused a blocked-layout convolution it accepted when the graph was built");
  };
}

CustomKernel winograd_conv_kernel(const onednn::LayoutCall& call, int tile, bool max_pool) {
  return [call, tile, max_pool](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    float* y = out[0].data<float>();
    if (call.residual) copy_residual(in.back(), y);
    const cpu::WinogradEpilogue e{call.bias ? in[2].data<float>() : nullptr, call.relu, call.residual, max_pool,
                                  call.swish};
    cpu::winograd_conv(at_batch(call, in[0]).shape, tile, call.src_block, in[0].data<float>(), in[1].data<float>(), y,
                       e);
  };
}

CustomKernel patch_gemm_conv_kernel(const onednn::LayoutCall& call, bool channel_scale) {
  return [call, channel_scale](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    float* y = out[0].data<float>();
    const size_t operands = in.size() - (channel_scale ? 1 : 0);  // (the scale comes last)
    if (call.residual) copy_residual(in[operands - 1], y);
    const float* bias = call.bias ? in[2].data<float>() : nullptr;
    const onednn::LayoutCall c = at_batch(call, in[0]);
    const float* scale = channel_scale ? in.back().data<float>() : nullptr;
    const int64_t stride = channel_scale && in.back().shape()[0] > 1 ? c.shape.c : 0;  // [N or 1, C, 1, 1]
    cpu::patch_gemm_conv(c, in[0].data<float>(), in[1].data<float>(), bias, y, scale, stride);
  };
}

CustomKernel depthwise_conv_kernel(const onednn::LayoutCall& call) {
  return [call](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    cpu::blocked_depthwise_conv(at_batch(call, in[0]), in[0].data<float>(), in[1].data<float>(),
                                call.bias ? in[2].data<float>() : nullptr, out[0].data<float>());
  };
}

CustomKernel depthwise_chain_kernel(const onednn::LayoutCall& call, std::optional<onednn::LayoutCall> expand,
                                    std::optional<onednn::LayoutCall> project) {
  return [call, expand, project](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const auto data = [&](size_t k) { return k < in.size() && in[k].defined() ? in[k].data<float>() : nullptr; };
    const onednn::LayoutCall depthwise = at_batch(call, in[0]);
    std::optional<onednn::LayoutCall> e, p;
    if (expand) e = at_batch(*expand, in[0]);
    if (project) p = at_batch(*project, in[0]);
    if (p && p->residual) copy_residual(in[7], out[0].data<float>());
    const cpu::DepthwiseChain chain{depthwise,         data(3), data(4), e ? &*e : nullptr, data(1), data(2),
                                    p ? &*p : nullptr, data(5), data(6)};
    cpu::depthwise_chain_conv(chain, in[0].data<float>(), out[0].data<float>());
  };
}

CustomKernel into_concat_kernel(CustomKernel conv, int64_t first, int64_t channels, bool carry) {
  return [conv = std::move(conv), first, channels, carry](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    KILN_CHECK(out[0].shape()[0] == 1, "a part written into a concatenation in place is one image");
    if (carry) copy_residual(in.back(), out[0].data<float>());
    // One image: channels [first, first + channels) of a blocked value are
    // one contiguous run (made here: a slice op would be dispatched and profiled).
    const Shape& whole = out[0].shape();
    auto part = std::make_shared<TensorImpl>(out[0].impl());
    part->shape = {1, channels, whole[2], whole[3]};
    part->strides = contiguous_strides(part->shape);
    part->offset += first * whole[2] * whole[3];
    std::vector<Tensor> own{Tensor(std::move(part))};
    if (!carry) return conv(in, own);
    conv(std::vector<Tensor>(in.begin(), in.end() - 1), own);
  };
}

CustomKernel conv_relu_pool_kernel(const onednn::LayoutCall& call) {
  return [call](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const float* bias = call.bias ? in[2].data<float>() : nullptr;
    cpu::conv_relu_pool_few_channels(at_batch(call, in[0]).shape, call.dst_block, in[0].data<float>(),
                                     in[1].data<float>(), bias, out[0].data<float>());
  };
}

CustomKernel conv_input_grad_kernel(const onednn::LayoutCall& call) {
  return [call](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    bool ok = onednn::conv_backward_data_layout(at_batch(call, out[0]), in[0].data<float>(), in[1].data<float>(),
                                                out[0].data<float>());
    KILN_CHECK(ok, "oneDNN refused a blocked-layout convolution gradient it accepted when the graph was built");
  };
}

CustomKernel conv_weight_grad_kernel(const onednn::LayoutCall& call, bool few_channels) {
  return [call, few_channels](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    float* gb = call.bias ? out[1].data<float>() : nullptr;
    const onednn::LayoutCall c = at_batch(call, in[0]);
    if (few_channels) {
      cpu::conv_weight_grad_few_channels(c.shape, call.dst_block, in[0].data<float>(), in[1].data<float>(),
                                         out[0].data<float>(), gb);
      return;
    }
    bool ok = onednn::conv_backward_weights_layout(c, in[0].data<float>(), in[1].data<float>(), out[0].data<float>(), gb);
    KILN_CHECK(ok, "oneDNN refused a blocked-layout convolution gradient it accepted when the graph was built");
  };
}

CustomKernel conv_weight_grad_from_pool_kernel(const onednn::LayoutCall& call, cpu::PoolWindow window, int gy_block) {
  return [call, window, gy_block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    float* gb = call.bias ? out[1].data<float>() : nullptr;
    cpu::conv_weight_grad_few_channels(at_batch(call, in[0]).shape, in[0].data<float>(),
                                       pool_grad_of(in, 1, window, call.dst_block, gy_block), out[0].data<float>(), gb);
  };
}

CustomKernel max_pool_kernel(cpu::PoolWindow window, int block, bool row_bands, bool relu) {
  return [window, block, row_bands, relu](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape &x = in[0].shape(), &y = out[0].shape();
    cpu::max_pool_blocked(in[0].data<float>(), out[0].data<float>(), x[0], x[1], x[2], x[3], y[2], y[3], block, window,
                          row_bands, relu);
  };
}

CustomKernel avg_pool_kernel(cpu::PoolWindow window, int block, bool count_include_pad) {
  return [window, block, count_include_pad](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape &x = in[0].shape(), &y = out[0].shape();
    cpu::avg_pool_blocked(in[0].data<float>(), out[0].data<float>(), x[0], x[1], x[2], x[3], y[2], y[3], block, window,
                          count_include_pad);
  };
}

CustomKernel max_pool_backward_kernel(cpu::PoolWindow window, int block, int gy_block) {
  return [window, block, gy_block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    cpu::max_pool_backward_blocked(pool_grad_of(in, 0, window, block, gy_block), out[0].data<float>());
  };
}

CustomKernel blocked_concat_kernel() {
  return [](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const int64_t images = out[0].shape()[0], per_image = out[0].numel() / std::max<int64_t>(images, 1);
    float* y = out[0].data<float>();
    parallel_for(images * static_cast<int64_t>(in.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t job = b; job < e; ++job) {
        const int64_t image = job / static_cast<int64_t>(in.size());
        const size_t i = static_cast<size_t>(job % static_cast<int64_t>(in.size()));
        int64_t at = 0;  // where input i starts within an image
        for (size_t j = 0; j < i; ++j) at += in[j].numel() / images;
        const int64_t size = in[i].numel() / images;
        std::memcpy(y + image * per_image + at, in[i].data<float>() + image * size, size * sizeof(float));
      }
    });
  };
}

CustomKernel global_avg_kernel(int block) {
  return [block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& x = in[0].shape();
    cpu::global_avg_pool_blocked(in[0].data<float>(), out[0].data<float>(), x[0], x[1], x[2], x[3], block);
  };
}

namespace {
// y = x * v or x + v, v one value per channel: the squeeze-and-excitation
// scale, as one pass over the blocked x (the generic path through 5-d
// broadcasting took four times as long).
void scale_or_shift_blocks(bool multiply, const Tensor& x, const Tensor& v, Tensor& y, int block) {
  const Shape& s = x.shape();
  const int64_t n = s[0], blocks = s[1] / block, h = s[2], row = s[3] * block, vn = v.shape()[0];
  const float* xp = x.data<float>();
  const float* vp = v.data<float>();
  float* yp = y.data<float>();
  // Threads take bands of rows across every channel block, as the
  // convolutions around it split theirs (a squeeze-and-excitation scale
  // between a depthwise layer and a 1x1 one), so each reads what it wrote.
  parallel_for(n * h, std::max<int64_t>(1, 16384 / (row * blocks)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t image = r / h;
      for (int64_t b = 0; b < blocks; ++b) {
        const float* c = vp + ((vn == 1 ? 0 : image) * blocks + b) * block;
        const int64_t at = ((image * blocks + b) * h + r % h) * row;
        const float* src = xp + at;
        float* dst = yp + at;
        for (int64_t p = 0; p < row; p += block)
          for (int k = 0; k < block; ++k) dst[p + k] = multiply ? src[p + k] * c[k] : src[p + k] + c[k];
      }
    }
  });
}
}  // namespace

namespace {
// A batch norm's optional [C] input as a float pointer (planned contiguous float32), or null.
float* channel_vector(const std::vector<Tensor>& in, size_t k) {
  return k < in.size() && in[k].defined() ? in[k].data<float>() : nullptr;
}
cpu::BlockedBatchNorm blocked_shape(const Tensor& x, int block) {
  const Shape& s = x.shape();
  return {s[0], s[1], s[2] * s[3], block};
}
}  // namespace

CustomKernel batch_norm_train_kernel(double momentum, double eps, int block, bool relu) {
  return [momentum, eps, block, relu](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    cpu::BatchNormForward a{in[0].data<float>(), channel_vector(in, 1), channel_vector(in, 2), channel_vector(in, 5),
                            channel_vector(in, 3), channel_vector(in, 4), momentum, eps, relu};
    cpu::batch_norm_train_blocked(blocked_shape(in[0], block), a, out[0].data<float>(), out[1].data<float>(),
                                  out[2].data<float>());
    if (a.running_mean) {  // graphs that read them see them change
      in[3].impl().storage->version++;
      in[4].impl().storage->version++;
    }
  };
}

CustomKernel batch_norm_grad_kernel(int block) {
  return [block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    cpu::BatchNormBackward a{in[0].data<float>(), channel_vector(in, 5), in[1].data<float>(), channel_vector(in, 2),
                             in[3].data<float>(), in[4].data<float>()};
    cpu::batch_norm_backward_blocked(blocked_shape(in[1], block), a, out[0].data<float>(), out[1].data<float>(),
                                     out[2].data<float>());
  };
}

CustomKernel global_avg_grad_kernel(int block) {
  return [block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& x = in[1].shape();
    const int64_t blocks = x[1] / block, hw = x[2] * x[3];
    const Tensor g = in[0].contiguous();
    const float* gy = g.data<float>();  // [N, C]: channel cb * block + k of image i at (i * blocks + cb) * block + k
    float* gx = out[0].data<float>();
    const float scale = 1.0f / static_cast<float>(hw);
    parallel_for(x[0] * blocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        float v[16];
        for (int k = 0; k < block; ++k) v[k] = gy[i * block + k] * scale;
        float* dst = gx + i * hw * block;
        for (int64_t p = 0; p < hw; ++p) std::memcpy(dst + p * block, v, sizeof(float) * static_cast<size_t>(block));
      }
    });
  };
}

CustomKernel channel_affine_kernel(double eps, int block, bool relu) {
  return [eps, block, relu](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& s = in[0].shape();
    const int64_t c = s[1], blocks = c / block, plane = s[2] * s[3] * block;
    // The scale and shift per channel (float32 parameters, contiguous), in double.
    std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
    const Tensor wt = in[1].defined() ? in[1].contiguous() : Tensor(), bt = in[2].defined() ? in[2].contiguous() : Tensor();
    const Tensor mt = in[3].contiguous(), vt = in[4].contiguous();
    const float *w = wt.defined() ? wt.data<float>() : nullptr, *b = bt.defined() ? bt.data<float>() : nullptr;
    const float *mean = mt.data<float>(), *var = vt.data<float>();
    for (int64_t i = 0; i < c; ++i) {
      const double a = (w ? w[i] : 1.0) / std::sqrt(static_cast<double>(var[i]) + eps);
      scale[i] = static_cast<float>(a);
      shift[i] = static_cast<float>((b ? b[i] : 0.0) - mean[i] * a);
    }
    const float* xp = in[0].data<float>();
    float* yp = out[0].data<float>();
    parallel_for(s[0] * blocks, std::max<int64_t>(1, 16384 / plane), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const float *a = scale.data() + (i % blocks) * block, *t = shift.data() + (i % blocks) * block;
        const float* src = xp + i * plane;
        float* dst = yp + i * plane;
        for (int64_t p = 0; p < plane; p += block)
          for (int k = 0; k < block; ++k) {
            const float v = src[p + k] * a[k] + t[k];
            dst[p + k] = relu && v < 0 ? 0.0f : v;
          }
      }
    });
  };
}

CustomKernel per_channel_elementwise_kernel(const OpDef& op, const Attrs& attrs, int block, std::vector<bool> per_channel) {
  const KernelFn kernel = op.kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(DType::Float32)];
  KILN_CHECK(kernel != nullptr, "layout pass: '", op.name, "' has no float32 CPU kernel");
  if ((op.name == "mul" || op.name == "add") && per_channel.size() == 2 && per_channel[0] != per_channel[1]) {
    const size_t vector = per_channel[0] ? 0 : 1;
    return [multiply = op.name == "mul", vector, block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
      scale_or_shift_blocks(multiply, in[1 - vector], in[vector], out[0], block);
    };
  }
  return [kernel, attrs, block, per_channel](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& y = out[0].shape();
    const Shape full{y[0], y[1] / block, y[2], y[3], block};
    std::vector<Tensor> views;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined() || in[i].numel() == 1) {
        views.push_back(in[i]);
      } else if (per_channel[i]) {
        const Shape& v = in[i].shape();
        views.push_back(in[i].view({v[0], y[1] / block, 1, 1, block}));
      } else {
        views.push_back(in[i].view(full));
      }
    }
    std::vector<Tensor> outs{out[0].view(full)};
    kernel(views, outs, attrs);
  };
}

namespace {
// Where the shuffle reads: group k's channel i of one image, as the pointer
// to its first pixel (pixels are `block` floats apart), in x itself or in
// the group's own part.
struct ShuffleSource {
  const std::vector<Tensor>& in;
  int64_t groups, per_group, pixels;
  int block;

  const float* channel(int64_t image, int64_t k, int64_t i) const {
    const bool parts = in.size() > 1;
    const int64_t c = parts ? i : k * per_group + i, channels = parts ? per_group : groups * per_group;
    const float* base = in[parts ? static_cast<size_t>(k) : 0].data<float>() + image * channels * pixels;
    return base + (c / block) * pixels * block + c % block;
  }
};

// One output block of a two-group shuffle: each run of 8 output lanes
// interleaves 4 lanes of group 0 with the 4 of group 1 at the same channels
// (runs of 4 never straddle a block: every group starts on a multiple of 4).
void shuffle_pairs(const ShuffleSource& from, int64_t image, int64_t first, float* y) {
  const int block = from.block;
  for (int run = 0; run < block; run += 8) {
    const float* pa = from.channel(image, 0, (first + run) / 2);
    const float* pb = from.channel(image, 1, (first + run) / 2);
    for (int64_t p = 0; p < from.pixels; ++p) {
      const float* sa = pa + p * block;
      const float* sb = pb + p * block;
      float* d = y + p * block + run;
      for (int l = 0; l < 4; ++l) {
        d[2 * l] = sa[l];
        d[2 * l + 1] = sb[l];
      }
    }
  }
}

void shuffle_any(const ShuffleSource& from, int64_t image, int64_t first, float* y) {
  const int block = from.block;
  std::vector<const float*> lanes(static_cast<size_t>(block));
  for (int l = 0; l < block; ++l)
    lanes[static_cast<size_t>(l)] = from.channel(image, (first + l) % from.groups, (first + l) / from.groups);
  for (int64_t p = 0; p < from.pixels; ++p)
    for (int l = 0; l < block; ++l) y[p * block + l] = lanes[static_cast<size_t>(l)][p * block];
}
}  // namespace

CustomKernel blocked_channel_shuffle_kernel(int64_t groups, int block) {
  return [groups, block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& s = in[0].shape();
    const int64_t images = s[0], pixels = s[2] * s[3], plane = pixels * block;
    const int64_t per_group = in.size() > 1 ? s[1] : s[1] / groups, blocks = groups * per_group / block;
    const ShuffleSource from{in, groups, per_group, pixels, block};
    const bool pairs = groups == 2 && block % 8 == 0 && per_group % 4 == 0;
    // Output block b of an image goes to the part that holds it.
    std::vector<std::pair<size_t, int64_t>> part_of;  // (output, its block)
    for (size_t j = 0; j < out.size(); ++j)
      for (int64_t b = 0; b < out[j].shape()[1] / block; ++b) part_of.push_back({j, b});
    KILN_CHECK(static_cast<int64_t>(part_of.size()) == blocks, "channel shuffle: the outputs do not cover the channels");
    parallel_for(images * blocks, std::max<int64_t>(1, 16384 / plane), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t image = i / blocks, first = (i % blocks) * block;
        const auto [j, b] = part_of[static_cast<size_t>(i % blocks)];
        float* y = out[j].data<float>() + (image * (out[j].shape()[1] / block) + b) * plane;
        (pairs ? shuffle_pairs : shuffle_any)(from, image, first, y);
      }
    });
  };
}

// Whole blocks: per image, one contiguous run at start * H * W.
CustomKernel blocked_channel_slice_kernel(int64_t start) {
  return [start](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape &x = in[0].shape(), &y = out[0].shape();
    const int64_t pixels = x[2] * x[3], size = y[1] * pixels;
    const float* src = in[0].data<float>();
    float* dst = out[0].data<float>();
    parallel_for(x[0], 1, [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n)
        std::memcpy(dst + n * size, src + n * x[1] * pixels + start * pixels, static_cast<size_t>(size) * sizeof(float));
    });
  };
}

CustomKernel blocked_interpolate_kernel(const Attrs& attrs, int block) {
  return [attrs, block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& x = in[0].shape();
    const bool done = cpu::interpolate_pixels<float>(in[0].data<float>(), out[0].data<float>(), x[0] * x[1] / block,
                                                     x[2], x[3], block, attrs);
    KILN_CHECK(done, "interpolate on blocked activations: a position maps outside the input");
  };
}

CustomKernel reorder_kernel(int from_block, int to_block) {
  return [from_block, to_block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& s = in[0].shape();
    onednn::reorder_layout(s[0], s[1], s[2], s[3], from_block, to_block, in[0].data<float>(), out[0].data<float>());
  };
}

}  // namespace kiln::graph
