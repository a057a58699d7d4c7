/* The C ABI between Kiln and an op package (a shared library loaded with
 * kiln::load_op_library, --plugin or KILN_PLUGIN_PATH). It is plain C so that
 * a package built with one compiler and one Kiln release loads into another:
 * the package links no Kiln symbol; everything it calls comes through the
 * kiln_host_api table it is handed. Most packages use the C++ helpers in
 * kiln/plugin.h instead of this header directly.
 *
 * Compatibility: KILN_PLUGIN_ABI_VERSION changes when a function here changes
 * meaning or a struct changes layout; a package built for another version is
 * refused, naming both. New host functions are only appended to
 * kiln_host_api (its struct_size tells a package which it has), and new
 * fields only appended to kiln_op_def (its struct_size tells Kiln which the
 * package filled), without a new version. */
#ifndef KILN_PLUGIN_ABI_H
#define KILN_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_PLUGIN_ABI_VERSION 1u

/* Element types, with stable values. */
enum kiln_dtype {
  KILN_FLOAT32 = 0,
  KILN_FLOAT64 = 1,
  KILN_FLOAT16 = 2,
  KILN_BFLOAT16 = 3,
  KILN_INT32 = 4,
  KILN_INT64 = 5,
  KILN_UINT8 = 6,
  KILN_BOOL = 7,
  KILN_INT8 = 8
};

/* Tags the graph passes read (the same meanings as kiln::OpTag). */
enum kiln_op_tag {
  KILN_TAG_ELEMENTWISE = 1u << 0,  /* needs math_arity, math_f32 and math_f64: joins elementwise fusion */
  KILN_TAG_REDUCTION = 1u << 1,
  KILN_TAG_NONDIFFERENTIABLE = 1u << 3,
  KILN_TAG_FUSIBLE = 1u << 4,
  KILN_TAG_BACKWARD = 1u << 6,     /* exists to compute another op's gradient */
  KILN_TAG_LOSS = 1u << 7
};

/* Return codes of every callback and host function that can fail. */
enum kiln_status_code { KILN_OK = 0, KILN_ERROR = 1 };

typedef struct kiln_tensor kiln_tensor;         /* a reference to a Kiln tensor */
typedef struct kiln_attrs kiln_attrs;           /* named attributes of an op call */
typedef struct kiln_status kiln_status;         /* where a failing callback writes its message */
typedef struct kiln_registrar kiln_registrar;   /* the package load in progress */

#define KILN_PLUGIN_MAX_DIMS 16

/* An input as shape inference sees it: metadata, never data. */
typedef struct kiln_meta {
  int32_t defined; /* 0 for an omitted optional input */
  int32_t dtype;
  int32_t ndim;
  const int64_t* shape;
} kiln_meta;

/* An output shape inference fills in; Kiln sets ndim to -1 first, and an
 * output left so is an error naming the op. */
typedef struct kiln_meta_out {
  int32_t dtype;
  int32_t ndim;
  int64_t shape[KILN_PLUGIN_MAX_DIMS];
} kiln_meta_out;

typedef int (*kiln_infer_fn)(const kiln_meta* inputs, int32_t n_inputs, const kiln_attrs* attrs,
                             kiln_meta_out* outputs, int32_t n_outputs, void* user, kiln_status* status);

/* Outputs arrive allocated (contiguous, shaped by the inference function). */
typedef int (*kiln_kernel_fn)(kiln_tensor* const* inputs, int32_t n_inputs, kiln_tensor* const* outputs,
                              int32_t n_outputs, const kiln_attrs* attrs, void* user, kiln_status* status);

/* A gradient rule, written with ops called through kiln_host_api.call_op.
 * Tensors given here are borrowed (NULL for omitted inputs and for outputs
 * that received no gradient); the rule stores one new reference per input in
 * input_grads, or leaves NULL where there is none. */
typedef struct kiln_grad_args {
  kiln_tensor* const* inputs;
  int32_t n_inputs;
  kiln_tensor* const* outputs;
  int32_t n_outputs;
  kiln_tensor* const* output_grads;
  const int32_t* needs_grad; /* per input */
  const kiln_attrs* attrs;
  kiln_tensor** input_grads;
} kiln_grad_args;
typedef int (*kiln_grad_fn)(const kiln_grad_args* args, void* user, kiln_status* status);

/* An elementwise formula on contiguous runs: out[i] = f(in[0][i], ...). */
typedef void (*kiln_math_f32)(const float* const* in, float* out, int64_t n, const kiln_attrs* attrs);
typedef void (*kiln_math_f64)(const double* const* in, double* out, int64_t n, const kiln_attrs* attrs);

/* One op. Names are lowercase identifiers; inputs "x", "bias?" (optional);
 * attributes "name:kind=default" with kind int, ints, float, floats, bool,
 * string or dtype. */
typedef struct kiln_op_def {
  uint32_t struct_size; /* sizeof(kiln_op_def) as the package was built */
  const char* name;
  const char* const* inputs;
  int32_t n_inputs;
  const char* const* outputs;
  int32_t n_outputs;
  const char* const* attrs;
  int32_t n_attrs;
  uint32_t tags;
  const char* category; /* the profiler's op type; NULL: from the tags */
  kiln_infer_fn infer;
  void* infer_user;
  kiln_grad_fn grad; /* NULL: not differentiable */
  void* grad_user;
  const int32_t* differentiable_inputs; /* NULL: every floating input */
  int32_t n_differentiable_inputs;
  /* The op as one ONNX node of a custom domain (never the default one),
   * written by export and read back by the runtime; NULL: export refuses it. */
  const char* onnx_domain;
  const char* onnx_type;
  int32_t onnx_domain_version;
  /* Elementwise ops: the formula, which gives the op kernels for every float
   * dtype on every backend with a block runner and joins graph fusion. */
  int32_t math_arity;
  kiln_math_f32 math_f32;
  kiln_math_f64 math_f64;
} kiln_op_def;

