#include "autoconf.h"

#include "kernel-host/rootfs.h"
#include "kernel-host/homecache.h"
#include "kernel-host/init_report.h"
#include "protocol/ids.h"
#include "kernel-host/layers.h"
#include "kernel-host/rootfs_files.h"
#include "kernel-host/rootfs_ops.h"
#include "kernel-host/rootfs_plan.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

static char *dup_or_null(const char *s)
{
        return s ? strdup(s) : NULL;
}

static int add_op(struct rootfs *p, enum op_kind kind, const char *target, const char *source,
                  const char *data, unsigned long flags, unsigned options, const char *step)
{
        struct mount_op *op;

        if (p->nops == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 64;
                struct mount_op *grown = realloc(p->ops, cap * sizeof(*grown));

                if (!grown)
                        return -ENOMEM;
                p->ops = grown;
                p->cap = cap;
        }
        op = &p->ops[p->nops];
        memset(op, 0, sizeof(*op));
        op->kind = kind;
        op->flags = flags;
        op->options = options;
        op->target = malloc(strlen(p->root) + strlen(target) + 1);
        op->source = dup_or_null(source);
        op->data = dup_or_null(data);
        if (!op->target || (source && !op->source) || (data && !op->data)) {
                free(op->target);
                free(op->source);
                free(op->data);
                return -ENOMEM;
        }
        memcpy(op->target, p->root, strlen(p->root));
        memcpy(op->target + strlen(p->root), target, strlen(target) + 1);
        snprintf(op->step, sizeof(op->step), "%s", step);
        p->nops++;
        return 0;
}

/* Flags a read-only remount must keep: inside a user namespace the kernel
 * refuses to clear nosuid, nodev, noexec or atime flags that the source
 * mount has ("locked" flags), as bubblewrap also learned. */
static unsigned long locked_flags(const char *source)
{
        struct statvfs st;
        unsigned long flags = 0;

        if (statvfs(source, &st) < 0)
                return 0;
        if (st.f_flag & ST_NOSUID)
                flags |= MS_NOSUID;
        if (st.f_flag & ST_NODEV)
                flags |= MS_NODEV;
        if (st.f_flag & ST_NOEXEC)
                flags |= MS_NOEXEC;
        if (st.f_flag & ST_NOATIME)
                flags |= MS_NOATIME;
        if (st.f_flag & ST_NODIRATIME)
                flags |= MS_NODIRATIME;
        if (st.f_flag & ST_RELATIME)
                flags |= MS_RELATIME;
        return flags;
}

int rootfs_add_op(struct rootfs *p, enum op_kind kind, const char *target, const char *source,
                  const char *data, unsigned long flags, unsigned options, const char *step)
{
        return add_op(p, kind, target, source, data, flags, options, step);
}

unsigned long rootfs_locked_flags(const char *source)
{
        return locked_flags(source);
}

#define HOST_POINT 1u /* make the mount point (or the symlink) */
#define HOST_BIND  2u /* bind the host path on it */

/* Adds a read-only bind of host path at the same path inside, creating
 * the mount point (a directory or an empty file) first. Symlinks are
 * recreated as symlinks. Missing paths are skipped. what: HOST_POINT,
 * HOST_BIND or both (a template's mount points are made before its
 * overlay is mounted, the binds after). */
static int add_host_path_parts(struct rootfs *p, const char *path, unsigned what)
{
        char step[64], link[PATH_MAX];
        struct stat st;
        ssize_t n;
        int rc = 0;

        if (lstat(path, &st) < 0)
                return 0;
        snprintf(step, sizeof(step), "bind %s", path);
        if (S_ISLNK(st.st_mode)) {
                n = readlink(path, link, sizeof(link) - 1);
                if (n < 0 || !(what & HOST_POINT))
                        return 0;
                link[n] = '\0';
                return add_op(p, OP_SYMLINK, path, link, NULL, 0, 0, step);
        }
        if (what & HOST_POINT)
                rc = add_op(p, S_ISDIR(st.st_mode) ? OP_DIR : OP_FILE, path, NULL, "", 0, 0, step);
        if (rc == 0 && (what & HOST_BIND))
                rc = add_op(p, OP_BIND, path, path, NULL,
                            MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(path), 0, step);
        return rc;
}

