/* Copyright (c) gpuops.fleet contributors
 * GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
 */
/*
 * Fake nvidia-smi for the simulated GPU host: the subset operators and the
 * tests use, formatted like the real tool, answered through (fake) NVML.
 *   nvidia-smi [-i IDS] --query-gpu=FIELDS --format=csv[,noheader][,nounits]
 *   nvidia-smi [-i IDS] --query-compute-apps=FIELDS --format=csv[,...]
 *   nvidia-smi [-i IDS] -L
 *   nvidia-smi [-i IDS]            (short table)
 */
#include "nvml_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB 1048576ULL
#define EXIT_BAD_ARGS 2
#define EXIT_NOT_FOUND 6
#define EXIT_OTHER 255
#define MAX_FIELDS 64
#define VALUE_LEN 256

typedef enum {
    G_INDEX, G_UUID, G_NAME, G_BUS_ID, G_MEM_TOTAL, G_MEM_USED, G_MEM_FREE, G_MEM_RESERVED,
    G_UTIL_GPU, G_UTIL_MEM, G_TEMP, G_POWER_DRAW, G_POWER_LIMIT, G_PERSISTENCE, G_PSTATE,
    G_DRIVER, G_COUNT, G_ECC_MODE,
    P_PID, P_NAME, P_GPU_UUID, P_GPU_BUS_ID, P_GPU_NAME, P_USED_MEMORY,
} field_id;

typedef struct {
    const char *name;   /* as given on the command line */
    const char *header; /* canonical name, with the unit when there is one */
    field_id id;
} field_def;

static const field_def gpu_fields[] = {
    {"index", "index", G_INDEX},
    {"uuid", "uuid", G_UUID},
    {"gpu_uuid", "uuid", G_UUID},
    {"name", "name", G_NAME},
    {"gpu_name", "name", G_NAME},
    {"pci.bus_id", "pci.bus_id", G_BUS_ID},
    {"gpu_bus_id", "pci.bus_id", G_BUS_ID},
    {"memory.total", "memory.total [MiB]", G_MEM_TOTAL},
    {"memory.used", "memory.used [MiB]", G_MEM_USED},
    {"memory.free", "memory.free [MiB]", G_MEM_FREE},
    {"memory.reserved", "memory.reserved [MiB]", G_MEM_RESERVED},
    {"utilization.gpu", "utilization.gpu [%]", G_UTIL_GPU},
    {"utilization.memory", "utilization.memory [%]", G_UTIL_MEM},
    {"temperature.gpu", "temperature.gpu", G_TEMP},
    {"power.draw", "power.draw [W]", G_POWER_DRAW},
    {"power.limit", "power.limit [W]", G_POWER_LIMIT},
    {"persistence_mode", "persistence_mode", G_PERSISTENCE},
    {"pstate", "pstate", G_PSTATE},
    {"driver_version", "driver_version", G_DRIVER},
    {"count", "count", G_COUNT},
    {"ecc.mode.current", "ecc.mode.current", G_ECC_MODE},
};

static const field_def app_fields[] = {
    {"pid", "pid", P_PID},
    {"process_name", "process_name", P_NAME},
    {"name", "process_name", P_NAME},
    {"gpu_uuid", "gpu_uuid", P_GPU_UUID},
    {"gpu_bus_id", "gpu_bus_id", P_GPU_BUS_ID},
    {"gpu_name", "gpu_name", P_GPU_NAME},
    {"used_gpu_memory", "used_gpu_memory [MiB]", P_USED_MEMORY},
    {"used_memory", "used_gpu_memory [MiB]", P_USED_MEMORY},
};

typedef struct {
    int noheader, nounits;
} csv_format;

typedef struct {
    const field_def *fields[MAX_FIELDS];
    int count;
} field_list;

/* ---- small helpers ---- */

static int bad_args(const char *message)
{
    fprintf(stderr, "%s\nPlease run 'nvidia-smi -h' for help.\n", message);
    return EXIT_BAD_ARGS;
}

/* Text for a failed query, as the real tool prints it in a cell. */
static const char *error_cell(nvmlReturn_t rc)
{
    return rc == NVML_ERROR_NOT_SUPPORTED ? "[N/A]" : "[Unknown Error]";
}