typedef struct kiln_host_api {
  uint32_t abi_version;
  uint32_t struct_size;
  const char* kiln_version;

  /* Errors. A package callback that returns KILN_ERROR says why in the
   * status it was given; a host function that fails (returns KILN_ERROR or
   * NULL) leaves its message for last_error, per thread. */
  void (*set_error)(kiln_status* status, const char* message);
  const char* (*last_error)(void);

  /* Tensors. Strides are in elements; data is the first element's address
   * (device memory for a device tensor). */
  int32_t (*tensor_dtype)(const kiln_tensor* t);
  int32_t (*tensor_ndim)(const kiln_tensor* t);
  const int64_t* (*tensor_shape)(const kiln_tensor* t);
  const int64_t* (*tensor_strides)(const kiln_tensor* t);
  int64_t (*tensor_numel)(const kiln_tensor* t);
  void* (*tensor_data)(const kiln_tensor* t);
  int32_t (*tensor_is_contiguous)(const kiln_tensor* t);
  const char* (*tensor_device)(const kiln_tensor* t); /* "cpu", "cuda", "reference" */
  int32_t (*tensor_device_index)(const kiln_tensor* t);
  kiln_tensor* (*tensor_retain)(const kiln_tensor* t);
  void (*tensor_release)(kiln_tensor* t);
  /* New tensors (NULL on error). */
  kiln_tensor* (*tensor_contiguous)(const kiln_tensor* t);
  kiln_tensor* (*tensor_full)(const int64_t* shape, int32_t ndim, int32_t dtype, double value);

  /* Attributes. The getters return 1 and set *value when the attribute is
   * there, 0 when not; pointers stay valid while the attributes live. */
  int32_t (*attr_int)(const kiln_attrs* a, const char* name, int64_t* value);
  int32_t (*attr_float)(const kiln_attrs* a, const char* name, double* value);
  int32_t (*attr_bool)(const kiln_attrs* a, const char* name, int32_t* value);
  int32_t (*attr_string)(const kiln_attrs* a, const char* name, const char** value);
  int32_t (*attr_ints)(const kiln_attrs* a, const char* name, const int64_t** values, int32_t* count);
  int32_t (*attr_floats)(const kiln_attrs* a, const char* name, const double** values, int32_t* count);
  kiln_attrs* (*attrs_new)(void);
  void (*attrs_release)(kiln_attrs* a);
  void (*attrs_set_int)(kiln_attrs* a, const char* name, int64_t value);
  void (*attrs_set_float)(kiln_attrs* a, const char* name, double value);
  void (*attrs_set_bool)(kiln_attrs* a, const char* name, int32_t value);
  void (*attrs_set_string)(kiln_attrs* a, const char* name, const char* value);
  void (*attrs_set_ints)(kiln_attrs* a, const char* name, const int64_t* values, int32_t count);

  /* Runs an op (built in or from a package) with autograd, as an eager call
   * or, while a graph is traced, as a node. Stores up to max_outputs new
   * references and their count. */
  int (*call_op)(const char* op, kiln_tensor* const* inputs, int32_t n_inputs, const kiln_attrs* attrs,
                 kiln_tensor** outputs, int32_t max_outputs, int32_t* n_outputs);

  /* Registration, only while kiln_plugin_register runs. Nothing is visible
   * to the rest of Kiln until it returns KILN_OK and every definition has
   * been checked; on any error nothing of the package remains. */
  int (*define_op)(kiln_registrar* r, const kiln_op_def* def);
  /* A kernel per (op, backend, dtype). backend is "cpu", "cuda", ...: a
   * backend not loaded yet is accepted, its kernels running once it loads,
   * so one package carries its accelerator kernels everywhere. */
  int (*register_kernel)(kiln_registrar* r, const char* op, const char* backend, int32_t dtype, kiln_kernel_fn fn,
                         void* user);

  /* Runs fn(begin, end, user) over [0, n) in chunks of at least `grain` on
   * Kiln's intra-op threads (KILN_NUM_THREADS, set_num_threads, the thread
   * governor), so a package's kernels share the cores with Kiln's own
   * instead of starting threads of their own. fn must not throw. */
  void (*parallel_for)(int64_t n, int64_t grain, void (*fn)(int64_t begin, int64_t end, void* user), void* user);

  /* Inside a kernel: the stream its device work goes to (a cudaStream_t for
   * a CUDA kernel, which launches its kernels and copies there; NULL is the
   * device's default stream, and the host backends' value). Outside a
   * kernel, NULL with the reason in last_error. */
  void* (*kernel_stream)(void);
} kiln_host_api;

/* What a package exports (kiln/plugin.h's KILN_PLUGIN defines all three). */
#define KILN_PLUGIN_ABI_SYMBOL "kiln_plugin_abi_version"
#define KILN_PLUGIN_NAME_SYMBOL "kiln_plugin_name"
#define KILN_PLUGIN_REGISTER_SYMBOL "kiln_plugin_register"
typedef uint32_t (*kiln_plugin_abi_version_fn)(void);
typedef const char* (*kiln_plugin_name_fn)(void);
typedef int (*kiln_plugin_register_fn)(const kiln_host_api* api, kiln_registrar* r, kiln_status* status);

#ifdef __cplusplus
}
#endif

#endif /* KILN_PLUGIN_ABI_H */
