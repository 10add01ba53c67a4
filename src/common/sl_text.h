/* sl_text.h - text from files and paths, made fit for a one-line message: control bytes shown as
 * \xNN (a name or an index could otherwise end the line, forge a second "shardload: error:" line
 * or send escape sequences to a terminal), and bounded (a 1 MB tensor name is not a 1 MB line). */
#ifndef SL_TEXT_H
#define SL_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Room for a name cut at about 120 bytes, escapes and "..." included. */
#define SL_TEXT_NAME 160
/* Longest message a handle keeps (sl_err): longer ones are cut with "...". */
#define SL_TEXT_MSG_MAX 4096

/* A bounded, printable copy of s[0..n) in buf: bytes below 0x20 and 0x7F as \xNN, cut with "..."
 * when buf is full. Returns buf. */
const char *sl_text_display(const char *s, size_t n, char *buf, size_t buflen);
/* The same for a NUL-terminated string (NULL shows as "?"). */
const char *sl_text_name(const char *s, char *buf, size_t buflen);
/* Whether the JSON number s[0..n) (its grammar checked) is beyond a double: parsers refuse it
 * ("number out of range"; an underflow to 0 is accepted). Read in the C locale whatever the
 * thread's (a host program's may write decimals with a comma). 0 when out of memory. */
int sl_text_number_inf(const char *s, size_t n);
/* Room for a shape of up to 8 dimensions as sl_text_shape writes it. */
#define SL_TEXT_SHAPE 224
/* A shape as "[a, b, c]", its first 8 dimensions only ("[1, 1, ... (10000 dims)]": a shape can
 * have 10,000 and would push the rest of its message past SL_TEXT_MSG_MAX). Returns buf. */
const char *sl_text_shape(const uint64_t *shape, uint32_t ndim, char *buf, size_t buflen);
/* A malloc'd copy of msg with control bytes as \xNN, cut at max bytes with "..."; NULL when out of
 * memory. */
char *sl_text_sanitize(const char *msg, size_t max);
/* Strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF, no sequence cut short):
 * the offset of the first byte of s[0..n) that begins no valid sequence, or n when all is valid.
 * The safetensors header (st_utf8_check) and the keys of an S3 listing are checked with it. */
size_t sl_text_utf8_check(const unsigned char *s, size_t n);
/* Code point cp (at most U+10FFFF, not a surrogate: the caller's check) as UTF-8 at o: 1 to 4
 * bytes, their count returned. The JSON header's \u escapes and an S3 page's references decode
 * with it. */
size_t sl_text_utf8_put(char *o, uint32_t cp);
/* FNV-1a of the NUL-terminated s: the planner's name tables hash with it. */
uint64_t sl_text_hash(const char *s);
/* Whether c is an ASCII letter or digit, whatever the locale (isalnum follows it: in a Latin-1
 * locale 0xE9 is a letter, and a URL built with it would differ from the one SigV4 signs). */
int sl_text_ascii_alnum(int c);
/* The value of hexadecimal digit c (either case), or -1 when c is not one. */
int sl_text_hex_digit(int c);
/* s[0..n) is exactly `digits` lowercase hexadecimal digits (a git commit, a SHA-256). */
int sl_text_is_hex(const char *s, size_t n, size_t digits);
/* Whether msg needs sl_text_sanitize (a control byte, or longer than max). */
int sl_text_needs_sanitize(const char *msg, size_t max);

#endif /* SL_TEXT_H */
