/* test_http_list.c - S3 ListObjectsV2 pages read by sl_http_list_page (io/http_parse.c), hand-
 * written, without a server: keys decoded exactly (named and numeric XML references to UTF-8,
 * percent-encoding when the page says <EncodingType>url</EncodingType>) or refused, never kept raw;
 * a truncated page without a token refused; fields read only where they belong (a <Contents>
 * without its own <Key>, an <IsTruncated> inside a <Contents>, attributes, comments, white space);
 * pages that are not a well-formed ListBucketResult refused; a decoded key that is not UTF-8, and a
 * name listed twice on one page or on two pages of a listing, refused. */
#include "io/http_list.h"
#include "expect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" \
             "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
#define TAIL "</ListBucketResult>"
#define NOT_TRUNC "<IsTruncated>false</IsTruncated>"
#define KEY(k) "<Contents><Key>" k "</Key><Size>1</Size></Contents>"

/* names joined by '|' ("" for none) */
static void join(const sl_http_names *names, char *out, size_t n)
{
    out[0] = '\0';
    for (size_t i = 0; i < names->n; i++)
        snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? "|" : "", names->v[i]);
}

/* The page under prefix gives want_names and want_token (NULL: none). */
static void page_ok(const char *xml, const char *prefix, const char *want_names, const char *want_token)
{
    sl_http_names names = {0};
    sl_err e = {0};
    char *token = NULL, got[1024];
    const sl_status st = sl_http_list_page(xml, prefix, &names, &token, &e);
    join(&names, got, sizeof got);
    EXPECT(st == SL_OK, "%s: %d %s", xml, (int)st, sl_err_msg(&e));
    EXPECT(!strcmp(got, want_names), "%s: names '%s', want '%s'", xml, got, want_names);
    EXPECT(want_token ? token && !strcmp(token, want_token) : !token, "%s: token '%s', want '%s'", xml,
           token ? token : "(none)", want_token ? want_token : "(none)");
    free(token);
    sl_http_names_free(&names);
    sl_err_clear(&e);
}

/* The page is refused with SL_E_IO and a message holding want. */
static void page_fails(const char *xml, const char *want)
{
    sl_http_names names = {0};
    sl_err e = {0};
    char *token = (char *)"unset";
    const sl_status st = sl_http_list_page(xml, "p/", &names, &token, &e);
    EXPECT(st == SL_E_IO && strstr(sl_err_msg(&e), want), "%s: want SL_E_IO '%s', got %d '%s'", xml, want, (int)st,
           sl_err_msg(&e));
    EXPECT(!token, "%s: a token on an error", xml);
    sl_http_names_free(&names);
    sl_err_clear(&e);
}

static void test_plain(void)
{
    page_ok(HEAD "<Prefix>p/</Prefix><KeyCount>4</KeyCount>" NOT_TRUNC KEY("p/a.safetensors") KEY("p/config.json")
                KEY("p/sub/b.safetensors") KEY("q/c.safetensors") KEY("p/.safetensors") KEY("p/d.safetensors") TAIL,
            "p/", "a.safetensors|d.safetensors", NULL);
    page_ok(HEAD NOT_TRUNC TAIL, "p/", "", NULL);
    page_ok(HEAD NOT_TRUNC KEY("top.safetensors") KEY("p/x.safetensors") TAIL, "", "top.safetensors", NULL);
    /* pretty-printed, a comment, white space around the flag */
    page_ok("<?xml version=\"1.0\"?>\n<!-- a listing -->\n<ListBucketResult>\n  <IsTruncated>\n true </IsTruncated>\n"
            "  <NextContinuationToken>1ueG+/x=</NextContinuationToken>\n  <Contents>\n    <Key>p/a.safetensors</Key>\n"
            "  </Contents>\n</ListBucketResult>\n",
            "p/", "a.safetensors", "1ueG+/x=");
}

