/* http_fail.c - what an HTTP status that ends a GET means (http_fail.h): one line naming the
 * object and, where the store said, why (S3's <Code>); never a credential. S3's answers that the
 * bucket is in another region name that region and the options that set it, and note it for the
 * open (ckpt_remote.c), which may ask once more there. */
#include "io/http_fail.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The region S3 named into out (its x-amz-bucket-region header, else the body's <Region>) and
 * where it said so; "" when it named none. */
static const char *named_region(const sl_http_xfer *x, char *out, size_t n)
{
    snprintf(out, n, "%s", x->resp.bucket_region);
    if (out[0])
        return "x-amz-bucket-region";
    sl_http_s3_region(x->body, out, n);
    return "<Region>";
}

/* S3's answers to a request sent to, or signed for, another region than its bucket's: 301
 * PermanentRedirect (a HEAD's has no body), 307 TemporaryRedirect (a new bucket asked on the
 * global endpoint before its name reached every region; 302 too, which botocore counts with them),
 * 400 AuthorizationHeaderMalformed naming the region ("the region 'us-east-1' is wrong; expecting
 * 'eu-west-1'"; without one the header is malformed in another way, a credential's scope, and
 * botocore does not take it for a region either), and 400 IllegalLocationConstraintException
 * (regions opened since 2019, which name none). Redirects are not followed for S3: the signature
 * covers the host, and a Location is any host the answer names, where the credentials would go.
 * The fix is the region, which the message names with the options that set it (and the open asks
 * in once, ckpt_remote.c), as botocore's S3 redirector takes the region and never the Location. */
static int wrong_region(const sl_http_xfer *x, long code)
{
    char named[32];
    if (!x->obj->s3 || (code != 301 && code != 302 && code != 307 && code != 400))
        return 0;
    if (code != 400 || !strcmp(x->s3_code, "IllegalLocationConstraintException"))
        return 1;
    if (strcmp(x->s3_code, "AuthorizationHeaderMalformed") != 0)
        return 0;
    named_region(x, named, sizeof named);
    return named[0] != '\0';
}

static int xf_region_fail(sl_http_xfer *x, long code, const char *extra, sl_err *err)
{
    sl_http_cfg *c = x->obj->cfg;
    const char *asked = c ? c->region : "us-east-1";
    char named[32];
    const char *where = named_region(x, named, sizeof named);
    if (!named[0])
        sl_err_set(err, SL_E_IO, "%s: the bucket is not in region '%s' (HTTP %ld%s; S3 named no region): give "
                   "its region (--s3-region REGION, Python's s3_region=, $AWS_REGION, sl_load_opts.s3_region)",
                   x->obj->name, asked, code, extra);
    else if (!strcmp(named, asked))
        sl_err_set(err, SL_E_IO, "%s: HTTP %ld%s, though S3 names the region asked, '%s': check the S3 endpoint "
                   "and addressing", x->obj->name, code, extra, named);
    else
        sl_err_set(err, SL_E_IO, "%s: the bucket is in region '%s', not '%s' (HTTP %ld%s, %s): give its region "
                   "(--s3-region %s, Python's s3_region='%s', $AWS_REGION, sl_load_opts.s3_region)",
                   x->obj->name, named, asked, code, extra, where, named, named);
    if (named[0] && strcmp(named, asked) != 0 && c && c->note_region && !c->bucket_region[0])
        snprintf(c->bucket_region, sizeof c->bucket_region, "%s", named);
    /* a redirect or a location constraint that names no region: the open may ask S3 with a
     * HeadBucket (ckpt_remote.c), as botocore does */
    if (!named[0] && c && c->note_region)
        c->region_unnamed = 1;
    return XF_FAIL;
}

int xf_http_fail(sl_http_xfer *x, long code, sl_err *err)
{
    sl_http_s3_code(x->body, x->s3_code, sizeof x->s3_code);
    char extra[96] = "";
    if (x->s3_code[0])
        snprintf(extra, sizeof extra, ", %s", x->s3_code);
    if (wrong_region(x, code))
        return xf_region_fail(x, code, extra, err);
    if (code == 404)
        sl_err_set(err, SL_E_NOT_FOUND, "%s: not found (HTTP 404%s)", x->obj->name, extra);
    else if (code == 401 || code == 403)
        sl_err_set(err, SL_E_IO, "%s: access denied (HTTP %ld%s): check the credentials and the object's "
                   "permissions", x->obj->name, code, extra);
    else if (code == 412)
        sl_err_set(err, SL_E_CHANGED, "%s: object changed since its header was read (ETag no longer %s; "
                   "HTTP 412): not loaded", x->obj->name, x->obj->etag ? x->obj->etag : "?");
    else if (code == 416 && x->obj->size_known)
        sl_err_set(err, SL_E_CHANGED, "%s: object changed since its header was read (now shorter than "
                   "%" PRIu64 " bytes; HTTP 416): not loaded", x->obj->name, x->off + x->len);
    else if (code == 416)
        sl_err_set(err, SL_E_HEADER_TOO_SMALL, "%s: shorter than %" PRIu64 " bytes (HTTP 416)", x->obj->name,
                   x->off + x->len);
    else
        sl_err_set(err, SL_E_IO, "%s: HTTP %ld%s", x->obj->name, code, extra);
    return XF_FAIL;
}
