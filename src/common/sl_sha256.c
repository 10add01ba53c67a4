/* sl_sha256.c - SHA-256 through OpenSSL's EVP interface, or nothing (sl_sha256.h). */
#include "common/sl_sha256.h"
#include "common/sl_text.h"

#include <stdlib.h>

#if defined(SL_WITH_CRYPTO)
#include <openssl/evp.h>

struct sl_sha256 {
    EVP_MD_CTX *ctx;
};

int sl_sha256_available(void)
{
    return 1;
}

sl_sha256 *sl_sha256_new(void)
{
    sl_sha256 *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        sl_sha256_free(h);
        return NULL;
    }
    return h;
}

int sl_sha256_update(sl_sha256 *h, const void *data, size_t n)
{
    return EVP_DigestUpdate(h->ctx, data, n) == 1 ? 0 : -1;
}

int sl_sha256_final_hex(sl_sha256 *h, char out[SL_SHA256_HEX])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (EVP_DigestFinal_ex(h->ctx, md, &len) != 1 || len != SL_SHA256_LEN)
        return -1;
    for (unsigned i = 0; i < len; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[2 * len] = '\0';
    return 0;
}

void sl_sha256_free(sl_sha256 *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}
#else
struct sl_sha256 {
    int unused;
};

int sl_sha256_available(void)
{
    return 0;
}

sl_sha256 *sl_sha256_new(void)
{
    return NULL;
}

int sl_sha256_update(sl_sha256 *h, const void *data, size_t n)
{
    (void)h, (void)data, (void)n;
    return -1;
}

int sl_sha256_final_hex(sl_sha256 *h, char out[SL_SHA256_HEX])
{
    (void)h;
    out[0] = '\0';
    return -1;
}

void sl_sha256_free(sl_sha256 *h)
{
    free(h);
}
#endif

int sl_sha256_is_hex(const char *s, size_t n)
{
    return sl_text_is_hex(s, n, 2 * SL_SHA256_LEN);
}
