/* Copyright (c) gpuops.fleet contributors
 * GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
 */
/*
 * Reads the simulator's state directory (docs/simulator.md). Nothing is
 * cached: every call opens the files it needs, and only those.
 */
#include "nvml_sim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_NAME "NVIDIA RTX PRO 6000 Blackwell Server Edition"
#define DEFAULT_TOTAL_MIB 97887ULL
#define DEFAULT_RESERVED_MIB 512ULL
#define SMALL_FILE 4096

static const char *state_dir(void)
{
    const char *dir = getenv("GPUOPS_SIM_STATE");
    return (dir != NULL && dir[0] == '/') ? dir : NULL;
}

static int state_path(char *buf, size_t size, const char *name)
{
    const char *dir = state_dir();
    if (dir == NULL)
        return -1;
    int n = snprintf(buf, size, "%s/%s", dir, name);
    return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

/* Reads up to size-1 bytes of a file into buf, NUL-terminated; -1 on error. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t used = 0;
    while (used + 1 < size) {
        size_t want = size - 1 - used;
        ssize_t n = read(fd, buf + used, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        used += (size_t)n;
        if ((size_t)n < want) /* a short read is the end of a file */
            break;
    }
    close(fd);
    buf[used] = '\0';
    return (ssize_t)used;
}

/* Reads a whole file into a malloc'd NUL-terminated buffer, or NULL. */
static char *read_all(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = SMALL_FILE, used = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (used + 1 >= cap) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t want = cap - 1 - used;
        ssize_t n = read(fd, buf + used, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n > 0)
            used += (size_t)n;
        if (n <= 0 || (size_t)n < want) { /* a short read is the end of a file */
            buf[used] = '\0';
            break;
        }
    }
    close(fd);
    return buf;
}

/* Next line of a buffer, skipping blank and '#' lines; NULL at the end. */
static char *next_line(char **cursor)
{
    while (*cursor != NULL && **cursor != '\0') {
        char *line = *cursor;
        char *end = strchr(line, '\n');
        if (end != NULL) {
            *end = '\0';
            *cursor = end + 1;
        } else {
            *cursor = line + strlen(line);
        }
        size_t len = strlen(line);
        if (len > 0 && line[len - 1] == '\r')
            line[len - 1] = '\0';
        if (line[0] != '\0' && line[0] != '#')
            return line;
    }
    return NULL;
}

