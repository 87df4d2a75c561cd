/* protocol/hostmsg.h: the typed messages between the gateway and the
 * kernel-host, over a real SOCK_SEQPACKET socketpair, with the descriptors
 * some of them carry. */
#include "autoconf.h"

#include "protocol/hostmsg.h"
#include "tests/unit/tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static int sock[2];

static const char kid[] = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"; /* a process */
static const char sid[] = "6fa459ea-ee8a-4ca4-894e-db77e160355e"; /* a sandbox */

/* Sends body (consumed) as type on sock[0] with nsend descriptors and
 * receives it on sock[1]; returns the received body (caller decrefs) or
 * NULL. The descriptors that came with it are stored in got (room for
 * HOSTMSG_MAX_FDS) and are the caller's to close; there must be nsend. */
static json_t *transfer_fds(enum hostmsg_type type, json_t *body, const int *send_fds, size_t nsend,
                            int *got, const char *name)
{
        enum hostmsg_type got_type = 0;
        json_t *back = NULL;
        size_t ngot = 99;

        ok(body != NULL, "%s: encodes", name);
        is_int(hostmsg_send(sock[0], type, body, send_fds, nsend), 0, "%s: sends", name);
        is_int(hostmsg_recv(sock[1], &got_type, &back, got, &ngot), 0, "%s: receives", name);
        is_int(got_type, type, "%s: type survives", name);
        is_uint(ngot, nsend, "%s: %zu descriptors with it", name, nsend);
        json_decref(body);
        return back;
}

static json_t *transfer(enum hostmsg_type type, json_t *body, const char *name)
{
        int got[HOSTMSG_MAX_FDS];

        return transfer_fds(type, body, NULL, 0, got, name);
}

static size_t strv_length(char **v)
{
        size_t n = 0;

        while (v && v[n])
                n++;
        return n;
}

/* SANDBOX_CREATE's body with field set to each of bad, then to a number:
 * each refused. */
static void sandbox_refuses(json_t *body, const char *field, const char *const *bad, size_t n)
{
        struct hostmsg_sandbox back;

        for (size_t i = 0; i < n; i++) {
                json_object_set_new(body, field, json_string(bad[i]));
                is_int(hostmsg_sandbox_decode(body, &back), -EBADMSG,
                       "SANDBOX_CREATE: %s \"%s\" refused", field, bad[i]);
        }
        json_object_set_new(body, field, json_integer(1));
        is_int(hostmsg_sandbox_decode(body, &back), -EBADMSG, "SANDBOX_CREATE: %s a number refused",
               field);
}

static void test_sandbox(void)
{
        char *ro_paths[] = {"/usr/share/jupyter/kernels/python3", "/opt/ünïcode kernels/r", "/",
                            NULL};
        struct hostmsg_sandbox m = {.ro_paths = ro_paths, .sandbox = true}, back;
        json_t *body;
        size_t n;

        memcpy(m.sandbox_id, sid, sizeof(sid));
        m.limits = (struct hostmsg_limits){
            .memory_mb = 1 << 24, .cpu_millis = 1500, .pids = 1 << 22, .disk_mb = 1};

        body = transfer(HOSTMSG_SANDBOX_CREATE, hostmsg_sandbox_encode(&m), "SANDBOX_CREATE");
        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_sandbox_decode(body, &back), 0, "SANDBOX_CREATE: decodes");
        is_str(back.sandbox_id, sid, "SANDBOX_CREATE: sandbox_id");
        is_uint(back.limits.memory_mb, 1 << 24, "SANDBOX_CREATE: memory_mb at its maximum");
        is_uint(back.limits.cpu_millis, 1500, "SANDBOX_CREATE: cpu_millis");
        is_uint(back.limits.pids, 1 << 22, "SANDBOX_CREATE: pids at its maximum");
        is_uint(back.limits.disk_mb, 1, "SANDBOX_CREATE: disk_mb at its minimum");
        n = strv_length(back.ro_paths);
        is_uint(n, 3, "SANDBOX_CREATE: ro_paths length");
        for (size_t i = 0; i < n && i < 3; i++)
                is_str(back.ro_paths[i], ro_paths[i], "SANDBOX_CREATE: ro_paths[%zu]", i);
        is_int(back.sandbox, true, "SANDBOX_CREATE: sandbox");
        is_str(back.template_root, "", "SANDBOX_CREATE: no template");
        is_str(back.tenant, "", "SANDBOX_CREATE: no tenant");
        ok(!json_object_get(body, "tenant"), "SANDBOX_CREATE: none sent");
        hostmsg_sandbox_clear(&back);
        ok(back.ro_paths == NULL, "SANDBOX_CREATE: clear releases ro_paths");
        hostmsg_sandbox_clear(&back);
        json_decref(body);

        /* A template's tree; paths overlayfs would misread are refused. */
        snprintf(m.template_root, sizeof(m.template_root), "/srv/templates/ds 1");
        body = transfer(HOSTMSG_SANDBOX_CREATE, hostmsg_sandbox_encode(&m),
                        "SANDBOX_CREATE with a template");
        is_int(hostmsg_sandbox_decode(body, &back), 0, "SANDBOX_CREATE with a template: decodes");
        is_str(back.template_root, "/srv/templates/ds 1", "SANDBOX_CREATE: template_root");
        hostmsg_sandbox_clear(&back);
        {
                static const char *const bad[] = {"relative",  "/a:b",  "/a,upperdir=/x",
                                                  "/a/../etc", "/a\\b", ""};

                sandbox_refuses(body, "template_root", bad, sizeof(bad) / sizeof(bad[0]));
        }
        json_decref(body);
        m.template_root[0] = '\0';

        /* A built template's layers and a build's new one: ids (they name
         * files of the kernel-host's), in order, at most
         * HOSTMSG_MAX_LAYERS. */
        {
                char *layers[] = {"0b6f2c5a-1d3e-4f70-8a9b-0c1d2e3f4a5b",
                                  "6fa459ea-ee8a-4ca4-894e-db77e1603551", NULL};
                json_t *many = json_array();

                m.layers = layers;
                snprintf(m.build_layer, sizeof(m.build_layer), "%s",
                         "11111111-2222-4333-8444-555555555555");
                m.build_layer_mb = 4096;
                body = transfer(HOSTMSG_SANDBOX_CREATE, hostmsg_sandbox_encode(&m),
                                "SANDBOX_CREATE with layers");
                is_int(hostmsg_sandbox_decode(body, &back), 0,
                       "SANDBOX_CREATE with layers: decodes");
                is_uint(strv_length(back.layers), 2, "SANDBOX_CREATE: two layers");
                for (size_t i = 0; back.layers && i < 2; i++)
                        is_str(back.layers[i], layers[i], "SANDBOX_CREATE: layers[%zu]", i);
                is_str(back.build_layer, m.build_layer, "SANDBOX_CREATE: build_layer");
                is_uint(back.build_layer_mb, 4096, "SANDBOX_CREATE: build_layer_mb");
                hostmsg_sandbox_clear(&back);
                ok(back.layers == NULL, "SANDBOX_CREATE: clear releases layers");
                json_object_set_new(body, "layers", json_pack("[s]", "../../etc/shadow"));
                is_int(hostmsg_sandbox_decode(body, &back), -EBADMSG,
                       "SANDBOX_CREATE: a layer that is no id refused");
                for (int i = 0; i <= HOSTMSG_MAX_LAYERS; i++)
                        json_array_append_new(many, json_string(layers[0]));
                json_object_set_new(body, "layers", many);
                is_int(hostmsg_sandbox_decode(body, &back), -EBADMSG,
                       "SANDBOX_CREATE: more than %d layers refused", HOSTMSG_MAX_LAYERS);
                json_object_del(body, "layers");
                json_object_set_new(body, "build_layer", json_string("x/../y"));
                is_int(hostmsg_sandbox_decode(body, &back), -EBADMSG,
                       "SANDBOX_CREATE: a build layer that is no id refused");
                json_object_set_new(body, "build_layer", json_string(layers[0]));
                json_object_set_new(body, "build_layer_mb", json_integer(0));
                is_int(hostmsg_sandbox_decode(body, &back), -EBADMSG,
                       "SANDBOX_CREATE: a build layer of 0 MiB refused");
                json_decref(body);
                m.layers = NULL;
                m.build_layer[0] = '\0';
        }
        /* The tenant a sandbox made ahead is taken for: a key's name. */
        snprintf(m.tenant, sizeof(m.tenant), "alice.ops-1");
        body = transfer(HOSTMSG_SANDBOX_CREATE, hostmsg_sandbox_encode(&m),
                        "SANDBOX_CREATE for a tenant");
        is_int(hostmsg_sandbox_decode(body, &back), 0, "SANDBOX_CREATE for a tenant: decodes");
        is_str(back.tenant, "alice.ops-1", "SANDBOX_CREATE: tenant");
        hostmsg_sandbox_clear(&back);
        {
                static const char *const bad[] = {
                    "", "a/b", "a b", "a;b",
                    "0123456789012345678901234567890123456789012345678901234567890123"};

                sandbox_refuses(body, "tenant", bad, sizeof(bad) / sizeof(bad[0]));
        }
        json_decref(body);
        m.tenant[0] = '\0';
        {
                struct hostmsg_layer l = {.error = ENOSPC}, lb;

                snprintf(l.id, sizeof(l.id), "%s", sid);
                body = transfer(HOSTMSG_LAYER_SEALED, hostmsg_layer_encode(&l), "LAYER_SEALED");
                is_int(hostmsg_layer_decode(body, &lb), 0, "LAYER_SEALED: decodes");
                is_str(lb.id, sid, "LAYER_SEALED: id");
                is_int(lb.error, ENOSPC, "LAYER_SEALED: error");
                json_object_set_new(body, "id", json_string("../x"));
                is_int(hostmsg_layer_decode(body, &lb), -EBADMSG, "LAYER_SEALED: a bad id refused");
                json_decref(body);
        }

        /* --sandbox=none, and a caller with no paths to bind. */
        m.sandbox = false;
        m.ro_paths = NULL;
        body = transfer(HOSTMSG_SANDBOX_CREATE, hostmsg_sandbox_encode(&m),
                        "SANDBOX_CREATE without ro_paths");
        is_int(hostmsg_sandbox_decode(body, &back), 0, "SANDBOX_CREATE without ro_paths: decodes");
        ok(back.ro_paths && back.ro_paths[0] == NULL,
           "SANDBOX_CREATE without ro_paths: an empty list, not NULL");
        is_int(back.sandbox, false, "SANDBOX_CREATE without ro_paths: no sandbox");
        hostmsg_sandbox_clear(&back);
        json_decref(body);
}

#define LONG_NAME "0123456789012345678901234567890123456789"

