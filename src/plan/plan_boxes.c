/* plan_boxes.c - plans from index boxes (sl_plan_build_boxes): each box, a part of one checkpoint
 * tensor on one mesh device, becomes one parameter of that device, filled by COPY operations
 * that walk the box in C order. No config and no rule table: the caller (JAX's shardings, a
 * GSPMD partitioner) decided the placement; the planner validates it and turns it into the same
 * operations the layouts produce, so the engine reads each byte once whatever the boxes are.
 *
 * A box [start, start + len) of a tensor of shape S (C order) is cut into runs: the innermost
 * dimensions that the box covers whole join the last partial one into one contiguous run; the
 * dimension outside it becomes the rows of an operation (constant stride); any dimension further
 * out gives one operation per index. */
#include "plan/plan_ctx.h"

#include "common/sl_bytes.h"
#include "common/sl_dtype.h"

#include <stdlib.h>
#include <string.h>

#define BOX_NAME_MAX 120 /* bytes of a tensor name quoted in a message */

typedef struct box_ctx {
    sl_plan *p;
    const sl_checkpoint *ck;
    int64_t *n_params;        /* per device: boxes seen (then parameters written) */
    int64_t *n_ops;           /* per device: operations needed (then written) */
    int32_t dtype;            /* the caller's: a target, -1 (keep) or SL_BOX_DTYPES */
} box_ctx;

/* ---- checks ------------------------------------------------------------------------------ */

static sl_status box_tensor(box_ctx *c, const sl_box *b, sl_tensor_info *ti)
{
    SL_CHECK(b->tensor != NULL, &c->p->err, SL_E_INVALID_ARG, "box without a tensor name");
    const int64_t t = sl_checkpoint_find_tensor(c->ck, b->tensor);
    SL_CHECK(t >= 0, &c->p->err, SL_E_NOT_FOUND, "%s: no tensor '%.*s'", sl_checkpoint_dir(c->ck),
             BOX_NAME_MAX, b->tensor);
    SL_TRY(sl_checkpoint_tensor(c->ck, t, ti));
    SL_CHECK(b->device >= 0 && b->device < c->p->n_devices, &c->p->err, SL_E_INVALID_ARG,
             "tensor '%.*s': box on device %d of a %d-device mesh", BOX_NAME_MAX, b->tensor,
             (int)b->device, (int)c->p->n_devices);
    SL_CHECK(b->ndim == ti->ndim && ti->ndim <= SL_PLAN_MAX_DIMS, &c->p->err, SL_E_SHAPE,
             "tensor '%.*s' has %u dimensions, its box on device %d %u (at most %d)",
             BOX_NAME_MAX, b->tensor, ti->ndim, (int)b->device, b->ndim, SL_PLAN_MAX_DIMS);
    for (uint32_t k = 0; k < b->ndim; k++)
        SL_CHECK(b->start[k] <= ti->shape[k] && b->len[k] <= ti->shape[k] - b->start[k],
                 &c->p->err, SL_E_SHAPE, "tensor '%.*s': box [%llu, +%llu) of dimension %u on "
                 "device %d is outside its %llu", BOX_NAME_MAX, b->tensor,
                 (unsigned long long)b->start[k], (unsigned long long)b->len[k], k, (int)b->device,
                 (unsigned long long)ti->shape[k]);
    return SL_OK;
}

/* A box's target: the caller's for every box, or the box's own (SL_BOX_DTYPES); -1 keeps its
 * tensor's dtype. */
static int32_t box_target(const box_ctx *c, const sl_box *b)
{
    return c->dtype == SL_BOX_DTYPES ? b->dtype : c->dtype;
}

static const char *target_name(int32_t dtype)
{
    const char *s = dtype >= 0 ? sl_dtype_name((sl_dtype)dtype) : NULL;
    return s ? s : "?";
}

/* The boxes' dtypes checked, and the plan's: the caller's target, or (a box keeps its tensor's
 * dtype, or has a target of its own) the first box's. A checkpoint may mix dtypes: transformers
 * keeps DeepSeek-V3's router weight and e_score_correction_bias F32 in a bf16 model. */