static void copy_field(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

/* Calls fn(key, value, ctx) for each key=value line of a small file. */
static int read_key_values(const char *path, void (*fn)(const char *, const char *, void *),
                           void *ctx)
{
    char buf[SMALL_FILE];
    if (read_small(path, buf, sizeof buf) < 0)
        return -1;
    char *cursor = buf, *line;
    while ((line = next_line(&cursor)) != NULL) {
        char *eq = strchr(line, '=');
        if (eq == NULL)
            continue;
        *eq = '\0';
        fn(line, eq + 1, ctx);
    }
    return 0;
}

static void host_key(const char *key, const char *value, void *ctx)
{
    sim_host *host = ctx;
    if (strcmp(key, "driver_loaded") == 0)
        host->driver_loaded = atoi(value);
    else if (strcmp(key, "driver_version") == 0)
        copy_field(host->driver_version, sizeof host->driver_version, value);
    else if (strcmp(key, "nvml_version") == 0)
        copy_field(host->nvml_version, sizeof host->nvml_version, value);
    else if (strcmp(key, "cuda_driver_version") == 0)
        host->cuda_driver_version = atoi(value);
    else if (strcmp(key, "topology") == 0) {
        host->nvlink = strcmp(value, "nvlink") == 0;
        host->nvswitch = strcmp(value, "nvswitch") == 0;
    }
    else if (strcmp(key, "mig_supported") == 0)
        host->mig_supported = atoi(value);
    else if (strcmp(key, "teardown_lag_ms") == 0)
        host->teardown_lag_ms = atoll(value);
}

int sim_read_host(sim_host *host)
{
    char path[4096];
    *host = (sim_host){.driver_loaded = 1, .cuda_driver_version = 13000};
    copy_field(host->driver_version, sizeof host->driver_version, "580.95.05");
    copy_field(host->nvml_version, sizeof host->nvml_version, "13.580.95.05");
    if (state_path(path, sizeof path, "host") != 0)
        return -1;
    return read_key_values(path, host_key, host);
}

static unsigned long long field_ull(const char *text, unsigned long long fallback)
{
    if (text == NULL || text[0] == '\0')
        return fallback;
    return strtoull(text, NULL, 10);
}

/* Parses one gpus line; 0 on success. The name is the rest of the line. */
static int parse_gpu_line(char *line, sim_gpu *gpu)
{
    char *fields[8] = {0};
    int n = 0;
    fields[n++] = line;
    for (char *p = line; *p != '\0' && n < 8; p++) {
        if (*p == '\t') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    }
    if (n < 3 || fields[1][0] == '\0' || fields[2][0] == '\0')
        return -1;
    gpu->index = (unsigned int)strtoul(fields[0], NULL, 10);
    copy_field(gpu->uuid, sizeof gpu->uuid, fields[1]);
    copy_field(gpu->bus_id, sizeof gpu->bus_id, fields[2]);
    gpu->total_mib = field_ull(fields[3], DEFAULT_TOTAL_MIB);
    gpu->reserved_mib = field_ull(fields[4], DEFAULT_RESERVED_MIB);
    gpu->orphan_mib = field_ull(fields[5], 0);
    gpu->lost = field_ull(fields[6], 0) != 0;
    copy_field(gpu->name, sizeof gpu->name,
               (fields[7] != NULL && fields[7][0] != '\0') ? fields[7] : DEFAULT_NAME);
    return 0;
}

/* Finds GPU `index` (or counts GPUs when gpu is NULL); returns the count seen. */
static unsigned int scan_gpus(unsigned int index, sim_gpu *gpu, int *found)
{
    char path[4096];
    *found = 0;
    if (state_path(path, sizeof path, "gpus") != 0)
        return 0;
    char *buf = read_all(path);
    if (buf == NULL)
        return 0;
    unsigned int count = 0;
    char *cursor = buf, *line;
    sim_gpu scratch;
    while ((line = next_line(&cursor)) != NULL && count < SIM_MAX_GPUS) {
        sim_gpu *target = (gpu != NULL && count == index) ? gpu : &scratch;
        if (parse_gpu_line(line, target) != 0)
            continue;
        if (target == gpu) {
            *found = 1;
            break;
        }
        count++;
    }
    free(buf);
    return count;
}

unsigned int sim_gpu_count(void)
{
    int found;
    return scan_gpus(0, NULL, &found);
}

int sim_read_gpu(unsigned int index, sim_gpu *gpu)
{
    int found;
    scan_gpus(index, gpu, &found);
    return found ? 0 : -1;
}

static void conf_key(const char *key, const char *value, void *ctx)
{
    sim_gpu_conf *conf = ctx;
    unsigned long long v = strtoull(value, NULL, 10);
    if (strcmp(key, "temperature_c") == 0)
        conf->temperature_c = (unsigned int)v;
    else if (strcmp(key, "power_mw") == 0)
        conf->power_mw = (unsigned int)v;
    else if (strcmp(key, "power_limit_mw") == 0)
        conf->power_limit_mw = (unsigned int)v;
    else if (strcmp(key, "ecc_uncorrected_volatile") == 0)
        conf->ecc_uncorrected_volatile = v;
    else if (strcmp(key, "ecc_uncorrected_aggregate") == 0)
        conf->ecc_uncorrected_aggregate = v;
    else if (strcmp(key, "remapped_correctable") == 0)
        conf->remapped_correctable = (unsigned int)v;
    else if (strcmp(key, "remapped_uncorrectable") == 0)
        conf->remapped_uncorrectable = (unsigned int)v;
    else if (strcmp(key, "remapped_pending") == 0)
        conf->remapped_pending = v != 0;
    else if (strcmp(key, "remapped_failure") == 0)
        conf->remapped_failure = v != 0;
    else if (strcmp(key, "clocks_event_reasons") == 0)
        conf->clocks_event_reasons = v;
}

void sim_read_conf(unsigned int index, int busy, sim_gpu_conf *conf)
{
    char name[64], path[4096];
    *conf = (sim_gpu_conf){
        .temperature_c = busy ? 62 : 34,
        .power_mw = busy ? 310000 : 85000,
        .power_limit_mw = 600000,
        .clocks_event_reasons = busy ? 0 : 0x1,
    };
    snprintf(name, sizeof name, "gpu%u.conf", index);
    if (state_path(path, sizeof path, name) == 0)
        read_key_values(path, conf_key, conf);
}

/* The procfs of the PID namespace the driver sees (the machine's): GPUOPS_SIM_PROC_ROOT, else /proc.
 * A caller inside a nested PID namespace has its own /proc; the driver still knows the outer PIDs. */
const char *sim_proc_root(void)
{
    const char *root = getenv("GPUOPS_SIM_PROC_ROOT");
    return root != NULL && root[0] == '/' ? root : "/proc";
}

/* Reads state and starttime (field 22) of /proc/<pid>/stat; 0 on success. */
static int proc_stat(unsigned int pid, char *state, unsigned long long *starttime)
{
    char path[4096], buf[1024];
    snprintf(path, sizeof path, "%s/%u/stat", sim_proc_root(), pid);
    if (read_small(path, buf, sizeof buf) <= 0)
        return -1;
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    /* p is at field 3; skip to field 22. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
    }
    *starttime = strtoull(p, NULL, 10);
    return 0;
}

typedef struct {
    unsigned int pid; /* as recorded: the host's PID, or with pidns the PID in that namespace */
    unsigned long long starttime;
    unsigned int gpu;
    unsigned long long used_mib;
    char type;
    int foreign, na, sticky, mps;
    unsigned long long pidns; /* 0: the host's PID namespace; else the holder's own (the inode of its ns/pid) */
    unsigned int host_pid;    /* the PID NVML reports: pid, or the host PID found for a namespaced record */
} alloc_record;

static int parse_alloc(const char *text, alloc_record *rec)
{
    char type[8], flags[256];
    rec->pidns = 0;
    int n = sscanf(text, "%u %llu %u %llu %7s %255s %llu", &rec->pid, &rec->starttime, &rec->gpu,
                   &rec->used_mib, type, flags, &rec->pidns);
    if (n != 6 && n != 7)
        return -1;
    rec->host_pid = rec->pid;
    if ((type[0] != 'C' && type[0] != 'G') || type[1] != '\0')
        return -1;
    rec->type = type[0];
    rec->foreign = rec->na = rec->sticky = rec->mps = 0;
    for (char *save = NULL, *tok = strtok_r(flags, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "foreign") == 0)
            rec->foreign = 1;
        else if (strcmp(tok, "na") == 0)
            rec->na = 1;
        else if (strcmp(tok, "sticky") == 0)
            rec->sticky = 1;
        else if (strcmp(tok, "mps") == 0)
            rec->mps = 1;
    }
    return 0;
}

