/* What a process is started with (spawn_internal.h): its command line, its
 * environment, and a kernel's connection file and the sockets it names. */
#include "autoconf.h"

#include "kernel-host/spawn_internal.h"
#include "protocol/fleetid.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void spawn_strv_free(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

/* Replaces "{connection_file}" and "{resource_dir}" as jupyter_client does. */
static char *expand_arg(const char *arg, const char *connection_file, const char *resource_dir)
{
        static const struct {
                const char *name;
                size_t len;
        } vars[] = {{"{connection_file}", 17}, {"{resource_dir}", 14}};
        /* Room for the argument and two paths it names: a kernelspec needs
         * no more, and an argument that grows past that is refused. */
        size_t size = strlen(arg) + 2 * PATH_MAX + 1;
        char *out = malloc(size);
        size_t o = 0;

        for (const char *p = arg; out && *p;) {
                const char *value = NULL;
                size_t skip = 0;

                for (size_t v = 0; v < 2; v++) {
                        if (strncmp(p, vars[v].name, vars[v].len) == 0) {
                                value = v == 0 ? connection_file : resource_dir;
                                skip = vars[v].len;
                        }
                }
                if (!value) {
                        value = p;
                        skip = 1;
                }
                size_t vlen = value == p ? 1 : strlen(value);

                if (o + vlen >= size) {
                        free(out);
                        return NULL;
                }
                memcpy(out + o, value, vlen);
                o += vlen;
                p += skip;
        }
        if (out)
                out[o] = '\0';
        return out;
}

/* A bare program name is looked up in the kernel's PATH here, before fork,
 * because the child may only make async-signal-safe calls. */
static char *resolve_program(const char *name)
{
        static const char *const dirs[] = {"/usr/local/bin", "/usr/bin", "/bin"};
        char path[PATH_MAX];

        if (strchr(name, '/'))
                return strdup(name);
        for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                if ((size_t)snprintf(path, sizeof(path), "%s/%s", dirs[i], name) < sizeof(path) &&
                    access(path, X_OK) == 0)
                        return strdup(path);
        }
        return strdup(name);
}

char **spawn_build_argv(const struct hostmsg_start *req, const char *connection_file)
{
        size_t n = 0;
        char **argv;

        while (req->argv[n])
                n++;
        argv = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; argv && i < n; i++) {
                /* Only a kernelspec's argv names its files, its program
                 * included ("{resource_dir}/kernel", as jupyter_client
                 * fills in every word); a command's words are the
                 * client's, passed on as they are. */
                argv[i] = req->kernel
                              ? expand_arg(req->argv[i], connection_file, req->kernelspec_dir)
                              : strdup(req->argv[i]);
                if (i == 0 && argv[0]) {
                        char *program = resolve_program(argv[0]);

                        free(argv[0]);
                        argv[0] = program;
                }
                if (!argv[i]) {
                        spawn_strv_free(argv);
                        return NULL;
                }
        }
        return argv;
}

static int env_has(char **envp, size_t n, const char *entry)
{
        size_t name_len = strcspn(entry, "=");

        for (size_t i = 0; i < n; i++) {
                if (strncmp(envp[i], entry, name_len + 1) == 0)
                        return (int)i;
        }
        return -1;
}

/* The kernel's whole environment: a fixed base, then the request's entries
 * (kernelspec env and the client's, validated by the gateway), which may
 * override the base except HOME. Nothing of our own environment leaks. */
char **spawn_build_env(const struct hostmsg_start *req, const char *home)
{
        char home_entry[PATH_MAX + 8];
        const char *base[] = {
            "PATH=" ROOTFS_TOOLS_DIR ":/usr/local/bin:/usr/bin:/bin",
            home_entry,
            "LANG=C.UTF-8",
            "TERM=xterm-256color",
            "MPLBACKEND=module://matplotlib_inline.backend_inline",
        };
        size_t nbase = sizeof(base) / sizeof(base[0]);
        size_t nreq = 0, n = 0;
        char **envp;

        snprintf(home_entry, sizeof(home_entry), "HOME=%s", home);
        while (req->env[nreq])
                nreq++;
        envp = calloc(nbase + nreq + 1, sizeof(char *));
        if (!envp)
                return NULL;
        for (size_t i = 0; i < nbase; i++) {
                envp[n] = strdup(base[i]);
                if (!envp[n++])
                        goto fail;
        }
        for (size_t i = 0; i < nreq; i++) {
                int at = env_has(envp, n, req->env[i]);
                char *copy;

                if (strncmp(req->env[i], "HOME=", 5) == 0)
                        continue;
                copy = strdup(req->env[i]);
                if (!copy)
                        goto fail;
                if (at >= 0) {
                        free(envp[at]);
                        envp[at] = copy;
                } else {
                        envp[n++] = copy;
                }
        }
        return envp;
fail:
        spawn_strv_free(envp);
        return NULL;
}

/* The directory of the box's sockets and connection files: the sandbox's
 * /run/kernel, or ipc_dir without a sandbox. */
static int box_ipc_fd(const struct box *b)
{
        return b->sandboxed ? b->sandbox.run_fd : b->plain_ipc_fd;
}

/* The kernel's connection file, and its name in the box's ipc directory.
 * Its sockets are named after the kernel's id (its first 8 characters:
 * short, so paths stay far below the 108-byte limit), the same across
 * restarts, so that clients' sockets reconnect by themselves. In a sandbox
 * the prefix given to the gateway is relative to the sandbox's root (the
 * gateway reaches it through its descriptor of that root). */
void spawn_prepare_connection(const struct box *b, const struct hostmsg_start *req,
                              struct jp_connection *conn, char *name, size_t name_size,
                              char *inside, size_t inside_size, char *prefix, size_t prefix_size)
{
        *conn = (struct jp_connection){.transport = "ipc", .signature_scheme = "hmac-sha256"};
        snprintf(name, name_size, "%s.json", fleetid_short(req->id).s);
        if (b->sandboxed) {
                snprintf(conn->ip, sizeof(conn->ip), ROOTFS_RUN_DIR "/%s",
                         fleetid_short(req->id).s);
                snprintf(inside, inside_size, ROOTFS_RUN_DIR "/%s", name);
                snprintf(prefix, prefix_size, "%s", conn->ip + 1);
        } else {
                snprintf(conn->ip, sizeof(conn->ip), "%s/%s", b->ipc_dir, fleetid_short(req->id).s);
                snprintf(inside, inside_size, "%s/%s", b->ipc_dir, name);
                snprintf(prefix, prefix_size, "%s", conn->ip);
        }
        snprintf(conn->key, sizeof(conn->key), "%s", req->key);
        for (int i = 0; i < JP_CHANNEL_COUNT; i++)
                conn->ports[i] = HOSTMSG_PORT(i);
}

/* Removes a kernel's connection file and the sockets it left (a killed
 * kernel cannot remove them itself), so they do not fill /run/kernel. */
void spawn_remove_kernel_files(const struct box *b, const char *id)
{
        char name[32];

        snprintf(name, sizeof(name), "%s.json", fleetid_short(id).s);
        unlinkat(box_ipc_fd(b), name, 0);
        for (int i = 0; i < JP_CHANNEL_COUNT; i++) {
                snprintf(name, sizeof(name), "%s-%d", fleetid_short(id).s, HOSTMSG_PORT(i));
                unlinkat(box_ipc_fd(b), name, 0);
                /* And as kernels that name them <ip>:<port> do. */
                snprintf(name, sizeof(name), "%s:%d", fleetid_short(id).s, HOSTMSG_PORT(i));
                unlinkat(box_ipc_fd(b), name, 0);
        }
}
