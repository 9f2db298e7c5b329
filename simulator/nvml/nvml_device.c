/* Copyright (c) gpuops.fleet contributors
 * GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
 */
/*
 * Fake NVML: device handles, identity, PCI, memory and health queries.
 */
#include "nvml_sim.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MIB 1048576ULL
#define PCI_DEVICE_ID 0x2BB510DEU
#define PCI_SUBSYSTEM_ID 0x204E10DEU
#define NVLINK_MAX_LINKS 18U

static struct nvmlDevice_st devices[SIM_MAX_GPUS];

int sim_handle_index(nvmlDevice_t device)
{
    uintptr_t p = (uintptr_t)device, base = (uintptr_t)devices;
    if (p < base || p >= base + sizeof devices || (p - base) % sizeof devices[0] != 0)
        return -1;
    return (int)device->index;
}

static nvmlDevice_t handle_for(unsigned int index)
{
    devices[index].index = index;
    return &devices[index];
}

/* Validates a handle and loads its GPU: the common entry of device queries. */
static nvmlReturn_t open_device(nvmlDevice_t device, sim_gpu *gpu)
{
    if (!sim_initialized())
        return NVML_ERROR_UNINITIALIZED;
    int index = sim_handle_index(device);
    if (index < 0 || sim_read_gpu((unsigned int)index, gpu) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return gpu->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

nvmlReturn_t sim_stub_result(const void *maybe_device)
{
    sim_gpu gpu;
    int index = sim_handle_index((nvmlDevice_t)(uintptr_t)maybe_device);
    if (index >= 0 && sim_initialized() && sim_read_gpu((unsigned int)index, &gpu) == 0 && gpu.lost)
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_ERROR_NOT_SUPPORTED;
}

/* ---- handles ---- */

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!sim_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= sim_gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = handle_for(index);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

typedef int (*gpu_matcher)(const sim_gpu *gpu, const void *key);

static nvmlReturn_t find_handle(gpu_matcher match, const void *key, nvmlDevice_t *device)
{
    sim_gpu gpu;
    if (!sim_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (key == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int count = sim_gpu_count();
    for (unsigned int i = 0; i < count; i++) {
        if (sim_read_gpu(i, &gpu) != 0 || !match(&gpu, key))
            continue;
        if (gpu.lost)
            return NVML_ERROR_GPU_IS_LOST;
        *device = handle_for(i);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

static int match_uuid(const sim_gpu *gpu, const void *key)
{
    return strcasecmp(gpu->uuid, key) == 0;
}

typedef struct {
    unsigned int domain, bus, device, function;
} bus_address;

static int match_bus(const sim_gpu *gpu, const void *key)
{
    const bus_address *want = key;
    bus_address have;
    return sim_parse_bus_id(gpu->bus_id, &have.domain, &have.bus, &have.device, &have.function) == 0 &&
           memcmp(&have, want, sizeof have) == 0;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    return find_handle(match_uuid, uuid, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci_bus_id, nvmlDevice_t *device)
{
    bus_address want;
    if (pci_bus_id == NULL ||
        sim_parse_bus_id(pci_bus_id, &want.domain, &want.bus, &want.device, &want.function) != 0)
        return sim_initialized() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    return find_handle(match_bus, &want, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pci_bus_id, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id, device);
}

/* ---- identity ---- */

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    return rc != NVML_SUCCESS ? rc : sim_copy_string(name, length, gpu.name);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    return rc != NVML_SUCCESS ? rc : sim_copy_string(uuid, length, gpu.uuid);
}

static nvmlReturn_t get_index(nvmlDevice_t device, unsigned int *out)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc == NVML_SUCCESS && out == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *out = (unsigned int)sim_handle_index(device);
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    return get_index(device, index);
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    return get_index(device, minor);
}

/* ---- PCI ---- */

static nvmlReturn_t fill_pci(const sim_gpu *gpu, nvmlPciInfo_t *pci)
{
    unsigned int domain, bus, dev, function;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sim_parse_bus_id(gpu->bus_id, &domain, &bus, &dev, &function) != 0)
        return NVML_ERROR_UNKNOWN;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", domain & 0xFFFFU,
             bus & 0xFFU, dev & 0xFFU, function & 0xFU);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", domain, bus & 0xFFU, dev & 0xFFU,
             function & 0xFU);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = PCI_DEVICE_ID;
    pci->pciSubSystemId = PCI_SUBSYSTEM_ID;
    return NVML_SUCCESS;
}

/* The pre-9.0 layout that the unversioned entry points fill. */
typedef struct {
    char busId[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned int reserved[4];
} pci_info_v1;

static nvmlReturn_t fill_pci_v1(const sim_gpu *gpu, pci_info_v1 *out)
{
    nvmlPciInfo_t pci;
    nvmlReturn_t rc = out == NULL ? NVML_ERROR_INVALID_ARGUMENT : fill_pci(gpu, &pci);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(out, 0, sizeof *out);
    memcpy(out->busId, pci.busIdLegacy, sizeof out->busId);
    out->domain = pci.domain;
    out->bus = pci.bus;
    out->device = pci.device;
    out->pciDeviceId = pci.pciDeviceId;
    out->pciSubSystemId = pci.pciSubSystemId;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    return rc != NVML_SUCCESS ? rc : fill_pci(&gpu, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, pci_info_v1 *pci)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    return rc != NVML_SUCCESS ? rc : fill_pci_v1(&gpu, pci);
}

/* ---- memory ---- */

/* Sum of live allocations on a GPU, in MiB. */
static nvmlReturn_t live_mib(unsigned int index, unsigned long long *mib)
{
    sim_alloc_list list;
    if (sim_live_allocs(index, 0, &list) != 0) {
        sim_alloc_list_free(&list);
        return NVML_ERROR_MEMORY;
    }
    *mib = 0;
    for (size_t i = 0; i < list.count; i++)
        *mib += list.items[i].used_mib;
    sim_alloc_list_free(&list);
    return NVML_SUCCESS;
}

static unsigned long long minus(unsigned long long a, unsigned long long b)
{
    return a > b ? a - b : 0;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    sim_gpu gpu;
    unsigned long long live;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc == NVML_SUCCESS && memory == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        rc = live_mib((unsigned int)sim_handle_index(device), &live);
    if (rc != NVML_SUCCESS)
        return rc;
    memory->total = gpu.total_mib * MIB;
    memory->used = (gpu.reserved_mib + live + gpu.orphan_mib) * MIB;
    memory->free = minus(memory->total, memory->used);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    sim_gpu gpu;
    unsigned long long live;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc == NVML_SUCCESS && memory == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && memory->version != NVML_STRUCT_VERSION(sizeof *memory, 2))
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS)
        rc = live_mib((unsigned int)sim_handle_index(device), &live);
    if (rc != NVML_SUCCESS)
        return rc;
    memory->total = gpu.total_mib * MIB;
    memory->reserved = gpu.reserved_mib * MIB;
    memory->used = (live + gpu.orphan_mib) * MIB;
    memory->free = minus(memory->total, memory->reserved + memory->used);
    return NVML_SUCCESS;
}

/* ---- activity: busy (>= 1 live allocation) vs idle ---- */

/* Opens a device and reads its conf; the busy/idle defaults (one scan of
 * the allocations) only when need_busy. */
static nvmlReturn_t open_conf(nvmlDevice_t device, const void *out, sim_gpu_conf *conf,
                              int need_busy)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int index = (unsigned int)sim_handle_index(device);
    sim_read_conf(index, need_busy ? sim_gpu_busy(index) : -1, conf);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc == NVML_SUCCESS && util == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    int busy = sim_gpu_busy((unsigned int)sim_handle_index(device));
    util->gpu = busy ? 97 : 0;
    util->memory = busy ? 45 : 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp)
{
    sim_gpu_conf conf;
    nvmlReturn_t rc = open_conf(device, temp, &conf, 1);
    if (rc == NVML_SUCCESS && sensor != 0)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *temp = conf.temperature_c;
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temp)
{
    sim_gpu_conf conf;
    nvmlReturn_t rc = open_conf(device, temp, &conf, 1);
    if (rc == NVML_SUCCESS && temp->version != NVML_STRUCT_VERSION(sizeof *temp, 1))
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS && temp->sensorType != 0)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        temp->temperature = (int)conf.temperature_c;
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    sim_gpu_conf conf;
    nvmlReturn_t rc = open_conf(device, power, &conf, 1);
    if (rc == NVML_SUCCESS)
        *power = conf.power_mw;
    return rc;
}