/* 1 when <root>/<pid> is in PID namespace ns (*seen = ns), or when its namespace cannot be read (another user's
 * process, *seen = 0: its PID in the namespace and start time then decide alone); 0 otherwise, or when it is gone. */
static int proc_in_namespace(const char *pid, unsigned long long ns, unsigned long long *seen)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/ns/pid", sim_proc_root(), pid);
    *seen = 0;
    if (stat(path, &st) != 0)
        return errno == EACCES;
    *seen = (unsigned long long)st.st_ino;
    return *seen == ns;
}

/* The PID of <root>/<pid> in its own PID namespace: the last field of the NSpid line of its status; 0 when gone. */
static unsigned int proc_inner_pid(const char *pid)
{
    char path[4096], buf[SMALL_FILE];
    snprintf(path, sizeof path, "%s/%s/status", sim_proc_root(), pid);
    if (read_small(path, buf, sizeof buf) <= 0)
        return 0;
    char *line = strstr(buf, "\nNSpid:");
    if (line == NULL)
        return 0;
    line += strlen("\nNSpid:");
    line[strcspn(line, "\n")] = '\0';
    char *last = NULL;
    for (char *save = NULL, *tok = strtok_r(line, " \t", &save); tok != NULL; tok = strtok_r(NULL, " \t", &save))
        last = tok;
    return last != NULL ? (unsigned int)strtoul(last, NULL, 10) : 0;
}

