/* tensorir's OpenCL host runtime: runs a generated plan (tir_opencl_plan.h) on an OpenCL
 * device found at run time. Built for any triple with
 *   clang --target=T -ffreestanding -nostdinc -fno-stack-protector -fPIC -O2 -fvisibility=hidden
 * so it includes no system header: the few libc functions it uses are declared below, the
 * OpenCL types, constants and entry points in tir_opencl_api.h (from the Khronos headers).
 * libOpenCL.so is dlopen'ed and every cl* function resolved with dlsym, so the library has
 * no DT_NEEDED on it and loads on machines without OpenCL (tir_create then fails with one
 * line from tir_last_error()).
 *
 * Device memory: one buffer per graph input and output, one for the weights (uploaded
 * once in tir_create), one for the workspace, and one read-only image2d per weight that a
 * kernel reads as an image (made from the weights' bytes in tir_create; clCreateImage is
 * resolved apart, so OpenCL 1.1 drivers still load plans without images). A GPU kernel
 * argument is (buffer, byte offset), or an image (one argument), set once in tir_create
 * on a cl_kernel object per step, so tir_run only enqueues: the inputs' writes, every step, the final copies, the outputs' reads, with no
 * host synchronisation between GPU steps. A CPU step (an LLVM kernel) reads its arguments
 * into host mirrors (blocking), runs, and writes back what it may have written.
 *
 * The single in-order queue always has CL_QUEUE_PROFILING_ENABLE: tir_run passes no event
 * objects, so the cost is a timestamp per command, while a second queue for tir_profile
 * would need its own kernel objects (arguments are per kernel object) and doubled setup.
 * tir_last_error() is one process-wide buffer: not thread-safe (neither is a model object).
 */
#include "tir_opencl_api.h"

#define TIR_API __attribute__((visibility("default")))