/* Creates every missing directory of path (relative to the new root). */
static int add_parents(struct rootfs *p, const char *path)
{
        char partial[PATH_MAX];
        int rc = 0;

        for (const char *s = strchr(path + 1, '/'); rc == 0 && s; s = strchr(s + 1, '/')) {
                snprintf(partial, sizeof(partial), "%.*s", (int)(s - path), path);
                rc = add_op(p, OP_DIR, partial, NULL, NULL, 0, 0, "mkdir");
        }
        return rc;
}

/* Of the host's /etc only what kernels need; never shadow, ssh keys, machine-id, secrets. */
static const char *const etc_entries[] = {
        "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "fonts",
        "matplotlibrc", "ssl", "ca-certificates.conf", "alternatives", "mime.types",
        "bash.bashrc", "inputrc", "jupyter", "gai.conf", "protocols",
        "services", "terminfo", "magic", "magic.mime",
};

/* Glovebox's programs bound into every sandbox from beside the kernel-host, read-only and
 * nosuid: glovebox-sudo as its sudo (sudo_main.c; left out when not built) and glovebox-init
 * as its pid 1 (init_main.c: no sandbox without it). */
enum { OWN_SUDO, OWN_INIT };
static const struct {
        const char *program, *target, *step;
        bool required;
} own_programs[] = {[OWN_SUDO] = {SUDO_PROGRAM, ROOTFS_SUDO, "bind sudo", false},
                    [OWN_INIT] = {INIT_PROGRAM, INIT_COMMAND, "bind init", true}};
#define OWN_PROGRAMS (sizeof(own_programs) / sizeof(own_programs[0]))

/* Its path on the host, or "" when there is none. */
static const char *own_program(size_t i)
{
        static char paths[OWN_PROGRAMS][PATH_MAX];
        static bool looked;

        for (size_t j = 0; !looked && j < OWN_PROGRAMS; j++) {
                if (program_beside_self(own_programs[j].program, paths[j], PATH_MAX) < 0)
                        paths[j][0] = '\0';
        }
        looked = true;
        return paths[i];
}

bool rootfs_init_found(void)
{
        return own_program(OWN_INIT)[0] != '\0';
}

static int plan_tools(struct rootfs *p)
{
        int rc = add_op(p, OP_FILE, "/etc/pip.conf", NULL, pip_conf, 0, 0, "write /etc/pip.conf");

        if (rc == 0)
                rc = add_parents(p, ROOTFS_TOOLS_DIR "/");
        if (rc == 0)
                rc = add_op(p, OP_FILE, ROOTFS_TOOLS_DIR "/pip", NULL, pip_wrapper, 0,
                            OP_EXECUTABLE, "write pip");
        if (rc == 0)
                rc = add_op(p, OP_SYMLINK, ROOTFS_TOOLS_DIR "/pip3", "pip", NULL, 0, 0,
                            "symlink pip3");
        if (rc == 0 && p->homecache)
                rc = add_parents(p, HOMECACHE_MOUNT "/");
        /* Our programs' mount points (rootfs_plan binds them). */
        for (size_t i = 0; rc == 0 && i < OWN_PROGRAMS; i++) {
                if (!own_program(i)[0])
                        continue;
                rc = add_parents(p, own_programs[i].target);
                if (rc == 0)
                        rc = add_op(p, OP_FILE, own_programs[i].target, NULL, "", 0, 0,
                                    own_programs[i].step);
        }
        return rc;
}

/* The files of /etc every sandbox has of Glovebox's own, over a
 * template's too: its users, its names, its resolver (none without
 * egress), a profile that keeps the given PATH. */
static int plan_own_etc(struct rootfs *p, const char *resolv_conf)
{
        int rc = add_op(p, OP_FILE, "/etc/passwd", NULL, passwd_file, 0, 0, "write /etc/passwd");

        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/group", NULL, group_file, 0, 0, "write /etc/group");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/hosts", NULL, hosts_file, 0, 0, "write /etc/hosts");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/hostname", NULL, "glovebox\n", 0, 0,
                            "write /etc/hostname");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/resolv.conf", NULL, resolv_conf ? resolv_conf : "", 0,
                            0, "write /etc/resolv.conf");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/profile", NULL, profile_file, 0, 0,
                            "write /etc/profile");
        /* Glovebox's own /etc/ipython: history in memory (a restored home's new inode
         * is a moved database to SQLite, checkpoint.h; it dies with the home anyway). */
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/etc/ipython", NULL, NULL, 0, 0, "mkdir /etc/ipython");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/ipython/ipython_kernel_config.py", NULL,
                            "c.HistoryManager.hist_file = ':memory:'\n", 0, 0, "ipython config");
        return rc;
}

