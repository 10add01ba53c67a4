/* engine.h - the loading engine as the layers above it use it: the load job, the executor's entry
 * points and the sl_model handle.
 *
 * sl_load (load.c) only turns a checkpoint into a load job and runs it (sl_load_job_run);
 * sl_load_files runs the same executor on plain files, so that tests drive it with hand-built
 * plans. */
#ifndef SL_LOAD_ENGINE_H
#define SL_LOAD_ENGINE_H

#include "shardload.h"

#include "device/device.h"
#include "common/sl_err.h"
#include "common/sl_file.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct sl_load_file {
    const char *path;
    uint64_t size;           /* size at planning time; a different size now is SL_E_CHANGED */
    sl_file_id id;           /* identity at the checkpoint's open (another one now is
                                SL_E_CHANGED); id.valid 0: not known, only the size is checked */
    const struct sl_http_obj *remote;   /* a remote file (io/http.h), read by the remote engine;
                                           NULL: a local file */
} sl_load_file;

/* The ETag a remote file's first GET saw; NULL for a local file or a server that gave none. */
const char *sl_load_file_etag(const sl_load_file *f);

typedef struct sl_model_dev sl_model_dev;

/* --verify's manifest (opts.manifest_path): its text, read once per load (sl_load_job_plan) for
 * the side files' check there and the files' digests and blocks in the read engine, which would
 * otherwise each read it. */
typedef struct sl_load_manifest {
    const char *path;        /* NULL: no manifest */
    char *text;              /* NUL-terminated; owned by the job */
    size_t len;
} sl_load_manifest;

/* Opens and allocates mesh devices [first, first + count) of p as m->devs[0..count), setting
 * m->n_devices and m->first_device; what it opened is closed through the devices' ops. */
typedef sl_status (*sl_open_devices_fn)(void *user, sl_model *m, const sl_plan *p, int32_t first,
                                        int32_t count, const sl_load_opts *o);

/* What one process loads (job.c), the one way into the engine for sl_load, sl_load_files, the MPI
 * ranks and sl_reshard: the resolved options, the checkpoint's files, the plan (checked against
 * them) and a view of it holding only the mesh devices this process loads (their entries copied,
 * their arrays the plan's). Built in that order: init, files (or use_files), plan, devices (or
 * range); then fill. The layers above load/ get everything they need from a plan through it and
 * the public getters, and never include plan/plan_data.h (tests/layers.sh checks). */
typedef struct sl_load_job {
    sl_load_opts opts;              /* the caller's, or the defaults */
    const sl_load_file *files;      /* n_files entries: the checkpoint's (owned) or the caller's */
    int64_t n_files;
    uint64_t checkpoint_bytes;
    const sl_plan *plan;            /* the whole plan */
    sl_plan *view;                  /* the plan's view of this process's mesh devices */
    sl_open_devices_fn open;        /* NULL: the backend of opts.device; else devices the caller
                                       makes (reshard's file devices), for the whole mesh */
    void *open_user;
    sl_load_file *own_files;
    const sl_checkpoint *ck;        /* sl_load_job_files': its side files are checked against
                                       the manifest (rd_manifest_check_side) */
    sl_load_manifest manifest;      /* read by sl_load_job_plan with opts.verify */
} sl_load_job;

/* An empty job with options o (NULL: the defaults). */
void sl_load_job_init(sl_load_job *j, const sl_load_opts *o);
/* The job's files: ck's, with their sizes as opened (none without ck). */
sl_status sl_load_job_files(sl_load_job *j, const sl_checkpoint *ck, sl_err *err);
/* The job's files: the caller's (borrowed; the engine driven with plain files). */
void sl_load_job_use_files(sl_load_job *j, const sl_load_file *files, int64_t n_files);
/* The plan the job executes: it has devices, and its operations stay inside its parameters and
 * the job's files (sizes as planned; no file is read with opts.dummy). */
sl_status sl_load_job_plan(sl_load_job *j, const sl_plan *p, sl_err *err);
/* The job's devices: mesh devices devices[0..n) of the plan, in that order (devices NULL: all of
 * them), distinct and in range. */
sl_status sl_load_job_devices(sl_load_job *j, const int32_t *devices, int32_t n, sl_err *err);
/* Mesh devices [first, first + count) of the plan (an MPI rank's). */
sl_status sl_load_job_range(sl_load_job *j, int32_t first, int32_t count, sl_err *err);
/* The job's devices: how many, and the mesh index of the i-th. */
int32_t sl_load_job_device_count(const sl_load_job *j);
int32_t sl_load_job_mesh_index(const sl_load_job *j, int32_t i);
/* Fills the job's devices, devs[0..device_count) in the job's order: reads their bytes once from
 * the files, or writes the dummy values with opts.dummy. */
sl_status sl_load_job_fill(const sl_load_job *j, const sl_model_dev *devs, sl_load_stats *stats,
                           sl_err *err);
