/* The OpenCL types, constants and entry points tir_opencl.c uses, declared here because the
 * runtime is compiled without system headers (-ffreestanding -nostdinc, any target triple).
 * Values and layouts from the Khronos headers CL/cl.h and CL/cl_ext.h. CL_FUNCTIONS lists
 * the entry points resolved with dlsym at load (clCreateImage, OpenCL 1.2, is resolved
 * apart in tir_opencl.c so that plans without images load on 1.1 drivers).
 */
#ifndef TIR_OPENCL_API_H
#define TIR_OPENCL_API_H

#include "tir_opencl_plan.h"

typedef __INTPTR_TYPE__ intptr_t;
typedef int cl_int;
typedef unsigned int cl_uint;
typedef tir_u64 cl_ulong;
typedef cl_uint cl_bool;
typedef cl_ulong cl_bitfield;
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_program *cl_program;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_event *cl_event;
typedef intptr_t cl_context_properties;
typedef struct {
  cl_uint image_channel_order;
  cl_uint image_channel_data_type;
} cl_image_format;
typedef struct {
  cl_uint image_type;
  size_t image_width, image_height, image_depth, image_array_size, image_row_pitch, image_slice_pitch;
  cl_uint num_mip_levels, num_samples;
  cl_mem buffer; /* a union with mem_object in OpenCL 2.0: the same layout */
} cl_image_desc;
#define CL_SUCCESS 0
#define CL_FALSE 0
#define CL_TRUE 1
#define CL_PLATFORM_VERSION 0x0901
#define CL_PLATFORM_NAME 0x0902
#define CL_DEVICE_TYPE_GPU (1 << 2)
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFF
#define CL_DEVICE_NAME 0x102B
#define CL_DRIVER_VERSION 0x102D
#define CL_DEVICE_VERSION 0x102F
#define CL_QUEUE_PROFILING_ENABLE (1 << 1)
#define CL_CONTEXT_PLATFORM 0x1084
#define CL_MEM_READ_WRITE (1 << 0)
#define CL_MEM_READ_ONLY (1 << 2)
#define CL_MEM_COPY_HOST_PTR (1 << 5)
#define CL_PROGRAM_BINARY_SIZES 0x1165
#define CL_PROGRAM_BINARIES 0x1166
#define CL_PROGRAM_BUILD_LOG 0x1183
#define CL_PROFILING_COMMAND_START 0x1282
#define CL_PROFILING_COMMAND_END 0x1283
#define CL_RGBA 0x10B5
#define CL_HALF_FLOAT 0x10DD
#define CL_FLOAT 0x10DE
#define CL_MEM_OBJECT_IMAGE2D 0x10F1

#define CL_FUNCTIONS(X)                                                                             \
  X(clGetPlatformIDs, cl_int, (cl_uint, cl_platform_id *, cl_uint *))                              \
  X(clGetPlatformInfo, cl_int, (cl_platform_id, cl_uint, size_t, void *, size_t *))                \
  X(clGetDeviceIDs, cl_int, (cl_platform_id, cl_bitfield, cl_uint, cl_device_id *, cl_uint *))     \
  X(clGetDeviceInfo, cl_int, (cl_device_id, cl_uint, size_t, void *, size_t *))                    \
  X(clCreateContext, cl_context,                                                                   \
    (const cl_context_properties *, cl_uint, const cl_device_id *,                                 \
     void (*)(const char *, const void *, size_t, void *), void *, cl_int *))                      \
  X(clCreateCommandQueue, cl_command_queue, (cl_context, cl_device_id, cl_bitfield, cl_int *))     \
  X(clCreateBuffer, cl_mem, (cl_context, cl_bitfield, size_t, void *, cl_int *))                   \
  X(clCreateProgramWithSource, cl_program,                                                         \
    (cl_context, cl_uint, const char **, const size_t *, cl_int *))                                \
  X(clCreateProgramWithBinary, cl_program,                                                         \
    (cl_context, cl_uint, const cl_device_id *, const size_t *, const unsigned char **, cl_int *,  \
     cl_int *))                                                                                    \
  X(clBuildProgram, cl_int,                                                                        \
    (cl_program, cl_uint, const cl_device_id *, const char *, void (*)(cl_program, void *), void *)) \
  X(clGetProgramBuildInfo, cl_int, (cl_program, cl_device_id, cl_uint, size_t, void *, size_t *))  \
  X(clGetProgramInfo, cl_int, (cl_program, cl_uint, size_t, void *, size_t *))                     \
  X(clCreateKernel, cl_kernel, (cl_program, const char *, cl_int *))                               \
  X(clSetKernelArg, cl_int, (cl_kernel, cl_uint, size_t, const void *))                            \
  X(clEnqueueWriteBuffer, cl_int,                                                                  \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *,   \
     cl_event *))                                                                                  \
  X(clEnqueueReadBuffer, cl_int,                                                                   \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *,         \
     cl_event *))                                                                                  \
  X(clEnqueueCopyBuffer, cl_int,                                                                   \
    (cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event *,          \
     cl_event *))                                                                                  \
  X(clEnqueueNDRangeKernel, cl_int,                                                                \
    (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *,         \
     cl_uint, const cl_event *, cl_event *))                                                       \
  X(clFinish, cl_int, (cl_command_queue))                                                          \
  X(clGetEventProfilingInfo, cl_int, (cl_event, cl_uint, size_t, void *, size_t *))                \
  X(clReleaseEvent, cl_int, (cl_event))                                                            \
  X(clReleaseKernel, cl_int, (cl_kernel))                                                          \
  X(clReleaseProgram, cl_int, (cl_program))                                                        \
  X(clReleaseMemObject, cl_int, (cl_mem))                                                          \
  X(clReleaseCommandQueue, cl_int, (cl_command_queue))                                             \
  X(clReleaseContext, cl_int, (cl_context))

#endif