static void with_unit(char *out, unsigned long long value, const char *unit, const csv_format *fmt)
{
    if (fmt->nounits)
        snprintf(out, VALUE_LEN, "%llu", value);
    else
        snprintf(out, VALUE_LEN, "%llu %s", value, unit);
}

static void watts(char *out, unsigned int milliwatts, const csv_format *fmt)
{
    snprintf(out, VALUE_LEN, fmt->nounits ? "%.2f" : "%.2f W", milliwatts / 1000.0);
}

static int parse_fields(const char *spec, const field_def *table, size_t table_len,
                        field_list *list)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", spec);
    list->count = 0;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        const field_def *found = NULL;
        for (size_t i = 0; i < table_len && found == NULL; i++)
            if (strcmp(table[i].name, tok) == 0)
                found = &table[i];
        if (found == NULL || list->count == MAX_FIELDS) {
            fprintf(stderr, "Field \"%s\" is not a valid field to query.\n\n", tok);
            return -1;
        }
        list->fields[list->count++] = found;
    }
    return list->count > 0 ? 0 : -1;
}

static int parse_format(const char *spec, csv_format *fmt)
{
    char copy[256];
    int csv = 0;
    snprintf(copy, sizeof copy, "%s", spec);
    *fmt = (csv_format){0};
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "csv") == 0)
            csv = 1;
        else if (strcmp(tok, "noheader") == 0)
            fmt->noheader = 1;
        else if (strcmp(tok, "nounits") == 0)
            fmt->nounits = 1;
        else
            return -1;
    }
    return csv ? 0 : -1;
}

static void print_header(const field_list *list, const csv_format *fmt)
{
    if (fmt->noheader)
        return;
    for (int i = 0; i < list->count; i++)
        printf("%s%s", i ? ", " : "", list->fields[i]->header);
    printf("\n");
}

/* A GPU that answers GPU_IS_LOST is reported on stderr and skipped. */
static int gpu_is_lost(unsigned int index, nvmlDevice_t device)
{
    char uuid[96];
    nvmlReturn_t rc = nvmlDeviceGetUUID(device, uuid, sizeof uuid);
    if (rc != NVML_ERROR_GPU_IS_LOST)
        return 0;
    fprintf(stderr,
            "Unable to determine the device handle for GPU%u: GPU is lost.  "
            "Reboot the system to recover this GPU\n",
            index);
    return 1;
}

/* ---- --query-gpu ---- */

