#pragma once
// Vision transforms for Pipeline::map. Images are [H, W, C] (Layout::HWC, as
// decoded files and CIFAR-10 come) or [C, H, W] (Layout::CHW, as the MNIST
// reader gives them), uint8 or float32. The usual chain for files:
//   decode, random_crop / resize, random_horizontal_flip, rescale(1/255),
//   normalize(mean, std), hwc_to_chw, random_erasing.
// Random transforms draw from the generator the pipeline gives each sample.
#include <vector>

#include "kiln/data/pipeline.h"

namespace kiln::data::vision {

enum class Layout { HWC, CHW };

// uint8 file bytes [n] to uint8 [H, W, channels].
Transform decode(int channels = 3);
// Bilinear, sampling at pixel centres (as PIL and OpenCV without antialiasing).
Transform resize(int64_t height, int64_t width, Layout layout = Layout::HWC);
// Pads every side by `padding` with `fill`, then crops a random height x width window.
Transform random_crop(int64_t height, int64_t width, int64_t padding = 0, double fill = 0, Layout layout = Layout::HWC);
Transform center_crop(int64_t height, int64_t width, Layout layout = Layout::HWC);
Transform random_horizontal_flip(double probability = 0.5, Layout layout = Layout::HWC);
// Rotates by an angle drawn from [-degrees, degrees] about the centre
// (bilinear); uncovered pixels get `fill`.
Transform random_rotation(double degrees, double fill = 0, Layout layout = Layout::HWC);
// x * scale + shift, as float32 (rescale(1.0 / 255) maps bytes to [0, 1]).
Transform rescale(double scale, double shift = 0);
// (x - mean[c]) / std[c] per channel; needs float32 (rescale uint8 first).
Transform normalize(std::vector<double> mean, std::vector<double> std, Layout layout = Layout::HWC);
Transform hwc_to_chw();
// With `probability`, sets a random rectangle (area a fraction in `scale` of
// the image, aspect ratio in `ratio`) to `value`, as torchvision's RandomErasing.
Transform random_erasing(double probability = 0.5, std::pair<double, double> scale = {0.02, 0.33},
                         std::pair<double, double> ratio = {0.3, 3.3}, double value = 0, Layout layout = Layout::CHW);

}  // namespace kiln::data::vision
