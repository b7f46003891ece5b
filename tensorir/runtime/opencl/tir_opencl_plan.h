/* The plan tables that tensorir/codegen/opencl_package.py generates (plan.c) and the
 * static runtime tir_opencl.c executes. No system headers: this is compiled with
 * -ffreestanding -nostdinc for any target triple (an Android build needs no NDK).
 */
#ifndef TIR_OPENCL_PLAN_H
#define TIR_OPENCL_PLAN_H

typedef __SIZE_TYPE__ size_t;
typedef __UINT64_TYPE__ tir_u64;

/* Where a step argument lives (tensorir.plan.Arg.kind); TIR_IMAGE: a weight read as an
 * image (index: into tir_plan.images). */
enum { TIR_INPUT = 0, TIR_OUTPUT = 1, TIR_WEIGHT = 2, TIR_WORKSPACE = 3, TIR_IMAGE = 4 };
/* Where a step runs (tensorir.plan.KernelCall.device). */
enum { TIR_GPU = 0, TIR_CPU = 1 };

typedef struct {
  int kind;        /* TIR_INPUT ... TIR_WORKSPACE */
  tir_u64 index;   /* input/output: its index; weight/workspace: byte offset */
  tir_u64 bytes;   /* the tensor's size (transfers around CPU steps); 0: unknown */
} tir_arg;

/* A CPU step calls a generated trampoline that unpacks the argument pointers and calls
 * the LLVM kernel `void sym(void *a0, void *a1, ...)`. */
typedef void (*tir_cpu_fn)(void *const *args);

typedef struct {
  const char *name;     /* kernel name (GPU) or LLVM symbol (CPU), for messages */
  int device;           /* TIR_GPU or TIR_CPU */
  int kernel;           /* TIR_GPU: index into tir_plan.kernels of its first launch */
  int launches;         /* TIR_GPU: kernels kernel .. kernel + launches - 1, in order, same args */
  tir_cpu_fn cpu;       /* TIR_CPU: the trampoline */
  int nargs;
  const tir_arg *args;  /* GPU: each becomes the two kernel args (cl_mem base, ulong off),
                           a TIR_IMAGE one kernel arg (the image) */
} tir_step;

/* A read-only RGBA image2d made once, at load, from the weights' bytes at `offset`
 * (tensorir.plan.ImageParam: texel (x, y) = 16 or 8 bytes at offset + (y*width + x) * texel). */
typedef struct {
  tir_u64 offset;  /* byte offset in the weights blob */
  size_t width, height;
  int half;        /* 1: CL_HALF_FLOAT channels, 0: CL_FLOAT */
} tir_image;

typedef struct {
  const char *name;   /* the __kernel function's name in the program */
  int dims;           /* 1 to 3 */
  size_t global[3];
  size_t local[3];    /* all 0: let the driver choose (local_work_size NULL) */
} tir_kernel_info;

typedef struct {
  tir_arg dst, src;
  tir_u64 bytes;
} tir_copy;

typedef struct {
  const char *source;        /* every kernel, one OpenCL C program */
  size_t source_len;
  const char *source_hash;   /* sha256 of source (hex), part of the binary cache key */
  int nkernels;
  const tir_kernel_info *kernels;
  int nsteps;
  const tir_step *steps;
  int ncopies;
  const tir_copy *copies;
  int ninputs;
  const tir_u64 *input_bytes;
  int noutputs;
  const tir_u64 *output_bytes;
  tir_u64 workspace_bytes;
  tir_u64 weights_bytes;
  const unsigned char *weights; /* embedded blob, or 0: read from tir_create's weights_path */
  int nimages;
  const tir_image *images;
} tir_plan;

extern const tir_plan tir_the_plan;

#endif