static void gpu_cell(nvmlDevice_t device, field_id id, const csv_format *fmt, char *out)
{
    nvmlMemory_v2_t mem = {.version = NVML_STRUCT_VERSION(sizeof mem, 2)};
    nvmlPciInfo_t pci;
    nvmlUtilization_t util;
    unsigned int u, u2;
    unsigned long long ull;
    int state;
    nvmlReturn_t rc = NVML_SUCCESS;

    switch (id) {
    case G_INDEX:
        if ((rc = nvmlDeviceGetIndex(device, &u)) == NVML_SUCCESS)
            snprintf(out, VALUE_LEN, "%u", u);
        break;
    case G_UUID:
        rc = nvmlDeviceGetUUID(device, out, VALUE_LEN);
        break;
    case G_NAME:
        rc = nvmlDeviceGetName(device, out, VALUE_LEN);
        break;
    case G_BUS_ID:
        if ((rc = nvmlDeviceGetPciInfo_v3(device, &pci)) == NVML_SUCCESS)
            snprintf(out, VALUE_LEN, "%s", pci.busId);
        break;
    case G_MEM_TOTAL:
    case G_MEM_USED:
    case G_MEM_FREE:
    case G_MEM_RESERVED:
        if ((rc = nvmlDeviceGetMemoryInfo_v2(device, &mem)) == NVML_SUCCESS) {
            ull = id == G_MEM_TOTAL ? mem.total
                : id == G_MEM_USED  ? mem.used
                : id == G_MEM_FREE  ? mem.free
                                    : mem.reserved;
            with_unit(out, ull / MIB, "MiB", fmt);
        }
        break;
    case G_UTIL_GPU:
    case G_UTIL_MEM:
        if ((rc = nvmlDeviceGetUtilizationRates(device, &util)) == NVML_SUCCESS)
            with_unit(out, id == G_UTIL_GPU ? util.gpu : util.memory, "%", fmt);
        break;
    case G_TEMP:
        if ((rc = nvmlDeviceGetTemperature(device, 0, &u)) == NVML_SUCCESS)
            snprintf(out, VALUE_LEN, "%u", u);
        break;
    case G_POWER_DRAW:
        if ((rc = nvmlDeviceGetPowerUsage(device, &u)) == NVML_SUCCESS)
            watts(out, u, fmt);
        break;
    case G_POWER_LIMIT:
        if ((rc = nvmlDeviceGetEnforcedPowerLimit(device, &u)) == NVML_SUCCESS)
            watts(out, u, fmt);
        break;
    case G_PERSISTENCE:
        if ((rc = nvmlDeviceGetPersistenceMode(device, &u)) == NVML_SUCCESS)
            snprintf(out, VALUE_LEN, "%s", u ? "Enabled" : "Disabled");
        break;
    case G_ECC_MODE:
        if ((rc = nvmlDeviceGetEccMode(device, &u, &u2)) == NVML_SUCCESS)
            snprintf(out, VALUE_LEN, "%s", u ? "Enabled" : "Disabled");
        break;
    case G_PSTATE:
        if ((rc = nvmlDeviceGetPerformanceState(device, &state)) == NVML_SUCCESS)
            snprintf(out, VALUE_LEN, "P%d", state);
        break;
    case G_DRIVER:
        rc = nvmlSystemGetDriverVersion(out, VALUE_LEN);
        break;
    case G_COUNT:
        if ((rc = nvmlDeviceGetCount_v2(&u)) == NVML_SUCCESS)
            snprintf(out, VALUE_LEN, "%u", u);
        break;
    default:
        rc = NVML_ERROR_NOT_SUPPORTED;
    }
    if (rc != NVML_SUCCESS)
        snprintf(out, VALUE_LEN, "%s", error_cell(rc));
}

static int query_gpus(const unsigned int *ids, unsigned int n, const field_list *list,
                      const csv_format *fmt)
{
    int status = 0;
    char value[VALUE_LEN];
    print_header(list, fmt);
    for (unsigned int g = 0; g < n; g++) {
        nvmlDevice_t device;
        nvmlDeviceGetHandleByIndex_v2(ids[g], &device);
        if (gpu_is_lost(ids[g], device)) {
            status = NVML_ERROR_GPU_IS_LOST;
            continue;
        }
        for (int i = 0; i < list->count; i++) {
            gpu_cell(device, list->fields[i]->id, fmt, value);
            printf("%s%s", i ? ", " : "", value);
        }
        printf("\n");
    }
    return status;
}

/* ---- --query-compute-apps ---- */

/* Compute processes of one GPU (two-pass size protocol); caller frees. */
static nvmlReturn_t compute_procs(nvmlDevice_t device, nvmlProcessInfo_v2_t **procs,
                                  unsigned int *count)
{
    *procs = NULL;
    *count = 0;
    for (;;) {
        unsigned int cap = *count;
        nvmlReturn_t rc = nvmlDeviceGetComputeRunningProcesses_v3(device, count, *procs);
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE)
            return rc;
        if (*count <= cap)
            return NVML_ERROR_UNKNOWN;
        free(*procs);
        *procs = calloc(*count, sizeof **procs);
        if (*procs == NULL)
            return NVML_ERROR_MEMORY;
    }
}

