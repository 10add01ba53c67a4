/* plan_ckpt.c - matching checkpoint tensors to the rule table, with SHARDING.md's strictness:
 * unclaimed tensors, wrong shapes, unconvertible dtypes and missing parameters are errors. */
#include "plan/plan_ctx.h"

#include "common/sl_dtype.h"
#include "common/sl_grow.h"
#include "common/sl_strbuf.h"
#include "common/sl_strmap.h"
#include "common/sl_text.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names vLLM's AutoWeightsLoader drops before any rule is consulted. */
static const char *const skip_substrings[] = {"rotary_emb.inv_freq", "rotary_emb.cos_cached",
                                              "rotary_emb.sin_cached"};

/* ---- name -> model tensor ------------------------------------------------------------------- */

/* The names the config implies, each once (sl_arch_tensors_build refuses a name given twice). */
static sl_status map_build(plan_ctx *c, sl_strmap *mp)
{
    SL_CHECK(sl_strmap_reserve(mp, (size_t)c->m->n_tensors) == 0, &c->p->err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < c->m->n_tensors; i++)
        (void)sl_strmap_add(mp, c->m->tensors[i].name, i);   /* reserved: no allocation */
    return SL_OK;
}

/* ---- per-tensor checks ------------------------------------------------------------------------ */

static int skipped(const char *name)
{
    for (size_t i = 0; i < sizeof(skip_substrings) / sizeof(skip_substrings[0]); i++) {
        if (strstr(name, skip_substrings[i]) != NULL)
            return 1;
    }
    return 0;
}

/* DeepSeek's multi-token-prediction module sits at model.layers.{L + i}: a table with
 * "skip_extra_layers" drops checkpoint layers [L, L + n) as vLLM's main model does (n: the
 * config's num_nextn_predict_layers; any other layer past L is unclaimed, as vLLM refuses it). */
static int extra_layer(const plan_ctx *c, const char *name)
{
    static const char prefix[] = "model.layers.";
    if (!c->m->skip_extra_layers || strncmp(name, prefix, sizeof prefix - 1) != 0)
        return 0;
    const char *p = name + sizeof prefix - 1;
    const size_t n = strspn(p, "0123456789");
    if (n == 0 || n > 9 || p[n] != '.')
        return 0;
    const long long l = strtoll(p, NULL, 10);
    return l >= c->m->cfg.L && (c->m->skip_extra_layers < 0 || l - c->m->cfg.L < c->m->skip_extra_layers);
}

static const char *tensor_file(const plan_ctx *c, const sl_tensor_info *ti)
{
    const char *f = sl_checkpoint_file_path(c->ck, ti->file);
    return f ? f : "?";
}

/* A per-tensor scale is one element, [] (AutoFP8) or [1] (compressed-tensors) alike. */
static int scalar_ok(const plan_ctx *c, const sl_tensor_info *ti, const sl_arch_tensor *mt)
{
    return sl_arch_scale_scalar(&c->m->rules[mt->rule]) &&
           (ti->ndim == 0 || (ti->ndim == 1 && ti->shape[0] == 1));
}

static sl_status check_shape(plan_ctx *c, const sl_tensor_info *ti, const sl_arch_tensor *mt)
{
    int same = ti->ndim == mt->ndim;
    for (uint32_t i = 0; same && i < ti->ndim; i++)
        same = ti->shape[i] == mt->shape[i];
    if (same || scalar_ok(c, ti, mt))
        return SL_OK;
    char nb[SL_TEXT_NAME], a[SL_TEXT_SHAPE], b[SL_TEXT_SHAPE];
    return sl_err_set(&c->p->err, SL_E_SHAPE, "%s: checkpoint tensor '%s' has shape %s but the "
                      "config implies %s", tensor_file(c, ti), sl_text_name(ti->name, nb, sizeof nb),
                      sl_text_shape(ti->shape, ti->ndim, a, sizeof a),
                      sl_text_shape(mt->shape, mt->ndim, b, sizeof b));
}

