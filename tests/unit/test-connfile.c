/* protocol/connfile.c: connection files as jupyter_client writes and reads them. */
#include "autoconf.h"

#include "protocol/connfile.h"
#include "tests/unit/tap.h"
#include "tests/unit/tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/glovebox-test-connfile-XXXXXX";
static char err[256];

static void path_in_tmp(char *out, size_t size, const char *name)
{
        snprintf(out, size, "%s/%s", tmpdir, name);
}

static struct jp_connection sample(void)
{
        struct jp_connection c;

        memset(&c, 0, sizeof(c));
        snprintf(c.transport, sizeof(c.transport), "ipc");
        snprintf(c.ip, sizeof(c.ip), "/run/glovebox/k1/kernel");
        for (int i = 0; i < JP_CHANNEL_COUNT; i++)
                c.ports[i] = 1 + i;
        snprintf(c.key, sizeof(c.key), "a0b1c2d3-\"quoted\"-\\-\xc3\xa9");
        snprintf(c.signature_scheme, sizeof(c.signature_scheme), "hmac-sha256");
        snprintf(c.kernel_name, sizeof(c.kernel_name), "python3");
        return c;
}

static int write_file(const char *path, const char *data, size_t len, mode_t mode)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
        ssize_t n;

        if (fd < 0)
                return -errno;
        n = write(fd, data, len);
        close(fd);
        return n == (ssize_t)len ? 0 : -EIO;
}

static void test_write_read(void)
{
        struct jp_connection c = sample(), back;
        char path[256], link[256];
        struct stat st;
        json_t *j;

        path_in_tmp(path, sizeof(path), "kernel-1.json");
        is_int(jp_connection_write(&c, path), 0, "write a connection file");
        memset(&st, 0, sizeof(st));
        is_int(stat(path, &st), 0, "stat the new file");
        is_int(st.st_mode & 07777, 0600, "it has mode 0600");
        memset(&back, 0x5a, sizeof(back));
        is_int(jp_connection_read(path, &back, err, sizeof(err)), 0, "read it back (%s)", err);
        ok(memcmp(&c, &back, sizeof(c)) == 0, "every field round-trips");
        is_str(back.key, c.key, "the key with quotes, backslash and UTF-8");

        /* What a kernel reads: jupyter_client's key names and types. */
        j = json_load_file(path, 0, NULL);
        ok(json_is_object(j), "the file is a JSON object");
        is_int(json_integer_value(json_object_get(j, "shell_port")), 1, "shell_port");
        is_int(json_integer_value(json_object_get(j, "control_port")), 2, "control_port");
        is_int(json_integer_value(json_object_get(j, "stdin_port")), 3, "stdin_port");
        is_int(json_integer_value(json_object_get(j, "iopub_port")), 4, "iopub_port");
        is_int(json_integer_value(json_object_get(j, "hb_port")), 5, "hb_port");
        is_str(json_string_value(json_object_get(j, "transport")), "ipc", "transport");
        is_str(json_string_value(json_object_get(j, "ip")), c.ip, "ip");
        is_str(json_string_value(json_object_get(j, "signature_scheme")), "hmac-sha256",
               "signature_scheme");
        is_str(json_string_value(json_object_get(j, "kernel_name")), "python3", "kernel_name");
        json_decref(j);

        /* Rewriting truncates: a shorter file must not keep a tail of the old one. */
        snprintf(c.ip, sizeof(c.ip), "/r");
        is_int(jp_connection_write(&c, path), 0, "rewrite with a shorter ip");
        is_int(jp_connection_read(path, &back, err, sizeof(err)), 0, "read the rewrite (%s)", err);
        is_str(back.ip, "/r", "the rewrite is read whole");

        /* The file holds the HMAC key: an existing file that others could
         * read must not stay readable once the key is written into it. */
        path_in_tmp(path, sizeof(path), "kernel-2.json");
        ok(write_file(path, "{}", 2, 0644) == 0 && chmod(path, 0644) == 0, "a file with mode 0644");
        is_int(jp_connection_write(&c, path), 0, "write over it");
        memset(&st, 0, sizeof(st));
        is_int(stat(path, &st), 0, "stat the rewritten file");
        is_int(st.st_mode & 07777, 0600, "it has mode 0600 afterwards");

        /* A symlink planted at the path is not followed. */
        path_in_tmp(path, sizeof(path), "target.json");
        path_in_tmp(link, sizeof(link), "link.json");
        ok(write_file(path, "untouched", 9, 0600) == 0 && symlink(path, link) == 0,
           "a symlink to another file");
        is_int(jp_connection_write(&c, link), -ELOOP, "writing through a symlink is refused");
        ok(stat(path, &st) == 0 && st.st_size == 9, "the symlink's target is untouched");

        path_in_tmp(path, sizeof(path), "no/such/dir.json");
        is_int(jp_connection_write(&c, path), -ENOENT, "a missing directory");
}