static nvmlReturn_t power_limit(nvmlDevice_t device, unsigned int *limit)
{
    sim_gpu_conf conf;
    nvmlReturn_t rc = open_conf(device, limit, &conf, 0);
    if (rc == NVML_SUCCESS)
        *limit = conf.power_limit_mw;
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return power_limit(device, limit);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return power_limit(device, limit);
}

static nvmlReturn_t pstate(nvmlDevice_t device, int *state)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc == NVML_SUCCESS && state == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *state = sim_gpu_busy((unsigned int)sim_handle_index(device)) ? 0 : 8;
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int *state)
{
    return pstate(device, state);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, int *state)
{
    return pstate(device, state);
}

static nvmlReturn_t clock_reasons(nvmlDevice_t device, unsigned long long *reasons)
{
    sim_gpu_conf conf;
    nvmlReturn_t rc = open_conf(device, reasons, &conf, 1);
    if (rc == NVML_SUCCESS)
        *reasons = conf.clocks_event_reasons;
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                            unsigned long long *reasons)
{
    return clock_reasons(device, reasons);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                               unsigned long long *reasons)
{
    return clock_reasons(device, reasons);
}

/* ---- modes and health ---- */

static nvmlReturn_t two_values(nvmlDevice_t device, unsigned int *a, unsigned int *b,
                               unsigned int va, unsigned int vb)
{
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc == NVML_SUCCESS && (a == NULL || b == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        *a = va;
        *b = vb;
    }
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode)
{
    unsigned int ignored;
    return two_values(device, mode, &ignored, 1, 1);
}

NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current,
                                           unsigned int *pending)
{
    return two_values(device, current, pending, 1, 1);
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                           unsigned int *pending)
{
    sim_host host;
    sim_gpu gpu;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    sim_read_host(&host);
    if (!host.mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    return two_values(device, current, pending, 0, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type,
                                                  int counter_type, unsigned long long *count)
{
    sim_gpu_conf conf;
    nvmlReturn_t rc = open_conf(device, count, &conf, 0);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((error_type != 0 && error_type != 1) || (counter_type != 0 && counter_type != 1))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (error_type == 0)
        *count = 0;
    else
        *count = counter_type == 0 ? conf.ecc_uncorrected_volatile : conf.ecc_uncorrected_aggregate;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *correctable,
                                                unsigned int *uncorrectable, unsigned int *pending,
                                                unsigned int *failure)
{
    sim_gpu_conf conf;
    nvmlReturn_t rc = open_conf(device, correctable, &conf, 0);
    if (rc != NVML_SUCCESS)
        return rc;
    if (uncorrectable == NULL || pending == NULL || failure == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *correctable = conf.remapped_correctable;
    *uncorrectable = conf.remapped_uncorrectable;
    *pending = conf.remapped_pending;
    *failure = conf.remapped_failure;
    return NVML_SUCCESS;
}

/* ---- topology ---- */

NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t first, nvmlDevice_t second,
                                                          int *level)
{
    sim_gpu a, b;
    nvmlReturn_t rc = open_device(first, &a);
    if (rc == NVML_SUCCESS)
        rc = open_device(second, &b);
    if (rc == NVML_SUCCESS && level == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned int i = (unsigned int)sim_handle_index(first);
    unsigned int j = (unsigned int)sim_handle_index(second);
    unsigned int half = sim_gpu_count() / 2;
    if (i == j)
        *level = 0;  /* INTERNAL */
    else if (i / 2 == j / 2)
        *level = 20; /* MULTIPLE (PXB) */
    else if ((i < half) == (j < half))
        *level = 40; /* NODE */
    else
        *level = 50; /* SYSTEM */
    return NVML_SUCCESS;
}

#define NVLINK_DEVICE_TYPE_GPU 0U
#define NVLINK_DEVICE_TYPE_SWITCH 2U
#define NVSWITCH_PCI_DEVICE_ID 0x22A310DEU /* an NVSwitch of an HGX baseboard */
#define NVSWITCH_FIRST_BUS 0x04U          /* below every GPU's bus (gpus.py starts at 0x10) */

/* What an active link reaches: peer >= 0 is a GPU index, peer == -1 a disabled link, and with
 * topology=nvswitch peer <= -2 is NVSwitch (-2 - peer). rc on error. */
static nvmlReturn_t nvlink_peer(nvmlDevice_t device, unsigned int link, int *peer)
{
    sim_gpu gpu;
    sim_host host;
    nvmlReturn_t rc = open_device(device, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    sim_read_host(&host);
    if (!host.nvlink && !host.nvswitch)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (host.nvswitch) {
        *peer = -2 - (int)(link % SIM_NVSWITCHES);
        return NVML_SUCCESS;
    }
    unsigned int self = (unsigned int)sim_handle_index(device);
    unsigned int count = sim_gpu_count();
    if (count < 2 || link > count - 2)
        *peer = -1;
    else
        *peer = (int)(link < self ? link : link + 1);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                          unsigned int *type)
{
    int peer;
    nvmlReturn_t rc = nvlink_peer(device, link, &peer);
    if (rc == NVML_SUCCESS && type == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && peer == -1)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *type = peer >= 0 ? NVLINK_DEVICE_TYPE_GPU : NVLINK_DEVICE_TYPE_SWITCH;
    return rc;
}

/* The PCI identity of NVSwitch `number`: domain 0, bus NVSWITCH_FIRST_BUS + number. */
static void fill_switch_pci(unsigned int number, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof *pci);
    pci->domain = 0;
    pci->bus = NVSWITCH_FIRST_BUS + number;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus & 0xFFU);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus & 0xFFU);
    pci->pciDeviceId = NVSWITCH_PCI_DEVICE_ID;
    pci->pciSubSystemId = NVSWITCH_PCI_DEVICE_ID;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                               unsigned int *active)
{
    int peer;
    nvmlReturn_t rc = nvlink_peer(device, link, &peer);
    if (rc == NVML_SUCCESS && active == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *active = peer != -1;
    return rc;
}

/* The PCI identity of what an active link reaches: a GPU or an NVSwitch. */
static nvmlReturn_t remote_pci(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    int peer;
    sim_gpu remote;
    nvmlReturn_t rc = nvlink_peer(device, link, &peer);
    if (rc != NVML_SUCCESS)
        return rc;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (peer <= -2) {
        fill_switch_pci((unsigned int)(-2 - peer), pci);
        return NVML_SUCCESS;
    }
    if (peer < 0 || sim_read_gpu((unsigned int)peer, &remote) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    return fill_pci(&remote, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                          nvmlPciInfo_t *pci)
{
    return remote_pci(device, link, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                       pci_info_v1 *pci)
{
    nvmlPciInfo_t full;
    nvmlReturn_t rc = pci == NULL ? NVML_ERROR_INVALID_ARGUMENT : remote_pci(device, link, &full);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(pci, 0, sizeof *pci);
    memcpy(pci->busId, full.busIdLegacy, sizeof pci->busId);
    pci->domain = full.domain;
    pci->bus = full.bus;
    pci->device = full.device;
    pci->pciDeviceId = full.pciDeviceId;
    pci->pciSubSystemId = full.pciSubSystemId;
    return NVML_SUCCESS;
}