static void app_cell(const nvmlProcessInfo_v2_t *proc, nvmlDevice_t device, field_id id,
                     const csv_format *fmt, char *out)
{
    nvmlPciInfo_t pci;
    nvmlReturn_t rc = NVML_SUCCESS;
    switch (id) {
    case P_PID:
        snprintf(out, VALUE_LEN, "%u", proc->pid);
        break;
    case P_NAME:
        rc = nvmlSystemGetProcessName(proc->pid, out, VALUE_LEN);
        if (rc == NVML_ERROR_NOT_FOUND) {
            snprintf(out, VALUE_LEN, "[Not Found]");
            rc = NVML_SUCCESS;
        }
        break;
    case P_GPU_UUID:
        rc = nvmlDeviceGetUUID(device, out, VALUE_LEN);
        break;
    case P_GPU_BUS_ID:
        if ((rc = nvmlDeviceGetPciInfo_v3(device, &pci)) == NVML_SUCCESS)
            snprintf(out, VALUE_LEN, "%s", pci.busId);
        break;
    case P_GPU_NAME:
        rc = nvmlDeviceGetName(device, out, VALUE_LEN);
        break;
    case P_USED_MEMORY:
        if (proc->usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULL)
            snprintf(out, VALUE_LEN, "[N/A]");
        else
            with_unit(out, proc->usedGpuMemory / MIB, "MiB", fmt);
        break;
    default:
        rc = NVML_ERROR_NOT_SUPPORTED;
    }
    if (rc != NVML_SUCCESS)
        snprintf(out, VALUE_LEN, "%s", error_cell(rc));
}

static int query_apps(const unsigned int *ids, unsigned int n, const field_list *list,
                      const csv_format *fmt)
{
    int status = 0;
    char value[VALUE_LEN];
    print_header(list, fmt);
    for (unsigned int g = 0; g < n; g++) {
        nvmlDevice_t device;
        nvmlProcessInfo_v2_t *procs;
        unsigned int count;
        nvmlDeviceGetHandleByIndex_v2(ids[g], &device);
        if (gpu_is_lost(ids[g], device)) {
            status = NVML_ERROR_GPU_IS_LOST;
            continue;
        }
        nvmlReturn_t rc = compute_procs(device, &procs, &count);
        if (rc != NVML_SUCCESS) {
            fprintf(stderr, "GPU%u: %s\n", ids[g], nvmlErrorString(rc));
            status = EXIT_OTHER;
        }
        for (unsigned int p = 0; rc == NVML_SUCCESS && p < count; p++) {
            for (int i = 0; i < list->count; i++) {
                app_cell(&procs[p], device, list->fields[i]->id, fmt, value);
                printf("%s%s", i ? ", " : "", value);
            }
            printf("\n");
        }
        free(procs);
    }
    return status;
}

/* ---- -L ---- */

static int list_gpus(const unsigned int *ids, unsigned int n)
{
    int status = 0;
    char name[VALUE_LEN], uuid[VALUE_LEN];
    for (unsigned int g = 0; g < n; g++) {
        nvmlDevice_t device;
        nvmlDeviceGetHandleByIndex_v2(ids[g], &device);
        if (gpu_is_lost(ids[g], device)) {
            status = NVML_ERROR_GPU_IS_LOST;
            continue;
        }
        nvmlDeviceGetName(device, name, sizeof name);
        nvmlDeviceGetUUID(device, uuid, sizeof uuid);
        printf("GPU %u: %s (UUID: %s)\n", ids[g], name, uuid);
    }
    return status;
}

/* ---- the plain table ---- */

#define RULE "+-----------------------------------------------------------------------------------------+\n"
#define GPU_RULE "+-----------------------------------------+------------------------+----------------------+\n"

