/* test_plan_ops.c - the plan's operations against shards computed independently.
 *
 * Each case writes a tiny checkpoint (safetensors bytes written here, not with the library's
 * writer), builds a plan, "executes" it naively (memcpy rows from the file bytes, memset zeros,
 * counting how often each destination byte is written), and compares every device buffer with
 * one assembled from SHARDING.md's formulas written out again below (not from the planner):
 * fused qkv with kv-head replication, gate_up, column slices of o/down, vocab padding, tied
 * embeddings, vLLM's pipeline split, and the spmd tiles. Exit 0 pass, 1 fail. */
#include "expect.h"
#include "shardload.h"

#include "plan/plan_data.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the model ------------------------------------------------------------------------------- */

typedef struct cfg {
    const char *arch;
    int H, nh, K, D, I, V, L, tied, bias, qknorm, explicit_D;
    int esz;   /* 2: BF16, 4: F32 */
} cfg;

#define MAXT 256
typedef struct tensor {
    char name[96];
    uint64_t R, C;     /* 1-D: C = 1 */
    int ndim;
    unsigned char *data;
} tensor;

static tensor g_t[MAXT];
static int g_n;

static tensor *add_tensor(const cfg *c, const char *name, uint64_t R, uint64_t C, int ndim)
{
    tensor *t = &g_t[g_n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->R = R;
    t->C = C;
    t->ndim = ndim;
    t->data = malloc(R * C * (uint64_t)c->esz);
    for (uint64_t i = 0; i < R * C * (uint64_t)c->esz; i++)   /* distinct-ish, never all zero */
        t->data[i] = (unsigned char)(1 + (i * 131 + (uint64_t)g_n * 17) % 251);
    return t;
}

static tensor *find(const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    for (int i = 0; i < g_n; i++)
        if (!strcmp(g_t[i].name, name))
            return &g_t[i];
    fprintf(stderr, "test bug: no tensor %s\n", name);
    exit(1);
}

static void make_tensors(const cfg *c, int with_lm_head)
{
    char n[96];
    g_n = 0;
    add_tensor(c, "model.embed_tokens.weight", (uint64_t)c->V, (uint64_t)c->H, 2);
    for (int l = 0; l < c->L; l++) {
        const char *qkv = "qkv";
        for (int s = 0; s < 3; s++) {
            const uint64_t rows = (uint64_t)(s == 0 ? c->nh : c->K) * (uint64_t)c->D;
            snprintf(n, sizeof(n), "model.layers.%d.self_attn.%c_proj.weight", l, qkv[s]);
            add_tensor(c, n, rows, (uint64_t)c->H, 2);
            if (c->bias) {
                snprintf(n, sizeof(n), "model.layers.%d.self_attn.%c_proj.bias", l, qkv[s]);
                add_tensor(c, n, rows, 1, 1);
            }
        }
        snprintf(n, sizeof(n), "model.layers.%d.self_attn.o_proj.weight", l);
        add_tensor(c, n, (uint64_t)c->H, (uint64_t)(c->nh * c->D), 2);
        if (c->qknorm) {
            snprintf(n, sizeof(n), "model.layers.%d.self_attn.q_norm.weight", l);
            add_tensor(c, n, (uint64_t)c->D, 1, 1);
            snprintf(n, sizeof(n), "model.layers.%d.self_attn.k_norm.weight", l);
            add_tensor(c, n, (uint64_t)c->D, 1, 1);
        }
        snprintf(n, sizeof(n), "model.layers.%d.mlp.gate_proj.weight", l);
        add_tensor(c, n, (uint64_t)c->I, (uint64_t)c->H, 2);
        snprintf(n, sizeof(n), "model.layers.%d.mlp.up_proj.weight", l);
        add_tensor(c, n, (uint64_t)c->I, (uint64_t)c->H, 2);
        snprintf(n, sizeof(n), "model.layers.%d.mlp.down_proj.weight", l);
        add_tensor(c, n, (uint64_t)c->H, (uint64_t)c->I, 2);
        snprintf(n, sizeof(n), "model.layers.%d.input_layernorm.weight", l);
        add_tensor(c, n, (uint64_t)c->H, 1, 1);
        snprintf(n, sizeof(n), "model.layers.%d.post_attention_layernorm.weight", l);
        add_tensor(c, n, (uint64_t)c->H, 1, 1);
    }
    add_tensor(c, "model.norm.weight", (uint64_t)c->H, 1, 1);
    if (with_lm_head)
        add_tensor(c, "lm_head.weight", (uint64_t)c->V, (uint64_t)c->H, 2);
}

/* ---- writing the checkpoint: two files, tensors dealt alternately ----------------------------- */

static void write_file(const cfg *c, const char *path, int part, int nparts)
{
    char hdr[65536];
    size_t h = 0;
    uint64_t off = 0;
    h += (size_t)snprintf(hdr + h, sizeof(hdr) - h, "{");
    for (int i = part; i < g_n; i += nparts) {
        const tensor *t = &g_t[i];
        const uint64_t nb = t->R * t->C * (uint64_t)c->esz;
        char shape[64];
        if (t->ndim == 2)
            snprintf(shape, sizeof(shape), "[%llu,%llu]", (unsigned long long)t->R, (unsigned long long)t->C);
        else
            snprintf(shape, sizeof(shape), "[%llu]", (unsigned long long)t->R);
        h += (size_t)snprintf(hdr + h, sizeof(hdr) - h,
                              "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}",
                              h > 1 ? "," : "", t->name, c->esz == 2 ? "BF16" : "F32", shape,
                              (unsigned long long)off, (unsigned long long)(off + nb));
        off += nb;
    }
    h += (size_t)snprintf(hdr + h, sizeof(hdr) - h, "}");
    while (h % 8)
        hdr[h++] = ' ';
    FILE *f = fopen(path, "wb");
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)h >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(hdr, 1, h, f);
    for (int i = part; i < g_n; i += nparts)
        fwrite(g_t[i].data, 1, g_t[i].R * g_t[i].C * (uint64_t)c->esz, f);
    fclose(f);
}

