/* Copyright (c) gpuops.fleet contributors
 * GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
 */
/*
 * Fake NVML: the part of NVML's ABI (types, codes, entry points) that the
 * library implements and nvidia-smi calls. Layouts match nvml.h.
 */
#ifndef NVML_API_H
#define NVML_API_H

#define NVML_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFULL
#define NVML_VALUE_NOT_AVAILABLE_UINT 0xFFFFFFFFU
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))

/* A device handle points into a static array: &sim_devices[index]. */
struct nvmlDevice_st {
    unsigned int index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

/* Entry points nvidia-smi uses. */
NVML_API nvmlReturn_t nvmlInit_v2(void);
NVML_API nvmlReturn_t nvmlShutdown(void);
NVML_API const char *nvmlErrorString(nvmlReturn_t result);
NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version);
NVML_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length);
NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                               unsigned int *count, void *infos);
NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util);
NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp);
NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit);
NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode);
NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int *state);
NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current,
                                           unsigned int *pending);
NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type,
                                                  int counter_type, unsigned long long *count);
NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t first, nvmlDevice_t second,
                                                          int *level);
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *active);
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                          nvmlPciInfo_t *pci);
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                          unsigned int *type);

#endif