static void test_sandbox_ready(void)
{
        struct hostmsg_sandbox_ready m = {.init_pid = 31337,
                                          .user_uid = UINT32_MAX - 1,
                                          .user_gid = 100000},
                                     back;
        struct stat want, got;
        int root_fd, got_fds[HOSTMSG_MAX_FDS] = {-1, -1, -1};
        json_t *body;

        memcpy(m.sandbox_id, sid, sizeof(sid));
        snprintf(m.root, sizeof(m.root), "/proc/%d/root", m.init_pid);

        /* The kernel-host sends the sandbox's root directory as an O_PATH
         * descriptor: the same directory must arrive. */
        root_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0 || fstat(root_fd, &want) < 0)
                BAIL_OUT("open /: %s", strerror(errno));
        body = transfer_fds(HOSTMSG_SANDBOX_READY, hostmsg_sandbox_ready_encode(&m), &root_fd, 1,
                            got_fds, "SANDBOX_READY");
        ok(fstat(got_fds[0], &got) == 0 && got.st_dev == want.st_dev && got.st_ino == want.st_ino,
           "SANDBOX_READY: the root descriptor names the same directory");
        close(got_fds[0]);
        close(root_fd);
        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_sandbox_ready_decode(body, &back), 0, "SANDBOX_READY: decodes");
        is_str(back.sandbox_id, sid, "SANDBOX_READY: sandbox_id");
        is_int(back.init_pid, 31337, "SANDBOX_READY: init_pid");
        is_uint(back.user_uid, UINT32_MAX - 1, "SANDBOX_READY: user_uid at its maximum");
        is_uint(back.user_gid, 100000, "SANDBOX_READY: user_gid");
        is_str(back.root, "/proc/31337/root", "SANDBOX_READY: root");
        is_int(back.has_root, false, "SANDBOX_READY: no root of its own unless said");
        is_str(back.cgroup, "", "SANDBOX_READY: its cgroup named after its id unless said");
        json_decref(body);

        /* A sandbox made ahead on cgroup v2 keeps its group's name: a plain
         * name, never a path. */
        snprintf(m.cgroup, sizeof(m.cgroup), "stock-12");
        body = transfer(HOSTMSG_SANDBOX_READY, hostmsg_sandbox_ready_encode(&m),
                        "SANDBOX_READY with a cgroup");
        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_sandbox_ready_decode(body, &back), 0,
               "SANDBOX_READY with a cgroup: decodes");
        is_str(back.cgroup, "stock-12", "SANDBOX_READY: its cgroup's name");
        {
                /* Empty, a path, a space, past its size. */
                const char *bad[] = {"", "..", "a/b", "../stock-1", "stock 1", LONG_NAME};

                for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                        json_object_set_new(body, "cgroup", json_string(bad[i]));
                        is_int(hostmsg_sandbox_ready_decode(body, &back), -EBADMSG,
                               "SANDBOX_READY: a cgroup name %s is refused", bad[i]);
                }
        }
        json_decref(body);
        m.cgroup[0] = '\0';

        /* A sandbox's own root: an unprivileged host id, never host root. */
        m.has_root = true;
        m.root_uid = 1000000;
        m.root_gid = 1000002;
        body = transfer(HOSTMSG_SANDBOX_READY, hostmsg_sandbox_ready_encode(&m),
                        "SANDBOX_READY with a root");
        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_sandbox_ready_decode(body, &back), 0, "SANDBOX_READY with a root: decodes");
        ok(back.has_root && back.root_uid == 1000000 && back.root_gid == 1000002,
           "SANDBOX_READY with a root: its host ids");
        json_object_set_new(body, "root_uid", json_integer(0));
        is_int(hostmsg_sandbox_ready_decode(body, &back), -EBADMSG,
               "SANDBOX_READY: host root as the sandbox's root is refused");
        json_object_set_new(body, "root_uid", json_string("1"));
        is_int(hostmsg_sandbox_ready_decode(body, &back), -EBADMSG,
               "SANDBOX_READY: a root_uid that is not a number is refused");
        json_decref(body);
        m.has_root = false;

        /* A restored sandbox's egress and volumes, as its checkpoint kept
         * them (issue 24): carried whole, and checked as a request's. */
        {
                char *allow[] = {"198.18.0.0/15", "example.com", NULL}, *deny[] = {NULL};
                char *volumes[] = {"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d:/data", NULL};

                m.network = (struct hostmsg_network){
                    .enabled = true, .allow = allow, .deny = deny, .rate_kib = 64};
                m.volumes = volumes;
                body = transfer(HOSTMSG_SANDBOX_READY, hostmsg_sandbox_ready_encode(&m),
                                "SANDBOX_READY of a restore");
                memset(&back, 0x5a, sizeof(back));
                is_int(hostmsg_sandbox_ready_decode(body, &back), 0,
                       "SANDBOX_READY of a restore: decodes");
                ok(back.network.enabled && back.network.allow &&
                       strcmp(back.network.allow[1], "example.com") == 0 &&
                       !back.network.allow[2] && back.network.rate_kib == 64,
                   "SANDBOX_READY of a restore: its egress");
                ok(back.volumes && strcmp(back.volumes[0], volumes[0]) == 0 && !back.volumes[1],
                   "SANDBOX_READY of a restore: its volumes");
                hostmsg_sandbox_ready_clear(&back);
                ok(!back.network.enabled && !back.network.allow && !back.volumes,
                   "SANDBOX_READY: clear releases both");
                json_array_set_new(json_object_get(body, "volumes"), 0,
                                   json_string("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d:/proc"));
                is_int(hostmsg_sandbox_ready_decode(body, &back), -EBADMSG,
                       "SANDBOX_READY: a volume at a path of the sandbox's own is refused");
                ok(!back.volumes && !back.network.allow,
                   "SANDBOX_READY: nothing is held after a refusal");
                json_decref(body);
                m.network = (struct hostmsg_network){0};
                m.volumes = NULL;
        }

        /* Without a sandbox there is no init: pid 0, and root is a plain
         * directory. */
        m.init_pid = 0;
        m.user_uid = m.user_gid = 0;
        snprintf(m.root, sizeof(m.root), "/var/lib/glovebox/sandboxes/%s", sid);
        body = transfer(HOSTMSG_SANDBOX_READY, hostmsg_sandbox_ready_encode(&m),
                        "SANDBOX_READY without a sandbox");
        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_sandbox_ready_decode(body, &back), 0,
               "SANDBOX_READY without a sandbox: decodes");
        ok(back.init_pid == 0 && back.user_uid == 0 && back.user_gid == 0 &&
               strcmp(back.root, m.root) == 0,
           "SANDBOX_READY without a sandbox: every field");
        json_decref(body);
}

static void test_start(void)
{
        char *argv[] = {"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}",
                        "ünïcode",          NULL};
        char *env[] = {"PATH=/usr/bin:/bin", "EMPTY=", "A=b=c", NULL};
        struct hostmsg_start m = {.kernel = true}, back;
        json_t *body;
        size_t n;

        memcpy(m.id, kid, sizeof(kid));
        memcpy(m.sandbox_id, sid, sizeof(sid));
        snprintf(m.kernelspec_dir, sizeof(m.kernelspec_dir), "/usr/share/jupyter/kernels/python3");
        snprintf(m.key, sizeof(m.key), "0123456789abcdef0123456789abcdef");
        m.argv = argv;
        m.env = env;

        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START");
        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_start_decode(body, &back), 0, "START: decodes");
        is_str(back.id, kid, "START: id");
        is_str(back.sandbox_id, sid, "START: sandbox_id");
        is_int(back.kernel, true, "START: kernel");
        is_str(back.kernelspec_dir, m.kernelspec_dir, "START: kernelspec_dir");
        is_str(back.key, m.key, "START: key");
        is_str(back.cwd, "", "START: cwd empty (the home directory)");
        is_int(back.tcp_bridge, false, "START: no TCP bridge unless asked");
        n = strv_length(back.argv);
        is_uint(n, 6, "START: argv length");
        for (size_t i = 0; i < n && i < 6; i++)
                is_str(back.argv[i], argv[i], "START: argv[%zu]", i);
        n = strv_length(back.env);
        is_uint(n, 3, "START: env length");
        for (size_t i = 0; i < n && i < 3; i++)
                is_str(back.env[i], env[i], "START: env[%zu]", i);
        hostmsg_start_clear(&back);
        ok(back.argv == NULL && back.env == NULL, "START: clear releases argv and env");
        hostmsg_start_clear(&back);
        json_decref(body);

        /* A TCP-only kernel (ijavascript, tslab) runs under the bridge. */
        m.tcp_bridge = true;
        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START a TCP-only kernel");
        is_int(hostmsg_start_decode(body, &back), 0, "START a TCP-only kernel: decodes");
        is_int(back.tcp_bridge, true, "START a TCP-only kernel: tcp_bridge");
        hostmsg_start_clear(&back);
        json_object_set_new(body, "tcp_bridge", json_string("yes"));
        is_int(hostmsg_start_decode(body, &back), -EBADMSG,
               "START: a tcp_bridge that is not a boolean is refused");
        json_object_set_new(body, "tcp_bridge", json_true());
        json_object_set_new(body, "kernel", json_false());
        is_int(hostmsg_start_decode(body, &back), 0, "START a command with tcp_bridge: decodes");
        is_int(back.tcp_bridge, false, "START: only a kernel runs under the bridge");
        hostmsg_start_clear(&back);
        json_decref(body);
        m.tcp_bridge = false;

        /* A kernel forked from its kernelspec's zygote. */
        snprintf(m.zygote, sizeof(m.zygote), "python3");
        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START from a zygote");
        is_int(hostmsg_start_decode(body, &back), 0, "START from a zygote: decodes");
        is_str(back.zygote, "python3", "START from a zygote: its name");
        hostmsg_start_clear(&back);
        json_object_set_new(body, "zygote", json_integer(3));
        is_int(hostmsg_start_decode(body, &back), -EBADMSG,
               "START: a zygote that is not a string is refused");
        json_decref(body);
        m.zygote[0] = '\0';
        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START without a zygote");
        ok(json_object_get(body, "zygote") == NULL, "START: no zygote unless asked");
        is_int(hostmsg_start_decode(body, &back), 0, "START without a zygote: decodes");
        is_str(back.zygote, "", "START without a zygote: none");
        hostmsg_start_clear(&back);
        json_decref(body);

        /* A command: no kernel, a working directory, no environment. */
        m.kernel = false;
        m.kernelspec_dir[0] = m.key[0] = '\0';
        snprintf(m.cwd, sizeof(m.cwd), "/home/user/work dir");
        m.env = (char *[]){NULL};
        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START a command");
        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_start_decode(body, &back), 0, "START a command: decodes");
        is_int(back.kernel, false, "START a command: kernel false");
        is_str(back.cwd, "/home/user/work dir", "START a command: cwd");
        ok(back.kernelspec_dir[0] == '\0' && back.key[0] == '\0',
           "START a command: empty kernelspec_dir and key");
        ok(back.env && back.env[0] == NULL, "START a command: empty env, not NULL");
        is_int(back.pty, false, "START a command: no terminal unless asked");
        is_int(back.as_root, false, "START a command: as the user unless said");
        hostmsg_start_clear(&back);
        json_decref(body);

        /* A command on a terminal, with its size. */
        m.pty = true;
        m.rows = 40;
        m.cols = 132;
        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START a terminal");
        is_int(hostmsg_start_decode(body, &back), 0, "START a terminal: decodes");
        ok(back.pty && back.rows == 40 && back.cols == 132, "START a terminal: pty %d, %ux%u",
           back.pty, back.rows, back.cols);
        hostmsg_start_clear(&back);
        json_object_set_new(json_object_get(body, "pty"), "rows", json_integer(70000));
        is_int(hostmsg_start_decode(body, &back), -EBADMSG,
               "START a terminal: a size past 65535 is refused");
        json_object_set_new(json_object_get(body, "pty"), "rows", json_integer(24));
        json_object_set_new(body, "kernel", json_true());
        is_int(hostmsg_start_decode(body, &back), -EBADMSG,
               "START a kernel on a terminal is refused");
        json_decref(body);
        m.pty = false;

        /* A command as the sandbox's root; a kernel never is. */
        m.as_root = true;
        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START a command as root");
        is_int(hostmsg_start_decode(body, &back), 0, "START a command as root: decodes");
        is_int(back.as_root, true, "START a command as root: as_root");
        hostmsg_start_clear(&back);
        json_object_set_new(body, "as_root", json_integer(1));
        is_int(hostmsg_start_decode(body, &back), -EBADMSG,
               "START: an as_root that is not a boolean is refused");
        json_object_set_new(body, "as_root", json_true());
        json_object_set_new(body, "kernel", json_true());
        is_int(hostmsg_start_decode(body, &back), 0, "START a kernel with as_root: decodes");
        is_int(back.as_root, false, "START: a kernel never runs as root");
        hostmsg_start_clear(&back);
        json_decref(body);
        m.as_root = false;
}