static void write_config(const cfg *c, const char *dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"architectures\":[\"%s\"],\"hidden_size\":%d,\"num_attention_heads\":%d,"
               "\"num_key_value_heads\":%d,\"intermediate_size\":%d,\"vocab_size\":%d,"
               "\"num_hidden_layers\":%d,\"tie_word_embeddings\":%s,\"torch_dtype\":\"%s\"",
            c->arch, c->H, c->nh, c->K, c->I, c->V, c->L, c->tied ? "true" : "false",
            c->esz == 2 ? "bfloat16" : "float32");
    if (c->explicit_D)
        fprintf(f, ",\"head_dim\":%d", c->D);
    fprintf(f, "}\n");
    fclose(f);
}

static void write_checkpoint(const cfg *c, const char *dir)
{
    char path[512];
    mkdir(dir, 0755);
    for (int p = 0; p < 2; p++) {
        snprintf(path, sizeof(path), "%s/model-%05d-of-00002.safetensors", dir, p + 1);
        write_file(c, path, p, 2);
    }
    write_config(c, dir);
}

/* ---- expected device buffers, from SHARDING.md ------------------------------------------------ */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    if (src)
        memcpy(b->p + b->n, src, n);
    else
        memset(b->p + b->n, 0, n);
    b->n += n;
}

/* rows [r0, r1) x cols [c0, c1) of t, then `pad` zero elements at the end of each row */
static void put_block(buf *b, const cfg *c, const tensor *t, uint64_t r0, uint64_t r1, uint64_t c0,
                      uint64_t c1, uint64_t pad)
{
    for (uint64_t r = r0; r < r1; r++) {
        put(b, t->data + (r * t->C + c0) * (uint64_t)c->esz, (c1 - c0) * (uint64_t)c->esz);
        put(b, NULL, pad * (uint64_t)c->esz);
    }
}

static void put_zero_rows(buf *b, const cfg *c, uint64_t rows, uint64_t C)
{
    put(b, NULL, rows * C * (uint64_t)c->esz);
}

static void put_vocab(buf *b, const cfg *c, const tensor *t, int T, int r)
{
    const uint64_t Vp = ((uint64_t)c->V + 63) / 64 * 64, n = Vp / (uint64_t)T;
    uint64_t s = (uint64_t)r * n, e = (uint64_t)(r + 1) * n;
    s = s < (uint64_t)c->V ? s : (uint64_t)c->V;
    e = e < (uint64_t)c->V ? e : (uint64_t)c->V;
    put_block(b, c, t, s, e, 0, t->C, 0);
    put_zero_rows(b, c, n - (e - s), t->C);
}

