/* Random identifiers and UTC timestamps in the forms Jupyter uses. */
#ifndef GLOVEBOX_IDS_H
#define GLOVEBOX_IDS_H

#include <stddef.h>
#include <time.h>

#define JP_UUID_SIZE      37 /* 36 characters and a NUL */
#define JP_TIMESTAMP_SIZE 28 /* "2026-11-30T06:13:45.123456Z" and a NUL */

/* Fills out with n random bytes from the kernel's CSPRNG; 0 or -errno. */
int jp_random_bytes(void *out, size_t n);
/* Writes a random (version 4) UUID such as "1b4e28ba-2fa1-41d2-883f-0016d3cca427". */
int jp_uuid4(char out[JP_UUID_SIZE]);
/* The id that what is old in base becomes, a version 4 UUID drawn from
 * both (an HMAC-SHA256 of old under base): the kernel-host and the gateway
 * name a copy's processes alike without telling each other. */
void jp_uuid_derive(const char *base, const char *old, char out[JP_UUID_SIZE]);
/* Writes 2*nbytes lowercase hex characters and a NUL (out holds 2*nbytes+1). */
int jp_random_hex(char *out, size_t nbytes);
/* ISO-8601 UTC with microseconds and "Z", as Jupyter Server's last_activity. */
void jp_timestamp_format(const struct timespec *when, char out[JP_TIMESTAMP_SIZE]);
void jp_timestamp_now(char out[JP_TIMESTAMP_SIZE]);
/* True when s is a canonical lowercase UUID (36 characters, hyphens at 8, 13, 18, 23). */
int jp_uuid_valid(const char *s, size_t len);

#endif