/* FP8 (SHARDING-MOE-FP8.md): a quantized weight is F8_E4M3, copied bit for bit; F8_E5M2 is
 * refused (vLLM would convert its values); a scale is F32, or BF16/F16 widened exactly. */
static sl_status check_fp8_dtype(plan_ctx *c, const sl_tensor_info *ti)
{
    char nb[SL_TEXT_NAME];
    SL_CHECK(ti->dtype != SL_DTYPE_F8_E5M2, &c->p->err, SL_E_UNSUPPORTED, "%s: checkpoint tensor '%s' "
             "is F8_E5M2: only F8_E4M3 weights are copied bit for bit (vLLM would convert E5M2 values)",
             tensor_file(c, ti), sl_text_name(ti->name, nb, sizeof nb));
    SL_CHECK(ti->dtype == SL_DTYPE_F8_E4M3, &c->p->err, SL_E_UNSUPPORTED, "%s: checkpoint tensor '%s' "
             "has dtype %s, but the config's quantization_config makes it an F8_E4M3 weight (list "
             "its module in ignored_layers / modules_to_not_convert if it is not quantized)",
             tensor_file(c, ti), sl_text_name(ti->name, nb, sizeof nb),
             sl_dtype_name(ti->dtype) ? sl_dtype_name(ti->dtype) : "?");
    return SL_OK;
}

/* A scale is F32, BF16 or F16 (SHARDING-MOE-FP8.md: "a BF16 or F16 scale in the file is widened
 * exactly"): an F64 one would be rounded to vLLM's F32, and the w1/w3 input scales are compared
 * bit for bit as the 2 or 4 bytes of these dtypes (check_input_scales). */
static sl_status check_scale_dtype(plan_ctx *c, const sl_tensor_info *ti)
{
    char nb[SL_TEXT_NAME];
    SL_CHECK(ti->dtype == SL_DTYPE_F32 || ti->dtype == SL_DTYPE_BF16 || ti->dtype == SL_DTYPE_F16,
             &c->p->err, SL_E_UNSUPPORTED, "%s: checkpoint tensor '%s' is an FP8 scale of dtype %s: "
             "scales must be F32, BF16 or F16 (widened exactly to vLLM's F32)", tensor_file(c, ti),
             sl_text_name(ti->name, nb, sizeof nb), sl_dtype_name(ti->dtype) ? sl_dtype_name(ti->dtype) : "?");
    return SL_OK;
}

static sl_status check_dtype(plan_ctx *c, const sl_tensor_info *ti, const sl_arch_tensor *mt)
{
    char nb[SL_TEXT_NAME];
    if (mt->dtype == SL_DTYPE_F8_E4M3)
        return check_fp8_dtype(c, ti);
    if (c->m->rules[mt->rule].scale_of >= 0)
        return check_scale_dtype(c, ti);
    const int f8 = ti->dtype == SL_DTYPE_F8_E4M3 || ti->dtype == SL_DTYPE_F8_E5M2;
    SL_CHECK(ti->dtype == c->p->dtype || sl_dtype_converts(ti->dtype), &c->p->err, SL_E_UNSUPPORTED,
             "%s: checkpoint tensor '%s' has dtype %s, which cannot be converted to %s%s",
             tensor_file(c, ti), sl_text_name(ti->name, nb, sizeof nb), sl_dtype_name(ti->dtype) ? sl_dtype_name(ti->dtype) : "?",
             sl_dtype_name(c->p->dtype), !f8 ? "" : c->m->quant.on ? " (the config's quantization_config "
             "keeps this tensor unquantized)" : " (an FP8 checkpoint: the config has no quantization_config)");
    return SL_OK;
}

/* Tensors no rule claims are collected, not reported one at a time: a checkpoint of another
 * architecture or a renamed export usually has many, and one message that lists them saves a
 * round of fixing and rerunning. */
#define UNCLAIMED_LISTED 8

typedef struct unclaimed {
    sl_strbuf list;
    int64_t n;
    int scales;       /* some look like FP8 scales: the config's scheme is then worth saying */
} unclaimed;

