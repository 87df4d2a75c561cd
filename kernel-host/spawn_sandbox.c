/* A sandbox made (spawn_sandbox_create) and freed once everything in it is
 * gone (spawn_box_free): its host ids, run directory, mounts and network. */
#include "autoconf.h"

#include "kernel-host/spawn.h"
#include "kernel-host/spawn_internal.h"
#include "kernel-host/stock.h"
#include "kernel-host/tcp_bridge.h"
#include "kernel-host/homedisk.h"
#include "kernel-host/layers.h"
#include "kernel-host/volumes.h"
#include "protocol/fleetid.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"
#include "protocol/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* As root, sandbox n runs as host ids ID_BASE + id_offset + 2n (its root)
 * and + 2n + 1 ("user"): ids no other account uses, different for every
 * sandbox and, through id_offset, for every running gateway. */
#define ID_BASE   1000000u
#define MAX_SLOTS 32768
/* id_offset is one of ID_RANGES ranges of 2 * MAX_SLOTS ids. A kernel-host
 * running as root holds its range with a lock (flock) on IDS_DIR/<range>,
 * which holds its pid, for its whole life; the lock goes when it ends,
 * however it ends. It takes the first range not held, from its pid's. */
#define ID_RANGES 16384u
#define IDS_DIR   "/run/glovebox/ids"

static const char *runtime;
static unsigned id_offset;
/* A slot's state: free, a live sandbox's, or held by a checkpoint of one
 * (its ids come back with the restore). */
enum { SLOT_FREE, SLOT_LIVE, SLOT_HELD };

static unsigned char slots[MAX_SLOTS];
static unsigned next_box;

/* The range of host ids our sandboxes get (see ID_RANGES): without root,
 * or where no lock can be had, our pid's, as two kernel-hosts whose pids
 * are alike modulo ID_RANGES would share it (said in the log). */
static unsigned take_id_range(void)
{
        const unsigned first = (unsigned)getpid() % ID_RANGES;
        char path[sizeof(IDS_DIR) + 16], text[16];
        int fd, len;

        if (geteuid() != 0)
                return first;
        if ((mkdir("/run/glovebox", 0755) < 0 && errno != EEXIST) ||
            (mkdir(IDS_DIR, 0700) < 0 && errno != EEXIST)) {
                log_warn("cannot make %s (%s): this kernel-host's sandboxes get the host ids of "
                         "its pid, which another's may share",
                         IDS_DIR, strerror(errno));
                return first;
        }
        len = snprintf(text, sizeof(text), "%d\n", (int)getpid());
        for (unsigned i = 0; i < ID_RANGES; i++) {
                unsigned range = (first + i) % ID_RANGES;

                snprintf(path, sizeof(path), IDS_DIR "/%u", range);
                fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0) {
                        log_warn("cannot open %s (%s): this kernel-host's sandboxes get the "
                                 "host ids of its pid, which another's may share",
                                 path, strerror(errno));
                        return first;
                }
                if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
                        /* Ours until we end: the descriptor stays open. */
                        if (ftruncate(fd, 0) < 0 || pwrite(fd, text, (size_t)len, 0) != len)
                                log_debug("cannot write our pid into %s", path);
                        return range;
                }
                close(fd);
        }
        log_warn("every range of host ids in %s is held: this kernel-host's sandboxes share "
                 "those of its pid with another's",
                 IDS_DIR);
        return first;
}

int spawn_init(const char *runtime_dir)
{
        runtime = runtime_dir;
        id_offset = take_id_range() * 2u * MAX_SLOTS;
        /* Without it, only TCP-only kernels fail, and say why. */
        if (tcp_bridge_init() < 0)
                log_info("no glovebox-kernel-bridge beside the kernel-host: TCP-only kernels "
                         "cannot run");
        return sandbox_init();
}

static int slot_take(void)
{
        for (int i = 0; i < MAX_SLOTS; i++) {
                if (slots[i] == SLOT_FREE) {
                        slots[i] = SLOT_LIVE;
                        return i;
                }
        }
        return -1;
}

static void slot_release(int slot)
{
        if (slot >= 0 && slot < MAX_SLOTS)
                slots[slot] = SLOT_FREE;
}

