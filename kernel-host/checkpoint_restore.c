#include "autoconf.h"

#include "kernel-host/checkpoint.h"
#include "kernel-host/cgroup.h"
#include "kernel-host/overlay.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/spawn_internal.h"
#include "protocol/buf.h"
#include "protocol/fleetid.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"
#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel-host/checkpoint_internal.h"
#include "kernel-host/init_report.h"

#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

/* ---- restore ------------------------------------------------------------------- */

int checkpoint_read_record(int dir_fd, json_t **out)
{
        int fd = openat(dir_fd, RECORD, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

        *out = fd >= 0 ? json_read_fd(fd, RECORD_MAX, 0, NULL) : NULL;
        if (fd >= 0)
                close(fd);
        return *out ? 0 : -EBADMSG;
}

/* A user namespace with ids's maps, held by a child that waits: the
 * idmapping of the host's /usr for the rebuilt top goes through it. The
 * caller kills and reaps *holder. The child holds none of our descriptors
 * and dies with us: a holder left behind by a killed kernel-host had kept
 * its link to the gateway open for ever, so the gateway never learnt that
 * the kernel-host was gone (a resume went unanswered). */
static int ids_holder(const struct sandbox_ids *ids, pid_t *holder)
{
        int sync[2], rc;
        char byte;
        pid_t parent = getpid(), pid;

        *holder = -1;
        if (pipe2(sync, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid == 0) {
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent ||
                    dup2(sync[1], 0) < 0 || syscall(SYS_close_range, 1u, ~0u, 0u) < 0)
                        _exit(1);
                if (unshare(CLONE_NEWUSER) < 0)
                        _exit(1);
                if (write(0, "u", 1) != 1)
                        _exit(1);
                close(0);
                for (;;)
                        pause();
        }
        close(sync[1]);
        rc = pid < 0 ? -errno : read(sync[0], &byte, 1) == 1 ? 0 : -EIO;
        close(sync[0]);
        if (pid > 0)
                *holder = pid;
        if (rc == 0)
                rc = sandbox_write_id_maps(pid, ids);
        return rc;
}

static void holder_end(pid_t holder)
{
        int status;

        if (holder > 0) {
                kill(holder, SIGKILL);
                waitpid(holder, &status, 0);
        }
}

/* Unpacks a checkpoint's archive into dir as its dump read it: owners by
 * number, modes, holes, user xattrs. 0 or -1. In the restore's worker. */
static int untar(const char *archive, const char *dir)
{
        char *argv[] = {"tar",
                        "-x",
                        "-f",
                        (char *)archive,
                        "-C",
                        (char *)dir,
                        "--numeric-owner",
                        "--same-permissions",
                        "--sparse",
                        "--xattrs",
                        "--xattrs-include=user.*",
                        NULL};

        return checkpoint_run(argv, -1);
}

/* The restore's worker, in a mount namespace of its own: the top again on
 * a new tmpfs, /usr and the overlays over it, the top sent to the
 * kernel-host, then criu restore in its place. */
static __attribute__((noreturn)) void restore_worker(const char *top, const char *options,
                                                     const char *archive, int usr_fd, int top_sock,
                                                     int report_wr, char **criu_argv,
                                                     const struct job *j)
{
        int fd, kdat = checkpoint_kdat_clone(criu_argv);

        /* Nothing of it is used before it is known to be as it was made. */
        fd = open(j->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || checkpoint_manifest_check(fd) < 0)
                _exit(RESTORE_TAMPERED);
        /* Its compressed pages, where CRIU reads them (its own images). */
        if (j->own_images && checkpoint_pages_expand_for(fd, j->sandbox_id) < 0)
                _exit(RESTORE_PAGES);
        close(fd);
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                _exit(120);
        if (mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, options) < 0)
                _exit(121);
        if (untar(archive, top) < 0)
                _exit(122);
        if (j->copy && checkpoint_copy_owners(top, &j->old_ids, &j->ids) < 0)
                _exit(122);
        if (chdir(top) < 0)
                _exit(123);
        fd = checkpoint_lay_overlays(j, usr_fd);
        if (fd != 0)
                _exit(fd);
        /* Its volumes, where CRIU is told they are. */
        for (size_t k = 0; k < j->nvolumes; k++) {
                char name[32];

                snprintf(name, sizeof(name), "vol-%zu", k);
                if ((mkdir(name, 0700) < 0 && errno != EEXIST) ||
                    syscall(SYS_move_mount, j->volume_fds[k], "", AT_FDCWD, name,
                            MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        _exit(129);
        }
        /* Its disk home, a new one with its files (as the top's). */
        if (j->home_fd >= 0) {
                char home[PATH_MAX + 16];

                snprintf(home, sizeof(home), "%s/" HOME_DISK, top);
                if ((mkdir(HOME_DISK, 0700) < 0 && errno != EEXIST) ||
                    syscall(SYS_move_mount, j->home_fd, "", AT_FDCWD, HOME_DISK,
                            MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
                    untar(j->home_archive, home) < 0 ||
                    (j->copy && checkpoint_copy_owners(home, &j->old_ids, &j->ids) < 0))
                        _exit(130);
        }
        /* Its resolver's address, new unless its slot was free again. */
        if (j->resolv[0]) {
                fd = open("root", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0 || sandbox_write_resolv(fd, j->resolv) < 0)
                        _exit(128);
                close(fd);
        }
        fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || sandbox_send_fd(top_sock, fd) < 0)
                _exit(126);
        if (dup2(report_wr, REPORT_FD) < 0)
                _exit(127);
        fd = open("/dev/null", O_RDWR);
        if (fd < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
                _exit(127);
        checkpoint_kdat_exec(criu_argv, kdat, true);
}

bool checkpoint_json_uint(json_t *o, const char *key, unsigned long long max,
                          unsigned long long *out)
{
        json_t *v = json_object_get(o, key);

        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (unsigned long long)json_integer_value(v) > max)
                return false;
        *out = (unsigned long long)json_integer_value(v);
        return true;
}

static int record_take(json_t *rec, struct job *j, char *err, size_t errlen)
{
        json_t *ids = json_object_get(rec, "ids"), *lim = json_object_get(rec, "limits");
        json_t *procs = json_object_get(rec, "procs"), *p;
        unsigned long long v[8];
        size_t i;

        if (!checkpoint_json_uint(ids, "setup_uid", UINT32_MAX, &v[0]) ||
            !checkpoint_json_uint(ids, "user_uid", UINT32_MAX, &v[1]) ||
            !checkpoint_json_uint(ids, "setup_gid", UINT32_MAX, &v[2]) ||
            !checkpoint_json_uint(ids, "user_gid", UINT32_MAX, &v[3]) ||
            !checkpoint_json_uint(lim, "memory_mb", 1ull << 40, &v[4]) ||
            !checkpoint_json_uint(lim, "cpu_millis", UINT32_MAX, &v[5]) ||
            !checkpoint_json_uint(lim, "pids", UINT32_MAX, &v[6]) ||
            !checkpoint_json_uint(lim, "disk_mb", 1ull << 40, &v[7]) || !json_is_array(procs) ||
            json_array_size(procs) > MAX_PROCS || v[0] == 0 || v[1] == 0) {
                snprintf(err, errlen, "the checkpoint's record is malformed");
                return -EBADMSG;
        }
        j->ids = (struct sandbox_ids){.setup_uid = (uid_t)v[0],
                                      .user_uid = (uid_t)v[1],
                                      .setup_gid = (gid_t)v[2],
                                      .user_gid = (gid_t)v[3],
                                      .privileged = true};
        j->limits = (struct hostmsg_limits){.memory_mb = v[4],
                                            .cpu_millis = (uint32_t)v[5],
                                            .pids = (uint32_t)v[6],
                                            .disk_mb = v[7]};
        json_array_foreach(procs, i, p) {
                const char *id = json_string_value(json_object_get(p, "id"));
                unsigned long long nspid;

                if (!id || !jp_uuid_valid(id, strlen(id)) ||
                    !checkpoint_json_uint(p, "nspid", INT32_MAX, &nspid)) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
                snprintf(j->procs[i].id, sizeof(j->procs[i].id), "%s", id);
                snprintf(j->procs[i].group, sizeof(j->procs[i].group), "p-%s", id);
                /* A kernel forked ahead, on cgroup v2 (checkpoint.c). */
                if (json_object_get(p, "group")) {
                        if (!json_is_string(json_object_get(p, "group")) ||
                            strcmp(json_string_value(json_object_get(p, "group")),
                                   ZYGOTE_AHEAD_GROUP) != 0) {
                                snprintf(err, errlen, "the checkpoint's record is malformed");
                                return -EBADMSG;
                        }
                        snprintf(j->procs[i].group, sizeof(j->procs[i].group), "%s",
                                 ZYGOTE_AHEAD_GROUP);
                }
                j->procs[i].nspid = (pid_t)nspid;
                j->procs[i].kernel = json_is_true(json_object_get(p, "kernel"));
                if (checkpoint_streams_take(p, j, i) < 0) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
        }
        j->nprocs = json_array_size(procs);
        /* A template's sandbox: its tree (absent: the host's /usr). */
        if (json_object_get(rec, "template")) {
                const char *tree = json_string_value(json_object_get(rec, "template"));

                if (!tree || tree[0] != '/' || strlen(tree) >= sizeof(j->template_root) ||
                    strpbrk(tree, ",:\\")) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
                snprintf(j->template_root, sizeof(j->template_root), "%s", tree);
        }
        /* A built template's: its layers, and its overlays' options. */
        if (json_object_get(rec, "layers")) {
                json_t *o = json_object_get(rec, "overlays");
                const char *root = json_string_value(json_object_get(o, "/"));
                const char *usr = json_string_value(json_object_get(o, "/usr"));

                if (!checkpoint_overlay_data_ok(root) ||
                    (usr && !checkpoint_overlay_data_ok(usr))) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
                snprintf(j->root_data, sizeof(j->root_data), "%s", root);
                snprintf(j->usr_data, sizeof(j->usr_data), "%s", usr ? usr : "");
                j->layers = json_incref(json_object_get(rec, "layers"));
        }
        /* Its egress, as the dump sealed it (absent: none). */
        if (json_object_get(rec, "network") &&
            (hostmsg_network_decode(json_object_get(rec, "network"), &j->network) < 0 ||
             !checkpoint_json_uint(rec, "net_slot", INT32_MAX, &v[0]))) {
                snprintf(err, errlen, "the checkpoint's record is malformed");
                return -EBADMSG;
        }
        if (j->network.enabled)
                j->net_slot = (int)v[0];
        return 0;
}

static void restore_cleanup(struct job *j)
{
        if (j->own_images) /* CRIU is done with them */
                checkpoint_images_dir_remove(checkpoint_dir_fd, j->name, j->sandbox_id);
        for (size_t i = 0; i < j->nprocs; i++)
                cgroup_destroy(&j->procs[i].cgroup);
        cgroup_destroy(&j->cgroup);
        if (j->box)
                spawn_box_discard(j->box);
        j->box = NULL;
}

int checkpoint_restore_start(const struct hostmsg_volume *req, char *step, size_t stepsize,
                             char *err, size_t errlen)
{
        char dir[PATH_MAX + 64], top[PATH_MAX + 16], options[128], pidfile[PATH_MAX + 16];
        char root[PATH_MAX + 32], archive[PATH_MAX + 64], inherit[96], cg_err[HOSTMSG_ERROR_SIZE];
        char *argv[MAX_ARGS], *owned[MAX_ARGS];
        size_t argc = 0, nowned = 0, nvolume = 0, i;
        json_t *rec = NULL, *mounts, *m;
        const char *pipe_name;
        int dir_fd = -1, usr_fd = -1, report[2] = {-1, -1}, sv[2] = {-1, -1}, rc;
        bool idmapped = false;
        pid_t holder = -1, pid;
        struct job *j;

        snprintf(step, stepsize, "restore");
        /* Nothing changes under CRIU (until the restore ends). */
        checkpoint_compact_cancel(req->volume_id);
        dir_fd = openat(checkpoint_dir_fd, req->volume_id,
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd < 0) {
                snprintf(err, errlen, "no such checkpoint");
                return -ENOENT;
        }
        j = checkpoint_job_new(req->id, req->volume_id);
        if (!j) {
                close(dir_fd);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        j->restore = true;
        /* Its record is read here; the worker checks the rest first. */
        if (checkpoint_manifest_check_file(dir_fd, RECORD) < 0) {
                rc = -EBADMSG;
                snprintf(err, errlen,
                         "the checkpoint's files are not as its dump sealed them "
                         "(manifest.json): refused");
                goto fail;
        }
        rc = checkpoint_read_record(dir_fd, &rec);
        if (rc < 0) {
                snprintf(err, errlen, "the checkpoint's record cannot be read");
                goto fail;
        }
        rc = record_take(rec, j, err, errlen);
        j->flags = json_incref(json_object_get(rec, "flags"));
        if (rc < 0)
                goto fail;
        {
                struct hostmsg_failed fail = {0};

                rc = spawn_box_new(req->id, &j->box, &fail);
                if (rc < 0) {
                        snprintf(err, errlen, "%s", fail.message);
                        goto fail;
                }
        }
        if (req->copy) {
                /* Beside the sandbox it was taken from: ids of its own,
                 * and its processes' named from its id. */
                j->copy = true;
                j->old_ids = j->ids;
                for (i = 0; i < j->nprocs; i++) {
                        char derived[JP_UUID_SIZE];

                        jp_uuid_derive(req->id, j->procs[i].id, derived);
                        memcpy(j->procs[i].id, derived, sizeof(derived));
                }
                rc = spawn_slot_new(j->box, &j->ids);
        } else {
                rc = spawn_slot_claim(j->box, j->ids.setup_uid);
        }
        if (rc < 0) {
                snprintf(err, errlen,
                         rc == -EAGAIN ? "no host ids are free"
                                       : "its host ids are a running sandbox's");
                goto fail;
        }
        if (j->network.enabled) {
                struct hostmsg_failed fail = {0};

                rc = net_prepare(&j->box->net, &j->network, j->copy ? -1 : j->net_slot, j->resolv,
                                 sizeof(j->resolv), &fail);
                if (rc < 0) {
                        snprintf(err, errlen, "egress: %s", fail.message);
                        goto fail;
                }
        }
        /* Its groups are ours, with their limits, before CRIU puts the
         * processes back in them (soft: it makes only what is missing). */
        rc = cgroup_create(req->id, &j->limits, &j->cgroup, cg_err, sizeof(cg_err));
        for (i = 0; rc == 0 && i < j->nprocs; i++) {
                rc = cgroup_create_child(&j->cgroup, j->procs[i].group, &j->procs[i].cgroup, cg_err,
                                         sizeof(cg_err));
        }
        if (rc < 0) {
                snprintf(err, errlen, "cgroup: %s", cg_err);
                goto fail;
        }
        rc = ids_holder(&j->ids, &holder);
        if (rc == 0)
                rc = overlay_lower_open(j->template_root[0] ? j->template_root : "/usr", holder,
                                        &usr_fd, &idmapped);
        if (rc < 0) {
                holder_end(holder);
                snprintf(err, errlen, "%s, idmapped: %s",
                         j->template_root[0] ? "the template's tree" : "the host's /usr",
                         strerror(-rc));
                goto fail;
        }
        rc = checkpoint_layers_take(j, j->layers, holder, err, errlen);
        if (rc == 0)
                rc =
                    checkpoint_volumes_take(j, json_object_get(rec, "mounts"), holder, err, errlen);
        holder_end(holder);
        if (rc < 0)
                goto fail;
        rc = checkpoint_home_take(j, json_object_get(rec, "mounts"), dir_fd, err, errlen);
        if (rc == 0)
                rc = checkpoint_foreign_open(j, json_object_get(rec, "foreign"), err, errlen);
        if (rc < 0)
                goto fail;
        if (pipe2(report, O_CLOEXEC) < 0 ||
            socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                rc = -errno;
                snprintf(err, errlen, "pipe: %s", strerror(errno));
                goto fail;
        }
        snprintf(dir, sizeof(dir), "%s/%s", checkpoint_dir, req->volume_id);
        snprintf(j->dir, sizeof(j->dir), "%s", dir);
        snprintf(archive, sizeof(archive), "%s/" ARCHIVE, dir);
        /* A copy's images name its own ids; compressed pages are
         * decompressed beside the checkpoint, never into it. */
        if (j->copy || checkpoint_pages_compressed(dir_fd)) {
                j->own_images = true;
                rc = checkpoint_images_dir(dir, sizeof(dir), j->sandbox_id,
                                           j->copy ? &j->old_ids : &j->ids, &j->ids);
                if (rc < 0) {
                        snprintf(err, errlen, "the restore's images: %s", strerror(-rc));
                        goto fail;
                }
        }
        snprintf(top, sizeof(top), "%s/" ROOT_DIR, j->box->run_dir);
        snprintf(root, sizeof(root), "%s/root", top);
        snprintf(pidfile, sizeof(pidfile), "%s/init.pid", j->box->run_dir);
        snprintf(options, sizeof(options), "mode=0755,size=%llum,uid=%u,gid=%u",
                 (unsigned long long)j->limits.disk_mb, (unsigned)j->ids.setup_uid,
                 (unsigned)j->ids.setup_gid);
        pipe_name = json_string_value(json_object_get(rec, "report_pipe")) ?: "";
        snprintf(inherit, sizeof(inherit), "fd[%d]:%s", REPORT_FD, pipe_name);
        mounts = json_object_get(rec, "mounts");
        if (!json_is_array(mounts) || json_array_size(mounts) > MAX_MOUNTS ||
            strncmp(pipe_name, "pipe:[", 6) != 0 || strlen(pipe_name) > 40) {
                rc = -EBADMSG;
                snprintf(err, errlen, "the checkpoint's record is malformed");
                goto fail;
        }
#define ARG(s) (argv[argc++] = (char *)(s))
        ARG(checkpoint_criu);
        ARG("restore");
        ARG("-D");
        ARG(dir);
        ARG("-W");
        ARG(j->box->run_dir);
        ARG("-o");
        ARG("restore.log");
        ARG("-v2");
        ARG("--root");
        ARG(root);
        ARG("--restore-sibling");
        ARG("-d");
        ARG("--pidfile");
        ARG(pidfile);
        ARG("--inherit-fd");
        ARG(inherit);
        /* As at the dump: the host may have no iptables at all. */
        ARG("--network-lock");
        ARG("nftables");
        ARG("--tcp-established");
        ARG("--file-locks");
        if (json_is_true(json_object_get(rec, "empty_net"))) {
                if (!checkpoint_action[0]) {
                        rc = -ENOENT;
                        snprintf(err, errlen,
                                 "no " ACTION_PROGRAM " beside the kernel-host, "
                                 "for the sandbox's network namespace");
                        goto fail;
                }
                ARG("--empty-ns");
                ARG("net");
                ARG("--action-script");
                ARG(checkpoint_action);
        }
        ARG("--manage-cgroups=soft");
        ARG("--external");
        ARG("mnt[]");
        for (unsigned h = 0;; h++) {
                char path[PATH_MAX + 64], *e;

                if (cgroup_criu_root(&j->cgroup, h, path, sizeof(path)) < 0)
                        break;
                e = strdup(path);
                if (!e)
                        goto nomem;
                owned[nowned++] = e;
                ARG("--cgroup-root");
                ARG(e);
        }
        for (i = 0; i < j->nforeign; i++) {
                char *e = NULL;

                if (asprintf(&e, "fd[%d]:%s", j->foreign[i].fd, j->foreign[i].key) < 0)
                        goto nomem;
                owned[nowned++] = e;
                ARG("--inherit-fd");
                ARG(e);
        }
        rc = checkpoint_streams_make(j, argv, &argc, owned, &nowned);
        if (rc < 0) {
                snprintf(err, errlen, "the commands' new pipes: %s", strerror(-rc));
                goto fail;
        }
        json_array_foreach(mounts, i, m) {
                const char *kind = json_string_value(json_object_get(m, "kind")) ?: "";
                const char *key = json_string_value(json_object_get(m, "key")) ?: "";
                const char *path = json_string_value(json_object_get(m, "path")) ?: "";
                char *e = NULL;
                int n;

                if (strcmp(kind, "top") == 0 && path[0] == '/' && !strstr(path, ".."))
                        n = asprintf(&e, "mnt[%s]:%s%s", key, top, path);
                else if (strcmp(kind, "usr") == 0)
                        n = asprintf(&e, "mnt[%s]:%s/" USR_MERGED, key, top);
                else if (strcmp(kind, "host") == 0 && path[0] == '/')
                        n = asprintf(&e, "mnt[%s]:%s", key, path);
                else if (strcmp(kind, "volume") == 0 && nvolume < j->nvolumes)
                        n = asprintf(&e, "mnt[%s]:%s/vol-%zu", key, top, nvolume++);
                else if (strcmp(kind, "home") == 0 && j->home_fd >= 0)
                        n = asprintf(&e, "mnt[%s]:%s/" HOME_DISK, key, top);
                else
                        n = -2;
                if (n == -2 || !key[0]) {
                        rc = -EBADMSG;
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        goto fail;
                }
                if (n < 0)
                        goto nomem;
                owned[nowned++] = e;
                ARG("--external");
                ARG(e);
        }
        argv[argc] = NULL;
#undef ARG
        pid = fork();
        if (pid == 0) {
                close(sv[0]);
                close(report[0]);
                for (i = 0; i < j->nprocs; i++) {
                        for (int k = 0; k < 3; k++) {
                                if (j->procs[i].inside[k] >= 0)
                                        fcntl(j->procs[i].inside[k], F_SETFD, 0);
                        }
                }
                for (i = 0; i < j->nforeign; i++)
                        fcntl(j->foreign[i].fd, F_SETFD, 0);
                restore_worker(top, options, archive, usr_fd, sv[1], report[1], argv, j);
        }
        if (pid < 0) {
                rc = -errno;
                snprintf(err, errlen, "fork: %s", strerror(errno));
                goto fail;
        }
        j->pid = pid;
        j->report_rd = report[0];
        j->top_sock = sv[0];
        report[0] = sv[0] = -1;
        klog_info(req->id, "restore of checkpoint %.8s started", req->volume_id);
        rc = 0;
        goto out;
nomem:
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
fail:
        restore_cleanup(j);
        checkpoint_job_free(j);
        checkpoint_compact_queue(req->volume_id);
out:
        for (i = 0; i < nowned; i++)
                free(owned[i]);
        for (int k = 0; k < 2; k++) {
                if (report[k] >= 0)
                        close(report[k]);
                if (sv[k] >= 0)
                        close(sv[k]);
        }
        if (usr_fd >= 0)
                close(usr_fd);
        if (dir_fd >= 0)
                close(dir_fd);
        json_decref(rec);
        return rc;
}

/* The host pid of the process that is nspid in init's pid namespace:
 * every process the kernel-host started is init's child. */
static pid_t host_pid_of(pid_t init, pid_t nspid)
{
        char path[64], list[16384], status[4096];
        pid_t found = -1;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)init, (int)init);
        if (read_small_file(path, list, sizeof(list)) < 0)
                return -1;
        for (char *s = list, *end; *s && found < 0; s = end) {
                long pid = strtol(s, &end, 10);
                char *ns;

                if (end == s)
                        break;
                snprintf(path, sizeof(path), "/proc/%ld/status", pid);
                if (read_small_file(path, status, sizeof(status)) < 0)
                        continue;
                ns = strstr(status, "\nNSpid:");
                if (!ns)
                        continue;
                ns[strcspn(ns + 1, "\n") + 1] = '\0';
                ns = strrchr(ns, '\t');
                if (ns && strtol(ns + 1, NULL, 10) == nspid)
                        found = (pid_t)pid;
        }
        return found;
}

void checkpoint_restore_reaped(struct job *j, int status, int link, checkpoint_report_fn report)
{
        struct hostmsg_sandbox_ready ready = {0};
        struct hostmsg_failed fail = {.error = EIO};
        char text[32], why[LOG_TAIL + 1] = "", path[64];
        struct box *b = j->box;
        int top_fd = -1, root_fd = -1, rc, dir_fd;
        pid_t init = -1;
        json_t *msg;

        snprintf(fail.id, sizeof(fail.id), "%s", j->sandbox_id);
        snprintf(fail.step, sizeof(fail.step), "restore");
        if (WIFEXITED(status) && WEXITSTATUS(status) == RESTORE_TAMPERED) {
                snprintf(fail.message, sizeof(fail.message),
                         "the checkpoint's files are not as its dump sealed them "
                         "(manifest.json): refused");
                goto fail;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == RESTORE_PAGES) {
                snprintf(fail.message, sizeof(fail.message),
                         "the checkpoint's compressed pages cannot be decompressed to the "
                         "sizes its dump recorded");
                goto fail;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                dir_fd = open(b->run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dir_fd >= 0) {
                        checkpoint_log_error(dir_fd, "restore.log", why, sizeof(why));
                        close(dir_fd);
                }
                snprintf(fail.message, sizeof(fail.message), "criu restore failed (%s %d)%s%s",
                         WIFEXITED(status) ? "status" : "signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                         why[0] ? ": " : "", why);
                goto fail;
        }
        snprintf(path, sizeof(path), "%s/init.pid", b->run_dir);
        if (read_small_file(path, text, sizeof(text)) > 0)
                init = (pid_t)strtol(text, NULL, 10);
        top_fd = sandbox_recv_fd(j->top_sock);
        if (init <= 0 || top_fd < 0) {
                snprintf(fail.message, sizeof(fail.message), "the restored sandbox is not there");
                goto fail;
        }
        rc =
            sandbox_adopt(init, j->report_rd, top_fd, &j->ids, &j->limits, &j->cgroup, &b->sandbox);
        if (rc < 0) {
                snprintf(fail.message, sizeof(fail.message), "the restored sandbox: %s",
                         strerror(-rc));
                kill(init, SIGKILL);
                goto fail;
        }
        j->report_rd = -1;
        top_fd = -1;
        rc = checkpoint_restore_flags(&b->sandbox, j->flags);
        if (rc < 0) {
                snprintf(fail.message, sizeof(fail.message),
                         "the restored sandbox's mounts cannot have their flags back");
                goto kill;
        }
        if (j->network.enabled) {
                struct hostmsg_failed nf = {0};

                b->network = hostmsg_network_encode(&j->network);
                rc = b->network ? net_attach(&b->net, &j->network, init,
                                             b->sandbox.ns_fds[SANDBOX_NS_NET], &nf)
                                : -ENOMEM;
                if (rc < 0) {
                        snprintf(fail.message, sizeof(fail.message), "egress: %s",
                                 b->network ? nf.message : "out of memory");
                        goto kill;
                }
        }
        b->init_alive = true;
        if (kill(init, INIT_SIGNAL_REEXEC) < 0)
                klog_warn(b->id, "cannot have the restored init execute itself again: %s",
                          strerror(errno));
        b->checkpointable = true;
        memset(&j->cgroup, 0, sizeof(j->cgroup)); /* the sandbox's now */
        for (size_t i = 0; i < j->nprocs; i++) {
                pid_t pid = host_pid_of(init, j->procs[i].nspid);
                struct proc *p;

                if (pid < 0) {
                        /* It had ended by the dump: its group goes. */
                        cgroup_destroy(&j->procs[i].cgroup);
                        continue;
                }
                p = calloc(1, sizeof(*p));
                if (!p) {
                        cgroup_destroy(&j->procs[i].cgroup);
                        continue;
                }
                snprintf(p->id, sizeof(p->id), "%s", j->procs[i].id);
                p->box = b;
                p->pid = pid;
                p->sp.pid = pid;
                p->sp.nspid = j->procs[i].nspid;
                p->cgroup = j->procs[i].cgroup;
                p->kernel = j->procs[i].kernel;
                b->procs++;
                spawn_proc_add(p);
                checkpoint_streams_hand_over(j, i, p, link);
        }
        j->nprocs = 0;
        spawn_box_add(b);
        j->box = NULL;
        snprintf(ready.sandbox_id, sizeof(ready.sandbox_id), "%s", b->id);
        ready.init_pid = init;
        ready.user_uid = j->ids.user_uid;
        ready.user_gid = j->ids.user_gid;
        ready.has_root = true;
        ready.root_uid = j->ids.setup_uid;
        ready.root_gid = j->ids.setup_gid;
        snprintf(ready.root, sizeof(ready.root), "/proc/%d/root", (int)init);
        ready.network = j->network; /* lent for the encoding */
        b->volumes = j->volumes;
        j->volumes = NULL;
        b->disk_home = j->home_fd >= 0;
        b->templated = j->template_root[0] != '\0';
        if (j->layers && jp_strv_from_json(j->layers, &b->layers) < 0) {
                klog_warn(b->id, "out of memory: it cannot be checkpointed again");
                b->checkpointable = false;
        }
        snprintf(b->template_root, sizeof(b->template_root), "%s", j->template_root);
        ready.volumes = b->volumes;
        root_fd = fcntl(b->sandbox.root_fd, F_DUPFD_CLOEXEC, 3);
        msg = hostmsg_sandbox_ready_encode(&ready);
        if (root_fd < 0 || !msg || hostmsg_send(link, HOSTMSG_SANDBOX_READY, msg, &root_fd, 1) < 0)
                log_warn("cannot report to the gateway");
        json_decref(msg);
        if (root_fd >= 0)
                close(root_fd);
        if (j->own_images) /* CRIU is done with them */
                checkpoint_images_dir_remove(checkpoint_dir_fd, j->name, j->sandbox_id);
        klog_info(b->id, "restored from checkpoint %.8s (init pid %d)", j->name, (int)init);
        return;
kill:
        /* Adopted, so ours to end: nothing of it runs unconfined. */
        sandbox_kill(&b->sandbox);
        waitpid(init, NULL, 0);
        sandbox_destroy(&b->sandbox);
        memset(&j->cgroup, 0, sizeof(j->cgroup));
fail:
        if (top_fd >= 0)
                close(top_fd);
        klog_warn(j->sandbox_id, "restore of checkpoint %.8s: %s", j->name, fail.message);
        restore_cleanup(j);
        report(HOSTMSG_SANDBOX_FAILED, hostmsg_failed_encode(&fail));
}