/* The curated /etc in two passes: what (HOST_POINT) makes the directory,
 * Glovebox's own files and the mount points of the host's entries, in the
 * image's base layer; HOST_BIND binds the host's entries, read-only, once
 * the root's overlay is mounted. */
static int plan_etc(struct rootfs *p, const char *resolv_conf, unsigned what)
{
        char path[PATH_MAX];
        struct dirent *de;
        DIR *d;
        int rc = 0;

        if (what & HOST_POINT) {
                rc = add_op(p, OP_DIR, "/etc", NULL, NULL, 0, 0, "mkdir /etc");
                if (rc == 0)
                        rc = plan_own_etc(p, resolv_conf);
                if (rc == 0)
                        rc = add_op(p, OP_FILE, "/etc/nsswitch.conf", NULL,
                                    resolv_conf ? nsswitch_dns_file : nsswitch_file, 0, 0,
                                    "write /etc/nsswitch.conf");
        }
        for (size_t i = 0; rc == 0 && i < sizeof(etc_entries) / sizeof(etc_entries[0]); i++) {
                snprintf(path, sizeof(path), "/etc/%s", etc_entries[i]);
                rc = add_host_path_parts(p, path, what);
        }
        /* Debian's Python reads /etc/python3 and /etc/python3.X. */
        d = opendir("/etc");
        while (rc == 0 && d && (de = readdir(d)) != NULL) {
                if (strncmp(de->d_name, "python3", 7) != 0)
                        continue;
                snprintf(path, sizeof(path), "/etc/%s", de->d_name);
                rc = add_host_path_parts(p, path, what);
        }
        if (d)
                closedir(d);
        return rc;
}

/* The directories every sandbox's tmpfs holds beside its base layer: the
 * root overlay's upper and work directories, the mount point of the
 * merged root, and the sandbox's /home/user and /tmp, bound into the root
 * (rootfs_plan). All on the one tmpfs of the sandbox's disk limit. */
static int plan_layers(struct rootfs *p, const struct rootfs_params *params)
{
        char dir[32], uuid[JP_UUID_SIZE], boot_id[JP_UUID_SIZE + 1];
        int rc;

        snprintf(p->top_options, sizeof(p->top_options), "mode=0755,size=%llum", params->disk_mb);
        /* A build writes into its new layer, where layers.h made these. */
        snprintf(p->upper, sizeof(p->upper), params->build_by_fd ? "build/" LAYERS_ROOT : "upper");
        snprintf(p->work, sizeof(p->work), params->build_by_fd ? "build/" LAYERS_ROOT_WORK : "work");
        snprintf(p->usr_upper, sizeof(p->usr_upper),
                 params->build_by_fd ? "build/" LAYERS_USR : "usr-upper");
        snprintf(p->usr_work, sizeof(p->usr_work),
                 params->build_by_fd ? "build/" LAYERS_USR_WORK : "usr-work");
        p->home_in_root = params->nlayers > 0 || params->build_by_fd;
        /* The sandbox's own boot id (proc_boot_id), beside its layers. */
        if (jp_uuid4(uuid) < 0)
                return -EIO;
        snprintf(boot_id, sizeof(boot_id), "%s\n", uuid);
        rc = add_op(p, OP_FILE, "/" BOOT_ID_FILE, NULL, boot_id, 0, 0, "boot id");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/" MASK_DIR, NULL, NULL, 0555, 0, "/proc masks");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/" DEV_DIR, NULL, NULL, 0755, 0, "/dev");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/" SHM_DIR, NULL, NULL, 01777, 0, "/dev/shm");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/upper", NULL, NULL, 0755, 0, "root layers");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/work", NULL, NULL, 0700, 0, "root layers");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/root", NULL, NULL, 0755, 0, "root layers");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/home", NULL, NULL, 0700, OP_USER_OWNED, "sandbox home");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/tmp", NULL, NULL, 01777, 0, "sandbox tmp");
        if (rc == 0 && params->build_by_fd)
                rc = add_op(p, OP_DIR, "/build", NULL, NULL, 0755, 0, "build layer");
        if (rc == 0 && params->build_by_fd)
                rc = add_op(p, OP_ATTACH, "/build", NULL, NULL, ATTACH_BUILD, 0, "attach build layer");
        for (size_t i = 0; rc == 0 && i < params->nlayers; i++) {
                snprintf(dir, sizeof(dir), "/l%zu", i);
                rc = add_op(p, OP_DIR, dir, NULL, NULL, 0755, 0, "template layers");
                if (rc == 0)
                        rc = add_op(p, OP_ATTACH, dir, NULL, NULL, ATTACH_LAYER + i, 0,
                                    "attach template layer");
        }
        return rc;
}