/* jp_connection_write_at: the form for a directory someone else owns. */
static void test_write_at(void)
{
        struct jp_connection c = sample(), back;
        char path[256], target[256];
        struct stat st;
        int dir = open(tmpdir, O_PATH | O_DIRECTORY | O_CLOEXEC);

        ok(dir >= 0, "open the directory");
        path_in_tmp(target, sizeof(target), "victim");
        ok(write_file(target, "untouched", 9, 0644) == 0, "a file someone wants to reach");
        path_in_tmp(path, sizeof(path), "planted.json");
        ok(symlink(target, path) == 0, "a symlink planted at the name");
        is_int(jp_connection_write_at(&c, dir, "planted.json", (uid_t)-1, (gid_t)-1), 0,
               "writing at the name succeeds");
        ok(lstat(path, &st) == 0 && S_ISREG(st.st_mode), "the name is a regular file now");
        is_int(st.st_mode & 07777, 0600, "of mode 0600");
        ok(stat(target, &st) == 0 && st.st_size == 9 && (st.st_mode & 07777) == 0644,
           "the symlink's target is untouched");
        is_int(jp_connection_read(path, &back, err, sizeof(err)), 0, "the file reads back (%s)",
               err);
        is_str(back.key, c.key, "with its key");

        /* The owner is set through the descriptor (as root: to another id). */
        if (geteuid() == 0) {
                is_int(jp_connection_write_at(&c, dir, "owned.json", 4242, 4343), 0,
                       "written for another owner");
                path_in_tmp(path, sizeof(path), "owned.json");
                ok(stat(path, &st) == 0 && st.st_uid == 4242 && st.st_gid == 4343,
                   "owned by 4242:4343 (%u:%u)", (unsigned)st.st_uid, (unsigned)st.st_gid);
        } else {
                diag("not root: giving a file away is not tried");
        }
        is_int(jp_connection_write_at(&c, dir, "../escape.json", (uid_t)-1, (gid_t)-1), -EINVAL,
               "a name with a slash is refused");
        is_int(jp_connection_write_at(&c, dir, "..", (uid_t)-1, (gid_t)-1), -EINVAL,
               "\"..\" is refused");
        close(dir);
}

