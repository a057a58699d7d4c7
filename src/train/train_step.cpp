// jit::TrainStep: the traced program is the eager training step itself,
// forward, loss, autograd::grad over the trainable parameters and the
// optimizer's fused update, so graph and eager share every rule.
#include "kiln/train_step.h"

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/backend.h"
#include "kiln/functional.h"
#include "nn/captured_cell.h"

namespace kiln::jit {

namespace {
// A host value into a 0-d tensor wherever it is: the learning rate, the
// step and the loss scale live beside the parameters, so that a graph on a
// device reads them there (no copy in the graph, nothing that changes
// between its runs but their contents).
template <typename T>
void write_scalar(const Tensor& t, T value) {
  copy_between(t.device(), t.device_data(), cpu_device(), &value, sizeof value);
}
}  // namespace

TrainStep::TrainStep(std::shared_ptr<nn::Cell> net, LossFn loss, std::shared_ptr<optim::Optimizer> optimizer,
                     CompileOptions options, std::shared_ptr<train::DataParallel> data_parallel)
    : net_(std::move(net)),
      loss_(std::move(loss)),
      opt_(std::move(optimizer)),
      options_(std::move(options)),
      dp_(std::move(data_parallel)) {
  KILN_CHECK(net_ && loss_ && opt_, "TrainStep needs a network, a loss and an optimizer");
  if (options_.name == "function") options_.name = net_->type_name() + "_train_step";
  step_ = scalar_tensor(0, DType::Float64);
}

void TrainStep::build() {
  state_ = opt_->prepare_state();
  const Device device = net_->device();
  lr_.clear();
  for (size_t g = 0; g < opt_->groups().size(); ++g)
    lr_.push_back(scalar_tensor(opt_->groups()[g].lr, DType::Float64).to(device));
  if (!(step_.device() == device)) step_ = step_.to(device);
  if (loss_scale_.defined() && !(loss_scale_.device() == device)) loss_scale_ = loss_scale_.to(device);
  nn::Cell* net = net_.get();
  optim::Optimizer* opt = opt_.get();
  LossFn loss_fn = loss_;
  auto lr = lr_;
  Tensor step = step_;
  const std::optional<DType> autocast = autocast_;
  const Tensor loss_scale = loss_scale_;
  auto fused = std::make_shared<bool>(true);
  auto returned = std::make_shared<std::vector<std::pair<size_t, size_t>>>();  // (group, param) of returned grads
  train::DataParallel* dp = dp_.get();
  Function program = [net, opt, loss_fn, lr, step, fused, returned, dp, autocast,
                      loss_scale](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    KILN_CHECK(in.size() == 2, "a training step takes inputs and labels");
    Tensor out, loss;
    {
      AutocastScope scope(autocast);
      out = (*net)(in[0]);
      loss = loss_fn(out, in[1]);
    }
    std::vector<Tensor> wrt;
    for (auto& g : opt->groups())
      for (auto& p : g.params)
        if (p.requires_grad()) wrt.push_back(p);
    std::vector<Tensor> flat;
    Tensor reported = loss;  // data-parallel: the ranks' mean, which every rank then acts on alike
    const Tensor scaled = loss_scale.defined() ? loss * loss_scale : loss;
    if (!wrt.empty()) flat = dp ? dp->grad(scaled, wrt, &reported) : autograd::grad({scaled}, wrt);
    Tensor finite;
    if (loss_scale.defined()) {
      if (dp) reported = reported / loss_scale;
      for (Tensor& g : flat) g = g / loss_scale;
      // Overflowed gradients skip the update as a non-finite loss does: the
      // update ops take the loss as NaN then. (The loss reported stays.)
      finite = flat.empty() ? scalar_tensor(1, DType::Bool) : all_finite(flat);
    }
    const Tensor gate = finite.defined() ? where(finite, reported, full({}, std::nan(""), reported.dtype())) : reported;
    std::vector<std::vector<Tensor>> grads;
    size_t k = 0;
    for (auto& g : opt->groups()) {
      grads.emplace_back();
      for (auto& p : g.params) grads.back().push_back(p.requires_grad() ? flat[k++] : Tensor());
    }
    std::vector<Tensor> results{reported.detach(), out.detach()};
    if (finite.defined()) results.push_back(finite);
    *fused = opt->update_fused(grads, lr, step, gate);
    returned->clear();
    if (!*fused)  // the graph hands the gradients out; the optimizer steps eagerly
      for (size_t gi = 0; gi < grads.size(); ++gi)
        for (size_t i = 0; i < grads[gi].size(); ++i)
          if (grads[gi][i].defined()) {
            results.push_back(grads[gi][i]);
            returned->push_back({gi, i});
          }
    return results;
  };
  auto impl = make_impl(program, options_, nn::detail::capture(net_));
  auto name_state = [&](const Tensor& t, const std::string& name) {
    impl->names.params[t.impl().storage.get()] = name;
    impl->params.emplace_back(name, t);
  };
  for (size_t i = 0; i < state_.size(); ++i) name_state(state_[i], "optimizer.state" + std::to_string(i));
  for (size_t g = 0; g < lr_.size(); ++g) name_state(lr_[g], "optimizer.lr" + std::to_string(g));
  name_state(step_, "optimizer.step");
  if (loss_scale_.defined()) name_state(loss_scale_, "optimizer.loss_scale");
  fn_ = CompiledFunction(impl);
  fused_ = true;
  fused_flag_ = fused;
  returned_ = returned;
}

void TrainStep::set_mixed_precision(const train::MixedPrecision& precision) {
  KILN_CHECK(!fn_.defined(), "TrainStep::set_mixed_precision: set it before the first step");
  autocast_ = precision.dtype;
  loss_scale_ = precision.effective_loss_scale() ? scalar_tensor(precision.effective_loss_scale()->initial, DType::Float32)
                                                 : Tensor();
}

void TrainStep::set_loss_scale(double scale) {
  KILN_CHECK(loss_scale_.defined(), "TrainStep::set_loss_scale: this step trains without a loss scale");
  write_scalar(loss_scale_, static_cast<float>(scale));
}

TrainStep::Result TrainStep::operator()(const Tensor& inputs, const Tensor& labels) {
  // Rebuild when the optimizer's state was replaced (load_state) since the graph was made.
  bool stale = !fn_.defined();
  if (!stale) {
    auto now = opt_->prepare_state();
    stale = now.size() != state_.size();
    for (size_t i = 0; !stale && i < now.size(); ++i) stale = !now[i].same(state_[i]);
  }
  if (stale) build();
  for (size_t g = 0; g < lr_.size(); ++g) write_scalar(lr_[g], opt_->groups()[g].lr);
  // The graph's update is the optimizer's next step; it is counted once it happened.
  write_scalar(step_, static_cast<double>(opt_->steps() + 1));
  const auto& out = fn_.run_borrowed({inputs, labels});
  fused_ = *fused_flag_;
  Result r{out[0], out[1]};
  const double loss = r.loss.item<double>();
  if (!std::isfinite(loss)) return r;  // the update was skipped, as eager training skips it
  size_t k = 2;
  if (loss_scale_.defined()) {
    r.gradients_finite = out[k++].item<bool>();
    if (!r.gradients_finite) return r;  // overflowed: skipped in the graph, or here
  }
  if (fused_) {
    opt_->count_step();
  } else {  // the optimizer steps eagerly, counting its own step
    opt_->zero_grad();
    for (auto& [gi, i] : *returned_) opt_->groups()[gi].params[i].impl().grad = out[k++].impl_ptr();
    opt_->step();
    opt_->zero_grad();
  }
  return r;
}

}  // namespace kiln::jit
