/* read.c - "read once, place everywhere": the checkpoint side of a whole load in one process
 * (sl_load_read, engine.h). Every COPY operation of every device is read once, in large
 * requests through a fixed set of staging slots, several in flight, and each completed chunk is
 * scattered into every operation that intersects it. The pieces are listed in read_ctx.h. */
#include "load/read_ctx.h"

/* The pipeline, then a last fence: the load ends when the devices hold the bytes, inside the
 * timing. */
static sl_status rd_run(rd_ctx *x)
{
    sl_status st = rd_pipeline(x);
    if (st == SL_OK && (x->in_flight || x->marks_pending))
        st = rd_fence(x);
    return st;
}

sl_status sl_load_read(const sl_load_file *files, int64_t n_files, const sl_plan *p,
                       const sl_model_dev *devs, const sl_load_opts *o, const sl_load_manifest *man,
                       sl_load_stats *stats, sl_err *err)
{
    const rd_config c = {.files = files, .n_files = n_files, .p = p, .devs = devs, .o = o,
                         .manifest = man, .err = err, .direct_reads = 1, .size_for_devices = 1, .slot_marks = 1,
                         .verify = o->verify, .pack = 1};
    rd_ctx x;
    sl_status st = rd_setup(&x, &c);
    if (st == SL_OK && x.chunks.n > 0) {
        stats->engine = x.io.ops->name;
        st = rd_run(&x);
    }
    if (st == SL_OK && x.verify)
        st = rd_verify_finish(x.verify, &stats->verified_bytes, &stats->verified_files, err);
    if (x.planned)
        stats->io = rd_files_io_name(&x.files); /* after any EINVAL fallback */
    stats->bytes_read = x.bytes_read;
    stats->read_requests = x.requests;
    stats->read_depth_peak = x.reading_peak;
    stats->staging_peak = x.staging_peak + x.bounce_bytes;
    rd_remote_counts(&x, stats);
    rd_free(&x);
    return st;
}