static void test_references(void)
{
    /* S3 writes characters XML 1.0 cannot hold raw as numeric references: decoded to UTF-8 */
    page_ok(HEAD NOT_TRUNC KEY("p/a&amp;b&#32;c&#xE9;&#xe9;&#233;&#13;&#x1;&lt;&gt;&quot;&apos;.safetensors") TAIL,
            "p/", "a&b c\xC3\xA9\xC3\xA9\xC3\xA9\r\x01<>\"'.safetensors", NULL);
    page_ok(HEAD NOT_TRUNC KEY("p/&#x1F600;&#x10FFFF;&#0065;&#x0000041;&#x7FF;&#x800;&#xFFFD;.safetensors") TAIL, "p/",
            "\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF" "AA\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBD.safetensors", NULL);
    /* a reference to '/' puts the key in a sub-folder; one to the prefix's bytes is the prefix */
    page_ok(HEAD NOT_TRUNC KEY("p&#x2F;a&#47;b.safetensors") KEY("&#112;/c.safetensors") TAIL, "p/", "c.safetensors",
            NULL);
    static const char *bad[] = {"&#0;", "&#x0;", "&#00;", "&#xD800;", "&#xDFFF;", "&#55296;", "&#x110000;",
                                "&#1114112;", "&#x100000000000000041;", "&#99999999999999999999;", "&#;",
                                "&#x;", "&#X41;", "&#12", "&#x4g;", "&#-1;", "&#+1;", "&# 1;", "&nbsp;", "&AMP;",
                                "&;", "& ;", "&", "a&b", "&amp", "&#65"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char xml[512], want[64];
        snprintf(xml, sizeof xml, HEAD NOT_TRUNC KEY("p/x.safetensors") KEY("p/%s.safetensors") TAIL, bad[i]);
        snprintf(want, sizeof want, "<Contents> 2: <Key>: '%.6s", strchr(bad[i], '&'));
        page_fails(xml, want);
    }
    /* every field the listing uses is decoded strictly, the token too */
    page_fails(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>a&#0;</NextContinuationToken>" TAIL,
               "<NextContinuationToken>: '&#0;' is not a reference to a character");
    page_ok(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>a&#43;b&amp;</NextContinuationToken>" TAIL,
            "p/", "", "a+b&");
    page_fails(HEAD "<IsTruncated>tr&ue;</IsTruncated>" TAIL, "<IsTruncated>: '&ue;' is not");
    page_ok(HEAD "<IsTruncated>&#102;alse</IsTruncated>" TAIL, "p/", "", NULL);
}

static void test_url_encoded(void)
{
    /* moto writes <EncodingType> after the <Contents>, S3 before: either way the keys are decoded */
    page_ok(HEAD NOT_TRUNC KEY("p/a%26b%20c%C3%A9%0D+d%2B%25.safetensors") KEY("p%2Fe.safetensors")
                KEY("p/f%2Fg.safetensors") "<EncodingType>url</EncodingType>" TAIL,
            "p/", "a&b c\xC3\xA9\r d+%.safetensors|e.safetensors", NULL);
    page_ok(HEAD "<EncodingType> url </EncodingType>" NOT_TRUNC KEY("p/a%26amp%3B.safetensors") TAIL, "p/",
            "a&amp;.safetensors", NULL);
    /* without <EncodingType> a '%' and a '+' are the key's own */
    page_ok(HEAD NOT_TRUNC KEY("p/a%26+b.safetensors") TAIL, "p/", "a%26+b.safetensors", NULL);
    page_fails(HEAD "<EncodingType>url</EncodingType>" NOT_TRUNC KEY("p/a%2.safetensors") TAIL,
               "<Contents> 1: <Key>: '%2.' is not a percent-encoded byte");
    page_fails(HEAD "<EncodingType>url</EncodingType>" NOT_TRUNC KEY("p/ok.safetensors") KEY("p/a%") TAIL,
               "<Contents> 2: <Key>: '%' is not");
    page_fails(HEAD "<EncodingType>url</EncodingType>" NOT_TRUNC KEY("p/a%00.safetensors") TAIL, "'%00' is not");
    page_fails(HEAD "<EncodingType>url</EncodingType>" NOT_TRUNC KEY("p/a%zz.safetensors") TAIL, "'%zz' is not");
    page_fails(HEAD "<EncodingType>base64</EncodingType>" NOT_TRUNC TAIL, "<EncodingType> is 'base64'");
}

/* Every key decoded must be UTF-8: the raw bytes of the page and what %XX gives alike, a key
 * outside the prefix too; the message shows each bad byte as \xNN. */
