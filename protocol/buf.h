/* A growable byte buffer with a hard maximum.
 *
 * Every buffer that may hold untrusted input is created with the maximum it
 * may reach; appends beyond it fail with -E2BIG instead of growing, so a
 * peer can never make us allocate more than a configured amount. The data is
 * always NUL-terminated (the terminator is not counted in len). */
#ifndef GLOVEBOX_BUF_H
#define GLOVEBOX_BUF_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct buf {
        char *data;
        size_t len;
        size_t cap;
        size_t max;
};

void buf_init(struct buf *b, size_t max);
/* Returns 0, -E2BIG past the maximum, or -ENOMEM. */
int buf_append(struct buf *b, const void *data, size_t len);
int buf_append_str(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes included. */
int buf_append_json_string(struct buf *b, const char *s, size_t len);
/* Makes room for extra more bytes without adding any (one allocation for
 * what is about to be appended). 0, -E2BIG or -ENOMEM. */
int buf_reserve(struct buf *b, size_t extra);
/* Makes room for len more bytes and returns a pointer to them (len is added). */
int buf_grow(struct buf *b, size_t len, char **out);
void buf_reset(struct buf *b);
/* Frees the storage; the buffer may be reused after buf_init. */
void buf_free(struct buf *b);
/* Hands the storage to the caller, who frees it with free(); leaves b empty. */
char *buf_steal(struct buf *b, size_t *len);
/* Appends data in base64 (RFC 4648, padded); -E2BIG past the maximum. */
int buf_append_base64(struct buf *out, const uint8_t *data, size_t len);
/* Appends the bytes of the base64 text in (either alphabet, padding
 * optional); -EINVAL on a character of neither, -E2BIG past the maximum. */
int buf_append_unbase64(struct buf *out, const char *in);

/* Reads at most size-1 bytes of the file at path (a final symlink is not
 * followed) into out, NUL-terminated: the length read, or -errno. For the
 * small files of /proc and cgroupfs. */
ssize_t read_small_file(const char *path, char *out, size_t size);
/* Reads fd from its offset to its end onto b in blocks of 64 KiB: 0,
 * -E2BIG past b's maximum, -ENOMEM or -errno. */
int buf_read_fd(struct buf *b, int fd);
/* The JSON document fd holds (from its offset to its end), read whole with
 * buf_read_fd and parsed with flags: jansson's json_loadfd reads it one
 * byte per read(2), some 3,000 calls for a checkpoint's manifest. NULL
 * when it is not JSON or is longer than max bytes, with err (if given)
 * saying which. */
json_t *json_read_fd(int fd, size_t max, size_t flags, json_error_t *err);
/* The path of the executable name in the running program's own directory
 * (the build tree, or where it is installed) into out: 0, or -ENOENT when
 * it is not there or not executable. */
int program_beside_self(const char *name, char *out, size_t size);
/* The same for any file that access(2) allows for mode (R_OK: a module). */
int file_beside_self(const char *name, int mode, char *out, size_t size);
/* True when the running program is the one in the build tree it was built
 * in: only then may it read the source tree (its page, its own kernels);
 * installed, it reads its installed files, even where that tree remains. */
bool program_in_build_tree(void);

#endif
