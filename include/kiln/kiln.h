#pragma once
// Everything public in Kiln.
#include "kiln/allocator.h"
#include "kiln/attrs.h"
#include "kiln/autograd.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/generator.h"
#include "kiln/parallel.h"
#include "kiln/registry.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