static void put_qkv(buf *b, const cfg *c, const char *suffix, int l, int T, int r)
{
    const int q_heads = c->nh / T;
    const int kv_heads = T <= c->K ? c->K / T : 1;
    const int kv_block = T <= c->K ? r : r / (T / c->K);
    const tensor *q = find("model.layers.%d.self_attn.q_proj.%s", l, suffix);
    const tensor *k = find("model.layers.%d.self_attn.k_proj.%s", l, suffix);
    const tensor *v = find("model.layers.%d.self_attn.v_proj.%s", l, suffix);
    put_block(b, c, q, (uint64_t)(r * q_heads * c->D), (uint64_t)((r + 1) * q_heads * c->D), 0, q->C, 0);
    put_block(b, c, k, (uint64_t)(kv_block * kv_heads * c->D), (uint64_t)((kv_block + 1) * kv_heads * c->D), 0, k->C, 0);
    put_block(b, c, v, (uint64_t)(kv_block * kv_heads * c->D), (uint64_t)((kv_block + 1) * kv_heads * c->D), 0, v->C, 0);
}

static void put_cols(buf *b, const cfg *c, const tensor *t, int T, int r)
{
    const uint64_t w = t->C / (uint64_t)T;
    put_block(b, c, t, 0, t->R, (uint64_t)r * w, (uint64_t)(r + 1) * w, 0);
}

static void put_rows_block(buf *b, const cfg *c, const tensor *t, int T, int r)
{
    const uint64_t h = t->R / (uint64_t)T;
    put_block(b, c, t, (uint64_t)r * h, (uint64_t)(r + 1) * h, 0, t->C, 0);
}

static void put_full(buf *b, const cfg *c, const tensor *t)
{
    put_block(b, c, t, 0, t->R, 0, t->C, 0);
}

/* vLLM get_pp_indices, written as in vLLM */
static void pp_range(int L, int P, int s, int *start, int *end)
{
    int part[64];
    for (int i = 0; i < P; i++)
        part[i] = L / P;
    for (int i = 2; i < L % P + 2; i++)
        part[P - i] += 1;
    *start = 0;
    for (int i = 0; i < s; i++)
        *start += part[i];
    *end = *start + part[s];
}

static void expect_tp(buf *b, const cfg *c, int T, int P, int d)
{
    const int r = d % T, s = d / T;
    int l0, l1;
    pp_range(c->L, P, s, &l0, &l1);
    if (s == 0 || (c->tied && s == P - 1))
        put_vocab(b, c, find("model.embed_tokens.weight"), T, r);
    for (int l = l0; l < l1; l++) {
        put_qkv(b, c, "weight", l, T, r);
        if (c->bias)
            put_qkv(b, c, "bias", l, T, r);
        put_cols(b, c, find("model.layers.%d.self_attn.o_proj.weight", l), T, r);
        if (c->qknorm) {
            put_full(b, c, find("model.layers.%d.self_attn.q_norm.weight", l));
            put_full(b, c, find("model.layers.%d.self_attn.k_norm.weight", l));
        }
        put_rows_block(b, c, find("model.layers.%d.mlp.gate_proj.weight", l), T, r);
        put_rows_block(b, c, find("model.layers.%d.mlp.up_proj.weight", l), T, r);
        put_cols(b, c, find("model.layers.%d.mlp.down_proj.weight", l), T, r);
        put_full(b, c, find("model.layers.%d.input_layernorm.weight", l));
        put_full(b, c, find("model.layers.%d.post_attention_layernorm.weight", l));
    }
    if (s == P - 1) {
        put_full(b, c, find("model.norm.weight"));
        if (!c->tied)
            put_vocab(b, c, find("lm_head.weight"), T, r);
    }
}

/* spmd: tile c = ceil(dim/N) of dim 0 (dim0 != 0: of dim 1), zero padded; 1-D replicated */
static void put_tile(buf *b, const cfg *c, const tensor *t, int dim, int N, int i)
{
    if (t->ndim == 1) {
        put_full(b, c, t);
        return;
    }
    const uint64_t size = dim == 0 ? t->R : t->C, tile = (size + (uint64_t)N - 1) / (uint64_t)N;
    uint64_t s = (uint64_t)i * tile, e = s + tile;
    s = s < size ? s : size;
    e = e < size ? e : size;
    if (dim == 0) {
        put_block(b, c, t, s, e, 0, t->C, 0);
        put_zero_rows(b, c, tile - (e - s), t->C);
    } else {
        put_block(b, c, t, 0, t->R, s, e, tile - (e - s));
    }
}

