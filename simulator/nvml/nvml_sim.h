/* Copyright (c) gpuops.fleet contributors
 * GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
 */
/*
 * Fake NVML: the simulator's internal API.
 * The state-directory format is specified in docs/simulator.md.
 */
#ifndef NVML_SIM_H
#define NVML_SIM_H

#include <stddef.h>

#include "nvml_api.h"

/* ---- state directory (sim_state.c) ---- */

#define SIM_MAX_GPUS 1024
#define SIM_NAME_LEN 96
#define SIM_BUSID_LEN 32
#define SIM_NVSWITCHES 4

typedef struct {
    int driver_loaded;
    char driver_version[80];
    char nvml_version[80];
    int cuda_driver_version;
    int nvlink;   /* topology=nvlink: direct GPU-to-GPU links */
    int nvswitch; /* topology=nvswitch: every link goes to one of SIM_NVSWITCHES switches (HGX) */
    int mig_supported;
    long long teardown_lag_ms;
} sim_host;

typedef struct {
    unsigned int index;
    char uuid[SIM_NAME_LEN];
    char bus_id[SIM_BUSID_LEN];
    unsigned long long total_mib;
    unsigned long long reserved_mib;
    unsigned long long orphan_mib;
    int lost;
    char name[SIM_NAME_LEN];
} sim_gpu;

typedef struct {
    unsigned int temperature_c;
    unsigned int power_mw;
    unsigned int power_limit_mw;
    unsigned long long ecc_uncorrected_volatile;
    unsigned long long ecc_uncorrected_aggregate;
    unsigned int remapped_correctable;
    unsigned int remapped_uncorrectable;
    unsigned int remapped_pending;
    unsigned int remapped_failure;
    unsigned long long clocks_event_reasons;
} sim_gpu_conf;

typedef struct {
    unsigned int pid;
    unsigned long long used_mib;
    char type; /* 'C' or 'G' */
    int na;
} sim_alloc;

typedef struct {
    sim_alloc *items;
    size_t count;
    size_t cap;
} sim_alloc_list;

/* 0 and fills *host when the host file exists, -1 otherwise. */
int sim_read_host(sim_host *host);
const char *sim_proc_root(void);
/* Number of GPUs in the gpus file (0 when it is missing). */
unsigned int sim_gpu_count(void);
/* 0 and fills *gpu when the gpus file has that index, -1 otherwise. */
int sim_read_gpu(unsigned int index, sim_gpu *gpu);
/* Applies gpu<index>.conf over the modelled defaults for a busy/idle GPU
 * (busy < 0: unknown, for callers that read no busy-dependent key). */
void sim_read_conf(unsigned int index, int busy, sim_gpu_conf *conf);
/* Live allocations of a list ('C', 'G' without MPS clients, 'M' MPS clients; 0: any) on one GPU, sorted by pid;
 * 0 on success, -1 on ENOMEM. */
int sim_live_allocs(unsigned int index, char type, sim_alloc_list *list);
void sim_alloc_list_free(sim_alloc_list *list);
/* 1 when the GPU has at least one live allocation. */
int sim_gpu_busy(unsigned int index);
/* Parses "dddddddd:bb:dd.f" or "dddd:bb:dd.f" (hex); 0 on success. */
int sim_parse_bus_id(const char *text, unsigned int *domain, unsigned int *bus,
                     unsigned int *device, unsigned int *function);

/* ---- library state (nvml_system.c) ---- */

int sim_initialized(void);
/* Copies a string the NVML way: INSUFFICIENT_SIZE when it does not fit. */
nvmlReturn_t sim_copy_string(char *dst, unsigned int length, const char *src);

/* ---- devices (nvml_device.c) ---- */

/* Index behind a handle, or -1 when it is not one of ours. */
int sim_handle_index(nvmlDevice_t device);
/* For generated stubs: GPU_IS_LOST when the argument is a lost GPU's handle. */
nvmlReturn_t sim_stub_result(const void *maybe_device);

#endif
