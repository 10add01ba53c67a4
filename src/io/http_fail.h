/* http_fail.h - what an HTTP status that ends a GET means (http_fail.c). */
#ifndef SL_IO_HTTP_FAIL_H
#define SL_IO_HTTP_FAIL_H

#include "io/http_xfer.h"

/* x's attempt answered with code, not 2xx and not retried (xf_finish): err set to one line naming
 * x's object (SL_E_NOT_FOUND for a 404, SL_E_CHANGED for a 412 or a 416 past the size the open
 * saw, SL_E_HEADER_TOO_SMALL for another 416, else SL_E_IO), S3's <Code> read from x's body into
 * x->s3_code. Returns XF_FAIL. */
int xf_http_fail(sl_http_xfer *x, long code, sl_err *err);

#endif /* SL_IO_HTTP_FAIL_H */