static void expect_spmd(buf *b, const cfg *c, int N, int i)
{
    put_tile(b, c, find("model.embed_tokens.weight"), 0, N, i);
    for (int l = 0; l < c->L; l++) {
        const char *qkv = "qkv";
        for (int k = 0; k < 3; k++)
            put_tile(b, c, find("model.layers.%d.self_attn.%c_proj.weight", l, qkv[k]), 0, N, i);
        for (int k = 0; c->bias && k < 3; k++)
            put_tile(b, c, find("model.layers.%d.self_attn.%c_proj.bias", l, qkv[k]), 0, N, i);
        put_tile(b, c, find("model.layers.%d.self_attn.o_proj.weight", l), 1, N, i);
        if (c->qknorm) {
            put_full(b, c, find("model.layers.%d.self_attn.q_norm.weight", l));
            put_full(b, c, find("model.layers.%d.self_attn.k_norm.weight", l));
        }
        put_tile(b, c, find("model.layers.%d.mlp.gate_proj.weight", l), 0, N, i);
        put_tile(b, c, find("model.layers.%d.mlp.up_proj.weight", l), 0, N, i);
        put_tile(b, c, find("model.layers.%d.mlp.down_proj.weight", l), 1, N, i);
        put_full(b, c, find("model.layers.%d.input_layernorm.weight", l));
        put_full(b, c, find("model.layers.%d.post_attention_layernorm.weight", l));
    }
    put_full(b, c, find("model.norm.weight"));
    if (!c->tied)
        put_tile(b, c, find("lm_head.weight"), 0, N, i);
}

/* ---- naive execution -------------------------------------------------------------------------- */

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*n);
    if (fread(p, 1, *n, f) != *n)
        *n = 0;
    fclose(f);
    return p;
}

static void run_device(const sl_checkpoint *ck, const sl_plan *p, int d, unsigned char **files,
                       size_t *fsz, unsigned char *out, unsigned char *cover)
{
    const sl_plan_device *dev = &p->devices[d];
    for (int64_t i = 0; i < dev->n_ops; i++) {
        const sl_op *op = &dev->ops[i];
        if (i > 0) {
            const sl_op *pr = &dev->ops[i - 1];
            EXPECT(pr->file < op->file || (pr->file == op->file && pr->src_offset <= op->src_offset),
                   "device %d: ops not sorted by (file, src_offset)", d);
        }
        const uint64_t esz = sl_dtype_bits(p->dtype) / 8;
        for (uint64_t r = 0; r < op->rows; r++) {
            const uint64_t n = op->row_elems * esz, dst = op->dst_offset + r * op->dst_stride;
            if (dst + n > dev->bytes) {
                EXPECT(0, "device %d: op %lld writes past the buffer", d, (long long)i);
                return;
            }
            for (uint64_t k = 0; k < n; k++)
                cover[dst + k]++;
            if (op->kind == SL_OP_ZERO) {
                memset(out + dst, 0, n);
                continue;
            }
            const uint64_t src = op->src_offset + r * op->src_stride;
            EXPECT(op->src_dtype == p->dtype, "dtype conversion not expected here");
            EXPECT(src + n <= fsz[op->file], "op reads past the file");
            memcpy(out + dst, files[op->file] + src, n);
        }
    }
    (void)ck;
}

static uint64_t checkpoint_bytes(const cfg *c)
{
    uint64_t n = 0;
    for (int i = 0; i < g_n; i++)
        n += g_t[i].R * g_t[i].C * (uint64_t)c->esz;
    return n;
}

