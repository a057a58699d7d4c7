#pragma once
// The ops of the custom_ops package, one file each.
#include <kiln/plugin.h>

void define_rms_norm(kiln::plugin::Registry& reg);
void define_swiglu(kiln::plugin::Registry& reg);