static sl_status box_dtype(box_ctx *c, const sl_box *boxes, int64_t n, int32_t dtype)
{
    sl_tensor_info ti;
    c->dtype = dtype;
    SL_CHECK(dtype == SL_BOX_DTYPES || sl_plan_is_target(dtype), &c->p->err, SL_E_INVALID_ARG,
             "dtype: convert to F32, F16 or BF16, not %s (-1 keeps each tensor's, SL_BOX_DTYPES "
             "takes each box's)", dtype < -2 ? "a negative number" : target_name(dtype));
    if (dtype >= 0)
        c->p->dtype = (sl_dtype)dtype;
    for (int64_t i = 0; i < n; i++) {
        SL_TRY(box_tensor(c, &boxes[i], &ti));
        SL_CHECK(sl_dtype_bits(ti.dtype) % 8 == 0, &c->p->err, SL_E_UNSUPPORTED,
                 "tensor '%.*s': %s elements are smaller than a byte, and a box cuts whole bytes",
                 BOX_NAME_MAX, boxes[i].tensor, sl_dtype_name(ti.dtype));
        const int32_t to = box_target(c, &boxes[i]);
        SL_CHECK(sl_plan_is_target(to), &c->p->err, SL_E_INVALID_ARG, "tensor '%.*s': its box on device "
                 "%d converts to %s (F32, F16 or BF16, or -1 to keep its dtype)", BOX_NAME_MAX,
                 boxes[i].tensor, (int)boxes[i].device, to < -1 ? "a negative number" : target_name(to));
        if (i == 0 && dtype < 0)
            c->p->dtype = to < 0 ? ti.dtype : (sl_dtype)to;
        SL_CHECK(to < 0 || ti.dtype == (sl_dtype)to || sl_dtype_converts(ti.dtype), &c->p->err,
                 SL_E_UNSUPPORTED, "tensor '%.*s': no conversion from %s to %s",
                 BOX_NAME_MAX, boxes[i].tensor, sl_dtype_name(ti.dtype),
                 sl_dtype_name((sl_dtype)to));
    }
    return SL_OK;
}

static int box_key_cmp(const void *a, const void *b)
{
    const sl_box *x = *(const sl_box *const *)a, *y = *(const sl_box *const *)b;
    const int s = strcmp(x->tensor, y->tensor);
    return s ? s : (x->device > y->device) - (x->device < y->device);
}

