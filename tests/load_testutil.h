/* load_testutil.h - hand-built plans and scratch files for the loading-engine tests, so the engine
 * is tested without the checkpoint reader or the planner. Header-only; tests only. */
#ifndef SL_LOAD_TESTUTIL_H
#define SL_LOAD_TESTUTIL_H

#include "expect.h"
#include "scratch.h"
#include "load/engine.h"
#include "plan/plan_data.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TP_MAX 64

/* A plan of n_dev devices, each with room for TP_MAX params and ops. */
static sl_plan *tp_new(int32_t n_dev, sl_dtype dt, int64_t n_files)
{
    sl_plan *p = calloc(1, sizeof *p);
    p->tp = n_dev;
    p->pp = 1;
    p->dtype = dt;
    p->n_devices = n_dev;
    p->n_files = n_files;
    p->has_checkpoint = n_files > 0;
    p->devices = calloc((size_t)n_dev, sizeof *p->devices);
    for (int32_t d = 0; d < n_dev; d++) {
        p->devices[d].index = d;
        p->devices[d].tp_rank = d;
        p->devices[d].params = calloc(TP_MAX, sizeof *p->devices[d].params);
        p->devices[d].ops = calloc(TP_MAX, sizeof *p->devices[d].ops);
    }
    return p;
}

static void tp_free(sl_plan *p)
{
    for (int32_t d = 0; d < p->n_devices; d++) {
        free(p->devices[d].params);
        free(p->devices[d].ops);
    }
    free(p->devices);
    free(p);
}

/* Appends a 2-D parameter [rows, cols] packed after the previous ones; returns its index. */
static int64_t tp_param(sl_plan *p, int32_t d, const char *name, uint64_t rows, uint64_t cols)
{
    sl_plan_device *pd = &p->devices[d];
    int64_t i = pd->n_params++;
    pd->params[i].name = name;
    pd->params[i].dtype = p->dtype;
    pd->params[i].ndim = 2;
    pd->params[i].shape[0] = rows;
    pd->params[i].shape[1] = cols;
    pd->params[i].nbytes = rows * cols * (sl_dtype_bits(p->dtype) / 8);
    pd->params[i].offset = pd->bytes;
    pd->bytes += pd->params[i].nbytes;
    p->total_bytes += pd->params[i].nbytes;
    return i;
}

/* COPY into param i: rows of row_elems, destination offsets relative to the parameter, in elements. */
static void tp_copy(sl_plan *p, int32_t d, int64_t i, sl_dtype sdt, int32_t file, uint64_t src_off,
                    uint64_t src_stride, uint64_t dst_elem, uint64_t dst_stride_elems, uint64_t rows,
                    uint64_t row_elems)
{
    sl_plan_device *pd = &p->devices[d];
    const uint64_t es = sl_dtype_bits(p->dtype) / 8;
    sl_op *op = &pd->ops[pd->n_ops++];
    *op = (sl_op){.kind = SL_OP_COPY, .src_dtype = sdt, .file = file, .tensor = -1, .param = i,
                  .src_offset = src_off, .src_stride = src_stride,
                  .dst_offset = pd->params[i].offset + dst_elem * es, .dst_stride = dst_stride_elems * es,
                  .rows = rows, .row_elems = row_elems};
}

static void tp_zero(sl_plan *p, int32_t d, int64_t i, uint64_t dst_elem, uint64_t n)
{
    sl_plan_device *pd = &p->devices[d];
    const uint64_t es = sl_dtype_bits(p->dtype) / 8;
    sl_op *op = &pd->ops[pd->n_ops++];
    *op = (sl_op){.kind = SL_OP_ZERO, .file = -1, .tensor = -1, .param = i,
                  .dst_offset = pd->params[i].offset + dst_elem * es, .rows = 1, .row_elems = n};
}

static void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* 1 when this filesystem accepts O_DIRECT opens. */
static int tu_direct_ok(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

#endif /* SL_LOAD_TESTUTIL_H */
