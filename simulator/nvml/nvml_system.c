/* Copyright (c) gpuops.fleet contributors
 * GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
 */
/*
 * Fake NVML: library lifetime, error strings and nvmlSystem* queries.
 */
#include "nvml_sim.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int init_refcount;

int sim_initialized(void)
{
    return __atomic_load_n(&init_refcount, __ATOMIC_SEQ_CST) > 0;
}

nvmlReturn_t sim_copy_string(char *dst, unsigned int length, const char *src)
{
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t need = strlen(src) + 1;
    if (need > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, need);
    return NVML_SUCCESS;
}

static nvmlReturn_t do_init(void)
{
    sim_host host;
    if (sim_read_host(&host) != 0 || !host.driver_loaded)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    __atomic_add_fetch(&init_refcount, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlInit(void) { return do_init(); }
NVML_API nvmlReturn_t nvmlInit_v2(void) { return do_init(); }

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init();
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    int current = __atomic_load_n(&init_refcount, __ATOMIC_SEQ_CST);
    while (current > 0) {
        if (__atomic_compare_exchange_n(&init_refcount, &current, current - 1, 0,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return NVML_SUCCESS;
    }
    return NVML_ERROR_UNINITIALIZED;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 22: return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case 23: return "Insufficient Resources";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not Ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    case 30: return "Reset type not supported";
    default: return "Unknown Error";
    }
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    sim_host host;
    if (!sim_initialized())
        return NVML_ERROR_UNINITIALIZED;
    sim_read_host(&host);
    return sim_copy_string(version, length, host.driver_version);
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    sim_host host;
    sim_read_host(&host);
    return sim_copy_string(version, length, host.nvml_version);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    sim_host host;
    if (!sim_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_read_host(&host);
    *version = host.cuda_driver_version;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    return nvmlSystemGetCudaDriverVersion(version);
}

/* First NUL-separated field of /proc/PID/cmdline, else comm. */
NVML_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    char path[4096], buf[4096];
    if (!sim_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (name == NULL || length == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(path, sizeof path, "%s/%u/cmdline", sim_proc_root(), pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NVML_ERROR_NOT_FOUND;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    if (buf[0] == '\0') {
        snprintf(path, sizeof path, "%s/%u/comm", sim_proc_root(), pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return NVML_ERROR_NOT_FOUND;
        n = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[n > 0 ? n : 0] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
    }
    snprintf(name, length, "%s", buf);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!sim_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = sim_gpu_count();
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
    return nvmlDeviceGetCount_v2(count);
}