/* ":l0/PART:l1/PART..." for a built template's layers, top first. */
static void layer_list(char *out, size_t size, size_t nlayers, const char *part)
{
        size_t n = 0;

        out[0] = '\0';
        for (size_t i = 0; i < nlayers && n < size; i++)
                n += (size_t)snprintf(out + n, size - n, ":l%zu/%s", i, part);
}

/* A base layer's /home/user: where the root overlay holds the home, the
 * user's, as a home is (else only a mount point). */
static int add_home_point(struct rootfs *p)
{
        return p->home_in_root
                       ? add_op(p, OP_DIR, ROOTFS_HOME, NULL, NULL, 0700, OP_USER_OWNED, "base home")
                       : add_op(p, OP_DIR, ROOTFS_HOME, NULL, NULL, 0, 0, "root base");
}

/* The mount points every sandbox's root has, below its mounts. */
static const char *const base_points[] = {"/etc", "/proc",     "/dev",
                                          "/tmp", ROOTFS_HOME, ROOTFS_RUN_DIR};

/* Mount points, in the base layer, of the host paths (not under /usr,
 * which the host's form has whole) that rootfs_plan binds in last. */
static int plan_host_points(struct rootfs *p, char *const *ro_paths)
{
        int rc = 0;

        for (size_t i = 0; rc == 0 && ro_paths && ro_paths[i]; i++) {
                if (strncmp(ro_paths[i], "/usr/", 5) == 0)
                        continue;
                rc = add_parents(p, ro_paths[i]);
                if (rc == 0)
                        rc = add_host_path_parts(p, ro_paths[i], HOST_POINT);
        }
        return rc;
}

/* The host's form on a kernel without overlayfs: a small tmpfs root,
 * remounted read-only once set up, with read-only binds of /usr and its
 * merged links, the curated /etc and the tools; /tmp and /home/user are
 * tmpfs of their own (rootfs_plan). */
static int plan_host_flat(struct rootfs *p, const struct rootfs_params *params)
{
        static const char *const top_level[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64",
                                                "/libx32"};
        int rc = add_op(p, OP_DIR, "/usr", NULL, NULL, 0, 0, "mkdir /usr");

        snprintf(p->top_options, sizeof(p->top_options), "%s", ROOTFS_FLAT_TMPFS);
        if (rc == 0)
                rc = add_op(p, OP_BIND, "/usr", "/usr", NULL,
                            MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags("/usr"), 0,
                            "bind /usr");
        for (size_t i = 0; rc == 0 && i < sizeof(top_level) / sizeof(top_level[0]); i++)
                rc = add_host_path_parts(p, top_level[i], HOST_POINT | HOST_BIND);
        if (rc == 0)
                rc = plan_etc(p, params->resolv_conf, HOST_POINT | HOST_BIND);
        if (rc == 0)
                rc = plan_tools(p);
        return rc;
}

/* The host's form, writable: on the sandbox's tmpfs, the root is an
 * overlay of a base layer of our own (the merged /bin, /lib... links,
 * Glovebox's /etc files and the mount points of the host's curated
 * entries, the tools, /root, the other mount points) under an upper layer
 * that takes every write; /usr is a second overlay, of the host's /usr
 * under an upper layer of its own on the same tmpfs. As root the host's
 * /usr comes as the kernel-host's idmapped clone (overlay.h): its root is
 * the sandbox's root, so the sandbox's root may change anything of its
 * own copy (pip install into /usr/local) while the host's stays
 * read-only, never written. Everything is made in the base before the
 * overlay is mounted, so setting up copies nothing up. The curated /etc
 * entries are read-only binds over the overlay, as before: a new file in
 * /etc is the sandbox's, the host's certificates and fonts are not. */
