/* http_list.c - one S3 ListObjectsV2 page, parsed without a connection (http_list.h): http_get.c
 * hands each page of a listing here. The page is the server's, so untrusted: it is read as XML
 * elements, and a key that cannot be decoded exactly is an error, never a guess. */
#include "io/http_list.h"

#include "common/sl_grow.h"
#include "common/sl_text.h"
#include "io/http_parse.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- S3 ListObjectsV2 ------------------------------------------------------------------------- */

/* A page is XML 1.0 (docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html):
 *
 *   <?xml version="1.0" encoding="UTF-8"?>
 *   <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
 *     <Name>..</Name><Prefix>..</Prefix><KeyCount>..</KeyCount><MaxKeys>..</MaxKeys>
 *     <Delimiter>/</Delimiter><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>
 *     <ContinuationToken>..</ContinuationToken><NextContinuationToken>..</NextContinuationToken>
 *     <Contents><Key>..</Key><LastModified>..</LastModified><ETag>..</ETag>..</Contents> ...
 *     <CommonPrefixes><Prefix>..</Prefix></CommonPrefixes> ...
 *   </ListBucketResult>
 *
 * with the root's children in any order. It is read as elements, not searched for strings: a
 * field counts only where it belongs (IsTruncated, NextContinuationToken and EncodingType as
 * children of the root, Key as a child of a Contents), so a <Contents> without its own <Key> is an
 * error instead of taking the next block's, and a tag may carry attributes (<Key xml:space=..>).
 * Anything that would make a key read wrong is an error, never a guess: a key read wrong is a
 * wrong file name, reported later as a confusing 404, and a page read short is a partial list
 * taken for the whole. A decoded key must be UTF-8, as S3's keys are, and a name is kept once:
 * S3 never lists a key twice in one listing, and a shard kept twice would be loaded twice. */

#define LIST_MAX_DEPTH 16   /* S3 nests 4 deep (ListBucketResult/Contents/Owner/ID) */

typedef struct xml_open {   /* an element whose end tag has not come yet */
    const char *name;
    size_t len;
    const char *text;       /* just after its start tag */
    int has_child;
} xml_open;

typedef struct list_page {
    const char *xml, *p;    /* the page, and the next byte to read */
    xml_open open[LIST_MAX_DEPTH];
    int depth, root_done;
    size_t n_contents;      /* <Contents> begun so far: the current one's number, from 1 */
    char *key;              /* the current <Contents>'s <Key> */
    char *truncated, *next_token, *encoding;
    sl_http_names keys;     /* every <Contents>'s <Key> as XML text, not yet URL-decoded */
    const char *prefix;
    sl_http_names *names;   /* the listing's names: n0 from earlier pages, then this page's */
    size_t n0;
    sl_err *err;
} list_page;

static int xml_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int name_is(const char *name, size_t len, const char *lit)
{
    return strlen(lit) == len && !memcmp(name, lit, len);
}

/* The code point of a numeric character reference's digits r[0, n) ("13" or "xD"): -1 when
 * malformed (no digit, another byte, an 'X'), else the value, capped at 0x110000. */
static long char_ref_value(const char *r, size_t n)
{
    const int hex = n && r[0] == 'x';
    long v = 0;
    if (n == (size_t)hex)
        return -1;
    for (size_t i = (size_t)hex; i < n; i++) {
        const int d = hex ? sl_text_hex_digit(r[i]) : r[i] >= '0' && r[i] <= '9' ? r[i] - '0' : -1;
        if (d < 0)
            return -1;
        v = v * (hex ? 16 : 10) + d;
        if (v > 0x10FFFF)
            v = 0x110000;   /* leading zeros are allowed, so the digits are not bounded */
    }
    return v;
}

/* The reference at r[0, end) (r[0] is '&', ';' ends it) written to w as UTF-8: its length in the
 * text, with *wn the bytes written; 0 when it is malformed or unknown, or names a code point that
 * is no character (0, a surrogate, past U+10FFFF). S3 writes a key's characters that XML 1.0
 * cannot hold raw as numeric references (&#13; for CR); control characters, which XML 1.0 forbids
 * even as references (AWS: "the XML 1.0 parser can't parse certain characters, such as characters
 * with an ASCII value from 0 to 10"), are decoded too, not refused: they are the key's. */