/* Host PIDs of processes of other PID namespaces, by (namespace, PID there, start time); host 0: no such process
 * (gone for good, since a process writes its own record while it runs). Filled by scans of the proc root; a hit is
 * then checked like any host PID (its stat's start time), so a process that ends is seen at once. Per thread. */
#define NS_CACHE_SIZE 256
typedef struct {
    unsigned long long ns, starttime;
    unsigned int inner, host;
} ns_entry;
static __thread ns_entry ns_cache[NS_CACHE_SIZE];
static __thread unsigned int ns_cache_used, ns_cache_next;

static ns_entry *ns_cache_find(unsigned long long ns, unsigned int inner, unsigned long long starttime)
{
    for (unsigned int i = 0; i < ns_cache_used; i++) {
        ns_entry *e = &ns_cache[i];
        if (e->ns == ns && e->inner == inner && e->starttime == starttime)
            return e;
    }
    return NULL;
}

static void ns_cache_put(unsigned long long ns, unsigned int inner, unsigned long long starttime, unsigned int host)
{
    ns_entry *e = ns_cache_find(ns, inner, starttime);
    if (e == NULL) {
        e = &ns_cache[ns_cache_next];
        ns_cache_next = (ns_cache_next + 1) % NS_CACHE_SIZE;
        if (ns_cache_used < NS_CACHE_SIZE)
            ns_cache_used++;
    }
    *e = (ns_entry){.ns = ns, .inner = inner, .starttime = starttime, .host = host};
}

/* One scan of the proc root: every process of the record's namespace is remembered under its PID there and start
 * time; the record's own process is its host PID (0 when the scan does not find it). */
static unsigned int scan_namespace(const alloc_record *rec)
{
    DIR *dir = opendir(sim_proc_root());
    unsigned int found = 0;
    if (dir == NULL)
        return 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        unsigned long long ns, starttime;
        char state;
        if (entry->d_name[0] < '1' || entry->d_name[0] > '9' || !proc_in_namespace(entry->d_name, rec->pidns, &ns))
            continue;
        unsigned int host = (unsigned int)strtoul(entry->d_name, NULL, 10);
        unsigned int inner = proc_inner_pid(entry->d_name);
        if (inner == 0 || proc_stat(host, &state, &starttime) != 0)
            continue;
        if (ns != 0)
            ns_cache_put(ns, inner, starttime, host);
        if (inner == rec->pid && starttime == rec->starttime)
            found = host;
    }
    closedir(dir);
    ns_cache_put(rec->pidns, rec->pid, rec->starttime, found);
    return found;
}

/* The host PID of a record made in another PID namespace, 0 when its process is gone. */
static unsigned int namespaced_host_pid(const alloc_record *rec)
{
    ns_entry *known = ns_cache_find(rec->pidns, rec->pid, rec->starttime);
    return known != NULL ? known->host : scan_namespace(rec);
}

