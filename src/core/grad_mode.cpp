#include "kiln/grad_mode.h"

namespace kiln::autograd {
namespace {
thread_local bool t_grad_enabled = true;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

}  // namespace kiln::autograd