static int scale_like(const char *name)
{
    static const char *const ends[] = {".weight_scale", ".weight_scale_inv", ".input_scale"};
    const size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        const size_t k = strlen(ends[i]);
        if (n > k && strcmp(name + n - k, ends[i]) == 0)
            return 1;
    }
    return 0;
}

/* Scales no rule claims mean the checkpoint's FP8 scheme is not the one the config describes. */
static const char *scale_hint(const plan_ctx *c, char *buf, size_t len)
{
    static const char *const kind[] = {"block", "per-tensor", "per-channel"};
    if (!c->m->quant.on)
        return " (FP8 scales, but the config has no quantization_config)";
    snprintf(buf, len, " (FP8 scales the config does not imply: its quantization_config gives %s "
             "scales named <x>.weight%s%s)", kind[c->m->quant.scheme], c->m->quant.scale_suffix,
             c->m->quant.input_static ? " and static <x>.input_scale" : " and no input scales");
    return buf;
}

static void unclaimed_add(plan_ctx *c, unclaimed *u, const sl_tensor_info *ti)
{
    char nb[SL_TEXT_NAME];
    u->scales |= scale_like(ti->name);
    if (u->n++ < UNCLAIMED_LISTED)
        sl_strbuf_printf(&u->list, "%s'%s' (%s)", u->n > 1 ? ", " : "", sl_text_name(ti->name, nb, sizeof nb),
                         tensor_file(c, ti));
}

static sl_status unclaimed_report(plan_ctx *c, unclaimed *u)
{
    char ab[SL_TEXT_NAME], hb[256];
    const char *arch = sl_text_name(c->m->cfg.architecture, ab, sizeof ab);
    const char *hint = u->scales ? scale_hint(c, hb, sizeof hb) : "";
    sl_status st = SL_OK;
    if (u->n == 1)
        st = sl_err_set(&c->p->err, SL_E_UNCLAIMED, "checkpoint tensor %s is not claimed by any "
                        "rule of the %s table%s", sl_strbuf_str(&u->list), arch, hint);
    else if (u->n > 1)
        st = sl_err_set(&c->p->err, SL_E_UNCLAIMED, "%lld checkpoint tensors are not claimed by any "
                        "rule of the %s table: %s%s%s", (long long)u->n, arch,
                        sl_strbuf_str(&u->list), u->n > UNCLAIMED_LISTED ? ", ..." : "", hint);
    return st;
}

static sl_status bind_one(plan_ctx *c, const sl_strmap *mp, int64_t i, unclaimed *u)
{
    sl_tensor_info ti;
    sl_status st = sl_checkpoint_tensor(c->ck, i, &ti);
    SL_CHECK(st == SL_OK, &c->p->err, st, "cannot read checkpoint tensor %lld", (long long)i);
    if (skipped(ti.name) || extra_layer(c, ti.name))
        return SL_OK;
    const int64_t k = sl_strmap_get(mp, ti.name);
    if (k < 0) {
        unclaimed_add(c, u, &ti);
        return SL_OK;
    }
    const sl_arch_tensor *mt = &c->m->tensors[k];
    if (c->m->cfg.tied && c->m->rules[mt->rule].tied_skip)
        return SL_OK;   /* tied: the embedding serves as lm_head, as in vLLM */
    SL_TRY(check_shape(c, &ti, mt));
    SL_TRY(check_dtype(c, &ti, mt));
    c->src[k] = (plan_src){.index = i, .file = ti.file, .offset = ti.offset, .dtype = ti.dtype};
    return SL_OK;
}

/* ---- completeness ----------------------------------------------------------------------------- */

/* Experts a template's tensors come in at a layer: E for {e} rules (all of them, under EP too: a
 * checkpoint is complete or it is not), else 1. */
static int64_t tmpl_experts(const plan_ctx *c, const plan_tmpl *t)
{
    return t->expert ? c->m->cfg.E : 1;
}