static void test_replies(void)
{
        struct hostmsg_started st = {.pid = 4242}, st2;
        struct hostmsg_failed fl = {.error = ENOENT}, fl2;
        struct hostmsg_signal sg = {.signal = SIGINT}, sg2;
        struct hostmsg_exit ex = {.pid = 4242, .exit_code = -1, .signal = SIGKILL}, ex2;
        json_t *body;

        memcpy(st.id, kid, sizeof(kid));
        snprintf(st.ipc_prefix, sizeof(st.ipc_prefix), "/run/glovebox/%s/kernel", kid);
        body = transfer(HOSTMSG_STARTED, hostmsg_started_encode(&st), "STARTED");
        memset(&st2, 0, sizeof(st2));
        is_int(hostmsg_started_decode(body, &st2), 0, "STARTED: decodes");
        ok(strcmp(st2.id, kid) == 0 && st2.pid == 4242 &&
               strcmp(st2.ipc_prefix, st.ipc_prefix) == 0,
           "STARTED: every field");
        json_decref(body);

        memcpy(fl.id, kid, sizeof(kid));
        snprintf(fl.step, sizeof(fl.step), "exec");
        snprintf(fl.message, sizeof(fl.message), "execve /usr/bin/python3: \"quoted\" ünï");
        body = transfer(HOSTMSG_START_FAILED, hostmsg_failed_encode(&fl), "START_FAILED");
        memset(&fl2, 0, sizeof(fl2));
        is_int(hostmsg_failed_decode(body, &fl2), 0, "START_FAILED: decodes");
        ok(strcmp(fl2.id, kid) == 0 && strcmp(fl2.step, "exec") == 0 && fl2.error == ENOENT &&
               strcmp(fl2.message, fl.message) == 0,
           "START_FAILED: every field");
        json_decref(body);

        memcpy(fl.id, sid, sizeof(sid));
        snprintf(fl.step, sizeof(fl.step), "cgroup");
        fl.error = EACCES;
        fl.message[0] = '\0';
        body = transfer(HOSTMSG_SANDBOX_FAILED, hostmsg_failed_encode(&fl), "SANDBOX_FAILED");
        memset(&fl2, 0x5a, sizeof(fl2));
        is_int(hostmsg_failed_decode(body, &fl2), 0, "SANDBOX_FAILED: decodes");
        ok(strcmp(fl2.id, sid) == 0 && strcmp(fl2.step, "cgroup") == 0 && fl2.error == EACCES &&
               fl2.message[0] == '\0',
           "SANDBOX_FAILED: every field, an empty message");
        json_decref(body);

        /* CHECKPOINTED says what the dump took on disk; a failure, nothing. */
        snprintf(fl.step, sizeof(fl.step), "%s", "");
        fl.error = 0;
        fl.bytes = 5ull << 30;
        body = transfer(HOSTMSG_CHECKPOINTED, hostmsg_failed_encode(&fl), "CHECKPOINTED");
        memset(&fl2, 0x5a, sizeof(fl2));
        is_int(hostmsg_failed_decode(body, &fl2), 0, "CHECKPOINTED: decodes");
        ok(fl2.error == 0 && fl2.bytes == 5ull << 30, "CHECKPOINTED: its bytes, past 32 bits");
        json_object_set_new(body, "bytes", json_integer(-1));
        is_int(hostmsg_failed_decode(body, &fl2), -EBADMSG, "CHECKPOINTED: negative bytes refused");
        json_decref(body);
        fl.bytes = 0;
        body = hostmsg_failed_encode(&fl);
        ok(body && !json_object_get(body, "bytes"), "a failure carries no bytes");
        memset(&fl2, 0x5a, sizeof(fl2));
        is_int(hostmsg_failed_decode(body, &fl2), 0, "a failure without bytes decodes");
        is_int((int)fl2.bytes, 0, "a failure without bytes: 0");
        json_decref(body);

        memcpy(sg.id, kid, sizeof(kid));
        body = transfer(HOSTMSG_SIGNAL, hostmsg_signal_encode(&sg), "SIGNAL");
        memset(&sg2, 0, sizeof(sg2));
        is_int(hostmsg_signal_decode(body, &sg2), 0, "SIGNAL: decodes");
        ok(strcmp(sg2.id, kid) == 0 && sg2.signal == SIGINT, "SIGNAL: every field");
        json_decref(body);

        /* STOP carries only the process id. */
        body = transfer(HOSTMSG_STOP, json_pack("{s:s}", "id", kid), "STOP");
        sg2.signal = 99;
        is_int(hostmsg_signal_decode(body, &sg2), 0, "STOP: decodes");
        ok(strcmp(sg2.id, kid) == 0 && sg2.signal == 0, "STOP: no signal");
        json_decref(body);

        /* The same encoder serves STOP and SANDBOX_DESTROY: signal 0 must
         * not be sent as a signal the decoder refuses. */
        sg.signal = 0;
        body = transfer(HOSTMSG_STOP, hostmsg_signal_encode(&sg), "STOP via hostmsg_signal_encode");
        sg2.signal = 99;
        is_int(hostmsg_signal_decode(body, &sg2), 0, "STOP via hostmsg_signal_encode: decodes");
        ok(strcmp(sg2.id, kid) == 0 && sg2.signal == 0,
           "STOP via hostmsg_signal_encode: no signal");
        json_decref(body);

        memcpy(sg.id, sid, sizeof(sid));
        body = transfer(HOSTMSG_SANDBOX_DESTROY, hostmsg_signal_encode(&sg), "SANDBOX_DESTROY");
        sg2.signal = 99;
        is_int(hostmsg_signal_decode(body, &sg2), 0, "SANDBOX_DESTROY: decodes");
        ok(strcmp(sg2.id, sid) == 0 && sg2.signal == 0, "SANDBOX_DESTROY: the sandbox id");
        json_decref(body);

        {
                struct hostmsg_relimit rl = {.limits = {512, 1500, 100, 2048}}, rl2;

                memcpy(rl.id, sid, sizeof(sid));
                body = transfer(HOSTMSG_SANDBOX_RELIMIT, hostmsg_relimit_encode(&rl),
                                "SANDBOX_RELIMIT");
                memset(&rl2, 0, sizeof(rl2));
                is_int(hostmsg_relimit_decode(body, &rl2), 0, "SANDBOX_RELIMIT: decodes");
                ok(strcmp(rl2.id, sid) == 0 && hostmsg_limits_equal(&rl.limits, &rl2.limits),
                   "SANDBOX_RELIMIT: the sandbox and every limit");
                json_decref(body);
        }

        memcpy(ex.id, kid, sizeof(kid));
        snprintf(ex.reason, sizeof(ex.reason), "out-of-memory");
        body = transfer(HOSTMSG_EXITED, hostmsg_exit_encode(&ex), "EXITED");
        memset(&ex2, 0, sizeof(ex2));
        is_int(hostmsg_exit_decode(body, &ex2), 0, "EXITED: decodes");
        ok(strcmp(ex2.id, kid) == 0 && ex2.pid == 4242 && ex2.exit_code == -1 &&
               ex2.signal == SIGKILL && strcmp(ex2.reason, "out-of-memory") == 0,
           "EXITED: every field");
        json_decref(body);

        ex = (struct hostmsg_exit){.pid = 31337, .exit_code = 0, .signal = 0};
        memcpy(ex.id, sid, sizeof(sid));
        snprintf(ex.reason, sizeof(ex.reason), "exited");
        body = transfer(HOSTMSG_SANDBOX_GONE, hostmsg_exit_encode(&ex), "SANDBOX_GONE");
        memset(&ex2, 0x5a, sizeof(ex2));
        is_int(hostmsg_exit_decode(body, &ex2), 0, "SANDBOX_GONE: decodes");
        ok(strcmp(ex2.id, sid) == 0 && ex2.pid == 31337 && ex2.exit_code == 0 && ex2.signal == 0 &&
               strcmp(ex2.reason, "exited") == 0,
           "SANDBOX_GONE: every field");
        json_decref(body);
}

/* Sends raw bytes as one datagram with n descriptors, as a peer that does
 * not use hostmsg_send might. */