static int plan_host_base(struct rootfs *p, const struct rootfs_params *params)
{
        static const char *const top_level[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64",
                                                "/libx32"};
        char data[PATH_MAX + 96], layers[OVERLAY_MAX_LAYERS * 16];
        int rc;

        if (!params->overlay)
                return plan_host_flat(p, params);
        rc = plan_layers(p, params);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/usr-upper", NULL, NULL, 0755, 0, "usr layers");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/usr-work", NULL, NULL, 0700, 0, "usr layers");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/base", NULL, NULL, 0755, 0, "root base");
        snprintf(p->root, sizeof(p->root), "%s/base", p->top);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/usr", NULL, NULL, 0755, 0, "mkdir /usr");
        /* The merged /bin, /lib... links, or mount points where not merged. */
        for (size_t i = 0; rc == 0 && i < sizeof(top_level) / sizeof(top_level[0]); i++)
                rc = add_host_path_parts(p, top_level[i], HOST_POINT);
        if (rc == 0)
                rc = plan_etc(p, params->resolv_conf, HOST_POINT);
        if (rc == 0)
                rc = plan_tools(p);
        /* The sandbox's root's own home, as E2B's images have it. */
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/root", NULL, NULL, 0700, 0, "mkdir /root");
        for (size_t i = 0; rc == 0 && i < sizeof(base_points) / sizeof(base_points[0]); i++)
                rc = add_parents(p, base_points[i]);
        for (size_t i = 0; rc == 0 && i < sizeof(base_points) / sizeof(base_points[0]); i++)
                rc = strcmp(base_points[i], ROOTFS_HOME) == 0
                             ? add_home_point(p)
                             : add_op(p, OP_DIR, base_points[i], NULL, NULL, 0, 0, "root base");
        if (rc == 0)
                rc = plan_host_points(p, params->ro_paths);
        snprintf(p->root, sizeof(p->root), "%s", p->top);
        /* userxattr: in a user namespace overlayfs keeps its own marks in
         * user.* attributes (trusted.* ones need the host's root). The
         * layers are named relative to the tmpfs (the mount runs there):
         * the options, which the sandbox reads in its mountinfo, then
         * name no host directory of ours. */
        layer_list(layers, sizeof(layers), params->nlayers, LAYERS_ROOT);
        snprintf(data, sizeof(data), "lowerdir=base%s,upperdir=%s,workdir=%s,userxattr", layers,
                 p->upper, p->work);
        if (rc == 0)
                rc = add_op(p, OP_OVERLAY, "/root", p->top, data, MS_NOSUID | MS_NODEV, 0,
                            "overlay root");
        /* The host's /usr: as root the kernel-host's idmapped clone,
         * attached here; unprivileged, /usr itself. */
        if (params->lower_by_fd) {
                if (rc == 0)
                        rc = add_op(p, OP_DIR, "/usr-lower", NULL, NULL, 0755, 0, "usr layers");
                if (rc == 0)
                        rc = add_op(p, OP_ATTACH, "/usr-lower", NULL, NULL, ATTACH_LOWER, 0,
                                    "attach /usr");
        }
        /* The layers' /usr parts over the host's. */
        layer_list(layers, sizeof(layers), params->nlayers, LAYERS_USR);
        snprintf(data, sizeof(data), "lowerdir=%s%s%s,upperdir=%s,workdir=%s,userxattr",
                 layers[0] ? layers + 1 : "", layers[0] ? ":" : "",
                 params->lower_by_fd ? "usr-lower" : "/usr", p->usr_upper, p->usr_work);
        if (rc == 0)
                rc = add_op(p, OP_OVERLAY, "/root/usr", p->top, data, MS_NOSUID | MS_NODEV, 0,
                            "overlay /usr");
        snprintf(p->root, sizeof(p->root), "%s/root", p->top);
        p->writable_root = true;
        for (size_t i = 0; rc == 0 && i < sizeof(top_level) / sizeof(top_level[0]); i++)
                rc = add_host_path_parts(p, top_level[i], HOST_BIND);
        if (rc == 0)
                rc = plan_etc(p, params->resolv_conf, HOST_BIND);
        return rc;
}

/* A directory of a template's base layer (below): with the mode of the
 * tree's own directory of that path, if it has one, and its owner where
 * that is the sandbox's user, so that the base, which lies over the tree,
 * changes nothing of what the image lets its user write (a world-writable
 * /opt stays so). The tree is the operator's: reading it is safe. */
static int add_base_dir_as(struct rootfs *p, const char *target, const char *tree, const char *path)
{
        char host[PATH_MAX * 2];
        unsigned long mode = 0755;
        unsigned options = 0;
        struct stat st;

        snprintf(host, sizeof(host), "%s%s", tree, path[0] ? path : "/");
        if (lstat(host, &st) == 0 && S_ISDIR(st.st_mode)) {
                mode = st.st_mode & 07777;
                if (st.st_uid == ROOTFS_USER_UID)
                        options |= OP_USER_OWNED;
        }
        return add_op(p, OP_DIR, target, NULL, NULL, mode, options, "template base");
}

