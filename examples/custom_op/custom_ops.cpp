// The package's entry points: Kiln calls this when it loads the library.
#include "custom_ops.h"

KILN_PLUGIN(custom_ops, reg) {
  define_rms_norm(reg);
  define_swiglu(reg);
}