static int slot_of(unsigned setup_uid)
{
        unsigned first = ID_BASE + id_offset;

        if (setup_uid < first || setup_uid >= first + 2u * MAX_SLOTS || (setup_uid - first) % 2)
                return -1;
        return (int)((setup_uid - first) / 2);
}

int spawn_slot_claim(struct box *b, unsigned setup_uid)
{
        int slot = slot_of(setup_uid);

        b->slot = -1;
        if (slot < 0)
                return 0;
        if (slots[slot] == SLOT_LIVE)
                return -EBUSY;
        slots[slot] = SLOT_LIVE;
        b->slot = slot;
        return 0;
}

static void ids_of_slot(int slot, struct sandbox_ids *ids)
{
        ids->privileged = true;
        ids->setup_uid = ID_BASE + id_offset + 2u * (unsigned)slot;
        ids->user_uid = ids->setup_uid + 1;
        ids->setup_gid = ids->setup_uid;
        ids->user_gid = ids->user_uid;
}

int spawn_slot_new(struct box *b, struct sandbox_ids *ids)
{
        b->slot = slot_take();
        if (b->slot < 0)
                return -EAGAIN;
        ids_of_slot(b->slot, ids);
        return 0;
}

void spawn_box_hold_slot(struct box *b)
{
        if (b->slot >= 0)
                slots[b->slot] = SLOT_HELD;
        b->slot = -1;
}

void spawn_slot_unhold(unsigned setup_uid)
{
        int slot = slot_of(setup_uid);

        if (slot >= 0 && slots[slot] == SLOT_HELD)
                slots[slot] = SLOT_FREE;
}

static void remove_run_dir(const char *dir)
{
        int rc = tree_remove(dir);

        if (rc < 0 && rc != -ENOENT)
                log_warn("cannot remove %s: %s", dir, strerror(-rc));
}

static void close_mounts(struct overlay_fds *mounts)
{
        if (mounts->home >= 0)
                close(mounts->home);
        if (mounts->build >= 0)
                close(mounts->build);
        for (size_t i = 0; i < mounts->nlayers; i++)
                close(mounts->layers[i]);
        for (size_t i = 0; i < mounts->nvolumes; i++)
                close(mounts->volumes[i]);
        overlay_fds_init(mounts);
}

/* The detached mounts b's sandbox attaches, made here where we are root:
 * a disk home (homedisk.h), a built template's layers and a build's new
 * one (layers.h). The sandbox's setup only attaches them. */
static int open_mounts(struct box *b, const struct hostmsg_sandbox *req,
                       const struct sandbox_ids *ids, struct overlay_fds *mounts,
                       struct hostmsg_failed *fail)
{
        const char *step;
        int rc = 0;

        overlay_fds_init(mounts);
        if (homedisk_enabled() && ids->privileged) {
                rc = homedisk_create(req->limits.disk_mb, ids->user_uid, ids->user_gid,
                                     &mounts->home, &step);
                if (rc < 0) {
                        spawn_fail_set(fail, b->id, step, -rc,
                                       "the sandbox's disk-backed /home/user");
                        return rc;
                }
        }
        if (((req->layers && req->layers[0]) || req->build_layer[0]) &&
            (!ids->privileged || !layers_enabled())) {
                spawn_fail_set(fail, b->id, "template layers", ENODEV,
                               "built templates need a kernel-host running as root with a state "
                               "directory");
                return -ENODEV;
        }
        for (size_t i = 0; req->layers && req->layers[i] && i < OVERLAY_MAX_LAYERS; i++) {
                rc = layers_mount(req->layers[i], &mounts->layers[i]);
                if (rc < 0) {
                        spawn_fail_set(fail, b->id, "template layer", -rc, NULL);
                        return rc;
                }
                mounts->nlayers++;
        }
        if (req->build_layer[0]) {
                rc = layers_create(req->build_layer, req->build_layer_mb, &mounts->build, &step);
                if (rc < 0) {
                        spawn_fail_set(fail, b->id, step, -rc, "the build's layer");
                        return rc;
                }
                snprintf(b->build_layer, sizeof(b->build_layer), "%s", req->build_layer);
        }
        if (req->volumes && req->volumes[0] && (!ids->privileged || !volumes_enabled())) {
                spawn_fail_set(fail, b->id, "volumes", ENODEV,
                               "volumes need a kernel-host running as root with a state directory");
                return -ENODEV;
        }
        for (size_t i = 0; req->volumes && req->volumes[i] && i < OVERLAY_MAX_VOLUMES; i++) {
                char id[JP_UUID_SIZE];
                const char *path;

                if (!hostmsg_volume_mount_split(req->volumes[i], id, &path))
                        return -EINVAL;
                rc = volumes_mount(id, &mounts->volumes[i]);
                if (rc < 0) {
                        spawn_fail_set(fail, b->id, "volume", -rc, NULL);
                        return rc;
                }
                mounts->volume_paths[i] = path;
                mounts->nvolumes++;
        }
        return 0;
}