static int add_base_dir(struct rootfs *p, const char *tree, const char *path)
{
        return add_base_dir_as(p, path, tree, path);
}

/* Every directory of path (relative to the new root) in the base layer. */
static int add_base_dirs(struct rootfs *p, const char *tree, const char *path)
{
        char partial[PATH_MAX];
        int rc = 0;

        for (const char *s = strchr(path + 1, '/'); rc == 0; s = strchr(s + 1, '/')) {
                snprintf(partial, sizeof(partial), "%.*s", s ? (int)(s - path) : (int)strlen(path),
                         path);
                rc = add_base_dir(p, tree, partial);
                if (!s)
                        break;
        }
        return rc;
}

/* A template's root: on the sandbox's tmpfs (its disk limit: the one
 * budget for everything it writes), an overlay whose lower layers are a
 * small base of our own (the files and mount points a sandbox needs:
 * passwd, hosts, the tools, /proc, /home/user, /run/kernel...) over the
 * template's tree, and whose upper layer takes every write. Everything
 * is made in the base before the overlay is mounted, so setting up never
 * copies anything up, and the tree is never written. The tmpfs also holds
 * /home/user and /tmp, bound into the root. */
static int plan_template_base(struct rootfs *p, const struct rootfs_params *params)
{
        const char *tree = params->template_root;
        char data[PATH_MAX * 3 + 64], lower[PATH_MAX + 16], layers[OVERLAY_MAX_LAYERS * 16];
        int rc = plan_layers(p, params);

        /* The base, then what lies in it. */
        if (rc == 0)
                rc = add_base_dir_as(p, "/base", tree, "");
        snprintf(p->root, sizeof(p->root), "%s/base", p->top);
        for (size_t i = 0; rc == 0 && i < sizeof(base_points) / sizeof(base_points[0]); i++)
                rc = strcmp(base_points[i], ROOTFS_HOME) == 0 && p->home_in_root
                             ? add_base_dirs(p, tree, "/home")
                             : add_base_dirs(p, tree, base_points[i]);
        if (rc == 0 && p->home_in_root)
                rc = add_home_point(p);
        /* The sandbox's root's home, as the host's form has it. */
        if (rc == 0)
                rc = add_base_dirs(p, tree, "/root");
        if (rc == 0)
                rc = plan_own_etc(p, params->resolv_conf);
        if (rc == 0)
                rc = add_base_dirs(p, tree, ROOTFS_TOOLS_DIR);
        if (rc == 0)
                rc = plan_tools(p);
        /* Mount points of the host paths bound in later. */
        for (size_t i = 0; rc == 0 && params->ro_paths && params->ro_paths[i]; i++) {
                const char *slash = strrchr(params->ro_paths[i], '/');
                char parent[PATH_MAX];

                snprintf(parent, sizeof(parent), "%.*s", (int)(slash - params->ro_paths[i]),
                         params->ro_paths[i]);
                if (parent[0])
                        rc = add_base_dirs(p, tree, parent);
                if (rc == 0)
                        rc = add_host_path_parts(p, params->ro_paths[i], HOST_POINT);
        }
        snprintf(p->root, sizeof(p->root), "%s", p->top);
        /* The tree: as root, the kernel-host's idmapped clone (overlay.h),
         * attached here; unprivileged, the tree itself. */
        if (params->lower_by_fd) {
                if (rc == 0)
                        rc = add_op(p, OP_DIR, "/lower", NULL, NULL, 0755, 0, "template layers");
                if (rc == 0)
                        rc = add_op(p, OP_ATTACH, "/lower", NULL, NULL, ATTACH_LOWER, 0,
                                    "attach template");
                snprintf(lower, sizeof(lower), "lower");
        } else {
                snprintf(lower, sizeof(lower), "%s", tree);
        }
        /* userxattr: in a user namespace overlayfs keeps its own marks in
         * user.* attributes (trusted.* ones need the host's root). The
         * layers are named relative to the tmpfs (the mount runs there):
         * the options, which the sandbox reads in its mountinfo, then
         * name no host directory of ours. */
        layer_list(layers, sizeof(layers), params->nlayers, LAYERS_ROOT);
        snprintf(data, sizeof(data), "lowerdir=base%s:%s,upperdir=%s,workdir=%s,userxattr", layers,
                 lower, p->upper, p->work);
        if (rc == 0)
                rc = add_op(p, OP_OVERLAY, "/root", p->top, data, MS_NOSUID | MS_NODEV, 0,
                            "overlay template");
        snprintf(p->root, sizeof(p->root), "%s/root", p->top);
        p->writable_root = true;
        return rc;
}