static int send_raw_fds(const void *data, size_t len, const int *fdv, size_t n)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * 16)];
                struct cmsghdr align;
        } control;
        struct iovec iov = {(void *)data, len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *c;

        if (n > 16)
                BAIL_OUT("send_raw_fds: %zu descriptors", n);
        if (n) {
                memset(&control, 0, sizeof(control));
                mh.msg_control = control.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(c), fdv, sizeof(int) * n);
        }
        return sendmsg(sock[0], &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

static int send_raw(const void *data, size_t len)
{
        return send_raw_fds(data, len, NULL, 0);
}

/* The number of descriptors this process holds. */
static int count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        int n = 0;

        if (!d)
                BAIL_OUT("/proc/self/fd: %s", strerror(errno));
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

/* A pipe whose reads never block, so "nothing arrived" is a failure and not
 * a hang. Without O_CLOEXEC on purpose: the received copies must get
 * FD_CLOEXEC from hostmsg_recv, not from the originals. */
static void make_pipe(int p[2])
{
        if (pipe2(p, O_NONBLOCK) < 0)
                BAIL_OUT("pipe2: %s", strerror(errno));
}

/* Whether text written into wfd comes out of rfd. */
static int flows(int wfd, int rfd, const char *text)
{
        char buf[64] = "";
        size_t len = strlen(text);

        return write(wfd, text, len) == (ssize_t)len &&
               read(rfd, buf, sizeof(buf)) == (ssize_t)len && memcmp(buf, text, len) == 0;
}

/* Whether a write into wfd fails with EPIPE: no read end is left anywhere,
 * neither in this process nor in flight in a socket. */
static int reader_gone(int wfd)
{
        return write(wfd, "x", 1) < 0 && errno == EPIPE;
}

static int is_cloexec(int fd)
{
        int flags = fcntl(fd, F_GETFD);

        return flags >= 0 && (flags & FD_CLOEXEC);
}

/* Receives a datagram that must be refused with want, and checks that none
 * of its descriptors is handed over or left open: the process holds as many
 * as before it. Any handed over are closed so the next check starts clean. */
static void expect_fds_dropped(int want, int before, const char *name)
{
        int got[HOSTMSG_MAX_FDS];
        enum hostmsg_type type;
        json_t *body = NULL;
        size_t ngot = 99;

        is_int(hostmsg_recv(sock[1], &type, &body, got, &ngot), want, "%s", name);
        is_uint(ngot, 0, "%s: no descriptors handed over", name);
        is_int(count_fds(), before, "%s: none left open", name);
        for (size_t i = 0; i < ngot && i < HOSTMSG_MAX_FDS; i++)
                close(got[i]);
        json_decref(body);
}

static json_t *started_body(void)
{
        return json_pack("{s:s, s:i, s:s}", "id", kid, "pid", 4243, "ipc_prefix", "");
}

static void test_fds(void)
{
        int one[2], pipes[3][2], sent[3], got[HOSTMSG_MAX_FDS] = {-1, -1, -1};
        int too_many[HOSTMSG_MAX_FDS + 1], sixteen[16];
        uint32_t raw_hdr[2];
        char raw[64];
        struct hostmsg_started st;
        enum hostmsg_type type;
        json_t *body;
        size_t ngot;
        int before;
        int bad = -1;

        /* One descriptor: the read end of a pipe. */
        make_pipe(one);
        ok(!is_cloexec(one[0]), "the original read end is not close-on-exec (control)");
        body = transfer_fds(HOSTMSG_STARTED, started_body(), &one[0], 1, got, "1 descriptor");
        is_int(hostmsg_started_decode(body, &st), 0, "1 descriptor: the body decodes");
        json_decref(body);
        ok(got[0] >= 0 && fcntl(got[0], F_GETFD) >= 0, "1 descriptor: valid");
        ok(got[0] != one[0] && got[0] != one[1], "1 descriptor: a new descriptor");
        ok(is_cloexec(got[0]), "1 descriptor: close-on-exec");
        ok(flows(one[1], got[0], "through one"), "1 descriptor: connected to the pipe");
        close(got[0]);
        close(one[0]);
        ok(reader_gone(one[1]), "1 descriptor: closing both read ends leaves no reader");
        close(one[1]);

        /* Three, as a command's stdio comes: stdin's write end, stdout's
         * and stderr's read ends. Each must arrive in its place. */
        for (int i = 0; i < 3; i++)
                make_pipe(pipes[i]);
        sent[0] = pipes[0][1];
        sent[1] = pipes[1][0];
        sent[2] = pipes[2][0];
        body = transfer_fds(HOSTMSG_STARTED, started_body(), sent, 3, got, "3 descriptors");
        json_decref(body);
        for (int i = 0; i < 3; i++) {
                int distinct = got[i] >= 0 && got[i] != got[(i + 1) % 3];

                for (int j = 0; j < 3; j++)
                        distinct = distinct && got[i] != pipes[j][0] && got[i] != pipes[j][1];
                ok(distinct, "3 descriptors: [%d] distinct from the others and the originals", i);
                ok(fcntl(got[i], F_GETFD) >= 0, "3 descriptors: [%d] valid", i);
                ok(is_cloexec(got[i]), "3 descriptors: [%d] close-on-exec", i);
        }
        ok(flows(got[0], pipes[0][0], "into stdin"), "3 descriptors: [0] is stdin's write end");
        ok(flows(pipes[1][1], got[1], "from stdout"), "3 descriptors: [1] is stdout's read end");
        ok(flows(pipes[2][1], got[2], "from stderr"), "3 descriptors: [2] is stderr's read end");
        for (int i = 0; i < 3; i++)
                close(got[i]);

        /* Not wanted: passing NULL closes them. The only read end is in
         * flight, so the pipe still has a reader until it is received. */
        make_pipe(one);
        body = started_body();
        is_int(hostmsg_send(sock[0], HOSTMSG_STARTED, body, &one[0], 1), 0,
               "a read end sent to a receiver that wants no descriptors");
        json_decref(body);
        close(one[0]);
        ok(!reader_gone(one[1]), "while in flight the pipe still has a reader (control)");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), 0, "received with fds NULL");
        ok(body != NULL && type == HOSTMSG_STARTED, "and the message is intact");
        json_decref(body);
        ok(reader_gone(one[1]), "fds NULL: the received read end was closed (EPIPE)");
        close(one[1]);

        before = count_fds();
        body = started_body();
        is_int(hostmsg_send(sock[0], HOSTMSG_STARTED, body, sent, 3), 0,
               "3 descriptors sent to a receiver that wants none");
        json_decref(body);
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), 0, "received with fds NULL");
        json_decref(body);
        is_int(count_fds(), before, "fds NULL: none of the 3 is left open");

        /* hostmsg_send refuses more than HOSTMSG_MAX_FDS and sends nothing. */
        for (int i = 0; i < HOSTMSG_MAX_FDS + 1; i++)
                too_many[i] = pipes[0][0];
        body = started_body();
        is_int(hostmsg_send(sock[0], HOSTMSG_STARTED, body, too_many, HOSTMSG_MAX_FDS + 1), -EINVAL,
               "HOSTMSG_MAX_FDS + 1 descriptors: -EINVAL");
        is_int(hostmsg_send(sock[0], HOSTMSG_STARTED, body, &bad, 1), -EBADF,
               "a descriptor that is not open: -EBADF");
        json_decref(body);
        is_int(hostmsg_recv(sock[1], &type, &body, got, &ngot), -EAGAIN,
               "neither refused message was sent");

        /* A peer that does not use hostmsg_send. Every descriptor that came
         * with a refused datagram is closed, and none is handed over. */
        before = count_fds();
        raw_hdr[0] = HOSTMSG_STARTED;
        raw_hdr[1] = 5;
        memcpy(raw, raw_hdr, sizeof(raw_hdr));
        memcpy(raw + sizeof(raw_hdr), "{nope", 5);
        is_int(send_raw_fds(raw, sizeof(raw_hdr) + 5, sent, 3), 0,
               "a malformed datagram with 3 descriptors");
        expect_fds_dropped(-EBADMSG, before, "a malformed datagram with descriptors: -EBADMSG");

        raw_hdr[1] = 2;
        memcpy(raw, raw_hdr, sizeof(raw_hdr));
        memcpy(raw + sizeof(raw_hdr), "{}", 2);
        is_int(send_raw_fds(raw, sizeof(raw_hdr) + 2, too_many, HOSTMSG_MAX_FDS + 1), 0,
               "a well-formed datagram with HOSTMSG_MAX_FDS + 1 descriptors");
        expect_fds_dropped(-EBADMSG, before,
                           "HOSTMSG_MAX_FDS + 1 descriptors: -EBADMSG, not silently fewer");

        for (int i = 0; i < 16; i++)
                sixteen[i] = pipes[i % 3][i % 2];
        is_int(send_raw_fds(raw, sizeof(raw_hdr) + 2, sixteen, 16), 0,
               "a well-formed datagram with 16 descriptors");
        expect_fds_dropped(-EBADMSG, before, "16 descriptors, more than fit: -EBADMSG");

        /* A datagram of no bytes reads as the peer's end; what came with it
         * must not be left behind for a caller that is tearing down. */
        is_int(send_raw_fds("", 0, sent, 3), 0, "an empty datagram with 3 descriptors");
        expect_fds_dropped(-EPIPE, before, "an empty datagram: -EPIPE");
        is_int(hostmsg_recv(sock[1], &type, &body, got, &ngot), -EAGAIN,
               "every datagram with descriptors was consumed");

        for (int i = 0; i < 3; i++) {
                close(pipes[i][0]);
                close(pipes[i][1]);
        }
}

static void test_transport(void)
{
        enum hostmsg_type type;
        json_t *body = (json_t *)&body;
        struct {
                uint32_t type, length;
                char body[HOSTMSG_MAX_BODY + 16];
        } *raw = calloc(1, sizeof(*raw));
        size_t hdr = 2 * sizeof(uint32_t);
        int sndbuf = 4 * HOSTMSG_MAX_BODY;
        int pair[2];
        json_t *big;
        char *filler;

        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EAGAIN,
               "nothing waiting: -EAGAIN");
        ok(body == NULL, "and no body");

        /* The largest datagram needs a send buffer beyond the default. */
        if (setsockopt(sock[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0)
                BAIL_OUT("SO_SNDBUF: %s", strerror(errno));

        filler = malloc(HOSTMSG_MAX_BODY + 2);
        memset(filler, 'x', HOSTMSG_MAX_BODY + 1);
        /* {"f":"xxx..."} is 8 bytes of syntax around the string. */
        filler[HOSTMSG_MAX_BODY - 8] = '\0';
        big = json_pack("{s:s}", "f", filler);
        is_int(hostmsg_send(sock[0], HOSTMSG_STARTED, big, NULL, 0), 0,
               "a body of exactly HOSTMSG_MAX_BODY bytes is sent");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), 0, "and received");
        is_uint(json_string_length(json_object_get(body, "f")), HOSTMSG_MAX_BODY - 8, "whole");
        json_decref(body);
        json_decref(big);
        filler[HOSTMSG_MAX_BODY - 8] = 'x';
        filler[HOSTMSG_MAX_BODY - 7] = '\0';
        big = json_pack("{s:s}", "f", filler);
        is_int(hostmsg_send(sock[0], HOSTMSG_STARTED, big, NULL, 0), -EMSGSIZE,
               "one byte more is refused by the sender");
        json_decref(big);
        free(filler);

        /* A peer that does not use hostmsg_send: oversized and malformed
         * datagrams are consumed and reported, and the next one is fine. A
         * body past HOSTMSG_MAX_INLINE never travels in the datagram. */
        raw->type = HOSTMSG_STARTED;
        raw->length = HOSTMSG_MAX_INLINE + 1;
        memset(raw->body, ' ', HOSTMSG_MAX_INLINE + 1);
        raw->body[0] = '{';
        raw->body[HOSTMSG_MAX_INLINE] = '}';
        is_int(send_raw(raw, hdr + HOSTMSG_MAX_INLINE + 1), 0, "an oversized datagram is sent raw");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "an oversized datagram: -EBADMSG");
        ok(body == NULL, "and no body");

        raw->length = 10;
        memcpy(raw->body, "{}", 2);
        is_int(send_raw(raw, hdr + 2), 0, "a datagram whose length field lies");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "a lying length: -EBADMSG");
        raw->length = 2;
        is_int(send_raw(raw, hdr - 1), 0, "a datagram shorter than the header");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "a short header: -EBADMSG");
        raw->length = 5;
        memcpy(raw->body, "{nope", 5);
        is_int(send_raw(raw, hdr + 5), 0, "a datagram that is not JSON");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG, "not JSON: -EBADMSG");
        raw->length = 2;
        memcpy(raw->body, "[]", 2);
        is_int(send_raw(raw, hdr + 2), 0, "a datagram holding an array");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG, "an array: -EBADMSG");
        ok(body == NULL, "and no body");
        raw->length = 2;
        memcpy(raw->body, "{}", 2);
        is_int(send_raw(raw, hdr + 2), 0, "a well-formed datagram after the bad ones");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), 0, "is received");
        is_int(type, HOSTMSG_STARTED, "with its type");
        json_decref(body);
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EAGAIN,
               "every bad datagram was consumed");
        free(raw);

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        close(pair[0]);
        is_int(hostmsg_recv(pair[1], &type, &body, NULL, NULL), -EPIPE, "the peer is gone: -EPIPE");
        big = json_object();
        is_int(hostmsg_send(pair[1], HOSTMSG_STOP, big, NULL, 0), -EPIPE,
               "sending to a closed peer: -EPIPE, and no SIGPIPE");
        json_decref(big);
        close(pair[1]);
}

