/* Jupyter connection files: where a kernel's sockets live and how its
 * messages are signed. */
#ifndef GLOVEBOX_CONNFILE_H
#define GLOVEBOX_CONNFILE_H

#include "protocol/message.h"

#include <stddef.h>
#include <sys/types.h>

#define JP_CONNFILE_MAX (64 * 1024)

struct jp_connection {
        char transport[8];   /* "ipc" or "tcp" */
        char ip[200];        /* an address, or for ipc the socket path prefix */
        int ports[JP_CHANNEL_COUNT];
        char key[256];       /* the HMAC key as text, may be empty */
        char signature_scheme[32];
        char kernel_name[64];
};

/* Parses a connection file's JSON. 0 or -EINVAL with a reason in err. */
int jp_connection_parse(const char *json, size_t len, struct jp_connection *out, char *err,
                        size_t errlen);
/* Reads path (at most JP_CONNFILE_MAX bytes) and parses it. */
int jp_connection_read(const char *path, struct jp_connection *out, char *err, size_t errlen);
/* Writes conn to path with mode 0600 (created or truncated); 0 or -errno. */
int jp_connection_write(const struct jp_connection *conn, const char *path);
/* conn as the text of a connection file (the caller frees it), or NULL
 * when out of memory. */
char *jp_connection_dump(const struct jp_connection *conn);
/* Writes conn as a new file name in directory dirfd, mode 0600, owned by
 * uid:gid ((uid_t)-1, (gid_t)-1 keep ours). Whatever name was (a file, a
 * symlink someone planted) is removed, never followed; the new file is
 * created exclusively and changed through its descriptor only, so a name
 * swapped meanwhile makes the write fail (-EEXIST) rather than reach
 * another file. 0 or -errno. */
int jp_connection_write_at(const struct jp_connection *conn, int dirfd, const char *name,
                           uid_t uid, gid_t gid);
/* Writes the ZMQ endpoint of channel, e.g. "ipc:///run/k/kernel-1" or
 * "tcp://127.0.0.1:5555"; -ENAMETOOLONG when it does not fit. */
int jp_connection_endpoint(const struct jp_connection *conn, enum jp_channel channel, char *out,
                           size_t outlen);

#endif