static void test_utf8(void)
{
    /* é and U+1F600, raw and percent-encoded */
    page_ok(HEAD NOT_TRUNC KEY("p/caf\xC3\xA9.safetensors") KEY("p/\xF0\x9F\x98\x80.safetensors") TAIL, "p/",
            "caf\xC3\xA9.safetensors|\xF0\x9F\x98\x80.safetensors", NULL);
    page_ok(HEAD "<EncodingType>url</EncodingType>" NOT_TRUNC KEY("p/caf%C3%A9.safetensors")
                KEY("p/%F0%9F%98%80%f4%8f%bf%bf.safetensors") TAIL,
            "p/", "caf\xC3\xA9.safetensors|\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF.safetensors", NULL);
    static const struct { const char *raw, *pct, *shown; } bad[] = {
        {"\xC0\x80", "%C0%80", "\\xc0\\x80"},                              /* overlong U+0000 */
        {"\xE0\x80\xAF", "%E0%80%AF", "\\xe0\\x80\\xaf"},                   /* overlong '/' */
        {"\xED\xA0\x80", "%ED%A0%80", "\\xed\\xa0\\x80"},                   /* surrogate U+D800 */
        {"\xF4\x90\x80\x80", "%F4%90%80%80", "\\xf4\\x90\\x80\\x80"},       /* U+110000 */
        {"\x80", "%80", "\\x80"},                                            /* lone continuation */
        {"\xE2\x82", "%E2%82", "\\xe2\\x82"},                                 /* cut short */
        {"\xFF", "%ff", "\\xff"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char xml[512], want[128];
        snprintf(want, sizeof want, "<Contents> 2: <Key> 'p/a%s.safetensors' is not UTF-8 (byte 3 ", bad[i].shown);
        snprintf(xml, sizeof xml, HEAD NOT_TRUNC KEY("p/x.safetensors") KEY("p/a%s.safetensors") TAIL, bad[i].raw);
        page_fails(xml, want);
        snprintf(xml, sizeof xml, HEAD "<EncodingType>url</EncodingType>" NOT_TRUNC KEY("p/x.safetensors")
                 KEY("p/a%s.safetensors") TAIL, bad[i].pct);
        page_fails(xml, want);
    }
    page_fails(HEAD NOT_TRUNC KEY("q/\xC3(.json") TAIL, "<Key> 'q/\\xc3(.json' is not UTF-8 (byte 2 ");
    /* a long key is cut in the message, which still gives the bad byte's offset */
    char xml[1024], key[400];
    memset(key, 'k', 300);
    strcpy(key + 300, "\xC3.safetensors");
    snprintf(xml, sizeof xml, HEAD NOT_TRUNC KEY("p/%s") TAIL, key);
    page_fails(xml, "...' is not UTF-8 (byte 302 ");
}

/* The pages of one listing, read in turn into one set of names as http_get.c reads them: the
 * last one gives err_want (NULL: none) and names_want ("" for none, NULL: not compared). */
static void listing(const char *const *pages, size_t n_pages, const char *names_want, const char *err_want)
{
    sl_http_names names = {0};
    sl_err e = {0};
    sl_status st = SL_OK;
    char got[1024];
    for (size_t i = 0; st == SL_OK && i < n_pages; i++) {
        char *token = NULL;
        st = sl_http_list_page(pages[i], "p/", &names, &token, &e);
        EXPECT(st != SL_OK || (i + 1 < n_pages) == (token != NULL), "page %zu: token '%s'", i + 1, token);
        free(token);
    }
    if (err_want) {
        EXPECT(st == SL_E_IO && strstr(sl_err_msg(&e), err_want), "want SL_E_IO '%s', got %d '%s'", err_want,
               (int)st, sl_err_msg(&e));
        sl_http_names_free(&names);
    } else {
        EXPECT(st == SL_OK, "%d %s", (int)st, sl_err_msg(&e));
        join(&names, got, sizeof got);
        EXPECT(!names_want || !strcmp(got, names_want), "names '%s', want '%s'", got, names_want);
        /* the listing ended: v and n are all there is to free, as sl_http_list takes them */
        EXPECT(!names.set.key, "the set outlives the listing");
        for (size_t i = 0; i < names.n; i++)
            free(names.v[i]);
        free(names.v);
    }
    sl_err_clear(&e);
}

#define MORE(tok) "<IsTruncated>true</IsTruncated><NextContinuationToken>" tok "</NextContinuationToken>"

/* A page of n keys p/<base + i>.safetensors (then extra, a <Contents> or ""), truncated when tok. */
static char *page_of(size_t base, size_t n, const char *extra, const char *tok)
{
    char *xml = malloc(n * 96 + strlen(extra) + 512), *w = xml;   /* a <Contents> here is under 96 bytes */
    if (!xml)
        abort();
    w += sprintf(w, HEAD);
    if (tok)
        w += sprintf(w, MORE("%s"), tok);
    else
        w += sprintf(w, NOT_TRUNC);
    for (size_t i = 0; i < n; i++)
        w += sprintf(w, KEY("p/k%zu.safetensors"), base + i);
    sprintf(w, "%s" TAIL, extra);
    return xml;
}

/* S3 lists a key once: a name twice, on one page or on two, is an error; names of other keys
 * (another prefix) may repeat what is kept. */
static void test_duplicates(void)
{
    page_fails(HEAD NOT_TRUNC KEY("p/a.safetensors") KEY("p/b.safetensors") KEY("p/a.safetensors") TAIL,
               "<Contents> 3: <Key> 'p/a.safetensors' is listed twice (also earlier on this page)");
    /* the same name however it is written */
    page_fails(HEAD "<EncodingType>url</EncodingType>" NOT_TRUNC KEY("p/%C3%A9.safetensors")
                   KEY("p/\xC3\xA9%2Esafetensors") TAIL,
               "<Contents> 2: <Key> 'p/\xC3\xA9.safetensors' is listed twice");
    page_fails(HEAD NOT_TRUNC KEY("p/a&#10;.safetensors") KEY("p/a&#xA;.safetensors") TAIL,
               "<Contents> 2: <Key> 'p/a\\x0a.safetensors' is listed twice");
    page_ok(HEAD NOT_TRUNC KEY("p/a.safetensors") KEY("q/p/a.safetensors") KEY("p/A.safetensors") TAIL, "p/",
            "a.safetensors|A.safetensors", NULL);

    const char *two[] = {HEAD MORE("t1") KEY("p/a.safetensors") KEY("p/b.safetensors") TAIL,
                         HEAD NOT_TRUNC KEY("p/c.safetensors") KEY("p/a.safetensors") TAIL};
    listing(two, 2, NULL, "<Contents> 2: <Key> 'p/a.safetensors' is listed twice (also on an earlier page)");
    const char *apart[] = {HEAD MORE("t1") KEY("p/a.safetensors") TAIL, HEAD MORE("t2") TAIL,
                           HEAD NOT_TRUNC KEY("p/b.safetensors") KEY("q/a.safetensors") TAIL};
    listing(apart, 3, "a.safetensors|b.safetensors", NULL);
    /* thousands of names (the set grows and is built anew), the last one repeating the first */
    char *big[3] = {page_of(0, 1000, "", "t1"), page_of(1000, 1000, "", "t2"), page_of(2000, 1000, "", NULL)};
    listing((const char *const *)big, 3, NULL, NULL);
    free(big[2]);
    big[2] = page_of(2000, 1000, KEY("p/k0.safetensors"), NULL);
    listing((const char *const *)big, 3, NULL,
            "<Contents> 1001: <Key> 'p/k0.safetensors' is listed twice (also on an earlier page)");
    for (size_t i = 0; i < 3; i++)
        free(big[i]);
}

static void test_truncated(void)
{
    page_ok(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>tok</NextContinuationToken>"
                 KEY("p/a.safetensors") TAIL, "p/", "a.safetensors", "tok");
    page_ok(HEAD "<IsTruncated>1</IsTruncated><NextContinuationToken>tok</NextContinuationToken>" TAIL, "p/", "",
            "tok");
    page_ok(HEAD "<IsTruncated>false</IsTruncated><NextContinuationToken>tok</NextContinuationToken>" TAIL, "p/", "",
            NULL);
    page_ok(HEAD "<IsTruncated>0</IsTruncated>" TAIL, "p/", "", NULL);
    /* a truncated page with nothing to go on with: an error, not the end of the listing */
    page_fails(HEAD "<IsTruncated>true</IsTruncated>" KEY("p/a.safetensors") TAIL,
               "<IsTruncated> is true but the page has no <NextContinuationToken>");
    page_fails(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken></NextContinuationToken>" TAIL,
               "<IsTruncated> is true but the page has an empty <NextContinuationToken>");
    page_fails(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken/>" TAIL,
               "has an empty <NextContinuationToken>");
    page_fails(HEAD KEY("p/a.safetensors") TAIL, "no <IsTruncated>");
    page_fails(HEAD "<IsTruncated>yes</IsTruncated>" TAIL, "<IsTruncated> is 'yes', not true or false");
    page_fails(HEAD NOT_TRUNC "<IsTruncated>true</IsTruncated>" TAIL, "<IsTruncated> given twice");
    page_fails(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>a</NextContinuationToken>"
                    "<NextContinuationToken>b</NextContinuationToken>" TAIL, "<NextContinuationToken> given twice");
}

static void test_structure(void)
{
    /* a <Contents> without its own <Key> does not take the next block's */
    page_fails(HEAD NOT_TRUNC "<Contents><Size>1</Size></Contents>" KEY("p/b.safetensors") TAIL,
               "<Contents> 1 has no <Key>");
    page_fails(HEAD NOT_TRUNC KEY("p/a.safetensors")
               "<Contents><Owner><Key>p/c.safetensors</Key></Owner></Contents>" TAIL,
               "<Contents> 2 has no <Key>");
    page_fails(HEAD NOT_TRUNC "<Contents><Key>p/a.safetensors</Key><Key>p/b.safetensors</Key></Contents>" TAIL,
               "<Contents> 1: <Key> given twice");
    page_fails(HEAD NOT_TRUNC "<Contents><Key>p/a<b/>.safetensors</Key></Contents>" TAIL,
               "<Contents> 1: <Key> holds an element");
    page_fails(HEAD NOT_TRUNC "<Contents><Key>p/a<!-- x -->.safetensors</Key></Contents>" TAIL,
               "<Contents> 1: <Key>: markup inside the text");
    /* the flag and the token count only as children of the root */
    page_ok(HEAD "<Contents><Key>p/a.safetensors</Key><IsTruncated>true</IsTruncated>"
                 "<NextContinuationToken>bogus</NextContinuationToken></Contents>" NOT_TRUNC TAIL,
            "p/", "a.safetensors", NULL);
    page_ok(HEAD "<CommonPrefixes><Prefix>p/sub/</Prefix><Key>p/x.safetensors</Key></CommonPrefixes>" NOT_TRUNC TAIL,
            "p/", "", NULL);
    page_fails(HEAD "<Contents><Key>p/a.safetensors</Key><IsTruncated>false</IsTruncated></Contents>" TAIL,
               "no <IsTruncated>");
    /* attributes, an empty element, names that begin alike */
    page_ok(HEAD "<KeyCount>2</KeyCount><IsTruncated a='>'>false</IsTruncated >"
                 "<Contents x=\"1\"><Key xml:space=\"preserve\">p/a.safetensors</Key ></Contents>"
                 "<Contents><Key/></Contents>"
                 "<Contents><KeyX>p/c.safetensors</KeyX><Key>p/d.safetensors</Key></Contents>"
                 TAIL, "p/", "a.safetensors|d.safetensors", NULL);
    /* not a well-formed ListBucketResult */
    page_fails("<?xml version=\"1.0\"?><Error><Code>InternalError</Code><Message>x</Message></Error>",
               "the page is <Error> (InternalError), not <ListBucketResult>");
    page_fails("", "no <ListBucketResult> in the page");
    page_fails(HEAD NOT_TRUNC KEY("p/a.safetensors"), "the page ends inside <ListBucketResult>");
    page_fails(HEAD NOT_TRUNC "<Contents><Key>p/a.safetensors</Key>", "the page ends inside <Contents>");
    page_fails(HEAD NOT_TRUNC "<Contents><Key>p/a.safetensors<Contents><Key>x</Key></Contents>" TAIL,
               "</ListBucketResult> closes <Key>");
    page_fails(HEAD NOT_TRUNC "<Contents><Key>p/a.safetensors</Contents>" TAIL, "</Contents> closes <Key>");
    page_fails(HEAD NOT_TRUNC TAIL "<ListBucketResult>" NOT_TRUNC TAIL, "<ListBucketResult> after </ListBucketResult>");
    page_fails(HEAD NOT_TRUNC TAIL "</ListBucketResult>", "</ListBucketResult> closes no element");
    page_fails(HEAD NOT_TRUNC "<Contents><Key>p/a.safetensors</Key" TAIL, "an unterminated </Key>");
    page_fails(HEAD NOT_TRUNC "<Contents <Key>p/a.safetensors</Key></Contents>" TAIL, "an unterminated <Contents>");
    page_fails(HEAD NOT_TRUNC "< Key>" TAIL, "a '<' that begins no tag");
    page_fails("<!DOCTYPE x [<!ENTITY e \"p/a.safetensors\">]><ListBucketResult>" NOT_TRUNC TAIL,
               "a DOCTYPE or CDATA section");
    page_fails(HEAD NOT_TRUNC "<Contents><Key><![CDATA[p/a.safetensors]]></Key></Contents>" TAIL, "CDATA");
    page_fails(HEAD NOT_TRUNC "<!-- no end" TAIL, "an unterminated '<!--'");
    page_fails("<?xml version=\"1.0\"", "an unterminated '<?xm'");
    char deep[1024] = HEAD NOT_TRUNC;
    for (int i = 0; i < 20; i++)
        strcat(deep, "<a>");
    page_fails(deep, "elements nested deeper than 16");
}

int main(void)
{
    test_plain();
    test_references();
    test_url_encoded();
    test_utf8();
    test_duplicates();
    test_truncated();
    test_structure();
    if (expect_failures)
        fprintf(stderr, "test_http_list: %d failure(s)\n", expect_failures);
    return expect_failures ? 1 : 0;
}