static int tmpl_complete(const plan_ctx *c, const plan_tmpl *t, int64_t layer)
{
    for (int32_t k = 0; k < t->n_rules; k++) {
        for (int64_t e = 0; e < tmpl_experts(c, t); e++) {
            if (c->src[sl_arch_tensor_index(c->m, t->rules[k], layer, e)].index < 0)
                return 0;
        }
    }
    return 1;
}

/* The checkpoint a message is about: its one file, or its directory. */
static const char *ckpt_name(const plan_ctx *c)
{
    return sl_checkpoint_file_count(c->ck) == 1 ? sl_checkpoint_file_path(c->ck, 0) : sl_checkpoint_dir(c->ck);
}

/* At most this many names of each list; the message then says how many there are in all. */
#define MISSING_LISTED 8

typedef struct missing {
    sl_strbuf params, tensors;
    int64_t n_params, n_tensors;
} missing;

static void missing_add(sl_strbuf *b, int64_t *n, const char *name)
{
    char nb[SL_TEXT_NAME];
    if ((*n)++ < MISSING_LISTED)
        sl_strbuf_printf(b, "%s'%s'", *n > 1 ? ", " : "", sl_text_name(name, nb, sizeof nb));
}

/* The parameter of template t at a layer, and the checkpoint tensors it lacks. */
static void missing_param(plan_ctx *c, missing *ms, const plan_tmpl *t, int64_t layer)
{
    missing_add(&ms->params, &ms->n_params, sl_plan_tmpl_name(c, t, layer, 0));
    for (int32_t k = 0; k < t->n_rules; k++) {
        for (int64_t e = 0; e < tmpl_experts(c, t); e++) {
            const int64_t ti = sl_arch_tensor_index(c->m, t->rules[k], layer, e);
            if (c->src[ti].index < 0)
                missing_add(&ms->tensors, &ms->n_tensors, c->m->tensors[ti].name);
        }
    }
}

static const char *missing_more(int64_t n, char *buf, size_t len)
{
    if (n <= MISSING_LISTED)
        return "";
    snprintf(buf, len, ", ... (%lld in all)", (long long)n);
    return buf;
}

/* vLLM's message, with Python's set syntax, after the checkpoint's name; then the checkpoint
 * tensors that are missing (a fused parameter names several). Both lists are cut after
 * MISSING_LISTED names. */
static sl_status check_missing(plan_ctx *c)
{
    missing ms = {0};
    char more1[48], more2[48];
    for (int32_t i = 0; i < c->n_tmpl; i++) {
        const plan_tmpl *t = &c->tmpl[i];
        const int64_t layers = t->place == SL_PLACE_LAYER ? c->m->cfg.L : 1;
        if ((c->m->cfg.tied && t->tied_skip) || c->m->rules[t->rules[0]].optional)
            continue;   /* an optional tensor's parameter is there only where the file has it */
        for (int64_t l = 0; l < layers; l++) {
            if (sl_arch_rule_at(c->m, t->rules[0], l) && !tmpl_complete(c, t, l))
                missing_param(c, &ms, t, l);
        }
    }
    sl_status st = SL_OK;
    if (ms.n_params > 0)
        st = sl_err_set(&c->p->err, SL_E_MISSING,
                        "%s: Following weights were not initialized from checkpoint: {%s%s} (checkpoint "
                        "tensors missing: %s%s)", ckpt_name(c), sl_strbuf_str(&ms.params),
                        missing_more(ms.n_params, more1, sizeof more1), sl_strbuf_str(&ms.tensors),
                        missing_more(ms.n_tensors, more2, sizeof more2));
    sl_strbuf_free(&ms.params);
    sl_strbuf_free(&ms.tensors);
    return st;
}

/* ---- an expert's w1 and w3 input scales --------------------------------------------------------- */