static void test_read_errors(void)
{
        struct jp_connection c;
        char path[256];
        char *big;

        path_in_tmp(path, sizeof(path), "absent.json");
        err[0] = '\0';
        is_int(jp_connection_read(path, &c, err, sizeof(err)), -ENOENT, "a missing file");
        ok(err[0] != '\0', "with a reason: %s", err);

        big = malloc(JP_CONNFILE_MAX + 1);
        memset(big, ' ', JP_CONNFILE_MAX + 1);
        memcpy(big, "{\"ip\":\"x\"", 9);
        path_in_tmp(path, sizeof(path), "big.json");
        ok(write_file(path, big, JP_CONNFILE_MAX + 1, 0600) == 0, "a file over the maximum");
        is_int(jp_connection_read(path, &c, err, sizeof(err)), -EFBIG, "is refused: %s", err);

        /* A valid file padded with whitespace to one byte under the maximum. */
        {
                const char *json = "{\"ip\":\"127.0.0.1\",\"shell_port\":1,\"control_port\":2,"
                                   "\"stdin_port\":3,\"iopub_port\":4,\"hb_port\":5}";

                memset(big, ' ', JP_CONNFILE_MAX);
                memcpy(big, json, strlen(json));
                ok(write_file(path, big, JP_CONNFILE_MAX - 1, 0600) == 0,
                   "a valid file of %d bytes", JP_CONNFILE_MAX - 1);
                is_int(jp_connection_read(path, &c, err, sizeof(err)), 0,
                       "one byte under the maximum is read (%s)", err);
        }
        free(big);
}

static int parse(const char *json, struct jp_connection *c)
{
        err[0] = '\0';
        return jp_connection_parse(json, strlen(json), c, err, sizeof(err));
}

#define PORTS "\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,\"hb_port\":5"

static void test_parse(void)
{
        struct jp_connection c;
        char json[1024];
        char longs[300];

        is_int(parse("{\"ip\":\"127.0.0.1\"," PORTS "}", &c), 0, "the minimal file");
        is_str(c.transport, "tcp", "transport defaults to tcp");
        is_str(c.key, "", "key defaults to empty");
        is_str(c.signature_scheme, "hmac-sha256", "signature_scheme defaults to hmac-sha256");
        is_str(c.kernel_name, "", "kernel_name defaults to empty");
        ok(c.ports[JP_SHELL] == 1 && c.ports[JP_CONTROL] == 2 && c.ports[JP_STDIN] == 3 &&
               c.ports[JP_IOPUB] == 4 && c.ports[JP_HB] == 5,
           "ports land on their channels");

        is_int(parse("{\"shell_port\":53794,\"iopub_port\":40885,\"stdin_port\":58295,"
                     "\"control_port\":39271,\"hb_port\":45401,\"ip\":\"127.0.0.1\","
                     "\"key\":\"8f33d4ae-8dd0e1d9d3b4a52f0aa5fb5e\",\"transport\":\"tcp\","
                     "\"signature_scheme\":\"hmac-sha256\",\"kernel_name\":\"\","
                     "\"jupyter_session\":\"/x.ipynb\"}",
                     &c),
               0, "a file as jupyter_client writes it, with an extra member");
        is_str(c.key, "8f33d4ae-8dd0e1d9d3b4a52f0aa5fb5e", "its key");
        is_int(c.ports[JP_HB], 45401, "its hb port");
        is_int(parse("{\"ip\":\"x\",\"shell_port\":0,\"control_port\":65535,\"stdin_port\":3,"
                     "\"iopub_port\":4,\"hb_port\":5}",
                     &c),
               0, "ports 0 and 65535");

#define BAD(text, name)                                                                            \
        do {                                                                                       \
                is_int(parse(text, &c), -EINVAL, name);                                            \
                ok(err[0] != '\0', name ": reason \"%s\"", err);                                   \
        } while (0)
        BAD("", "empty");
        BAD("{", "truncated");
        BAD("[]", "an array");
        BAD("{" PORTS "}", "ip missing");
        BAD("{\"ip\":1," PORTS "}", "ip a number");
        BAD("{\"ip\":\"x\",\"key\":null," PORTS "}", "key null");
        BAD("{\"ip\":\"x\",\"key\":42," PORTS "}", "key a number");
        BAD("{\"ip\":\"x\",\"transport\":\"udp\"," PORTS "}", "transport udp");
        BAD("{\"ip\":\"x\",\"transport\":\"\"," PORTS "}", "transport empty");
        BAD("{\"ip\":\"x\",\"signature_scheme\":\"hmac-md5\"," PORTS "}", "hmac-md5");
        BAD("{\"ip\":\"x\",\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,"
            "\"iopub_port\":4}",
            "hb_port missing");
        BAD("{\"ip\":\"x\",\"shell_port\":-1,\"control_port\":2,\"stdin_port\":3,"
            "\"iopub_port\":4,\"hb_port\":5}",
            "a negative port");
        BAD("{\"ip\":\"x\",\"shell_port\":65536,\"control_port\":2,\"stdin_port\":3,"
            "\"iopub_port\":4,\"hb_port\":5}",
            "port 65536");
        BAD("{\"ip\":\"x\",\"shell_port\":\"5555\",\"control_port\":2,\"stdin_port\":3,"
            "\"iopub_port\":4,\"hb_port\":5}",
            "a port as a string");
        BAD("{\"ip\":\"x\",\"shell_port\":1.5,\"control_port\":2,\"stdin_port\":3,"
            "\"iopub_port\":4,\"hb_port\":5}",
            "a port as a float");
#undef BAD
        ok(strstr(err, "shell_port") != NULL, "the reason names the field: %s", err);

        memset(longs, 'a', sizeof(longs));
        snprintf(json, sizeof(json), "{\"ip\":\"%.*s\"," PORTS "}", (int)sizeof(c.ip) - 1, longs);
        is_int(parse(json, &c), 0, "ip of %zu characters", sizeof(c.ip) - 1);
        snprintf(json, sizeof(json), "{\"ip\":\"%.*s\"," PORTS "}", (int)sizeof(c.ip), longs);
        is_int(parse(json, &c), -EINVAL, "ip of %zu characters is refused", sizeof(c.ip));
        snprintf(json, sizeof(json), "{\"ip\":\"x\",\"key\":\"%.*s\"," PORTS "}",
                 (int)sizeof(c.key) - 1, longs);
        is_int(parse(json, &c), 0, "key of %zu characters", sizeof(c.key) - 1);
        snprintf(json, sizeof(json), "{\"ip\":\"x\",\"key\":\"%.*s\"," PORTS "}",
                 (int)sizeof(c.key), longs);
        is_int(parse(json, &c), -EINVAL, "key of %zu characters is refused", sizeof(c.key));
        {
                static const char padded[] = "{\"ip\":\"x\"," PORTS "}garbage";

                is_int(jp_connection_parse(padded, sizeof(padded) - 1 - strlen("garbage"), &c, err,
                                           sizeof(err)),
                       0, "only len bytes are parsed");
        }
}

