/* A stand-in for libcuda.so.1 that records what an ncdc export asks of the driver, one
 * line per call, into the file $FAKE_CUDA_LOG (tests/backends/fakecuda.py reads it).
 * Launch parameters are printed by the kinds $FAKE_CUDA_KINDS gives per kernel
 * ("kernel=kinds;..."; b: 64-bit pointer, l: int64, i: int32, f: float, m: tensor map); a
 * launch returns the CUresult $FAKE_CUDA_LAUNCH_RESULT when set. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void say(const char *format, ...) {
    const char *path = getenv("FAKE_CUDA_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    va_list args;
    va_start(args, format);
    vfprintf(f, format, args);
    va_end(args);
    fclose(f);
}

CUresult cuDriverGetVersion(int *version) {
    const char *v = getenv("FAKE_CUDA_VERSION");
    *version = v ? atoi(v) : 13000;
    say("version %d\n", *version);
    return CUDA_SUCCESS;
}

/* The current context: none at first with $FAKE_CUDA_NO_CONTEXT (until one is set); its id
 * from $FAKE_CUDA_CONTEXT (default 1), read at each call, so a test can switch contexts
 * between launches. */
static CUcontext current_context = (CUcontext)0x1;
static int context_read;

CUresult cuCtxGetCurrent(CUcontext *context) {
    if (!context_read++ && getenv("FAKE_CUDA_NO_CONTEXT")) current_context = NULL;
    *context = current_context;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext context) {
    say("set context %p\n", (void *)context);
    current_context = context;
    context_read = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) { *device = ordinal; return CUDA_SUCCESS; }

CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
    say("retain primary context of device %d\n", (int)device);
    *context = (CUcontext)0x2;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext context, unsigned long long *id) {
    const char *v = getenv("FAKE_CUDA_CONTEXT");
    (void)context;
    *id = v ? strtoull(v, NULL, 10) : 1;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    say("load %s\n", memcmp(image, "\177ELF", 4) == 0 ? "elf" : "other");
    *module = (CUmodule)0x1;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name) {
    (void)module;
    *fn = (CUfunction)strdup(name);
    say("function %s\n", name);
    return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attribute, int value) {
    say("attribute %s %d %d\n", (const char *)fn, (int)attribute, value);
    return CUDA_SUCCESS;
}

static void list64(const char *label, const cuuint64_t *v, unsigned n) {
    say(" %s", label);
    for (unsigned i = 0; i < n; i++) say("%s%llu", i ? "," : " ", (unsigned long long)v[i]);
}

static void list32(const char *label, const cuuint32_t *v, unsigned n) {
    say(" %s", label);
    for (unsigned i = 0; i < n; i++) say("%s%u", i ? "," : " ", v[i]);
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank,
                                void *address, const cuuint64_t *dims, const cuuint64_t *strides,
                                const cuuint32_t *box, const cuuint32_t *element_strides,
                                CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
    if (((uintptr_t)map) % 64) { say("encode misaligned\n"); return CUDA_ERROR_INVALID_VALUE; }
    say("encode dtype %d rank %u address %llu", (int)dtype, rank, (unsigned long long)(uintptr_t)address);
    list64("dims", dims, rank);
    list64("strides", strides, rank - 1);
    list32("box", box, rank);
    list32("elements", element_strides, rank);
    say(" interleave %d swizzle %d l2 %d oob %d\n", (int)interleave, (int)swizzle, (int)l2, (int)oob);
    uint64_t words[16] = {0};
    words[0] = (uint64_t)(uintptr_t)address;
    words[1] = 0xffffffffull;  /* bit 21 set: an export may clear it */
    memcpy(map, words, sizeof words);
    return CUDA_SUCCESS;
}

static const char *kinds_of(const char *kernel) {
    static char found[256];
    const char *all = getenv("FAKE_CUDA_KINDS");
    size_t n = strlen(kernel);
    for (const char *p = all; p && *p;) {
        const char *end = strchr(p, ';');
        if (!end) end = p + strlen(p);
        if ((size_t)(end - p) > n && strncmp(p, kernel, n) == 0 && p[n] == '=') {
            size_t k = (size_t)(end - p) - n - 1;
            if (k >= sizeof found) k = sizeof found - 1;
            memcpy(found, p + n + 1, k);
            found[k] = 0;
            return found;
        }
        p = *end ? end + 1 : end;
    }
    return "";
}

CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, CUstream stream,
                        void **params, void **extra) {
    const char *name = (const char *)fn;
    CUcontext context;
    cuCtxGetCurrent(&context);
    if (!context) {  /* as the driver answers a thread that has no context current */
        say("launch refused: no context\n");
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    say("launch %s grid %u %u %u block %u %u %u smem %u stream %llu extra %d params",
        name, gx, gy, gz, bx, by, bz, smem, (unsigned long long)(uintptr_t)stream, extra != NULL);
    const char *kinds = kinds_of(name);
    for (unsigned i = 0; kinds[i]; i++) {
        const void *p = params[i];
        switch (kinds[i]) {
            case 'b': say(" %llu", (unsigned long long)*(const uint64_t *)p); break;
            case 'l': say(" %lld", (long long)*(const int64_t *)p); break;
            case 'i': say(" %d", *(const int32_t *)p); break;
            case 'f': say(" %a", (double)*(const float *)p); break;
            case 'm': {
                const uint64_t *w = (const uint64_t *)p;
                say(" map:%llu:%llx:%d", (unsigned long long)w[0], (unsigned long long)w[1],
                    (int)(((uintptr_t)p) % 64 == 0));
                break;
            }
        }
    }
    say("\n");
    const char *refuse = getenv("FAKE_CUDA_LAUNCH_RESULT");  /* a launch the driver refuses */
    return refuse ? (CUresult)atoi(refuse) : CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
    say("memset %llu %u %zu stream %llu\n", (unsigned long long)dst, (unsigned)value, n,
        (unsigned long long)(uintptr_t)stream);
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult code, const char **name) {
    *name = code == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}

static const struct { const char *name; void *fn; } entries[] = {
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
    {"cuCtxGetId", (void *)cuCtxGetId},
    {"cuModuleLoadData", (void *)cuModuleLoadData},
    {"cuModuleGetFunction", (void *)cuModuleGetFunction},
    {"cuFuncSetAttribute", (void *)cuFuncSetAttribute},
    {"cuLaunchKernel", (void *)cuLaunchKernel},
    {"cuMemsetD8Async", (void *)cuMemsetD8Async},
    {"cuTensorMapEncodeTiled", (void *)cuTensorMapEncodeTiled},
};

CUresult cuGetProcAddress_v2(const char *symbol, void **fn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
    say("entry %s %d %llu\n", symbol, version, (unsigned long long)flags);
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        if (strcmp(entries[i].name, symbol) == 0) {
            *fn = entries[i].fn;
            if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    }
    *fn = NULL;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
