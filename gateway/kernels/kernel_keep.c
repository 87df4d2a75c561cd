#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/session.h"
#include "gateway/kernels/specs.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- restart and keep (gateway/kernels/keep.h) ----------------------------------- */

/* The path the kernel-host reported for the kernel's sockets: relative to
 * its sandbox's root when we reach it through a descriptor of that root. */
const char *kernel_reported_ipc(const struct kernel *k)
{
        char through[64];
        size_t n;

        if (k->ipc_root_fd < 0)
                return k->ipc_prefix;
        n = (size_t)snprintf(through, sizeof(through), "/proc/self/fd/%d/", k->ipc_root_fd);
        return strncmp(k->ipc_prefix, through, n) == 0 ? k->ipc_prefix + n : NULL;
}

json_t *kernels_keep_record(void)
{
        json_t *list = json_array();

        for (struct kernel *k = kernels_head; list && k; k = k->next) {
                const char *ipc = kernel_reported_ipc(k);
                struct sandbox *sb = k->sandbox;
                json_t *env, *entry;

                /* Only a ready kernel in a sandbox of its own can be taken
                 * over as it is; the rest is shut down with the old image. */
                if (k->pooled || k->phase != KERNEL_READY || !k->owns_sandbox || !sb || !ipc ||
                    sandbox_keep(sb) < 0) {
                        if (!k->pooled)
                                klog_warn(k->id, "not kept across the restart (%s)",
                                          k->phase != KERNEL_READY ? "not ready"
                                          : !k->owns_sandbox       ? "in a shared sandbox"
                                                                   : "its sandbox has egress");
                        continue;
                }
                env = jp_strv_to_json(k->env);
                entry = json_pack(
                    "{s:s, s:s, s:s, s:s, s:o, s:i, s:s, s:{s:s, s:I, s:I, s:I, s:I, s:i, s:i, "
                    "s:b, s:i, s:i, s:s, s:i, s:i}}",
                    "id", k->id, "kernelspec", k->spec->name, "owner", k->owner, "key", k->key,
                    "env", env ? env : json_array(), "pid", k->pid, "ipc", ipc, "sandbox", "id",
                    sb->id, "memory_mb", (json_int_t)sb->limits.memory_mb, "cpu_millis",
                    (json_int_t)sb->limits.cpu_millis, "pids", (json_int_t)sb->limits.pids,
                    "disk_mb", (json_int_t)sb->limits.disk_mb, "init_pid", sb->init_pid, "user_uid",
                    (int)sb->user_uid, "has_root", sb->has_root, "root_uid", (int)sb->root_uid,
                    "root_gid", (int)sb->root_gid, "root", sb->root, "root_fd", sb->root_fd,
                    "user_gid", (int)sb->user_gid);
                if (entry && sb->cgroup[0] &&
                    json_object_set_new(json_object_get(entry, "sandbox"), "cgroup",
                                        json_string(sb->cgroup)) < 0) {
                        json_decref(entry);
                        entry = NULL;
                }
                if (entry && json_object_set_new(entry, "sessions", session_keep_record(k)) < 0) {
                        json_decref(entry);
                        entry = NULL;
                }
                if (!entry || json_array_append_new(list, entry) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

int kernel_adopt(const struct kernel_kept *kept, struct sandbox *sb, struct kernel **out)
{
        const struct jp_kernelspec *spec = jp_kernelspec_find(kernels_specs(), kept->kernelspec);
        struct kernel *k;
        size_t nenv = 0;
        int rc = -ENOMEM;

        *out = NULL;
        if (!spec)
                return -ENOENT;
        if (kernel_by_id(kept->id))
                return -EEXIST;
        k = calloc(1, sizeof(*k));
        if (!k)
                return -ENOMEM;
        snprintf(k->id, sizeof(k->id), "%s", kept->id);
        snprintf(k->owner, sizeof(k->owner), "%s", kept->owner);
        snprintf(k->key, sizeof(k->key), "%s", kept->key);
        while (kept->env && kept->env[nenv])
                nenv++;
        k->env = calloc(nenv + 1, sizeof(char *));
        for (size_t i = 0; k->env && i < nenv; i++) {
                k->env[i] = strdup(kept->env[i]);
                if (!k->env[i])
                        goto fail;
        }
        if (!k->env)
                goto fail;
        rc = jp_signer_new(k->key, strlen(k->key), &k->signer);
        if (rc < 0)
                goto fail;
        rc = host_listen(k->id, NULL, &kernel_process_ops, k);
        if (rc < 0)
                goto fail;
        k->spec = spec;
        k->ipc_separator = specs_ipc_separator(spec);
        k->ipc_root_fd = -1;
        k->limits = sb->limits;
        k->sandbox = kept->shared ? sandbox_ref(sb) : sb;
        k->owns_sandbox = !kept->shared;
        k->ever_ready = true;
        k->running = true;
        k->adopting = true;
        k->pid = kept->pid;
        kernel_set_state(k, "starting");
        kernel_touch(k);
        k->next = kernels_head;
        kernels_head = k;
        k->phase = KERNEL_CONNECTING;
        loop_timer_start(&k->deadline_timer, kernel_on_deadline, config_get()->keep_grace * 1000.0);
        if (kernel_set_ipc_prefix(k, kept->ipc) < 0 || kernel_open_sockets(k) < 0) {
                snprintf(k->reason, sizeof(k->reason),
                         "cannot connect to the kept kernel's sockets");
                klog_warn(k->id, "%s", k->reason);
                host_stop(k->id);
        } else {
                kernel_probe_start(k);
        }
        *out = k;
        return 0;
fail:
        jp_strv_free(k->env);
        jp_signer_destroy(&k->signer);
        free(k);
        return rc;
}