int spawn_box_make(const struct hostmsg_sandbox *req, const char *id, struct box **out,
                   struct hostmsg_failed *fail)
{
        struct sandbox_ids ids = {.user_uid = getuid(), .user_gid = getgid()};
        char root[PATH_MAX + 16], path[PATH_MAX + 32];
        char resolv[64] = "";
        struct overlay_fds mounts;
        struct box *b;
        int rc;

        *out = NULL;
        b = calloc(1, sizeof(*b));
        if (!b) {
                spawn_fail_set(fail, id, "register", ENOMEM, NULL);
                return -ENOMEM;
        }
        b->slot = -1;
        b->net.slot = -1;
        b->plain_ipc_fd = -1;
        b->sandboxed = req->sandbox;
        b->templated = req->template_root[0] != '\0';
        snprintf(b->template_root, sizeof(b->template_root), "%s", req->template_root);
        snprintf(b->id, sizeof(b->id), "%s", id);
        /* Short names keep socket paths far below their 108-byte limit. */
        snprintf(b->run_dir, sizeof(b->run_dir), "%s/s%u", runtime, next_box++);
        snprintf(b->ipc_dir, sizeof(b->ipc_dir), "%s/" IPC_DIR, b->run_dir);
        snprintf(root, sizeof(root), "%s/" ROOT_DIR, b->run_dir);
        /* Searchable by all: the sandbox's setup runs as an unprivileged
         * host id and must reach its mount points; nothing is listable. A
         * sandbox keeps its sockets in a tmpfs of its own, so only a plain
         * box has a host directory for them. */
        if (mkdir(b->run_dir, 0711) < 0 || (!b->sandboxed && mkdir(b->ipc_dir, 0700) < 0) ||
            mkdir(root, 0755) < 0) {
                rc = -errno;
                spawn_fail_set(fail, b->id, "run-dir", errno, NULL);
                goto fail;
        }
        if (b->sandboxed && geteuid() == 0) {
                b->slot = slot_take();
                if (b->slot < 0) {
                        rc = -EAGAIN;
                        spawn_fail_set(fail, b->id, "host ids", EAGAIN, NULL);
                        goto fail;
                }
                ids_of_slot(b->slot, &ids);
        }
        if (!b->sandboxed) {
                /* Just made by us in our own directory: nobody else can have
                 * swapped it for a symlink. */
                b->plain_ipc_fd = open(b->ipc_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (b->plain_ipc_fd < 0) {
                        rc = -errno;
                        spawn_fail_set(fail, b->id, "run-dir", errno, NULL);
                        goto fail;
                }
        }
        if (req->network.enabled && (!b->sandboxed || geteuid() != 0)) {
                rc = -EPERM;
                spawn_fail_set(fail, b->id, "network", EPERM, NULL);
                snprintf(fail->message, sizeof(fail->message),
                         "egress needs a sandbox and a kernel-host running as root");
                goto fail;
        }
        if (req->network.enabled) {
                rc = net_prepare(&b->net, &req->network, -1, resolv, sizeof(resolv), fail);
                snprintf(fail->id, sizeof(fail->id), "%s", b->id);
                if (rc < 0)
                        goto fail;
        }
        if (!b->sandboxed) {
                snprintf(path, sizeof(path), "%s/home", root);
                if (mkdir(path, 0755) < 0 ||
                    (snprintf(path, sizeof(path), "%s" ROOTFS_HOME, root), mkdir(path, 0700) < 0)) {
                        rc = -errno;
                        spawn_fail_set(fail, b->id, "home-dir", errno, NULL);
                        goto fail;
                }
                *out = b;
                return 0;
        }
        rc = open_mounts(b, req, &ids, &mounts, fail);
        if (rc == 0)
                rc = sandbox_create(root, b->id, &req->limits, req->ro_paths, req->template_root,
                                    req->network.enabled ? resolv : NULL, &mounts, &ids,
                                    &b->sandbox, fail);
        close_mounts(&mounts);
        snprintf(fail->id, sizeof(fail->id), "%s", b->id);
        if (rc < 0)
                goto fail;
        b->init_alive = true;
        b->checkpointable = ids.privileged && overlay_available() && !req->build_layer[0];
        if (req->layers && req->layers[0] && jp_strv_dup(req->layers, &b->layers) < 0)
                b->checkpointable = false;
        b->disk_home = homedisk_enabled() && ids.privileged;
        if (req->volumes && req->volumes[0] && jp_strv_dup(req->volumes, &b->volumes) < 0)
                b->checkpointable = false; /* out of memory: it runs, never paused whole */
        if (req->network.enabled) {
                rc = net_attach(&b->net, &req->network, b->sandbox.init_pid,
                                b->sandbox.ns_fds[SANDBOX_NS_NET], fail);
                snprintf(fail->id, sizeof(fail->id), "%s", b->id);
                /* Kept for a checkpoint, whose restore gives it again. */
                b->network = rc == 0 ? hostmsg_network_encode(&req->network) : NULL;
                if (rc == 0 && !b->network)
                        rc = -ENOMEM;
                if (rc < 0) {
                        spawn_box_unmake(b, false);
                        return rc;
                }
        }
        *out = b;
        return 0;
fail:
        spawn_box_unmake(b, false);
        return rc;
}

void spawn_box_unmake(struct box *b, bool reaped)
{
        if (b->sandboxed && b->init_alive) {
                int status;

                if (!reaped) {
                        sandbox_kill(&b->sandbox);
                        waitpid(b->sandbox.init_pid, &status, 0);
                }
                sandbox_destroy(&b->sandbox);
        }
        /* A build that never started leaves no layer. */
        if (b->build_layer[0])
                layers_delete(b->build_layer);
        if (b->plain_ipc_fd >= 0)
                close(b->plain_ipc_fd);
        spawn_box_discard(b);
}

int spawn_sandbox_create(const struct hostmsg_sandbox *req, struct hostmsg_sandbox_ready *ready,
                         int *root_fd, struct hostmsg_failed *fail)
{
        struct sandbox_ids ids = {.user_uid = getuid(), .user_gid = getgid()};
        struct box *b;
        int rc;

        if (spawn_box_find(req->sandbox_id) || spawn_proc_find(req->sandbox_id)) {
                spawn_fail_set(fail, req->sandbox_id, "register", EEXIST, NULL);
                return -EEXIST;
        }
        b = stock_claim(req);
        if (!b) {
                rc = spawn_box_make(req, req->sandbox_id, &b, fail);
                if (rc < 0)
                        return rc;
        }
        if (b->sandboxed) {
                snprintf(ready->root, sizeof(ready->root), "/proc/%d/root",
                         (int)b->sandbox.init_pid);
                *root_fd = fcntl(b->sandbox.root_fd, F_DUPFD_CLOEXEC, 3);
        } else {
                snprintf(ready->root, sizeof(ready->root), "%s/" ROOT_DIR, b->run_dir);
                *root_fd = open(ready->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        }
        if (*root_fd < 0) {
                rc = -errno;
                spawn_fail_set(fail, b->id, "open root", errno, NULL);
                spawn_box_unmake(b, false);
                return rc;
        }
        if (b->sandboxed) {
                ids = b->sandbox.ids;
                /* A sandbox made ahead keeps its group's name where it
                 * cannot take its id (stock.h): the gateway is told. */
                if (strcmp(cgroup_name(&b->sandbox.cgroup), b->id) != 0)
                        snprintf(ready->cgroup, sizeof(ready->cgroup), "%s",
                                 cgroup_name(&b->sandbox.cgroup));
        }
        snprintf(ready->sandbox_id, sizeof(ready->sandbox_id), "%s", b->id);
        ready->init_pid = b->sandboxed ? b->sandbox.init_pid : 0;
        ready->user_uid = ids.user_uid;
        ready->user_gid = ids.user_gid;
        /* Only a privileged kernel-host maps a root into the sandbox. */
        ready->has_root = b->sandboxed && ids.privileged;
        ready->root_uid = ready->has_root ? ids.setup_uid : 0;
        ready->root_gid = ready->has_root ? ids.setup_gid : 0;
        spawn_box_add(b);
        return 0;
}

int spawn_box_new(const char *id, struct box **out, struct hostmsg_failed *fail)
{
        char root[PATH_MAX + 16];
        struct box *b;

        *out = NULL;
        if (spawn_box_find(id) || spawn_proc_find(id)) {
                spawn_fail_set(fail, id, "register", EEXIST, NULL);
                return -EEXIST;
        }
        b = calloc(1, sizeof(*b));
        if (!b) {
                spawn_fail_set(fail, id, "register", ENOMEM, NULL);
                return -ENOMEM;
        }
        b->slot = -1;
        b->net.slot = -1;
        b->plain_ipc_fd = -1;
        b->sandboxed = true;
        snprintf(b->id, sizeof(b->id), "%s", id);
        snprintf(b->run_dir, sizeof(b->run_dir), "%s/s%u", runtime, next_box++);
        snprintf(root, sizeof(root), "%s/" ROOT_DIR, b->run_dir);
        if (mkdir(b->run_dir, 0711) < 0 || mkdir(root, 0755) < 0) {
                spawn_fail_set(fail, id, "run-dir", errno, NULL);
                remove_run_dir(b->run_dir);
                free(b);
                return -EIO;
        }
        *out = b;
        return 0;
}

void spawn_box_network_back(struct box *b, int prefer)
{
        struct hostmsg_network policy = {0};
        struct hostmsg_failed fail = {0};
        char resolv[64];
        int rc;

        if (!b->network || b->net.slot >= 0 || !b->init_alive)
                return;
        rc = hostmsg_network_decode(b->network, &policy);
        if (rc < 0)
                snprintf(fail.message, sizeof(fail.message), "its policy cannot be read");
        if (rc == 0)
                rc = net_prepare(&b->net, &policy, prefer, resolv, sizeof(resolv), &fail);
        if (rc == 0 && b->net.slot != prefer) {
                rc = sandbox_write_resolv(b->sandbox.root_fd, resolv);
                if (rc < 0)
                        snprintf(fail.message, sizeof(fail.message), "/etc/resolv.conf: %s",
                                 strerror(-rc));
        }
        if (rc == 0)
                rc = net_attach(&b->net, &policy, b->sandbox.init_pid,
                                b->sandbox.ns_fds[SANDBOX_NS_NET], &fail);
        if (rc < 0) {
                klog_warn(b->id, "egress after the checkpoint: %s; the sandbox has no network",
                          fail.message);
                net_release(&b->net);
        }
        hostmsg_network_clear(&policy);
}

void spawn_box_discard(struct box *b)
{
        zygote_ahead_free(b->ahead);
        net_release(&b->net);
        json_decref(b->network);
        jp_strv_free(b->volumes);
        jp_strv_free(b->layers);
        remove_run_dir(b->run_dir);
        slot_release(b->slot);
        free(b);
}

/* Frees a box whose init and processes are all gone. */
void spawn_box_free(struct box *b, void (*report)(enum hostmsg_type, json_t *))
{
        spawn_box_unlink(b);
        zygote_ahead_free(b->ahead);
        if (b->sandboxed)
                sandbox_destroy(&b->sandbox);
        net_release(&b->net);
        json_decref(b->network);
        jp_strv_free(b->volumes);
        jp_strv_free(b->layers);
        if (b->plain_ipc_fd >= 0)
                close(b->plain_ipc_fd);
        remove_run_dir(b->run_dir);
        slot_release(b->slot);
        log_info("sandbox %s removed", fleetid_short(b->id).s);
        if (!b->gone_reported)
                spawn_report_gone(b, report);
        /* A build's layer is done: read-only from now on, or gone. */
        if (b->build_layer[0]) {
                struct hostmsg_layer sealed = {.error = -layers_seal(b->build_layer)};

                snprintf(sealed.id, sizeof(sealed.id), "%s", b->build_layer);
                if (report)
                        report(HOSTMSG_LAYER_SEALED, hostmsg_layer_encode(&sealed));
        }
        free(b);
}