static size_t xml_ref(const char *r, const char *end, char *w, size_t *wn)
{
    static const struct { const char *e; char c; } ents[] = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    const char *semi = memchr(r, ';', (size_t)(end - r));
    if (!semi)
        return 0;
    const size_t n = (size_t)(semi - r) - 1;   /* between '&' and ';' */
    if (n && r[1] == '#') {
        const long cp = char_ref_value(r + 2, n - 1);
        if (cp <= 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        *wn = sl_text_utf8_put(w, (uint32_t)cp);
        return n + 2;
    }
    for (size_t k = 0; k < sizeof ents / sizeof ents[0]; k++)
        if (name_is(r + 1, n, ents[k].e)) {
            *w = ents[k].c;
            *wn = 1;
            return n + 2;
        }
    return 0;
}

/* The XML text s[0, n) decoded into a new string *out. what names the field for the message. */
static sl_status xml_decode(const char *s, size_t n, const char *what, char **out, sl_err *err)
{
    char *w = malloc(n + 1);   /* no reference is shorter than the UTF-8 it stands for */
    size_t k = 0;
    *out = NULL;
    SL_CHECK(w, err, SL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n;) {
        size_t len = 1, wn = 1;
        if (s[i] == '&')
            len = xml_ref(s + i, s + n, w + k, &wn);
        else if (s[i] == '<')
            len = 0;   /* markup (a comment) inside the text */
        else
            w[k] = s[i];
        if (!len) {
            free(w);
            const char *semi = memchr(s + i, ';', n - i < 16 ? n - i : 16);
            const int m = semi ? (int)(semi - (s + i) + 1) : (int)(n - i < 16 ? n - i : 16);
            return s[i] == '<' ? sl_err_set(err, SL_E_IO, "%s: markup inside the text: '%.*s'", what, m, s + i)
                               : sl_err_set(err, SL_E_IO, "%s: '%.*s' is not a reference to a character "
                                            "(malformed, unknown, U+0000, a surrogate or past U+10FFFF)",
                                            what, m, s + i);
        }
        i += len;
        k += wn;
    }
    assert(k <= n);
    w[k] = '\0';
    *out = w;
    return SL_OK;
}

/* A key of a page that says <EncodingType>url</EncodingType>, percent-decoded in place: '+' is a
 * space, as in botocore's decoding of these pages (unquote_plus), and S3 and moto write a '+' of
 * the key as %2B. A '%' without two hex digits, or a %00, is an error. */
static sl_status url_decode(char *s, size_t i, sl_err *err)
{
    char *w = s;
    for (const char *r = s; *r; w++) {
        if (*r == '%') {
            const int hi = sl_text_hex_digit(r[1]), lo = hi < 0 ? -1 : sl_text_hex_digit(r[2]);
            SL_CHECK(lo >= 0 && (hi | lo), err, SL_E_IO,
                     "<Contents> %zu: <Key>: '%.3s' is not a percent-encoded byte (or is %%00)", i + 1, r);
            *w = (char)(hi << 4 | lo);
            r += 3;
        } else {
            *w = *r == '+' ? ' ' : *r;
            r++;
        }
    }
    *w = '\0';
    return SL_OK;
}

static int names_push(sl_http_names *a, const char *s)
{
    char **v = sl_grow(a->v, &a->cap, a->n, sizeof *v, 16);
    if (!v)
        return -1;
    a->v = v;
    return (a->v[a->n] = strdup(s)) ? (int)(++a->n, 0) : -1;
}

/* s appended to a unless a holds it already (*dup its index, else -1). -1 when out of memory. The
 * set is built from v when it does not hold all of it (a names gathered before). */
static int names_add(sl_http_names *a, const char *s, int64_t *dup)
{
    *dup = -1;
    if (a->set.n != a->n) {
        sl_strmap_free(&a->set);
        for (size_t i = 0; i < a->n; i++) {
            if (sl_strmap_add(&a->set, a->v[i], (int64_t)i) == -2)
                return -1;
        }
    }
    if ((*dup = sl_strmap_get(&a->set, s)) >= 0)
        return 0;
    if (names_push(a, s) != 0)
        return -1;
    return sl_strmap_add(&a->set, a->v[a->n - 1], (int64_t)a->n - 1) == -2 ? -1 : 0;
}

/* A decoded key for a message: as sl_text_name shows it, with each byte that begins no valid UTF-8
 * sequence as \xNN too, so that the message itself is UTF-8. buflen is at most SL_TEXT_NAME. */
static const char *key_show(const char *key, char *buf, size_t buflen)
{
    char tmp[2 * SL_TEXT_NAME];   /* filled past SL_TEXT_NAME bytes, sl_text_display cuts with "..." */
    const size_t n = strlen(key);
    size_t o = 0;
    assert(buflen <= SL_TEXT_NAME);
    for (size_t i = 0; i < n && o < SL_TEXT_NAME;) {
        const size_t run = sl_text_utf8_check((const unsigned char *)key + i, n - i);
        const size_t take = run < SL_TEXT_NAME - o ? run : SL_TEXT_NAME - o;
        memcpy(tmp + o, key + i, take);
        o += take;
        i += take;
        if (take == run && i < n) {   /* key[i] is the bad byte */
            o += (size_t)snprintf(tmp + o, sizeof tmp - o, "\\x%02x", (unsigned char)key[i]);
            i++;
        }
    }
    return sl_text_display(tmp, o, buf, buflen);
}

static int ends_with(const char *s, const char *suf)
{
    const size_t n = strlen(s), k = strlen(suf);
    return n > k && !strcmp(s + n - k, suf);
}

/* The text of e (a leaf: no child element) decoded into *dst, which must not be set yet. */
static sl_status page_field(list_page *pg, const xml_open *e, const char *text_end, char **dst)
{
    char what[64];
    if (pg->depth == 3)
        snprintf(what, sizeof what, "<Contents> %zu: <Key>", pg->n_contents);
    else
        snprintf(what, sizeof what, "<%.*s>", (int)e->len, e->name);
    SL_CHECK(!e->has_child, pg->err, SL_E_IO, "%s holds an element", what);
    SL_CHECK(!*dst, pg->err, SL_E_IO, "%s given twice", what);
    return xml_decode(e->text, (size_t)(text_end - e->text), what, dst, pg->err);
}

static sl_status page_contents_end(list_page *pg)
{
    SL_CHECK(pg->key, pg->err, SL_E_IO, "<Contents> %zu has no <Key>", pg->n_contents);
    const int bad = names_push(&pg->keys, pg->key) != 0;
    free(pg->key);
    pg->key = NULL;
    SL_CHECK(!bad, pg->err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

/* e ends (text_end is its end tag's '<'): the fields the listing uses, where they belong. */
static sl_status page_element(list_page *pg, const xml_open *e, const char *text_end)
{
    if (pg->depth == 2 && name_is(e->name, e->len, "IsTruncated"))
        return page_field(pg, e, text_end, &pg->truncated);
    if (pg->depth == 2 && name_is(e->name, e->len, "NextContinuationToken"))
        return page_field(pg, e, text_end, &pg->next_token);
    if (pg->depth == 2 && name_is(e->name, e->len, "EncodingType"))
        return page_field(pg, e, text_end, &pg->encoding);
    if (pg->depth == 2 && name_is(e->name, e->len, "Contents"))
        return page_contents_end(pg);
    if (pg->depth == 3 && name_is(pg->open[1].name, pg->open[1].len, "Contents") &&
        name_is(e->name, e->len, "Key"))
        return page_field(pg, e, text_end, &pg->key);
    return SL_OK;
}

static sl_status page_close(list_page *pg, const char *name, size_t len, const char *text_end)
{
    SL_CHECK(pg->depth > 0, pg->err, SL_E_IO, "</%.*s> closes no element", (int)len, name);
    const xml_open *e = &pg->open[pg->depth - 1];
    SL_CHECK(e->len == len && !memcmp(e->name, name, len), pg->err, SL_E_IO,
             "</%.*s> closes <%.*s>", (int)len, name, (int)e->len, e->name);
    SL_TRY(page_element(pg, e, text_end));
    pg->root_done = --pg->depth == 0;
    return SL_OK;
}

/* The root must be a ListBucketResult: a 200 can carry an <Error> (docs: "A 200 OK response can
 * contain valid or invalid XML"), which would otherwise read as an empty listing. */
static sl_status page_root(list_page *pg, const char *name, size_t len)
{
    char code[64];
    if (name_is(name, len, "ListBucketResult"))
        return SL_OK;
    sl_http_s3_code(pg->xml, code, sizeof code);
    return sl_err_set(pg->err, SL_E_IO, "the page is <%.*s>%s%s%s, not <ListBucketResult>", (int)len,
                      name, code[0] ? " (" : "", code, code[0] ? ")" : "");
}

static sl_status page_open(list_page *pg, const char *name, size_t len, int empty, const char *after)
{
    SL_CHECK(!pg->root_done, pg->err, SL_E_IO, "<%.*s> after </ListBucketResult>", (int)len, name);
    SL_CHECK(pg->depth < LIST_MAX_DEPTH, pg->err, SL_E_IO, "elements nested deeper than %d", LIST_MAX_DEPTH);
    if (pg->depth == 0)
        SL_TRY(page_root(pg, name, len));
    else
        pg->open[pg->depth - 1].has_child = 1;
    if (pg->depth == 1 && name_is(name, len, "Contents"))
        pg->n_contents++;
    pg->open[pg->depth++] = (xml_open){.name = name, .len = len, .text = after};
    return empty ? page_close(pg, name, len, after) : SL_OK;
}

/* The end of a start tag's attributes: its '>' (after a '/' when *empty), else NULL. A quoted
 * value may hold a '>'. */
static const char *attrs_end(const char *q, int *empty)
{
    for (char quote = 0; *q; q++) {
        if (quote) {
            quote = *q == quote ? 0 : quote;
        } else if (*q == '"' || *q == '\'') {
            quote = *q;
        } else if (*q == '<') {
            return NULL;
        } else if (*q == '>') {
            *empty = q[-1] == '/';
            return q;
        }
    }
    return NULL;
}

/* A processing instruction (<?xml ..?>) or a comment, skipped; a DOCTYPE or CDATA (S3 sends
 * neither: a DOCTYPE could define entities) is an error. */
static sl_status page_skip(list_page *pg, const char *lt)
{
    const int pi = lt[1] == '?';
    const char *end = pi ? strstr(lt + 2, "?>") : !strncmp(lt, "<!--", 4) ? strstr(lt + 4, "-->") : NULL;
    SL_CHECK(pi || !strncmp(lt, "<!--", 4), pg->err, SL_E_IO, "'%.9s': a DOCTYPE or CDATA section", lt);
    SL_CHECK(end, pg->err, SL_E_IO, "an unterminated '%.4s'", lt);
    pg->p = end + (pi ? 2 : 3);
    return SL_OK;
}

/* One tag at lt (a '<'). */
static sl_status page_tag(list_page *pg, const char *lt)
{
    if (lt[1] == '?' || lt[1] == '!')
        return page_skip(pg, lt);
    const int close = lt[1] == '/';
    const char *name = lt + 1 + close, *q = name;
    while (*q && !xml_space(*q) && *q != '/' && *q != '>' && *q != '<')
        q++;
    const size_t len = (size_t)(q - name);
    int empty = 0;
    SL_CHECK(len > 0, pg->err, SL_E_IO, "a '<' that begins no tag: '%.16s'", lt);
    if (close) {
        while (xml_space(*q))
            q++;
        SL_CHECK(*q == '>', pg->err, SL_E_IO, "an unterminated </%.*s>", (int)len, name);
        pg->p = q + 1;
        return page_close(pg, name, len, lt);
    }
    q = attrs_end(q, &empty);
    SL_CHECK(q, pg->err, SL_E_IO, "an unterminated <%.*s>", (int)len, name);
    pg->p = q + 1;
    return page_open(pg, name, len, empty, pg->p);
}

static sl_status page_walk(list_page *pg)
{
    for (const char *lt; (lt = strchr(pg->p, '<')) != NULL;)
        SL_TRY(page_tag(pg, lt));
    SL_CHECK(pg->depth == 0, pg->err, SL_E_IO, "the page ends inside <%.*s>", (int)pg->open[pg->depth - 1].len,
             pg->open[pg->depth - 1].name);
    SL_CHECK(pg->root_done, pg->err, SL_E_IO, "no <ListBucketResult> in the page");
    return SL_OK;
}

/* s without the XML white space around it, in place. */
static const char *xml_trim(char *s)
{
    size_t n = strlen(s);
    while (n && xml_space(s[n - 1]))
        s[--n] = '\0';
    while (xml_space(*s))
        s++;
    return s;
}

/* Whether the listing goes on, and whether the keys are URL-encoded. A truncated page without a
 * token to go on with is an error: ending there would take a partial list for the whole. */
static sl_status page_flags(list_page *pg, int *more, int *url)
{
    SL_CHECK(pg->truncated, pg->err, SL_E_IO, "no <IsTruncated>: whether the listing goes on is not known");
    const char *t = xml_trim(pg->truncated);
    *more = !strcmp(t, "true") || !strcmp(t, "1");
    SL_CHECK(*more || !strcmp(t, "false") || !strcmp(t, "0"), pg->err, SL_E_IO,
             "<IsTruncated> is '%.16s', not true or false", t);
    *url = pg->encoding != NULL;
    SL_CHECK(!*url || !strcmp(xml_trim(pg->encoding), "url"), pg->err, SL_E_IO,
             "<EncodingType> is '%.16s' (url was asked for)", xml_trim(pg->encoding));
    SL_CHECK(!*more || (pg->next_token && *pg->next_token), pg->err, SL_E_IO,
             "<IsTruncated> is true but the page has %s <NextContinuationToken>: the rest of the listing "
             "cannot be asked for", pg->next_token ? "an empty" : "no");
    return SL_OK;
}

/* Key i of the page, decoded, must be UTF-8. A NUL cannot be in it: &#0; and %00 are refused while
 * decoding, and a raw one would end the page. */
static sl_status page_key_utf8(const list_page *pg, const char *key, size_t i)
{
    char kb[SL_TEXT_NAME];
    const size_t n = strlen(key), bad = sl_text_utf8_check((const unsigned char *)key, n);
    SL_CHECK(bad == n, pg->err, SL_E_IO, "<Contents> %zu: <Key> '%s' is not UTF-8 (byte %zu begins no "
             "valid sequence)", i + 1, key_show(key, kb, sizeof kb), bad);
    return SL_OK;
}

/* rel, key i's name relative to the prefix, into the listing's names unless it is there already. */
static sl_status page_add(list_page *pg, const char *rel, const char *key, size_t i)
{
    char kb[SL_TEXT_NAME];
    int64_t dup = -1;
    SL_CHECK(names_add(pg->names, rel, &dup) == 0, pg->err, SL_E_NOMEM, "out of memory");
    SL_CHECK(dup < 0, pg->err, SL_E_IO, "<Contents> %zu: <Key> '%s' is listed twice (also %s): S3 lists a "
             "key once", i + 1, key_show(key, kb, sizeof kb),
             (size_t)dup >= pg->n0 ? "earlier on this page" : "on an earlier page");
    return SL_OK;
}

/* Key i of the page, decoded, into the names when it is a .safetensors object directly under the
 * prefix (relative to it). */
static sl_status page_keep(list_page *pg, char *key, size_t i, int url)
{
    if (url)
        SL_TRY(url_decode(key, i, pg->err));
    SL_TRY(page_key_utf8(pg, key, i));
    const size_t pl = strlen(pg->prefix);
    const char *rel = !strncmp(key, pg->prefix, pl) ? key + pl : NULL;
    const int keep = rel && *rel && !strchr(rel, '/') && ends_with(rel, ".safetensors");
    return keep ? page_add(pg, rel, key, i) : SL_OK;
}

sl_status sl_http_list_page(const char *xml, const char *prefix, sl_http_names *names, char **token,
                            sl_err *err)
{
    list_page pg = {.xml = xml, .p = xml, .prefix = prefix, .names = names, .n0 = names->n, .err = err};
    int more = 0, url = 0;
    *token = NULL;
    sl_status st = page_walk(&pg);
    if (st == SL_OK)
        st = page_flags(&pg, &more, &url);
    for (size_t i = 0; st == SL_OK && i < pg.keys.n; i++)
        st = page_keep(&pg, pg.keys.v[i], i, url);
    if (st == SL_OK && more) {
        *token = pg.next_token;
        pg.next_token = NULL;
    } else if (st == SL_OK) {
        sl_strmap_free(&names->set);   /* the listing ends: v and n are all the caller has to take */
    }
    free(pg.key);
    free(pg.truncated);
    free(pg.next_token);
    free(pg.encoding);
    sl_http_names_free(&pg.keys);
    return st;
}

void sl_http_names_free(sl_http_names *names)
{
    for (size_t i = 0; i < names->n; i++)
        free(names->v[i]);
    free(names->v);
    names->v = NULL;
    names->n = names->cap = 0;
    sl_strmap_free(&names->set);
}
