#pragma once
// The convolution layout pass over one graph, shared by its files:
// layout.cpp decides each node's plan, layout_rewrite.cpp folds neighbours
// into the plans, rewrites the nodes and inserts the reorders, with
// depthwise_chains.cpp making MobileNet blocks one node as it goes.
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/conv_algorithm.h"
#include "backends/cpu/onednn_conv.h"
#include "graph/ir.h"

namespace kiln::graph::layout {

std::string layout_name(int block);
bool is_op(const Node& n, const char* name);
bool fast(const cpu::onednn::LayoutCall& c);
// Whether one of Kiln's own kernels (patch GEMM, depthwise) takes the call.
bool own_kernel_applies(const cpu::onednn::LayoutCall& call);

// What the pass does with one node.
struct Plan {
  enum Kind { Conv, InputGrad, WeightGrad, MaxPool, MaxPoolGrad, GlobalAverage, Concat, PerChannel, Shuffle, Slice, Resize,
              ChannelAffine, AvgPool, BatchNorm, BatchNormGrad, GlobalAverageGrad } kind;
  cpu::onednn::LayoutCall call = {};
  bool few_channels = false;  // WeightGrad: the direct kernel for a plain x with few channels
  bool from_pool = false;     // WeightGrad, few channels: gy is a max-pool gradient made inside it
  bool pooled = false;        // Conv (inference, few channels): the max pool after it is computed inside it
  cpu::PoolWindow window = {};  // MaxPool, AvgPool, MaxPoolGrad, WeightGrad from_pool
  int block = 0;  // MaxPool, AvgPool, MaxPoolGrad, GlobalAverage, Concat, Resize, WeightGrad from_pool: the channel block of x
  std::vector<bool> per_channel = {};  // PerChannel: which inputs are [N, C, 1, 1] vectors
  int gy_block = 0;  // MaxPoolGrad, WeightGrad from_pool: the layout of the pool's incoming gradient
  int residual = -1;  // Conv, BatchNorm: value id of the shortcut added to the output
  int mask = -1;      // BatchNormGrad: the ReLU output whose backward is fused (gy counts where it is > 0)
  // Conv, Resize: writes channels [concat_at, ...) of a concatenation's
  // buffer (one image), taking that buffer over from the part before it (carry).
  int64_t concat_at = -1;
  int carry = -1;
  int64_t groups = 0;  // Shuffle
  int64_t start = 0;   // Slice: the first channel
  bool relu = false;   // ChannelAffine, BatchNorm: a ReLU after it, folded in; MaxPool: the convolution's before it
  bool count_include_pad = true;  // AvgPool
};

// The pass over one graph: decides each node's plan in order (a value's
// layout is known before its readers are visited), then rewrites the nodes
// and inserts the reorders.
class LayoutPass {
 public:
  LayoutPass(Graph& g, bool training, bool timed, bool dynamic_batch)
      : g_(g), training_(training), timed_(timed), dynamic_batch_(dynamic_batch),
        block_(cpu::onednn::preferred_block()) {}

  std::string run();

 private:
  // layout.cpp: each node's plan
  int block_for(int id) const;
  bool blockable(int id) const { return block_for(id) != 0; }
  bool reads_blocked_natively(int node, int k) const;
  bool wants_blocked(int id) const;
  void plan_node(int at);
  void plan_elementwise(int at);
  int concat_block(const Node& n) const;
  bool blocked_interpolate(const Node& n) const;
  bool plan_channel_shuffle(int at);
  bool plan_channel_affine(int at, int block);
  bool plan_batch_norm(int at, int block);
  bool plan_batch_norm_grad(int at);
  int fold_into_batch_norm(int y, Plan& p, int at);
  std::vector<int> concatenated_parts(int x, int64_t groups);
  std::vector<int> channel_slices(int y, int block);
  bool blocked_slice(const Node& n, int block) const;
  bool indices_recomputable(const Node& n) const;
  void plan_conv(int at);
  bool runs_fast(const cpu::onednn::LayoutCall& call, const Node& conv) const;
  bool own_kernels(const Node& conv) const;
  bool fast_variant(cpu::onednn::LayoutCall& call, int x, int y) const;
  void plan_input_grad(int at);
  void plan_weight_grad(int at);
  void plan_pool_grad(int at);
  void set(int at, const Plan& p, std::vector<int> reads);