/* /tmp and home on the layers' tmpfs: one limit with the root's writes. */
static int plan_tmp_home(struct rootfs *p, const struct rootfs_params *params)
{
        char source[PATH_MAX + 16];
        int rc;

        snprintf(source, sizeof(source), "%s/tmp", p->top);
        rc = add_op(p, OP_BIND, "/tmp", source, NULL, MS_NOSUID | MS_NODEV, OP_WRITABLE,
                    "bind /tmp");
        snprintf(source, sizeof(source), "%s/home", p->top);
        if (rc == 0 && params->home_by_fd)
                rc = add_op(p, OP_ATTACH, ROOTFS_HOME, NULL, NULL, ATTACH_HOME, 0,
                            "attach " ROOTFS_HOME);
        /* A built template's home is its root overlay's, what the build
         * left there included. */
        else if (rc == 0 && !p->home_in_root)
                rc = add_op(p, OP_BIND, ROOTFS_HOME, source, NULL, MS_NOSUID | MS_NODEV,
                            OP_WRITABLE, "bind " ROOTFS_HOME);
        return rc;
}

/* Without overlayfs: /tmp and home are tmpfs of the disk limit each. */
static int plan_tmp_home_flat(struct rootfs *p, const struct rootfs_params *params)
{
        char options[128];
        int rc;

        snprintf(options, sizeof(options), "mode=1777,size=%llum", params->disk_mb);
        rc = add_op(p, OP_DIR, "/tmp", NULL, NULL, 0, 0, "mkdir /tmp");
        if (rc == 0)
                rc = add_op(p, OP_TMPFS, "/tmp", NULL, options, MS_NOSUID | MS_NODEV, 0,
                            "tmpfs /tmp");
        snprintf(options, sizeof(options), "mode=0700,uid=%d,gid=%d,size=%llum", ROOTFS_USER_UID,
                 ROOTFS_USER_UID, params->disk_mb);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/home", NULL, NULL, 0, 0, "mkdir /home");
        if (rc == 0)
                rc = add_op(p, OP_DIR, ROOTFS_HOME, NULL, NULL, 0, 0, "mkdir " ROOTFS_HOME);
        if (rc == 0)
                rc = params->home_by_fd ? add_op(p, OP_ATTACH, ROOTFS_HOME, NULL, NULL,
                                                 ATTACH_HOME, 0, "attach " ROOTFS_HOME)
                                        : add_op(p, OP_TMPFS, ROOTFS_HOME, NULL, options,
                                                 MS_NOSUID | MS_NODEV, 0, "tmpfs " ROOTFS_HOME);
        return rc;
}