/* A memfd holding len bytes of text, sealed with seals (0: none). */
static int make_memfd(const char *text, size_t len, int seals)
{
        int fd = memfd_create("test-hostmsg", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        if (fd < 0 || write(fd, text, len) != (ssize_t)len ||
            (seals && fcntl(fd, F_ADD_SEALS, seals) < 0))
                BAIL_OUT("memfd: %s", strerror(errno));
        return fd;
}

/* Bodies past HOSTMSG_MAX_INLINE go in a sealed memfd: the datagram is the
 * header alone and the memfd its first descriptor, ahead of the message's
 * own; a receiver takes only a memfd sealed against change that holds
 * exactly the body, and leaves no descriptor open when it refuses one. */
static void test_memfd_transport(void)
{
        const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
        struct {
                uint32_t type, length;
        } head = {HOSTMSG_STARTED, 0};
        char *filler = malloc(HOSTMSG_MAX_INLINE + 1);
        int pipes[HOSTMSG_MAX_FDS][2], got[HOSTMSG_MAX_FDS];
        int send_fds[HOSTMSG_MAX_FDS], before, fd, two[2];
        char peek[64];
        struct iovec iov = {peek, sizeof(peek)};
        union {
                char buf[CMSG_SPACE(sizeof(int) * 8)];
                struct cmsghdr align;
        } control;
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = control.buf,
                            .msg_controllen = sizeof(control.buf)};
        enum hostmsg_type type;
        json_t *body;
        ssize_t n;

        memset(filler, 'y', HOSTMSG_MAX_INLINE);
        /* {"f":"..."} is 8 bytes of syntax: exactly HOSTMSG_MAX_INLINE. */
        filler[HOSTMSG_MAX_INLINE - 8] = '\0';
        is_int(hostmsg_send(sock[0], HOSTMSG_STARTED, json_pack("{s:s}", "f", filler), NULL, 0), 0,
               "a body of HOSTMSG_MAX_INLINE bytes is sent");
        n = recvmsg(sock[1], &mh, MSG_PEEK | MSG_TRUNC);
        is_int((int)n, 8 + HOSTMSG_MAX_INLINE,
               "HOSTMSG_MAX_INLINE bytes travel in the datagram itself");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), 0, "and are received");
        json_decref(body);

        filler[HOSTMSG_MAX_INLINE - 8] = 'y';
        filler[HOSTMSG_MAX_INLINE - 7] = '\0';
        for (int i = 0; i < HOSTMSG_MAX_FDS; i++) {
                if (pipe(pipes[i]) < 0)
                        BAIL_OUT("pipe: %s", strerror(errno));
                send_fds[i] = pipes[i][0];
        }
        before = count_fds();
        is_int(hostmsg_send(sock[0], HOSTMSG_STARTED, json_pack("{s:s}", "f", filler), send_fds,
                            HOSTMSG_MAX_FDS),
               0, "one byte more, with HOSTMSG_MAX_FDS descriptors, is sent");
        is_int(count_fds(), before, "the sender keeps no memfd");
        mh.msg_controllen = sizeof(control.buf);
        n = recvmsg(sock[1], &mh, MSG_PEEK);
        is_int((int)n, 8, "the datagram is the header alone");
        {
                struct hostmsg_header_view {
                        uint32_t type, length;
                } h;

                memcpy(&h, peek, sizeof(h));
                is_uint(h.length & 0x7fffffffu, HOSTMSG_MAX_INLINE + 1, "its length is the body's");
                ok(h.length & 0x80000000u, "and says the body is in a memfd");
        }
        {
                size_t ngot = 0;

                /* MSG_PEEK took copies of the descriptors: closed first. */
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

                        for (size_t i = 0; i < k; i++) {
                                int one;

                                memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                                close(one);
                        }
                        is_uint(k, HOSTMSG_MAX_FDS + 1, "the memfd comes ahead of the message's");
                }
                is_int(hostmsg_recv(sock[1], &type, &body, got, &ngot), 0, "and it is received");
                is_uint(ngot, HOSTMSG_MAX_FDS, "with the message's own descriptors alone");
                is_uint(json_string_length(json_object_get(body, "f")), HOSTMSG_MAX_INLINE - 7,
                        "whole");
                json_decref(body);
                for (size_t i = 0; i < ngot; i++) {
                        struct stat a, b;

                        ok(fstat(got[i], &a) == 0 && fstat(pipes[i][0], &b) == 0 &&
                               a.st_ino == b.st_ino,
                           "descriptor %zu is the one sent, in its place", i);
                        close(got[i]);
                }
                is_int(count_fds(), before, "the receiver keeps no memfd");
        }
        for (int i = 0; i < HOSTMSG_MAX_FDS; i++) {
                close(pipes[i][0]);
                close(pipes[i][1]);
        }

        /* Raw peers: what is not a sealed memfd of the stated length. */
        before = count_fds();
        head.length = 0x80000000u | 2;
        fd = make_memfd("{}", 2, seals);
        is_int(send_raw_fds(&head, sizeof(head), &fd, 1), 0, "a sealed memfd of 2 bytes");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), 0, "is a body");
        json_decref(body);
        close(fd);
        fd = make_memfd("{}", 2, 0);
        send_raw_fds(&head, sizeof(head), &fd, 1);
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "an unsealed memfd: -EBADMSG (its size could change while read)");
        close(fd);
        fd = make_memfd("{} ", 3, seals);
        send_raw_fds(&head, sizeof(head), &fd, 1);
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "a memfd longer than the stated length: -EBADMSG");
        close(fd);
        fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        send_raw_fds(&head, sizeof(head), &fd, 1);
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "/dev/null as the body: -EBADMSG");
        close(fd);
        if (pipe(two) < 0)
                BAIL_OUT("pipe: %s", strerror(errno));
        send_raw_fds(&head, sizeof(head), two, 1);
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "a pipe as the body (a read that could block): -EBADMSG");
        close(two[0]);
        close(two[1]);
        send_raw(&head, sizeof(head));
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "the memfd flag without a descriptor: -EBADMSG");
        head.length = 0x80000000u | (HOSTMSG_MAX_BODY + 1);
        fd = make_memfd("{}", 2, seals);
        send_raw_fds(&head, sizeof(head), &fd, 1);
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EBADMSG,
               "a stated length past HOSTMSG_MAX_BODY: -EBADMSG");
        close(fd);
        is_int(count_fds(), before, "no refused memfd is left open");
        is_int(hostmsg_recv(sock[1], &type, &body, NULL, NULL), -EAGAIN,
               "every refused datagram was consumed");
        free(filler);
}

/* The largest START there can be: HOSTMSG_MAX_EXEC_BYTES of strings that
 * JSON escapes six times over, sent and received whole; a byte more is
 * refused by hostmsg_start_check (and by the decoder) with the bound
 * named. */
static void test_start_bounds(void)
{
        /* All but one string's share in env entries; the program the rest. */
        size_t nenv = HOSTMSG_MAX_EXEC_BYTES / (HOSTMSG_MAX_STRING + 1) - 1;
        size_t rest = HOSTMSG_MAX_EXEC_BYTES - nenv * (HOSTMSG_MAX_STRING + 1);
        char **env = calloc(nenv + 2, sizeof(char *));
        char *argv[] = {NULL, NULL};
        struct hostmsg_start m = {.kernel = false, .env = env, .argv = argv}, back;
        char why[512];
        json_t *body;

        memcpy(m.id, kid, sizeof(kid));
        memcpy(m.sandbox_id, sid, sizeof(sid));
        for (size_t i = 0; i < nenv; i++) {
                env[i] = malloc(HOSTMSG_MAX_STRING + 1);
                memset(env[i], 1, HOSTMSG_MAX_STRING); /* "\u0001" in JSON */
                env[i][0] = 'A';
                env[i][1] = '=';
                env[i][HOSTMSG_MAX_STRING] = '\0';
        }
        /* The program takes the rest, its NUL included. */
        argv[0] = malloc(rest);
        memset(argv[0], 1, rest - 1);
        argv[0][rest - 1] = '\0';
        is_int(hostmsg_start_check(&m, why, sizeof(why)), 0,
               "HOSTMSG_MAX_EXEC_BYTES exactly, strings of HOSTMSG_MAX_STRING: within bounds");
        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "the largest START");
        is_int(hostmsg_start_decode(body, &back), 0, "the largest START decodes");
        is_uint(strv_length(back.env), nenv, "with every env entry");
        ok(back.argv && strlen(back.argv[0]) == rest - 1, "and its whole program");
        hostmsg_start_clear(&back);
        json_decref(body);

        /* A few bytes more in all: one more entry, "B=" and its NUL. */
        env[nenv] = (char *)"B=";
        is_int(hostmsg_start_check(&m, why, sizeof(why)), -E2BIG,
               "3 bytes past HOSTMSG_MAX_EXEC_BYTES: -E2BIG");
        ok(strstr(why, "1048576") != NULL, "naming the bound: %s", why);
        body = hostmsg_start_encode(&m);
        is_int(hostmsg_start_decode(body, &back), -EBADMSG, "and the decoder refuses it");
        json_decref(body);

        /* One string past MAX_ARG_STRLEN. */
        free(argv[0]);
        argv[0] = malloc(HOSTMSG_MAX_STRING + 2);
        memset(argv[0], 'p', HOSTMSG_MAX_STRING + 1);
        argv[0][HOSTMSG_MAX_STRING + 1] = '\0';
        for (size_t i = 0; i < nenv; i++)
                free(env[i]);
        env[0] = NULL;
        is_int(hostmsg_start_check(&m, why, sizeof(why)), -E2BIG,
               "a program of HOSTMSG_MAX_STRING + 1 bytes: -E2BIG");
        ok(strstr(why, "131071") && strstr(why, "MAX_ARG_STRLEN"), "naming the bound: %s", why);
        free(argv[0]);

        argv[0] = (char *)"/bin/true";
        env[0] = (char *)"NOEQUALS";
        is_int(hostmsg_start_check(&m, why, sizeof(why)), -EINVAL,
               "an env entry without '=': -EINVAL");
        env[0] = NULL;
        snprintf(m.cwd, sizeof(m.cwd), "relative");
        is_int(hostmsg_start_check(&m, why, sizeof(why)), -EINVAL, "a relative cwd: -EINVAL");
        m.cwd[0] = '\0';
        argv[0] = NULL;
        is_int(hostmsg_start_check(&m, why, sizeof(why)), -EINVAL, "no program: -EINVAL");
        argv[0] = (char *)"/bin/true";
        m.env = NULL;
        is_int(hostmsg_start_check(&m, NULL, 0), 0, "no env at all is an empty one");
        free(env);
}

static void test_request_id(void)
{
        char id[JP_UUID_SIZE];
        json_t *body = json_pack("{s:s, s:s, s:i}", "id", kid, "sandbox_id", "nope", "x", 1);

        is_int(hostmsg_request_id(body, "id", id), 0, "a refused request's id is read");
        is_str(id, kid, "whole");
        is_int(hostmsg_request_id(body, "sandbox_id", id), -EBADMSG,
               "an id that is no UUID is not answered");
        is_int(hostmsg_request_id(body, "missing", id), -EBADMSG, "nor a missing one");
        json_decref(body);
}

/* Sets member (or "limits.<name>") of body to value, or deletes it when
 * value is NULL; takes value's reference. */
static void set_member(json_t *body, const char *member, json_t *value)
{
        json_t *target = body;
        const char *key = member;

        if (strncmp(member, "limits.", 7) == 0) {
                target = json_object_get(body, "limits");
                key = member + 7;
        }
        if (value)
                json_object_set_new(target, key, value);
        else
                json_object_del(target, key);
}

