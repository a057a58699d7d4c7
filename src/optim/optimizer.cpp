#include <cmath>
#include <map>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/optim.h"
#include "kiln/registry.h"

namespace kiln::optim {
namespace {
std::vector<std::vector<Tensor>> zero_state(const std::vector<ParamGroup>& groups) {
  std::vector<std::vector<Tensor>> s;
  for (auto& g : groups) {
    s.emplace_back();
    for (auto& p : g.params) s.back().push_back(zeros_like(p));
  }
  return s;
}
std::vector<ParamGroup> one_group(std::vector<Tensor> params, double lr, double wd) {
  return {ParamGroup{std::move(params), lr, wd}};
}

// The parameters of a group that have a gradient, in runs of one dtype and
// device (indices into the group), each of which one multi-tensor call updates.
std::vector<std::vector<size_t>> update_runs(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  std::map<std::pair<int, std::string>, std::vector<size_t>> by_kind;
  for (size_t i = 0; i < params.size(); ++i)
    if (grads[i].defined()) by_kind[{static_cast<int>(params[i].dtype()), params[i].device().str()}].push_back(i);
  std::vector<std::vector<size_t>> runs;
  for (auto& [kind, run] : by_kind) runs.push_back(std::move(run));
  return runs;
}

// Updates a run of parameters: `lists` are the parameters, their gradients
// and their state, each indexed like the group (an empty list: a state the
// call goes without). One call of `many` takes the scalars, then each list's
// tensors of the run; a run of one calls `one`, which takes its tensors and
// then the scalars.
void update_run(const OpDef& one, const OpDef& many, const std::vector<Tensor>& scalars, const std::vector<size_t>& run,
                const std::vector<const std::vector<Tensor>*>& lists, Attrs attrs) {
  std::vector<Tensor> in;
  if (run.size() == 1) {
    for (const auto* l : lists) in.push_back(l->empty() ? Tensor() : (*l)[run[0]]);
    in.insert(in.end(), scalars.begin(), scalars.end());
    call(one, in, attrs);
    return;
  }
  in = scalars;
  for (const auto* l : lists) {
    if (l->empty()) continue;
    for (size_t i : run) in.push_back((*l)[i]);
  }
  attrs.set("count", static_cast<int64_t>(run.size()));
  call(many, in, attrs);
}
}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  size_t count = 0;
  for (auto& g : groups_) count += g.params.size();
  KILN_CHECK(count > 0, "the optimizer got no parameters, so training would run at a constant loss without a word. "
             "Either nothing is trainable (every parameter is frozen: see the Cell's summary() and freeze(prefix, "
             "false)), or the parameters were taken before the layers were built or registered (call "
             "trainable_params() after the Cell is constructed, with every child registered by register_cell)");
  for (auto& g : groups_) {
    KILN_CHECK(g.lr >= 0, "learning rate must be >= 0, got ", g.lr);
    for (auto& p : g.params)
      KILN_CHECK(p.defined() && p.requires_grad(), "optimizer parameters must require grad (",
                 p.defined() ? p.meta_str() : "undefined", "); pass cell.trainable_params()");
  }
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.zero_grad();
}

void Optimizer::for_each_gradient(bool add_weight_decay,
                                  const std::function<void(ParamGroup&, size_t, size_t, Tensor&)>& fn) {
  NoGradGuard guard;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& g = groups_[gi];
    for (size_t i = 0; i < g.params.size(); ++i) {
      Tensor grad = g.params[i].grad();
      if (!grad.defined()) continue;
      if (add_weight_decay && g.weight_decay != 0) grad = grad + g.params[i] * g.weight_decay;
      fn(g, gi, i, grad);
    }
  }
}

void Optimizer::step_with_update_ops() {
  NoGradGuard guard;
  prepare_state();
  std::vector<std::vector<Tensor>> grads;
  std::vector<Tensor> lr;
  for (auto& g : groups_) {
    lr.push_back(scalar_tensor(g.lr, DType::Float64));
    grads.emplace_back();
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      grads.back().push_back(grad.defined() ? grad.contiguous() : grad);
    }
  }
  Tensor step = scalar_tensor(static_cast<double>(steps_ + 1), DType::Float64);
  KILN_ASSERT(update_fused(grads, lr, step), name(), " has no fused update to step with");
  ++steps_;
}

std::vector<Tensor> Optimizer::prepare_state() {
  std::vector<Tensor> all;
  for (auto& [name, store] : buffers())
    for (size_t g = 0; g < store->size(); ++g)
      for (size_t i = 0; i < (*store)[g].size(); ++i) {
        Tensor& t = (*store)[g][i];
        if (!t.defined()) t = zeros_like(groups_[g].params[i]);
        all.push_back(t);
      }
  return all;
}