  // layout_rewrite.cpp: the folds, the rewrite and the reorders
  size_t fold_residuals();
  size_t fold_hard_activations();
  void absorb(int at, Plan& plan, const cpu::onednn::LayoutCall& with, std::initializer_list<int> nodes);
  bool fold_relu6(int at, Plan& plan, Node& clamp);
  bool fold_silu(int at, Plan& plan);
  bool fold_channel_scale(int at, const Plan& plan, Node& k);
  const cpu::onednn::LayoutCall* pointwise_before(const Plan& plan, const Node& k) const;
  const cpu::onednn::LayoutCall* depthwise_after(const Plan& plan, const Node& k) const;
  const cpu::onednn::LayoutCall* depthwise_before(const Plan& plan, const Node& k) const;
  bool fuse_pointwise(int at, const Plan& plan, Node& k);
  bool join_depthwise(int at, const Plan& plan, Node& k);
  int scaling_mul(const Plan& plan, const Node& k) const;
  size_t write_concats_in_place();
  void view_concat_part(int part, int concat, int whole, int64_t first);
  void fuse_first_layer_pools();
  void drop_removed_plans();
  void move_relus_past_pools();
  void fuse_pool_grads_into_first_layers();
  cpu::ConvAlgorithm chosen_algorithm(const Plan& plan, const Node& k, int pool = -1) const;
  cpu::ConvAlgorithm own_algorithm(const Plan& plan, Node& k, int pool);
  int winograd_pool(const Plan& plan, const Node& k) const;
  void take_pool(int at, Plan& plan, Node& k, int pool);
  void prepare_constant_weights(Plan& plan, Node& k);
  void read_in_place(int at, Node& k, int id, int block);
  void rewrite_nodes();
  void batch_only(Node& k) const;
  int reorder_copy(int id, int to);
  bool same_memory_in_both(int id, int want) const;
  void insert_reorders();
  std::string summary(size_t residuals, size_t hard_activations, size_t read_blocked, size_t concats_in_place) const;

  Graph& g_;
  const bool training_;
  const bool timed_;  // algorithms chosen by timing them (PassOptions::timed_choices)
  const bool dynamic_batch_;  // PassOptions::dynamic_batch: convolutions choose per batch size class
  const int block_;
  std::vector<int> uses_;
  std::vector<std::vector<std::pair<int, int>>> readers_;  // value -> (node, input index)
  std::vector<int> block_of_;                             // value -> its channel block (0: plain NCHW)
  std::map<int, Plan> plans_;                             // node -> its rewrite
  std::map<int, std::vector<int>> reads_;                 // node -> the block each input is read in (0: plain)
  std::set<int> pools_;                                   // blocked max pools (no indices)
  std::map<std::pair<int, int>, int> copies_;             // (value, block) -> its copy in that layout (0: NCHW)
  std::vector<std::vector<Node>> insert_after_;
  std::vector<Node> prologue_;  // reorders of graph inputs and constants
  size_t winograd2_ = 0;        // convolutions run by Winograd's F(2x2, 3x3)
  size_t winograd4_ = 0;        // and F(4x4, 3x3)
  size_t patch_gemm_ = 0;       // convolutions run as patch GEMMs
  size_t depthwise_ = 0;        // depthwise convolutions run on Kiln's kernel
  size_t adaptive_ = 0;         // convolutions that choose per batch size class as they run
  size_t pointwise_in_depthwise_ = 0;  // 1x1 layers made inside the depthwise layer next to them
  // Outputs of 1x1 patch GEMMs (no residual, scale or concatenation), by
  // value: a depthwise layer reading one may make it (fuse_pointwise).
  std::map<int, cpu::onednn::LayoutCall> pointwise_outputs_;
  // Outputs of depthwise layers on Kiln's kernel, by value: a 1x1 patch
  // GEMM reading one may join it (join_depthwise).
  struct DepthwiseOutput {
    int node;
    cpu::onednn::LayoutCall call;
    std::optional<cpu::onednn::LayoutCall> expand;  // made inside it already
  };
  std::map<int, DepthwiseOutput> depthwise_outputs_;
  // Values whose producers' threads each wrote a band of rows across all
  // channels (patch_gemm_splits_rows): a max pool of one is split alike.
  std::set<int> row_banded_;
};

}  // namespace kiln::graph::layout