/* ---- libc (declared, not included) ------------------------------------------------------ */
struct tir_timespec { long tv_sec; long tv_nsec; };
void *dlopen(const char *path, int flags);
void *dlsym(void *handle, const char *name);
char *dlerror(void);
void *malloc(size_t n);
void *calloc(size_t n, size_t size);
void free(void *p);
void *memcpy(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
void *fopen(const char *path, const char *mode);
size_t fread(void *p, size_t size, size_t n, void *f);
size_t fwrite(const void *p, size_t size, size_t n, void *f);
int fclose(void *f);
int rename(const char *from, const char *to);
int getpid(void);
int snprintf(char *s, size_t n, const char *fmt, ...);
char *getenv(const char *name);
int clock_gettime(int clock, struct tir_timespec *ts);
#define RTLD_NOW 2 /* glibc and LP64 bionic; RTLD_LOCAL is 0 on both */
#define CLOCK_MONOTONIC 1

/* One table of entry points per process (libOpenCL.so stays loaded once found). */
static struct {
#define X(name, ret, args) ret(*name) args;
  CL_FUNCTIONS(X)
#undef X
} cl;
static void *cl_lib;
/* OpenCL 1.2: resolved apart, so that drivers without it load plans that have no images */
static cl_mem (*cl_create_image)(cl_context, cl_bitfield, const cl_image_format *, const cl_image_desc *,
                                 void *, cl_int *);

/* ---- errors ------------------------------------------------------------------------------- */
static char last_error[512];

#define FAIL(...) (snprintf(last_error, sizeof last_error, __VA_ARGS__), -1)

TIR_API const char *tir_last_error(void) { return last_error; }

/* ---- small string helpers (no libc string.h) ---------------------------------------------- */
static size_t str_len(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

static char lower(char c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

/* Case-insensitive substring test. */
static int contains_ci(const char *hay, const char *needle) {
  for (; *hay; hay++) {
    size_t k = 0;
    while (needle[k] && lower(hay[k]) == lower(needle[k])) k++;
    if (!needle[k]) return 1;
  }
  return !*needle;
}

static int same_bytes(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

/* The first 64-byte aligned address in a block (blocks are allocated 64 bytes larger). */
static unsigned char *align64(void *p) {
  return (unsigned char *)p + (64 - (intptr_t)p % 64) % 64;
}

/* FNV-1a over a string, chained: the program-cache key. */
static tir_u64 fnv1a(tir_u64 h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return (h ^ '\n') * 1099511628211ULL;
}

/* ---- loading libOpenCL -------------------------------------------------------------------- */
static int load_opencl(void) {
  if (cl_lib) return 0;
  static const char *const names[] = {
      "libOpenCL.so", "libOpenCL.so.1",
#ifdef __ANDROID__
      "/system/vendor/lib64/libOpenCL.so", "/vendor/lib64/libOpenCL.so",
      "/system/lib64/libOpenCL.so",
#endif
  };
  const char *override = getenv("TIR_OPENCL_LIBRARY"); /* a path or name to use instead */
  void *h = 0;
  if (override && *override) {
    h = dlopen(override, RTLD_NOW);
    if (!h) return FAIL("TIR_OPENCL_LIBRARY=%s: cannot load it: %s", override, dlerror());
  } else {
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) h = dlopen(names[i], RTLD_NOW);
    if (!h) return FAIL("libOpenCL.so not found (no OpenCL driver installed)");
  }
#define X(name, ret, args)                                                                     \
  cl.name = (ret(*) args)dlsym(h, #name);                                                      \
  if (!cl.name) return FAIL("%s: no symbol %s", override && *override ? override : "libOpenCL.so", #name);
  CL_FUNCTIONS(X)
#undef X
  cl_create_image = (cl_mem(*)(cl_context, cl_bitfield, const cl_image_format *, const cl_image_desc *, void *,
                               cl_int *))dlsym(h, "clCreateImage");
  cl_lib = h;
  return 0;
}

/* ---- the model ---------------------------------------------------------------------------- */
struct tir_model {
  const tir_plan *plan;
  cl_platform_id platform;
  cl_device_id device;
  cl_context ctx;
  cl_command_queue queue;
  cl_program program;
  cl_kernel *kernels;          /* one per launch of a GPU step (slot[s] ..): arguments set once */
  int *slot;                   /* step -> its first launch in kernels / events */
  int nslots;
  cl_mem *inputs, *outputs;    /* device buffers */
  cl_mem weights, workspace;
  cl_mem *images;              /* plan->images, made from the weights at load */
  const unsigned char *host_weights; /* embedded blob or weights_block (CPU steps read it) */
  void *weights_block;         /* weights read from a file (owned) */
  void *workspace_block;       /* host mirror of the workspace for CPU steps (owned) */
  unsigned char *host_workspace;
  cl_event *events;            /* tir_profile: one per launch */
  int from_cache;              /* 1 when the program came from the binary cache */
  char name[256];              /* "<platform> / <device>" */
  char key[1024];              /* what the cached binary must match */
};
typedef struct tir_model tir_model;

static int pick_device(tir_model *m) {
  cl_uint np = 0;
  cl_int err = cl.clGetPlatformIDs(0, 0, &np);
  if (err != CL_SUCCESS || np == 0) return FAIL("no OpenCL platform (clGetPlatformIDs: %d)", err);
  cl_platform_id ps[16];
  if (np > 16) np = 16;
  if ((err = cl.clGetPlatformIDs(np, ps, 0)) != CL_SUCCESS) return FAIL("clGetPlatformIDs failed: %d", err);
  const char *want = getenv("TIR_OPENCL_PLATFORM");
  char names[16][128], seen[512] = "";
  int ok[16], any = 0;
  for (cl_uint i = 0; i < np; i++) {
    names[i][0] = 0;
    cl.clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof names[i], names[i], 0);
    names[i][sizeof names[i] - 1] = 0;
    ok[i] = !want || !*want || contains_ci(names[i], want);
    any |= ok[i];
    size_t n = str_len(seen);
    snprintf(seen + n, sizeof seen - n, "%s%s", n ? ", " : "", names[i]);
  }
  if (!any) return FAIL("no OpenCL platform matches TIR_OPENCL_PLATFORM=%s (found: %s)", want, seen);
  /* The first GPU of a matching platform, else the first device of any type. */
  cl_bitfield types[2] = {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL};
  for (int t = 0; t < 2; t++)
    for (cl_uint i = 0; i < np; i++) {
      cl_uint nd = 0;
      if (!ok[i] || cl.clGetDeviceIDs(ps[i], types[t], 1, &m->device, &nd) != CL_SUCCESS || !nd) continue;
      m->platform = ps[i];
      char dev[128] = "", drv[128] = "", ver[128] = "";
      cl.clGetDeviceInfo(m->device, CL_DEVICE_NAME, sizeof dev - 1, dev, 0);
      cl.clGetDeviceInfo(m->device, CL_DRIVER_VERSION, sizeof drv - 1, drv, 0);
      cl.clGetDeviceInfo(m->device, CL_DEVICE_VERSION, sizeof ver - 1, ver, 0);
      snprintf(m->name, sizeof m->name, "%s / %s", names[i], dev);
      snprintf(m->key, sizeof m->key, "%s\n%s\n%s\n%s\n%s", m->plan->source_hash, names[i], dev, drv, ver);
      return 0;
    }
  return FAIL("no OpenCL device (platforms: %s)", seen);
}

/* ---- program: build from source, with a binary cache -------------------------------------- */
/* Cache file: "TIRCLBN1", u64 FNV-1a of m->key, u64 size, then the device binary. */
static const char cache_magic[8] = {'T', 'I', 'R', 'C', 'L', 'B', 'N', '1'};

static cl_program program_from_cache(tir_model *m, const char *path) {
  void *f = fopen(path, "rb");
  if (!f) return 0;
  char magic[8];
  tir_u64 head[2];
  unsigned char *bin = 0;
  cl_program p = 0;
  if (fread(magic, 1, 8, f) == 8 && same_bytes(magic, cache_magic, 8) &&
      fread(head, 8, 2, f) == 2 && head[0] == fnv1a(14695981039346656037ULL, m->key) &&
      head[1] > 0 && (bin = malloc(head[1])) && fread(bin, 1, head[1], f) == head[1]) {
    size_t size = head[1];
    const unsigned char *bins[1] = {bin};
    cl_int status = 0, err = 0;
    p = cl.clCreateProgramWithBinary(m->ctx, 1, &m->device, &size, bins, &status, &err);
    if (p && (err != CL_SUCCESS || status != CL_SUCCESS || cl.clBuildProgram(p, 1, &m->device, "", 0, 0))) {
      cl.clReleaseProgram(p);
      p = 0; /* stale or foreign binary: build from source instead */
    }
  }
  free(bin);
  fclose(f);
  return p;
}

static void program_to_cache(tir_model *m, const char *path) {
  size_t size = 0;
  if (cl.clGetProgramInfo(m->program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, 0) || !size) return;
  unsigned char *bin = malloc(size);
  unsigned char *bins[1] = {bin};
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, getpid());
  void *f = bin && !cl.clGetProgramInfo(m->program, CL_PROGRAM_BINARIES, sizeof bins, bins, 0)
                ? fopen(tmp, "wb") : 0;
  if (f) {
    tir_u64 head[2] = {fnv1a(14695981039346656037ULL, m->key), size};
    int ok = fwrite(cache_magic, 1, 8, f) == 8 && fwrite(head, 8, 2, f) == 2 &&
             fwrite(bin, 1, size, f) == size;
    if (fclose(f) == 0 && ok) rename(tmp, path); /* atomic: readers never see half a file */
  }
  free(bin); /* a cache that cannot be written is not an error */
}

static int build_program(tir_model *m, const char *cache_path) {
  if (cache_path && (m->program = program_from_cache(m, cache_path))) {
    m->from_cache = 1;
    return 0;
  }
  const tir_plan *pl = m->plan;
  cl_int err = 0;
  const char *src = pl->source;
  m->program = cl.clCreateProgramWithSource(m->ctx, 1, &src, &pl->source_len, &err);
  if (!m->program) return FAIL("clCreateProgramWithSource failed: %d", err);
  err = cl.clBuildProgram(m->program, 1, &m->device, "", 0, 0);
  if (err != CL_SUCCESS) {
    char log[2048] = "";
    cl.clGetProgramBuildInfo(m->program, m->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, 0);
    log[300] = 0; /* the head of the log, on one line */
    for (char *c = log; *c; c++)
      if (*c == '\n' || *c == '\r') *c = ' ';
    return FAIL("clBuildProgram failed (%d): %s", err, log);
  }
  if (cache_path) program_to_cache(m, cache_path);
  return 0;
}

/* ---- buffers ------------------------------------------------------------------------------ */
static cl_mem new_buffer(tir_model *m, cl_bitfield flags, tir_u64 bytes, const void *init, const char *what) {
  cl_int err = 0;
  /* OpenCL refuses empty buffers: allocate at least 64 bytes */
  cl_mem b = cl.clCreateBuffer(m->ctx, flags, bytes < 64 ? 64 : bytes, (void *)init, &err);
  if (!b) (void)FAIL("clCreateBuffer(%s, %llu bytes) failed: %d", what, (unsigned long long)bytes, err);
  return b;
}

static int read_weights(tir_model *m, const char *path) {
  tir_u64 n = m->plan->weights_bytes;
  void *f = fopen(path, "rb");
  if (!f) return FAIL("cannot open weights file %s", path);
  m->weights_block = malloc(n + 64);
  size_t got = m->weights_block ? fread(align64(m->weights_block), 1, n, f) : 0;
  fclose(f);
  if (got != n)
    return FAIL("weights file %s: read %llu of %llu bytes", path, (unsigned long long)got,
                (unsigned long long)n);
  m->host_weights = align64(m->weights_block);
  return 0;
}

static cl_mem arg_buffer(tir_model *m, const tir_arg *a, tir_u64 *offset) {
  *offset = a->kind == TIR_WEIGHT || a->kind == TIR_WORKSPACE ? a->index : 0;
  switch (a->kind) {
  case TIR_INPUT: return m->inputs[a->index];
  case TIR_OUTPUT: return m->outputs[a->index];
  case TIR_WEIGHT: return m->weights;
  default: return m->workspace;
  }
}

/* The read-only RGBA images of plan->images, each from the weights' bytes (host_weights). */
static int make_images(tir_model *m) {
  const tir_plan *pl = m->plan;
  if (pl->nimages && !cl_create_image) return FAIL("the OpenCL library has no clCreateImage (OpenCL 1.2)");
  if (!(m->images = calloc(pl->nimages + 1, sizeof *m->images))) return FAIL("out of memory");
  for (int i = 0; i < pl->nimages; i++) {
    const tir_image *im = &pl->images[i];
    cl_image_format fmt = {CL_RGBA, im->half ? CL_HALF_FLOAT : CL_FLOAT};
    cl_image_desc desc = {CL_MEM_OBJECT_IMAGE2D, im->width, im->height, 1, 1, 0, 0, 0, 0, 0};
    cl_int err = 0;
    void *host = (void *)(m->host_weights + im->offset);
    m->images[i] = cl_create_image(m->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, &fmt, &desc, host, &err);
    if (!m->images[i])
      return FAIL("clCreateImage(weight image %d, %llu x %llu texels) failed: %d", i,
                  (unsigned long long)im->width, (unsigned long long)im->height, err);
  }
  return 0;
}

/* One cl_kernel per launch of a GPU step, its arguments set for good: (base, offset) per
 * buffer, the image itself per TIR_IMAGE argument. */
static int make_kernel(tir_model *m, const tir_step *st, const char *name, cl_kernel *out) {
  cl_int err = 0;
  cl_kernel k = *out = cl.clCreateKernel(m->program, name, &err);
  if (!k) return FAIL("clCreateKernel(%s) failed: %d", name, err);
  cl_uint pos = 0;
  for (int i = 0; i < st->nargs; i++) {
    cl_ulong off;
    if (st->args[i].kind == TIR_IMAGE) {
      err = cl.clSetKernelArg(k, pos++, sizeof(cl_mem), &m->images[st->args[i].index]);
    } else {
      cl_mem buf = arg_buffer(m, &st->args[i], &off);
      if (!(err = cl.clSetKernelArg(k, pos++, sizeof buf, &buf))) err = cl.clSetKernelArg(k, pos++, sizeof off, &off);
    }
    if (err) return FAIL("clSetKernelArg(%s, %d) failed: %d", name, i, err);
  }
  return 0;
}

static int make_kernels(tir_model *m) {
  const tir_plan *pl = m->plan;
  for (int s = 0; s < pl->nsteps; s++) {
    const tir_step *st = &pl->steps[s];
    for (int l = 0; st->device == TIR_GPU && l < st->launches; l++)
      if (make_kernel(m, st, pl->kernels[st->kernel + l].name, &m->kernels[m->slot[s] + l])) return -1;
  }
  return 0;
}

static int setup(tir_model *m, const char *weights_path, const char *cache_path) {
  const tir_plan *pl = m->plan;
  if (load_opencl() || pick_device(m)) return -1;
  cl_int err = 0;
  cl_context_properties props[3] = {CL_CONTEXT_PLATFORM, (cl_context_properties)m->platform, 0};
  if (!(m->ctx = cl.clCreateContext(props, 1, &m->device, 0, 0, &err)))
    return FAIL("clCreateContext(%s) failed: %d", m->name, err);
  if (!(m->queue = cl.clCreateCommandQueue(m->ctx, m->device, CL_QUEUE_PROFILING_ENABLE, &err)))
    return FAIL("clCreateCommandQueue(%s) failed: %d", m->name, err);
  if (weights_path ? read_weights(m, weights_path) : 0) return -1;
  if (!weights_path) m->host_weights = pl->weights;
  if (!m->host_weights && pl->weights_bytes) return FAIL("the weights are not embedded: pass their path to tir_create");
  int cpu = 0;
  for (int s = 0; s < pl->nsteps; s++) cpu |= pl->steps[s].device == TIR_CPU;
  if (!(m->slot = calloc(pl->nsteps + 1, sizeof *m->slot))) return FAIL("out of memory");
  for (int s = 0; s < pl->nsteps; s++) {
    m->slot[s] = m->nslots;
    m->nslots += pl->steps[s].device == TIR_GPU ? pl->steps[s].launches : 0;
  }
  m->kernels = calloc(m->nslots + 1, sizeof *m->kernels);
  m->events = calloc(m->nslots + 1, sizeof *m->events);
  m->inputs = calloc(pl->ninputs + 1, sizeof *m->inputs);
  m->outputs = calloc(pl->noutputs + 1, sizeof *m->outputs);
  if (cpu) { /* CPU steps work on a host mirror of the workspace */
    if (!(m->workspace_block = malloc(pl->workspace_bytes + 64))) return FAIL("out of memory (workspace mirror)");
    m->host_workspace = align64(m->workspace_block);
  }
  if (!m->kernels || !m->events || !m->inputs || !m->outputs) return FAIL("out of memory");
  for (int i = 0; i < pl->ninputs; i++)
    if (!(m->inputs[i] = new_buffer(m, CL_MEM_READ_WRITE, pl->input_bytes[i], 0, "input"))) return -1;
  for (int i = 0; i < pl->noutputs; i++)
    if (!(m->outputs[i] = new_buffer(m, CL_MEM_READ_WRITE, pl->output_bytes[i], 0, "output"))) return -1;
  if (!(m->workspace = new_buffer(m, CL_MEM_READ_WRITE, pl->workspace_bytes, 0, "workspace"))) return -1;
  /* the weights go up once, here; a tiny blob is padded through a zeroed copy */
  unsigned char pad[64] = {0};
  const void *w = m->host_weights;
  if (pl->weights_bytes < 64) w = memcpy(pad, m->host_weights ? m->host_weights : pad, pl->weights_bytes);
  if (!(m->weights = new_buffer(m, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, pl->weights_bytes, w, "weights")))
    return -1;
  if (make_images(m)) return -1;
  if (!cpu && m->weights_block) { /* no CPU step reads them on the host */
    free(m->weights_block);
    m->weights_block = 0;
    m->host_weights = 0;
  }
  if (build_program(m, cache_path) || make_kernels(m)) return -1;
  return 0;
}

TIR_API void tir_destroy(tir_model *m) {
  if (!m) return;
  if (m->queue) cl.clFinish(m->queue);
  for (int k = 0; m->kernels && k < m->nslots; k++)
    if (m->kernels[k]) cl.clReleaseKernel(m->kernels[k]);
  for (int i = 0; m->inputs && i < m->plan->ninputs; i++)
    if (m->inputs[i]) cl.clReleaseMemObject(m->inputs[i]);
  for (int i = 0; m->outputs && i < m->plan->noutputs; i++)
    if (m->outputs[i]) cl.clReleaseMemObject(m->outputs[i]);
  if (m->weights) cl.clReleaseMemObject(m->weights);
  for (int i = 0; m->images && i < m->plan->nimages; i++)
    if (m->images[i]) cl.clReleaseMemObject(m->images[i]);
  if (m->workspace) cl.clReleaseMemObject(m->workspace);
  if (m->program) cl.clReleaseProgram(m->program);
  if (m->queue) cl.clReleaseCommandQueue(m->queue);
  if (m->ctx) cl.clReleaseContext(m->ctx);
  free(m->kernels);
  free(m->slot);
  free(m->events);
  free(m->inputs);
  free(m->outputs);
  free(m->images);
  free(m->weights_block);
  free(m->workspace_block);
  free(m);
}

TIR_API tir_model *tir_create(const char *weights_path, const char *program_cache_path) {
  tir_model *m = calloc(1, sizeof *m);
  if (!m) {
    FAIL("out of memory");
    return 0;
  }
  m->plan = &tir_the_plan;
  last_error[0] = 0;
  if (setup(m, weights_path, program_cache_path)) {
    tir_destroy(m);
    return 0;
  }
  return m;
}

TIR_API const char *tir_device_name(tir_model *m) { return m ? m->name : ""; }

/* 1 when tir_create took the program from the binary cache (tests, diagnostics). */
TIR_API int tir_program_from_cache(tir_model *m) { return m ? m->from_cache : 0; }

/* ---- running ------------------------------------------------------------------------------ */
static double now_us(void) {
  struct tir_timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* Host address of an argument: the caller's input/output, the weights, the workspace mirror. */
static unsigned char *host_arg(tir_model *m, const tir_arg *a, void *const *in, void *const *out) {
  switch (a->kind) {
  case TIR_INPUT: return in[a->index];
  case TIR_OUTPUT: return out[a->index];
  case TIR_WEIGHT: return (unsigned char *)m->host_weights + a->index;
  default: return m->host_workspace + a->index;
  }
}

static tir_u64 arg_bytes(const tir_model *m, const tir_arg *a) {
  if (a->bytes) return a->bytes;
  switch (a->kind) {
  case TIR_INPUT: return m->plan->input_bytes[a->index];
  case TIR_OUTPUT: return m->plan->output_bytes[a->index];
  case TIR_WEIGHT: return m->plan->weights_bytes - a->index;
  default: return m->plan->workspace_bytes - a->index;
  }
}

/* A CPU step: blocking reads of its outputs/workspace args (inputs are the caller's
 * memory, weights are on the host already), the call, non-blocking writes back. */
static int cpu_step(tir_model *m, const tir_step *st, void *const *in, void *const *out, double *us) {
  void *ptrs[st->nargs + 1];
  cl_int err;
  for (int i = 0; i < st->nargs; i++) {
    const tir_arg *a = &st->args[i];
    ptrs[i] = host_arg(m, a, in, out);
    if (a->kind != TIR_OUTPUT && a->kind != TIR_WORKSPACE) continue;
    tir_u64 off;
    cl_mem buf = arg_buffer(m, a, &off);
    if ((err = cl.clEnqueueReadBuffer(m->queue, buf, CL_TRUE, off, arg_bytes(m, a), ptrs[i], 0, 0, 0)))
      return FAIL("clEnqueueReadBuffer(%s arg %d) failed: %d", st->name, i, err);
  }
  double t0 = now_us();
  st->cpu(ptrs);
  if (us) *us = now_us() - t0;
  for (int i = 0; i < st->nargs; i++) {
    const tir_arg *a = &st->args[i];
    if (a->kind != TIR_OUTPUT && a->kind != TIR_WORKSPACE) continue;
    tir_u64 off;
    cl_mem buf = arg_buffer(m, a, &off);
    if ((err = cl.clEnqueueWriteBuffer(m->queue, buf, CL_FALSE, off, arg_bytes(m, a), ptrs[i], 0, 0, 0)))
      return FAIL("clEnqueueWriteBuffer(%s arg %d) failed: %d", st->name, i, err);
  }
  return 0;
}

static int enqueue_all(tir_model *m, void *const *in, void *const *out, double *step_us) {
  const tir_plan *pl = m->plan;
  cl_int err;
  for (int i = 0; i < pl->ninputs; i++)
    if ((err = cl.clEnqueueWriteBuffer(m->queue, m->inputs[i], CL_FALSE, 0, pl->input_bytes[i], in[i], 0, 0, 0)))
      return FAIL("clEnqueueWriteBuffer(input %d) failed: %d", i, err);
  for (int s = 0; s < pl->nsteps; s++) {
    const tir_step *st = &pl->steps[s];
    if (st->device == TIR_CPU) {
      if (cpu_step(m, st, in, out, step_us ? &step_us[s] : 0)) return -1;
      continue;
    }
    for (int l = 0; l < st->launches; l++) {
      const tir_kernel_info *k = &pl->kernels[st->kernel + l];
      int has_local = k->local[0] || k->local[1] || k->local[2];
      cl_event *ev = step_us ? &m->events[m->slot[s] + l] : 0;
      if ((err = cl.clEnqueueNDRangeKernel(m->queue, m->kernels[m->slot[s] + l], k->dims, 0, k->global,
                                           has_local ? k->local : 0, 0, 0, ev)))
        return FAIL("clEnqueueNDRangeKernel(%s) failed: %d", k->name, err);
    }
  }
  for (int c = 0; c < pl->ncopies; c++) {
    const tir_copy *cp = &pl->copies[c];
    tir_u64 so, dof;
    cl_mem src = arg_buffer(m, &cp->src, &so), dst = arg_buffer(m, &cp->dst, &dof);
    if ((err = cl.clEnqueueCopyBuffer(m->queue, src, dst, so, dof, cp->bytes, 0, 0, 0)))
      return FAIL("clEnqueueCopyBuffer(copy %d) failed: %d", c, err);
  }
  for (int i = 0; i < pl->noutputs; i++)
    if ((err = cl.clEnqueueReadBuffer(m->queue, m->outputs[i], CL_FALSE, 0, pl->output_bytes[i], out[i], 0, 0, 0)))
      return FAIL("clEnqueueReadBuffer(output %d) failed: %d", i, err);
  if ((err = cl.clFinish(m->queue))) return FAIL("clFinish failed: %d", err);
  return 0;
}

TIR_API int tir_run(tir_model *m, void *const *inputs, void *const *outputs) {
  if (!m) return FAIL("tir_run: no model");
  int rc = enqueue_all(m, inputs, outputs, 0);
  if (rc) cl.clFinish(m->queue); /* never touch the caller's buffers after returning */
  return rc;
}

/* One run with profiling events: step_us[s] is step s's device time (GPU: the sum of its
 * launches' event end - start; CPU: the kernel call's host time, transfers excluded), in
 * microseconds. */
TIR_API int tir_profile(tir_model *m, void *const *inputs, void *const *outputs, double *step_us) {
  if (!m) return FAIL("tir_profile: no model");
  const tir_plan *pl = m->plan;
  for (int s = 0; s < pl->nsteps; s++) step_us[s] = 0;
  for (int k = 0; k < m->nslots; k++) m->events[k] = 0;
  int rc = enqueue_all(m, inputs, outputs, step_us);
  if (rc) cl.clFinish(m->queue);
  for (int s = 0; s < pl->nsteps; s++) {
    for (int l = 0; pl->steps[s].device == TIR_GPU && l < pl->steps[s].launches; l++) {
      cl_event *ev = &m->events[m->slot[s] + l];
      if (!*ev) continue;
      cl_ulong t0 = 0, t1 = 0;
      cl_int err = cl.clGetEventProfilingInfo(*ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, 0);
      if (!err) err = cl.clGetEventProfilingInfo(*ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, 0);
      if (err && !rc) rc = FAIL("clGetEventProfilingInfo(%s) failed: %d", pl->steps[s].name, err);
      step_us[s] += (double)(t1 - t0) * 1e-3;
      cl.clReleaseEvent(*ev);
      *ev = 0;
    }
  }
  return rc;
}