static void table_gpu(unsigned int index, nvmlDevice_t device)
{
    char name[VALUE_LEN];
    nvmlPciInfo_t pci;
    nvmlMemory_v2_t mem = {.version = NVML_STRUCT_VERSION(sizeof mem, 2)};
    nvmlUtilization_t util = {0};
    unsigned int persistence = 0, temp = 0, power = 0, limit = 0, ecc = 0, pending;
    unsigned long long errors = 0;
    int state = 0;
    nvmlDeviceGetName(device, name, sizeof name);
    nvmlDeviceGetPciInfo_v3(device, &pci);
    nvmlDeviceGetMemoryInfo_v2(device, &mem);
    nvmlDeviceGetUtilizationRates(device, &util);
    nvmlDeviceGetPersistenceMode(device, &persistence);
    nvmlDeviceGetTemperature(device, 0, &temp);
    nvmlDeviceGetPowerUsage(device, &power);
    nvmlDeviceGetEnforcedPowerLimit(device, &limit);
    nvmlDeviceGetPerformanceState(device, &state);
    nvmlDeviceGetEccMode(device, &ecc, &pending);
    nvmlDeviceGetTotalEccErrors(device, 1, 0, &errors);
    if (strlen(name) > 29)
        strcpy(name + 26, "...");
    char memory[64], watts_text[64];
    snprintf(memory, sizeof memory, "%lluMiB / %lluMiB", mem.used / MIB, mem.total / MIB);
    snprintf(watts_text, sizeof watts_text, "%uW / %uW", power / 1000, limit / 1000);
    printf("| %3u  %-29s %4s | %18s Off | %20llu |\n", index, name, persistence ? "On" : "Off",
           pci.busId, errors);
    printf("| N/A  %3uC    P%-2d %22s | %22s | %5u%%       Default |\n", temp, state, watts_text,
           memory, util.gpu);
    printf(GPU_RULE);
}

static void table_processes(const unsigned int *ids, unsigned int n)
{
    char name[VALUE_LEN];
    printf("\n" RULE);
    printf("| Processes:                                                                              |\n");
    printf("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n");
    printf("|        ID   ID                                                               Usage      |\n");
    printf("|=========================================================================================|\n");
    int any = 0;
    for (unsigned int g = 0; g < n; g++) {
        nvmlDevice_t device;
        nvmlProcessInfo_v2_t *procs;
        unsigned int count;
        nvmlDeviceGetHandleByIndex_v2(ids[g], &device);
        if (compute_procs(device, &procs, &count) != NVML_SUCCESS)
            count = 0;
        for (unsigned int p = 0; p < count; p++) {
            char used[32] = "N/A";
            if (nvmlSystemGetProcessName(procs[p].pid, name, sizeof name) != NVML_SUCCESS)
                snprintf(name, sizeof name, "[Not Found]");
            if (strlen(name) > 38)
                strcpy(name + 35, "...");
            if (procs[p].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE_ULL)
                snprintf(used, sizeof used, "%lluMiB", procs[p].usedGpuMemory / MIB);
            printf("|  %3u   N/A  N/A  %12u      C   %-38s %9s |\n", ids[g], procs[p].pid, name,
                   used);
            any = 1;
        }
        free(procs);
    }
    if (!any)
        printf("|  No running processes found                                                             |\n");
    printf(RULE);
}

static int table(const unsigned int *ids, unsigned int n)
{
    char driver[96] = "N/A";
    int cuda = 0, status = 0;
    unsigned int shown[n > 0 ? n : 1], n_shown = 0;
    nvmlSystemGetDriverVersion(driver, sizeof driver);
    nvmlSystemGetCudaDriverVersion_v2(&cuda);
    char cuda_text[32];
    snprintf(cuda_text, sizeof cuda_text, "%d.%d", cuda / 1000, (cuda % 1000) / 10);
    printf(RULE);
    printf("| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n", driver, driver,
           cuda_text);
    printf(GPU_RULE);
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n");
    printf("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n");
    printf("|=========================================+========================+======================|\n");
    for (unsigned int g = 0; g < n; g++) {
        nvmlDevice_t device;
        nvmlDeviceGetHandleByIndex_v2(ids[g], &device);
        if (gpu_is_lost(ids[g], device)) {
            status = NVML_ERROR_GPU_IS_LOST;
            continue;
        }
        table_gpu(ids[g], device);
        shown[n_shown++] = ids[g];
    }
    table_processes(shown, n_shown);
    return status;
}

/* ---- command line ---- */

/* Resolves "-i 0,3" (indices or UUIDs, at most `count`); -1 when one does not exist. */
static int select_gpus(const char *spec, unsigned int count, unsigned int *ids, unsigned int *n)
{
    *n = 0;
    if (spec == NULL) {
        for (unsigned int i = 0; i < count; i++)
            ids[(*n)++] = i;
        return 0;
    }
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok != NULL && *n < count;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned int index = (unsigned int)strtoul(tok, &end, 10);
        nvmlDevice_t device;
        if (*end != '\0' || end == tok) {
            if (nvmlDeviceGetHandleByUUID(tok, &device) != NVML_SUCCESS ||
                nvmlDeviceGetIndex(device, &index) != NVML_SUCCESS)
                return -1;
        } else if (index >= count) {
            return -1;
        }
        ids[(*n)++] = index;
    }
    return 0;
}