/* Executes the job's plan on its devices (sl_load_job_plan, _devices from opts.devices, opening
 * them with j->open or the backend, fill) into a new model: the same contract as sl_load. */
sl_status sl_load_job_run(sl_load_job *j, const sl_plan *p, sl_model **out);
void sl_load_job_free(sl_load_job *j);

struct sl_model_dev {
    sl_device dev;
    int64_t n_params;
    uint64_t *param_off;     /* n_params entries */
    uint64_t *param_bytes;
    uint64_t bytes;
    void **param_ptr;        /* the caller's block per parameter (opts.param_dest), or NULL */
};

struct sl_model {
    sl_err err;
    sl_err *errw;            /* == &err: const getters still record their message on the handle */
    int32_t n_devices;       /* 0 after a failed load: nothing is allocated then */
    sl_model_dev *devs;
    sl_load_stats stats;
    int32_t first_device;    /* mesh index of devs[0] (sl_load_dist: this rank's first device) */
    int32_t *mesh_index;     /* n_devices entries when opts.devices chose them; NULL: consecutive */
    int32_t n_ranks;         /* 0 for sl_load; else ranks entries */
    sl_rank_stats *ranks;
};

/* An empty model handle (no devices, stats "none"), for the loaders to fill; NULL when out of
 * memory. */
sl_model *sl_model_new(void);

/* Executes plan p reading its files (as many as the plan reads; may be NULL with o->dummy): a job
 * with the caller's files. Same contract as sl_load: *out holds a handle even on failure (unless SL_E_NOMEM). */
sl_status sl_load_files(const sl_load_file *files, int64_t n_files, const sl_plan *p,
                        const sl_load_opts *o, sl_model **out);

/* Opens and allocates mesh devices [first, first + count) of p as m->devs[0..count). On failure
 * the caller frees what was opened with sl_load_drop_devices. */
sl_status sl_load_open_devices(sl_model *m, const sl_plan *p, int32_t first, int32_t count,
                               const sl_load_opts *o);
/* Frees every device of m: what a failed load leaves behind is the message only. */
void sl_load_drop_devices(sl_model *m);

/* Faults in m's opened devices from a helper thread while the load runs (sl_device_prefault), so
 * that first-touch costs leave the loading thread. Stop it before the load returns. */
typedef struct sl_prefault {
    const sl_model *m;
    atomic_int stop;          /* set by the loading thread, read by the helper */
    pthread_t th;
    int running;
} sl_prefault;

void sl_prefault_start(sl_prefault *j, const sl_model *m);
void sl_prefault_stop(sl_prefault *j);

/* Collective: sl_load_dist into devices that open() provides instead of the backend's, so that
 * reshard's file devices can be driven over MPI too. open is called once per rank, for that rank's
 * devices, and its failure is agreed like any other. SL_E_UNSUPPORTED without MPI. */
sl_status sl_load_dist_devices(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                               const sl_dist_opts *d, sl_open_devices_fn open, void *user,
                               sl_model **out);

/* Reads the plan's COPY operations once from the files and scatters them into devs. man: the
 * manifest o->verify checks against (NULL or man->path NULL: none). */
sl_status sl_load_read(const sl_load_file *files, int64_t n_files, const sl_plan *p,
                       const sl_model_dev *devs, const sl_load_opts *o, const sl_load_manifest *man,
                       sl_load_stats *stats, sl_err *err);

/* Writes the plan's ZERO operations (padding) into devs[d] for every device d, or those local[d]
 * flags (local NULL: all). With `written` 0 the devices' memory holds nothing yet, so a device
 * whose memory is known to be zero (fresh anonymous pages) is skipped. Padding ranges are disjoint
 * from every copy's. */
sl_status sl_load_zero_pads(const sl_plan *p, const sl_model_dev *devs, const unsigned char *local,
                            int written, sl_err *err);

/* Fills every parameter with the dummy values of docs/engine.md ("Dummy weights"). */
sl_status sl_load_dummy(const sl_plan *p, const sl_model_dev *devs, const sl_load_opts *o,
                        sl_load_stats *stats, sl_err *err);

/* Checks that the plan's operations stay inside their parameters and files (sizes as planned). */
sl_status sl_load_check_plan(const sl_plan *p, const sl_load_file *files, int64_t n_files,
                             int dummy, sl_err *err);

/* MT19937 as in C++ std::mt19937 (and PyTorch's CPU generator). */
typedef struct sl_mt19937 {
    uint32_t mt[624];
    int idx;
} sl_mt19937;

void sl_mt19937_seed(sl_mt19937 *g, uint32_t seed);
uint32_t sl_mt19937_next(sl_mt19937 *g);

/* Dummy value n elements starting at draw 0 of a freshly seeded generator, in dtype dt. */
void sl_dummy_values(sl_mt19937 *g, sl_dtype dt, void *dst, size_t n);

#endif /* SL_LOAD_ENGINE_H */
