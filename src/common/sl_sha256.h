/* sl_sha256.h - SHA-256 for --verify (a Hugging Face cache blob is named by the SHA-256 of its
 * bytes; manifests are `sha256sum` files). OpenSSL's libcrypto does the work where the build has
 * it (SHA-NI, AVX2); without it sl_sha256_available() is 0 and verification is SL_E_UNSUPPORTED. */
#ifndef SL_SHA256_H
#define SL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SL_SHA256_LEN 32
#define SL_SHA256_HEX (2 * SL_SHA256_LEN + 1)

typedef struct sl_sha256 sl_sha256;

int sl_sha256_available(void);
/* NULL when out of memory or unavailable. */
sl_sha256 *sl_sha256_new(void);
/* 0 on success. */
int sl_sha256_update(sl_sha256 *h, const void *data, size_t n);
/* The digest as 64 lowercase hex digits and a NUL; 0 on success. The state cannot be updated
 * after. */
int sl_sha256_final_hex(sl_sha256 *h, char out[SL_SHA256_HEX]);
void sl_sha256_free(sl_sha256 *h);

/* s[0..n) is 64 lowercase hex digits. */
int sl_sha256_is_hex(const char *s, size_t n);

#endif /* SL_SHA256_H */