/* vLLM's w13_input_scale holds one scalar per expert, which w1's and w3's input scales both write:
 * the spec wants them bitwise equal, so they are read here (2 or 4 bytes each, static MoE
 * checkpoints only) and compared. They are read through sl_checkpoint_read, from a local file or a
 * remote one alike, in few reads: sorted by place, the scales of a file that lie within SCALE_GAP
 * bytes of each other are read as one span of at most SCALE_SPAN bytes. safetensors writers put
 * the small F32 tensors of a file together, so a file's scales are usually one read (one GET). */
#define SCALE_GAP ((uint64_t)64 << 10)
#define SCALE_SPAN ((uint64_t)1 << 20)

typedef struct scale_ref {
    int64_t tensor;       /* model tensor */
    int32_t file;         /* where it is (plan_src) */
    uint64_t offset;
    size_t n;             /* 2 or 4 bytes */
    uint32_t bits;        /* the bytes as a little-endian integer, once read */
} scale_ref;

typedef struct scale_set {
    scale_ref *refs;      /* w1's then w3's of each pair, in the order they are compared */
    size_t n, cap;
    scale_ref **sorted;   /* by (file, offset) */
    unsigned char *span;  /* SCALE_SPAN bytes */
} scale_set;

static sl_status scale_add(plan_ctx *c, scale_set *ss, int64_t tensor)
{
    const plan_src *s = &c->src[tensor];
    scale_ref *nr = sl_grow(ss->refs, &ss->cap, ss->n, sizeof *nr, 256);
    SL_CHECK(nr != NULL, &c->p->err, SL_E_NOMEM, "out of memory");
    ss->refs = nr;
    ss->refs[ss->n] = (scale_ref){.tensor = tensor, .file = s->file, .offset = s->offset,
                                  .n = sl_dtype_bits(s->dtype) / 8};
    /* check_scale_dtype took F32, BF16 and F16 only: span_read's bits hold every byte */
    assert(ss->refs[ss->n].n >= 2 && ss->refs[ss->n].n <= sizeof ss->refs[ss->n].bits);
    ss->n++;
    return SL_OK;
}

static sl_status scale_collect_rule(plan_ctx *c, scale_set *ss, int32_t ri)
{
    const sl_arch *m = c->m;
    const int32_t r0 = m->groups[m->rules[ri].group].rules[0];
    for (int64_t l = 0; l < m->cfg.L; l++) {
        for (int64_t e = 0; e < m->cfg.E && sl_arch_rule_at(m, ri, l); e++) {
            SL_TRY(scale_add(c, ss, sl_arch_tensor_index(m, r0, l, e)));
            SL_TRY(scale_add(c, ss, sl_arch_tensor_index(m, ri, l, e)));
        }
    }
    return SL_OK;
}