static json_t *good_sandbox(void)
{
        return json_pack("{s:s, s:{s:i, s:i, s:i, s:i}, s:[s], s:b}", "sandbox_id", sid, "limits",
                         "memory_mb", 1024, "cpu_millis", 1000, "pids", 256, "disk_mb", 1024,
                         "ro_paths", "/usr/share/jupyter/kernels/python3", "sandbox", 1);
}

/* Applies one change to a good SANDBOX_CREATE body and expects it to be
 * refused (accepted when want is 0). */
static void sandbox_expect(int want, const char *member, json_t *value, const char *name)
{
        json_t *body = good_sandbox();
        struct hostmsg_sandbox m;

        set_member(body, member, value);
        m.ro_paths = (char **)&m;
        if (want == 0) {
                is_int(hostmsg_sandbox_decode(body, &m), 0, "SANDBOX_CREATE accepted: %s", name);
                hostmsg_sandbox_clear(&m);
        } else {
                is_int(hostmsg_sandbox_decode(body, &m), want, "SANDBOX_CREATE refused: %s", name);
                ok(m.ro_paths == NULL, "SANDBOX_CREATE refused: %s: nothing left allocated", name);
        }
        json_decref(body);
}

/* A path of exactly len bytes: "/" and then 'p's. */
static json_t *long_path(size_t len)
{
        char *s = malloc(len + 1);
        json_t *v;

        memset(s, 'p', len);
        s[0] = '/';
        s[len] = '\0';
        v = json_string(s);
        free(s);
        return v;
}

static void test_sandbox_validation(void)
{
        json_t *many;

        sandbox_expect(0, "sandbox", json_true(), "the good body");
        sandbox_expect(-EBADMSG, "sandbox_id", json_string("not-a-uuid"), "sandbox_id not a UUID");
        sandbox_expect(-EBADMSG, "sandbox_id", json_string("6FA459EA-EE8A-4CA4-894E-DB77E160355E"),
                       "sandbox_id in uppercase");
        sandbox_expect(-EBADMSG, "sandbox_id", NULL, "sandbox_id missing");
        sandbox_expect(-EBADMSG, "sandbox_id", json_integer(1), "sandbox_id a number");

        sandbox_expect(-EBADMSG, "limits", NULL, "limits missing");
        sandbox_expect(-EBADMSG, "limits", json_integer(5), "limits a number");
        sandbox_expect(0, "limits.memory_mb", json_integer(1 << 24), "memory_mb at 16 TiB");
        sandbox_expect(-EBADMSG, "limits.memory_mb", json_integer((1 << 24) + 1),
                       "memory_mb past 16 TiB");
        sandbox_expect(-EBADMSG, "limits.memory_mb", json_integer(0), "memory_mb 0");
        sandbox_expect(-EBADMSG, "limits.memory_mb", json_integer(-1), "memory_mb negative");
        sandbox_expect(-EBADMSG, "limits.memory_mb", json_real(1024.0), "memory_mb a float");
        sandbox_expect(0, "limits.cpu_millis", json_integer(1 << 20), "cpu_millis at its maximum");
        sandbox_expect(-EBADMSG, "limits.cpu_millis", json_integer(0), "cpu_millis 0");
        sandbox_expect(-EBADMSG, "limits.cpu_millis", json_integer((1 << 20) + 1),
                       "cpu_millis too large");
        sandbox_expect(-EBADMSG, "limits.pids", json_integer(0), "pids 0");
        sandbox_expect(-EBADMSG, "limits.pids", json_integer((1 << 22) + 1), "pids too large");
        sandbox_expect(0, "limits.disk_mb", json_integer(1 << 24), "disk_mb at its maximum");
        sandbox_expect(-EBADMSG, "limits.disk_mb", json_integer(0), "disk_mb 0");
        sandbox_expect(-EBADMSG, "limits.disk_mb", json_integer((1 << 24) + 1),
                       "disk_mb too large");
        sandbox_expect(-EBADMSG, "limits.disk_mb", NULL, "disk_mb missing");

        sandbox_expect(0, "ro_paths", json_array(), "ro_paths empty");
        sandbox_expect(0, "ro_paths", json_pack("[s,s]", "/", "/opt/.hidden/k"),
                       "ro_paths \"/\" and a hidden directory");
        sandbox_expect(-EBADMSG, "ro_paths", NULL, "ro_paths missing");
        sandbox_expect(-EBADMSG, "ro_paths", json_string("/usr"), "ro_paths a string");
        sandbox_expect(-EBADMSG, "ro_paths", json_pack("[s]", "usr/share"),
                       "ro_paths entry relative");
        sandbox_expect(-EBADMSG, "ro_paths", json_pack("[s]", ""), "ro_paths entry empty");
        sandbox_expect(-EBADMSG, "ro_paths", json_pack("[s,s]", "/usr", "/usr/share/../../etc"),
                       "ro_paths second entry with \"/..\" inside");
        sandbox_expect(-EBADMSG, "ro_paths", json_pack("[s]", "/usr/share/.."),
                       "ro_paths entry ending in \"/..\"");
        sandbox_expect(-EBADMSG, "ro_paths", json_pack("[s]", "/.."), "ro_paths entry \"/..\"");
        sandbox_expect(-EBADMSG, "ro_paths", json_pack("[s%]", "/a\0b", (size_t)4),
                       "ro_paths entry with a NUL inside");
        sandbox_expect(-EBADMSG, "ro_paths", json_pack("[s,i]", "/usr", 1),
                       "ro_paths entry a number");
        sandbox_expect(0, "ro_paths", json_pack("[o]", long_path(PATH_MAX - 1)),
                       "ro_paths entry of PATH_MAX - 1 bytes");
        sandbox_expect(-EBADMSG, "ro_paths", json_pack("[o]", long_path(PATH_MAX)),
                       "ro_paths entry of PATH_MAX bytes");
        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_RO_PATHS; i++)
                json_array_append_new(many, json_string("/usr"));
        sandbox_expect(0, "ro_paths", many, "ro_paths of HOSTMSG_MAX_RO_PATHS entries");
        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_RO_PATHS + 1; i++)
                json_array_append_new(many, json_string("/usr"));
        sandbox_expect(-EBADMSG, "ro_paths", many, "ro_paths one entry too many");

        sandbox_expect(-EBADMSG, "sandbox", NULL, "sandbox missing");
        sandbox_expect(-EBADMSG, "sandbox", json_integer(1), "sandbox a number");
        sandbox_expect(-EBADMSG, "sandbox", json_null(), "sandbox null");
}

static json_t *good_start(void)
{
        return json_pack("{s:s, s:s, s:b, s:s, s:s, s:s, s:[s], s:[s]}", "id", kid, "sandbox_id",
                         sid, "kernel", 1, "kernelspec_dir", "/k", "key", "", "cwd", "", "argv",
                         "python3", "env", "A=1");
}

/* Applies one change to a good START body and expects it to be refused
 * (accepted when want is 0). */
static void start_expect(int want, const char *member, json_t *value, const char *name)
{
        json_t *body = good_start();
        struct hostmsg_start m;

        set_member(body, member, value);
        m.argv = m.env = (char **)&m;
        if (want == 0) {
                is_int(hostmsg_start_decode(body, &m), 0, "START accepted: %s", name);
                hostmsg_start_clear(&m);
        } else {
                is_int(hostmsg_start_decode(body, &m), want, "START refused: %s", name);
                ok(m.argv == NULL && m.env == NULL, "START refused: %s: nothing left allocated",
                   name);
        }
        json_decref(body);
}

static void test_start_validation(void)
{
        json_t *many;
        char *longstr;

        start_expect(0, "kernel", json_true(), "the good body");
        start_expect(-EBADMSG, "id", json_string("not-a-uuid"), "id not a UUID");
        start_expect(-EBADMSG, "id", json_string("1B4E28BA-2FA1-41D2-883F-0016D3CCA427"),
                     "id in uppercase");
        start_expect(-EBADMSG, "id", json_string("../../../../../../../../etc/passwd.."),
                     "id a path of UUID length");
        start_expect(-EBADMSG, "id", NULL, "id missing");
        start_expect(-EBADMSG, "id", json_integer(1), "id a number");
        start_expect(-EBADMSG, "sandbox_id", json_string("6fa459ea-ee8a-4ca4-894e-db77e160355"),
                     "sandbox_id one character short");
        start_expect(-EBADMSG, "sandbox_id", NULL, "sandbox_id missing");
        start_expect(-EBADMSG, "kernel", NULL, "kernel missing");
        start_expect(-EBADMSG, "kernel", json_integer(1), "kernel a number");
        start_expect(-EBADMSG, "kernel", json_string("true"), "kernel a string");
        start_expect(0, "kernel", json_false(), "kernel false");
        start_expect(-EBADMSG, "kernelspec_dir", NULL, "kernelspec_dir missing");
        start_expect(-EBADMSG, "kernelspec_dir", json_stringn("/a\0b", 4),
                     "kernelspec_dir with a NUL");
        start_expect(-EBADMSG, "key", json_null(), "key null");
        start_expect(0, "cwd", json_string("/"), "cwd \"/\"");
        start_expect(-EBADMSG, "cwd", json_string("home/user"), "cwd relative");
        start_expect(-EBADMSG, "cwd", json_string("."), "cwd \".\"");
        start_expect(-EBADMSG, "cwd", NULL, "cwd missing");
        start_expect(-EBADMSG, "cwd", json_integer(0), "cwd a number");
        start_expect(-EBADMSG, "cwd", long_path(PATH_MAX), "cwd of PATH_MAX bytes");
        start_expect(0, "cwd", long_path(PATH_MAX - 1), "cwd of PATH_MAX - 1 bytes");
        start_expect(-EBADMSG, "argv", json_array(), "argv empty");
        start_expect(-EBADMSG, "argv", NULL, "argv missing");
        start_expect(-EBADMSG, "argv", json_string("python3"), "argv a string");
        start_expect(-EBADMSG, "argv", json_pack("[s,i]", "python3", 1), "argv with a number");
        start_expect(-EBADMSG, "argv", json_pack("[s,s%]", "python3", "a\0b", (size_t)3),
                     "argv with a NUL inside");
        start_expect(-EBADMSG, "env", json_pack("[s]", "NOEQUALS"), "env entry without '='");
        start_expect(-EBADMSG, "env", json_pack("[s,s]", "A=1", "B"),
                     "second env entry without '='");
        start_expect(-EBADMSG, "env", json_object(), "env an object");
        start_expect(-EBADMSG, "env", NULL, "env missing");

        longstr = malloc(PATH_MAX + 1);
        memset(longstr, 'k', PATH_MAX);
        longstr[JP_MAX_KEY_LEN + 1] = '\0';
        start_expect(-EBADMSG, "key", json_string(longstr), "key one byte too long");
        longstr[JP_MAX_KEY_LEN] = '\0';
        start_expect(0, "key", json_string(longstr), "key of JP_MAX_KEY_LEN bytes");
        memset(longstr, 'k', PATH_MAX);
        longstr[PATH_MAX] = '\0';
        start_expect(-EBADMSG, "kernelspec_dir", json_string(longstr),
                     "kernelspec_dir of PATH_MAX bytes");
        free(longstr);

        longstr = malloc(HOSTMSG_MAX_STRING + 2);
        memset(longstr, 'a', HOSTMSG_MAX_STRING + 1);
        longstr[HOSTMSG_MAX_STRING + 1] = '\0';
        start_expect(-EBADMSG, "argv", json_pack("[s]", longstr),
                     "an argv entry over HOSTMSG_MAX_STRING");
        longstr[HOSTMSG_MAX_STRING] = '\0';
        start_expect(0, "argv", json_pack("[s]", longstr), "an argv entry of HOSTMSG_MAX_STRING");
        free(longstr);

        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_ARGS; i++)
                json_array_append_new(many, json_string("a"));
        start_expect(0, "argv", many, "argv of HOSTMSG_MAX_ARGS entries");
        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_ARGS + 1; i++)
                json_array_append_new(many, json_string("a"));
        start_expect(-EBADMSG, "argv", many, "argv one entry too many");
        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_ENV; i++)
                json_array_append_new(many, json_string("A=1"));
        start_expect(0, "env", many, "env of HOSTMSG_MAX_ENV entries");
        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_ENV + 1; i++)
                json_array_append_new(many, json_string("A=1"));
        start_expect(-EBADMSG, "env", many, "env one entry too many");
}