static int alloc_process_live(alloc_record *rec)
{
    char state;
    unsigned long long starttime;
    if (rec->pidns != 0) {
        rec->host_pid = namespaced_host_pid(rec);
        if (rec->host_pid == 0)
            return 0;
    }
    if (proc_stat(rec->host_pid, &state, &starttime) != 0)
        return 0;
    if (starttime != rec->starttime || state == 'X' || state == 'x')
        return 0;
    return state != 'Z' || rec->sticky;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Driver teardown lag (host key teardown_lag_ms): a dead allocation stays live for that long after a
 * reader first saw its process gone. The first reader records the moment in allocs/<name>.gone
 * (O_EXCL: the earliest wins); every reader, this library or gpusim, measures from it. */
static int alloc_lingers(int dfd, const char *name, long long lag_ms)
{
    char gone[300], buf[64];
    snprintf(gone, sizeof gone, "%s.gone", name);
    long long seen = -1;
    int fd = openat(dfd, gone, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        seen = now_ms();
        fd = openat(dfd, gone, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            int n = snprintf(buf, sizeof buf, "%lld\n", seen);
            if (write(fd, buf, (size_t)n) != n)
                seen = -1;
            close(fd);
            return 1;
        }
        fd = openat(dfd, gone, O_RDONLY | O_CLOEXEC); /* another reader was first */
        if (fd < 0)
            return 0;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 1; /* being written right now: it was just seen gone */
    buf[n] = '\0';
    seen = strtoll(buf, NULL, 10);
    return now_ms() - seen < lag_ms;
}

/* The teardown lag applies to records of the host's PID namespace only: the host PID of a gone process of another
 * namespace is no longer known, so such a record is dead at once. */
static int alloc_is_live(int dfd, const char *name, alloc_record *rec, long long lag_ms)
{
    if (rec->foreign)
        return 1;
    if (alloc_process_live(rec))
        return 1;
    return rec->pidns == 0 && lag_ms > 0 && alloc_lingers(dfd, name, lag_ms);
}

/* Matches "<pid>-<gpu>" or "<pid>@<pidns>-<gpu>" exactly (temporary files have a suffix). */
static int alloc_name_gpu(const char *name, unsigned int gpu)
{
    const char *p = name;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '@') {
        if (*++p < '0' || *p > '9')
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p++ != '-' || *p < '0' || *p > '9')
        return 0;
    char *end;
    unsigned long value = strtoul(p, &end, 10);
    return *end == '\0' && value == gpu;
}

static int by_pid(const void *a, const void *b)
{
    unsigned int x = ((const sim_alloc *)a)->pid, y = ((const sim_alloc *)b)->pid;
    return (x > y) - (x < y);
}

static int list_push(sim_alloc_list *list, const alloc_record *rec)
{
    if (list->count == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 16;
        sim_alloc *items = realloc(list->items, cap * sizeof *items);
        if (items == NULL)
            return -1;
        list->items = items;
        list->cap = cap;
    }
    list->items[list->count++] =
        (sim_alloc){.pid = rec->host_pid, .used_mib = rec->used_mib, .type = rec->type, .na = rec->na};
    return 0;
}

/* Walks the live allocations of one GPU of a type (0: any), checking /proc
 * only for the ones of that type; stops at the first when list is NULL. */
static int walk_allocs(unsigned int index, char type, sim_alloc_list *list, int *any)
{
    char dir_path[4096];
    *any = 0;
    if (state_path(dir_path, sizeof dir_path, "allocs") != 0)
        return 0;
    int dfd = open(dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return 0;
    DIR *dir = fdopendir(dfd);
    if (dir == NULL) {
        close(dfd);
        return 0;
    }
    int rc = 0;
    struct dirent *entry;
    sim_host host;
    long long lag_ms = sim_read_host(&host) == 0 ? host.teardown_lag_ms : 0;
    while ((entry = readdir(dir)) != NULL) {
        if (!alloc_name_gpu(entry->d_name, index))
            continue;
        char buf[512];
        int fd = openat(dfd, entry->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        alloc_record rec;
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (parse_alloc(buf, &rec) != 0 || rec.gpu != index)
            continue;
        /* 'M': the MPS client list; 'C'/'G': that list without MPS clients; 0: any */
        if (type == 'M' ? !rec.mps : (type != 0 && (rec.type != type || rec.mps)))
            continue;
        if (!alloc_is_live(dfd, entry->d_name, &rec, lag_ms))
            continue;
        *any = 1;
        if (list == NULL)
            break;
        if (list_push(list, &rec) != 0) {
            rc = -1;
            break;
        }
    }
    closedir(dir);
    if (list != NULL && list->count > 1)
        qsort(list->items, list->count, sizeof *list->items, by_pid);
    return rc;
}

int sim_live_allocs(unsigned int index, char type, sim_alloc_list *list)
{
    int any;
    *list = (sim_alloc_list){0};
    return walk_allocs(index, type, list, &any);
}

void sim_alloc_list_free(sim_alloc_list *list)
{
    free(list->items);
    *list = (sim_alloc_list){0};
}

int sim_gpu_busy(unsigned int index)
{
    int any;
    walk_allocs(index, 0, NULL, &any);
    return any;
}

int sim_parse_bus_id(const char *text, unsigned int *domain, unsigned int *bus,
                     unsigned int *device, unsigned int *function)
{
    char tail;
    if (sscanf(text, "%x:%x:%x.%x%c", domain, bus, device, function, &tail) != 4)
        return -1;
    return 0;
}