/* One box per (tensor, device): a second would be a second parameter of the same name. */
static sl_status box_unique(box_ctx *c, const sl_box *boxes, int64_t n)
{
    const sl_box **v = malloc((size_t)n * sizeof *v + 1);
    SL_CHECK(v != NULL, &c->p->err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        v[i] = &boxes[i];
    qsort(v, (size_t)n, sizeof *v, box_key_cmp);
    sl_status st = SL_OK;
    for (int64_t i = 1; st == SL_OK && i < n; i++) {
        if (!box_key_cmp(&v[i - 1], &v[i]))
            st = sl_err_set(&c->p->err, SL_E_DUPLICATE, "tensor '%.*s' has two boxes on device %d",
                            BOX_NAME_MAX, v[i]->tensor, (int)v[i]->device);
    }
    free(v);
    return st;
}

/* ---- operations ---------------------------------------------------------------------------- */

/* How a box is walked: `outer` operations of `rows` rows of `run` elements. */
typedef struct box_walk {
    uint64_t run;             /* elements per contiguous run */
    uint64_t rows;            /* runs per operation, `row_pitch` elements apart in the tensor */
    uint64_t row_pitch;
    uint32_t n_outer;         /* dimensions [0, n_outer) are walked an operation per index */
    uint64_t outer;           /* operations: product of the box over those dimensions */
} box_walk;

static int box_whole(const sl_box *b, const uint64_t *shape, uint32_t k)
{
    return b->start[k] == 0 && b->len[k] == shape[k];
}

/* The run: the innermost dimension the box does not cover whole, with the whole ones inside it.
 * The rows: the dimension outside the run, and each one further out while the one inside it is
 * whole, which keeps consecutive rows one pitch apart: a [N, 1, 2] tensor halved along its last
 * dimension is one operation of N rows, not N operations of one (2^25 operations took 4.6 GB). */
static box_walk box_walk_of(const sl_box *b, const uint64_t *shape)
{
    box_walk w = {.run = 1, .rows = 1, .row_pitch = 0, .n_outer = 0, .outer = 1};
    uint32_t k = b->ndim;
    uint64_t inner = 1; /* elements of the tensor per index of dimension k - 1 */
    while (k > 0 && box_whole(b, shape, k - 1)) {
        inner *= shape[k - 1];
        k--;
    }
    if (k == 0) {                       /* the whole tensor */
        w.run = inner;
        return w;
    }
    w.run = b->len[k - 1] * inner;
    w.row_pitch = shape[k - 1] * inner;
    uint32_t m = k - 1;                 /* the rows span dimensions [m, k - 1) */
    while (m > 0 && (m == k - 1 || box_whole(b, shape, m))) {
        w.rows *= b->len[m - 1];
        m--;
    }
    if (w.rows == 1)
        w.row_pitch = 0;
    w.n_outer = m;
    for (uint32_t j = 0; j < m; j++)
        w.outer *= b->len[j];
    return w;
}

/* Element offset in the tensor of the first element of operation `o` of the walk. */
static uint64_t box_op_origin(const sl_box *b, const uint64_t *shape, const box_walk *w, uint64_t o)
{
    uint64_t idx[SL_PLAN_MAX_DIMS] = {0};
    for (uint32_t j = w->n_outer; j-- > 0;) {
        idx[j] = o % b->len[j];
        o /= b->len[j];
    }
    uint64_t off = 0;
    for (uint32_t j = 0; j < b->ndim; j++)
        off = off * shape[j] + b->start[j] + idx[j];
    return off;
}

/* Elements of a box, overflow-checked (the tensor's own product already fits). */
static uint64_t box_elems(const sl_box *b)
{
    uint64_t n = 1;
    for (uint32_t k = 0; k < b->ndim; k++)
        n *= b->len[k];
    return n;
}

static sl_status box_param(box_ctx *c, const sl_box *b, const sl_tensor_info *ti, int64_t t)
{
    sl_plan *p = c->p;
    sl_plan_device *pd = &p->devices[b->device];
    const int32_t to = box_target(c, b);
    const sl_dtype dt = to < 0 ? ti->dtype : (sl_dtype)to;
    const uint64_t es = sl_dtype_bits(dt) / 8, ses = sl_dtype_bits(ti->dtype) / 8;
    const int64_t i = c->n_params[b->device]++;
    sl_plan_param_t *pp = &pd->params[i];
    pp->name = sl_arena_strndup(&p->arena, b->tensor, strlen(b->tensor));
    SL_CHECK(pp->name != NULL, &p->err, SL_E_NOMEM, "out of memory");
    pp->dtype = dt;
    pp->ndim = b->ndim;
    memcpy(pp->shape, b->len, b->ndim * sizeof *b->len);
    pp->offset = pd->bytes;
    SL_CHECK(!sl_mul_overflow(box_elems(b), es, &pp->nbytes) &&
                 !sl_add_overflow(pd->bytes, pp->nbytes, &pd->bytes),
             &p->err, SL_E_OVERFLOW, "device %d: the boxes' bytes overflow", (int)b->device);
    if (pp->nbytes == 0)
        return SL_OK;
    const box_walk w = box_walk_of(b, ti->shape);
    for (uint64_t o = 0; o < w.outer; o++) {
        sl_op *op = &pd->ops[c->n_ops[b->device]++];
        *op = (sl_op){.kind = SL_OP_COPY, .src_dtype = ti->dtype, .file = ti->file, .tensor = t,
                      .param = i, .rows = w.rows, .row_elems = w.run,
                      .src_offset = ti->offset + box_op_origin(b, ti->shape, &w, o) * ses,
                      .src_stride = w.row_pitch * ses, .dst_stride = w.run * es,
                      .dst_offset = pp->offset + o * w.rows * w.run * es};
        if (w.rows == 1)
            op->src_stride = op->dst_stride = 0;
    }
    return SL_OK;
}

/* ---- building ------------------------------------------------------------------------------ */

/* Parameters and operations per device, bounded as a layout plan's size is (plan_bound.c) before
 * anything is allocated for them. */
static sl_status box_count(box_ctx *c, const sl_box *boxes, int64_t n)
{
    sl_tensor_info ti;
    uint64_t ops = 0;
    for (int64_t i = 0; i < n; i++) {
        SL_TRY(box_tensor(c, &boxes[i], &ti));
        const uint64_t k = box_elems(&boxes[i]) > 0 ? box_walk_of(&boxes[i], ti.shape).outer : 0;
        if (sl_add_overflow(ops, k, &ops))
            ops = UINT64_MAX;
        if (ops > (uint64_t)INT64_MAX)
            break;   /* far above the bound: refused below, and no per-device count overflows */
        c->n_params[boxes[i].device]++;
        c->n_ops[boxes[i].device] += (int64_t)k;
    }
    return sl_plan_check_box_size(c->p, (uint64_t)n, ops,
                                  (uint64_t)sl_checkpoint_file_count(c->ck));
}

static sl_status box_devices(box_ctx *c)
{
    sl_plan *p = c->p;
    p->devices = sl_arena_alloc(&p->arena, (size_t)p->n_devices * sizeof *p->devices);
    SL_CHECK(p->devices != NULL, &p->err, SL_E_NOMEM, "out of memory");
    memset(p->devices, 0, (size_t)p->n_devices * sizeof *p->devices);
    for (int32_t d = 0; d < p->n_devices; d++) {
        sl_plan_device *pd = &p->devices[d];
        pd->index = pd->tp_rank = d;
        pd->n_params = c->n_params[d];
        pd->n_ops = c->n_ops[d];
        pd->params = sl_arena_alloc(&p->arena, (size_t)pd->n_params * sizeof *pd->params + 1);
        pd->ops = sl_arena_alloc(&p->arena, (size_t)pd->n_ops * sizeof *pd->ops + 1);
        SL_CHECK(pd->params && pd->ops, &p->err, SL_E_NOMEM, "out of memory");
        c->n_params[d] = c->n_ops[d] = 0;
    }
    return SL_OK;
}

static sl_status box_build(box_ctx *c, const sl_box *boxes, int64_t n, int32_t dtype)
{
    sl_plan *p = c->p;
    SL_CHECK(c->ck != NULL, &p->err, SL_E_INVALID_ARG, "a plan from boxes needs a checkpoint");
    SL_CHECK(sl_checkpoint_file_count(c->ck) == 0 || sl_checkpoint_file_rank(c->ck, 0) < 0,
             &p->err, SL_E_INVALID_ARG, "%s is pre-sharded (rank files): plan it with its layout",
             sl_checkpoint_dir(c->ck));
    SL_CHECK(n >= 0 && (n == 0 || boxes != NULL), &p->err, SL_E_INVALID_ARG, "no boxes");
    SL_TRY(box_dtype(c, boxes, n, dtype));
    SL_TRY(box_unique(c, boxes, n));
    SL_TRY(box_count(c, boxes, n));
    SL_TRY(box_devices(c));
    sl_tensor_info ti;
    for (int64_t i = 0; i < n; i++) {
        SL_TRY(box_tensor(c, &boxes[i], &ti));
        SL_TRY(box_param(c, &boxes[i], &ti, sl_checkpoint_find_tensor(c->ck, boxes[i].tensor)));
    }
    for (int32_t d = 0; d < p->n_devices; d++)
        p->total_bytes += p->devices[d].bytes;
    plan_ctx pc = {.p = p, .ck = c->ck};
    return sl_plan_finish(&pc);
}

sl_status sl_plan_build_boxes(const sl_checkpoint *ck, const sl_box *boxes, int64_t n_boxes,
                              int32_t n_devices, int32_t dtype, sl_plan **out)
{
    if (!out)
        return SL_E_INVALID_ARG;
    sl_plan *p = *out = calloc(1, sizeof *p);
    if (!p)
        return SL_E_NOMEM;
    p->layout = SL_LAYOUT_BOXES;
    p->tp = n_devices;
    p->pp = 1;
    p->read_bytes = UINT64_MAX;
    p->has_checkpoint = ck != NULL;
    SL_CHECK(n_devices >= 1 && n_devices <= 65536, &p->err, SL_E_INVALID_ARG,
             "a mesh of %d devices (1 to 65536)", (int)n_devices);
    p->n_devices = n_devices;
    p->n_files = ck ? sl_checkpoint_file_count(ck) : 0;
    box_ctx c = {.p = p, .ck = ck, .n_params = calloc((size_t)n_devices, sizeof(int64_t)),
                 .n_ops = calloc((size_t)n_devices, sizeof(int64_t))};
    sl_status st = c.n_params && c.n_ops ? box_build(&c, boxes, n_boxes, dtype)
                                         : sl_err_set(&p->err, SL_E_NOMEM, "out of memory");
    free(c.n_params);
    free(c.n_ops);
    return st;
}
