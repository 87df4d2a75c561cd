/* libFuzzer target for connection files (protocol/connfile.c).
 *
 * Invariant: a connection that parses is written to a real file and read
 * back unchanged, field for field. */
#include "autoconf.h"

#include "protocol/connfile.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/glovebox-fuzz-connfile-XXXXXX";
static char path[sizeof(dir) + 32];

static void fail(const char *what)
{
        fprintf(stderr, "fuzz-connfile: invariant broken: %s\n", what);
        abort();
}

static void cleanup(void)
{
        unlink(path);
        rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        if (!mkdtemp(dir))
                fail("mkdtemp");
        snprintf(path, sizeof(path), "%s/kernel.json", dir);
        atexit(cleanup);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct jp_connection conn, back;
        char err[128], endpoint[512];
        int rc;

        rc = jp_connection_parse((const char *)data, size, &conn, err, sizeof(err));
        if (rc != 0 && rc != -EINVAL)
                fail("unexpected error code");
        if (rc != 0)
                return 0;
        for (int c = 0; c < JP_CHANNEL_COUNT; c++) {
                if (conn.ports[c] < 0 || conn.ports[c] > 65535)
                        fail("a port out of range was accepted");
                rc = jp_connection_endpoint(&conn, (enum jp_channel)c, endpoint, sizeof(endpoint));
                if (rc != 0 && rc != -ENAMETOOLONG)
                        fail("unexpected endpoint error");
        }
        rc = jp_connection_write(&conn, path);
        if (rc != 0) {
                fprintf(stderr, "fuzz-connfile: write: %s\n", strerror(-rc));
                fail("a parsed connection cannot be written");
        }
        memset(&back, 0xa5, sizeof(back));
        rc = jp_connection_read(path, &back, err, sizeof(err));
        if (rc != 0) {
                fprintf(stderr, "fuzz-connfile: read: %s\n", err);
                fail("a written connection cannot be read");
        }
        if (memcmp(&conn, &back, sizeof(conn)) != 0)
                fail("read(write(conn)) differs from conn");
        return 0;
}