namespace {
// "g<group>.p<param>.<buffer>", built by appending (GCC 12 warns falsely on chained operator+).
std::string state_key(size_t g, size_t i, const std::string& name) {
  std::string key = "g";
  key += std::to_string(g);
  key += ".p";
  key += std::to_string(i);
  key += '.';
  key += name;
  return key;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("step", scalar_tensor(static_cast<double>(steps_), DType::Int64));
  auto* self = const_cast<Optimizer*>(this);
  for (auto& [name, store] : self->buffers())
    for (size_t g = 0; g < store->size(); ++g)
      for (size_t i = 0; i < (*store)[g].size(); ++i) {
        const Tensor& t = (*store)[g][i];
        if (t.defined()) out.emplace_back(state_key(g, i, name), t.clone());
      }
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  NoGradGuard guard;
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  auto step = by_name.find("step");
  KILN_CHECK(step != by_name.end(), "optimizer state has no 'step' entry");
  int64_t restored_steps = step->second.item<int64_t>();
  std::vector<std::pair<Tensor*, Tensor>> assignments;
  size_t used = 1;
  for (auto& [name, store] : buffers())
    for (size_t g = 0; g < store->size(); ++g)
      for (size_t i = 0; i < (*store)[g].size(); ++i) {
        auto it = by_name.find(state_key(g, i, name));
        if (it == by_name.end()) continue;
        const Tensor& p = groups_[g].params[i];
        KILN_CHECK(it->second.shape() == p.shape(), "optimizer state '", it->first, "' has shape ",
                   shape_str(it->second.shape()), " but its parameter has shape ", shape_str(p.shape()),
                   "; the state belongs to another model");
        assignments.emplace_back(&(*store)[g][i], it->second.to(p.dtype()).to(p.device()));  // beside its parameter
        ++used;
      }
  KILN_CHECK(used == state.size(), "optimizer state has ", state.size() - used,
             " entries this optimizer does not know; it was saved by another kind of optimizer or model");
  for (auto& [slot, value] : assignments) *slot = value.clone();
  steps_ = restored_steps;
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.lr = lr;
}

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(one_group(std::move(params), o.lr, o.weight_decay), o) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o) : Optimizer(std::move(groups)), o_(o) {
  KILN_CHECK(o.momentum >= 0, "SGD momentum must be >= 0, got ", o.momentum);
  KILN_CHECK(!o.nesterov || o.momentum > 0, "Nesterov momentum needs momentum > 0");
  // Buffers start undefined: PyTorch starts each at the parameter's first gradient.
  for (auto& g : groups_) momentum_.emplace_back(g.params.size());
}

void SGD::step() { step_with_update_ops(); }

bool SGD::update_fused(const std::vector<std::vector<Tensor>>& grads, const std::vector<Tensor>& lr, const Tensor&,
                       const Tensor& loss) {
  static const OpDef& one = OpRegistry::instance().get("sgd_update");
  static const OpDef& many = OpRegistry::instance().get("sgd_update_many");
  static const std::vector<Tensor> none;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Attrs attrs{{"momentum", o_.momentum}, {"nesterov", o_.nesterov}, {"weight_decay", groups_[gi].weight_decay}};
    const std::vector<Tensor>& buffers = o_.momentum > 0 ? momentum_[gi] : none;
    for (const auto& run : update_runs(groups_[gi].params, grads[gi]))
      update_run(one, many, {lr[gi], loss}, run, {&groups_[gi].params, &grads[gi], &buffers}, attrs);
  }
  return true;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions o) : Adam(one_group(std::move(params), o.lr, o.weight_decay), o) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Optimizer(std::move(groups)), o_(o) {
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "Adam betas must be in [0, 1), got ", o.beta1,
             " and ", o.beta2);
  m_ = zero_state(groups_);
  v_ = zero_state(groups_);
}

void Adam::step() { step_with_update_ops(); }

bool Adam::update_fused(const std::vector<std::vector<Tensor>>& grads, const std::vector<Tensor>& lr,
                        const Tensor& step, const Tensor& loss) {
  static const OpDef& one = OpRegistry::instance().get("adam_update");
  static const OpDef& many = OpRegistry::instance().get("adam_update_many");
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Attrs attrs{{"beta1", o_.beta1},
                      {"beta2", o_.beta2},
                      {"eps", o_.eps},
                      {"weight_decay", groups_[gi].weight_decay},
                      {"decoupled", o_.decoupled_weight_decay}};
    for (const auto& run : update_runs(groups_[gi].params, grads[gi]))
      update_run(one, many, {lr[gi], step, loss}, run, {&groups_[gi].params, &grads[gi], &m_[gi], &v_[gi]}, attrs);
  }
  return true;
}

RMSProp::RMSProp(std::vector<Tensor> params, RMSPropOptions o)
    : Optimizer(one_group(std::move(params), o.lr, o.weight_decay)), o_(o) {
  KILN_CHECK(o.alpha >= 0 && o.alpha < 1, "RMSProp alpha must be in [0, 1), got ", o.alpha);
  square_avg_ = zero_state(groups_);
  momentum_ = zero_state(groups_);
}

void RMSProp::step() { step_with_update_ops(); }

bool RMSProp::update_fused(const std::vector<std::vector<Tensor>>& grads, const std::vector<Tensor>& lr,
                           const Tensor&, const Tensor& loss) {
  static const OpDef& one = OpRegistry::instance().get("rmsprop_update");
  static const OpDef& many = OpRegistry::instance().get("rmsprop_update_many");
  static const std::vector<Tensor> none;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Attrs attrs{
        {"alpha", o_.alpha}, {"eps", o_.eps}, {"momentum", o_.momentum}, {"weight_decay", groups_[gi].weight_decay}};
    const std::vector<Tensor>& buffers = o_.momentum > 0 ? momentum_[gi] : none;
    for (const auto& run : update_runs(groups_[gi].params, grads[gi]))
      update_run(one, many, {lr[gi], loss}, run, {&groups_[gi].params, &grads[gi], &square_avg_[gi], &buffers}, attrs);
  }
  return true;
}

std::unique_ptr<Adam> make_adamw(std::vector<Tensor> params, double lr, double weight_decay) {
  AdamOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.decoupled_weight_decay = true;
  return std::make_unique<Adam>(std::move(params), o);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard guard;
  double total = 0;
  for (auto& p : params)
    if (p.grad().defined()) total += sum(square(p.grad().to(DType::Float64))).item<double>();
  double norm = std::sqrt(total);
  if (norm > max_norm && norm > 0) {
    double scale = max_norm / (norm + 1e-6);
    for (auto& p : params) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(scale);
    }
  }
  return norm;
}

}  // namespace kiln::optim