static const char *option_value(int argc, char **argv, int *i, const char *name)
{
    size_t len = strlen(name);
    if (strncmp(argv[*i], name, len) == 0 && argv[*i][len] == '=')
        return argv[*i] + len + 1;
    if (strcmp(argv[*i], name) == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

/* ---- topo -m ---- */

#define TOPO_LINKS 18U
#define TOPO_MAX_FAR 64U
#define TOPO_BUS_LEN 32

typedef struct {
    char bus[TOPO_MAX_FAR][TOPO_BUS_LEN];
    unsigned int links[TOPO_MAX_FAR];
    int is_switch[TOPO_MAX_FAR];
    unsigned int n;
} far_ends;

/* Every active NvLink of a GPU, counted per far end (a GPU or an NVSwitch, by PCI bus id). */
static void read_far_ends(nvmlDevice_t device, far_ends *ends)
{
    memset(ends, 0, sizeof *ends);
    for (unsigned int link = 0; link < TOPO_LINKS; link++) {
        unsigned int active = 0;
        nvmlPciInfo_t pci;
        unsigned int type = 0;
        if (nvmlDeviceGetNvLinkState(device, link, &active) != NVML_SUCCESS)
            break;
        if (!active || nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, &pci) != NVML_SUCCESS)
            continue;
        int is_switch = nvmlDeviceGetNvLinkRemoteDeviceType(device, link, &type) == NVML_SUCCESS && type == 2;
        unsigned int k = 0;
        while (k < ends->n && strcmp(ends->bus[k], pci.busId) != 0)
            k++;
        if (k == ends->n) {
            if (ends->n == TOPO_MAX_FAR)
                continue;
            snprintf(ends->bus[k], sizeof ends->bus[k], "%s", pci.busId);
            ends->is_switch[k] = is_switch;
            ends->n++;
        }
        ends->links[k]++;
    }
}

/* NvLinks from `a` to GPU `b`: direct ones, plus those to an NVSwitch that `b` also links to. */
static unsigned int links_between(const far_ends *a, const far_ends *b, const char *b_bus)
{
    unsigned int total = 0;
    for (unsigned int k = 0; k < a->n; k++) {
        if (!a->is_switch[k]) {
            if (strcmp(a->bus[k], b_bus) == 0)
                total += a->links[k];
            continue;
        }
        for (unsigned int m = 0; m < b->n; m++)
            if (b->is_switch[m] && strcmp(b->bus[m], a->bus[k]) == 0)
                total += a->links[k];
    }
    return total;
}

static const char *pcie_level(nvmlDevice_t a, nvmlDevice_t b)
{
    int level;
    if (nvmlDeviceGetTopologyCommonAncestor(a, b, &level) != NVML_SUCCESS)
        return "N/A";
    switch (level) {
    case 0: case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    default: return "SYS";
    }
}

/* `nvidia-smi topo -m`: the link between each pair, then CPU and NUMA affinity (modelled: the first half of
 * the GPUs on NUMA node 0, CPUs 0-31; the rest on node 1, CPUs 32-63), then the legend. */
static int topo_matrix(const unsigned int *ids, unsigned int n)
{
    nvmlDevice_t *devices = calloc(n, sizeof *devices);
    far_ends *ends = calloc(n, sizeof *ends);
    char (*buses)[TOPO_BUS_LEN] = calloc(n, sizeof *buses);
    if (devices == NULL || ends == NULL || buses == NULL) {
        free(devices), free(ends), free(buses);
        return EXIT_OTHER;
    }
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    for (unsigned int r = 0; r < n; r++) {
        nvmlPciInfo_t pci;
        nvmlDeviceGetHandleByIndex_v2(ids[r], &devices[r]);
        if (nvmlDeviceGetPciInfo_v3(devices[r], &pci) == NVML_SUCCESS)
            snprintf(buses[r], sizeof buses[r], "%s", pci.busId);
        read_far_ends(devices[r], &ends[r]);
    }
    for (unsigned int c = 0; c < n; c++)
        printf("\tGPU%u", ids[c]);
    printf("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n");
    for (unsigned int r = 0; r < n; r++) {
        printf("GPU%u", ids[r]);
        for (unsigned int c = 0; c < n; c++) {
            unsigned int links = r == c ? 0 : links_between(&ends[r], &ends[c], buses[c]);
            if (r == c)
                printf("\t X ");
            else if (links > 0)
                printf("\tNV%u", links);
            else
                printf("\t%s", pcie_level(devices[r], devices[c]));
        }
        int node = ids[r] >= count / 2 && count > 1;
        printf("\t%s\t%d\t\tN/A\n", node ? "32-63" : "0-31", node);
    }
    printf("\nLegend:\n\n"
           "  X    = Self\n"
           "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
           "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
           "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
           "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
           "  PIX  = Connection traversing at most a single PCIe bridge\n"
           "  NV#  = Connection traversing a bonded set of # NVLinks\n");
    free(devices), free(ends), free(buses);
    return 0;
}

int main(int argc, char **argv)
{
    const char *query_gpu = NULL, *query_apps_spec = NULL, *format = NULL, *ids_spec = NULL;
    int list = 0, topo = 0;
    if (argc > 1 && strcmp(argv[1], "topo") == 0) {
        if (argc != 3 || (strcmp(argv[2], "-m") != 0 && strcmp(argv[2], "--matrix") != 0))
            return bad_args("Only 'topo -m' is simulated.");
        topo = 1;
        argc = 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *v;
        if ((v = option_value(argc, argv, &i, "--query-gpu")) != NULL)
            query_gpu = v;
        else if ((v = option_value(argc, argv, &i, "--query-compute-apps")) != NULL)
            query_apps_spec = v;
        else if ((v = option_value(argc, argv, &i, "--format")) != NULL)
            format = v;
        else if ((v = option_value(argc, argv, &i, "--id")) != NULL ||
                 (v = option_value(argc, argv, &i, "-i")) != NULL)
            ids_spec = v;
        else if (strcmp(argv[i], "-L") == 0 || strcmp(argv[i], "--list-gpus") == 0)
            list = 1;
        else
            return bad_args("Invalid combination of input arguments.");
    }
    if ((query_gpu || query_apps_spec) && format == NULL)
        return bad_args("'--format' is required with '--query-*'.");
    csv_format fmt = {0};
    if (format != NULL && parse_format(format, &fmt) != 0)
        return bad_args("Invalid format.");
    field_list fields;
    if (query_gpu != NULL &&
        parse_fields(query_gpu, gpu_fields, sizeof gpu_fields / sizeof *gpu_fields, &fields) != 0)
        return bad_args("Invalid field list.");
    if (query_apps_spec != NULL &&
        parse_fields(query_apps_spec, app_fields, sizeof app_fields / sizeof *app_fields, &fields) != 0)
        return bad_args("Invalid field list.");

    nvmlReturn_t rc = nvmlInit_v2();
    if (rc == NVML_ERROR_DRIVER_NOT_LOADED) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (rc != NVML_SUCCESS) {
        printf("Failed to initialize NVML: %s\n", nvmlErrorString(rc));
        return EXIT_OTHER;
    }
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    unsigned int *ids = calloc(count > 0 ? count : 1, sizeof *ids);
    int status;
    if (ids == NULL) {
        status = EXIT_OTHER;
    } else if (count == 0 || select_gpus(ids_spec, count, ids, &count) != 0) {
        printf("No devices were found\n");
        status = EXIT_NOT_FOUND;
    } else if (topo) {
        status = topo_matrix(ids, count);
    } else if (query_gpu != NULL) {
        status = query_gpus(ids, count, &fields, &fmt);
    } else if (query_apps_spec != NULL) {
        status = query_apps(ids, count, &fields, &fmt);
    } else if (list) {
        status = list_gpus(ids, count);
    } else {
        status = table(ids, count);
    }
    free(ids);
    nvmlShutdown();
    return status;
}
