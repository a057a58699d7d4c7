#pragma once
// Functions the host and a device both run (formulas, random numbers): plain
// C++ that a device compiler takes as it is, marked for it where it compiles.
#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