static void test_endpoint(void)
{
        struct jp_connection c = sample();
        char out[64];

        c.ports[JP_IOPUB] = 5555;
        is_int(jp_connection_endpoint(&c, JP_IOPUB, out, sizeof(out)), 0, "ipc endpoint");
        is_str(out, "ipc:///run/glovebox/k1/kernel-5555", "ipc joins prefix and port with '-'");
        snprintf(c.transport, sizeof(c.transport), "tcp");
        snprintf(c.ip, sizeof(c.ip), "127.0.0.1");
        is_int(jp_connection_endpoint(&c, JP_SHELL, out, sizeof(out)), 0, "tcp endpoint");
        is_str(out, "tcp://127.0.0.1:1", "tcp joins address and port with ':'");
        is_int(jp_connection_endpoint(&c, JP_SHELL, out, strlen("tcp://127.0.0.1:1") + 1), 0,
               "an exact fit");
        is_int(jp_connection_endpoint(&c, JP_SHELL, out, strlen("tcp://127.0.0.1:1")),
               -ENAMETOOLONG, "one byte short");
}

int main(void)
{
        if (!mkdtemp(tmpdir))
                BAIL_OUT("mkdtemp: %s", strerror(errno));
        test_write_read();
        test_write_at();
        test_read_errors();
        test_parse();
        test_endpoint();
        if (tmpdir_remove(tmpdir) < 0)
                diag("could not remove %s", tmpdir);
        return done_testing();
}