static void check_case(const char *what, const cfg *c, int T, int P, sl_layout layout,
                       uint64_t skipped_bytes)
{
    char dir[256];
    snprintf(dir, sizeof(dir), "plan_ops_%d", getpid());
    write_checkpoint(c, dir);
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.tp = T;
    o.pp = P;
    o.layout = layout;
    sl_status st = sl_checkpoint_open(dir, &ck);
    EXPECT(st == SL_OK, "%s: open: %s", what, sl_checkpoint_errmsg(ck));
    if (st == SL_OK)
        st = sl_plan_build(ck, &o, &p);
    EXPECT(st == SL_OK, "%s: plan: %s", what, sl_plan_errmsg(p));
    if (st != SL_OK)
        goto out;
    unsigned char *files[2];
    size_t fsz[2];
    for (int f = 0; f < 2; f++)
        files[f] = slurp(sl_checkpoint_file_path(ck, f), &fsz[f]);
    for (int d = 0; d < sl_plan_device_count(p); d++) {
        buf want = {0};
        if (layout == SL_LAYOUT_TP)
            expect_tp(&want, c, T, P, d);
        else
            expect_spmd(&want, c, T, d);
        const uint64_t n = sl_plan_device_bytes(p, d);
        EXPECT(n == want.n, "%s: device %d holds %llu bytes, expected %zu", what, d,
               (unsigned long long)n, want.n);
        unsigned char *got = malloc(n + 1), *cover = calloc(n + 1, 1);
        memset(got, 0xEE, n);
        run_device(ck, p, d, files, fsz, got, cover);
        uint64_t bad = 0;
        for (uint64_t k = 0; k < n; k++)
            bad += cover[k] != 1;
        EXPECT(bad == 0, "%s: device %d: %llu bytes not written exactly once", what, d,
               (unsigned long long)bad);
        EXPECT(n == want.n && memcmp(got, want.p, n) == 0, "%s: device %d contents differ", what, d);
        free(got);
        free(cover);
        free(want.p);
    }
    const uint64_t want_read = checkpoint_bytes(c) - skipped_bytes;
    EXPECT(sl_plan_read_bytes(p) == want_read, "%s: read_bytes %llu, expected %llu", what,
           (unsigned long long)sl_plan_read_bytes(p), (unsigned long long)want_read);
    for (int f = 0; f < 2; f++)
        free(files[f]);
out:
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

/* ---- strictness ------------------------------------------------------------------------------- */

static void check_error(const char *what, const cfg *c, sl_status want, const char *needle)
{
    char dir[256];
    snprintf(dir, sizeof(dir), "plan_err_%d", getpid());
    write_checkpoint(c, dir);
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    sl_status st = sl_checkpoint_open(dir, &ck);
    const char *msg = sl_checkpoint_errmsg(ck);
    if (st == SL_OK) {
        st = sl_plan_build(ck, &o, &p);
        msg = sl_plan_errmsg(p);
    }
    EXPECT(st == want, "%s: got %s (%s), expected %s", what, sl_status_str(st), msg,
           sl_status_str(want));
    EXPECT(strstr(msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, msg, needle);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static void free_tensors(void)
{
    for (int i = 0; i < g_n; i++)
        free(g_t[i].data);
    g_n = 0;
}

static void strictness(void)
{
    const cfg c = {"LlamaForCausalLM", 8, 4, 2, 2, 12, 70, 2, 0, 0, 0, 0, 2};
    make_tensors(&c, 1);
    add_tensor(&c, "model.layers.0.self_attn.rotary_emb.inv_freq", 4, 1, 1);   /* skipped */
    check_case("rotary skipped", &c, 2, 1, SL_LAYOUT_TP, 4 * 2);
    free_tensors();

    make_tensors(&c, 1);
    add_tensor(&c, "model.layers.0.mlp.extra.weight", 4, 1, 1);
    check_error("unclaimed", &c, SL_E_UNCLAIMED,
                "checkpoint tensor 'model.layers.0.mlp.extra.weight' (plan_err_");
    check_error("unclaimed file", &c, SL_E_UNCLAIMED, "model-00002-of-00002.safetensors) is not claimed");
    add_tensor(&c, "model.layers.1.mlp.extra2.weight", 4, 1, 1);
    check_error("two unclaimed", &c, SL_E_UNCLAIMED, "2 checkpoint tensors are not claimed by any rule");
    check_error("two unclaimed, both named", &c, SL_E_UNCLAIMED, "'model.layers.1.mlp.extra2.weight' (");
    for (int i = 0; i < 9; i++) {
        char name[64];
        snprintf(name, sizeof name, "model.extra%d.weight", i);
        add_tensor(&c, name, 4, 1, 1);
    }
    check_error("eleven unclaimed, eight listed", &c, SL_E_UNCLAIMED, "model.extra5.weight' (");
    check_error("eleven unclaimed, count", &c, SL_E_UNCLAIMED, "11 checkpoint tensors are not claimed");
    free_tensors();

    make_tensors(&c, 1);
    find("model.layers.1.mlp.up_proj.weight")->R = 11;
    check_error("shape", &c, SL_E_SHAPE, "[11, 8] but the config implies [12, 8]");
    check_error("shape names the file", &c, SL_E_SHAPE,
                ".safetensors: checkpoint tensor 'model.layers.1.mlp.up_proj.weight' has shape");
    free_tensors();

    make_tensors(&c, 0);
    free(find("model.layers.1.self_attn.k_proj.weight")->data);
    memmove(find("model.layers.1.self_attn.k_proj.weight"), find("model.layers.1.self_attn.v_proj.weight"),
            sizeof(tensor) * (size_t)(g_t + g_n - find("model.layers.1.self_attn.v_proj.weight")));
    g_n--;   /* layer 1 k_proj and lm_head missing */
    check_error("missing", &c, SL_E_MISSING,
                "Following weights were not initialized from checkpoint: "
                "{'model.layers.1.self_attn.qkv_proj.weight', 'lm_head.weight'}");
    free_tensors();

    make_tensors(&c, 1);
    snprintf(g_t[g_n - 1].name, sizeof(g_t[0].name), "model.norm.weight");   /* in both files */
    check_error("duplicate", &c, SL_E_DUPLICATE, "model.norm.weight");
    free_tensors();
}

int main(void)
{
    /* Llama-like, T > K (rep 2), vocab 70 -> 128 padded (rank 3 all zero rows), untied */
    const cfg llama = {"LlamaForCausalLM", 8, 4, 2, 2, 12, 70, 3, 0, 0, 0, 0, 2};
    make_tensors(&llama, 1);
    check_case("llama T=4", &llama, 4, 1, SL_LAYOUT_TP, 0);
    check_case("llama T=1", &llama, 1, 1, SL_LAYOUT_TP, 0);
    check_case("llama T=2 P=3", &llama, 2, 3, SL_LAYOUT_TP, 0);
    check_case("llama T=4 P=2 (uneven)", &llama, 4, 2, SL_LAYOUT_TP, 0);
    check_case("llama spmd N=3 (uneven tiles)", &llama, 3, 1, SL_LAYOUT_SPMD, 0);
    check_case("llama spmd N=8", &llama, 8, 1, SL_LAYOUT_SPMD, 0);
    free_tensors();

    /* Qwen2-like: q/k/v biases, tied embeddings with a checkpoint lm_head (skipped), PP=2 */
    const cfg qwen2 = {"Qwen2ForCausalLM", 8, 4, 2, 2, 8, 64, 3, 1, 1, 0, 0, 2};
    make_tensors(&qwen2, 1);
    const uint64_t lm = 64 * 8 * 2;
    check_case("qwen2 T=2 P=2 tied", &qwen2, 2, 2, SL_LAYOUT_TP, lm);
    check_case("qwen2 T=4 (T > K)", &qwen2, 4, 1, SL_LAYOUT_TP, lm);
    check_case("qwen2 spmd N=2", &qwen2, 2, 1, SL_LAYOUT_SPMD, lm);
    free_tensors();

    /* Qwen3-like: head_dim 4 != H/nh 3, q_norm/k_norm, K=1 replicated on both ranks, V=100 */
    const cfg qwen3 = {"Qwen3ForCausalLM", 6, 2, 1, 4, 6, 100, 4, 1, 0, 1, 1, 2};
    make_tensors(&qwen3, 0);
    check_case("qwen3 T=2", &qwen3, 2, 1, SL_LAYOUT_TP, 0);
    check_case("qwen3 T=2 P=3 tied, layers 1,2,1", &qwen3, 2, 3, SL_LAYOUT_TP, 0);
    check_case("qwen3 spmd N=4", &qwen3, 4, 1, SL_LAYOUT_SPMD, 0);
    free_tensors();

    /* F32 checkpoint, F32 target: 4-byte elements */
    const cfg f32 = {"MistralForCausalLM", 8, 4, 4, 2, 12, 64, 2, 0, 0, 0, 0, 4};
    make_tensors(&f32, 1);
    check_case("mistral f32 T=2 P=2", &f32, 2, 2, SL_LAYOUT_TP, 0);
    free_tensors();

    strictness();
    if (expect_failures)
        fprintf(stderr, "%d failure(s)\n", expect_failures);
    else
        printf("test_plan_ops: all passed\n");
    return expect_failures ? 1 : 0;
}
