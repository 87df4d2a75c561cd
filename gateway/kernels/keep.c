/* Restart and keep: on SIGUSR2 the gateway records its kernels in
 * $STATE_DIR/kernels.json and execs itself (the same pid, so its
 * kernel-host, whose sandboxes die with it, stays its child); the new image
 * reads the record back and takes the kernels over. */
#include "autoconf.h"

#include "gateway/kernels/keep.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/pause.h"
#include "gateway/kernels/sandboxes.h"
#include "gateway/kernels/session.h"
#include "protocol/buf.h"
#include "protocol/fleetid.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEEP_RECORD     "kernels.json"
#define KEEP_RECORD_TMP "kernels.json.new"
#define KEEP_VERSION    1
/* A record is our own small file: anything larger is not one. */
#define KEEP_RECORD_MAX (64 << 20)

/* Opens the state directory, made when missing, as a descriptor every
 * later step goes through: it holds HMAC keys, so it must be a directory
 * of ours (not a symlink to one) that only we can enter. -errno. */
static int open_state_dir(const char *state_dir, bool make)
{
        struct stat st;
        int fd, rc;

        if (!state_dir[0])
                return -ENOENT;
        if (make && mkdir(state_dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        fd = open(state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0) {
                rc = -errno;
                goto fail;
        }
        if (st.st_uid != geteuid()) {
                rc = -EPERM;
                goto fail;
        }
        /* Others must not even list it: the record's name is known. */
        if ((st.st_mode & 077) && fchmod(fd, 0700) < 0) {
                rc = -errno;
                goto fail;
        }
        return fd;
fail:
        close(fd);
        return rc;
}

static const struct keep_part *parts[KEEP_MAX_PARTS];
static size_t nparts;

int keep_register(const struct keep_part *part)
{
        if (nparts == KEEP_MAX_PARTS)
                return -ENOSPC;
        parts[nparts++] = part;
        return 0;
}

/* Every registered part's record, by name: a new object, or NULL. */
static json_t *parts_record(void)
{
        json_t *all = json_object();

        for (size_t i = 0; all && i < nparts; i++) {
                json_t *one = parts[i]->record();

                if (!one || json_object_set_new(all, parts[i]->name, one) < 0) {
                        json_decref(all);
                        return NULL;
                }
        }
        return all;
}

int keep_save(const char *state_dir, const struct keep_process *proc)
{
        json_t *kernels = NULL, *sessions = NULL, *discard = NULL, *record = NULL;
        char *text = NULL;
        int dir, rc;

        dir = open_state_dir(state_dir, true);
        if (dir < 0) {
                rc = dir;
                log_error("cannot use --state-dir %s: %s", state_dir, strerror(-rc));
                goto out;
        }
        /* Marks of an earlier attempt that failed do not count. */
        sandboxes_keep_reset();
        kernels = kernels_keep_record();
        sessions = parts_record();
        discard = kernels ? sandboxes_unkept_ids() : NULL;
        record = kernels && sessions && discard
                     ? json_pack("{s:i, s:s, s:i, s:i, s:i, s:i, s:O, s:O}", "version",
                                 KEEP_VERSION, "runtime_dir", proc->runtime_dir, "lock_fd",
                                 proc->lock_fd, "host_fd", proc->host_fd, "host_pid",
                                 proc->host_pid, "controllers", (int)proc->controllers, "kernels",
                                 kernels, "discard", discard)
                     : NULL;
        /* The kernel-host's hello said whether it makes checkpoints; the
         * new image hears no hello again. */
        if (record) {
                const char *why;
                bool on = host_checkpoints(&why);

                json_object_set_new(record, "checkpoints", json_boolean(on));
                json_object_set_new(record, "checkpoint_off", json_string(why));
        }
        /* The parts beside the kernels, each under its own name. */
        if (record && json_object_update(record, sessions) < 0) {
                json_decref(record);
                record = NULL;
        }
        text = record ? json_dumps(record, JSON_COMPACT) : NULL;
        if (!text) {
                rc = -ENOMEM;
                goto out;
        }
        /* The next image reads all of a record or none. */
        rc = state_write_file(dir, KEEP_RECORD, text);
        if (rc < 0)
                goto fail;
        log_info("recorded %zu kernel(s) to keep in %s/" KEEP_RECORD, json_array_size(kernels),
                 state_dir);
        goto out;
fail:
        log_error("cannot write %s/" KEEP_RECORD ": %s", state_dir, strerror(-rc));
        /* A rename that happened before a failed fsync: no half-kept state. */
        unlinkat(dir, KEEP_RECORD, 0);
out:
        if (dir >= 0)
                close(dir);
        if (text) {
                /* It holds the kernels' keys. */
                explicit_bzero(text, strlen(text));
                free(text);
        }
        json_decref(record);
        json_decref(kernels);
        json_decref(sessions);
        json_decref(discard);
        return rc;
}

void keep_discard_stale(const char *state_dir)
{
        int dir = open_state_dir(state_dir, false);

        if (dir < 0)
                return;
        unlinkat(dir, KEEP_RECORD_TMP, 0);
        /* Its descriptors and pids belonged to a process that is gone. */
        if (unlinkat(dir, KEEP_RECORD, 0) == 0)
                log_warn("removed %s/" KEEP_RECORD
                         ": a record of kernels that no gateway takes over",
                         state_dir);
        close(dir);
}

int keep_load(const char *state_dir, struct keep_process *proc, json_t **out)
{
        json_error_t jerr;
        json_t *record = NULL, *kernels = NULL, *sessions = NULL, *discard = NULL;
        const char *runtime_dir = NULL;
        int version = 0, controllers = 0, rc, fd, dir;
        struct stat st;

        *out = NULL;
        dir = open_state_dir(state_dir, false);
        if (dir < 0)
                return dir;
        fd = openat(dir, KEEP_RECORD, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
                rc = -errno;
                close(dir);
                return rc;
        }
        /* Read once: the keys in it are not left on disk. */
        unlinkat(dir, KEEP_RECORD, 0);
        close(dir);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
            (st.st_mode & 077) || st.st_size > KEEP_RECORD_MAX) {
                close(fd);
                return -EPERM;
        }
        record = json_read_fd(fd, KEEP_RECORD_MAX, 0, &jerr);
        close(fd);
        if (!record)
                return -EBADMSG;
        rc =
            json_unpack(record, "{s:i, s:s, s:i, s:i, s:i, s:i, s:o, s:o, s:o}", "version",
                        &version, "runtime_dir", &runtime_dir, "lock_fd", &proc->lock_fd, "host_fd",
                        &proc->host_fd, "host_pid", &proc->host_pid, "controllers", &controllers,
                        "kernels", &kernels, "sessions", &sessions, "discard", &discard);
        if (rc < 0 || version != KEEP_VERSION || !json_is_array(kernels) ||
            !json_is_array(sessions) || !json_is_array(discard) ||
            (size_t)snprintf(proc->runtime_dir, sizeof(proc->runtime_dir), "%s", runtime_dir) >=
                sizeof(proc->runtime_dir)) {
                json_decref(record);
                return -EBADMSG;
        }
        proc->controllers = (unsigned)controllers;
        host_set_checkpoints(json_is_true(json_object_get(record, "checkpoints")),
                             json_string_value(json_object_get(record, "checkpoint_off"))
                                 ?: "not said before the restart");
        *out = record;
        return 0;
}

/* What cannot be taken over must not run on unseen: its process and
 * sandbox are killed. */
static void give_up(const char *kernel_id, const char *sandbox_id, int root_fd, const char *why)
{
        log_warn("kernel %s: not re-adopted (%s): killing it",
                 kernel_id ? fleetid_short(kernel_id).s : "?", why);
        if (kernel_id)
                host_stop(kernel_id);
        if (sandbox_id)
                host_sandbox_destroy(sandbox_id);
        if (root_fd >= 0)
                close(root_fd);
}

static void adopt_one(json_t *entry)
{
        struct kernel_kept kept = {0};
        struct sandbox sbk = {0}, *sb = NULL;
        struct kernel *k = NULL;
        json_t *env = NULL, *jsb = NULL, *value;
        const char *sandbox_id = NULL, *root = "";
        json_int_t memory = 0, cpu = 0, pids = 0, disk = 0;
        int root_fd = -1, user_uid = 0, user_gid = 0, root_uid = 0, root_gid = 0, has_root = 0;
        char **envv = NULL;
        size_t i;
        int rc;

        if (json_unpack(entry, "{s:s, s:s, s:s, s:s, s:o, s:i, s:s, s:o}", "id", &kept.id,
                        "kernelspec", &kept.kernelspec, "owner", &kept.owner, "key", &kept.key,
                        "env", &env, "pid", &kept.pid, "ipc", &kept.ipc, "sandbox", &jsb) < 0 ||
            json_unpack(jsb, "{s:s, s:I, s:I, s:I, s:I, s:i, s:i, s:i, s:b, s:i, s:i, s:s, s:i}",
                        "id", &sandbox_id, "memory_mb", &memory, "cpu_millis", &cpu, "pids", &pids,
                        "disk_mb", &disk, "init_pid", &sbk.init_pid, "user_uid", &user_uid,
                        "user_gid", &user_gid, "has_root", &has_root, "root_uid", &root_uid,
                        "root_gid", &root_gid, "root", &root, "root_fd", &root_fd) < 0 ||
            strlen(sandbox_id) >= sizeof(sbk.id) || !json_is_array(env)) {
                give_up(kept.id, sandbox_id, root_fd, "malformed record");
                return;
        }
        snprintf(sbk.id, sizeof(sbk.id), "%s", sandbox_id);
        snprintf(sbk.root, sizeof(sbk.root), "%s", root);
        /* Kept since the sandbox's group may be named otherwise (sandboxes.h). */
        value = json_object_get(jsb, "cgroup");
        if (json_is_string(value) && json_string_length(value) < sizeof(sbk.cgroup))
                snprintf(sbk.cgroup, sizeof(sbk.cgroup), "%s", json_string_value(value));
        sbk.limits.memory_mb = (uint64_t)memory;
        sbk.limits.cpu_millis = (uint32_t)cpu;
        sbk.limits.pids = (uint32_t)pids;
        sbk.limits.disk_mb = (uint64_t)disk;
        sbk.user_uid = (unsigned)user_uid;
        sbk.user_gid = (unsigned)user_gid;
        sbk.has_root = has_root;
        sbk.root_uid = (unsigned)root_uid;
        sbk.root_gid = (unsigned)root_gid;
        envv = calloc(json_array_size(env) + 1, sizeof(char *));
        json_array_foreach(env, i, value) {
                if (envv && json_is_string(value))
                        envv[i] = (char *)json_string_value(value);
        }
        kept.env = envv;
        rc = envv ? sandbox_adopt(&sbk, root_fd, &sb) : -ENOMEM;
        if (rc < 0) {
                give_up(kept.id, sandbox_id, root_fd, strerror(-rc));
                goto out;
        }
        rc = kernel_adopt(&kept, sb, &k);
        if (rc < 0) {
                give_up(kept.id, NULL, -1, strerror(-rc));
                /* The last reference: the kernel-host destroys it. */
                sandbox_unref(&sb);
                goto out;
        }
        json_array_foreach(json_object_get(entry, "sessions"), i, value) {
                const char *sid = NULL, *identity = NULL;

                if (json_unpack(value, "{s:s, s:s}", "id", &sid, "identity", &identity) < 0 ||
                    session_adopt(k, sid, identity) < 0)
                        klog_warn(k->id, "a client session was not kept");
        }
out:
        free(envv);
}

void keep_adopt(json_t *record)
{
        json_t *kernels = json_object_get(record, "kernels"), *entry;
        size_t i;

        json_array_foreach(kernels, i, entry)
                adopt_one(entry);
        /* After the kernels: a part (a session) names one. */
        for (size_t p = 0; p < nparts; p++)
                parts[p]->adopt(json_object_get(record, parts[p]->name));
        /* What the old image did not keep (pooled kernels, E2B sandboxes,
         * terminals, sandboxes with egress) is destroyed only now: had the
         * exec failed, the old image would have served on with all of it. */
        json_array_foreach(json_object_get(record, "discard"), i, entry) {
                if (json_is_string(entry) && host_sandbox_destroy(json_string_value(entry)) < 0)
                        log_warn("cannot ask for sandbox %s to be destroyed",
                                 fleetid_short(json_string_value(entry)).s);
        }
        log_info("re-adopting %zu kernel(s) kept across the restart", json_array_size(kernels));
}