static void test_reply_validation(void)
{
        struct hostmsg_sandbox_ready rd;
        struct hostmsg_started st;
        struct hostmsg_failed fl;
        struct hostmsg_signal sg;
        struct hostmsg_relimit rl;
        struct hostmsg_exit ex;
        json_t *b;

#define CHECK(decode, out, rc, name, ...)                                                          \
        do {                                                                                       \
                b = json_pack(__VA_ARGS__);                                                        \
                if (!b)                                                                            \
                        BAIL_OUT("json_pack for %s", name);                                        \
                is_int(decode(b, &out), rc, "%s", name);                                           \
                json_decref(b);                                                                    \
        } while (0)
#define READY "{s:s,s:I,s:I,s:I,s:s}"
        CHECK(hostmsg_sandbox_ready_decode, rd, 0, "SANDBOX_READY good", READY, "sandbox_id", sid,
              "init_pid", (json_int_t)1, "user_uid", (json_int_t)1000, "user_gid", (json_int_t)1000,
              "root", "/proc/1/root");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY root relative", READY,
              "sandbox_id", sid, "init_pid", (json_int_t)1, "user_uid", (json_int_t)1000,
              "user_gid", (json_int_t)1000, "root", "proc/1/root");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY root empty", READY,
              "sandbox_id", sid, "init_pid", (json_int_t)1, "user_uid", (json_int_t)1000,
              "user_gid", (json_int_t)1000, "root", "");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY root missing",
              "{s:s,s:I,s:I,s:I}", "sandbox_id", sid, "init_pid", (json_int_t)1, "user_uid",
              (json_int_t)1000, "user_gid", (json_int_t)1000);
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY uid 2^32 - 1 (-1)", READY,
              "sandbox_id", sid, "init_pid", (json_int_t)1, "user_uid", (json_int_t)UINT32_MAX,
              "user_gid", (json_int_t)1000, "root", "/r");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY uid 2^32", READY,
              "sandbox_id", sid, "init_pid", (json_int_t)1, "user_uid", (json_int_t)UINT32_MAX + 1,
              "user_gid", (json_int_t)1000, "root", "/r");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY uid negative", READY,
              "sandbox_id", sid, "init_pid", (json_int_t)1, "user_uid", (json_int_t)-1, "user_gid",
              (json_int_t)1000, "root", "/r");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY gid 2^32 - 1 (-1)", READY,
              "sandbox_id", sid, "init_pid", (json_int_t)1, "user_uid", (json_int_t)1000,
              "user_gid", (json_int_t)UINT32_MAX, "root", "/r");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY init_pid negative", READY,
              "sandbox_id", sid, "init_pid", (json_int_t)-1, "user_uid", (json_int_t)1000,
              "user_gid", (json_int_t)1000, "root", "/r");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY init_pid past INT_MAX",
              READY, "sandbox_id", sid, "init_pid", (json_int_t)INT_MAX + 1, "user_uid",
              (json_int_t)1000, "user_gid", (json_int_t)1000, "root", "/r");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY sandbox_id not a UUID",
              READY, "sandbox_id", "sandbox-1", "init_pid", (json_int_t)1, "user_uid",
              (json_int_t)1000, "user_gid", (json_int_t)1000, "root", "/r");
        CHECK(hostmsg_sandbox_ready_decode, rd, -EBADMSG, "SANDBOX_READY keyed \"id\"", READY, "id",
              sid, "init_pid", (json_int_t)1, "user_uid", (json_int_t)1000, "user_gid",
              (json_int_t)1000, "root", "/r");
#undef READY

        CHECK(hostmsg_started_decode, st, 0, "STARTED good", "{s:s,s:i,s:s}", "id", kid, "pid", 1,
              "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, 0, "STARTED a command: ipc_prefix empty", "{s:s,s:i,s:s}",
              "id", kid, "pid", 1, "ipc_prefix", "");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED pid 0", "{s:s,s:i,s:s}", "id", kid,
              "pid", 0, "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED pid negative", "{s:s,s:i,s:s}", "id",
              kid, "pid", -5, "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED pid past INT_MAX", "{s:s,s:I,s:s}",
              "id", kid, "pid", (json_int_t)INT_MAX + 1, "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED ipc_prefix missing", "{s:s,s:i}", "id",
              kid, "pid", 7);
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED bad id", "{s:s,s:i,s:s}", "id", "x",
              "pid", 7, "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED keyed \"kernel_id\" (the old name)",
              "{s:s,s:i,s:s}", "kernel_id", kid, "pid", 7, "ipc_prefix", "/run/x");

        CHECK(hostmsg_failed_decode, fl, 0, "START_FAILED errno 4095", "{s:s,s:s,s:i,s:s}", "id",
              kid, "step", "clone", "error", 4095, "message", "m");
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "START_FAILED errno 4096", "{s:s,s:s,s:i,s:s}",
              "id", kid, "step", "clone", "error", 4096, "message", "m");
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "START_FAILED errno negative",
              "{s:s,s:s,s:i,s:s}", "id", kid, "step", "clone", "error", -1, "message", "m");
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "START_FAILED step too long",
              "{s:s,s:s,s:i,s:s}", "id", kid, "step",
              "0123456789012345678901234567890123456789012345678901234567890123", "error", 1,
              "message", "m");
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "START_FAILED message missing", "{s:s,s:s,s:i}",
              "id", kid, "step", "clone", "error", 1);
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "SANDBOX_FAILED id not a UUID",
              "{s:s,s:s,s:i,s:s}", "id", "../sandbox", "step", "mount", "error", 1, "message", "m");

        CHECK(hostmsg_signal_decode, sg, 0, "SIGNAL 64", "{s:s,s:i}", "id", kid, "signal", 64);
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL 0", "{s:s,s:i}", "id", kid, "signal", 0);
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL 65", "{s:s,s:i}", "id", kid, "signal",
              65);
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL as a string", "{s:s,s:s}", "id", kid,
              "signal", "SIGINT");
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL null", "{s:s,s:n}", "id", kid, "signal");
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL bad id", "{s:s,s:i}", "id",
              "1b4e28ba-2fa1-41d2-883f-0016d3cca42", "signal", 2);
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SANDBOX_DESTROY id missing", "{s:s}",
              "sandbox_id", sid);
        CHECK(hostmsg_relimit_decode, rl, -EBADMSG, "SANDBOX_RELIMIT without limits", "{s:s}", "id",
              sid);
        CHECK(hostmsg_relimit_decode, rl, -EBADMSG, "SANDBOX_RELIMIT memory 0",
              "{s:s,s:{s:i,s:i,s:i,s:i}}", "id", sid, "limits", "memory_mb", 0, "cpu_millis", 1000,
              "pids", 64, "disk_mb", 1024);
        CHECK(hostmsg_relimit_decode, rl, -EBADMSG, "SANDBOX_RELIMIT pids missing",
              "{s:s,s:{s:i,s:i,s:i}}", "id", sid, "limits", "memory_mb", 512, "cpu_millis", 1000,
              "disk_mb", 1024);
        CHECK(hostmsg_relimit_decode, rl, -EBADMSG, "SANDBOX_RELIMIT bad id",
              "{s:s,s:{s:i,s:i,s:i,s:i}}", "id", "../x", "limits", "memory_mb", 512, "cpu_millis",
              1000, "pids", 64, "disk_mb", 1024);
        CHECK(hostmsg_relimit_decode, rl, 0, "SANDBOX_RELIMIT good", "{s:s,s:{s:i,s:i,s:i,s:i}}",
              "id", sid, "limits", "memory_mb", 512, "cpu_millis", 1000, "pids", 64, "disk_mb",
              1024);

        CHECK(hostmsg_exit_decode, ex, 0, "EXITED code 255", "{s:s,s:i,s:i,s:i,s:s}", "id", kid,
              "pid", 9, "exit_code", 255, "signal", 0, "reason", "exited");
        CHECK(hostmsg_exit_decode, ex, 0, "SANDBOX_GONE pid 0 (no sandbox init)",
              "{s:s,s:i,s:i,s:i,s:s}", "id", sid, "pid", 0, "exit_code", 0, "signal", 0, "reason",
              "exited");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED pid negative", "{s:s,s:i,s:i,s:i,s:s}",
              "id", kid, "pid", -1, "exit_code", 0, "signal", 0, "reason", "exited");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED pid past INT_MAX", "{s:s,s:I,s:i,s:i,s:s}",
              "id", kid, "pid", (json_int_t)INT_MAX + 1, "exit_code", 0, "signal", 0, "reason",
              "exited");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED code 256", "{s:s,s:i,s:i,s:i,s:s}", "id",
              kid, "pid", 9, "exit_code", 256, "signal", 0, "reason", "exited");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED code -2", "{s:s,s:i,s:i,s:i,s:s}", "id",
              kid, "pid", 9, "exit_code", -2, "signal", 0, "reason", "exited");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED signal 65", "{s:s,s:i,s:i,s:i,s:s}", "id",
              kid, "pid", 9, "exit_code", -1, "signal", 65, "reason", "signaled");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED reason too long", "{s:s,s:i,s:i,s:i,s:s}",
              "id", kid, "pid", 9, "exit_code", -1, "signal", 9, "reason",
              "0123456789012345678901234567890123");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED reason missing", "{s:s,s:i,s:i,s:i}", "id",
              kid, "pid", 9, "exit_code", 0, "signal", 0);
#undef CHECK
}

/* HELLO: the controllers the kernel-host can use, each at most once, none
 * unknown (the gateway must not believe a limit enforced that is not). */
