#pragma once
// Data: datasets, samplers, the pipeline, readers and vision transforms.
#include "kiln/data/dataset.h"
#include "kiln/data/pipeline.h"
#include "kiln/data/readers.h"
#include "kiln/data/sampler.h"
#include "kiln/data/image.h"
#include "kiln/data/shards.h"
#include "kiln/data/vision.h"
