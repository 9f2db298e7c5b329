/* Copyright (c) gpuops.fleet contributors
 * GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
 */
/*
 * Fake NVML: running-process lists with NVML's size in/out protocol.
 * *count in is the buffer's capacity; when the buffer is NULL or too small,
 * *count out is the number needed and the answer is INSUFFICIENT_SIZE
 * (SUCCESS with 0 when there are none).
 */
#include "nvml_sim.h"

#define MIB 1048576ULL

typedef enum { LIST_COMPUTE = 'C', LIST_GRAPHICS = 'G', LIST_MPS = 'M' } list_kind;

static void put_v1(void *infos, unsigned int slot, const sim_alloc *alloc)
{
    nvmlProcessInfo_v1_t *out = (nvmlProcessInfo_v1_t *)infos + slot;
    out->pid = alloc->pid;
    out->usedGpuMemory = alloc->na ? NVML_VALUE_NOT_AVAILABLE_ULL : alloc->used_mib * MIB;
}

static void put_v2(void *infos, unsigned int slot, const sim_alloc *alloc)
{
    nvmlProcessInfo_v2_t *out = (nvmlProcessInfo_v2_t *)infos + slot;
    out->pid = alloc->pid;
    out->usedGpuMemory = alloc->na ? NVML_VALUE_NOT_AVAILABLE_ULL : alloc->used_mib * MIB;
    out->gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
    out->computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
}

static nvmlReturn_t list_processes(nvmlDevice_t device, list_kind kind, unsigned int *count,
                                   void *infos, void (*put)(void *, unsigned int, const sim_alloc *))
{
    sim_gpu gpu;
    if (!sim_initialized())
        return NVML_ERROR_UNINITIALIZED;
    int index = sim_handle_index(device);
    if (index < 0 || count == NULL || sim_read_gpu((unsigned int)index, &gpu) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu.lost)
        return NVML_ERROR_GPU_IS_LOST;
    sim_alloc_list list = {0};
    if (sim_live_allocs((unsigned int)index, (char)kind, &list) != 0) {
        sim_alloc_list_free(&list);
        return NVML_ERROR_MEMORY;
    }
    unsigned int needed = (unsigned int)list.count;
    nvmlReturn_t rc = NVML_SUCCESS;
    if (needed > 0 && (infos == NULL || *count < needed)) {
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    } else {
        for (unsigned int i = 0; i < needed; i++)
            put(infos, i, &list.items[i]);
    }
    *count = needed;
    sim_alloc_list_free(&list);
    return rc;
}

#define PROCESS_LIST(name, kind, put)                                                       \
    NVML_API nvmlReturn_t name(nvmlDevice_t device, unsigned int *count, void *infos)     \
    {                                                                                     \
        return list_processes(device, kind, count, infos, put);                           \
    }

PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, LIST_COMPUTE, put_v1)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, LIST_COMPUTE, put_v2)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, LIST_COMPUTE, put_v2)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, LIST_GRAPHICS, put_v1)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, LIST_GRAPHICS, put_v2)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, LIST_GRAPHICS, put_v2)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, LIST_MPS, put_v1)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, LIST_MPS, put_v2)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, LIST_MPS, put_v2)