static int ref_cmp(const void *pa, const void *pb)
{
    const scale_ref *a = *(scale_ref *const *)pa, *b = *(scale_ref *const *)pb;
    if (a->file != b->file)
        return a->file < b->file ? -1 : 1;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* From sorted[i], the refs of its file within one span: returns the end of them in sorted, and
 * the span's end offset in *last. */
static size_t span_end(const scale_set *ss, size_t i, uint64_t *last)
{
    const scale_ref *r0 = ss->sorted[i];
    size_t j = i;
    *last = r0->offset;
    for (; j < ss->n; j++) {
        const scale_ref *r = ss->sorted[j];
        const uint64_t e = r->offset + r->n;
        if (r->file != r0->file || r->offset > *last + SCALE_GAP || e - r0->offset > SCALE_SPAN)
            break;
        *last = e > *last ? e : *last;
    }
    return j;
}

/* Reads the span starting at sorted[i] and fills the bits of the refs in it; *next: the first
 * ref after it. */
static sl_status span_read(plan_ctx *c, scale_set *ss, size_t i, size_t *next)
{
    const scale_ref *r0 = ss->sorted[i];
    uint64_t last = 0;
    *next = span_end(ss, i, &last);
    char msg[512], nb[SL_TEXT_NAME];
    const size_t len = (size_t)(last - r0->offset);   /* at most SCALE_SPAN */
    const sl_status st = sl_checkpoint_read(c->ck, r0->file, r0->offset, ss->span, len, msg, sizeof msg);
    SL_CHECK(st == SL_OK, &c->p->err, st, "%s (reading the input scale '%s')", msg,
             sl_text_name(c->m->tensors[r0->tensor].name, nb, sizeof nb));
    for (size_t k = i; k < *next; k++) {
        scale_ref *r = ss->sorted[k];
        const unsigned char *b = ss->span + (r->offset - r0->offset);
        r->bits = 0;
        for (size_t q = 0; q < r->n; q++)
            r->bits |= (uint32_t)b[q] << (8 * q);
    }
    return SL_OK;
}

static sl_status scale_read_all(plan_ctx *c, scale_set *ss)
{
    ss->sorted = malloc(ss->n * sizeof *ss->sorted);
    ss->span = malloc((size_t)SCALE_SPAN);
    SL_CHECK(ss->sorted && ss->span, &c->p->err, SL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < ss->n; i++)
        ss->sorted[i] = &ss->refs[i];
    qsort(ss->sorted, ss->n, sizeof *ss->sorted, ref_cmp);
    for (size_t i = 0; i < ss->n;)
        SL_TRY(span_read(c, ss, i, &i));
    return SL_OK;
}

static sl_status input_pair(plan_ctx *c, const scale_ref *ra, const scale_ref *rb)
{
    const plan_src *sa = &c->src[ra->tensor], *sb = &c->src[rb->tensor];
    const char *na = c->m->tensors[ra->tensor].name, *nb = c->m->tensors[rb->tensor].name;
    char ba[SL_TEXT_NAME], bb[SL_TEXT_NAME];
    SL_CHECK(sa->dtype == sb->dtype && ra->bits == rb->bits, &c->p->err, SL_E_UNSUPPORTED, "%s: input_scales "
             "of w1 and w3 of a layer must be equal: checkpoint tensors '%s' (%s 0x%08x) and '%s' (%s "
             "0x%08x) differ (vLLM keeps one input scale per expert)", ckpt_name(c),
             sl_text_name(na, ba, sizeof ba), sl_dtype_name(sa->dtype), (unsigned)ra->bits,
             sl_text_name(nb, bb, sizeof bb), sl_dtype_name(sb->dtype), (unsigned)rb->bits);
    return SL_OK;
}

static sl_status check_input_scales(plan_ctx *c)
{
    scale_set ss = {0};
    sl_status st = SL_OK;
    if (c->p->layout != SL_LAYOUT_TP)   /* spmd keeps each checkpoint tensor: nothing is shared */
        return SL_OK;
    for (int32_t ri = 0; st == SL_OK && ri < c->m->n_rules; ri++) {
        if (sl_arch_input_scale_dup(&c->m->rules[ri]))
            st = scale_collect_rule(c, &ss, ri);
    }
    if (st == SL_OK && ss.n > 0)
        st = scale_read_all(c, &ss);
    for (size_t k = 0; st == SL_OK && k + 1 < ss.n; k += 2)
        st = input_pair(c, &ss.refs[k], &ss.refs[k + 1]);
    free(ss.span);
    free(ss.sorted);
    free(ss.refs);
    return st;
}

sl_status sl_plan_bind_checkpoint(plan_ctx *c)
{
    sl_strmap mp = {0};
    unclaimed u = {0};
    sl_status st = map_build(c, &mp);
    const int64_t n = sl_checkpoint_tensor_count(c->ck);
    for (int64_t i = 0; st == SL_OK && i < n; i++)
        st = bind_one(c, &mp, i, &u);
    sl_strmap_free(&mp);
    if (st == SL_OK)
        st = unclaimed_report(c, &u);
    sl_strbuf_free(&u.list);
    if (st == SL_OK)
        st = check_missing(c);
    if (st == SL_OK)
        st = check_input_scales(c);
    if (st == SL_OK) {
        c->p->n_files = sl_checkpoint_file_count(c->ck);
        c->p->has_checkpoint = 1;
    }
    return st;
}