/* Whether path is dir or below it. */
static bool below(const char *path, const char *dir)
{
        size_t n = strlen(dir);

        return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

int rootfs_plan(const struct rootfs_params *params, struct rootfs **out)
{
        struct rootfs *p = calloc(1, sizeof(*p));
        bool tpl = params->template_root && params->template_root[0];
        char options[128];
        int rc;

        *out = NULL;
        if (!p)
                return -ENOMEM;
        snprintf(p->top, sizeof(p->top), "%s", params->root);
        snprintf(p->root, sizeof(p->root), "%s", params->root);
        /* A template's fonts are not the host's: its kernels list their own. */
        p->homecache = !tpl && homecache_dir();
        rc = tpl ? plan_template_base(p, params) : plan_host_base(p, params);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/proc", NULL, NULL, 0, 0, "mkdir /proc");
        if (rc == 0)
                rc = add_op(p, OP_PROC, "/proc", NULL, NULL, MS_NOSUID | MS_NODEV | MS_NOEXEC, 0,
                            "mount /proc");
        /* Kernel tunables stay read-only even where the namespace owns them. */
        if (rc == 0)
                rc = add_op(p, OP_BIND, "/proc/sys", NULL, NULL,
                            MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, 0, "read-only /proc/sys");
        if (rc == 0)
                rc = rootfs_plan_proc_masks(p);
        if (rc == 0)
                rc = rootfs_plan_dev(p);
        if (rc == 0)
                rc = p->writable_root ? plan_tmp_home(p, params) : plan_tmp_home_flat(p, params);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/run", NULL, NULL, 0, 0, "mkdir /run");
        if (rc == 0)
                rc = add_op(p, OP_DIR, ROOTFS_RUN_DIR, NULL, NULL, 0, 0, "mkdir " ROOTFS_RUN_DIR);
        /* Only the kernels' sockets and connection files: a tmpfs of its
         * own, tiny in bytes and in inodes, so that the one directory the
         * sandbox's user may write outside its disk limit cannot fill
         * anything, and no host directory is shared. The kernel-host and
         * the gateway reach it through the sandbox's root. Not on the
         * sandbox's tmpfs, as /dev is: a sandbox that fills its disk must
         * still have room for its kernel's next connection file. */
        snprintf(options, sizeof(options), "mode=0700,uid=%d,gid=%d,%s", ROOTFS_USER_UID,
                 ROOTFS_USER_UID, ROOTFS_RUN_TMPFS);
        if (rc == 0)
                rc = add_op(p, OP_TMPFS, ROOTFS_RUN_DIR, NULL, options,
                            MS_NOSUID | MS_NODEV | MS_NOEXEC, 0, "tmpfs " ROOTFS_RUN_DIR);
        /* Kernelspec directories (outside /usr, which the host's form has
         * whole) and a template's extra directories; last, so that no
         * mount above (such as /tmp) hides them. Their mount points are in
         * the base layer already. */
        for (size_t i = 0; rc == 0 && params->ro_paths && params->ro_paths[i]; i++) {
                const char *path = params->ro_paths[i];
                struct stat st;
                bool dir = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);

                if (!tpl && strncmp(path, "/usr/", 5) == 0)
                        continue;
                /* Made again where a mount above (/tmp, the home) hides the
                 * base's: a directory already there is left as it is. A
                 * file's mount point is made again too under /tmp and the
                 * home, which are the sandbox's own tmpfs, not the overlay
                 * (elsewhere it would be copied up: the base's is used).
                 * Without a base, made here. (A build tree in /tmp, as a CI
                 * clone's, has its kernel bridge bound from there.) */
                rc = add_parents(p, path);
                if (rc == 0)
                        rc = add_host_path_parts(p, path,
                                                 dir || !p->writable_root ||
                                                         below(path, "/tmp") ||
                                                         below(path, ROOTFS_HOME)
                                                     ? HOST_POINT | HOST_BIND
                                                     : HOST_BIND);
        }
        /* Volumes, last: nothing above hides them, and one below /tmp or
         * the home lands on that filesystem. */
        for (size_t i = 0; rc == 0 && i < params->nvolumes && i < OVERLAY_MAX_VOLUMES; i++) {
                char step[64];

                snprintf(step, sizeof(step), "volume at %.40s", params->volume_paths[i]);
                rc = add_parents(p, params->volume_paths[i]);
                if (rc == 0)
                        rc = add_op(p, OP_DIR, params->volume_paths[i], NULL, NULL, 0, 0, step);
                if (rc == 0)
                        rc = add_op(p, OP_ATTACH, params->volume_paths[i], NULL, NULL,
                                    ATTACH_VOLUME + i, 0, step);
        }
        /* Our programs, over the finished root: a bind in an overlay's
         * lower layer would not show through it. */
        for (size_t i = 0; rc == 0 && i < OWN_PROGRAMS; i++) {
                const char *path = own_program(i);

                if (path[0])
                        rc = add_op(p, OP_BIND, own_programs[i].target, path, NULL,
                                    MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(path), 0,
                                    own_programs[i].step);
                else if (own_programs[i].required)
                        rc = -ENOENT;
        }
        if (rc == 0 && p->homecache)
                rc = add_op(p, OP_BIND, HOMECACHE_MOUNT, homecache_dir(), NULL,
                            MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC |
                                locked_flags(homecache_dir()),
                            0, "bind the home cache");
        if (rc < 0) {
                rootfs_free(&p);
                return rc;
        }
        *out = p;
        return 0;
}

const char *rootfs_root(const struct rootfs *p)
{
        return p->root;
}

bool rootfs_writable_root(const struct rootfs *p)
{
        return p->writable_root;
}

void rootfs_free(struct rootfs **pp)
{
        struct rootfs *p = *pp;

        if (!p)
                return;
        for (size_t i = 0; i < p->nops; i++) {
                free(p->ops[i].target);
                free(p->ops[i].source);
                free(p->ops[i].data);
        }
        free(p->ops);
        free(p);
        *pp = NULL;
}