static void test_hello(void)
{
        struct hostmsg_hello m = {.controllers = HOSTMSG_CONTROLLER_MEMORY | HOSTMSG_CONTROLLER_CPU,
                                  .checkpoints = false,
                                  .checkpoint_off = "no CRIU"},
                             back;
        struct {
                const char *text;
                int rc;
                unsigned controllers;
        } cases[] = {
            {"{\"controllers\": []}", 0, 0},
            {"{\"controllers\": [\"pids\"]}", 0, HOSTMSG_CONTROLLER_PIDS},
            {"{\"controllers\": [\"cpu\", \"memory\", \"pids\"]}", 0,
             HOSTMSG_CONTROLLER_MEMORY | HOSTMSG_CONTROLLER_PIDS | HOSTMSG_CONTROLLER_CPU},
            {"{\"controllers\": [\"cpu\", \"cpu\"]}", -EBADMSG, 0},
            {"{\"controllers\": [\"io\"]}", -EBADMSG, 0},
            {"{\"controllers\": [\"cpu\", \"memory\", \"pids\", \"io\"]}", -EBADMSG, 0},
            {"{\"controllers\": [1]}", -EBADMSG, 0},
            {"{\"controllers\": \"cpu\"}", -EBADMSG, 0},
            {"{}", -EBADMSG, 0},
        };
        json_t *body = transfer(HOSTMSG_HELLO, hostmsg_hello_encode(&m), "HELLO");

        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_hello_decode(body, &back), 0, "HELLO: decodes");
        is_uint(back.controllers, HOSTMSG_CONTROLLER_MEMORY | HOSTMSG_CONTROLLER_CPU,
                "HELLO: memory and cpu, not pids");
        ok(!back.checkpoints, "HELLO: no checkpoints");
        is_str(back.checkpoint_off, "no CRIU", "HELLO: why not");
        json_decref(body);
        m.checkpoints = true;
        m.checkpoint_off[0] = '\0';
        body = transfer(HOSTMSG_HELLO, hostmsg_hello_encode(&m), "HELLO");
        is_int(hostmsg_hello_decode(body, &back), 0, "HELLO with checkpoints: decodes");
        ok(back.checkpoints, "HELLO: checkpoints");
        json_decref(body);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                body = json_loads(cases[i].text, 0, NULL);
                if (!body)
                        BAIL_OUT("json_loads %s", cases[i].text);
                back.controllers = 99;
                is_int(hostmsg_hello_decode(body, &back), cases[i].rc, "HELLO %s", cases[i].text);
                is_uint(back.controllers, cases[i].controllers, "HELLO %s: controllers",
                        cases[i].text);
                json_decref(body);
        }
        is_str(hostmsg_controller_name(HOSTMSG_CONTROLLER_CPU), "cpu", "cpu's name");
        ok(hostmsg_controller_name((enum hostmsg_controller)8) == NULL, "no name for bit 8");
}

/* CONNECT asks for a connection into a sandbox; CONNECTED answers, with
 * the connected socket when it worked. */
static void test_connect(void)
{
        struct hostmsg_connect c = {.port = 8000}, c2;
        struct hostmsg_connected d = {0}, d2;
        int pair[2], got[HOSTMSG_MAX_FDS] = {-1};
        json_t *body, *b;
        char byte = 0;

        memcpy(c.id, kid, sizeof(kid));
        memcpy(c.sandbox_id, sid, sizeof(sid));
        body = transfer(HOSTMSG_CONNECT, hostmsg_connect_encode(&c), "CONNECT");
        memset(&c2, 0, sizeof(c2));
        is_int(hostmsg_connect_decode(body, &c2), 0, "CONNECT: decodes");
        ok(strcmp(c2.id, kid) == 0 && strcmp(c2.sandbox_id, sid) == 0 && c2.port == 8000,
           "CONNECT: every field");
        json_decref(body);

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        memcpy(d.id, kid, sizeof(kid));
        body = transfer_fds(HOSTMSG_CONNECTED, hostmsg_connected_encode(&d), &pair[0], 1, got,
                            "CONNECTED with its socket");
        is_int(hostmsg_connected_decode(body, &d2), 0, "CONNECTED: decodes");
        ok(strcmp(d2.id, kid) == 0 && d2.error == 0, "CONNECTED: every field");
        ok(write(got[0], "x", 1) == 1 && read(pair[1], &byte, 1) == 1 && byte == 'x',
           "CONNECTED: the socket that came is the one sent");
        json_decref(body);
        close(got[0]);
        close(pair[0]);
        close(pair[1]);

#define CHECK(decode, out, rc, name, ...)                                                          \
        do {                                                                                       \
                b = json_pack(__VA_ARGS__);                                                        \
                if (!b)                                                                            \
                        BAIL_OUT("json_pack for %s", name);                                        \
                is_int(decode(b, &out), rc, "%s", name);                                           \
                json_decref(b);                                                                    \
        } while (0)
        CHECK(hostmsg_connect_decode, c2, 0, "CONNECT port 65535", "{s:s,s:s,s:i}", "id", kid,
              "sandbox_id", sid, "port", 65535);
        CHECK(hostmsg_connect_decode, c2, -EBADMSG, "CONNECT port 0", "{s:s,s:s,s:i}", "id", kid,
              "sandbox_id", sid, "port", 0);
        CHECK(hostmsg_connect_decode, c2, -EBADMSG, "CONNECT port 65536", "{s:s,s:s,s:i}", "id",
              kid, "sandbox_id", sid, "port", 65536);
        CHECK(hostmsg_connect_decode, c2, -EBADMSG, "CONNECT port as a string", "{s:s,s:s,s:s}",
              "id", kid, "sandbox_id", sid, "port", "80");
        CHECK(hostmsg_connect_decode, c2, -EBADMSG, "CONNECT sandbox_id not a UUID",
              "{s:s,s:s,s:i}", "id", kid, "sandbox_id", "../x", "port", 80);
        CHECK(hostmsg_connect_decode, c2, -EBADMSG, "CONNECT an address is no field",
              "{s:s,s:s,s:s}", "id", kid, "sandbox_id", sid, "address", "10.0.0.1");
        CHECK(hostmsg_connected_decode, d2, 0, "CONNECTED ECONNREFUSED", "{s:s,s:i}", "id", kid,
              "error", ECONNREFUSED);
        CHECK(hostmsg_connected_decode, d2, -EBADMSG, "CONNECTED error negative", "{s:s,s:i}", "id",
              kid, "error", -1);
        CHECK(hostmsg_connected_decode, d2, -EBADMSG, "CONNECTED error missing", "{s:s}", "id",
              kid);
#undef CHECK
}

/* Volumes: their requests, their mounts, and the paths they may go at. */
static void test_volumes(void)
{
        const char *vid = "0b6f2c5a-1d3e-4f70-8a9b-0c1d2e3f4a5b";
        struct hostmsg_volume v = {.size_mb = 64}, vb;
        struct hostmsg_sandbox m = {.limits = {.memory_mb = 64,
                                               .cpu_millis = 1000,
                                               .pids = 64,
                                               .disk_mb = 1}},
                               back;
        char id[JP_UUID_SIZE];
        const char *path;
        json_t *body;

        snprintf(v.id, sizeof(v.id), "%s", "1b4e28ba-2fa1-41d2-883f-0016d3cca427");
        snprintf(v.volume_id, sizeof(v.volume_id), "%s", vid);
        body = transfer(HOSTMSG_VOLUME_OPEN, hostmsg_volume_encode(&v), "VOLUME_OPEN");
        is_int(hostmsg_volume_decode(body, &vb), 0, "VOLUME_OPEN: decodes");
        ok(strcmp(vb.id, v.id) == 0 && strcmp(vb.volume_id, vid) == 0 && vb.size_mb == 64,
           "VOLUME_OPEN: every field");
        json_object_set_new(body, "volume_id", json_string("../images/x"));
        is_int(hostmsg_volume_decode(body, &vb), -EBADMSG,
               "VOLUME_OPEN: a volume id that is no id refused");
        json_decref(body);

        /* Where a volume may go. */
        ok(hostmsg_volume_path_valid("/data"), "a volume at /data");
        ok(hostmsg_volume_path_valid("/home/user/shared"), "a volume below the home");
        ok(hostmsg_volume_path_valid("/tmp/x"), "a volume below /tmp");
        ok(hostmsg_volume_path_valid("/mnt/a.b/c-d"), "a volume at a deeper path");
        static const char *const bad[] = {"",
                                          "/",
                                          "data",
                                          "/data/",
                                          "/a//b",
                                          "/a/./b",
                                          "/a/../b",
                                          "/..",
                                          "/proc",
                                          "/proc/x",
                                          "/dev/shm",
                                          "/etc",
                                          "/usr/local/x",
                                          "/run/kernel",
                                          "/tmp",
                                          "/home",
                                          "/home/user",
                                          "/opt/glovebox/bin",
                                          "/lib64",
                                          "/a:b",
                                          "/a,b",
                                          "/a\\b",
                                          "/a\nb",
                                          NULL};
        for (size_t i = 0; bad[i]; i++)
                ok(!hostmsg_volume_path_valid(bad[i]), "no volume at \"%s\"", bad[i]);
        ok(hostmsg_volume_path_valid("/procedures") && hostmsg_volume_path_valid("/devices"),
           "a name that only begins as a system directory is fine");

        ok(hostmsg_volume_mount_split("0b6f2c5a-1d3e-4f70-8a9b-0c1d2e3f4a5b:/data", id, &path) &&
               strcmp(id, vid) == 0 && strcmp(path, "/data") == 0,
           "a mount splits into its id and path");
        ok(!hostmsg_volume_mount_split("0b6f2c5a:/data", id, &path), "a short id refused");
        ok(!hostmsg_volume_mount_split("0b6f2c5a-1d3e-4f70-8a9b-0c1d2e3f4a5b:/etc", id, &path),
           "a mount at /etc refused");

        /* In SANDBOX_CREATE. */
        char *volumes[] = {"0b6f2c5a-1d3e-4f70-8a9b-0c1d2e3f4a5b:/data", NULL};

        snprintf(m.sandbox_id, sizeof(m.sandbox_id), "%s", vid);
        m.sandbox = true;
        m.volumes = volumes;
        body = transfer(HOSTMSG_SANDBOX_CREATE, hostmsg_sandbox_encode(&m),
                        "SANDBOX_CREATE with volumes");
        is_int(hostmsg_sandbox_decode(body, &back), 0, "SANDBOX_CREATE with volumes: decodes");
        ok(back.volumes && back.volumes[0] && strcmp(back.volumes[0], volumes[0]) == 0 &&
               !back.volumes[1],
           "SANDBOX_CREATE: the volume mount");
        hostmsg_sandbox_clear(&back);
        ok(back.volumes == NULL, "SANDBOX_CREATE: clear releases volumes");
        json_object_set_new(body, "volumes",
                            json_pack("[s]", "0b6f2c5a-1d3e-4f70-8a9b-0c1d2e3f4a5b:/proc/1"));
        is_int(hostmsg_sandbox_decode(body, &back), -EBADMSG,
               "SANDBOX_CREATE: a volume over /proc refused");
        json_t *many = json_array();
        for (int i = 0; i <= HOSTMSG_MAX_VOLUMES; i++)
                json_array_append_new(many, json_string(volumes[0]));
        json_object_set_new(body, "volumes", many);
        is_int(hostmsg_sandbox_decode(body, &back), -EBADMSG,
               "SANDBOX_CREATE: more than %d volumes refused", HOSTMSG_MAX_VOLUMES);
        json_decref(body);
}

int main(void)
{
        /* A write into a pipe without readers must fail with EPIPE, not
         * end the test. */
        signal(SIGPIPE, SIG_IGN);
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        test_sandbox();
        test_volumes();
        test_sandbox_ready();
        test_start();
        test_replies();
        test_fds();
        test_transport();
        test_memfd_transport();
        test_start_bounds();
        test_request_id();
        test_sandbox_validation();
        test_start_validation();
        test_reply_validation();
        test_hello();
        test_connect();
        close(sock[0]);
        close(sock[1]);
        return done_testing();
}
